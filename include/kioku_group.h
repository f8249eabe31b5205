/*
 * kioku_group.h — group checkpoints for MPI programs (C, C++, and Fortran through
 * ISO_C_BINDING with kioku_group_init_f).
 *
 * Each rank protects memory it gets from kioku_group_alloc(): the memory lives in the rank's
 * own pool (NDCKPT's two contexts), so kioku sees which pages the program writes. A
 * collective kioku_group_checkpoint(level) makes every rank's protected memory durable in its
 * pool (KIOKU_LEVEL_LOCAL), and also copies what changed to a partner rank
 * (KIOKU_LEVEL_PARTNER) or folds it into Reed–Solomon parity held by the other members of the
 * rank's group (KIOKU_LEVEL_RS): only the XOR deltas of the pages written since that level's
 * last checkpoint cross the network, pipelined along the group. The checkpoint is committed
 * when every rank has made it durable; a failure part-way leaves the previous one.
 *
 * After a restart (same number of ranks; some pools may be missing — replacement nodes — or
 * damaged), kioku_group_recover() brings every rank back to the newest checkpoint all of
 * them can reach, rebuilding up to m lost ranks per group from the survivors.
 *
 *     MPI_Init(&argc, &argv);
 *     if (kioku_group_init(MPI_COMM_WORLD, NULL) != KIOKU_OK) { puts(kioku_group_error()); ... }
 *     struct kioku_group_status st;
 *     kioku_group_status(&st);
 *     if (st.must_recover) kioku_group_recover();        // collective
 *     double *a = kioku_group_alloc(1, n * sizeof *a);  // recovered contents, or zeros
 *     long *iter = kioku_group_alloc(2, sizeof *iter);
 *     for (; *iter < steps; ++*iter) {
 *         compute(a);
 *         kioku_group_checkpoint(*iter % 10 == 9 ? KIOKU_LEVEL_RS : KIOKU_LEVEL_LOCAL);
 *     }
 *     kioku_group_finalize();
 *     MPI_Finalize();
 *
 * Configuration: a file of `key = value` lines (path given to kioku_group_init, or NULL) and
 * KIOKU_* environment variables, which win: KIOKU_DIR (pool directory, default .kioku/group),
 * KIOKU_NAME, KIOKU_MEDIUM, KIOKU_GROUP_SIZE (default 8), KIOKU_PARITY (m, default 2),
 * KIOKU_LEVELS (remote levels kept: "rs", "partner" or "partner,rs"; default rs),
 * KIOKU_SEGMENT_PAGES, KIOKU_FULL. See docs/group.md.
 *
 * Conventions: functions return KIOKU_OK (0) or a negative code (the KIOKU_E_* values shared
 * with kioku.h, plus the group codes below); kioku_group_error() gives a one-line detail of
 * the calling thread's last failure. Collective functions must be called by every rank of the
 * communicator, in the same order. Link with -lkioku_group and MPI (mpicc does the latter).
 */
#ifndef KIOKU_GROUP_H
#define KIOKU_GROUP_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: background encoding, self-healing pages, kioku_group_wait, the status fields after
 * last_total_ns. 3: redo logs freed once applied: pool_bytes counts what the pool takes,
 * flight_pool_peak_bytes. */
#define KIOKU_GROUP_VERSION 3

/* Checkpoint levels. */
#define KIOKU_LEVEL_LOCAL 1   /* the rank's own pool only */
#define KIOKU_LEVEL_PARTNER 2 /* plus a copy at another member of the group */
#define KIOKU_LEVEL_RS 3      /* plus Reed–Solomon parity over the group (m losses) */

