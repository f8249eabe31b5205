/*
 * evloop — one epoll event loop over the kernel objects event-driven programs use, as an
 * ordinary program (no kioku library): a periodic timerfd, an eventfd written by a second
 * thread, a signalfd receiving SIGUSR1 from a periodic POSIX timer (timer_create,
 * SIGEV_SIGNAL), a self-pipe written by a SIGALRM handler (setitimer ITIMER_REAL) that runs on
 * a sigaltstack, and inotify on a scratch directory the loop itself writes into. It also lowers
 * RLIMIT_NOFILE's soft limit to a value of its own and checks it stays so.
 *
 * Usage: evloop DIR ROUNDS      (writes DIR/scratch/f0..f3; ~1 ms per round)
 *
 * The output does not depend on timing: sources produce *credits* at their own pace (timer
 * expirations, eventfd counts, signals, bytes, inotify events), and the loop consumes them in a
 * fixed order, one credit of source (step % 5) per step, waiting for that source when it has
 * none. A line per 100 rounds prints the step count and a hash of what was consumed; before it
 * the loop checks that every object still behaves as set up (timer intervals, the POSIX timer's
 * id in each signal, the alternate signal stack, the rlimit, the epoll data), and exits 3 naming
 * what changed. A source silent for 10 s (lost at a restore) ends it with exit 4.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

enum { SRC_TIMERFD, SRC_EVENTFD, SRC_SIGNALFD, SRC_PIPE, SRC_INOTIFY, NSRC };
static const char *const SRC_NAME[NSRC] = {"timerfd", "eventfd", "signalfd", "self-pipe",
                                           "inotify"};
#define TAG 0x6b696f6b75000000ULL /* epoll data: TAG + source */
#define PERIOD_NS 1000000L        /* every periodic source: 1 ms */
#define NOFILE_SOFT 4000          /* the soft RLIMIT_NOFILE this program sets */
#define HIGH_FD 3900              /* a descriptor number only that limit allows */
#define TIMER_VALUE 42            /* sigev_value of the POSIX timer */
#define ROUNDS_PER_LINE 100

static int pipe_w;
static char *altstack;
static size_t altstack_size;
static volatile sig_atomic_t handler_off_altstack;
static atomic_int stop_writer;

static void fail(int code, const char *what) {
    fprintf(stderr, "evloop: %s\n", what);
    exit(code);
}

static void die(const char *what) {
    fprintf(stderr, "evloop: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* SIGALRM: one byte into the self-pipe; it must run on the alternate stack. */
static void on_alarm(int sig) {
    (void)sig;
    int saved = errno;
    char probe = 'A';
    uintptr_t at = (uintptr_t)&probe;
    if (at < (uintptr_t)altstack || at >= (uintptr_t)altstack + altstack_size)
        handler_off_altstack = 1;
    ssize_t r = write(pipe_w, &probe, 1); /* full pipe: credits enough already */
    (void)r;
    errno = saved;
}

/* The second thread: adds 1 to the eventfd every millisecond. */
static void *writer(void *arg) {
    int efd = *(int *)arg;
    struct timespec ts = {0, PERIOD_NS};
    while (!atomic_load(&stop_writer)) {
        uint64_t one = 1;
        if (write(efd, &one, sizeof one) != sizeof one && errno != EAGAIN) die("eventfd write");
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        ts.tv_nsec = PERIOD_NS;
    }
    return NULL;
}

static uint64_t fnv(uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; i++) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ULL;
    return h;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

struct loop {
    int ep, tfd, efd, sfd, pipe_r, ifd, dirfd;
    timer_t timer;
    uint64_t credits[NSRC];
    char last_name[32];
};

static void write_scratch(struct loop *l, long step) {
    char name[16], text[64];
    snprintf(name, sizeof name, "f%ld", (step / NSRC) % 4);
    int fd = openat(l->dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) die("open scratch file");
    int n = snprintf(text, sizeof text, "step %ld\n", step);
    if (write(fd, text, (size_t)n) != n) die("write scratch file");
    if (close(fd) != 0) die("close scratch file");
}

/* Reads what source `src` has ready and adds its credits. */
static void take(struct loop *l, int src) {
    switch (src) {
    case SRC_TIMERFD: {
        uint64_t n;
        if (read(l->tfd, &n, sizeof n) == sizeof n) l->credits[src] += n;
        else if (errno != EAGAIN) die("timerfd read");
        break;
    }
    case SRC_EVENTFD: {
        uint64_t n;
        if (read(l->efd, &n, sizeof n) == sizeof n) l->credits[src] += n;
        else if (errno != EAGAIN) die("eventfd read");
        break;
    }
    case SRC_SIGNALFD: {
        struct signalfd_siginfo si;
        if (read(l->sfd, &si, sizeof si) != sizeof si) {
            if (errno != EAGAIN) die("signalfd read");
            break;
        }
        if (si.ssi_signo != SIGUSR1 || si.ssi_code != SI_TIMER)
            fail(3, "signalfd delivered something else than the POSIX timer's SIGUSR1");
        if (si.ssi_int != TIMER_VALUE) fail(3, "the POSIX timer's sigev_value changed");
        if ((timer_t)(intptr_t)si.ssi_tid != l->timer)
            fail(3, "the POSIX timer's id changed (ssi_tid differs from timer_create's)");
        l->credits[src] += 1 + si.ssi_overrun;
        break;
    }
    case SRC_PIPE: {
        char buf[256];
        ssize_t n = read(l->pipe_r, buf, sizeof buf);
        if (n < 0 && errno != EAGAIN) die("self-pipe read");
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] != 'A') fail(3, "the self-pipe holds a byte nobody wrote");
        if (n > 0) l->credits[src] += (uint64_t)n;
        break;
    }
    case SRC_INOTIFY: {
        char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
        ssize_t n = read(l->ifd, buf, sizeof buf);
        if (n < 0 && errno != EAGAIN) die("inotify read");
        for (ssize_t off = 0; off < n;) {
            struct inotify_event *ev = (struct inotify_event *)(buf + off);
            if (!(ev->mask & IN_CLOSE_WRITE) || ev->len == 0)
                fail(3, "inotify reported an event that was not asked for");
            snprintf(l->last_name, sizeof l->last_name, "%s", ev->name);
            l->credits[src]++;
            off += (ssize_t)(sizeof *ev + ev->len);
        }
        break;
    }
    }
}

