/*
 * NA transport conformance suite. Written once, run per protocol: argv[1] is
 * the class URI ("ucx+tcp://127.0.0.1:0", "ucx+shm://"). Every case forks an
 * echo server (na_test.c) and a client, both children of this process, so
 * the test process itself never opens a transport before fork. Every case is
 * bounded by an alarm and by deadlines on each wait.
 */
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "na_test.h"

static const char *g_uri;

/* Run `client` against a fresh echo server; both must exit 0. */
static void nt_run(hm_test_fn_t client, const char *name, const char *server_env)
{
    struct hm_test_server srv;
    struct hm_test_child cli;
    hm_test_alarm(100, name);
    if (server_env)
        setenv(server_env, "1", 1);
    int started = nt_server_start(&srv, g_uri);
    if (server_env)
        unsetenv(server_env);
    assert_int_equal(started, 0);
    assert_int_equal(hm_test_spawn(&cli, client, srv.uri), 0);
    /* The cancel case: relay "posted" from the client as "go" to the server. */
    if (server_env) {
        char line[64];
        assert_int_equal(hm_test_recv(&cli, line, sizeof(line), 30000), 0);
        assert_int_equal(hm_test_send(&srv.child, "go"), 0);
    }
    int crc = hm_test_wait(&cli, 60);
    int src = hm_test_server_stop(&srv, 20);
    hm_test_alarm(0, NULL);
    assert_int_equal(crc, 0);
    assert_int_equal(src, 0);
}

/* A client peer connected to `server_uri`. */
static int nt_client_open(struct nt_peer *p, hmi_na_addr_t **srv, const char *server_uri)
{
    if (nt_peer_open(p, g_uri) != 0)
        return 1;
    hm_return_t ret = p->cls->c_ops.addr_lookup(p->ctx, server_uri, 0, srv);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "lookup(%s): %s\n", server_uri, hm_strerror(ret));
        return 1;
    }
    return 0;
}

static void nt_client_close(struct nt_peer *p, hmi_na_addr_t *srv)
{
    nt_send_sync(p, srv, NT_CMD_QUIT, NT_CMD_LEN);
    p->cls->c_ops.addr_unref(srv);
    nt_peer_close(p);
}

/* ---- Messages of every size, both directions ------------------------------ */

static int client_sizes(void *arg)
{
    struct nt_peer p;
    hmi_na_addr_t *srv;
    NT_CHECK(nt_client_open(&p, &srv, arg) == 0);
    size_t eager = p.cls->c_eager_limit;
    size_t sizes[] = {0, 1, 7, 8, 63, 64, 1023, 4096, 8191, 8192, 32768, eager - 1, eager};
    unsigned char *buf = malloc(eager);
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t len = sizes[s];
        for (size_t i = 0; i < len; i++)
            buf[i] = nt_pattern(i, len);
        NT_CHECK(nt_send_sync(&p, srv, buf, len) == HM_SUCCESS);
        struct nt_msg *m = nt_wait_msg(&p, 20000);
        NT_CHECK(m != NULL);
        NT_CHECK(m->len == len);
        NT_CHECK(m->src == srv); /* canonical: the lookup's address */
        for (size_t i = 0; i < len; i++)
            if (m->data[i] != nt_pattern(i, len)) {
                fprintf(stderr, "size %zu: byte %zu differs\n", len, i);
                return 1;
            }
        nt_msg_free(&p, m);
    }
    /* Past the eager limit: refused at once. */
    hmi_na_op_t *op = hmi_na_op_create(p.cls);
    NT_CHECK(hmi_na_msg_send(p.ctx, srv, buf, eager + 1, NULL, op) == HM_MSGSIZE);
    hmi_na_op_destroy(op);
    NT_CHECK(p.misaligned == 0);
    free(buf);
    nt_client_close(&p, srv);
    return 0;
}

static void test_msg_sizes(void **state)
{
    (void)state;
    nt_run(client_sizes, "msg_sizes", NULL);
}

/* ---- 10,000 messages, 64 in flight ---------------------------------------- */

#define NT_MANY 10000
#define NT_INFLIGHT 64

struct nt_slot {
    hmi_na_op_t *op;
    void *buf;
    void *desc;
    int busy;
};

static void nt_slot_cb(hmi_na_op_t *op, hm_return_t status)
{
    struct nt_slot *s = op->o_arg;
    s->busy = status == HM_SUCCESS ? 0 : -1;
}

