/*
 * Back-pressure: 1500 8 KiB sends posted without progress fill
 * the provider's queue (-FI_EAGAIN); the plugin must queue them, retry from
 * progress, and complete every one exactly once with success, never showing
 * the caller an error. Two contexts of one class in one process. (4000
 * 64 KiB sends stall libfabric 1.17's shm for good: the receiver's shared
 * receive context runs out of entries for unexpected messages.) The same for
 * multi-piece RMA (fi_writemsg / fi_readmsg): 1024 puts, then 1024 gets, of
 * c_rma_iov_limit pieces each, whose limit must be what the provider grants.
 * Usage: test_ofi_eagain <protocol URI>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "na/ofi/ofi_internal.h"
#include "util/time.h"

#define EA_SENDS 1500

static const char *g_uri;

struct ea_rx {
    hmi_na_context_t *ctx;
    unsigned int received;
    unsigned int bad;
};

static void ea_recv(void *arg, hmi_na_addr_t *source, void *buf, size_t len, uintptr_t token)
{
    struct ea_rx *rx = arg;
    const uint8_t *b = buf;
    if (((uintptr_t)buf & 7) != 0 || len == 0 || b[0] != 0x5a || b[len - 1] != 0x5a)
        rx->bad++;
    rx->received++;
    hmi_na_msg_release(rx->ctx, token);
}

static unsigned int ea_done, ea_failed;

static void ea_send_cb(hmi_na_op_t *op, hm_return_t status)
{
    ea_done++;
    if (status != HM_SUCCESS && ea_failed++ == 0)
        fprintf(stderr, "first failed send: %s\n", hm_strerror(status));
}

static void test_send_queue_full(void **state)
{
    hmi_na_class_t *cls;
    assert_int_equal(hmi_na_class_open(g_uri, &cls), HM_SUCCESS);
    struct ea_rx rx = {0};
    hmi_na_context_t *srv, *cli;
    assert_int_equal(hmi_na_context_open(cls, 0, ea_recv, &rx, NULL, NULL, &srv), HM_SUCCESS);
    rx.ctx = srv;
    assert_int_equal(hmi_na_context_open(cls, 1, ea_recv, &rx, NULL, NULL, &cli), HM_SUCCESS);
    hmi_na_addr_t *self, *dest;
    char uri[256];
    size_t size = sizeof(uri);
    assert_int_equal(cls->c_ops.addr_self(srv, &self), HM_SUCCESS);
    assert_int_equal(cls->c_ops.addr_to_string(srv, self, uri, &size), HM_SUCCESS);
    assert_int_equal(cls->c_ops.addr_lookup(cli, uri, 0, &dest), HM_SUCCESS);

    size_t len = cls->c_eager_limit < 8192 ? cls->c_eager_limit : 8192;
    void *desc;
    uint8_t *buf = cls->c_ops.msg_buf_alloc(cls, len, &desc);
    assert_non_null(buf);
    memset(buf, 0x5a, len);
    hmi_na_op_t **ops = calloc(EA_SENDS, sizeof(*ops));
    for (int i = 0; i < EA_SENDS; i++) {
        ops[i] = hmi_na_op_create(cls);
        ops[i]->o_cb = ea_send_cb;
        assert_int_equal(hmi_na_msg_send(cli, dest, buf, len, desc, ops[i]), HM_SUCCESS);
    }
    /* The provider pushed back at some point: ops wait in the plugin's queue. */
    assert_false(hmi_list_empty(&ofi_ctx(cli)->x_retry));
    uint64_t deadline = hmi_time_ns() + 60ull * 1000000000u;
    while ((ea_done < EA_SENDS || rx.received < EA_SENDS) && hmi_time_ns() < deadline) {
        hmi_na_progress(cli);
        hmi_na_progress(srv);
    }
    assert_int_equal(ea_done, EA_SENDS);
    assert_int_equal(ea_failed, 0);
    assert_int_equal(rx.received, EA_SENDS);
    assert_int_equal(rx.bad, 0);
    for (int i = 0; i < EA_SENDS; i++)
        hmi_na_op_destroy(ops[i]);
    free(ops);
    cls->c_ops.msg_buf_free(cls, buf, desc);
    cls->c_ops.addr_unref(dest);
    cls->c_ops.addr_unref(self);
    hmi_na_context_close(cli);
    hmi_na_context_close(srv);
    assert_int_equal(hmi_na_class_close(cls), HM_SUCCESS);
}

/*
 * c_rma_iov_limit: with native RMA what fi_getinfo granted on both sides,
 * capped by what an op holds; owner-checked RMA (the NA's) takes the most.
 */
