/*
 * Credits (DESIGN §6, issue 5): a client never has more RPCs in flight to a
 * peer (or on its context) than its limit, however many it posts at once;
 * those that wait leave in the order they were posted and all complete;
 * waiting RPCs keep their deadlines and can be canceled; with no limit, the
 * transport's back-pressure never reaches the caller.
 *
 * The server (ctx_test.c) holds "tagged" requests until `hold_until` are
 * held, and records the most it ever held per client and in all.
 */
#include <sched.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "ctx_test.h"

#define POSTED 10000u
#define PEER_LIMIT 32u

static const char *protocol;

struct client {
    hm_context_t *ctx;
    hm_addr_t *server;
    hm_handle_t **handles;
    struct ctx_tag *tags;
    uint32_t count;
    uint32_t done;
    uint32_t ok;
    uint32_t bad_echo;
    uint32_t served_by; /* server context of the last response */
    hm_return_t last_error;
};

static void client_done(const hm_cb_info_t *info)
{
    struct client *c = info->arg;
    c->done++;
    if (info->ret != HM_SUCCESS) {
        c->last_error = info->ret;
        return;
    }
    struct ctx_tag out;
    if (hm_get_output(info->handle, &out) == HM_SUCCESS) {
        c->ok++;
        c->served_by = out.served_by;
        hm_free_output(info->handle, &out);
    } else {
        c->bad_echo++;
    }
}

static hm_context_t *open_context(hm_class_t *cls, uint32_t per_peer, uint32_t total)
{
    hm_context_opts_t opts = {
        .field_mask = HM_CONTEXT_OPT_CREDITS_PEER | HM_CONTEXT_OPT_CREDITS_TOTAL,
        .credits_per_peer = per_peer,
        .credits_total = total,
    };
    hm_context_t *ctx;
    assert_int_equal(hm_context_create(cls, &opts, &ctx), HM_SUCCESS);
    return ctx;
}

/* Post `count` "tagged" RPCs of client id `id` at once, seq 0..count-1. */
static void client_post(struct client *c, const struct ctx_ids *ids, uint32_t id,
                        uint32_t count)
{
    c->count = count;
    c->handles = calloc(count, sizeof(*c->handles));
    c->tags = calloc(count, sizeof(*c->tags));
    assert_non_null(c->handles);
    assert_non_null(c->tags);
    for (uint32_t i = 0; i < count; i++) {
        c->tags[i] = (struct ctx_tag){.client = id, .seq = i};
        assert_int_equal(hm_handle_create(c->ctx, c->server, ids->tagged, &c->handles[i]),
                         HM_SUCCESS);
        assert_int_equal(hm_forward(c->handles[i], &c->tags[i], client_done, c, NULL),
                         HM_SUCCESS);
    }
}

static void client_free(struct client *c)
{
    for (uint32_t i = 0; i < c->count; i++)
        hm_handle_destroy(c->handles[i]);
    free(c->handles);
    free(c->tags);
    c->handles = NULL;
    c->tags = NULL;
}

static void drive_until_done(struct client *clients, unsigned n)
{
    bool all;
    do {
        all = true;
        for (unsigned i = 0; i < n; i++) {
            hm_progress(clients[i].ctx, 0);
            hm_trigger(clients[i].ctx, UINT32_MAX, NULL);
            all = all && clients[i].done == clients[i].count;
        }
    } while (!all);
}

static struct ctx_report report_of(hm_context_t *ctx, hm_addr_t *addr,
                                   const struct ctx_ids *ids, uint32_t id)
{
    struct ctx_tag in = {.client = id};
    struct ctx_report rep;
    assert_int_equal(ctx_call(ctx, addr, ids->report, &in, &rep, 10000), HM_SUCCESS);
    return rep;
}

