/*
 * Copying a received message out of its transport buffer.
 *
 * A message the core keeps (a request queued for its handler or held by it,
 * a response the client has not freed) is decoded in place, in the buffer
 * the transport received it in. Where a context's receive buffers are a
 * fixed set (ofi: 256 single buffers over tcp, 8 multi-receive slabs over
 * shm), every kept message keeps one from the transport, and a context
 * keeping as many messages as it posted buffers stopped receiving at all,
 * even the responses its handlers were waiting for.
 *
 * So once half of the buffers are pinned (hmi_na_recv_pressed), a message
 * is copied, as it is delivered, into a buffer the handle owns, and its
 * transport buffer goes back at once. Messages kept in place are then never
 * more than half the buffers (a slab filled meanwhile aside), and the other
 * half always receives; how many messages the core keeps is bounded by the
 * admission budgets (server) and credits (client), not by the transport.
 * Below half, nothing changes: the handler decodes in the transport's buffer.
 *
 * The copy buffer lives in the handle, is kept across reuse (so a warm
 * context does not allocate) and is freed with the handle, by the pool trim
 * or with the context.
 *
 * Rejected: copying later, when the pressure comes, the messages already
 * held. A message decoded in place cannot move (its decoded strings and
 * arrays point into it), and finding the undecoded ones needs a list shared
 * with threads that free inputs; copying at delivery needs neither, and the
 * messages it leaves in place were delivered while half the buffers were
 * free, so they cannot pin more than that half.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core_internal.h"
#include "util/log.h"

#define RECV_COPY_MIN 256u

static bool recv_copy_reserve(hm_handle_t *handle, size_t len)
{
    if (len <= handle->h_copy_cap)
        return true;
    size_t cap = handle->h_copy_cap ? handle->h_copy_cap : RECV_COPY_MIN;
    while (cap < len)
        cap *= 2;
    char *grown = realloc(handle->h_copy, cap); /* malloc alignment: 8 bytes or more */
    if (grown == NULL)
        return false;
    handle->h_copy = grown;
    handle->h_copy_cap = cap;
    return true;
}

void hmi_recv_copy_out(hm_handle_t *handle)
{
    struct hmi_recv_msg *msg = &handle->h_msg;
    if (!msg->m_held || msg->m_bulk != NULL || msg->m_copied)
        return;
    if (!recv_copy_reserve(handle, msg->m_len)) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN,
                "no memory to copy a %zu-byte message out of its receive buffer; kept "
                "in place", msg->m_len);
        return;
    }
    memcpy(handle->h_copy, msg->m_buf, msg->m_len);
    hmi_na_msg_release(handle->h_ctx->c_na, msg->m_token);
    msg->m_buf = handle->h_copy;
    msg->m_copied = true;
    handle->h_ctx->c_stats.recv_copied++;
}
