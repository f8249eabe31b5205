/*
 * tree — a process tree, as an ordinary program (no kioku library): the parent forks three
 * workers and one short-lived child, and talks to them every round.
 *
 *   worker 0  tasks and results through two pipes; leads process group G (setpgid)
 *   worker 1  tasks and results through a socketpair; joins G; hands half of each task to a
 *             grandchild of its own through a pipe pair, and reaps it at the end
 *   worker 2  tasks through a pipe; its result goes into a memfd that it maps itself (the
 *             parent maps it too) and "done" through a pipe; joins G
 *   every worker adds to a counter in shared anonymous memory (MAP_SHARED) each round
 *   child Z   exits with code 42 at once and stays a zombie until the parent reaps it half-way
 *
 * Usage: tree ROUNDS [WORK]
 * Each round the parent checks the shared counter, the process groups, and each worker checks
 * that its parent is still its parent (getppid); any difference ends the program with exit 3
 * and a line on stderr naming it. The output (a digest per 20 rounds, the zombie's and the
 * workers' exit codes) is the same on every run.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#define WORKERS 3
#define SLOTS 512

static long work = 200000;
static _Atomic long *shared_counter;
static pid_t parent;

static void die(const char *what) {
    fprintf(stderr, "tree[%d]: %s: %s\n", (int)getpid(), what, strerror(errno));
    exit(1);
}

static void fail(const char *what) {
    fprintf(stderr, "tree: %s\n", what);
    exit(3);
}

static void xwrite(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) die("write");
        c += w;
        n -= (size_t)w;
    }
}

/* Reads exactly n bytes; 0 at end of file before any byte. */
static int xread(int fd, void *p, size_t n) {
    char *c = p;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, c + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) die("read");
        if (r == 0) {
            if (got == 0) return 0;
            fail("a peer closed its end in the middle of a message");
        }
        got += (size_t)r;
    }
    return 1;
}