/* Two client contexts, 10,000 RPCs each posted at once, 32 credits per peer. */
static void test_credits_per_peer(void **state)
{
    (void)state;
    hm_test_alarm(300, "credits_per_peer");
    struct ctx_server_args args = {.protocol = protocol, .contexts = 1,
                                   .hold_until = 2 * PEER_LIMIT, .expect = POSTED,
                                   .life_s = 280};
    struct ctx_env env;
    assert_int_equal(ctx_env_open(&env, &args, protocol), 0);
    const char *uri = env.server.uri;
    hm_class_t *cls = env.cls;
    const struct ctx_ids *ids = &env.ids;
    struct client clients[2] = {0};
    for (uint32_t k = 0; k < 2; k++) {
        clients[k].ctx = open_context(cls, PEER_LIMIT, 0);
        assert_int_equal(hm_addr_lookup(clients[k].ctx, uri, &clients[k].server), HM_SUCCESS);
        client_post(&clients[k], ids, k, POSTED);
    }
    drive_until_done(clients, 2);
    for (uint32_t k = 0; k < 2; k++) {
        struct client *c = &clients[k];
        assert_int_equal(c->last_error, HM_SUCCESS); /* none failed... */
        assert_int_equal(c->bad_echo, 0);             /* ...none came back garbled */
        assert_int_equal(c->ok, POSTED);
        struct ctx_report rep = report_of(c->ctx, c->server, ids, k);
        assert_int_equal(rep.received, POSTED);
        assert_int_equal(rep.order_errors, 0);
        assert_true(rep.max_outstanding <= PEER_LIMIT);
        assert_int_equal(rep.max_outstanding, PEER_LIMIT); /* the limit was reached */
        hm_stats_t st = {.size = sizeof(st)};
        assert_int_equal(hm_context_stats(c->ctx, &st), HM_SUCCESS);
        assert_true(st.credit_waits >= POSTED - PEER_LIMIT);
        assert_true(st.credit_queue_peak >= POSTED - PEER_LIMIT);
        print_message("client %u: server saw at most %u outstanding; %llu waited, peak %llu\n",
                      k, rep.max_outstanding, (unsigned long long)st.credit_waits,
                      (unsigned long long)st.credit_queue_peak);
        client_free(c);
    }
    assert_int_equal(ctx_env_stop(&env, clients[0].ctx, clients[0].server), 0);
    for (uint32_t k = 0; k < 2; k++) {
        hm_addr_free(clients[k].server);
        assert_int_equal(hm_context_destroy(clients[k].ctx), HM_SUCCESS);
    }
    assert_int_equal(hm_class_destroy(cls), HM_SUCCESS);
    hm_test_alarm(0, NULL);
}

/* One client context, a total of 16, two server contexts reached as "#0" and "#1". */
static void test_credits_total(void **state)
{
    (void)state;
    enum { TOTAL = 16, EACH = 2000 };
    hm_test_alarm(300, "credits_total");
    struct ctx_server_args args = {.protocol = protocol, .contexts = 2, .hold_until = TOTAL,
                                   .expect = EACH, .life_s = 280};
    char uri1[1100];
    struct ctx_env env;
    assert_int_equal(ctx_env_open(&env, &args, protocol), 0);
    const char *uri = env.server.uri;
    hm_class_t *cls = env.cls;
    const struct ctx_ids *ids = &env.ids;
    snprintf(uri1, sizeof(uri1), "%s#1", uri);
    hm_context_t *ctx = open_context(cls, 0, TOTAL);
    struct client clients[2] = {{.ctx = ctx}, {.ctx = ctx}};
    assert_int_equal(hm_addr_lookup(ctx, uri, &clients[0].server), HM_SUCCESS);
    assert_int_equal(hm_addr_lookup(ctx, uri1, &clients[1].server), HM_SUCCESS);
    client_post(&clients[0], ids, 2, EACH);
    client_post(&clients[1], ids, 3, EACH);
    drive_until_done(clients, 2);
    for (uint32_t k = 0; k < 2; k++) {
        assert_int_equal(clients[k].last_error, HM_SUCCESS);
        assert_int_equal(clients[k].bad_echo, 0);
        assert_int_equal(clients[k].ok, EACH);
        struct ctx_report rep = report_of(ctx, clients[k].server, ids, 2 + k);
        assert_int_equal(rep.received, EACH);
        assert_int_equal(rep.order_errors, 0);
        assert_true(rep.max_total <= TOTAL);
        print_message("server context %u: at most %u held over both contexts\n", k,
                      rep.max_total);
        client_free(&clients[k]);
    }
    /* "#1" reached the second context: it answered as context 1. */
    assert_int_equal(clients[0].served_by, 0);
    assert_int_equal(clients[1].served_by, 1);
    assert_int_equal(ctx_env_stop(&env, ctx, clients[0].server), 0);
    hm_addr_free(clients[0].server);
    hm_addr_free(clients[1].server);
    assert_int_equal(hm_context_destroy(ctx), HM_SUCCESS);
    assert_int_equal(hm_class_destroy(cls), HM_SUCCESS);
    hm_test_alarm(0, NULL);
}

