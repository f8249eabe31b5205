/*
 * kioku_mcapi.h — MCAPI 2.0, the Multicore Association's Multicore Communications API, between
 * the processes of a job: over lock-free rings in shared memory on one machine, and over
 * authenticated TCP between machines. The names, types and status codes are the standard's
 * (MCAPI 2.015); what the standard leaves to implementations is said here.
 *
 *     mcapi_status_t st; mcapi_info_t info; mcapi_request_t r; size_t n;
 *     mcapi_initialize(0, my_node, NULL, NULL, &info, &st);        // topology from KIOKU_MCAPI_*
 *     mcapi_endpoint_t me = mcapi_endpoint_create(1, &st);
 *     mcapi_endpoint_t peer = mcapi_endpoint_get(0, other_node, 1, MCAPI_TIMEOUT_INFINITE, &st);
 *     mcapi_msg_send(me, peer, "hello", 5, 0, &st);
 *     char buf[64]; mcapi_msg_recv(me, buf, sizeof buf, &n, &st);
 *     mcapi_finalize(&st);
 *
 * Nodes and topology: one MCAPI node per process (its threads share it; every function is
 * thread-safe). The job's nodes are 0..N-1 of one domain, described by a topology read like
 * MPI's settings: a file of `key = value` lines (mcapi_param_t.topology, or the environment
 * variable KIOKU_MCAPI_TOPOLOGY), then KIOKU_MCAPI_<KEY> environment variables, which win.
 * Keys (docs/mcapi.md): job, transport (shm | tcp), nodes, domain, host, base_port, addresses
 * (id=ip:port,...), secret / secret_file (the per-job secret, required for tcp), queue_depth,
 * queue_bytes, shm_ring_bytes, shm_dir, spin_us, max_requests, max_endpoints,
 * max_packet_buffers, tcp_dead_after_ms. TCP nodes listen on 127.0.0.1 unless the topology
 * says otherwise, and accept only peers that prove they hold the job's secret.
 *
 * Implementation-defined behaviour:
 * - Timeouts (mcapi_timeout_t, MCAPI_ENDP_ATTR_TIMEOUT) are in milliseconds.
 * - Priorities: 0 (MCAPI_MAX_PRIORITY, highest) to 7 (MCAPI_MIN_PRIORITY). Messages of higher
 *   priority are received first; equal priorities, and channels, keep their send order.
 * - Back-pressure: an endpoint's receive queue holds, per sending node, at most queue_depth
 *   entries (default 64) and queue_bytes bytes (default 4 MiB) not yet received. A sender
 *   beyond that waits (blocking calls, up to the send endpoint's timeout: then MCAPI_TIMEOUT)
 *   or gets MCAPI_PENDING (_i calls; the request completes when room is made).
 * - Requests: every request must be completed by mcapi_test, mcapi_wait or mcapi_wait_any
 *   (or cancelled), also when the _i call already reported MCAPI_SUCCESS: until then it holds
 *   one of max_requests (default 4096) slots. Out-parameters of _i calls (receive buffers,
 *   endpoints, handles, packet buffers) are written when the request is reported complete.
 * - A node that dies (process killed, connection broken) or finalizes is reported on the
 *   calls and requests that involve it as MCAPI_ERR_TRANSMISSION, never by a hang: sends to
 *   its endpoints, gets, connects and opens with it, and receives on a channel from it (once
 *   what it sent before is received). KIOKU_MCAPI_NODE_ATTR_STATE tells which node and why.
 *   A process that takes over a lost node's id is accepted as that node's new incarnation;
 *   channels with the old one stay broken (close them and connect again).
 * - Channels: a receive after the sender closed (and everything it sent was received), and a
 *   send after the receiver closed, fail with MCAPI_ERR_CHAN_NOTOPEN; a handle used after its
 *   own side closed fails with MCAPI_ERR_CHAN_INVALID.
 *
 * kioku_mcapi_last_error() gives a one-line detail of the calling thread's last failure.
 * Link with -lkioku_mcapi.
 */
#ifndef KIOKU_MCAPI_H
#define KIOKU_MCAPI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* MCA base types (mca.h of the standard). */
typedef int mca_int_t;
typedef char mca_int8_t;
typedef short mca_int16_t;
typedef int mca_int32_t;
typedef long long mca_int64_t;
typedef unsigned int mca_uint_t;
typedef unsigned char mca_uint8_t;
typedef unsigned short mca_uint16_t;
typedef unsigned int mca_uint32_t;
typedef unsigned long long mca_uint64_t;
typedef unsigned char mca_boolean_t;
typedef unsigned int mca_node_t;
typedef unsigned int mca_status_t;
typedef unsigned int mca_timeout_t;
typedef unsigned int mca_domain_t;
typedef uint64_t mca_request_t;

