/*
 * lazymem — memory a restore by mapping must bring back exactly, and the anonymous-memory
 * behaviour a program may rely on afterwards (the kill-and-restore tests drive it).
 *
 * Usage: lazymem MIB
 *   Maps MIB MiB of private anonymous memory: every 8th page never touched (a hole), every 8th
 *   page + 1 written with zeros, every other page with a pattern of its index; prints "ready".
 *   Then waits for a file named "go" in its directory and checks, in this order:
 *     1. every page holds what it was given (the restore brought it back);
 *     2. MADV_DONTNEED of pages not touched since: they read as zeros afterwards;
 *     3. a forked child reads pages neither it nor its parent touched since: it sees the
 *        pattern (fork copies), and the dropped pages as zeros;
 *   then rewrites a tenth of the pages with a second pattern, prints "phase1 ok", and waits for
 *   a file "go2" (a checkpoint, a kill and a restore may happen meanwhile) to check everything
 *   again — the rewritten pages, the dropped ones (zero), the rest — and print "phase2 ok".
 *   Any difference prints "BAD ..." and exits 3.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096
static size_t pages;
static unsigned char *m;
/* The pages dropped with MADV_DONTNEED: [drop_lo, drop_hi). */
static size_t drop_lo, drop_hi;

static uint64_t word(size_t p, size_t w, int phase) {
    return (p * 0x9E3779B97F4A7C15ull) ^ (w * 0x100000001B3ull) ^ (uint64_t)phase;
}

static int rewritten(size_t p) { return p % 10 == 3; }

/* What page p must hold: 0 (zero), or the phase of its pattern. */
static int expected(size_t p, int after_phase1) {
    if (after_phase1 && p >= drop_lo && p < drop_hi) return 0;
    if (p % 8 == 0 || p % 8 == 1) return after_phase1 && rewritten(p) ? 2 : 0;
    return after_phase1 && rewritten(p) ? 2 : 1;
}

static void fill(size_t p, int phase) {
    uint64_t *w = (uint64_t *)(m + p * PAGE);
    for (size_t i = 0; i < PAGE / 8; i++) w[i] = word(p, i, phase);
}

static int check(size_t p, int want) {
    const uint64_t *w = (const uint64_t *)(m + p * PAGE);
    for (size_t i = 0; i < PAGE / 8; i++) {
        uint64_t e = want ? word(p, i, want) : 0;
        if (w[i] != e) {
            printf("BAD page %zu word %zu: %016llx, expected %016llx (phase %d)\n", p, i,
                   (unsigned long long)w[i], (unsigned long long)e, want);
            fflush(stdout);
            return 0;
        }
    }
    return 1;
}

static void wait_for(const char *name) {
    while (access(name, F_OK) != 0) usleep(2000);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: lazymem MIB\n");
        return 2;
    }
    pages = (size_t)atol(argv[1]) * 256;
    m = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 1;
    /* No huge pages: the holes must stay holes. */
    madvise(m, pages * PAGE, MADV_NOHUGEPAGE);
    for (size_t p = 0; p < pages; p++) {
        if (p % 8 == 0) continue;
        if (p % 8 == 1) memset(m + p * PAGE, 0, PAGE);
        else fill(p, 1);
    }
    drop_lo = pages / 2;
    drop_hi = drop_lo + 64;
    printf("ready\n");
    fflush(stdout);

    wait_for("go");
    /* 2 before 1: the dropped pages must not have been touched since the restore. */
    if (madvise(m + drop_lo * PAGE, (drop_hi - drop_lo) * PAGE, MADV_DONTNEED) != 0) return 1;
    for (size_t p = drop_lo; p < drop_hi; p++)
        if (!check(p, 0)) return 3;
    /* 3: a child reads the last quarter, untouched since the restore. */
    pid_t c = fork();
    if (c == 0) {
        for (size_t p = pages * 3 / 4; p < pages; p++)
            if (!check(p, expected(p, 0))) _exit(3);
        for (size_t p = drop_lo; p < drop_hi; p++)
            if (!check(p, 0)) _exit(3);
        _exit(0);
    }
    int st = 0;
    if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("BAD child: status %d\n", st);
        return 3;
    }
    /* 1: everything else. */
    for (size_t p = 0; p < pages; p++)
        if ((p < drop_lo || p >= drop_hi) && !check(p, expected(p, 0))) return 3;
    for (size_t p = 0; p < pages; p++)
        if (rewritten(p) && (p < drop_lo || p >= drop_hi)) fill(p, 2);
    printf("phase1 ok\n");
    fflush(stdout);

    wait_for("go2");
    for (size_t p = 0; p < pages; p++)
        if (!check(p, expected(p, 1))) return 3;
    printf("phase2 ok\n");
    fflush(stdout);
    return 0;
}
