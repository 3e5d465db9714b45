/* The test server and client fixture shared by the core's tests. */
#include "core_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

uint64_t (*core_malloc_count)(void);
const char *core_protocol = "ucx+tcp://127.0.0.1:0";
const hm_class_opts_t *core_class_opts;
struct core_client core_client;

/* ---- procs ---------------------------------------------------------------- */

static const hm_proc_field_t echo_fields[] = {
    HM_PROC_FIELD(struct core_echo, str, hm_proc_string),
};
static hm_return_t echo_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, echo_fields, HM_PROC_FIELD_COUNT(echo_fields));
}

static const hm_proc_field_t ms_fields[] = {
    HM_PROC_FIELD(struct core_ms, ms, hm_proc_uint32),
};
static hm_return_t ms_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, ms_fields, HM_PROC_FIELD_COUNT(ms_fields));
}

static const hm_proc_field_t stats_fields[] = {
    HM_PROC_FIELD(struct core_server_stats, requests_received, hm_proc_uint64),
    HM_PROC_FIELD(struct core_server_stats, dropped_malformed, hm_proc_uint64),
    HM_PROC_FIELD(struct core_server_stats, dropped_checksum, hm_proc_uint64),
    HM_PROC_FIELD(struct core_server_stats, dropped_expired, hm_proc_uint64),
    HM_PROC_FIELD(struct core_server_stats, marked_handled, hm_proc_uint64),
    HM_PROC_FIELD(struct core_server_stats, noentry_replies, hm_proc_uint64),
    HM_PROC_FIELD(struct core_server_stats, mallocs, hm_proc_uint64),
    HM_PROC_FIELD(struct core_server_stats, overflows_received, hm_proc_uint64),
    HM_PROC_FIELD(struct core_server_stats, dropped_overflow, hm_proc_uint64),
    HM_PROC_FIELD(struct core_server_stats, listen_accepted, hm_proc_uint64),
    HM_PROC_FIELD(struct core_server_stats, listen_refused_frame, hm_proc_uint64),
    HM_PROC_FIELD(struct core_server_stats, listen_refused_key, hm_proc_uint64),
    HM_PROC_FIELD(struct core_server_stats, listen_refused_slow, hm_proc_uint64),
    HM_PROC_FIELD(struct core_server_stats, listen_refused_busy, hm_proc_uint64),
    HM_PROC_FIELD(struct core_server_stats, voluntary_switches, hm_proc_uint64),
    HM_PROC_FIELD(struct core_server_stats, cpu_us, hm_proc_uint64),
    HM_PROC_FIELD(struct core_server_stats, peers_evicted, hm_proc_uint64),
    HM_PROC_FIELD(struct core_server_stats, peers_refused, hm_proc_uint64),
};
static hm_return_t stats_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, stats_fields, HM_PROC_FIELD_COUNT(stats_fields));
}

/* ---- server state (lives in the child) -------------------------------------- */

#define MAX_PARKED 4096

struct parked {
    hm_handle_t *handle;
    uint64_t due_ns; /* 0: never (hang) */
};

static struct {
    hm_context_t *ctx;
    struct core_ids ids;
    struct parked parked[MAX_PARKED];
    size_t nparked;
    uint64_t busy_until_ns;
    uint64_t marked_handled;
    bool shutdown;
} srv;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static hm_return_t respond_and_release(hm_handle_t *handle, const void *out)
{
    hm_return_t ret = hm_respond(handle, out, NULL, NULL);
    hm_handle_destroy(handle);
    return ret;
}

static hm_return_t on_noop(hm_handle_t *handle)
{
    return respond_and_release(handle, NULL);
}

static hm_return_t on_echo(hm_handle_t *handle)
{
    struct core_echo in;
    hm_return_t ret = hm_get_input(handle, &in);
    if (ret != HM_SUCCESS) {
        hm_handle_destroy(handle);
        return ret;
    }
    ret = hm_respond(handle, &in, NULL, NULL);
    hm_free_input(handle, &in);
    hm_handle_destroy(handle);
    return ret;
}

static hm_return_t park(hm_handle_t *handle, uint64_t due_ns)
{
    if (srv.nparked == MAX_PARKED) {
        hm_handle_destroy(handle);
        return HM_NOMEM;
    }
    srv.parked[srv.nparked++] = (struct parked){handle, due_ns};
    return HM_SUCCESS;
}

static hm_return_t on_hang(hm_handle_t *handle)
{
    return park(handle, 0);
}

