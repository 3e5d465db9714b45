/*
 * CRC32C end to end: a server and a client that both checksum exchange RPCs
 * (strings up to the eager limit); a peer that does not checksum is refused
 * by that server — each of its requests counted in dropped_checksum, none
 * handled, each answered HM_CHECKSUM_MISMATCH at once (wire v3; before, the
 * caller waited for its timeout) — and the server keeps serving. Usage: test_core_checksum <protocol URI>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core_test.h"

static const hm_class_opts_t checksum_on = {
    .field_mask = HM_CLASS_OPT_CHECKSUM,
    .checksum = true,
};

static void test_checksummed_echo(void **state)
{
    size_t max_len = hm_class_eager_limit(core_client.cls) - 4 - 1;
    char *str = malloc(max_len + 1);
    memset(str, 'c', max_len);
    str[max_len] = '\0';
    hm_handle_t *handle;
    assert_int_equal(hm_handle_create(core_client.ctx, core_client.server,
                                      core_client.ids.echo, &handle),
                     HM_SUCCESS);
    struct core_echo in = {.str = str}, out;
    assert_int_equal(hm_call(handle, &in, &out, 10000), HM_SUCCESS);
    assert_int_equal(strlen(out.str), max_len);
    assert_int_equal(hm_free_output(handle, &out), HM_SUCCESS);
    hm_handle_destroy(handle);
    free(str);
    struct core_server_stats st;
    assert_int_equal(core_server_stats(&core_client, &st), HM_SUCCESS);
    assert_int_equal(st.dropped_checksum, 0);
}

static void test_peer_without_checksum_refused(void **state)
{
    struct core_server_stats before, after;
    assert_int_equal(core_server_stats(&core_client, &before), HM_SUCCESS);
    struct core_client plain = {0};
    core_class_opts = NULL; /* this client sends no CRC */
    hm_return_t ret = core_client_open(&plain, core_protocol, core_client.server_proc.uri);
    core_class_opts = &checksum_on;
    assert_int_equal(ret, HM_SUCCESS);
    for (int i = 0; i < 3; i++)
        assert_int_equal(core_call(&plain, plain.ids.marked, NULL, NULL, 10000),
                         HM_CHECKSUM_MISMATCH); /* answered, not left to time out */
    core_client_close(&plain);
    assert_int_equal(core_server_stats(&core_client, &after), HM_SUCCESS);
    assert_int_equal(after.dropped_checksum - before.dropped_checksum, 3);
    assert_int_equal(after.marked_handled, before.marked_handled);
    assert_int_equal(core_call(&core_client, core_client.ids.noop, NULL, NULL, 5000), HM_SUCCESS);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        core_protocol = argv[1];
    core_class_opts = &checksum_on;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checksummed_echo),
        cmocka_unit_test(test_peer_without_checksum_refused),
    };
    return cmocka_run_group_tests_name("core_checksum", tests, core_setup, core_teardown);
}
