/*
 * The ofi plugin's bound on peer records (HM_OFI_PEERS, ofi_addr.c), with
 * lookups on one ofi+tcp context: nothing is sent, so no peer is stuck and
 * each record is busy exactly while a lookup's reference is held.
 *  - Up to the bound (16 here), lookups of new peers succeed.
 *  - Past it, with every record held, new peers still get one, up to half
 *    as many again (24); the next lookup fails with HM_OVERLOADED and is
 *    counted in peers_refused. A peer already known is still found.
 *  - A released record is idle: the next new peer evicts it (counted in
 *    peers_evicted) and the same name looked up again is a new record.
 *  - Closing the context frees every record, evicted ones included
 *    (AddressSanitizer's leak check in that build).
 * And the bound on port checks (ofi_portcheck.c): 20 peers whose listeners
 * never answer a connect (full accept queues) get stuck together; at most
 * 16 checks are in flight at once, none of them is taken for a refusal,
 * and a check left unanswered is given up after a second for another.
 * Usage: test_ofi_peers <ofi+tcp URI>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "na/ofi/ofi_internal.h"

#define PEERS_MAX 16u
#define PEERS_HARD (PEERS_MAX + PEERS_MAX / 2u)

static const char *g_uri;

static void pe_recv(void *arg, hmi_na_addr_t *source, void *buf, size_t len, uintptr_t token)
{
    (void)source, (void)buf, (void)len;
    hmi_na_msg_release(*(hmi_na_context_t **)arg, token);
}

/* Peer i: 127.0.0.1, port 30000 + i (nothing needs to listen there). */
static hm_return_t pe_lookup(hmi_na_context_t *ctx, unsigned int i, hmi_na_addr_t **out)
{
    char uri[64];
    snprintf(uri, sizeof(uri), "ofi+tcp://127.0.0.1:%u", 30000u + i);
    return ctx->x_class->c_ops.addr_lookup(ctx, uri, 0, out);
}

static uint64_t pe_stat(hmi_na_context_t *ctx, bool evicted)
{
    const struct hmi_na_peer_stats *ps = &ctx->x_peer_stats;
    return atomic_load(evicted ? &ps->ps_evicted : &ps->ps_refused);
}

static void test_peer_bound(void **state)
{
    (void)state;
    hmi_na_class_t *cls;
    hmi_na_context_t *ctx = NULL;
    assert_int_equal(hmi_na_class_open(g_uri, &cls), HM_SUCCESS);
    assert_int_equal(hmi_na_context_open(cls, 0, pe_recv, &ctx, NULL, NULL, &ctx), HM_SUCCESS);
    struct ofi_context *x = ofi_ctx(ctx);
    assert_int_equal(x->x_cls->k_peers_max, PEERS_MAX);

    hmi_na_addr_t *held[PEERS_HARD];
    size_t base = x->x_npeers; /* records the context made itself, if any */
    unsigned int n = 0;
    for (; n < PEERS_HARD - base; n++)
        assert_int_equal(pe_lookup(ctx, n, &held[n]), HM_SUCCESS);
    assert_int_equal(x->x_npeers, PEERS_HARD);
    assert_int_equal(pe_stat(ctx, true), 0);

    hmi_na_addr_t *extra = NULL;
    assert_int_equal(pe_lookup(ctx, n, &extra), HM_OVERLOADED);
    assert_int_equal(pe_stat(ctx, false), 1);
    hmi_na_addr_t *again = NULL; /* a known peer needs no new record */
    assert_int_equal(pe_lookup(ctx, 0, &again), HM_SUCCESS);
    assert_ptr_equal(again, held[0]);
    cls->c_ops.addr_unref(again);

    cls->c_ops.addr_unref(held[3]); /* now idle */
    assert_int_equal(pe_lookup(ctx, n, &extra), HM_SUCCESS);
    assert_int_equal(pe_stat(ctx, true), 1);
    assert_int_equal(x->x_npeers, PEERS_HARD);
    hmi_na_progress(ctx); /* frees the evicted record */
    assert_true(hmi_list_empty(&x->x_peer_grave));
    hmi_na_addr_t *back = NULL; /* held[3]'s name: evicted, so it needs a record again */
    cls->c_ops.addr_unref(extra);
    assert_int_equal(pe_lookup(ctx, 3, &back), HM_SUCCESS);
    assert_int_equal(pe_stat(ctx, true), 2);
    held[3] = back;

    for (unsigned int i = 0; i < n; i++)
        cls->c_ops.addr_unref(held[i]);
    hmi_na_context_close(ctx);
    hmi_na_class_close(cls);
}

