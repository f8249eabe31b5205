/*
 * signals — checks that signal state survives a checkpoint and restore: a SIGUSR1 handler
 * (SA_RESTART, with SIGUSR2 in its mask) counts the signals it gets, SIGUSR2 stays blocked
 * and SIGHUP ignored, and each round raises SIGUSR1 and reads the clock through the vdso.
 * Every round verifies dispositions and mask and prints the count; a lost handler kills the
 * program (default action of SIGUSR1), a lost mask or ignore is reported and exits 3.
 *
 * Usage: signals [ROUNDS]
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t got;

static void on_usr1(int sig) {
    (void)sig;
    got++;
}

static void check(int round) {
    struct sigaction sa;
    sigaction(SIGUSR1, NULL, &sa);
    if (sa.sa_handler != on_usr1 || !(sa.sa_flags & SA_RESTART) || !sigismember(&sa.sa_mask, SIGUSR2)) {
        fprintf(stderr, "signals: round %d: SIGUSR1 disposition lost\n", round);
        exit(3);
    }
    sigaction(SIGHUP, NULL, &sa);
    if (sa.sa_handler != SIG_IGN) {
        fprintf(stderr, "signals: round %d: SIGHUP no longer ignored\n", round);
        exit(3);
    }
    sigset_t now;
    sigprocmask(SIG_BLOCK, NULL, &now);
    if (!sigismember(&now, SIGUSR2) || sigismember(&now, SIGUSR1)) {
        fprintf(stderr, "signals: round %d: signal mask lost\n", round);
        exit(3);
    }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 200;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR2);
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGHUP, SIG_IGN);
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR2);
    sigprocmask(SIG_BLOCK, &block, NULL);
    uint64_t x = 1;
    for (int r = 0; r < rounds; r++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int k = 0; k < 2000000; k++) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        raise(SIGUSR1);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (t1.tv_sec < t0.tv_sec) {
            fprintf(stderr, "signals: the clock went backwards\n");
            return 3;
        }
        check(r);
        if (r % 20 == 19) {
            printf("round %d handled %d value %016llx\n", r, (int)got, (unsigned long long)x);
            fflush(stdout);
        }
    }
    printf("done: %d signals handled\n", (int)got);
    return got == rounds ? 0 : 4;
}
