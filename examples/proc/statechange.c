/*
 * statechange — changes its kernel state between checkpoints and checks, every round, that it
 * still has the state it set last: a checkpoint that reused state read before the change (the
 * monitor reads some of it only after a call that changes it) restores the old state, which
 * the program reports (exit 3).
 *
 * Phase 1 (at start): SIGUSR1 handled by on_a, RLIMIT_NOFILE soft 512, no interval timer,
 *   descriptor 5 open on /dev/null, timer slack 50 µs.
 * Phase 2 (when the file "go2" appears in the working directory): SIGUSR1 handled by on_b
 *   with SA_ONSTACK, SIGUSR2 handled by on_b with SA_RESETHAND, RLIMIT_NOFILE soft 256,
 *   ITIMER_REAL armed for 1000 s, descriptor 5 closed and descriptor 7 a pipe's read end,
 *   a signal stack, timer slack 123456 ns.
 * Phase 3 (when "go3" appears): raises SIGUSR2 — its handler runs once and the kernel resets
 *   it to SIG_DFL (SA_RESETHAND): no system call changed the disposition.
 * Prints "phase N" when a phase is set and "ok N" every 20 rounds of 5 ms.
 *
 * Usage: statechange
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t got;
static char altstack[1 << 16];

static void on_a(int sig) { (void)sig; }
static void on_b(int sig) {
    (void)sig;
    got++;
}

static void fail(int phase, const char *what) {
    fprintf(stderr, "statechange: phase %d: %s lost\n", phase, what);
    exit(3);
}

static void handle(int sig, void (*h)(int), int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

static void nofile(rlim_t soft) {
    struct rlimit r;
    getrlimit(RLIMIT_NOFILE, &r);
    r.rlim_cur = soft;
    setrlimit(RLIMIT_NOFILE, &r);
}

static void check(int phase) {
    struct sigaction sa;
    sigaction(SIGUSR1, NULL, &sa);
    if (sa.sa_handler != (phase == 1 ? on_a : on_b) ||
        (phase > 1 && !(sa.sa_flags & SA_ONSTACK)))
        fail(phase, "SIGUSR1's disposition");
    sigaction(SIGUSR2, NULL, &sa);
    if (sa.sa_handler != (phase == 2 ? on_b : SIG_DFL))
        fail(phase, "SIGUSR2's disposition");
    struct rlimit r;
    getrlimit(RLIMIT_NOFILE, &r);
    if (r.rlim_cur != (phase == 1 ? 512 : 256))
        fail(phase, "RLIMIT_NOFILE");
    struct itimerval it;
    getitimer(ITIMER_REAL, &it);
    int armed = it.it_value.tv_sec != 0 || it.it_value.tv_usec != 0;
    if (armed != (phase > 1) || it.it_value.tv_sec > 1000)
        fail(phase, "ITIMER_REAL");
    struct stat st;
    int fd5 = fstat(5, &st) == 0;
    int fd7 = fstat(7, &st) == 0 && S_ISFIFO(st.st_mode);
    if (fd5 != (phase == 1) || fd7 != (phase > 1))
        fail(phase, "the descriptor table");
    stack_t ss;
    sigaltstack(NULL, &ss);
    if ((phase > 1) != (ss.ss_sp == altstack && !(ss.ss_flags & SS_DISABLE)))
        fail(phase, "the signal stack");
    if (prctl(PR_GET_TIMERSLACK) != (phase == 1 ? 50000 : 123456))
        fail(phase, "the timer slack");
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    handle(SIGUSR1, on_a, 0);
    nofile(512);
    int null = open("/dev/null", O_RDONLY);
    if (null < 0 || dup2(null, 5) < 0)
        return 1;
    close(null);
    prctl(PR_SET_TIMERSLACK, 50000);
    int phase = 1;
    printf("phase 1\n");
    struct timespec nap = {0, 5 * 1000 * 1000};
    for (long round = 1;; round++) {
        if (phase == 1 && access("go2", F_OK) == 0) {
            handle(SIGUSR1, on_b, SA_ONSTACK);
            handle(SIGUSR2, on_b, SA_RESETHAND);
            nofile(256);
            struct itimerval it = {{0, 0}, {1000, 0}};
            setitimer(ITIMER_REAL, &it, NULL);
            close(5);
            int p[2];
            if (pipe(p) != 0 || dup2(p[0], 7) < 0 || dup2(p[1], 8) < 0)
                return 1;
            close(p[0]);
            close(p[1]);
            stack_t ss = {.ss_sp = altstack, .ss_flags = 0, .ss_size = sizeof altstack};
            sigaltstack(&ss, NULL);
            prctl(PR_SET_TIMERSLACK, 123456);
            phase = 2;
            printf("phase 2\n");
        }
        if (phase == 2 && access("go3", F_OK) == 0) {
            raise(SIGUSR2);
            if (got != 1)
                fail(3, "SIGUSR2's handler");
            phase = 3;
            printf("phase 3\n");
        }
        check(phase);
        if (round % 20 == 0)
            printf("ok %d\n", phase);
        nanosleep(&nap, NULL);
    }
}
