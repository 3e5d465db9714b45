/*
 * NA fault tests, per protocol, with sends pending to a server that has
 * stopped reading:
 * - peer_dies: the server is killed (SIGKILL);
 * - peer_dropped: the client gives the live server up (hmi_na_peer_drop);
 * - peer_dies_asleep (below): the server dies armed for a blocking wait.
 * Every pending op must complete exactly once with an error,
 * hmi_na_peer_failed must fire once for that address, new posts must fail
 * with HM_UNREACHABLE, and nothing may hang. The same ops are then reused
 * for sends to a second, live peer: each completes once, with success, and
 * the live peer stays alive. A completion the transport still brings for
 * the first peer must not end a reused op: over ofi+tcp, closing the
 * dropped peer's connection completes its sends with FI_ECANCELED after
 * the plugin has ended them (ofi_sendctx.c's tombs take those). The
 * object store's kill-r2 case over ofi+tcp once failed that way in CI
 * ("op completed twice", then a live rank declared dead).
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
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

/* Ops a client may post before 4 are pending: over loopback tcp the
 * sockets took about 1,000 sends of 4 KiB (peer_dropped) before any
 * stayed pending. */
#define NF_MAX 8192

struct nf_done {
    int done;
    int calls;
    hm_return_t status;
    int failed_over; /* nf_cb_failover sent it again, to the live peer */
    int posts;       /* nf_cb_stream: times it was posted */
};

static void nf_cb(hmi_na_op_t *op, hm_return_t status)
{
    struct nf_done *d = op->o_arg;
    d->done = 1;
    d->calls++;
    d->status = status;
}

/* Where a callback sends its op again. */
struct nf_resend {
    hmi_na_context_t *ctx;
    hmi_na_addr_t *dest;
    void *buf;
    size_t len;
    void *desc;
};
static struct nf_resend g_failover; /* nf_cb_failover: to the live peer */
static struct nf_resend g_stream;   /* nf_cb_stream: to the same peer */

static hm_return_t nf_resend(const struct nf_resend *r, hmi_na_op_t *op)
{
    return hmi_na_msg_send(r->ctx, r->dest, r->buf, r->len, r->desc, op);
}

/*
 * An op that failed is sent again at once, from its callback, to the live
 * peer, as a service fails over to another replica. The provider's late
 * completions for the lost peer are read right after the callbacks run:
 * one that still named the op would end this second send.
 */
