/*
 * NA fault tests, per protocol: the peer process is killed (SIGKILL) while
 * operations to it are pending. Every pending op must complete exactly once
 * with an error, hmi_na_peer_failed must fire once for that address, new
 * posts must fail with HM_UNREACHABLE, and nothing may hang. The same ops
 * are then reused for sends to a second, live peer: each completes once,
 * with success, and the live peer stays alive. (A late completion for the
 * dead peer ending a reused op broke both in the object store's kill-r2
 * case over ofi+tcp, OFI_ORPHAN_READS; this test has not been seen to
 * catch that race, which needs a connection broken mid-traffic.)
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "na_test.h"

static const char *g_uri;

#define NF_MAX 2048

struct nf_done {
    int done;
    int calls;
    hm_return_t status;
};

static void nf_cb(hmi_na_op_t *op, hm_return_t status)
{
    struct nf_done *d = op->o_arg;
    d->done = 1;
    d->calls++;
    d->status = status;
}

struct nf_servers {
    const char *doomed; /* killed once the client's sends are pending */
    const char *live;   /* serves the same ops afterwards */
};

/* Reuse ops[0..n) for sends to `live`, each to complete exactly once with
 * success; then keep progressing a while for late completions. */
static int reuse_for_live(struct nt_peer *p, hmi_na_addr_t *live, hmi_na_op_t **ops,
                          struct nf_done *done, int n, void *buf, size_t len, void *desc)
{
    for (int i = 0; i < n; i++) {
        done[i] = (struct nf_done){0};
        NT_CHECK(hmi_na_msg_send(p->ctx, live, buf, len, desc, ops[i]) == HM_SUCCESS);
    }
    int echoes = 0;
    uint64_t settle = 0, deadline = nt_now_ms() + 30000;
    while (nt_now_ms() < deadline && (settle == 0 || nt_now_ms() < settle)) {
        struct nt_msg *m = nt_wait_msg(p, 10);
        if (m != NULL) {
            echoes++;
            nt_msg_free(p, m);
        }
        int pending = 0;
        for (int i = 0; i < n; i++)
            pending += !done[i].done;
        if (settle == 0 && pending == 0 && echoes == n)
            settle = nt_now_ms() + 500;
    }
    for (int i = 0; i < n; i++) {
        NT_CHECK(done[i].calls == 1);
        NT_CHECK(done[i].status == HM_SUCCESS);
    }
    NT_CHECK(echoes == n);
    return 0;
}

