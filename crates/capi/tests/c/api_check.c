/*
 * The C API from C: every function of kioku.h bound to a pointer of its declared type (so the
 * header compiles and every declared symbol links), then the behaviour kioku.h promises —
 * codes, kioku_last_error, out-parameters, metadata truncation, recovery — checked call by
 * call. Prints the layout of the header's structs for tests/c_api.rs to compare with Rust.
 *
 *   api_check DIR     (an empty directory for the pools it makes)
 */
#include <kioku.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each function with the type kioku.h declares: a mismatch fails to compile (-Werror), a
 * missing symbol fails to link. */
static uint32_t (*const p_api_version)(void) = kioku_api_version;
static const char *(*const p_version)(void) = kioku_version;
static const char *(*const p_strerror)(int) = kioku_strerror;
static const char *(*const p_last_error)(void) = kioku_last_error;
static int (*const p_create)(const char *, const char *, kioku_engine **) = kioku_create;
static int (*const p_recover)(const char *, const char *, kioku_engine **, uint64_t *, void *,
                              size_t, size_t *) = kioku_recover;
static int (*const p_recover_ex)(const char *, const char *, uint32_t, kioku_engine **,
                                 kioku_recovery *, void *, size_t) = kioku_recover_ex;
static void (*const p_close)(kioku_engine *) = kioku_close;
static int (*const p_region_create)(kioku_engine *, const char *, size_t, void *, size_t,
                                    void **) = kioku_region_create;
static int (*const p_region_lookup)(kioku_engine *, const char *, void **, size_t *) =
    kioku_region_lookup;
static int (*const p_region_resize)(kioku_engine *, const char *, size_t) = kioku_region_resize;
static int (*const p_region_delete)(kioku_engine *, const char *) = kioku_region_delete;
static size_t (*const p_region_count)(const kioku_engine *) = kioku_region_count;
static int (*const p_region_at)(const kioku_engine *, size_t, char *, size_t, void **,
                                size_t *) = kioku_region_at;
static int (*const p_checkpoint)(kioku_engine *, const void *, size_t, uint64_t *) =
    kioku_checkpoint;
static int (*const p_checkpoint_ex)(kioku_engine *, const void *, size_t,
                                    kioku_checkpoint_stats *) = kioku_checkpoint_ex;
static uint64_t (*const p_epoch)(const kioku_engine *) = kioku_epoch;
static int (*const p_metadata)(const kioku_engine *, void *, size_t, size_t *) = kioku_metadata;

static int failures;

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "api_check.c:%d: CHECK(%s) failed; last error: %s\n", __LINE__,  \
                    #cond, kioku_last_error());                                              \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)

/* rc is `want` and the thread's last error mentions `needle`. */
#define CHECK_ERR(call, want, needle)                                                        \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ != (want) || strstr(kioku_last_error(), (needle)) == NULL) {                 \
            fprintf(stderr, "api_check.c:%d: %s returned %d (%s), wanted %d (%s) with "     \
                            "\"%s\"; last error: %s\n",                                     \
                    __LINE__, #call, rc_, kioku_strerror(rc_), (want), kioku_strerror(want), \
                    (needle), kioku_last_error());                                           \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)

#define LAYOUT(type, field)                                                                  \
    printf("layout %s %s %zu %zu\n", #type, #field, offsetof(type, field),                  \
           sizeof(((type *)0)->field))

