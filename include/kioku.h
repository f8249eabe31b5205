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

#ifdef __cplusplus
}
#endif

#endif /* KIOKU_H */