static int client_many(void *arg)
{
    struct nt_peer p;
    hmi_na_addr_t *srv;
    NT_CHECK(nt_client_open(&p, &srv, arg) == 0);
    struct nt_slot slots[NT_INFLIGHT];
    for (int i = 0; i < NT_INFLIGHT; i++) {
        slots[i].op = hmi_na_op_create(p.cls);
        slots[i].op->o_cb = nt_slot_cb;
        slots[i].op->o_arg = &slots[i];
        slots[i].buf = p.cls->c_ops.msg_buf_alloc(p.cls, 16, &slots[i].desc);
        slots[i].busy = 0;
    }
    unsigned char *seen = calloc(NT_MANY, 1);
    unsigned int sent = 0, received = 0;
    uint64_t deadline = nt_now_ms() + 60000;
    while (received < NT_MANY && nt_now_ms() < deadline) {
        for (int i = 0; i < NT_INFLIGHT && sent < NT_MANY && sent - received < NT_INFLIGHT;
             i++) {
            if (slots[i].busy != 0)
                continue;
            uint32_t rec[4] = {sent, ~sent, 0x5e5eu, sent * 7u};
            memcpy(slots[i].buf, rec, sizeof(rec));
            slots[i].busy = 1;
            NT_CHECK(hmi_na_msg_send(p.ctx, srv, slots[i].buf, 16, slots[i].desc, slots[i].op) ==
                     HM_SUCCESS);
            sent++;
        }
        hmi_na_progress(p.ctx);
        struct nt_msg *m;
        while ((m = p.head) != NULL) {
            p.head = m->next;
            if (p.head == NULL)
                p.tail = &p.head;
            uint32_t rec[4];
            NT_CHECK(m->len == 16);
            memcpy(rec, m->data, 16);
            NT_CHECK(rec[0] < NT_MANY && rec[1] == ~rec[0] && rec[3] == rec[0] * 7u);
            NT_CHECK(seen[rec[0]] == 0); /* no duplicate */
            seen[rec[0]] = 1;
            received++;
            nt_msg_free(&p, m);
        }
        for (int i = 0; i < NT_INFLIGHT; i++)
            NT_CHECK(slots[i].busy >= 0);
    }
    NT_CHECK(received == NT_MANY); /* none lost */
    while (nt_now_ms() < deadline) {
        int busy = 0;
        for (int i = 0; i < NT_INFLIGHT; i++)
            busy |= slots[i].busy;
        if (!busy)
            break;
        hmi_na_progress(p.ctx);
    }
    for (int i = 0; i < NT_INFLIGHT; i++) {
        NT_CHECK(slots[i].busy == 0);
        p.cls->c_ops.msg_buf_free(p.cls, slots[i].buf, NULL);
        hmi_na_op_destroy(slots[i].op);
    }
    free(seen);
    nt_client_close(&p, srv);
    return 0;
}

static void test_msg_many(void **state)
{
    (void)state;
    nt_run(client_many, "msg_many", NULL);
}

/* ---- RMA put and get, 1 byte to 16 MiB ------------------------------------ */

struct nt_done {
    int done;
    int calls;
    hm_return_t status;
};

static void nt_done_cb(hmi_na_op_t *op, hm_return_t status)
{
    struct nt_done *d = op->o_arg;
    d->done = 1;
    d->calls++;
    d->status = status;
}

/* One rma op of `count` pieces, waited for; its status (or the post's error). */
static hm_return_t nt_rma_pieces(struct nt_peer *p, bool put, hmi_na_addr_t *srv,
                                 const struct hmi_na_rma_piece *pieces, unsigned int count)
{
    hmi_na_op_t *op = hmi_na_op_create(p->cls);
    struct nt_done d = {0};
    op->o_cb = nt_done_cb;
    op->o_arg = &d;
    hm_return_t ret = hmi_na_rma(p->ctx, op, put ? HM_NA_RMA_PUT : HM_NA_RMA_GET, srv, pieces,
                                count);
    if (ret != HM_SUCCESS) {
        bool idle = op->o_state == HM_NA_OP_IDLE; /* refused: it never completes */
        hmi_na_op_destroy(op);
        return idle ? ret : HM_FAULT;
    }
    if (nt_wait_flag(p, &d.done, 30000) != 0)
        return HM_TIMEOUT;
    hmi_na_op_destroy(op);
    return d.calls == 1 ? d.status : HM_FAULT;
}

