/*
 * kioku.h — the C API of kioku's checkpoint engine.
 *
 * kioku keeps named memory regions in a pool file. A program reads and writes its regions as
 * ordinary memory; kioku_checkpoint() makes the regions plus a caller-chosen metadata blob
 * durable, and kioku_recover() restores the last checkpoint after a crash, SIGKILL or (on the
 * "dax" and "file" media) power loss, mapping every region back at the address it had.
 *
 * This header is written by hand and is the contract: names and values declared here stay
 * stable within an API version (KIOKU_API_VERSION). The tests of crates/capi check that every
 * function declared here exists in the library with this signature and that every constant has
 * the value the library uses. See docs/capi.md for a guide.
 *
 * Conventions shared by every function below:
 *  - Functions returning int return KIOKU_OK (0) on success and a negative KIOKU_E_* code on
 *    failure; kioku_strerror() names a code and kioku_last_error() gives a one-line detail of
 *    the last failure on the calling thread.
 *  - Every pointer argument is checked: a NULL where one is not allowed fails with
 *    KIOKU_E_INVAL and changes nothing.
 *  - Out-parameters are written only on success, unless a function says otherwise.
 *  - Threads: the library is thread-safe except that one kioku_engine handle must be used by
 *    one thread at a time (the caller serialises; any thread may use it). kioku_checkpoint()
 *    must not run while any thread writes the engine's regions.
 *  - No function ever unwinds into C: an internal bug is reported as KIOKU_E_INTERNAL.
 *  - Failure atomicity: when kioku_checkpoint() or a region change fails in a way that may have
 *    left the handle half-changed, the handle refuses further changes and checkpoints with
 *    KIOKU_E_STATE (the read-only kioku_region_lookup/_count/_at, kioku_epoch and
 *    kioku_metadata still answer). The pool still holds the last successful checkpoint:
 *    kioku_close() the handle and kioku_recover().
 */
#ifndef KIOKU_H
#define KIOKU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this API (the header). kioku_api_version() returns the library's. */
#define KIOKU_API_VERSION 1

/* Longest region name in bytes, not counting the terminating NUL. */
#define KIOKU_REGION_NAME_MAX 63

/* Flags of kioku_recover_ex(). */
/* Accept the pool's previous commit when its live commit slot is damaged (KIOKU_E_ROLLBACK). */
#define KIOKU_RECOVER_ALLOW_ROLLBACK 1u

/* ---- Error codes ------------------------------------------------------------------------- */

#define KIOKU_OK 0
/* An argument is invalid: a NULL pointer, an unknown medium name or flag, an empty path, a
 * region name that is empty, longer than KIOKU_REGION_NAME_MAX or not UTF-8, a region
 * address that is not page-aligned, a length or reservation above 2^56 bytes, or a pool path
 * that is a symbolic link in a directory other users can write (/tmp, /dev/shm). */
#define KIOKU_E_INVAL (-1)
/* No pool exists at the path (kioku_recover*). */
#define KIOKU_E_NOT_FOUND (-2)
/* A file already exists at the path (kioku_create); kioku never overwrites one. */
#define KIOKU_E_EXISTS (-3)
/* The pool is open in another process (or another handle of this one). */
#define KIOKU_E_BUSY (-4)
/* The file is not a kioku pool. */
#define KIOKU_E_NOT_A_POOL (-5)
/* The pool has a format version this library does not read. */
#define KIOKU_E_VERSION (-6)
/* The pool file is shorter than its header says (truncated copy). */
#define KIOKU_E_TRUNCATED (-7)
/* The pool is damaged: header or commit record checksum, or the checkpoint's metadata or pages
 * fail their checksums in both contexts. Restore the file from a copy. */
#define KIOKU_E_CORRUPT (-8)
/* The live commit slot is damaged but the previous commit is intact: recover with
 * KIOKU_RECOVER_ALLOW_ROLLBACK to accept losing the last commit. */
