/*
 * Hostile descriptors against CMA (issue 13): an attacker sends a server bulk
 * handles whose keys it forged, and the server pulls from / pushes into them
 * as any honest server would. Five processes, all children of this one:
 *
 *   server    answers "hostile.xfer" (transfer with the handle it got, reply
 *             with the status and, after a pull, the bytes it pulled), holds
 *             a registered secret of its own;
 *   attacker  forges the descriptors, one request each;
 *   victim    a Hermod process with a registered secret region;
 *   plain     a process that never touched Hermod, with a secret in memory.
 *
 * Every forged request must fail at once with HM_PERMISSION (not a timeout),
 * bring back no byte, leave the victims' and the server's secrets unchanged,
 * and leave the connection serving: a normal RPC and a normal pull and push
 * afterwards. Each case names the promise of issue 13 it checks:
 *   (a) no confused deputy: a descriptor reaches only the memory of its sender
 *   (b) only within a live registration, with the access it granted
 *   (c) keys random per registration
 *   (d) failure fast and clean, the connection usable
 * Run per shm protocol: ucx+shm and ofi+shm (the CMA path).
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

#include <hermod.h>

#include "bulk/bulk_internal.h"
#include "harness.h"
#include "na/na_rma.h"

#define HX_REGION (64u << 10)
#define HX_REPLY_MAX 256u
#define HX_CALL_MS 20000u

static const char *g_uri;

/* ---- RPCs ------------------------------------------------------------------- */

struct hx_in {
    hm_bulk_t *bulk;
    uint8_t op; /* hm_bulk_op_t */
    uint64_t off;
    uint64_t size;
};

struct hx_out {
    int32_t ret;
    hm_bytes_t data; /* a pull's first bytes, empty on failure */
};

static const hm_proc_field_t hx_in_fields[] = {
    HM_PROC_FIELD(struct hx_in, bulk, hm_proc_bulk),
    HM_PROC_FIELD(struct hx_in, op, hm_proc_uint8),
    HM_PROC_FIELD(struct hx_in, off, hm_proc_uint64),
    HM_PROC_FIELD(struct hx_in, size, hm_proc_uint64),
};
static hm_return_t hx_in_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, hx_in_fields, HM_PROC_FIELD_COUNT(hx_in_fields));
}
static const hm_proc_field_t hx_out_fields[] = {
    HM_PROC_FIELD(struct hx_out, ret, hm_proc_int32),
    HM_PROC_FIELD(struct hx_out, data, hm_proc_bytes),
};
static hm_return_t hx_out_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, hx_out_fields, HM_PROC_FIELD_COUNT(hx_out_fields));
}
static const hm_proc_field_t hx_ret_fields[] = {
    HM_PROC_FIELD(struct hx_out, ret, hm_proc_int32),
};
static hm_return_t hx_ret_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, hx_ret_fields, HM_PROC_FIELD_COUNT(hx_ret_fields));
}

struct hx_ids {
    hm_id_t xfer, secret, shutdown;
};

/* ---- Secrets ------------------------------------------------------------------ */

/* Secrets: a pseudo-random stream per tag, so no two tags share 16 bytes. */
static uint8_t hx_next(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return (uint8_t)(*state >> 56);
}

static void hx_fill(uint8_t *buf, size_t len, uint8_t tag)
{
    uint64_t state = 0x9e3779b97f4a7c15ull * (tag + 1u);
    for (size_t i = 0; i < len; i++)
        buf[i] = hx_next(&state);
}

static bool hx_intact(const uint8_t *buf, size_t len, uint8_t tag)
{
    uint64_t state = 0x9e3779b97f4a7c15ull * (tag + 1u);
    for (size_t i = 0; i < len; i++)
        if (buf[i] != hx_next(&state))
            return false;
    return true;
}

/* Does `data` hold any 16-byte window of a secret tagged `tag`? */
static bool hx_leaks(const uint8_t *data, size_t len, uint8_t tag)
{
    uint8_t secret[HX_REGION];
    hx_fill(secret, sizeof(secret), tag);
    for (size_t i = 0; i + 16 <= len; i++)
        if (memmem(secret, sizeof(secret), data + i, 16) != NULL)
            return true;
    return false;
}

#define HX_TAG_SERVER 0x53
#define HX_TAG_VICTIM 0x56
#define HX_TAG_PLAIN 0x57
#define HX_TAG_ATTACKER 0x41
#define HX_TAG_PUSH 0x50

/* ---- Server ----------------------------------------------------------------------- */

