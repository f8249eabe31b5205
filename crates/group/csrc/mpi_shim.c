/*
 * kioku's only contact with MPI: the entry points that take an MPI communicator (they must be
 * compiled against the MPI implementation's own mpi.h) and the handful of point-to-point and
 * collective operations the Rust side uses, over a private duplicate of that communicator.
 * Every function returns 0 or an MPI error code (errors on the duplicate are returned, not
 * fatal, so that kioku can name them).
 */
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Implemented in Rust (src/capi.rs). */
int kioku_group_start(const char *config);
int kioku_group_stop(void);

static MPI_Comm kcomm = MPI_COMM_NULL;
/* A second duplicate, for the encoding flights (run on a background thread when the program
 * initialised MPI with MPI_THREAD_MULTIPLE, else inline), so that their messages never match
 * the collective calls the program's own thread makes meanwhile. */
static MPI_Comm kcomm_bg = MPI_COMM_NULL;

/* KIOKU_E_STATE / KIOKU_E_INVAL of kioku.h. */
#define E_STATE (-22)
#define E_INVAL (-1)
#define E_MPI (-30)

/* kioku_group_init, kioku_group_init_f and kioku_group_finalize of kioku_group.h are
 * exported by the Rust side (a C symbol inside a Rust shared library is not exported); they
 * call these. */
int kioku_shim_init(MPI_Comm comm, const char *config)
{
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (!up || down)
        return E_STATE;
    if (kcomm != MPI_COMM_NULL)
        return E_STATE;
    if (comm == MPI_COMM_NULL)
        return E_INVAL;
    if (MPI_Comm_dup(comm, &kcomm) != MPI_SUCCESS)
        return E_MPI;
    MPI_Comm_set_errhandler(kcomm, MPI_ERRORS_RETURN);
    if (MPI_Comm_dup(kcomm, &kcomm_bg) != MPI_SUCCESS) {
        MPI_Comm_free(&kcomm);
        kcomm = MPI_COMM_NULL;
        return E_MPI;
    }
    MPI_Comm_set_errhandler(kcomm_bg, MPI_ERRORS_RETURN);
    int rc = kioku_group_start(config);
    if (rc != 0) {
        MPI_Comm_free(&kcomm_bg);
        MPI_Comm_free(&kcomm);
        kcomm = kcomm_bg = MPI_COMM_NULL;
    }
    return rc;
}

/* Fortran (ISO_C_BINDING): the communicator as its Fortran handle. */
int kioku_shim_init_f(MPI_Fint comm, const char *config)
{
    return kioku_shim_init(MPI_Comm_f2c(comm), config);
}

int kioku_shim_finalize(void)
{
    if (kcomm == MPI_COMM_NULL)
        return E_STATE;
    int rc = kioku_group_stop();
    MPI_Comm_free(&kcomm_bg);
    MPI_Comm_free(&kcomm);
    kcomm = kcomm_bg = MPI_COMM_NULL;
    return rc;
}

int kioku_mpi_rank(int *rank) { return MPI_Comm_rank(kcomm, rank); }
int kioku_mpi_size(int *size) { return MPI_Comm_size(kcomm, size); }

/* Messages of any length: MPI counts are ints, so longer ones go as several. */
#define PIECE ((size_t)1 << 30)

int kioku_mpi_send(int dest, int tag, const void *buf, size_t len)
{
    uint64_t n = len;
    int rc = MPI_Send(&n, 1, MPI_UINT64_T, dest, tag, kcomm);
    for (size_t off = 0; rc == MPI_SUCCESS && off < len; off += PIECE) {
        size_t part = len - off < PIECE ? len - off : PIECE;
        rc = MPI_Send((const char *)buf + off, (int)part, MPI_BYTE, dest, tag, kcomm);
    }
    return rc;
}

/* The length of the next message from `src` with `tag` (its header is consumed). */
int kioku_mpi_recv_len(int src, int tag, size_t *len)
{
    uint64_t n = 0;
    int rc = MPI_Recv(&n, 1, MPI_UINT64_T, src, tag, kcomm, MPI_STATUS_IGNORE);
    *len = (size_t)n;
    return rc;
}

/* The body of that message, into `buf` of exactly `len` bytes. */
int kioku_mpi_recv_body(int src, int tag, void *buf, size_t len)
{
    int rc = MPI_SUCCESS;
    for (size_t off = 0; rc == MPI_SUCCESS && off < len; off += PIECE) {
        size_t part = len - off < PIECE ? len - off : PIECE;
        rc = MPI_Recv((char *)buf + off, (int)part, MPI_BYTE, src, tag, kcomm, MPI_STATUS_IGNORE);
    }
    return rc;
}

/* op: 0 min, 1 max, 2 sum; in place. */
int kioku_mpi_allreduce_u64(uint64_t *vals, int n, int op)
{
    MPI_Op o = op == 0 ? MPI_MIN : op == 1 ? MPI_MAX : MPI_SUM;
    return MPI_Allreduce(MPI_IN_PLACE, vals, n, MPI_UINT64_T, o, kcomm);
}