static void test_rma_iov_limit(void **state)
{
    (void)state;
    hmi_na_class_t *cls;
    assert_int_equal(hmi_na_class_open(g_uri, &cls), HM_SUCCESS);
    if (cls->c_rma_kind == HM_NA_RMA_OWNER_CHECKED) {
        assert_int_equal(cls->c_rma_iov_limit, HM_NA_RMA_IOV_MAX);
        hmi_na_class_close(cls);
        return;
    }
    const struct fi_tx_attr *tx = ofi_class(cls)->k_info->tx_attr;
    size_t want = OFI_RMA_IOV_MAX;
    if (tx->iov_limit < want)
        want = tx->iov_limit;
    if (tx->rma_iov_limit < want)
        want = tx->rma_iov_limit;
    assert_int_equal(cls->c_rma_iov_limit, want == 0 ? 1 : want);
    hmi_na_class_close(cls);
}

#define EA_RMAS 1024
#define EA_PIECE 256

static unsigned int ea_rma_done, ea_rma_failed;

static void ea_rma_cb(hmi_na_op_t *op, hm_return_t status)
{
    (void)op;
    ea_rma_done++;
    if (status != HM_SUCCESS && ea_rma_failed++ == 0)
        fprintf(stderr, "first failed rma: %s\n", hm_strerror(status));
}

/* Both sides of the RMA test: the server's region and the client's two. */
struct ea_rma {
    hmi_na_class_t *cls;
    hmi_na_context_t *srv, *cli;
    hmi_na_addr_t *dest;
    struct ea_rx rx;             /* no message is expected */
    size_t size;                 /* bytes of each region */
    uint8_t *remote, *out, *in;  /* remote: the server's; out: put from; in: get into */
    hmi_na_mem_t *rmem, *omem, *imem;
    void *rkey;
    hmi_na_op_t *ops[EA_RMAS];
};

/*
 * Post EA_RMAS ops without progress, then progress both contexts until all
 * completed. Op o carries `limit` pieces: local piece j of it goes to remote
 * piece limit - 1 - j of the same op, so a swapped iov shows. Returns whether
 * the provider pushed back (some op waited in the plugin's retry queue).
 */
static bool ea_rma_round(struct ea_rma *t, enum hmi_na_rma_dir dir, hmi_na_mem_t *local)
{
    unsigned int limit = t->cls->c_rma_iov_limit;
    ea_rma_done = ea_rma_failed = 0;
    bool pushed_back = false;
    for (unsigned int o = 0; o < EA_RMAS; o++) {
        struct hmi_na_rma_piece pieces[HM_NA_RMA_IOV_MAX];
        for (unsigned int j = 0; j < limit; j++) {
            size_t base = (size_t)o * limit * EA_PIECE;
            pieces[j] = (struct hmi_na_rma_piece){
                .rp_local = local,
                .rp_local_off = base + (size_t)j * EA_PIECE,
                .rp_rkey = t->rkey,
                .rp_remote_off = base + (size_t)(limit - 1 - j) * EA_PIECE,
                .rp_len = EA_PIECE,
            };
        }
        assert_int_equal(hmi_na_rma(t->cli, t->ops[o], dir, t->dest, pieces, limit), HM_SUCCESS);
        pushed_back |= !hmi_list_empty(&ofi_ctx(t->cli)->x_retry);
    }
    uint64_t deadline = hmi_time_ns() + 60ull * 1000000000u;
    while (ea_rma_done < EA_RMAS && hmi_time_ns() < deadline) {
        hmi_na_progress(t->cli);
        hmi_na_progress(t->srv);
    }
    fprintf(stderr, "%s: %u %s ops of %u pieces, provider pushed back: %s\n", g_uri, EA_RMAS,
            dir == HM_NA_RMA_PUT ? "put" : "get", limit, pushed_back ? "yes" : "no");
    assert_int_equal(ea_rma_done, EA_RMAS);
    assert_int_equal(ea_rma_failed, 0);
    return pushed_back;
}

