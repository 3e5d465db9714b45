/*
 * Peers that disagree (issue 16, part 3): test_deploy_proto <uri>.
 *
 * Three server processes, all serving RPC protocol "dproto" 1.3
 * (dproto.echo: `reply_len` bytes back for any bytes in, both checked):
 *   plain  checksums off, the transport's default eager limit
 *   csum   checksums on
 *   small  HM_UCX_EAGER_LIMIT = HM_OFI_EAGER_LIMIT = 8192
 * and this process, the client, with four classes:
 *   v2     dproto 2.0 and "ghost" 1.0 (which no server serves)
 *   v15    dproto 1.5, with an RPC dproto.later the servers lack
 *   csum   dproto 1.3, checksums on
 *   small  dproto 1.3, eager limits 8192
 *
 *  - versions: v2's calls fail at once with HM_INCOMPATIBLE and a detail
 *    naming both versions, or that the peer does not serve "ghost"; v15's
 *    echo works (minors are compatible), dproto.later gets HM_NOENTRY with
 *    both versions; a class without protocols still calls dproto.echo. The
 *    server counts two incompatible_replies.
 *  - checksum: csum -> plain and v15 -> csum fail with HM_CHECKSUM_MISMATCH,
 *    each with the detail saying which side checksums; csum -> csum works.
 *  - eager: requests and responses of 100 B to 300 KiB between default and
 *    8 KiB limits, in both directions (v15 -> small, small -> plain), the
 *    first of them before either side heard the other: all arrive intact.
 * Before wire v3 each of these timed out, or was refused unanswered.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fixture_hm.h"
#include <hermod.h>

#define SMALL_LIMIT "8192"
#define CALL_MS 20000u
#define SERVER_LIFE_S 170u /* the servers' bound (SIGALRM), past the test's 150 s */

static const char *uri;

struct echo_in {
    uint32_t reply_len;
    hm_bytes_t data;
};

static hm_return_t echo_in_proc(hm_proc_t *proc, void *data)
{
    struct echo_in *in = data;
    hm_return_t ret = hm_proc_uint32(proc, &in->reply_len);
    return ret == HM_SUCCESS ? hm_proc_bytes(proc, &in->data) : ret;
}

static void fill(uint8_t *buf, size_t len, unsigned int seed)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(i * 131u + seed);
}

static bool filled(const uint8_t *buf, size_t len, unsigned int seed)
{
    for (size_t i = 0; i < len; i++)
        if (buf[i] != (uint8_t)(i * 131u + seed))
            return false;
    return true;
}

/* ---- servers ---------------------------------------------------------------- */

struct server_args {
    bool checksum;
    bool small;
};

static hm_return_t echo_handler(hm_handle_t *handle)
{
    struct echo_in in;
    hm_return_t ret = hm_get_input(handle, &in);
    if (ret != HM_SUCCESS)
        return ret;
    bool good = in.reply_len <= (1u << 20) && filled(in.data.data, in.data.len, 7);
    uint32_t reply_len = in.reply_len;
    hm_free_input(handle, &in);
    if (!good)
        return HM_PROTOCOL_ERROR;
    uint8_t *reply = malloc(reply_len ? reply_len : 1);
    if (reply == NULL)
        return HM_NOMEM;
    fill(reply, reply_len, 11);
    hm_bytes_t out = {.data = reply, .len = reply_len};
    ret = hm_respond(handle, &out, NULL, NULL);
    free(reply); /* encoded (or staged) by hm_respond */
    hm_handle_destroy(handle);
    return ret;
}

static int server_register(hm_class_t *cls)
{
    return hm_rpc_protocol_register(cls, "dproto", 1, 3) != HM_SUCCESS ||
           hm_register(cls, "dproto.echo", echo_in_proc, hm_proc_bytes, echo_handler,
                       NULL) != HM_SUCCESS;
}

