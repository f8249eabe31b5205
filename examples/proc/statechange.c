/*
 * statechange — changes its kernel state between checkpoints and checks, every round, that it
 * still has the state it set last: a checkpoint that reused state read before the change (the
 * monitor reads some of it only after a call that changes it) restores the old state, which
 * the program reports (exit 3).
 *
 * Phase 1 (at start): SIGUSR1 handled by on_a, RLIMIT_NOFILE soft 512, no interval timer,
 *   descriptors 3, 4 and 5 open on /dev/null, descriptor 6 on the file "data" (read a byte
 *   every round: its offset moves with no call the monitor traps), timer slack 50 µs.
 * Phase 2 (when the file "go2" appears in the working directory): SIGUSR1 handled by on_b
 *   with SA_ONSTACK, SIGUSR2 handled by on_b with SA_RESETHAND, RLIMIT_NOFILE soft 256,
 *   ITIMER_REAL armed for 1000 s, descriptor 6 made non-blocking (ioctl FIONBIO), "data"
 *   duplicated over the open descriptor 4 (dup2 replaces /dev/null), "data2" open as
 *   descriptor 10, three pages mapped ('A'), a signal stack, timer slack 123456 ns.
 * Phase 3 (when "go3" appears): raises SIGUSR2 — its handler runs once and the kernel resets
 *   it to SIG_DFL (SA_RESETHAND): no system call changed the disposition; descriptor 5
 *   closed and "data2" opened again, at number 5 (the lowest free: no call the monitor traps
 *   for descriptors), the middle page of the three unmapped and a new page mapped ('B').
 * Phase 4 (when "go4" appears): descriptor 7 a pipe's read end (8 its write end), and a
 *   descriptor of "data" received over a Unix socket pair (SCM_RIGHTS: no call of this
 *   process opened it).
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
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t got;
static char altstack[1 << 16];
/* Offset of descriptor 6 (kept in memory, so a restore brings back the matching one). */
static off_t pos6;
static char *three, *single;
static long page;
static int received = -1;

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
    struct stat st, data, data2;
    if (stat("data", &data) != 0 || stat("data2", &data2) != 0)
        fail(phase, "the data files");
    int fd5 = fstat(5, &st) == 0 &&
              (phase < 3 ? S_ISCHR(st.st_mode) : st.st_ino == data2.st_ino);
    int fd4 = fstat(4, &st) == 0 && (phase < 2 ? S_ISCHR(st.st_mode) : st.st_ino == data.st_ino);
    int fd7 = fstat(7, &st) == 0 && S_ISFIFO(st.st_mode);
    int fd10 = fstat(10, &st) == 0 && st.st_ino == data2.st_ino;
    if (!fd4 || !fd5 || fd7 != (phase > 3) || fd10 != (phase > 1))
        fail(phase, "the descriptor table");
    if (lseek(6, 0, SEEK_CUR) != pos6)
        fail(phase, "descriptor 6's offset");
    if (!!(fcntl(6, F_GETFL) & O_NONBLOCK) != (phase > 1))
        fail(phase, "descriptor 6's O_NONBLOCK");
    if (phase > 3 && (fstat(received, &st) != 0 || st.st_ino != data.st_ino))
        fail(phase, "the descriptor received over the socket");
    unsigned char vec;
    if (phase > 1) {
        int hole = mincore(three + page, page, &vec) != 0;
        if (three[0] != 'A' || three[2 * page] != 'A' || hole != (phase > 2) ||
            (!hole && three[page] != 'A'))
            fail(phase, "the mapped pages");
    }
    if (phase > 2 && single[page - 1] != 'B')
        fail(phase, "the page mapped in phase 3");
    stack_t ss;
    sigaltstack(NULL, &ss);
    if ((phase > 1) != (ss.ss_sp == altstack && !(ss.ss_flags & SS_DISABLE)))
        fail(phase, "the signal stack");
    if (prctl(PR_GET_TIMERSLACK) != (phase == 1 ? 50000 : 123456))
        fail(phase, "the timer slack");
}

static void send_fd(int sock, int fd) {
    char byte = 0, ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {&byte, 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                       .msg_controllen = sizeof ctl};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    if (sendmsg(sock, &m, 0) != 1)
        exit(1);
}

static int recv_fd(int sock) {
    char byte, ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {&byte, 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                       .msg_controllen = sizeof ctl};
    if (recvmsg(sock, &m, 0) != 1)
        exit(1);
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    int fd;
    if (!c || c->cmsg_type != SCM_RIGHTS)
        exit(1);
    memcpy(&fd, CMSG_DATA(c), sizeof(int));
    return fd;
}

static void make_file(const char *name) {
    char buf[4096];
    memset(buf, 'd', sizeof buf);
    int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, buf, sizeof buf) != (ssize_t)sizeof buf)
        exit(1);
    close(fd);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    page = sysconf(_SC_PAGESIZE);
    make_file("data");
    make_file("data2");
    int d = open("data", O_RDONLY);
    if (d < 0 || dup2(d, 6) < 0)
        return 1;
    close(d);
    handle(SIGUSR1, on_a, 0);
    nofile(512);
    int null = open("/dev/null", O_RDONLY);
    if (null < 0 || dup2(null, 4) < 0 || dup2(null, 5) < 0)
        return 1;
    if (null != 3) {
        if (dup2(null, 3) < 0)
            return 1;
        close(null);
    }
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
            int on = 1;
            ioctl(6, FIONBIO, &on);
            if (dup2(6, 4) < 0)
                return 1;
            int d2 = open("data2", O_RDONLY);
            if (d2 < 0 || dup2(d2, 10) < 0)
                return 1;
            close(d2);
            three = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                         -1, 0);
            if (three == MAP_FAILED)
                return 1;
            memset(three, 'A', 3 * page);
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
            close(5);
            if (open("data2", O_RDONLY) != 5)
                return 1;
            /* Mapped before the unmap, so it cannot land in the hole. */
            single = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                          0);
            if (single == MAP_FAILED)
                return 1;
            munmap(three + page, page);
            single[page - 1] = 'B';
            phase = 3;
            printf("phase 3\n");
        }
        if (phase == 3 && access("go4", F_OK) == 0) {
            int p[2], sv[2];
            if (pipe(p) != 0 || dup2(p[0], 7) < 0 || dup2(p[1], 8) < 0)
                return 1;
            if (p[0] != 7 && p[0] != 8)
                close(p[0]);
            if (p[1] != 7 && p[1] != 8)
                close(p[1]);
            if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
                return 1;
            send_fd(sv[0], 6);
            received = recv_fd(sv[1]);
            phase = 4;
            printf("phase 4\n");
        }
        /* A byte of "data" per round, from the start again at its end. */
        char byte;
        if (read(6, &byte, 1) == 1)
            pos6++;
        else {
            lseek(6, 0, SEEK_SET);
            pos6 = 0;
        }
        check(phase);
        if (round % 20 == 0)
            printf("ok %d\n", phase);
        nanosleep(&nap, NULL);
    }
}
