/*
 * rewrite — rewrites every page of its memory each round (what write-protect tracking handles
 * worst: a fault per page per checkpoint), and checks before each round that every word of
 * its memory holds exactly what the earlier rounds wrote. A wrong word aborts with a message;
 * each round prints a digest.
 *
 * Usage: rewrite MIB ROUNDS [SLEEP_MS]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t value(uint64_t round, uint64_t page) {
    uint64_t x = (round + 1) * 0x9e3779b97f4a7c15ULL ^ (page + 1) * 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 31;
    return x * 0x94d049bb133111ebULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: rewrite MIB ROUNDS [SLEEP_MS]\n");
        return 2;
    }
    size_t pages = (size_t)atol(argv[1]) * 256;
    uint64_t rounds = (uint64_t)atoll(argv[2]);
    long sleep_ms = argc > 3 ? atol(argv[3]) : 2;
    uint64_t *m = calloc(pages * 512, sizeof(uint64_t));
    if (!m) return 1;
    struct timespec nap = {0, sleep_ms * 1000000L};
    for (uint64_t r = 0; r < rounds; r++) {
        uint64_t digest = 0;
        for (size_t p = 0; p < pages; p++) {
            uint64_t *w = m + p * 512;
            /* Word k holds the value of the last round j < r with j % 512 == k (0 if none). */
            for (uint64_t k = 0; k < 512; k++) {
                uint64_t want = 0;
                if (r > 0) {
                    uint64_t last = r - 1;
                    uint64_t j = last - ((last % 512 + 512 - k) % 512);
                    if (j <= last && (last - j) < 512 && j % 512 == k) want = value(j, p);
                    if (k > last) want = 0;
                }
                if (w[k] != want) {
                    fprintf(stderr, "rewrite: round %llu: page %zu word %llu holds %016llx, not %016llx\n",
                            (unsigned long long)r, p, (unsigned long long)k, (unsigned long long)w[k],
                            (unsigned long long)want);
                    abort();
                }
            }
            w[r % 512] = value(r, p);
            digest += w[r % 512];
        }
        printf("round %llu digest %016llx\n", (unsigned long long)r, (unsigned long long)digest);
        fflush(stdout);
        nanosleep(&nap, NULL);
    }
    return 0;
}
