/*
 * hm-perf client: reach the servers, measure the rows (for each size, one
 * row per thread count and in-flight count), ask the servers for their peak memory after
 * each row, stop them at the end.
 */
#include <stdlib.h>
#include <string.h>

#include "perf.h"

#define PERF_CALL_TIMEOUT_MS 30000 /* setup (registers buffers), stats, stop */

struct perf_client {
    const struct perf_opts *opts;
    struct perf_ep ep;
    hm_addr_t **servers;
    unsigned int nservers; /* reached so far */
    struct perf_threads threads; /* the client threads' contexts */
    double lookup_us, first_us; /* first contact (client_first) */
};

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

/* client_call: call RPC `id` on server `i` and wait; `out` decoded then freed. */
static hm_return_t client_call(struct perf_client *cli, unsigned int i, hm_id_t id,
                               const void *in, void *out)
{
    hm_handle_t *handle = NULL;
    hm_return_t ret = hm_handle_create(cli->ep.ctx, cli->servers[i], id, &handle);

    if (ret != HM_SUCCESS)
        return ret;
    ret = hm_call(handle, in, out, PERF_CALL_TIMEOUT_MS);
    if (ret == HM_SUCCESS)
        hm_free_output(handle, out);
    hm_handle_destroy(handle);
    return ret;
}

/* client_server_rss: the largest peak resident memory the servers report. */
static int client_server_rss(struct perf_client *cli, long *kb_out)
{
    long max = 0;

    for (unsigned int i = 0; i < cli->nservers; i++) {
        struct perf_srv_stats out = {0};
        hm_return_t ret = client_call(cli, i, cli->ep.ids.stats, NULL, &out);
        if (ret != HM_SUCCESS)
            return perf_fail("cannot get the server's statistics", ret);
        if ((long)out.maxrss_kb > max)
            max = (long)out.maxrss_kb;
    }
    *kb_out = max;
    return 0;
}

/* client_setup: every server makes `slots` buffers of `size` for `op`. */
static int client_setup(struct perf_client *cli, size_t size, uint32_t slots)
{
    struct perf_bulk_setup in = {.op = (uint8_t)cli->opts->op,
                                 .slots = slots,
                                 .size = size,
                                 .chunk = cli->opts->chunk,
                                 .depth = (uint32_t)cli->opts->depth};

    for (unsigned int i = 0; i < cli->nservers; i++) {
        struct perf_status out = {0};
        hm_return_t ret = client_call(cli, i, cli->ep.ids.bulk_setup, &in, &out);
        if (ret == HM_SUCCESS)
            ret = (hm_return_t)out.ret;
        if (ret != HM_SUCCESS)
            return perf_fail("the server cannot set up its bulk buffers", ret);
    }
    return 0;
}

static const char *client_test_name(const struct perf_opts *opts)
{
    if (opts->kind == PERF_KIND_RPC)
        return opts->copy_in ? "rpc+copy" : "rpc";
    return opts->op == HM_BULK_PULL ? "pull" : "push";
}

/* client_row: measure one row and print it. */
static int client_row(struct perf_client *cli, const struct perf_row *row)
{
    struct perf_result res = {.protocol = hm_class_protocol(cli->ep.cls),
                              .test = client_test_name(cli->opts),
                              .lookup_us = cli->lookup_us,
                              .first_us = cli->first_us};

    if (perf_threads_row(&cli->threads, row, &res) != 0)
        return -1;
    res.client_maxrss_kb = perf_maxrss_kb();
    if (client_server_rss(cli, &res.server_maxrss_kb) != 0)
        return -1;
    perf_report_row(cli->opts, &res);
    return 0;
}

/* max_slots: RPCs in flight at most in a row, all threads together. */
static unsigned int max_slots(const struct perf_opts *opts)
{
    unsigned int inflight = 1, threads = 1;

    for (unsigned int i = 0; i < opts->ninflights; i++)
        if (opts->inflights[i] > inflight)
            inflight = opts->inflights[i];
    for (unsigned int i = 0; i < opts->nthreads; i++)
        if (opts->threads[i] > threads)
            threads = opts->threads[i];
    return inflight * threads;
}

/* client_rows: one row per thread count and in-flight count, on `base`. */
static int client_rows(struct perf_client *cli, const struct perf_row *base)
{
    const struct perf_opts *opts = cli->opts;
    int rc = 0;

    for (unsigned int t = 0; t < opts->nthreads && rc == 0; t++) {
        for (unsigned int i = 0; i < opts->ninflights && rc == 0; i++) {
            struct perf_row row = *base;
            row.threads = opts->threads[t];
            row.contexts = perf_row_contexts(opts, row.threads);
            row.inflight = opts->inflights[i];
            rc = client_row(cli, &row);
        }
    }
    return rc;
}

/* client_size_rpc: the rows of one argument size. */
static int client_size_rpc(struct perf_client *cli, size_t size)
{
    void *buf = calloc(1, size > 0 ? size : 1);
    struct perf_arg arg;
    int rc;

    if (buf == NULL) {
        fprintf(stderr, "hm-perf: out of memory\n");
        return -1;
    }
    memset(buf, 0xa5, size);
    arg.data = (hm_bytes_t){.data = buf, .len = size};
    hm_id_t with_arg = cli->opts->copy_in ? cli->ep.ids.copy_arg : cli->ep.ids.noop_arg;
    struct perf_row row = {.id = size > 0 ? with_arg : cli->ep.ids.noop,
                           .size = size, .rpc_in = size > 0 ? &arg : NULL};
    rc = client_rows(cli, &row);
    free(buf);
    return rc;
}

