/*
 * Promise checked: after an incast (several clients with their default
 * credits all in flight at once against a server with its default budgets)
 * the server's pools shrink back: its send buffers and handles return to
 * the retained amount and its resident memory comes down from the peak.
 * The default budgets refuse none of these credit-limited clients.
 *
 * Fails without the pool trim: the pools stay at the incast's size (the
 * control client's wait for them to shrink runs out), and VmRSS stays at
 * the peak.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hostile.h"

#define CLIENTS 4
#define INFLIGHT HM_CREDITS_PER_PEER_DEFAULT /* each client, all at once */
#define SLACK 8u /* in use by the control's own RPCs when it looks */

static const char *protocol;
static char server_uri[1024];

struct incast_rpc {
    uint32_t in;
    hm_return_t ret;
    bool done;
};

static void incast_done(const hm_cb_info_t *info)
{
    struct incast_rpc *r = info->arg;
    uint32_t out = 0;
    r->ret = info->ret;
    if (info->ret == HM_SUCCESS) {
        if (hm_get_output(info->handle, &out) != HM_SUCCESS || out != r->in)
            r->ret = HM_PROTOCOL_ERROR;
        hm_free_output(info->handle, &out);
    }
    r->done = true;
}

/* A client: INFLIGHT "gate" RPCs at once (held until the control opens the gate). */
static int client_main(void *arg)
{
    uint32_t base = (uint32_t)(uintptr_t)arg * INFLIGHT;
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_addr_t *srv;
    if (hm_class_create(protocol, NULL, &cls) != HM_SUCCESS || hostile_register(cls) ||
        hm_context_create(cls, NULL, &ctx) != HM_SUCCESS ||
        hm_addr_lookup(ctx, server_uri, &srv) != HM_SUCCESS)
        return 2;
    static struct incast_rpc rpcs[INFLIGHT];
    static hm_handle_t *handles[INFLIGHT];
    for (uint32_t k = 0; k < INFLIGHT; k++) {
        rpcs[k] = (struct incast_rpc){.in = base + k};
        if (hm_handle_create(ctx, srv, hm_rpc_id(HOSTILE_GATE), &handles[k]) != HM_SUCCESS ||
            hm_forward(handles[k], &rpcs[k].in, incast_done, &rpcs[k], NULL) != HM_SUCCESS)
            return 3;
    }
    uint32_t done = 0;
    for (int i = 0; i < 60000 && done < INFLIGHT; i++) {
        hm_progress(ctx, 10);
        hm_trigger(ctx, 1u << 20, NULL);
        done = 0;
        for (uint32_t k = 0; k < INFLIGHT; k++)
            done += rpcs[k].done;
    }
    int bad = 0;
    for (uint32_t k = 0; k < INFLIGHT; k++) {
        bad += !rpcs[k].done || rpcs[k].ret != HM_SUCCESS;
        hm_handle_destroy(handles[k]);
    }
    hm_addr_free(srv);
    if (hm_context_destroy(ctx) != HM_SUCCESS || hm_class_destroy(cls) != HM_SUCCESS)
        return 4;
    return bad ? 5 : 0;
}

