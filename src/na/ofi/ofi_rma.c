/*
 * Memory and RMA. A region is registered once per class with the access the
 * caller grants (plus local read/write so it can be the local side of our
 * own put/get). Its packed key carries what the peer's fi_read/fi_write
 * need: the remote address of offset 0 (the base with FI_MR_VIRT_ADDR, else
 * 0), the length, and the key (the provider's with FI_MR_PROV_KEY, else one
 * we chose, unique per class).
 *
 * An op of several pieces (at most c_rma_iov_limit: the provider's iov_limit
 * and rma_iov_limit, capped) goes as one fi_readmsg / fi_writemsg, one local
 * iov and one remote rma_iov per piece, each with its own descriptor and
 * key. An op of one piece goes as fi_read / fi_write. A piece longer than
 * the endpoint's max_msg_size (or a group whose total is) is posted piece by
 * piece, each cut into parts; the op completes once, when every part is
 * back, with the first error seen. With FI_CONTEXT mode (the provider writes
 * into the context) parts go one at a time, since they share the op's
 * context.
 */
#include <stdlib.h>
#include <string.h>

#include "na/ofi/ofi_internal.h"
#include "util/compiler.h"
#include "util/le.h"
#include "util/log.h"

#define RMA_KEY_MAGIC 0x49464f48u /* "HOFI" */
#define RMA_KEY_SIZE 32u
#define RMA_KEY_F_VIRT 0x1u

hm_return_t hmi_ofi_mem_register(hmi_na_class_t *cls, hmi_na_mem_t *mem)
{
    struct ofi_class *k = ofi_class(cls);
    struct ofi_mem *m = hmi_na_mem_priv(mem);
    uint64_t access = FI_READ | FI_WRITE;
    if (mem->m_access & HM_NA_ACCESS_READ)
        access |= FI_REMOTE_READ;
    if (mem->m_access & HM_NA_ACCESS_WRITE)
        access |= FI_REMOTE_WRITE;
    hm_return_t ret = hmi_ofi_mr_reg(k, NULL, mem->m_base, mem->m_len, access, &m->m_mr,
                                     &m->m_desc);
    if (ret != HM_SUCCESS)
        return ret;
    m->m_key = fi_mr_key(m->m_mr);
    return HM_SUCCESS;
}

void hmi_ofi_mem_deregister(hmi_na_class_t *cls, hmi_na_mem_t *mem)
{
    struct ofi_mem *m = hmi_na_mem_priv(mem);
    fi_close(&m->m_mr->fid);
}

hm_return_t hmi_ofi_mem_key_pack(hmi_na_class_t *cls, hmi_na_mem_t *mem, void *buf,
                                 size_t *size)
{
    struct ofi_class *k = ofi_class(cls);
    struct ofi_mem *m = hmi_na_mem_priv(mem);
    bool fits = *size >= RMA_KEY_SIZE;
    *size = RMA_KEY_SIZE;
    if (!fits)
        return HM_MSGSIZE;
    bool virt = k->k_mr_mode & FI_MR_VIRT_ADDR;
    uint8_t *p = buf;
    hmi_le_put64(p, RMA_KEY_MAGIC | (uint64_t)(virt ? RMA_KEY_F_VIRT : 0) << 32);
    hmi_le_put64(p + 8, virt ? (uint64_t)(uintptr_t)mem->m_base : 0);
    hmi_le_put64(p + 16, mem->m_len);
    hmi_le_put64(p + 24, m->m_key);
    return HM_SUCCESS;
}

hm_return_t hmi_ofi_rkey_unpack(hmi_na_context_t *ctx, hmi_na_addr_t *peer, const void *key,
                                size_t key_len, void **rkey_out)
{
    const uint8_t *p = key;
    if (key == NULL || key_len != RMA_KEY_SIZE)
        return HM_PROTOCOL_ERROR;
    uint64_t head = hmi_le_get64(p);
    if ((uint32_t)head != RMA_KEY_MAGIC || (head >> 32) & ~(uint64_t)RMA_KEY_F_VIRT)
        return HM_PROTOCOL_ERROR;
    struct ofi_rkey *r = malloc(sizeof(*r));
    if (r == NULL)
        return HM_NOMEM;
    r->r_base = hmi_le_get64(p + 8);
    r->r_len = hmi_le_get64(p + 16);
    r->r_key = hmi_le_get64(p + 24);
    *rkey_out = r;
    return HM_SUCCESS;
}

