/* UCX plugin URI parsing: good URIs round-trip, bad ones give HM_INVALID_ARG. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "na/ucx/ucx_internal.h"

static void test_good(void **state)
{
    (void)state;
    const char *good[] = {"ucx+tcp://127.0.0.1:1", "ucx+tcp://10.0.0.1:65535",
                          "ucx+tcp://[::1]:7", "ucx+tcp://[fd00::2]:65535",
                          "ucx+shm://1234/00ff", "ucx+shm://1/abcdef0123456789"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        struct ucx_uri u;
        char out[UCX_URI_MAX];
        assert_int_equal(hmi_ucx_uri_parse(good[i], false, &u), HM_SUCCESS);
        assert_true(hmi_ucx_uri_format(&u, out, sizeof(out)) > 0);
        assert_string_equal(out, good[i]);
    }
    struct ucx_uri u;
    char out[UCX_URI_MAX];
    assert_int_equal(hmi_ucx_uri_parse("ucx+shm://77/ABCD", false, &u), HM_SUCCESS);
    hmi_ucx_uri_format(&u, out, sizeof(out));
    assert_string_equal(out, "ucx+shm://77/abcd"); /* canonical: lower case */
    assert_int_equal(hmi_ucx_listen_parse(UCX_PROTO_TCP, "", &u), HM_SUCCESS);
    assert_int_equal(hmi_ucx_listen_parse(UCX_PROTO_TCP, "127.0.0.1", &u), HM_SUCCESS);
    assert_int_equal(hmi_ucx_listen_parse(UCX_PROTO_TCP, "127.0.0.1:0", &u), HM_SUCCESS);
    assert_int_equal(hmi_uri_port(&u.u_tcp), 0);
    assert_int_equal(hmi_ucx_listen_parse(UCX_PROTO_SHM, "", &u), HM_SUCCESS);
}

static void test_bad(void **state)
{
    (void)state;
    const char *bad[] = {"", "ucx+tcp://", "ucx+tcp://127.0.0.1", "ucx+tcp://127.0.0.1:0",
                         "ucx+tcp://127.0.0.1:65536", "ucx+tcp://127.0.0.1:-1",
                         "ucx+tcp://127.0.0.1:80x", "ucx+tcp://:80", "ucx+tcp://1.2.3:80",
                         "ucx+tcp://127.0.0.1:080", "ucx+tcp://host.example:80",
                         "ucx+tcp://127.0.0.1:99999999999999999999",
                         "ucx+shm://", "ucx+shm://0/00", "ucx+shm://12", "ucx+shm://12/",
                         "ucx+shm://12/abc", "ucx+shm://12/zz", "ucx+shm://-3/00",
                         "ucx+shm://12/00/", "ucx+ofi://1.2.3.4:5", "tcp://1.2.3.4:5",
                         "ucx+tcp:/127.0.0.1:80", "ucx+tcp://[::1", "ucx+tcp://[::1]",
                         "ucx+tcp://[::1]:0", "ucx+tcp://::1:80", "ucx+tcp://[::1]x:80",
                         "ucx+tcp://[127.0.0.1]:80", "ucx+tcp://[fe80::1%lo]:80",
                         "ucx+tcp://0.0.0.0:80", "ucx+tcp://[::]:80", "ucx+tcp://lo:80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct ucx_uri u;
        assert_int_equal(hmi_ucx_uri_parse(bad[i], false, &u), HM_INVALID_ARG);
    }
    struct ucx_uri u;
    assert_int_equal(hmi_ucx_uri_parse(NULL, false, &u), HM_INVALID_ARG);
    char longuri[UCX_URI_MAX + 10];
    memset(longuri, 'a', sizeof(longuri) - 1);
    longuri[sizeof(longuri) - 1] = '\0';
    memcpy(longuri, "ucx+shm://1/", 12);
    assert_int_equal(hmi_ucx_uri_parse(longuri, false, &u), HM_INVALID_ARG);
    assert_int_equal(hmi_ucx_listen_parse(UCX_PROTO_SHM, "x", &u), HM_INVALID_ARG);
    assert_int_equal(hmi_ucx_listen_parse(UCX_PROTO_TCP, "127.0.0.1:x", &u), HM_INVALID_ARG);
    assert_int_equal(hmi_ucx_listen_parse(UCX_PROTO_TCP, "nohost:1", &u), HM_INVALID_ARG);
}

/* A user's URI may name a host or an interface; it comes back numeric. */
static void test_resolve(void **state)
{
    (void)state;
    const char *in[][2] = {{"ucx+tcp://localhost:80", "ucx+tcp://127.0.0.1:80"},
                           {"ucx+tcp://lo:80", "ucx+tcp://127.0.0.1:80"},
                           {"ucx+tcp://[::1]:80", "ucx+tcp://[::1]:80"}};
    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
        struct ucx_uri u;
        char out[UCX_URI_MAX];
        assert_int_equal(hmi_ucx_uri_parse(in[i][0], true, &u), HM_SUCCESS);
        assert_true(hmi_ucx_uri_format(&u, out, sizeof(out)) > 0);
        assert_string_equal(out, in[i][1]);
    }
    struct ucx_uri u;
    assert_int_equal(hmi_ucx_uri_parse("ucx+tcp://no-such-host.invalid:80", true, &u),
                     HM_UNREACHABLE);
    assert_int_equal(hmi_ucx_uri_parse("ucx+tcp://1.2.3:80", true, &u), HM_INVALID_ARG);
    assert_int_equal(hmi_ucx_uri_parse("ucx+tcp://a_b.example:80", true, &u), HM_INVALID_ARG);
    assert_int_equal(hmi_ucx_uri_parse("ucx+tcp://-a.example:80", true, &u), HM_INVALID_ARG);
    assert_int_equal(hmi_ucx_listen_parse(UCX_PROTO_TCP, "lo:0", &u), HM_SUCCESS);
    assert_string_equal(u.u_tcp.hp_ifname, "lo");
    assert_int_equal(hmi_ucx_listen_parse(UCX_PROTO_TCP, "[::1]:0", &u), HM_SUCCESS);
    assert_string_equal(u.u_tcp.hp_ifname, "lo");
    assert_int_equal(hmi_ucx_listen_parse(UCX_PROTO_TCP, "localhost", &u), HM_SUCCESS);
    assert_int_equal(hmi_ucx_listen_parse(UCX_PROTO_TCP, "[::]:0", &u), HM_SUCCESS);
    assert_true(u.u_tcp.hp_wildcard);
    assert_int_equal(hmi_ucx_listen_parse(UCX_PROTO_TCP, "nosuchif0:0", &u), HM_INVALID_ARG);
    assert_int_equal(hmi_ucx_listen_parse(UCX_PROTO_TCP, "192.0.2.200:0", &u), HM_INVALID_ARG);
}

/* The plugin's tunables are its own (tests/na/na_tunables.c checks the rest). */
static void test_tunables(void **state)
{
    (void)state;
    for (size_t i = 0; i < UCX_TUNE_COUNT; i++)
        assert_true(strncmp(hmi_ucx_tunables[i].t_name, "HM_UCX_", 7) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good),
        cmocka_unit_test(test_bad),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_tunables),
    };
    return cmocka_run_group_tests_name("ucx_uri", tests, NULL, NULL);
}
