/*
 * Hostile peers against owner-checked bulk (issue 13). The server is a
 * forked child that exposes two regions of one arena, each between "secret"
 * bytes no peer was given: RW (read-write) and RO (read-only). This test
 * process is the attacker: it decodes the server's handles, tampers with
 * them (length, offset, slot, key, access, a freed handle) and sends raw
 * RMA-over-messages requests built by hand, on its one connection.
 *
 * Every attack must fail at once with HM_PERMISSION (or the transfer's
 * defined error at post), never by a timeout (5 s is only a hang guard);
 * the secret and the read-only region must stay unchanged, nothing of them
 * may reach the attacker, and the same connection must then run a normal
 * RPC and a normal transfer. Promises of the issue:
 *   (b) a transfer succeeds only within a live region, with its access;
 *   (c) keys are random per registration;
 *   (d) failure is fast, and the connection stays usable.
 *
 * argv[1]: the protocol URI.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <cmocka.h>

#include "bulk/bulk_internal.h"
#include "bulk_test.h"
#include "core/core_internal.h"
#include "na/na_rma.h"
#include "na/na_swrma_wire.h"

#define REGION 4096u
#define HANG_GUARD_MS 5000u
#define SECRET_SEED 0x5e
#define RO_SEED 0x0a
#define RACE_SIZE (1u << 20)

/* Arena: secret | RW | secret | RO | secret. */
enum { AR_RW = REGION, AR_RO = 3 * REGION, AR_SIZE = 5 * REGION };

/* ---- the RPCs -------------------------------------------------------------- */

struct h_ids {
    hm_id_t expose, check, free_rw, stats, race, race_free, shutdown;
};

struct h_expose_out {
    hm_bulk_t *rw;
    hm_bulk_t *ro;
};

struct h_check_in {
    uint8_t rw_seed; /* RW must hold this pattern (0: not checked) */
};

struct h_check_out {
    uint8_t secret_ok;
    uint8_t ro_ok;
    uint8_t rw_ok;
};

struct h_stats {
    uint64_t refused, busy, dropped, malformed;
};

static const hm_proc_field_t expose_fields[] = {
    HM_PROC_FIELD(struct h_expose_out, rw, hm_proc_bulk),
    HM_PROC_FIELD(struct h_expose_out, ro, hm_proc_bulk),
};
static hm_return_t expose_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, expose_fields, HM_PROC_FIELD_COUNT(expose_fields));
}
static const hm_proc_field_t check_in_fields[] = {
    HM_PROC_FIELD(struct h_check_in, rw_seed, hm_proc_uint8),
};
static hm_return_t check_in_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, check_in_fields, HM_PROC_FIELD_COUNT(check_in_fields));
}
static const hm_proc_field_t check_out_fields[] = {
    HM_PROC_FIELD(struct h_check_out, secret_ok, hm_proc_uint8),
    HM_PROC_FIELD(struct h_check_out, ro_ok, hm_proc_uint8),
    HM_PROC_FIELD(struct h_check_out, rw_ok, hm_proc_uint8),
};
static hm_return_t check_out_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, check_out_fields, HM_PROC_FIELD_COUNT(check_out_fields));
}
static const hm_proc_field_t stats_fields[] = {
    HM_PROC_FIELD(struct h_stats, refused, hm_proc_uint64),
    HM_PROC_FIELD(struct h_stats, busy, hm_proc_uint64),
    HM_PROC_FIELD(struct h_stats, dropped, hm_proc_uint64),
    HM_PROC_FIELD(struct h_stats, malformed, hm_proc_uint64),
};
static hm_return_t stats_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, stats_fields, HM_PROC_FIELD_COUNT(stats_fields));
}
static const hm_proc_field_t race_fields[] = {
    HM_PROC_FIELD(struct h_expose_out, rw, hm_proc_bulk),
};
static hm_return_t race_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, race_fields, HM_PROC_FIELD_COUNT(race_fields));
}

/* ---- the server ------------------------------------------------------------- */

static struct {
    hm_context_t *ctx;
    struct h_ids ids;
    uint8_t arena[AR_SIZE];
    hm_bulk_t *rw, *ro;
    uint8_t *race_buf;   /* heap: freed right after its handle (ASan sees a late touch) */
    hm_bulk_t *race;
    bool shutdown;
} hs;

