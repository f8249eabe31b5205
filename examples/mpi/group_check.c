/*
 * group_check — an MPI program protected by kioku group checkpoints, whose every protected
 * byte can be checked: iteration i changes a deterministic set of pages of each rank's data to
 * deterministic contents, so the data after any iteration can be recomputed from nothing.
 *
 * usage: group_check STEPS PAGES PATTERN LEVELS [DIE_RANK DIE_STEP]
 *   STEPS    iterations to reach (a restarted run goes on from the recovered one)
 *   PAGES    data pages per rank (4 KiB each)
 *   PATTERN  sparse (a few pages per iteration) or dense (a third of them)
 *   LEVELS   checkpoint level of iteration i: LEVELS[i % strlen(LEVELS)], e.g. "3" or "113"
 *   DIE_RANK, DIE_STEP  that rank kills itself (SIGKILL) after writing iteration DIE_STEP and
 *            before its checkpoint (its memory is then past the last checkpoint)
 * Environment: GROUP_CHECK_VERIFY=1 runs kioku_group_verify() after every checkpoint;
 * GROUP_CHECK_NO_RECOVER=1 skips kioku_group_recover() (to see it refused);
 * GROUP_CHECK_PROTECT=1 keeps the data in malloc'd memory registered with kioku_group_protect
 * instead of memory from kioku_group_alloc; GROUP_CHECK_THREADS=1 initialises MPI with
 * MPI_THREAD_MULTIPLE, so that remote levels are encoded in the background.
 *
 * Prints, per rank: "recovered rank R epoch E iter I level L lost N healed H" (H: pages of this
 * rank rebuilt because they failed their checksums), "verified rank R iter I",
 * "done rank R iter I"; errors as "error rank R <where> <code> <message>" with exit status 1.
 */
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kioku_group.h"

#define PAGE 4096

struct state {
    int64_t iter;
    int64_t pages;
};

static int rank;

static void fail(const char *where, int code)
{
    printf("error rank %d %s %d %s\n", rank, where, code, kioku_group_error());
    fflush(stdout);
    /* Every rank fails alike on a collective error; give them a moment to say so. */
    sleep(1);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Iteration `it` of rank `r`: which pages change, and to what. */
static void step(unsigned char *data, int64_t pages, int64_t it, int dense)
{
    int64_t n = dense ? pages / 3 + 1 : 3;
    for (int64_t j = 0; j < n; j++) {
        int64_t p = (int64_t)(mix((uint64_t)it * 1000003u + (uint64_t)j * 7919u + (uint64_t)rank) % (uint64_t)pages);
        uint64_t *w = (uint64_t *)(data + p * PAGE);
        uint64_t seed = mix(((uint64_t)rank << 40) ^ ((uint64_t)it << 20) ^ (uint64_t)p);
        /* Part of the page changes: deltas are not whole pages of noise. */
        for (int k = 0; k < PAGE / 8; k += 4)
            w[k] = seed + (uint64_t)k;
    }
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s STEPS PAGES sparse|dense LEVELS [DIE_RANK DIE_STEP]\n", argv[0]);
        return 2;
    }
    int64_t steps = atoll(argv[1]);
    int64_t pages = atoll(argv[2]);
    int dense = strcmp(argv[3], "dense") == 0;
    const char *levels = argv[4];
    int die_rank = argc > 6 ? atoi(argv[5]) : -1;
    int64_t die_step = argc > 6 ? atoll(argv[6]) : -1;
    int verify_each = getenv("GROUP_CHECK_VERIFY") && atoi(getenv("GROUP_CHECK_VERIFY")) == 1;

    if (getenv("GROUP_CHECK_THREADS") && atoi(getenv("GROUP_CHECK_THREADS")) == 1) {
        int provided = 0;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    setvbuf(stdout, NULL, _IOLBF, 0);

    int rc = kioku_group_init(MPI_COMM_WORLD, NULL);
    if (rc != KIOKU_OK)
        fail("init", rc);
    struct kioku_group_status st;
    kioku_group_status(&st);
    int recovered = 0;
    if (st.must_recover)
        printf("pools rank %d epoch %llu\n", rank, (unsigned long long)st.epoch);
    /* GROUP_CHECK_NO_RECOVER=1: a program that forgets to recover (must be refused). */
    if (st.must_recover && !getenv("GROUP_CHECK_NO_RECOVER")) {
        rc = kioku_group_recover();
        if (rc != KIOKU_OK)
            fail("recover", rc);
        recovered = 1;
    }
    unsigned char *data;
    if (getenv("GROUP_CHECK_PROTECT")) {
        data = calloc((size_t)pages, PAGE);
        rc = kioku_group_protect(1, data, (size_t)pages * PAGE);
        if (rc != KIOKU_OK)
            fail("protect", rc);
    } else {
        data = kioku_group_alloc(1, (size_t)pages * PAGE);
        if (!data)
            fail("alloc", -1);
    }
    struct state *s = kioku_group_alloc(2, sizeof *s);
    if (!s)
        fail("alloc", -1);

    if (recovered) {
        kioku_group_status(&st);
        printf("recovered rank %d epoch %llu iter %lld level %d lost %llu healed %llu\n", rank,
               (unsigned long long)st.recovered_epoch, (long long)s->iter, st.recovered_level,
               (unsigned long long)st.recovered_lost, (unsigned long long)st.healed_pages);
        /* Every protected byte against the data recomputed from nothing. */
        unsigned char *ref = calloc((size_t)pages, PAGE);
        for (int64_t it = 1; it <= s->iter; it++)
            step(ref, pages, it, dense);
        int64_t bad = -1;
        for (int64_t p = 0; p < pages && bad < 0; p++)
            if (memcmp(ref + p * PAGE, data + p * PAGE, PAGE) != 0)
                bad = p;
        if (bad >= 0 || (s->iter > 0 && s->pages != pages)) {
            printf("error rank %d verify 0 page %lld differs at iter %lld\n", rank, (long long)bad,
                   (long long)s->iter);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        free(ref);
        printf("verified rank %d iter %lld\n", rank, (long long)s->iter);
    }
    s->pages = pages;

    while (s->iter < steps) {
        int64_t it = s->iter + 1;
        step(data, pages, it, dense);
        s->iter = it;
        if (rank == die_rank && it == die_step) {
            printf("dying rank %d iter %lld\n", rank, (long long)it);
            raise(SIGKILL);
        }
        int level = levels[it % (int64_t)strlen(levels)] - '0';
        rc = kioku_group_checkpoint(level);
        if (rc != KIOKU_OK)
            fail("checkpoint", rc);
        if (verify_each) {
            uint64_t badp = 0;
            rc = kioku_group_verify(&badp);
            if (rc != KIOKU_OK)
                fail("verify", rc);
            if (badp != 0) {
                printf("error rank %d parity 0 %llu parity pages differ after iter %lld\n", rank,
                       (unsigned long long)badp, (long long)it);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            kioku_group_status(&st);
            if (st.healed_pages > 0)
                printf("scrub rank %d iter %lld healed %llu\n", rank, (long long)it,
                       (unsigned long long)st.healed_pages);
        }
    }
    kioku_group_status(&st);
    printf("done rank %d iter %lld epoch %llu\n", rank, (long long)s->iter,
           (unsigned long long)st.epoch);
    kioku_group_finalize();
    MPI_Finalize();
    return 0;
}
