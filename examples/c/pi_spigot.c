/*
 * pi_spigot — the Rabinowitz–Wagon spigot for the decimal digits of pi, computed either in
 * plain anonymous memory or in a kioku region that is checkpointed at a fixed interval.
 *
 * The whole state of the computation (the mixed-radix array, the held predigit and run of
 * nines, the digits produced so far and the loop counters) lives in one block of memory:
 *   --mode plain   an anonymous private mapping (mmap), no checkpoints;
 *   --mode kioku   a kioku region in a new pool (--pool PATH --medium shm|file|auto), and the
 *                  outer loop (one iteration per digit) checks CLOCK_MONOTONIC and calls
 *                  kioku_checkpoint_ex() once --interval-ms has elapsed since the last one.
 * The digits are the same in both modes; the program checks the first 60 against pi, and
 * prints an FNV-1a checksum of all of them, which it checks for 15,000 and 30,000 digits
 * (bench/ckpt/run.sh also compares it with an independent reference computed in the run).
 *
 * --reps R repeats the whole computation R times in one process (fresh state each time; the
 * kioku pool and region are reused, so repetitions 2..R start from warm pool pages).
 * --resume: in kioku mode, recover the pool instead of creating it and continue from the last
 * checkpoint (the result is the same as an uninterrupted run).
 *
 * Output: one line of key=value pairs per repetition, e.g.
 *   pi digits=15000 mode=kioku medium=shm interval_ms=10 rep=1 seconds=1.234 checkpoints=120
 *      ckpt_total_ms=... ckpt_max_ms=... dirty_mib_mean=... fnv=... first=3.14159... ok=1
 *
 * Build: bench/ckpt/Makefile (links libkioku.a).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kioku.h"

static const char PI_FIRST[] = "314159265358979323846264338327950288419716939937510582097494";

/* Everything the computation needs, at the start of the memory block; the digit buffer and
 * the spigot array follow it. */
struct state {
    uint64_t magic;
    uint64_t ndigits;  /* digits wanted (the leading 3 counts as one) */
    uint64_t iters;    /* outer iterations: ndigits + guard */
    uint64_t len;      /* spigot array length: floor(10 * iters / 3) + 1 */
    uint64_t j;        /* outer iterations done */
    uint64_t predigit; /* held digit */
    uint64_t nines;    /* held run of nines */
    uint64_t nout;     /* digits emitted so far (including the leading 0 of the method) */
    uint64_t done;
};

#define MAGIC 0x6b696f6b75706931ull /* "kiokupi1" */
#define GUARD 8

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

static size_t block_size(uint64_t ndigits)
{
    uint64_t iters = ndigits + GUARD;
    uint64_t len = 10 * iters / 3 + 1;
    size_t sz = sizeof(struct state) + (iters + 16) + len * sizeof(uint64_t);
    return (sz + 4095) & ~(size_t)4095;
}

static char *digits_of(struct state *s) { return (char *)(s + 1); }

static uint64_t *array_of(struct state *s)
{
    uintptr_t p = (uintptr_t)(digits_of(s) + s->iters + 16);
    return (uint64_t *)((p + 7) & ~(uintptr_t)7);
}

static void init_state(struct state *s, uint64_t ndigits)
{
    s->ndigits = ndigits;
    s->iters = ndigits + GUARD;
    s->len = 10 * s->iters / 3 + 1;
    s->j = 0;
    s->predigit = 0;
    s->nines = 0;
    s->nout = 0;
    s->done = 0;
    uint64_t *a = array_of(s);
    for (uint64_t i = 0; i < s->len; i++)
        a[i] = 2;
    s->magic = MAGIC;
}

static inline void emit(struct state *s, char *out, uint64_t d)
{
    out[s->nout++] = (char)('0' + d);
}

/* One outer iteration of the spigot: multiply by 10, normalise right to left, then release
 * the held digits as the classic algorithm does. */
static void step(struct state *s)
{
    uint64_t *a = array_of(s);
    char *out = digits_of(s);
    uint64_t q = 0;
    for (uint64_t i = s->len; i > 0; i--) {
        uint64_t x = 10 * a[i - 1] + q * i;
        /* a[i-1] < 2i-1 and the carry q stays below ~20, so x < 2^32 for any array this
         * program can allocate: a 32-bit division (much cheaper than a 64-bit one) is exact.
         * The check costs one predictable branch. */
        if (x >> 32) abort();
        uint32_t den = (uint32_t)(2 * i - 1);
        uint32_t q32 = (uint32_t)x / den;
        a[i - 1] = (uint32_t)x - q32 * den;
        q = q32;
    }
    a[0] = q % 10;
    q /= 10;
    if (q == 9) {
        s->nines++;
    } else if (q == 10) {
        emit(s, out, s->predigit + 1);
        for (uint64_t k = 0; k < s->nines; k++)
            emit(s, out, 0);
        s->predigit = 0;
        s->nines = 0;
    } else {
        emit(s, out, s->predigit);
        s->predigit = q;
        for (uint64_t k = 0; k < s->nines; k++)
            emit(s, out, 9);
        s->nines = 0;
    }
    s->j++;
}

static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: pi_spigot [--digits N] [--reps R] [--mode plain|kioku] [--pool PATH]\n"
            "                 [--medium auto|shm|file] [--interval-ms MS] [--resume] [--print]\n");
    exit(2);
}

static void die_kioku(const char *what, int rc)
{
    fprintf(stderr, "pi_spigot: %s: %s (%s)\n", what, kioku_strerror(rc), kioku_last_error());
    exit(1);
}

