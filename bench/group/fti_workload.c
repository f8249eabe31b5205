/*
 * The same two workloads as workload.c, protected by FTI instead (the peer the group
 * benchmark compares with; built outside the repository against an FTI install):
 *   mat — C = A x B by rows, about 1 % of the protected memory written per interval;
 *   lu  — the lower half of the matrix eliminated with a pivot row every interval.
 * Each interval ends with FTI_Checkpoint(k, LEVEL) (FTI_LEVEL, default 3: Reed–Solomon over
 * the group). usage: fti_workload CONFIG mat|lu MIB INTERVALS
 * Rank 0 prints one JSON line per checkpoint with the slowest rank's time in FTI_Checkpoint
 * ("wait_ns", which is also the time to durability: FTI's level 3 is encoded inline), and
 * after a restart one line with the slowest rank's time from FTI_Init (which rebuilds lost
 * checkpoint files) to the end of FTI_Recover. FTI_CRASH_AFTER=N makes
 * every rank exit without finalising after checkpoint N (the checkpoints stay for a restart).
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fti.h"

static int rank;

static void checkpoint(long interval, int level)
{
    double t0 = MPI_Wtime();
    int rc = FTI_Checkpoint((int)interval + 1, level);
    double t1 = MPI_Wtime();
    if (rc != FTI_DONE && rc != FTI_SCES) {
        fprintf(stderr, "FTI_Checkpoint: %d\n", rc);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    uint64_t ns = (uint64_t)((t1 - t0) * 1e9), max = 0;
    MPI_Reduce(&ns, &max, 1, MPI_UINT64_T, MPI_MAX, 0, FTI_COMM_WORLD);
    if (rank == 0)
        printf("{\"interval\": %ld, \"wait_ns\": %llu}\n", interval, (unsigned long long)max);
}

/* Ends every rank without finalising (FTI keeps the checkpoint for a restart), once rank 0
 * has printed. */
static void crash(void)
{
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    _exit(0);
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s CONFIG mat|lu MIB INTERVALS\n", argv[0]);
        return 2;
    }
    int mat = strcmp(argv[2], "mat") == 0;
    size_t bytes = (size_t)atol(argv[3]) << 20;
    long intervals = atol(argv[4]);
    int level = getenv("FTI_LEVEL") ? atoi(getenv("FTI_LEVEL")) : 3;
    long crash_after = getenv("FTI_CRASH_AFTER") ? atol(getenv("FTI_CRASH_AFTER")) : -1;
    MPI_Init(&argc, &argv);
    MPI_Barrier(MPI_COMM_WORLD);
    double t_init = MPI_Wtime(); /* FTI_Init rebuilds lost checkpoint files on a restart */
    if (FTI_Init(argv[1], MPI_COMM_WORLD) != FTI_SCES)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Comm_rank(FTI_COMM_WORLD, &rank);
    setvbuf(stdout, NULL, _IOLBF, 0);

    long progress = 0;
    size_t n = mat ? (size_t)sqrt((double)bytes / 8 / 3) : (size_t)sqrt((double)bytes / 8);
    double *a = NULL, *b = NULL, *c = NULL, *m = NULL;
    FTI_Protect(0, &progress, 1, FTI_LONG);
    if (mat) {
        a = malloc(n * n * 8);
        b = malloc(n * n * 8);
        c = calloc(n * n, 8);
        if (!a || !b || !c)
            MPI_Abort(MPI_COMM_WORLD, 1);
        FTI_Protect(1, a, (int64_t)(n * n), FTI_DBLE);
        FTI_Protect(3, b, (int64_t)(n * n), FTI_DBLE);
        FTI_Protect(4, c, (int64_t)(n * n), FTI_DBLE);
    } else {
        m = malloc(n * n * 8);
        if (!m)
            MPI_Abort(MPI_COMM_WORLD, 1);
        FTI_Protect(1, m, (int64_t)(n * n), FTI_DBLE);
    }

    if (FTI_Status() != 0) {
        double t0 = t_init;
        int rc = FTI_Recover();
        double t1 = MPI_Wtime();
        if (rc != FTI_SCES) {
            fprintf(stderr, "FTI_Recover: %d\n", rc);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        uint64_t ns = (uint64_t)((t1 - t0) * 1e9), max = 0;
        MPI_Reduce(&ns, &max, 1, MPI_UINT64_T, MPI_MAX, 0, FTI_COMM_WORLD);
        if (rank == 0)
            printf("{\"recovered_progress\": %ld, \"recover_ns\": %llu}\n", progress,
                   (unsigned long long)max);
        FTI_Finalize();
        MPI_Finalize();
        return 0;
    }

    if (mat) {
        for (size_t i = 0; i < n * n; i++) {
            a[i] = (double)((i * 7 + (size_t)rank) % 13) / 13.0;
            b[i] = (double)((i * 5 + 3) % 11) / 11.0;
        }
        checkpoint(0, level);
        size_t rows = (size_t)ceil(0.01 * 3 * (double)n);
        for (long k = 1; k <= intervals; k++) {
            for (size_t i = (size_t)(k - 1) * rows; i < (size_t)k * rows; i++)
                for (size_t j = 0; j < n; j++) {
                    double s = 0;
                    for (size_t l = 0; l < n; l += 16)
                        s += a[(i % n) * n + l] * b[l * n + j];
                    c[(i % n) * n + j] = s + (double)k;
                }
            progress = k;
            checkpoint(k, level);
            if (k == crash_after)
                crash();
        }
    } else {
        for (size_t i = 0; i < n * n; i++)
            m[i] = 1.0 + (double)((i * 31 + (size_t)rank) % 97) / 97.0;
        checkpoint(0, level);
        for (long k = 1; k <= intervals; k++) {
            const double *piv = &m[((size_t)k % (n / 2)) * n];
            for (size_t i = n / 2; i < n; i++) {
                double f = m[i * n + (size_t)k % n] / piv[(size_t)k % n] * 1e-3;
                for (size_t j = 0; j < n; j++)
                    m[i * n + j] -= f * piv[j];
            }
            progress = k;
            checkpoint(k, level);
            if (k == crash_after)
                crash();
        }
    }
    FTI_Finalize();
    MPI_Finalize();
    return 0;
}
