/*
 * Addresses as clusters write them (issue 16, part 1), over one tcp
 * protocol: a server listens on "[::1]", "localhost", "lo" and the wildcard,
 * reports a URI a peer can use (numeric, never 0.0.0.0 or ::), and a client
 * in a second process reaches it with an echo RPC, naming the server as the
 * class was named (host name, interface) or by the reported URI. Malformed
 * URIs are refused. Usage: test_deploy_uri <tcp protocol URI>. Server and
 * client are both children, stopped by pid (harness.h); this process never
 * opens the network.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core_test.h"

static char scheme[32]; /* "ucx+tcp://" */

/* What the client child does: open `cls_uri`, look up `peer`, echo, stop the server. */
struct deploy_client {
    const char *cls_uri;
    const char *peer;
};

static int client_fail(const char *what, hm_return_t ret)
{
    fprintf(stderr, "client: %s: %s (%s)\n", what, hm_strerror(ret), hm_error_detail());
    return 1;
}

static int client_main(void *arg)
{
    const struct deploy_client *dc = arg;
    struct core_client c = {0};
    hm_return_t ret = hm_class_create(dc->cls_uri, NULL, &c.cls);
    if (ret != HM_SUCCESS)
        return client_fail(dc->cls_uri, ret);
    ret = core_register(c.cls, &c.ids, false);
    if (ret == HM_SUCCESS)
        ret = hm_context_create(c.cls, NULL, &c.ctx);
    if (ret == HM_SUCCESS)
        ret = hm_addr_lookup(c.ctx, dc->peer, &c.server);
    if (ret != HM_SUCCESS)
        return client_fail(dc->peer, ret);
    struct core_echo in = {.str = "over a cluster's address"}, out = {0};
    hm_handle_t *h = NULL;
    ret = hm_handle_create(c.ctx, c.server, c.ids.echo, &h);
    if (ret == HM_SUCCESS)
        ret = hm_call(h, &in, &out, 10000);
    int status = ret == HM_SUCCESS && strcmp(out.str, in.str) == 0 ? 0 : 2;
    if (ret == HM_SUCCESS)
        hm_free_output(h, &out);
    if (h != NULL)
        hm_handle_destroy(h);
    if (status != 0)
        client_fail("echo", ret);
    core_call(&c, c.ids.shutdown, NULL, NULL, 2000);
    core_client_close(&c);
    return status;
}

/*
 * A server listening on `listen` (after the scheme); its URI into `uri`,
 * which must start with `expect` (after the scheme) when it is not NULL.
 * Then a client opened on `client_listen` reaches it by `peer_host` (the
 * URI's host replaced, port kept) or, when NULL, by the URI itself.
 */
static void reach(const char *listen, const char *expect, const char *client_listen,
                  const char *peer_host)
{
    char cls_uri[128], peer[HM_TEST_URI_MAX + 64], cli_uri[128];
    struct hm_test_server srv;
    struct hm_test_child cli;
    snprintf(cls_uri, sizeof(cls_uri), "%s%s", scheme, listen);
    snprintf(cli_uri, sizeof(cli_uri), "%s%s", scheme, client_listen);
    hm_test_alarm(60, cls_uri);
    assert_int_equal(core_server_start(&srv, cls_uri, 60), 0);
    const char *uri = srv.uri;
    print_message("%s -> %s\n", cls_uri, uri);
    assert_int_equal(strncmp(uri, scheme, strlen(scheme)), 0);
    const char *hostport = uri + strlen(scheme);
    assert_null(strstr(hostport, "0.0.0.0"));
    assert_int_not_equal(strncmp(hostport, "[::]", 4), 0);
    if (expect != NULL)
        assert_int_equal(strncmp(hostport, expect, strlen(expect)), 0);
    const char *port = strrchr(hostport, ':');
    assert_non_null(port);
    if (peer_host != NULL)
        snprintf(peer, sizeof(peer), "%s%s%s", scheme, peer_host, port);
    else
        snprintf(peer, sizeof(peer), "%s", uri);
    struct deploy_client dc = {.cls_uri = cli_uri, .peer = peer};
    assert_int_equal(hm_test_spawn(&cli, client_main, &dc), 0);
    int cli_status = hm_test_wait(&cli, 40);
    int srv_status = hm_test_server_stop(&srv, 10);
    hm_test_alarm(0, NULL);
    assert_int_equal(cli_status, 0);
    assert_int_equal(srv_status, 0);
}

