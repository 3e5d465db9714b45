/*
 * Promise checked (issue 13, "No deadline, no answer"): peers that flood
 * and never take their replies cannot starve another peer of its answers
 * (docs/ARCHITECTURE.md, Admission control).
 *
 * test_fenced_refusal (in one process, deterministic): a server context
 * with small reply bounds (HM_ADMIT_REPLIES, HM_ADMIT_WAITING) refuses 600
 * requests of each of 8 contexts that never progress, then one of an
 * honest context, which must receive that answer. Fails on ucx+shm before
 * per-sender fairness (verified: the same test with only the bounds made
 * settable): the flooders took every reply in flight (their sends never
 * complete there) and the records, and the honest refusal never left.
 * Then (fence_live) a burst of refusals to the honest context, past its own
 * share, must all arrive: it takes its replies, the flooders do not; and
 * (fence_evict) lighter senders must evict from the heaviest.
 * Elsewhere the transports complete sends to non-readers: it passes.
 *
 * test_starved_refusal (separate processes): 8 attackers send thousands of
 * "fill" requests (32 KiB answers) and stop progressing while an honest
 * client's RPCs without a deadline are refused and retried; every one must
 * end HM_SUCCESS. A check of the contract under a real flood; it passed
 * before the fix too.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/core_internal.h"
#include "hostile.h"

#define FLOODERS 8
#define FLOOD_REQUESTS 4000u
#define PEER_BUDGET 16u
#define REPLIES_BOUND "4096" /* HM_ADMIT_REPLIES on the server */
#define WAITING_BOUND "256"  /* HM_ADMIT_WAITING on the server */
/* HM_ADMIT_WAITING of test_starved_refusal's server: the honest client's
 * share of it (a ninth, while the flooders still take replies now and then)
 * must hold its refusals, up to HONEST_RPCS; the flooders' still fill it. */
#define STARVE_WAITING_BOUND "4096"
#define HONEST_RPCS 64u
#define HONEST_ROUNDS 8
#define FLOOD_UNDER_WAY 2000u
#define ANSWER_ROUNDS 6000 /* x 10 ms of progress at most: the flood is long over by then */

static const char *protocol;

struct echo_rpc {
    hm_handle_t *handle;
    uint32_t in;
    hm_return_t ret;
    bool done;
};

static void echo_done(const hm_cb_info_t *info)
{
    struct echo_rpc *r = info->arg;
    uint32_t out = 0;
    r->ret = info->ret;
    if (info->ret == HM_SUCCESS) {
        r->ret = hm_get_output(info->handle, &out) == HM_SUCCESS && out == r->in
                     ? HM_SUCCESS
                     : HM_PROTOCOL_ERROR;
        hm_free_output(info->handle, &out);
    }
    r->done = true;
}

/* Wait until the server has refused FLOOD_UNDER_WAY of the flooders' requests. */
static void await_flood(hm_context_t *control, hm_addr_t *srv)
{
    struct hostile_report rep = {0};
    for (int i = 0; i < 6000 && rep.overload_replies + rep.overload_drops < FLOOD_UNDER_WAY;
         i++) {
        assert_int_equal(hostile_report_of(control, srv, &rep), HM_SUCCESS);
        hm_progress(control, 1);
    }
    assert_true(rep.overload_replies + rep.overload_drops >= FLOOD_UNDER_WAY);
}

/*
 * HONEST_RPCS echo RPCs at once, no deadline, while the flood runs: the
 * server holds one (the peer budget), refuses the rest, and every refusal
 * must reach us (a transparent retry), so every RPC ends, HM_SUCCESS.
 */
