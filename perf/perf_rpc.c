/*
 * hm-perf rpc: the no-op RPCs, the server loop and the client's measuring
 * loop.
 *
 * The client keeps N handles, one per RPC in flight. Each completion
 * callback records the RPC's latency and forwards the next RPC on the same
 * handle at once, so exactly N are in flight until the end. The first
 * `warmup` completions are not counted. Nothing is allocated while measuring.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf.h"

#define PERF_STALL_NS (10ull * 1000000000ull) /* no completion for this long: fail */
#define PERF_STOP_TIMEOUT_MS 5000

/* ---- RPC definitions --------------------------------------------------------- */

/* Argument of "hm_perf.noop_arg": `size` bytes carried inline. */
struct perf_arg {
    hm_bytes_t data;
};

static const hm_proc_field_t perf_arg_fields[] = {
    HM_PROC_FIELD(struct perf_arg, data, hm_proc_bytes),
};

static hm_return_t perf_arg_proc(hm_proc_t *proc, void *data)
{
    return hm_proc_struct(proc, data, perf_arg_fields, HM_PROC_FIELD_COUNT(perf_arg_fields));
}

/* A class, a context and the RPC ids, on either side. */
struct perf_ep {
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_id_t noop;     /* no argument, no result */
    hm_id_t noop_arg; /* bytes in, no result */
    hm_id_t stop;     /* ends the server */
};

/* Server state, reached from the handlers through the stop RPC's data. */
struct perf_server {
    bool stop_sent; /* the response to "stop" has left: exit */
};

static hm_return_t srv_noop(hm_handle_t *handle)
{
    hm_return_t ret = hm_respond(handle, NULL, NULL, NULL);

    hm_handle_destroy(handle);
    return ret;
}

static hm_return_t srv_noop_arg(hm_handle_t *handle)
{
    struct perf_arg in;
    hm_return_t ret = hm_get_input(handle, &in);

    if (ret == HM_SUCCESS) {
        ret = hm_respond(handle, NULL, NULL, NULL);
        hm_free_input(handle, &in);
    }
    hm_handle_destroy(handle);
    return ret;
}

static void srv_stop_sent(const hm_cb_info_t *info)
{
    struct perf_server *srv = info->arg;

    srv->stop_sent = true;
}

static hm_return_t srv_stop(hm_handle_t *handle)
{
    struct perf_server *srv = hm_handle_get_data(handle);
    hm_return_t ret = hm_respond(handle, NULL, srv_stop_sent, srv);

    if (ret != HM_SUCCESS)
        srv->stop_sent = true; /* the client will see its call fail; stop anyway */
    hm_handle_destroy(handle);
    return ret;
}

/* ---- opening and closing ----------------------------------------------------- */

static int ep_fail(const char *what, hm_return_t ret)
{
    const char *detail = hm_error_detail();

    fprintf(stderr, "hm-perf: %s: %s%s%s\n", what, hm_strerror(ret),
            detail[0] != '\0' ? ": " : "", detail);
    return -1;
}

static int ep_register(struct perf_ep *ep, struct perf_server *srv)
{
    hm_return_t ret;

    ret = hm_register(ep->cls, "hm_perf.noop", NULL, NULL, srv ? srv_noop : NULL, &ep->noop);
    if (ret == HM_SUCCESS)
        ret = hm_register(ep->cls, "hm_perf.noop_arg", perf_arg_proc, NULL,
                          srv ? srv_noop_arg : NULL, &ep->noop_arg);
    if (ret == HM_SUCCESS)
        ret = hm_register(ep->cls, "hm_perf.stop", NULL, NULL, srv ? srv_stop : NULL,
                          &ep->stop);
    if (ret == HM_SUCCESS && srv != NULL)
        ret = hm_register_data(ep->cls, ep->stop, srv, NULL);
    return ret == HM_SUCCESS ? 0 : ep_fail("cannot register the RPCs", ret);
}

/* ep_open: class on `uri`, RPCs (with handlers when `srv`), context. */
static int ep_open(struct perf_ep *ep, const char *uri, hm_progress_mode_t mode,
                   struct perf_server *srv)
{
    hm_context_opts_t copts = {.field_mask = HM_CONTEXT_OPT_PROGRESS_MODE,
                               .progress_mode = mode};
    hm_return_t ret;
    char what[300];

