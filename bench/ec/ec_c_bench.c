/*
 * kioku bench/ec: ISA-L called directly from C, and Jerasure 2, on one (k, m, size) point.
 * Usage: ec_c_bench K M SIZE MIN_SECONDS REPS
 * Prints one line per codec and operation:
 *   codec op k m size best_GBps median_GBps
 * GB/s counts data bytes (k * SIZE) per encode or decode, 1 GB = 1e9 bytes.
 * Decode restores a fixed pattern: data shards 0..m-1 lost, parity used in their place.
 * Every decoded shard is compared with the original; a mismatch aborts.
 */
#include <isa-l/erasure_code.h>
#include <jerasure.h>
#include <jerasure/cauchy.h>
#include <jerasure/reed_sol.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int K, M, SIZE, REPS;
static double MIN_S;
static unsigned char **data, **parity, **orig;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef void (*op_fn)(void *);

/* Runs `op` repeatedly for at least MIN_S seconds, REPS times; prints best and median. */
static void measure(const char *codec, const char *op, op_fn f, void *arg) {
  double r[64];
  f(arg); /* warm up */
  for (int i = 0; i < REPS; i++) {
    long it = 0;
    double t0 = now(), t;
    do {
      f(arg);
      it++;
      t = now();
    } while (t - t0 < MIN_S);
    r[i] = (double)it * K * (double)SIZE / (t - t0) / 1e9;
  }
  qsort(r, REPS, sizeof r[0], cmp_d);
  printf("%s %s %d %d %d %.4f %.4f\n", codec, op, K, M, SIZE, r[REPS - 1], r[REPS / 2]);
  fflush(stdout);
}

static unsigned char **alloc_shards(int n) {
  unsigned char **p = malloc(sizeof(*p) * n);
  for (int i = 0; i < n; i++) {
    if (posix_memalign((void **)&p[i], 64, SIZE)) abort();
    memset(p[i], 0, SIZE);
  }
  return p;
}

static void check_data(const char *who) {
  for (int i = 0; i < K; i++)
    if (memcmp(data[i], orig[i], SIZE)) {
      fprintf(stderr, "%s: data shard %d decoded wrong\n", who, i);
      exit(2);
    }
}

static void lose_data(void) {
  for (int i = 0; i < M; i++) memset(data[i], 0xA5, SIZE);
}

/* ---------------- ISA-L ---------------- */
static unsigned char *isal_a, *isal_tbls;

static void isal_encode(void *u) {
  (void)u;
  ec_encode_data(SIZE, K, M, isal_tbls, data, parity);
}

/* The full decode as ISA-L's own erasure_code_perf does it: build the k x k matrix of
 * survivors, invert it, expand tables for the lost rows, and run the dot products. */
struct isal_dec {
  unsigned char *b, *inv, *dm, *tbls;
  unsigned char **src, **dst;
  int reuse;
};

static void isal_decode_setup(struct isal_dec *d) {
  /* survivors: data M..K-1 then parity 0..M-1 */
  for (int r = 0; r < K; r++) {
    int row = r < K - M ? r + M : K + (r - (K - M));
    memcpy(d->b + r * K, isal_a + row * K, K);
  }
  if (gf_invert_matrix(d->b, d->inv, K) < 0) {
    fprintf(stderr, "singular\n");
    exit(2);
  }
  for (int l = 0; l < M; l++) memcpy(d->dm + l * K, d->inv + l * K, K);
  ec_init_tables(K, M, d->dm, d->tbls);
}

static void isal_decode(void *u) {
  struct isal_dec *d = u;
  if (!d->reuse) isal_decode_setup(d);
  ec_encode_data(SIZE, K, M, d->tbls, d->src, d->dst);
}

/* ---------------- Jerasure ---------------- */
struct jer {
  int *matrix, *bitmatrix, **schedule;
  int bit, packetsize;
};

static void jer_encode(void *u) {
  struct jer *j = u;
  if (j->bit)
    jerasure_schedule_encode(K, M, 8, j->schedule, (char **)data, (char **)parity, SIZE,
                             j->packetsize);
  else
    jerasure_matrix_encode(K, M, 8, j->matrix, (char **)data, (char **)parity, SIZE);
}

static int erasures[300];

