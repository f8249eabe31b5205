/*
 * The thesis's two workloads, scaled to this machine, as MPI programs protected by kioku
 * group checkpoints (rs level every interval):
 *   mat — C = A x B by rows: A and B (static after the start) fill two thirds of the memory;
 *         each interval computes the next rows of C, about 1 % of the protected pages;
 *   lu  — LU-like elimination: each interval updates the lower half of the matrix with a
 *         pivot row (half the protected pages written every interval).
 *   scatter — 1 % of the pages per interval, each rank its own random ones (the worst case
 *         for partial sums that travel along the contributors).
 * usage: workload mat|lu|scatter MIB INTERVALS
 * After a restart, "recover_ns" is the slowest rank's time from kioku_group_init to the end of
 * kioku_group_recover.
 * Environment: WORKLOAD_THREADS=1 initialises MPI with MPI_THREAD_MULTIPLE (kioku then encodes
 * in the background); WORKLOAD_PAUSE_MS=N adds a compute phase of N ms per interval that
 * leaves the core idle (usleep). After a restart (pools exist) it recovers and reports the recovery.
 *
 * Rank 0 prints one JSON line per checkpoint — the interval, the slowest rank's time in
 * kioku_group_checkpoint ("wait"), pages written (all ranks), the largest pool (file size and
 * allocated bytes) — and one per finished encoding of the rs level: its epoch, bytes all ranks
 * sent for it, and the slowest rank's time from its checkpoint call to the level's commit
 * ("durable"). Built against an older kioku (no KIOKU_GROUP_VERSION), the checkpoint call is
 * the encoding: durable = wait, bytes = what the call sent.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kioku_group.h"

static int rank;

static void die(const char *what, int rc)
{
    fprintf(stderr, "%s: %d %s\n", what, rc, kioku_group_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void pool_size(uint64_t *len, uint64_t *alloc)
{
    char path[4096];
    const char *dir = getenv("KIOKU_DIR") ? getenv("KIOKU_DIR") : ".kioku/group";
    snprintf(path, sizeof path, "%s/job.%d.pool", dir, rank);
    struct stat st;
    *len = *alloc = 0;
    if (stat(path, &st) == 0) {
        *len = (uint64_t)st.st_size;
        *alloc = (uint64_t)st.st_blocks * 512;
    }
}

static uint64_t last_flight_epoch;

/* The rs level's last finished encoding, once per epoch. */
static void report_flight(void)
{
    struct kioku_group_status st;
    kioku_group_status(&st);
#if defined(KIOKU_GROUP_VERSION) && KIOKU_GROUP_VERSION >= 2
    uint64_t e = st.flight_epoch, bytes = st.flight_bytes_sent, pages = st.flight_encoded_pages;
    uint64_t durable = st.flight_durable_ns, committed = (uint64_t)st.flight_committed;
#if KIOKU_GROUP_VERSION >= 3
    uint64_t peak = st.flight_pool_peak_bytes;
#else
    uint64_t peak = 0;
#endif
#else
    uint64_t peak = 0;
    uint64_t e = st.epoch, bytes = st.last_bytes_sent, pages = st.last_encoded_pages;
    uint64_t durable = st.last_total_ns, committed = 1;
#endif
    uint64_t emin = e, emax = e;
    MPI_Allreduce(MPI_IN_PLACE, &emin, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &emax, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    if (emin != emax || e == 0 || e == last_flight_epoch)
        return;
    last_flight_epoch = e;
    uint64_t sum[2] = {bytes, pages}, s[2];
    uint64_t max[2] = {durable, peak}, m[2];
    uint64_t mn = committed, c;
    MPI_Reduce(sum, s, 2, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(max, m, 2, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&mn, &c, 1, MPI_UINT64_T, MPI_MIN, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("{\"flight_epoch\": %llu, \"bytes\": %llu, \"encoded_pages\": %llu, "
               "\"durable_ns\": %llu, \"committed\": %llu, \"pool_peak\": %llu}\n",
               (unsigned long long)e, (unsigned long long)s[0], (unsigned long long)s[1],
               (unsigned long long)m[0], (unsigned long long)c, (unsigned long long)m[1]);
}

static double last_return;

static void checkpoint(long interval)
{
    /* A compute phase that leaves the core idle (WORKLOAD_PAUSE_MS: a solver waiting on a
     * GPU, on I/O, or on a neighbour), where a background encoding can run. */
    const char *pause = getenv("WORKLOAD_PAUSE_MS");
    if (interval > 0 && pause && atol(pause) > 0)
        usleep((useconds_t)(atol(pause) * 1000));
    double t0 = MPI_Wtime();
    int rc = kioku_group_checkpoint(KIOKU_LEVEL_RS);
    double t1 = MPI_Wtime();
    if (rc)
        die("checkpoint", rc);
    struct kioku_group_status st;
    kioku_group_status(&st);
    uint64_t len, alloc;
    pool_size(&len, &alloc);
    uint64_t sum[1] = {st.last_dirty_pages}, s[1];
    uint64_t span = interval > 0 ? (uint64_t)((t1 - last_return) * 1e9) : 0;
    last_return = t1;
    uint64_t max[4] = {(uint64_t)((t1 - t0) * 1e9), len, alloc, span}, m[4];
    MPI_Reduce(sum, s, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(max, m, 4, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("{\"interval\": %ld, \"wait_ns\": %llu, \"dirty_pages\": %llu, \"pool_len\": %llu, "
               "\"pool_alloc\": %llu, \"interval_ns\": %llu}\n",
               interval, (unsigned long long)m[0], (unsigned long long)s[0],
               (unsigned long long)m[1], (unsigned long long)m[2], (unsigned long long)m[3]);
    report_flight();
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s mat|lu|scatter MIB INTERVALS\n", argv[0]);
        return 2;
    }
    int mat = strcmp(argv[1], "mat") == 0, scatter = strcmp(argv[1], "scatter") == 0;
    size_t bytes = (size_t)atol(argv[2]) << 20;
    long intervals = atol(argv[3]);
    if (getenv("WORKLOAD_THREADS") && atoi(getenv("WORKLOAD_THREADS")) == 1) {
        int provided;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    setvbuf(stdout, NULL, _IOLBF, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    double t_init = MPI_Wtime();
    int rc = kioku_group_init(MPI_COMM_WORLD, NULL);
    if (rc)
        die("init", rc);
    struct kioku_group_status st;
    kioku_group_status(&st);
    if (st.must_recover) {
        double t0 = t_init; /* a restart's cost: init and recovery */
        rc = kioku_group_recover();
        double t1 = MPI_Wtime();
        if (rc)
            die("recover", rc);
        kioku_group_status(&st);
        uint64_t ns[2] = {(uint64_t)((t1 - t0) * 1e9), st.recovered_decode_ns}, max[2] = {0, 0};
        uint64_t got = st.recovered_bytes, sum = 0;
        MPI_Reduce(ns, max, 2, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&got, &sum, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
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
        /* A, B and C, n x n doubles each. */
        size_t n = (size_t)sqrt((double)bytes / 8 / 3);
        double *a = kioku_group_alloc(1, n * n * 8), *b = kioku_group_alloc(3, n * n * 8),
               *c = kioku_group_alloc(4, n * n * 8);
        if (!a || !b || !c)
            die("alloc", -1);
        for (size_t i = 0; i < n * n; i++) {
            a[i] = (double)((i * 7 + (size_t)rank) % 13) / 13.0;
            b[i] = (double)((i * 5 + 3) % 11) / 11.0;
        }
        checkpoint(0);
        size_t rows = (size_t)ceil(0.01 * 3 * (double)n); /* 1 % of the protected memory */
        for (long k = 1; k <= intervals; k++) {
            for (size_t i = (size_t)(k - 1) * rows; i < (size_t)k * rows; i++)
                for (size_t j = 0; j < n; j++) {
                    double s = 0;
                    for (size_t l = 0; l < n; l += 16) /* a strided product keeps it quick */
                        s += a[(i % n) * n + l] * b[l * n + j];
                    c[(i % n) * n + j] = s + (double)k;
                }
            *progress = k;
            checkpoint(k);
        }
    } else if (scatter) {
        /* 1 % of the pages, each rank its own random ones (a particle code's moved cells). */
        size_t pages = bytes / 4096;
        unsigned char *d = kioku_group_alloc(1, pages * 4096);
        if (!d)
            die("alloc", -1);
        for (size_t i = 0; i < pages * 4096; i += 64)
            d[i] = (unsigned char)(i / 4096 + (size_t)rank);
        checkpoint(0);
        uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
        for (long k = 1; k <= intervals; k++) {
            for (size_t w = 0; w < (pages + 99) / 100; w++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                d[(x % pages) * 4096 + (size_t)k % 4096] += 1;
            }
            *progress = k;
            checkpoint(k);
        }
    } else {
        size_t n = (size_t)sqrt((double)bytes / 8);
        double *m = kioku_group_alloc(1, n * n * 8);
        if (!m)
            die("alloc", -1);
        for (size_t i = 0; i < n * n; i++)
            m[i] = 1.0 + (double)((i * 31 + (size_t)rank) % 97) / 97.0;
        checkpoint(0);
        for (long k = 1; k <= intervals; k++) {
            /* Eliminate the lower half with pivot row k (half the pages written). */
            const double *piv = &m[((size_t)k % (n / 2)) * n];
            for (size_t i = n / 2; i < n; i++) {
                double f = m[i * n + (size_t)k % n] / piv[(size_t)k % n] * 1e-3;
                for (size_t j = 0; j < n; j++)
                    m[i * n + j] -= f * piv[j];
            }
            *progress = k;
            checkpoint(k);
        }
    }
#if defined(KIOKU_GROUP_VERSION) && KIOKU_GROUP_VERSION >= 2
    kioku_group_wait();
#endif
    report_flight();
    /* At rest: every encoding committed (the largest pool). */
    uint64_t len, alloc, rest;
    pool_size(&len, &alloc);
    MPI_Reduce(&alloc, &rest, 1, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("{\"rest_pool_alloc\": %llu}\n", (unsigned long long)rest);
    kioku_group_finalize();
    MPI_Finalize();
    return 0;
}
