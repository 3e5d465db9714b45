/*
 * A hostile member against a collective's root (every protocol; src/group,
 * coll_node.c). A child's answer travels up the tree as claims about its
 * subtree: how many ranks contributed and which failed. This process is
 * rank 0 of a two-rank list group and roots each collective; rank 1 is a
 * forked process that serves "hm.group.coll" by hand and answers the n-th
 * request with the n-th case:
 *  - more ranks contributed than its subtree holds (5 for a subtree of 1);
 *  - a failure of rank 77, which is in no subtree of this collective;
 *  - a failure of rank 0, the root, which is not in its subtree;
 *  - an honest answer (one contribution), to show the path is the real one.
 * Promise: a child's answer counts only for ranks of its subtree. A forged
 * one fails that child (HM_PROTOCOL_ERROR in the result's failed list, and
 * the result's ret), nothing of it is counted (contributed stays at the
 * root's 1) and no rank outside the child's subtree is reported. Before
 * the check the root reported 6 contributions, a failed rank 77 and a failed
 * root.
 *
 * test_bulk_budget: a chained bulk broadcast makes each rank allocate the
 * size its sender's descriptor claims. The receiver (a forked member with
 * HM_MAX_OVERFLOW_PEER at 1 MiB) must charge it to its admission byte
 * budget before allocating: a 4 MiB broadcast fails there with HM_MSGSIZE
 * (it pulled the 4 MiB before), a 512 KiB one succeeds.
 *
 * test_stalled_source: the same member (its pulls by messages, HM_CMA=0)
 * gets four 512 KiB broadcasts from a root that drops the member's pull
 * requests (GET_REQ): each times out at the member. Promise: the member lets
 * go of each copy when it answers (its pull canceled), so it holds no
 * collective afterwards; before, it held all four (2 MiB past a 1 MiB
 * budget, whose charge went with each answer), and would any number.
 *
 * test_liveness_claims: a keepalive request names its sender, and hearing
 * from a rank spares it the next keepalive. A process outside the group
 * sends this rank pings naming rank 1, every 20 ms, after rank 1 was
 * killed. Promise: a claim counts only from the rank's own address, so the
 * death is still reported (before, the forged pings kept rank 1 "heard"
 * and it was never pinged, so never found dead).
 *
 * test_forged_join: a request whose id is a collective in flight joins it
 * (an adopter reaching a rank twice gets one answer for both). Rank 1, on
 * receiving the root's request, sends the root a request with the same id
 * but another collective. Promise: a join must be the same collective (id,
 * registered collective, root, tree); this one is refused at once with
 * HM_PROTOCOL_ERROR (before, it joined, and waited on an answer that
 * waited on rank 1), and the real collective completes.
 * Usage: test_hostile_coll <protocol URI>.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <hermod/group.h>

#include "group/coll_wire.h"
#include "group/group_internal.h"
#include "harness.h"
#include "fixture_hm.h"
#include "hostile.h"

static const char *protocol;

enum { CASE_TOO_MANY, CASE_STRANGER, CASE_ROOT, CASE_HONEST, NCASES };

static void drive_ctx(hm_context_t *ctx)
{
    hm_progress(ctx, 10);
    unsigned int count;
    hm_trigger(ctx, 64, &count);
}

/* In a child: our class and context, "hm.group.coll" served by `coll_handler`
 * (NULL: not served), and our URI sent to the parent. 0, or -1. */
static int child_open(hm_class_t **cls, hm_context_t **ctx, hm_rpc_handler_t coll_handler)
{
    char uri[HM_ADDR_URI_MAX];
    if (hm_class_create(protocol, NULL, cls) != HM_SUCCESS ||
        (coll_handler != NULL &&
         hm_register(*cls, "hm.group.coll", hmi_coll_in_proc, hmi_coll_out_proc, coll_handler,
                     NULL) != HM_SUCCESS) ||
        hm_context_create(*cls, NULL, ctx) != HM_SUCCESS ||
        hm_test_self_uri(*ctx, uri, sizeof(uri)) != 0 || hm_test_ready(uri) != 0)
        return -1;
    return 0;
}

/* ---- rank 1: the forger ----------------------------------------------------------- */

static unsigned int forged_seen;

