/* The bulk tests' server, client and data pattern; see bulk_test.h. */
#include "bulk_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* ---- the RPCs -------------------------------------------------------------------- */

static const hm_proc_field_t xfer_in_fields[] = {
    HM_PROC_FIELD(struct xfer_in, bulk, hm_proc_bulk),
    HM_PROC_FIELD(struct xfer_in, op, hm_proc_uint8),
    HM_PROC_FIELD(struct xfer_in, free_early, hm_proc_uint8),
    HM_PROC_FIELD(struct xfer_in, seed, hm_proc_uint8),
    HM_PROC_FIELD(struct xfer_in, server_segs, hm_proc_uint32),
    HM_PROC_FIELD(struct xfer_in, origin_off, hm_proc_uint64),
    HM_PROC_FIELD(struct xfer_in, local_off, hm_proc_uint64),
    HM_PROC_FIELD(struct xfer_in, size, hm_proc_uint64),
    HM_PROC_FIELD(struct xfer_in, cancel_us, hm_proc_uint32),
    HM_PROC_FIELD(struct xfer_in, pad, hm_proc_bytes),
};
static hm_return_t xfer_in_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, xfer_in_fields, HM_PROC_FIELD_COUNT(xfer_in_fields));
}
static const hm_proc_field_t xfer_out_fields[] = {
    HM_PROC_FIELD(struct xfer_out, ret, hm_proc_int32),
};
static hm_return_t xfer_out_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, xfer_out_fields, HM_PROC_FIELD_COUNT(xfer_out_fields));
}
static const hm_proc_field_t stats_fields[] = {
    HM_PROC_FIELD(struct srv_stats, started, hm_proc_uint64),
    HM_PROC_FIELD(struct srv_stats, callbacks, hm_proc_uint64),
    HM_PROC_FIELD(struct srv_stats, maxrss_kib, hm_proc_uint64),
    HM_PROC_FIELD(struct srv_stats, eager_pulls, hm_proc_uint64),
    HM_PROC_FIELD(struct srv_stats, returned_pushes, hm_proc_uint64),
};
static hm_return_t stats_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, stats_fields, HM_PROC_FIELD_COUNT(stats_fields));
}
static const hm_proc_field_t expose_in_fields[] = {
    HM_PROC_FIELD(struct expose_in, size, hm_proc_uint64),
    HM_PROC_FIELD(struct expose_in, segs, hm_proc_uint32),
    HM_PROC_FIELD(struct expose_in, seed, hm_proc_uint8),
    HM_PROC_FIELD(struct expose_in, fill, hm_proc_uint8),
    HM_PROC_FIELD(struct expose_in, watch, hm_proc_uint8),
};
static hm_return_t expose_in_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, expose_in_fields, HM_PROC_FIELD_COUNT(expose_in_fields));
}
static const hm_proc_field_t expose_out_fields[] = {
    HM_PROC_FIELD(struct expose_out, ret, hm_proc_int32),
    HM_PROC_FIELD(struct expose_out, bulk, hm_proc_bulk),
};
static hm_return_t expose_out_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, expose_out_fields, HM_PROC_FIELD_COUNT(expose_out_fields));
}
static const hm_proc_field_t check_in_fields[] = {
    HM_PROC_FIELD(struct check_in, off, hm_proc_uint64),
    HM_PROC_FIELD(struct check_in, size, hm_proc_uint64),
    HM_PROC_FIELD(struct check_in, base, hm_proc_uint64),
    HM_PROC_FIELD(struct check_in, in_seed, hm_proc_uint8),
    HM_PROC_FIELD(struct check_in, out_seed, hm_proc_uint8),
};
static hm_return_t check_in_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, check_in_fields, HM_PROC_FIELD_COUNT(check_in_fields));
}
static const hm_proc_field_t check_out_fields[] = {
    HM_PROC_FIELD(struct check_out, ret, hm_proc_int32),
    HM_PROC_FIELD(struct check_out, bad_at, hm_proc_uint64),
};
static hm_return_t check_out_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, check_out_fields, HM_PROC_FIELD_COUNT(check_out_fields));
}

