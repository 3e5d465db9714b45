/*
 * hm-perf: the RPCs both sides register (names, procs) and opening and
 * closing one side's class and context.
 */
#include <stdlib.h>
#include <string.h>

#include "perf.h"

/* ---- procs --------------------------------------------------------------------- */

static const hm_proc_field_t arg_fields[] = {
    HM_PROC_FIELD(struct perf_arg, data, hm_proc_bytes),
};

static hm_return_t arg_proc(hm_proc_t *proc, void *data)
{
    return hm_proc_struct(proc, data, arg_fields, HM_PROC_FIELD_COUNT(arg_fields));
}

static const hm_proc_field_t setup_fields[] = {
    HM_PROC_FIELD(struct perf_bulk_setup, op, hm_proc_uint8),
    HM_PROC_FIELD(struct perf_bulk_setup, slots, hm_proc_uint32),
    HM_PROC_FIELD(struct perf_bulk_setup, size, hm_proc_uint64),
    HM_PROC_FIELD(struct perf_bulk_setup, chunk, hm_proc_uint64),
    HM_PROC_FIELD(struct perf_bulk_setup, depth, hm_proc_uint32),
};

static hm_return_t setup_proc(hm_proc_t *proc, void *data)
{
    return hm_proc_struct(proc, data, setup_fields, HM_PROC_FIELD_COUNT(setup_fields));
}

static const hm_proc_field_t bulk_in_fields[] = {
    HM_PROC_FIELD(struct perf_bulk_in, bulk, hm_proc_bulk),
    HM_PROC_FIELD(struct perf_bulk_in, slot, hm_proc_uint32),
    HM_PROC_FIELD(struct perf_bulk_in, check, hm_proc_uint8),
};

static hm_return_t bulk_in_proc(hm_proc_t *proc, void *data)
{
    return hm_proc_struct(proc, data, bulk_in_fields, HM_PROC_FIELD_COUNT(bulk_in_fields));
}

static const hm_proc_field_t status_fields[] = {
    HM_PROC_FIELD(struct perf_status, ret, hm_proc_int32),
};

static hm_return_t status_proc(hm_proc_t *proc, void *data)
{
    return hm_proc_struct(proc, data, status_fields, HM_PROC_FIELD_COUNT(status_fields));
}

static const hm_proc_field_t stats_fields[] = {
    HM_PROC_FIELD(struct perf_srv_stats, maxrss_kb, hm_proc_uint64),
};

static hm_return_t stats_proc(hm_proc_t *proc, void *data)
{
    return hm_proc_struct(proc, data, stats_fields, HM_PROC_FIELD_COUNT(stats_fields));
}

/* ---- opening and closing ---------------------------------------------------------- */

int perf_fail(const char *what, hm_return_t ret)
{
    const char *detail = hm_error_detail();

    fprintf(stderr, "hm-perf: %s: %s%s%s\n", what, hm_strerror(ret),
            detail[0] != '\0' ? ": " : "", detail);
    return -1;
}

void perf_listen_uri(const char *protocol, char *buf, size_t size)
{
    const char *plus = strchr(protocol, '+');
    bool tcp = plus != NULL && strcmp(plus, "+tcp") == 0;

    if (strstr(protocol, "://") != NULL)
        snprintf(buf, size, "%s", protocol);
    else
        snprintf(buf, size, "%s://%s", protocol, tcp ? "127.0.0.1:0" : "");
}

/* One RPC: name, procs, handler, and where its id goes. */
struct rpc_def {
    const char *name;
    hm_proc_cb_t in, out;
    hm_rpc_handler_t handler;
    hm_id_t *id;
};

static int ep_register(struct perf_ep *ep, const struct perf_handlers *h)
{
    static const struct perf_handlers none = {0};
    const struct perf_handlers *hs = h != NULL ? h : &none;
    const struct rpc_def defs[] = {
        {"hm_perf.noop", NULL, NULL, hs->noop, &ep->ids.noop},
        {"hm_perf.noop_arg", arg_proc, NULL, hs->noop_arg, &ep->ids.noop_arg},
        {"hm_perf.copy_arg", arg_proc, NULL, hs->copy_arg, &ep->ids.copy_arg},
        {"hm_perf.bulk_setup", setup_proc, status_proc, hs->bulk_setup, &ep->ids.bulk_setup},
        {"hm_perf.bulk", bulk_in_proc, status_proc, hs->bulk, &ep->ids.bulk},
        {"hm_perf.stats", NULL, stats_proc, hs->stats, &ep->ids.stats},
        {"hm_perf.stop", NULL, stats_proc, hs->stop, &ep->ids.stop},
    };

    for (size_t i = 0; i < sizeof(defs) / sizeof(defs[0]); i++) {
        hm_return_t ret = hm_register(ep->cls, defs[i].name, defs[i].in, defs[i].out,
                                      defs[i].handler, defs[i].id);
        if (ret == HM_SUCCESS && h != NULL)
            ret = hm_register_data(ep->cls, *defs[i].id, h->data, NULL);
        if (ret != HM_SUCCESS)
            return perf_fail(defs[i].name, ret);
    }
    return 0;
}

int perf_ep_open(struct perf_ep *ep, const char *uri, hm_progress_mode_t mode,
                 const struct perf_handlers *h)
{
    hm_context_opts_t copts = {.field_mask = HM_CONTEXT_OPT_PROGRESS_MODE,
                               .progress_mode = mode};
    hm_return_t ret;
    char what[300];

    memset(ep, 0, sizeof(*ep));
    ret = hm_class_create(uri, NULL, &ep->cls);
    if (ret != HM_SUCCESS) {
        snprintf(what, sizeof(what), "cannot open %s", uri);
        return perf_fail(what, ret);
    }
    if (ep_register(ep, h) != 0)
        goto err_class;
    ret = hm_context_create(ep->cls, &copts, &ep->ctx);
    if (ret != HM_SUCCESS) {
        perf_fail("hm_context_create", ret);
        goto err_class;
    }
    return 0;

err_class:
    hm_class_destroy(ep->cls);
    return -1;
}

int perf_ep_close(struct perf_ep *ep)
{
    hm_return_t ret = hm_context_destroy(ep->ctx);

    if (ret != HM_SUCCESS)
        return perf_fail("hm_context_destroy", ret);
    ret = hm_class_destroy(ep->cls);
    if (ret != HM_SUCCESS)
        return perf_fail("hm_class_destroy", ret);
    return 0;
}
