/*
 * hm-perf server: the loop and the small handlers (no-op, stats, stop).
 * The bulk handlers are in perf_bulk.c. A server serves one measuring
 * client until it sends "stop".
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

hm_return_t perf_server_respond(struct perf_server *srv, hm_handle_t *handle, const void *out)
{
    hm_return_t ret = hm_respond(handle, out, NULL, NULL);

    if (ret != HM_SUCCESS)
        srv->errors++;
    return ret;
}

static hm_return_t srv_noop(hm_handle_t *handle)
{
    struct perf_server *srv = hm_handle_get_data(handle);
    hm_return_t ret = perf_server_respond(srv, handle, NULL);

    hm_handle_destroy(handle);
    return ret;
}

static hm_return_t srv_noop_arg(hm_handle_t *handle)
{
    struct perf_server *srv = hm_handle_get_data(handle);
    struct perf_arg in;
    hm_return_t ret = hm_get_input(handle, &in);

    if (ret == HM_SUCCESS) {
        ret = perf_server_respond(srv, handle, NULL);
        hm_free_input(handle, &in);
    }
    hm_handle_destroy(handle);
    return ret;
}

/*
 * srv_copy_arg: what a storage service's write does with an argument that
 * came inline: copies it into memory of its own. `hm-perf rpc --copy-in`
 * against `hm-perf bulk --op pull` compares like with like, since a pull
 * lands in the server's buffer (srv_noop_arg never reads its argument).
 */
static hm_return_t srv_copy_arg(hm_handle_t *handle)
{
    struct perf_server *srv = hm_handle_get_data(handle);
    struct perf_arg in;
    hm_return_t ret = hm_get_input(handle, &in);

    if (ret == HM_SUCCESS) {
        if (in.data.len > srv->sink_size) {
            /* Page-aligned, as a storage service's buffers are: a sink that
             * malloc put right after the receive buffer (8 bytes past a
             * multiple of 4 KiB from it, seen on ofi+shm) made every copy
             * pay rep movsb's short-distance penalty (2.5 us for 4 KiB;
             * perf/RESULTS.md section 12). */
            void *bigger = NULL;
            if (posix_memalign(&bigger, 4096, in.data.len) == 0) {
                free(srv->sink);
                srv->sink = bigger;
                srv->sink_size = in.data.len;
            }
        }
        if (in.data.len <= srv->sink_size) {
            memcpy(srv->sink, in.data.data, in.data.len);
            ret = perf_server_respond(srv, handle, NULL);
        } else {
            ret = HM_NOMEM; /* no response: the client's stall check ends the run */
            srv->errors++;
        }
        hm_free_input(handle, &in);
    }
    hm_handle_destroy(handle);
    return ret;
}

static hm_return_t srv_stats(hm_handle_t *handle)
{
    struct perf_server *srv = hm_handle_get_data(handle);
    struct perf_srv_stats out = {.maxrss_kb = (uint64_t)perf_maxrss_kb()};
    hm_return_t ret = perf_server_respond(srv, handle, &out);

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
    struct perf_srv_stats out = {.maxrss_kb = (uint64_t)perf_maxrss_kb()};
    hm_return_t ret = hm_respond(handle, &out, srv_stop_sent, srv);

    if (ret != HM_SUCCESS)
        srv->stop_sent = true; /* the client will see its call fail; stop anyway */
    hm_handle_destroy(handle);
    return ret;
}

/* srv_uri: the server's URI, malloc'd (its length depends on the transport). */
static char *srv_uri(hm_context_t *ctx)
{
    hm_addr_t *self = NULL;
    char *uri = NULL;
    size_t size = 0;
    hm_return_t ret = hm_addr_self(ctx, &self);

    if (ret == HM_SUCCESS) {
        ret = hm_addr_to_string(self, NULL, &size);
        if (ret == HM_MSGSIZE) {
            uri = malloc(size);
            ret = uri != NULL ? hm_addr_to_string(self, uri, &size) : HM_NOMEM;
        }
        hm_addr_free(self);
    }
    if (ret != HM_SUCCESS) {
        perf_fail("cannot get the server's address", ret);
        free(uri);
        return NULL;
    }
    return uri;
}

/* srv_serve: progress and trigger until the stop response has left. */
static int srv_serve(hm_context_t *ctx, struct perf_server *srv)
{
    while (!srv->stop_sent) {
        hm_return_t ret = hm_progress(ctx, 1000);
        if (ret != HM_SUCCESS && ret != HM_TIMEOUT)
            return perf_fail("server: hm_progress", ret);
        hm_trigger(ctx, UINT_MAX, NULL);
    }
    if (srv->errors > 0) {
        fprintf(stderr, "hm-perf server: %lu responses failed to leave\n", srv->errors);
        return -1;
    }
    return 0;
}

int perf_server_run(const struct perf_opts *opts, perf_publish_cb publish, void *arg)
{
    struct perf_server srv = {.stop_sent = false};
    struct perf_handlers h = {
        .noop = srv_noop, .noop_arg = srv_noop_arg, .copy_arg = srv_copy_arg,
        .bulk_setup = perf_bulk_srv_setup_handler, .bulk = perf_bulk_srv_handler,
        .stats = srv_stats, .stop = srv_stop, .data = &srv,
    };
    struct perf_ep ep;
    char listen[512];
    int rc;

    perf_listen_uri(opts->protocol, listen, sizeof(listen));
    if (perf_ep_open(&ep, listen, opts->mode, &h) != 0) {
        publish(NULL, arg);
        return -1;
    }
    srv.bulk.cls = ep.cls;
    char *uri = srv_uri(ep.ctx); /* NULL on failure: publish it, so collectives end */
    bool have_uri = uri != NULL;
    rc = publish(uri, arg);
    free(uri);
    if (rc == 0 && have_uri)
        rc = srv_serve(ep.ctx, &srv);
    else
        rc = -1;
    free(srv.sink);
    if (perf_bulk_srv_free(&srv.bulk) != 0)
        rc = -1;
    if (perf_ep_close(&ep) != 0)
        rc = -1;
    return rc;
}