/* The control client: waits for the incast, opens the gate, waits for the shrink. */
static void control(void)
{
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_addr_t *srv;
    char line[64];
    assert_int_equal(hostile_client_open(protocol, server_uri, &cls, &ctx, &srv), HM_SUCCESS);
    struct hostile_report rep = {0};
    for (int i = 0; i < 3000 && rep.requests_received < CLIENTS * INFLIGHT; i++) {
        hm_progress(ctx, 10);
        assert_int_equal(hostile_report_of(ctx, srv, &rep), HM_SUCCESS);
    }
    assert_true(rep.requests_received >= CLIENTS * INFLIGHT);
    assert_int_equal(hostile_call(ctx, srv, HOSTILE_OPEN, NULL, NULL, 30000), HM_SUCCESS);
    uint64_t peak_sends = 0, peak_handles = 0;
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(hostile_report_of(ctx, srv, &rep), HM_SUCCESS);
        peak_sends = rep.sends_pooled > peak_sends ? rep.sends_pooled : peak_sends;
        peak_handles = rep.handles_pooled > peak_handles ? rep.handles_pooled : peak_handles;
        if (i == 0)
            hm_test_signal("peak");
        if (rep.sends_pooled <= rep.retain + SLACK && rep.handles_pooled <= 2 * rep.retain + SLACK)
            break;
        hm_progress(ctx, 20);
    }
    print_message("server pools: %llu send buffers and %llu handles at the peak, %llu and "
                  "%llu after (retained: %llu and %llu); %llu freed by the trim\n",
                  (unsigned long long)peak_sends, (unsigned long long)peak_handles,
                  (unsigned long long)rep.sends_pooled, (unsigned long long)rep.handles_pooled,
                  (unsigned long long)rep.retain, (unsigned long long)(2 * rep.retain),
                  (unsigned long long)rep.pool_trimmed);
    assert_true(peak_handles >= CLIENTS * INFLIGHT);
    assert_true(rep.sends_pooled <= rep.retain + SLACK);
    assert_true(rep.handles_pooled <= 2 * rep.retain + SLACK);
    assert_true(rep.pool_trimmed > 0);
    assert_int_equal(rep.overload_replies, 0); /* default budgets: nobody refused */
    hm_test_signal("shrunk");
    assert_int_equal(hm_test_await(line, sizeof(line), 30000), 0); /* the parent looked */
    assert_int_equal(hostile_call(ctx, srv, HOSTILE_STOP, NULL, NULL, 10000), HM_SUCCESS);
    hm_addr_free(srv);
    assert_int_equal(hm_context_destroy(ctx), HM_SUCCESS);
    assert_int_equal(hm_class_destroy(cls), HM_SUCCESS);
}

static int control_main(void *arg)
{
    (void)arg;
    control();
    return 0;
}

static void test_incast_shrinks(void **state)
{
    (void)state;
    hm_test_alarm(280, "hostile_incast");
    struct hm_test_server srv;
    struct hm_test_child ctl, clients[CLIENTS];
    struct hostile_server_args sargs = {.protocol = protocol, .life_s = 250};
    char line[HM_TEST_LINE_MAX];
    assert_int_equal(hostile_server_start(&srv, &sargs), 0);
    snprintf(server_uri, sizeof(server_uri), "%s", srv.uri); /* for the clients */
    long hwm0, rss0;
    assert_int_equal(hostile_memory_kb(srv.child.pid, &hwm0, &rss0), 0);
    for (uintptr_t i = 0; i < CLIENTS; i++)
        assert_int_equal(hm_test_spawn(&clients[i], client_main, (void *)i), 0);
    assert_int_equal(hm_test_spawn(&ctl, control_main, NULL), 0);
    long hwm_peak = 0, rss_peak = 0, hwm = 0, rss = 0;
    assert_int_equal(hm_test_recv(&ctl, line, sizeof(line), 120000), 0); /* "peak" */
    assert_int_equal(hostile_memory_kb(srv.child.pid, &hwm_peak, &rss_peak), 0);
    int ctl_ok = hm_test_recv(&ctl, line, sizeof(line), 120000); /* "shrunk" */
    assert_int_equal(hostile_memory_kb(srv.child.pid, &hwm, &rss), 0);
    hm_test_send(&ctl, "seen");
    print_message("server VmRSS %ld kB at start, VmHWM %ld kB, VmRSS %ld kB after the pools "
                  "shrank\n", rss0, hwm, rss);
    for (int i = 0; i < CLIENTS; i++)
        assert_int_equal(hm_test_wait(&clients[i], 120), 0);
    assert_int_equal(ctl_ok, 0);
    assert_int_equal(hm_test_wait(&ctl, 60), 0);
    assert_int_equal(hm_test_server_stop(&srv, 60), 0);
    /* Memory went back to the system (how much depends on the transport,
     * which keeps buffers of its own: ofi+tcp gave back about a third, the
     * others nearly all; the pool counts above are the exact check). Not
     * under ASan: its allocator keeps freed memory in quarantine and
     * malloc_trim does not reach it, so RSS stays at its peak. */
#if !defined(__SANITIZE_ADDRESS__)
    assert_true(rss < hwm - 1024);
#endif
    hm_test_alarm(0, NULL);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PROTOCOL_URI\n", argv[0]);
        return 2;
    }
    protocol = argv[1];
    signal(SIGPIPE, SIG_IGN); /* a child that died is reported, not fatal to us */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_incast_shrinks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