static void ea_rma_open(struct ea_rma *t)
{
    assert_int_equal(hmi_na_class_open(g_uri, &t->cls), HM_SUCCESS);
    assert_int_equal(hmi_na_context_open(t->cls, 0, ea_recv, &t->rx, NULL, NULL, &t->srv),
                     HM_SUCCESS);
    t->rx.ctx = t->srv;
    assert_int_equal(hmi_na_context_open(t->cls, 1, ea_recv, &t->rx, NULL, NULL, &t->cli),
                     HM_SUCCESS);
    hmi_na_addr_t *self;
    char uri[256], key[256];
    size_t size = sizeof(uri), key_len = sizeof(key);
    assert_int_equal(t->cls->c_ops.addr_self(t->srv, &self), HM_SUCCESS);
    assert_int_equal(t->cls->c_ops.addr_to_string(t->srv, self, uri, &size), HM_SUCCESS);
    t->cls->c_ops.addr_unref(self);
    assert_int_equal(t->cls->c_ops.addr_lookup(t->cli, uri, 0, &t->dest), HM_SUCCESS);
    t->size = (size_t)EA_RMAS * t->cls->c_rma_iov_limit * EA_PIECE;
    t->remote = calloc(1, t->size);
    t->out = malloc(t->size);
    t->in = calloc(1, t->size);
    for (size_t i = 0; i < t->size; i++)
        t->out[i] = (uint8_t)(i * 131u + (i >> 8));
    unsigned int rw = HM_NA_ACCESS_READ | HM_NA_ACCESS_WRITE;
    assert_int_equal(hmi_na_mem_register(t->cls, t->remote, t->size, rw, &t->rmem), HM_SUCCESS);
    assert_int_equal(hmi_na_mem_register(t->cls, t->out, t->size, 0, &t->omem), HM_SUCCESS);
    assert_int_equal(hmi_na_mem_register(t->cls, t->in, t->size, 0, &t->imem), HM_SUCCESS);
    assert_int_equal(hmi_na_mem_key_pack(t->rmem, key, &key_len), HM_SUCCESS);
    assert_int_equal(hmi_na_rkey_unpack(t->cli, t->dest, key, key_len, &t->rkey),
                     HM_SUCCESS);
    for (unsigned int o = 0; o < EA_RMAS; o++) {
        t->ops[o] = hmi_na_op_create(t->cls);
        t->ops[o]->o_cb = ea_rma_cb;
    }
}

static void ea_rma_close(struct ea_rma *t)
{
    for (unsigned int o = 0; o < EA_RMAS; o++)
        hmi_na_op_destroy(t->ops[o]);
    hmi_na_rkey_release(t->cli, t->rkey);
    hmi_na_mem_deregister(t->imem);
    hmi_na_mem_deregister(t->omem);
    hmi_na_mem_deregister(t->rmem);
    free(t->in);
    free(t->out);
    free(t->remote);
    t->cls->c_ops.addr_unref(t->dest);
    hmi_na_context_close(t->cli);
    hmi_na_context_close(t->srv);
    assert_int_equal(hmi_na_class_close(t->cls), HM_SUCCESS);
}

/* The first remote byte a put round got wrong, or t->size. */
static size_t ea_put_mismatch(const struct ea_rma *t, size_t piece_bytes)
{
    unsigned int limit = t->cls->c_rma_iov_limit;
    for (size_t i = 0; i < t->size; i++) {
        size_t op_base = i / piece_bytes * piece_bytes, j = (i - op_base) / EA_PIECE;
        size_t from = op_base + (limit - 1 - j) * EA_PIECE + i % EA_PIECE;
        if (t->remote[i] != t->out[from])
            return i;
    }
    return t->size;
}

static void test_rma_queue_full(void **state)
{
    (void)state;
    static struct ea_rma t;
    ea_rma_open(&t);
    size_t piece_bytes = (size_t)t.cls->c_rma_iov_limit * EA_PIECE;
    bool pushed_back = ea_rma_round(&t, HM_NA_RMA_PUT, t.omem);
    /* Within each op the pieces were swapped end for end. A completed put may
     * still wait for the target's progress (tcp: transmit completion). */
    uint64_t deadline = hmi_time_ns() + 5ull * 1000000000u;
    size_t bad;
    while ((bad = ea_put_mismatch(&t, piece_bytes)) < t.size && hmi_time_ns() < deadline) {
        hmi_na_progress(t.srv);
        hmi_na_progress(t.cli);
    }
    if (bad < t.size)
        fail_msg("put: remote byte %zu differs", bad);
    pushed_back |= ea_rma_round(&t, HM_NA_RMA_GET, t.imem);
    assert_memory_equal(t.in, t.out, t.size); /* swapped back */
    /* The retry queue was exercised; CMA (owner-checked ofi+shm) moves each
     * op at its post and has no queue to fill. */
    if (!t.cls->c_cma)
        assert_true(pushed_back);
    assert_int_equal(t.rx.received, 0);
    ea_rma_close(&t);
}

int main(int argc, char **argv)
{
    g_uri = argc > 1 ? argv[1] : "ofi+tcp://127.0.0.1:0";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_send_queue_full),
        cmocka_unit_test(test_rma_iov_limit),
        cmocka_unit_test(test_rma_queue_full),
    };
    return cmocka_run_group_tests_name(g_uri, tests, NULL, NULL);
}
