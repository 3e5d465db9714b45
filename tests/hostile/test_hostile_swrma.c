/*
 * Hostile peers against RMA over messages, past the key table (issue 13):
 *
 *  - a hostile owner: a server process whose context answers every GET_REQ
 *    itself, with forged GET_DATA (a duplicate offset, an overlap, a run
 *    ahead of a gap then data overlapping it, data past the request). The
 *    victim's pull must fail with HM_PROTOCOL_ERROR (it once completed
 *    HM_SUCCESS with half the range never written), counted as malformed,
 *    and the connection must serve a normal RPC afterwards; the same data
 *    honestly out of order must succeed;
 *  - replies from a third process: the owner holds the victim's GET_REQ and
 *    reports its id over the harness pipe; this process spawns an attacker
 *    with that id (no guessing needed: ids are small, the first is
 *    0x100000000), which sends the victim GET_DATA covering the whole pull
 *    (0xab), PUT_ACK and ERR for it. All 4 must be dropped and counted
 *    ss_foreign, the op untouched; once the owner answers, the pull completes
 *    with exactly its bytes, nothing malformed, and the connection serves an
 *    RPC (before the owner check, the pull completed HM_SUCCESS with 0xab);
 *  - a timeout: the owner holds our GET_REQ and never answers it; a pull
 *    with HM_BULK_OPT_TIMEOUT (300 ms) must end with HM_TIMEOUT (it never
 *    ended before the option existed), and the connection serve an RPC;
 *  - cancel: pulls canceled while the owner streams them; the owner must
 *    drop their jobs on the requester's CANCEL (its job gauge back to 0,
 *    counted), and CANCELs for ids it does not know are counted;
 *  - one peer's flood of GET_REQs: an attacker process sends 1,000 while the
 *    owner is held in a handler, so they all arrive at once; past the
 *    per-peer cap (256) they are refused with HM_OVERLOADED, and a good
 *    client's pulls all succeed meanwhile, none refused;
 *  - peers that ask and stop reading: 4 attacker processes each send 64
 *    GET_REQs for the whole 8 MiB region, then never progress again and
 *    are SIGSTOPped; the owner's sends to them can never complete. A good
 *    client's pulls from the same owner must all complete meanwhile (before
 *    the per-peer share of the send buffers, one attacker's replies held
 *    all 32 and the good client's first pull never completed; with the
 *    share but the old pool of 32, 4 attackers still held them all), the
 *    attackers' work counted as held back, and none given up (nobody
 *    waited for a buffer). This process kills them by pid;
 *  - the same coalition against an owner whose send buffers
 *    (HM_SWRMA_BUFS=32), or job records (HM_SWRMA_JOBS=128), they fill: the
 *    owner gives them up (HM_SWRMA_STALL_MS=500) once they have taken
 *    nothing that long while the good client waits, and the good client's
 *    pulls all complete (the first never did without it). The good client
 *    first pushes 8 MiB a MiB at a time: more PUT_ACKs at once than its
 *    share of buffers, which must be noted, not dropped, while the
 *    coalition holds every job record (ucx+shm: no push completed in 2 of
 *    3 runs when only HM_BUSY refusals were noted);
 *  - one honest peer's many gets: 512 pulls started at once while the owner
 *    is held, twice the owner's per-peer job cap; the requester's window per
 *    peer keeps its requests below that cap, so every pull succeeds and the
 *    owner refuses none (HM_OVERLOADED before the window).
 *
 * The server, the attackers and this process (the victim, the good client)
 * are separate processes. argv[1]: the protocol URI (or "--attacker ...":
 * one attacker's process, see attacker_spawn).
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

#include "bulk/bulk_internal.h"
#include "bulk_test.h"
#include "core/core_internal.h"
#include "na/na_rma.h"
#include "na/na_swrma_int.h"

#define BIG (8u << 20)        /* the exposed region */
#define PULL 8192u            /* the forged-owner pulls */
#define HANG_GUARD_MS 10000u
#define FLOOD 1000u           /* GET_REQs of the attacker, 1 MiB each */
#define FLOOD_LEN (1u << 20)
#define GOOD_PULLS 32u        /* of GOOD_PULL_LEN each */
#define GOOD_PULL_LEN 65536u
#define GOOD_PUSHES 8u        /* of GOOD_PUSH_LEN each, before the good pulls */
#define GOOD_PUSH_LEN (1u << 20)
#define PEER_CAP 256u         /* the default per-peer job cap */
#define STALL_REQS 64u        /* GET_REQs of the attacker that stops reading, */
#define STALL_LEN BIG         /* each for the whole region: 512 MiB it never reads */
/* Attackers that stop reading at once: each holds at most its share of 8
 * of the owner's send buffers, so 4 held all 32 of the pool before it grew. */
#define STALLERS 4u
#define MANY 512u             /* concurrent pulls of one honest client, */
#define MANY_LEN (BIG / MANY) /* 16 KiB each, together the whole region */
#define S_SERVER_LIFE_S 300u  /* the server's bound (SIGALRM) */
#define ATTACKER_LIFE_S 240u  /* an attacker's (it is killed or told to stop before) */

/* ---- the RPCs -------------------------------------------------------------- */

struct s_ids {
    hm_id_t expose, stats, pause, answer, shutdown;
};

struct s_expose_out {
    hm_bulk_t *region;
};

struct s_stats {
    uint64_t jobs, busy, overloaded, cancels, cancel_unknown, dropped, malformed, share_waits;
    uint64_t stalled;
};

static const hm_proc_field_t expose_fields[] = {
    HM_PROC_FIELD(struct s_expose_out, region, hm_proc_bulk),
};
static hm_return_t expose_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, expose_fields, HM_PROC_FIELD_COUNT(expose_fields));
}
static const hm_proc_field_t stats_fields[] = {
    HM_PROC_FIELD(struct s_stats, jobs, hm_proc_uint64),
    HM_PROC_FIELD(struct s_stats, busy, hm_proc_uint64),
    HM_PROC_FIELD(struct s_stats, overloaded, hm_proc_uint64),
    HM_PROC_FIELD(struct s_stats, cancels, hm_proc_uint64),
    HM_PROC_FIELD(struct s_stats, cancel_unknown, hm_proc_uint64),
    HM_PROC_FIELD(struct s_stats, dropped, hm_proc_uint64),
    HM_PROC_FIELD(struct s_stats, malformed, hm_proc_uint64),
    HM_PROC_FIELD(struct s_stats, share_waits, hm_proc_uint64),
    HM_PROC_FIELD(struct s_stats, stalled, hm_proc_uint64),
};
static hm_return_t stats_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, stats_fields, HM_PROC_FIELD_COUNT(stats_fields));
}

/* ---- the server: an honest owner, or (forge) a hostile one -------------------- */

/* The forged answers; the last is honest, only out of order, and must succeed. */
enum forge_case {
    FORGE_DUP,
    FORGE_OVERLAP,
    FORGE_AHEAD,
    FORGE_PAST,
    FORGE_REORDER,
    FORGE_CASES
};