#define MCA_TRUE 1
#define MCA_FALSE 0
#define MCA_NULL 0
#define MCA_INFINITE (~0)

/* MCAPI types. */
typedef mca_int_t mcapi_int_t;
typedef mca_int8_t mcapi_int8_t;
typedef mca_int16_t mcapi_int16_t;
typedef mca_int32_t mcapi_int32_t;
typedef mca_int64_t mcapi_int64_t;
typedef mca_uint_t mcapi_uint_t;
typedef mca_uint8_t mcapi_uint8_t;
typedef mca_uint16_t mcapi_uint16_t;
typedef mca_uint32_t mcapi_uint32_t;
typedef mca_uint64_t mcapi_uint64_t;
typedef mca_boolean_t mcapi_boolean_t;
typedef mca_domain_t mcapi_domain_t;
typedef mca_node_t mcapi_node_t;
typedef unsigned int mcapi_port_t;
typedef mca_status_t mcapi_status_t;
typedef mca_timeout_t mcapi_timeout_t;
typedef unsigned int mcapi_priority_t;
typedef mca_request_t mcapi_request_t;
/* Endpoints and channel handles are 32-bit values with a type tag: 0 (MCAPI_NULL) is never
 * valid, and a value of one kind is refused where another kind is expected. */
typedef uint32_t mcapi_endpoint_t;
typedef uint32_t mcapi_pktchan_recv_hndl_t;
typedef uint32_t mcapi_pktchan_send_hndl_t;
typedef uint32_t mcapi_sclchan_recv_hndl_t;
typedef uint32_t mcapi_sclchan_send_hndl_t;

/* Implementation-specific initialization parameters. */
typedef struct {
    const char *topology; /* path of a topology file, or NULL */
} mcapi_param_t;

/* Node attributes (mcapi_node_init_attributes, mcapi_node_set_attribute). */
typedef struct {
    mcapi_uint_t node_type;
    mcapi_uint_t reserved[7];
} mcapi_node_attributes_t;

/* What mcapi_initialize reports. */
typedef struct {
    mcapi_uint_t mcapi_version;          /* MCAPI_VERSION */
    mcapi_uint_t organization_id;        /* KIOKU_MCAPI_ORG_ID */
    mcapi_uint_t implementation_version; /* KIOKU_MCAPI_IMPL_VERSION */
    mcapi_uint_t number_of_domains;      /* 1 */
    mcapi_uint_t number_of_nodes;        /* nodes of the topology */
    mcapi_uint_t number_of_ports;        /* ports of a node */
} mcapi_info_t;

#define MCAPI_VERSION 2015
#define KIOKU_MCAPI_IMPL_VERSION 1000
#define KIOKU_MCAPI_ORG_ID 7039343
#define MCAPI_TRUE MCA_TRUE
#define MCAPI_FALSE MCA_FALSE
#define MCAPI_NULL MCA_NULL
#define MCAPI_PORT_ANY (~0)
#define MCAPI_TIMEOUT_INFINITE (~0)
#define MCAPI_INFINITE (~0)
#define MCAPI_TIMEOUT_IMMEDIATE 0
#define MCAPI_NODE_INVALID (~0)
#define MCAPI_DOMAIN_INVALID (~0)
#define MCAPI_RETURN_VALUE_INVALID (~0)
#define MCAPI_MAX_STATUS_SIZE 32
#define MCAPI_MAX_STATUS_MSG_LEN 32
#define MCAPI_NUM_RESERVED_PORTS 0
#define MCAPI_MAX_DOMAIN 0xffffffffu
#define MCAPI_MAX_NODE 4095
#define MCAPI_MIN_PORT 0
#define MCAPI_MAX_PORT 65534
#define MCAPI_MAX_ENDPOINTS 1024
/* Largest message and packet: 1 MiB. */
#define MCAPI_MAX_MSG_SIZE 1048576
#define MCAPI_MAX_MESSAGE_SIZE 1048576
#define MCAPI_MAX_PKT_SIZE 1048576
#define MCAPI_MAX_PACKET_SIZE 1048576
#define MCAPI_MAX_PRIORITY 0
#define MCAPI_MIN_PRIORITY 7
/* The standard's spelling. */
#define MCAPI_MAX_PRORITY 0
#define MCAPI_MIN_PRORITY 7

