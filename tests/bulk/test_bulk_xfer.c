/*
 * Bulk transfers between a client and a server in separate processes. The
 * client creates a handle over its buffer and sends it in an RPC; the server
 * pulls from it or pushes into it within its handler, over its own scatter
 * list with other segment boundaries, and responds from the transfer's
 * callback (the "xfer" RPC of bulk_test.h). Usage: test_bulk_xfer <protocol
 * URI>.
 *
 * Contents: byte i of the client's buffer is bulk_pattern(seed, i). A pull
 * is checked by the server, a push by the client (and bytes outside the
 * range must be untouched). The server frees the decoded handle
 * (hm_free_input) right after starting each transfer, and on request its own
 * local handle too: the transfer's references keep both registered until it
 * ends. The client may free its own handle right after forwarding: the
 * request in flight pins it until the response.
 *
 * A handle created read-only and eager, of at most HM_BULK_EAGER bytes
 * (4096 by default), carries its contents in the RPC: the server's pull is a copy
 * (hm_stats_t's bulk_eager_pulls), with the same bytes landing.
 *
 * A handle created write-only and eager, of at most HM_BULK_EAGER bytes,
 * asks for the server's pushes back in the response: the push is a copy on
 * the server (hm_stats_t's bulk_returned_pushes) and the bytes land before
 * the client's RPC completes, exactly where a transport push puts them.
 *
 * Last, the context's transfer pool: once warm, transfers allocate no
 * transfer object (hm_stats_t's bulk_xfer_allocs stays put).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bulk_test.h"

static hm_return_t call(hm_id_t id, const void *in, void *out)
{
    return bulk_call(&bulk_cli, id, in, out);
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
    size_t pad;             /* bytes of padding in the arguments */
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
    hm_return_t ret =
        hm_handle_create(bulk_cli.ctx, bulk_cli.server, bulk_cli.ids.xfer, &handle);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hm_forward(handle, in, async_cb, &a, NULL);
    hm_bulk_free(bulk); /* the request in flight keeps it registered */
    while (ret == HM_SUCCESS && !a.done) {
        hm_progress(bulk_cli.ctx, 100);
        hm_trigger(bulk_cli.ctx, UINT32_MAX, NULL);
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
    assert_non_null(b.data);
    if (c->op == HM_BULK_PULL)
        bulk_pattern_fill(b.data, total, seed, 0);
    hm_bulk_t *bulk;
    assert_int_equal(hm_bulk_create(bulk_cli.cls, b.n, b.bufs, b.sizes, c->perm, &bulk),
                     HM_SUCCESS);
    assert_int_equal(hm_bulk_size(bulk), total);
    struct xfer_in in = {
        .bulk = bulk, .op = (uint8_t)c->op, .free_early = c->free_early, .seed = seed,
        .server_segs = c->server_segs, .origin_off = c->origin_off,
        .local_off = c->local_off, .size = c->size, .cancel_us = c->cancel_us,
        .pad = {.data = c->pad ? calloc(1, c->pad) : NULL, .len = c->pad},
    };
    assert_true(c->pad == 0 || in.pad.data != NULL);
    struct xfer_out out = {.ret = HM_FAULT};
    if (c->client_free_early)
        assert_int_equal(call_and_free(&in, bulk, &out), HM_SUCCESS);
    else
        assert_int_equal(call(bulk_cli.ids.xfer, &in, &out), HM_SUCCESS);
    if (c->op == HM_BULK_PUSH && out.ret == HM_SUCCESS) {
        size_t end = c->origin_off + c->size;
        assert_int_equal(bulk_zero_find(b.data, c->origin_off), c->origin_off);
        assert_int_equal(bulk_pattern_find(b.data + c->origin_off, c->size, seed, c->origin_off),
                         c->size);
        assert_int_equal(bulk_zero_find(b.data + end, total - end), total - end);
    }
    if (!c->client_free_early)
        hm_bulk_free(bulk);
    free((void *)in.pad.data);
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
    assert_int_equal(call(bulk_cli.ids.stats, NULL, &before), HM_SUCCESS);
    assert_int_equal(run_case(&pull, 9), HM_PERMISSION);
    assert_int_equal(run_case(&push, 9), HM_PERMISSION);
    assert_int_equal(call(bulk_cli.ids.stats, NULL, &after), HM_SUCCESS);
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
    assert_int_equal(call(bulk_cli.ids.stats, NULL, &before), HM_SUCCESS);
    struct xfer_case c = {.op = HM_BULK_PULL, .size = 64u << 20, .client_segs = 4,
                          .server_segs = 3, .perm = HM_BULK_READ_WRITE, .cancel_us = 200};
    assert_int_equal(run_case(&c, 5), HM_CANCELED);
    c.op = HM_BULK_PUSH;
    assert_int_equal(run_case(&c, 6), HM_CANCELED);
    /* A later transfer on the same contexts works. */
    struct xfer_case after_case = {.op = HM_BULK_PULL, .size = 1u << 20, .client_segs = 3,
                                   .server_segs = 2, .perm = HM_BULK_READ_WRITE};
    assert_int_equal(run_case(&after_case, 7), HM_SUCCESS);
    assert_int_equal(call(bulk_cli.ids.stats, NULL, &after), HM_SUCCESS);
    /* Every transfer called back exactly once. */
    assert_int_equal(after.started - before.started, 3);
    assert_int_equal(after.callbacks - before.callbacks, 3);
}

