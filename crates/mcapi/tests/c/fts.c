/*
 * The C API's functional test, run as two processes (node 0 checks, node 1 serves) over the
 * transport the environment's KIOKU_MCAPI_* topology names. Every function of kioku_mcapi.h
 * and the status codes it documents are exercised; each check prints what failed and the
 * program exits 1 at the first failure. Usage: fts NODE
 */
#include "kioku_mcapi.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int checks;
static mcapi_node_t me;

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        checks++;                                                                          \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "node %u: %s:%d: check failed: %s (last error: %s)\n", me,     \
                    __FILE__, __LINE__, #cond, kioku_mcapi_last_error());                  \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
static int chk(int cond, const char *what, int line) {
    if (!cond) {
        fprintf(stderr, "node %u: line %d: check failed: %s (last error: %s)\n", me, line, what,
                kioku_mcapi_last_error());
        exit(1);
    }
    return 1;
}
#define CK(cond) chk((cond), #cond, __LINE__)
#define ST(expr, want)                                                                     \
    do {                                                                                   \
        mcapi_status_t st_ = 0;                                                            \
        char a_[MCAPI_MAX_STATUS_SIZE], b_[MCAPI_MAX_STATUS_SIZE];                         \
        (void)(expr);                                                                      \
        if (st_ != (want)) {                                                               \
            fprintf(stderr, "node %u: %s:%d: %s gave %s, not %s (%s)\n", me, __FILE__,     \
                    __LINE__, #expr, mcapi_display_status(st_, a_, sizeof a_),              \
                    mcapi_display_status(want, b_, sizeof b_), kioku_mcapi_last_error());  \
            exit(1);                                                                       \
        }                                                                                  \
        checks++;                                                                          \
    } while (0)
#define S (&st_)
/* A non-blocking call that may already have completed. */
#define ST_ISSUED(expr)                                                                    \
    do {                                                                                   \
        mcapi_status_t st_ = 0;                                                            \
        (void)(expr);                                                                      \
        CK(st_ == MCAPI_SUCCESS || st_ == MCAPI_PENDING);                                  \
    } while (0)
#define INF MCAPI_TIMEOUT_INFINITE

static mcapi_endpoint_t ctl, peer_ctl;

static void say(const char *what) {
    ST(mcapi_msg_send(ctl, peer_ctl, what, strlen(what) + 1, 0, S), MCAPI_SUCCESS);
}

static void expect(const char *what) {
    char buf[64];
    size_t n;
    ST(mcapi_msg_recv(ctl, buf, sizeof buf, &n, S), MCAPI_SUCCESS);
    if (strcmp(buf, what) != 0) {
        fprintf(stderr, "node %u: expected \"%s\", got \"%s\"\n", me, what, buf);
        exit(1);
    }
}

static void wait_ok(mcapi_request_t *r, size_t *size) {
    ST(mcapi_wait(r, size, 20000, S), MCAPI_SUCCESS);
}

static void before_init(void) {
    char buf[MCAPI_MAX_STATUS_SIZE];
    CHECK(strcmp(mcapi_display_status(MCAPI_SUCCESS, buf, sizeof buf), "MCAPI_SUCCESS") == 0);
    CHECK(strcmp(mcapi_display_status(MCAPI_ERR_TRANSMISSION, buf, sizeof buf),
                 "MCAPI_ERR_TRANSMISSION") == 0);
    CHECK(strcmp(mcapi_display_status(9999, buf, sizeof buf), "MCAPI_UNKNOWN_STATUS") == 0);
    ST(mcapi_endpoint_create(1, S), MCAPI_ERR_NODE_NOTINIT);
    ST(mcapi_node_id_get(S), MCAPI_ERR_NODE_NOTINIT);
    ST(mcapi_finalize(S), MCAPI_ERR_NODE_NOTINIT);
    mcapi_info_t info;
    ST(mcapi_initialize(0, 4000, NULL, NULL, &info, S), MCAPI_ERR_NODE_INVALID);
    ST(mcapi_initialize(7, me, NULL, NULL, &info, S), MCAPI_ERR_DOMAIN_INVALID);
    mcapi_node_attributes_t na;
    ST(mcapi_node_init_attributes(&na, S), MCAPI_SUCCESS);
    mcapi_uint_t t = MCAPI_NODE_ATTR_TYPE_REGULAR;
    ST(mcapi_node_set_attribute(&na, MCAPI_NODE_ATTR_TYPE, &t, sizeof t, S), MCAPI_SUCCESS);
    ST(mcapi_node_set_attribute(&na, 99, &t, sizeof t, S), MCAPI_ERR_ATTR_NUM);
    ST(mcapi_node_set_attribute(&na, MCAPI_NODE_ATTR_TYPE, &t, 2, S), MCAPI_ERR_ATTR_SIZE);
    ST(mcapi_initialize(0, me, &na, NULL, &info, S), MCAPI_SUCCESS);
    CHECK(info.mcapi_version == MCAPI_VERSION && info.number_of_nodes == 2);
    CHECK(info.organization_id == KIOKU_MCAPI_ORG_ID);
    ST(mcapi_initialize(0, me, NULL, NULL, &info, S), MCAPI_ERR_NODE_INITIALIZED);
    ST(CK(mcapi_node_id_get(S) == me), MCAPI_SUCCESS);
    ST(CK(mcapi_domain_id_get(S) == 0), MCAPI_SUCCESS);
}

