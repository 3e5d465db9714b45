/*
 * Fragments against a hostile sender, over a fragmenting protocol (ofi+shm).
 * The parent runs a server context and a good client (its own class); a
 * child process, the attacker, opens its own class and injects forged
 * fragments straight through its endpoint (fi_inject), past the plugin's
 * sender. Phase A, while the good client sends 60 KiB messages (each one a
 * train of fragments): a middle fragment with no start, a total past the
 * server's eager limit, a gap, a total that changes, bytes past the total, an
 * empty fragment, and a fragment from a sender whose pid does not exist.
 * Each must be dropped and counted (7 drops, 3 partial messages abandoned),
 * and every good message arrive whole. Phase B: starts of 64 KiB messages
 * under 80 forged names of no endpoint (dropped as unknown senders: no
 * memory kept), then 3 starts under its own name never finished (one kept:
 * one partial message per peer); the good client is served after it, and
 * the attacker's end frees what it left. The bound of OFI_REASM_MAX partial
 * messages per context needs more endpoints than a test should open (a
 * 16 MiB shm region each): na_ofi_logic's test_reasm_bounded checks it.
 * Usage: test_ofi_frag <protocol URI>.
 */
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "na/ofi/ofi_internal.h"
#include "../na_test.h"
#include "util/time.h"

#define FR_GOOD_LEN 60000u
#define FR_GOOD_A 20u       /* good messages during phase A */
#define FR_GOOD_B 10u       /* and after phase B */
#define FR_FORGED 80u       /* forged names of phase B */
#define FR_OWN_STARTS 3u    /* unfinished starts under the attacker's own name */
#define FR_LIMIT 65536u     /* the server's eager limit (HM_OFI_EAGER_LIMIT default) */
#define FR_GUARD_NS (60ull * 1000000000u) /* hang guard, not a measure */
#define FR_DEAD_PID 0x3ffffff0u /* above any pid_max: no such process */

static const char *g_uri;

/* ---- The attacker (child) ------------------------------------------------- */

struct atk {
    struct nt_peer p;
    struct ofi_context *x;
    fi_addr_t dest;
};

/* Inject one forged fragment: `name` and `pid` as the header carries them. */
static int atk_frag(struct atk *a, const struct ofi_name *name, uint32_t pid, uint32_t total,
                    uint32_t off, size_t n)
{
    static _Alignas(8) uint8_t room[OFI_BUF_ROOM + OFI_FRAG_WIRE_MAX];
    uint8_t *payload = room + OFI_BUF_ROOM;
    for (int i = 0; i < 4; i++) {
        payload[i] = (uint8_t)(total >> (8 * i));
        payload[4 + i] = (uint8_t)(off >> (8 * i));
    }
    memset(payload + OFI_FRAG_HDR_SIZE, 0xee, n);
    size_t wire_len;
    uint8_t *wire = hmi_ofi_hdr_write(payload, OFI_FRAG_HDR_SIZE + n, name, pid, OFI_HDR_F_FRAG,
                                      &wire_len);
    uint64_t end = hmi_time_ns() + FR_GUARD_NS;
    ssize_t rc;
    while ((rc = fi_inject(a->x->x_ep, wire, wire_len, a->dest)) == -FI_EAGAIN &&
           hmi_time_ns() < end)
        hmi_na_progress(a->p.ctx);
    return rc == 0 ? 0 : 1;
}