#define KIOKU_E_ROLLBACK (-9)
/* The pool was made on a machine with another page size. */
#define KIOKU_E_PAGE_SIZE (-10)
/* The pool holds another kind of kioku state, not checkpoints. */
#define KIOKU_E_KIND (-11)
/* The requested medium cannot be used for this path (e.g. "dax" off a DAX filesystem, "shm"
 * off tmpfs, "file" on tmpfs, which does not survive power loss). */
#define KIOKU_E_MEDIUM (-12)
/* A region's address range is already in use in this process. */
#define KIOKU_E_ADDRESS_TAKEN (-13)
/* No region has that name. */
#define KIOKU_E_NO_REGION (-14)
/* A region with that name exists already. */
#define KIOKU_E_REGION_EXISTS (-15)
/* The new length does not fit the region's address reservation. */
#define KIOKU_E_RESERVATION (-16)
/* Written-page tracking failed (userfaultfd / mprotect); see docs/track.md. */
#define KIOKU_E_TRACKER (-17)
/* A system call or file operation failed (e.g. no space left on the device). */
#define KIOKU_E_IO (-18)
/* Out of memory or address space. */
#define KIOKU_E_NOMEM (-19)
/* A caller's buffer is too small; the needed length was reported. */
#define KIOKU_E_RANGE (-20)
/* A fixed limit of the pool format was reached (e.g. too many regions). */
#define KIOKU_E_LIMIT (-21)
/* The handle is unusable after an earlier failure; close it and kioku_recover() the pool. */
#define KIOKU_E_STATE (-22)
/* A bug in kioku (an internal panic was caught); kioku_last_error() has the message. */
#define KIOKU_E_INTERNAL (-23)
/* A wait ended without an event (kioku_hot_wait). */
#define KIOKU_E_TIMEOUT (-24)
/* No huge page could back the memory: the hugetlb pool is empty (reserve pages with
 * `sysctl vm.nr_hugepages=N`) or transparent huge pages are off or memory too fragmented. */
#define KIOKU_E_NO_HUGE_PAGES (-25)

/* ---- Types ------------------------------------------------------------------------------- */

/* An open checkpoint pool with its regions mapped in this process. Opaque. */
typedef struct kioku_engine kioku_engine;

/* What one checkpoint did (kioku_checkpoint_ex). Durations in nanoseconds. */
typedef struct kioku_checkpoint_stats {
    uint64_t epoch;       /* epoch of this checkpoint (1 for the first) */
    uint64_t dirty_pages; /* pages written since the previous checkpoint, written back now */
    uint64_t dirty_bytes; /* dirty_pages times the page size */
    uint64_t scan_ns;     /* finding the written pages */
    uint64_t persist_ns;  /* from the scan until the checkpoint was durable */
    uint64_t sync_ns;     /* bringing the second copy up to date afterwards */
    uint64_t total_ns;    /* the whole call */
} kioku_checkpoint_stats;

/* What kioku_recover_ex() restored. */
typedef struct kioku_recovery {
    uint64_t epoch;        /* epoch of the checkpoint restored; 0: none was ever taken */
    uint64_t time_ns;      /* when it was taken, nanoseconds since the Unix epoch */
    uint64_t meta_len;     /* full length of its metadata, whatever the buffer's capacity */
    uint64_t pages_synced; /* pages copied to make the pool's two contexts equal again */
    uint32_t source_ctx;   /* context (0 or 1) the state was read from */
    uint32_t used_copy;    /* 1: the valid context was damaged and its complete copy was used */
} kioku_recovery;

/* ---- Library ----------------------------------------------------------------------------- */

/* The API version the library implements (KIOKU_API_VERSION of the header it was built with).
 * Compare with KIOKU_API_VERSION to detect a header/library mismatch. Never fails. */
uint32_t kioku_api_version(void);

/* The library's release version, e.g. "0.1.0": a static NUL-terminated string. Never fails. */
const char *kioku_version(void);

/* A static, NUL-terminated English name of an error code, e.g. "no such region" for
 * KIOKU_E_NO_REGION; "unknown error code" for values that are not codes. Never NULL; the
 * string must not be freed. Never fails. */