static struct {
    hm_context_t *ctx;
    struct s_ids ids;
    uint8_t *mem;
    hm_bulk_t *region;
    bool shutdown;
    /* forge mode: the context's receive path, taken over */
    bool forge;
    void *saved_rma;
    hmi_na_recv_cb_t saved_cb;
    void *saved_arg;
    unsigned int next_case; /* GET_REQs answered so far: each gets the next case */
    /* hold mode: GET_REQs are held (their ids told to the parent), answered
     * honestly on "s.answer" */
    bool hold;
    uint64_t held_id, held_off, held_len;
    hmi_na_addr_t *held_to; /* a reference of ours while a request is held */
} ss;

static void ss_respond(hm_handle_t *handle, void *out)
{
    hm_respond(handle, out, NULL, NULL);
    hm_handle_destroy(handle);
}

static hm_return_t on_expose(hm_handle_t *handle)
{
    struct s_expose_out out = {.region = ss.region};
    ss_respond(handle, &out);
    return HM_SUCCESS;
}

static hm_return_t on_stats(hm_handle_t *handle)
{
    struct hmi_swrma_stats st;
    hmi_swrma_stats(ss.ctx->c_na, &st);
    struct s_stats out = {.jobs = st.ss_jobs, .busy = st.ss_busy,
                          .overloaded = st.ss_overloaded, .cancels = st.ss_cancels,
                          .cancel_unknown = st.ss_cancel_unknown, .dropped = st.ss_dropped,
                          .malformed = st.ss_malformed, .share_waits = st.ss_share_waits};
    hm_stats_t pub = {.size = sizeof(pub)}; /* what an application sees */
    if (hm_context_stats(ss.ctx, &pub) != HM_SUCCESS)
        return HM_FAULT;
    out.stalled = pub.rma_peers_given_up;
    ss_respond(handle, &out);
    return HM_SUCCESS;
}

/* Held here (the context does not progress) until the parent says "go". */
static hm_return_t on_pause(hm_handle_t *handle)
{
    char line[32];
    hm_test_signal("paused");
    int rc = hm_test_await(line, sizeof(line), 60000);
    ss_respond(handle, NULL);
    return rc == 0 ? HM_SUCCESS : HM_TIMEOUT;
}

static void honest_answer(void);

/* Answer the held GET_REQ with the region's real bytes. */
static hm_return_t on_answer(hm_handle_t *handle)
{
    honest_answer();
    ss_respond(handle, NULL);
    return HM_SUCCESS;
}

static hm_return_t on_shutdown(hm_handle_t *handle)
{
    ss.shutdown = true;
    ss_respond(handle, NULL);
    return HM_SUCCESS;
}

static hm_return_t s_register(hm_class_t *cls, struct s_ids *ids, bool server)
{
    struct {
        const char *name;
        hm_proc_cb_t out;
        hm_rpc_handler_t cb;
        hm_id_t *id;
    } rpcs[] = {
        {"s.expose", expose_proc, on_expose, &ids->expose},
        {"s.stats", stats_proc, on_stats, &ids->stats},
        {"s.pause", NULL, on_pause, &ids->pause},
        {"s.answer", NULL, on_answer, &ids->answer},
        {"s.shutdown", NULL, on_shutdown, &ids->shutdown},
    };
    for (size_t i = 0; i < sizeof(rpcs) / sizeof(rpcs[0]); i++) {
        hm_return_t ret = hm_register(cls, rpcs[i].name, NULL, rpcs[i].out,
                                      server ? rpcs[i].cb : NULL, rpcs[i].id);
        if (ret != HM_SUCCESS)
            return ret;
    }
    return HM_SUCCESS;
}

/* A forged message in flight: its buffer and op, freed at completion. */
struct forged {
    hmi_na_class_t *cls;
    void *buf;
    void *desc;
};

static unsigned int g_forged_done; /* forged messages whose send completed */

static void forged_sent(hmi_na_op_t *op, hm_return_t status)
{
    (void)status;
    struct forged *f = op->o_arg;
    f->cls->c_ops.msg_buf_free(f->cls, f->buf, f->desc);
    free(f);
    hmi_na_op_destroy(op);
    g_forged_done++;
}

/* A message buffer of `size` bytes to forge into; aborts without memory. */
static struct forged *forged_new(hmi_na_context_t *na, size_t size)
{
    struct forged *f = calloc(1, sizeof(*f));
    if (f == NULL)
        abort();
    f->cls = na->x_class;
    f->buf = f->cls->c_ops.msg_buf_alloc(f->cls, size, &f->desc);
    if (f->buf == NULL)
        abort();
    return f;
}

/* Send the forged message `f` (`size` bytes) to `to`; `f` is freed once sent. */
static void forged_post(hmi_na_context_t *na, hmi_na_addr_t *to, struct forged *f, size_t size)
{
    hmi_na_op_t *op = hmi_na_op_create(f->cls);
    if (op == NULL)
        abort();
    op->o_cb = forged_sent;
    op->o_arg = f;
    if (hmi_na_msg_send(na, to, f->buf, size, f->desc, op) != HM_SUCCESS)
        forged_sent(op, HM_SUCCESS);
}

/*
 * Send GET_DATA for request `id`: `len` bytes at `off` within the request,
 * copied from `bytes` (NULL: 0xab).
 */
static void send_data(hmi_na_context_t *na, hmi_na_addr_t *to, uint64_t id, uint64_t off,
                      uint64_t len, const uint8_t *bytes)
{
    struct forged *f = forged_new(na, SWRMA_DATA_SIZE + (size_t)len);
    hmi_swrma_encode_data(f->buf, id, off, len);
    if (bytes != NULL)
        memcpy((uint8_t *)f->buf + SWRMA_DATA_SIZE, bytes, (size_t)len);
    else
        memset((uint8_t *)f->buf + SWRMA_DATA_SIZE, 0xab, (size_t)len);
    forged_post(na, to, f, SWRMA_DATA_SIZE + (size_t)len);
}

static void forge_data(hmi_na_context_t *na, hmi_na_addr_t *to, uint64_t id, uint64_t off,
                       uint64_t len)
{
    send_data(na, to, id, off, len, NULL);
}

/* Send PUT_ACK (`value`: bytes placed) or ERR (`value`: a status) for request `id`. */
static void forge_reply(hmi_na_context_t *na, hmi_na_addr_t *to, enum swrma_type type,
                        uint64_t id, uint64_t value)
{
    struct forged *f = forged_new(na, SWRMA_ACK_SIZE);
    hmi_swrma_encode_reply(f->buf, type, id, value);
    forged_post(na, to, f, SWRMA_ACK_SIZE);
}

/* Hold mode: keep the GET_REQ unanswered, and tell the parent its id. */
static void hold_request(hmi_na_context_t *na, hmi_na_addr_t *from, const struct swrma_msg *m)
{
    if (ss.held_to != NULL)
        return; /* one at a time: its requester asks nothing else */
    na->x_class->c_ops.addr_ref(from);
    ss.held_to = from;
    ss.held_id = m->m_id;
    ss.held_off = m->m_off;
    ss.held_len = m->m_len;
    char line[64];
    snprintf(line, sizeof(line), "id %llx", (unsigned long long)m->m_id);
    hm_test_signal(line);
}