/* ---- buffers ---------------------------------------------------------------------- */

uint8_t bulk_pattern(uint8_t seed, uint64_t i)
{
    return (uint8_t)(((i * 2654435761u) >> 11) ^ seed ^ i);
}

void bulk_pattern_fill(uint8_t *buf, size_t len, uint8_t seed, uint64_t base)
{
    for (size_t k = 0; k < len; k++)
        buf[k] = bulk_pattern(seed, base + k);
}

#define PATTERN_BLOCK 65536u

size_t bulk_pattern_find(const uint8_t *buf, size_t len, uint8_t seed, uint64_t base)
{
    static uint8_t expect[PATTERN_BLOCK]; /* the tests are single-threaded */
    for (size_t at = 0; at < len; at += PATTERN_BLOCK) {
        size_t n = len - at < PATTERN_BLOCK ? len - at : PATTERN_BLOCK;
        bulk_pattern_fill(expect, n, seed, base + at);
        if (memcmp(buf + at, expect, n) == 0)
            continue;
        for (size_t k = 0; k < n; k++)
            if (buf[at + k] != expect[k])
                return at + k;
    }
    return len;
}

size_t bulk_zero_find(const uint8_t *buf, size_t len)
{
    static const uint8_t zeros[PATTERN_BLOCK];
    for (size_t at = 0; at < len; at += PATTERN_BLOCK) {
        size_t n = len - at < PATTERN_BLOCK ? len - at : PATTERN_BLOCK;
        if (memcmp(buf + at, zeros, n) == 0)
            continue;
        for (size_t k = 0; k < n; k++)
            if (buf[at + k] != 0)
                return at + k;
    }
    return len;
}

/* Split `total` bytes into `n` uneven segments (>= 1 byte each); returns n used. */
static uint32_t split(size_t total, uint32_t n, uint32_t salt, size_t *sizes)
{
    if (n > total)
        n = (uint32_t)total;
    size_t left = total;
    for (uint32_t i = 0; i + 1 < n; i++) {
        size_t even = left / (n - i);
        size_t jitter = even / 3 ? (size_t)((i * 7919u + salt) % (even / 3)) : 0;
        sizes[i] = even - jitter > 0 ? even - jitter : 1;
        left -= sizes[i];
    }
    sizes[n - 1] = left;
    return n;
}

void seg_buf_init(struct seg_buf *b, size_t total, uint32_t n, uint32_t salt)
{
    b->data = calloc(1, total);
    b->total = total;
    b->n = 0;
    if (b->data == NULL)
        return;
    b->n = split(total, n > BULK_MAX_SEGS ? BULK_MAX_SEGS : n, salt, b->sizes);
    size_t at = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        b->bufs[i] = b->data + at;
        at += b->sizes[i];
    }
}

uint64_t bulk_maxrss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_maxrss;
}

double bulk_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- server --------------------------------------------------------------------- */

struct srv_xfer {
    hm_handle_t *handle;
    hm_bulk_t *local;     /* NULL once freed early */
    uint8_t *data;
    struct xfer_in in;    /* scalars only (bulk freed) */
    hm_bulk_op_id_t *op;
    double cancel_at_ms;
};

#define SRV_MAX_PENDING 16
#define WATCH_BYTES 4096u

static struct {
    hm_context_t *ctx;
    struct bulk_ids ids;
    struct srv_stats stats;
    struct srv_xfer *pending[SRV_MAX_PENDING]; /* transfers with a cancel due */
    struct seg_buf exposed;                    /* "expose"'s buffer (data NULL: none) */
    hm_bulk_t *exposed_bulk;
    uint8_t watched[WATCH_BYTES];              /* its first bytes as filled */
    size_t watch_len;                          /* 0: not watched (or "landed" sent) */
    bool shutdown;
} srv;

