/*
 * A context that keeps more requests than its transport has receive
 * buffers still receives (issue 13; ARCHITECTURE.md, "Receive buffers").
 *
 * A client context sends 600 requests of 16 B to 16 KiB (credits and the
 * server's budgets set to admit them all) to a server context, whose handler
 * keeps every one past its return (half of them decoded in place); ofi+tcp
 * posts 256 receive buffers per context, ofi+shm 8 slabs of 512 KiB. The
 * server must still receive all 600; then, holding them, a "relay" request
 * whose handler calls a third context synchronously and needs that reply
 * (a handler waiting on a reply to its own context); then it answers all
 * 600, each with its own bytes, which the client checks. On ofi the server
 * must have copied requests out of its receive buffers (recv_copied).
 * Before the fix, on ofi+tcp, the server kept every buffer pinned after 256
 * requests and received nothing more: the first bounded wait failed.
 * One process, three classes of one context each (the third driven by its
 * own progress thread, the others by the test's thread); usage:
 * test_core_held URI.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <hermod.h>

#include "fixture_hm.h"

#define HELD 600
#define WAIT_S 30 /* bound on each wait */
#define REQ_MAX (16u << 10) /* 8 KiB on average: 600 fill ofi+shm's 8 slabs too */

static const char *uri;
static hm_class_t *cli_cls, *srv_cls, *third_cls;
static hm_context_t *cli, *srv, *third;
static hm_addr_t *to_srv, *to_third;
static hm_id_t hold_id, relay_id, ping_id;

static bool hold_keep;           /* the handler keeps the request (else echoes) */
static hm_handle_t *held[HELD];  /* requests the handler kept */
static bool held_decoded[HELD];
static int nheld, nmismatch;

/* The request's bytes: its index, then a pattern of it, 16 bytes to REQ_MAX. */
static size_t req_len(uint32_t index)
{
    return 16 + (index * 4099u) % (REQ_MAX - 16);
}

static void req_fill(uint32_t index, char *buf)
{
    size_t len = req_len(index);
    memcpy(buf, &index, sizeof(index));
    for (size_t i = sizeof(index); i < len; i++)
        buf[i] = (char)(index * 7u + i * 13u);
}

/* True when `b` is exactly the request of some index (written to *index). */
static bool req_check(const hm_bytes_t *b, uint32_t *index)
{
    static char want[REQ_MAX];
    if (b->len < sizeof(*index))
        return false;
    memcpy(index, b->data, sizeof(*index));
    if (*index >= HELD || b->len != req_len(*index))
        return false;
    req_fill(*index, want);
    return memcmp(b->data, want, b->len) == 0;
}

/* Decode, check, answer with the same bytes, free: one kept request. */
static hm_return_t answer(hm_handle_t *h)
{
    hm_bytes_t in;
    uint32_t index;
    hm_return_t ret = hm_get_input(h, &in);
    if (ret != HM_SUCCESS)
        return ret;
    if (!req_check(&in, &index))
        nmismatch++;
    ret = hm_respond(h, &in, NULL, NULL);
    hm_return_t freed = hm_free_input(h, &in);
    return ret != HM_SUCCESS ? ret : freed;
}

static hm_return_t on_hold(hm_handle_t *h)
{
    if (!hold_keep) {
        hm_return_t ret = answer(h);
        hm_handle_destroy(h);
        return ret;
    }
    if (nheld >= HELD) {
        nmismatch++;
        hm_handle_destroy(h);
        return HM_SUCCESS;
    }
    if (nheld % 2 == 0) { /* decoded in place, kept decoded */
        hm_bytes_t in;
        uint32_t index;
        if (hm_get_input(h, &in) != HM_SUCCESS || !req_check(&in, &index))
            nmismatch++;
        held_decoded[nheld] = true;
    }
    held[nheld++] = h; /* the handler's reference, kept */
    return HM_SUCCESS;
}

/*
 * Holding every request, a handler waits for a reply to its own context:
 * it calls the third context synchronously and answers with the status.
 */
static hm_return_t on_relay(hm_handle_t *h)
{
    hm_handle_t *ping;
    uint32_t status = UINT32_MAX;
    if (hm_handle_create(srv, to_third, ping_id, &ping) == HM_SUCCESS) {
        status = (uint32_t)hm_call(ping, NULL, NULL, 10000);
        hm_handle_destroy(ping);
    }
    hm_return_t ret = hm_respond(h, &status, NULL, NULL);
    hm_handle_destroy(h);
    return ret;
}

