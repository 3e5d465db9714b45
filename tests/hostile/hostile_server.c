/* The hostile tests' server and the client helpers (see hostile.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core_internal.h"
#include "hostile.h"

/* ---- procs ------------------------------------------------------------------ */

static hm_return_t proc_fill(hm_proc_t *p, void *data)
{
    return hm_proc_bytes(p, data);
}

static const hm_proc_field_t report_fields[] = {
    HM_PROC_FIELD(struct hostile_report, overload_replies, hm_proc_uint64),
    HM_PROC_FIELD(struct hostile_report, overload_drops, hm_proc_uint64),
    HM_PROC_FIELD(struct hostile_report, pool_trimmed, hm_proc_uint64),
    HM_PROC_FIELD(struct hostile_report, requests_received, hm_proc_uint64),
    HM_PROC_FIELD(struct hostile_report, dropped_overflow, hm_proc_uint64),
    HM_PROC_FIELD(struct hostile_report, overflows_received, hm_proc_uint64),
    HM_PROC_FIELD(struct hostile_report, sends_pooled, hm_proc_uint64),
    HM_PROC_FIELD(struct hostile_report, handles_pooled, hm_proc_uint64),
    HM_PROC_FIELD(struct hostile_report, retain, hm_proc_uint64),
    HM_PROC_FIELD(struct hostile_report, admit_replies, hm_proc_uint64),
    HM_PROC_FIELD(struct hostile_report, admit_waiting, hm_proc_uint64),
    HM_PROC_FIELD(struct hostile_report, admit_bytes, hm_proc_uint64),
};

static hm_return_t proc_report(hm_proc_t *p, void *data)
{
    return hm_proc_struct(p, data, report_fields, HM_PROC_FIELD_COUNT(report_fields));
}

/* ---- server state (lives in the child) ---------------------------------------- */

#define HELD_MAX 65536u

static struct {
    hm_context_t *ctx;
    hm_handle_t *sunk[HELD_MAX];   /* "sink" requests, never answered */
    uint32_t nsunk;
    hm_handle_t *gated[HELD_MAX];  /* "gate" requests until "open" */
    uint32_t gate_in[HELD_MAX];
    uint32_t ngated;
    hm_handle_t *kept[HELD_MAX];   /* "keep" requests until "open" */
    uint32_t nkept;
    bool gate_open;
    bool stop;
    char fill[HOSTILE_FILL_SIZE];
} srv;

static hm_return_t srv_answer(hm_handle_t *h, const void *out)
{
    hm_return_t ret = hm_respond(h, out, NULL, NULL);
    hm_handle_destroy(h);
    return ret;
}

static hm_return_t srv_sink(hm_handle_t *h)
{
    if (srv.stop || srv.nsunk == HELD_MAX) /* attackers may outlive the stop */
        return srv_answer(h, NULL);
    srv.sunk[srv.nsunk++] = h;
    return HM_SUCCESS;
}

static hm_return_t srv_fill(hm_handle_t *h)
{
    hm_bytes_t out = {.data = srv.fill, .len = sizeof(srv.fill)};
    return srv_answer(h, &out);
}

/* Input that does not decode: answered with the error (the handler's
 * reference is ours to drop). */
static hm_return_t srv_refuse(hm_handle_t *h, hm_return_t ret)
{
    hm_handle_destroy(h);
    return ret;
}

static hm_return_t srv_gate(hm_handle_t *h)
{
    uint32_t in = 0;
    hm_return_t ret = hm_get_input(h, &in);
    if (ret != HM_SUCCESS)
        return srv_refuse(h, ret);
    hm_free_input(h, &in);
    if (srv.gate_open || srv.ngated == HELD_MAX)
        return srv_answer(h, &in);
    srv.gate_in[srv.ngated] = in;
    srv.gated[srv.ngated++] = h;
    return HM_SUCCESS;
}

/* Decode an hm_bytes_t input and free it at once; its error, else HM_SUCCESS. */
static hm_return_t srv_drop_bytes(hm_handle_t *h)
{
    hm_bytes_t in;
    hm_return_t ret = hm_get_input(h, &in);
    if (ret == HM_SUCCESS)
        hm_free_input(h, &in);
    return ret;
}