static struct {
    hm_context_t *ctx;
    struct hx_ids ids;
    uint8_t *secret;
    bool shutdown;
} srv;

struct hx_xfer {
    hm_handle_t *handle;
    uint8_t *data;
    hm_bulk_t *local;
    struct hx_in in;
};

static void srv_reply(hm_handle_t *handle, hm_return_t ret, const uint8_t *data, size_t len)
{
    struct hx_out out = {.ret = (int32_t)ret, .data = {.data = data, .len = len}};
    hm_respond(handle, &out, NULL, NULL);
    hm_handle_destroy(handle);
}

static void srv_xfer_done(const hm_bulk_cb_info_t *info)
{
    struct hx_xfer *x = info->arg;
    size_t n = x->in.size < HX_REPLY_MAX ? x->in.size : HX_REPLY_MAX;
    bool pulled = info->ret == HM_SUCCESS && x->in.op == HM_BULK_PULL;
    srv_reply(x->handle, info->ret, x->data, pulled ? n : 0);
    hm_bulk_free(x->local);
    free(x->data);
    free(x);
}

static hm_return_t srv_xfer_start(struct hx_xfer *x, hm_bulk_t *origin)
{
    x->data = calloc(1, x->in.size + 1);
    if (x->data == NULL)
        return HM_NOMEM;
    if (x->in.op == HM_BULK_PUSH)
        hx_fill(x->data, x->in.size, HX_TAG_PUSH);
    void *buf = x->data;
    size_t size = x->in.size + 1;
    hm_return_t ret = hm_bulk_create(hm_context_class(srv.ctx), 1, &buf, &size,
                                     HM_BULK_READ_WRITE, &x->local);
    if (ret != HM_SUCCESS)
        return ret;
    hm_bulk_xfer_t desc = {.op = (hm_bulk_op_t)x->in.op,
                           .origin_addr = hm_handle_get_addr(x->handle),
                           .origin = origin,
                           .origin_off = x->in.off,
                           .local = x->local,
                           .size = x->in.size};
    hm_bulk_op_id_t *op;
    return hm_bulk_transfer(srv.ctx, &desc, NULL, srv_xfer_done, x, &op);
}

static hm_return_t srv_on_xfer(hm_handle_t *handle)
{
    struct hx_in in;
    if (hm_get_input(handle, &in) != HM_SUCCESS) {
        hm_handle_destroy(handle);
        return HM_SUCCESS;
    }
    struct hx_xfer *x = calloc(1, sizeof(*x));
    hm_return_t ret = HM_NOMEM;
    if (x != NULL && in.size <= (1u << 20)) {
        x->handle = handle;
        x->in = in;
        ret = srv_xfer_start(x, in.bulk);
    }
    hm_free_input(handle, &in);
    if (ret != HM_SUCCESS) {
        if (x != NULL) {
            hm_bulk_free(x->local);
            free(x->data);
            free(x);
        }
        srv_reply(handle, ret, NULL, 0);
    }
    return HM_SUCCESS;
}

static hm_return_t srv_on_secret(hm_handle_t *handle)
{
    struct hx_out out = {.ret = hx_intact(srv.secret, HX_REGION, HX_TAG_SERVER)
                                    ? HM_SUCCESS
                                    : HM_PROTOCOL_ERROR};
    hm_respond(handle, &out, NULL, NULL);
    hm_handle_destroy(handle);
    return HM_SUCCESS;
}

static hm_return_t srv_on_shutdown(hm_handle_t *handle)
{
    srv.shutdown = true;
    hm_respond(handle, NULL, NULL, NULL);
    hm_handle_destroy(handle);
    return HM_SUCCESS;
}

static hm_return_t hx_register(hm_class_t *cls, struct hx_ids *ids, bool server)
{
    hm_return_t ret = hm_register(cls, "hostile.xfer", hx_in_proc, hx_out_proc,
                                  server ? srv_on_xfer : NULL, &ids->xfer);
    if (ret == HM_SUCCESS)
        ret = hm_register(cls, "hostile.secret", NULL, hx_ret_proc,
                          server ? srv_on_secret : NULL, &ids->secret);
    if (ret == HM_SUCCESS)
        ret = hm_register(cls, "hostile.shutdown", NULL, NULL,
                          server ? srv_on_shutdown : NULL, &ids->shutdown);
    return ret;
}

static int hx_open(hm_class_t **cls, hm_context_t **ctx)
{
    if (hm_class_create(g_uri, NULL, cls) != HM_SUCCESS)
        return 1;
    return hm_context_create(*cls, NULL, ctx) != HM_SUCCESS;
}

