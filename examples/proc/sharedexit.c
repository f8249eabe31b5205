/*
 * sharedexit — short-lived children write their results into shared memory and exit, as
 * pre-forked or one-shot workers do: the parent never writes the shared page itself.
 *
 *   sharedexit ROUNDS
 *
 * Round r first checks that the shared word holds r (the last child's result; 0 at first),
 * then forks a child that stores r + 1 there and exits, waits for it, prints "ok r" and sleeps
 * 3 ms. A checkpoint that lost a child's write (the child is gone by the next checkpoint) comes
 * back as a stale word: the program then ends with exit 3 and a line "sharedexit: ..." on
 * stderr. The last line is "done: ROUNDS".
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 1000;
    setvbuf(stdout, NULL, _IOLBF, 0);
    volatile long *word =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (word == MAP_FAILED) return 2;
    for (long r = 0; r < rounds; r++) {
        if (*word != r) {
            fprintf(stderr, "sharedexit: round %ld: the shared word holds %ld (a child's write was lost)\n",
                    r, *word);
            return 3;
        }
        pid_t c = fork();
        if (c < 0) return 2;
        if (c == 0) {
            *word = r + 1;
            _exit(0);
        }
        int st;
        if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 2;
        printf("ok %ld\n", r);
        struct timespec ts = {0, 3 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    printf("done: %ld\n", rounds);
    return 0;
}
