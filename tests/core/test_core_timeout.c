/*
 * Deadlines and cancel: a timeout against a handler that never responds; a
 * request that waits past its budget in a busy server's queue is dropped
 * there, not handled; cancel before and after the response arrived, with
 * the callback exactly once each time. Usage: test_core_timeout <protocol URI>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core_test.h"

/* Progress and trigger for `ms` milliseconds. */
static void spin_for(hm_context_t *ctx, double ms)
{
    double end = core_now_ms() + ms;
    while (core_now_ms() < end) {
        hm_progress(ctx, 10);
        hm_trigger(ctx, UINT32_MAX, NULL);
    }
}

static void test_timeout_on_silent_handler(void **state)
{
    double start = core_now_ms();
    assert_int_equal(core_call(&core_client, core_client.ids.hang, NULL, NULL, 300), HM_TIMEOUT);
    double elapsed = core_now_ms() - start;
    assert_true(elapsed >= 299.0);
    hm_stats_t st = {.size = sizeof(st)};
    hm_context_stats(core_client.ctx, &st);
    assert_true(st.timeouts >= 1);
    /* The context still works. */
    assert_int_equal(core_call(&core_client, core_client.ids.noop, NULL, NULL, 5000), HM_SUCCESS);
}

static void test_budget_spent_in_server_queue(void **state)
{
    struct core_server_stats before, after;
    assert_int_equal(core_server_stats(&core_client, &before), HM_SUCCESS);
    /* The server will receive for 1 s without running handlers. */
    struct core_ms busy = {.ms = 1000};
    assert_int_equal(core_call(&core_client, core_client.ids.busy, &busy, NULL, 5000), HM_SUCCESS);
    /* This one waits in its queue past its 200 ms budget. */
    assert_int_equal(core_call(&core_client, core_client.ids.marked, NULL, NULL, 200), HM_TIMEOUT);
    spin_for(core_client.ctx, 1200);
    assert_int_equal(core_server_stats(&core_client, &after), HM_SUCCESS);
    assert_int_equal(after.dropped_expired - before.dropped_expired, 1);
    assert_int_equal(after.marked_handled, before.marked_handled); /* never handled */
    /* With time to spare it is handled. */
    assert_int_equal(core_call(&core_client, core_client.ids.marked, NULL, NULL, 5000), HM_SUCCESS);
    assert_int_equal(core_server_stats(&core_client, &after), HM_SUCCESS);
    assert_int_equal(after.marked_handled, before.marked_handled + 1);
}

static void test_cancel_before_response(void **state)
{
    hm_handle_t *handle;
    struct hm_test_outcome o = {0};
    struct core_ms delay = {.ms = 300};
    assert_int_equal(hm_handle_create(core_client.ctx, core_client.server, core_client.ids.delay, &handle),
                     HM_SUCCESS);
    assert_int_equal(hm_forward(handle, &delay, hm_test_outcome_cb, &o, NULL), HM_SUCCESS);
    assert_int_equal(hm_cancel(handle), HM_SUCCESS);
    assert_int_equal(hm_cancel(handle), HM_SUCCESS); /* twice is harmless */
    hm_stats_t before = {.size = sizeof(before)};
    hm_context_stats(core_client.ctx, &before);
    spin_for(core_client.ctx, 800); /* the late response arrives meanwhile */
    assert_int_equal(o.calls, 1);
    assert_int_equal(o.ret, HM_CANCELED);
    hm_stats_t after = {.size = sizeof(after)};
    hm_context_stats(core_client.ctx, &after);
    assert_int_equal(after.dropped_late - before.dropped_late, 1);
    /* The handle is reusable at once. */
    struct hm_test_outcome o2 = {0};
    delay.ms = 0;
    assert_int_equal(hm_forward(handle, &delay, hm_test_outcome_cb, &o2, NULL), HM_SUCCESS);
    while (o2.calls == 0)
        spin_for(core_client.ctx, 10);
    assert_int_equal(o2.ret, HM_SUCCESS);
    hm_handle_destroy(handle);
}

static void test_cancel_after_response(void **state)
{
    hm_handle_t *handle;
    struct hm_test_outcome o = {0};
    assert_int_equal(hm_handle_create(core_client.ctx, core_client.server, core_client.ids.noop, &handle),
                     HM_SUCCESS);
    assert_int_equal(hm_forward(handle, NULL, hm_test_outcome_cb, &o, NULL), HM_SUCCESS);
    /* Progress without triggering until the response has arrived. */
    while (hm_progress(core_client.ctx, 1000) != HM_SUCCESS)
        ;
    assert_int_equal(hm_cancel(handle), HM_SUCCESS);
    spin_for(core_client.ctx, 100);
    assert_int_equal(o.calls, 1);
    assert_int_equal(o.ret, HM_SUCCESS);
    hm_handle_destroy(handle);
}

static void test_destroy_while_in_flight(void **state)
{
    hm_handle_t *handle;
    struct hm_test_outcome o = {0};
    struct core_ms delay = {.ms = 50};
    assert_int_equal(hm_handle_create(core_client.ctx, core_client.server, core_client.ids.delay, &handle),
                     HM_SUCCESS);
    assert_int_equal(hm_forward(handle, &delay, hm_test_outcome_cb, &o, NULL), HM_SUCCESS);
    hm_handle_destroy(handle); /* the RPC keeps its own reference */
    spin_for(core_client.ctx, 300);
    assert_int_equal(o.calls, 1);
    assert_int_equal(o.ret, HM_SUCCESS);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        core_protocol = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timeout_on_silent_handler),
        cmocka_unit_test(test_budget_spent_in_server_queue),
        cmocka_unit_test(test_cancel_before_response),
        cmocka_unit_test(test_cancel_after_response),
        cmocka_unit_test(test_destroy_while_in_flight),
    };
    return cmocka_run_group_tests_name("core_timeout", tests, core_setup, core_teardown);
}