/* Every rank's `len` bytes (the same len everywhere), in rank order, into `all`. */
int kioku_mpi_allgather(const void *mine, size_t len, void *all)
{
    return MPI_Allgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, kcomm);
}

int kioku_mpi_barrier(void) { return MPI_Barrier(kcomm); }

/* The lowest world rank on this rank's node (ranks sharing memory), naming the node. */
int kioku_mpi_node(int *node)
{
    MPI_Comm local;
    int rc = MPI_Comm_split_type(kcomm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    if (rc != MPI_SUCCESS)
        return rc;
    int me = 0;
    MPI_Comm_rank(kcomm, &me);
    rc = MPI_Allreduce(&me, node, 1, MPI_INT, MPI_MIN, local);
    MPI_Comm_free(&local);
    return rc;
}

/* A one-line description of an MPI error code. */
void kioku_mpi_error_string(int code, char *buf, size_t len)
{
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(code, s, &n) != MPI_SUCCESS)
        n = 0;
    s[n < MPI_MAX_ERROR_STRING ? n : MPI_MAX_ERROR_STRING - 1] = 0;
    strncpy(buf, s, len - 1);
    buf[len - 1] = 0;
}

/* 1 when the program initialised MPI with MPI_THREAD_MULTIPLE (flights may then run on a
 * thread of their own). */
int kioku_mpi_thread_multiple(int *yes)
{
    int provided = MPI_THREAD_SINGLE;
    int rc = MPI_Query_thread(&provided);
    *yes = provided == MPI_THREAD_MULTIPLE;
    return rc;
}

/* Nonblocking operations on the flights' communicator. A request is an MPI_Request the shim
 * allocates; kioku_bg_test frees it once complete. */
int kioku_bg_isend(int dest, int tag, const void *buf, size_t len, void **req)
{
    *req = NULL;
    if (len > (size_t)INT32_MAX)
        return MPI_ERR_COUNT;
    MPI_Request *r = malloc(sizeof *r);
    if (!r)
        return MPI_ERR_NO_MEM;
    int rc = MPI_Isend(buf, (int)len, MPI_BYTE, dest, tag, kcomm_bg, r);
    if (rc != MPI_SUCCESS) {
        free(r);
        return rc;
    }
    *req = r;
    return MPI_SUCCESS;
}

int kioku_bg_test(void *req, int *done)
{
    MPI_Request *r = req;
    int rc = MPI_Test(r, done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || *done)
        free(r);
    return rc;
}

/* A message from `src` with `tag`, if one has arrived: its length and a handle to receive it
 * with kioku_bg_mrecv (matched probe: safe beside other threads' receives). */
int kioku_bg_improbe(int src, int tag, int *found, size_t *len, void **msg)
{
    *msg = NULL;
    MPI_Message m;
    MPI_Status st;
    int rc = MPI_Improbe(src, tag, kcomm_bg, found, &m, &st);
    if (rc != MPI_SUCCESS || !*found)
        return rc;
    int n = 0;
    rc = MPI_Get_count(&st, MPI_BYTE, &n);
    if (rc != MPI_SUCCESS)
        return rc;
    MPI_Message *h = malloc(sizeof *h);
    if (!h)
        return MPI_ERR_NO_MEM;
    *h = m;
    *len = (size_t)n;
    *msg = h;
    return MPI_SUCCESS;
}

int kioku_bg_mrecv(void *msg, void *buf, size_t len)
{
    MPI_Message *h = msg;
    int rc = MPI_Mrecv(buf, (int)len, MPI_BYTE, h, MPI_STATUS_IGNORE);
    free(h);
    return rc;
}

/* Nonblocking max over u64 values, in place. */
int kioku_bg_iallreduce_max(uint64_t *vals, int n, void **req)
{
    *req = NULL;
    MPI_Request *r = malloc(sizeof *r);
    if (!r)
        return MPI_ERR_NO_MEM;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, vals, n, MPI_UINT64_T, MPI_MAX, kcomm_bg, r);
    if (rc != MPI_SUCCESS) {
        free(r);
        return rc;
    }
    *req = r;
    return MPI_SUCCESS;
}

/* Nonblocking gather of every rank's `len` bytes (the same len everywhere) into `all`. */
int kioku_bg_iallgather(const void *mine, size_t len, void *all, void **req)
{
    *req = NULL;
    if (len > (size_t)INT32_MAX)
        return MPI_ERR_COUNT;
    MPI_Request *r = malloc(sizeof *r);
    if (!r)
        return MPI_ERR_NO_MEM;
    int rc = MPI_Iallgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, kcomm_bg, r);
    if (rc != MPI_SUCCESS) {
        free(r);
        return rc;
    }
    *req = r;
    return MPI_SUCCESS;
}