static int server_main(void *arg)
{
    (void)arg;
    hm_class_t *cls;
    if (hx_open(&cls, &srv.ctx) != 0 || hx_register(cls, &srv.ids, true) != HM_SUCCESS)
        return 1;
    srv.secret = malloc(HX_REGION);
    hx_fill(srv.secret, HX_REGION, HX_TAG_SERVER);
    void *buf = srv.secret;
    size_t size = HX_REGION;
    hm_bulk_t *secret_bulk; /* in our key table, as a server's buffers are */
    if (hm_bulk_create(cls, 1, &buf, &size, HM_BULK_READ_WRITE, &secret_bulk) != HM_SUCCESS)
        return 1;
    hm_addr_t *self;
    char uri[512];
    size_t len = sizeof(uri);
    if (hm_addr_self(srv.ctx, &self) != HM_SUCCESS || hm_addr_to_string(self, uri, &len))
        return 1;
    hm_addr_free(self);
    hm_test_ready(uri);
    for (int i = 0; i < 6000 && !srv.shutdown; i++) { /* 60 s at most */
        hm_progress(srv.ctx, 10);
        hm_trigger(srv.ctx, UINT32_MAX, NULL);
    }
    for (int i = 0; i < 20; i++) { /* let the shutdown response leave */
        hm_progress(srv.ctx, 5);
        hm_trigger(srv.ctx, UINT32_MAX, NULL);
    }
    int intact = hx_intact(srv.secret, HX_REGION, HX_TAG_SERVER);
    hm_bulk_free(secret_bulk);
    free(srv.secret);
    hm_context_destroy(srv.ctx);
    hm_class_destroy(cls);
    return srv.shutdown && intact ? 0 : 3;
}

/* ---- Victims ------------------------------------------------------------------------ */

/* Hold a secret tagged `tag` until "quit"; answer "check" with intact/changed. */
static int victim_loop(const uint8_t *secret, uint8_t tag)
{
    char line[64];
    snprintf(line, sizeof(line), "%ld", (long)getpid());
    hm_test_ready(line);
    while (hm_test_await(line, sizeof(line), 60000) == 0) {
        if (strcmp(line, "check") == 0)
            hm_test_signal(hx_intact(secret, HX_REGION, tag) ? "intact" : "changed");
        else
            return 0;
    }
    return 2;
}

/* A Hermod process with a registered (exposed) secret. */
static int victim_main(void *arg)
{
    (void)arg;
    hm_class_t *cls;
    hm_context_t *ctx;
    if (hx_open(&cls, &ctx) != 0)
        return 1;
    uint8_t *secret = malloc(HX_REGION);
    hx_fill(secret, HX_REGION, HX_TAG_VICTIM);
    void *buf = secret;
    size_t size = HX_REGION;
    hm_bulk_t *bulk;
    if (hm_bulk_create(cls, 1, &buf, &size, HM_BULK_READ_WRITE, &bulk) != HM_SUCCESS)
        return 1;
    int rc = victim_loop(secret, HX_TAG_VICTIM);
    hm_bulk_free(bulk);
    free(secret);
    hm_context_destroy(ctx);
    hm_class_destroy(cls);
    return rc;
}

/* A process that never used Hermod. */
static int plain_main(void *arg)
{
    (void)arg;
    uint8_t *secret = malloc(HX_REGION);
    hx_fill(secret, HX_REGION, HX_TAG_PLAIN);
    int rc = victim_loop(secret, HX_TAG_PLAIN);
    free(secret);
    return rc;
}

/* ---- Attacker -------------------------------------------------------------------------- */

struct atk {
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_addr_t *srv;
    struct hx_ids ids;
    uint32_t victim_pid, plain_pid, server_pid;
    uint8_t *mine;      /* HX_REGION, read-write, tagged HX_TAG_ATTACKER */
    uint8_t *ro;        /* HX_REGION, read-only */
    int failures;
};

#define ATK_CHECK(a, cond)                                                          \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            (a)->failures++;                                                        \
        }                                                                           \
    } while (0)

