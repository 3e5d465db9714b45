/*
 * A process that closes its ofi+tcp context and opens another never gets a
 * port it closed lately (ofi_portreuse.c): rxm on a server that still holds
 * the old connection takes the new one, same name and same process id, for
 * a simultaneous connect and rejects it, and the client's sends then wait
 * forever (seen in hostile_listener_ofi+tcp: RPCs timed out for a minute).
 *
 * 600 classes, each with one context, opened and closed one after the
 * other; every port must differ from the ones before. The kernel picks a
 * listening port at random among about 28,000, so without the check two of
 * 600 meet with a probability of about 0.998. Then one more class still
 * reaches a server (the ports skipped are not a resource that runs out).
 *
 * Usage: test_core_reopen <protocol URI> (an ofi+tcp one; others skip).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core_test.h"

#define REOPENS 600

/* The port of a context's own URI ("ofi+tcp://127.0.0.1:PORT"), or -1. */
static long self_port(hm_context_t *ctx)
{
    hm_addr_t *self = NULL;
    char uri[256];
    size_t len = sizeof(uri);
    if (hm_addr_self(ctx, &self) != HM_SUCCESS)
        return -1;
    hm_return_t ret = hm_addr_to_string(self, uri, &len);
    hm_addr_free(self);
    const char *colon = ret == HM_SUCCESS ? strrchr(uri, ':') : NULL;
    return colon != NULL ? strtol(colon + 1, NULL, 10) : -1;
}

static void test_ports_not_reused(void **state)
{
    (void)state;
    static unsigned char seen[65536];
    memset(seen, 0, sizeof(seen));
    for (int i = 0; i < REOPENS; i++) {
        hm_class_t *cls;
        hm_context_t *ctx;
        assert_int_equal(hm_class_create(core_protocol, NULL, &cls), HM_SUCCESS);
        assert_int_equal(hm_context_create(cls, NULL, &ctx), HM_SUCCESS);
        long port = self_port(ctx);
        assert_true(port > 0 && port < 65536);
        if (seen[port])
            fail_msg("open %d got port %ld again", i, port);
        seen[port] = 1;
        assert_int_equal(hm_context_destroy(ctx), HM_SUCCESS);
        assert_int_equal(hm_class_destroy(cls), HM_SUCCESS);
    }
}

static void test_still_reaches_a_server(void **state)
{
    (void)state;
    assert_int_equal(core_call(&core_client, core_client.ids.noop, NULL, NULL, 10000),
                     HM_SUCCESS);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        core_protocol = argv[1];
    if (strncmp(core_protocol, "ofi+tcp", 7) != 0) {
        printf("test_core_reopen: only ofi+tcp keeps closed ports apart (skipped)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ports_not_reused),
        cmocka_unit_test(test_still_reaches_a_server),
    };
    return cmocka_run_group_tests_name("core_reopen", tests, core_setup, core_teardown);
}
