/* reserve MAP_MIB TOUCH_MIB SECONDS — maps MAP_MIB MiB of anonymous read-write memory (a
 * reservation, as runtimes make), touches the first TOUCH_MIB MiB and keeps rewriting them for
 * SECONDS seconds; prints a checksum. What a checkpoint must not take whole. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: reserve MAP_MIB TOUCH_MIB SECONDS\n");
        return 2;
    }
    size_t map = (size_t)atol(argv[1]) << 20, touch = (size_t)atol(argv[2]) << 20;
    double secs = atof(argv[3]);
    if (touch > map)
        touch = map;
    uint8_t *p = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    uint64_t sum = 0;
    double end = now() + secs;
    for (unsigned pass = 1; now() < end; pass++) {
        for (size_t i = 0; i < touch; i += 4096)
            p[i] = (uint8_t)(pass + i / 4096);
        struct timespec d = {0, 20 * 1000 * 1000};
        nanosleep(&d, NULL);
    }
    for (size_t i = 0; i < touch; i += 4096)
        sum += p[i];
    printf("%llu\n", (unsigned long long)sum);
    return 0;
}