const char *kioku_strerror(int code);

/* A one-line description of the last failure of a kioku function on the calling thread, with
 * the detail kioku_strerror() cannot give (path, region name, OS error, what to do). ""
 * if no kioku function has failed on this thread yet. Successful calls do not clear it. The
 * string is owned by the library and valid until the next failing kioku call on this thread.
 * Never fails; never NULL. */
const char *kioku_last_error(void);

/* ---- Opening and closing ----------------------------------------------------------------- */

/* Creates a new, empty checkpoint pool file at `path` (epoch 0, no regions) and opens it.
 *  medium: NULL or "auto": "dax" on a filesystem accepting MAP_SYNC, "shm" on tmpfs (e.g.
 *          /dev/shm: survives the death of processes, not a reboot), else "file". Or exactly
 *          "dax", "file" or "shm", which fail with KIOKU_E_MEDIUM where they cannot work
 *          ("file" on tmpfs, which would look durable but is not).
 *  out:    receives the new handle; the caller owns it and releases it with kioku_close().
 * The pool is locked for this process until the handle is closed.
 * Errors: KIOKU_E_INVAL, KIOKU_E_EXISTS, KIOKU_E_MEDIUM, KIOKU_E_IO, KIOKU_E_NOMEM,
 * KIOKU_E_TRACKER. */
int kioku_create(const char *path, const char *medium, kioku_engine **out);

/* Reopens the pool at `path` after a crash or a clean exit and restores its last checkpoint:
 * every region is mapped back at its address with the contents it had at that checkpoint
 * (look them up with kioku_region_lookup). `medium` as for kioku_create, chosen for where the
 * file is now (a pool copied from persistent memory to a disk opens as "file").
 *  out:          receives the handle (caller owns it; kioku_close()).
 *  epoch_out:    may be NULL; receives the epoch restored (0: no checkpoint was ever taken).
 *  meta_buf, meta_cap, meta_len_out: the metadata passed to that checkpoint. The first
 *                min(length, meta_cap) bytes are copied to meta_buf and *meta_len_out receives
 *                the full length. If the full length exceeds meta_cap the copy is truncated
 *                but the call still succeeds (the pool is recovered and open): compare
 *                *meta_len_out with meta_cap, and read the whole metadata with kioku_metadata().
 *                Pass NULL, 0, NULL to ignore the metadata; meta_len_out must not be NULL when
 *                meta_cap > 0, so that truncation cannot go unnoticed.
 * Errors: KIOKU_E_INVAL, KIOKU_E_NOT_FOUND, KIOKU_E_BUSY, KIOKU_E_NOT_A_POOL, KIOKU_E_VERSION,
 * KIOKU_E_TRUNCATED, KIOKU_E_CORRUPT, KIOKU_E_ROLLBACK, KIOKU_E_PAGE_SIZE, KIOKU_E_KIND,
 * KIOKU_E_MEDIUM, KIOKU_E_ADDRESS_TAKEN (a region's address is in use in this process: recover
 * early, before other mappings take it), KIOKU_E_TRACKER, KIOKU_E_IO, KIOKU_E_NOMEM. */
int kioku_recover(const char *path, const char *medium, kioku_engine **out, uint64_t *epoch_out,
                  void *meta_buf, size_t meta_cap, size_t *meta_len_out);

/* kioku_recover() with flags (0 or KIOKU_RECOVER_ALLOW_ROLLBACK; other bits: KIOKU_E_INVAL)
 * and a report. info_out may be NULL; when not, it receives what was restored, including the
 * metadata's full length (info_out->meta_len). The metadata is copied to meta_buf as in
 * kioku_recover() (truncated to meta_cap); info_out must not be NULL when meta_cap > 0.
 * Errors: those of kioku_recover(). */
int kioku_recover_ex(const char *path, const char *medium, uint32_t flags, kioku_engine **out,
                     kioku_recovery *info_out, void *meta_buf, size_t meta_cap);

/* Unmaps every region of the handle, unlocks the pool and frees the handle. The last
 * checkpoint stays durable; changes made after it are not saved. Pointers to regions of the
 * handle become invalid. NULL is accepted and does nothing. Never fails. */