/* Status codes (the MCA reference header's order). */
enum mcapi_status_codes {
    MCAPI_SUCCESS = 1,
    MCAPI_PENDING,
    MCAPI_TIMEOUT,
    MCAPI_ERR_PARAMETER,
    MCAPI_ERR_DOMAIN_INVALID,
    MCAPI_ERR_NODE_INVALID,
    MCAPI_ERR_NODE_INITFAILED,
    MCAPI_ERR_NODE_INITIALIZED,
    MCAPI_ERR_NODE_NOTINIT,
    MCAPI_ERR_NODE_FINALFAILED,
    MCAPI_ERR_PORT_INVALID,
    MCAPI_ERR_ENDP_INVALID,
    MCAPI_ERR_ENDP_EXISTS,
    MCAPI_ERR_ENDP_GET_LIMIT,
    MCAPI_ERR_ENDP_DELETED,
    MCAPI_ERR_ENDP_NOTOWNER,
    MCAPI_ERR_ENDP_REMOTE,
    MCAPI_ERR_ENDP_NOPORTS,
    MCAPI_ERR_ENDP_LIMIT,
    MCAPI_ERR_ATTR_INCOMPATIBLE,
    MCAPI_ERR_ATTR_SIZE,
    MCAPI_ERR_ATTR_NUM,
    MCAPI_ERR_ATTR_VALUE,
    MCAPI_ERR_ATTR_NOTSUPPORTED,
    MCAPI_ERR_ATTR_READONLY,
    MCAPI_ERR_MSG_LIMIT,
    MCAPI_ERR_MSG_TRUNCATED,
    MCAPI_ERR_CHAN_OPEN,
    MCAPI_ERR_CHAN_TYPE,
    MCAPI_ERR_CHAN_DIRECTION,
    MCAPI_ERR_CHAN_CONNECTED,
    MCAPI_ERR_CHAN_OPENPENDING,
    MCAPI_ERR_CHAN_NOTOPEN,
    MCAPI_ERR_CHAN_INVALID,
    MCAPI_ERR_PKT_LIMIT,
    MCAPI_ERR_SCL_SIZE,
    MCAPI_ERR_TRANSMISSION,
    MCAPI_ERR_PRIORITY,
    MCAPI_ERR_BUF_INVALID,
    MCAPI_ERR_MEM_LIMIT,
    MCAPI_ERR_REQUEST_INVALID,
    MCAPI_ERR_REQUEST_LIMIT,
    MCAPI_ERR_REQUEST_CANCELLED,
    MCAPI_ERR_WAIT_PENDING,
    MCAPI_ERR_GENERAL,
    MCAPI_STATUSCODE_END
};
/* Other implementations' names of the same codes. */
#define MCAPI_ERR_MSG_SIZE MCAPI_ERR_MSG_LIMIT
#define MCAPI_ERR_PKT_SIZE MCAPI_ERR_PKT_LIMIT

/* Node attributes. KIOKU_MCAPI_NODE_ATTR_STATE (read-only, mcapi_uint_t): what this node knows
 * of another, one of KIOKU_MCAPI_NODE_*. */
#define MCAPI_NODE_ATTR_TYPE 0
#define MCAPI_NODE_ATTR_TYPE_REGULAR 0
#define KIOKU_MCAPI_NODE_ATTR_STATE 64
#define KIOKU_MCAPI_NODE_UNKNOWN 0    /* not contacted yet */
#define KIOKU_MCAPI_NODE_CONNECTING 1 /* being contacted */
#define KIOKU_MCAPI_NODE_UP 2
#define KIOKU_MCAPI_NODE_DIED 3       /* its process died or its connection broke */
#define KIOKU_MCAPI_NODE_FINALIZED 4  /* it called mcapi_finalize */
#define KIOKU_MCAPI_NODE_PROTOCOL 5   /* it sent malformed frames; the link was dropped */
#define KIOKU_MCAPI_NODE_UNREACHABLE 6 /* TCP: silent for tcp_dead_after (partition or host down) */

/* Endpoint attributes: all mcapi_uint_t (4 bytes); only MCAPI_ENDP_ATTR_TIMEOUT is writable. */
#define MCAPI_ENDP_ATTR_TYPE 0             /* MCAPI_ENDP_ATTR_TYPE_* */
#define MCAPI_ENDP_ATTR_GET_COUNT 1        /* nodes that got the endpoint */
#define MCAPI_ENDP_ATTR_GET_SOURCE 2       /* not supported */
#define MCAPI_ENDP_ATTR_MAX_PAYLOAD_SIZE 3 /* MCAPI_MAX_MSG_SIZE */
#define MCAPI_ENDP_ATTR_BUFFER_TYPE 4      /* MCAPI_ENDP_ATTR_FIFO_BUFFER */
#define MCAPI_ENDP_ATTR_MEMORY_TYPE 5      /* MCAPI_ENDP_ATTR_LOCAL_MEMORY */
#define MCAPI_ENDP_ATTR_NUM_PRIORITIES 6   /* 8 */
#define MCAPI_ENDP_ATTR_PRIORITY 7         /* 0 */
#define MCAPI_ENDP_ATTR_NUM_SEND_BUFFERS 8 /* queue_depth */
#define MCAPI_ENDP_ATTR_NUM_RECV_BUFFERS 9 /* queue_depth minus what is queued */
#define MCAPI_ENDP_ATTR_ENDP_STATUS 10     /* MCAPI_ENDP_ATTR_STATUS_* bits */
#define MCAPI_ENDP_ATTR_TIMEOUT 11         /* ms for blocking calls; default infinite */
#define MCAPI_ENDP_ATTR_END 12
#define MCAPI_ENDP_ATTR_TYPE_MESSAGE 1
#define MCAPI_ENDP_ATTR_TYPE_PKTCHAN 2
#define MCAPI_ENDP_ATTR_TYPE_SCLCHAN 4
#define MCAPI_ENDP_ATTR_FIFO_BUFFER 0
#define MCAPI_ENDP_ATTR_LOCAL_MEMORY 0
#define MCAPI_ENDP_ATTR_STATUS_CONNECTED 1
#define MCAPI_ENDP_ATTR_STATUS_OPEN 2
#define MCAPI_ENDP_ATTR_STATUS_OPEN_PENDING 4

