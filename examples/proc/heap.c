/*
 * heap — grows and shrinks its memory the ways allocators do, and checks what it reads back:
 * malloc/free of small and large (mmap'd) blocks, malloc_trim (brk shrink and MADV_DONTNEED),
 * calloc that must come back zeroed, an mmap'd arena dropped with MADV_DONTNEED and with
 * MADV_FREE that must read as zeros afterwards, and mremap growth keeping contents.
 * A wrong byte aborts with a message; each round prints a digest.
 *
 * Usage: heap [ROUNDS]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define SLOTS 512

static uint64_t rng = 88172645463325252ULL;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void fail(const char *what, int round) {
    fprintf(stderr, "heap: round %d: %s\n", round, what);
    exit(3);
}

/* An allocation or mapping call failed: say which, with its size and errno, and exit 1. */
static void failed(const char *call, size_t n, int round) {
    int e = errno;
    fprintf(stderr, "heap: round %d: %s of %zu bytes failed: %s (errno %d)\n", round, call, n,
            strerror(e), e);
    exit(1);
}

static void spin(long n) {
    volatile uint64_t x = 0;
    for (long i = 0; i < n; i++) x += (uint64_t)i * 2654435761u;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 60;
    unsigned char *blk[SLOTS] = {0};
    size_t len[SLOTS] = {0};
    unsigned char tag[SLOTS] = {0};
    size_t arena_len = 8 << 20;
    unsigned char *arena = mmap(NULL, arena_len, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena == MAP_FAILED) failed("mmap (arena)", arena_len, -1);
    uint64_t digest = 0;
    for (int r = 0; r < rounds; r++) {
        /* Grow: fill empty slots, a few of them large enough to be mmap'd by malloc. */
        for (int i = 0; i < SLOTS; i++) {
            if (blk[i]) continue;
            size_t n = (next() % 8 == 0) ? 200000 + next() % 300000 : 16 + next() % 4000;
            if (next() % 3 == 0) {
                blk[i] = calloc(1, n);
                if (!blk[i]) failed("calloc", n, r);
                for (size_t k = 0; k < n; k += 509)
                    if (blk[i][k]) fail("calloc returned non-zero memory", r);
            } else {
                blk[i] = malloc(n);
                if (!blk[i]) failed("malloc", n, r);
            }
            len[i] = n;
            tag[i] = (unsigned char)next();
            memset(blk[i], tag[i], n);
        }
        /* Check every live block. */
        for (int i = 0; i < SLOTS; i++)
            for (size_t k = 0; k < len[i]; k += 61)
                if (blk[i][k] != tag[i]) fail("a live block changed", r);
        /* Shrink: free most of them, hand memory back to the kernel. */
        for (int i = 0; i < SLOTS; i++) {
            if (next() % 4 != 0) {
                digest = digest * 31 + tag[i] + len[i];
                free(blk[i]);
                blk[i] = NULL;
                len[i] = 0;
            }
        }
        malloc_trim(0);
        /* The arena: write, drop with DONTNEED or FREE, must read zero again. */
        size_t off = (next() % (arena_len / 4096 - 64)) * 4096;
        memset(arena + off, 0xA5, 64 * 4096);
        spin(200000);
        madvise(arena + off, 64 * 4096, (r % 2) ? MADV_DONTNEED : MADV_FREE);
        if (r % 2)
            for (size_t k = 0; k < 64 * 4096; k += 4096)
                if (arena[off + k] != 0) fail("MADV_DONTNEED memory did not read as zero", r);
        if (r % 2 == 0) memset(arena + off, 0, 64 * 4096); /* MADV_FREE: contents undefined */
        /* mremap: grow a mapping, keeping what it held. */
        size_t m1 = (1 + next() % 4) << 20;
        unsigned char *m = mmap(NULL, m1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) failed("mmap", m1, r);
        memset(m, r, m1);
        spin(300000);
        unsigned char *m2 = mremap(m, m1, 2 * m1, MREMAP_MAYMOVE);
        if (m2 == MAP_FAILED) failed("mremap (growing)", 2 * m1, r);
        for (size_t k = 0; k < m1; k += 4096)
            if (m2[k] != (unsigned char)r) fail("mremap lost contents", r);
        for (size_t k = m1; k < 2 * m1; k += 4096)
            if (m2[k] != 0) fail("mremap growth not zero", r);
        digest = digest * 31 + m2[m1 - 1];
        munmap(m2, 2 * m1);
        spin(2000000);
        printf("round %d digest %016llx\n", r, (unsigned long long)digest);
        fflush(stdout);
    }
    printf("done\n");
    return 0;
}