static void nf_cb_failover(hmi_na_op_t *op, hm_return_t status)
{
    struct nf_done *d = op->o_arg;
    if (status == HM_SUCCESS || d->failed_over) {
        nf_cb(op, status);
        return;
    }
    d->failed_over = 1;
    hm_return_t ret = nf_resend(&g_failover, op);
    if (ret != HM_SUCCESS)
        nf_cb(op, ret);
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
            echoes += m->src == live; /* the lost peer's last echoes may come too */
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

/* An op that completed with success is sent again at once, to the same
 * peer: a stream that is in the transport whenever the peer dies. */
static void nf_cb_stream(hmi_na_op_t *op, hm_return_t status)
{
    struct nf_done *d = op->o_arg;
    d->calls++;
    d->status = status;
    if (status == HM_SUCCESS) {
        d->status = nf_resend(&g_stream, op);
        if (d->status == HM_SUCCESS) {
            d->posts++;
            return;
        }
    }
    d->done = 1; /* with the error of its completion, or of the post that failed */
}

/* Send eager-sized messages to `srv`, which has stopped reading, until 4
 * are pending; ops[] and done[] get them. The number sent. */
static int post_until_pending(struct nt_peer *p, hmi_na_addr_t *srv, hmi_na_op_t **ops,
                              struct nf_done *done, void *buf, size_t len, void *desc)
{
    int n = 0, pending = 0;
    while (n < NF_MAX && pending < 4) {
        ops[n] = hmi_na_op_create(p->cls);
        ops[n]->o_cb = nf_cb;
        ops[n]->o_arg = &done[n];
        NT_CHECK(hmi_na_msg_send(p->ctx, srv, buf, len, desc, ops[n]) == HM_SUCCESS);
        n++;
        for (int k = 0; k < 5; k++)
            hmi_na_progress(p->ctx);
        pending = 0;
        for (int i = 0; i < n; i++)
            pending += !done[i].done;
    }
    NT_CHECK(pending > 0);
    return n;
}

/* Progress until all n ops are done and a peer has failed; each op must
 * complete once, some with an error. */
static int await_failure(struct nt_peer *p, struct nf_done *done, int n)
{
    uint64_t deadline = nt_now_ms() + 30000;
    while (nt_now_ms() < deadline) {
        int pending = 0;
        for (int i = 0; i < n; i++)
            pending += !done[i].done;
        if (pending == 0 && p->failed > 0)
            break;
        hmi_na_progress(p->ctx);
    }
    int errors = 0;
    for (int i = 0; i < n; i++) {
        NT_CHECK(done[i].calls == 1);
        if (done[i].status != HM_SUCCESS)
            errors++;
    }
    NT_CHECK(errors > 0);
    return 0;
}

/* Progress until all n ops are done: those the drop failed went on to the
 * live peer (nf_cb_failover) and must have got there, once each. */
static int await_failover(struct nt_peer *p, struct nf_done *done, int n)
{
    int echoes = 0, moved = 0, pending = n;
    uint64_t deadline = nt_now_ms() + 30000;
    while (nt_now_ms() < deadline && (pending > 0 || echoes < moved)) {
        struct nt_msg *m = nt_wait_msg(p, 10);
        if (m != NULL) {
            echoes += m->src == g_failover.dest;
            nt_msg_free(p, m);
        }
        pending = moved = 0;
        for (int i = 0; i < n; i++) {
            pending += !done[i].done;
            moved += done[i].failed_over;
        }
    }
    for (int i = 0; i < n; i++) {
        NT_CHECK(done[i].calls == 1);
        NT_CHECK(done[i].status == HM_SUCCESS);
    }
    NT_CHECK(moved > 0);
    NT_CHECK(echoes == moved);
    return 0;
}

/* A failed peer refuses new posts at once, and its lookup does not hang. */
static int check_refused(struct nt_peer *p, hmi_na_addr_t *srv, void *buf, void *desc)
{
    hmi_na_op_t *op = hmi_na_op_create(p->cls);
    op->o_cb = nf_cb;
    struct nf_done d = {0};
    op->o_arg = &d;
    hm_return_t ret = hmi_na_msg_send(p->ctx, srv, buf, 16, desc, op);
    hmi_na_op_destroy(op);
    NT_CHECK(ret == HM_UNREACHABLE);
    char uri[1024];
    size_t size = sizeof(uri);
    NT_CHECK(p->cls->c_ops.addr_to_string(p->ctx, srv, uri, &size) == HM_SUCCESS);
    return 0;
}

/* The client: the first server stops reading, sends pile up, then `fail`
 * (the parent's kill, or a drop) loses it; the ops go on to the live one. */
static int client_loses_peer(const struct nf_servers *servers, bool drop)
{
    struct nt_peer p;
    hmi_na_addr_t *srv, *live;
    NT_CHECK(nt_peer_open(&p, g_uri) == 0);
    NT_CHECK(p.cls->c_ops.addr_lookup(p.ctx, servers->doomed, 0, &srv) == HM_SUCCESS);
    NT_CHECK(p.cls->c_ops.addr_lookup(p.ctx, servers->live, 0, &live) == HM_SUCCESS);
    /* The server answers, then stops progressing (alive but deaf). */
    NT_CHECK(nt_send_sync(&p, srv, NT_CMD_HANG, NT_CMD_LEN) == HM_SUCCESS);
    struct nt_msg *m = nt_wait_msg(&p, 20000);
    NT_CHECK(m != NULL && m->src == srv);
    nt_msg_free(&p, m);
    /* Dropped: messages small enough for rxm's eager path (16 KiB), whose
     * sends closing the connection completes (FI_ECANCELED); larger ones go
     * in segments, and rxm forgets those it has not finished. */
    size_t len = drop && p.cls->c_eager_limit > 4096 ? 4096 : p.cls->c_eager_limit;
    void *desc;
    unsigned char *buf = p.cls->c_ops.msg_buf_alloc(p.cls, len, &desc);
    memset(buf, 0x5a, len);
    hmi_na_op_t **ops = calloc(NF_MAX, sizeof(*ops));
    struct nf_done *done = calloc(NF_MAX, sizeof(*done));
    int n = post_until_pending(&p, srv, ops, done, buf, len, desc);
    NT_CHECK(n > 0);
    if (drop) {
        g_failover = (struct nf_resend){p.ctx, live, buf, len, desc};
        for (int i = 0; i < n; i++)
            ops[i]->o_cb = nf_cb_failover;
        NT_CHECK(hmi_na_peer_drop(p.ctx, srv, "na_fault: dropped"));
        NT_CHECK(!hmi_na_peer_drop(p.ctx, srv, "na_fault: dropped twice"));
        NT_CHECK(await_failover(&p, done, n) == 0);
        for (int i = 0; i < n; i++)
            ops[i]->o_cb = nf_cb;
    } else {
        hm_test_signal("posted"); /* the parent kills the server now */
        char line[16];
        NT_CHECK(hm_test_await(line, sizeof(line), 20000) == 0);
        NT_CHECK(await_failure(&p, done, n) == 0);
    }
    NT_CHECK(p.failed == 1);
    NT_CHECK(p.failed_addr == srv);
    NT_CHECK(check_refused(&p, srv, buf, desc) == 0);
    /* The lost peer's ops, at once reused for the live one. */
    NT_CHECK(reuse_for_live(&p, live, ops, done, n, buf, len, desc) == 0);
    NT_CHECK(p.failed == 1); /* the live peer was not declared dead */
    NT_CHECK(nt_send_sync(&p, live, NT_CMD_QUIT, NT_CMD_LEN) == HM_SUCCESS);
    NT_CHECK(p.ctx->x_ops_twice == 0);
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

static int client_peer_dies(void *arg)
{
    return client_loses_peer(arg, false);
}

static int client_peer_dropped(void *arg)
{
    return client_loses_peer(arg, true);
}

#define NF_STREAM 16

/*
 * The server reads and echoes while 16 sends of 4 KiB are always posted to
 * it, and is killed meanwhile. The transport then fails the sends it holds
 * (rxm: FI_ECANCELED as its connection manager closes the connection, or
 * EPIPE), and every post must complete exactly once, the last with an
 * error. Whether the peer is declared dead by then depends on the
 * transport (rxm's cancels do not say so; a later post or probe would):
 * if it is, it is the killed one. The ops then serve a live peer. Over
 * ofi+shm about 1 kill in 50 lands just after the plugin's look at the
 * server's region lock, with the server holding it: the client's fi_inject
 * spun for good until ofi_shmdog.c's watchdog (the client then takes about
 * 100 ms longer, and logs that it released the lock).
 */
static int client_peer_dies_streaming(void *arg)
{
    const struct nf_servers *servers = arg;
    struct nt_peer p;
    hmi_na_addr_t *srv, *live;
    NT_CHECK(nt_peer_open(&p, g_uri) == 0);
    NT_CHECK(p.cls->c_ops.addr_lookup(p.ctx, servers->doomed, 0, &srv) == HM_SUCCESS);
    NT_CHECK(p.cls->c_ops.addr_lookup(p.ctx, servers->live, 0, &live) == HM_SUCCESS);
    size_t len = p.cls->c_eager_limit > 4096 ? 4096 : p.cls->c_eager_limit;
    void *desc;
    unsigned char *buf = p.cls->c_ops.msg_buf_alloc(p.cls, len, &desc);
    memset(buf, 0x6b, len);
    g_stream = (struct nf_resend){p.ctx, srv, buf, len, desc};
    hmi_na_op_t *ops[NF_STREAM];
    struct nf_done done[NF_STREAM] = {{0}};
    for (int i = 0; i < NF_STREAM; i++) {
        ops[i] = hmi_na_op_create(p.cls);
        ops[i]->o_cb = nf_cb_stream;
        ops[i]->o_arg = &done[i];
        NT_CHECK(hmi_na_msg_send(p.ctx, srv, buf, len, desc, ops[i]) == HM_SUCCESS);
        done[i].posts = 1;
    }
    /* Echoes are coming back: the stream flows. */
    struct nt_msg *m = nt_wait_msg(&p, 20000);
    NT_CHECK(m != NULL);
    nt_msg_free(&p, m);
    hm_test_signal("streaming"); /* the parent kills the server now */
    int pending = NF_STREAM;
    uint64_t deadline = nt_now_ms() + 20000; /* with reuse_for_live's 30 s, inside the
                                               parent's 60 s: a failed check is shown */
    while (nt_now_ms() < deadline && pending > 0) {
        if ((m = nt_wait_msg(&p, 1)) != NULL)
            nt_msg_free(&p, m);
        pending = 0;
        for (int i = 0; i < NF_STREAM; i++)
            pending += !done[i].done;
    }
    for (int i = 0; i < NF_STREAM; i++) {
        NT_CHECK(done[i].done);
        NT_CHECK(done[i].calls == done[i].posts);
        NT_CHECK(done[i].status != HM_SUCCESS);
    }
    struct nf_done reuse[NF_STREAM];
    for (int i = 0; i < NF_STREAM; i++) {
        ops[i]->o_cb = nf_cb;
        ops[i]->o_arg = &reuse[i];
    }
    NT_CHECK(reuse_for_live(&p, live, ops, reuse, NF_STREAM, buf, len, desc) == 0);
    /* The killed peer may be reported at any time; the live one never. */
    NT_CHECK(p.failed <= 1);
    NT_CHECK(p.failed == 0 || p.failed_addr == srv);
    NT_CHECK(nt_send_sync(&p, live, NT_CMD_QUIT, NT_CMD_LEN) == HM_SUCCESS);
    NT_CHECK(p.ctx->x_ops_twice == 0);
    for (int i = 0; i < NF_STREAM; i++)
        hmi_na_op_destroy(ops[i]);
    p.cls->c_ops.msg_buf_free(p.cls, buf, desc);
    p.cls->c_ops.addr_unref(srv);
    p.cls->c_ops.addr_unref(live);
    nt_peer_close(&p);
    return 0;
}

/* A 16-byte send to a server that is dead by now, and what became of it. */
struct nf_dead_send {
    hmi_na_op_t *op;
    void *buf;
    void *desc;
    struct nf_done done;
};

/*
 * Send to `srv` and progress until the send has completed and the peer is
 * declared failed, each exactly once (the post may also be refused at once
 * with HM_UNREACHABLE). The op and buffer stay in `s` for nf_finish.
 */
static int nf_send_to_dead(struct nt_peer *p, hmi_na_addr_t *srv, struct nf_dead_send *s)
{
    s->buf = p->cls->c_ops.msg_buf_alloc(p->cls, 16, &s->desc);
    s->op = hmi_na_op_create(p->cls);
    NT_CHECK(s->buf != NULL && s->op != NULL);
    memset(s->buf, 0x3c, 16);
    s->done = (struct nf_done){0};
    s->op->o_cb = nf_cb;
    s->op->o_arg = &s->done;
    hm_return_t ret = hmi_na_msg_send(p->ctx, srv, s->buf, 16, s->desc, s->op);
    if (ret != HM_SUCCESS) {
        NT_CHECK(ret == HM_UNREACHABLE);
        s->done.done = 1;
        s->done.calls = 1;
        s->done.status = ret;
    }
    uint64_t deadline = nt_now_ms() + 30000; /* inside the parent's 60 s */
    while (nt_now_ms() < deadline && (!s->done.done || p->failed == 0))
        hmi_na_progress(p->ctx);
    NT_CHECK(s->done.done && s->done.calls == 1);
    NT_CHECK(p->failed == 1 && p->failed_addr == srv);
    NT_CHECK(p->ctx->x_ops_twice == 0);
    return 0;
}

/* The live server still answers (and quits); everything of the case released. */
static int nf_finish(struct nt_peer *p, const struct nf_servers *servers, hmi_na_addr_t *srv,
                     struct nf_dead_send *s)
{
    hmi_na_addr_t *live;
    NT_CHECK(p->cls->c_ops.addr_lookup(p->ctx, servers->live, 0, &live) == HM_SUCCESS);
    NT_CHECK(nt_send_sync(p, live, NT_CMD_QUIT, NT_CMD_LEN) == HM_SUCCESS);
    hmi_na_op_destroy(s->op);
    p->cls->c_ops.msg_buf_free(p->cls, s->buf, s->desc);
    p->cls->c_ops.addr_unref(srv);
    p->cls->c_ops.addr_unref(live);
    nt_peer_close(p);
    return 0;
}

/*
 * peer_dies_idle: the server, having answered once, is killed while
 * nothing is in flight. The client then sends to it again: the post or its
 * completion must fail, and the peer be declared dead, by the transport's
 * own news of the death, not by the bound on posts that meet -FI_EAGAIN
 * (HM_OFI_STUCK_MS is an hour here). Over ofi+tcp rxm closes the dead
 * peer's connection without a word, and every later post only tries to
 * connect again (-FI_EAGAIN): before the plugin probed the peer's port
 * itself, such a send ended after HM_OFI_STUCK_MS (5 s by default).
 */
static int client_peer_dies_idle(void *arg)
{
    const struct nf_servers *servers = arg;
    NT_CHECK(setenv("HM_OFI_STUCK_MS", "3600000", 1) == 0);
    struct nt_peer p;
    hmi_na_addr_t *srv;
    NT_CHECK(nt_peer_open(&p, g_uri) == 0);
    NT_CHECK(p.cls->c_ops.addr_lookup(p.ctx, servers->doomed, 0, &srv) == HM_SUCCESS);
    NT_CHECK(nt_send_sync(&p, srv, "HELLO!", 6) == HM_SUCCESS); /* data: echoed */
    struct nt_msg *m = nt_wait_msg(&p, 20000);
    NT_CHECK(m != NULL && m->src == srv);
    nt_msg_free(&p, m);
    hm_test_signal("idle"); /* the parent kills the server now */
    char line[16];
    NT_CHECK(hm_test_await(line, sizeof(line), 20000) == 0);
    /* Idle a while: the transport may learn of the death meanwhile. */
    uint64_t until = nt_now_ms() + 200;
    while (nt_now_ms() < until)
        hmi_na_progress(p.ctx);
    struct nf_dead_send s;
    NT_CHECK(nf_send_to_dead(&p, srv, &s) == 0);
    NT_CHECK(s.done.status == HM_UNREACHABLE);
    NT_CHECK(check_refused(&p, srv, s.buf, s.desc) == 0);
    return nf_finish(&p, servers, srv, &s);
}

/*
 * peer_dies_asleep: the server dies armed for a blocking wait (NT_CMD_DOZE),
 * and the client sends to it before its progress can learn of the death.
 * Over ofi+shm the post lands in the dead peer's region and rings its
 * doorbell FIFO, which has no reader left: a plain write there raises
 * SIGPIPE and would end the client (ofi_bell.c opens it read-write for
 * that reason). The send must complete once (its status is the
 * transport's: shm takes it into the dead region), the peer be declared
 * dead, and the client go on to a live peer.
 */
static int client_peer_dies_asleep(void *arg)
{
    const struct nf_servers *servers = arg;
    /* As an application that never touched SIGPIPE (the harness ignores it). */
    signal(SIGPIPE, SIG_DFL);
    struct nt_peer p;
    hmi_na_addr_t *srv;
    NT_CHECK(nt_peer_open(&p, g_uri) == 0);
    NT_CHECK(p.cls->c_ops.addr_lookup(p.ctx, servers->doomed, 0, &srv) == HM_SUCCESS);
    NT_CHECK(nt_send_sync(&p, srv, NT_CMD_DOZE, NT_CMD_LEN) == HM_SUCCESS);
    struct nt_msg *m = nt_wait_msg(&p, 20000);
    NT_CHECK(m != NULL && m->src == srv && m->len == NT_CMD_LEN &&
             memcmp(m->data, "DOZED", NT_CMD_LEN) == 0);
    nt_msg_free(&p, m);
    usleep(200000); /* no progress meanwhile: the server arms and dies */
    struct nf_dead_send s;
    NT_CHECK(nf_send_to_dead(&p, srv, &s) == 0);
    return nf_finish(&p, servers, srv, &s);
}


static void run_case(int (*client)(void *), bool kill_first, const char *name)
{
    struct hm_test_server srv, live;
    struct hm_test_child cli;
    char line[64];
    hm_test_alarm(90, name);
    assert_int_equal(nt_server_start(&srv, g_uri), 0);
    assert_int_equal(nt_server_start(&live, g_uri), 0);
    struct nf_servers servers = {.doomed = srv.uri, .live = live.uri};
    assert_int_equal(hm_test_spawn(&cli, client, &servers), 0);
    if (kill_first) {
        assert_int_equal(hm_test_recv(&cli, line, sizeof(line), 30000), 0);
        assert_int_equal(hm_test_server_kill(&srv), -SIGKILL);
        assert_int_equal(hm_test_send(&cli, "killed"), 0);
    }
    int crc = hm_test_wait(&cli, 60);
    int lrc = hm_test_server_stop(&live, 10);
    if (!kill_first) /* it hangs in pause() */
        assert_int_equal(hm_test_server_kill(&srv), -SIGKILL);
    hm_test_alarm(0, NULL);
    assert_int_equal(crc, 0);
    assert_int_equal(lrc, 0);
}

static void test_peer_dies(void **state)
{
    (void)state;
    run_case(client_peer_dies, true, "peer_dies");
}

static void test_peer_dies_streaming(void **state)
{
    (void)state;
    run_case(client_peer_dies_streaming, true, "peer_dies_streaming");
}

static void test_peer_dies_idle(void **state)
{
    (void)state;
    run_case(client_peer_dies_idle, true, "peer_dies_idle");
}

static void test_peer_dies_asleep(void **state)
{
    (void)state;
    run_case(client_peer_dies_asleep, false, "peer_dies_asleep");
}

static void test_peer_dropped(void **state)
{
    (void)state;
    run_case(client_peer_dropped, false, "peer_dropped");
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
        cmocka_unit_test(test_peer_dies_streaming),
        cmocka_unit_test(test_peer_dies_idle),
        cmocka_unit_test(test_peer_dies_asleep),
        cmocka_unit_test(test_peer_dropped),
    };
    return cmocka_run_group_tests_name(g_uri, tests, NULL, NULL);
}