static void check_interval(const struct itimerspec *it, const char *what) {
    if (it->it_interval.tv_sec != 0 || it->it_interval.tv_nsec != PERIOD_NS) {
        char msg[128];
        snprintf(msg, sizeof msg, "the %s is no longer periodic every 1 ms", what);
        fail(3, msg);
    }
}

/* Everything set up at the start must still be as it was. */
static void check_state(struct loop *l) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) die("getrlimit");
    if (rl.rlim_cur != NOFILE_SOFT) {
        char msg[128];
        snprintf(msg, sizeof msg, "RLIMIT_NOFILE soft limit is %llu, the program set %d",
                 (unsigned long long)rl.rlim_cur, NOFILE_SOFT);
        fail(3, msg);
    }
    if (dup2(l->ep, HIGH_FD) != HIGH_FD) die("dup2 to a descriptor the raised limit allows");
    close(HIGH_FD);
    if (handler_off_altstack) fail(3, "the SIGALRM handler ran off the alternate signal stack");
    stack_t ss;
    if (sigaltstack(NULL, &ss) != 0) die("sigaltstack");
    if (ss.ss_sp != altstack || ss.ss_size != altstack_size || (ss.ss_flags & SS_DISABLE))
        fail(3, "the alternate signal stack changed");
    struct itimerspec it;
    if (timerfd_gettime(l->tfd, &it) != 0) die("timerfd_gettime");
    check_interval(&it, "timerfd");
    if (timer_gettime(l->timer, &it) != 0) die("timer_gettime");
    check_interval(&it, "POSIX timer");
    struct itimerval iv;
    if (getitimer(ITIMER_REAL, &iv) != 0) die("getitimer");
    if (iv.it_interval.tv_sec != 0 || iv.it_interval.tv_usec != PERIOD_NS / 1000)
        fail(3, "ITIMER_REAL is no longer periodic every 1 ms");
    int fl = fcntl(l->efd, F_GETFL);
    if (fl < 0 || !(fl & O_NONBLOCK)) fail(3, "the eventfd lost O_NONBLOCK");
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, NULL, &mask);
    if (!sigismember(&mask, SIGUSR1)) fail(3, "SIGUSR1 is no longer blocked");
}

static void add(int ep, int fd, int src) {
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG + (uint64_t)src};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll_ctl");
}