static void endpoints(void) {
    ctl = mcapi_endpoint_create(1, NULL);
    ST(mcapi_endpoint_create(1, S), MCAPI_ERR_ENDP_EXISTS);
    ST(mcapi_endpoint_create(70000, S), MCAPI_ERR_PORT_INVALID);
    mcapi_endpoint_t any;
    ST(any = mcapi_endpoint_create(MCAPI_PORT_ANY, S), MCAPI_SUCCESS);
    CHECK(any != ctl && any != MCAPI_NULL);
    ST(peer_ctl = mcapi_endpoint_get(0, 1 - me, 1, INF, S), MCAPI_SUCCESS);
    ST(mcapi_endpoint_get(0, 1 - me, 1, 10, S), MCAPI_SUCCESS);
    ST(mcapi_endpoint_get(0, 9, 1, 10, S), MCAPI_ERR_NODE_INVALID);
    ST(mcapi_endpoint_get(0, 1 - me, 70000, 10, S), MCAPI_ERR_PORT_INVALID);
    ST(mcapi_endpoint_get(0, 1 - me, 555, 20, S), MCAPI_TIMEOUT);
    ST(mcapi_endpoint_release(peer_ctl, S), MCAPI_SUCCESS);
    /* Attributes. */
    mcapi_uint_t v = 0;
    ST(mcapi_endpoint_get_attribute(ctl, MCAPI_ENDP_ATTR_TIMEOUT, &v, sizeof v, S), MCAPI_SUCCESS);
    CHECK(v == (mcapi_uint_t)MCAPI_TIMEOUT_INFINITE);
    v = 100;
    ST(mcapi_endpoint_set_attribute(any, MCAPI_ENDP_ATTR_TIMEOUT, &v, sizeof v, S), MCAPI_SUCCESS);
    v = 0;
    ST(mcapi_endpoint_get_attribute(any, MCAPI_ENDP_ATTR_TIMEOUT, &v, sizeof v, S), MCAPI_SUCCESS);
    CHECK(v == 100);
    ST(mcapi_endpoint_get_attribute(any, MCAPI_ENDP_ATTR_TYPE, &v, sizeof v, S), MCAPI_SUCCESS);
    CHECK(v == MCAPI_ENDP_ATTR_TYPE_MESSAGE);
    ST(mcapi_endpoint_get_attribute(any, MCAPI_ENDP_ATTR_MAX_PAYLOAD_SIZE, &v, sizeof v, S),
       MCAPI_SUCCESS);
    CHECK(v == MCAPI_MAX_MSG_SIZE);
    ST(mcapi_endpoint_set_attribute(any, MCAPI_ENDP_ATTR_TYPE, &v, sizeof v, S),
       MCAPI_ERR_ATTR_READONLY);
    ST(mcapi_endpoint_get_attribute(any, 99, &v, sizeof v, S), MCAPI_ERR_ATTR_NUM);
    ST(mcapi_endpoint_get_attribute(any, MCAPI_ENDP_ATTR_TIMEOUT, &v, 2, S), MCAPI_ERR_ATTR_SIZE);
    ST(mcapi_endpoint_get_attribute(any, MCAPI_ENDP_ATTR_GET_SOURCE, &v, sizeof v, S),
       MCAPI_ERR_ATTR_NOTSUPPORTED);
    ST(mcapi_endpoint_get_attribute(peer_ctl, MCAPI_ENDP_ATTR_TIMEOUT, &v, sizeof v, S),
       MCAPI_ERR_ENDP_REMOTE);
    ST(mcapi_endpoint_get_attribute(ctl, MCAPI_ENDP_ATTR_TIMEOUT, NULL, 4, S), MCAPI_ERR_PARAMETER);
    /* A timeout attribute bounds a blocking receive. */
    char buf[8];
    size_t n;
    ST(mcapi_msg_recv(any, buf, sizeof buf, &n, S), MCAPI_TIMEOUT);
    ST(mcapi_endpoint_delete(peer_ctl, S), MCAPI_ERR_ENDP_NOTOWNER);
    ST(mcapi_endpoint_delete(any, S), MCAPI_SUCCESS);
    ST(mcapi_endpoint_delete(any, S), MCAPI_ERR_ENDP_INVALID);
    ST(mcapi_msg_available(0, S), MCAPI_ERR_ENDP_INVALID);
    mcapi_uint_t state;
    ST(mcapi_node_get_attribute(0, 1 - me, KIOKU_MCAPI_NODE_ATTR_STATE, &state, sizeof state, S),
       MCAPI_SUCCESS);
    CHECK(state == KIOKU_MCAPI_NODE_UP || state == KIOKU_MCAPI_NODE_CONNECTING);
    ST(mcapi_node_get_attribute(0, 1 - me, 77, &state, sizeof state, S), MCAPI_ERR_ATTR_NUM);
}