static hm_return_t forge_handler(hm_handle_t *handle)
{
    struct hmi_coll_in in;
    if (hm_get_input(handle, &in) == HM_SUCCESS)
        hm_free_input(handle, &in);
    uint64_t failed[1];
    struct hmi_coll_out out = {.co_contributed = 1};
    switch (forged_seen++ % NCASES) {
    case CASE_TOO_MANY:
        out.co_contributed = 5;
        break;
    case CASE_STRANGER:
        failed[0] = (uint64_t)77 << 32 | (uint32_t)HM_TIMEOUT;
        out.co_failed = (hm_array_t){.elems = failed, .count = 1};
        break;
    case CASE_ROOT:
        out.co_contributed = 0;
        failed[0] = (uint64_t)0 << 32 | (uint32_t)HM_TIMEOUT;
        out.co_failed = (hm_array_t){.elems = failed, .count = 1};
        break;
    default:
        break;
    }
    hm_return_t ret = hm_respond(handle, &out, NULL, NULL);
    hm_handle_destroy(handle);
    return ret;
}

static int forger_main(void *arg)
{
    (void)arg;
    hm_class_t *cls;
    hm_context_t *ctx;
    char line[64];
    if (child_open(&cls, &ctx, forge_handler) != 0)
        return 1;
    while (hm_test_await(line, sizeof(line), 1) != 0) /* 0 would never look */
        drive_ctx(ctx);
    hm_context_destroy(ctx);
    hm_class_destroy(cls);
    return strcmp(line, "stop") == 0 ? 0 : 1;
}

/* ---- rank 0: the root ------------------------------------------------------------- */

static hm_return_t noop_handler(hm_coll_req_t *req)
{
    return hm_coll_respond(req, NULL);
}

struct outcome {
    bool done;
    hm_return_t ret;
    uint32_t contributed;
    uint32_t failed_count;
    hm_coll_failure_t failed[4];
};

static void outcome_cb(const hm_coll_result_t *r)
{
    struct outcome *o = r->arg;
    o->ret = r->ret;
    o->contributed = r->contributed;
    o->failed_count = r->failed_count;
    for (uint32_t i = 0; i < r->failed_count && i < 4; i++)
        o->failed[i] = r->failed[i];
    o->done = true;
}

/* Rank 0 of a two-rank list group whose rank 1 is a forked child. */
struct root {
    struct hm_test_child child;
    char child_uri[HM_ADDR_URI_MAX], self_uri[HM_ADDR_URI_MAX];
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_group_t *group;
    hm_id_t id; /* the collective the tests start */
};

static hm_return_t noop_register(hm_class_t *cls, hm_id_t *id)
{
    hm_coll_ops_t ops = {.handler = noop_handler};
    return hm_coll_register(cls, "hostile.noop", &ops, id);
}

/* Fork rank 1 (`child` sends its URI first), then open our class and context. */
static void root_open(struct root *r, int (*child)(void *),
                      hm_return_t (*reg)(hm_class_t *, hm_id_t *))
{
    assert_int_equal(hm_test_spawn(&r->child, child, NULL), 0);
    assert_int_equal(hm_test_recv(&r->child, r->child_uri, sizeof(r->child_uri), 30000), 0);
    assert_int_equal(hm_class_create(protocol, NULL, &r->cls), HM_SUCCESS);
    if (reg != NULL)
        assert_int_equal(reg(r->cls, &r->id), HM_SUCCESS);
    assert_int_equal(hm_context_create(r->cls, NULL, &r->ctx), HM_SUCCESS);
    assert_int_equal(hm_test_self_uri(r->ctx, r->self_uri, sizeof(r->self_uri)), 0);
}

/* The group {0: us, 1: the child}; `opts` NULL: no keepalives. */
static void root_group(struct root *r, const hm_group_opts_t *opts)
{
    static const hm_group_opts_t quiet = {.field_mask = HM_GROUP_OPT_DETECT_MS, .detect_ms = 0};
    const char *uris[2] = {r->self_uri, r->child_uri};
    assert_int_equal(hm_group_create_list(r->ctx, uris, 2, 0, opts != NULL ? opts : &quiet,
                                          &r->group),
                     HM_SUCCESS);
}

