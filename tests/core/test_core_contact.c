/*
 * First contact (issue 14): a server asleep in hm_progress is woken by its
 * transport for a new peer's first RPC, in each progress mode that sleeps.
 *
 * The server here sleeps up to 60 s per hm_progress call (core_server_wait_ms),
 * so it answers only what its transport wakes it for; the client gives its
 * first RPC 10 s. Before the fix, ofi+shm's first post to a new peer met
 * -FI_EAGAIN (shm had only left our name in the peer's region) and nothing
 * rang the sleeping peer's doorbell: the server slept through its timeout
 * (1 s in hm-perf, 0.3-0.7 s first RPCs; 60 s here, so the RPC times out).
 * What is checked is that the RPC completes, never how fast.
 *
 * Each case forks a fresh server and opens a fresh client class, so the RPC
 * is the first message between the two processes.
 *
 * Usage: test_core_contact <protocol URI>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core_test.h"

#define SERVER_WAIT_MS 60000u /* far beyond the RPC's timeout */
#define FIRST_RPC_TIMEOUT_MS 10000u

/* Fork a server and a client in progress mode `mode` (HM_PROGRESS, which
 * the forked server inherits), call noop twice, stop both. */
static void first_contact(const char *mode)
{
    char *saved = getenv("HM_PROGRESS") ? strdup(getenv("HM_PROGRESS")) : NULL;
    assert_int_equal(setenv("HM_PROGRESS", mode, 1), 0);
    core_server_wait_ms = SERVER_WAIT_MS;
    struct core_client client;
    int rc = core_fixture_start(&client, core_protocol);
    if (saved) {
        assert_int_equal(setenv("HM_PROGRESS", saved, 1), 0);
        free(saved);
    } else {
        assert_int_equal(unsetenv("HM_PROGRESS"), 0);
    }
    assert_int_equal(rc, 0);

    hm_return_t first = core_call(&client, client.ids.noop, NULL, NULL, FIRST_RPC_TIMEOUT_MS);
    hm_return_t second = core_call(&client, client.ids.noop, NULL, NULL, FIRST_RPC_TIMEOUT_MS);
    core_fixture_stop(&client);
    if (first != HM_SUCCESS)
        fprintf(stderr, "first RPC (%s mode): %s\n", mode, hm_strerror(first));
    assert_int_equal(first, HM_SUCCESS);
    assert_int_equal(second, HM_SUCCESS);
}

static void test_first_rpc_wakes_waiting_server(void **state)
{
    (void)state;
    first_contact("wait");
}

static void test_first_rpc_wakes_default_server(void **state)
{
    (void)state;
    first_contact("default");
}

int main(int argc, char **argv)
{
    if (argc > 1)
        core_protocol = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_rpc_wakes_waiting_server),
        cmocka_unit_test(test_first_rpc_wakes_default_server),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