/* Its input freed at once, the request kept until "open". */
static hm_return_t srv_keep(hm_handle_t *h)
{
    hm_return_t ret = srv_drop_bytes(h);
    if (ret != HM_SUCCESS)
        return srv_refuse(h, ret);
    if (srv.gate_open || srv.nkept == HELD_MAX)
        return srv_answer(h, NULL);
    srv.kept[srv.nkept++] = h;
    return HM_SUCCESS;
}

/* Answer every held "gate" and "keep". */
static void srv_release_held(void)
{
    for (uint32_t i = 0; i < srv.ngated; i++)
        srv_answer(srv.gated[i], &srv.gate_in[i]);
    for (uint32_t i = 0; i < srv.nkept; i++)
        srv_answer(srv.kept[i], NULL);
    srv.ngated = srv.nkept = 0;
}

static hm_return_t srv_open(hm_handle_t *h)
{
    srv.gate_open = true;
    srv_release_held();
    return srv_answer(h, NULL);
}

static hm_return_t srv_echo(hm_handle_t *h)
{
    uint32_t in = 0;
    hm_return_t ret = hm_get_input(h, &in);
    if (ret != HM_SUCCESS)
        return srv_refuse(h, ret);
    hm_free_input(h, &in);
    return srv_answer(h, &in);
}

static hm_return_t srv_bytes(hm_handle_t *h)
{
    hm_return_t ret = srv_drop_bytes(h);
    return ret != HM_SUCCESS ? srv_refuse(h, ret) : srv_answer(h, NULL);
}

static hm_return_t srv_stats(hm_handle_t *h)
{
    hm_context_t *ctx = hm_handle_get_context(h);
    hm_stats_t st = {.size = sizeof(st)};
    hm_context_stats(ctx, &st);
    struct hostile_report rep = {
        .overload_replies = st.overload_replies,
        .overload_drops = st.overload_drops,
        .pool_trimmed = st.pool_trimmed,
        .requests_received = st.requests_received,
        .dropped_overflow = st.dropped_overflow,
        .overflows_received = st.overflows_received,
        .sends_pooled = ctx->c_sends_total, /* internals: the server is ours */
        .handles_pooled = ctx->c_table_size - ctx->c_slots_free_count,
        .retain = ctx->c_retain,
        .admit_replies = ctx->c_admit.ad_replies,
        .admit_waiting = ctx->c_admit.ad_deferred_count,
        .admit_bytes = ctx->c_admit.ad_bytes,
    };
    return srv_answer(h, &rep);
}

static hm_return_t srv_stop(hm_handle_t *h)
{
    srv.stop = true;
    return srv_answer(h, NULL);
}

hm_return_t hostile_register(hm_class_t *cls)
{
    struct {
        const char *name;
        hm_proc_cb_t in, out;
        hm_rpc_handler_t handler;
    } rpcs[] = {
        {HOSTILE_SINK, NULL, NULL, srv_sink},
        {HOSTILE_FILL, NULL, proc_fill, srv_fill},
        {HOSTILE_GATE, hm_proc_uint32, hm_proc_uint32, srv_gate},
        {HOSTILE_OPEN, NULL, NULL, srv_open},
        {HOSTILE_ECHO, hm_proc_uint32, hm_proc_uint32, srv_echo},
        {HOSTILE_KEEP, hm_proc_bytes, NULL, srv_keep},
        {HOSTILE_BYTES, hm_proc_bytes, NULL, srv_bytes},
        {HOSTILE_STATS, NULL, proc_report, srv_stats},
        {HOSTILE_STOP, NULL, NULL, srv_stop},
    };
    for (size_t i = 0; i < sizeof(rpcs) / sizeof(rpcs[0]); i++) {
        hm_return_t ret =
            hm_register(cls, rpcs[i].name, rpcs[i].in, rpcs[i].out, rpcs[i].handler, NULL);
        if (ret != HM_SUCCESS)
            return ret;
    }
    return HM_SUCCESS;
}

