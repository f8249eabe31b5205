/*
 * openloop — opens and closes a file N times (default 200000), or with "dup" duplicates
 * a descriptor of the file (not a standard stream: the journal traps those) and closes the
 * copy N times: what a program pays per descriptor call under
 * kioku (open and close are not trapped, dup is: bench/run/fdtrap.sh).
 *
 * Usage: openloop [N] [dup]
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 200000;
    int dup_mode = argc > 2 && strcmp(argv[2], "dup") == 0;
    int file = open("/etc/hostname", O_RDONLY);
    if (file < 3)
        return 1;
    for (long i = 0; i < n; i++) {
        int fd = dup_mode ? dup(file) : open("/etc/hostname", O_RDONLY);
        if (fd < 0)
            return 1;
        close(fd);
    }
    return 0;
}
