/*
 * regions.c — a counter array that survives crashes, with kioku's C API.
 *
 *   regions POOL [STEPS | forever]
 *
 * The first run creates the pool file POOL with one region, "counters", an array of
 * NCOUNTERS 64-bit counters. Each step adds i + 1 to counter i and takes a checkpoint whose
 * metadata records how many steps the array has seen. Later runs (also after kill -9 or a
 * power cut) recover the last checkpoint and continue from it. STEPS defaults to 5; "forever"
 * loops until the process is killed.
 *
 * Build (see docs/capi.md):
 *   cargo build --release -p kioku-capi
 *   cc -I include examples/c/regions.c target/release/libkioku.a \
 *      -lpthread -ldl -lm -lrt -lgcc_s -lutil -o regions
 */
#include <kioku.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCOUNTERS 2048 /* 16 KiB: four 4 KiB pages */

/* The checkpoint metadata: what a restarted run needs besides the region itself. */
struct meta {
    char magic[8];  /* "regions" — to recognise our own pools */
    uint64_t steps; /* steps applied to the counters in this checkpoint */
    uint64_t runs;  /* how many times the program has started on this pool */
};

static void die(const char *what, int rc) {
    /* kioku_strerror names the code; kioku_last_error says what happened and what to do. */
    fprintf(stderr, "regions: %s: %s (%d): %s\n", what, kioku_strerror(rc), rc,
            kioku_last_error());
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s POOL [STEPS | forever]\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    int forever = argc == 3 && strcmp(argv[2], "forever") == 0;
    uint64_t steps = argc == 3 && !forever ? strtoull(argv[2], NULL, 10) : 5;

    if (kioku_api_version() != KIOKU_API_VERSION) {
        fprintf(stderr, "regions: kioku.h is API %d but the library is API %" PRIu32 "\n",
                KIOKU_API_VERSION, kioku_api_version());
        return 1;
    }

    kioku_engine *e = NULL;
    struct meta m;
    uint64_t *counters = NULL;
    size_t meta_len = 0;
    uint64_t epoch = 0;

    /* Recover if the pool exists; create it otherwise. NULL medium: chosen from the path. */
    int rc = kioku_recover(path, NULL, &e, &epoch, &m, sizeof m, &meta_len);
    if (rc == KIOKU_OK) {
        size_t len = 0;
        rc = kioku_region_lookup(e, "counters", (void **)&counters, &len);
        if (rc != KIOKU_OK)
            die("lookup counters", rc);
        if (epoch == 0) {
            /* Created, but killed before its first checkpoint: start from zero. */
            memset(&m, 0, sizeof m);
            memcpy(m.magic, "regions", 8);
        } else if (meta_len != sizeof m || memcmp(m.magic, "regions", 8) != 0) {
            fprintf(stderr, "regions: %s holds someone else's checkpoints\n", path);
            return 1;
        }
        /* The region holds exactly what it held at that checkpoint: check it. */
        for (size_t i = 0; i < NCOUNTERS; i++) {
            if (counters[i] != m.steps * (i + 1)) {
                fprintf(stderr, "regions: counter %zu is %" PRIu64 ", expected %" PRIu64 "\n",
                        i, counters[i], m.steps * (i + 1));
                return 3;
            }
        }
        printf("recovered epoch=%" PRIu64 " steps=%" PRIu64 " runs=%" PRIu64 "\n", epoch,
               m.steps, m.runs);
    } else if (rc == KIOKU_E_NOT_FOUND) {
        rc = kioku_create(path, NULL, &e);
        if (rc != KIOKU_OK)
            die("create", rc);
        /* addr NULL: the kernel picks the address (kept across recoveries); reserve 0: default. */
        rc = kioku_region_create(e, "counters", NCOUNTERS * sizeof(uint64_t), NULL, 0,
                                 (void **)&counters);
        if (rc != KIOKU_OK)
            die("create region", rc);
        memset(&m, 0, sizeof m);
        memcpy(m.magic, "regions", 8);
        printf("created %s\n", path);
    } else {
        die("recover", rc);
    }
    m.runs++;

    for (uint64_t n = 0; forever || n < steps; n++) {
        /* Ordinary stores into the region: no kioku call on the hot path. */
        for (size_t i = 0; i < NCOUNTERS; i++)
            counters[i] += i + 1;
        m.steps++;
        /* Durable when it returns: the counters as they are now, and m. */
        rc = kioku_checkpoint(e, &m, sizeof m, &epoch);
        if (rc != KIOKU_OK)
            die("checkpoint", rc);
        printf("checkpoint epoch=%" PRIu64 " steps=%" PRIu64 "\n", epoch, m.steps);
        fflush(stdout);
    }

    printf("done epoch=%" PRIu64 " steps=%" PRIu64 " counters[%d]=%" PRIu64 "\n", epoch,
           m.steps, NCOUNTERS - 1, counters[NCOUNTERS - 1]);
    kioku_close(e); /* counters is invalid from here on */
    return 0;
}