void kioku_close(kioku_engine *e);

/* ---- Regions ----------------------------------------------------------------------------- */

/* Creates a zero-filled region called `name` (1 to KIOKU_REGION_NAME_MAX bytes of UTF-8) of
 * `len` bytes rounded up to whole pages (0 counts as one page), mapped read-write in this
 * process. It becomes durable at the next checkpoint.
 *  addr:     NULL: the kernel chooses; else the page-aligned address the region must start at.
 *  reserve:  address space reserved for growth in place (kioku_region_resize), rounded up to
 *            pages and at least len; 0: the larger of 2 * len and 1 GiB.
 *  addr_out: may be NULL; receives the region's first byte. The address stays the same for
 *            the region's life and after recovery, until kioku_region_delete or kioku_close.
 * Errors: KIOKU_E_INVAL, KIOKU_E_REGION_EXISTS, KIOKU_E_ADDRESS_TAKEN, KIOKU_E_NOMEM,
 * KIOKU_E_LIMIT, KIOKU_E_IO, KIOKU_E_TRACKER, KIOKU_E_STATE. */
int kioku_region_create(kioku_engine *e, const char *name, size_t len, void *addr,
                        size_t reserve, void **addr_out);

/* Finds the region called `name`. addr_out and len_out may each be NULL; they receive the
 * region's first byte and its length in bytes (a whole number of pages).
 * Errors: KIOKU_E_INVAL, KIOKU_E_NO_REGION. */
int kioku_region_lookup(kioku_engine *e, const char *name, void **addr_out, size_t *len_out);

/* Grows or shrinks the region called `name` in place to `new_len` bytes rounded up to pages;
 * its address does not change. Bytes beyond the old length read as zero; bytes beyond the new
 * length are unmapped (do not touch them). Durable at the next checkpoint.
 * Errors: KIOKU_E_INVAL, KIOKU_E_NO_REGION, KIOKU_E_RESERVATION (beyond the reservation given
 * at creation), KIOKU_E_LIMIT, KIOKU_E_IO, KIOKU_E_NOMEM, KIOKU_E_TRACKER, KIOKU_E_STATE. */
int kioku_region_resize(kioku_engine *e, const char *name, size_t new_len);

/* Deletes the region called `name`: it is unmapped now (pointers into it become invalid) and
 * its pool space is reclaimed once no checkpoint needs it. A crash before the next checkpoint
 * brings it back with its contents of the last checkpoint.
 * Errors: KIOKU_E_INVAL, KIOKU_E_NO_REGION, KIOKU_E_IO, KIOKU_E_TRACKER, KIOKU_E_STATE. */
int kioku_region_delete(kioku_engine *e, const char *name);

/* The number of regions of the handle. 0 for NULL. Never fails. */
size_t kioku_region_count(const kioku_engine *e);

/* The region at `index` (0 .. kioku_region_count() - 1, in address order): its NUL-terminated
 * name into name_buf (name_cap bytes; KIOKU_REGION_NAME_MAX + 1 always suffice), its first
 * byte into addr_out and its length into len_out. name_buf may be NULL when name_cap is 0;
 * addr_out and len_out may be NULL. The index order changes when regions are created or
 * deleted.
 * Errors: KIOKU_E_INVAL, KIOKU_E_NO_REGION (index out of range), KIOKU_E_RANGE (the name does
 * not fit name_cap; nothing is written). */
int kioku_region_at(const kioku_engine *e, size_t index, char *name_buf, size_t name_cap,
                    void **addr_out, size_t *len_out);

/* ---- Checkpoints ------------------------------------------------------------------------- */