/* Serve until the parent says "stop", then tell it the counters that matter. */
static int server_loop(hm_context_t *ctx)
{
    char line[64];
    while (hm_test_await(line, sizeof(line), 1) != 0) {
        (void)hm_progress(ctx, 5);
        while (hm_trigger(ctx, 64, NULL) == HM_SUCCESS)
            ;
    }
    hm_stats_t st = {.size = sizeof(st)};
    if (hm_context_stats(ctx, &st) != HM_SUCCESS)
        return 20;
    snprintf(line, sizeof(line), "%llu %llu", (unsigned long long)st.incompatible_replies,
             (unsigned long long)st.checksum_replies);
    hm_test_signal(line);
    return 0;
}

static int server_main(void *arg)
{
    const struct server_args *a = arg;
    if (a->small) {
        setenv("HM_UCX_EAGER_LIMIT", SMALL_LIMIT, 1);
        setenv("HM_OFI_EAGER_LIMIT", SMALL_LIMIT, 1);
    }
    hm_class_opts_t opts = {.field_mask = HM_CLASS_OPT_CHECKSUM, .checksum = a->checksum};
    hm_class_t *cls;
    hm_context_t *ctx;
    if (hm_class_create(uri, &opts, &cls) != HM_SUCCESS)
        return 10;
    if (server_register(cls) || hm_context_create(cls, NULL, &ctx) != HM_SUCCESS)
        return 11;
    if (hm_test_ready_self(ctx) != 0)
        return 12;
    int rc = server_loop(ctx);
    if (hm_context_destroy(ctx) != HM_SUCCESS || hm_class_destroy(cls) != HM_SUCCESS)
        return 14;
    return rc;
}

/* ---- the client's classes --------------------------------------------------------- */

enum { S_PLAIN, S_CSUM, S_SMALL, NSERVERS };
enum { C_V2, C_V15, C_CSUM, C_SMALL, C_BARE, NCLIENTS };

struct client {
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_addr_t *to[NSERVERS];
};

static struct {
    struct server_args args[NSERVERS];
    struct hm_test_server server[NSERVERS]; /* their processes and URIs */
    struct client cl[NCLIENTS];
} fx;

/* Protocols and RPCs of each client class (none for C_BARE). */
static hm_return_t client_register(hm_class_t *cls, int which)
{
    static const uint16_t version[NCLIENTS][2] = {{2, 0}, {1, 5}, {1, 3}, {1, 3}, {0, 0}};
    hm_return_t ret = HM_SUCCESS;
    if (which != C_BARE)
        ret = hm_rpc_protocol_register(cls, "dproto", version[which][0], version[which][1]);
    if (ret == HM_SUCCESS)
        ret = hm_register(cls, "dproto.echo", echo_in_proc, hm_proc_bytes, NULL, NULL);
    if (ret == HM_SUCCESS && which == C_V2) {
        ret = hm_register(cls, "ghost.echo", echo_in_proc, hm_proc_bytes, NULL, NULL);
        if (ret == HM_SUCCESS) /* after its RPC: the protocol adopts it */
            ret = hm_rpc_protocol_register(cls, "ghost", 1, 0);
    }
    if (ret == HM_SUCCESS && which == C_V15)
        ret = hm_register(cls, "dproto.later", echo_in_proc, hm_proc_bytes, NULL, NULL);
    return ret;
}

static int client_open(struct client *c, int which)
{
    bool small = which == C_SMALL;
    if (small) { /* the plugins read these when the class opens */
        setenv("HM_UCX_EAGER_LIMIT", SMALL_LIMIT, 1);
        setenv("HM_OFI_EAGER_LIMIT", SMALL_LIMIT, 1);
    }
    hm_class_opts_t opts = {.field_mask = HM_CLASS_OPT_CHECKSUM, .checksum = which == C_CSUM};
    hm_return_t ret = hm_class_create(uri, &opts, &c->cls);
    if (small) {
        unsetenv("HM_UCX_EAGER_LIMIT");
        unsetenv("HM_OFI_EAGER_LIMIT");
    }
    if (ret != HM_SUCCESS || client_register(c->cls, which) != HM_SUCCESS ||
        hm_context_create(c->cls, NULL, &c->ctx) != HM_SUCCESS)
        return -1;
    for (int s = 0; s < NSERVERS; s++)
        if (hm_addr_lookup(c->ctx, fx.server[s].uri, &c->to[s]) != HM_SUCCESS)
            return -1;
    return 0;
}