static void messages(void) {
    mcapi_endpoint_t ep = mcapi_endpoint_create(4, NULL);
    mcapi_endpoint_t peer = mcapi_endpoint_get(0, 1 - me, 4, INF, NULL);
    char big[100];
    size_t n;
    mcapi_request_t r;
    if (me == 0) {
        ST(mcapi_msg_send(ep, peer, "low", 4, 5, S), MCAPI_SUCCESS);
        ST(mcapi_msg_send(ep, peer, "high", 5, 0, S), MCAPI_SUCCESS);
        ST(mcapi_msg_send_i(ep, peer, "0123456789", 10, 3, &r, S), MCAPI_SUCCESS);
        CHECK(mcapi_test(&r, &n, NULL) == MCAPI_TRUE && n == 10);
        ST(mcapi_test(&r, &n, S), MCAPI_ERR_REQUEST_INVALID);
        ST(mcapi_msg_send(ep, peer, "x", 1, 8, S), MCAPI_ERR_PRIORITY);
        ST(mcapi_msg_send(ep, peer, NULL, 5, 0, S), MCAPI_ERR_PARAMETER);
        ST(mcapi_msg_send(ep, 0, "x", 1, 0, S), MCAPI_ERR_ENDP_INVALID);
        char *huge = calloc(1, MCAPI_MAX_MSG_SIZE + 1);
        ST(mcapi_msg_send(ep, peer, huge, MCAPI_MAX_MSG_SIZE + 1, 0, S), MCAPI_ERR_MSG_LIMIT);
        ST(mcapi_msg_send(ep, peer, huge, MCAPI_MAX_MSG_SIZE, 7, S), MCAPI_SUCCESS);
        free(huge);
        say("sent");
        expect("received");
    } else {
        expect("sent");
        ST(CK(mcapi_msg_available(ep, S) == 4), MCAPI_SUCCESS);
        ST(mcapi_msg_recv(ep, big, sizeof big, &n, S), MCAPI_SUCCESS);
        CHECK(n == 5 && strcmp(big, "high") == 0);
        ST(mcapi_msg_recv(ep, big, 4, &n, S), MCAPI_ERR_MSG_TRUNCATED);
        CHECK(n == 4 && memcmp(big, "0123", 4) == 0);
        ST(mcapi_msg_recv_i(ep, big, sizeof big, &r, S), MCAPI_SUCCESS);
        wait_ok(&r, &n);
        CHECK(n == 4 && strcmp(big, "low") == 0);
        char *huge = malloc(MCAPI_MAX_MSG_SIZE);
        ST(mcapi_msg_recv(ep, huge, MCAPI_MAX_MSG_SIZE, &n, S), MCAPI_SUCCESS);
        CHECK(n == MCAPI_MAX_MSG_SIZE);
        free(huge);
        /* A receive posted before the message arrives. */
        ST(mcapi_msg_recv_i(ep, big, sizeof big, &r, S), MCAPI_PENDING);
        ST(CK(mcapi_test(&r, &n, S) == MCAPI_FALSE), MCAPI_PENDING);
        ST(mcapi_wait(&r, &n, 10, S), MCAPI_TIMEOUT);
        say("received");
        ST(mcapi_cancel(&r, S), MCAPI_SUCCESS);
        ST(mcapi_wait(&r, &n, INF, S), MCAPI_ERR_REQUEST_CANCELLED);
        ST(mcapi_cancel(&r, S), MCAPI_ERR_REQUEST_INVALID);
        ST(mcapi_msg_recv_i(ep, NULL, 5, &r, S), MCAPI_ERR_PARAMETER);
        ST(mcapi_msg_recv_i(ep, big, 5, NULL, S), MCAPI_ERR_PARAMETER);
    }
}