static void hs_respond(hm_handle_t *handle, void *out)
{
    hm_respond(handle, out, NULL, NULL);
    hm_handle_destroy(handle);
}

static hm_bulk_t *hs_region(size_t at, hm_bulk_perm_t perm)
{
    void *buf = hs.arena + at;
    size_t size = REGION;
    hm_bulk_t *bulk = NULL;
    if (hm_bulk_create(hm_context_class(hs.ctx), 1, &buf, &size, perm, &bulk) != HM_SUCCESS)
        return NULL;
    return bulk;
}

/* Fresh registrations (fresh keys) of RW (zeroed) and RO (its pattern). */
static hm_return_t on_expose(hm_handle_t *handle)
{
    hm_bulk_free(hs.rw);
    hm_bulk_free(hs.ro);
    memset(hs.arena + AR_RW, 0, REGION);
    hs.rw = hs_region(AR_RW, HM_BULK_READ_WRITE);
    hs.ro = hs_region(AR_RO, HM_BULK_READ_ONLY);
    struct h_expose_out out = {.rw = hs.rw, .ro = hs.ro};
    hs_respond(handle, &out);
    return HM_SUCCESS;
}

static bool hs_secret_ok(void)
{
    return bulk_pattern_find(hs.arena, REGION, SECRET_SEED, 0) == REGION &&
           bulk_pattern_find(hs.arena + 2 * REGION, REGION, SECRET_SEED, 2 * REGION) == REGION &&
           bulk_pattern_find(hs.arena + 4 * REGION, REGION, SECRET_SEED, 4 * REGION) == REGION;
}

static hm_return_t on_check(hm_handle_t *handle)
{
    struct h_check_in in = {0};
    if (hm_get_input(handle, &in) == HM_SUCCESS)
        hm_free_input(handle, &in);
    struct h_check_out out = {
        .secret_ok = hs_secret_ok(),
        .ro_ok = bulk_pattern_find(hs.arena + AR_RO, REGION, RO_SEED, 0) == REGION,
        .rw_ok = in.rw_seed == 0 ||
                 bulk_pattern_find(hs.arena + AR_RW, REGION, in.rw_seed, 0) == REGION,
    };
    hs_respond(handle, &out);
    return HM_SUCCESS;
}

static hm_return_t on_free_rw(hm_handle_t *handle)
{
    hm_bulk_free(hs.rw);
    hs.rw = NULL;
    hs_respond(handle, NULL);
    return HM_SUCCESS;
}

static hm_return_t on_stats(hm_handle_t *handle)
{
    /* What an application sees (hm_context_stats), and the engine's own busy count. */
    hm_stats_t pub = {.size = sizeof(pub)};
    struct hmi_swrma_stats st;
    hmi_swrma_stats(hs.ctx->c_na, &st);
    if (hm_context_stats(hs.ctx, &pub) != HM_SUCCESS)
        return HM_FAULT;
    struct h_stats out = {.refused = pub.rma_refused, .busy = st.ss_busy,
                          .dropped = pub.rma_dropped, .malformed = pub.rma_malformed};
    hs_respond(handle, &out);
    return HM_SUCCESS;
}

static hm_return_t on_race(hm_handle_t *handle)
{
    struct h_expose_out out = {0};
    hs.race_buf = malloc(RACE_SIZE);
    if (hs.race_buf != NULL) {
        bulk_pattern_fill(hs.race_buf, RACE_SIZE, 7, 0);
        void *buf = hs.race_buf;
        size_t size = RACE_SIZE;
        if (hm_bulk_create(hm_context_class(hs.ctx), 1, &buf, &size, HM_BULK_READ_WRITE,
                           &hs.race) != HM_SUCCESS)
            hs.race = NULL;
    }
    out.rw = hs.race;
    hs_respond(handle, &out);
    return HM_SUCCESS;
}

/* Free the race region's handle, then its memory, while a peer is moving it. */
static hm_return_t on_race_free(hm_handle_t *handle)
{
    hm_bulk_free(hs.race);
    hs.race = NULL;
    free(hs.race_buf);
    hs.race_buf = NULL;
    hs_respond(handle, NULL);
    return HM_SUCCESS;
}