/* ---- Node ---- */

/* Starts this process's node `node_id` of the topology's domain `domain_id`.
 * `mcapi_node_attributes` and `init_parameters` may be NULL; `mcapi_info` (if not NULL) is
 * filled. Errors: MCAPI_ERR_NODE_INITIALIZED (this process runs a node already),
 * MCAPI_ERR_NODE_INVALID (not in the topology), MCAPI_ERR_DOMAIN_INVALID,
 * MCAPI_ERR_NODE_INITFAILED (bad topology, address in use, or the node runs elsewhere;
 * kioku_mcapi_last_error says which). */
void mcapi_initialize(mcapi_domain_t domain_id, mcapi_node_t node_id,
                      const mcapi_node_attributes_t *mcapi_node_attributes,
                      const mcapi_param_t *init_parameters, mcapi_info_t *mcapi_info,
                      mcapi_status_t *mcapi_status);
/* Sends what is queued (up to 5 s), tells the peers, and ends the node; its endpoints and
 * requests are gone. Errors: MCAPI_ERR_NODE_NOTINIT. */
void mcapi_finalize(mcapi_status_t *mcapi_status);
/* The node's domain (MCAPI_DOMAIN_INVALID on error). Errors: MCAPI_ERR_NODE_NOTINIT. */
mcapi_domain_t mcapi_domain_id_get(mcapi_status_t *mcapi_status);
/* The node's id (MCAPI_NODE_INVALID on error). Errors: MCAPI_ERR_NODE_NOTINIT. */
mcapi_node_t mcapi_node_id_get(mcapi_status_t *mcapi_status);
/* Sets default node attributes. Errors: MCAPI_ERR_PARAMETER (NULL). */
void mcapi_node_init_attributes(mcapi_node_attributes_t *mcapi_node_attributes,
                                mcapi_status_t *mcapi_status);
/* Sets a node attribute before mcapi_initialize (only MCAPI_NODE_ATTR_TYPE, REGULAR).
 * Errors: MCAPI_ERR_PARAMETER, MCAPI_ERR_ATTR_NUM, MCAPI_ERR_ATTR_SIZE, MCAPI_ERR_ATTR_VALUE,
 * MCAPI_ERR_ATTR_READONLY. */
void mcapi_node_set_attribute(mcapi_node_attributes_t *mcapi_node_attributes,
                              mcapi_uint_t attribute_num, const void *attribute,
                              size_t attribute_size, mcapi_status_t *mcapi_status);
/* Reads an attribute of node `node_id`: MCAPI_NODE_ATTR_TYPE, or KIOKU_MCAPI_NODE_ATTR_STATE
 * (what this node knows of that one). Errors: MCAPI_ERR_NODE_NOTINIT,
 * MCAPI_ERR_DOMAIN_INVALID, MCAPI_ERR_NODE_INVALID, MCAPI_ERR_ATTR_NUM, MCAPI_ERR_ATTR_SIZE,
 * MCAPI_ERR_PARAMETER. */
void mcapi_node_get_attribute(mcapi_domain_t domain_id, mcapi_node_t node_id,
                              mcapi_uint_t attribute_num, void *attribute, size_t attribute_size,
                              mcapi_status_t *mcapi_status);

/* ---- Endpoints ---- */

/* Creates endpoint <domain, this node, port_id> (MCAPI_PORT_ANY: a free port).
 * Errors: MCAPI_ERR_NODE_NOTINIT, MCAPI_ERR_PORT_INVALID, MCAPI_ERR_ENDP_EXISTS,
 * MCAPI_ERR_ENDP_LIMIT, MCAPI_ERR_ENDP_NOPORTS. */