struct one_rpc {
    bool done;
    hm_return_t ret;
};

static void one_done(const hm_cb_info_t *info)
{
    struct one_rpc *r = info->arg;
    r->done = true;
    r->ret = info->ret;
}

static void drive_until(hm_context_t *ctx, const struct one_rpc *r)
{
    while (!r->done) {
        hm_progress(ctx, 10);
        hm_trigger(ctx, UINT32_MAX, NULL);
    }
}

/* One credit: A holds it; B (deadline) and C (canceled) wait and never leave; D waits, then goes. */
static void test_credits_timeout_cancel(void **state)
{
    (void)state;
    hm_test_alarm(120, "credits_timeout_cancel");
    struct ctx_server_args args = {.protocol = protocol, .contexts = 1, .life_s = 110};
    struct ctx_env env;
    assert_int_equal(ctx_env_open(&env, &args, protocol), 0);
    const char *uri = env.server.uri;
    hm_class_t *cls = env.cls;
    const struct ctx_ids *ids = &env.ids;
    hm_context_t *ctx = open_context(cls, 1, 0), *other = open_context(cls, 0, 0);
    hm_addr_t *srv, *srv_other;
    assert_int_equal(hm_addr_lookup(ctx, uri, &srv), HM_SUCCESS);
    assert_int_equal(hm_addr_lookup(other, uri, &srv_other), HM_SUCCESS);
    hm_handle_t *a, *b, *c, *d;
    assert_int_equal(hm_handle_create(ctx, srv, ids->hold, &a), HM_SUCCESS);
    assert_int_equal(hm_handle_create(ctx, srv, ids->tagged, &b), HM_SUCCESS);
    assert_int_equal(hm_handle_create(ctx, srv, ids->tagged, &c), HM_SUCCESS);
    assert_int_equal(hm_handle_create(ctx, srv, ids->tagged, &d), HM_SUCCESS);
    struct ctx_tag ta = {.client = 4}, tb = {.client = 5}, tc = {.client = 5},
                   td = {.client = 6};
    struct one_rpc ra = {0}, rb = {0}, rc = {0}, rd = {0};
    hm_forward_opts_t deadline = {.field_mask = HM_FORWARD_OPT_TIMEOUT, .timeout_ms = 200};
    assert_int_equal(hm_forward(a, &ta, one_done, &ra, NULL), HM_SUCCESS);
    assert_int_equal(hm_forward(b, &tb, one_done, &rb, &deadline), HM_SUCCESS);
    assert_int_equal(hm_forward(c, &tc, one_done, &rc, NULL), HM_SUCCESS);
    assert_int_equal(hm_forward(d, &td, one_done, &rd, NULL), HM_SUCCESS);
    assert_int_equal(hm_cancel(c), HM_SUCCESS);
    drive_until(ctx, &rc);
    assert_int_equal(rc.ret, HM_CANCELED);
    drive_until(ctx, &rb);
    assert_int_equal(rb.ret, HM_TIMEOUT);
    assert_false(ra.done);
    assert_false(rd.done);
    hm_stats_t st = {.size = sizeof(st)};
    assert_int_equal(hm_context_stats(ctx, &st), HM_SUCCESS);
    assert_int_equal(st.credit_waits, 3);
    assert_int_equal(st.timeouts, 1);
    assert_int_equal(st.cancels, 1);
    /* Release A from another context (its own credits): D then leaves. */
    struct ctx_tag rel = {.client = 4};
    assert_int_equal(ctx_call(other, srv_other, ids->release, &rel, &rel, 10000), HM_SUCCESS);
    drive_until(ctx, &ra);
    drive_until(ctx, &rd);
    assert_int_equal(ra.ret, HM_SUCCESS);
    assert_int_equal(rd.ret, HM_SUCCESS);
    /* B and C never reached the server; D did. */
    struct ctx_report rep = report_of(other, srv_other, ids, 5);
    assert_int_equal(rep.received, 0);
    rep = report_of(other, srv_other, ids, 6);
    assert_int_equal(rep.received, 1);
    hm_handle_destroy(a);
    hm_handle_destroy(b);
    hm_handle_destroy(c);
    hm_handle_destroy(d);
    assert_int_equal(ctx_env_stop(&env, other, srv_other), 0);
    hm_addr_free(srv);
    hm_addr_free(srv_other);
    assert_int_equal(hm_context_destroy(ctx), HM_SUCCESS);
    assert_int_equal(hm_context_destroy(other), HM_SUCCESS);
    assert_int_equal(hm_class_destroy(cls), HM_SUCCESS);
    hm_test_alarm(0, NULL);
}

