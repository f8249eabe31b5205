/*
 * pgroup — a process group that outlives its leader, as a shell's pipeline does when its first
 * command ends before the others: the parent forks L, which leads group G (setpgid), and M,
 * which joins G; L exits and the parent reaps it; M lives on in G, whose leader is gone.
 *
 * Each round the parent checks that M is still in G (getpgid) and M checks it of itself (a
 * difference ends it with exit code 3, which the parent then reports); the parent prints
 * "ok ROUND". At the end it stops M and prints how M ended.
 *
 * Usage: pgroup ROUNDS
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what) {
    fprintf(stderr, "pgroup[%d]: %s: %s\n", (int)getpid(), what, strerror(errno));
    exit(1);
}

static void fail(const char *what) {
    fprintf(stderr, "pgroup[%d]: %s\n", (int)getpid(), what);
    exit(3);
}

static void nap(void) {
    struct timespec t = {0, 5 * 1000000L};
    nanosleep(&t, NULL);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: pgroup ROUNDS\n");
        return 2;
    }
    long rounds = atol(argv[1]);
    setvbuf(stdout, NULL, _IOLBF, 0);

    pid_t leader = fork();
    if (leader < 0) die("fork");
    if (leader == 0) {
        if (setpgid(0, 0) != 0) die("setpgid leader");
        pause(); /* until the parent lets it go */
        _exit(0);
    }
    if (setpgid(leader, leader) != 0 && errno != EACCES) die("setpgid(leader)");

    pid_t member = fork();
    if (member < 0) die("fork");
    if (member == 0) {
        if (setpgid(0, leader) != 0) die("setpgid member");
        for (;;) {
            if (getpgid(0) != leader) fail("the member left its group");
            nap();
        }
    }
    if (setpgid(member, leader) != 0 && errno != EACCES) die("setpgid(member)");

    /* The leader ends; its group lives on in the member. */
    if (kill(leader, SIGTERM) != 0) die("kill leader");
    int st;
    if (waitpid(leader, &st, 0) != leader) die("waitpid leader");
    printf("leader ended, member in group %d\n", (int)getpgid(member) == (int)leader ? 1 : 0);

    for (long r = 0; r < rounds; r++) {
        if (getpgid(member) != leader) fail("the member is not in the leader's group");
        if (waitpid(member, &st, WNOHANG) != 0) fail("the member ended");
        printf("ok %ld\n", r);
        nap();
    }
    kill(member, SIGKILL);
    if (waitpid(member, &st, 0) != member) die("waitpid member");
    printf("done: member %s\n", WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? "stopped" : "failed");
    return 0;
}
