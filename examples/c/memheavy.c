/*
 * memheavy — a memory-heavy, compressor-like workload (≥ 512 MiB working set) run either in
 * plain anonymous memory or in kioku regions checkpointed at a fixed interval.
 *
 * Memory (four buffers, 576 MiB in all by default; in kioku mode four regions):
 *   header  the loop state (round, position in the input, output length, checksums)
 *   input   320 MiB of generated text
 *   hash    2^24 32-bit positions (64 MiB): the match finder's table, written at random
 *   output  192 MiB: the compressed stream
 * The text: words from a generated vocabulary (skewed choice) and, three times in four,
 * repeats of a phrase from up to 32 MiB earlier — compressible about like logs or prose.
 * Each round rewrites one eighth of the input with new text (round 0 generates all of it),
 * then compresses the whole input with a greedy LZ77 (4-byte hash, one candidate, literal
 * runs and (length, distance) pairs as varints) into the output, and folds a checksum of the
 * output into a running checksum. So over time the program keeps rewriting most of its
 * memory: the hash table everywhere, the output front to back, the input stripe by stripe.
 * The result (final checksum and output length) is deterministic and the same in both modes.
 *
 *   --mode plain   anonymous private mappings, no checkpoints
 *   --mode kioku   kioku regions in a new pool (--pool PATH --medium shm|file|auto); the
 *                  compressor checks CLOCK_MONOTONIC every 64 KiB of input (and between
 *                  phases) and, once --interval-ms has elapsed since the last checkpoint,
 *                  stores its loop state in the header and calls kioku_checkpoint_ex().
 *
 * Output: one line of key=value pairs (seconds, checkpoints, stop times, dirty MiB, checksum).
 * Build: bench/ckpt/Makefile (links libkioku.a).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kioku.h"

#define MIB (1ull << 20)
#define HEADER 4096ull
#define STRIPES 8
#define CHECK_EVERY (64 * 1024)

struct header {
    uint64_t magic;
    uint64_t in_size, hash_bits, out_cap;
    uint64_t round, rounds;
    uint64_t phase;   /* 0: generate, 1: compress, 2: checksum */
    uint64_t pos, anchor, op; /* compressor position, literal start, output length */
    uint64_t out_len_last;
    uint64_t checksum;
    uint64_t overflow;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU time of the process (user + system, all threads): less disturbed than wall time when
 * other programs share the cores. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- checkpointing (kioku mode) ---------------------------------------------------------- */

static kioku_engine *eng;
static struct header *H;
static double interval_s, last_ckpt;
static uint64_t nckpt, dirty_sum, scan_ns, persist_ns, sync_ns;
static double ck_total, ck_max;

static void die_kioku(const char *what, int rc)
{
    fprintf(stderr, "memheavy: %s: %s (%s)\n", what, kioku_strerror(rc), kioku_last_error());
    exit(1);
}

/* Called with the loop state already stored in the header. */
static inline void maybe_checkpoint(void)
{
    if (!eng) return;
    double t = now_s();
    if (t - last_ckpt < interval_s) return;
    kioku_checkpoint_stats st;
    int rc = kioku_checkpoint_ex(eng, &H->round, sizeof H->round, &st);
    if (rc) die_kioku("kioku_checkpoint", rc);
    last_ckpt = now_s();
    double c = last_ckpt - t;
    ck_total += c;
    if (c > ck_max) ck_max = c;
    dirty_sum += st.dirty_bytes;
    scan_ns += st.scan_ns, persist_ns += st.persist_ns, sync_ns += st.sync_ns;
    nckpt++;
}

/* ---- the workload ------------------------------------------------------------------------ */

static inline uint64_t rng_next(uint64_t *s)
{
    /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

#define VOCAB 8192
static char vocab[VOCAB][12];
static uint8_t vocab_len[VOCAB];

static void make_vocab(void)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int w = 0; w < VOCAB; w++) {
        int n = 2 + (int)(rng_next(&s) % 10);
        for (int i = 0; i < n; i++)
            vocab[w][i] = (char)('a' + rng_next(&s) % 26);
        vocab_len[w] = (uint8_t)n;
    }
}

/* Fills in[off, off+len) with text: words picked with a skewed distribution, separated by
 * spaces and punctuation, with a number now and then. */