/* Takes a checkpoint: the contents of every region as they are now, the set of regions and
 * their sizes, and `meta_len` bytes at `meta` (any bytes; NULL when meta_len is 0) become
 * durable, replacing the previous checkpoint; the call returns once they are. Only pages
 * written since the previous checkpoint are written back. No thread may write the regions
 * during the call. epoch_out may be NULL; it receives the new epoch (previous + 1).
 * Errors: KIOKU_E_INVAL, KIOKU_E_IO, KIOKU_E_NOMEM, KIOKU_E_LIMIT, KIOKU_E_TRACKER,
 * KIOKU_E_STATE. After any failure but KIOKU_E_INVAL the handle is in KIOKU_E_STATE and the
 * previous checkpoint is the one kioku_recover() restores. */
int kioku_checkpoint(kioku_engine *e, const void *meta, size_t meta_len, uint64_t *epoch_out);

/* kioku_checkpoint() that also reports what it did into *stats_out (may be NULL).
 * Errors: those of kioku_checkpoint(). */
int kioku_checkpoint_ex(kioku_engine *e, const void *meta, size_t meta_len,
                        kioku_checkpoint_stats *stats_out);

/* Epoch of the last checkpoint taken or recovered through this handle (0 before the first);
 * 0 for NULL. Never fails. */
uint64_t kioku_epoch(const kioku_engine *e);

/* The metadata of the last checkpoint taken or recovered through this handle (empty for a new
 * pool). *len_out receives its length; if it fits in buf_cap it is copied to buf (which may be
 * NULL when buf_cap is 0).
 * Errors: KIOKU_E_INVAL, KIOKU_E_RANGE (buf_cap too small: nothing copied, *len_out set). */
int kioku_metadata(const kioku_engine *e, void *buf, size_t buf_cap, size_t *len_out);

/* ---- Hot pages and huge pages ----------------------------------------------------------- */
/*
 * Huge pages that follow the application (see docs/hugepage.md). A kioku_hot handle samples
 * which pages of the registered arenas the program accesses (a thread of its own wakes every
 * period), tells the program when pages turn hot — by a callback on that thread, by an eventfd
 * for poll/epoll, and by a blocking wait — and places them: a 2 MiB range at least a quarter of
 * which is in use is collapsed into a huge page (MADV_COLLAPSE), the hot pages of the others are
 * handed to the program's compaction callback, which moves its hot objects onto huge-page
 * memory (kioku_huge_map). Once nothing changes any more, tracking stops by itself.
 *
 * Sampling (chosen at kioku_hot_create; docs/track.md has the details):
 *  - "refault": arenas must be shared mappings (MAP_SHARED of a memfd, tmpfs or /dev/shm file):
 *    sampled pages are unmapped and seen mapped again; no signal handler; system calls that
 *    read or write the arenas keep working.
 *  - "protnone": any memory: sampled pages are made PROT_NONE and a SIGSEGV handler sees the
 *    first access. Do not replace the SIGSEGV handler, do not mprotect the arenas, and do not
 *    let a system call such as read(2) write straight into an arena (it fails with EFAULT).
 *  - NULL or "auto": KIOKU_HOT_TRACKER (refault|protnone|auto) if set, else refault when the
 *    first arena is a shared mapping, protnone otherwise.
 * Arenas must stay mapped while they are registered (kioku_hot_unregister first).
 */

/* A hot-page manager. Opaque. */
typedef struct kioku_hot kioku_hot;

/* One page and its counts (kioku_hot_pages, and the compaction callback). */
typedef struct kioku_hot_page {
    uint64_t addr;  /* first byte of the 4 KiB page */
    uint32_t count; /* recent heat: +1 per observation that found it accessed, halved by one
                       that did not; the page is hot at the threshold */
    uint32_t hits;  /* observations that found it accessed */
    uint32_t seen;  /* observations */
    uint32_t pad;   /* zero */
} kioku_hot_page;

/* What a notification says. */
typedef struct kioku_hot_notice {
    uint64_t generation; /* notices posted so far, this one included */
    uint64_t hot_pages;  /* pages hot now */
    uint64_t new_hot;    /* pages that turned hot since the previous notice */
    uint64_t promoted;   /* ranges promoted by automatic placement since the previous notice */
    uint64_t compacted;  /* pages compacted by automatic placement since the previous notice */
    uint32_t settled;    /* 1: placement settled and tracking stopped (kioku_hot_enable restarts) */
    uint32_t pad;        /* zero */
} kioku_hot_notice;

