/* Overwrites its standard output (a regular file opened read-write at offset 0), moves it
 * back with lseek, writes again, copies it with dup, closes its standard input: every case of
 * the journal's escalation rule. */
#include <string.h>
#include <unistd.h>

int main(void) {
    char a[1000], b[700];
    memset(a, 'A', sizeof a);
    memset(b, 'B', sizeof b);
    for (int i = 0; i < 20; i++)
        if (write(1, a, sizeof a) != sizeof a) return 1;
    lseek(1, 0, SEEK_SET);
    for (int i = 0; i < 20; i++)
        if (write(1, b, sizeof b) != sizeof b) return 2;
    int d = dup(1);
    if (d >= 0) close(d);
    close(0);
    return 0;
}