static uint64_t client_overflows_sent(void)
{
    hm_stats_t st = {.size = sizeof(st)};
    assert_int_equal(hm_context_stats(bulk_cli.ctx, &st), HM_SUCCESS);
    return st.overflows_sent;
}

/* The server's counters so far (its "stats" RPC). */
static struct srv_stats server_stats(void)
{
    struct srv_stats st;
    assert_int_equal(call(bulk_cli.ids.stats, NULL, &st), HM_SUCCESS);
    return st;
}

/* The server's pulls served by a copy of carried contents so far. */
static uint64_t server_eager_pulls(void)
{
    return server_stats().eager_pulls;
}

/*
 * Handles created HM_BULK_READ_ONLY | HM_BULK_EAGER of up to 4096 bytes
 * (the default HM_BULK_EAGER) carry their contents: each pull below is a
 * copy on the server, and lands the same bytes (the server checks them) at
 * offsets within scattered segments. Without the flag, read-write, or one
 * byte more, the pull goes through the transport.
 */
static void test_carried_contents(void **state)
{
    (void)state;
    const hm_bulk_perm_t eager = HM_BULK_READ_ONLY | HM_BULK_EAGER;
    struct xfer_case small = {.op = HM_BULK_PULL, .size = 100, .client_segs = 3,
                              .server_segs = 2, .origin_off = 7, .local_off = 5,
                              .perm = eager};
    struct xfer_case whole = {.op = HM_BULK_PULL, .size = 4096 - 11, .client_segs = 16,
                              .server_segs = 3, .perm = eager};
    uint64_t before = server_eager_pulls();
    assert_int_equal(run_case(&small, 21), HM_SUCCESS);
    assert_int_equal(run_case(&whole, 22), HM_SUCCESS); /* 4096 bytes with the tail */
    assert_int_equal(server_eager_pulls() - before, 2);
    struct xfer_case no_flag = small, not_ro = small, too_big = whole;
    no_flag.perm = HM_BULK_READ_ONLY;
    not_ro.perm = HM_BULK_READ_WRITE;
    too_big.size++;
    before = server_eager_pulls();
    assert_int_equal(run_case(&no_flag, 23), HM_SUCCESS);
    assert_int_equal(run_case(&not_ro, 24), HM_SUCCESS);
    assert_int_equal(run_case(&too_big, 25), HM_SUCCESS);
    assert_int_equal(server_eager_pulls() - before, 0);
    /* Contents are carried only when the arguments still fit one message:
     * else they go without (inline if that fits, else by overflow, whose
     * two encoding passes must agree). */
    size_t limit = hm_class_eager_limit(bulk_cli.cls);
    struct xfer_case fits_without = whole, overflows = whole;
    fits_without.client_segs = 1, fits_without.pad = limit - 2000;
    overflows.client_segs = 1, overflows.pad = limit + 100;
    uint64_t sent = client_overflows_sent();
    before = server_eager_pulls();
    assert_int_equal(run_case(&fits_without, 26), HM_SUCCESS);
    assert_int_equal(client_overflows_sent() - sent, 0);
    assert_int_equal(run_case(&overflows, 27), HM_SUCCESS);
    assert_int_equal(client_overflows_sent() - sent, 1);
    assert_int_equal(server_eager_pulls() - before, 0);
    /* The flag asks for read-only or write-only. */
    hm_bulk_t *bulk;
    uint8_t byte = 0;
    void *buf = &byte;
    size_t len = 1;
    assert_int_equal(hm_bulk_create(bulk_cli.cls, 1, &buf, &len,
                                    HM_BULK_READ_WRITE | HM_BULK_EAGER, &bulk),
                     HM_INVALID_ARG);
}