    memset(ep, 0, sizeof(*ep));
    ret = hm_class_create(uri, NULL, &ep->cls);
    if (ret != HM_SUCCESS) {
        snprintf(what, sizeof(what), "cannot open %s", uri);
        return ep_fail(what, ret);
    }
    if (ep_register(ep, srv) != 0)
        goto err_class;
    ret = hm_context_create(ep->cls, &copts, &ep->ctx);
    if (ret != HM_SUCCESS) {
        ep_fail("hm_context_create", ret);
        goto err_class;
    }
    return 0;

err_class:
    hm_class_destroy(ep->cls);
    return -1;
}

static int ep_close(struct perf_ep *ep)
{
    hm_return_t ret = hm_context_destroy(ep->ctx);

    if (ret != HM_SUCCESS)
        return ep_fail("hm_context_destroy", ret);
    ret = hm_class_destroy(ep->cls);
    if (ret != HM_SUCCESS)
        return ep_fail("hm_class_destroy", ret);
    return 0;
}

/* ---- server -------------------------------------------------------------------- */

/* The URI a class on `protocol` listens on: loopback, any port, for "+tcp". */
static void perf_listen_uri(const char *protocol, char *buf, size_t size)
{
    const char *plus = strchr(protocol, '+');
    bool tcp = plus != NULL && strcmp(plus, "+tcp") == 0;

    snprintf(buf, size, "%s://%s", protocol, tcp ? "127.0.0.1:0" : "");
}

/* srv_uri: the server's URI, malloc'd (its length depends on the transport). */
static char *srv_uri(struct perf_ep *ep)
{
    hm_addr_t *self = NULL;
    char *uri = NULL;
    size_t size = 0;
    hm_return_t ret = hm_addr_self(ep->ctx, &self);

    if (ret == HM_SUCCESS) {
        ret = hm_addr_to_string(self, NULL, &size);
        if (ret == HM_MSGSIZE) {
            uri = malloc(size);
            ret = uri != NULL ? hm_addr_to_string(self, uri, &size) : HM_NOMEM;
        }
        hm_addr_free(self);
    }
    if (ret != HM_SUCCESS) {
        ep_fail("cannot get the server's address", ret);
        free(uri);
        return NULL;
    }
    return uri;
}

/* srv_publish: the URI to the parent's pipe, or stdout; and to addr_file. */
static int srv_publish(struct perf_ep *ep, int ready_fd, const char *addr_file)
{
    char *uri = srv_uri(ep);
    int rc = 0;

    if (uri == NULL)
        return -1;
    if (ready_fd >= 0 && dprintf(ready_fd, "%s\n", uri) < 0) {
        perror("hm-perf: writing the address to the parent");
        rc = -1;
    }
    if (rc == 0 && addr_file != NULL) {
        FILE *f = fopen(addr_file, "w");
        bool ok = f != NULL && fprintf(f, "%s\n", uri) >= 0;
        if (f != NULL && fclose(f) != 0)
            ok = false;
        if (!ok) {
            perror(addr_file);
            rc = -1;
        }
    }
    if (rc == 0 && ready_fd < 0) {
        printf("%s\n", uri);
        fflush(stdout);
    }
    free(uri);
    return rc;
}

int perf_server_run(const struct perf_opts *opts, int ready_fd)
{
    struct perf_server srv = {.stop_sent = false};
    struct perf_ep ep;
    char uri[256];
    int rc = 0;

    perf_listen_uri(opts->protocol, uri, sizeof(uri));
    if (ep_open(&ep, uri, opts->mode, &srv) != 0)
        return -1;
    if (srv_publish(&ep, ready_fd, opts->addr_file) != 0)
        rc = -1;
    while (rc == 0 && !srv.stop_sent) {
        hm_return_t ret = hm_progress(ep.ctx, 1000);
        if (ret != HM_SUCCESS && ret != HM_TIMEOUT)
            rc = ep_fail("server: hm_progress", ret);
        hm_trigger(ep.ctx, UINT_MAX, NULL);
    }
    if (ep_close(&ep) != 0)
        rc = -1;
    return rc;
}

