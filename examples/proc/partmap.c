/*
 * partmap — a mapping kioku captures only part of must stay one mapping: grows it with mremap
 * after a checkpoint (and a restore). A 3 MiB private anonymous mapping that starts 1 MiB past
 * a 2 MiB boundary, far from other memory, has only its first page written, so the capture's area (pages rounded out
 * to 2 MiB) ends inside it; tracking or restoring that area must not split the mapping, or an
 * mremap growing it fails with EFAULT.
 *
 * Prints "ready", waits for a file named "go" in its directory, then grows the mapping to
 * 6 MiB (MREMAP_MAYMOVE), checks it kept its first page and reads zeros after it, prints
 * "grown" and exits 0; a failure prints a line starting with "BAD" and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MIB (1UL << 20)

int main(void) {
    /* In the middle of a 256 MiB PROT_NONE reservation (not captured), so that no other
     * memory with pages lies within the 64 MiB the capture bridges, as after a restore, where
     * new mappings go far from the restored ones: 3 MiB from 1 MiB past a 2 MiB boundary. */
    unsigned char *room = mmap(NULL, 256 * MIB, PROT_NONE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (room == MAP_FAILED) {
        printf("BAD mmap: %s\n", strerror(errno));
        return 1;
    }
    uintptr_t at = (((uintptr_t)room + 128 * MIB) & ~(2 * MIB - 1)) + MIB;
    unsigned char *p = mmap((void *)at, 3 * MIB, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED) {
        printf("BAD mmap: %s\n", strerror(errno));
        return 1;
    }
    memset(p, 0x5A, 4096);
    printf("ready\n");
    fflush(stdout);
    while (access("go", F_OK) != 0) usleep(2000);
    unsigned char *q = mremap(p, 3 * MIB, 6 * MIB, MREMAP_MAYMOVE);
    if (q == MAP_FAILED) {
        printf("BAD mremap growing the mapping: %s (errno %d)\n", strerror(errno), errno);
        return 1;
    }
    for (size_t k = 0; k < 4096; k++)
        if (q[k] != 0x5A) {
            printf("BAD byte %zu of the first page after mremap\n", k);
            return 1;
        }
    for (size_t k = 4096; k < 6 * MIB; k += 4096)
        if (q[k] != 0) {
            printf("BAD page at %zu not zero after mremap\n", k);
            return 1;
        }
    printf("grown\n");
    return 0;
}
