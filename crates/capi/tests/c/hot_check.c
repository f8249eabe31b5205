/*
 * The hot-page part of kioku.h from C: every kioku_hot_* and kioku_huge_* function bound to a
 * pointer of its declared type, the documented error codes, then a whole run — an arena of
 * four 2 MiB ranges in a memfd, one range hot as a whole and a few scattered hot objects in the
 * others, read by a thread through an object table — checked: the hot range is promoted, the
 * scattered objects are moved by the C compaction callback onto kioku_huge_map memory, notices
 * arrive by callback, eventfd and kioku_hot_wait, placement settles, every object is
 * byte-identical. Prints the layout of the structs for tests/c_hot.rs.
 *
 *   hot_check
 */
#define _GNU_SOURCE
#include <kioku.h>

#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static int (*const p_create)(const char *, uint32_t, uint32_t, kioku_hot **) = kioku_hot_create;
static int (*const p_policy_default)(kioku_hot_policy *) = kioku_hot_policy_default;
static int (*const p_set_policy)(kioku_hot *, const kioku_hot_policy *) = kioku_hot_set_policy;
static int (*const p_register)(kioku_hot *, void *, size_t, uint64_t) = kioku_hot_register;
static int (*const p_unregister)(kioku_hot *, void *) = kioku_hot_unregister;
static int (*const p_enable)(kioku_hot *) = kioku_hot_enable;
static int (*const p_disable)(kioku_hot *) = kioku_hot_disable;
static int (*const p_set_callbacks)(kioku_hot *, kioku_hot_notify_fn, kioku_hot_compact_fn,
                                    void *) = kioku_hot_set_callbacks;
static int (*const p_wait)(kioku_hot *, int32_t, kioku_hot_notice *) = kioku_hot_wait;
static int (*const p_fd)(const kioku_hot *, int *) = kioku_hot_fd;
static int (*const p_pages)(kioku_hot *, kioku_hot_page *, size_t, size_t *, size_t *) =
    kioku_hot_pages;
static int (*const p_place)(kioku_hot *, kioku_hot_report *) = kioku_hot_place;
static int (*const p_status)(const kioku_hot *, kioku_hot_state *) = kioku_hot_status;
static void (*const p_close)(kioku_hot *) = kioku_hot_close;
static int (*const p_huge_map)(const char *, size_t, void **, size_t *) = kioku_huge_map;
static int (*const p_huge_unmap)(void *) = kioku_huge_unmap;

static int failures;

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "hot_check.c:%d: CHECK(%s) failed; last error: %s\n", __LINE__,  \
                    #cond, kioku_last_error());                                              \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)

