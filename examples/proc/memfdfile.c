/*
 * memfdfile — a memfd used as an in-memory file and never mapped: written with write(2), read
 * back with pread(2), cut with ftruncate(2), as an ordinary program may (a sealed buffer, a
 * scratch file that must not touch a disk).
 *
 *   memfdfile ROUNDS
 *
 * Round r appends "line r\n" to the memfd; every 7th round cuts it back to nothing first. Each
 * round checks that the memfd's length and bytes are exactly what the rounds so far wrote (the
 * program's memory keeps the expected length), prints "ok r" and sleeps 5 ms. A difference ends
 * the program with exit 3 and a line "memfdfile: ..." on stderr; the last line is "done: r".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void fail(const char *what) {
    fprintf(stderr, "memfdfile: %s (%s)\n", what, strerror(errno));
    exit(3);
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 1000;
    setvbuf(stdout, NULL, _IOLBF, 0);
    int fd = memfd_create("memfdfile", MFD_CLOEXEC);
    if (fd < 0) fail("memfd_create");
    static char want[1 << 16], got[1 << 16];
    size_t len = 0;
    for (long r = 0; r < rounds; r++) {
        if (r % 7 == 0) {
            if (ftruncate(fd, 0) != 0) fail("ftruncate");
            if (lseek(fd, 0, SEEK_SET) != 0) fail("lseek");
            len = 0;
        }
        char line[32];
        int n = snprintf(line, sizeof line, "line %ld\n", r);
        if (write(fd, line, (size_t)n) != n) fail("write");
        memcpy(want + len, line, (size_t)n);
        len += (size_t)n;
        struct stat st;
        if (fstat(fd, &st) != 0) fail("fstat");
        if ((size_t)st.st_size != len) {
            fprintf(stderr, "memfdfile: round %ld: the memfd holds %lld bytes, not %zu\n", r,
                    (long long)st.st_size, len);
            exit(3);
        }
        if (pread(fd, got, len, 0) != (ssize_t)len) fail("pread");
        if (memcmp(got, want, len) != 0) {
            fprintf(stderr, "memfdfile: round %ld: the memfd's bytes differ\n", r);
            exit(3);
        }
        printf("ok %ld\n", r);
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    printf("done: %ld\n", rounds);
    return 0;
}