static void jer_decode(void *u) {
  struct jer *j = u;
  int rc;
  if (j->bit)
    rc = jerasure_schedule_decode_lazy(K, M, 8, j->bitmatrix, erasures, (char **)data,
                                       (char **)parity, SIZE, j->packetsize, 1);
  else
    rc = jerasure_matrix_decode(K, M, 8, j->matrix, 0, erasures, (char **)data,
                                (char **)parity, SIZE);
  if (rc != 0) {
    fprintf(stderr, "jerasure decode failed\n");
    exit(2);
  }
}

static void run_jerasure(const char *name, struct jer *j) {
  measure(name, "encode", jer_encode, j);
  unsigned char **ref = alloc_shards(M);
  isal_encode(NULL);
  for (int i = 0; i < M; i++) memcpy(ref[i], parity[i], SIZE);
  jer_encode(j);
  /* Jerasure's matrices differ from ISA-L's, so its parity does too; decode checks data. */
  lose_data();
  jer_decode(j);
  check_data(name);
  measure(name, "decode", jer_decode, j);
  check_data(name);
  for (int i = 0; i < M; i++) {
    memcpy(parity[i], ref[i], SIZE);
    free(ref[i]);
  }
  free(ref);
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s K M SIZE MIN_SECONDS REPS\n", argv[0]);
    return 1;
  }
  K = atoi(argv[1]);
  M = atoi(argv[2]);
  SIZE = atoi(argv[3]);
  MIN_S = atof(argv[4]);
  REPS = atoi(argv[5]);
  if (K < 1 || M < 1 || K + M > 256 || M > K || SIZE < 64 || SIZE % 4096 || REPS < 1 ||
      REPS > 64) {
    fprintf(stderr, "bad arguments\n");
    return 1;
  }
  const char *skip_bitmatrix = getenv("EC_BENCH_NO_BITMATRIX");
  data = alloc_shards(K);
  parity = alloc_shards(M);
  orig = alloc_shards(K);
  srand(42);
  for (int i = 0; i < K; i++)
    for (int x = 0; x < SIZE; x++) data[i][x] = orig[i][x] = rand() & 0xff;

  /* ISA-L, Cauchy matrix */
  isal_a = malloc((K + M) * K);
  isal_tbls = malloc(32 * K * M);
  gf_gen_cauchy1_matrix(isal_a, K + M, K);
  ec_init_tables(K, M, isal_a + K * K, isal_tbls);
  measure("isal", "encode", isal_encode, NULL);
  struct isal_dec d;
  d.b = malloc(K * K);
  d.inv = malloc(K * K);
  d.dm = malloc(M * K);
  d.tbls = malloc(32 * K * M);
  d.src = malloc(sizeof(*d.src) * K);
  d.dst = malloc(sizeof(*d.dst) * M);
  for (int r = 0; r < K; r++) d.src[r] = r < K - M ? data[r + M] : parity[r - (K - M)];
  for (int l = 0; l < M; l++) d.dst[l] = data[l];
  isal_encode(NULL);
  lose_data();
  d.reuse = 0;
  isal_decode(&d);
  check_data("isal");
  measure("isal", "decode", isal_decode, &d);
  check_data("isal");
  d.reuse = 1;
  measure("isal", "decode_tables_reused", isal_decode, &d);
  check_data("isal");

  /* Jerasure 2 */
  for (int i = 0; i < M; i++) erasures[i] = i;
  erasures[M] = -1;
  struct jer cg = {cauchy_good_general_coding_matrix(K, M, 8), NULL, NULL, 0, 0};
  run_jerasure("jerasure_cauchy_good", &cg);
  struct jer rv = {reed_sol_vandermonde_coding_matrix(K, M, 8), NULL, NULL, 0, 0};
  run_jerasure("jerasure_reed_sol_van", &rv);
  if (!skip_bitmatrix) {
    struct jer cb = {cg.matrix, NULL, NULL, 1, 512};
    cb.bitmatrix = jerasure_matrix_to_bitmatrix(K, M, 8, cg.matrix);
    cb.schedule = jerasure_smart_bitmatrix_to_schedule(K, M, 8, cb.bitmatrix);
    run_jerasure("jerasure_cauchy_good_bitmatrix", &cb);
  }
  return 0;
}
