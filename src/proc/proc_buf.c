/*
 * Procs over a caller's buffer (hm_proc_encode / decode / release): the
 * public face of hmi_proc_run for code that encodes outside an RPC.
 */
#include <stdint.h>

#include "proc/proc_internal.h"
#include "util/log.h"

static bool proc_buf_aligned(const void *buf)
{
    return ((uintptr_t)buf & 7u) == 0;
}

hm_return_t hm_proc_encode(struct hm_class *cls, hm_proc_cb_t proc, const void *data, void *buf,
                           size_t size, size_t *used_out)
{
    size_t used = 0;
    if (proc == NULL || data == NULL || used_out == NULL || (buf == NULL && size != 0) ||
        !proc_buf_aligned(buf))
        return HM_INVALID_ARG;
    /* Encoding never writes through `data`; hm_proc_cb_t is symmetric. */
    hm_return_t ret = hmi_proc_run(proc, HM_PROC_ENCODE, buf, size, (void *)data, cls, &used);
    *used_out = used;
    if (ret != HM_SUCCESS)
        return ret;
    return used > size ? HM_MSGSIZE : HM_SUCCESS;
}

hm_return_t hm_proc_decode(struct hm_class *cls, hm_proc_cb_t proc, void *buf, size_t size,
                           void *data)
{
    if (proc == NULL || data == NULL || (buf == NULL && size != 0) || !proc_buf_aligned(buf))
        return HM_INVALID_ARG;
    return hmi_proc_run(proc, HM_PROC_DECODE, buf, size, data, cls, NULL);
}

hm_return_t hm_proc_release(struct hm_class *cls, hm_proc_cb_t proc, void *data)
{
    if (proc == NULL || data == NULL)
        return HM_INVALID_ARG;
    return hmi_proc_run(proc, HM_PROC_FREE, NULL, 0, data, cls, NULL);
}
