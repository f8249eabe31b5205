/*
 * pi — the Rabinowitz–Wagon spigot for the decimal digits of pi, as an ordinary program:
 * no kioku library, nothing special. It prints the digits as it finds them, 50 to a line,
 * flushing each line, so a checkpoint taken mid-run has printed part of the answer.
 *
 * Usage: pi DIGITS          (the state lives in a malloc'd array and a few locals)
 * The first line is "3." and the digits follow; the last line is "fnv=<checksum of all digits>".
 * Used by `make demo` and the process-checkpoint tests (built static and dynamic).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    if (n < 1) {
        fprintf(stderr, "usage: pi DIGITS\n");
        return 2;
    }
    long len = n * 10 / 3 + 2;
    uint32_t *a = malloc(sizeof *a * len);
    if (!a) {
        perror("malloc");
        return 1;
    }
    for (long i = 0; i < len; i++) a[i] = 2;
    int held = -1, nines = 0;
    long printed = 0;
    uint64_t fnv = 1469598103934665603ULL;
    char line[64];
    int col = 0;
#define EMIT(d)                                                            \
    do {                                                                   \
        int d_ = (d);                                                      \
        if (printed == 0) {                                                \
            printf("%d.\n", d_);                                           \
            fflush(stdout);                                                \
        } else {                                                           \
            line[col++] = (char)('0' + d_);                                \
            if (col == 50) {                                               \
                line[col] = 0;                                             \
                printf("%s\n", line);                                      \
                fflush(stdout);                                            \
                col = 0;                                                   \
            }                                                              \
        }                                                                  \
        fnv = (fnv ^ (uint64_t)d_) * 1099511628211ULL;                     \
        printed++;                                                         \
    } while (0)
    for (long j = 0; j < n + 1; j++) {
        uint64_t q = 0;
        for (long i = len - 1; i > 0; i--) {
            uint64_t x = 10 * (uint64_t)a[i] + q * (uint64_t)(i + 1);
            a[i] = (uint32_t)(x % (uint64_t)(2 * i + 1));
            q = x / (uint64_t)(2 * i + 1);
        }
        uint64_t x = 10 * (uint64_t)a[0] + q;
        a[0] = (uint32_t)(x % 10);
        q = x / 10;
        if (q == 9) {
            nines++;
        } else if (q == 10) {
            EMIT(held + 1);
            for (; nines > 0; nines--) EMIT(0);
            held = 0;
        } else {
            if (held >= 0) EMIT(held);
            for (; nines > 0; nines--) EMIT(9);
            held = (int)q;
        }
        if (printed >= n) break;
    }
    if (printed < n && held >= 0) EMIT(held);
    for (; nines > 0 && printed < n; nines--) EMIT(9);
    if (col) {
        line[col] = 0;
        printf("%s\n", line);
    }
    printf("fnv=%016llx\n", (unsigned long long)fnv);
    free(a);
    return 0;
}
