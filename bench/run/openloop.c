/*
 * openloop — opens and closes a file N times (default 200000): the cost a program pays per
 * descriptor call that kioku's filter traps (bench/run/fdtrap.sh).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 200000;
    for (long i = 0; i < n; i++) {
        int fd = open("/etc/hostname", O_RDONLY);
        if (fd < 0)
            return 1;
        close(fd);
    }
    return 0;
}