void hmi_ofi_rkey_release(hmi_na_context_t *ctx, void *rkey)
{
    free(rkey);
}

static const char *rma_what(const struct ofi_op *p)
{
    if (p->p_grouped)
        return p->p_kind == OFI_OP_PUT ? "fi_writemsg" : "fi_readmsg";
    return p->p_kind == OFI_OP_PUT ? "fi_write" : "fi_read";
}

static bool rma_all_posted(const struct ofi_op *p)
{
    return p->p_cur == p->p_count;
}

/* Every piece of a grouped op in one fi_writemsg / fi_readmsg. */
static ssize_t rma_post_group(struct ofi_context *x, struct ofi_op *p)
{
    struct fi_msg_rma msg = {
        .msg_iov = p->p_iov,
        .desc = p->p_descs,
        .iov_count = p->p_count,
        .addr = p->p_peer->a_fi,
        .rma_iov = p->p_rma_iov,
        .rma_iov_count = p->p_count,
        .context = &p->p_req,
    };
    uint64_t flags = x->x_cls->k_rma_flags;
    ssize_t rc = p->p_kind == OFI_OP_PUT ? fi_writemsg(x->x_ep, &msg, flags)
                                         : fi_readmsg(x->x_ep, &msg, flags);
    if (rc == 0)
        p->p_cur = p->p_count;
    return rc;
}

/* The next part of the current piece: at most k_max_msg bytes of it. */
static ssize_t rma_post_slice(struct ofi_context *x, struct ofi_op *p)
{
    unsigned int i = p->p_cur;
    size_t off = p->p_cur_off;
    size_t n = p->p_rma_iov[i].len - off;
    if (n > x->x_cls->k_max_msg)
        n = x->x_cls->k_max_msg;
    uint8_t *local = (uint8_t *)p->p_iov[i].iov_base + off;
    uint64_t raddr = p->p_rma_iov[i].addr + off;
    uint64_t key = p->p_rma_iov[i].key;
    fi_addr_t dest = p->p_peer->a_fi;
    ssize_t rc = p->p_kind == OFI_OP_PUT
                     ? fi_write(x->x_ep, local, n, p->p_descs[i], dest, raddr, key, &p->p_req)
                     : fi_read(x->x_ep, local, n, p->p_descs[i], dest, raddr, key, &p->p_req);
    if (rc != 0)
        return rc;
    p->p_cur_off += n;
    if (p->p_cur_off == p->p_rma_iov[i].len) {
        p->p_cur++;
        p->p_cur_off = 0;
    }
    return 0;
}

ssize_t hmi_ofi_rma_post(struct ofi_context *x, struct ofi_op *p)
{
    struct ofi_class *k = x->x_cls;
    bool serial = k->k_info->mode & (FI_CONTEXT | FI_CONTEXT2);
    while (!rma_all_posted(p) && !p->p_canceled && p->p_status == HM_SUCCESS) {
        if (serial && p->p_parts > 0)
            break;
        ssize_t rc = p->p_grouped ? rma_post_group(x, p) : rma_post_slice(x, p);
        if (rc == -FI_ENOMEM)
            rc = -FI_EAGAIN; /* a provider pool ran dry for now */
        hmi_ofi_peer_pushback(p->p_peer, rc == -FI_EAGAIN);
        if (rc == -FI_EAGAIN) {
            hmi_ofi_op_retry_later(x, p);
            return rc;
        }
        if (rc != 0) {
            if (p->p_parts == 0) {
                hmi_ofi_op_unlink(p);
                return rc;
            }
            p->p_status = hmi_ofi_error(rma_what(p), NULL, (int)rc);
            break;
        }
        p->p_parts++;
    }
    if (p->p_parts > 0) {
        ofi_bell_ring(p->p_peer);
        hmi_ofi_op_posted(x, p);
    } else
        hmi_ofi_op_finish(p, p->p_status);
    return 0;
}

