/*
 * Addresses inside RPCs (issue 16, part 4): test_deploy_addr <uri>.
 *
 * Three processes: C (a server, tag "C"), B (a server, tag "B", that was
 * given C's URI) and this one, A, the client (which also serves, tag "A").
 *  - forward_third: A asks B "deploy.where"; B answers with its address of
 *    C (hm_proc_addr). A uses the decoded address at once: a handle on it
 *    and an echo, which C answers ("C:..."). The decoded address compares
 *    equal (hm_addr_cmp) to A's own lookup of C's URI, unequal to B's.
 *  - self: A's own address, sent to B and reflected back (decoded by B,
 *    encoded again), is hm_addr_is_self on A; an echo to it is served by A
 *    itself through its own progress ("A:...").
 *  - hostile_bytes: A sends B "deploy.reflect" with forged address bytes
 *    (length past the bound, cut short, a NUL inside, another protocol, a
 *    malformed URI, a bad "#N"; on tcp a host name and an interface name,
 *    which B must not resolve): each call fails with HM_PROTOCOL_ERROR (B's
 *    decode refused them; B did not crash), and B still serves afterwards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "deploy.h"

static const char *uri;

static struct {
    struct hm_test_child b_child, c_child;
    char b_uri[HM_ADDR_URI_MAX], c_uri[HM_ADDR_URI_MAX];
    struct deploy_server_args b_args, c_args;
    hm_class_t *cls;
    hm_context_t *ctx;
    struct deploy_ids ids;
    hm_addr_t *b, *c;
} fx;

/* A serves too (tag "A"): its own handlers run from its own hm_trigger. */
static int setup(void **state)
{
    (void)state;
    hm_test_alarm(120, "deploy_addr");
    fx.c_args = (struct deploy_server_args){.uri = uri, .tag = "C", .life_s = 60};
    if (hm_test_spawn(&fx.c_child, deploy_server_main, &fx.c_args) != 0 ||
        hm_test_recv(&fx.c_child, fx.c_uri, sizeof(fx.c_uri), 20000) != 0)
        return -1;
    fx.b_args = (struct deploy_server_args){
        .uri = uri, .tag = "B", .next_uri = fx.c_uri, .life_s = 60};
    if (hm_test_spawn(&fx.b_child, deploy_server_main, &fx.b_args) != 0 ||
        hm_test_recv(&fx.b_child, fx.b_uri, sizeof(fx.b_uri), 20000) != 0)
        return -1;
    static struct deploy_server self_srv = {.tag = "A"};
    if (hm_class_create(uri, NULL, &fx.cls) != HM_SUCCESS ||
        deploy_register(fx.cls, &fx.ids, "A") != HM_SUCCESS ||
        hm_register_data(fx.cls, fx.ids.echo, &self_srv, NULL) != HM_SUCCESS ||
        hm_context_create(fx.cls, NULL, &fx.ctx) != HM_SUCCESS ||
        hm_addr_lookup(fx.ctx, fx.b_uri, &fx.b) != HM_SUCCESS ||
        hm_addr_lookup(fx.ctx, fx.c_uri, &fx.c) != HM_SUCCESS)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int rc = 0;
    if (deploy_server_stop(fx.ctx, fx.b, &fx.ids, &fx.b_child) != 0)
        rc = -1;
    if (deploy_server_stop(fx.ctx, fx.c, &fx.ids, &fx.c_child) != 0)
        rc = -1;
    hm_addr_free(fx.b);
    hm_addr_free(fx.c);
    if (hm_context_destroy(fx.ctx) != HM_SUCCESS || hm_class_destroy(fx.cls) != HM_SUCCESS)
        rc = -1;
    hm_test_alarm(0, NULL);
    return rc;
}

static void test_forward_third(void **state)
{
    (void)state;
    hm_addr_t *where = NULL;
    assert_int_equal(deploy_call_addr(fx.ctx, fx.b, fx.ids.where, NULL, &where), HM_SUCCESS);
    assert_non_null(where);
    assert_int_equal(hm_addr_cmp(where, fx.c), 0);
    assert_int_not_equal(hm_addr_cmp(where, fx.b), 0);
    assert_int_equal(hm_addr_cmp(where, fx.b), -hm_addr_cmp(fx.b, where));
    assert_false(hm_addr_is_self(where));
    char reply[256];
    assert_int_equal(deploy_echo(fx.ctx, where, fx.ids.echo, "via B", reply, sizeof(reply)),
                     HM_SUCCESS);
    assert_string_equal(reply, "C:via B");
    hm_addr_free(where);
}

