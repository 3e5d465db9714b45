/* The context tests' server and helpers (see ctx_test.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctx_test.h"

static const hm_proc_field_t tag_fields[] = {
    HM_PROC_FIELD(struct ctx_tag, client, hm_proc_uint32),
    HM_PROC_FIELD(struct ctx_tag, seq, hm_proc_uint32),
    HM_PROC_FIELD(struct ctx_tag, served_by, hm_proc_uint32),
};

static hm_return_t proc_tag(hm_proc_t *p, void *data)
{
    return hm_proc_struct(p, data, tag_fields, HM_PROC_FIELD_COUNT(tag_fields));
}

static const hm_proc_field_t report_fields[] = {
    HM_PROC_FIELD(struct ctx_report, received, hm_proc_uint32),
    HM_PROC_FIELD(struct ctx_report, max_outstanding, hm_proc_uint32),
    HM_PROC_FIELD(struct ctx_report, order_errors, hm_proc_uint32),
    HM_PROC_FIELD(struct ctx_report, max_total, hm_proc_uint32),
};

static hm_return_t proc_report(hm_proc_t *p, void *data)
{
    return hm_proc_struct(p, data, report_fields, HM_PROC_FIELD_COUNT(report_fields));
}

/* ---- server state (one thread drives every context) ------------------------ */

#define HELD_MAX 4096u

struct ctx_client_state {
    hm_handle_t *held[HELD_MAX];
    struct ctx_tag held_tags[HELD_MAX];
    uint32_t nheld;
    hm_handle_t *hung[HELD_MAX]; /* "hold" requests */
    uint32_t nhung;
    uint32_t next_seq;
    struct ctx_report report;
};

static struct {
    struct ctx_server_args *args;
    struct ctx_client_state clients[CTX_TEST_CLIENTS];
    uint32_t total_held;     /* "tagged" requests held, all clients */
    uint32_t max_total;
    bool stop;
} srv;

static void srv_count_outstanding(struct ctx_client_state *c)
{
    uint32_t outstanding = c->nheld + c->nhung;
    if (outstanding > c->report.max_outstanding)
        c->report.max_outstanding = outstanding;
    if (srv.total_held > srv.max_total)
        srv.max_total = srv.total_held;
}

/* Answer every held "tagged" request, client by client, oldest first. */
static void srv_release_held(void)
{
    for (uint32_t k = 0; k < CTX_TEST_CLIENTS; k++) {
        struct ctx_client_state *c = &srv.clients[k];
        for (uint32_t i = 0; i < c->nheld; i++) {
            hm_respond(c->held[i], &c->held_tags[i], NULL, NULL);
            hm_handle_destroy(c->held[i]);
        }
        c->nheld = 0;
    }
    srv.total_held = 0;
}

static struct ctx_client_state *srv_client(hm_handle_t *h, struct ctx_tag *tag)
{
    if (hm_get_input(h, tag) != HM_SUCCESS || tag->client >= CTX_TEST_CLIENTS)
        return NULL;
    hm_free_input(h, tag);
    return &srv.clients[tag->client];
}

static hm_return_t srv_tagged(hm_handle_t *h)
{
    struct ctx_tag tag;
    struct ctx_client_state *c = srv_client(h, &tag);
    if (c == NULL)
        return HM_INVALID_ARG;
    hm_context_info_t info;
    hm_context_get_info(hm_handle_get_context(h), &info);
    tag.served_by = info.index;
    if (tag.seq != c->next_seq)
        c->report.order_errors++;
    c->next_seq = tag.seq + 1;
    c->report.received++;
    if (srv.args->hold_until == 0 || c->nheld == HELD_MAX) {
        hm_return_t ret = hm_respond(h, &tag, NULL, NULL);
        hm_handle_destroy(h);
        return ret;
    }
    c->held[c->nheld] = h;
    c->held_tags[c->nheld++] = tag;
    srv.total_held++;
    srv_count_outstanding(c);
    if (srv.total_held >= srv.args->hold_until || c->report.received == srv.args->expect)
        srv_release_held();
    return HM_SUCCESS;
}

static hm_return_t srv_hold(hm_handle_t *h)
{
    struct ctx_tag tag;
    struct ctx_client_state *c = srv_client(h, &tag);
    if (c == NULL || c->nhung == HELD_MAX)
        return HM_INVALID_ARG;
    c->hung[c->nhung++] = h;
    srv_count_outstanding(c);
    return HM_SUCCESS;
}

static hm_return_t srv_release(hm_handle_t *h)
{
    struct ctx_tag tag;
    struct ctx_client_state *c = srv_client(h, &tag);
    if (c == NULL)
        return HM_INVALID_ARG;
    for (uint32_t i = 0; i < c->nhung; i++) {
        hm_respond(c->hung[i], NULL, NULL, NULL);
        hm_handle_destroy(c->hung[i]);
    }
    c->nhung = 0;
    hm_return_t ret = hm_respond(h, &tag, NULL, NULL);
    hm_handle_destroy(h);
    return ret;
}

