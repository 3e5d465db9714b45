/*
 * The core's calls into a plugin for addresses, message buffers and
 * devices. The layers above reach a plugin only through na.h's functions,
 * never through c_ops: one place to check arguments, count, or trace.
 */
#include "na/na.h"

#include <string.h>

hm_return_t hmi_na_addr_lookup(hmi_na_context_t *ctx, const char *uri, unsigned int flags,
                               hmi_na_addr_t **addr_out)
{
    return ctx->x_class->c_ops.addr_lookup(ctx, uri, flags, addr_out);
}

hm_return_t hmi_na_addr_self(hmi_na_context_t *ctx, hmi_na_addr_t **addr_out)
{
    return ctx->x_class->c_ops.addr_self(ctx, addr_out);
}

hm_return_t hmi_na_addr_to_string(hmi_na_context_t *ctx, hmi_na_addr_t *addr, char *buf,
                                 size_t *size)
{
    return ctx->x_class->c_ops.addr_to_string(ctx, addr, buf, size);
}

hm_return_t hmi_na_text_out(const char *text, size_t len, char *buf, size_t *size)
{
    size_t need = len + 1;
    if (buf == NULL || *size < need) {
        *size = need;
        return HM_MSGSIZE;
    }
    memcpy(buf, text, len);
    buf[len] = '\0';
    *size = need;
    return HM_SUCCESS;
}

void hmi_na_addr_ref(const hmi_na_class_t *cls, hmi_na_addr_t *addr)
{
    cls->c_ops.addr_ref(addr);
}

void hmi_na_addr_unref(const hmi_na_class_t *cls, hmi_na_addr_t *addr)
{
    cls->c_ops.addr_unref(addr);
}

void *hmi_na_msg_buf_alloc(hmi_na_class_t *cls, size_t size, void **desc_out)
{
    return cls->c_ops.msg_buf_alloc(cls, size, desc_out);
}

void hmi_na_msg_buf_free(hmi_na_class_t *cls, void *buf, void *desc)
{
    cls->c_ops.msg_buf_free(cls, buf, desc);
}

size_t hmi_na_devices(hmi_na_class_t *cls, const char **names, size_t max)
{
    if (cls->c_ops.devices == NULL)
        return 0;
    return cls->c_ops.devices(cls, names, max);
}