/* Start collective r->id with `in` and drive until its result. */
static struct outcome root_run(struct root *r, const void *in, uint32_t timeout_ms)
{
    struct outcome o = {0};
    hm_coll_opts_t copts = {.field_mask = HM_COLL_OPT_TIMEOUT, .timeout_ms = timeout_ms};
    assert_int_equal(hm_coll_start(r->group, r->id, in, outcome_cb, &o, &copts), HM_SUCCESS);
    while (!o.done)
        drive_ctx(r->ctx);
    return o;
}

/* Close ours, then stop the child (if `stop`) and expect a clean exit. */
static void root_close(struct root *r, bool stop)
{
    assert_int_equal(hm_group_destroy(r->group), HM_SUCCESS);
    assert_int_equal(hm_test_context_close(r->ctx, 100), HM_SUCCESS);
    assert_int_equal(hm_class_destroy(r->cls), HM_SUCCESS);
    if (stop) {
        assert_int_equal(hm_test_send(&r->child, "stop"), 0);
        assert_int_equal(hm_test_wait(&r->child, 30), 0);
    }
}

static void test_forged_answers(void **state)
{
    (void)state;
    hm_test_alarm(120, "hostile_coll");
    struct root r;
    root_open(&r, forger_main, noop_register);
    root_group(&r, NULL);
    for (unsigned int c = 0; c < NCASES; c++) {
        struct outcome o = root_run(&r, NULL, 10000);
        print_message("case %u: %s, contributed %u, failed %u\n", c, hm_strerror(o.ret),
                      o.contributed, o.failed_count);
        if (c == CASE_HONEST) {
            assert_int_equal(o.ret, HM_SUCCESS);
            assert_int_equal(o.contributed, 2);
            assert_int_equal(o.failed_count, 0);
            continue;
        }
        assert_int_equal(o.ret, HM_PROTOCOL_ERROR);
        assert_int_equal(o.contributed, 1); /* the root's own */
        assert_int_equal(o.failed_count, 1);
        assert_int_equal(o.failed[0].rank, 1);
        assert_int_equal(o.failed[0].error, HM_PROTOCOL_ERROR);
    }
    root_close(&r, true);
}

/* ---- a chained bulk broadcast past the receiver's byte budget -------------------- */

#define BUDGET_PEER (1u << 20)

struct bcast_in {
    uint32_t size;
    hm_bulk_t *data;
};

static const hm_proc_field_t bcast_fields[] = {
    HM_PROC_FIELD(struct bcast_in, size, hm_proc_uint32),
    HM_PROC_FIELD(struct bcast_in, data, hm_proc_bulk),
};

static hm_return_t bcast_in_proc(hm_proc_t *proc, void *data)
{
    return hm_proc_struct(proc, data, bcast_fields, HM_PROC_FIELD_COUNT(bcast_fields));
}

/* Both ranks: the broadcast's handler checks the copy it got. */
static hm_return_t bcast_handler(hm_coll_req_t *req)
{
    struct bcast_in in;
    const uint8_t *data;
    size_t size;
    if (hm_coll_get_input(req, &in) != HM_SUCCESS)
        return HM_PROTOCOL_ERROR;
    hm_coll_bulk_data(req, (const void **)&data, &size);
    if (data != NULL && (size != in.size || data[size - 1] != (uint8_t)size))
        return HM_PROTOCOL_ERROR;
    return hm_coll_respond(req, NULL);
}

static hm_return_t bcast_register(hm_class_t *cls, hm_id_t *id)
{
    hm_coll_ops_t ops = {.in_proc = bcast_in_proc,
                         .in_size = sizeof(struct bcast_in),
                         .handler = bcast_handler,
                         .has_bulk = true,
                         .bulk_offset = offsetof(struct bcast_in, data)};
    return hm_coll_register(cls, "hostile.bcast", &ops, id);
}