static void generate(uint8_t *in, uint64_t off, uint64_t len, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    uint64_t p = off, end = off + len;
    uint64_t next_check = p + CHECK_EVERY;
    while (p < end) {
        uint64_t r = rng_next(&s);
        if (p >= 4096 && (r & 3) != 0) {
            /* Three times in four: repeat a phrase from earlier in the buffer (up to 32 MiB
             * back), as text and logs do. */
            uint64_t back = p < (32ull << 20) ? p : (32ull << 20);
            uint64_t dist = 1 + (r >> 8) % back;
            uint64_t n = 16 + (r >> 48) % 240;
            for (uint64_t i = 0; i < n && p < end; i++, p++) in[p] = in[p - dist];
            if (p >= next_check) {
                next_check = p + CHECK_EVERY;
                H->pos = p;
                maybe_checkpoint();
            }
            continue;
        }
        uint32_t a = (uint32_t)r % VOCAB, b = (uint32_t)(r >> 20) % VOCAB;
        uint32_t w = a < b ? a : b; /* favours small indexes */
        if ((r >> 40) % 64 == 0) {
            /* a number */
            char num[24];
            int n = snprintf(num, sizeof num, "%llu", (unsigned long long)((r >> 13) % 1000000));
            for (int i = 0; i < n && p < end; i++) in[p++] = (uint8_t)num[i];
        } else {
            for (int i = 0; i < vocab_len[w] && p < end; i++) in[p++] = (uint8_t)vocab[w][i];
        }
        if (p < end) in[p++] = (r >> 50) % 16 == 0 ? (uint8_t)",.;\n"[(r >> 56) % 4] : ' ';
        if (p >= next_check) {
            next_check = p + CHECK_EVERY;
            H->pos = p;
            maybe_checkpoint();
        }
    }
}

