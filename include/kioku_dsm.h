/*
 * kioku_dsm.h — kioku's software distributed shared memory (SCASH-FT over kioku's MCAPI).
 *
 * SPMD programs: one process per node, N nodes. Shared memory is allocated collectively and
 * lives at the same address on every node. Consistency is home-based lazy release
 * consistency (scope form): after kioku_dsm_barrier() a node sees every write made before
 * the barrier; after kioku_dsm_lock(l) it sees every write made under lock l by its earlier
 * holders. Accesses are detected by page protection: pass shared memory to system calls
 * (read(2), write(2), ...) only through a private buffer.
 *
 * A node is configured by its environment: KIOKU_DSM_NODE (its id, 0..N-1) and the MCAPI
 * topology (KIOKU_MCAPI_TOPOLOGY, KIOKU_MCAPI_*; see docs/mcapi.md); optionally
 * KIOKU_DSM_BASE (hex address of the shared range, default 0x5e0000000000),
 * KIOKU_DSM_RANGE_MIB (its size, default 16384) and KIOKU_DSM_START_TIMEOUT_S (default 60).
 *
 * Every int-returning function returns 0 (KIOKU_DSM_OK) or a negative KIOKU_DSM_E* code;
 * kioku_dsm_last_error() then says what went wrong and what to do. Link with -lkioku_dsm.
 * See docs/dsm.md.
 */
#ifndef KIOKU_DSM_H
#define KIOKU_DSM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KIOKU_DSM_OK 0
/* An argument is invalid (a lock not held, a bad distribution, ...). */
#define KIOKU_DSM_EINVAL (-1)
/* The DSM is not running, or already running, in this process. */
#define KIOKU_DSM_ESTATE (-2)
/* A node was lost or did not answer (the message names it). */
#define KIOKU_DSM_ENODE (-3)
/* The nodes disagree: different barrier counts, allocations or configuration. */
#define KIOKU_DSM_EMISMATCH (-4)
/* The shared range is full (raise KIOKU_DSM_RANGE_MIB). */
#define KIOKU_DSM_ENOMEM (-5)
/* A system or MCAPI call failed. */
#define KIOKU_DSM_EIO (-6)
/* A peer sent a malformed message. */
#define KIOKU_DSM_EPROTO (-7)
/* Not a failure of the job: a node was lost, a standby took over its id, and every node went
 * back to the newest checkpoint. Take this node's private state of then with
 * kioku_dsm_resume and go on from it (the shared memory is as it was then). */
#define KIOKU_DSM_EROLLEDBACK (-8)
/* kioku_dsm_init of a standby (KIOKU_DSM_NODE >= N) that the job ended without: exit 0. */
#define KIOKU_DSM_EDISMISSED (-9)
/* A node failure the job cannot recover from (a node and its buddy lost, no standby left,
 * no checkpoint yet); the message names the nodes. Every later call returns it. */
#define KIOKU_DSM_EUNRECOVERABLE (-10)

/* Distributions of kioku_dsm_alloc (a value >= 0 puts every page on that node). */
#define KIOKU_DSM_BLOCK (-1)  /* contiguous blocks of pages: node 0 first */
#define KIOKU_DSM_CYCLIC (-2) /* page i on node i mod N */

/* Starts this process's node from the environment and meets the other nodes. A standby
 * (KIOKU_DSM_STANDBYS=S, KIOKU_DSM_NODE = N..N+S-1) waits here until it takes over a lost
 * node (then kioku_dsm_resume returns 1) or the job ends (KIOKU_DSM_EDISMISSED). */
int kioku_dsm_init(void);

/* Leaves the job: a last barrier, then the node stops and the shared range is unmapped. */
int kioku_dsm_finalize(void);

/* This node's id (0..N-1), or a negative code. */
int kioku_dsm_node(void);

/* The number of nodes N, or a negative code. */
int kioku_dsm_nodes(void);

/* The page size of the shared range (0 when the DSM is not running). */
size_t kioku_dsm_page_size(void);

/* Collective: every node calls it with the same arguments in the same order. Allocates
 * `bytes` (rounded up to pages, zero-filled) whose pages have their homes as `dist` says;
 * ends with a barrier that checks the nodes agree. NULL on failure. */
void *kioku_dsm_alloc(size_t bytes, int dist);

/* Collective, like kioku_dsm_alloc: page i's home is homes[i]; `count` is the number of
 * pages. NULL on failure. */
void *kioku_dsm_alloc_homes(size_t bytes, const uint32_t *homes, size_t count);

/* Waits for every node; afterwards every write made before the barrier is visible. */
int kioku_dsm_barrier(void);

/* Takes lock `lock` (any number; managed by node lock mod N). */
int kioku_dsm_lock(uint32_t lock);

/* Releases lock `lock`; the writes made under it reach their homes first. */
int kioku_dsm_unlock(uint32_t lock);

/* Collective checkpoint (SCASH-FT): after a barrier, every node's home pages and `len` bytes
 * of its private state at `state` (loop counters and the like) go into its buddy's memory
 * (node i+1 mod N) and stay in its own, both in two contexts; a second barrier commits it.
 * A failure at any moment leaves the previous checkpoint whole. Writes the checkpoint's
 * epoch to *epoch unless it is NULL. */
int kioku_dsm_checkpoint(const void *state, size_t len, uint64_t *epoch);

/* Collective rollback to the newest checkpoint: shared memory as it was then (allocations
 * made since keep their addresses, zero-filled), this node's private state copied to `state`
 * (`cap` bytes) and its length written to *len. If it does not fit, nothing is rolled back:
 * EINVAL, with the length needed in *len. */
int kioku_dsm_rollback(void *state, size_t cap, size_t *len);

/* After KIOKU_DSM_EROLLEDBACK, or kioku_dsm_init of a standby that took over: copies this
 * node's private state of the checkpoint the job went back to into `state` (`cap` bytes), its
 * length to *len, and returns 1; 0 when there is none. If it does not fit: EINVAL, the length
 * needed in *len, and the state is kept for another call. Allocations are replayed: a node
 * that took over calls kioku_dsm_alloc as the job did and gets the same addresses. */
int kioku_dsm_resume(void *state, size_t cap, size_t *len);

/* The private state carried by the checkpoints taken every KIOKU_DSM_CHECKPOINT_EVERY
 * barriers (set it before the barrier, as the state after it). */
int kioku_dsm_set_private(const void *state, size_t len);

/* The message of the calling thread's last failure ("" if none); valid until its next call. */
const char *kioku_dsm_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* KIOKU_DSM_H */