mcapi_endpoint_t mcapi_endpoint_create(mcapi_port_t port_id, mcapi_status_t *mcapi_status);
/* Starts getting endpoint <domain_id, node_id, port_id>; completes once it exists.
 * Errors: MCAPI_ERR_NODE_NOTINIT, MCAPI_ERR_DOMAIN_INVALID, MCAPI_ERR_NODE_INVALID,
 * MCAPI_ERR_PORT_INVALID, MCAPI_ERR_PARAMETER, MCAPI_ERR_REQUEST_LIMIT,
 * MCAPI_ERR_TRANSMISSION (that node is lost). */
void mcapi_endpoint_get_i(mcapi_domain_t domain_id, mcapi_node_t node_id, mcapi_port_t port_id,
                          mcapi_endpoint_t *endpoint, mcapi_request_t *request,
                          mcapi_status_t *mcapi_status);
/* Gets endpoint <domain_id, node_id, port_id>, waiting up to `timeout` ms for it to exist.
 * Errors: as mcapi_endpoint_get_i, and MCAPI_TIMEOUT. */
mcapi_endpoint_t mcapi_endpoint_get(mcapi_domain_t domain_id, mcapi_node_t node_id,
                                    mcapi_port_t port_id, mcapi_timeout_t timeout,
                                    mcapi_status_t *mcapi_status);
/* Releases an endpoint obtained by a get (kioku keeps no per-get state).
 * Errors: MCAPI_ERR_NODE_NOTINIT, MCAPI_ERR_ENDP_INVALID. */
void mcapi_endpoint_release(mcapi_endpoint_t endpoint, mcapi_status_t *mcapi_status);
/* Deletes a local endpoint; messages queued on it are discarded. Errors:
 * MCAPI_ERR_NODE_NOTINIT, MCAPI_ERR_ENDP_INVALID, MCAPI_ERR_ENDP_NOTOWNER (another node's),
 * MCAPI_ERR_CHAN_OPEN (a channel is connected: close both sides first). */
void mcapi_endpoint_delete(mcapi_endpoint_t endpoint, mcapi_status_t *mcapi_status);
/* Reads attribute `attribute_num` (MCAPI_ENDP_ATTR_*) of a local endpoint. Errors:
 * MCAPI_ERR_NODE_NOTINIT, MCAPI_ERR_ENDP_INVALID, MCAPI_ERR_ENDP_REMOTE, MCAPI_ERR_ATTR_NUM,
 * MCAPI_ERR_ATTR_SIZE, MCAPI_ERR_ATTR_NOTSUPPORTED, MCAPI_ERR_PARAMETER. */
void mcapi_endpoint_get_attribute(mcapi_endpoint_t endpoint, mcapi_uint_t attribute_num,
                                  void *attribute, size_t attribute_size,
                                  mcapi_status_t *mcapi_status);
/* Sets attribute `attribute_num` of a local endpoint (only MCAPI_ENDP_ATTR_TIMEOUT).
 * Errors: as mcapi_endpoint_get_attribute, and MCAPI_ERR_ATTR_READONLY. */
void mcapi_endpoint_set_attribute(mcapi_endpoint_t endpoint, mcapi_uint_t attribute_num,
                                  const void *attribute, size_t attribute_size,
                                  mcapi_status_t *mcapi_status);

/* ---- Messages ---- */

/* Starts sending `buffer_size` bytes from local `send_endpoint` to `receive_endpoint` with
 * `priority`; the buffer may be reused at once. MCAPI_PENDING while the receiver's queue is
 * full. Errors: MCAPI_ERR_NODE_NOTINIT, MCAPI_ERR_ENDP_INVALID, MCAPI_ERR_ENDP_REMOTE,
 * MCAPI_ERR_MSG_LIMIT, MCAPI_ERR_PRIORITY, MCAPI_ERR_PARAMETER, MCAPI_ERR_REQUEST_LIMIT,
 * MCAPI_ERR_TRANSMISSION. */
void mcapi_msg_send_i(mcapi_endpoint_t send_endpoint, mcapi_endpoint_t receive_endpoint,
                      const void *buffer, size_t buffer_size, mcapi_priority_t priority,
                      mcapi_request_t *request, mcapi_status_t *mcapi_status);
/* Sends a message, waiting while the receiver's queue is full (up to the send endpoint's
 * timeout). Errors: as mcapi_msg_send_i, and MCAPI_TIMEOUT. */
void mcapi_msg_send(mcapi_endpoint_t send_endpoint, mcapi_endpoint_t receive_endpoint,
                    const void *buffer, size_t buffer_size, mcapi_priority_t priority,
                    mcapi_status_t *mcapi_status);
