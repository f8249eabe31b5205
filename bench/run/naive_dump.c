/*
 * naive_dump — the baseline checkpoint the benchmarks compare with: stop the process
 * (SIGSTOP), copy every private writable mapping out of it with process_vm_readv into one file,
 * fsync the file, resume it (SIGCONT). Prints seconds and bytes.
 *
 * Usage: naive_dump PID FILE
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: naive_dump PID FILE\n");
        return 2;
    }
    pid_t pid = atoi(argv[1]);
    int out = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0) return 1;
    size_t cap = 8 << 20;
    char *buf = malloc(cap);
    double t0 = now();
    kill(pid, SIGSTOP);
    /* Wait until it is stopped. */
    char path[64], line[512];
    for (;;) {
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        FILE *s = fopen(path, "r");
        if (!s) return 1;
        char st = 0;
        if (fgets(line, sizeof line, s)) {
            char *p = strrchr(line, ')');
            if (p) st = p[2];
        }
        fclose(s);
        if (st == 'T' || st == 't') break;
    }
    snprintf(path, sizeof path, "/proc/%d/maps", pid);
    FILE *maps = fopen(path, "r");
    unsigned long long total = 0;
    while (fgets(line, sizeof line, maps)) {
        unsigned long a, b;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &a, &b, perms) != 3) continue;
        if (perms[1] != 'w' || perms[3] != 'p') continue;
        for (unsigned long at = a; at < b; at += cap) {
            size_t n = (b - at) < cap ? (b - at) : cap;
            struct iovec l = {buf, n}, r = {(void *)at, n};
            ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);
            if (got <= 0) break;
            if (write(out, buf, (size_t)got) != got) return 1;
            total += (unsigned long long)got;
        }
    }
    fclose(maps);
    fsync(out);
    double t1 = now();
    kill(pid, SIGCONT);
    printf("naive_dump seconds=%.4f bytes=%llu\n", t1 - t0, total);
    return 0;
}