/* Edits of a packed key (layout in na_rma.h). */
static void key_put32(uint8_t *key, size_t at, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        key[at + (size_t)i] = (uint8_t)(v >> (8 * i));
}
static void key_put64(uint8_t *key, size_t at, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        key[at + (size_t)i] = (uint8_t)(v >> (8 * i));
}
static uint32_t key_get32(const uint8_t *key, size_t at)
{
    return (uint32_t)key[at] | (uint32_t)key[at + 1] << 8 | (uint32_t)key[at + 2] << 16 |
           (uint32_t)key[at + 3] << 24;
}
#define KEY_ACCESS 6
#define KEY_PID 8
#define KEY_SLOT 12
#define KEY_K0 16
#define KEY_K1 24
#define KEY_LEN 32

/* A handle of one segment over `buf`, registered with `perm`. */
static hm_bulk_t *atk_handle(struct atk *a, uint8_t *buf, hm_bulk_perm_t perm)
{
    void *b = buf;
    size_t size = HX_REGION;
    hm_bulk_t *bulk = NULL;
    ATK_CHECK(a, hm_bulk_create(a->cls, 1, &b, &size, perm, &bulk) == HM_SUCCESS);
    ATK_CHECK(a, bulk != NULL && bulk->b_key_lens[0] == HMI_NA_KEY_SIZE);
    return bulk;
}

/*
 * Send `bulk` (its key possibly edited; `claim` bytes as its length) and have
 * the server transfer `size` bytes at `off`. The reply's status; a pull's
 * bytes are checked for every secret.
 */
static hm_return_t atk_send(struct atk *a, hm_bulk_t *bulk, size_t claim, hm_bulk_op_t op,
                            uint64_t off, uint64_t size)
{
    size_t saved_len = bulk->b_lens[0], saved_size = bulk->b_size;
    bulk->b_lens[0] = claim;
    bulk->b_size = claim;
    struct hx_in in = {.bulk = bulk, .op = (uint8_t)op, .off = off, .size = size};
    struct hx_out out;
    hm_handle_t *h;
    hm_return_t ret = hm_handle_create(a->ctx, a->srv, a->ids.xfer, &h);
    if (ret == HM_SUCCESS) {
        ret = hm_call(h, &in, &out, HX_CALL_MS);
        if (ret == HM_SUCCESS) {
            ret = out.ret;
            const uint8_t *d = out.data.data;
            ATK_CHECK(a, ret == HM_SUCCESS || out.data.len == 0);
            ATK_CHECK(a, !hx_leaks(d, out.data.len, HX_TAG_SERVER));
            ATK_CHECK(a, !hx_leaks(d, out.data.len, HX_TAG_VICTIM));
            ATK_CHECK(a, !hx_leaks(d, out.data.len, HX_TAG_PLAIN));
            hm_free_output(h, &out);
        }
        hm_handle_destroy(h);
    }
    bulk->b_lens[0] = saved_len;
    bulk->b_size = saved_size;
    return ret;
}

/* Pull and push of a forged handle: both refused with HM_PERMISSION. */
static void atk_refused(struct atk *a, hm_bulk_t *bulk, size_t claim, uint64_t off,
                        uint64_t size, const char *what)
{
    hm_return_t pull = atk_send(a, bulk, claim, HM_BULK_PULL, off, size);
    hm_return_t push = atk_send(a, bulk, claim, HM_BULK_PUSH, off, size);
    fprintf(stderr, "%s: %s: pull %s, push %s\n", g_uri, what, hm_strerror(pull),
            hm_strerror(push));
    ATK_CHECK(a, pull == HM_PERMISSION);
    ATK_CHECK(a, push == HM_PERMISSION);
    ATK_CHECK(a, hx_intact(a->mine, HX_REGION, HX_TAG_ATTACKER)); /* no push landed here */
}

/* (a) Keys that name another process: the victims, the server itself. */
static void atk_other_pids(struct atk *a)
{
    hm_bulk_t *b = atk_handle(a, a->mine, HM_BULK_READ_WRITE);
    uint8_t *key = b->b_keys[0];
    uint8_t orig[HMI_NA_KEY_SIZE];
    memcpy(orig, key, sizeof(orig));
    const struct {
        uint32_t pid;
        const char *what;
    } targets[] = {{a->victim_pid, "(a) Hermod victim's pid, our key"},
                   {a->plain_pid, "(a) plain process's pid, our key"},
                   {a->server_pid, "(a) the server's own pid, our key"}};
    for (size_t t = 0; t < sizeof(targets) / sizeof(targets[0]); t++) {
        key_put32(key, KEY_PID, targets[t].pid);
        atk_refused(a, b, HX_REGION, 0, HX_REGION, targets[t].what);
        /* The same pid with a guessed key in slot 0 (where a first region lies). */
        uint64_t guess[2];
        ATK_CHECK(a, getrandom(guess, sizeof(guess), 0) == (ssize_t)sizeof(guess));
        key_put32(key, KEY_SLOT, 0);
        key_put64(key, KEY_K0, guess[0] | 1);
        key_put64(key, KEY_K1, guess[1] | 1);
        atk_refused(a, b, HX_REGION, 0, HX_REGION, "(a) ... and a guessed key in slot 0");
        memcpy(key, orig, sizeof(orig));
    }
    hm_bulk_free(b);
}