static void setup(struct loop *l, const char *dir) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) die("getrlimit");
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < NOFILE_SOFT)
        fail(2, "the hard RLIMIT_NOFILE is below 4000 (ulimit -Hn)");
    rl.rlim_cur = NOFILE_SOFT;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) die("setrlimit");

    char path[4096];
    snprintf(path, sizeof path, "%s/scratch", dir);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) die("mkdir scratch");
    l->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (l->dirfd < 0) die("open scratch");

    l->ep = epoll_create1(EPOLL_CLOEXEC);
    if (l->ep < 0) die("epoll_create1");

    l->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (l->tfd < 0) die("timerfd_create");
    struct itimerspec it = {{0, PERIOD_NS}, {0, PERIOD_NS}};
    if (timerfd_settime(l->tfd, 0, &it, NULL) != 0) die("timerfd_settime");
    add(l->ep, l->tfd, SRC_TIMERFD);

    l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (l->efd < 0) die("eventfd");
    add(l->ep, l->efd, SRC_EVENTFD);

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGUSR1);
    if (pthread_sigmask(SIG_BLOCK, &mask, NULL) != 0) die("pthread_sigmask");
    l->sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (l->sfd < 0) die("signalfd");
    add(l->ep, l->sfd, SRC_SIGNALFD);
    struct sigevent sev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGUSR1};
    sev.sigev_value.sival_int = TIMER_VALUE;
    if (timer_create(CLOCK_MONOTONIC, &sev, &l->timer) != 0) die("timer_create");
    if (timer_settime(l->timer, 0, &it, NULL) != 0) die("timer_settime");

    int p[2];
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) die("pipe2");
    l->pipe_r = p[0];
    pipe_w = p[1];
    add(l->ep, l->pipe_r, SRC_PIPE);

    l->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (l->ifd < 0) die("inotify_init1");
    if (inotify_add_watch(l->ifd, path, IN_CLOSE_WRITE) < 0) die("inotify_add_watch");
    add(l->ep, l->ifd, SRC_INOTIFY);

    altstack_size = 64 * 1024;
    altstack = malloc(altstack_size);
    if (!altstack) die("malloc");
    stack_t ss = {.ss_sp = altstack, .ss_size = altstack_size};
    if (sigaltstack(&ss, NULL) != 0) die("sigaltstack");
    struct sigaction sa = {.sa_handler = on_alarm, .sa_flags = SA_ONSTACK | SA_RESTART};
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL) != 0) die("sigaction");
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: evloop DIR ROUNDS\n");
        return 2;
    }
    long rounds = atol(argv[2]);
    struct loop l = {0};
    setup(&l, argv[1]);

    /* The writer thread blocks SIGALRM (the handler's alternate stack is the main thread's)
     * and, like every thread, SIGUSR1 (it goes to the signalfd). */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    pthread_t th;
    if (pthread_create(&th, NULL, writer, &l.efd) != 0) die("pthread_create");
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    struct itimerval iv = {{0, PERIOD_NS / 1000}, {0, PERIOD_NS / 1000}};
    if (setitimer(ITIMER_REAL, &iv, NULL) != 0) die("setitimer");

    printf("evloop: %ld rounds of %d sources\n", rounds, NSRC);
    fflush(stdout);
    uint64_t h = 1469598103934665603ULL;
    int inotify_pending = 0;
    double waiting_since = now_s();
    for (long step = 0; step < rounds * NSRC; step++) {
        int need = (int)(step % NSRC);
        if (need == SRC_INOTIFY && l.credits[need] == 0 && !inotify_pending) {
            write_scratch(&l, step);
            inotify_pending = 1;
        }
        while (l.credits[need] == 0) {
            struct epoll_event ev[8];
            int n = epoll_wait(l.ep, ev, 8, 100);
            if (n < 0 && errno != EINTR) die("epoll_wait");
            for (int i = 0; i < n; i++) {
                uint64_t src = ev[i].data.u64 - TAG;
                if (src >= NSRC || ev[i].events != EPOLLIN)
                    fail(3, "epoll reported an event with data or flags never registered");
                take(&l, (int)src);
            }
            if (l.credits[need] == 0 && now_s() - waiting_since > 10.0) {
                char msg[128];
                snprintf(msg, sizeof msg, "no %s event for 10 s (step %ld)", SRC_NAME[need],
                         step);
                fail(4, msg);
            }
        }
        l.credits[need]--;
        if (need == SRC_INOTIFY) {
            inotify_pending = 0;
            h = fnv(h, (uint64_t)l.last_name[1]);
        }
        h = fnv(h, (uint64_t)step * NSRC + (uint64_t)need);
        waiting_since = now_s();
        if ((step + 1) % (NSRC * ROUNDS_PER_LINE) == 0) {
            check_state(&l);
            printf("round %ld fnv %016llx\n", (step + 1) / NSRC, (unsigned long long)h);
            fflush(stdout);
        }
    }
    check_state(&l);
    atomic_store(&stop_writer, 1);
    pthread_join(th, NULL);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    timer_delete(l.timer);
    printf("done: %ld steps, fnv %016llx\n", rounds * NSRC, (unsigned long long)h);
    return 0;
}