static int client_peer_dies(void *arg)
{
    const struct nf_servers *servers = arg;
    struct nt_peer p;
    hmi_na_addr_t *srv, *live;
    NT_CHECK(nt_peer_open(&p, g_uri) == 0);
    NT_CHECK(p.cls->c_ops.addr_lookup(p.ctx, servers->doomed, &srv) == HM_SUCCESS);
    NT_CHECK(p.cls->c_ops.addr_lookup(p.ctx, servers->live, &live) == HM_SUCCESS);
    /* The server answers, then stops progressing (alive but deaf). */
    NT_CHECK(nt_send_sync(&p, srv, NT_CMD_HANG, NT_CMD_LEN) == HM_SUCCESS);
    struct nt_msg *m = nt_wait_msg(&p, 20000);
    NT_CHECK(m != NULL && m->src == srv);
    nt_msg_free(&p, m);
    size_t len = p.cls->c_eager_limit;
    void *desc;
    unsigned char *buf = p.cls->c_ops.msg_buf_alloc(p.cls, len, &desc);
    memset(buf, 0x5a, len);
    hmi_na_op_t **ops = calloc(NF_MAX, sizeof(*ops));
    struct nf_done *done = calloc(NF_MAX, sizeof(*done));
    int n = 0, pending = 0;
    while (n < NF_MAX && pending < 4) {
        ops[n] = hmi_na_op_create(p.cls);
        ops[n]->o_cb = nf_cb;
        ops[n]->o_arg = &done[n];
        NT_CHECK(hmi_na_msg_send(p.ctx, srv, buf, len, desc, ops[n]) == HM_SUCCESS);
        n++;
        for (int k = 0; k < 5; k++)
            hmi_na_progress(p.ctx);
        pending = 0;
        for (int i = 0; i < n; i++)
            pending += !done[i].done;
    }
    NT_CHECK(pending > 0);
    hm_test_signal("posted"); /* the parent kills the server now */
    char line[16];
    NT_CHECK(hm_test_await(line, sizeof(line), 20000) == 0);
    uint64_t deadline = nt_now_ms() + 30000;
    while (nt_now_ms() < deadline) {
        pending = 0;
        for (int i = 0; i < n; i++)
            pending += !done[i].done;
        if (pending == 0 && p.failed > 0)
            break;
        hmi_na_progress(p.ctx);
    }
    int errors = 0;
    for (int i = 0; i < n; i++) {
        NT_CHECK(done[i].calls == 1);
        if (done[i].status != HM_SUCCESS)
            errors++;
    }
    NT_CHECK(errors > 0);
    NT_CHECK(p.failed == 1);
    NT_CHECK(p.failed_addr == srv);
    /* New posts to the dead peer fail at once. */
    hmi_na_op_t *op = hmi_na_op_create(p.cls);
    op->o_cb = nf_cb;
    struct nf_done d = {0};
    op->o_arg = &d;
    NT_CHECK(hmi_na_msg_send(p.ctx, srv, buf, 16, desc, op) == HM_UNREACHABLE);
    /* A lookup of the dead URI does not hang (tcp may only fail later). */
    char uri[1024];
    size_t size = sizeof(uri);
    NT_CHECK(p.cls->c_ops.addr_to_string(p.ctx, srv, uri, &size) == HM_SUCCESS);
    /* The dead peer's ops, at once reused for the live one. */
    NT_CHECK(reuse_for_live(&p, live, ops, done, n, buf, len, desc) == 0);
    NT_CHECK(p.failed == 1); /* the live peer was not declared dead */
    NT_CHECK(nt_send_sync(&p, live, NT_CMD_QUIT, NT_CMD_LEN) == HM_SUCCESS);
    hmi_na_op_destroy(op);
    for (int i = 0; i < n; i++)
        hmi_na_op_destroy(ops[i]);
    free(ops);
    free(done);
    p.cls->c_ops.msg_buf_free(p.cls, buf, desc);
    p.cls->c_ops.addr_unref(srv);
    p.cls->c_ops.addr_unref(live);
    nt_peer_close(&p);
    return 0;
}

static void test_peer_dies(void **state)
{
    (void)state;
    struct hm_test_server srv, live;
    struct hm_test_child cli;
    char line[64];
    hm_test_alarm(90, "peer_dies");
    assert_int_equal(nt_server_start(&srv, g_uri), 0);
    assert_int_equal(nt_server_start(&live, g_uri), 0);
    struct nf_servers servers = {.doomed = srv.uri, .live = live.uri};
    assert_int_equal(hm_test_spawn(&cli, client_peer_dies, &servers), 0);
    assert_int_equal(hm_test_recv(&cli, line, sizeof(line), 30000), 0);
    assert_int_equal(hm_test_server_kill(&srv), -SIGKILL);
    assert_int_equal(hm_test_send(&cli, "killed"), 0);
    int crc = hm_test_wait(&cli, 60);
    int lrc = hm_test_server_stop(&live, 10);
    hm_test_alarm(0, NULL);
    assert_int_equal(crc, 0);
    assert_int_equal(lrc, 0);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PROTOCOL-URI\n", argv[0]);
        return 2;
    }
    g_uri = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peer_dies),
    };
    return cmocka_run_group_tests_name(g_uri, tests, NULL, NULL);
}