/* Phase A: 7 fragments to drop, 3 partial messages to abandon. */
static int atk_phase_a(struct atk *a)
{
    const struct ofi_name *me = &a->x->x_name;
    uint32_t pid = (uint32_t)getpid();
    int bad = 0;
    bad |= atk_frag(a, me, pid, 8000, 4000, 4000);          /* no start */
    bad |= atk_frag(a, me, pid, FR_LIMIT + 1, 0, 8);        /* past the limit */
    bad |= atk_frag(a, me, pid, 8000, 0, 4000);             /* a start... */
    bad |= atk_frag(a, me, pid, 8000, 5000, 8);             /* ...then a gap */
    bad |= atk_frag(a, me, pid, 8000, 0, 4000);             /* a start... */
    bad |= atk_frag(a, me, pid, 9000, 4000, 4000);          /* ...another total */
    bad |= atk_frag(a, me, pid, 8000, 0, 4000);             /* a start... */
    bad |= atk_frag(a, me, pid, 8000, 4000, 4008);          /* ...past the total */
    bad |= atk_frag(a, me, pid, 100, 0, 0);                 /* no bytes */
    struct ofi_name ghost = *me;
    ghost.n_bytes[0] ^= 0x55;
    bad |= atk_frag(a, &ghost, FR_DEAD_PID, 8000, 0, 4000); /* a sender that is not */
    return bad;
}

/*
 * Phase B: starts under FR_FORGED names of no endpoint (shm's AV refuses
 * them: unknown senders, dropped), then FR_OWN_STARTS starts of FR_LIMIT-byte
 * messages under its own name, never finished (one kept at a time).
 */
static int atk_phase_b(struct atk *a)
{
    int bad = 0;
    for (unsigned int i = 0; i < FR_FORGED; i++) {
        struct ofi_name forged = a->x->x_name;
        forged.n_bytes[forged.n_len - 2] = (uint8_t)('A' + i / 26);
        forged.n_bytes[forged.n_len - 3] = (uint8_t)('a' + i % 26);
        bad |= atk_frag(a, &forged, (uint32_t)getpid(), FR_LIMIT, 0, 4000);
    }
    for (unsigned int i = 0; i < FR_OWN_STARTS; i++)
        bad |= atk_frag(a, &a->x->x_name, (uint32_t)getpid(), FR_LIMIT, 0, 4000);
    return bad;
}

/* Read one line from `fd`; 0 or -1. */
static int fr_read_line(int fd, char *buf, size_t size)
{
    size_t n = 0;
    while (n + 1 < size) {
        ssize_t got = read(fd, buf + n, 1);
        if (got <= 0)
            return -1;
        if (buf[n] == '\n')
            break;
        n++;
    }
    buf[n] = '\0';
    return 0;
}

static int atk_main(int in, int out)
{
    char uri[256], line[16];
    struct atk a;
    if (fr_read_line(in, uri, sizeof(uri)) != 0 || nt_peer_open(&a.p, g_uri) != 0)
        return 1;
    a.x = ofi_ctx(a.p.ctx);
    hmi_na_addr_t *srv;
    int bad = a.p.cls->c_ops.addr_lookup(a.p.ctx, uri, 0, &srv) != HM_SUCCESS;
    if (!bad) {
        a.dest = srv->a_fi;
        bad = atk_phase_a(&a);
        bad |= write(out, "A\n", 2) != 2;
        bad |= fr_read_line(in, line, sizeof(line)) != 0;
        bad |= atk_phase_b(&a);
        bad |= write(out, "B\n", 2) != 2;
        bad |= fr_read_line(in, line, sizeof(line)) != 0; /* "quit" */
        a.p.cls->c_ops.addr_unref(srv);
    }
    nt_peer_close(&a.p);
    return bad;
}

/* ---- The server and the good client (parent) -------------------------------- */

struct fr_side {
    struct nt_peer srv, good;
    hmi_na_addr_t *dest; /* the server, from the good client */
    unsigned int good_seq, good_ok;
    int from_atk;
};

static void fr_send_cb(hmi_na_op_t *op, hm_return_t status)
{
    *(hm_return_t *)op->o_arg = status;
}

static void fr_progress(struct fr_side *s)
{
    hmi_na_progress(s->srv.ctx);
    hmi_na_progress(s->good.ctx);
}