/* Codes (the first ones have the values of kioku.h's codes of the same name). */
#define KIOKU_OK 0
#define KIOKU_E_INVAL (-1)
#define KIOKU_E_NOT_FOUND (-2)
#define KIOKU_E_BUSY (-4)
#define KIOKU_E_CORRUPT (-8)
#define KIOKU_E_IO (-18)
#define KIOKU_E_NOMEM (-19)
#define KIOKU_E_STATE (-22)
#define KIOKU_E_INTERNAL (-23)
/* An MPI operation failed. */
#define KIOKU_E_MPI (-30)
/* Lost ranks cannot be rebuilt: more than m in a group, or no partner/rs checkpoint exists. */
#define KIOKU_E_LOST (-31)
/* Another rank failed; the message names it and why. */
#define KIOKU_E_REMOTE (-32)
/* The configuration is wrong, or differs from the one the pools were written with. */
#define KIOKU_E_CONFIG (-33)

struct kioku_group_status {
    int32_t rank, size;         /* in the communicator given to kioku_group_init */
    int32_t group, group_size;  /* this rank's group and its members */
    int32_t position;           /* this rank's place in its group */
    int32_t rs_k, rs_m;         /* the rs level's code (0, 0 when not kept) */
    int32_t must_recover;       /* 1: pools of an earlier run exist; call kioku_group_recover */
    uint64_t epoch;             /* last committed group checkpoint (0: none) */
    int32_t last_level;         /* its level */
    int32_t recovered_level;    /* level the last recovery rebuilt lost ranks from (0: none lost) */
    uint64_t recovered_epoch;   /* checkpoint the last recovery returned to */
    uint64_t recovered_lost;    /* ranks it rebuilt */
    uint64_t recovered_ns;      /* how long it took (this rank) */
    uint64_t recovered_decode_ns; /* of which decoding lost shards (receiving included) */
    uint64_t recovered_bytes;   /* bytes this rank received to decode */
    uint64_t last_dirty_pages;  /* this rank, last checkpoint: pages written in the epoch */
    uint64_t last_encoded_pages; /* pages whose delta it encoded */
    uint64_t last_bytes_sent;   /* bytes it sent */
    uint64_t last_encode_ns, last_persist_ns, last_total_ns;
    /* Since KIOKU_GROUP_VERSION 2. */
    int32_t background;         /* 1: remote levels are encoded in the background */
    int32_t in_flight;          /* 1: an encoding runs in the background now */
    uint64_t partner_epoch, rs_epoch; /* the epoch each level's parity encodes (0: none), here */
    uint64_t last_waited_ns;    /* last checkpoint: of last_total_ns, waiting for the previous
                                   background encoding */
    uint64_t last_journaled_pages; /* pages whose base it saved for the levels' journals */
    int32_t flight_level, flight_committed; /* the last encoding that ended: its level, and 1
                                   if the level committed it (0: it kept its previous parity) */
    uint64_t flight_epoch;      /* its epoch */
    uint64_t flight_durable_ns; /* from its checkpoint call until the level committed here */
    uint64_t flight_bytes_sent, flight_encoded_pages; /* what this rank sent for it */
    uint64_t healed_pages;      /* pages rebuilt from parity by the last recovery (this rank)
                                   or kioku_group_verify (the job) */
    uint64_t pool_bytes;        /* bytes this rank's pool takes (allocated: freed redo logs
                                   are holes; the file's length may be larger) */
    /* Since KIOKU_GROUP_VERSION 3. */
    uint64_t flight_pool_peak_bytes; /* the last encoding that ended: bytes this rank's pool
                                   took once its redo log was complete (its peak) */
};

/* Collective. Sets up kioku over a duplicate of `comm` (MPI must be initialised). `config`:
 * path of a configuration file, or NULL. Creates the pools when no earlier run left any;
 * otherwise status.must_recover is 1 and kioku_group_recover() must come before
 * kioku_group_alloc() (pools are never reinitialised silently: remove them to start afresh). */
int kioku_group_init(MPI_Comm comm, const char *config);
/* The same, with a Fortran communicator handle (MPI_Fint; e.g. MPI_COMM_WORLD%MPI_VAL). */
int kioku_group_init_f(MPI_Fint comm, const char *config);
/* Collective. Closes the pools (they keep the last checkpoint). */
int kioku_group_finalize(void);

