/*
 * writer — writes its results to files as it goes: DIR/data.txt through an ordinary
 * descriptor (write at the file offset) and DIR/log.txt opened O_APPEND, and sleeps a little
 * between records (nanosleep is interrupted by checkpoints and must restart).
 *
 * Usage: writer DIR [RECORDS]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: writer DIR [RECORDS]\n");
        return 2;
    }
    int records = argc > 2 ? atoi(argv[2]) : 300;
    char path[4096];
    snprintf(path, sizeof path, "%s/data.txt", argv[1]);
    int data = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    snprintf(path, sizeof path, "%s/log.txt", argv[1]);
    int log = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    if (data < 0 || log < 0) {
        perror("open");
        return 1;
    }
    uint64_t x = 1;
    for (int i = 0; i < records; i++) {
        for (int k = 0; k < 20000; k++) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        char line[128];
        int n = snprintf(line, sizeof line, "record %d value %016llx\n", i, (unsigned long long)x);
        if (write(data, line, (size_t)n) != n) return 1;
        n = snprintf(line, sizeof line, "log %d\n", i);
        if (write(log, line, (size_t)n) != n) return 1;
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    printf("wrote %d records, last %016llx\n", records, (unsigned long long)x);
    return 0;
}