/* The placement policy (kioku_hot_set_policy); kioku_hot_policy_default() fills it. */
typedef struct kioku_hot_policy {
    double promote_fraction; /* promote a 2 MiB range when this share of it is in use (0.25) */
    double max_fill;         /* ... and a collapse would allocate at most this share anew (0.25) */
    uint64_t min_observed;   /* pages observed before a range is decided (128, or all populated) */
    uint64_t budget;         /* huge pages this handle may use; 0: no limit */
    uint64_t revisit_ms;     /* look at promoted ranges again after this long; 0: never */
    double demote_fraction;  /* a revisited range below this share in use is demoted (1/16) */
} kioku_hot_policy;

/* What placement did (kioku_hot_place, and in total in kioku_hot_state). */
typedef struct kioku_hot_report {
    uint64_t decided;           /* ranges decided */
    uint64_t promoted;          /* ranges collapsed into huge pages */
    uint64_t collapse_ns;       /* time spent collapsing them */
    uint64_t no_huge_page;      /* collapses that found no huge page (retried later) */
    uint64_t not_eligible;      /* collapses refused for good */
    uint64_t demoted;           /* promoted ranges demoted after going cold */
    uint64_t compacted_pages;   /* pages the compaction callback vacated */
    uint64_t offered_pages;     /* hot pages offered to it */
    uint64_t compaction_errors; /* failing calls of it */
    uint64_t over_budget;       /* ranges refused a huge page by the budget */
} kioku_hot_report;

/* A handle's state (kioku_hot_status). */
typedef struct kioku_hot_state {
    uint32_t enabled;          /* tracking is enabled */
    uint32_t settled;          /* placement settled and tracking stopped */
    uint64_t hot_pages;        /* pages hot now */
    uint64_t promoted_ranges;  /* ranges promoted */
    uint64_t huge_pages_used;  /* huge pages charged to the budget */
    uint64_t tracked_pages;    /* pages tracked */
    uint64_t sample_pages;     /* pages observed per period now */
    uint64_t last_scan_ns;     /* time the last sampling step took */
    kioku_hot_report totals;   /* everything placement did */
} kioku_hot_state;

/* Called on the handle's thread for every notice. */
typedef void (*kioku_hot_notify_fn)(void *ctx, const kioku_hot_notice *notice);

/* The compaction callback: `pages` (n_pages of them, in address order) are hot pages of arena
 * `arena` in ranges not worth a huge page of their own. Move the hot objects on them onto
 * huge-page memory (kioku_huge_map) — where no reader can see an object half-moved — and set
 * moved[i] = 1 for each page vacated (moved[] starts zeroed). At most allowance_pages pages'
 * worth may move (the budget). Return 0, or a negative value to report a failure (logged and
 * counted; placement goes on). Called on the handle's thread, or in kioku_hot_place. */
typedef int (*kioku_hot_compact_fn)(void *ctx, uint64_t arena, const kioku_hot_page *pages,
                                    size_t n_pages, size_t allowance_pages, uint8_t *moved);

/* Creates a manager and its thread; nothing is tracked until arenas are registered and
 * kioku_hot_enable() is called.
 *  backend:   NULL, "auto", "refault" or "protnone" (see above).
 *  period_ms: sampling period; 0 for the default (100 ms).
 *  threshold: count at which a page is hot; 0 for the default (2).
 *  out:       receives the handle; the caller frees it with kioku_hot_close().
 * Errors: KIOKU_E_INVAL (unknown backend), KIOKU_E_TRACKER, KIOKU_E_IO. */
int kioku_hot_create(const char *backend, uint32_t period_ms, uint32_t threshold, kioku_hot **out);

/* Fills *out with the default policy. Errors: KIOKU_E_INVAL (out is NULL). */
int kioku_hot_policy_default(kioku_hot_policy *out);

/* Replaces the placement policy. Errors: KIOKU_E_INVAL (a fraction outside 0..1, or
 * promote_fraction 0). */