/* Memory for protected region `id` of `size` bytes: zeroed when new; after a recovery, the
 * recovered contents (the size must be the one the region was created with). NULL on
 * failure. Valid until kioku_group_finalize(). Not collective. */
void *kioku_group_alloc(uint32_t id, size_t size);

/* Protects `size` bytes of the program's own memory at `ptr` (a malloc'd or Fortran array) as
 * region `id`, FTI-style. After kioku_group_recover(), the recovered contents are copied into
 * the buffer by this call. Each checkpoint copies the buffer's changed pages into the region
 * (found by comparing page by page: the buffer is not write-tracked, so kioku_group_alloc is
 * cheaper for large data). Protecting `id` again moves it to a new buffer of the same size.
 * The buffer must stay valid until then or kioku_group_finalize(). Not collective. */
int kioku_group_protect(uint32_t id, void *ptr, size_t size);

/* Collective. A checkpoint at `level` (KIOKU_LEVEL_*). It returns once the local level is
 * committed on every rank; a remote level (partner, rs) is then encoded and committed in the
 * background while the program computes, when the program initialised MPI with
 * MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) (KIOKU_ASYNC=0 turns that off); otherwise
 * before the call returns. A rank lost before the level commits leaves the level's previous
 * checkpoint as what a restart rebuilds from. The next collective call waits for the
 * encoding; kioku_group_wait() waits for it now. No thread may write protected memory during
 * the call. On failure the previous checkpoint stays the committed one and further calls fail
 * with KIOKU_E_STATE: restart the job and recover (except KIOKU_E_CORRUPT / KIOKU_E_REMOTE
 * from a failed encoding: nothing was taken, call kioku_group_verify() and try again). */
int kioku_group_checkpoint(int level);

/* Not collective. Waits until this rank's background encoding (if one runs) has ended: the
 * level committed it, or kept its previous parity (status.flight_committed says which). */
int kioku_group_wait(void);

/* Collective. After a restart: returns every rank to the newest checkpoint all of them can
 * reach, rebuilding lost ranks' memory (KIOKU_E_LOST when more than m of a group are lost),
 * and protects the group again before returning. */
int kioku_group_recover(void);

/* This rank's view of the group. Not collective. Fills the first `size` bytes of *out (at
 * most the struct of this version): call it through the macro kioku_group_status(out), which
 * passes the size the program was compiled with, so that a program built against an older
 * header is never overrun by a newer library. */
int kioku_group_status_size(struct kioku_group_status *out, size_t size);
/* The function itself fills only KIOKU_GROUP_VERSION 1's fields (up to last_total_ns): what
 * programs built against that header call, and bindings that declare that struct
 * (examples/mpi/group_fortran.f90). */
int kioku_group_status(struct kioku_group_status *out);
#define kioku_group_status(out) kioku_group_status_size((out), sizeof *(out))

/* Collective scrub. Checks every page checksum of every rank's pool (the checkpoint's data,
 * the parity, the journals) and rebuilds pages that fail from the group's parity; then
 * recomputes the parity of every level whose parity encodes the last checkpoint and compares
 * it with the parity held. *bad_pages (if not NULL) gets the number of pages, over the job,
 * still damaged afterwards plus parity pages that differ (0: all sound now; status.healed_pages
 * counts the pages it rebuilt). KIOKU_E_CORRUPT
 * (on the rank that holds it; KIOKU_E_LOST on the others) names a page that cannot be rebuilt.
 * Waits for a background encoding first. */
int kioku_group_verify(uint64_t *bad_pages);

/* The calling thread's last failure, one line ("" when none). */
const char *kioku_group_error(void);

#ifdef __cplusplus
}
#endif

#endif /* KIOKU_GROUP_H */
