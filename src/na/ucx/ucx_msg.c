/*
 * UCX plugin: messages as UCP active messages on one AM id.
 *
 * Receive. The handler is set with UCP_AM_FLAG_WHOLE_MSG and
 * UCP_AM_FLAG_PERSISTENT_DATA:
 *   - eager data (UCP_AM_RECV_ATTR_FLAG_DATA) is delivered where UCX put it
 *     and kept with UCS_INPROGRESS; the token is the data pointer itself
 *     (8-byte aligned, low bit 0) and msg_release hands it back with
 *     ucp_am_data_release;
 *   - rendezvous data (UCP_AM_RECV_ATTR_FLAG_RNDV) is received with
 *     ucp_am_recv_data_nbx into a pool buffer of c_eager_limit bytes and
 *     delivered when that completes; the token is the buffer with its low bit
 *     set. So are the rare messages that must be copied (no persistent data,
 *     or a misaligned buffer).
 * If the core releases a buffer from inside the receive callback, the
 * handler returns UCS_OK instead of UCS_INPROGRESS, so UCX frees it once.
 *
 * Send. ucp_am_send_nbx with UCP_AM_SEND_FLAG_REPLY, so the receiver gets a
 * reply endpoint, and the context's AM header (our URI and pid) until the
 * peer has shown it names that endpoint (e_peer_bound, see ucx_internal.h);
 * then with no header at all. The header lives as long as the context, so it
 * outlives every send. Message buffers are plain aligned memory: UCX copies
 * eager data and registers rendezvous data itself.
 */
#include "na/ucx/ucx_internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#define UCX_TOKEN_POOL 1u

/* ---- Receive buffer pool -------------------------------------------------- */

static struct ucx_rbuf *ucx_rbuf_get(struct ucx_ctx *c)
{
    struct hmi_list *link = hmi_list_pop_front(&c->c_pool);
    struct ucx_rbuf *r;
    if (link != NULL) {
        c->c_pool_len--;
        r = hmi_container_of(link, struct ucx_rbuf, r_link);
    } else {
        size_t size = sizeof(*r) + c->c_cls->k_eager_limit;
        r = aligned_alloc(16, (size + 15) & ~(size_t)15);
        if (r == NULL)
            return NULL;
        r->r_ctx = c;
    }
    r->r_source = NULL;
    r->r_len = 0;
    r->r_inflight = false;
    hmi_list_push_back(&c->c_rbufs_used, &r->r_link);
    return r;
}

static void ucx_rbuf_put(struct ucx_ctx *c, struct ucx_rbuf *r)
{
    hmi_list_remove(&r->r_link);
    if (c->c_pool_len < c->c_cls->k_pool_keep && !c->c_closing) {
        hmi_list_push_front(&c->c_pool, &r->r_link);
        c->c_pool_len++;
        return;
    }
    free(r);
}

static void ucx_rbuf_deliver(struct ucx_ctx *c, struct ucx_rbuf *r)
{
    hmi_na_deliver(c->c_na, r->r_source, r->r_data, r->r_len,
                  (uintptr_t)r | UCX_TOKEN_POOL);
}

/* ---- Receive -------------------------------------------------------------- */

static void ucx_rndv_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    struct ucx_rbuf *r = user_data;
    struct ucx_ctx *c = r->r_ctx;
    ucp_request_free(request);
    r->r_inflight = false;
    c->c_rndv_inflight--;
    if (c->c_closing) { /* possibly inside ucp_worker_destroy: r_source may be gone */
        ucx_rbuf_put(c, r);
        return;
    }
    if (status != UCS_OK || r->r_source->a_dead) {
        if (status != UCS_OK && status != UCS_ERR_CANCELED)
            hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: receiving a message from %s: %s",
                    r->r_source->a_uri, ucs_status_string(status));
        ucx_rbuf_put(c, r);
        return;
    }
    r->r_len = length;
    ucx_rbuf_deliver(c, r);
}