static int setup(void **state)
{
    (void)state;
    hm_test_alarm(150, "deploy_proto");
    fx.args[S_CSUM].checksum = true;
    fx.args[S_SMALL].small = true;
    for (int s = 0; s < NSERVERS; s++) /* every fork before this process opens a class */
        if (hm_test_server_start(&fx.server[s], server_main, &fx.args[s], SERVER_LIFE_S) != 0)
            return -1;
    for (int c = 0; c < NCLIENTS; c++)
        if (client_open(&fx.cl[c], c) != 0)
            return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int rc = 0;
    for (int c = 0; c < NCLIENTS; c++) {
        for (int s = 0; s < NSERVERS; s++)
            hm_addr_free(fx.cl[c].to[s]);
        if (hm_context_destroy(fx.cl[c].ctx) != HM_SUCCESS ||
            hm_class_destroy(fx.cl[c].cls) != HM_SUCCESS)
            rc = -1;
    }
    for (int s = 0; s < NSERVERS; s++) {
        if (fx.server[s].child.pid <= 0)
            continue; /* reaped by test_servers_counted */
        (void)hm_test_send(&fx.server[s].child, "stop");
        if (hm_test_server_stop(&fx.server[s], 10) != 0)
            rc = -1;
    }
    hm_test_alarm(0, NULL);
    return rc;
}

/* Stop server `s`: its counters "incompatible checksum" into the two outs. */
static void server_stop(int s, unsigned long long *incompatible, unsigned long long *checksum)
{
    char line[64];
    assert_int_equal(hm_test_send(&fx.server[s].child, "stop"), 0);
    assert_int_equal(hm_test_recv(&fx.server[s].child, line, sizeof(line), 20000), 0);
    assert_int_equal(sscanf(line, "%llu %llu", incompatible, checksum), 2);
    assert_int_equal(hm_test_server_stop(&fx.server[s], 30), 0);
}

/* One echo from client class `c` to server `s`: `len` bytes each way. */
static hm_return_t echo(int c, int s, const char *rpc, size_t req_len, size_t reply_len,
                        char *detail, size_t detail_size)
{
    struct client *cl = &fx.cl[c];
    hm_handle_t *h;
    assert_int_equal(hm_handle_create(cl->ctx, cl->to[s], hm_rpc_id(rpc), &h), HM_SUCCESS);
    uint8_t *data = malloc(req_len ? req_len : 1);
    assert_non_null(data);
    fill(data, req_len, 7);
    struct echo_in in = {.reply_len = (uint32_t)reply_len, .data = {data, req_len}};
    hm_bytes_t out;
    hm_return_t ret = hm_call(h, &in, &out, CALL_MS);
    if (ret == HM_SUCCESS) {
        assert_int_equal(out.len, reply_len);
        assert_true(filled(out.data, out.len, 11));
        hm_free_output(h, &out);
    }
    if (detail != NULL)
        snprintf(detail, detail_size, "%s", hm_handle_error_detail(h));
    hm_handle_destroy(h);
    free(data);
    return ret;
}

/*
 * One echo of `len` bytes each way from client class `c` to server `s`:
 * its status must be `want`, and its error detail must contain
 * `detail_want` ("": must be empty; NULL: not checked).
 */
static void expect_echo(int c, int s, const char *rpc, size_t len, hm_return_t want,
                        const char *detail_want)
{
    char detail[256];
    assert_int_equal(echo(c, s, rpc, len, len, detail, sizeof(detail)), want);
    if (detail_want != NULL && detail_want[0] == '\0')
        assert_string_equal(detail, "");
    else if (detail_want != NULL && strstr(detail, detail_want) == NULL)
        fail_msg("detail \"%s\" lacks \"%s\"", detail, detail_want);
}