static void honest_rpcs(hm_context_t *ctx, hm_addr_t *srv)
{
    static struct echo_rpc rpcs[HONEST_RPCS];
    for (uint32_t k = 0; k < HONEST_RPCS; k++) {
        rpcs[k] = (struct echo_rpc){.in = k + 7};
        assert_int_equal(hm_handle_create(ctx, srv, hm_rpc_id(HOSTILE_ECHO), &rpcs[k].handle),
                         HM_SUCCESS);
        assert_int_equal(hm_forward(rpcs[k].handle, &rpcs[k].in, echo_done, &rpcs[k], NULL),
                         HM_SUCCESS);
    }
    uint32_t done = 0;
    for (int i = 0; i < ANSWER_ROUNDS && done < HONEST_RPCS; i++) {
        hm_progress(ctx, 10);
        hm_trigger(ctx, 1u << 20, NULL);
        done = 0;
        for (uint32_t k = 0; k < HONEST_RPCS; k++)
            done += rpcs[k].done;
    }
    hm_stats_t st = {.size = sizeof(st)};
    hm_context_stats(ctx, &st);
    print_message("honest client: %u of %u RPCs (no deadline) ended, after %llu refusals\n",
                  done, HONEST_RPCS, (unsigned long long)st.overload_retries);
    assert_int_equal(done, HONEST_RPCS);
    /* Whether it was refused at all depends on timing (a server that answers
     * each echo before the next arrives refuses none: seen on a loaded VM),
     * so that is reported, not required; test_fenced_refusal is the
     * deterministic check of the refusal path. */
    for (uint32_t k = 0; k < HONEST_RPCS; k++) {
        assert_int_equal(rpcs[k].ret, HM_SUCCESS);
        hm_handle_destroy(rpcs[k].handle);
    }
}

static void honest_client(const char *uri)
{
    hm_class_t *cls;
    hm_context_t *ctx, *control;
    hm_addr_t *srv, *srv_control;
    assert_int_equal(hm_class_create(protocol, NULL, &cls), HM_SUCCESS);
    assert_int_equal(hostile_register(cls), HM_SUCCESS);
    assert_int_equal(hm_context_create(cls, NULL, &ctx), HM_SUCCESS);
    assert_int_equal(hm_context_create(cls, NULL, &control), HM_SUCCESS);
    assert_int_equal(hm_addr_lookup(ctx, uri, &srv), HM_SUCCESS);
    assert_int_equal(hm_addr_lookup(control, uri, &srv_control), HM_SUCCESS);
    struct hostile_report rep;
    assert_int_equal(hostile_report_of(control, srv_control, &rep), HM_SUCCESS); /* connected */
    char line[64];
    hm_test_signal("ready");
    assert_int_equal(hm_test_await(line, sizeof(line), 60000), 0); /* the flood starts */
    await_flood(control, srv_control);
    for (int round = 0; round < HONEST_ROUNDS; round++)
        honest_rpcs(ctx, srv);
    assert_int_equal(hostile_report_of(control, srv_control, &rep), HM_SUCCESS);
    print_message("server after: %llu refused, %llu dropped unanswered, %llu replies in "
                  "flight, %llu waiting\n",
                  (unsigned long long)rep.overload_replies,
                  (unsigned long long)rep.overload_drops,
                  (unsigned long long)rep.admit_replies, (unsigned long long)rep.admit_waiting);
    /* The parent stops the flooders before the server. */
    assert_int_equal(hostile_client_done(control, srv_control, 60000), HM_SUCCESS);
    hm_addr_free(srv);
    hm_addr_free(srv_control);
    assert_int_equal(hm_context_destroy(ctx), HM_SUCCESS);
    assert_int_equal(hm_context_destroy(control), HM_SUCCESS);
    assert_int_equal(hm_class_destroy(cls), HM_SUCCESS);
}

static int honest_client_main(void *arg)
{
    honest_client(arg);
    return 0;
}