/* Rendezvous: pull the data into a pool buffer, deliver when it is there. */
static ucs_status_t ucx_recv_rndv(struct ucx_ctx *c, hmi_na_addr_t *src, void *desc,
                                  size_t length)
{
    struct ucx_rbuf *r = ucx_rbuf_get(c);
    if (r == NULL) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: no memory for a message from %s",
                src->a_uri);
        return UCS_ERR_NO_MEMORY; /* the sender's send fails */
    }
    r->r_source = src;
    r->r_len = length;
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.recv_am = ucx_rndv_cb,
        .user_data = r,
    };
    ucs_status_ptr_t sp = ucp_am_recv_data_nbx(c->c_worker, desc, r->r_data, length, &param);
    if (UCS_PTR_IS_ERR(sp)) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: receiving a message from %s: %s",
                src->a_uri, ucs_status_string(UCS_PTR_STATUS(sp)));
        ucx_rbuf_put(c, r);
        return UCS_OK;
    }
    if (sp == NULL) {
        ucx_rbuf_deliver(c, r); /* completed in place */
    } else {
        r->r_inflight = true;
        c->c_rndv_inflight++;
    }
    return UCS_OK;
}

/* Copy a message UCX does not let us keep (or keeps misaligned). */
static ucs_status_t ucx_recv_copy(struct ucx_ctx *c, hmi_na_addr_t *src, const void *data,
                                  size_t length)
{
    struct ucx_rbuf *r = ucx_rbuf_get(c);
    if (r == NULL) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: no memory for a message from %s, dropped",
                src->a_uri);
        return UCS_OK;
    }
    r->r_source = src;
    r->r_len = length;
    if (length > 0)
        memcpy(r->r_data, data, length);
    ucx_rbuf_deliver(c, r);
    return UCS_OK;
}

static ucs_status_t ucx_am_cb(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param)
{
    struct ucx_ctx *c = arg;
    bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (hmi_unlikely(c->c_closing))
        return rndv ? UCS_ERR_CANCELED : UCS_OK;
    ucp_ep_h reply_ep =
        (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : NULL;
    hmi_na_addr_t *src = hmi_ucx_addr_from_msg(c, reply_ep, header, header_length);
    if (hmi_unlikely(src == NULL || src->a_dead)) {
        static struct hmi_log_limit unknown_log; /* a peer can cause it: rate-limited */
        hmi_log_limited(&unknown_log, HMI_SUBSYS_NA, HMI_LOG_WARN,
                        "ucx: message of %zu bytes from %s dropped", length,
                        src ? "a dead peer" : "an unidentified sender");
        return rndv ? UCS_ERR_REJECTED : UCS_OK;
    }
    if (hmi_unlikely(length > c->c_cls->k_eager_limit)) {
        static struct hmi_log_limit size_log; /* a peer can cause it: rate-limited */
        hmi_log_limited(&size_log, HMI_SUBSYS_NA, HMI_LOG_WARN,
                        "ucx: message of %zu bytes from %s exceeds the eager limit, dropped",
                        length, src->a_uri);
        return rndv ? UCS_ERR_MESSAGE_TRUNCATED : UCS_OK;
    }
    if (rndv) {
        /* Never pull from a process that has exited (cma, error mode NONE). */
        if (hmi_unlikely(hmi_ucx_addr_exited(src))) {
            static struct hmi_log_limit exited_log; /* a peer can cause it: rate-limited */
            hmi_log_limited(&exited_log, HMI_SUBSYS_NA, HMI_LOG_WARN,
                            "ucx: message of %zu bytes from %s dropped: its process exited before "
                            "the data was fetched",
                            length, src->a_uri);
            return UCS_ERR_REJECTED;
        }
        return ucx_recv_rndv(c, src, data, length);
    }
    if (hmi_unlikely(!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) || data == NULL ||
                     ((uintptr_t)data & 7u) != 0))
        return ucx_recv_copy(c, src, data, length);
    /* Eager data: delivered in place, kept until the core releases it. */
    c->c_in_am_cb = true;
    c->c_cb_data = data;
    c->c_cb_released = false;
    c->c_eager_held++;
    hmi_na_deliver(c->c_na, src, data, length, (uintptr_t)data);
    c->c_in_am_cb = false;
    c->c_cb_data = NULL;
    return c->c_cb_released ? UCS_OK : UCS_INPROGRESS;
}

void hmi_ucx_msg_release(hmi_na_context_t *ctx, uintptr_t token)
{
    struct ucx_ctx *c = ucx_ctx(ctx);
    if (token & UCX_TOKEN_POOL) {
        ucx_rbuf_put(c, (struct ucx_rbuf *)(token & ~(uintptr_t)UCX_TOKEN_POOL));
        return;
    }
    void *data = (void *)token;
    c->c_eager_held--;
    if (c->c_in_am_cb && data == c->c_cb_data) {
        c->c_cb_released = true; /* the handler returns UCS_OK instead */
        return;
    }
    ucp_am_data_release(c->c_worker, data);
}