static void packets(void) {
    /* Node 0 connects its send endpoint 2 to node 1's receive endpoint 2. */
    mcapi_endpoint_t ep = mcapi_endpoint_create(2, NULL);
    mcapi_endpoint_t peer = mcapi_endpoint_get(0, 1 - me, 2, INF, NULL);
    mcapi_request_t r, rc;
    size_t n;
    if (me == 0) {
        ST_ISSUED(mcapi_pktchan_connect_i(ep, peer, &rc, S));
        wait_ok(&rc, &n);
        ST(mcapi_pktchan_connect_i(ep, peer, &rc, S), MCAPI_ERR_CHAN_CONNECTED);
        mcapi_pktchan_send_hndl_t h;
        mcapi_pktchan_recv_hndl_t wrong;
        ST(mcapi_pktchan_recv_open_i(&wrong, ep, &r, S), MCAPI_ERR_CHAN_DIRECTION);
        mcapi_sclchan_send_hndl_t sw;
        ST(mcapi_sclchan_send_open_i(&sw, ep, &r, S), MCAPI_ERR_CHAN_TYPE);
        mcapi_status_t st;
        mcapi_pktchan_send_open_i(&h, ep, &r, &st);
        CHECK(st == MCAPI_PENDING || st == MCAPI_SUCCESS);
        wait_ok(&r, &n);
        ST(mcapi_pktchan_send_open_i(&h, ep, &r, S), MCAPI_ERR_CHAN_OPEN);
        for (int i = 0; i < 50; i++) {
            char p[200];
            memset(p, i, sizeof p);
            ST(mcapi_pktchan_send(h, p, 1 + i * 3, S), MCAPI_SUCCESS);
        }
        ST(mcapi_pktchan_send_i(h, "", 0, &r, S), MCAPI_SUCCESS);
        wait_ok(&r, &n);
        ST(mcapi_pktchan_send(h, NULL, 3, S), MCAPI_ERR_PARAMETER);
        ST(mcapi_sclchan_send_uint8(h, 1, S), MCAPI_ERR_CHAN_INVALID);
        ST(mcapi_pktchan_send(12345, "x", 1, S), MCAPI_ERR_CHAN_INVALID);
        expect("got packets");
        ST(mcapi_pktchan_send(h, "late", 4, S), MCAPI_SUCCESS);
        expect("receiver closed");
        mcapi_status_t s2 = MCAPI_SUCCESS;
        for (int tries = 0; tries < 2000 && s2 == MCAPI_SUCCESS; tries++) {
            mcapi_pktchan_send(h, "more", 4, &s2);
            usleep(1000);
        }
        CHECK(s2 == MCAPI_ERR_CHAN_NOTOPEN);
        ST(mcapi_endpoint_delete(ep, S), MCAPI_ERR_CHAN_OPEN);
        ST(mcapi_pktchan_send_close_i(h, &r, S), MCAPI_SUCCESS);
        wait_ok(&r, &n);
        ST(mcapi_pktchan_send_close_i(h, &r, S), MCAPI_ERR_CHAN_INVALID);
        ST(mcapi_endpoint_delete(ep, S), MCAPI_SUCCESS);
    } else {
        mcapi_pktchan_recv_hndl_t h;
        mcapi_pktchan_recv_open_i(&h, ep, &r, NULL);
        wait_ok(&r, &n);
        void *buf;
        void *held[50];
        for (int i = 0; i < 50; i++) {
            if (i % 2 == 0) {
                ST(mcapi_pktchan_recv(h, &buf, &n, S), MCAPI_SUCCESS);
            } else {
                mcapi_status_t st;
                mcapi_pktchan_recv_i(h, &buf, &r, &st);
                CHECK(st == MCAPI_SUCCESS || st == MCAPI_PENDING);
                wait_ok(&r, &n);
            }
            CHECK(n == (size_t)(1 + i * 3));
            CHECK(((unsigned char *)buf)[n - 1] == i);
            held[i] = buf;
        }
        ST(mcapi_pktchan_recv(h, &buf, &n, S), MCAPI_SUCCESS);
        CHECK(n == 0);
        ST(mcapi_pktchan_release(buf, S), MCAPI_SUCCESS);
        /* Release in reverse order; a second release and a foreign pointer are refused. */
        for (int i = 49; i >= 0; i--) {
            ST(CK(mcapi_pktchan_release_test(held[i], S) == MCAPI_FALSE), MCAPI_PENDING);
            ST(mcapi_pktchan_release(held[i], S), MCAPI_SUCCESS);
            ST(CK(mcapi_pktchan_release_test(held[i], S) == MCAPI_TRUE), MCAPI_SUCCESS);
        }
        ST(mcapi_pktchan_release(held[0], S), MCAPI_ERR_BUF_INVALID);
        ST(mcapi_pktchan_release(&n, S), MCAPI_ERR_BUF_INVALID);
        say("got packets");
        while (mcapi_pktchan_available(h, NULL) == 0)
            usleep(1000);
        ST(CK(mcapi_pktchan_available(h, S) == 1), MCAPI_SUCCESS);
        ST(mcapi_pktchan_recv_close_i(h, &r, S), MCAPI_SUCCESS);
        wait_ok(&r, &n);
        ST(mcapi_pktchan_available(h, S), MCAPI_ERR_CHAN_INVALID);
        say("receiver closed");
    }
}