static hm_return_t on_shutdown(hm_handle_t *handle)
{
    hs.shutdown = true;
    hs_respond(handle, NULL);
    return HM_SUCCESS;
}

static hm_return_t h_register(hm_class_t *cls, struct h_ids *ids, bool server)
{
    struct {
        const char *name;
        hm_proc_cb_t in, out;
        hm_rpc_handler_t cb;
        hm_id_t *id;
    } rpcs[] = {
        {"h.expose", NULL, expose_proc, on_expose, &ids->expose},
        {"h.check", check_in_proc, check_out_proc, on_check, &ids->check},
        {"h.free_rw", NULL, NULL, on_free_rw, &ids->free_rw},
        {"h.stats", NULL, stats_proc, on_stats, &ids->stats},
        {"h.race", NULL, race_proc, on_race, &ids->race},
        {"h.race_free", NULL, NULL, on_race_free, &ids->race_free},
        {"h.shutdown", NULL, NULL, on_shutdown, &ids->shutdown},
    };
    for (size_t i = 0; i < sizeof(rpcs) / sizeof(rpcs[0]); i++) {
        hm_return_t ret = hm_register(cls, rpcs[i].name, rpcs[i].in, rpcs[i].out,
                                      server ? rpcs[i].cb : NULL, rpcs[i].id);
        if (ret != HM_SUCCESS)
            return ret;
    }
    return HM_SUCCESS;
}

static int hostile_server_main(void *arg)
{
    hm_class_t *cls;
    if (hm_class_create(arg, NULL, &cls) != HM_SUCCESS)
        return 2;
    if (h_register(cls, &hs.ids, true) != HM_SUCCESS ||
        hm_context_create(cls, NULL, &hs.ctx) != HM_SUCCESS)
        return 3;
    for (size_t i = 0; i < AR_SIZE; i += REGION)
        bulk_pattern_fill(hs.arena + i, REGION, i == AR_RO ? RO_SEED : SECRET_SEED,
                          i == AR_RO ? 0 : i);
    if (hm_test_ready_self(hs.ctx) != 0)
        return 4;
    while (!hs.shutdown) {
        hm_progress(hs.ctx, 1);
        hm_trigger(hs.ctx, UINT32_MAX, NULL);
    }
    hm_bulk_free(hs.rw);
    hm_bulk_free(hs.ro);
    hm_bulk_free(hs.race);
    free(hs.race_buf);
    hm_test_context_close(hs.ctx, 200);
    return hm_class_destroy(cls) == HM_SUCCESS ? 0 : 5;
}

/* ---- the attacker --------------------------------------------------------------- */

static const char *g_protocol;
static struct hm_test_server g_server; /* its process and URI */
static struct bulk_client g_cli;
static struct h_ids g_ids;
static uint8_t g_local[2 * REGION];
static hm_bulk_t *g_local_bulk;

static int h_setup(void **state)
{
    (void)state;
    char mine[128];
    if (hm_test_server_start(&g_server, hostile_server_main, (void *)g_protocol, 300) != 0 ||
        hm_test_client_uri(g_protocol, mine, sizeof(mine)) != 0)
        return -1;
    memset(&g_cli, 0, sizeof(g_cli));
    if (hm_class_create(mine, NULL, &g_cli.cls) != HM_SUCCESS ||
        h_register(g_cli.cls, &g_ids, false) != HM_SUCCESS ||
        hm_context_create(g_cli.cls, NULL, &g_cli.ctx) != HM_SUCCESS ||
        hm_addr_lookup(g_cli.ctx, g_server.uri, &g_cli.server) != HM_SUCCESS)
        return -1;
    void *buf = g_local;
    size_t size = sizeof(g_local);
    return hm_bulk_create(g_cli.cls, 1, &buf, &size, HM_BULK_READ_WRITE, &g_local_bulk) ==
                   HM_SUCCESS
               ? 0
               : -1;
}