static hm_return_t nt_rma(struct nt_peer *p, bool put, hmi_na_mem_t *local, size_t loff,
                          hmi_na_addr_t *srv, void *rkey, size_t roff, size_t len)
{
    struct hmi_na_rma_piece piece = {
        .rp_local = local,
        .rp_local_off = loff,
        .rp_rkey = rkey,
        .rp_remote_off = roff,
        .rp_len = len,
    };
    return nt_rma_pieces(p, put, srv, &piece, 1);
}

/* Ask the server for its region's key; unpack it. */
static int nt_get_rkey(struct nt_peer *p, hmi_na_addr_t *srv, void **rkey)
{
    NT_CHECK(nt_send_sync(p, srv, NT_CMD_KEYS, NT_CMD_LEN) == HM_SUCCESS);
    struct nt_msg *m = nt_wait_msg(p, 20000);
    NT_CHECK(m != NULL && m->src == srv);
    NT_CHECK(hmi_na_rkey_unpack(p->ctx, srv, m->data, m->len, rkey) == HM_SUCCESS);
    /* A truncated key is refused, never crashes. */
    void *bad;
    NT_CHECK(hmi_na_rkey_unpack(p->ctx, srv, m->data, 10, &bad) == HM_PROTOCOL_ERROR);
    nt_msg_free(p, m);
    return 0;
}

static int client_rma(void *arg)
{
    struct nt_peer p;
    hmi_na_addr_t *srv;
    NT_CHECK(nt_client_open(&p, &srv, arg) == 0);
    void *rkey;
    NT_CHECK(nt_get_rkey(&p, srv, &rkey) == 0);
    unsigned char *local = malloc(NT_RMA_SIZE), *check = malloc(NT_RMA_SIZE);
    hmi_na_mem_t *lmem, *cmem;
    NT_CHECK(hmi_na_mem_register(p.cls, local, NT_RMA_SIZE, HM_NA_ACCESS_READ, &lmem) ==
             HM_SUCCESS);
    NT_CHECK(hmi_na_mem_register(p.cls, check, NT_RMA_SIZE, 0, &cmem) == HM_SUCCESS);
    size_t sizes[] = {1, 8, 4095, 65536, 1u << 20, NT_RMA_SIZE};
    size_t nsizes = sizeof(sizes) / sizeof(sizes[0]);
    /* Gets first, while the server's region still holds its pattern. */
    for (size_t s = 0; s < nsizes; s++) {
        size_t len = sizes[s], roff = (NT_RMA_SIZE - len) / 3;
        memset(check, 0, len);
        NT_CHECK(nt_rma(&p, false, cmem, 0, srv, rkey, roff, len) == HM_SUCCESS);
        for (size_t i = 0; i < len; i++)
            if (check[i] != nt_pattern(roff + i, 1)) {
                fprintf(stderr, "get %zu: byte %zu differs\n", len, i);
                return 1;
            }
    }
    /* Then puts, each read back. */
    for (size_t s = 0; s < nsizes; s++) {
        size_t len = sizes[s], roff = (NT_RMA_SIZE - len) / 3;
        for (size_t i = 0; i < len; i++)
            local[i] = nt_pattern(i, len + 2);
        NT_CHECK(nt_rma(&p, true, lmem, 0, srv, rkey, roff, len) == HM_SUCCESS);
        memset(check, 0, len);
        NT_CHECK(nt_rma(&p, false, cmem, 0, srv, rkey, roff, len) == HM_SUCCESS);
        for (size_t i = 0; i < len; i++)
            if (check[i] != nt_pattern(i, len + 2)) {
                fprintf(stderr, "put %zu: byte %zu differs\n", len, i);
                return 1;
            }
    }
    /* Out of the remote region: refused, nothing posted. */
    NT_CHECK(nt_rma(&p, false, cmem, 0, srv, rkey, NT_RMA_SIZE - 1, 2) == HM_INVALID_ARG);
    hmi_na_rkey_release(p.ctx, rkey);
    hmi_na_mem_deregister(lmem);
    hmi_na_mem_deregister(cmem);
    free(local);
    free(check);
    nt_client_close(&p, srv);
    return 0;
}

static void test_rma(void **state)
{
    (void)state;
    nt_run(client_rma, "rma", NULL);
}