static void scalars(void) {
    mcapi_endpoint_t ep = mcapi_endpoint_create(3, NULL);
    mcapi_endpoint_t peer = mcapi_endpoint_get(0, 1 - me, 3, INF, NULL);
    mcapi_request_t r;
    size_t n;
    if (me == 1) { /* this time the receiver connects */
        ST_ISSUED(mcapi_sclchan_connect_i(peer, ep, &r, S));
        wait_ok(&r, &n);
        mcapi_sclchan_recv_hndl_t h;
        mcapi_pktchan_recv_hndl_t wrong;
        ST(mcapi_pktchan_recv_open_i(&wrong, ep, &r, S), MCAPI_ERR_CHAN_TYPE);
        mcapi_sclchan_recv_open_i(&h, ep, &r, NULL);
        wait_ok(&r, &n);
        for (int i = 0; i < 20; i++) {
            ST(CK(mcapi_sclchan_recv_uint64(h, S) == 0x0123456789abcdefull + i), MCAPI_SUCCESS);
            ST(CK(mcapi_sclchan_recv_uint32(h, S) == 0x89abcdefu + i), MCAPI_SUCCESS);
            ST(CK(mcapi_sclchan_recv_uint16(h, S) == 0xcdef + i), MCAPI_SUCCESS);
            ST(CK(mcapi_sclchan_recv_uint8(h, S) == 0xef - i), MCAPI_SUCCESS);
        }
        while (mcapi_sclchan_available(h, NULL) == 0)
            usleep(1000);
        ST(mcapi_sclchan_recv_uint8(h, S), MCAPI_ERR_SCL_SIZE);
        ST(CK(mcapi_sclchan_available(h, S) == 1), MCAPI_SUCCESS);
        ST(CK(mcapi_sclchan_recv_uint16(h, S) == 777), MCAPI_SUCCESS);
        ST(mcapi_pktchan_available(h, S), MCAPI_ERR_CHAN_INVALID);
        /* The sender closes: a receive then fails instead of waiting. */
        ST(mcapi_sclchan_recv_uint32(h, S), MCAPI_ERR_CHAN_NOTOPEN);
        ST(mcapi_sclchan_recv_close_i(h, &r, S), MCAPI_SUCCESS);
        wait_ok(&r, &n);
        say("scalars done");
    } else {
        mcapi_sclchan_send_hndl_t h;
        mcapi_sclchan_send_open_i(&h, ep, &r, NULL);
        wait_ok(&r, &n);
        for (int i = 0; i < 20; i++) {
            ST(mcapi_sclchan_send_uint64(h, 0x0123456789abcdefull + i, S), MCAPI_SUCCESS);
            ST(mcapi_sclchan_send_uint32(h, 0x89abcdefu + i, S), MCAPI_SUCCESS);
            ST(mcapi_sclchan_send_uint16(h, 0xcdef + i, S), MCAPI_SUCCESS);
            ST(mcapi_sclchan_send_uint8(h, 0xef - i, S), MCAPI_SUCCESS);
        }
        ST(mcapi_sclchan_send_uint16(h, 777, S), MCAPI_SUCCESS);
        ST(mcapi_sclchan_send_close_i(h, &r, S), MCAPI_SUCCESS);
        wait_ok(&r, &n);
        expect("scalars done");
    }
}

