/*
 * UCX lanes: ucx+shm endpoints must really use shared memory (posix, sysv
 * lanes, never cma by default nor tcp), ucx+tcp endpoints tcp. Checked on both sides:
 * the client's endpoint to the server, after one exchange (wireup done).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"
#include "na/ucx/ucx_lanes.h"
#include "na_test.h"

static const char *g_uri;

static int client_lanes(void *arg)
{
    struct nt_peer p;
    hmi_na_addr_t *srv;
    NT_CHECK(nt_peer_open(&p, g_uri) == 0);
    NT_CHECK(p.cls->c_ops.addr_lookup(p.ctx, arg, 0, &srv) == HM_SUCCESS);
    unsigned char ping[16] = "lanes";
    NT_CHECK(nt_send_sync(&p, srv, ping, sizeof(ping)) == HM_SUCCESS);
    struct nt_msg *m = nt_wait_msg(&p, 20000);
    NT_CHECK(m != NULL);
    nt_msg_free(&p, m);
    char lanes[256];
    NT_CHECK(hmi_ucx_addr_describe(srv, lanes, sizeof(lanes)) == HM_SUCCESS);
    printf("%s lanes: %s\n", g_uri, lanes);
    if (strncmp(g_uri, "ucx+shm", 7) == 0) {
        NT_CHECK(strstr(lanes, "posix") || strstr(lanes, "sysv"));
        NT_CHECK(strstr(lanes, "tcp") == NULL);
        /* UCX's cma lane trusts the pid in the peer's own address: off by default. */
        if (getenv("HM_UCX_SHM_TLS") == NULL)
            NT_CHECK(strstr(lanes, "cma") == NULL);
    } else {
        NT_CHECK(strstr(lanes, "tcp") != NULL);
    }
    nt_send_sync(&p, srv, NT_CMD_QUIT, NT_CMD_LEN);
    p.cls->c_ops.addr_unref(srv);
    nt_peer_close(&p);
    return 0;
}

static void test_lanes(void **state)
{
    (void)state;
    struct hm_test_server srv;
    struct hm_test_child cli;
    hm_test_alarm(50, "lanes");
    assert_int_equal(nt_server_start(&srv, g_uri), 0);
    assert_int_equal(hm_test_spawn(&cli, client_lanes, srv.uri), 0);
    int crc = hm_test_wait(&cli, 30);
    int src = hm_test_server_stop(&srv, 10);
    hm_test_alarm(0, NULL);
    assert_int_equal(crc, 0);
    assert_int_equal(src, 0);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    g_uri = argv[1];
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_lanes)};
    return cmocka_run_group_tests_name(g_uri, tests, NULL, NULL);
}