/* (b) Our own region past its end, another slot, a freed handle, read-only. */
static void atk_own_region(struct atk *a)
{
    hm_bulk_t *b = atk_handle(a, a->mine, HM_BULK_READ_WRITE);
    uint8_t *key = b->b_keys[0];
    uint8_t orig[HMI_NA_KEY_SIZE];
    memcpy(orig, key, sizeof(orig));
    key_put64(key, KEY_LEN, 1u << 20);
    atk_refused(a, b, 1u << 20, 0, HX_REGION + 4096, "(b) length past the end");
    atk_refused(a, b, 1u << 20, HX_REGION, 4096, "(b) offset past the end");
    memcpy(key, orig, sizeof(orig));
    key_put32(key, KEY_SLOT, key_get32(orig, KEY_SLOT) + 1);
    atk_refused(a, b, HX_REGION, 0, 4096, "(b) the next slot, our key");
    key_put32(key, KEY_SLOT, key_get32(orig, KEY_SLOT) - 1);
    atk_refused(a, b, HX_REGION, 0, 4096, "(b) the previous slot, our key");
    memcpy(key, orig, sizeof(orig));
    hm_bulk_free(b);
    /* A freed handle: its key, on a handle that is live again (same slot). */
    hm_bulk_t *again = atk_handle(a, a->mine, HM_BULK_READ_WRITE);
    memcpy(again->b_keys[0], orig, sizeof(orig));
    atk_refused(a, again, HX_REGION, 0, 4096, "(b) a freed handle's key");
    hm_bulk_free(again);
    /* Read-only, its access bits and permission rewritten to read-write. */
    hm_bulk_t *ro = atk_handle(a, a->ro, HM_BULK_READ_ONLY);
    ro->b_keys[0][KEY_ACCESS] = HM_NA_ACCESS_READ | HM_NA_ACCESS_WRITE;
    ro->b_perm = HM_BULK_READ_WRITE;
    hm_return_t push = atk_send(a, ro, HX_REGION, HM_BULK_PUSH, 0, 4096);
    fprintf(stderr, "%s: (b) push into a read-only region: %s\n", g_uri, hm_strerror(push));
    ATK_CHECK(a, push == HM_PERMISSION);
    ATK_CHECK(a, hx_intact(a->ro, HX_REGION, HX_TAG_ATTACKER));
    hm_bulk_free(ro);
}

/* (c) Two registrations of the same bytes never share a key. */
static void atk_keys_random(struct atk *a)
{
    hm_bulk_t *b1 = atk_handle(a, a->mine, HM_BULK_READ_WRITE);
    hm_bulk_t *b2 = atk_handle(a, a->mine, HM_BULK_READ_WRITE);
    uint8_t k1[HMI_NA_KEY_SIZE], k2[HMI_NA_KEY_SIZE];
    memcpy(k1, b1->b_keys[0], sizeof(k1));
    memcpy(k2, b2->b_keys[0], sizeof(k2));
    ATK_CHECK(a, memcmp(k1 + KEY_K0, k2 + KEY_K0, 16) != 0);
    hm_bulk_free(b1);
    hm_bulk_t *b3 = atk_handle(a, a->mine, HM_BULK_READ_WRITE); /* slot of b1 again */
    ATK_CHECK(a, memcmp(k1 + KEY_K0, b3->b_keys[0] + KEY_K0, 16) != 0);
    hm_bulk_free(b2);
    hm_bulk_free(b3);
}

