/*
 * The thesis's two workloads, scaled to this machine, as MPI programs protected by kioku
 * group checkpoints (rs level every interval):
 *   mat  — C = A x B by rows: A and B (static after the start) fill most of the memory; each
 *          interval computes the next rows of C, so few pages change per interval.
 *   lu   — LU-like elimination: interval k updates the trailing submatrix (rows and columns
 *          from k*n/K on), so many pages change, fewer as it goes.
 * usage: workload mat|lu MIB INTERVALS
 * Rank 0 prints one JSON line per checkpoint: the interval, bytes sent by all ranks, the
 * slowest rank's checkpoint time and encoding time, pages written and encoded (all ranks);
 * after a recovery, one line with the recovery time of the slowest rank.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kioku_group.h"

static void die(const char *what, int rc)
{
    fprintf(stderr, "%s: %d %s\n", what, rc, kioku_group_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void report(int rank, long interval)
{
    struct kioku_group_status st;
    kioku_group_status(&st);
    uint64_t sum[3] = {st.last_bytes_sent, st.last_dirty_pages, st.last_encoded_pages};
    uint64_t max[2] = {st.last_total_ns, st.last_encode_ns};
    uint64_t s[3], m[2];
    MPI_Reduce(sum, s, 3, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(max, m, 2, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("{\"interval\": %ld, \"bytes\": %llu, \"dirty_pages\": %llu, \"encoded_pages\": %llu, "
               "\"ckpt_ns\": %llu, \"encode_ns\": %llu}\n",
               interval, (unsigned long long)s[0], (unsigned long long)s[1],
               (unsigned long long)s[2], (unsigned long long)m[0], (unsigned long long)m[1]);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s mat|lu MIB INTERVALS\n", argv[0]);
        return 2;
    }
    int mat = strcmp(argv[1], "mat") == 0;
    size_t bytes = (size_t)atol(argv[2]) << 20;
    long intervals = atol(argv[3]);
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int rc = kioku_group_init(MPI_COMM_WORLD, NULL);
    if (rc)
        die("init", rc);
    struct kioku_group_status st;
    kioku_group_status(&st);
    if (st.must_recover) {
        rc = kioku_group_recover();
        if (rc)
            die("recover", rc);
        kioku_group_status(&st);
        uint64_t ns[2] = {st.recovered_ns, st.recovered_decode_ns}, max[2] = {0, 0};
        uint64_t bytes = st.recovered_bytes, sum = 0;
        MPI_Reduce(ns, max, 2, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&bytes, &sum, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0)
            printf("{\"recovered_lost\": %llu, \"recover_ns\": %llu, \"decode_ns\": %llu, "
                   "\"received\": %llu}\n",
                   (unsigned long long)st.recovered_lost, (unsigned long long)max[0],
                   (unsigned long long)max[1], (unsigned long long)sum);
        kioku_group_finalize();
        MPI_Finalize();
        return 0;
    }
    long *progress = kioku_group_alloc(2, sizeof *progress);
    if (!progress)
        die("alloc", -1);
    if (mat) {
        /* A and B n x n, C n x n: 3 n^2 doubles. */
        size_t n = (size_t)sqrt((double)bytes / 8 / 3);
        double *a = kioku_group_alloc(1, n * n * 8), *b = kioku_group_alloc(3, n * n * 8),
               *c = kioku_group_alloc(4, n * n * 8);
        if (!a || !b || !c)
            die("alloc", -1);
        for (size_t i = 0; i < n * n; i++) {
            a[i] = (double)((i * 7 + (size_t)rank) % 13) / 13.0;
            b[i] = (double)((i * 5 + 3) % 11) / 11.0;
        }
        rc = kioku_group_checkpoint(KIOKU_LEVEL_RS);
        if (rc)
            die("checkpoint", rc);
        report(rank, 0);
        size_t rows = 2; /* rows of C per interval */
        for (long k = 1; k <= intervals; k++) {
            for (size_t i = (size_t)(k - 1) * rows; i < (size_t)k * rows && i < n; i++)
                for (size_t j = 0; j < n; j++) {
                    double s = 0;
                    for (size_t l = 0; l < n; l += 8) /* a strided product keeps it quick */
                        s += a[i * n + l] * b[l * n + j];
                    c[i * n + j] = s;
                }
            *progress = k;
            rc = kioku_group_checkpoint(KIOKU_LEVEL_RS);
            if (rc)
                die("checkpoint", rc);
            report(rank, k);
        }
    } else {
        size_t n = (size_t)sqrt((double)bytes / 8);
        double *m = kioku_group_alloc(1, n * n * 8);
        if (!m)
            die("alloc", -1);
        for (size_t i = 0; i < n * n; i++)
            m[i] = 1.0 + (double)((i * 31 + (size_t)rank) % 97) / 97.0;
        rc = kioku_group_checkpoint(KIOKU_LEVEL_RS);
        if (rc)
            die("checkpoint", rc);
        report(rank, 0);
        for (long k = 1; k <= intervals; k++) {
            size_t from = (size_t)(k - 1) * n / (size_t)intervals;
            /* Eliminate with pivot row `from` over the trailing submatrix. */
            double *piv = &m[from * n];
            for (size_t i = from + 1; i < n; i++) {
                double f = m[i * n + from] / piv[from] * 1e-3;
                for (size_t j = from; j < n; j++)
                    m[i * n + j] -= f * piv[j];
            }
            *progress = k;
            rc = kioku_group_checkpoint(KIOKU_LEVEL_RS);
            if (rc)
                die("checkpoint", rc);
            report(rank, k);
        }
    }
    kioku_group_finalize();
    MPI_Finalize();
    return 0;
}