static char *join(const char *dir, const char *name) {
    static char buf[8][4096];
    static int next;
    char *b = buf[next++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", dir, name);
    return b;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: api_check DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    char *pool = join(dir, "a.pool");
    kioku_engine *e = NULL, *e2 = NULL;
    void *p = NULL;
    size_t len = 0;
    uint64_t epoch = 99;

    /* Library. */
    CHECK(p_api_version() == KIOKU_API_VERSION);
    CHECK(strlen(p_version()) > 0);
    CHECK(strcmp(p_last_error(), "") == 0);
    CHECK(strcmp(p_strerror(KIOKU_OK), "success") == 0);
    CHECK(strcmp(p_strerror(KIOKU_E_NO_REGION), "no such region") == 0);
    CHECK(strcmp(p_strerror(12345), "unknown error code") == 0);
    CHECK(strcmp(p_strerror(KIOKU_E_INTERNAL), p_strerror(KIOKU_E_STATE)) != 0);

    /* Bad arguments: KIOKU_E_INVAL, nothing written. */
    CHECK_ERR(p_create(NULL, NULL, &e), KIOKU_E_INVAL, "path is NULL");
    CHECK_ERR(p_create("", NULL, &e), KIOKU_E_INVAL, "path is empty");
    CHECK_ERR(p_create(pool, NULL, NULL), KIOKU_E_INVAL, "out is NULL");
    CHECK_ERR(p_create(pool, "floppy", &e), KIOKU_E_INVAL, "floppy");
    CHECK(e == NULL);
    CHECK_ERR(p_recover(pool, NULL, &e, NULL, &epoch, sizeof epoch, NULL), KIOKU_E_INVAL,
              "meta_len_out is NULL");
    CHECK_ERR(p_region_create(NULL, "x", 1, NULL, 0, &p), KIOKU_E_INVAL, "handle is NULL");
    CHECK_ERR(p_checkpoint(NULL, NULL, 0, NULL), KIOKU_E_INVAL, "handle is NULL");
    CHECK(p_epoch(NULL) == 0);
    CHECK(p_region_count(NULL) == 0);
    p_close(NULL);

    /* Pools that are not there, or not pools. */
    CHECK_ERR(p_recover(join(dir, "missing.pool"), NULL, &e, NULL, NULL, 0, NULL),
              KIOKU_E_NOT_FOUND, "missing.pool");
    {
        char *junk = join(dir, "junk");
        FILE *f = fopen(junk, "w");
        for (int i = 0; i < 8192; i++)
            fputs("junkjunk", f);
        fclose(f);
        CHECK_ERR(p_recover(junk, NULL, &e, NULL, NULL, 0, NULL), KIOKU_E_NOT_A_POOL,
                  "not a kioku pool");
        CHECK_ERR(p_create(junk, NULL, &e), KIOKU_E_EXISTS, "already exists");
    }
    CHECK(e == NULL);

    /* A pool with regions. */
    CHECK(p_create(pool, "file", &e) == KIOKU_OK);
    if (e == NULL) {
        fprintf(stderr, "cannot go on without a pool\n");
        return 1;
    }
    CHECK(p_epoch(e) == 0);
    CHECK_ERR(p_create(pool, NULL, &e2), KIOKU_E_EXISTS, "a.pool");
    CHECK_ERR(p_recover(pool, "file", &e2, NULL, NULL, 0, NULL), KIOKU_E_BUSY, "in use");
    CHECK(e2 == NULL);

    char *a = NULL;
    CHECK(p_region_create(e, "a", 10000, NULL, 0, (void **)&a) == KIOKU_OK);
    CHECK(a != NULL);
    CHECK(p_region_lookup(e, "a", &p, &len) == KIOKU_OK);
    CHECK(p == a && len == 12288); /* rounded up to 4 KiB pages */
    for (size_t i = 0; i < len; i++)
        CHECK(a[i] == 0);
    memset(a, 'A', len);
    CHECK(p_region_create(e, "b", 4096, NULL, 8192, NULL) == KIOKU_OK);
    CHECK(p_region_lookup(e, "b", NULL, NULL) == KIOKU_OK);

    /* Refusals that leave the handle usable. */
    CHECK_ERR(p_region_create(e, "a", 1, NULL, 0, &p), KIOKU_E_REGION_EXISTS, "'a'");
    CHECK_ERR(p_region_create(e, "", 1, NULL, 0, &p), KIOKU_E_INVAL, "invalid");
    CHECK_ERR(p_region_create(e, "0123456789012345678901234567890123456789012345678901234567890123",
                              1, NULL, 0, &p),
              KIOKU_E_INVAL, "1 to 63 bytes");
    CHECK_ERR(p_region_create(e, "c", 1, (void *)0x12345, 0, &p), KIOKU_E_INVAL,
              "not page-aligned");
    CHECK_ERR(p_region_create(e, "c", 4096, a, 0, &p), KIOKU_E_ADDRESS_TAKEN, "is taken");
    CHECK_ERR(p_region_create(e, NULL, 1, NULL, 0, &p), KIOKU_E_INVAL, "region name is NULL");
    CHECK_ERR(p_region_create(e, "c", (size_t)-1, NULL, 0, &p), KIOKU_E_INVAL, "2^56");
    CHECK_ERR(p_region_create(e, "c", 1, NULL, (size_t)-1, &p), KIOKU_E_INVAL, "reserve");
    CHECK_ERR(p_region_resize(e, "a", (size_t)-4095), KIOKU_E_INVAL, "new_len");
    CHECK_ERR(p_region_lookup(e, "zz", &p, &len), KIOKU_E_NO_REGION, "'zz'");
    CHECK_ERR(p_region_resize(e, "b", 3 * 4096), KIOKU_E_RESERVATION, "reservation");
    CHECK_ERR(p_region_delete(e, "zz"), KIOKU_E_NO_REGION, "zz");
    CHECK_ERR(p_checkpoint(e, NULL, 3, &epoch), KIOKU_E_INVAL, "metadata is NULL");
    CHECK(p == a && len == 12288); /* untouched by the failures */

    /* Enumeration. */
    CHECK(p_region_count(e) == 2);
    {
        char name[KIOKU_REGION_NAME_MAX + 1];
        int seen_a = 0, seen_b = 0;
        for (size_t i = 0; i < 2; i++) {
            CHECK(p_region_at(e, i, name, sizeof name, &p, &len) == KIOKU_OK);
            seen_a += strcmp(name, "a") == 0 && p == a && len == 12288;
            seen_b += strcmp(name, "b") == 0 && len == 4096;
        }
        CHECK(seen_a == 1 && seen_b == 1);
        CHECK_ERR(p_region_at(e, 2, name, sizeof name, &p, &len), KIOKU_E_NO_REGION,
                  "there are 2");
        CHECK_ERR(p_region_at(e, 0, name, 1, NULL, NULL), KIOKU_E_RANGE, "needs 2 bytes");
    }

    /* Checkpoints. */
    CHECK(p_checkpoint(e, "hello world", 11, &epoch) == KIOKU_OK);
    CHECK(epoch == 1 && p_epoch(e) == 1);
    CHECK(p_region_resize(e, "a", 5 * 4096) == KIOKU_OK);
    CHECK(p_region_lookup(e, "a", &p, &len) == KIOKU_OK && p == a && len == 5 * 4096);
    CHECK(a[4 * 4096] == 0);
    a[4 * 4096] = 'Z';
    kioku_checkpoint_stats st;
    memset(&st, 0xff, sizeof st);
    CHECK(p_checkpoint_ex(e, "second", 6, &st) == KIOKU_OK);
    CHECK(st.epoch == 2 && st.dirty_pages >= 1 && st.dirty_bytes == st.dirty_pages * 4096);
    CHECK(st.total_ns >= st.persist_ns && st.total_ns > 0);
    {
        char m[16];
        size_t n = 0;
        CHECK_ERR(p_metadata(e, m, 3, &n), KIOKU_E_RANGE, "6 bytes");
        CHECK(n == 6);
        CHECK(p_metadata(e, m, sizeof m, &n) == KIOKU_OK && n == 6 && memcmp(m, "second", 6) == 0);
    }
    /* After the last checkpoint: b is deleted and a written; neither survives a crash. */
    CHECK(p_region_delete(e, "b") == KIOKU_OK);
    CHECK_ERR(p_region_lookup(e, "b", &p, &len), KIOKU_E_NO_REGION, "'b'");
    a[0] = 'X';
    p_close(e);
    e = NULL;

    /* Recovery, with a metadata buffer too small: truncated, full length reported. */
    {
        char m[4] = {0};
        size_t n = 0;
        CHECK(p_recover(pool, NULL, &e, &epoch, m, sizeof m, &n) == KIOKU_OK);
        CHECK(e != NULL && epoch == 2 && n == 6 && memcmp(m, "seco", 4) == 0);
        char full[8];
        CHECK(p_metadata(e, full, sizeof full, &n) == KIOKU_OK && memcmp(full, "second", 6) == 0);
    }
    CHECK(p_region_lookup(e, "a", &p, &len) == KIOKU_OK);
    CHECK(p == a && len == 5 * 4096); /* same address as before */
    CHECK(a[0] == 'A' && a[12287] == 'A' && a[4 * 4096] == 'Z' && a[4 * 4096 + 1] == 0);
    CHECK(p_region_lookup(e, "b", NULL, &len) == KIOKU_OK && len == 4096);
    CHECK(p_epoch(e) == 2);
    p_close(e);
    e = NULL;

    /* kioku_recover_ex: flags and report. */
    CHECK_ERR(p_recover_ex(pool, NULL, 0x80, &e, NULL, NULL, 0), KIOKU_E_INVAL, "flags");
    CHECK_ERR(p_recover_ex(pool, NULL, 0, &e, NULL, &epoch, sizeof epoch), KIOKU_E_INVAL,
              "info_out is NULL");
    {
        kioku_recovery info;
        char m[16];
        memset(&info, 0xff, sizeof info);
        CHECK(p_recover_ex(pool, "file", KIOKU_RECOVER_ALLOW_ROLLBACK, &e, &info, m, sizeof m) ==
              KIOKU_OK);
        CHECK(info.epoch == 2 && info.meta_len == 6 && memcmp(m, "second", 6) == 0);
        CHECK(info.used_copy == 0 && info.source_ctx <= 1 && info.time_ns > 0);
        CHECK(p_checkpoint(e, NULL, 0, &epoch) == KIOKU_OK && epoch == 3);
        size_t n = 99;
        CHECK(p_metadata(e, NULL, 0, &n) == KIOKU_OK && n == 0);
        p_close(e);
    }

    /* Struct layouts, for the Rust side to compare. */
    LAYOUT(kioku_checkpoint_stats, epoch);
    LAYOUT(kioku_checkpoint_stats, dirty_pages);
    LAYOUT(kioku_checkpoint_stats, dirty_bytes);
    LAYOUT(kioku_checkpoint_stats, scan_ns);
    LAYOUT(kioku_checkpoint_stats, persist_ns);
    LAYOUT(kioku_checkpoint_stats, sync_ns);
    LAYOUT(kioku_checkpoint_stats, total_ns);
    LAYOUT(kioku_recovery, epoch);
    LAYOUT(kioku_recovery, time_ns);
    LAYOUT(kioku_recovery, meta_len);
    LAYOUT(kioku_recovery, pages_synced);
    LAYOUT(kioku_recovery, source_ctx);
    LAYOUT(kioku_recovery, used_copy);
    printf("size kioku_checkpoint_stats %zu\n", sizeof(kioku_checkpoint_stats));
    printf("size kioku_recovery %zu\n", sizeof(kioku_recovery));

    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