static int h_teardown(void **state)
{
    (void)state;
    hm_bulk_free(g_local_bulk);
    bulk_call(&g_cli, g_ids.shutdown, NULL, NULL);
    int status = hm_test_server_stop_ctx(&g_server, 20, g_cli.ctx);
    return status == 0 && bulk_client_close(&g_cli) == HM_SUCCESS ? 0 : -1;
}

static void h_expose(struct h_expose_out *out)
{
    hm_handle_t *handle;
    struct h_expose_out o = {0};
    assert_int_equal(hm_handle_create(g_cli.ctx, g_cli.server, g_ids.expose, &handle),
                     HM_SUCCESS);
    assert_int_equal(hm_call(handle, NULL, &o, 20000), HM_SUCCESS);
    assert_non_null(o.rw);
    assert_non_null(o.ro);
    hm_bulk_ref(o.rw);
    hm_bulk_ref(o.ro);
    *out = o; /* our references: hm_free_output drops the output's own */
    hm_free_output(handle, &o);
    hm_handle_destroy(handle);
}

static void h_expose_free(struct h_expose_out *e)
{
    hm_bulk_free(e->rw);
    hm_bulk_free(e->ro);
}

/* A transfer of `size` bytes at `off` of `remote`, bounded by the hang guard. */
static hm_return_t h_xfer(hm_bulk_op_t op, hm_bulk_t *remote, size_t off, size_t size)
{
    hm_bulk_xfer_t x = {.op = op, .origin_addr = g_cli.server, .origin = remote,
                        .origin_off = off, .local = g_local_bulk, .size = size};
    double t0 = bulk_now_ms();
    hm_return_t ret = bulk_transfer_wait(&g_cli, &x, NULL, HANG_GUARD_MS);
    assert_int_not_equal(ret, HM_TIMEOUT); /* (d): an answer, never a timeout */
    assert_true(bulk_now_ms() - t0 < HANG_GUARD_MS);
    return ret;
}

/* Nothing of the secret reached us: our buffer holds zeros (we pulled nothing). */
static void h_assert_nothing_leaked(void)
{
    assert_int_equal(bulk_zero_find(g_local, sizeof(g_local)), sizeof(g_local));
}

/*
 * (d) The server kept serving on this connection: a normal RPC says the
 * secret and RO are intact, and a normal push then pull of RW works.
 */
static void h_assert_server_sane(void)
{
    struct h_check_in in = {0};
    struct h_check_out out = {0};
    assert_int_equal(bulk_call(&g_cli, g_ids.check, &in, &out), HM_SUCCESS);
    assert_true(out.secret_ok);
    assert_true(out.ro_ok);
    struct h_expose_out e;
    h_expose(&e);
    bulk_pattern_fill(g_local, REGION, 0x33, 0);
    assert_int_equal(h_xfer(HM_BULK_PUSH, e.rw, 0, REGION), HM_SUCCESS);
    in.rw_seed = 0x33;
    assert_int_equal(bulk_call(&g_cli, g_ids.check, &in, &out), HM_SUCCESS);
    assert_true(out.rw_ok && out.secret_ok && out.ro_ok);
    memset(g_local, 0, sizeof(g_local));
    assert_int_equal(h_xfer(HM_BULK_PULL, e.ro, 0, REGION), HM_SUCCESS);
    assert_int_equal(bulk_pattern_find(g_local, REGION, RO_SEED, 0), REGION);
    memset(g_local, 0, sizeof(g_local));
    h_expose_free(&e);
}

