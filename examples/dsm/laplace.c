/*
 * The seed's 2-D Laplace (Jacobi) on kioku's DSM: an N x N grid with its top edge held at 1.0,
 * interior rows split in blocks among the nodes, a barrier after each sweep. Node 0 prints a
 * checksum of the final grid and, with --check, compares it with a serial run of its own.
 * With --checkpoint it takes a checkpoint half-way (the sweep counter is the private state);
 * with --rollback it also runs 3 sweeps more, rolls back to that checkpoint and continues from
 * there, which must not change the result. With --ft K (and standbys: KIOKU_DSM_STANDBYS=S,
 * S more processes with KIOKU_DSM_NODE = N..N+S-1) it checkpoints every K sweeps and survives
 * the loss of a node: a standby takes over and every node goes on from the checkpoint.
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

/* After KIOKU_DSM_EROLLEDBACK: the sweep count of the checkpoint the job went back to. */
static int resume(int *t) {
    size_t len = 0;
    return kioku_dsm_resume(t, sizeof *t, &len) == 1 && len == sizeof *t;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
    int iters = argc > 2 ? atoi(argv[2]) : 100;
    int check = 0, rollback = 0, checkpoint = 0, ft = 0;
    for (int i = 3; i < argc; i++) {
        check |= strcmp(argv[i], "--check") == 0;
        rollback |= strcmp(argv[i], "--rollback") == 0;
        checkpoint |= strcmp(argv[i], "--checkpoint") == 0;
        if (strcmp(argv[i], "--ft") == 0 && i + 1 < argc) ft = atoi(argv[++i]);
    }
    checkpoint |= rollback;
    if (n < 3) n = 3;
    int rc = kioku_dsm_init();
    if (rc == KIOKU_DSM_EDISMISSED) {
        printf("DISMISSED=1\n"); /* a standby the job did not need */
        return 0;
    }
    if (rc != 0) return die("init");
    /* A standby that took over replays these allocations: the same addresses. */
    double *a = kioku_dsm_alloc(n * n * sizeof(double), KIOKU_DSM_BLOCK);
    double *b = kioku_dsm_alloc(n * n * sizeof(double), KIOKU_DSM_BLOCK);
    if (!a || !b) return die("alloc");
    int t = 0, rolled = 0, recoveries = 0;
    double recovery_s = 0; /* in the calls that returned KIOKU_DSM_EROLLEDBACK */
    if (resume(&t)) {
        recoveries++;
    } else {
        if (kioku_dsm_node() == 0)
            for (size_t j = 0; j < n; j++) a[j] = b[j] = 1.0;
        rc = kioku_dsm_barrier();
        /* With --ft K: a checkpoint now (a failure before it cannot be recovered) and every K
         * sweeps; a node lost at any moment after it is replaced by a standby. */
        if (rc == 0 && ft) rc = kioku_dsm_checkpoint(&t, sizeof t, NULL);
        if (rc != 0) return die("set-up");
    }
    double t0 = now();
    for (;;) {
        while (t < iters) {
            if (checkpoint && t == iters / 2 && !rolled) {
                if (kioku_dsm_checkpoint(&t, sizeof t, NULL) != 0) return die("checkpoint");
            }
            if (rollback && !rolled && t == iters / 2 + 3) {
                size_t len = 0;
                if (kioku_dsm_rollback(&t, sizeof t, &len) != 0 || len != sizeof t)
                    return die("rollback");
                rolled = 1; /* t is the sweep of the checkpoint again */
            }
            /* The node id can change: a standby has the id of the node it took over. */
            size_t me = (size_t)kioku_dsm_node(), nodes = (size_t)kioku_dsm_nodes();
            size_t rows = n - 2, lo = 1 + rows * me / nodes, hi = 1 + rows * (me + 1) / nodes;
            const double *u = (t % 2 == 0) ? a : b;
            double *v = (t % 2 == 0) ? b : a;
            sweep(u, v, n, lo, hi);
            double c0 = now();
            rc = kioku_dsm_barrier();
            if (rc == 0) {
                t++;
                c0 = now();
                if (ft && t % ft == 0) rc = kioku_dsm_checkpoint(&t, sizeof t, NULL);
            }
            if (rc == KIOKU_DSM_EROLLEDBACK) {
                recovery_s += now() - c0;
                if (!resume(&t)) return die("resume");
                recoveries++;
            } else if (rc != 0) {
                return die("barrier");
            }
        }
        double t1 = now(); /* the sweeps only, not the reading of the grid below */
        const double *u = (iters % 2 == 0) ? a : b;
        uint64_t h = kioku_dsm_node() == 0 ? fnv(u, n * n * sizeof *u) : 0;
        /* The result counts only if no node was lost while node 0 read it. */
        rc = kioku_dsm_barrier();
        if (rc == KIOKU_DSM_EROLLEDBACK) {
            if (!resume(&t)) return die("resume");
            recoveries++;
            continue;
        }
        if (rc != 0) return die("barrier");
        if (ft) printf("RECOVERIES=%d\nRECOVERY_S=%.6f\n", recoveries, recovery_s);
        rc = 0;
        if (kioku_dsm_node() == 0) {
            printf("RESULT=%016llx\nTIME_S=%.6f\n", (unsigned long long)h, t1 - t0);
            if (check) {
                uint64_t want = serial(n, iters);
                printf("SERIAL=%016llx %s\n", (unsigned long long)want,
                       h == want ? "equal" : "DIFFERENT");
                rc = h == want ? 0 : 2;
            }
        }
        break;
    }
    if (kioku_dsm_finalize() != 0) return die("finalize");
    return rc;
}
