/*
 * Bulk transfers between a client and a server in separate processes. The
 * client creates a handle over its buffer and sends it in an RPC; the server
 * pulls from it or pushes into it within its handler, over its own scatter
 * list with other segment boundaries, and responds from the transfer's
 * callback. Usage: test_bulk_xfer <protocol URI>.
 *
 * Contents: byte i of the client's buffer is pattern(seed, i). A pull is
 * checked by the server, a push by the client (and bytes outside the range
 * must be untouched). The server frees the decoded handle (hm_free_input)
 * right after starting each transfer, and on request its own local handle
 * too: the transfer's references keep both registered until it ends. The
 * client may free its own handle right after forwarding: the request in
 * flight pins it until the response.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <hermod.h>

#include "harness.h"

static const char *protocol = "ucx+tcp://127.0.0.1:0";

/* ---- the RPCs ---------------------------------------------------------------- */

struct xfer_in {
    hm_bulk_t *bulk;      /* the client's handle */
    uint8_t op;           /* hm_bulk_op_t, as the server does it */
    uint8_t free_early;   /* server frees its local handle right after starting */
    uint8_t seed;
    uint32_t server_segs; /* segments of the server's buffer */
    uint64_t origin_off;
    uint64_t local_off;
    uint64_t size;
    uint32_t cancel_us;   /* cancel this long after starting (0: never) */
};

struct xfer_out {
    int32_t ret;          /* the transfer's status, or the start error */
};

struct srv_stats {
    uint64_t started;
    uint64_t callbacks;
};

static const hm_proc_field_t xfer_in_fields[] = {
    HM_PROC_FIELD(struct xfer_in, bulk, hm_proc_bulk),
    HM_PROC_FIELD(struct xfer_in, op, hm_proc_uint8),
    HM_PROC_FIELD(struct xfer_in, free_early, hm_proc_uint8),
    HM_PROC_FIELD(struct xfer_in, seed, hm_proc_uint8),
    HM_PROC_FIELD(struct xfer_in, server_segs, hm_proc_uint32),
    HM_PROC_FIELD(struct xfer_in, origin_off, hm_proc_uint64),
    HM_PROC_FIELD(struct xfer_in, local_off, hm_proc_uint64),
    HM_PROC_FIELD(struct xfer_in, size, hm_proc_uint64),
    HM_PROC_FIELD(struct xfer_in, cancel_us, hm_proc_uint32),
};
static hm_return_t xfer_in_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, xfer_in_fields, HM_PROC_FIELD_COUNT(xfer_in_fields));
}
static const hm_proc_field_t xfer_out_fields[] = {
    HM_PROC_FIELD(struct xfer_out, ret, hm_proc_int32),
};
static hm_return_t xfer_out_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, xfer_out_fields, HM_PROC_FIELD_COUNT(xfer_out_fields));
}
static const hm_proc_field_t stats_fields[] = {
    HM_PROC_FIELD(struct srv_stats, started, hm_proc_uint64),
    HM_PROC_FIELD(struct srv_stats, callbacks, hm_proc_uint64),
};
static hm_return_t stats_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, stats_fields, HM_PROC_FIELD_COUNT(stats_fields));
}

struct ids {
    hm_id_t xfer, stats, shutdown;
};

/* ---- buffers ------------------------------------------------------------------ */

static uint8_t pattern(uint8_t seed, uint64_t i)
{
    return (uint8_t)(((i * 2654435761u) >> 11) ^ seed ^ i);
}

/* Split `total` bytes into `n` uneven segments (>= 1 byte each); returns n used. */
static uint32_t split(size_t total, uint32_t n, uint32_t salt, size_t *sizes)
{
    if (n > total)
        n = (uint32_t)total;
    size_t left = total;
    for (uint32_t i = 0; i + 1 < n; i++) {
        size_t even = left / (n - i);
        size_t jitter = even / 3 ? (size_t)((i * 7919u + salt) % (even / 3)) : 0;
        sizes[i] = even - jitter > 0 ? even - jitter : 1;
        left -= sizes[i];
    }
    sizes[n - 1] = left;
    return n;
}

/* A buffer of `total` bytes described as `n` segments. */
struct seg_buf {
    uint8_t *data;
    size_t total;
    uint32_t n;
    size_t sizes[64];
    void *bufs[64];
};