static hm_return_t srv_report(hm_handle_t *h)
{
    struct ctx_tag tag;
    struct ctx_client_state *c = srv_client(h, &tag);
    if (c == NULL)
        return HM_INVALID_ARG;
    c->report.max_total = srv.max_total;
    hm_return_t ret = hm_respond(h, &c->report, NULL, NULL);
    hm_handle_destroy(h);
    return ret;
}

static hm_return_t srv_stop(hm_handle_t *h)
{
    srv.stop = true;
    hm_return_t ret = hm_respond(h, NULL, NULL, NULL);
    hm_handle_destroy(h);
    return ret;
}

hm_return_t ctx_register(hm_class_t *cls, struct ctx_ids *ids)
{
    hm_return_t ret;
    if ((ret = hm_register(cls, "ctx.tagged", proc_tag, proc_tag, srv_tagged,
                           &ids->tagged)) != HM_SUCCESS ||
        (ret = hm_register(cls, "ctx.hold", proc_tag, NULL, srv_hold, &ids->hold)) !=
            HM_SUCCESS ||
        (ret = hm_register(cls, "ctx.release", proc_tag, proc_tag, srv_release,
                           &ids->release)) != HM_SUCCESS ||
        (ret = hm_register(cls, "ctx.report", proc_tag, proc_report, srv_report,
                           &ids->report)) != HM_SUCCESS)
        return ret;
    return hm_register(cls, "ctx.stop", NULL, NULL, srv_stop, &ids->stop);
}

#define SRV_MAX_CTX 8u

static int srv_open(hm_class_t *cls, hm_context_t **ctxs, unsigned int *nctx)
{
    struct ctx_server_args *a = srv.args;
    unsigned int n = 0;
    if (a->per_node &&
        hm_context_create_per_node(cls, NULL, ctxs, SRV_MAX_CTX, &n) != HM_SUCCESS)
        return -1;
    for (; n < a->contexts && n < SRV_MAX_CTX; n++) {
        if (hm_context_create(cls, NULL, &ctxs[n]) != HM_SUCCESS)
            return -1;
    }
    *nctx = n;
    return 0;
}

int ctx_server_main(void *arg)
{
    srv.args = arg;
    hm_class_t *cls;
    hm_context_t *ctxs[SRV_MAX_CTX];
    unsigned int nctx = 0;
    struct ctx_ids ids;
    if (hm_class_create(srv.args->protocol, NULL, &cls) != HM_SUCCESS ||
        ctx_register(cls, &ids) != HM_SUCCESS || srv_open(cls, ctxs, &nctx) != 0)
        return 2;
    hm_addr_t *self;
    char uri[1024];
    size_t size = sizeof(uri);
    if (hm_addr_self(ctxs[0], &self) != HM_SUCCESS ||
        hm_addr_to_string(self, uri, &size) != HM_SUCCESS)
        return 3;
    hm_addr_free(self);
    hm_test_ready(uri);
    while (!srv.stop) {
        for (unsigned int i = 0; i < nctx; i++) {
            hm_progress(ctxs[i], nctx > 1 ? 0 : 100);
            hm_trigger(ctxs[i], UINT32_MAX, NULL);
        }
    }
    for (unsigned int i = 0; i < nctx; i++) {
        for (int spin = 0; spin < 100; spin++) { /* let the stop response leave */
            hm_progress(ctxs[i], 1);
            hm_trigger(ctxs[i], UINT32_MAX, NULL);
        }
        hm_context_destroy(ctxs[i]);
    }
    hm_class_destroy(cls);
    return 0;
}

int ctx_server_start(struct hm_test_child *child, struct ctx_server_args *args, char *uri,
                     size_t size)
{
    if (hm_test_spawn(child, ctx_server_main, args) != 0)
        return -1;
    return hm_test_recv(child, uri, size, 20000);
}

hm_return_t ctx_call(hm_context_t *ctx, hm_addr_t *addr, hm_id_t id, struct ctx_tag *in,
                     void *out, unsigned timeout_ms)
{
    hm_handle_t *h;
    hm_return_t ret = hm_handle_create(ctx, addr, id, &h);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hm_call(h, in, out, timeout_ms);
    if (ret == HM_SUCCESS && out != NULL)
        hm_free_output(h, out);
    hm_handle_destroy(h);
    return ret;
}

void ctx_server_stop(struct hm_test_child *child, hm_context_t *ctx, hm_addr_t *addr,
                     const struct ctx_ids *ids)
{
    if (ctx != NULL && addr != NULL)
        (void)ctx_call(ctx, addr, ids->stop, NULL, NULL, 5000);
    if (hm_test_wait(child, 10) != 0)
        hm_test_child_kill(child);
}

int ctx_env_open(struct ctx_env *env, struct ctx_server_args *args, const char *protocol)
{
    if (ctx_server_start(&env->child, args, env->uri, sizeof(env->uri)) != 0)
        return -1;
    if (hm_class_create(protocol, NULL, &env->cls) != HM_SUCCESS)
        return -1;
    return ctx_register(env->cls, &env->ids) == HM_SUCCESS ? 0 : -1;
}

void ctx_env_stop(struct ctx_env *env, hm_context_t *ctx, hm_addr_t *addr)
{
    ctx_server_stop(&env->child, ctx, addr, &env->ids);
}