static void test_starved_refusal(void **state)
{
    (void)state;
    hm_test_alarm(280, "hostile_starve");
    /* inherited by the server child */
    assert_int_equal(setenv("HM_ADMIT_REPLIES", REPLIES_BOUND, 1), 0);
    assert_int_equal(setenv("HM_ADMIT_WAITING", STARVE_WAITING_BOUND, 1), 0);
    struct hm_test_server srv;
    struct hm_test_child honest, flooders[FLOODERS];
    struct hostile_server_args sargs = {
        .protocol = protocol,
        .life_s = 250,
        /* each flooder, the honest client and its control: a peer budget each */
        .opts = {.field_mask = HM_CONTEXT_OPT_MAX_REQUESTS | HM_CONTEXT_OPT_MAX_REQUESTS_PEER,
                 .max_requests = (FLOODERS + 2) * PEER_BUDGET,
                 .max_requests_per_peer = PEER_BUDGET},
    };
    char line[HM_TEST_LINE_MAX];
    assert_int_equal(hostile_server_start(&srv, &sargs), 0);
    unsetenv("HM_ADMIT_REPLIES");
    unsetenv("HM_ADMIT_WAITING");
    struct hostile_attacker_args aargs = {
        .protocol = protocol,
        .server_uri = srv.uri,
        .attack = HOSTILE_STALL,
        .count = FLOOD_REQUESTS,
    };
    assert_int_equal(hm_test_spawn(&honest, honest_client_main, srv.uri), 0);
    assert_int_equal(hm_test_recv(&honest, line, sizeof(line), 60000), 0); /* "ready" */
    for (int i = 0; i < FLOODERS; i++)
        assert_int_equal(hm_test_spawn(&flooders[i], hostile_attacker_main, &aargs), 0);
    hm_test_send(&honest, "go"); /* it watches the flood and forwards in the middle of it */
    int honest_ok = hm_test_recv(&honest, line, sizeof(line), 200000); /* "done" */
    for (int i = 0; i < FLOODERS; i++)
        if (hm_test_recv(&flooders[i], line, sizeof(line), 1000) == 0)
            print_message("flooder %d: %s requests, then stopped progressing\n", i, line);
    for (int i = 0; i < FLOODERS; i++)
        hm_test_child_kill(&flooders[i]);
    hm_test_send(&honest, "stop the server");
    int honest_status = hm_test_wait(&honest, 90);
    assert_int_equal(honest_ok, 0);
    assert_int_equal(honest_status, 0);
    assert_int_equal(hm_test_server_stop(&srv, 60), 0);
    hm_test_alarm(0, NULL);
}

/*
 * The same hole, driven directly: a server context in this process refuses
 * (hmi_admit_reply, as respond.c does) FENCE_REFUSALS requests of each of
 * FLOODERS other contexts of this process that never progress, so its
 * replies to them stop completing wherever the transport waits for the
 * reader (shm FIFOs, ofi's -FI_EAGAIN), and then one request of an honest
 * context that progresses. The honest context must receive that answer
 * (it counts it as late: no RPC of its own waits for it).
 */
#define FENCE_MUTES 8
#define FENCE_REFUSALS 600u /* 8 x 600 > 4096 in flight + 256 waiting */

static void refuse(hm_context_t *srv_ctx, hm_addr_t *peer, uint64_t cookie)
{
    struct hmi_wire_header req = {
        .flags = HMI_WIRE_F_REQUEST,
        .origin_ctx = peer->a_ctx_index,
        .target_ctx = srv_ctx->c_index,
        .rpc_id = hm_rpc_id(HOSTILE_ECHO),
        .cookie = cookie,
        .budget_us = HMI_WIRE_NO_BUDGET,
    };
    bool took = hmi_ctx_enter(srv_ctx);
    hmi_admit_reply(srv_ctx, peer, &req, HM_OVERLOADED);
    hmi_ctx_leave(srv_ctx, took);
}

struct pump {
    hm_context_t *ctx;
    _Atomic bool stop;
};

/* Progress another context while this thread looks it up (the lookup waits for its answer). */
static void *pump_main(void *arg)
{
    struct pump *pump = arg;
    while (!atomic_load(&pump->stop))
        hm_progress(pump->ctx, 1);
    return NULL;
}

static hm_addr_t *peer_of(hm_context_t *srv_ctx, hm_context_t *ctx)
{
    struct pump pump = {.ctx = ctx};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, pump_main, &pump), 0);
    char uri[HM_TEST_URI_MAX];
    hm_addr_t *addr;
    assert_int_equal(hm_test_self_uri(ctx, uri, sizeof(uri)), 0);
    hm_return_t ret = hm_addr_lookup(srv_ctx, uri, &addr);
    atomic_store(&pump.stop, true);
    pthread_join(thread, NULL);
    if (ret != HM_SUCCESS)
        print_message("lookup of %s: %s\n", uri, hm_strerror(ret));
    assert_int_equal(ret, HM_SUCCESS);
    return addr;
}

