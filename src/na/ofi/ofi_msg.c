/*
 * Messages. A message buffer is allocated with OFI_BUF_ROOM bytes of
 * headroom (its bookkeeping, then room for the plugin header and sender
 * name) and 8 bytes of tailroom (padding), registered whole when the
 * provider wants FI_MR_LOCAL, so a send is one contiguous span: fi_inject
 * when it fits the provider's inject size, fi_send otherwise, or, for
 * inject-only protocols (shm), a train of injects (ofi_frag.c).
 *
 * Receives land in slabs posted with FI_MULTI_RECV and are delivered in
 * place; the release token is the slab. A slab goes back to the provider
 * only once the provider has let go of it and the core has released every
 * message in it (hmi_ofi_slab_*). Without FI_MULTI_RECV each slab holds one
 * message. A fragment is copied out into its message's reassembly buffer,
 * which is the release token of the whole message (r_kind tells them apart).
 */
#include <stdlib.h>
#include <string.h>

#include "na/ofi/ofi_internal.h"
#include "util/compiler.h"
#include "util/log.h"

/* ---- Buffers --------------------------------------------------------------- */

void *hmi_ofi_msg_buf_alloc(hmi_na_class_t *cls, size_t size, void **desc_out)
{
    struct ofi_class *k = ofi_class(cls);
    size_t total = (OFI_BUF_ROOM + ofi_round8(size) + 8 + 63) & ~(size_t)63;
    uint8_t *base = aligned_alloc(64, total);
    if (base == NULL)
        return NULL;
    struct ofi_buf *b = (struct ofi_buf *)(void *)base;
    memset(b, 0, sizeof(*b));
    b->b_magic = OFI_BUF_MAGIC;
    b->b_size = size;
    b->b_payload = base + OFI_BUF_ROOM;
    if (k->k_mr_mode & FI_MR_LOCAL) {
        if (hmi_ofi_mr_reg(k, NULL, base, total, FI_SEND, &b->b_mr, &b->b_desc) !=
            HM_SUCCESS) {
            free(base);
            return NULL;
        }
    }
    *desc_out = b;
    return b->b_payload;
}

void hmi_ofi_msg_buf_free(hmi_na_class_t *cls, void *buf, void *desc)
{
    struct ofi_buf *b = desc ? desc : (struct ofi_buf *)(void *)((uint8_t *)buf - OFI_BUF_ROOM);
    if (buf == NULL || b->b_magic != OFI_BUF_MAGIC)
        return;
    b->b_magic = 0;
    if (b->b_mr)
        fi_close(&b->b_mr->fid);
    free(b);
}

/* ---- Sends ----------------------------------------------------------------- */

ssize_t hmi_ofi_send_post(struct ofi_context *x, struct ofi_op *p)
{
    fi_addr_t dest = p->p_peer->a_fi;
    ssize_t rc;
    if (hmi_unlikely(x->x_cls->k_frag && p->p_wire_len > x->x_cls->k_inject_size))
        return hmi_ofi_frag_post(x, p);
    if (p->p_wire_len <= x->x_cls->k_inject_size) {
        rc = hmi_ofi_inject(x, p->p_peer, p->p_wire, p->p_wire_len);
        if (rc == 0) {
            hmi_ofi_peer_pushback(p->p_peer, false);
            ofi_bell_ring(p->p_peer);
            hmi_ofi_op_finish(p, HM_SUCCESS); /* the buffer is free again already */
            return 0;
        }
    } else if (hmi_unlikely(hmi_ofi_sendctx_take(x, p) == NULL)) {
        rc = -FI_ENOMEM;
    } else {
        rc = fi_send(x->x_ep, p->p_wire, p->p_wire_len, p->p_desc, dest, &p->p_sctx->s_req);
        if (rc == 0) {
            hmi_ofi_peer_pushback(p->p_peer, false);
            ofi_bell_ring(p->p_peer);
            hmi_ofi_op_posted(x, p);
            return 0;
        }
        hmi_ofi_sendctx_untake(x, p);
    }
    if (rc == -FI_ENOMEM)
        rc = -FI_EAGAIN; /* a provider pool ran dry for now: same as a full queue */
    if (rc == -FI_EAGAIN) {
        hmi_ofi_peer_pushback(p->p_peer, true);
        hmi_ofi_op_retry_later(x, p);
        return rc;
    }
    hmi_ofi_op_unlink(p);
    return rc;
}