/* ---- client: the measuring loop ------------------------------------------------- */

struct perf_run;

/* One RPC in flight: its handle and when it was sent. */
struct perf_slot {
    struct perf_run *run;
    hm_handle_t *handle;
    uint64_t t0;
};

struct perf_run {
    const void *in;        /* the argument (NULL for the plain no-op) */
    unsigned long total;   /* warmup + iters */
    unsigned long warmup;
    unsigned long sent, done;
    uint64_t *samples;     /* iters latencies, ns */
    size_t nsamples;
    uint64_t t_start, t_end;
    hm_return_t error;     /* first failure */
};

static void run_done_cb(const hm_cb_info_t *info);

/* Forward the next RPC on `slot`'s handle. */
static void run_send(struct perf_slot *slot)
{
    struct perf_run *run = slot->run;
    hm_return_t ret;

    slot->t0 = perf_now_ns();
    ret = hm_forward(slot->handle, run->in, run_done_cb, slot, NULL);
    if (ret != HM_SUCCESS) {
        if (run->error == HM_SUCCESS)
            run->error = ret;
        return;
    }
    run->sent++;
}

/* One RPC completed: record it, send the next on the same handle. */
static void run_done_cb(const hm_cb_info_t *info)
{
    struct perf_slot *slot = info->arg;
    struct perf_run *run = slot->run;
    uint64_t now = perf_now_ns();

    run->done++;
    if (info->ret != HM_SUCCESS) {
        if (run->error == HM_SUCCESS)
            run->error = info->ret;
        return;
    }
    hm_free_output(info->handle, NULL); /* no result: just releases the buffer */
    if (run->done > run->warmup)
        run->samples[run->nsamples++] = now - slot->t0;
    if (run->done == run->warmup)
        run->t_start = now;
    if (run->done == run->total)
        run->t_end = now;
    if (run->sent < run->total && run->error == HM_SUCCESS)
        run_send(slot);
}

/*
 * run_drive: progress and trigger until every RPC sent has completed.
 * Fails when nothing completes for PERF_STALL_NS.
 */
static int run_drive(hm_context_t *ctx, struct perf_run *run)
{
    uint64_t last = perf_now_ns();
    unsigned long last_done = run->done;

    while (run->done < run->sent) {
        hm_return_t ret = hm_progress(ctx, 100);
        if (ret != HM_SUCCESS && ret != HM_TIMEOUT)
            return ep_fail("client: hm_progress", ret);
        hm_trigger(ctx, UINT_MAX, NULL);
        if (run->done != last_done) {
            last_done = run->done;
            last = perf_now_ns();
        } else if (perf_now_ns() - last > PERF_STALL_NS) {
            fprintf(stderr, "hm-perf: no response from the server for %llu s\n",
                    PERF_STALL_NS / 1000000000ull);
            return -1;
        }
    }
    return 0;
}

/* Cancel what is still in flight and trigger the callbacks (bounded). */
static void run_abort(hm_context_t *ctx, struct perf_slot *slots, unsigned int n,
                      struct perf_run *run)
{
    run->total = run->sent; /* send nothing more */
    for (unsigned int i = 0; i < n; i++)
        hm_cancel(slots[i].handle);
    for (int i = 0; i < 100 && run->done < run->sent; i++) {
        hm_progress(ctx, 10);
        hm_trigger(ctx, UINT_MAX, NULL);
    }
}