/* (d) After all that: a normal RPC, a normal pull and push, same connection. */
static void atk_still_serving(struct atk *a)
{
    hm_handle_t *h;
    struct hx_out out = {0};
    ATK_CHECK(a, hm_handle_create(a->ctx, a->srv, a->ids.secret, &h) == HM_SUCCESS);
    ATK_CHECK(a, hm_call(h, NULL, &out, HX_CALL_MS) == HM_SUCCESS);
    ATK_CHECK(a, out.ret == HM_SUCCESS); /* the server's secret is intact */
    hm_free_output(h, &out);
    hm_handle_destroy(h);
    hm_bulk_t *b = atk_handle(a, a->mine, HM_BULK_READ_WRITE);
    ATK_CHECK(a, atk_send(a, b, HX_REGION, HM_BULK_PULL, 0, HX_REGION) == HM_SUCCESS);
    ATK_CHECK(a, atk_send(a, b, HX_REGION, HM_BULK_PUSH, 4096, 8192) == HM_SUCCESS);
    uint8_t pushed[8192];
    hx_fill(pushed, sizeof(pushed), HX_TAG_PUSH);
    ATK_CHECK(a, memcmp(a->mine + 4096, pushed, sizeof(pushed)) == 0);
    hx_fill(a->mine, HX_REGION, HX_TAG_ATTACKER);
    hm_bulk_free(b);
}

static int atk_open(struct atk *a, const char *arg)
{
    char uri[512];
    if (sscanf(arg, "%511s %u %u %u", uri, &a->victim_pid, &a->plain_pid, &a->server_pid) != 4)
        return 1;
    if (hx_open(&a->cls, &a->ctx) != 0 || hx_register(a->cls, &a->ids, false) != HM_SUCCESS ||
        hm_addr_lookup(a->ctx, uri, &a->srv) != HM_SUCCESS)
        return 1;
    a->mine = malloc(HX_REGION);
    a->ro = malloc(HX_REGION);
    hx_fill(a->mine, HX_REGION, HX_TAG_ATTACKER);
    hx_fill(a->ro, HX_REGION, HX_TAG_ATTACKER);
    return 0;
}

static int attacker_main(void *arg)
{
    static struct atk a;
    if (atk_open(&a, arg) != 0)
        return 1;
    atk_other_pids(&a);
    atk_own_region(&a);
    atk_keys_random(&a);
    atk_still_serving(&a);
    hm_handle_t *h;
    if (hm_handle_create(a.ctx, a.srv, a.ids.shutdown, &h) == HM_SUCCESS) {
        ATK_CHECK(&a, hm_call(h, NULL, NULL, HX_CALL_MS) == HM_SUCCESS);
        hm_handle_destroy(h);
    }
    hm_addr_free(a.srv);
    hm_context_destroy(a.ctx);
    hm_class_destroy(a.cls);
    free(a.mine);
    free(a.ro);
    return a.failures == 0 ? 0 : 4;
}

/* ---- The test ---------------------------------------------------------------------------- */

static void hx_check_victim(struct hm_test_child *v)
{
    char line[64];
    assert_int_equal(hm_test_send(v, "check"), 0);
    assert_int_equal(hm_test_recv(v, line, sizeof(line), 10000), 0);
    assert_string_equal(line, "intact");
    assert_int_equal(hm_test_send(v, "quit"), 0);
    assert_int_equal(hm_test_wait(v, 20), 0);
}

static void test_hostile_cma(void **state)
{
    (void)state;
    struct hm_test_child server, victim, plain, attacker;
    char uri[512], victim_pid[32], plain_pid[32], arg[700];
    hm_test_alarm(240, "hostile_cma");
    assert_int_equal(hm_test_spawn(&plain, plain_main, NULL), 0);
    assert_int_equal(hm_test_recv(&plain, plain_pid, sizeof(plain_pid), 20000), 0);
    assert_int_equal(hm_test_spawn(&victim, victim_main, NULL), 0);
    assert_int_equal(hm_test_recv(&victim, victim_pid, sizeof(victim_pid), 20000), 0);
    assert_int_equal(hm_test_spawn(&server, server_main, NULL), 0);
    assert_int_equal(hm_test_recv(&server, uri, sizeof(uri), 20000), 0);
    snprintf(arg, sizeof(arg), "%s %s %s %ld", uri, victim_pid, plain_pid, (long)server.pid);
    assert_int_equal(hm_test_spawn(&attacker, attacker_main, arg), 0);
    int arc = hm_test_wait(&attacker, 180);
    int src = hm_test_wait(&server, 30);
    hx_check_victim(&victim);
    hx_check_victim(&plain);
    hm_test_alarm(0, NULL);
    assert_int_equal(arc, 0); /* every forged request refused, nothing leaked, still serving */
    assert_int_equal(src, 0); /* the server's secret intact, clean exit */
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    g_uri = argv[1];
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_hostile_cma)};
    return cmocka_run_group_tests_name(g_uri, tests, NULL, NULL);
}