static void srv_respond(hm_handle_t *handle, hm_return_t ret)
{
    struct xfer_out out = {.ret = (int32_t)ret};
    hm_respond(handle, &out, NULL, NULL);
    hm_handle_destroy(handle);
}

static hm_return_t srv_check_pull(const struct srv_xfer *x)
{
    size_t bad = bulk_pattern_find(x->data + x->in.local_off, x->in.size, x->in.seed,
                                   x->in.origin_off);
    return bad == x->in.size ? HM_SUCCESS : HM_PROTOCOL_ERROR;
}

static void srv_unpend(struct srv_xfer *x)
{
    for (int i = 0; i < SRV_MAX_PENDING; i++)
        if (srv.pending[i] == x)
            srv.pending[i] = NULL;
}

static void srv_xfer_done(const hm_bulk_cb_info_t *info)
{
    struct srv_xfer *x = info->arg;
    hm_return_t ret = info->ret;
    srv.stats.callbacks++;
    srv_unpend(x);
    if (ret == HM_SUCCESS && x->in.op == HM_BULK_PULL)
        ret = srv_check_pull(x);
    srv_respond(x->handle, ret);
    hm_bulk_free(x->local);
    free(x->data);
    free(x);
}

static hm_return_t srv_start(struct srv_xfer *x, hm_bulk_t *origin)
{
    struct seg_buf b;
    size_t total = x->in.local_off + x->in.size + 7;
    seg_buf_init(&b, total, x->in.server_segs, 12345);
    if (b.data == NULL)
        return HM_NOMEM;
    x->data = b.data;
    if (x->in.op == HM_BULK_PUSH)
        bulk_pattern_fill(b.data + x->in.local_off, x->in.size, x->in.seed, x->in.origin_off);
    hm_return_t ret = hm_bulk_create(hm_context_class(srv.ctx), b.n, b.bufs, b.sizes,
                                     HM_BULK_READ_WRITE, &x->local);
    if (ret != HM_SUCCESS)
        return ret;
    hm_bulk_xfer_t desc = {
        .op = (hm_bulk_op_t)x->in.op,
        .origin_addr = hm_handle_get_addr(x->handle),
        .origin = origin,
        .origin_off = x->in.origin_off,
        .local = x->local,
        .local_off = x->in.local_off,
        .size = x->in.size,
    };
    ret = hm_bulk_transfer(srv.ctx, &desc, NULL, srv_xfer_done, x, &x->op);
    if (ret != HM_SUCCESS)
        return ret;
    srv.stats.started++;
    if (x->in.free_early) {
        hm_bulk_free(x->local);
        x->local = NULL;
    }
    return HM_SUCCESS;
}

static void srv_pend_cancel(struct srv_xfer *x)
{
    x->cancel_at_ms = bulk_now_ms() + (double)x->in.cancel_us / 1e3;
    for (int i = 0; i < SRV_MAX_PENDING; i++) {
        if (srv.pending[i] == NULL) {
            srv.pending[i] = x;
            return;
        }
    }
}

static hm_return_t on_xfer(hm_handle_t *handle)
{
    struct xfer_in in;
    hm_return_t ret = hm_get_input(handle, &in);
    if (ret != HM_SUCCESS) {
        hm_handle_destroy(handle);
        return ret;
    }
    struct srv_xfer *x = calloc(1, sizeof(*x));
    if (x == NULL) {
        hm_free_input(handle, &in);
        srv_respond(handle, HM_NOMEM);
        return HM_SUCCESS;
    }
    x->handle = handle;
    x->in = in;
    x->in.bulk = NULL;
    ret = srv_start(x, in.bulk);
    hm_free_input(handle, &in); /* the owner's reference goes mid-transfer */
    if (ret != HM_SUCCESS) {
        srv_respond(handle, ret);
        hm_bulk_free(x->local);
        free(x->data);
        free(x);
        return HM_SUCCESS;
    }
    if (x->in.cancel_us)
        srv_pend_cancel(x);
    return HM_SUCCESS;
}