#define DEAF_PEERS 20u
#define CHECKS_MAX 16u /* PORTCHECK_MAX */

/* A listener on 127.0.0.1 whose accept queue is full: further SYNs are
 * dropped, so a connect to it stays pending. Its port in *port; *filler
 * gets the connection that fills the queue. */
static int deaf_listener(unsigned int *port, int *filler)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(listen(fd, 0), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
    *port = ntohs(sin.sin_port);
    *filler = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(*filler, (struct sockaddr *)&sin, sizeof(sin)), 0);
    return fd;
}

static uint64_t pe_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void pe_sent(hmi_na_op_t *op, hm_return_t status)
{
    (void)op, (void)status;
}

static void test_port_checks_bounded(void **state)
{
    (void)state;
    hmi_na_class_t *cls;
    hmi_na_context_t *ctx = NULL;
    setenv("HM_OFI_PEERS", "64", 1); /* room: no stuck peer is failed for its record */
    assert_int_equal(hmi_na_class_open(g_uri, &cls), HM_SUCCESS);
    setenv("HM_OFI_PEERS", "16", 1);
    assert_int_equal(hmi_na_context_open(cls, 0, pe_recv, &ctx, NULL, NULL, &ctx), HM_SUCCESS);
    struct ofi_context *x = ofi_ctx(ctx);
    int lfd[DEAF_PEERS], filler[DEAF_PEERS];
    hmi_na_addr_t *peer[DEAF_PEERS];
    hmi_na_op_t *op[DEAF_PEERS];
    void *desc;
    void *buf = cls->c_ops.msg_buf_alloc(cls, 16, &desc);
    memset(buf, 0, 16);
    for (unsigned int i = 0; i < DEAF_PEERS; i++) {
        unsigned int port;
        lfd[i] = deaf_listener(&port, &filler[i]);
        char uri[64];
        snprintf(uri, sizeof(uri), "ofi+tcp://127.0.0.1:%u", port);
        assert_int_equal(cls->c_ops.addr_lookup(ctx, uri, 0, &peer[i]), HM_SUCCESS);
        op[i] = hmi_na_op_create(cls);
        op[i]->o_cb = pe_sent;
        assert_int_equal(hmi_na_msg_send(ctx, peer[i], buf, 16, desc, op[i]), HM_SUCCESS);
    }
    unsigned int most = 0;
    bool checked[DEAF_PEERS] = {false};
    uint64_t end = pe_now_ms() + 2500; /* past one check's second */
    while (pe_now_ms() < end) {
        hmi_na_progress(ctx);
        assert_true(x->x_nportchecks <= CHECKS_MAX);
        if (x->x_nportchecks > most)
            most = x->x_nportchecks;
        for (unsigned int i = 0; i < DEAF_PEERS; i++)
            checked[i] |= peer[i]->a_check_fd >= 0;
    }
    assert_int_equal(most, CHECKS_MAX);
    for (unsigned int i = 0; i < DEAF_PEERS; i++)
        assert_true(checked[i]); /* the last 4 once the first checks gave up */
    for (unsigned int i = 0; i < DEAF_PEERS; i++)
        assert_false(peer[i]->a_dead); /* a pending connect proves nothing */
    for (unsigned int i = 0; i < DEAF_PEERS; i++)
        cls->c_ops.addr_unref(peer[i]);
    hmi_na_context_close(ctx);
    for (unsigned int i = 0; i < DEAF_PEERS; i++) {
        hmi_na_op_destroy(op[i]);
        close(filler[i]);
        close(lfd[i]);
    }
    cls->c_ops.msg_buf_free(cls, buf, desc);
    hmi_na_class_close(cls);
}

int main(int argc, char **argv)
{
    g_uri = argc > 1 ? argv[1] : "ofi+tcp://127.0.0.1:0";
    setenv("HM_OFI_PEERS", "16", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peer_bound),
        cmocka_unit_test(test_port_checks_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