static inline uint32_t load32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint8_t *put_varint(uint8_t *o, uint64_t v)
{
    while (v >= 0x80) {
        *o++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *o++ = (uint8_t)v;
    return o;
}

/* Greedy LZ77 of in[0, n) into out; returns the output length (stops emitting, but keeps
 * going, if the output would exceed its capacity). */
static uint64_t compress(const uint8_t *in, uint64_t n, uint32_t *hash, unsigned hb,
                         uint8_t *out, uint64_t cap)
{
    const uint64_t maxdist = (1ull << 26) - 1; /* 64 MiB window */
    uint64_t pos = 0, anchor = 0, op = 0;
    uint64_t next_check = CHECK_EVERY;
    while (pos + 8 <= n) {
        uint32_t v = load32(in + pos);
        uint32_t h = (v * 2654435761u) >> (32 - hb);
        uint64_t cand = hash[h];
        hash[h] = (uint32_t)pos;
        if (cand < pos && pos - cand <= maxdist && load32(in + cand) == v) {
            uint64_t len = 4;
            while (pos + len < n && len < 65536 && in[cand + len] == in[pos + len]) len++;
            uint64_t lit = pos - anchor;
            if (op + lit + 32 <= cap) {
                uint8_t *o = put_varint(out + op, lit);
                memcpy(o, in + anchor, lit);
                o = put_varint(o + lit, len - 4);
                o = put_varint(o, pos - cand);
                op = (uint64_t)(o - out);
            } else {
                H->overflow++;
            }
            /* Insert one position inside the match as well. */
            uint64_t mid = pos + len - 2;
            if (mid + 4 <= n) hash[(load32(in + mid) * 2654435761u) >> (32 - hb)] = (uint32_t)mid;
            pos += len;
            anchor = pos;
        } else {
            pos++;
        }
        if (pos >= next_check) {
            next_check = pos + CHECK_EVERY;
            H->pos = pos;
            H->anchor = anchor;
            H->op = op;
            maybe_checkpoint();
        }
    }
    uint64_t lit = n - anchor;
    if (op + lit + 32 <= cap) {
        uint8_t *o = put_varint(out + op, lit);
        memcpy(o, in + anchor, lit);
        o = put_varint(o + lit, 0);
        op = (uint64_t)(o - out);
    } else {
        H->overflow++;
    }
    return op;
}

static uint64_t checksum(const uint8_t *p, uint64_t n, uint64_t h)
{
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        h = (h ^ v) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: memheavy [--mode plain|kioku] [--pool PATH] [--medium auto|shm|file]\n"
            "                [--interval-ms MS] [--rounds N] [--in-mib N] [--hash-bits B]\n"
            "                [--out-mib N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int kioku = 0;
    const char *pool = NULL, *medium = "auto";
    double interval_ms = 1000;
    uint64_t rounds = 10, in_mib = 320, out_mib = 192;
    unsigned hb = 24;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--mode") && v) {
            if (!strcmp(v, "kioku")) kioku = 1;
            else if (!strcmp(v, "plain")) kioku = 0;
            else usage();
            i++;
        } else if (!strcmp(a, "--pool") && v) pool = v, i++;
        else if (!strcmp(a, "--medium") && v) medium = v, i++;
        else if (!strcmp(a, "--interval-ms") && v) interval_ms = atof(v), i++;
        else if (!strcmp(a, "--rounds") && v) rounds = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--in-mib") && v) in_mib = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--out-mib") && v) out_mib = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--hash-bits") && v) hb = (unsigned)atoi(v), i++;
        else usage();
    }
    if ((kioku && !pool) || rounds < 1 || in_mib < 1 || hb < 10 || hb > 30 || in_mib >= 4096)
        usage();

    uint64_t in_size = in_mib * MIB, out_cap = out_mib * MIB;
    uint64_t hash_size = (1ull << hb) * sizeof(uint32_t);
    uint64_t total = HEADER + in_size + hash_size + out_cap;
    /* Four buffers, each its own allocation: a kioku region each in kioku mode, an
     * anonymous mapping each in plain mode. */
    static const char *names[4] = {"header", "input", "hash", "output"};
    uint64_t sizes[4] = {HEADER, in_size, hash_size, out_cap};
    void *buf[4];
    if (kioku) {
        int rc = kioku_create(pool, medium, &eng);
        if (rc) die_kioku("kioku_create", rc);
    }
    for (int i = 0; i < 4; i++) {
        if (kioku) {
            int rc = kioku_region_create(eng, names[i], sizes[i], NULL, 0, &buf[i]);
            if (rc) die_kioku("kioku_region_create", rc);
        } else {
            buf[i] = mmap(NULL, sizes[i], PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                          -1, 0);
            if (buf[i] == MAP_FAILED) {
                perror("mmap");
                return 1;
            }
        }
    }
    H = buf[0];
    uint8_t *in = buf[1];
    uint32_t *hash = buf[2];
    uint8_t *out = buf[3];
    make_vocab();

    double t0 = now_s(), c0 = cpu_s();
    interval_s = interval_ms / 1e3;
    last_ckpt = t0;
    H->magic = 0x6b696f6b756d6831ull;
    H->in_size = in_size;
    H->hash_bits = hb;
    H->out_cap = out_cap;
    H->rounds = rounds;
    H->checksum = 0xcbf29ce484222325ull;
    uint64_t stripe = in_size / STRIPES;
    for (uint64_t r = 0; r < rounds; r++) {
        H->round = r;
        H->phase = 0;
        if (r == 0) {
            for (uint64_t k = 0; k < STRIPES; k++)
                generate(in, k * stripe, k + 1 == STRIPES ? in_size - k * stripe : stripe,
                         k + 1);
        } else {
            uint64_t k = r % STRIPES;
            generate(in, k * stripe, k + 1 == STRIPES ? in_size - k * stripe : stripe,
                     r * STRIPES + k + 1);
        }
        H->phase = 1;
        uint64_t n = compress(in, in_size, hash, hb, out, out_cap);
        H->phase = 2;
        H->out_len_last = n;
        H->checksum = checksum(out, n, H->checksum ^ n);
        maybe_checkpoint();
    }
    double secs = now_s() - t0, cpu = cpu_s() - c0;
    double final_ms = 0;
    if (eng) {
        double t = now_s();
        int rc = kioku_checkpoint(eng, &H->round, sizeof H->round, NULL);
        if (rc) die_kioku("kioku_checkpoint", rc);
        final_ms = (now_s() - t) * 1e3;
    }
    double mean = nckpt ? ck_total / nckpt : 0;
    printf("memheavy mode=%s medium=%s interval_ms=%g working_set_mib=%.1f rounds=%llu "
           "seconds=%.6f cpu_seconds=%.6f checkpoints=%llu ckpt_total_ms=%.3f ckpt_mean_ms=%.3f ckpt_max_ms=%.3f "
           "dirty_mib_mean=%.2f scan_ms_mean=%.3f persist_ms_mean=%.3f sync_ms_mean=%.3f "
           "final_ckpt_ms=%.3f out_len=%llu overflow=%llu checksum=%016llx\n",
           kioku ? "kioku" : "plain", kioku ? medium : "anon", kioku ? interval_ms : 0,
           total / (double)MIB, (unsigned long long)rounds, secs, cpu, (unsigned long long)nckpt,
           ck_total * 1e3, mean * 1e3, ck_max * 1e3,
           nckpt ? dirty_sum / (double)nckpt / MIB : 0, nckpt ? scan_ns / 1e6 / nckpt : 0,
           nckpt ? persist_ns / 1e6 / nckpt : 0, nckpt ? sync_ns / 1e6 / nckpt : 0, final_ms,
           (unsigned long long)H->out_len_last, (unsigned long long)H->overflow,
           (unsigned long long)H->checksum);
    if (eng) kioku_close(eng);
    else
        for (int i = 0; i < 4; i++) munmap(buf[i], sizes[i]);
    return 0;
}