/* Drop what is held, then progress until the context can be destroyed. */
static int srv_shutdown(hm_class_t *cls)
{
    srv.gate_open = true;
    for (uint32_t i = 0; i < srv.nsunk; i++)
        hm_handle_destroy(srv.sunk[i]);
    srv.nsunk = 0;
    srv_release_held();
    for (int tries = 0; tries < 1500; tries++) { /* dead peers noticed */
        hm_progress(srv.ctx, 10);
        hm_trigger(srv.ctx, 1u << 20, NULL);
        if (hm_context_destroy(srv.ctx) == HM_SUCCESS)
            return hm_class_destroy(cls) == HM_SUCCESS ? 0 : 3;
    }
    fprintf(stderr, "hostile server: context still busy at exit (%u handles, %u transfers)\n",
            srv.ctx->c_handles_alive, hmi_bulk_host_alive(srv.ctx->c_bulk));
    return 4;
}

static uint64_t srv_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec;
}

int hostile_server_start(struct hm_test_server *server, const struct hostile_server_args *args)
{
    /* Its loop ends after life_s; the fixture's bound catches a server stuck in it. */
    return hm_test_server_start(server, hostile_server_main, (void *)args, args->life_s + 30);
}

int hostile_server_main(void *arg)
{
    const struct hostile_server_args *args = arg;
    hm_class_t *cls;
    if (hm_class_create(args->protocol, NULL, &cls) != HM_SUCCESS)
        return 1;
    if (hostile_register(cls) != HM_SUCCESS ||
        hm_context_create(cls, &args->opts, &srv.ctx) != HM_SUCCESS)
        return 2;
    memset(srv.fill, 0x5a, sizeof(srv.fill));
    if (hm_test_ready_self(srv.ctx) != 0)
        return 2;
    uint64_t end = srv_now_s() + args->life_s;
    while (!srv.stop && srv_now_s() < end) {
        hm_progress(srv.ctx, 100);
        hm_trigger(srv.ctx, 1u << 20, NULL);
    }
    return srv_shutdown(cls);
}

/* ---- client helpers ---------------------------------------------------------------- */

hm_return_t hostile_client_open(const char *protocol, const char *server_uri,
                                hm_class_t **cls_out, hm_context_t **ctx_out,
                                hm_addr_t **srv_out)
{
    hm_return_t ret = hm_class_create(protocol, NULL, cls_out);
    if (ret == HM_SUCCESS)
        ret = hostile_register(*cls_out);
    if (ret == HM_SUCCESS)
        ret = hm_context_create(*cls_out, NULL, ctx_out);
    if (ret == HM_SUCCESS)
        ret = hm_addr_lookup(*ctx_out, server_uri, srv_out);
    return ret;
}

hm_return_t hostile_call(hm_context_t *ctx, hm_addr_t *srv_addr, const char *name, void *in,
                         void *out, unsigned int timeout_ms)
{
    hm_handle_t *h;
    hm_return_t ret = hm_handle_create(ctx, srv_addr, hm_rpc_id(name), &h);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hm_call(h, in, out, timeout_ms);
    if (ret == HM_SUCCESS && out != NULL)
        hm_free_output(h, out);
    hm_handle_destroy(h);
    return ret;
}

hm_return_t hostile_report_of(hm_context_t *ctx, hm_addr_t *srv_addr,
                              struct hostile_report *rep)
{
    return hostile_call(ctx, srv_addr, HOSTILE_STATS, NULL, rep, 10000);
}

hm_return_t hostile_client_done(hm_context_t *ctx, hm_addr_t *srv_addr, int stop_ms)
{
    char line[64];
    hm_test_signal("done");
    if (hm_test_await(line, sizeof(line), 120000) != 0)
        return HM_TIMEOUT;
    return hostile_call(ctx, srv_addr, HOSTILE_STOP, NULL, NULL, stop_ms);
}

int hostile_memory_kb(pid_t pid, long *hwm_kb, long *rss_kb)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    int found = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "VmHWM: %ld kB", hwm_kb) == 1)
            found |= 1;
        else if (sscanf(line, "VmRSS: %ld kB", rss_kb) == 1)
            found |= 2;
    }
    fclose(f);
    return found == 3 ? 0 : -1;
}

uint64_t hostile_overflow_bytes(uint64_t fallback)
{
    const char *env = getenv("HOSTILE_OVERFLOW_MB");
    return env != NULL && *env != '\0' ? strtoull(env, NULL, 10) << 20 : fallback;
}