/* Rank 1: a member whose budget per sender is BUDGET_PEER bytes. */
static int member_main(void *arg)
{
    (void)arg;
    char budget[32], uri[HM_ADDR_URI_MAX], root_uri[HM_ADDR_URI_MAX], line[64];
    snprintf(budget, sizeof(budget), "%u", BUDGET_PEER);
    setenv("HM_MAX_OVERFLOW_PEER", budget, 1);
    setenv("HM_CMA", "0", 1); /* shm pulls go by messages too: the root can withhold them */
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_group_t *group;
    hm_id_t id;
    if (hm_class_create(protocol, NULL, &cls) != HM_SUCCESS ||
        bcast_register(cls, &id) != HM_SUCCESS || hm_context_create(cls, NULL, &ctx) != HM_SUCCESS ||
        hm_test_self_uri(ctx, uri, sizeof(uri)) != 0 || hm_test_ready(uri) != 0 ||
        hm_test_await(root_uri, sizeof(root_uri), 30000) != 0)
        return 1;
    const char *uris[2] = {root_uri, uri};
    hm_group_opts_t gopts = {.field_mask = HM_GROUP_OPT_DETECT_MS, .detect_ms = 0};
    if (hm_group_create_list(ctx, uris, 2, 1, &gopts, &group) != HM_SUCCESS ||
        hm_test_signal("grouped") != 0)
        return 1;
    for (;;) {
        while (hm_test_await(line, sizeof(line), 1) != 0) /* 0 would never look */
            drive_ctx(ctx);
        if (strcmp(line, "nodes") != 0)
            break;
        char count[32]; /* collectives this rank still holds state for */
        snprintf(count, sizeof(count), "%u", group->g_nodes_alive);
        hm_test_signal(count);
    }
    hm_group_destroy(group);
    hm_test_context_close(ctx, 100);
    hm_class_destroy(cls);
    return strcmp(line, "stop") == 0 ? 0 : 1;
}

static struct outcome broadcast_within(struct root *r, uint32_t size, uint32_t timeout_ms)
{
    uint8_t *buf = malloc(size);
    assert_non_null(buf);
    memset(buf, 0, size);
    buf[size - 1] = (uint8_t)size;
    size_t len = size;
    struct bcast_in in = {.size = size};
    assert_int_equal(hm_bulk_create(r->cls, 1, (void **)&buf, &len, HM_BULK_READ_ONLY, &in.data),
                     HM_SUCCESS);
    struct outcome o = root_run(r, &in, timeout_ms);
    hm_bulk_free(in.data);
    free(buf);
    print_message("broadcast of %u bytes: %s, contributed %u, failed %u\n", size,
                  hm_strerror(o.ret), o.contributed, o.failed_count);
    return o;
}

static struct outcome broadcast(struct root *r, uint32_t size)
{
    return broadcast_within(r, size, 20000);
}

/* Rank 0 of {us, a forked member_main}, the broadcast registered, grouped. */
static void root_open_member(struct root *r)
{
    char line[64];
    root_open(r, member_main, bcast_register);
    assert_int_equal(hm_test_send(&r->child, r->self_uri), 0); /* the member makes its group */
    assert_int_equal(hm_test_recv(&r->child, line, sizeof(line), 30000), 0);
    root_group(r, NULL);
}

static void test_bulk_budget(void **state)
{
    (void)state;
    hm_test_alarm(120, "hostile_coll bulk");
    struct root r;
    root_open_member(&r);
    struct outcome big = broadcast(&r, 4u * BUDGET_PEER);
    assert_int_equal(big.ret, HM_MSGSIZE);
    assert_int_equal(big.contributed, 1);
    assert_int_equal(big.failed_count, 1);
    assert_int_equal(big.failed[0].rank, 1);
    assert_int_equal(big.failed[0].error, HM_MSGSIZE);
    struct outcome fits = broadcast(&r, BUDGET_PEER / 2);
    assert_int_equal(fits.ret, HM_SUCCESS);
    assert_int_equal(fits.contributed, 2);
    root_close(&r, true);
}

/* The member's count of collectives it holds state for, once it is `want`
 * or after 5 s. */
static unsigned long member_nodes(struct root *r, unsigned long want)
{
    char line[32];
    unsigned long nodes = ULONG_MAX;
    for (int i = 0; i < 50 && nodes != want; i++) {
        if (i > 0)
            drive_ctx(r->ctx); /* 10 ms */
        assert_int_equal(hm_test_send(&r->child, "nodes"), 0);
        assert_int_equal(hm_test_recv(&r->child, line, sizeof(line), 10000), 0);
        nodes = strtoul(line, NULL, 10);
    }
    return nodes;
}

/*
 * A sender that never serves the pull of its broadcast: the member answers
 * at its deadline, and must let go of the copy then (cancel the pull), or a
 * sender could make it hold any number of copies, each freed from the byte
 * budget at the answer. Before, every such copy stayed for good.
 */
