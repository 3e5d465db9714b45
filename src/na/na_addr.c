/*
 * The core's calls into a plugin for addresses, message buffers and
 * devices. The layers above reach a plugin only through na.h's functions,
 * never through c_ops: one place to check arguments, count, or trace.
 */
#include "na/na.h"

hm_return_t hm_na_addr_lookup(hm_na_context_t *ctx, const char *uri, hm_na_addr_t **addr_out)
{
    return ctx->x_class->c_ops.addr_lookup(ctx, uri, addr_out);
}

hm_return_t hm_na_addr_self(hm_na_context_t *ctx, hm_na_addr_t **addr_out)
{
    return ctx->x_class->c_ops.addr_self(ctx, addr_out);
}

hm_return_t hm_na_addr_to_string(hm_na_context_t *ctx, hm_na_addr_t *addr, char *buf,
                                 size_t *size)
{
    return ctx->x_class->c_ops.addr_to_string(ctx, addr, buf, size);
}

void hm_na_addr_ref(const hm_na_class_t *cls, hm_na_addr_t *addr)
{
    cls->c_ops.addr_ref(addr);
}

void hm_na_addr_unref(const hm_na_class_t *cls, hm_na_addr_t *addr)
{
    cls->c_ops.addr_unref(addr);
}

void *hm_na_msg_buf_alloc(hm_na_class_t *cls, size_t size, void **desc_out)
{
    return cls->c_ops.msg_buf_alloc(cls, size, desc_out);
}

void hm_na_msg_buf_free(hm_na_class_t *cls, void *buf, void *desc)
{
    cls->c_ops.msg_buf_free(cls, buf, desc);
}

size_t hm_na_devices(hm_na_class_t *cls, const char **names, size_t max)
{
    if (cls->c_ops.devices == NULL)
        return 0;
    return cls->c_ops.devices(cls, names, max);
}