/* Progress the server and the honest context until the honest one has
 * received `want` answers no RPC waits for (dropped_late), or `rounds`
 * passed; returns how many it has. */
static uint64_t answers_late(hm_context_t *srv_ctx, hm_context_t *honest, uint64_t want,
                             int rounds)
{
    hm_stats_t hst = {.size = sizeof(hst)};
    hm_context_stats(honest, &hst);
    for (int i = 0; i < rounds && hst.dropped_late < want; i++) {
        hm_progress(srv_ctx, 1);
        hm_progress(honest, 1);
        hm_context_stats(honest, &hst);
    }
    return hst.dropped_late;
}

/*
 * Where the flooders' replies stay in flight and their records fill the
 * context's bound, an honest context that takes its replies is refused
 * FENCE_BURST requests at once: more than it may have in flight
 * (HMI_ADMIT_REPLIES_PEER) plus an eighth of the records, and more records
 * than any flooder holds. It is live, the flooders quiet (they took nothing
 * for HMI_ADMIT_QUIET_MS): its records come from theirs, and every one of
 * its answers must arrive. Before the live/quiet rule the per-sender bound
 * and the count rule dropped a few dozen of them: the same as a burst of
 * RPCs and retries of a real client whose earlier refusals' sends the
 * server had not yet seen complete (ucx+tcp, 16 flooders).
 */
#define FENCE_BURST 120u
static void fence_live(hm_context_t *srv_ctx, hm_context_t *honest, hm_addr_t *to_honest)
{
    const struct hmi_admit *ad = &srv_ctx->c_admit;
    if (ad->ad_replies < ad->ad_replies_max / 4 * 3 || ad->ad_deferred_count < ad->ad_waiting_max)
        return; /* this transport completed the flooders' replies: nothing is held */
    usleep((HMI_ADMIT_QUIET_MS + 50) * 1000);
    hm_stats_t st = {.size = sizeof(st)};
    hm_context_stats(srv_ctx, &st);
    uint64_t drops0 = st.overload_drops, got0 = answers_late(srv_ctx, honest, 0, 0);
    for (uint32_t k = 0; k < FENCE_BURST; k++)
        refuse(srv_ctx, to_honest, 1000 + k);
    uint64_t got = answers_late(srv_ctx, honest, got0 + FENCE_BURST, 3000) - got0;
    hm_context_stats(srv_ctx, &st);
    print_message("server, a burst of %u refusals to the honest peer: it got %llu; %llu dropped "
                  "(of anyone's), %u waiting\n",
                  FENCE_BURST, (unsigned long long)got,
                  (unsigned long long)(st.overload_drops - drops0), ad->ad_deferred_count);
    assert_int_equal(got, FENCE_BURST);
}

/*
 * Where the flooders' replies stay in flight (three quarters of the bound),
 * FENCE_LIGHT more contexts that never progress take the last quarter, 63
 * replies each at most; then their refusals wait as records, and with the
 * records at their bound each takes one from the heaviest sender (a
 * flooder): it must be counted, and the records stay at their bound.
 */