static hm_return_t on_delay(hm_handle_t *handle)
{
    struct core_ms in;
    hm_return_t ret = hm_get_input(handle, &in);
    if (ret != HM_SUCCESS) {
        hm_handle_destroy(handle);
        return ret;
    }
    return park(handle, now_ns() + (uint64_t)in.ms * 1000000u);
}

static hm_return_t on_busy(hm_handle_t *handle)
{
    struct core_ms in;
    hm_return_t ret = hm_get_input(handle, &in);
    if (ret != HM_SUCCESS) {
        hm_handle_destroy(handle);
        return ret;
    }
    srv.busy_until_ns = now_ns() + (uint64_t)in.ms * 1000000u;
    return respond_and_release(handle, NULL);
}

static hm_return_t on_marked(hm_handle_t *handle)
{
    srv.marked_handled++;
    return respond_and_release(handle, NULL);
}

static hm_return_t on_stats(hm_handle_t *handle)
{
    hm_stats_t st = {.size = sizeof(st)};
    hm_context_stats(srv.ctx, &st);
    struct rusage ru;
    memset(&ru, 0, sizeof(ru));
    getrusage(RUSAGE_SELF, &ru); /* cannot fail with RUSAGE_SELF and a valid pointer */
    struct core_server_stats out = {
        .requests_received = st.requests_received,
        .dropped_malformed = st.dropped_malformed,
        .dropped_checksum = st.dropped_checksum,
        .dropped_expired = st.dropped_expired,
        .marked_handled = srv.marked_handled,
        .noentry_replies = st.noentry_replies,
        .mallocs = core_malloc_count ? core_malloc_count() : 0,
        .overflows_received = st.overflows_received,
        .dropped_overflow = st.dropped_overflow,
        .listen_accepted = st.listen_accepted,
        .listen_refused_frame = st.listen_refused_frame,
        .listen_refused_key = st.listen_refused_key,
        .listen_refused_slow = st.listen_refused_slow,
        .listen_refused_busy = st.listen_refused_busy,
        .voluntary_switches = (uint64_t)ru.ru_nvcsw,
        .cpu_us = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000u +
                  (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec),
        .peers_evicted = st.peers_evicted,
        .peers_refused = st.peers_refused,
    };
    return respond_and_release(handle, &out);
}

static hm_return_t on_shutdown(hm_handle_t *handle)
{
    srv.shutdown = true;
    return respond_and_release(handle, NULL);
}

hm_return_t core_register(hm_class_t *cls, struct core_ids *ids, bool server)
{
    struct {
        const char *name;
        hm_proc_cb_t in, out;
        hm_rpc_handler_t handler;
        hm_id_t *id;
    } rpcs[] = {
        {"test.noop", NULL, NULL, on_noop, &ids->noop},
        {"test.echo", echo_proc, echo_proc, on_echo, &ids->echo},
        {"test.hang", NULL, NULL, on_hang, &ids->hang},
        {"test.delay", ms_proc, NULL, on_delay, &ids->delay},
        {"test.busy", ms_proc, NULL, on_busy, &ids->busy},
        {"test.marked", NULL, NULL, on_marked, &ids->marked},
        {"test.stats", NULL, stats_proc, on_stats, &ids->stats},
        {"test.shutdown", NULL, NULL, on_shutdown, &ids->shutdown},
    };
    for (size_t i = 0; i < sizeof(rpcs) / sizeof(rpcs[0]); i++) {
        hm_return_t ret = hm_register(cls, rpcs[i].name, rpcs[i].in, rpcs[i].out,
                                      server ? rpcs[i].handler : NULL, rpcs[i].id);
        if (ret != HM_SUCCESS)
            return ret;
    }
    if (server)
        return HM_SUCCESS;
    return hm_register(cls, "test.not-on-server", NULL, NULL, NULL, &ids->unknown);
}

/* Respond to parked requests whose time has come; `all` flushes hung ones too. */
static void server_release_parked(bool all)
{
    uint64_t now = now_ns();
    size_t kept = 0;
    for (size_t i = 0; i < srv.nparked; i++) {
        struct parked *p = &srv.parked[i];
        if (p->due_ns && p->due_ns <= now)
            respond_and_release(p->handle, NULL);
        else if (all)
            hm_handle_destroy(p->handle);
        else
            srv.parked[kept++] = *p;
    }
    srv.nparked = kept;
}

unsigned core_server_wait_ms = 20;

static void server_loop(void)
{
    while (!srv.shutdown) {
        hm_progress(srv.ctx, core_server_wait_ms);
        if (now_ns() < srv.busy_until_ns)
            continue; /* busy: requests pile up in the queue untriggered */
        server_release_parked(false);
        hm_trigger(srv.ctx, UINT32_MAX, NULL);
    }
    server_release_parked(true);
    /* Let the last responses leave before tearing down. */
    hm_test_context_close(srv.ctx, 100);
}

