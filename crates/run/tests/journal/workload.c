/* A program that changes files in every way the file journal traps, in its working directory:
 * pwrite/write/writev over and past the end, O_APPEND, O_TRUNC, ftruncate, fallocate (punch,
 * zero, collapse), copy_file_range, sendfile, unlink of an open file and writes to it, rename
 * over a file, mkdir/rmdir, create+delete, symlink, link, chmod, utimensat, and sqlite-like
 * journal create/write/unlink cycles. Deterministic for a seed.
 *
 * usage: workload SEED ITERATIONS
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

static uint64_t s;
static uint64_t rnd(void) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
}
static uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }

static const char *names[] = {"a0", "a1", "a2", "a3", "sub/b0", "sub/b1"};
#define NNAMES 6
static char buf[65536];

static void fill(size_t n) {
    for (size_t i = 0; i < n; i++) buf[i] = (char)rnd();
}

static off_t size_of(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? st.st_size : 0;
}

static int held[3] = {-1, -1, -1};

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    s = strtoull(argv[1], 0, 10) * 2654435761u + 1;
    long iters = strtol(argv[2], 0, 10);
    mkdir("sub", 0755);
    for (int i = 0; i < NNAMES; i++) {
        int fd = open(names[i], O_CREAT | O_WRONLY | O_TRUNC, 0644);
        size_t n = below(30000);
        fill(n);
        if (write(fd, buf, n) < 0) return 3;
        close(fd);
    }
    for (long it = 0; it < iters; it++) {
        const char *p = names[below(NNAMES)];
        int op = (int)below(20);
        int fd;
        switch (op) {
        case 0: case 1: /* pwrite over and past the end */
            if ((fd = open(p, O_RDWR)) < 0) break;
            { off_t off = below(size_of(fd) + 5000); size_t n = 1 + below(9000); fill(n);
              if (pwrite(fd, buf, n, off) < 0) return 4; }
            close(fd); break;
        case 2: /* write at the position (lseek on fd >= 3: not trapped) */
            if ((fd = open(p, O_RDWR)) < 0) break;
            lseek(fd, below(size_of(fd) + 1), SEEK_SET);
            { size_t n = 1 + below(5000); fill(n); if (write(fd, buf, n) < 0) return 5; }
            close(fd); break;
        case 3: /* writev */
            if ((fd = open(p, O_RDWR)) < 0) break;
            lseek(fd, below(size_of(fd) + 1), SEEK_SET);
            { struct iovec v[2] = {{buf, 1 + below(2000)}, {buf + 3000, 1 + below(2000)}};
              fill(6000); if (writev(fd, v, 2) < 0) return 6; }
            close(fd); break;
        case 4: /* O_APPEND */
            if ((fd = open(p, O_WRONLY | O_APPEND)) < 0) break;
            { size_t n = 1 + below(3000); fill(n); if (write(fd, buf, n) < 0) return 7; }
            close(fd); break;
        case 5: /* O_TRUNC, then write */
            if ((fd = open(p, O_WRONLY | O_TRUNC | O_CREAT, 0644)) < 0) break;
            { size_t n = below(4000); fill(n); if (write(fd, buf, n) < 0) return 8; }
            close(fd); break;
        case 6: /* ftruncate */
            if ((fd = open(p, O_RDWR)) < 0) break;
            if (ftruncate(fd, below(size_of(fd) + 3000)) < 0) return 9;
            close(fd); break;
        case 7: /* fallocate: punch, zero, collapse (block-aligned for collapse) */
            if ((fd = open(p, O_RDWR)) < 0) break;
            { off_t sz = size_of(fd); int m = (int)below(3);
              if (m == 0 && sz) fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, below(sz), 1 + below(8192));
              else if (m == 1 && sz) fallocate(fd, FALLOC_FL_ZERO_RANGE, below(sz), 1 + below(8192));
              else if (sz > 16384) fallocate(fd, FALLOC_FL_COLLAPSE_RANGE, 4096 * below(sz / 4096 - 2), 4096); }
            close(fd); break;
        case 8: /* unlink (perhaps of a held file: deleted but open) */
            unlink(p); break;
        case 9: /* rename over another name, or away and back */
            if (below(2)) rename(p, names[below(NNAMES)]);
            else if (rename(p, "moved") == 0) rename("moved", p);
            break;
        case 10: /* mkdir, a file in it, rmdir */
            if (mkdir("dir", 0700) == 0) {
                if ((fd = open("dir/x", O_CREAT | O_WRONLY, 0600)) >= 0) { if (write(fd, "x", 1) < 0) return 10; close(fd); }
            } else { unlink("dir/x"); rmdir("dir"); }
            break;
        case 11: /* create and delete */
            if ((fd = open("tmpfile", O_CREAT | O_EXCL | O_RDWR, 0600)) >= 0) {
                fill(2000); if (write(fd, buf, 2000) < 0) return 11; close(fd); unlink("tmpfile"); }
            break;
        case 12: /* sqlite-like: journal created, written, synced, the db rewritten, journal deleted */
            if ((fd = open("a0-journal", O_CREAT | O_RDWR | O_EXCL, 0644)) < 0) break;
            { int db = open("a0", O_RDWR);
              for (int k = 0; k < 3; k++) {
                  fill(4096); if (pwrite(fd, buf, 4096, k * 4096) < 0) return 12;
                  if (db >= 0) { fill(4096); if (pwrite(db, buf, 4096, 4096 * below(8)) < 0) return 13; }
              }
              fsync(fd); if (db >= 0) { fsync(db); close(db); }
              close(fd); unlink("a0-journal"); }
            break;
        case 13: /* symlink / hard link under a new name, or remove one */
            { const char *l = below(2) ? "link1" : "link2";
              if (unlink(l) != 0) { if (below(2)) symlink(p, l); else link(p, l); } }
            break;
        case 14: /* chmod / utimensat */
            if (below(2)) chmod(p, below(2) ? 0600 : 0644);
            else { struct timespec t[2] = {{0, UTIME_OMIT}, {(time_t)below(2000000000), 0}}; utimensat(AT_FDCWD, p, t, 0); }
            break;
        case 15: /* copy_file_range, sendfile into another file */
            { int in = open(p, O_RDONLY), out = open(names[below(NNAMES)], O_RDWR);
              if (in >= 0 && out >= 0) {
                  loff_t oi = 0, oo = below(size_of(out) + 1);
                  if (below(2)) copy_file_range(in, &oi, out, &oo, 1 + below(6000), 0);
                  else { lseek(out, oo, SEEK_SET); sendfile(out, in, 0, 1 + below(6000)); }
              }
              if (in >= 0) close(in); if (out >= 0) close(out); }
            break;
        case 16: /* hold a descriptor open */
            { int k = (int)below(3); if (held[k] >= 0) close(held[k]); held[k] = open(p, O_RDWR); }
            break;
        default: /* write through a held descriptor (its file may be deleted) */
            { int k = (int)below(3); if (held[k] < 0) break;
              size_t n = 1 + below(3000); fill(n);
              if (pwrite(held[k], buf, n, below(size_of(held[k]) + 100)) < 0) return 14; }
            break;
        }
    }
    return 0;
}