#define FENCE_LIGHT 20
static void fence_evict(hm_class_t *cls, hm_context_t *srv_ctx)
{
    const struct hmi_admit *ad = &srv_ctx->c_admit;
    if (ad->ad_replies < ad->ad_replies_max / 4 * 3)
        return; /* this transport completed the flooders' replies: nothing is held */
    hm_context_t *light[FENCE_LIGHT];
    hm_addr_t *to_light[FENCE_LIGHT];
    for (int i = 0; i < FENCE_LIGHT; i++) {
        assert_int_equal(hm_context_create(cls, NULL, &light[i]), HM_SUCCESS);
        to_light[i] = peer_of(srv_ctx, light[i]);
    }
    for (uint32_t k = 0; k < 70; k++)
        for (int i = 0; i < FENCE_LIGHT; i++)
            refuse(srv_ctx, to_light[i], k);
    hm_stats_t st = {.size = sizeof(st)};
    hm_context_stats(srv_ctx, &st);
    print_message("server, light senders added: %u in flight, %u waiting, %llu evicted\n",
                  ad->ad_replies, ad->ad_deferred_count,
                  (unsigned long long)st.overload_evictions);
    assert_true(st.overload_evictions > 0);
    assert_int_equal(ad->ad_deferred_count, ad->ad_waiting_max);
    for (int i = 0; i < FENCE_LIGHT; i++)
        hm_addr_free(to_light[i]);
    for (int i = 0; i < FENCE_LIGHT; i++)
        hm_context_destroy(light[i]);
}

static void test_fenced_refusal(void **state)
{
    (void)state;
    hm_test_alarm(120, "hostile_starve fenced");
    assert_int_equal(setenv("HM_ADMIT_REPLIES", REPLIES_BOUND, 1), 0);
    assert_int_equal(setenv("HM_ADMIT_WAITING", WAITING_BOUND, 1), 0);
    hm_class_t *cls;
    hm_context_t *srv_ctx, *honest, *mute[FENCE_MUTES];
    hm_addr_t *to_honest, *to_mute[FENCE_MUTES];
    assert_int_equal(hm_class_create(protocol, NULL, &cls), HM_SUCCESS);
    assert_int_equal(hm_context_create(cls, NULL, &srv_ctx), HM_SUCCESS);
    unsetenv("HM_ADMIT_REPLIES");
    unsetenv("HM_ADMIT_WAITING");
    assert_int_equal(hm_context_create(cls, NULL, &honest), HM_SUCCESS);
    to_honest = peer_of(srv_ctx, honest);
    for (int i = 0; i < FENCE_MUTES; i++) {
        assert_int_equal(hm_context_create(cls, NULL, &mute[i]), HM_SUCCESS);
        to_mute[i] = peer_of(srv_ctx, mute[i]);
    }
    for (uint32_t k = 0; k < FENCE_REFUSALS; k++)
        for (int i = 0; i < FENCE_MUTES; i++) {
            refuse(srv_ctx, to_mute[i], k);
            if (k % 16 == 0)
                hm_progress(srv_ctx, 0);
        }
    refuse(srv_ctx, to_honest, 1);
    uint64_t got = answers_late(srv_ctx, honest, 1, 500);
    hm_stats_t st = {.size = sizeof(st)};
    hm_context_stats(srv_ctx, &st);
    print_message("server: %llu refusals posted, %llu dropped (%llu evicted), %u in flight, %u "
                  "waiting; the honest peer got %llu\n",
                  (unsigned long long)st.overload_replies, (unsigned long long)st.overload_drops,
                  (unsigned long long)st.overload_evictions,
                  srv_ctx->c_admit.ad_replies, srv_ctx->c_admit.ad_deferred_count,
                  (unsigned long long)got);
    assert_int_equal(got, 1);
    fence_live(srv_ctx, honest, to_honest);
    fence_evict(cls, srv_ctx);
    hm_addr_free(to_honest);
    for (int i = 0; i < FENCE_MUTES; i++)
        hm_addr_free(to_mute[i]);
    /* All at once: the mutes read at last and the server's replies leave;
     * each close is answered by the others' (one at a time, each would wait
     * for acks from contexts nobody progresses). */
    hm_context_t *all[FENCE_MUTES + 2] = {srv_ctx, honest};
    for (int i = 0; i < FENCE_MUTES; i++)
        all[2 + i] = mute[i];
    assert_int_equal(hm_test_contexts_close(all, FENCE_MUTES + 2, 300), HM_SUCCESS);
    assert_int_equal(hm_class_destroy(cls), HM_SUCCESS);
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
        cmocka_unit_test(test_fenced_refusal),
        cmocka_unit_test(test_starved_refusal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