static hm_return_t on_stats(hm_handle_t *handle)
{
    hm_stats_t st = {.size = sizeof(st)};
    srv.stats.maxrss_kib = bulk_maxrss_kib();
    if (hm_context_stats(hm_handle_get_context(handle), &st) == HM_SUCCESS)
    {
        srv.stats.eager_pulls = st.bulk_eager_pulls;
        srv.stats.returned_pushes = st.bulk_returned_pushes;
    }
    hm_respond(handle, &srv.stats, NULL, NULL);
    hm_handle_destroy(handle);
    return HM_SUCCESS;
}

static void srv_unexpose(void)
{
    hm_bulk_free(srv.exposed_bulk);
    srv.exposed_bulk = NULL;
    free(srv.exposed.data);
    srv.exposed.data = NULL;
    srv.watch_len = 0;
}

static hm_return_t srv_expose(const struct expose_in *in)
{
    srv_unexpose();
    if (in->size == 0)
        return HM_SUCCESS;
    seg_buf_init(&srv.exposed, in->size, in->segs, 4242);
    if (srv.exposed.data == NULL)
        return HM_NOMEM;
    if (in->fill)
        bulk_pattern_fill(srv.exposed.data, in->size, in->seed, 0);
    if (in->watch) {
        srv.watch_len = in->size < WATCH_BYTES ? in->size : WATCH_BYTES;
        memcpy(srv.watched, srv.exposed.data, srv.watch_len);
    }
    hm_return_t ret = hm_bulk_create(hm_context_class(srv.ctx), srv.exposed.n,
                                     srv.exposed.bufs, srv.exposed.sizes, HM_BULK_READ_WRITE,
                                     &srv.exposed_bulk);
    if (ret != HM_SUCCESS)
        srv_unexpose();
    return ret;
}

static hm_return_t on_expose(hm_handle_t *handle)
{
    struct expose_in in;
    struct expose_out out = {.ret = HM_SUCCESS};
    hm_return_t ret = hm_get_input(handle, &in);
    if (ret == HM_SUCCESS) {
        out.ret = srv_expose(&in);
        out.bulk = srv.exposed_bulk; /* ours until the next expose: responses are not pinned */
        hm_free_input(handle, &in);
        ret = hm_respond(handle, &out, NULL, NULL);
    }
    hm_handle_destroy(handle);
    return ret;
}

/* The first byte of the exposed buffer that is not what `in` says, or its size. */
static size_t srv_check_find(const struct check_in *in)
{
    const uint8_t *data = srv.exposed.data;
    size_t total = srv.exposed.total;
    size_t bad = bulk_pattern_find(data, in->off, in->out_seed, 0);
    if (bad < in->off)
        return bad;
    bad = bulk_pattern_find(data + in->off, in->size, in->in_seed, in->base);
    if (bad < in->size)
        return in->off + bad;
    size_t end = in->off + in->size;
    return end + bulk_pattern_find(data + end, total - end, in->out_seed, end);
}

static hm_return_t on_check(hm_handle_t *handle)
{
    struct check_in in;
    struct check_out out = {.ret = HM_NOENTRY};
    hm_return_t ret = hm_get_input(handle, &in);
    if (ret == HM_SUCCESS) {
        if (srv.exposed.data != NULL && in.off <= srv.exposed.total &&
            in.size <= srv.exposed.total - in.off) {
            out.bad_at = srv_check_find(&in);
            out.ret = out.bad_at == srv.exposed.total ? HM_SUCCESS : HM_PROTOCOL_ERROR;
        }
        hm_free_input(handle, &in);
        ret = hm_respond(handle, &out, NULL, NULL);
    }
    hm_handle_destroy(handle);
    return ret;
}

static hm_return_t on_shutdown(hm_handle_t *handle)
{
    srv.shutdown = true;
    hm_respond(handle, NULL, NULL, NULL);
    hm_handle_destroy(handle);
    return HM_SUCCESS;
}