/* The packed NA key of segment 0 of a decoded remote handle (not yet used). */
static uint8_t *h_key(hm_bulk_t *remote)
{
    assert_int_equal(remote->b_count, 1);
    assert_int_equal(remote->b_key_lens[0], HMI_NA_KEY_SIZE);
    assert_null(atomic_load(&remote->b_rkeys)); /* keys not unpacked yet */
    return remote->b_keys[0];
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Make the handle (and its key) claim `len` bytes, so every local check passes. */
static void h_claim_len(hm_bulk_t *remote, uint64_t len)
{
    put64(h_key(remote) + 32, len);
    remote->b_lens[0] = len;
    remote->b_size = len;
}

/* (b)(d) A length or offset past the region: refused by the owner, at once. */
static void test_past_the_region(void **state)
{
    (void)state;
    const struct { hm_bulk_op_t op; size_t off, size; } cases[] = {
        {HM_BULK_PULL, 0, REGION + 1},         /* tampered length */
        {HM_BULK_PULL, REGION, REGION},        /* shifted offset: the secret after RW */
        {HM_BULK_PULL, 1, REGION},             /* one byte past */
        {HM_BULK_PUSH, REGION - 8, 16},        /* write across the end */
        {HM_BULK_PUSH, REGION, REGION},        /* write into the secret */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct h_expose_out e;
        h_expose(&e);
        h_claim_len(e.rw, 3 * REGION);
        bulk_pattern_fill(g_local, sizeof(g_local), 0x77, 0);
        if (cases[i].op == HM_BULK_PULL)
            memset(g_local, 0, sizeof(g_local));
        assert_int_equal(h_xfer(cases[i].op, e.rw, cases[i].off, cases[i].size),
                         HM_PERMISSION);
        if (cases[i].op == HM_BULK_PULL)
            h_assert_nothing_leaked();
        memset(g_local, 0, sizeof(g_local));
        h_expose_free(&e);
        h_assert_server_sane();
    }
}

/* (b)(c)(d) A forged key or slot: random keys, a neighbour slot, an old key. */
static void test_forged_key(void **state)
{
    (void)state;
    for (int i = 0; i < 6; i++) {
        struct h_expose_out e;
        h_expose(&e);
        uint8_t *key = h_key(e.rw);
        if (i < 3) { /* random key words (never zero: the decoder refuses zero) */
            uint8_t rnd[16];
            assert_int_equal(getrandom(rnd, sizeof(rnd), 0), (ssize_t)sizeof(rnd));
            rnd[0] |= 1;
            rnd[8] |= 1;
            memcpy(key + 16 + (i == 1 ? 8 : 0), rnd, i == 2 ? 16 : 8);
        } else if (i == 3) { /* the RO region's slot with the RW key */
            memcpy(key + 12, h_key(e.ro) + 12, 4);
        } else { /* a slot nobody registered */
            uint32_t slot = i == 4 ? 200000u : 0xfffffff0u;
            memcpy(key + 12, &slot, 4);
        }
        memset(g_local, 0, sizeof(g_local));
        assert_int_equal(h_xfer(HM_BULK_PULL, e.rw, 0, REGION), HM_PERMISSION);
        h_assert_nothing_leaked();
        bulk_pattern_fill(g_local, REGION, 0x44, 0);
        h_expose_free(&e);
        memset(g_local, 0, sizeof(g_local));
        h_assert_server_sane();
    }
}

/* (c) Two registrations of the same bytes get different keys; the old one fails. */
static void test_keys_fresh(void **state)
{
    (void)state;
    struct h_expose_out a, b;
    h_expose(&a);
    uint8_t old[HMI_NA_KEY_SIZE];
    memcpy(old, h_key(a.rw), sizeof(old));
    h_expose(&b); /* the server freed a's handles and registered RW again */
    assert_true(get64(old + 16) != get64(h_key(b.rw) + 16) ||
                get64(old + 24) != get64(h_key(b.rw) + 24));
    memset(g_local, 0, sizeof(g_local));
    assert_int_equal(h_xfer(HM_BULK_PULL, a.rw, 0, REGION), HM_PERMISSION);
    assert_int_equal(h_xfer(HM_BULK_PUSH, a.rw, 0, REGION), HM_PERMISSION);
    h_expose_free(&a);
    h_expose_free(&b);
    h_assert_server_sane();
}

/* (b)(d) A handle the owner freed: refused, however many times. */
static void test_freed_handle(void **state)
{
    (void)state;
    struct h_expose_out e;
    h_expose(&e);
    assert_int_equal(bulk_call(&g_cli, g_ids.free_rw, NULL, NULL), HM_SUCCESS);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(h_xfer(HM_BULK_PULL, e.rw, 0, REGION), HM_PERMISSION);
        assert_int_equal(h_xfer(HM_BULK_PUSH, e.rw, 0, 64), HM_PERMISSION);
    }
    h_expose_free(&e);
    memset(g_local, 0, sizeof(g_local));
    h_assert_server_sane();
}