/* The held GET_REQ's honest answer: its bytes of the region, in two halves. */
static void honest_answer(void)
{
    hmi_na_context_t *na = ss.ctx->c_na;
    if (ss.held_to == NULL || ss.held_off > BIG || ss.held_len > BIG - ss.held_off)
        return;
    const uint8_t *bytes = ss.mem + ss.held_off;
    uint64_t half = ss.held_len / 2;
    send_data(na, ss.held_to, ss.held_id, 0, half, bytes);
    send_data(na, ss.held_to, ss.held_id, half, ss.held_len - half, bytes + half);
    na->x_class->c_ops.addr_unref(ss.held_to);
    ss.held_to = NULL;
}

/* The hostile owner's answer to a GET_REQ of PULL bytes: never the honest one. */
static void forge_answer(hmi_na_context_t *na, hmi_na_addr_t *to, uint64_t id)
{
    const uint64_t half = PULL / 2;
    switch (ss.next_case++ % FORGE_CASES) {
    case FORGE_DUP: /* the first half twice: the byte count says "done" */
        forge_data(na, to, id, 0, half);
        forge_data(na, to, id, 0, half);
        break;
    case FORGE_OVERLAP:
        forge_data(na, to, id, 0, half);
        forge_data(na, to, id, half / 2, half);
        break;
    case FORGE_AHEAD: /* the second half first, then data overlapping it */
        forge_data(na, to, id, half, half);
        forge_data(na, to, id, 1024, half);
        break;
    case FORGE_PAST: /* the second half claims to run past the request */
        forge_data(na, to, id, 0, half);
        forge_data(na, to, id, half, half + 512);
        break;
    default: /* FORGE_REORDER: every byte once, the second half first */
        forge_data(na, to, id, half + 1024, half - 1024);
        forge_data(na, to, id, half, 1024);
        forge_data(na, to, id, 0, half);
        break;
    }
}

/* The forging server's receive callback: RMA messages are its own business. */
static void forge_recv(void *arg, hmi_na_addr_t *source, void *buf, size_t len,
                       uintptr_t token)
{
    (void)arg;
    hmi_na_context_t *na = ss.ctx->c_na;
    uint32_t magic = 0;
    if (len >= sizeof(magic))
        memcpy(&magic, buf, sizeof(magic));
    if (magic != HMI_SWRMA_MAGIC) {
        ss.saved_cb(ss.saved_arg, source, buf, len, token);
        return;
    }
    struct swrma_msg m;
    if (hmi_swrma_decode(buf, len, &m) && m.m_type == SWRMA_GET_REQ) {
        if (ss.hold)
            hold_request(na, source, &m);
        else
            forge_answer(na, source, m.m_id);
    }
    hmi_na_msg_release(na, token); /* CANCELs and anything else: ignored */
}

/* Take over (or give back) the context's receive path: no RMA engine sees a message. */
static void forge_hook(bool on)
{
    hmi_na_context_t *na = ss.ctx->c_na;
    if (on) {
        ss.saved_rma = na->x_rma;
        ss.saved_cb = na->x_recv_cb;
        ss.saved_arg = na->x_recv_arg;
        na->x_rma = NULL;
        na->x_recv_cb = forge_recv;
    } else {
        na->x_rma = ss.saved_rma;
        na->x_recv_cb = ss.saved_cb;
    }
}

static int s_server_main(void *arg)
{
    const char *protocol = arg;
    ss.hold = protocol[0] == '?';
    ss.forge = protocol[0] == '!' || ss.hold;
    protocol += ss.forge;
    hm_class_t *cls;
    if (hm_class_create(protocol, NULL, &cls) != HM_SUCCESS)
        return 2;
    if (s_register(cls, &ss.ids, true) != HM_SUCCESS ||
        hm_context_create(cls, NULL, &ss.ctx) != HM_SUCCESS)
        return 3;
    ss.mem = malloc(BIG);
    void *buf = ss.mem;
    size_t size = BIG;
    if (ss.mem == NULL ||
        hm_bulk_create(cls, 1, &buf, &size, HM_BULK_READ_WRITE, &ss.region) != HM_SUCCESS)
        return 4;
    bulk_pattern_fill(ss.mem, BIG, 3, 0);
    if (ss.forge)
        forge_hook(true);
    if (hm_test_ready_self(ss.ctx) != 0)
        return 5;
    while (!ss.shutdown) {
        hm_progress(ss.ctx, 1);
        hm_trigger(ss.ctx, UINT32_MAX, NULL);
    }
    if (ss.held_to != NULL)
        ss.ctx->c_na->x_class->c_ops.addr_unref(ss.held_to);
    if (ss.forge)
        forge_hook(false);
    hm_bulk_free(ss.region);
    hm_test_context_close(ss.ctx, 200);
    free(ss.mem);
    return hm_class_destroy(cls) == HM_SUCCESS ? 0 : 6;
}

/* ---- clients --------------------------------------------------------------------- */

static const char *g_protocol;

/* A client class and context on `protocol`, the server at `uri`. */
static hm_return_t s_client_open(struct bulk_client *c, struct s_ids *ids, const char *uri)
{
    char mine[128];
    memset(c, 0, sizeof(*c));
    if (hm_test_client_uri(g_protocol, mine, sizeof(mine)) != 0)
        return HM_INVALID_ARG;
    hm_return_t ret = hm_class_create(mine, NULL, &c->cls);
    if (ret == HM_SUCCESS)
        ret = s_register(c->cls, ids, false);
    if (ret == HM_SUCCESS)
        ret = hm_context_create(c->cls, NULL, &c->ctx);
    if (ret == HM_SUCCESS)
        ret = hm_addr_lookup(c->ctx, uri, &c->server);
    return ret;
}

/* The server's region, with a reference of ours; NULL on error. */
static hm_bulk_t *s_expose(struct bulk_client *c, const struct s_ids *ids)
{
    hm_handle_t *handle;
    struct s_expose_out o = {0};
    if (hm_handle_create(c->ctx, c->server, ids->expose, &handle) != HM_SUCCESS)
        return NULL;
    if (hm_call(handle, NULL, &o, 20000) != HM_SUCCESS || o.region == NULL) {
        hm_handle_destroy(handle);
        return NULL;
    }
    hm_bulk_t *region = o.region;
    hm_bulk_ref(region);
    hm_free_output(handle, &o);
    hm_handle_destroy(handle);
    return region;
}

/* ---- the attackers' common part ------------------------------------------------------ */

/* An attacker process: a client of the server (or, foreign_main, of the victim). */
struct attacker {
    struct bulk_client c;
    struct s_ids ids;
    hm_bulk_t *region; /* the server's, once exposed (NULL: not asked) */
};

/* Open a client of `uri`; with `expose`, get the server's region. 0, or an exit status. */
static int attacker_open(struct attacker *at, const char *uri, bool expose)
{
    at->region = NULL;
    if (s_client_open(&at->c, &at->ids, uri) != HM_SUCCESS)
        return 2;
    if (expose && (at->region = s_expose(&at->c, &at->ids)) == NULL)
        return 3;
    return 0;
}

/* Progress and trigger until the parent says "stop" (the attacker's replies drain). */
static void attacker_serve_until_stop(struct attacker *at)
{
    char line[32];
    while (hm_test_await(line, sizeof(line), 1) != 0) {
        hm_progress(at->c.ctx, 1);
        hm_trigger(at->c.ctx, UINT32_MAX, NULL);
    }
}