/* ---- RMA of several pieces per op ----------------------------------------- */

#define NT_PIECES 64
#define NT_PIECE_REGION (256u << 10)
#define NT_PIECE_SPAN_AT (1u << 20) /* where the pieces start in the server's region */

struct nt_layout {
    unsigned char *bufs[2];            /* two local regions, pieces alternate */
    hmi_na_mem_t *mems[2];
    struct hmi_na_rma_piece pieces[NT_PIECES];
    size_t span_end;                   /* end of the last remote piece */
};

/*
 * Piece i: 1 to 3000 bytes, in local region i % 2 after a 16-byte gap, and in
 * the server's region in reverse order with gaps of 8 to 12 bytes.
 */
static void nt_layout_init(struct nt_layout *l, void *rkey)
{
    size_t loff[2] = {16, 16}, roff = NT_PIECE_SPAN_AT;
    for (int i = NT_PIECES - 1; i >= 0; i--) {
        size_t len = 1 + ((size_t)i * 997u) % 3000u;
        l->pieces[i].rp_len = len;
        l->pieces[i].rp_rkey = rkey;
        l->pieces[i].rp_remote_off = roff;
        roff += len + 8 + (size_t)i % 5;
    }
    for (int i = 0; i < NT_PIECES; i++) {
        int r = i % 2;
        l->pieces[i].rp_local = l->mems[r];
        l->pieces[i].rp_local_off = loff[r];
        loff[r] += l->pieces[i].rp_len + 16;
    }
    l->span_end = roff;
}

/* Move every piece in ops of as many pieces as the class takes; ops posted. */
static int nt_rma_all(struct nt_peer *p, bool put, hmi_na_addr_t *srv,
                      const struct nt_layout *l, unsigned int *ops)
{
    unsigned int limit = p->cls->c_rma_iov_limit;
    *ops = 0;
    for (unsigned int i = 0; i < NT_PIECES; i += limit) {
        unsigned int count = NT_PIECES - i < limit ? NT_PIECES - i : limit;
        NT_CHECK(nt_rma_pieces(p, put, srv, &l->pieces[i], count) == HM_SUCCESS);
        (*ops)++;
    }
    return 0;
}

/* Gets: each piece holds the server's pattern at its offset; gaps stay 0. */
static int nt_pieces_check_get(const struct nt_layout *l)
{
    for (int i = 0; i < NT_PIECES; i++) {
        const struct hmi_na_rma_piece *pc = &l->pieces[i];
        const unsigned char *b = l->bufs[i % 2] + pc->rp_local_off;
        for (size_t j = 0; j < pc->rp_len; j++)
            if (b[j] != nt_pattern(pc->rp_remote_off + j, 1)) {
                fprintf(stderr, "get piece %d: byte %zu differs\n", i, j);
                return 1;
            }
        for (size_t j = pc->rp_len; j < pc->rp_len + 16; j++)
            NT_CHECK(b[j] == 0); /* nothing past the piece */
    }
    return 0;
}

/* The piece covering server offset `off`, or -1 in a gap. */
static int nt_piece_at(const struct nt_layout *l, size_t off)
{
    for (int i = 0; i < NT_PIECES; i++)
        if (off >= l->pieces[i].rp_remote_off &&
            off < l->pieces[i].rp_remote_off + l->pieces[i].rp_len)
            return i;
    return -1;
}

/* Puts, read back whole: pieces hold what was put, gaps the server's pattern. */
static int nt_pieces_check_put(struct nt_peer *p, hmi_na_addr_t *srv, const struct nt_layout *l,
                               void *rkey, hmi_na_mem_t *cmem, unsigned char *check)
{
    size_t span = l->span_end - NT_PIECE_SPAN_AT;
    NT_CHECK(nt_rma(p, false, cmem, 0, srv, rkey, NT_PIECE_SPAN_AT, span) == HM_SUCCESS);
    for (size_t k = 0; k < span; k++) {
        size_t off = NT_PIECE_SPAN_AT + k;
        int i = nt_piece_at(l, off);
        unsigned char want = i < 0 ? nt_pattern(off, 1)
                                   : nt_pattern(off - l->pieces[i].rp_remote_off, 1000u + i);
        if (check[k] != want) {
            fprintf(stderr, "put: server byte %zu (piece %d) differs\n", off, i);
            return 1;
        }
    }
    return 0;
}