static uint64_t compute(long round, int who, long iterations) {
    uint64_t x = 0x9e3779b97f4a7c15ULL * (uint64_t)(round + 1) + (uint64_t)who;
    for (long i = 0; i < iterations; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return x;
}

static void check_parent(pid_t expected, const char *who) {
    if (getppid() != expected) {
        char msg[128];
        snprintf(msg, sizeof msg, "%s: getppid() is %d, the parent was %d", who, (int)getppid(),
                 (int)expected);
        fail(msg);
    }
}

/* Worker 0 and 2: a task (a round number, -1 to stop) on `in`. */
static int worker_pipe(int who, int in, int out, uint64_t *slots) {
    long round;
    while (xread(in, &round, sizeof round) && round >= 0) {
        check_parent(parent, "worker");
        uint64_t r = compute(round, who, work);
        atomic_fetch_add(shared_counter, 1);
        if (slots) {
            slots[round % SLOTS] = r;
            r = 1; /* "done" */
        }
        xwrite(out, &r, sizeof r);
    }
    return 10 + who;
}

/* The grandchild under worker 1: half of worker 1's work. */
static int grandchild(int in, int out, pid_t worker) {
    long round;
    while (xread(in, &round, sizeof round) && round >= 0) {
        check_parent(worker, "grandchild");
        uint64_t r = compute(round, 100, work / 2);
        xwrite(out, &r, sizeof r);
    }
    return 20;
}

static int worker_socket(int sock) {
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0) die("pipe");
    pid_t me = getpid();
    pid_t g = fork();
    if (g < 0) die("fork");
    if (g == 0) {
        close(down[1]);
        close(up[0]);
        close(sock);
        _exit(grandchild(down[0], up[1], me));
    }
    close(down[0]);
    close(up[1]);
    long round;
    while (xread(sock, &round, sizeof round) && round >= 0) {
        check_parent(parent, "worker 1");
        xwrite(down[1], &round, sizeof round);
        uint64_t mine = compute(round, 1, work / 2), theirs;
        if (!xread(up[0], &theirs, sizeof theirs)) fail("the grandchild went away");
        atomic_fetch_add(shared_counter, 1);
        uint64_t r = mine ^ (theirs * 3);
        xwrite(sock, &r, sizeof r);
    }
    long stop = -1;
    xwrite(down[1], &stop, sizeof stop);
    int st;
    if (waitpid(g, &st, 0) != g) die("waitpid grandchild");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 20) fail("the grandchild did not exit with 20");
    return 11;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: tree ROUNDS [WORK]\n");
        return 2;
    }
    long rounds = atol(argv[1]);
    if (argc > 2) work = atol(argv[2]);
    parent = getpid();
    setvbuf(stdout, NULL, _IOLBF, 0);

    shared_counter = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared_counter == MAP_FAILED) die("mmap shared");
    int mfd = memfd_create("tree-results", MFD_CLOEXEC);
    if (mfd < 0) die("memfd_create");
    if (ftruncate(mfd, SLOTS * sizeof(uint64_t)) != 0) die("ftruncate memfd");
    uint64_t *results =
        mmap(NULL, SLOTS * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (results == MAP_FAILED) die("mmap memfd");

    /* Z: exits at once; its zombie stays until the parent reaps it half-way. */
    pid_t zombie = fork();
    if (zombie < 0) die("fork");
    if (zombie == 0) _exit(42);

    int task[WORKERS][2], res[WORKERS][2], sp[2];
    pid_t pids[WORKERS];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0) die("socketpair");
    for (int w = 0; w < WORKERS; w++) {
        if (w != 1 && (pipe(task[w]) != 0 || pipe(res[w]) != 0)) die("pipe");
        pids[w] = fork();
        if (pids[w] < 0) die("fork");
        if (pids[w] == 0) {
            pid_t group = w == 0 ? 0 : pids[0];
            if (setpgid(0, group) != 0) die("setpgid");
            if (w == 1) {
                close(sp[0]);
                _exit(worker_socket(sp[1]));
            }
            close(task[w][1]);
            close(res[w][0]);
            close(sp[0]);
            close(sp[1]);
            uint64_t *slots = NULL;
            if (w == 2) { /* its own mapping of the memfd, beside the inherited one */
                slots = mmap(NULL, SLOTS * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED,
                             mfd, 0);
                if (slots == MAP_FAILED) die("mmap memfd in worker 2");
            }
            _exit(worker_pipe(w, task[w][0], res[w][1], slots));
        }
        /* Both sides set the group, so it holds whichever runs first. */
        if (setpgid(pids[w], pids[0]) != 0 && errno != EACCES) die("setpgid");
        if (w != 1) {
            close(task[w][0]);
            close(res[w][1]);
        }
    }
    close(sp[1]);
    int in[WORKERS] = {task[0][1], sp[0], task[2][1]};
    int out[WORKERS] = {res[0][0], sp[0], res[2][0]};

    printf("tree: %d workers, %ld rounds\n", WORKERS, rounds);
    uint64_t digest = 1469598103934665603ULL;
    for (long round = 0; round < rounds; round++) {
        for (int w = 0; w < WORKERS; w++) xwrite(in[w], &round, sizeof round);
        for (int w = 0; w < WORKERS; w++) {
            uint64_t r;
            if (!xread(out[w], &r, sizeof r)) fail("a worker went away");
            if (w == 2) {
                if (r != 1) fail("worker 2 answered something else than done");
                r = results[round % SLOTS];
            }
            digest = (digest ^ r) * 1099511628211ULL;
        }
        if (atomic_load(shared_counter) != (round + 1) * WORKERS)
            fail("the shared counter lost or gained increments");
        for (int w = 0; w < WORKERS; w++)
            if (getpgid(pids[w]) != pids[0]) fail("a worker left process group G");
        if (round == rounds / 2) {
            siginfo_t si = {0};
            if (waitid(P_PID, (id_t)zombie, &si, WEXITED | WNOHANG | WNOWAIT) != 0)
                die("waitid zombie");
            if (si.si_pid != zombie || si.si_code != CLD_EXITED)
                fail("child Z is not a zombie waiting to be reaped");
            int st;
            if (waitpid(zombie, &st, 0) != zombie) die("waitpid zombie");
            printf("round %ld: zombie reaped, exit %d\n", round,
                   WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        }
        if ((round + 1) % 20 == 0)
            printf("round %ld: digest %016llx shared %ld\n", round + 1,
                   (unsigned long long)digest, atomic_load(shared_counter));
    }
    long stop = -1;
    for (int w = 0; w < WORKERS; w++) xwrite(in[w], &stop, sizeof stop);
    for (int w = 0; w < WORKERS; w++) {
        int st;
        if (waitpid(pids[w], &st, 0) != pids[w]) die("waitpid worker");
        if (WIFEXITED(st))
            printf("worker %d exited with code %d\n", w, WEXITSTATUS(st));
        else
            printf("worker %d killed by signal %d\n", w, WTERMSIG(st));
    }
    if (wait(NULL) != -1 || errno != ECHILD) fail("an unknown child is left");
    printf("done: digest %016llx\n", (unsigned long long)digest);
    return 0;
}