hm_return_t hmi_ofi_msg_send(hmi_na_context_t *ctx, hmi_na_addr_t *dest, const void *buf,
                             size_t len, void *desc, hmi_na_op_t *op)
{
    struct ofi_context *x = ofi_ctx(ctx);
    struct ofi_op *p = ofi_op(op);
    /* desc may be NULL: the bookkeeping sits at a fixed place before the buffer. */
    struct ofi_buf *b = desc ? desc : (struct ofi_buf *)(void *)((uint8_t *)buf - OFI_BUF_ROOM);
    if (hmi_unlikely(b->b_magic != OFI_BUF_MAGIC || buf != b->b_payload || len > b->b_size)) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR,
                "ofi: msg_send needs the start of a msg_buf_alloc buffer");
        return HM_INVALID_ARG;
    }
    if (hmi_unlikely(dest->a_dead))
        return HM_UNREACHABLE;
    p->p_req.r_kind = OFI_REQ_OP;
    p->p_na = op;
    p->p_kind = OFI_OP_SEND;
    p->p_canceled = false;
    p->p_queued = false;
    p->p_posted = false;
    p->p_status = HM_SUCCESS; /* a peer dropped while it is posted sets it */
    p->p_peer = dest;
    hmi_list_init(&p->p_link);
    /* The name rides along until the peer has shown it can resolve us. */
    const struct ofi_name *name = x->x_cls->k_source && dest->a_heard ? NULL : &x->x_name;
    p->p_wire = hmi_ofi_hdr_write(b->b_payload, len, name, (uint32_t)x->x_pid, 0,
                                  &p->p_wire_len);
    p->p_desc = b->b_desc;
    p->p_frag_off = 0;
    p->p_sctx = NULL;
    dest->a_await = true;
    dest->a_quiet_since_ns = 0;
    dest->a_probes = 0;
    if (hmi_unlikely(dest->a_nqueued)) {
        hmi_ofi_op_retry_later(x, p); /* keep order behind what already waits for it */
        return HM_SUCCESS;
    }
    ssize_t rc = hmi_ofi_send_post(x, p);
    if (hmi_likely(rc == 0 || rc == -FI_EAGAIN))
        return HM_SUCCESS;
    hm_return_t ret = hmi_ofi_error("send to", NULL, (int)rc);
    if (ret == HM_UNREACHABLE)
        hmi_ofi_peer_fail(x, dest, fi_strerror((int)-rc));
    return ret;
}

/* ---- Receive slabs --------------------------------------------------------- */

static ssize_t msg_slab_post(struct ofi_context *x, struct ofi_slab *slab)
{
    struct iovec iov = {.iov_base = slab->s_buf, .iov_len = slab->s_size};
    void *desc = slab->s_desc;
    struct fi_msg msg = {
        .msg_iov = &iov,
        .desc = &desc,
        .iov_count = 1,
        .addr = FI_ADDR_UNSPEC,
        .context = &slab->s_req,
    };
    return fi_recvmsg(x->x_ep, &msg, x->x_cls->k_multi_recv ? FI_MULTI_RECV : 0);
}

int hmi_ofi_slabs_repost(struct ofi_context *x)
{
    int posted = 0;
    while (!hmi_list_empty(&x->x_repost)) {
        struct ofi_slab *slab = hmi_container_of(x->x_repost.next, struct ofi_slab, s_link);
        ssize_t rc = msg_slab_post(x, slab);
        if (rc == -FI_EAGAIN || rc == -FI_ENOMEM)
            break; /* rxm runs out of receive entries under load: later */
        hmi_list_remove(&slab->s_link);
        if (rc != 0) {
            hmi_ofi_error("fi_recvmsg", "(slab lost)", (int)rc);
            continue;
        }
        hmi_ofi_slab_posted(slab);
        posted++;
    }
    return posted;
}

hm_return_t hmi_ofi_slabs_open(struct ofi_context *x)
{
    struct ofi_class *k = x->x_cls;
    size_t n = k->k_nslabs, size = k->k_slab_size;
    x->x_slabs = calloc(n, sizeof(*x->x_slabs));
    x->x_slab_mem = aligned_alloc(4096, n * size);
    if (x->x_slabs == NULL || x->x_slab_mem == NULL)
        return HM_NOMEM;
    x->x_nslabs = n;
    x->x_na->x_recv_bufs = (unsigned int)n; /* a held message pins its slab */
    x->x_na->x_recv_pinned = 0;
    void *desc = NULL;
    if (k->k_mr_mode & FI_MR_LOCAL) {
        hm_return_t ret = hmi_ofi_mr_reg(k, x, x->x_slab_mem, n * size, FI_RECV,
                                         &x->x_slab_mr, &desc);
        if (ret == HM_SUCCESS)
            ret = hmi_ofi_mr_reg(k, x, x->x_probe_buf, sizeof(x->x_probe_buf), FI_SEND,
                                 &x->x_probe_mr, &x->x_probe_desc);
        if (ret != HM_SUCCESS)
            return ret;
    }
    for (size_t i = 0; i < n; i++) {
        struct ofi_slab *slab = &x->x_slabs[i];
        slab->s_req.r_kind = OFI_REQ_SLAB;
        slab->s_buf = x->x_slab_mem + i * size;
        slab->s_size = size;
        slab->s_desc = desc;
        hmi_list_init(&slab->s_link);
        hmi_list_push_back(&x->x_repost, &slab->s_link);
    }
    return HM_SUCCESS;
}