/* ---- the attacker: a flood of GET_REQs --------------------------------------------- */

static void flood_sent(hmi_na_op_t *op, hm_return_t status)
{
    (void)status;
    (*(unsigned int *)op->o_arg)++;
}

/*
 * Post `count` (at most FLOOD) GET_REQs of `len` bytes at the region's start
 * at once (for the flood the server is held: on shm they cannot leave
 * before it progresses). Counts `done` as they leave.
 */
struct flood_msgs {
    void *bufs[FLOOD];
    void *descs[FLOOD];
    hmi_na_op_t *ops[FLOOD];
    unsigned int done;
};

static int flood_send(struct bulk_client *c, hm_bulk_t *region, struct flood_msgs *f,
                      unsigned int count, uint64_t len)
{
    hmi_na_context_t *na = c->ctx->c_na;
    hmi_na_class_t *cls = na->x_class;
    const uint8_t *key = region->b_keys[0];
    uint32_t slot;
    struct hmi_keytab_key k;
    memcpy(&slot, key + 12, 4);
    memcpy(&k.k0, key + 16, 8);
    memcpy(&k.k1, key + 24, 8);
    for (unsigned int i = 0; i < count; i++) {
        f->bufs[i] = cls->c_ops.msg_buf_alloc(cls, SWRMA_REQ_SIZE, &f->descs[i]);
        f->ops[i] = hmi_na_op_create(cls);
        if (f->bufs[i] == NULL || f->ops[i] == NULL)
            return 1;
        f->ops[i]->o_cb = flood_sent;
        f->ops[i]->o_arg = &f->done;
        hmi_swrma_encode_req(f->bufs[i], SWRMA_GET_REQ, 0xf100d000u + i, slot, &k, 0, len);
        if (hmi_na_msg_send(na, c->server->a_na, f->bufs[i], SWRMA_REQ_SIZE, f->descs[i],
                           f->ops[i]) != HM_SUCCESS)
            return 2;
    }
    return 0;
}

static void flood_free(struct bulk_client *c, struct flood_msgs *f)
{
    hmi_na_class_t *cls = c->ctx->c_na->x_class;
    for (unsigned int i = 0; i < FLOOD; i++) {
        if (f->ops[i] != NULL)
            hmi_na_op_destroy(f->ops[i]);
        if (f->bufs[i] != NULL)
            cls->c_ops.msg_buf_free(cls, f->bufs[i], f->descs[i]);
    }
}

static void flood_pause_cb(const hm_cb_info_t *info)
{
    (void)info;
}

/*
 * Hold the server in "pause", send the flood while it is held, then drain
 * what the server sends until the parent says "stop". An exit status.
 */
static int flood_run(struct attacker *at, struct flood_msgs *f)
{
    char line[32];
    hm_handle_t *pause;
    if (hm_handle_create(at->c.ctx, at->c.server, at->ids.pause, &pause) != HM_SUCCESS ||
        hm_forward(pause, NULL, flood_pause_cb, NULL, NULL) != HM_SUCCESS)
        return 3;
    hm_test_ready("attacker");
    if (hm_test_await(line, sizeof(line), 60000) != 0) /* "flood": the server is held */
        return 4;
    int rc = flood_send(&at->c, at->region, f, FLOOD, FLOOD_LEN);
    hm_test_signal(rc == 0 ? "sent" : "failed");
    attacker_serve_until_stop(at);
    /* "stop" may come before the last of them left (the good client's pulls
     * can end first under load): they must leave, not have left by then. */
    double end = bulk_now_ms() + HANG_GUARD_MS;
    while (rc == 0 && f->done < FLOOD && bulk_now_ms() < end)
        hm_progress(at->c.ctx, 1);
    if (rc == 0 && f->done != FLOOD)
        rc = 5;
    flood_free(&at->c, f);
    return rc;
}

/*
 * The attacker that stops reading: STALL_REQS GET_REQs for the whole region,
 * "sent" once they have left, then it never progresses again (and the
 * parent SIGSTOPs it); the parent kills it by its pid.
 */
static int stall_run(struct attacker *at, struct flood_msgs *f)
{
    char line[32];
    int rc = flood_send(&at->c, at->region, f, STALL_REQS, STALL_LEN);
    double end = bulk_now_ms() + HANG_GUARD_MS;
    while (rc == 0 && f->done < STALL_REQS && bulk_now_ms() < end)
        hm_progress(at->c.ctx, 1); /* until the requests have left; their answers pile up */
    char said[48] = "sent";
    if (rc != 0 || f->done != STALL_REQS)
        snprintf(said, sizeof(said), "failed %d, %u of %u sent", rc, f->done, STALL_REQS);
    hm_test_signal(said);
    (void)hm_test_await(line, sizeof(line), 120000); /* reads nothing more, ever */
    return rc;
}

/* The GET_REQ attacker's process: expose, then flood_run or stall_run. */
static int flood_main(const char *uri, bool stall)
{
    static struct attacker at;
    static struct flood_msgs f;
    int rc = attacker_open(&at, uri, true);
    if (rc != 0) {
        hm_test_signal("cannot open");
        return rc;
    }
    rc = stall ? stall_run(&at, &f) : flood_run(&at, &f);
    /* An attacker leaves without closing: the owner may still stream to it,
     * and its teardown is not what is tested (nor leak-checked). */
    _exit(rc);
}

/* ---- the third process: replies forged for another peer's op ---------------------- */

#define FOREIGN 4u /* forged replies, each naming the victim's live op */

/*
 * Send FOREIGN replies for `id` to the victim: GET_DATA covering the whole
 * pull (0xab), PUT_ACK and ERR; "sent" once they have left, then wait for
 * "stop" while progressing.
 */
static int foreign_main(const char *victim_uri, uint64_t id)
{
    static struct attacker at;
    int rc = attacker_open(&at, victim_uri, false);
    if (rc != 0)
        return rc;
    hmi_na_context_t *na = at.c.ctx->c_na;
    hmi_na_addr_t *victim = at.c.server->a_na;
    forge_data(na, victim, id, 0, PULL / 2);
    forge_data(na, victim, id, PULL / 2, PULL / 2);
    forge_reply(na, victim, SWRMA_PUT_ACK, id, PULL);
    forge_reply(na, victim, SWRMA_ERR, id, (uint64_t)HM_CANCELED);
    double end = bulk_now_ms() + HANG_GUARD_MS;
    while (g_forged_done < FOREIGN && bulk_now_ms() < end) {
        hm_progress(at.c.ctx, 1);
        hm_trigger(at.c.ctx, UINT32_MAX, NULL);
    }
    rc = g_forged_done == FOREIGN ? 0 : 3;
    hm_test_signal(rc == 0 ? "sent" : "failed");
    attacker_serve_until_stop(&at);
    _exit(rc); /* as the flood's attacker: its teardown is not what is tested */
}

/*
 * Attackers are this binary run again (exec), never forks of the test
 * process: a fork copies the transport's locks, and one that a thread of
 * UCX held at that instant stays held in the child for ever (the child
 * then hangs opening its own context).
 */
static const char *g_self; /* argv[0] */