/* Starts receiving the next message of local `receive_endpoint` into `buffer` (filled when
 * the request is reported complete; its size is the message's). Errors:
 * MCAPI_ERR_NODE_NOTINIT, MCAPI_ERR_ENDP_INVALID, MCAPI_ERR_ENDP_REMOTE, MCAPI_ERR_PARAMETER,
 * MCAPI_ERR_REQUEST_LIMIT; at completion MCAPI_ERR_MSG_TRUNCATED (the message was longer
 * than `buffer_size`: its first bytes are in the buffer). */
void mcapi_msg_recv_i(mcapi_endpoint_t receive_endpoint, void *buffer, size_t buffer_size,
                      mcapi_request_t *request, mcapi_status_t *mcapi_status);
/* Receives the next message (highest priority first), waiting up to the endpoint's timeout.
 * Errors: as mcapi_msg_recv_i, and MCAPI_TIMEOUT. */
void mcapi_msg_recv(mcapi_endpoint_t receive_endpoint, void *buffer, size_t buffer_size,
                    size_t *received_size, mcapi_status_t *mcapi_status);
/* Messages waiting on local `receive_endpoint`. Errors: MCAPI_ERR_NODE_NOTINIT,
 * MCAPI_ERR_ENDP_INVALID, MCAPI_ERR_ENDP_REMOTE. */
mcapi_uint_t mcapi_msg_available(mcapi_endpoint_t receive_endpoint, mcapi_status_t *mcapi_status);

/* ---- Packet channels ---- */

/* Connects `send_endpoint` to `receive_endpoint` as a packet channel (any node may connect
 * any two endpoints). Errors: MCAPI_ERR_NODE_NOTINIT, MCAPI_ERR_ENDP_INVALID,
 * MCAPI_ERR_CHAN_CONNECTED, MCAPI_ERR_PARAMETER, MCAPI_ERR_REQUEST_LIMIT,
 * MCAPI_ERR_TRANSMISSION. */
void mcapi_pktchan_connect_i(mcapi_endpoint_t send_endpoint, mcapi_endpoint_t receive_endpoint,
                             mcapi_request_t *request, mcapi_status_t *mcapi_status);
/* Opens the receive side at local `receive_endpoint`; completes (filling *recv_handle) once
 * the channel is connected and both sides are open. Errors: MCAPI_ERR_NODE_NOTINIT,
 * MCAPI_ERR_ENDP_INVALID, MCAPI_ERR_ENDP_REMOTE, MCAPI_ERR_CHAN_TYPE,
 * MCAPI_ERR_CHAN_DIRECTION, MCAPI_ERR_CHAN_OPEN, MCAPI_ERR_CHAN_OPENPENDING,
 * MCAPI_ERR_PARAMETER, MCAPI_ERR_REQUEST_LIMIT, MCAPI_ERR_TRANSMISSION. */
void mcapi_pktchan_recv_open_i(mcapi_pktchan_recv_hndl_t *recv_handle,
                               mcapi_endpoint_t receive_endpoint, mcapi_request_t *request,
                               mcapi_status_t *mcapi_status);
/* Opens the send side at local `send_endpoint`. Errors: as mcapi_pktchan_recv_open_i. */
void mcapi_pktchan_send_open_i(mcapi_pktchan_send_hndl_t *send_handle,
                               mcapi_endpoint_t send_endpoint, mcapi_request_t *request,
                               mcapi_status_t *mcapi_status);
/* Starts sending a packet of `size` bytes; MCAPI_PENDING while the receiver's buffer is full.
 * Errors: MCAPI_ERR_NODE_NOTINIT, MCAPI_ERR_CHAN_INVALID, MCAPI_ERR_CHAN_NOTOPEN,
 * MCAPI_ERR_PKT_LIMIT, MCAPI_ERR_PARAMETER, MCAPI_ERR_REQUEST_LIMIT,
 * MCAPI_ERR_TRANSMISSION. */
void mcapi_pktchan_send_i(mcapi_pktchan_send_hndl_t send_handle, const void *buffer, size_t size,
                          mcapi_request_t *request, mcapi_status_t *mcapi_status);
/* Sends a packet, waiting while the receiver's buffer is full (up to the endpoint's timeout).
 * Errors: as mcapi_pktchan_send_i, and MCAPI_TIMEOUT. */
void mcapi_pktchan_send(mcapi_pktchan_send_hndl_t send_handle, const void *buffer, size_t size,
                        mcapi_status_t *mcapi_status);
/* Starts receiving a packet: at completion *buffer points to a library buffer holding it
 * (the request's size is the packet's); give it back with mcapi_pktchan_release. Errors:
 * MCAPI_ERR_NODE_NOTINIT, MCAPI_ERR_CHAN_INVALID, MCAPI_ERR_PARAMETER,
 * MCAPI_ERR_REQUEST_LIMIT; at completion MCAPI_ERR_CHAN_NOTOPEN (the sender closed),
 * MCAPI_ERR_TRANSMISSION (the sender's node is lost), MCAPI_ERR_MEM_LIMIT (more than
 * max_packet_buffers unreleased). */