/* Refused at once, nothing posted: too many pieces, none, one outside its key. */
static int nt_pieces_refusals(struct nt_peer *p, hmi_na_addr_t *srv, struct nt_layout *l)
{
    unsigned int limit = p->cls->c_rma_iov_limit;
    NT_CHECK(limit >= 1 && limit <= HM_NA_RMA_IOV_MAX);
    NT_CHECK(nt_rma_pieces(p, false, srv, l->pieces, limit + 1) == HM_INVALID_ARG);
    NT_CHECK(nt_rma_pieces(p, false, srv, l->pieces, 0) == HM_INVALID_ARG);
    unsigned int last = limit > 1 ? 1 : 0;
    size_t saved = l->pieces[last].rp_remote_off;
    /* One byte past the end of the server's region. */
    l->pieces[last].rp_remote_off = NT_RMA_SIZE - l->pieces[last].rp_len + 1;
    NT_CHECK(nt_rma_pieces(p, false, srv, l->pieces, last + 1) == HM_INVALID_ARG);
    l->pieces[last].rp_remote_off = saved;
    saved = l->pieces[last].rp_local_off;
    l->pieces[last].rp_local_off = NT_PIECE_REGION - l->pieces[last].rp_len + 1;
    NT_CHECK(nt_rma_pieces(p, true, srv, l->pieces, last + 1) == HM_INVALID_ARG);
    l->pieces[last].rp_local_off = saved;
    return 0;
}

static int client_rma_pieces(void *arg)
{
    struct nt_peer p;
    hmi_na_addr_t *srv;
    NT_CHECK(nt_client_open(&p, &srv, arg) == 0);
    void *rkey;
    NT_CHECK(nt_get_rkey(&p, srv, &rkey) == 0);
    struct nt_layout l;
    unsigned char *check = malloc(NT_PIECE_REGION);
    hmi_na_mem_t *cmem;
    NT_CHECK(hmi_na_mem_register(p.cls, check, NT_PIECE_REGION, 0, &cmem) == HM_SUCCESS);
    for (int r = 0; r < 2; r++) {
        l.bufs[r] = calloc(1, NT_PIECE_REGION);
        NT_CHECK(hmi_na_mem_register(p.cls, l.bufs[r], NT_PIECE_REGION, HM_NA_ACCESS_READ,
                                    &l.mems[r]) == HM_SUCCESS);
    }
    nt_layout_init(&l, rkey);
    NT_CHECK(l.span_end - NT_PIECE_SPAN_AT <= NT_PIECE_REGION);
    unsigned int limit = p.cls->c_rma_iov_limit, ops;
    NT_CHECK(nt_pieces_refusals(&p, srv, &l) == 0);
    NT_CHECK(nt_rma_all(&p, false, srv, &l, &ops) == 0);
    NT_CHECK(ops == (NT_PIECES + limit - 1) / limit);
    NT_CHECK(nt_pieces_check_get(&l) == 0);
    for (int i = 0; i < NT_PIECES; i++)
        for (size_t j = 0; j < l.pieces[i].rp_len; j++)
            l.bufs[i % 2][l.pieces[i].rp_local_off + j] = nt_pattern(j, 1000u + i);
    NT_CHECK(nt_rma_all(&p, true, srv, &l, &ops) == 0);
    NT_CHECK(nt_pieces_check_put(&p, srv, &l, rkey, cmem, check) == 0);
    fprintf(stderr, "%s: %u pieces per op at most, %u ops for %d pieces\n", g_uri, limit, ops,
            NT_PIECES);
    hmi_na_rkey_release(p.ctx, rkey);
    for (int r = 0; r < 2; r++) {
        hmi_na_mem_deregister(l.mems[r]);
        free(l.bufs[r]);
    }
    hmi_na_mem_deregister(cmem);
    free(check);
    nt_client_close(&p, srv);
    return 0;
}

static void test_rma_pieces(void **state)
{
    (void)state;
    nt_run(client_rma_pieces, "rma_pieces", NULL);
}

/* ---- Cancel --------------------------------------------------------------- */

#define NT_CANCEL_MAX 2048