static void test_stalled_source(void **state)
{
    (void)state;
    hm_test_alarm(120, "hostile_coll stalled source");
    struct root r;
    root_open_member(&r);
    assert_int_equal(broadcast(&r, BUDGET_PEER / 2).ret, HM_SUCCESS);
    hostile_withhold_rma(r.ctx, true); /* the member's GET_REQs */
    for (int i = 0; i < 4; i++) {
        struct outcome o = broadcast_within(&r, BUDGET_PEER / 2, 400);
        assert_int_equal(o.ret, HM_TIMEOUT);
        assert_int_equal(o.failed_count, 1);
        assert_int_equal(o.failed[0].rank, 1);
        assert_int_equal(o.failed[0].error, HM_TIMEOUT);
    }
    unsigned long nodes = member_nodes(&r, 0);
    print_message("member after 4 pulls withheld: %lu collectives held\n", nodes);
    assert_int_equal(nodes, 0);
    hostile_withhold_rma(r.ctx, false);
    struct outcome after = broadcast(&r, BUDGET_PEER / 2);
    assert_int_equal(after.ret, HM_SUCCESS);
    assert_int_equal(after.contributed, 2);
    root_close(&r, true);
}

/* ---- forged keepalives for a dead rank ------------------------------------------- */

#define LIVE_GROUP "hostile.live"

/* A plain endpoint that lives until it is killed: rank 1. */
static int endpoint_main(void *arg)
{
    (void)arg;
    hm_class_t *cls;
    hm_context_t *ctx;
    char line[64];
    if (child_open(&cls, &ctx, NULL) != 0)
        return 1;
    while (hm_test_await(line, sizeof(line), 1) != 0)
        drive_ctx(ctx);
    return 0;
}

/* Not a member: pings rank 0 in the name of rank 1 until told to stop. */
static int pinger_main(void *arg)
{
    (void)arg;
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_addr_t *victim;
    hm_id_t ping;
    char victim_uri[HM_ADDR_URI_MAX], line[64];
    if (hm_class_create(protocol, NULL, &cls) != HM_SUCCESS ||
        hm_register(cls, "hm.group.ping", hmi_ping_in_proc, NULL, NULL, &ping) != HM_SUCCESS ||
        hm_context_create(cls, NULL, &ctx) != HM_SUCCESS || hm_test_ready("up") != 0 ||
        hm_test_await(victim_uri, sizeof(victim_uri), 30000) != 0 ||
        hm_addr_lookup(ctx, victim_uri, &victim) != HM_SUCCESS)
        return 1;
    struct hmi_ping_in in = {.pi_group = hmi_group_hash(LIVE_GROUP), .pi_sender = 1};
    unsigned long answered = 0;
    while (hm_test_await(line, sizeof(line), 20) != 0) {
        hm_handle_t *h;
        if (hm_handle_create(ctx, victim, ping, &h) != HM_SUCCESS)
            return 1;
        answered += hm_call(h, &in, NULL, 2000) == HM_SUCCESS;
        hm_handle_destroy(h);
    }
    char count[64];
    snprintf(count, sizeof(count), "%lu", answered);
    hm_test_signal(count);
    hm_addr_free(victim);
    hm_test_context_close(ctx, 100);
    hm_class_destroy(cls);
    return 0;
}

static void dead_cb(hm_group_t *group, hm_rank_t rank, hm_return_t why, void *arg)
{
    (void)group;
    (void)why;
    if (rank == 1)
        *(bool *)arg = true;
}

static void test_liveness_claims(void **state)
{
    (void)state;
    hm_test_alarm(120, "hostile_coll liveness");
    struct root r;
    struct hm_test_child pinger;
    char line[64];
    bool dead = false;
    /* Both forks first: the harness forks only while we have one thread. */
    assert_int_equal(hm_test_spawn(&pinger, pinger_main, NULL), 0);
    assert_int_equal(hm_test_recv(&pinger, line, sizeof(line), 30000), 0);
    root_open(&r, endpoint_main, NULL);
    hm_group_opts_t gopts = {
        .field_mask = HM_GROUP_OPT_NAME | HM_GROUP_OPT_DETECT_MS | HM_GROUP_OPT_FAILURE_CB,
        .name = LIVE_GROUP,
        .detect_ms = 400,
        .failure_cb = dead_cb,
        .failure_arg = &dead};
    root_group(&r, &gopts);
    assert_int_equal(hm_test_send(&pinger, r.self_uri), 0);
    hm_test_child_kill(&r.child); /* its status: killed, -SIGKILL */

    /* Death is reported within about detect_ms; 30 s is only a bound. */
    for (int i = 0; i < 3000 && !dead; i++)
        drive_ctx(r.ctx);
    assert_true(dead);

    assert_int_equal(hm_test_send(&pinger, "stop"), 0);
    assert_int_equal(hm_test_recv(&pinger, line, sizeof(line), 30000), 0);
    print_message("forged keepalives answered: %s\n", line);
    assert_true(strtoul(line, NULL, 10) > 0); /* the attack did run */
    assert_int_equal(hm_test_wait(&pinger, 30), 0);
    root_close(&r, false);
}