/* One good message: sent, received whole by the server. */
static void fr_good_one(struct fr_side *s)
{
    hmi_na_class_t *cls = s->good.cls;
    void *desc;
    uint8_t *buf = cls->c_ops.msg_buf_alloc(cls, FR_GOOD_LEN, &desc);
    assert_non_null(buf);
    uint8_t seed = (uint8_t)(++s->good_seq);
    for (size_t i = 0; i < FR_GOOD_LEN; i++)
        buf[i] = (uint8_t)(seed + i * 13);
    hmi_na_op_t *op = hmi_na_op_create(cls);
    assert_non_null(op);
    hm_return_t status = HM_AGAIN;
    op->o_cb = fr_send_cb;
    op->o_arg = &status;
    assert_int_equal(hmi_na_msg_send(s->good.ctx, s->dest, buf, FR_GOOD_LEN, desc, op),
                     HM_SUCCESS);
    uint64_t end = hmi_time_ns() + FR_GUARD_NS;
    while ((status == HM_AGAIN || s->srv.head == NULL) && hmi_time_ns() < end)
        fr_progress(s);
    assert_int_equal(status, HM_SUCCESS);
    struct nt_msg *m = nt_wait_msg(&s->srv, 0);
    assert_non_null(m);
    bool whole = m->len == FR_GOOD_LEN;
    for (size_t i = 0; whole && i < FR_GOOD_LEN; i++)
        whole = m->data[i] == (uint8_t)(seed + i * 13);
    s->good_ok += whole;
    nt_msg_free(&s->srv, m);
    hmi_na_op_destroy(op);
    cls->c_ops.msg_buf_free(cls, buf, desc);
}

/* Is the attacker's line `want` in (non-blocking)? */
static bool fr_atk_said(struct fr_side *s, const char *want)
{
    struct pollfd pfd = {.fd = s->from_atk, .events = POLLIN};
    char line[16];
    if (poll(&pfd, 1, 0) != 1)
        return false;
    assert_int_equal(fr_read_line(s->from_atk, line, sizeof(line)), 0);
    assert_string_equal(line, want);
    return true;
}

/* Progress the server until its fragment counters reach these (hang guarded). */
static void fr_wait_counts(struct fr_side *s, uint64_t dropped, uint64_t abandoned)
{
    const struct ofi_frag_stats *st = &ofi_ctx(s->srv.ctx)->x_frag;
    uint64_t end = hmi_time_ns() + FR_GUARD_NS;
    while ((st->fs_dropped < dropped || st->fs_abandoned < abandoned) && hmi_time_ns() < end) {
        fr_progress(s);
        assert_true(ofi_ctx(s->srv.ctx)->x_nreasm <= OFI_REASM_MAX);
    }
    printf("server: %llu fragments dropped, %llu partial messages abandoned, %u in "
           "reassembly (%llu bytes), %llu reassembled\n",
           (unsigned long long)st->fs_dropped, (unsigned long long)st->fs_abandoned,
           ofi_ctx(s->srv.ctx)->x_nreasm, (unsigned long long)st->fs_bytes,
           (unsigned long long)st->fs_delivered);
}

static void fr_open(struct fr_side *s)
{
    assert_int_equal(nt_peer_open(&s->srv, g_uri), 0);
    assert_int_equal(nt_peer_open(&s->good, g_uri), 0);
    assert_true(ofi_class(s->srv.cls)->k_frag);
    assert_int_equal(s->srv.cls->c_eager_limit, FR_LIMIT);
    char uri[256];
    assert_int_equal(nt_self_uri(&s->srv, uri, sizeof(uri)), 0);
    assert_int_equal(s->good.cls->c_ops.addr_lookup(s->good.ctx, uri, 0, &s->dest), HM_SUCCESS);
}