/* Start the attacker `mode` ("flood", "stall", "foreign") at `uri`; `id`: foreign's op. */
static int attacker_spawn(struct hm_test_child *child, const char *mode, const char *uri,
                          uint64_t id)
{
    char id_hex[24];
    snprintf(id_hex, sizeof(id_hex), "%llx", (unsigned long long)id);
    char *args[] = {(char *)g_self, "--attacker", (char *)mode, (char *)g_protocol,
                    (char *)uri, id_hex, NULL};
    return hm_test_spawn_exec(child, args, ATTACKER_LIFE_S);
}

/* An attacker's process, with attacker_spawn's argv: an exit status. */
static int attacker_main(char **argv)
{
    g_protocol = argv[3];
    if (strcmp(argv[2], "foreign") == 0)
        return foreign_main(argv[4], strtoull(argv[5], NULL, 16));
    return flood_main(argv[4], strcmp(argv[2], "stall") == 0);
}

/* ---- the test process ----------------------------------------------------------------- */

static struct hm_test_server g_server; /* its process and URI */
static struct bulk_client g_cli;
static struct s_ids g_ids;
static uint8_t *g_local;
static hm_bulk_t *g_local_bulk;

/*
 * Setup: the server, our client and local buffer. `mode`: "" an honest owner,
 * "!" a hostile one (forged GET_DATA), "?" one that holds GET_REQs.
 */
static int start(const char *mode)
{
    static char arg[256];
    snprintf(arg, sizeof(arg), "%s%s", mode, g_protocol);
    if (hm_test_server_start(&g_server, s_server_main, arg, S_SERVER_LIFE_S) != 0 ||
        s_client_open(&g_cli, &g_ids, g_server.uri) != HM_SUCCESS)
        return -1;
    g_local = calloc(1, BIG);
    void *buf = g_local;
    size_t size = BIG;
    if (g_local == NULL || hm_bulk_create(g_cli.cls, 1, &buf, &size, HM_BULK_READ_WRITE,
                                          &g_local_bulk) != HM_SUCCESS)
        return -1;
    return 0;
}

static int start_forging(void **state)
{
    (void)state;
    return start("!");
}

static int start_holding(void **state)
{
    (void)state;
    return start("?");
}

static int start_honest(void **state)
{
    (void)state;
    return start("");
}

/*
 * Stalled peers given up after 500 ms, and the owner short of send buffers
 * (a pool of STALLERS shares of 8, all theirs once they stall) or of job
 * records (128, fewer than the STALLERS x STALL_REQS gets they ask for).
 * Set in the environment, read by every context this process and its
 * children open from then on.
 */
#define COALITION_STALL_MS "500"
#define COALITION_BUFS "32"
#define COALITION_JOBS "128"

static int start_coalition_jobs(void **state)
{
    *state = "stalled coalition, job records";
    setenv("HM_SWRMA_JOBS", COALITION_JOBS, 1);
    setenv("HM_SWRMA_STALL_MS", COALITION_STALL_MS, 1);
    return start("");
}

static int start_coalition_bufs(void **state)
{
    *state = "stalled coalition, buffers";
    setenv("HM_SWRMA_BUFS", COALITION_BUFS, 1);
    setenv("HM_SWRMA_STALL_MS", COALITION_STALL_MS, 1);
    return start("");
}

/* Teardown, also after a failed test: the server is stopped, or killed. */
static int stop(void **state)
{
    (void)state;
    hm_bulk_free(g_local_bulk);
    g_local_bulk = NULL;
    bool clean = bulk_call(&g_cli, g_ids.shutdown, NULL, NULL) == HM_SUCCESS &&
                 hm_test_server_stop_ctx(&g_server, 20, g_cli.ctx) == 0;
    if (!clean)
        hm_test_server_kill(&g_server);
    clean = bulk_client_close(&g_cli) == HM_SUCCESS && clean;
    free(g_local);
    g_local = NULL;
    return clean ? 0 : -1;
}

static int stop_coalition(void **state)
{
    int rc = stop(state);
    unsetenv("HM_SWRMA_BUFS");
    unsetenv("HM_SWRMA_JOBS");
    unsetenv("HM_SWRMA_STALL_MS");
    return rc;
}

static void server_stats(struct s_stats *st)
{
    assert_int_equal(bulk_call(&g_cli, g_ids.stats, NULL, st), HM_SUCCESS);
}

static hm_return_t pull(hm_bulk_t *remote, size_t off, size_t size)
{
    hm_bulk_xfer_t x = {.op = HM_BULK_PULL, .origin_addr = g_cli.server, .origin = remote,
                        .origin_off = off, .local = g_local_bulk, .size = size};
    hm_return_t ret = bulk_transfer_wait(&g_cli, &x, NULL, HANG_GUARD_MS);
    assert_int_not_equal(ret, HM_TIMEOUT); /* an answer, never a hang */
    return ret;
}

/* A hostile owner's GET_DATA: each forged case fails the pull; the connection lives on. */
static void test_forged_get_data(void **state)
{
    (void)state;
    hm_bulk_t *region = s_expose(&g_cli, &g_ids);
    assert_non_null(region);
    for (unsigned int i = 0; i < 2 * FORGE_CASES; i++) {
        struct hmi_swrma_stats before, after;
        hmi_swrma_stats(g_cli.ctx->c_na, &before);
        memset(g_local, 0, PULL);
        hm_return_t ret = pull(region, 0, PULL);
        hmi_swrma_stats(g_cli.ctx->c_na, &after);
        size_t zeros = 0;
        for (size_t b = 0; b < PULL; b++)
            zeros += g_local[b] == 0;
        printf("forged case %u: %s, %zu of %u bytes never written\n", i % FORGE_CASES,
               hm_strerror(ret), zeros, PULL);
        bool honest = i % FORGE_CASES == FORGE_REORDER;
        assert_int_equal(ret, honest ? HM_SUCCESS : HM_PROTOCOL_ERROR);
        assert_int_equal(after.ss_malformed, before.ss_malformed + !honest);
        if (honest)
            assert_int_equal(zeros, 0);
        struct s_stats st;
        server_stats(&st); /* the same connection still serves RPCs */
    }
    hm_bulk_free(region);
}

struct pull_wait {
    unsigned int calls;
    hm_return_t ret;
};

static void pull_wait_cb(const hm_bulk_cb_info_t *info)
{
    struct pull_wait *w = info->arg;
    w->calls++;
    w->ret = info->ret;
}

/* Progress our context until `line` from `child` (polled), or the guard. */
static int recv_progressing(struct hm_test_child *child, char *line, size_t size)
{
    double end = bulk_now_ms() + HANG_GUARD_MS;
    while (bulk_now_ms() < end) {
        hm_progress(g_cli.ctx, 1);
        hm_trigger(g_cli.ctx, UINT32_MAX, NULL);
        if (hm_test_recv(child, line, size, 1) == 0)
            return 0;
    }
    return -1;
}

/* Progress our context until the pull completed, or `foreign` reached `target`. */
static void wait_pull_or_foreign(const struct pull_wait *w, uint64_t target)
{
    struct hmi_swrma_stats st;
    double end = bulk_now_ms() + HANG_GUARD_MS;
    do {
        hm_progress(g_cli.ctx, 1);
        hm_trigger(g_cli.ctx, UINT32_MAX, NULL);
        hmi_swrma_stats(g_cli.ctx->c_na, &st);
    } while (w->calls == 0 && st.ss_foreign < target && bulk_now_ms() < end);
}

