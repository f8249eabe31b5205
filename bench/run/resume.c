/*
 * resume — the restore benchmark's program: holds MIB MiB (every page written once with data),
 * then reads its memory pass after pass (one word per page). It notices from its own clock when
 * it was not running for a while (stopped, killed and restored) and appends to LOG:
 *   "resumed T"  the first time it runs again (T: CLOCK_MONOTONIC, seconds),
 *   "pass T"     when it has since read every page once,
 * so "restore until the program runs again" and "until it has touched all its memory" are
 * measured from outside the same way for every checkpoint tool. Prints "ready" when its memory
 * is written.
 *
 * Usage: resume MIB LOG
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

static void note(const char *log, const char *what, double t) {
    FILE *f = fopen(log, "a");
    if (!f) return;
    fprintf(f, "%s %.6f\n", what, t);
    fclose(f);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: resume MIB LOG\n");
        return 2;
    }
    size_t pages = (size_t)atol(argv[1]) * 256;
    const char *log = argv[2];
    unsigned char *m = malloc(pages * 4096);
    if (!m) return 1;
    for (size_t p = 0; p < pages; p++) memset(m + p * 4096, (int)(p * 7 + 1), 4096);
    printf("ready\n");
    fflush(stdout);
    volatile uint64_t sum = 0;
    double last = now();
    size_t pass_left = 0; /* pages still to read since the last resume (0: none pending) */
    for (;;) {
        for (size_t p = 0; p < pages; p++) {
            sum += m[p * 4096 + (p & 4095)];
            if ((p & 63) == 0) {
                double t = now();
                if (t - last > 0.05) {
                    note(log, "resumed", t);
                    pass_left = pages;
                }
                last = t;
            }
            if (pass_left && --pass_left == 0) note(log, "pass", now());
        }
    }
}