static void seg_buf_init(struct seg_buf *b, size_t total, uint32_t n, uint32_t salt)
{
    b->data = calloc(1, total);
    assert_non_null(b->data);
    b->total = total;
    b->n = split(total, n > 64 ? 64 : n, salt, b->sizes);
    size_t at = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        b->bufs[i] = b->data + at;
        at += b->sizes[i];
    }
}

/* ---- server --------------------------------------------------------------------- */

struct srv_xfer {
    hm_handle_t *handle;
    hm_bulk_t *local;     /* NULL once freed early */
    uint8_t *data;
    struct xfer_in in;    /* scalars only (bulk freed) */
    hm_bulk_op_id_t *op;
    uint64_t cancel_at_ns;
};

#define SRV_MAX_PENDING 16

static struct {
    hm_context_t *ctx;
    struct ids ids;
    struct srv_stats stats;
    struct srv_xfer *pending[SRV_MAX_PENDING]; /* transfers with a cancel due */
    bool shutdown;
} srv;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void srv_respond(hm_handle_t *handle, hm_return_t ret)
{
    struct xfer_out out = {.ret = (int32_t)ret};
    hm_respond(handle, &out, NULL, NULL);
    hm_handle_destroy(handle);
}

static hm_return_t srv_check_pull(const struct srv_xfer *x)
{
    for (uint64_t k = 0; k < x->in.size; k++)
        if (x->data[x->in.local_off + k] != pattern(x->in.seed, x->in.origin_off + k))
            return HM_PROTOCOL_ERROR;
    return HM_SUCCESS;
}

static void srv_unpend(struct srv_xfer *x)
{
    for (int i = 0; i < SRV_MAX_PENDING; i++)
        if (srv.pending[i] == x)
            srv.pending[i] = NULL;
}

static void srv_xfer_done(const hm_bulk_cb_info_t *info)
{
    struct srv_xfer *x = info->arg;
    hm_return_t ret = info->ret;
    srv.stats.callbacks++;
    srv_unpend(x);
    if (ret == HM_SUCCESS && x->in.op == HM_BULK_PULL)
        ret = srv_check_pull(x);
    srv_respond(x->handle, ret);
    hm_bulk_free(x->local);
    free(x->data);
    free(x);
}

static hm_return_t srv_start(struct srv_xfer *x, hm_bulk_t *origin)
{
    struct seg_buf b;
    size_t total = x->in.local_off + x->in.size + 7;
    seg_buf_init(&b, total, x->in.server_segs, 12345);
    x->data = b.data;
    if (x->in.op == HM_BULK_PUSH)
        for (uint64_t k = 0; k < x->in.size; k++)
            b.data[x->in.local_off + k] = pattern(x->in.seed, x->in.origin_off + k);
    hm_return_t ret = hm_bulk_create(hm_context_class(srv.ctx), b.n, b.bufs, b.sizes,
                                     HM_BULK_READ_WRITE, &x->local);
    if (ret != HM_SUCCESS)
        return ret;
    hm_bulk_xfer_t desc = {
        .op = (hm_bulk_op_t)x->in.op,
        .origin_addr = hm_handle_get_addr(x->handle),
        .origin = origin,
        .origin_off = x->in.origin_off,
        .local = x->local,
        .local_off = x->in.local_off,
        .size = x->in.size,
    };
    ret = hm_bulk_transfer(srv.ctx, &desc, NULL, srv_xfer_done, x, &x->op);
    if (ret != HM_SUCCESS)
        return ret;
    srv.stats.started++;
    if (x->in.free_early) {
        hm_bulk_free(x->local);
        x->local = NULL;
    }
    return HM_SUCCESS;
}

static void srv_pend_cancel(struct srv_xfer *x)
{
    x->cancel_at_ns = now_ns() + (uint64_t)x->in.cancel_us * 1000u;
    for (int i = 0; i < SRV_MAX_PENDING; i++) {
        if (srv.pending[i] == NULL) {
            srv.pending[i] = x;
            return;
        }
    }
}

static hm_return_t on_xfer(hm_handle_t *handle)
{
    struct xfer_in in;
    hm_return_t ret = hm_get_input(handle, &in);
    if (ret != HM_SUCCESS) {
        hm_handle_destroy(handle);
        return ret;
    }
    struct srv_xfer *x = calloc(1, sizeof(*x));
    x->handle = handle;
    x->in = in;
    x->in.bulk = NULL;
    ret = srv_start(x, in.bulk);
    hm_free_input(handle, &in); /* the owner's reference goes mid-transfer */
    if (ret != HM_SUCCESS) {
        srv_respond(handle, ret);
        hm_bulk_free(x->local);
        free(x->data);
        free(x);
        return HM_SUCCESS;
    }
    if (x->in.cancel_us)
        srv_pend_cancel(x);
    return HM_SUCCESS;
}