/* ---- a join naming a collective in flight --------------------------------------- */

static struct {
    hm_handle_t *req;      /* the root's request, answered after the forgery */
    struct hmi_coll_in in; /* its decoded input */
    bool forged;
    int done;
    hm_return_t forged_ret;
} J;

static hm_return_t join_handler(hm_handle_t *h)
{
    if (J.req != NULL || hm_get_input(h, &J.in) != HM_SUCCESS) {
        hm_respond_error(h, HM_PROTOCOL_ERROR, NULL, NULL);
        hm_handle_destroy(h);
        return HM_SUCCESS;
    }
    J.req = h;
    return HM_SUCCESS;
}

static void join_cb(const hm_cb_info_t *info)
{
    J.forged_ret = info->ret;
    J.done = 1;
}

/* Rank 1: forges a join of the root's collective under another collective id. */
static int joiner_main(void *arg)
{
    (void)arg;
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_id_t coll = hm_rpc_id("hm.group.coll");
    hm_handle_t *forged = NULL;
    char line[64];
    if (child_open(&cls, &ctx, join_handler) != 0)
        return 1;
    while (hm_test_await(line, sizeof(line), 1) != 0) {
        drive_ctx(ctx);
        if (J.req != NULL && !J.forged) {
            struct hmi_coll_in in = J.in;
            in.ci_user_id ^= 1u; /* another collective, the same id */
            in.ci_sender = 1;
            hm_forward_opts_t opts = {.field_mask = HM_FORWARD_OPT_TIMEOUT, .timeout_ms = 3000};
            if (hm_handle_create(ctx, hm_handle_get_addr(J.req), coll, &forged) != HM_SUCCESS ||
                hm_forward(forged, &in, join_cb, NULL, &opts) != HM_SUCCESS)
                return 1;
            J.forged = true;
        }
        if (J.done == 1) { /* then answer the real request, honestly */
            struct hmi_coll_out out = {.co_contributed = 1};
            hm_free_input(J.req, &J.in);
            hm_respond(J.req, &out, NULL, NULL);
            hm_handle_destroy(J.req);
            hm_handle_destroy(forged);
            snprintf(line, sizeof(line), "%d", (int)J.forged_ret);
            hm_test_signal(line);
            J.done = 2;
        }
    }
    hm_test_context_close(ctx, 100);
    hm_class_destroy(cls);
    return 0;
}

static void test_forged_join(void **state)
{
    (void)state;
    hm_test_alarm(120, "hostile_coll join");
    struct root r;
    char line[64];
    root_open(&r, joiner_main, noop_register);
    root_group(&r, NULL);
    struct outcome o = root_run(&r, NULL, 20000);
    assert_int_equal(hm_test_recv(&r.child, line, sizeof(line), 30000), 0);
    print_message("collective: %s, contributed %u; the forged join: %s\n", hm_strerror(o.ret),
                  o.contributed, hm_strerror((hm_return_t)atoi(line)));
    assert_int_equal(atoi(line), HM_PROTOCOL_ERROR);
    assert_int_equal(o.ret, HM_SUCCESS);
    assert_int_equal(o.contributed, 2);
    root_close(&r, true);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s uri\n", argv[0]);
        return 2;
    }
    protocol = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forged_answers),
        cmocka_unit_test(test_bulk_budget),
        cmocka_unit_test(test_stalled_source),
        cmocka_unit_test(test_liveness_claims),
        cmocka_unit_test(test_forged_join),
    };
    return cmocka_run_group_tests_name("hostile_coll", tests, NULL, NULL);
}