/* A third process spawned to send FOREIGN replies for our op `id`; "sent" awaited. */
static void foreign_start(struct hm_test_child *attacker, uint64_t id)
{
    char line[64];
    static char uri[512];
    assert_int_equal(hm_test_self_uri(g_cli.ctx, uri, sizeof(uri)), 0);
    assert_int_equal(attacker_spawn(attacker, "foreign", uri, id), 0);
    assert_int_equal(recv_progressing(attacker, line, sizeof(line)), 0);
    assert_string_equal(line, "sent");
}

/*
 * Replies for our live op from a third process (not its owner): GET_DATA
 * with other bytes, PUT_ACK, ERR. Each is dropped and counted foreign; the
 * pull then completes with exactly the owner's bytes.
 */
static void test_foreign_replies(void **state)
{
    (void)state;
    hm_bulk_t *region = s_expose(&g_cli, &g_ids);
    assert_non_null(region);
    struct hmi_swrma_stats before, after;
    hmi_swrma_stats(g_cli.ctx->c_na, &before);
    memset(g_local, 0, PULL);
    static struct pull_wait w; /* static: the op may outlive a failed test */
    w = (struct pull_wait){0};
    hm_bulk_op_id_t *op;
    hm_bulk_xfer_t x = {.op = HM_BULK_PULL, .origin_addr = g_cli.server, .origin = region,
                        .local = g_local_bulk, .size = PULL};
    assert_int_equal(hm_bulk_transfer(g_cli.ctx, &x, NULL, pull_wait_cb, &w, &op), HM_SUCCESS);
    char line[64];
    assert_int_equal(recv_progressing(&g_server.child, line, sizeof(line)), 0); /* "id <hex>" */
    uint64_t id = strtoull(line + 3, NULL, 16);
    printf("owner holds our GET_REQ, id 0x%llx\n", (unsigned long long)id);
    struct hm_test_child attacker;
    foreign_start(&attacker, id);
    wait_pull_or_foreign(&w, before.ss_foreign + FOREIGN);
    hmi_swrma_stats(g_cli.ctx->c_na, &after);
    unsigned int early_calls = w.calls;
    printf("forged replies: %llu foreign, %llu late; pull %s (%s), first byte 0x%02x\n",
           (unsigned long long)(after.ss_foreign - before.ss_foreign),
           (unsigned long long)(after.ss_late - before.ss_late),
           w.calls ? "completed" : "pending", w.calls ? hm_strerror(w.ret) : "-", g_local[0]);
    assert_int_equal(hm_test_send(&attacker, "stop"), 0);
    assert_int_equal(hm_test_wait(&attacker, 60), 0);
    assert_int_equal(early_calls, 0); /* the op untouched by the forged replies */
    assert_int_equal(after.ss_foreign, before.ss_foreign + FOREIGN);
    /* The owner answers now: exactly its bytes land, nothing malformed. */
    assert_int_equal(bulk_call(&g_cli, g_ids.answer, NULL, NULL), HM_SUCCESS);
    double end = bulk_now_ms() + HANG_GUARD_MS;
    while (w.calls == 0 && bulk_now_ms() < end) {
        hm_progress(g_cli.ctx, 1);
        hm_trigger(g_cli.ctx, UINT32_MAX, NULL);
    }
    hmi_swrma_stats(g_cli.ctx->c_na, &after);
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.ret, HM_SUCCESS);
    assert_int_equal(bulk_pattern_find(g_local, PULL, 3, 0), PULL);
    assert_int_equal(after.ss_malformed, before.ss_malformed);
    struct s_stats st;
    server_stats(&st); /* the same connection still serves RPCs */
    hm_bulk_free(region);
}

/* A pull from an owner that never answers ends at its timeout, with HM_TIMEOUT. */
static void test_timeout(void **state)
{
    (void)state;
    hm_bulk_t *region = s_expose(&g_cli, &g_ids);
    assert_non_null(region);
    static struct pull_wait w; /* static: the op may outlive a failed test */
    w = (struct pull_wait){0};
    hm_bulk_xfer_t x = {.op = HM_BULK_PULL, .origin_addr = g_cli.server, .origin = region,
                        .local = g_local_bulk, .size = PULL};
    hm_bulk_opts_t opts = {.field_mask = HM_BULK_OPT_TIMEOUT, .timeout_ms = 300};
    assert_int_equal(hm_bulk_transfer(g_cli.ctx, &x, &opts, pull_wait_cb, &w, NULL),
                     HM_SUCCESS);
    char line[64];
    assert_int_equal(recv_progressing(&g_server.child, line, sizeof(line)), 0); /* "id <hex>" */
    double start = bulk_now_ms(), end = start + HANG_GUARD_MS;
    while (w.calls == 0 && bulk_now_ms() < end) {
        hm_progress(g_cli.ctx, 1);
        hm_trigger(g_cli.ctx, UINT32_MAX, NULL);
    }
    printf("pull held by its owner: %s after %.0f ms\n",
           w.calls ? hm_strerror(w.ret) : "still pending", bulk_now_ms() - start);
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.ret, HM_TIMEOUT);
    struct s_stats st;
    server_stats(&st); /* the same connection still serves RPCs */
    hm_bulk_free(region);
}

/* Canceled pulls: the owner drops their jobs on CANCEL; unknown CANCELs are ignored. */
static void test_cancel(void **state)
{
    (void)state;
    hm_bulk_t *region = s_expose(&g_cli, &g_ids);
    assert_non_null(region);
    enum { N = 4 };
    hm_bulk_op_id_t *ops[N];
    for (int i = 0; i < N; i++) {
        hm_bulk_xfer_t x = {.op = HM_BULK_PULL, .origin_addr = g_cli.server,
                            .origin = region, .local = g_local_bulk, .size = BIG};
        assert_int_equal(hm_bulk_transfer(g_cli.ctx, &x, NULL, NULL, NULL, &ops[i]),
                         HM_SUCCESS);
    }
    struct s_stats st;
    server_stats(&st); /* the owner has the gets as jobs (32 MiB are not sent yet) */
    printf("owner jobs before cancel: %llu\n", (unsigned long long)st.jobs);
    for (int i = 0; i < N; i++)
        assert_int_equal(hm_bulk_cancel(ops[i]), HM_SUCCESS);
    struct hmi_swrma_stats mine;
    hmi_swrma_stats(g_cli.ctx->c_na, &mine);
    double end = bulk_now_ms() + HANG_GUARD_MS;
    do {
        server_stats(&st);
    } while ((st.jobs != 0 || st.cancels + st.cancel_unknown < mine.ss_cancels_sent) &&
             bulk_now_ms() < end);
    printf("cancels sent %llu, owner: jobs %llu, dropped by cancel %llu, unknown %llu\n",
           (unsigned long long)mine.ss_cancels_sent, (unsigned long long)st.jobs,
           (unsigned long long)st.cancels, (unsigned long long)st.cancel_unknown);
    assert_true(mine.ss_cancels_sent >= 1);
    assert_int_equal(st.jobs, 0);
    assert_true(st.cancels >= 1);
    assert_int_equal(st.cancels + st.cancel_unknown, mine.ss_cancels_sent);
    /* CANCELs for ids the owner never saw: counted there (owner_cancel sends nothing). */
    for (unsigned int i = 0; i < 16; i++)
        hmi_swrma_cancel_send(g_cli.ctx->c_na->x_rma, g_cli.server->a_na, 0xabc000u + i);
    uint64_t unknown0 = st.cancel_unknown;
    end = bulk_now_ms() + HANG_GUARD_MS;
    do {
        server_stats(&st);
    } while (st.cancel_unknown < unknown0 + 16 && bulk_now_ms() < end);
    assert_int_equal(st.cancel_unknown, unknown0 + 16);
    /* The connection moves bytes as before. */
    memset(g_local, 0, PULL);
    assert_int_equal(pull(region, 0, PULL), HM_SUCCESS);
    assert_int_equal(bulk_pattern_find(g_local, PULL, 3, 0), PULL);
    hm_bulk_free(region);
}