static hm_return_t on_stats(hm_handle_t *handle)
{
    hm_respond(handle, &srv.stats, NULL, NULL);
    hm_handle_destroy(handle);
    return HM_SUCCESS;
}

static hm_return_t on_shutdown(hm_handle_t *handle)
{
    srv.shutdown = true;
    hm_respond(handle, NULL, NULL, NULL);
    hm_handle_destroy(handle);
    return HM_SUCCESS;
}

static hm_return_t register_rpcs(hm_class_t *cls, struct ids *ids, bool server)
{
    hm_return_t ret = hm_register(cls, "bulk.xfer", xfer_in_proc, xfer_out_proc,
                                  server ? on_xfer : NULL, &ids->xfer);
    if (ret == HM_SUCCESS)
        ret = hm_register(cls, "bulk.stats", NULL, stats_proc, server ? on_stats : NULL,
                          &ids->stats);
    if (ret == HM_SUCCESS)
        ret = hm_register(cls, "bulk.shutdown", NULL, NULL, server ? on_shutdown : NULL,
                          &ids->shutdown);
    return ret;
}

static void srv_fire_cancels(void)
{
    uint64_t now = now_ns();
    for (int i = 0; i < SRV_MAX_PENDING; i++) {
        struct srv_xfer *x = srv.pending[i];
        if (x != NULL && x->cancel_at_ns <= now) {
            srv.pending[i] = NULL;
            hm_bulk_cancel(x->op);
        }
    }
}

static int server_main(void *arg)
{
    (void)arg;
    alarm(300);
    hm_class_t *cls;
    if (hm_class_create(protocol, NULL, &cls) != HM_SUCCESS)
        return 2;
    if (register_rpcs(cls, &srv.ids, true) != HM_SUCCESS ||
        hm_context_create(cls, NULL, &srv.ctx) != HM_SUCCESS)
        return 3;
    hm_addr_t *self;
    char uri[512];
    size_t size = sizeof(uri);
    if (hm_addr_self(srv.ctx, &self) != HM_SUCCESS ||
        hm_addr_to_string(self, uri, &size) != HM_SUCCESS)
        return 4;
    hm_addr_free(self);
    hm_test_ready(uri);
    while (!srv.shutdown) {
        hm_progress(srv.ctx, 1);
        srv_fire_cancels();
        hm_trigger(srv.ctx, UINT32_MAX, NULL);
    }
    for (int i = 0; i < 200 && hm_context_destroy(srv.ctx) == HM_BUSY; i++) {
        hm_progress(srv.ctx, 10);
        hm_trigger(srv.ctx, UINT32_MAX, NULL);
    }
    return hm_class_destroy(cls) == HM_SUCCESS ? 0 : 5;
}

/* ---- client ----------------------------------------------------------------------- */

static struct {
    struct hm_test_child child;
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_addr_t *server;
    struct ids ids;
} cli;

static int setup(void **state)
{
    (void)state;
    char uri[512], mine[128];
    if (hm_test_spawn(&cli.child, server_main, NULL) != 0)
        return -1;
    if (hm_test_recv(&cli.child, uri, sizeof(uri), 20000) != 0)
        return -1;
    const char *sep = strstr(protocol, "://");
    snprintf(mine, sizeof(mine), "%.*s://%s", (int)(sep - protocol), protocol,
             strstr(protocol, "+tcp") ? "127.0.0.1:0" : "");
    if (hm_class_create(mine, NULL, &cli.cls) != HM_SUCCESS ||
        register_rpcs(cli.cls, &cli.ids, false) != HM_SUCCESS ||
        hm_context_create(cli.cls, NULL, &cli.ctx) != HM_SUCCESS ||
        hm_addr_lookup(cli.ctx, uri, &cli.server) != HM_SUCCESS)
        return -1;
    return 0;
}

static hm_return_t call(hm_id_t id, const void *in, void *out)
{
    hm_handle_t *handle;
    hm_return_t ret = hm_handle_create(cli.ctx, cli.server, id, &handle);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hm_call(handle, in, out, 60000);
    if (ret == HM_SUCCESS && out)
        hm_free_output(handle, out);
    hm_handle_destroy(handle);
    return ret;
}

