/*
 * Promise checked: a flood of requests and of overflow announcements up to
 * 1 GiB, from several peers that ignore credits and answers, costs a server
 * with small admission budgets a bounded amount of memory (its VmHWM stays
 * under a fixed bound above its own start), the flood's requests past the
 * budgets are answered HM_OVERLOADED (or HM_MSGSIZE) and counted, not run,
 * no announced overflow past the budget is allocated, and a well-behaved
 * client's RPCs all succeed, some of them after transparent retries that it
 * counts.
 *
 * test_claimed_contexts: one attacker's "sink" requests claim 200 different
 * origin context indexes (a wire field it writes); the server must still
 * hold at most one per-peer budget of them (it once held a budget per
 * claimed index, up to the whole context's), and drop unanswered the
 * requests claiming indexes past the 64 a sender may have.
 *
 * Fails without admission control (HM_MAX_REQUESTS=0 HM_MAX_REQUESTS_PEER=0
 * HM_MAX_OVERFLOW=0 HM_MAX_OVERFLOW_PEER=0, with HOSTILE_OVERFLOW_MB=64 so
 * the machine survives it): the server pulls every announcement and holds
 * every request, and its VmHWM passes the bound.
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

#define ATTACKERS 3
#define GOOD_RPCS 64u
#define PEER_BUDGET 16u
#define RSS_BOUND_KB (96L << 10) /* above the server's own VmRSS at start */

static const char *protocol;

static void start_server(struct hm_test_server *srv, struct hostile_server_args *args)
{
    args->protocol = protocol;
    args->life_s = 250;
    args->opts = (hm_context_opts_t){
        .field_mask = HM_CONTEXT_OPT_MAX_REQUESTS | HM_CONTEXT_OPT_MAX_REQUESTS_PEER |
                      HM_CONTEXT_OPT_MAX_OVERFLOW | HM_CONTEXT_OPT_MAX_OVERFLOW_PEER,
        /* the attackers fill 3 x 16; the good client's 16 and the control's fit */
        .max_requests = ATTACKERS * PEER_BUDGET + PEER_BUDGET + 8,
        .max_requests_per_peer = PEER_BUDGET,
        .max_overflow_bytes = 2u << 20,
        .max_overflow_bytes_per_peer = 1u << 20,
    };
    assert_int_equal(hostile_server_start(srv, args), 0);
}

struct good_rpc {
    hm_handle_t *handle;
    uint32_t in;
    hm_return_t ret;
    bool done;
};

static void good_done(const hm_cb_info_t *info)
{
    struct good_rpc *r = info->arg;
    r->ret = info->ret;
    r->done = true;
    uint32_t out = 0;
    if (info->ret == HM_SUCCESS) {
        r->ret = hm_get_output(info->handle, &out) == HM_SUCCESS && out == r->in
                     ? HM_SUCCESS
                     : HM_PROTOCOL_ERROR;
        hm_free_output(info->handle, &out);
    }
}

/* Progress `ctx` until every RPC is done or `rounds` passes went by. */
static uint32_t drive(hm_context_t *ctx, struct good_rpc *rpcs, uint32_t count, int rounds)
{
    uint32_t done = 0;
    for (int i = 0; i < rounds && done < count; i++) {
        hm_progress(ctx, 10);
        hm_trigger(ctx, 1u << 20, NULL);
        done = 0;
        for (uint32_t k = 0; k < count; k++)
            done += rpcs[k].done;
    }
    return done;
}

/*
 * The good client: GOOD_RPCS "gate" RPCs at once (the server holds the
 * first PEER_BUDGET, so the rest must be refused and retried), then, once it
 * has retried, "open" from a second context (another peer) lets them all
 * through. Every RPC must succeed within its deadline.
 */
