/*
 * The DSM Laplace kernel (examples/dsm/laplace.c) written with MPI: the same block of interior
 * rows per rank, a halo exchange of one row with each neighbour per sweep instead of shared
 * pages. Rank 0 prints the sweep time and the FNV-1a of the whole grid (gathered), which must
 * equal the DSM's.
 *
 *   mpicc -O2 bench/dsm/laplace_mpi.c -o laplace_mpi && mpirun -np 4 ./laplace_mpi 1024 100
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, nodes;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &nodes);
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
    int iters = argc > 2 ? atoi(argv[2]) : 100;
    size_t rows = n - 2, lo = 1 + rows * me / nodes, hi = 1 + rows * (me + 1) / nodes;
    /* Local rows lo-1 .. hi (with halos), as in the DSM's grid. */
    size_t local = hi - lo + 2;
    double *u = calloc(local * n, sizeof *u), *v = calloc(local * n, sizeof *v);
    if (lo == 1)
        for (size_t j = 0; j < n; j++) u[j] = v[j] = 1.0;
    int up = me > 0 ? me - 1 : MPI_PROC_NULL, down = me + 1 < nodes ? me + 1 : MPI_PROC_NULL;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int t = 0; t < iters; t++) {
        MPI_Sendrecv(&u[1 * n], (int)n, MPI_DOUBLE, up, 0, &u[(local - 1) * n], (int)n, MPI_DOUBLE,
                     down, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Sendrecv(&u[(local - 2) * n], (int)n, MPI_DOUBLE, down, 1, &u[0], (int)n, MPI_DOUBLE, up,
                     1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (size_t i = 1; i + 1 < local; i++)
            for (size_t j = 1; j + 1 < n; j++)
                v[i * n + j] = 0.25 * (u[(i - 1) * n + j] + u[(i + 1) * n + j] + u[i * n + j - 1] +
                                       u[i * n + j + 1]);
        double *w = u; u = v; v = w;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t1 = MPI_Wtime();
    /* Gather the interior rows; rank 0 adds the fixed edges. */
    int mine = (int)((hi - lo) * n);
    int *counts = malloc(nodes * sizeof *counts), *displs = malloc(nodes * sizeof *displs);
    for (int r = 0; r < nodes; r++) {
        size_t rl = 1 + rows * r / nodes, rh = 1 + rows * (r + 1) / nodes;
        counts[r] = (int)((rh - rl) * n);
        displs[r] = (int)(rl * n);
    }
    double *all = me == 0 ? calloc(n * n, sizeof *all) : NULL;
    MPI_Gatherv(&u[n], mine, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (me == 0) {
        for (size_t j = 0; j < n; j++) all[j] = 1.0;
        printf("RESULT=%016llx\nTIME_S=%.6f\n", (unsigned long long)fnv(all, n * n * sizeof *all),
               t1 - t0);
    }
    MPI_Finalize();
    return 0;
}