int main(int argc, char **argv)
{
    uint64_t ndigits = 15000;
    int reps = 1, kioku = 0, resume = 0, print = 0;
    const char *pool = NULL, *medium = "auto";
    double interval_ms = 100;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--digits") && v) ndigits = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--reps") && v) reps = atoi(v), i++;
        else if (!strcmp(a, "--mode") && v) {
            if (!strcmp(v, "kioku")) kioku = 1;
            else if (!strcmp(v, "plain")) kioku = 0;
            else usage();
            i++;
        } else if (!strcmp(a, "--pool") && v) pool = v, i++;
        else if (!strcmp(a, "--medium") && v) medium = v, i++;
        else if (!strcmp(a, "--interval-ms") && v) interval_ms = atof(v), i++;
        else if (!strcmp(a, "--resume")) resume = 1;
        else if (!strcmp(a, "--print")) print = 1;
        else usage();
    }
    if (ndigits < 60 || reps < 1 || (kioku && !pool)) usage();

    size_t size = block_size(ndigits);
    kioku_engine *e = NULL;
    struct state *s;
    if (kioku) {
        int rc;
        void *addr;
        if (resume) {
            uint64_t epoch = 0;
            rc = kioku_recover(pool, medium, &e, &epoch, NULL, 0, NULL);
            if (rc) die_kioku("kioku_recover", rc);
            size_t len;
            rc = kioku_region_lookup(e, "pi", &addr, &len);
            if (rc) die_kioku("kioku_region_lookup", rc);
            fprintf(stderr, "pi_spigot: recovered epoch %llu\n", (unsigned long long)epoch);
        } else {
            rc = kioku_create(pool, medium, &e);
            if (rc) die_kioku("kioku_create", rc);
            rc = kioku_region_create(e, "pi", size, NULL, 0, &addr);
            if (rc) die_kioku("kioku_region_create", rc);
        }
        s = addr;
    } else {
        s = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (s == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
    }

    int all_ok = 1;
    for (int rep = 1; rep <= reps; rep++) {
        uint64_t nckpt = 0, dirty_sum = 0, scan_ns = 0, persist_ns = 0, sync_ns = 0;
        double ck_total = 0, ck_max = 0;
        double t0 = now_s(), c0 = cpu_s();
        if (!(resume && rep == 1 && s->magic == MAGIC && s->ndigits == ndigits))
            init_state(s, ndigits);
        double interval = interval_ms / 1e3, last = now_s();
        while (s->j < s->iters) {
            step(s);
            if (kioku) {
                double t = now_s();
                if (t - last >= interval) {
                    kioku_checkpoint_stats st;
                    int rc = kioku_checkpoint_ex(e, &s->j, sizeof s->j, &st);
                    if (rc) die_kioku("kioku_checkpoint", rc);
                    last = now_s();
                    double c = last - t;
                    ck_total += c;
                    if (c > ck_max) ck_max = c;
                    dirty_sum += st.dirty_bytes;
                    scan_ns += st.scan_ns, persist_ns += st.persist_ns, sync_ns += st.sync_ns;
                    nckpt++;
                }
            }
        }
        char *out = digits_of(s);
        emit(s, out, s->predigit); /* the last held digit */
        s->done = 1;
        double secs = now_s() - t0, cpu = cpu_s() - c0;
        /* The method's first emitted digit is a 0 ahead of the 3. */
        const char *d = out + 1;
        uint64_t fnv = fnv1a(d, ndigits);
        int ok = out[0] == '0' && s->nout >= ndigits + 1 &&
                 memcmp(d, PI_FIRST, sizeof PI_FIRST - 1) == 0;
        /* Checksums of the first 15,000 and 30,000 digits (FNV-1a 64 of the ASCII digits
         * "31415..."), computed independently with Machin's formula (bench/ckpt/pi_ref.py). */
        if (ndigits == 15000) ok &= fnv == 0x2720b1be5c736604ull;
        if (ndigits == 30000) ok &= fnv == 0xab4ee89f7077e0c9ull;
        all_ok &= ok;
        double final_ms = 0;
        if (kioku) {
            /* Make the result durable too (timed apart from the computation). */
            double t = now_s();
            int rc = kioku_checkpoint(e, &s->j, sizeof s->j, NULL);
            if (rc) die_kioku("kioku_checkpoint", rc);
            final_ms = (now_s() - t) * 1e3;
        }
        printf("pi digits=%llu mode=%s medium=%s interval_ms=%g rep=%d seconds=%.6f cpu_seconds=%.6f "
               "checkpoints=%llu ckpt_total_ms=%.3f ckpt_max_ms=%.3f ckpt_mean_ms=%.4f "
               "dirty_mib_mean=%.4f scan_ms_mean=%.4f persist_ms_mean=%.4f sync_ms_mean=%.4f "
               "final_ckpt_ms=%.3f fnv=%016llx first=%.1s.%.20s last=%.10s "
               "ok=%d\n",
               (unsigned long long)ndigits, kioku ? "kioku" : "plain", kioku ? medium : "anon",
               kioku ? interval_ms : 0, rep, secs, cpu, (unsigned long long)nckpt, ck_total * 1e3,
               ck_max * 1e3, nckpt ? ck_total * 1e3 / nckpt : 0,
               nckpt ? dirty_sum / (double)nckpt / (1 << 20) : 0,
               nckpt ? scan_ns / 1e6 / nckpt : 0, nckpt ? persist_ns / 1e6 / nckpt : 0,
               nckpt ? sync_ns / 1e6 / nckpt : 0, final_ms,
               (unsigned long long)fnv, d, d + 1, d + ndigits - 10, ok);
        if (print) {
            fwrite(d, 1, ndigits, stdout);
            putchar('\n');
        }
        fflush(stdout);
        resume = 0;
    }
    if (kioku) kioku_close(e);
    else munmap(s, size);
    return all_ok ? 0 : 3;
}