hm_return_t hmi_ucx_msg_init(struct ucx_ctx *c)
{
    ucp_am_handler_param_t param = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = UCX_AM_ID,
        .flags = UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA,
        .cb = ucx_am_cb,
        .arg = c,
    };
    ucs_status_t status = ucp_worker_set_am_recv_handler(c->c_worker, &param);
    if (status != UCS_OK) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: cannot set the message handler: %s",
                ucs_status_string(status));
        return HM_NOT_SUPPORTED;
    }
    return HM_SUCCESS;
}

void hmi_ucx_msg_fini(struct ucx_ctx *c)
{
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&c->c_pool)) != NULL)
        free(hmi_container_of(link, struct ucx_rbuf, r_link));
    c->c_pool_len = 0;
    /* Buffers the core never released; not those a receive may still write. */
    struct hmi_list *next;
    for (link = c->c_rbufs_used.next; link != &c->c_rbufs_used; link = next) {
        next = link->next;
        struct ucx_rbuf *r = hmi_container_of(link, struct ucx_rbuf, r_link);
        if (r->r_inflight)
            continue;
        hmi_list_remove(&r->r_link);
        free(r);
    }
}

void hmi_ucx_msg_fini_late(struct ucx_ctx *c)
{
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&c->c_rbufs_used)) != NULL)
        free(hmi_container_of(link, struct ucx_rbuf, r_link));
    c->c_rndv_inflight = 0;
}

/* ---- Send ----------------------------------------------------------------- */

void *hmi_ucx_msg_buf_alloc(hmi_na_class_t *cls, size_t size, void **desc_out)
{
    (void)cls;
    *desc_out = NULL;
    size_t rounded = (size + 63) & ~(size_t)63;
    return aligned_alloc(64, rounded ? rounded : 64);
}

void hmi_ucx_msg_buf_free(hmi_na_class_t *cls, void *buf, void *desc)
{
    (void)cls;
    (void)desc;
    free(buf);
}

hm_return_t hmi_ucx_msg_post(struct ucx_ctx *c, hmi_na_op_t *op)
{
    struct ucx_op *p = ucx_op(op);
    struct ucx_ep *e = hmi_ucx_addr_uep(p->p_addr);
    if (hmi_unlikely(e == NULL))
        return HM_UNREACHABLE;
    ucp_request_param_t param = hmi_ucx_req_param(p);
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_REPLY;
    bool named = e->e_peer_bound;
    ucs_status_ptr_t sp = ucp_am_send_nbx(e->e_ep, UCX_AM_ID, named ? NULL : c->c_hdr,
                                          named ? 0 : c->c_hdr_len, p->p_buf, p->p_len,
                                          &param);
    if (hmi_unlikely(UCS_PTR_IS_ERR(sp))) {
        ucs_status_t status = UCS_PTR_STATUS(sp);
        if (status == UCS_ERR_NO_RESOURCE) {
            hmi_ucx_op_queue(c, op);
            return HM_SUCCESS;
        }
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: cannot send to %s: %s", p->p_addr->a_uri,
                ucs_status_string(status));
        return p->p_addr->a_dead ? HM_UNREACHABLE : hmi_ucx_status(status);
    }
    hmi_ucx_op_posted(c, op, UCS_PTR_IS_PTR(sp) ? sp : NULL, UCS_OK);
    return HM_SUCCESS;
}

hm_return_t hmi_ucx_msg_send(hmi_na_context_t *ctx, hmi_na_addr_t *dest, const void *buf,
                             size_t len, void *desc, hmi_na_op_t *op)
{
    struct ucx_ctx *c = ucx_ctx(ctx);
    struct ucx_op *p = ucx_op(op);
    (void)desc;
    if (hmi_unlikely(dest->a_dead || dest->a_exited || dest->a_ctx != c))
        return dest->a_ctx != c && !dest->a_dead ? HM_INVALID_ARG : HM_UNREACHABLE;
    p->p_op = op;
    p->p_kind = UCX_OP_SEND;
    p->p_req = NULL;
    p->p_addr = dest;
    p->p_force = HM_SUCCESS;
    p->p_canceled = false;
    p->p_queued = false;
    p->p_buf = buf;
    p->p_len = len;
    hmi_list_init(&p->p_link);
    return hmi_ucx_msg_post(c, op);
}