static hm_return_t on_ping(hm_handle_t *h)
{
    hm_return_t ret = hm_respond(h, NULL, NULL, NULL);
    hm_handle_destroy(h);
    return ret;
}

struct done {
    int count, ok;
};

static void reply_cb(const hm_cb_info_t *info)
{
    struct done *d = info->arg;
    hm_bytes_t out;
    uint32_t index;
    d->count++;
    if (info->ret != HM_SUCCESS || hm_get_output(info->handle, &out) != HM_SUCCESS)
        return;
    if (req_check(&out, &index))
        d->ok++;
    else
        nmismatch++;
    (void)hm_free_output(info->handle, &out);
}

struct relay_wait {
    hm_return_t ret;
    uint32_t status;
};

static void relay_cb(const hm_cb_info_t *info)
{
    struct relay_wait *rw = info->arg;
    if (info->ret == HM_SUCCESS && hm_get_output(info->handle, &rw->status) == HM_SUCCESS)
        (void)hm_free_output(info->handle, &rw->status);
    rw->ret = info->ret;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One pass over the client and the server (the third has its own thread). */
static void drive(void)
{
    hm_context_t *ctxs[2] = {cli, srv};
    for (int i = 0; i < 2; i++) {
        (void)hm_progress(ctxs[i], 0);
        (void)hm_trigger(ctxs[i], 256, NULL);
    }
}

/* Forward the HELD requests from the client; their handles go to `calls`. */
static void send_all(hm_handle_t **calls, struct done *d)
{
    static char buf[REQ_MAX];
    for (uint32_t i = 0; i < HELD; i++) {
        req_fill(i, buf);
        hm_bytes_t in = {.data = buf, .len = req_len(i)};
        assert_int_equal(hm_handle_create(cli, to_srv, hold_id, &calls[i]), HM_SUCCESS);
        assert_int_equal(hm_forward(calls[i], &in, reply_cb, d, NULL), HM_SUCCESS);
    }
}

/*
 * One request answered at once, before the held ones: the server's answer
 * states its receive limit. Until a peer has stated one, a client sends
 * nothing over 4 KiB eagerly (wire v3), and the held requests must arrive
 * whole, in the receive buffers, to press them.
 */
static void introduce(void)
{
    static char buf[REQ_MAX];
    struct done d = {0};
    hm_handle_t *call;
    req_fill(0, buf);
    hm_bytes_t in = {.data = buf, .len = req_len(0)};
    hold_keep = false;
    assert_int_equal(hm_handle_create(cli, to_srv, hold_id, &call), HM_SUCCESS);
    assert_int_equal(hm_forward(call, &in, reply_cb, &d, NULL), HM_SUCCESS);
    double end = now_s() + WAIT_S;
    while (d.count == 0 && now_s() < end)
        drive();
    assert_int_equal(d.ok, 1);
    hm_handle_destroy(call);
}

/* Wait for every answer, then check them and free the client's handles. */
static void expect_answers(hm_handle_t **calls, struct done *d)
{
    double end = now_s() + WAIT_S;
    while (d->count < HELD && now_s() < end)
        drive();
    assert_int_equal(d->count, HELD);
    assert_int_equal(d->ok, HELD);
    assert_int_equal(nmismatch, 0);
    for (int i = 0; i < HELD; i++)
        hm_handle_destroy(calls[i]);
}

static void expect_copies(uint64_t before)
{
    hm_stats_t st = {.size = sizeof(st)};
    assert_int_equal(hm_context_stats(srv, &st), HM_SUCCESS);
    printf("# %s: %llu requests copied out of their receive buffers\n", uri,
           (unsigned long long)(st.recv_copied - before));
    if (strncmp(uri, "ofi+", 4) == 0) /* a fixed set of buffers: it had to copy */
        assert_true(st.recv_copied > before);
}

static uint64_t srv_copied(void)
{
    hm_stats_t st = {.size = sizeof(st)};
    assert_int_equal(hm_context_stats(srv, &st), HM_SUCCESS);
    return st.recv_copied;
}

static void test_held_by_handler(void **state)
{
    (void)state;
    static hm_handle_t *calls[HELD];
    struct done d = {0};
    uint64_t copied = srv_copied();
    introduce();
    hold_keep = true;
    nheld = nmismatch = 0;
    send_all(calls, &d);
    double end = now_s() + WAIT_S;
    while (nheld < HELD && now_s() < end)
        drive();
    assert_int_equal(nheld, HELD); /* before the fix (ofi+tcp): 256 */
    assert_int_equal(nmismatch, 0);

    /* Holding them all, the server still receives a request, and its
     * handler the reply to a call of its own. */
    hm_handle_t *relay;
    struct relay_wait rw = {.status = UINT32_MAX, .ret = HM_AGAIN};
    assert_int_equal(hm_handle_create(cli, to_srv, relay_id, &relay), HM_SUCCESS);
    assert_int_equal(hm_forward(relay, NULL, relay_cb, &rw, NULL), HM_SUCCESS);
    end = now_s() + WAIT_S;
    while (rw.ret == HM_AGAIN && now_s() < end)
        drive();
    assert_int_equal(rw.ret, HM_SUCCESS);
    assert_int_equal(rw.status, HM_SUCCESS);
    hm_handle_destroy(relay);

    for (int i = 0; i < HELD; i++) {
        if (held_decoded[i]) { /* decoded by the handler: answer from that */
            hm_bytes_t in;
            assert_int_equal(hm_get_input(held[i], &in), HM_SUCCESS);
            assert_int_equal(hm_respond(held[i], &in, NULL, NULL), HM_SUCCESS);
            assert_int_equal(hm_free_input(held[i], &in), HM_SUCCESS);
        } else {
            assert_int_equal(answer(held[i]), HM_SUCCESS);
        }
        hm_handle_destroy(held[i]);
        held[i] = NULL;
        held_decoded[i] = false;
    }
    expect_answers(calls, &d);
    expect_copies(copied);
}

/* A class of one context (index 0, so its URI needs no locate). */
static int open_one(hm_class_t **cls_out, const hm_context_opts_t *opts, hm_context_t **ctx_out)
{
    if (hm_class_create(uri, NULL, cls_out) != HM_SUCCESS ||
        hm_register(*cls_out, "held.hold", hm_proc_bytes, hm_proc_bytes, on_hold, &hold_id) !=
            HM_SUCCESS ||
        hm_register(*cls_out, "held.relay", NULL, hm_proc_uint32, on_relay, &relay_id) !=
            HM_SUCCESS ||
        hm_register(*cls_out, "held.ping", NULL, NULL, on_ping, &ping_id) != HM_SUCCESS)
        return -1;
    return hm_context_create(*cls_out, opts, ctx_out) == HM_SUCCESS ? 0 : -1;
}

/* `from`'s address of `to`. */
static int look_up(hm_context_t *from, hm_context_t *to, hm_addr_t **addr_out)
{
    char name[512];
    if (hm_test_self_uri(to, name, sizeof(name)) != 0)
        return -1;
    return hm_addr_lookup(from, name, addr_out) == HM_SUCCESS ? 0 : -1;
}

static int setup(void **state)
{
    (void)state;
    /* Budgets and credits that admit all HELD requests of one peer. */
    hm_context_opts_t srv_opts = {
        .field_mask = HM_CONTEXT_OPT_MAX_REQUESTS | HM_CONTEXT_OPT_MAX_REQUESTS_PEER,
        .max_requests = 4 * HELD,
        .max_requests_per_peer = 2 * HELD,
    };
    hm_context_opts_t cli_opts = {
        .field_mask = HM_CONTEXT_OPT_CREDITS_PEER | HM_CONTEXT_OPT_CREDITS_TOTAL,
        .credits_per_peer = 2 * HELD,
        .credits_total = 4 * HELD,
    };
    hm_context_opts_t third_opts = {.field_mask = HM_CONTEXT_OPT_PROGRESS_THREAD,
                                    .progress_thread = true};
    if (open_one(&cli_cls, &cli_opts, &cli) != 0 || open_one(&srv_cls, &srv_opts, &srv) != 0 ||
        open_one(&third_cls, &third_opts, &third) != 0)
        return -1;
    return look_up(cli, srv, &to_srv) == 0 && look_up(srv, third, &to_third) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    hm_addr_free(to_srv);
    hm_addr_free(to_third);
    for (int i = 0; i < 200; i++) /* let the last sends complete */
        drive();
    if (hm_context_destroy(cli) != HM_SUCCESS || hm_context_destroy(srv) != HM_SUCCESS ||
        hm_context_destroy(third) != HM_SUCCESS || hm_class_destroy(cli_cls) != HM_SUCCESS ||
        hm_class_destroy(srv_cls) != HM_SUCCESS || hm_class_destroy(third_cls) != HM_SUCCESS)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PROTOCOL_URI\n", argv[0]);
        return 2;
    }
    uri = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_held_by_handler),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
