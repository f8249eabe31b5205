/*
 * server — a TCP server with a running sum, as an ordinary program (no kioku library).
 *
 * Usage: server DIR [PORT]
 *   Listens on 127.0.0.1:PORT (PORT 0 or absent: one the kernel picks) and writes the port, in
 *   decimal with a newline, to DIR/port once it listens. Clients connect one after another;
 *   each sends lines:
 *     <integer>   adds it to the sum, appends "<count> <integer>" to DIR/accepted.log (one
 *                 write per number, before the answer), answers "<count> <sum>"
 *     state       answers "<count> <sum>"
 *     quit        answers "bye <count> <sum>", and the server exits 0
 *   anything else: "error". stdout gets a line per 100 numbers and a last line at quit: all of
 *   it depends on the numbers accepted only, never on how many clients brought them.
 *
 * The log and the sum change together, so a server resumed from a checkpoint must have a log
 * whose numbers add up to its sum and count its count (kioku's process tests check this).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void die(const char *what) {
    fprintf(stderr, "server: %s: %s\n", what, strerror(errno));
    exit(1);
}

static int write_all(int fd, const char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

static long count;
static long long sum;
static int logfd;

/* One request line; returns 1 after "quit". */
static int handle(int conn, const char *line) {
    char out[128];
    int n, quit = 0;
    if (strcmp(line, "state") == 0) {
        n = snprintf(out, sizeof out, "%ld %lld\n", count, sum);
    } else if (strcmp(line, "quit") == 0) {
        n = snprintf(out, sizeof out, "bye %ld %lld\n", count, sum);
        quit = 1;
    } else {
        char *end;
        errno = 0;
        long long x = strtoll(line, &end, 10);
        if (errno != 0 || end == line || *end != 0) {
            n = snprintf(out, sizeof out, "error\n");
        } else {
            count++;
            sum += x;
            char rec[64];
            int r = snprintf(rec, sizeof rec, "%ld %lld\n", count, x);
            if (write_all(logfd, rec, (size_t)r) != 0) die("write accepted.log");
            if (count % 100 == 0) {
                printf("count %ld sum %lld\n", count, sum);
                fflush(stdout);
            }
            n = snprintf(out, sizeof out, "%ld %lld\n", count, sum);
        }
    }
    /* A client that went away is no error: the next one comes. */
    (void)write_all(conn, out, (size_t)n);
    return quit;
}

/* Serves one client until it closes; returns 1 after "quit". */
static int serve(int conn) {
    char buf[4096];
    size_t have = 0;
    for (;;) {
        ssize_t r = read(conn, buf + have, sizeof buf - 1 - have);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return 0;
        have += (size_t)r;
        char *start = buf, *nl;
        buf[have] = 0;
        while ((nl = memchr(start, '\n', have - (size_t)(start - buf))) != NULL) {
            *nl = 0;
            if (nl > start && nl[-1] == '\r') nl[-1] = 0;
            if (handle(conn, start)) return 1;
            start = nl + 1;
        }
        have -= (size_t)(start - buf);
        memmove(buf, start, have);
        if (have == sizeof buf - 1) have = 0; /* a line too long: dropped */
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: server DIR [PORT]\n");
        return 2;
    }
    int port = argc > 2 ? atoi(argv[2]) : 0;
    /* A client gone while it is answered is no reason to die (EPIPE instead of SIGPIPE). */
    signal(SIGPIPE, SIG_IGN);
    char path[4096];
    snprintf(path, sizeof path, "%s/accepted.log", argv[1]);
    logfd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (logfd < 0) die("open accepted.log");

    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (ls < 0) die("socket");
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) != 0) die("bind");
    if (listen(ls, 16) != 0) die("listen");
    socklen_t alen = sizeof a;
    if (getsockname(ls, (struct sockaddr *)&a, &alen) != 0) die("getsockname");

    /* The port file appears whole: written aside, then renamed. */
    char tmp[4096], text[32];
    snprintf(tmp, sizeof tmp, "%s/port.tmp", argv[1]);
    snprintf(path, sizeof path, "%s/port", argv[1]);
    int pf = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int n = snprintf(text, sizeof text, "%d\n", ntohs(a.sin_port));
    if (pf < 0 || write_all(pf, text, (size_t)n) != 0 || close(pf) != 0 || rename(tmp, path) != 0)
        die("write the port file");
    printf("listening\n");
    fflush(stdout);

    for (;;) {
        int conn = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        if (conn < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            die("accept");
        }
        setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        int quit = serve(conn);
        close(conn);
        if (quit) break;
    }
    printf("quit: count %ld sum %lld\n", count, sum);
    return 0;
}