/* (b)(d) Writing into a read-only region, the handle and key claiming write. */
static void test_wrong_access(void **state)
{
    (void)state;
    struct h_expose_out e;
    h_expose(&e);
    /* Untampered: the requester refuses at post already. */
    assert_int_not_equal(h_xfer(HM_BULK_PUSH, e.ro, 0, REGION), HM_SUCCESS);
    h_expose_free(&e);
    h_expose(&e);
    h_key(e.ro)[6] = HM_NA_ACCESS_READ | HM_NA_ACCESS_WRITE;
    e.ro->b_perm = HM_BULK_READ_WRITE;
    bulk_pattern_fill(g_local, REGION, 0x55, 0);
    assert_int_equal(h_xfer(HM_BULK_PUSH, e.ro, 0, REGION), HM_PERMISSION);
    h_expose_free(&e);
    memset(g_local, 0, sizeof(g_local));
    h_assert_server_sane(); /* RO unchanged */
}

/* ---- raw messages --------------------------------------------------------------- */

static void raw_sent(hmi_na_op_t *op, hm_return_t status)
{
    (void)status;
    *(int *)op->o_arg = 1;
}

/* Send `len` raw bytes to the server on our connection and wait for the send. */
static void raw_send(const void *msg, size_t len)
{
    hmi_na_context_t *na = g_cli.ctx->c_na;
    hmi_na_class_t *cls = na->x_class;
    void *desc;
    void *buf = cls->c_ops.msg_buf_alloc(cls, cls->c_eager_limit, &desc);
    assert_non_null(buf);
    memcpy(buf, msg, len);
    int done = 0;
    hmi_na_op_t *op = hmi_na_op_create(cls);
    assert_non_null(op);
    op->o_cb = raw_sent;
    op->o_arg = &done;
    assert_int_equal(hmi_na_msg_send(na, g_cli.server->a_na, buf, len, desc, op), HM_SUCCESS);
    double end = bulk_now_ms() + HANG_GUARD_MS;
    while (!done && bulk_now_ms() < end)
        hm_progress(g_cli.ctx, 10);
    assert_true(done);
    hmi_na_op_destroy(op);
    cls->c_ops.msg_buf_free(cls, buf, desc);
}

static void h_server_stats(struct h_stats *st)
{
    assert_int_equal(bulk_call(&g_cli, g_ids.stats, NULL, st), HM_SUCCESS);
}

/* Progress until the server counted `refused` and `malformed` more (hang guard). */
static void raw_await(const struct h_stats *before, uint64_t refused, uint64_t malformed)
{
    struct h_stats now;
    double end = bulk_now_ms() + HANG_GUARD_MS;
    do {
        h_server_stats(&now);
    } while ((now.refused < before->refused + refused ||
              now.malformed < before->malformed + malformed) &&
             bulk_now_ms() < end);
    assert_int_equal(now.refused, before->refused + refused);
    assert_int_equal(now.malformed, before->malformed + malformed);
}

struct raw_key {
    uint32_t slot;
    struct hmi_keytab_key key;
};

static struct raw_key raw_key_of(hm_bulk_t *remote)
{
    const uint8_t *k = h_key(remote);
    struct raw_key rk;
    memcpy(&rk.slot, k + 12, 4);
    rk.key.k0 = get64(k + 16);
    rk.key.k1 = get64(k + 24);
    return rk;
}

