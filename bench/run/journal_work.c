/* The journal benchmark's program: N calls of one kind, timed inside the program, after a
 * setup that is not measured. It marks the end of its setup with mkdir("bench-start") (a
 * trapped call: the benchmark takes its checkpoint there).
 *   pwrite N: 4 KiB over existing data, each at a new offset (each needs a pre-image)
 *   append N: 4 KiB appended (O_APPEND: trapped, no pre-image)
 *   pipe N:   64 bytes written to a pipe at a descriptor >= 3 (trapped, not a file)
 * Prints nanoseconds per call. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *mode = argv[1];
    long n = strtol(argv[2], 0, 10);
    static char buf[4096];
    memset(buf, 'x', sizeof buf);
    int fd = -1, p[2];
    if (!strcmp(mode, "pwrite")) {
        fd = open("data", O_CREAT | O_RDWR | O_TRUNC, 0644);
        for (long i = 0; i < n; i++)
            if (write(fd, buf, sizeof buf) != sizeof buf) return 3;
    } else if (!strcmp(mode, "append")) {
        fd = open("log", O_CREAT | O_WRONLY | O_APPEND | O_TRUNC, 0644);
    } else if (pipe(p) != 0) {
        return 4;
    }
    mkdir("bench-start", 0700);
    double t0 = now();
    for (long i = 0; i < n; i++) {
        if (!strcmp(mode, "pwrite")) {
            if (pwrite(fd, buf, sizeof buf, i * 4096) != sizeof buf) return 5;
        } else if (!strcmp(mode, "append")) {
            if (write(fd, buf, sizeof buf) != sizeof buf) return 6;
        } else {
            if (write(p[1], buf, 64) != 64 || read(p[0], buf, 64) != 64) return 7;
        }
    }
    double t1 = now();
    printf("%.0f\n", (t1 - t0) / n);
    return 0;
}
