/*
 * stall — what a checkpoint costs the program, seen from inside: holds MIB MiB (every page
 * written once at start), then for SECONDS makes passes over one contiguous PERCENT % of its
 * pages (one 8-byte write per page), timing every pass. A checkpoint's stop and the
 * write-protect faults the program takes after it resumes both lengthen the pass they fall
 * in; the longest passes, less a plain run's median pass, are what the program lost. At the
 * end it prints the median pass and the longest passes (µs) and a checksum.
 *
 * Usage: stall MIB PERCENT SECONDS [LONGEST]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: stall MIB PERCENT SECONDS [LONGEST]\n");
        return 2;
    }
    size_t mib = (size_t)atol(argv[1]);
    double pct = atof(argv[2]);
    double secs = atof(argv[3]);
    size_t longest = argc > 4 ? (size_t)atol(argv[4]) : 64;
    size_t pages = mib * 256;
    unsigned char *m = malloc(pages * 4096);
    if (!m) return 1;
    for (size_t p = 0; p < pages; p++) memset(m + p * 4096, (int)p, 4096);
    size_t window = (size_t)((double)pages * pct / 100.0);
    if (window == 0) window = 1;
    size_t cap = 1 << 22, n = 0;
    double *pass = malloc(cap * sizeof(double));
    uint64_t sum = 0, round = 0;
    double t = now(), end = t + secs;
    while (t < end) {
        for (size_t p = 0; p < window; p++) {
            uint64_t *w = (uint64_t *)(m + p * 4096);
            w[round % 512] += round;
            sum += w[(round + 7) % 512];
        }
        round++;
        double t2 = now();
        if (n < cap) pass[n++] = (t2 - t) * 1e6;
        t = t2;
    }
    qsort(pass, n, sizeof(double), cmp);
    printf("passes=%zu median_us=%.1f longest_us=", n, n ? pass[n / 2] : 0.0);
    for (size_t i = 0; i < longest && i < n; i++) printf("%s%.1f", i ? "," : "", pass[n - 1 - i]);
    printf(" sum=%016llx\n", (unsigned long long)sum);
    return 0;
}
