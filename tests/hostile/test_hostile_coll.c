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
 * Usage: test_hostile_coll <protocol URI>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <hermod/group.h>

#include "group/coll_wire.h"
#include "harness.h"
#include "fixture_hm.h"

static const char *protocol;

enum { CASE_TOO_MANY, CASE_STRANGER, CASE_ROOT, CASE_HONEST, NCASES };

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
    char uri[HM_ADDR_URI_MAX], line[64];
    if (hm_class_create(protocol, NULL, &cls) != HM_SUCCESS ||
        hm_context_create(cls, NULL, &ctx) != HM_SUCCESS ||
        hm_register(cls, "hm.group.coll", hmi_coll_in_proc, hmi_coll_out_proc, forge_handler,
                    NULL) != HM_SUCCESS ||
        hm_test_self_uri(ctx, uri, sizeof(uri)) != 0 || hm_test_ready(uri) != 0)
        return 1;
    while (hm_test_await(line, sizeof(line), 1) != 0) { /* 0 would never look */
        hm_progress(ctx, 10);
        unsigned int count;
        hm_trigger(ctx, 64, &count);
    }
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

static void test_forged_answers(void **state)
{
    (void)state;
    hm_test_alarm(120, "hostile_coll");
    struct hm_test_child forger;
    char forger_uri[HM_ADDR_URI_MAX], self_uri[HM_ADDR_URI_MAX];
    assert_int_equal(hm_test_spawn(&forger, forger_main, NULL), 0);
    assert_int_equal(hm_test_recv(&forger, forger_uri, sizeof(forger_uri), 30000), 0);

    hm_class_t *cls;
    hm_context_t *ctx;
    hm_id_t id;
    assert_int_equal(hm_class_create(protocol, NULL, &cls), HM_SUCCESS);
    hm_coll_ops_t ops = {.handler = noop_handler};
    assert_int_equal(hm_coll_register(cls, "hostile.noop", &ops, &id), HM_SUCCESS);
    assert_int_equal(hm_context_create(cls, NULL, &ctx), HM_SUCCESS);
    assert_int_equal(hm_test_self_uri(ctx, self_uri, sizeof(self_uri)), 0);
    const char *uris[2] = {self_uri, forger_uri};
    hm_group_opts_t gopts = {.field_mask = HM_GROUP_OPT_DETECT_MS, .detect_ms = 0};
    hm_group_t *group;
    assert_int_equal(hm_group_create_list(ctx, uris, 2, 0, &gopts, &group), HM_SUCCESS);

    for (unsigned int c = 0; c < NCASES; c++) {
        struct outcome o = {0};
        hm_coll_opts_t copts = {.field_mask = HM_COLL_OPT_TIMEOUT, .timeout_ms = 10000};
        assert_int_equal(hm_coll_start(group, id, NULL, outcome_cb, &o, &copts), HM_SUCCESS);
        while (!o.done) {
            hm_progress(ctx, 10);
            unsigned int count;
            hm_trigger(ctx, 64, &count);
        }
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

    assert_int_equal(hm_group_destroy(group), HM_SUCCESS);
    assert_int_equal(hm_test_context_close(ctx, 100), HM_SUCCESS);
    assert_int_equal(hm_class_destroy(cls), HM_SUCCESS);
    assert_int_equal(hm_test_send(&forger, "stop"), 0);
    assert_int_equal(hm_test_wait(&forger, 30), 0);
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
    };
    return cmocka_run_group_tests_name("hostile_coll", tests, NULL, NULL);
}