static void good_client(const char *uri)
{
    hm_class_t *cls;
    hm_context_t *ctx, *control;
    hm_addr_t *srv, *srv_control;
    hm_context_opts_t opts = {.field_mask = HM_CONTEXT_OPT_CREDITS_PEER,
                              .credits_per_peer = 0};
    assert_int_equal(hm_class_create(protocol, NULL, &cls), HM_SUCCESS);
    assert_int_equal(hostile_register(cls), HM_SUCCESS);
    assert_int_equal(hm_context_create(cls, &opts, &ctx), HM_SUCCESS);
    assert_int_equal(hm_context_create(cls, NULL, &control), HM_SUCCESS);
    assert_int_equal(hm_addr_lookup(ctx, uri, &srv), HM_SUCCESS);
    assert_int_equal(hm_addr_lookup(control, uri, &srv_control), HM_SUCCESS);
    static struct good_rpc rpcs[GOOD_RPCS];
    hm_forward_opts_t fopts = {.field_mask = HM_FORWARD_OPT_TIMEOUT, .timeout_ms = 60000};
    for (uint32_t k = 0; k < GOOD_RPCS; k++) {
        rpcs[k] = (struct good_rpc){.in = k + 1};
        assert_int_equal(hm_handle_create(ctx, srv, hm_rpc_id(HOSTILE_GATE), &rpcs[k].handle),
                         HM_SUCCESS);
        assert_int_equal(hm_forward(rpcs[k].handle, &rpcs[k].in, good_done, &rpcs[k], &fopts),
                         HM_SUCCESS);
    }
    hm_stats_t st = {.size = sizeof(st)};
    for (int i = 0; i < 6000 && st.overload_retries == 0; i++) {
        hm_progress(ctx, 10);
        hm_trigger(ctx, 1u << 20, NULL);
        hm_context_stats(ctx, &st);
    }
    assert_true(st.overload_retries > 0);
    assert_int_equal(hostile_call(control, srv_control, HOSTILE_OPEN, NULL, NULL, 30000),
                     HM_SUCCESS);
    assert_int_equal(drive(ctx, rpcs, GOOD_RPCS, 20000), GOOD_RPCS);
    for (uint32_t k = 0; k < GOOD_RPCS; k++) {
        assert_int_equal(rpcs[k].ret, HM_SUCCESS);
        hm_handle_destroy(rpcs[k].handle);
    }
    hm_context_stats(ctx, &st);
    print_message("good client: %u RPCs succeeded after %llu transparent retries\n",
                  GOOD_RPCS, (unsigned long long)st.overload_retries);
    assert_int_equal(st.timeouts, 0);

    struct hostile_report rep;
    assert_int_equal(hostile_report_of(control, srv_control, &rep), HM_SUCCESS);
    print_message("server: %llu requests answered HM_OVERLOADED/HM_MSGSIZE, %llu dropped "
                  "unanswered, %llu overflows pulled\n",
                  (unsigned long long)rep.overload_replies,
                  (unsigned long long)rep.overload_drops,
                  (unsigned long long)rep.overflows_received);
    assert_true(rep.overload_replies >= GOOD_RPCS - PEER_BUDGET);
    /* The parent stops the attackers before the server. They are dead by the
     * STOP; over ofi+tcp the server learns it only once its replies to them
     * have met -FI_EAGAIN for HM_OFI_STUCK_MS (5 s), which we take (not
     * confirmed) to be why, with 10 s, the STOP timed out in 4 of 30 runs
     * under load. */
    assert_int_equal(hostile_client_done(control, srv_control, 60000), HM_SUCCESS);
    hm_addr_free(srv);
    hm_addr_free(srv_control);
    assert_int_equal(hm_context_destroy(ctx), HM_SUCCESS);
    assert_int_equal(hm_context_destroy(control), HM_SUCCESS);
    assert_int_equal(hm_class_destroy(cls), HM_SUCCESS);
}

static int good_client_main(void *arg)
{
    good_client(arg);
    return 0;
}