/*
 * The good client's `count` transfers of `len` bytes each over the region,
 * one after the other: pulls must bring the pattern the region holds;
 * pushes write that same pattern back (1 MiB pushes are many PUT_DATA
 * messages, so more PUT_ACKs at once than the client's share of the
 * owner's send buffers). How many completed whole; the first bad: *bad.
 */
static unsigned int good_transfers(hm_bulk_t *region, hm_bulk_op_t op, unsigned int count,
                                   size_t len, hm_return_t *bad)
{
    unsigned int ok = 0;
    *bad = HM_SUCCESS;
    for (unsigned int i = 0; i < count; i++) {
        size_t off = (size_t)i * len;
        if (op == HM_BULK_PULL)
            memset(g_local, 0, len);
        else
            bulk_pattern_fill(g_local, len, 3, off);
        hm_bulk_xfer_t x = {.op = op, .origin_addr = g_cli.server, .origin = region,
                            .origin_off = off, .local = g_local_bulk, .size = len};
        hm_return_t ret = bulk_transfer_wait(&g_cli, &x, NULL, HANG_GUARD_MS);
        if (ret == HM_SUCCESS && op == HM_BULK_PULL &&
            bulk_pattern_find(g_local, len, 3, off) != len)
            ret = HM_PROTOCOL_ERROR;
        if (ret != HM_SUCCESS) {
            *bad = ret;
            break; /* one never-completing transfer shows it; the rest would wait as long */
        }
        ok++;
    }
    return ok;
}

/* One peer's flood of GET_REQs: its excess refused, a good client's pulls all served. */
static void test_peer_cap(void **state)
{
    (void)state;
    hm_bulk_t *region = s_expose(&g_cli, &g_ids);
    assert_non_null(region);
    struct s_stats st0, st;
    server_stats(&st0);
    struct hm_test_child attacker;
    char line[64];
    assert_int_equal(attacker_spawn(&attacker, "flood", g_server.uri, 0), 0);
    assert_int_equal(hm_test_recv(&attacker, line, sizeof(line), 20000), 0);
    assert_int_equal(hm_test_recv(&g_server.child, line, sizeof(line), 20000), 0);
    assert_string_equal(line, "paused");
    assert_int_equal(hm_test_send(&attacker, "flood"), 0);
    assert_int_equal(hm_test_recv(&attacker, line, sizeof(line), 30000), 0);
    assert_string_equal(line, "sent");
    assert_int_equal(hm_test_send(&g_server.child, "go"), 0);
    hm_return_t bad;
    unsigned int ok = good_transfers(region, HM_BULK_PULL, GOOD_PULLS, GOOD_PULL_LEN, &bad);
    if (ok != GOOD_PULLS)
        printf("good pull %u: %s\n", ok, hm_strerror(bad));
    /* "sent" means posted: on ucx+shm most of the flood waits in the
     * attacker's queue while the server is held, and reaches the owner
     * after "go", maybe after the good pulls have ended. */
    double end = bulk_now_ms() + HANG_GUARD_MS;
    do {
        server_stats(&st);
    } while (st.overloaded == st0.overloaded && bulk_now_ms() < end);
    printf("flood of %u: %llu refused over the peer cap, %llu over the context cap; "
           "good client %u/%u\n",
           FLOOD, (unsigned long long)(st.overloaded - st0.overloaded),
           (unsigned long long)(st.busy - st0.busy), ok, GOOD_PULLS);
    assert_int_equal(hm_test_send(&attacker, "stop"), 0);
    assert_int_equal(hm_test_wait(&attacker, 60), 0);
    assert_int_equal(ok, GOOD_PULLS);
    assert_true(st.overloaded - st0.overloaded > 0);
    assert_int_equal(st.busy, st0.busy); /* the context's cap was never reached */
    hm_bulk_free(region);
}

/* Start STALLERS attackers that ask and stop reading, and SIGSTOP them; false if one failed. */
static bool stallers_start(struct hm_test_child *attackers)
{
    bool sent = true;
    for (unsigned int a = 0; a < STALLERS; a++) {
        char line[64];
        assert_int_equal(attacker_spawn(&attackers[a], "stall", g_server.uri, 0), 0);
        int got = hm_test_recv(&attackers[a], line, sizeof(line), 30000);
        if (got != 0 || strcmp(line, "sent") != 0)
            printf("staller %u: %s\n", a, got == 0 ? line : "no line in 30 s");
        sent = sent && got == 0 && strcmp(line, "sent") == 0 &&
               kill(attackers[a].pid, SIGSTOP) == 0;
    }
    return sent;
}

/* What the stallers cost the owner while the good client pushed and pulled. */
struct stallers_result {
    bool sent;              /* every staller asked and was stopped */
    unsigned int pushed;    /* good pushes complete */
    unsigned int ok;        /* good pulls complete */
    hm_return_t bad;        /* the first that was not */
    struct s_stats st0, st; /* the owner's counters before and after */
};

/* Stallers, then the good client's pulls; the stallers are killed by their pids. */
static void stallers_run(hm_bulk_t *region, struct stallers_result *r, const char *what)
{
    server_stats(&r->st0);
    struct hm_test_child attackers[STALLERS];
    r->sent = stallers_start(attackers);
    r->pushed = r->sent ? good_transfers(region, HM_BULK_PUSH, GOOD_PUSHES, GOOD_PUSH_LEN,
                                         &r->bad)
                        : 0;
    r->ok = r->sent && r->pushed == GOOD_PUSHES
                ? good_transfers(region, HM_BULK_PULL, GOOD_PULLS, GOOD_PULL_LEN, &r->bad)
                : 0;
    if (r->sent)
        server_stats(&r->st);
    for (unsigned int a = 0; a < STALLERS; a++) /* by their pids, stopped */
        assert_int_equal(hm_test_child_kill(&attackers[a]), -SIGKILL);
    printf("%s: %s; good client pushes %u/%u, pulls %u/%u (%s); owner jobs %llu, "
           "share waits %llu, peers given up %llu\n",
           what, r->sent ? "4 asked 64 x 8 MiB each and stopped" : "never sent", r->pushed,
           GOOD_PUSHES, r->ok, GOOD_PULLS, hm_strerror(r->bad),
           r->sent ? (unsigned long long)r->st.jobs : 0ull,
           r->sent ? (unsigned long long)(r->st.share_waits - r->st0.share_waits) : 0ull,
           r->sent ? (unsigned long long)(r->st.stalled - r->st0.stalled) : 0ull);
    assert_true(r->sent);
}