/* Wait for the attacker to exit, serving meanwhile; past the guard, kill it by its pid. */
static void fr_reap(struct fr_side *s, pid_t atk)
{
    int wstatus = 0;
    uint64_t end = hmi_time_ns() + FR_GUARD_NS;
    while (waitpid(atk, &wstatus, WNOHANG) == 0 && hmi_time_ns() < end)
        fr_progress(s);
    if (hmi_time_ns() >= end) {
        kill(atk, SIGKILL);
        waitpid(atk, &wstatus, 0);
    }
    assert_true(WIFEXITED(wstatus));
    assert_int_equal(WEXITSTATUS(wstatus), 0);
}

static void test_forged_fragments(void **state)
{
    int to_atk[2], from_atk[2];
    assert_int_equal(pipe(to_atk), 0);
    assert_int_equal(pipe(from_atk), 0);
    pid_t atk = fork(); /* before this process opens libfabric */
    assert_true(atk >= 0);
    if (atk == 0) {
        close(to_atk[1]);
        close(from_atk[0]);
        _exit(atk_main(to_atk[0], from_atk[1]));
    }
    close(to_atk[0]);
    close(from_atk[1]);
    static struct fr_side s;
    s.from_atk = from_atk[0];
    fr_open(&s);
    char uri[256];
    assert_int_equal(nt_self_uri(&s.srv, uri, sizeof(uri)), 0);
    size_t len = strlen(uri);
    uri[len] = '\n';
    assert_int_equal(write(to_atk[1], uri, len + 1), (ssize_t)len + 1);
    /* Phase A: good trains while the attacker's forged ones come in. */
    bool said_a = false;
    for (unsigned int i = 0; i < FR_GOOD_A || !said_a; i++) {
        fr_good_one(&s);
        said_a = said_a || fr_atk_said(&s, "A");
        assert_true(i < 100000);
    }
    fr_wait_counts(&s, 7, 3);
    const struct ofi_frag_stats *st = &ofi_ctx(s.srv.ctx)->x_frag;
    assert_int_equal(st->fs_dropped, 7);
    assert_int_equal(st->fs_abandoned, 3);
    /* Phase B: forged starts past the context's bound. */
    assert_int_equal(write(to_atk[1], "B\n", 2), 2);
    uint64_t end = hmi_time_ns() + FR_GUARD_NS;
    while (!fr_atk_said(&s, "B") && hmi_time_ns() < end)
        fr_progress(&s);
    fr_wait_counts(&s, 7 + FR_FORGED, 3 + FR_OWN_STARTS - 1);
    assert_int_equal(st->fs_dropped, 7 + FR_FORGED);
    assert_int_equal(st->fs_abandoned, 3 + FR_OWN_STARTS - 1);
    assert_int_equal(ofi_ctx(s.srv.ctx)->x_nreasm, 1); /* one per peer */
    assert_int_equal(st->fs_bytes, FR_LIMIT);
    for (unsigned int i = 0; i < FR_GOOD_B; i++)
        fr_good_one(&s);
    printf("good client: %u/%u messages whole\n", s.good_ok, s.good_seq);
    assert_int_equal(s.good_ok, s.good_seq);
    assert_int_equal(st->fs_dropped, 7 + FR_FORGED);
    assert_int_equal(write(to_atk[1], "quit\n", 5), 5);
    fr_reap(&s, atk);
    /* Its end (pidfd) drops what it left half sent. */
    fr_wait_counts(&s, 7 + FR_FORGED, 3 + FR_OWN_STARTS);
    assert_int_equal(ofi_ctx(s.srv.ctx)->x_nreasm, 0);
    assert_int_equal(st->fs_bytes, 0);
    s.good.cls->c_ops.addr_unref(s.dest);
    nt_peer_close(&s.good);
    nt_peer_close(&s.srv); /* frees the partial messages still held (ASan checks) */
    close(to_atk[1]);
    close(from_atk[0]);
}

int main(int argc, char **argv)
{
    g_uri = argc > 1 ? argv[1] : "ofi+shm://";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forged_fragments),
    };
    return cmocka_run_group_tests_name("ofi_frag", tests, NULL, NULL);
}
