/* A raw transport endpoint for attackers (hostile_raw.h). */
#include "hostile_raw.h"

#include <stdio.h>
#include <string.h>

static void raw_recv(void *arg, hmi_na_addr_t *src, void *buf, size_t len, uintptr_t token)
{
    (void)src, (void)buf, (void)len;
    struct hostile_raw *raw = arg;
    raw->received++;
    hmi_na_msg_release(raw->ctx, token);
}

static void raw_sent(hmi_na_op_t *op, hm_return_t status)
{
    *(int *)op->o_arg = status == HM_SUCCESS ? 1 : -1;
}

int hostile_raw_open(struct hostile_raw *raw, const char *protocol, const char *peer_uri,
                     size_t size)
{
    char uri[128];
    const char *sep = strstr(protocol, "://");
    memset(raw, 0, sizeof(*raw));
    if (sep == NULL)
        return -1;
    snprintf(uri, sizeof(uri), "%.*s://%s", (int)(sep - protocol), protocol,
             strstr(protocol, "+tcp") ? "127.0.0.1:0" : "");
    if (hmi_na_class_open(uri, &raw->cls) != HM_SUCCESS ||
        hmi_na_context_open(raw->cls, 0, raw_recv, raw, NULL, NULL, &raw->ctx) !=
            HM_SUCCESS ||
        raw->cls->c_ops.addr_lookup(raw->ctx, peer_uri, 0, &raw->peer) != HM_SUCCESS)
        goto err;
    raw->op = hmi_na_op_create(raw->cls);
    raw->buf = raw->cls->c_ops.msg_buf_alloc(raw->cls, size, &raw->desc);
    if (raw->op != NULL && raw->buf != NULL)
        return 0;
err:
    hostile_raw_close(raw);
    return -1;
}

int hostile_raw_send(struct hostile_raw *raw, size_t len)
{
    int done = 0;
    raw->op->o_cb = raw_sent;
    raw->op->o_arg = &done;
    if (hmi_na_msg_send(raw->ctx, raw->peer, raw->buf, len, raw->desc, raw->op) != HM_SUCCESS)
        return -1;
    for (int i = 0; i < 5000000 && done == 0; i++)
        hmi_na_progress(raw->ctx);
    return done == 1 ? 0 : -1;
}

void hostile_raw_close(struct hostile_raw *raw)
{
    if (raw->buf != NULL)
        raw->cls->c_ops.msg_buf_free(raw->cls, raw->buf, raw->desc);
    if (raw->op != NULL)
        hmi_na_op_destroy(raw->op);
    if (raw->peer != NULL)
        raw->cls->c_ops.addr_unref(raw->peer);
    if (raw->ctx != NULL)
        hmi_na_context_close(raw->ctx);
    if (raw->cls != NULL)
        hmi_na_class_close(raw->cls);
    memset(raw, 0, sizeof(*raw));
}
