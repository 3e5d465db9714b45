/* Shared pieces of the deploy tests: see deploy.h. */
#include "deploy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

hm_return_t deploy_str_proc(hm_proc_t *proc, void *data)
{
    struct deploy_str *s = data;
    return hm_proc_string(proc, &s->str);
}

hm_return_t deploy_addr_proc(hm_proc_t *proc, void *data)
{
    struct deploy_addr *a = data;
    if (hm_proc_get_op(proc) == HM_PROC_ENCODE && a->raw != NULL) {
        uint32_t len = a->raw_len; /* what a hostile peer claims */
        size_t have = a->raw_len > 64 ? 64 : a->raw_len; /* what it sends: at most 64 */
        hm_return_t ret = hm_proc_uint32(proc, &len);
        return ret == HM_SUCCESS ? hm_proc_raw(proc, (void *)a->raw, have) : ret;
    }
    return hm_proc_addr(proc, &a->addr);
}

static hm_return_t on_echo(hm_handle_t *h)
{
    struct deploy_server *srv = hm_handle_get_data(h);
    struct deploy_str in;
    hm_return_t ret = hm_get_input(h, &in);
    if (ret == HM_SUCCESS) {
        char text[256];
        snprintf(text, sizeof(text), "%s:%s", srv->tag, in.str ? in.str : "");
        struct deploy_str out = {.str = text};
        ret = hm_respond(h, &out, NULL, NULL);
        hm_free_input(h, &in);
    }
    hm_handle_destroy(h);
    return ret;
}

static hm_return_t on_where(hm_handle_t *h)
{
    struct deploy_server *srv = hm_handle_get_data(h);
    struct deploy_addr out = {.addr = srv->next};
    hm_return_t ret = hm_respond(h, &out, NULL, NULL);
    hm_handle_destroy(h);
    return ret;
}

static hm_return_t on_reflect(hm_handle_t *h)
{
    struct deploy_addr in = {0};
    hm_return_t ret = hm_get_input(h, &in);
    if (ret == HM_SUCCESS) {
        struct deploy_addr out = {.addr = in.addr};
        ret = hm_respond(h, &out, NULL, NULL);
        hm_free_input(h, &in);
    }
    hm_handle_destroy(h);
    return ret; /* a decode error goes back to the caller as its status */
}

static hm_return_t on_shutdown(hm_handle_t *h)
{
    struct deploy_server *srv = hm_handle_get_data(h);
    srv->stop = 1;
    hm_return_t ret = hm_respond(h, NULL, NULL, NULL);
    hm_handle_destroy(h);
    return ret;
}

hm_return_t deploy_register(hm_class_t *cls, struct deploy_ids *ids, const char *tag)
{
    bool srv = tag != NULL;
    hm_return_t ret = hm_register(cls, "deploy.echo", deploy_str_proc, deploy_str_proc,
                                  srv ? on_echo : NULL, &ids->echo);
    if (ret == HM_SUCCESS)
        ret = hm_register(cls, "deploy.where", NULL, deploy_addr_proc, srv ? on_where : NULL,
                          &ids->where);
    if (ret == HM_SUCCESS)
        ret = hm_register(cls, "deploy.reflect", deploy_addr_proc, deploy_addr_proc,
                          srv ? on_reflect : NULL, &ids->reflect);
    if (ret == HM_SUCCESS)
        ret = hm_register(cls, "deploy.shutdown", NULL, NULL, srv ? on_shutdown : NULL,
                          &ids->shutdown);
    return ret;
}

static hm_return_t server_attach(hm_class_t *cls, const struct deploy_ids *ids,
                                 struct deploy_server *srv)
{
    const hm_id_t all[] = {ids->echo, ids->where, ids->reflect, ids->shutdown};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        hm_return_t ret = hm_register_data(cls, all[i], srv, NULL);
        if (ret != HM_SUCCESS)
            return ret;
    }
    return HM_SUCCESS;
}

static int server_loop(hm_context_t *ctx, struct deploy_server *srv, unsigned int life_s)
{
    time_t end = time(NULL) + (time_t)life_s;
    while (!srv->stop && time(NULL) < end) {
        (void)hm_progress(ctx, 10);
        while (hm_trigger(ctx, 64, NULL) == HM_SUCCESS)
            ;
    }
    /* Let the shutdown's response leave. */
    for (int i = 0; i < 20; i++) {
        (void)hm_progress(ctx, 5);
        (void)hm_trigger(ctx, 64, NULL);
    }
    return srv->stop ? 0 : 3;
}

int deploy_server_main(void *arg)
{
    const struct deploy_server_args *a = arg;
    struct deploy_server srv = {0};
    struct deploy_ids ids;
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_addr_t *self;
    char uri[HM_ADDR_URI_MAX];
    size_t size = sizeof(uri);
    snprintf(srv.tag, sizeof(srv.tag), "%s", a->tag);
    if (hm_class_create(a->uri, NULL, &cls) != HM_SUCCESS)
        return 10;
    if (deploy_register(cls, &ids, a->tag) != HM_SUCCESS || server_attach(cls, &ids, &srv) ||
        hm_context_create(cls, NULL, &ctx) != HM_SUCCESS)
        return 11;
    if (hm_addr_self(ctx, &self) != HM_SUCCESS || hm_addr_to_string(self, uri, &size))
        return 12;
    hm_addr_free(self);
    if (a->next_uri != NULL && hm_addr_lookup(ctx, a->next_uri, &srv.next) != HM_SUCCESS)
        return 13;
    hm_test_ready(uri);
    int rc = server_loop(ctx, &srv, a->life_s);
    hm_addr_free(srv.next);
    if (hm_context_destroy(ctx) != HM_SUCCESS || hm_class_destroy(cls) != HM_SUCCESS)
        return 14;
    return rc;
}

hm_return_t deploy_echo(hm_context_t *ctx, hm_addr_t *to, hm_id_t echo, const char *text,
                        char *out, size_t out_size)
{
    hm_handle_t *h;
    hm_return_t ret = hm_handle_create(ctx, to, echo, &h);
    if (ret != HM_SUCCESS)
        return ret;
    struct deploy_str in = {.str = text}, reply;
    ret = hm_call(h, &in, &reply, 10000);
    if (ret == HM_SUCCESS) {
        snprintf(out, out_size, "%s", reply.str ? reply.str : "");
        hm_free_output(h, &reply);
    }
    hm_handle_destroy(h);
    return ret;
}

hm_return_t deploy_call_addr(hm_context_t *ctx, hm_addr_t *to, hm_id_t id,
                             const struct deploy_addr *in, hm_addr_t **out_addr)
{
    hm_handle_t *h;
    hm_return_t ret = hm_handle_create(ctx, to, id, &h);
    if (ret != HM_SUCCESS)
        return ret;
    struct deploy_addr reply = {0};
    ret = hm_call(h, in, &reply, 10000);
    if (ret == HM_SUCCESS) {
        *out_addr = hm_addr_dup(reply.addr); /* kept past hm_free_output */
        hm_free_output(h, &reply);
    }
    hm_handle_destroy(h);
    return ret;
}

int deploy_server_stop(hm_context_t *ctx, hm_addr_t *to, const struct deploy_ids *ids,
                       struct hm_test_child *child)
{
    hm_handle_t *h;
    if (hm_handle_create(ctx, to, ids->shutdown, &h) == HM_SUCCESS) {
        (void)hm_call(h, NULL, NULL, 5000);
        hm_handle_destroy(h);
    }
    return hm_test_wait(child, 20);
}
