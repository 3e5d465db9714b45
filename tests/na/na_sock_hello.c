/*
 * sock+tcp's hellos travel with the connection's first frame
 * (hmi_sock_hello_owe, sock_hello.c): a dialer's hello with its first
 * send, a listener's reply with its first answer, in one system call each,
 * and alone from progress when no send comes. Two classes in one process,
 * A listening, B dialing:
 *  - B's lookup leaves its hello owed (and B's poll_arm says HM_AGAIN, so a
 *    sleeper never sleeps on it); its first send pays it with the frame, and
 *    A delivers the frame; A's reply is then owed until A's answer pays it,
 *    and B reads the reply, then the answer.
 *  - A lookup with no send: B's next progress pass writes the hello alone,
 *    and A counts the peer and answers it (B's connection opens).
 *  - A lookup, then B's context closes without a send or a pass: the close
 *    writes the hello before its FIN, so A counts a peer, not a bad frame.
 * Usage: na_sock_hello <sock+tcp URI>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "na/sock/sock_internal.h"
#include "harness.h"
#include "na_test.h"

static const char *g_uri;

struct pair {
    struct nt_peer a, b;
    char a_uri[256];
};

static void pair_open(struct pair *p)
{
    memset(p, 0, sizeof(*p));
    assert_int_equal(nt_peer_open(&p->a, g_uri), 0);
    assert_int_equal(nt_peer_open(&p->b, g_uri), 0);
    assert_int_equal(nt_self_uri(&p->a, p->a_uri, sizeof(p->a_uri)), 0);
}

/* The pair, with B's lookup of A made: its hello owed, nothing sent yet. */
static hmi_na_addr_t *pair_open_looked_up(struct pair *p)
{
    pair_open(p);
    hmi_na_addr_t *to_a;
    assert_int_equal(p->b.cls->c_ops.addr_lookup(p->b.ctx, p->a_uri, 0, &to_a), HM_SUCCESS);
    assert_int_equal(sock_ctx(p->b.ctx)->c_hellos_owed, 1);
    return to_a;
}

static void pair_close(struct pair *p)
{
    nt_peer_close(&p->b);
    nt_peer_close(&p->a);
}

static unsigned int owed(const struct nt_peer *p)
{
    return sock_ctx(p->ctx)->c_hellos_owed;
}

/* Whether B's connection to A is open (false once it died: the check fails, not crashes). */
static bool conn_open(const hmi_na_addr_t *to_a)
{
    return to_a->a_conn != NULL && to_a->a_conn->n_state == SOCK_CONN_OPEN;
}

static uint64_t listen_stat(const atomic_uint_least64_t *counter)
{
    return atomic_load(counter);
}

static void test_hello_rides_first_send(void **state)
{
    (void)state;
    struct pair p;
    hmi_na_addr_t *to_a = pair_open_looked_up(&p);
    assert_int_equal(nt_poll_arm(p.b.ctx), HM_AGAIN); /* never asleep on an owed hello */

    assert_int_equal(nt_send_sync(&p.b, to_a, "request", 8), HM_SUCCESS);
    assert_int_equal(owed(&p.b), 0);
    struct nt_msg *m = nt_wait_msg(&p.a, 10000);
    assert_non_null(m);
    assert_memory_equal(m->data, "request", 8);
    assert_int_equal(listen_stat(&p.a.ctx->x_listen.ls_accepted), 1);
    assert_int_equal(owed(&p.a), 1); /* A's reply waits for its answer */

    assert_int_equal(nt_send_sync(&p.a, m->src, "answer", 7), HM_SUCCESS);
    assert_int_equal(owed(&p.a), 0);
    nt_msg_free(&p.a, m);
    struct nt_msg *r = nt_wait_msg(&p.b, 10000);
    assert_non_null(r);
    assert_memory_equal(r->data, "answer", 7);
    assert_true(conn_open(to_a));
    nt_msg_free(&p.b, r);
    assert_int_equal(listen_stat(&p.a.ctx->x_listen.ls_refused_frame), 0);
    p.b.cls->c_ops.addr_unref(to_a);
    pair_close(&p);
}

static void test_hello_without_send(void **state)
{
    (void)state;
    struct pair p;
    hmi_na_addr_t *to_a = pair_open_looked_up(&p);
    hmi_na_progress(p.b.ctx);
    assert_int_equal(owed(&p.b), 0);
    uint64_t end = nt_now_ms() + 10000;
    while (p.a.ctx->x_peers_made == 0 && nt_now_ms() < end)
        hmi_na_progress(p.a.ctx);
    assert_int_equal(p.a.ctx->x_peers_made, 1);
    /* A's reply goes out alone at its next pass; B's connection opens on it. */
    while (!conn_open(to_a) && to_a->a_conn != NULL && nt_now_ms() < end) {
        hmi_na_progress(p.a.ctx);
        hmi_na_progress(p.b.ctx);
    }
    assert_int_equal(owed(&p.a), 0);
    assert_true(conn_open(to_a));
    assert_int_equal(nt_arm_settled(p.b.ctx, nt_poll_arm), 0);
    p.b.cls->c_ops.addr_unref(to_a);
    pair_close(&p);
}

static void test_hello_at_close(void **state)
{
    (void)state;
    struct pair p;
    hmi_na_addr_t *to_a = pair_open_looked_up(&p);
    p.b.cls->c_ops.addr_unref(to_a);
    nt_peer_close(&p.b); /* no send, no pass: the close writes the hello */
    const struct hmi_na_listen_stats *ls = &p.a.ctx->x_listen;
    uint64_t end = nt_now_ms() + 10000;
    while (listen_stat(&ls->ls_accepted) == 0 && nt_now_ms() < end)
        hmi_na_progress(p.a.ctx);
    assert_int_equal(listen_stat(&ls->ls_accepted), 1);
    assert_int_equal(listen_stat(&ls->ls_refused_frame), 0);
    nt_peer_close(&p.a);
}

int main(int argc, char **argv)
{
    g_uri = argc > 1 ? argv[1] : "sock+tcp://127.0.0.1:0";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello_rides_first_send),
        cmocka_unit_test(test_hello_without_send),
        cmocka_unit_test(test_hello_at_close),
    };
    return cmocka_run_group_tests_name("na_sock_hello", tests, NULL, NULL);
}