/* The server child's body (hm_test_server_start); arg is the protocol URI. */
static int server_main(void *arg)
{
    const char *protocol = arg;
    hm_class_t *cls;
    if (hm_class_create(protocol, core_class_opts, &cls) != HM_SUCCESS) {
        fprintf(stderr, "server: cannot open %s: %s\n", protocol, hm_error_detail());
        return 2;
    }
    if (core_register(cls, &srv.ids, true) != HM_SUCCESS ||
        hm_context_create(cls, NULL, &srv.ctx) != HM_SUCCESS)
        return 3;
    if (hm_test_ready_self(srv.ctx) != 0)
        return 4;
    server_loop();
    return hm_class_destroy(cls) == HM_SUCCESS ? 0 : 5;
}

int core_server_start(struct hm_test_server *server, const char *protocol, unsigned life_s)
{
    /* The bound: SIGALRM ends a server nobody stops. */
    return hm_test_server_start(server, server_main, (void *)protocol, life_s);
}

void core_server_stop(struct hm_test_server *server, hm_context_t *ctx, hm_addr_t *addr,
                      const struct core_ids *ids)
{
    if (server->child.pid <= 0)
        return;
    if (ctx && addr) {
        hm_handle_t *handle;
        if (hm_handle_create(ctx, addr, ids->shutdown, &handle) == HM_SUCCESS) {
            hm_call(handle, NULL, NULL, 2000);
            hm_handle_destroy(handle);
        }
    }
    hm_test_server_stop_ctx(server, 5, ctx);
}

/* ---- client -------------------------------------------------------------------- */

hm_return_t core_client_open(struct core_client *client, const char *protocol,
                             const char *server_uri)
{
    client->cls = NULL;
    client->ctx = NULL;
    client->server = NULL;
    char uri[128];
    /* The client listens on the same protocol, any port. */
    if (hm_test_client_uri(protocol, uri, sizeof(uri)) != 0)
        return HM_INVALID_ARG;
    hm_return_t ret = hm_class_create(uri, core_class_opts, &client->cls);
    if (ret != HM_SUCCESS)
        return ret;
    ret = core_register(client->cls, &client->ids, false);
    if (ret == HM_SUCCESS)
        ret = hm_context_create(client->cls, NULL, &client->ctx);
    if (ret == HM_SUCCESS)
        ret = hm_addr_lookup(client->ctx, server_uri, &client->server);
    return ret;
}

void core_client_close(struct core_client *client)
{
    if (client->server)
        hm_addr_free(client->server);
    if (client->ctx)
        hm_test_context_close(client->ctx, 100);
    if (client->cls)
        hm_class_destroy(client->cls);
    client->cls = NULL;
    client->ctx = NULL;
    client->server = NULL;
}

int core_fixture_start(struct core_client *client, const char *protocol)
{
    memset(client, 0, sizeof(*client));
    if (core_server_start(&client->server_proc, protocol, 300) != 0)
        return -1;
    hm_return_t ret = core_client_open(client, protocol, client->server_proc.uri);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "client: cannot open %s: %s (%s)\n", protocol, hm_strerror(ret),
                hm_error_detail());
        core_fixture_stop(client);
        return -1;
    }
    return 0;
}

int core_fixture_stop(struct core_client *client)
{
    core_server_stop(&client->server_proc, client->ctx, client->server, &client->ids);
    core_client_close(client);
    return 0;
}

hm_return_t core_call(struct core_client *client, hm_id_t id, const void *in, void *out,
                      unsigned timeout_ms)
{
    hm_handle_t *handle;
    hm_return_t ret = hm_handle_create(client->ctx, client->server, id, &handle);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hm_call(handle, in, out, timeout_ms);
    if (ret == HM_SUCCESS && out)
        hm_free_output(handle, out);
    hm_handle_destroy(handle);
    return ret;
}

hm_return_t core_server_stats(struct core_client *client, struct core_server_stats *stats)
{
    hm_handle_t *handle;
    hm_return_t ret = hm_handle_create(client->ctx, client->server, client->ids.stats, &handle);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hm_call(handle, NULL, stats, 5000);
    if (ret == HM_SUCCESS)
        hm_free_output(handle, stats);
    hm_handle_destroy(handle);
    return ret;
}

int core_setup(void **state)
{
    (void)state;
    return core_fixture_start(&core_client, core_protocol);
}

int core_teardown(void **state)
{
    (void)state;
    return core_fixture_stop(&core_client);
}

double core_now_ms(void)
{
    return (double)now_ns() / 1e6;
}