int kioku_hot_set_policy(kioku_hot *h, const kioku_hot_policy *policy);

/* Registers len bytes at addr (rounded out to whole pages) as arena `arena` (a number of the
 * caller's choosing, handed back to the compaction callback). The memory must stay mapped until
 * kioku_hot_unregister.
 * Errors: KIOKU_E_INVAL (len 0, or overlapping an arena), KIOKU_E_TRACKER (not mapped, or not
 * a shared mapping for the refault backend: kioku_last_error says which), KIOKU_E_IO. */
int kioku_hot_register(kioku_hot *h, void *addr, size_t len, uint64_t arena);

/* Unregisters the arena holding addr. Errors: KIOKU_E_INVAL (no arena holds it),
 * KIOKU_E_TRACKER. */
int kioku_hot_unregister(kioku_hot *h, void *addr);

/* Starts or restarts tracking (also after it settled). Errors: KIOKU_E_STATE (tracking stopped
 * on an error, kioku_last_error says which: close the handle). */
int kioku_hot_enable(kioku_hot *h);

/* Stops tracking; armed pages are disarmed, counts kept. Errors: KIOKU_E_TRACKER. */
int kioku_hot_disable(kioku_hot *h);

/* Sets (or, with NULL, removes) the notification and compaction callbacks; ctx is passed to
 * both, from the handle's thread. Errors: KIOKU_E_INVAL (h is NULL). */
int kioku_hot_set_callbacks(kioku_hot *h, kioku_hot_notify_fn notify, kioku_hot_compact_fn compact,
                            void *ctx);

/* Waits for the next notice (one not returned by an earlier wait) and copies it to *out.
 * timeout_ms < 0 waits forever. Errors: KIOKU_E_INVAL, KIOKU_E_TIMEOUT. */
int kioku_hot_wait(kioku_hot *h, int32_t timeout_ms, kioku_hot_notice *out);

/* An eventfd (owned by the handle) that becomes readable with each notice; read 8 bytes from it
 * to reset it. Errors: KIOKU_E_INVAL. */
int kioku_hot_fd(const kioku_hot *h, int *fd_out);

/* Copies up to cap hot pages (count at the threshold or above, address order) to buf.
 * *n_out receives how many were copied; total_out (may be NULL) how many are hot.
 * buf may be NULL when cap is 0. Errors: KIOKU_E_INVAL. */
int kioku_hot_pages(kioku_hot *h, kioku_hot_page *buf, size_t cap, size_t *n_out,
                    size_t *total_out);

/* Runs one placement pass now on the calling thread (also when automatic placement is on);
 * out may be NULL. Errors: KIOKU_E_INVAL. */
int kioku_hot_place(kioku_hot *h, kioku_hot_report *out);

/* The handle's state. Errors: KIOKU_E_INVAL. */
int kioku_hot_status(const kioku_hot *h, kioku_hot_state *out);

/* Stops the handle's thread, restores every sampled page and frees the handle. Huge pages made
 * stay. NULL is accepted. Never fails. */
void kioku_hot_close(kioku_hot *h);

/* Maps len bytes (rounded up to 2 MiB) of memory backed by huge pages and populated, for
 * compaction to move hot objects to.
 *  kind: NULL or "thp-anon" (anonymous transparent huge pages), "thp-shmem" (a memfd in
 *        transparent huge pages), "hugetlb" (the pool reserved with vm.nr_hugepages).
 * *addr_out receives the first byte, len_out (may be NULL) the length. Free with
 * kioku_huge_unmap. Errors: KIOKU_E_INVAL, KIOKU_E_NO_HUGE_PAGES, KIOKU_E_IO. */
int kioku_huge_map(const char *kind, size_t len, void **addr_out, size_t *len_out);

/* Unmaps memory from kioku_huge_map, given its first byte. Errors: KIOKU_E_INVAL (not such
 * memory). */
int kioku_huge_unmap(void *addr);

#ifdef __cplusplus
}
#endif

#endif /* KIOKU_H */