/* client_size_bulk: register the buffers of one size once, then its rows. */
static int client_size_bulk(struct perf_client *cli, size_t size)
{
    uint32_t slots = max_slots(cli->opts);
    struct perf_bulk_cli bc;
    int rc;

    if (client_setup(cli, size, slots) != 0 ||
        perf_bulk_cli_create(cli->ep.cls, size, slots, cli->opts->op, &bc) != 0)
        return -1;
    struct perf_row row = {.id = cli->ep.ids.bulk, .size = size, .bulk = &bc,
                           .op = cli->opts->op};
    rc = client_rows(cli, &row);
    perf_bulk_cli_free(&bc);
    return rc;
}

/* client_lookup: resolve every server URI; cli->nservers counts those reached. */
static int client_lookup(struct perf_client *cli, const char *const *uris, unsigned int n)
{
    cli->servers = calloc(n, sizeof(*cli->servers));
    if (cli->servers == NULL) {
        fprintf(stderr, "hm-perf: out of memory\n");
        return -1;
    }
    for (unsigned int i = 0; i < n; i++) {
        hm_return_t ret = hm_addr_lookup(cli->ep.ctx, uris[i], &cli->servers[i]);
        if (ret != HM_SUCCESS) {
            char what[600];
            snprintf(what, sizeof(what), "cannot reach %.500s", uris[i]);
            return perf_fail(what, ret);
        }
        cli->nservers++;
    }
    return 0;
}

/*
 * client_first: reach the servers and time the first contact before any
 * row: the lookups, then one no-op RPC to the first server, the first
 * message between the two processes (a forked server is fresh: whatever
 * the transport connects at lookup or at the first send is in these).
 */
static int client_first(struct perf_client *cli, const char *const *uris, unsigned int n)
{
    uint64_t t0 = perf_now_ns();
    if (client_lookup(cli, uris, n) != 0)
        return -1;
    uint64_t t1 = perf_now_ns();
    hm_return_t ret = client_call(cli, 0, cli->ep.ids.noop, NULL, NULL);
    if (ret != HM_SUCCESS)
        return perf_fail("the first RPC failed", ret);
    cli->lookup_us = (double)(t1 - t0) / 1e3;
    cli->first_us = (double)(perf_now_ns() - t1) / 1e3;
    return 0;
}

/* client_stop: ask every server reached to exit. */
static int client_stop(struct perf_client *cli)
{
    int rc = 0;

    for (unsigned int i = 0; i < cli->nservers; i++) {
        struct perf_srv_stats out = {0};
        hm_return_t ret = client_call(cli, i, cli->ep.ids.stop, NULL, &out);
        if (ret != HM_SUCCESS)
            rc = perf_fail("cannot stop the server", ret);
    }
    return rc;
}

static int client_measure(struct perf_client *cli)
{
    const struct perf_opts *opts = cli->opts;
    int rc = 0;

    perf_report_header(opts);
    for (unsigned int i = 0; i < opts->nsizes && rc == 0; i++) {
        if (opts->kind == PERF_KIND_BULK)
            rc = client_size_bulk(cli, opts->sizes[i]);
        else
            rc = client_size_rpc(cli, opts->sizes[i]);
    }
    return rc;
}

/* client_session: reach the servers, measure if `measure`, stop them if `stop`. */
static int client_session(const struct perf_opts *opts, const char *const *uris,
                          unsigned int nservers, bool measure, bool stop)
{
    struct perf_client cli = {.opts = opts};
    char uri[256];
    int rc;

    if (nservers == 0 || client_uri(uris[0], uri, sizeof(uri)) != 0 ||
        perf_ep_open(&cli.ep, uri, opts->mode, NULL) != 0)
        return -1;
    rc = measure ? client_first(&cli, uris, nservers) : client_lookup(&cli, uris, nservers);
    if (rc == 0 && measure) {
        struct perf_target main = {cli.ep.ctx, cli.servers, cli.nservers};
        rc = perf_threads_open(&cli.threads, opts, cli.ep.cls, &main, uris);
        if (rc == 0)
            rc = client_measure(&cli);
        if (cli.threads.opts != NULL && perf_threads_close(&cli.threads) != 0)
            rc = -1;
    }
    if (stop && client_stop(&cli) != 0)
        rc = -1;
    for (unsigned int i = 0; i < cli.nservers; i++)
        hm_addr_free(cli.servers[i]);
    free(cli.servers);
    if (perf_ep_close(&cli.ep) != 0)
        rc = -1;
    return rc;
}

int perf_client_run(const struct perf_opts *opts, const char *const *uris,
                    unsigned int nservers, bool stop)
{
    return client_session(opts, uris, nservers, true, stop);
}

int perf_client_stop(const struct perf_opts *opts, const char *const *uris,
                     unsigned int nservers)
{
    return client_session(opts, uris, nservers, false, true);
}