/*
 * A peer that asks and stops reading (SIGSTOPped): the good client's pulls
 * from the same owner all complete while the attacker is stopped. With
 * buffers to spare nobody waits, so the stopped peers are not given up.
 */
static void test_stalled_reader(void **state)
{
    (void)state;
    hm_bulk_t *region = s_expose(&g_cli, &g_ids);
    assert_non_null(region);
    static struct stallers_result r;
    stallers_run(region, &r, "stalled readers");
    assert_int_equal(r.pushed, GOOD_PUSHES);
    assert_int_equal(r.ok, GOOD_PULLS);
    assert_true(r.st.jobs >= 1);                       /* the attacker's, never read */
    assert_true(r.st.share_waits > r.st0.share_waits); /* and held back at its share */
    assert_int_equal(r.st.stalled, r.st0.stalled);     /* nobody waited: left alone */
    hm_bulk_free(region);
}

/* Does a send to a peer that stops reading stay in flight on this protocol? */
static bool sends_can_stall(void)
{
    return strncmp(g_protocol, "ofi+shm", 7) != 0; /* its sends are injects (ofi plugin) */
}

/*
 * A coalition that asks and stops reading, against an owner short of what
 * the good client needs once they hold theirs (the setup says which: send
 * buffers, or job records): the good client's pulls still all complete,
 * because the owner gives the stallers up once they have taken nothing for
 * HM_SWRMA_STALL_MS (500) while the good client waits. Without that (the
 * variable 0) the first good pull never completed on ucx+tcp, ucx+shm and
 * ofi+tcp.
 */
static void test_stalled_coalition(void **state)
{
    const char *what = *state;
    hm_bulk_t *region = s_expose(&g_cli, &g_ids);
    assert_non_null(region);
    static struct stallers_result r;
    stallers_run(region, &r, what);
    assert_int_equal(r.pushed, GOOD_PUSHES);
    assert_int_equal(r.ok, GOOD_PULLS);
    if (sends_can_stall()) {
        assert_true(r.st.stalled > r.st0.stalled);
        assert_true(r.st.stalled - r.st0.stalled <= STALLERS);
    }
    /* The owner lives on: a pull after the coalition, and an RPC. */
    assert_int_equal(pull(region, 0, 65536), HM_SUCCESS);
    struct s_stats st;
    server_stats(&st);
    hm_bulk_free(region);
}

static void many_cb(const hm_bulk_cb_info_t *info)
{
    struct pull_wait *w = info->arg;
    w->calls++;
    if (info->ret != HM_SUCCESS && w->ret == HM_SUCCESS)
        w->ret = info->ret;
}

/*
 * One honest client's MANY pulls at once, the owner held while they are
 * asked: twice its per-peer job cap, all must succeed, none refused there.
 */
static void test_many_gets(void **state)
{
    (void)state;
    hm_bulk_t *region = s_expose(&g_cli, &g_ids);
    assert_non_null(region);
    struct s_stats st0, st;
    server_stats(&st0);
    struct hmi_swrma_stats mine0, mine;
    hmi_swrma_stats(g_cli.ctx->c_na, &mine0);
    hm_handle_t *pause;
    assert_int_equal(hm_handle_create(g_cli.ctx, g_cli.server, g_ids.pause, &pause),
                     HM_SUCCESS);
    assert_int_equal(hm_forward(pause, NULL, flood_pause_cb, NULL, NULL), HM_SUCCESS);
    char line[64];
    assert_int_equal(recv_progressing(&g_server.child, line, sizeof(line)), 0);
    assert_string_equal(line, "paused");
    memset(g_local, 0, BIG);
    static struct pull_wait w; /* static: ops may outlive a failed test */
    w = (struct pull_wait){.ret = HM_SUCCESS};
    for (unsigned int i = 0; i < MANY; i++) {
        hm_bulk_op_id_t *op;
        hm_bulk_xfer_t x = {.op = HM_BULK_PULL, .origin_addr = g_cli.server,
                            .origin = region, .origin_off = (size_t)i * MANY_LEN,
                            .local = g_local_bulk, .local_off = (size_t)i * MANY_LEN,
                            .size = MANY_LEN};
        assert_int_equal(hm_bulk_transfer(g_cli.ctx, &x, NULL, many_cb, &w, &op), HM_SUCCESS);
    }
    for (unsigned int i = 0; i < 100; i++) /* the requests the owner will find at once */
        hm_progress(g_cli.ctx, 1);
    assert_int_equal(hm_test_send(&g_server.child, "go"), 0);
    double end = bulk_now_ms() + 3 * HANG_GUARD_MS;
    while (w.calls < MANY && bulk_now_ms() < end) {
        hm_progress(g_cli.ctx, 1);
        hm_trigger(g_cli.ctx, UINT32_MAX, NULL);
    }
    server_stats(&st);
    hmi_swrma_stats(g_cli.ctx->c_na, &mine);
    printf("%u pulls at once: %u done, first error %s; owner refused %llu over the peer cap; "
           "requester window waits %llu\n",
           MANY, w.calls, hm_strerror(w.ret), (unsigned long long)(st.overloaded - st0.overloaded),
           (unsigned long long)(mine.ss_window_waits - mine0.ss_window_waits));
    assert_int_equal(w.calls, MANY);
    assert_int_equal(w.ret, HM_SUCCESS);
    assert_int_equal(st.overloaded, st0.overloaded);
    assert_int_equal(bulk_pattern_find(g_local, BIG, 3, 0), BIG);
    assert_true(mine.ss_window_waits > mine0.ss_window_waits);
    hm_handle_destroy(pause);
    hm_bulk_free(region);
}

int main(int argc, char **argv)
{
    setenv("HM_CMA", "0", 1); /* shm classes: RMA over messages, not CMA (every process) */
    if (argc == 6 && strcmp(argv[1], "--attacker") == 0)
        return attacker_main(argv);
    g_self = argv[0];
    g_protocol = argc > 1 ? argv[1] : "ucx+tcp://127.0.0.1:0";
    hm_test_alarm(280, "test_hostile_swrma");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_forged_get_data, start_forging, stop),
        cmocka_unit_test_setup_teardown(test_foreign_replies, start_holding, stop),
        cmocka_unit_test_setup_teardown(test_timeout, start_holding, stop),
        cmocka_unit_test_setup_teardown(test_cancel, start_honest, stop),
        cmocka_unit_test_setup_teardown(test_peer_cap, start_honest, stop),
        cmocka_unit_test_setup_teardown(test_stalled_reader, start_honest, stop),
        cmocka_unit_test_setup_teardown(test_stalled_coalition, start_coalition_bufs,
                                        stop_coalition),
        cmocka_unit_test_setup_teardown(test_stalled_coalition, start_coalition_jobs,
                                        stop_coalition),
        cmocka_unit_test_setup_teardown(test_many_gets, start_honest, stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