static void test_self(void **state)
{
    (void)state;
    hm_addr_t *self, *back = NULL;
    assert_int_equal(hm_addr_self(fx.ctx, &self), HM_SUCCESS);
    assert_true(hm_addr_is_self(self));
    assert_false(hm_addr_is_self(fx.b));
    struct deploy_addr in = {.addr = self};
    assert_int_equal(deploy_call_addr(fx.ctx, fx.b, fx.ids.reflect, &in, &back), HM_SUCCESS);
    assert_non_null(back);
    assert_true(hm_addr_is_self(back));
    assert_int_equal(hm_addr_cmp(back, self), 0);
    char reply[256];
    assert_int_equal(deploy_echo(fx.ctx, back, fx.ids.echo, "to me", reply, sizeof(reply)),
                     HM_SUCCESS);
    assert_string_equal(reply, "A:to me");
    hm_addr_free(back);
    hm_addr_free(self);
}

/* B's decode of `c` fails: A's call gets HM_PROTOCOL_ERROR and no address. */
static void expect_refused(const struct deploy_addr *c, size_t i)
{
    hm_addr_t *back = NULL;
    hm_return_t ret = deploy_call_addr(fx.ctx, fx.b, fx.ids.reflect, c, &back);
    print_message("forged address %zu: %s\n", i, hm_strerror(ret));
    assert_int_equal(ret, HM_PROTOCOL_ERROR);
    assert_null(back);
}

static void test_hostile_bytes(void **state)
{
    (void)state;
    const char *proto = hm_class_protocol(fx.cls);
    const char *other = strncmp(proto, "ucx", 3) == 0 ? "ofi+tcp" : "ucx+tcp";
    char wrong_proto[64], malformed[64], bad_index[64], with_nul[32];
    snprintf(wrong_proto, sizeof(wrong_proto), "%s://127.0.0.1:1", other);
    snprintf(malformed, sizeof(malformed), "%s://:99999x", proto);
    snprintf(bad_index, sizeof(bad_index), "%s://127.0.0.1:1#x7", proto);
    int n = snprintf(with_nul, sizeof(with_nul), "%s://a", proto);
    with_nul[n - 1] = '\0'; /* "...://" then a NUL */
    static char filler[64]; /* what the two length lies send: 64 bytes */
    memset(filler, 'x', sizeof(filler));
    const struct deploy_addr cases[] = {
        {.raw = filler, .raw_len = 5000},                     /* past the bound */
        {.raw = filler, .raw_len = 500},                      /* cut short */
        {.raw = with_nul, .raw_len = (uint32_t)n},            /* a NUL inside */
        {.raw = "ucx+tcp://\x01\x02", .raw_len = 12},         /* control bytes */
        {.raw = wrong_proto, .raw_len = (uint32_t)strlen(wrong_proto)},
        {.raw = malformed, .raw_len = (uint32_t)strlen(malformed)},
        {.raw = bad_index, .raw_len = (uint32_t)strlen(bad_index)},
        {.raw = proto, .raw_len = (uint32_t)strlen(proto)},   /* no "://" */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        expect_refused(&cases[i], i);
    /* tcp: a host or interface name is what a user may write, never what
     * hm_addr_to_string prints; from a peer it is refused unresolved (no DNS
     * query on its say-so). Before, "localhost" resolved and was dialed. */
    if (strstr(proto, "+tcp") != NULL) {
        char named[2][64];
        snprintf(named[0], sizeof(named[0]), "%s://localhost:1", proto);
        snprintf(named[1], sizeof(named[1]), "%s://lo:1", proto);
        for (size_t i = 0; i < 2; i++) {
            struct deploy_addr c = {.raw = named[i], .raw_len = (uint32_t)strlen(named[i])};
            expect_refused(&c, sizeof(cases) / sizeof(cases[0]) + i);
        }
    }
    char reply[256];
    assert_int_equal(deploy_echo(fx.ctx, fx.b, fx.ids.echo, "still", reply, sizeof(reply)),
                     HM_SUCCESS);
    assert_string_equal(reply, "B:still");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s uri\n", argv[0]);
        return 2;
    }
    uri = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_third),
        cmocka_unit_test(test_self),
        cmocka_unit_test(test_hostile_bytes),
    };
    return cmocka_run_group_tests_name("deploy_addr", tests, setup, teardown);
}