static int client_cancel(void *arg)
{
    struct nt_peer p;
    hmi_na_addr_t *srv;
    NT_CHECK(nt_client_open(&p, &srv, arg) == 0);
    size_t len = p.cls->c_eager_limit;
    void *desc;
    unsigned char *buf = p.cls->c_ops.msg_buf_alloc(p.cls, len, &desc);
    memset(buf, 0x3c, len);
    hmi_na_op_t **ops = calloc(NT_CANCEL_MAX, sizeof(*ops));
    struct nt_done *done = calloc(NT_CANCEL_MAX, sizeof(*done));
    /* The server does not progress: post until one send stays pending. */
    int n = 0, victim = -1;
    while (n < NT_CANCEL_MAX && victim < 0) {
        ops[n] = hmi_na_op_create(p.cls);
        ops[n]->o_cb = nt_done_cb;
        ops[n]->o_arg = &done[n];
        NT_CHECK(hmi_na_msg_send(p.ctx, srv, buf, len, desc, ops[n]) == HM_SUCCESS);
        for (int k = 0; k < 10; k++)
            hmi_na_progress(p.ctx);
        if (!done[n].done)
            victim = n;
        n++;
    }
    NT_CHECK(victim >= 0);
    NT_CHECK(hmi_na_cancel(ops[victim]) == HM_SUCCESS);
    hm_test_signal("posted"); /* the parent lets the server go */
    uint64_t deadline = nt_now_ms() + 30000;
    for (;;) {
        int pending = 0;
        for (int i = 0; i < n; i++)
            pending += !done[i].done;
        if (pending == 0 || nt_now_ms() > deadline)
            break;
        hmi_na_progress(p.ctx);
    }
    for (int i = 0; i < n; i++) {
        NT_CHECK(done[i].calls == 1); /* exactly once */
        if (i == victim)
            NT_CHECK(done[i].status == HM_CANCELED);
        else
            NT_CHECK(done[i].status == HM_SUCCESS);
    }
    /* Cancel after completion: HM_NOENTRY, status unchanged. */
    NT_CHECK(hmi_na_cancel(ops[0]) == HM_NOENTRY);
    for (int i = 0; i < n; i++)
        hmi_na_op_destroy(ops[i]);
    free(ops);
    free(done);
    p.cls->c_ops.msg_buf_free(p.cls, buf, desc);
    /* Let the server drain what it got before QUIT arrives. */
    nt_client_close(&p, srv);
    return 0;
}

static void test_cancel(void **state)
{
    (void)state;
    nt_run(client_cancel, "cancel", "NT_SERVER_WAIT_GO");
}

/* ---- Blocking wait wakes on a message ------------------------------------- */

static int client_wait(void *arg)
{
    struct nt_peer p;
    hmi_na_addr_t *srv;
    NT_CHECK(nt_client_open(&p, &srv, arg) == 0);
    NT_CHECK(nt_send_sync(&p, srv, NT_CMD_SLEEP, NT_CMD_LEN) == HM_SUCCESS);
    int fd = p.cls->c_ops.poll_fd(p.ctx);
    NT_CHECK(fd >= 0);
    uint64_t start = nt_now_ms();
    int blocked = 0;
    while (p.head == NULL && nt_now_ms() - start < 10000) {
        while (hmi_na_progress(p.ctx) > 0)
            ;
        if (p.head != NULL)
            break;
        if (p.cls->c_ops.poll_arm(p.ctx) != HM_SUCCESS)
            continue;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, 5000);
        NT_CHECK(r > 0); /* woke, not timed out */
        blocked++;
    }
    struct nt_msg *m = nt_wait_msg(&p, 1);
    NT_CHECK(m != NULL && m->len == 16);
    NT_CHECK(blocked > 0);
    nt_msg_free(&p, m);
    nt_client_close(&p, srv);
    return 0;
}

static void test_wait(void **state)
{
    (void)state;
    nt_run(client_wait, "wait", NULL);
}

/* ---- Nap: a peer's post and another thread end it (na.h, nap_arm) -------- */

struct nap_waker {
    struct nt_peer *p;
    int delay_ms;
};

static void *nap_waker_main(void *arg)
{
    struct nap_waker *w = arg;
    usleep((useconds_t)w->delay_ms * 1000u);
    hmi_na_nap_wake(w->p->ctx);
    return NULL;
}

static long nap_voluntary_switches(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_nvcsw;
}

