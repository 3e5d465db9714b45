/*
 * RPCs between a client and a server in separate processes: no-op, echo of
 * strings up to the eager limit, 100,000 RPCs with 64 in flight, an unknown
 * RPC id. Usage: test_core_rpc <protocol URI>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core_test.h"

static void test_noop(void **state)
{
    for (int i = 0; i < 10; i++)
        assert_int_equal(core_call(&core_client, core_client.ids.noop, NULL, NULL, 5000), HM_SUCCESS);
}

/* Echo one string of `len` bytes and check it came back whole. */
static hm_return_t echo_len(hm_handle_t *handle, char *str, size_t len)
{
    for (size_t i = 0; i < len; i++)
        str[i] = (char)('a' + (i * 7) % 26);
    str[len] = '\0';
    struct core_echo in = {.str = str}, out;
    hm_return_t ret = hm_call(handle, &in, &out, 10000);
    if (ret != HM_SUCCESS)
        return ret;
    assert_int_equal(strlen(out.str), len);
    assert_memory_equal(out.str, str, len);
    return hm_free_output(handle, &out);
}

static void test_echo_up_to_eager_limit(void **state)
{
    size_t limit = hm_class_eager_limit(core_client.cls);
    size_t max_len = limit - 4 - 1; /* u32 length and NUL on the wire */
    char *str = malloc(limit + 2);
    hm_handle_t *handle;
    assert_int_equal(hm_handle_create(core_client.ctx, core_client.server, core_client.ids.echo, &handle),
                     HM_SUCCESS);
    size_t sizes[] = {0, 1, 2, 7, 8, 100, 1000, 4095, 4096, 8192, 32768, max_len - 1, max_len};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        if (sizes[i] > max_len)
            continue;
        assert_int_equal(echo_len(handle, str, sizes[i]), HM_SUCCESS);
    }
    /* One byte more does not fit the message: it goes by overflow, both ways. */
    hm_stats_t before = {.size = sizeof(before)}, after = {.size = sizeof(after)};
    assert_int_equal(hm_context_stats(core_client.ctx, &before), HM_SUCCESS);
    assert_int_equal(echo_len(handle, str, max_len + 1), HM_SUCCESS);
    assert_int_equal(hm_context_stats(core_client.ctx, &after), HM_SUCCESS);
    assert_int_equal(after.overflows_sent, before.overflows_sent + 1);
    assert_int_equal(after.overflows_received, before.overflows_received + 1);
    assert_int_equal(echo_len(handle, str, 5), HM_SUCCESS);
    hm_handle_destroy(handle);
    free(str);
}

/* 100,000 no-ops with 64 in flight: each completion sends the next. */
#define TOTAL_RPCS 100000u
#define IN_FLIGHT 64u

struct flood {
    unsigned sent, done, failed;
};

static void flood_cb(const hm_cb_info_t *info)
{
    struct flood *flood = info->arg;
    flood->done++;
    if (info->ret != HM_SUCCESS)
        flood->failed++;
    if (flood->sent < TOTAL_RPCS &&
        hm_forward(info->handle, NULL, flood_cb, flood, NULL) == HM_SUCCESS)
        flood->sent++;
}

static void test_many_in_flight(void **state)
{
    struct core_server_stats before, after;
    assert_int_equal(core_server_stats(&core_client, &before), HM_SUCCESS);
    struct flood flood = {0};
    hm_handle_t *handles[IN_FLIGHT];
    for (unsigned i = 0; i < IN_FLIGHT; i++) {
        assert_int_equal(hm_handle_create(core_client.ctx, core_client.server, core_client.ids.noop,
                                          &handles[i]),
                         HM_SUCCESS);
        assert_int_equal(hm_forward(handles[i], NULL, flood_cb, &flood, NULL), HM_SUCCESS);
        flood.sent++;
    }
    while (flood.done < TOTAL_RPCS) {
        hm_progress(core_client.ctx, 1000);
        hm_trigger(core_client.ctx, UINT32_MAX, NULL);
    }
    for (unsigned i = 0; i < IN_FLIGHT; i++)
        hm_handle_destroy(handles[i]);
    assert_int_equal(flood.sent, TOTAL_RPCS);
    assert_int_equal(flood.failed, 0);
    assert_int_equal(core_server_stats(&core_client, &after), HM_SUCCESS);
    /* The server saw each one exactly once (plus the stats call itself). */
    assert_int_equal(after.requests_received - before.requests_received, TOTAL_RPCS + 1);
}

static void test_unknown_rpc(void **state)
{
    struct core_server_stats st;
    assert_int_equal(core_call(&core_client, core_client.ids.unknown, NULL, NULL, 5000), HM_NOENTRY);
    assert_int_equal(core_server_stats(&core_client, &st), HM_SUCCESS);
    assert_true(st.noentry_replies >= 1);
    assert_int_equal(core_call(&core_client, core_client.ids.noop, NULL, NULL, 5000), HM_SUCCESS);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        core_protocol = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_noop),
        cmocka_unit_test(test_echo_up_to_eager_limit),
        cmocka_unit_test(test_many_in_flight),
        cmocka_unit_test(test_unknown_rpc),
    };
    return cmocka_run_group_tests_name("core_rpc", tests, core_setup, core_teardown);
}
