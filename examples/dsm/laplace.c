/*
 * The seed's 2-D Laplace (Jacobi) on kioku's DSM: an N x N grid with its top edge held at 1.0,
 * interior rows split in blocks among the nodes, a barrier after each sweep. Node 0 prints a
 * checksum of the final grid and, with --check, compares it with a serial run of its own.
 * With --checkpoint it takes a checkpoint half-way (the sweep counter is the private state);
 * with --rollback it also runs 3 sweeps more, rolls back to that checkpoint and continues from
 * there, which must not change the result.
 *
 *   cc -O2 -Iinclude examples/dsm/laplace.c -Ltarget/release -lkioku_dsm -o laplace
 *   KIOKU_MCAPI_JOB=lap KIOKU_MCAPI_NODES=4 KIOKU_DSM_NODE=<i> ./laplace 1024 100 --check
 */
#define _POSIX_C_SOURCE 200809L
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

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void sweep(const double *u, double *v, size_t n, size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i++)
        for (size_t j = 1; j + 1 < n; j++)
            v[i * n + j] = 0.25 * (u[(i - 1) * n + j] + u[(i + 1) * n + j] + u[i * n + j - 1] +
                                   u[i * n + j + 1]);
}

static uint64_t serial(size_t n, int iters) {
    double *u = calloc(n * n, sizeof *u), *v = calloc(n * n, sizeof *v);
    for (size_t j = 0; j < n; j++) u[j] = v[j] = 1.0;
    for (int t = 0; t < iters; t++) {
        sweep(u, v, n, 1, n - 1);
        double *w = u; u = v; v = w;
    }
    uint64_t h = fnv(u, n * n * sizeof *u);
    free(u);
    free(v);
    return h;
}

static int die(const char *what) {
    fprintf(stderr, "laplace: %s: %s\n", what, kioku_dsm_last_error());
    return 1;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
    int iters = argc > 2 ? atoi(argv[2]) : 100;
    int check = 0, rollback = 0, checkpoint = 0;
    for (int i = 3; i < argc; i++) {
        check |= strcmp(argv[i], "--check") == 0;
        rollback |= strcmp(argv[i], "--rollback") == 0;
        checkpoint |= strcmp(argv[i], "--checkpoint") == 0;
    }
    checkpoint |= rollback;
    if (n < 3) n = 3;
    if (kioku_dsm_init() != 0) return die("init");
    size_t me = (size_t)kioku_dsm_node(), nodes = (size_t)kioku_dsm_nodes();
    double *a = kioku_dsm_alloc(n * n * sizeof(double), KIOKU_DSM_BLOCK);
    double *b = kioku_dsm_alloc(n * n * sizeof(double), KIOKU_DSM_BLOCK);
    if (!a || !b) return die("alloc");
    if (me == 0)
        for (size_t j = 0; j < n; j++) a[j] = b[j] = 1.0;
    if (kioku_dsm_barrier() != 0) return die("barrier");
    size_t rows = n - 2, lo = 1 + rows * me / nodes, hi = 1 + rows * (me + 1) / nodes;
    double *u = a, *v = b;
    int rolled = 0;
    double t0 = now();
    for (int t = 0; t < iters; t++) {
        if (checkpoint && t == iters / 2 && !rolled) {
            if (kioku_dsm_checkpoint(&t, sizeof t, NULL) != 0) return die("checkpoint");
        }
        if (rollback && !rolled && t == iters / 2 + 3) {
            size_t len = 0;
            if (kioku_dsm_rollback(&t, sizeof t, &len) != 0 || len != sizeof t) return die("rollback");
            rolled = 1;
            /* t is the sweep of the checkpoint again: u and v are as they were then. */
            u = (t % 2 == 0) ? a : b;
            v = (t % 2 == 0) ? b : a;
        }
        sweep(u, v, n, lo, hi);
        if (kioku_dsm_barrier() != 0) return die("barrier");
        double *w = u; u = v; v = w;
    }
    double t1 = now();
    int rc = 0;
    if (me == 0) {
        uint64_t h = fnv(u, n * n * sizeof *u);
        printf("RESULT=%016llx\nTIME_S=%.6f\n", (unsigned long long)h, t1 - t0);
        if (check) {
            uint64_t want = serial(n, iters);
            printf("SERIAL=%016llx %s\n", (unsigned long long)want, h == want ? "equal" : "DIFFERENT");
            rc = h == want ? 0 : 2;
        }
    }
    if (kioku_dsm_finalize() != 0) return die("finalize");
    return rc;
}