static int client_nap(void *arg)
{
    struct nt_peer p;
    hmi_na_addr_t *srv;
    NT_CHECK(nt_client_open(&p, &srv, arg) == 0);
    if (hmi_na_nap_arm(p.ctx) == HM_NOT_SUPPORTED) {
        /* Not offered (or not on this protocol): the core only polls, and
         * the wake hmi_ctx_wake sends every plugin changes nothing. */
        hmi_na_nap_wake(p.ctx);
        NT_CHECK(hmi_na_nap_arm(p.ctx) == HM_NOT_SUPPORTED);
        nt_client_close(&p, srv);
        return 0;
    }
    hmi_na_progress(p.ctx); /* undoes the arm above */
    /* Timed out: false, and the nap slept (a voluntary switch). */
    NT_CHECK(nt_arm_settled(p.ctx, hmi_na_nap_arm) == 0);
    long before = nap_voluntary_switches();
    NT_CHECK(!hmi_na_nap(p.ctx, 50));
    NT_CHECK(nap_voluntary_switches() > before);
    hmi_na_progress(p.ctx);
    /* A peer's message ends a nap far longer than the server's 200 ms. */
    NT_CHECK(nt_send_sync(&p, srv, NT_CMD_SLEEP, NT_CMD_LEN) == HM_SUCCESS);
    int woken = 0;
    for (int i = 0; i < 50 && p.head == NULL; i++) {
        while (hmi_na_progress(p.ctx) > 0)
            ;
        if (p.head != NULL || hmi_na_nap_arm(p.ctx) != HM_SUCCESS)
            continue;
        NT_CHECK(hmi_na_nap(p.ctx, 20000)); /* false: slept through the ring */
        woken++;
    }
    struct nt_msg *m = nt_wait_msg(&p, 1000);
    NT_CHECK(m != NULL && m->len == 16);
    NT_CHECK(woken > 0);
    nt_msg_free(&p, m);
    /* Another thread's nap_wake ends a nap in progress... */
    NT_CHECK(nt_arm_settled(p.ctx, hmi_na_nap_arm) == 0);
    struct nap_waker w = {.p = &p, .delay_ms = 50};
    pthread_t thread;
    NT_CHECK(pthread_create(&thread, NULL, nap_waker_main, &w) == 0);
    NT_CHECK(hmi_na_nap(p.ctx, 20000));
    pthread_join(thread, NULL);
    hmi_na_progress(p.ctx);
    /* ...and one before the arm makes the arm answer HM_AGAIN, once. */
    hmi_na_nap_wake(p.ctx);
    NT_CHECK(hmi_na_nap_arm(p.ctx) == HM_AGAIN);
    NT_CHECK(nt_arm_settled(p.ctx, hmi_na_nap_arm) == 0);
    hmi_na_progress(p.ctx);
    nt_client_close(&p, srv);
    return 0;
}

static void test_nap(void **state)
{
    (void)state;
    nt_run(client_nap, "nap", NULL);
}

/* ---- First contact: rendezvous and eager messages in any order ------------ */

#define NT_MIXED 32

/*
 * Before the server has named our endpoint, every message must identify its
 * sender by itself: post one message of the eager limit (rendezvous on most
 * transports) and many small ones at once, without waiting, on a fresh
 * connection; UCX may deliver the small ones first. All must come back, from
 * the looked-up address; then the same again once the peer knows us.
 */
static int client_mixed(void *arg)
{
    struct nt_peer p;
    hmi_na_addr_t *srv;
    NT_CHECK(nt_client_open(&p, &srv, arg) == 0);
    size_t big = p.cls->c_eager_limit;
    for (int round = 0; round < 2; round++) {
        hmi_na_op_t *ops[NT_MIXED];
        void *bufs[NT_MIXED];
        struct nt_done done[NT_MIXED];
        memset(done, 0, sizeof(done));
        for (int i = 0; i < NT_MIXED; i++) {
            void *desc;
            size_t len = i == 0 ? big : 24;
            bufs[i] = p.cls->c_ops.msg_buf_alloc(p.cls, len, &desc);
            memset(bufs[i], 0, len);
            memcpy(bufs[i], &i, sizeof(i));
            ops[i] = hmi_na_op_create(p.cls);
            ops[i]->o_cb = nt_done_cb;
            ops[i]->o_arg = &done[i];
            NT_CHECK(hmi_na_msg_send(p.ctx, srv, bufs[i], len, desc, ops[i]) == HM_SUCCESS);
        }
        unsigned int got = 0;
        int seen[NT_MIXED] = {0};
        uint64_t deadline = nt_now_ms() + 30000;
        while (got < NT_MIXED && nt_now_ms() < deadline) {
            struct nt_msg *m = nt_wait_msg(&p, 100);
            if (m == NULL)
                continue;
            int idx;
            NT_CHECK(m->src == srv);
            NT_CHECK(m->len == big || m->len == 24);
            memcpy(&idx, m->data, sizeof(idx));
            NT_CHECK(idx >= 0 && idx < NT_MIXED && !seen[idx]);
            NT_CHECK((idx == 0) == (m->len == big));
            seen[idx] = 1;
            got++;
            nt_msg_free(&p, m);
        }
        NT_CHECK(got == NT_MIXED);
        for (int i = 0; i < NT_MIXED; i++) {
            NT_CHECK(nt_wait_flag(&p, &done[i].done, 20000) == 0);
            NT_CHECK(done[i].calls == 1 && done[i].status == HM_SUCCESS);
            hmi_na_op_destroy(ops[i]);
            p.cls->c_ops.msg_buf_free(p.cls, bufs[i], NULL);
        }
    }
    nt_client_close(&p, srv);
    return 0;
}