/* Measure one row: `iters` RPCs with `inflight` in flight. */
static int run_row(struct perf_ep *ep, hm_addr_t *server, const struct perf_opts *opts,
                   unsigned int inflight, const void *in, struct perf_result *res)
{
    hm_id_t id = opts->size > 0 ? ep->noop_arg : ep->noop;
    struct perf_run run = {.in = in, .warmup = opts->warmup,
                           .total = opts->warmup + opts->iters, .error = HM_SUCCESS};
    struct perf_slot *slots = calloc(inflight, sizeof(*slots));
    unsigned int n = 0;
    int rc = -1;

    run.samples = malloc(opts->iters * sizeof(*run.samples));
    if (slots == NULL || run.samples == NULL) {
        fprintf(stderr, "hm-perf: out of memory\n");
        goto out;
    }
    for (; n < inflight; n++) {
        hm_return_t ret = hm_handle_create(ep->ctx, server, id, &slots[n].handle);
        if (ret != HM_SUCCESS) {
            ep_fail("hm_handle_create", ret);
            goto out;
        }
        slots[n].run = &run;
    }
    run.t_start = perf_now_ns();
    for (unsigned int i = 0; i < inflight && run.sent < run.total; i++)
        run_send(&slots[i]);
    rc = run_drive(ep->ctx, &run);
    if (rc != 0 || run.error != HM_SUCCESS) {
        if (rc == 0)
            rc = ep_fail("RPC failed", run.error);
        run_abort(ep->ctx, slots, n, &run);
        goto out;
    }
    res->inflight = inflight;
    res->iters = opts->iters;
    perf_stats_compute(run.samples, run.nsamples, run.t_end - run.t_start, res);
out:
    for (unsigned int i = 0; i < n; i++)
        hm_handle_destroy(slots[i].handle);
    free(slots);
    free(run.samples);
    return rc;
}

/* The URI a client opens to reach `server_uri`: same transport, any port. */
static int client_uri(const char *server_uri, char *buf, size_t size)
{
    const char *sep = strstr(server_uri, "://");
    char protocol[64];

    if (sep == NULL || (size_t)(sep - server_uri) >= sizeof(protocol)) {
        fprintf(stderr, "hm-perf: not a server URI: %s\n", server_uri);
        return -1;
    }
    snprintf(protocol, sizeof(protocol), "%.*s", (int)(sep - server_uri), server_uri);
    perf_listen_uri(protocol, buf, size);
    return 0;
}

/* Ask the server to exit. */
static int client_stop(struct perf_ep *ep, hm_addr_t *server)
{
    hm_handle_t *handle = NULL;
    hm_return_t ret = hm_handle_create(ep->ctx, server, ep->stop, &handle);

    if (ret == HM_SUCCESS) {
        ret = hm_call(handle, NULL, NULL, PERF_STOP_TIMEOUT_MS);
        hm_handle_destroy(handle);
    }
    return ret == HM_SUCCESS ? 0 : ep_fail("cannot stop the server", ret);
}

/* The rows: inflight 1, then opts->inflight if larger. */
static int client_rows(struct perf_ep *ep, hm_addr_t *server, const struct perf_opts *opts)
{
    struct perf_arg arg;
    void *buf = calloc(1, opts->size > 0 ? opts->size : 1);
    struct perf_result res;
    int rc = -1;

    if (buf == NULL) {
        fprintf(stderr, "hm-perf: out of memory\n");
        return -1;
    }
    memset(buf, 0xa5, opts->size);
    arg.data = (hm_bytes_t){.data = buf, .len = opts->size};
    const void *in = opts->size > 0 ? &arg : NULL;

    perf_print_header(opts);
    if (run_row(ep, server, opts, 1, in, &res) != 0)
        goto out;
    perf_print_row(opts, hm_class_protocol(ep->cls), &res);
    if (opts->inflight > 1) {
        if (run_row(ep, server, opts, opts->inflight, in, &res) != 0)
            goto out;
        perf_print_row(opts, hm_class_protocol(ep->cls), &res);
    }
    rc = 0;
out:
    free(buf);
    return rc;
}

int perf_client_run(const struct perf_opts *opts, const char *server_uri, bool stop)
{
    struct perf_ep ep;
    hm_addr_t *server = NULL;
    char uri[256];
    int rc;

    if (client_uri(server_uri, uri, sizeof(uri)) != 0 ||
        ep_open(&ep, uri, opts->mode, NULL) != 0)
        return -1;
    hm_return_t ret = hm_addr_lookup(ep.ctx, server_uri, &server);
    if (ret != HM_SUCCESS) {
        char what[600];
        snprintf(what, sizeof(what), "cannot reach %s", server_uri);
        rc = ep_fail(what, ret);
        goto out;
    }
    rc = client_rows(&ep, server, opts);
    if (stop && client_stop(&ep, server) != 0)
        rc = -1;
    hm_addr_free(server);
out:
    if (ep_close(&ep) != 0)
        rc = -1;
    return rc;
}