hm_return_t bulk_register(hm_class_t *cls, struct bulk_ids *ids, bool server)
{
    hm_return_t ret = hm_register(cls, "bulk.xfer", xfer_in_proc, xfer_out_proc,
                                  server ? on_xfer : NULL, &ids->xfer);
    if (ret == HM_SUCCESS)
        ret = hm_register(cls, "bulk.stats", NULL, stats_proc, server ? on_stats : NULL,
                          &ids->stats);
    if (ret == HM_SUCCESS)
        ret = hm_register(cls, "bulk.shutdown", NULL, NULL, server ? on_shutdown : NULL,
                          &ids->shutdown);
    if (ret == HM_SUCCESS)
        ret = hm_register(cls, "bulk.expose", expose_in_proc, expose_out_proc,
                          server ? on_expose : NULL, &ids->expose);
    if (ret == HM_SUCCESS)
        ret = hm_register(cls, "bulk.check", check_in_proc, check_out_proc,
                          server ? on_check : NULL, &ids->check);
    return ret;
}

/* Tell the parent once a peer has written into the watched bytes. */
static void srv_watch(void)
{
    if (srv.watch_len != 0 && memcmp(srv.watched, srv.exposed.data, srv.watch_len) != 0) {
        srv.watch_len = 0;
        hm_test_signal("landed");
    }
}

static void srv_fire_cancels(void)
{
    double now = bulk_now_ms();
    for (int i = 0; i < SRV_MAX_PENDING; i++) {
        struct srv_xfer *x = srv.pending[i];
        if (x != NULL && x->cancel_at_ms <= now) {
            srv.pending[i] = NULL;
            hm_bulk_cancel(x->op);
        }
    }
}

int bulk_server_main(void *arg)
{
    const char *protocol = arg;
    hm_class_t *cls;
    if (hm_class_create(protocol, NULL, &cls) != HM_SUCCESS)
        return 2;
    if (bulk_register(cls, &srv.ids, true) != HM_SUCCESS ||
        hm_context_create(cls, NULL, &srv.ctx) != HM_SUCCESS)
        return 3;
    if (hm_test_ready_self(srv.ctx) != 0)
        return 4;
    while (!srv.shutdown) {
        hm_progress(srv.ctx, 1);
        srv_fire_cancels();
        srv_watch();
        hm_trigger(srv.ctx, UINT32_MAX, NULL);
    }
    srv_unexpose();
    hm_test_context_close(srv.ctx, 200);
    return hm_class_destroy(cls) == HM_SUCCESS ? 0 : 5;
}

/* ---- client ----------------------------------------------------------------------- */

const char *bulk_protocol = "ucx+tcp://127.0.0.1:0";
struct bulk_client bulk_cli;
struct hm_test_server bulk_server;

hm_return_t bulk_client_open(struct bulk_client *c, const char *protocol,
                             const char *server_uri)
{
    char mine[128];
    if (hm_test_client_uri(protocol, mine, sizeof(mine)) != 0)
        return HM_INVALID_ARG;
    memset(c, 0, sizeof(*c));
    hm_return_t ret = hm_class_create(mine, NULL, &c->cls);
    if (ret == HM_SUCCESS)
        ret = bulk_register(c->cls, &c->ids, false);
    if (ret == HM_SUCCESS)
        ret = hm_context_create(c->cls, NULL, &c->ctx);
    if (ret == HM_SUCCESS)
        ret = hm_addr_lookup(c->ctx, server_uri, &c->server);
    return ret;
}

hm_return_t bulk_client_close(struct bulk_client *c)
{
    hm_return_t ret = HM_SUCCESS;
    if (c->server)
        hm_addr_free(c->server);
    c->server = NULL;
    if (c->ctx)
        ret = hm_context_destroy(c->ctx);
    c->ctx = NULL;
    if (c->cls && ret == HM_SUCCESS)
        ret = hm_class_destroy(c->cls);
    c->cls = NULL;
    return ret;
}