/* The server's pushes kept for their response so far. */
static uint64_t server_returned_pushes(void)
{
    return server_stats().returned_pushes;
}

/*
 * Handles created HM_BULK_WRITE_ONLY | HM_BULK_EAGER of up to 4096 bytes
 * ask for pushes back in the response: each push below is kept by the
 * server and lands (run_case checks the bytes in range and the zeros
 * around) across scattered segments, also when the client dropped its own
 * reference right after forwarding. Without the flag, one byte more, or
 * arguments that go by overflow (their plain encoding does not ask), the
 * push goes through the transport, with the same bytes.
 */
static void test_returned_pushes(void **state)
{
    (void)state;
    const hm_bulk_perm_t eager = HM_BULK_WRITE_ONLY | HM_BULK_EAGER;
    struct xfer_case small = {.op = HM_BULK_PUSH, .size = 100, .client_segs = 3,
                              .server_segs = 2, .origin_off = 7, .local_off = 5,
                              .perm = eager};
    struct xfer_case whole = {.op = HM_BULK_PUSH, .size = 4096 - 11, .client_segs = 16,
                              .server_segs = 3, .perm = eager};
    struct xfer_case freed = small;
    freed.client_free_early = true;
    uint64_t before = server_returned_pushes();
    assert_int_equal(run_case(&small, 31), HM_SUCCESS);
    assert_int_equal(run_case(&whole, 32), HM_SUCCESS);
    assert_int_equal(run_case(&freed, 33), HM_SUCCESS);
    assert_int_equal(server_returned_pushes() - before, 3);
    struct xfer_case no_flag = small, too_big = whole, overflows = whole;
    no_flag.perm = HM_BULK_WRITE_ONLY;
    too_big.size++;
    overflows.client_segs = 1, overflows.pad = hm_class_eager_limit(bulk_cli.cls) + 100;
    before = server_returned_pushes();
    assert_int_equal(run_case(&no_flag, 34), HM_SUCCESS);
    assert_int_equal(run_case(&too_big, 35), HM_SUCCESS);
    assert_int_equal(run_case(&overflows, 36), HM_SUCCESS);
    assert_int_equal(server_returned_pushes() - before, 0);
}

/* ---- no allocation per transfer once the context's pool is warm --------------------- */

#define POOL_WIDTH 4u   /* transfers in flight at once */
#define POOL_ROUNDS 50u /* measured rounds of POOL_WIDTH transfers */

struct pool_wait {
    unsigned int calls;
    unsigned int failed;
};