static void requests(void) {
    mcapi_endpoint_t ep = mcapi_endpoint_create(5, NULL);
    mcapi_endpoint_t peer = mcapi_endpoint_get(0, 1 - me, 5, INF, NULL);
    size_t n;
    if (me == 0) {
        char a[16], b[16];
        mcapi_request_t ra, rb, rg;
        mcapi_endpoint_t got;
        mcapi_msg_recv_i(ep, a, sizeof a, &ra, NULL);
        mcapi_msg_recv_i(ctl, b, sizeof b, &rb, NULL);
        mcapi_endpoint_get_i(0, 1 - me, 6, &got, &rg, NULL);
        mcapi_request_t *all[3] = {&ra, &rb, &rg};
        ST(mcapi_wait_any(3, all, &n, 10, S), MCAPI_TIMEOUT);
        ST(mcapi_wait_any(0, all, &n, 10, S), MCAPI_ERR_PARAMETER);
        say("go");
        int done[3] = {0, 0, 0};
        for (int k = 0; k < 3; k++) {
            mcapi_request_t *left[3];
            int idx[3], m = 0;
            for (int i = 0; i < 3; i++)
                if (!done[i]) {
                    left[m] = all[i];
                    idx[m++] = i;
                }
            mcapi_status_t st;
            mcapi_uint_t i = mcapi_wait_any(m, left, &n, 20000, &st);
            CHECK(st == MCAPI_SUCCESS && i < (mcapi_uint_t)m);
            done[idx[i]] = 1;
        }
        CHECK(strcmp(a, "to 5") == 0 && strcmp(b, "to ctl") == 0);
        CHECK(got == mcapi_endpoint_get(0, 1 - me, 6, 5000, NULL));
        mcapi_request_t bogus = 12345;
        ST(mcapi_wait(&bogus, &n, 10, S), MCAPI_ERR_REQUEST_INVALID);
        ST(mcapi_test(&bogus, NULL, S), MCAPI_ERR_PARAMETER);
        ST(mcapi_cancel(&bogus, S), MCAPI_ERR_REQUEST_INVALID);
        (void)peer;
    } else {
        expect("go");
        mcapi_endpoint_create(6, NULL);
        ST(mcapi_msg_send(ep, peer, "to 5", 5, 0, S), MCAPI_SUCCESS);
        ST(mcapi_msg_send(ctl, peer_ctl, "to ctl", 7, 0, S), MCAPI_SUCCESS);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fts NODE\n");
        return 2;
    }
    me = (mcapi_node_t)atoi(argv[1]);
    before_init();
    endpoints();
    messages();
    packets();
    scalars();
    requests();
    if (me == 1) {
        expect("finish");
        ST(mcapi_finalize(S), MCAPI_SUCCESS);
    } else {
        say("finish");
        /* Node 1 finalizes: then its state says so, and sends to it fail. */
        mcapi_uint_t state = 0;
        for (int tries = 0; tries < 5000 && state != KIOKU_MCAPI_NODE_FINALIZED; tries++) {
            mcapi_node_get_attribute(0, 1, KIOKU_MCAPI_NODE_ATTR_STATE, &state, sizeof state, NULL);
            usleep(1000);
        }
        CHECK(state == KIOKU_MCAPI_NODE_FINALIZED);
        ST(mcapi_msg_send(ctl, peer_ctl, "x", 1, 0, S), MCAPI_ERR_TRANSMISSION);
        ST(mcapi_finalize(S), MCAPI_SUCCESS);
    }
    ST(mcapi_finalize(S), MCAPI_ERR_NODE_NOTINIT);
    printf("node %u: %d checks passed\n", me, checks);
    return 0;
}