/* Requests that parse but name bytes outside a live region: ERR, counted as refused. */
static unsigned int raw_refused(const struct raw_key *rw, const struct raw_key *ro)
{
    uint8_t msg[SWRMA_REQ_SIZE + 64];
    struct hmi_keytab_key bad = {rw->key.k0 ^ 1, rw->key.k1};
    const struct { uint8_t type; const struct raw_key *k; const struct hmi_keytab_key *key;
                   uint64_t off, len; } cases[] = {
        {SWRMA_GET_REQ, rw, &rw->key, UINT64_MAX - 10, 100},  /* offset wraps */
        {SWRMA_GET_REQ, rw, &rw->key, 8, UINT64_MAX},         /* length wraps */
        {SWRMA_GET_REQ, rw, &rw->key, REGION, 1},             /* the secret after RW */
        {SWRMA_GET_REQ, rw, &rw->key, 0, REGION + 1},
        {SWRMA_GET_REQ, rw, &bad, 0, 16},                     /* key off by one bit */
        {SWRMA_GET_REQ, ro, &rw->key, 0, 16},                 /* another slot's key */
        {SWRMA_PUT_DATA, ro, &ro->key, 0, 64},                /* write a read-only region */
        {SWRMA_PUT_DATA, rw, &rw->key, UINT64_MAX - 31, 64},  /* offset wraps */
        {SWRMA_PUT_DATA, rw, &rw->key, REGION - 32, 64},      /* across the end */
    };
    unsigned int n = sizeof(cases) / sizeof(cases[0]);
    for (unsigned int i = 0; i < n; i++) {
        size_t data = cases[i].type == SWRMA_PUT_DATA ? (size_t)cases[i].len : 0;
        memset(msg, 0x99, sizeof(msg));
        hmi_swrma_encode_req(msg, cases[i].type, 0xdead0000u + i, cases[i].k->slot,
                             cases[i].key, cases[i].off, cases[i].len);
        raw_send(msg, SWRMA_REQ_SIZE + data);
    }
    return n;
}

/* Messages that do not parse: dropped and counted as malformed. */
static unsigned int raw_malformed(const struct raw_key *rw)
{
    uint8_t msg[SWRMA_REQ_SIZE + 64];
    unsigned int n = 0;
    hmi_swrma_encode_req(msg, SWRMA_GET_REQ, 1, rw->slot, &rw->key, 0, 16);
    for (size_t len = 4; len < SWRMA_REQ_SIZE; len += 5, n++) /* truncated */
        raw_send(msg, len);
    raw_send(msg, SWRMA_REQ_SIZE + 1); /* a GET_REQ with a tail */
    n++;
    hmi_swrma_encode_req(msg, SWRMA_PUT_DATA, 2, rw->slot, &rw->key, 0, 64);
    raw_send(msg, SWRMA_REQ_SIZE + 32); /* the length claims more than it carries */
    hmi_swrma_encode_req(msg, SWRMA_PUT_DATA, 3, rw->slot, &rw->key, 0, 16);
    raw_send(msg, SWRMA_REQ_SIZE + 32); /* and less */
    hmi_swrma_encode_req(msg, SWRMA_PUT_DATA, 4, rw->slot, &rw->key, 0, UINT64_MAX);
    raw_send(msg, SWRMA_REQ_SIZE + 8);  /* a length that wraps the message */
    n += 3;
    hmi_swrma_encode_req(msg, SWRMA_GET_REQ, 5, rw->slot, &rw->key, 0, 16);
    msg[4] = 9; /* version */
    raw_send(msg, SWRMA_REQ_SIZE);
    msg[4] = SWRMA_VERSION;
    msg[5] = 77; /* type */
    raw_send(msg, SWRMA_REQ_SIZE);
    msg[5] = SWRMA_GET_REQ;
    msg[21] = 1; /* reserved */
    raw_send(msg, SWRMA_REQ_SIZE);
    n += 3;
    for (int i = 0; i < 32; i++, n++) { /* random bytes after the magic */
        uint8_t rnd[SWRMA_REQ_SIZE + 64];
        assert_true(getrandom(rnd, sizeof(rnd), 0) == (ssize_t)sizeof(rnd));
        memcpy(rnd, msg, 4);
        rnd[4] = SWRMA_VERSION;
        rnd[5] = (uint8_t)(i % 2 ? SWRMA_PUT_DATA : SWRMA_GET_REQ);
        rnd[6] = 1; /* reserved, so it never parses */
        raw_send(rnd, 16 + (size_t)(rnd[8] % (sizeof(rnd) - 16)));
    }
    return n;
}