static void test_first_contact_mixed(void **state)
{
    (void)state;
    nt_run(client_mixed, "first_contact_mixed", NULL);
}

/* ---- What a client sent before it exited reaches the server --------------- */

#define NT_LAST_WORDS 16

/*
 * Once client and server have exchanged a message, the server stops
 * progressing (HOLD). The client sends NT_LAST_WORDS messages and QUIT,
 * each completed, then exits: shm without even closing its context (a crash
 * right after its sends completed), tcp after a graceful context close (its
 * sends may still sit in UCX's buffers until then). Only once the client is
 * gone does the server progress again: it finds the client dead at once,
 * yet must deliver every message first (a storage service must not lose a
 * request its peer managed to send).
 */
static int client_last_words(void *arg)
{
    struct nt_peer p;
    hmi_na_addr_t *srv;
    NT_CHECK(nt_client_open(&p, &srv, arg) == 0);
    NT_CHECK(nt_send_sync(&p, srv, NT_CMD_HOLD, NT_CMD_LEN) == HM_SUCCESS);
    struct nt_msg *m = nt_wait_msg(&p, 20000);
    NT_CHECK(m != NULL && m->len == NT_CMD_LEN && m->src == srv);
    nt_msg_free(&p, m);
    for (int i = 0; i < NT_LAST_WORDS; i++) {
        unsigned char rec[16] = {0};
        memcpy(rec, &i, sizeof(i));
        NT_CHECK(nt_send_sync(&p, srv, rec, sizeof(rec)) == HM_SUCCESS);
    }
    NT_CHECK(nt_send_sync(&p, srv, NT_CMD_QUIT, NT_CMD_LEN) == HM_SUCCESS);
    if (strncmp(g_uri, "ucx+shm", 7) == 0)
        _exit(0);
    p.cls->c_ops.addr_unref(srv);
    nt_peer_close(&p);
    return 0;
}

static void test_last_words(void **state)
{
    (void)state;
    struct hm_test_server srv;
    struct hm_test_child cli;
    char num[16];
    hm_test_alarm(100, "last_words");
    snprintf(num, sizeof(num), "%d", NT_LAST_WORDS);
    setenv("NT_SERVER_EXPECT", num, 1);
    int started = nt_server_start(&srv, g_uri);
    unsetenv("NT_SERVER_EXPECT");
    assert_int_equal(started, 0);
    assert_int_equal(hm_test_spawn(&cli, client_last_words, srv.uri), 0);
    int crc = hm_test_wait(&cli, 60);
    assert_int_equal(hm_test_send(&srv.child, "go"), 0);
    int src = hm_test_server_stop(&srv, 30);
    hm_test_alarm(0, NULL);
    assert_int_equal(crc, 0);
    assert_int_equal(src, 0);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PROTOCOL-URI\n", argv[0]);
        return 2;
    }
    g_uri = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_msg_sizes), cmocka_unit_test(test_msg_many),
        cmocka_unit_test(test_rma),       cmocka_unit_test(test_rma_pieces),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_wait),      cmocka_unit_test(test_nap),
        cmocka_unit_test(test_first_contact_mixed),
        cmocka_unit_test(test_last_words),
    };
    return cmocka_run_group_tests_name(g_uri, tests, NULL, NULL);
}