static int teardown(void **state)
{
    (void)state;
    if (cli.server)
        call(cli.ids.shutdown, NULL, NULL);
    int status = hm_test_wait(&cli.child, 10);
    if (cli.server)
        hm_addr_free(cli.server);
    if (cli.ctx)
        hm_context_destroy(cli.ctx);
    if (cli.cls)
        hm_class_destroy(cli.cls);
    return status == 0 ? 0 : -1;
}

struct xfer_case {
    hm_bulk_op_t op;
    size_t size;
    uint32_t client_segs, server_segs;
    size_t origin_off, local_off;
    hm_bulk_perm_t perm;
    bool free_early;        /* the server frees its local handle mid-transfer */
    bool client_free_early; /* the client frees its handle right after forwarding */
    uint32_t cancel_us;
};

struct async_call {
    bool done;
    hm_return_t ret;
    struct xfer_out out;
};

static void async_cb(const hm_cb_info_t *info)
{
    struct async_call *a = info->arg;
    a->ret = info->ret;
    if (a->ret == HM_SUCCESS && hm_get_output(info->handle, &a->out) == HM_SUCCESS)
        hm_free_output(info->handle, &a->out);
    a->done = true;
}

/* Forward, drop the caller's bulk reference at once, then wait. */
static hm_return_t call_and_free(const struct xfer_in *in, hm_bulk_t *bulk,
                                 struct xfer_out *out)
{
    hm_handle_t *handle;
    struct async_call a = {.ret = HM_FAULT};
    hm_return_t ret = hm_handle_create(cli.ctx, cli.server, cli.ids.xfer, &handle);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hm_forward(handle, in, async_cb, &a, NULL);
    hm_bulk_free(bulk); /* the request in flight keeps it registered */
    while (ret == HM_SUCCESS && !a.done) {
        hm_progress(cli.ctx, 100);
        hm_trigger(cli.ctx, UINT32_MAX, NULL);
    }
    hm_handle_destroy(handle);
    *out = a.out;
    return ret == HM_SUCCESS ? a.ret : ret;
}

/* Run one case; returns the server's status. Checks the client's bytes on push. */
static hm_return_t run_case(const struct xfer_case *c, uint8_t seed)
{
    struct seg_buf b;
    size_t total = c->origin_off + c->size + 11;
    seg_buf_init(&b, total, c->client_segs, 777);
    if (c->op == HM_BULK_PULL)
        for (size_t i = 0; i < total; i++)
            b.data[i] = pattern(seed, i);
    hm_bulk_t *bulk;
    assert_int_equal(hm_bulk_create(cli.cls, b.n, b.bufs, b.sizes, c->perm, &bulk),
                     HM_SUCCESS);
    assert_int_equal(hm_bulk_size(bulk), total);
    struct xfer_in in = {
        .bulk = bulk, .op = (uint8_t)c->op, .free_early = c->free_early, .seed = seed,
        .server_segs = c->server_segs, .origin_off = c->origin_off,
        .local_off = c->local_off, .size = c->size, .cancel_us = c->cancel_us,
    };
    struct xfer_out out = {.ret = HM_FAULT};
    if (c->client_free_early)
        assert_int_equal(call_and_free(&in, bulk, &out), HM_SUCCESS);
    else
        assert_int_equal(call(cli.ids.xfer, &in, &out), HM_SUCCESS);
    if (c->op == HM_BULK_PUSH && out.ret == HM_SUCCESS)
        for (size_t i = 0; i < total; i++) {
            bool inside = i >= c->origin_off && i < c->origin_off + c->size;
            if (b.data[i] != (inside ? pattern(seed, i) : 0))
                fail_msg("push: byte %zu is wrong", i);
        }
    if (!c->client_free_early)
        hm_bulk_free(bulk);
    free(b.data);
    return (hm_return_t)out.ret;
}