static void test_versions(void **state)
{
    (void)state;
    expect_echo(C_V2, S_PLAIN, "dproto.echo", 16, HM_INCOMPATIBLE,
                "RPC \"dproto.echo\": dproto 2.x asked, peer serves 1.3");
    expect_echo(C_V2, S_PLAIN, "ghost.echo", 16, HM_INCOMPATIBLE,
                "ghost 1.x asked, peer does not serve ghost");
    expect_echo(C_V15, S_PLAIN, "dproto.echo", 16, HM_SUCCESS, "");
    expect_echo(C_V15, S_PLAIN, "dproto.later", 16, HM_NOENTRY,
                "dproto 1.5 asked, peer serves 1.3 without it");
    assert_int_equal(echo(C_BARE, S_PLAIN, "dproto.echo", 16, 16, NULL, 0), HM_SUCCESS);
}

static void test_checksum(void **state)
{
    (void)state;
    expect_echo(C_CSUM, S_PLAIN, "dproto.echo", 64, HM_CHECKSUM_MISMATCH,
                "peer answered without a checksum");
    expect_echo(C_V15, S_CSUM, "dproto.echo", 64, HM_CHECKSUM_MISMATCH,
                "peer requires checksums");
    /* Large enough to go by overflow: refused the same way, nothing pulled. */
    assert_int_equal(echo(C_V15, S_CSUM, "dproto.echo", 100000, 64, NULL, 0),
                     HM_CHECKSUM_MISMATCH);
    assert_int_equal(echo(C_CSUM, S_CSUM, "dproto.echo", 64, 100000, NULL, 0), HM_SUCCESS);
}

/* Every size each way between client class `c` and server `s`. */
static void eager_both_ways(int c, int s)
{
    static const size_t sizes[] = {100, 3000, 6000, 8100, 9000, 20000, 70000, 300000};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        assert_int_equal(echo(c, s, "dproto.echo", sizes[i], 8, NULL, 0), HM_SUCCESS);
        assert_int_equal(echo(c, s, "dproto.echo", 8, sizes[i], NULL, 0), HM_SUCCESS);
        assert_int_equal(echo(c, s, "dproto.echo", sizes[i], sizes[i], NULL, 0), HM_SUCCESS);
    }
}

static void test_eager_limits(void **state)
{
    (void)state;
    /* First contact with a large request: more than the small side takes. */
    assert_int_equal(echo(C_SMALL, S_PLAIN, "dproto.echo", 60000, 60000, NULL, 0), HM_SUCCESS);
    assert_int_equal(echo(C_V15, S_SMALL, "dproto.echo", 60000, 60000, NULL, 0), HM_SUCCESS);
    eager_both_ways(C_V15, S_SMALL); /* default client, small server */
    eager_both_ways(C_SMALL, S_PLAIN); /* small client, default server */
    eager_both_ways(C_SMALL, S_SMALL);
}

static void test_servers_counted(void **state)
{
    (void)state;
    unsigned long long incompatible, checksum;
    server_stop(S_PLAIN, &incompatible, &checksum);
    assert_int_equal(incompatible, 2); /* dproto 2.0 and ghost */
    assert_int_equal(checksum, 0);
    server_stop(S_CSUM, &incompatible, &checksum);
    assert_int_equal(incompatible, 0);
    assert_int_equal(checksum, 2); /* the eager and the overflowed request of v15 */
    server_stop(S_SMALL, &incompatible, &checksum);
    assert_int_equal(incompatible + checksum, 0);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s <uri>\n", argv[0]);
        return 2;
    }
    uri = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_versions),
        cmocka_unit_test(test_checksum),
        cmocka_unit_test(test_eager_limits),
        cmocka_unit_test(test_servers_counted),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
