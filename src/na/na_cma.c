/*
 * RMA with process_vm_readv/writev (see na_rma.h). STUB: to be written.
 */
#include "na/na_rma.h"

hm_return_t hmi_cma_rma(hm_na_context_t *ctx, hm_na_op_t *op, enum hm_na_rma_dir dir,
                        hm_na_addr_t *peer, const struct hm_na_rma_piece *pieces,
                        unsigned int count)
{
    (void)ctx;
    (void)op;
    (void)dir;
    (void)peer;
    (void)pieces;
    (void)count;
    return HM_AGAIN;
}