void mcapi_pktchan_recv_i(mcapi_pktchan_recv_hndl_t receive_handle, void **buffer,
                          mcapi_request_t *request, mcapi_status_t *mcapi_status);
/* Receives a packet, waiting up to the endpoint's timeout. Errors: as mcapi_pktchan_recv_i,
 * and MCAPI_TIMEOUT. */
void mcapi_pktchan_recv(mcapi_pktchan_recv_hndl_t receive_handle, void **buffer,
                        size_t *received_size, mcapi_status_t *mcapi_status);
/* Packets waiting on the channel. Errors: MCAPI_ERR_NODE_NOTINIT, MCAPI_ERR_CHAN_INVALID. */
mcapi_uint_t mcapi_pktchan_available(mcapi_pktchan_recv_hndl_t receive_handle,
                                     mcapi_status_t *mcapi_status);
/* Gives a received packet buffer back (in any order). Errors: MCAPI_ERR_NODE_NOTINIT,
 * MCAPI_ERR_BUF_INVALID (not a buffer we handed out, or released already). */
void mcapi_pktchan_release(void *buffer, mcapi_status_t *mcapi_status);
/* MCAPI_TRUE once `buffer` is released (MCAPI_FALSE and MCAPI_PENDING while held).
 * Errors: MCAPI_ERR_NODE_NOTINIT. */
mcapi_boolean_t mcapi_pktchan_release_test(void *buffer, mcapi_status_t *mcapi_status);
/* Closes the receive side; packets not yet received are discarded. Errors:
 * MCAPI_ERR_NODE_NOTINIT, MCAPI_ERR_CHAN_INVALID (not an open receive handle),
 * MCAPI_ERR_PARAMETER, MCAPI_ERR_REQUEST_LIMIT. */
void mcapi_pktchan_recv_close_i(mcapi_pktchan_recv_hndl_t receive_handle,
                                mcapi_request_t *request, mcapi_status_t *mcapi_status);
/* Closes the send side; packets sent stay receivable. Errors: as mcapi_pktchan_recv_close_i. */
void mcapi_pktchan_send_close_i(mcapi_pktchan_send_hndl_t send_handle, mcapi_request_t *request,
                                mcapi_status_t *mcapi_status);

/* ---- Scalar channels ---- */

/* Connects two endpoints as a scalar channel. Errors: as mcapi_pktchan_connect_i. */
void mcapi_sclchan_connect_i(mcapi_endpoint_t send_endpoint, mcapi_endpoint_t receive_endpoint,
                             mcapi_request_t *request, mcapi_status_t *mcapi_status);
/* Opens the receive side of a scalar channel. Errors: as mcapi_pktchan_recv_open_i. */
void mcapi_sclchan_recv_open_i(mcapi_sclchan_recv_hndl_t *receive_handle,
                               mcapi_endpoint_t receive_endpoint, mcapi_request_t *request,
                               mcapi_status_t *mcapi_status);
/* Opens the send side of a scalar channel. Errors: as mcapi_pktchan_recv_open_i. */
void mcapi_sclchan_send_open_i(mcapi_sclchan_send_hndl_t *send_handle,
                               mcapi_endpoint_t send_endpoint, mcapi_request_t *request,
                               mcapi_status_t *mcapi_status);
/* Sends a 64-bit scalar, waiting while the receiver's buffer is full. Errors:
 * MCAPI_ERR_NODE_NOTINIT, MCAPI_ERR_CHAN_INVALID, MCAPI_ERR_CHAN_NOTOPEN, MCAPI_TIMEOUT,
 * MCAPI_ERR_TRANSMISSION. */
void mcapi_sclchan_send_uint64(mcapi_sclchan_send_hndl_t send_handle, mcapi_uint64_t dataword,
                               mcapi_status_t *mcapi_status);
/* Sends a 32-bit scalar. Errors: as mcapi_sclchan_send_uint64. */
void mcapi_sclchan_send_uint32(mcapi_sclchan_send_hndl_t send_handle, mcapi_uint32_t dataword,
                               mcapi_status_t *mcapi_status);
/* Sends a 16-bit scalar. Errors: as mcapi_sclchan_send_uint64. */
void mcapi_sclchan_send_uint16(mcapi_sclchan_send_hndl_t send_handle, mcapi_uint16_t dataword,
                               mcapi_status_t *mcapi_status);
/* Sends an 8-bit scalar. Errors: as mcapi_sclchan_send_uint64. */
void mcapi_sclchan_send_uint8(mcapi_sclchan_send_hndl_t send_handle, mcapi_uint8_t dataword,
                              mcapi_status_t *mcapi_status);