static void pool_cb(const hm_bulk_cb_info_t *info)
{
    struct pool_wait *w = info->arg;
    w->calls++;
    if (info->ret != HM_SUCCESS)
        w->failed++;
}

/* POOL_WIDTH pulls of 256 KiB each from `origin` into the quarters of `local`, at once. */
static void pool_round(hm_bulk_t *origin, hm_bulk_t *local)
{
    struct pool_wait w = {0};
    for (unsigned int i = 0; i < POOL_WIDTH; i++) {
        hm_bulk_xfer_t x = {.op = HM_BULK_PULL, .origin_addr = bulk_cli.server,
                            .origin = origin, .origin_off = (size_t)i << 18, .local = local,
                            .local_off = (size_t)i << 18, .size = 1u << 18};
        assert_int_equal(hm_bulk_transfer(bulk_cli.ctx, &x, NULL, pool_cb, &w, NULL),
                         HM_SUCCESS);
    }
    double deadline = bulk_now_ms() + 60000;
    while (w.calls < POOL_WIDTH && bulk_now_ms() < deadline) {
        hm_progress(bulk_cli.ctx, 100);
        hm_trigger(bulk_cli.ctx, UINT32_MAX, NULL);
    }
    assert_int_equal(w.calls, POOL_WIDTH);
    assert_int_equal(w.failed, 0);
}

static uint64_t pool_allocs(void)
{
    hm_stats_t st = {.size = sizeof(st)};
    assert_int_equal(hm_context_stats(bulk_cli.ctx, &st), HM_SUCCESS);
    return st.bulk_xfer_allocs;
}

/*
 * After one round (the pool holds POOL_WIDTH transfer objects), POOL_ROUNDS
 * more rounds allocate no transfer object (bulk_xfer_allocs stays put), and
 * the bytes still land right.
 */
static void test_no_alloc_after_warmup(void **state)
{
    (void)state;
    hm_bulk_t *origin;
    struct expose_in ein = {.size = 1u << 20, .segs = 4, .seed = 61, .fill = 1};
    assert_int_equal(bulk_expose(&bulk_cli, &ein, &origin), HM_SUCCESS);
    struct seg_buf b;
    seg_buf_init(&b, 1u << 20, 3, 5);
    assert_non_null(b.data);
    hm_bulk_t *local;
    assert_int_equal(hm_bulk_create(bulk_cli.cls, b.n, b.bufs, b.sizes, HM_BULK_READ_WRITE,
                                    &local),
                     HM_SUCCESS);
    uint64_t before_warmup = pool_allocs();
    pool_round(origin, local);
    uint64_t warm = pool_allocs();
    assert_true(warm - before_warmup <= POOL_WIDTH);
    for (unsigned int r = 0; r < POOL_ROUNDS; r++)
        pool_round(origin, local);
    print_message("transfer objects allocated: %llu to warm up, %llu over %u transfers after\n",
                  (unsigned long long)(warm - before_warmup),
                  (unsigned long long)(pool_allocs() - warm), POOL_ROUNDS * POOL_WIDTH);
    assert_int_equal(pool_allocs() - warm, 0);
    assert_int_equal(bulk_pattern_find(b.data, b.total, 61, 0), b.total);
    struct expose_in release = {.size = 0};
    hm_bulk_t *none;
    assert_int_equal(bulk_expose(&bulk_cli, &release, &none), HM_SUCCESS);
    hm_bulk_free(origin);
    hm_bulk_free(local);
    free(b.data);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        bulk_protocol = argv[1];
    hm_test_alarm(600, "bulk_xfer");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_and_segments),
        cmocka_unit_test(test_permission),
        cmocka_unit_test(test_free_during_transfer),
        cmocka_unit_test(test_owner_frees_origin),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_carried_contents),
        cmocka_unit_test(test_returned_pushes),
        cmocka_unit_test(test_no_alloc_after_warmup),
    };
    return cmocka_run_group_tests_name("bulk_xfer", tests, bulk_setup, bulk_teardown);
}
