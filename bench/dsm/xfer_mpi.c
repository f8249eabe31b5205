/*
 * The peer of the DSM's checkpoint: every rank sends MIB MiB to the next rank (the DSM's
 * buddy) and receives as much from the previous one, with Open MPI over shared memory, the
 * same data movement as a checkpoint into the buddy's memory. Prints the median of 3 of the
 * slowest rank's time.
 *
 *   mpirun -np 2 ./xfer_mpi 64
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    for (int k = 1; k < argc; k++) {
        size_t bytes = strtoul(argv[k], NULL, 10) << 20;
        char *out = malloc(bytes), *in = malloc(bytes);
        memset(out, 0x5a ^ me, bytes);
        memset(in, 0, bytes);
        double t[3];
        for (int i = 0; i < 3; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double a = MPI_Wtime();
            MPI_Sendrecv(out, (int)bytes, MPI_CHAR, (me + 1) % n, 0, in, (int)bytes, MPI_CHAR,
                         (me + n - 1) % n, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            double d = MPI_Wtime() - a, worst;
            MPI_Allreduce(&d, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            t[i] = worst;
        }
        qsort(t, 3, sizeof *t, cmp);
        if (me == 0) printf("XFER mib=%s s=%.4f\n", argv[k], t[1]);
        free(out);
        free(in);
    }
    MPI_Finalize();
    return 0;
}