static void test_listen_ipv6(void **state)
{
    (void)state;
    reach("[::1]:0", "[::1]:", "[::1]:0", NULL);
}

static void test_listen_localhost(void **state)
{
    (void)state;
    reach("localhost:0", "127.0.0.1:", "localhost:0", "localhost");
}

static void test_listen_interface(void **state)
{
    (void)state;
    reach("lo:0", "127.0.0.1:", "lo:0", "lo");
}

/* Wildcard listening reports an address of this host a peer can use. */
static void test_listen_wildcard(void **state)
{
    (void)state;
    reach("0.0.0.0:0", NULL, "", NULL);
    reach("", NULL, "", NULL);
    reach("[::]:0", "[", "[::]:0", NULL); /* an IPv6 address of this host */
}

/* Malformed URIs, checked in a child so this process never opens the network. */
static int malformed_main(void *arg)
{
    (void)arg;
    static const char *const bad_listen[] = {
        "[::1", "[::1]:0:1", "127.0.0.1:1:2", "nosuchif0:0", "[::1]x:0", "lo:0x",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        "aaaaaaaaaaaaaaaa:0",
    };
    static const char *const bad_peer[] = {"[::1", "localhost:1:2", "[::1]:0", "lo",
                                           "0.0.0.0:5", "[::]:5", "a..b:5", "x_y.example:5"};
    char text[512];
    hm_class_t *cls = NULL;
    int failures = 0;
    for (size_t i = 0; i < sizeof(bad_listen) / sizeof(bad_listen[0]); i++) {
        snprintf(text, sizeof(text), "%s%s", scheme, bad_listen[i]);
        hm_return_t ret = hm_class_create(text, NULL, &cls);
        if (ret != HM_INVALID_ARG) {
            fprintf(stderr, "listen \"%s\": %s\n", text, hm_strerror(ret));
            failures++;
        }
    }
    snprintf(text, sizeof(text), "%s127.0.0.1:0", scheme);
    hm_context_t *ctx = NULL;
    hm_addr_t *addr = NULL;
    if (hm_class_create(text, NULL, &cls) != HM_SUCCESS ||
        hm_context_create(cls, NULL, &ctx) != HM_SUCCESS)
        return 100;
    for (size_t i = 0; i < sizeof(bad_peer) / sizeof(bad_peer[0]); i++) {
        snprintf(text, sizeof(text), "%s%s", scheme, bad_peer[i]);
        hm_return_t ret = hm_addr_lookup(ctx, text, &addr);
        if (ret != HM_INVALID_ARG) {
            fprintf(stderr, "lookup \"%s\": %s\n", text, hm_strerror(ret));
            failures++;
        }
    }
    /* Well formed, but no such host: HM_UNREACHABLE (na_uri.h). */
    snprintf(text, sizeof(text), "%sno-such-host.invalid:5", scheme);
    if (hm_addr_lookup(ctx, text, &addr) != HM_UNREACHABLE)
        failures++;
    hm_context_destroy(ctx);
    hm_class_destroy(cls);
    return failures;
}

static void test_malformed(void **state)
{
    (void)state;
    struct hm_test_child child;
    hm_test_alarm(60, "malformed");
    assert_int_equal(hm_test_spawn(&child, malformed_main, NULL), 0);
    assert_int_equal(hm_test_wait(&child, 40), 0);
    hm_test_alarm(0, NULL);
}

int main(int argc, char **argv)
{
    if (argc < 2 || strstr(argv[1], "+tcp://") == NULL) {
        fprintf(stderr, "usage: %s <tcp protocol URI>\n", argv[0]);
        return 2;
    }
    snprintf(scheme, sizeof(scheme), "%.*s",
             (int)(strstr(argv[1], "://") - argv[1] + 3), argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_listen_ipv6),      cmocka_unit_test(test_listen_localhost),
        cmocka_unit_test(test_listen_interface), cmocka_unit_test(test_listen_wildcard),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests_name(argv[1], tests, NULL, NULL);
}
