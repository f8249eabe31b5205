/*
 * DSM micro-benchmarks on N node processes (node 0 prints): barrier latency, the latency of a
 * 4 KiB page fetch on first access after invalidation (fault + request + page + protection),
 * and checkpoint time against image size per node.
 *
 *   micro <barriers> <fetch pages> <rounds> <MiB sizes...>
 */
#include "kioku_dsm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int die(const char *what) {
    fprintf(stderr, "micro: %s: %s\n", what, kioku_dsm_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: micro <barriers> <fetch pages> <rounds> <MiB sizes...>\n");
        return 2;
    }
    int barriers = atoi(argv[1]), pages = atoi(argv[2]), rounds = atoi(argv[3]);
    if (kioku_dsm_init() != 0) return die("init");
    int me = kioku_dsm_node(), n = kioku_dsm_nodes();
    size_t ps = kioku_dsm_page_size();

    for (int i = 0; i < 50; i++) kioku_dsm_barrier();
    double t = now();
    for (int i = 0; i < barriers; i++)
        if (kioku_dsm_barrier() != 0) return die("barrier");
    double bar = (now() - t) / barriers;
    if (me == 0) printf("BARRIER_US=%.2f\n", bar * 1e6);

    /* Pages homed on node 0, rewritten by it each round so node 1's copies are invalidated. */
    volatile unsigned char *p = kioku_dsm_alloc((size_t)pages * ps, 0);
    if (!p) return die("alloc");
    double *lat = malloc(sizeof(double) * (size_t)pages * rounds);
    size_t got = 0;
    for (int r = 0; r < rounds; r++) {
        if (me == 0)
            for (int i = 0; i < pages; i++) p[(size_t)i * ps] = (unsigned char)(r + i);
        if (kioku_dsm_barrier() != 0) return die("barrier");
        if (me == 1)
            for (int i = 0; i < pages; i++) {
                double a = now();
                if (p[(size_t)i * ps] != (unsigned char)(r + i)) {
                    fprintf(stderr, "micro: wrong page content\n");
                    return 3;
                }
                lat[got++] = now() - a;
            }
        if (kioku_dsm_barrier() != 0) return die("barrier");
    }
    if (me == 1 && got) {
        qsort(lat, got, sizeof *lat, cmp);
        printf("FETCH_US=%.2f\nFETCH_P99_US=%.2f\n", lat[got / 2] * 1e6, lat[got * 99 / 100] * 1e6);
    }

    for (int k = 4; k < argc; k++) {
        size_t mib = strtoul(argv[k], NULL, 10), bytes = mib << 20;
        unsigned char *q = kioku_dsm_alloc(bytes * n, KIOKU_DSM_BLOCK);
        if (!q) return die("alloc");
        memset(q + bytes * me, 0x5a ^ me, bytes); /* this node's home block, all pages resident */
        /* The first two checkpoints of a size fill the two contexts' memory (page faults and
         * zeroing, at the node and at its buddy); from the third on the memory is reused, as in
         * a long run that checkpoints every few barriers. */
        double t[5];
        for (int i = 0; i < 5; i++) {
            if (kioku_dsm_barrier() != 0) return die("barrier");
            double a = now();
            if (kioku_dsm_checkpoint(&i, sizeof i, NULL) != 0) return die("checkpoint");
            t[i] = now() - a;
        }
        double first = t[0];
        qsort(t + 2, 3, sizeof *t, cmp);
        if (me == 0) printf("CKPT mib=%zu s=%.4f first_s=%.4f\n", mib, t[3], first);
    }
    if (kioku_dsm_finalize() != 0) return die("finalize");
    return 0;
}