#define CHECK_ERR(call, want, needle)                                                        \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ != (want) || strstr(kioku_last_error(), (needle)) == NULL) {                 \
            fprintf(stderr, "hot_check.c:%d: %s returned %d (%s), wanted %d with \"%s\"\n",  \
                    __LINE__, #call, rc_, kioku_last_error(), (want), (needle));             \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)

#define LAYOUT(ty, f) printf("layout %s %s %zu %zu\n", #ty, #f, offsetof(ty, f), sizeof(((ty *)0)->f))

enum { PAGE = 4096, HUGE = 2 << 20, RANGES = 4, OBJECTS = RANGES * HUGE / PAGE };

static uintptr_t table[OBJECTS];   /* object -> address */
static int hot_object[OBJECTS];
static uintptr_t arena;
static volatile int stop;

static unsigned char pattern(size_t object, size_t byte) {
    return (unsigned char)(object * 131 + byte * 7 + 1);
}

static void *reader(void *arg) {
    volatile unsigned long sum = 0;
    (void)arg;
    while (!stop) {
        for (size_t o = 0; o < OBJECTS; o++) {
            if (hot_object[o]) {
                uintptr_t at = __atomic_load_n(&table[o], __ATOMIC_ACQUIRE);
                sum += *(volatile unsigned char *)at;
            }
        }
        usleep(1000);
    }
    return NULL;
}

struct ctx {
    int notices;
    int compactions;
    unsigned char *huge;
    size_t huge_len, used;
};

static void on_notice(void *c, const kioku_hot_notice *n) {
    struct ctx *ctx = c;
    (void)n;
    __atomic_fetch_add(&ctx->notices, 1, __ATOMIC_RELAXED);
}

/* Readers only read, so an object can be copied, then published at its new address. */
static int compact(void *c, uint64_t arena_id, const kioku_hot_page *pages, size_t n,
                   size_t allowance, uint8_t *moved) {
    struct ctx *ctx = c;
    if (arena_id != 42) return -1;
    __atomic_fetch_add(&ctx->compactions, 1, __ATOMIC_RELAXED);
    for (size_t i = 0; i < n && i < allowance; i++) {
        size_t object = (size_t)(pages[i].addr - arena) / PAGE;
        if (ctx->used + PAGE > ctx->huge_len) break;
        unsigned char *to = ctx->huge + ctx->used;
        memcpy(to, (void *)(uintptr_t)pages[i].addr, PAGE);
        __atomic_store_n(&table[object], (uintptr_t)to, __ATOMIC_RELEASE);
        ctx->used += PAGE;
        moved[i] = 1;
    }
    return 0;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    kioku_hot *h = NULL;
    kioku_hot_policy pol;
    kioku_hot_notice n;
    kioku_hot_state st;
    kioku_hot_report rep;
    size_t got, total;
    int fd = -1;

    LAYOUT(kioku_hot_page, addr); LAYOUT(kioku_hot_page, count); LAYOUT(kioku_hot_page, hits);
    LAYOUT(kioku_hot_page, seen); LAYOUT(kioku_hot_page, pad);
    printf("size kioku_hot_page %zu\n", sizeof(kioku_hot_page));
    LAYOUT(kioku_hot_notice, generation); LAYOUT(kioku_hot_notice, hot_pages);
    LAYOUT(kioku_hot_notice, new_hot); LAYOUT(kioku_hot_notice, promoted);
    LAYOUT(kioku_hot_notice, compacted); LAYOUT(kioku_hot_notice, settled);
    LAYOUT(kioku_hot_notice, pad);
    printf("size kioku_hot_notice %zu\n", sizeof(kioku_hot_notice));
    LAYOUT(kioku_hot_policy, promote_fraction); LAYOUT(kioku_hot_policy, max_fill);
    LAYOUT(kioku_hot_policy, min_observed); LAYOUT(kioku_hot_policy, budget);
    LAYOUT(kioku_hot_policy, revisit_ms); LAYOUT(kioku_hot_policy, demote_fraction);
    printf("size kioku_hot_policy %zu\n", sizeof(kioku_hot_policy));
    LAYOUT(kioku_hot_state, enabled); LAYOUT(kioku_hot_state, settled);
    LAYOUT(kioku_hot_state, hot_pages); LAYOUT(kioku_hot_state, promoted_ranges);
    LAYOUT(kioku_hot_state, huge_pages_used); LAYOUT(kioku_hot_state, tracked_pages);
    LAYOUT(kioku_hot_state, sample_pages); LAYOUT(kioku_hot_state, last_scan_ns);
    LAYOUT(kioku_hot_state, totals);
    printf("size kioku_hot_state %zu\n", sizeof(kioku_hot_state));
    printf("size kioku_hot_report %zu\n", sizeof(kioku_hot_report));

    /* Bad input: one clear code each, nothing created. */
    CHECK_ERR(p_create("soft-dirty", 0, 0, &h), KIOKU_E_INVAL, "unknown backend");
    CHECK(h == NULL);
    CHECK_ERR(p_create(NULL, 0, 300, &h), KIOKU_E_INVAL, "threshold");
    CHECK_ERR(p_policy_default(NULL), KIOKU_E_INVAL, "NULL");
    CHECK_ERR(p_huge_map("gigantic", HUGE, (void **)&got, NULL), KIOKU_E_INVAL, "kind");
    CHECK_ERR(p_huge_unmap(&got), KIOKU_E_INVAL, "kioku_huge_map");
    {
        /* More hugetlb memory than the pool holds (empty, or far too small). */
        void *a = NULL;
        CHECK_ERR(p_huge_map("hugetlb", (size_t)1 << 40, &a, NULL), KIOKU_E_NO_HUGE_PAGES,
                  "vm.nr_hugepages");
        CHECK(a == NULL);
    }

    CHECK(p_create("refault", 20, 2, &h) == KIOKU_OK);
    CHECK_ERR(p_wait(h, 10, &n), KIOKU_E_TIMEOUT, "no notice");
    CHECK_ERR(p_pages(h, NULL, 4, &got, NULL), KIOKU_E_INVAL, "buf is NULL");
    CHECK_ERR(p_register(h, NULL, PAGE, 1), KIOKU_E_INVAL, "NULL");
    {
        /* Private memory cannot be sampled by unmapping it. */
        void *priv = mmap(NULL, HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK_ERR(p_register(h, priv, HUGE, 1), KIOKU_E_TRACKER, "ProtNone");
        munmap(priv, HUGE);
    }
    CHECK(p_policy_default(&pol) == KIOKU_OK);
    CHECK(pol.promote_fraction == 0.25 && pol.budget == 0 && pol.min_observed == 128);
    pol.max_fill = 2.0;
    CHECK_ERR(p_set_policy(h, &pol), KIOKU_E_INVAL, "max_fill");
    pol.max_fill = 0.25;
    CHECK(p_set_policy(h, &pol) == KIOKU_OK);

    /* The arena: a memfd mapped 2 MiB-aligned, every object filled with its pattern. */
    int mfd = memfd_create("hot_check", MFD_CLOEXEC);
    CHECK(mfd >= 0 && ftruncate(mfd, RANGES * HUGE) == 0);
    unsigned char *raw = mmap(NULL, RANGES * HUGE + HUGE, PROT_NONE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    arena = ((uintptr_t)raw + HUGE - 1) & ~(uintptr_t)(HUGE - 1);
    CHECK(mmap((void *)arena, RANGES * HUGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, mfd,
               0) == (void *)arena);
    for (size_t o = 0; o < OBJECTS; o++) {
        table[o] = arena + o * PAGE;
        for (size_t b = 0; b < PAGE; b++) ((unsigned char *)table[o])[b] = pattern(o, b);
        /* Range 3 hot as a whole; one object in 64 elsewhere. */
        hot_object[o] = o >= 3 * (HUGE / PAGE) || o % 64 == 9;
    }

    struct ctx ctx = {0, 0, NULL, 0, 0};
    void *huge = NULL;
    CHECK(p_huge_map(NULL, HUGE, &huge, &ctx.huge_len) == KIOKU_OK && ctx.huge_len == HUGE);
    ctx.huge = huge;
    CHECK(p_register(h, (void *)arena, RANGES * HUGE, 42) == KIOKU_OK);
    CHECK_ERR(p_register(h, (void *)(arena + PAGE), PAGE, 43), KIOKU_E_INVAL, "overlaps");
    CHECK(p_set_callbacks(h, on_notice, compact, &ctx) == KIOKU_OK);
    CHECK(p_fd(h, &fd) == KIOKU_OK && fd >= 0);

    pthread_t th;
    CHECK(pthread_create(&th, NULL, reader, NULL) == 0);
    CHECK(p_enable(h) == KIOKU_OK);

    struct pollfd pfd = {fd, POLLIN, 0};
    CHECK(poll(&pfd, 1, 20000) == 1);
    int settled = 0;
    double t0 = now();
    while (!settled && now() - t0 < 60) {
        if (p_wait(h, 1000, &n) == KIOKU_OK && n.settled) settled = 1;
    }
    CHECK(settled);
    stop = 1;
    pthread_join(th, NULL);

    CHECK(p_status(h, &st) == KIOKU_OK);
    CHECK(st.settled == 1 && st.promoted_ranges == 1);
    CHECK(st.totals.compacted_pages == 3 * (HUGE / PAGE) / 64);
    CHECK(ctx.compactions >= 1);
    CHECK(__atomic_load_n(&ctx.notices, __ATOMIC_RELAXED) >= 2);
    for (size_t o = 0; o < OBJECTS; o++) {
        const unsigned char *at = (const unsigned char *)table[o];
        int same = 1;
        for (size_t b = 0; b < PAGE; b++) same &= at[b] == pattern(o, b);
        if (!same) fprintf(stderr, "object %zu changed\n", o);
        CHECK(same);
        if (o < 3 * (HUGE / PAGE) && hot_object[o])
            CHECK((unsigned char *)at >= ctx.huge && (unsigned char *)at < ctx.huge + HUGE);
        else
            CHECK(at == (const unsigned char *)(arena + o * PAGE));
    }
    CHECK(p_pages(h, NULL, 0, &got, &total) == KIOKU_OK && got == 0);
    CHECK(p_place(h, &rep) == KIOKU_OK && rep.promoted == 0);
    CHECK(p_disable(h) == KIOKU_OK);
    CHECK(p_unregister(h, (void *)arena) == KIOKU_OK);
    CHECK_ERR(p_unregister(h, (void *)arena), KIOKU_E_INVAL, "not part of a registered arena");
    p_close(h);
    p_close(NULL);
    CHECK(p_huge_unmap(huge) == KIOKU_OK);
    CHECK_ERR(p_huge_unmap(huge), KIOKU_E_INVAL, "kioku_huge_map");
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