static void test_sizes_and_segments(void **state)
{
    (void)state;
    const size_t sizes[] = {1, 4096, 1u << 20, 16u << 20};
    const uint32_t segs[] = {1, 3, 16};
    uint8_t seed = 1;
    for (int op = HM_BULK_PULL; op <= HM_BULK_PUSH; op++)
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
            for (size_t g = 0; g < sizeof(segs) / sizeof(segs[0]); g++) {
                struct xfer_case c = {
                    .op = (hm_bulk_op_t)op, .size = sizes[s], .client_segs = segs[g],
                    .server_segs = segs[(g + 1) % 3], .origin_off = 3 + s * 1001,
                    .local_off = 5 + g * 333, .perm = HM_BULK_READ_WRITE,
                };
                hm_return_t ret = run_case(&c, seed++);
                if (ret != HM_SUCCESS)
                    fail_msg("%s %zu B, %u/%u segments: %s", op ? "push" : "pull",
                             sizes[s], c.client_segs, c.server_segs, hm_strerror(ret));
            }
}

static void test_permission(void **state)
{
    (void)state;
    struct xfer_case pull = {.op = HM_BULK_PULL, .size = 4096, .client_segs = 2,
                             .server_segs = 1, .perm = HM_BULK_WRITE_ONLY};
    struct xfer_case push = {.op = HM_BULK_PUSH, .size = 4096, .client_segs = 2,
                             .server_segs = 1, .perm = HM_BULK_READ_ONLY};
    struct srv_stats before, after;
    assert_int_equal(call(cli.ids.stats, NULL, &before), HM_SUCCESS);
    assert_int_equal(run_case(&pull, 9), HM_PERMISSION);
    assert_int_equal(run_case(&push, 9), HM_PERMISSION);
    assert_int_equal(call(cli.ids.stats, NULL, &after), HM_SUCCESS);
    assert_int_equal(after.started, before.started); /* refused before any traffic */
    pull.perm = HM_BULK_READ_ONLY;
    push.perm = HM_BULK_WRITE_ONLY;
    assert_int_equal(run_case(&pull, 9), HM_SUCCESS);
    assert_int_equal(run_case(&push, 9), HM_SUCCESS);
}

static void test_free_during_transfer(void **state)
{
    (void)state;
    for (int op = HM_BULK_PULL; op <= HM_BULK_PUSH; op++) {
        struct xfer_case c = {.op = (hm_bulk_op_t)op, .size = 16u << 20, .client_segs = 3,
                              .server_segs = 16, .origin_off = 1, .local_off = 2,
                              .perm = HM_BULK_READ_WRITE, .free_early = true};
        assert_int_equal(run_case(&c, 42), HM_SUCCESS);
    }
}

/* The DAOS-over-Mercury race: the client (the origin's owner) frees its handle
 * while the server is transferring; the request in flight pins it. */
static void test_owner_frees_origin(void **state)
{
    (void)state;
    for (int op = HM_BULK_PULL; op <= HM_BULK_PUSH; op++) {
        struct xfer_case c = {.op = (hm_bulk_op_t)op, .size = 16u << 20, .client_segs = 16,
                              .server_segs = 3, .origin_off = 9, .local_off = 4,
                              .perm = HM_BULK_READ_WRITE, .client_free_early = true};
        assert_int_equal(run_case(&c, 43), HM_SUCCESS);
    }
}

static void test_cancel(void **state)
{
    (void)state;
    struct srv_stats before, after;
    assert_int_equal(call(cli.ids.stats, NULL, &before), HM_SUCCESS);
    struct xfer_case c = {.op = HM_BULK_PULL, .size = 64u << 20, .client_segs = 4,
                          .server_segs = 3, .perm = HM_BULK_READ_WRITE, .cancel_us = 200};
    assert_int_equal(run_case(&c, 5), HM_CANCELED);
    c.op = HM_BULK_PUSH;
    assert_int_equal(run_case(&c, 6), HM_CANCELED);
    /* A later transfer on the same contexts works. */
    struct xfer_case after_case = {.op = HM_BULK_PULL, .size = 1u << 20, .client_segs = 3,
                                   .server_segs = 2, .perm = HM_BULK_READ_WRITE};
    assert_int_equal(run_case(&after_case, 7), HM_SUCCESS);
    assert_int_equal(call(cli.ids.stats, NULL, &after), HM_SUCCESS);
    /* Every transfer called back exactly once. */
    assert_int_equal(after.started - before.started, 3);
    assert_int_equal(after.callbacks - before.callbacks, 3);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        protocol = argv[1];
    hm_test_alarm(600, "bulk_xfer");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_and_segments),
        cmocka_unit_test(test_permission),
        cmocka_unit_test(test_free_during_transfer),
        cmocka_unit_test(test_owner_frees_origin),
        cmocka_unit_test(test_cancel),
    };
    return cmocka_run_group_tests_name("bulk_xfer", tests, setup, teardown);
}
