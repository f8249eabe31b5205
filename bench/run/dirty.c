/*
 * dirty — a memory-heavy program for the checkpoint benchmarks: holds MIB MiB (every page
 * written once at start), then for SECONDS keeps writing one contiguous PERCENT % of its pages
 * (a window that moves slowly through the area), printing a checksum at the end. Contiguous,
 * because transparent huge pages are write-tracked whole: 1 % spread over every 2 MiB page
 * would dirty all of them.
 *
 * Usage: dirty MIB PERCENT SECONDS
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

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: dirty MIB PERCENT SECONDS\n");
        return 2;
    }
    size_t mib = (size_t)atol(argv[1]);
    double pct = atof(argv[2]);
    double secs = atof(argv[3]);
    size_t pages = mib * 256;
    unsigned char *m = malloc(pages * 4096);
    if (!m) return 1;
    for (size_t p = 0; p < pages; p++) memset(m + p * 4096, (int)p, 4096);
    size_t window = (size_t)((double)pages * pct / 100.0);
    if (window == 0) window = 1;
    uint64_t sum = 0, round = 0;
    double end = now() + secs;
    while (now() < end) {
        /* The window advances by one page every 64 rounds. */
        size_t first = (size_t)(round / 64) % (pages - window + 1);
        for (size_t p = first; p < first + window; p++) {
            uint64_t *w = (uint64_t *)(m + p * 4096);
            w[round % 512] += round;
            sum += w[(round + 7) % 512];
        }
        round++;
    }
    printf("rounds=%llu sum=%016llx\n", (unsigned long long)round, (unsigned long long)sum);
    return 0;
}