void hmi_ofi_slabs_close(struct ofi_context *x)
{
    if (x->x_probe_mr)
        fi_close(&x->x_probe_mr->fid);
    if (x->x_slab_mr)
        fi_close(&x->x_slab_mr->fid);
    x->x_probe_mr = NULL;
    x->x_slab_mr = NULL;
    free(x->x_slab_mem);
    free(x->x_slabs);
    x->x_slab_mem = NULL;
    x->x_slabs = NULL;
    x->x_nslabs = 0;
    hmi_list_init(&x->x_repost);
}

/* Parse one message of a slab and hand it to the core; false if dropped. */
static bool msg_deliver(struct ofi_context *x, struct ofi_slab *slab, uint8_t *data,
                        size_t len, fi_addr_t src)
{
    struct ofi_hdr_view view;
    if (hmi_unlikely(hmi_ofi_hdr_parse(data, len, &view) != HM_SUCCESS)) {
        static struct hmi_log_limit malformed_log; /* a peer can cause it: rate-limited */
        hmi_log_limited(&malformed_log, HMI_SUBSYS_NA, HMI_LOG_WARN,
                        "ofi: dropped a malformed message (%zu bytes)", len);
        return false;
    }
    hmi_na_addr_t *source = hmi_ofi_peer_source(x, src, &view);
    if (hmi_unlikely(view.h_flags & OFI_HDR_F_PROBE))
        return false;
    if (hmi_unlikely(source == NULL)) {
        static struct hmi_log_limit unknown_log; /* a peer can cause it: rate-limited */
        hmi_log_limited(&unknown_log, HMI_SUBSYS_NA, HMI_LOG_WARN,
                        "ofi: dropped a message from an unknown sender");
        if (view.h_flags & OFI_HDR_F_FRAG)
            x->x_frag.fs_dropped++;
        return false;
    }
    if (hmi_unlikely(view.h_flags & OFI_HDR_F_FRAG)) {
        /* Only fragmenting protocols send trains: elsewhere a fragment is forged,
         * and must not make us hold partial messages. Nor does a dead sender
         * (its partial went when it died) start another. */
        if (!x->x_cls->k_frag || source->a_dead) {
            x->x_frag.fs_dropped++;
            return false;
        }
        /* Copied out of the slab: the slab is not held for it. */
        size_t limit = x->x_na->x_class->c_eager_limit;
        struct ofi_reasm *whole = hmi_ofi_reasm_add(x, source, &view, limit);
        if (whole != NULL)
            hmi_na_deliver(x->x_na, source, whole->r_data, whole->r_total, (uintptr_t)whole);
        return whole != NULL;
    }
    hmi_ofi_reasm_cut(x, source); /* a whole message ends any train it left unfinished */
    hmi_ofi_slab_deliver(slab);
    hmi_na_deliver(x->x_na, source, view.h_payload, view.h_payload_len, (uintptr_t)slab);
    return true;
}

void hmi_ofi_recv_done(struct ofi_context *x, struct ofi_slab *slab, void *buf, size_t len,
                       uint64_t flags, fi_addr_t src)
{
    bool multi = x->x_cls->k_multi_recv;
    if (len > 0)
        msg_deliver(x, slab, multi ? buf : slab->s_buf, len, src);
    if (!multi || (flags & FI_MULTI_RECV)) {
        if (hmi_ofi_slab_provider_done(slab))
            hmi_list_push_back(&x->x_repost, &slab->s_link);
        else
            x->x_na->x_recv_pinned++; /* until the core releases its last message */
    }
}

void hmi_ofi_msg_release(hmi_na_context_t *ctx, uintptr_t token)
{
    if (hmi_unlikely(((struct ofi_req *)token)->r_kind == OFI_REQ_REASM)) {
        hmi_ofi_reasm_release(ofi_ctx(ctx), (struct ofi_reasm *)token);
        return;
    }
    struct ofi_slab *slab = (struct ofi_slab *)token;
    if (hmi_ofi_slab_release(slab)) {
        ctx->x_recv_pinned--;
        hmi_list_push_back(&ofi_ctx(ctx)->x_repost, &slab->s_link);
    }
}