/* No limits: 10,000 posted at once; the transport's back-pressure stays inside. */
static void test_no_credits_flood(void **state)
{
    (void)state;
    hm_test_alarm(300, "no_credits_flood");
    struct ctx_server_args args = {.protocol = protocol, .contexts = 1, .life_s = 280};
    struct ctx_env env;
    assert_int_equal(ctx_env_open(&env, &args, protocol), 0);
    const char *uri = env.server.uri;
    hm_class_t *cls = env.cls;
    const struct ctx_ids *ids = &env.ids;
    struct client c = {.ctx = open_context(cls, 0, 0)};
    assert_int_equal(hm_addr_lookup(c.ctx, uri, &c.server), HM_SUCCESS);
    client_post(&c, ids, 0, POSTED);
    drive_until_done(&c, 1);
    assert_int_equal(c.last_error, HM_SUCCESS);
    assert_int_equal(c.bad_echo, 0);
    assert_int_equal(c.ok, POSTED);
    hm_stats_t st = {.size = sizeof(st)};
    assert_int_equal(hm_context_stats(c.ctx, &st), HM_SUCCESS);
    assert_int_equal(st.credit_waits, 0);
    client_free(&c);
    assert_int_equal(ctx_env_stop(&env, c.ctx, c.server), 0);
    hm_addr_free(c.server);
    assert_int_equal(hm_context_destroy(c.ctx), HM_SUCCESS);
    assert_int_equal(hm_class_destroy(cls), HM_SUCCESS);
    hm_test_alarm(0, NULL);
}

struct destroy_try {
    hm_context_t *ctx;
    atomic_bool done; /* set by the progress thread */
    hm_return_t ret;
};

static void destroy_from_callback(const hm_cb_info_t *info)
{
    struct destroy_try *t = info->arg;
    t->ret = hm_context_destroy(t->ctx);
    atomic_store(&t->done, true);
}

/* A context's own callback cannot destroy it (its progress thread would join itself). */
static void test_destroy_from_callback(void **state)
{
    (void)state;
    hm_test_alarm(120, "destroy_from_callback");
    struct ctx_server_args args = {.protocol = protocol, .contexts = 1, .life_s = 110};
    struct ctx_env env;
    assert_int_equal(ctx_env_open(&env, &args, protocol), 0);
    hm_context_t *ctx = ctx_threaded_context(env.cls);
    assert_non_null(ctx);
    hm_addr_t *srv;
    assert_int_equal(hm_addr_lookup(ctx, env.server.uri, &srv), HM_SUCCESS);
    hm_handle_t *h;
    assert_int_equal(hm_handle_create(ctx, srv, env.ids.tagged, &h), HM_SUCCESS);
    struct ctx_tag tag = {.client = 0};
    struct destroy_try t = {.ctx = ctx};
    assert_int_equal(hm_forward(h, &tag, destroy_from_callback, &t, NULL), HM_SUCCESS);
    while (!atomic_load(&t.done))
        sched_yield(); /* the progress thread runs the callback */
    assert_int_equal(t.ret, HM_BUSY);
    hm_handle_destroy(h);
    assert_int_equal(ctx_env_stop(&env, ctx, srv), 0);
    hm_addr_free(srv);
    assert_int_equal(hm_context_destroy(ctx), HM_SUCCESS);
    assert_int_equal(hm_class_destroy(env.cls), HM_SUCCESS);
    hm_test_alarm(0, NULL);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PROTOCOL_URI\n", argv[0]);
        return 2;
    }
    protocol = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_credits_per_peer),
        cmocka_unit_test(test_credits_total),
        cmocka_unit_test(test_credits_timeout_cancel),
        cmocka_unit_test(test_no_credits_flood),
        cmocka_unit_test(test_destroy_from_callback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
