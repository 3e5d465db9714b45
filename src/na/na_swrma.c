/*
 * RMA over messages (see na_rma.h). STUB: to be written.
 */
#include "na/na_rma.h"

hm_return_t hmi_swrma_context_init(hm_na_context_t *ctx)
{
    ctx->x_rma = NULL;
    return HM_SUCCESS;
}

void hmi_swrma_context_fini(hm_na_context_t *ctx)
{
    (void)ctx;
}

int hmi_swrma_progress(hm_na_context_t *ctx)
{
    (void)ctx;
    return 0;
}

bool hmi_swrma_pending(hm_na_context_t *ctx)
{
    (void)ctx;
    return false;
}

void hmi_swrma_recv(hm_na_context_t *ctx, hm_na_addr_t *source, void *buf, size_t len,
                    uintptr_t token)
{
    (void)source;
    (void)buf;
    (void)len;
    hm_na_msg_release(ctx, token);
}

void hmi_swrma_peer_failed(hm_na_context_t *ctx, hm_na_addr_t *peer)
{
    (void)ctx;
    (void)peer;
}

hm_return_t hmi_swrma_rma(hm_na_context_t *ctx, hm_na_op_t *op, enum hm_na_rma_dir dir,
                          hm_na_addr_t *peer, const struct hm_na_rma_piece *pieces,
                          unsigned int count)
{
    (void)ctx;
    (void)op;
    (void)dir;
    (void)peer;
    (void)pieces;
    (void)count;
    return HM_NOT_SUPPORTED;
}

hm_return_t hmi_swrma_cancel(hm_na_context_t *ctx, hm_na_op_t *op)
{
    (void)ctx;
    (void)op;
    return HM_NOENTRY;
}

void hmi_swrma_op_free(hm_na_op_t *op)
{
    (void)op;
}