/* Receives a 64-bit scalar, waiting up to the endpoint's timeout. Errors:
 * MCAPI_ERR_NODE_NOTINIT, MCAPI_ERR_CHAN_INVALID, MCAPI_ERR_SCL_SIZE (the next scalar was
 * sent with another width; it stays queued), MCAPI_ERR_CHAN_NOTOPEN, MCAPI_TIMEOUT,
 * MCAPI_ERR_TRANSMISSION. */
mcapi_uint64_t mcapi_sclchan_recv_uint64(mcapi_sclchan_recv_hndl_t receive_handle,
                                         mcapi_status_t *mcapi_status);
/* Receives a 32-bit scalar. Errors: as mcapi_sclchan_recv_uint64. */
mcapi_uint32_t mcapi_sclchan_recv_uint32(mcapi_sclchan_recv_hndl_t receive_handle,
                                         mcapi_status_t *mcapi_status);
/* Receives a 16-bit scalar. Errors: as mcapi_sclchan_recv_uint64. */
mcapi_uint16_t mcapi_sclchan_recv_uint16(mcapi_sclchan_recv_hndl_t receive_handle,
                                         mcapi_status_t *mcapi_status);
/* Receives an 8-bit scalar. Errors: as mcapi_sclchan_recv_uint64. */
mcapi_uint8_t mcapi_sclchan_recv_uint8(mcapi_sclchan_recv_hndl_t receive_handle,
                                       mcapi_status_t *mcapi_status);
/* Scalars waiting on the channel. Errors: MCAPI_ERR_NODE_NOTINIT, MCAPI_ERR_CHAN_INVALID. */
mcapi_uint_t mcapi_sclchan_available(mcapi_sclchan_recv_hndl_t receive_handle,
                                     mcapi_status_t *mcapi_status);
/* Closes the receive side; scalars not yet received are discarded. Errors: as
 * mcapi_pktchan_recv_close_i. */
void mcapi_sclchan_recv_close_i(mcapi_sclchan_recv_hndl_t receive_handle,
                                mcapi_request_t *request, mcapi_status_t *mcapi_status);
/* Closes the send side. Errors: as mcapi_pktchan_recv_close_i. */
void mcapi_sclchan_send_close_i(mcapi_sclchan_send_hndl_t send_handle, mcapi_request_t *request,
                                mcapi_status_t *mcapi_status);

/* ---- Requests ---- */

/* MCAPI_TRUE once the request completed (its results are written, *size set, and the request
 * is gone); MCAPI_FALSE with MCAPI_PENDING before. Errors: MCAPI_ERR_NODE_NOTINIT,
 * MCAPI_ERR_REQUEST_INVALID, MCAPI_ERR_PARAMETER, or the operation's own error. */
mcapi_boolean_t mcapi_test(mcapi_request_t *request, size_t *size, mcapi_status_t *mcapi_status);
/* Waits up to `timeout` ms for the request (a timeout leaves it pending). Errors:
 * MCAPI_TIMEOUT, MCAPI_ERR_REQUEST_CANCELLED, MCAPI_ERR_REQUEST_INVALID, MCAPI_ERR_PARAMETER,
 * MCAPI_ERR_NODE_NOTINIT, or the operation's own error. */
mcapi_boolean_t mcapi_wait(mcapi_request_t *request, size_t *size, mcapi_timeout_t timeout,
                           mcapi_status_t *mcapi_status);
/* Waits up to `timeout` ms for the first of `number` requests; returns its index (also when
 * its operation failed: the status is that error, so a receive thread knows which channel
 * broke). Errors: as mcapi_wait. */
mcapi_uint_t mcapi_wait_any(size_t number, mcapi_request_t **requests, size_t *size,
                            mcapi_timeout_t timeout, mcapi_status_t *mcapi_status);
/* Cancels a pending request: nothing of it happens later, and a wait on it reports
 * MCAPI_ERR_REQUEST_CANCELLED (once; then the request is gone). Errors:
 * MCAPI_ERR_REQUEST_INVALID (completed, or never issued), MCAPI_ERR_NODE_NOTINIT. */
void mcapi_cancel(mcapi_request_t *request, mcapi_status_t *mcapi_status);

/* ---- Other ---- */

/* Writes the name of `status` ("MCAPI_SUCCESS" ...) into `status_message` (`size` bytes,
 * MCAPI_MAX_STATUS_SIZE suffice) and returns it. Never fails. */
char *mcapi_display_status(mcapi_status_t status, char *status_message, size_t size);
/* The calling thread's last failure, one line ("" when none). Never fails. */
const char *kioku_mcapi_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* KIOKU_MCAPI_H */