void hmi_ofi_rma_part_done(struct ofi_context *x, struct ofi_op *p, int err)
{
    p->p_parts--;
    if (err != 0 && p->p_status == HM_SUCCESS) {
        p->p_status = hmi_ofi_op_error_status(p, err);
        if (p->p_status == HM_UNREACHABLE && err != FI_ECANCELED)
            hmi_ofi_peer_fail(x, p->p_peer, fi_strerror(err));
    }
    if (p->p_parts > 0 || p->p_queued)
        return; /* more in the provider, or waiting to be posted */
    if (rma_all_posted(p) || p->p_canceled || p->p_status != HM_SUCCESS) {
        hmi_ofi_op_finish(p, p->p_status);
        return;
    }
    ssize_t rc = hmi_ofi_rma_post(x, p);
    if (rc < 0 && rc != -FI_EAGAIN)
        hmi_ofi_op_finish(p, hmi_ofi_error("rma", NULL, (int)rc));
}

/*
 * Copy the pieces into the op as libfabric takes them, checking each remote
 * range against its key; zero-length pieces are dropped. HM_INVALID_ARG for
 * a range outside its key.
 */
static hm_return_t rma_load(struct ofi_context *x, struct ofi_op *p,
                            const struct hmi_na_rma_piece *pieces, unsigned int count)
{
    size_t total = 0;
    unsigned int n = 0;
    for (unsigned int i = 0; i < count; i++) {
        const struct hmi_na_rma_piece *pc = &pieces[i];
        const struct ofi_rkey *r = pc->rp_rkey;
        if (hmi_unlikely(pc->rp_remote_off > r->r_len ||
                         pc->rp_len > r->r_len - pc->rp_remote_off)) {
            hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR,
                    "ofi: rma piece %u: %zu bytes at %zu lie outside the remote region "
                    "(%llu bytes)",
                    i, pc->rp_len, pc->rp_remote_off, (unsigned long long)r->r_len);
            return HM_INVALID_ARG;
        }
        if (pc->rp_len == 0)
            continue;
        const struct ofi_mem *m = hmi_na_mem_priv(pc->rp_local);
        p->p_iov[n].iov_base = (uint8_t *)pc->rp_local->m_base + pc->rp_local_off;
        p->p_iov[n].iov_len = pc->rp_len;
        p->p_descs[n] = m->m_desc;
        p->p_rma_iov[n].addr = r->r_base + pc->rp_remote_off;
        p->p_rma_iov[n].len = pc->rp_len;
        p->p_rma_iov[n].key = r->r_key;
        total += pc->rp_len;
        n++;
    }
    p->p_count = n;
    p->p_grouped = n > 1 && total <= x->x_cls->k_max_msg;
    return HM_SUCCESS;
}

hm_return_t hmi_ofi_rma(hmi_na_context_t *ctx, hmi_na_op_t *op, enum hmi_na_rma_dir dir,
                        hmi_na_addr_t *peer, const struct hmi_na_rma_piece *pieces,
                        unsigned int count)
{
    struct ofi_context *x = ofi_ctx(ctx);
    struct ofi_op *p = ofi_op(op);
    if (hmi_unlikely(count > OFI_RMA_IOV_MAX))
        return HM_INVALID_ARG;
    hm_return_t ret = rma_load(x, p, pieces, count);
    if (hmi_unlikely(ret != HM_SUCCESS))
        return ret;
    if (hmi_unlikely(peer->a_dead))
        return HM_UNREACHABLE;
    p->p_req.r_kind = OFI_REQ_OP;
    p->p_na = op;
    p->p_kind = dir == HM_NA_RMA_PUT ? OFI_OP_PUT : OFI_OP_GET;
    p->p_canceled = false;
    p->p_queued = false;
    p->p_posted = false;
    p->p_status = HM_SUCCESS;
    p->p_peer = peer;
    p->p_cur = 0;
    p->p_cur_off = 0;
    p->p_parts = 0;
    hmi_list_init(&p->p_link);
    if (hmi_unlikely(peer->a_nqueued)) {
        hmi_ofi_op_retry_later(x, p);
        return HM_SUCCESS;
    }
    ssize_t rc = hmi_ofi_rma_post(x, p);
    if (rc == 0 || rc == -FI_EAGAIN)
        return HM_SUCCESS;
    ret = hmi_ofi_error(rma_what(p), NULL, (int)rc);
    if (ret == HM_UNREACHABLE)
        hmi_ofi_peer_fail(x, peer, fi_strerror((int)-rc));
    return ret;
}
