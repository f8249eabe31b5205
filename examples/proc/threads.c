/*
 * threads — a multi-threaded worker for the process-checkpoint tests: WORKERS threads hash
 * their own buffers (and a thread-local counter) in ROUNDS rounds separated by a barrier; after
 * each round the main thread prints a digest of all workers' state. The output is the same on
 * every run, however the threads are scheduled.
 *
 * Usage: threads [WORKERS] [ROUNDS] [WORK]
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF (256 * 1024 / 8)

static int workers, rounds;
static long work;
static pthread_barrier_t start_round, end_round;
static uint64_t *bufs[64];
static uint64_t results[64];
static __thread uint64_t tls_counter;

static uint64_t xorshift(uint64_t x) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    uint64_t *b = bufs[id];
    tls_counter = (uint64_t)id * 1000;
    for (int r = 0; r < rounds; r++) {
        pthread_barrier_wait(&start_round);
        uint64_t x = results[id] + (uint64_t)r + 1;
        for (long i = 0; i < work; i++) {
            x = xorshift(x);
            b[x % BUF] += x;
            tls_counter++;
        }
        uint64_t h = 0;
        for (long i = 0; i < BUF; i += 97) h = xorshift(h ^ b[i]);
        results[id] = h ^ tls_counter;
        pthread_barrier_wait(&end_round);
    }
    return NULL;
}

int main(int argc, char **argv) {
    workers = argc > 1 ? atoi(argv[1]) : 4;
    rounds = argc > 2 ? atoi(argv[2]) : 40;
    work = argc > 3 ? atol(argv[3]) : 2000000;
    if (workers < 1 || workers > 64 || rounds < 1) {
        fprintf(stderr, "usage: threads [WORKERS 1..64] [ROUNDS] [WORK]\n");
        return 2;
    }
    pthread_barrier_init(&start_round, NULL, (unsigned)workers + 1);
    pthread_barrier_init(&end_round, NULL, (unsigned)workers + 1);
    pthread_t t[64];
    for (int i = 0; i < workers; i++) {
        bufs[i] = calloc(BUF, sizeof(uint64_t));
        if (!bufs[i]) return 1;
        if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) != 0) return 1;
    }
    for (int r = 0; r < rounds; r++) {
        pthread_barrier_wait(&start_round);
        pthread_barrier_wait(&end_round);
        uint64_t d = 0;
        for (int i = 0; i < workers; i++) d = xorshift(d ^ results[i]);
        printf("round %d digest %016llx\n", r, (unsigned long long)d);
        fflush(stdout);
    }
    for (int i = 0; i < workers; i++) pthread_join(t[i], NULL);
    printf("done\n");
    return 0;
}