hm_return_t bulk_call(struct bulk_client *c, hm_id_t id, const void *in, void *out)
{
    hm_handle_t *handle;
    hm_return_t ret = hm_handle_create(c->ctx, c->server, id, &handle);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hm_call(handle, in, out, 60000);
    if (ret == HM_SUCCESS && out)
        hm_free_output(handle, out);
    hm_handle_destroy(handle);
    return ret;
}

hm_return_t bulk_expose(struct bulk_client *c, const struct expose_in *in,
                        hm_bulk_t **remote_out)
{
    hm_handle_t *handle;
    struct expose_out out = {.ret = HM_FAULT};
    *remote_out = NULL;
    hm_return_t ret = hm_handle_create(c->ctx, c->server, c->ids.expose, &handle);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hm_call(handle, in, &out, 60000);
    if (ret == HM_SUCCESS) {
        ret = (hm_return_t)out.ret;
        if (out.bulk != NULL) {
            hm_bulk_ref(out.bulk); /* keep it past hm_free_output */
            *remote_out = out.bulk;
        }
        hm_free_output(handle, &out);
    }
    hm_handle_destroy(handle);
    return ret;
}

/* Progress and trigger until `w` has been called or `ms` have passed. */
static void transfer_wait_for(hm_context_t *ctx, struct hm_test_outcome *w, double ms)
{
    double end = bulk_now_ms() + ms;
    while (w->calls == 0 && bulk_now_ms() < end) {
        hm_progress(ctx, 100);
        hm_trigger(ctx, UINT32_MAX, NULL);
    }
}

hm_return_t bulk_transfer_wait(struct bulk_client *c, const hm_bulk_xfer_t *xfer,
                               const hm_bulk_opts_t *opts, unsigned int timeout_ms)
{
    /* On the heap: if the callback never comes, the op keeps pointing at it. */
    struct hm_test_outcome *w = calloc(1, sizeof(*w));
    hm_bulk_op_id_t *op;
    if (w == NULL)
        return HM_NOMEM;
    hm_return_t ret = hm_bulk_transfer(c->ctx, xfer, opts, hm_test_bulk_outcome_cb, w, &op);
    if (ret != HM_SUCCESS) {
        free(w);
        return ret;
    }
    transfer_wait_for(c->ctx, w, timeout_ms);
    if (w->calls == 0) {
        fprintf(stderr, "bulk_transfer_wait: no callback after %u ms; canceling\n",
                timeout_ms);
        hm_bulk_cancel(op);
        transfer_wait_for(c->ctx, w, 10000);
        if (w->calls == 0) {
            fprintf(stderr, "bulk_transfer_wait: no callback 10 s after the cancel\n");
            return HM_TIMEOUT; /* `w` is left to the op */
        }
        ret = HM_TIMEOUT;
    } else {
        ret = w->ret;
    }
    free(w);
    return ret;
}

int bulk_server_start(struct hm_test_server *server)
{
    return hm_test_server_start(server, bulk_server_main, (void *)bulk_protocol,
                                BULK_SERVER_LIFE_S);
}

int bulk_setup(void **state)
{
    (void)state;
    if (bulk_server_start(&bulk_server) != 0)
        return -1;
    hm_return_t ret = bulk_client_open(&bulk_cli, bulk_protocol, bulk_server.uri);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "bulk_setup: cannot open a %s client: %s\n", bulk_protocol,
                hm_strerror(ret));
        return -1;
    }
    return 0;
}

int bulk_teardown(void **state)
{
    (void)state;
    if (bulk_cli.server)
        bulk_call(&bulk_cli, bulk_cli.ids.shutdown, NULL, NULL);
    int status = hm_test_server_stop_ctx(&bulk_server, 10, bulk_cli.ctx);
    hm_return_t ret = bulk_client_close(&bulk_cli);
    if (ret != HM_SUCCESS)
        fprintf(stderr, "bulk_teardown: closing the client: %s\n", hm_strerror(ret));
    return status == 0 && ret == HM_SUCCESS ? 0 : -1;
}