static void test_flood(void **state)
{
    (void)state;
    hm_test_alarm(280, "hostile_flood");
    struct hm_test_server srv;
    struct hm_test_child good, attackers[ATTACKERS];
    struct hostile_server_args sargs;
    char line[HM_TEST_LINE_MAX];
    start_server(&srv, &sargs);
    char *uri = srv.uri;
    long hwm0, rss0;
    assert_int_equal(hostile_memory_kb(srv.child.pid, &hwm0, &rss0), 0);
    struct hostile_attacker_args aargs = {
        .protocol = protocol,
        .server_uri = uri,
        .attack = HOSTILE_FLOOD,
        .overflow_bytes = hostile_overflow_bytes(1u << 30),
    };
    for (int i = 0; i < ATTACKERS; i++) {
        assert_int_equal(hm_test_spawn(&attackers[i], hostile_attacker_main, &aargs), 0);
        assert_int_equal(hm_test_recv(&attackers[i], line, sizeof(line), 60000), 0);
    }
    /* The flood goes on while the good client works. */
    assert_int_equal(hm_test_spawn(&good, good_client_main, uri), 0);
    int good_ok = hm_test_recv(&good, line, sizeof(line), 200000); /* "done" */
    long hwm, rss;
    assert_int_equal(hostile_memory_kb(srv.child.pid, &hwm, &rss), 0);
    for (int i = 0; i < ATTACKERS; i++) {
        hm_test_send(&attackers[i], "stop");
        if (hm_test_recv(&attackers[i], line, sizeof(line), 30000) == 0)
            print_message("attacker %d: %s requests\n", i, line);
        hm_test_child_kill(&attackers[i]);
    }
    hm_test_send(&good, "stop the server");
    int good_status = hm_test_wait(&good, 60);
    print_message("server VmRSS at start %ld kB, VmHWM after the flood %ld kB (VmRSS %ld kB)\n",
                  rss0, hwm, rss);
    assert_int_equal(good_ok, 0);
    assert_int_equal(good_status, 0);
    assert_int_equal(hm_test_server_stop(&srv, 60), 0);
    assert_true(hwm - rss0 < RSS_BOUND_KB);
    hm_test_alarm(0, NULL);
}

#define CYCLE_REQUESTS 1000u
#define CYCLE_CONTEXTS 200u

static void test_claimed_contexts(void **state)
{
    (void)state;
    hm_test_alarm(280, "hostile_flood claimed contexts");
    struct hm_test_server srv;
    struct hm_test_child attacker;
    struct hostile_server_args sargs;
    char line[HM_TEST_LINE_MAX];
    start_server(&srv, &sargs);
    char *uri = srv.uri;
    struct hostile_attacker_args aargs = {.protocol = protocol, .server_uri = uri,
                                          .attack = HOSTILE_CYCLE, .count = CYCLE_REQUESTS,
                                          .contexts = CYCLE_CONTEXTS};
    assert_int_equal(hm_test_spawn(&attacker, hostile_attacker_main, &aargs), 0);
    assert_int_equal(hm_test_recv(&attacker, line, sizeof(line), 60000), 0);
    print_message("attacker: %s requests over %u claimed contexts\n", line, CYCLE_CONTEXTS);
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_addr_t *addr;
    assert_int_equal(hostile_client_open(protocol, uri, &cls, &ctx, &addr), HM_SUCCESS);
    /* Until the server has seen every request: served, refused or dropped. */
    struct hostile_report rep = {0};
    uint64_t reports = 0, seen = 0;
    for (int i = 0; i < 2000 && seen < CYCLE_REQUESTS; i++) {
        assert_int_equal(hostile_report_of(ctx, addr, &rep), HM_SUCCESS);
        reports++; /* each report is a request of ours, counted as received */
        seen = rep.requests_received - reports + rep.overload_replies + rep.overload_drops;
    }
    uint64_t served = rep.requests_received - reports;
    print_message("server: %llu of %u held, %llu refused, %llu dropped unanswered\n",
                  (unsigned long long)served, CYCLE_REQUESTS,
                  (unsigned long long)rep.overload_replies,
                  (unsigned long long)rep.overload_drops);
    assert_true(seen >= CYCLE_REQUESTS);
    assert_true(served <= PEER_BUDGET);  /* one budget for the sender, not one per claim */
    assert_true(rep.overload_drops > 0); /* claims past the 64th index: not answered */
    assert_int_equal(hostile_call(ctx, addr, HOSTILE_STOP, NULL, NULL, 10000), HM_SUCCESS);
    hm_test_child_kill(&attacker);
    hm_addr_free(addr);
    assert_int_equal(hm_context_destroy(ctx), HM_SUCCESS);
    assert_int_equal(hm_class_destroy(cls), HM_SUCCESS);
    assert_int_equal(hm_test_server_stop(&srv, 60), 0);
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
        cmocka_unit_test(test_flood),
        cmocka_unit_test(test_claimed_contexts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