/* (b)(d) Hand-built requests with lying, wrapping, truncated and random fields. */
static void test_raw_messages(void **state)
{
    (void)state;
    struct h_expose_out e;
    h_expose(&e);
    struct raw_key rw = raw_key_of(e.rw), ro = raw_key_of(e.ro);
    struct hmi_swrma_stats mine0, mine1;
    hmi_swrma_stats(g_cli.ctx->c_na, &mine0);
    struct h_stats before;
    h_server_stats(&before);
    unsigned int refused = raw_refused(&rw, &ro);
    raw_await(&before, refused, 0);
    /* Each refusal was answered at once (ERR for an id we never issued: "late"). */
    double end = bulk_now_ms() + HANG_GUARD_MS;
    do {
        hm_progress(g_cli.ctx, 10);
        hmi_swrma_stats(g_cli.ctx->c_na, &mine1);
    } while (mine1.ss_late < mine0.ss_late + refused && bulk_now_ms() < end);
    assert_int_equal(mine1.ss_late, mine0.ss_late + refused);
    h_server_stats(&before);
    raw_await(&before, 0, raw_malformed(&rw));
    h_expose_free(&e);
    h_assert_server_sane();
}

/*
 * (b) A legit transfer racing hm_bulk_free (and free()) on the owner's side
 * either completes or fails with HM_PERMISSION; the owner never touches the
 * freed memory (ASan builds would abort the server).
 */
static hm_bulk_t *race_expose(void)
{
    hm_handle_t *handle;
    struct h_expose_out o = {0};
    assert_int_equal(hm_handle_create(g_cli.ctx, g_cli.server, g_ids.race, &handle),
                     HM_SUCCESS);
    assert_int_equal(hm_call(handle, NULL, &o, 20000), HM_SUCCESS);
    assert_non_null(o.rw);
    hm_bulk_t *remote = o.rw;
    hm_bulk_ref(remote);
    hm_free_output(handle, &o);
    hm_handle_destroy(handle);
    return remote;
}

static void test_race_free(void **state)
{
    (void)state;
    uint8_t *big = malloc(RACE_SIZE);
    assert_non_null(big);
    void *buf = big;
    size_t size = RACE_SIZE;
    hm_bulk_t *local;
    assert_int_equal(hm_bulk_create(g_cli.cls, 1, &buf, &size, HM_BULK_READ_WRITE, &local),
                     HM_SUCCESS);
    unsigned int ok = 0, refused = 0;
    for (int i = 0; i < 16; i++) {
        hm_bulk_t *remote = race_expose();
        hm_bulk_xfer_t x = {.op = i % 2 ? HM_BULK_PUSH : HM_BULK_PULL,
                            .origin_addr = g_cli.server, .origin = remote,
                            .local = local, .size = RACE_SIZE};
        struct hm_test_outcome w = {0};
        hm_bulk_op_id_t *op;
        assert_int_equal(hm_bulk_transfer(g_cli.ctx, &x, NULL, hm_test_bulk_outcome_cb, &w, &op), HM_SUCCESS);
        assert_int_equal(bulk_call(&g_cli, g_ids.race_free, NULL, NULL), HM_SUCCESS);
        double end = bulk_now_ms() + HANG_GUARD_MS;
        while (w.calls == 0 && bulk_now_ms() < end) {
            hm_progress(g_cli.ctx, 10);
            hm_trigger(g_cli.ctx, UINT32_MAX, NULL);
        }
        assert_int_equal(w.calls, 1);
        assert_true(w.ret == HM_SUCCESS || w.ret == HM_PERMISSION);
        ok += w.ret == HM_SUCCESS;
        refused += w.ret == HM_PERMISSION;
        hm_bulk_free(remote);
    }
    printf("race: %u transfers completed, %u refused mid-way\n", ok, refused);
    hm_bulk_free(local);
    free(big);
    memset(g_local, 0, sizeof(g_local));
    h_assert_server_sane();
}

int main(int argc, char **argv)
{
    g_protocol = argc > 1 ? argv[1] : "ucx+tcp://127.0.0.1:0";
    hm_test_alarm(240, "test_hostile_bulk");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_past_the_region),
        cmocka_unit_test(test_forged_key),
        cmocka_unit_test(test_keys_fresh),
        cmocka_unit_test(test_freed_handle),
        cmocka_unit_test(test_wrong_access),
        cmocka_unit_test(test_raw_messages),
        cmocka_unit_test(test_race_free),
    };
    return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
