/*
 * UCX plugin: memory registration, remote keys, put and get.
 *
 * mem_register maps the caller's buffer with ucp_mem_map (no allocation) and
 * packs its rkey once. A packed key is
 *
 *   u32 magic, u32 rkey length, u64 base address, u64 length, rkey bytes
 *
 * in the byte order of the host, so offsets on the wire are relative to the
 * start of the region and the peer checks them against its length. A put is
 * reported complete only once the data is at the peer (ucp_put_nbx, then
 * ucp_ep_flush_nbx); a get once the data is here. One call per transfer,
 * whatever its size: UCX fragments. ucp_put_nbx / ucp_get_nbx move one
 * contiguous range (UCX 1.13 has no remote scatter list), so the class's
 * c_rma_iov_limit is 1 and every op carries one piece.
 */
#include "na/ucx/ucx_internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#define UCX_KEY_MAGIC 0x4b55484du /* "MHUK" */
#define UCX_KEY_FIXED 24

hm_return_t hmi_ucx_mem_register(hm_na_class_t *cls, hm_na_mem_t *mem)
{
    struct ucx_class *k = ucx_cls(cls);
    struct ucx_mem *m = hm_na_mem_priv(mem);
    m->m_memh = NULL;
    m->m_rkey_buf = NULL;
    m->m_rkey_len = 0;
    if (mem->m_len == 0)
        return HM_SUCCESS; /* nothing to reach: an empty key */
    unsigned int prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE;
    if (mem->m_access & HM_NA_ACCESS_READ)
        prot |= UCP_MEM_MAP_PROT_REMOTE_READ;
    if (mem->m_access & HM_NA_ACCESS_WRITE)
        prot |= UCP_MEM_MAP_PROT_REMOTE_WRITE;
    ucp_mem_map_params_t params = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_PROT,
        .address = mem->m_base,
        .length = mem->m_len,
        .prot = prot,
    };
    ucs_status_t status = ucp_mem_map(k->k_ucp, &params, &m->m_memh);
    if (status != UCS_OK) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: cannot register %zu bytes at %p: %s",
                mem->m_len, mem->m_base, ucs_status_string(status));
        return hmi_ucx_status(status) == HM_NOMEM ? HM_NOMEM : HM_TRANSPORT_ERROR;
    }
    status = ucp_rkey_pack(k->k_ucp, m->m_memh, &m->m_rkey_buf, &m->m_rkey_len);
    if (status != UCS_OK) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: cannot pack a remote key: %s",
                ucs_status_string(status));
        ucp_mem_unmap(k->k_ucp, m->m_memh);
        m->m_memh = NULL;
        return HM_TRANSPORT_ERROR;
    }
    return HM_SUCCESS;
}

void hmi_ucx_mem_deregister(hm_na_class_t *cls, hm_na_mem_t *mem)
{
    struct ucx_class *k = ucx_cls(cls);
    struct ucx_mem *m = hm_na_mem_priv(mem);
    if (m->m_rkey_buf != NULL)
        ucp_rkey_buffer_release(m->m_rkey_buf);
    if (m->m_memh != NULL)
        ucp_mem_unmap(k->k_ucp, m->m_memh);
    m->m_rkey_buf = NULL;
    m->m_memh = NULL;
}

hm_return_t hmi_ucx_mem_key_pack(hm_na_class_t *cls, hm_na_mem_t *mem, void *buf,
                                 size_t *size)
{
    (void)cls;
    struct ucx_mem *m = hm_na_mem_priv(mem);
    size_t need = UCX_KEY_FIXED + m->m_rkey_len;
    if (buf == NULL || *size < need) {
        *size = need;
        return HM_MSGSIZE;
    }
    uint32_t head[2] = {UCX_KEY_MAGIC, (uint32_t)m->m_rkey_len};
    uint64_t range[2] = {(uint64_t)(uintptr_t)mem->m_base, (uint64_t)mem->m_len};
    unsigned char *out = buf;
    memcpy(out, head, sizeof(head));
    memcpy(out + 8, range, sizeof(range));
    if (m->m_rkey_len > 0)
        memcpy(out + UCX_KEY_FIXED, m->m_rkey_buf, m->m_rkey_len);
    *size = need;
    return HM_SUCCESS;
}

hm_return_t hmi_ucx_rkey_unpack(hm_na_context_t *ctx, hm_na_addr_t *peer, const void *key,
                                size_t key_len, void **rkey_out)
{
    (void)ctx;
    const unsigned char *in = key;
    uint32_t head[2];
    uint64_t range[2];
    if (key == NULL || key_len < UCX_KEY_FIXED)
        goto bad;
    memcpy(head, in, sizeof(head));
    memcpy(range, in + 8, sizeof(range));
    if (head[0] != UCX_KEY_MAGIC || head[1] != key_len - UCX_KEY_FIXED ||
        (head[1] == 0) != (range[1] == 0) || range[0] + range[1] < range[0])
        goto bad;
    ucp_ep_h ep = hmi_ucx_addr_rma_ep(peer);
    if (ep == NULL)
        return HM_UNREACHABLE;
    struct ucx_rkey *k = calloc(1, sizeof(*k));
    if (k == NULL)
        return HM_NOMEM;
    k->k_base = range[0];
    k->k_len = range[1];
    k->k_peer = peer;
    if (head[1] > 0) {
        ucs_status_t status = ucp_ep_rkey_unpack(ep, in + UCX_KEY_FIXED, &k->k_rkey);
        if (status != UCS_OK) {
            hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: remote key from %s: %s", peer->a_uri,
                    ucs_status_string(status));
            free(k);
            return HM_PROTOCOL_ERROR;
        }
    }
    *rkey_out = k;
    return HM_SUCCESS;
bad:
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: malformed remote key (%zu bytes) from %s",
            key_len, peer ? peer->a_uri : "?");
    return HM_PROTOCOL_ERROR;
}

void hmi_ucx_rkey_release(hm_na_context_t *ctx, void *rkey)
{
    (void)ctx;
    struct ucx_rkey *k = rkey;
    if (k == NULL)
        return;
    if (k->k_rkey != NULL)
        ucp_rkey_destroy(k->k_rkey);
    free(k);
}

hm_return_t hmi_ucx_rma_post(struct ucx_ctx *c, hm_na_op_t *op)
{
    struct ucx_op *p = ucx_op(op);
    /* Never touch a dead shm peer's memory: cma with error mode NONE is fatal. */
    if (hmi_ucx_addr_exited(p->p_addr))
        return HM_UNREACHABLE;
    ucp_ep_h ep = hmi_ucx_addr_rma_ep(p->p_addr);
    if (ep == NULL)
        return HM_UNREACHABLE;
    struct ucx_rkey *k = p->p_rkey;
    ucp_request_param_t param = hmi_ucx_req_param(p);
    if (p->p_memh != NULL && p->p_kind != UCX_OP_FLUSH) {
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        param.memh = p->p_memh;
    }
    ucs_status_ptr_t sp;
    switch (p->p_kind) {
    case UCX_OP_PUT:
        sp = ucp_put_nbx(ep, p->p_buf, p->p_len, p->p_raddr, k->k_rkey, &param);
        break;
    case UCX_OP_GET:
        sp = ucp_get_nbx(ep, (void *)(uintptr_t)p->p_buf, p->p_len, p->p_raddr, k->k_rkey,
                         &param);
        break;
    default:
        sp = ucp_ep_flush_nbx(ep, &param);
        break;
    }
    if (hmi_unlikely(UCS_PTR_IS_ERR(sp))) {
        ucs_status_t status = UCS_PTR_STATUS(sp);
        if (status == UCS_ERR_NO_RESOURCE) {
            hmi_ucx_op_queue(c, op);
            return HM_SUCCESS;
        }
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: RMA with %s: %s", p->p_addr->a_uri,
                ucs_status_string(status));
        return p->p_addr->a_dead ? HM_UNREACHABLE : hmi_ucx_status(status);
    }
    hmi_ucx_op_posted(c, op, UCS_PTR_IS_PTR(sp) ? sp : NULL, UCS_OK);
    return HM_SUCCESS;
}

hm_return_t hmi_ucx_rma(hm_na_context_t *ctx, hm_na_op_t *op, enum hm_na_rma_dir dir,
                        hm_na_addr_t *peer, const struct hm_na_rma_piece *pieces,
                        unsigned int count)
{
    struct ucx_ctx *c = ucx_ctx(ctx);
    struct ucx_op *p = ucx_op(op);
    if (count != 1) /* c_rma_iov_limit is 1: the NA layer let more through */
        return HM_INVALID_ARG;
    const struct hm_na_rma_piece *pc = &pieces[0];
    struct ucx_rkey *k = pc->rp_rkey;
    size_t remote_off = pc->rp_remote_off, len = pc->rp_len;
    if (k == NULL || peer == NULL || peer->a_ctx != c || remote_off > k->k_len ||
        len > k->k_len - remote_off) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR,
                "ucx: rma of %zu bytes at %zu refused: no key or peer, a peer of another "
                "context, or outside the remote region (%llu bytes)",
                len, remote_off, k ? (unsigned long long)k->k_len : 0ull);
        return HM_INVALID_ARG;
    }
    if (hmi_ucx_addr_exited(peer))
        return HM_UNREACHABLE;
    p->p_op = op;
    p->p_kind = dir == HM_NA_RMA_PUT ? UCX_OP_PUT : UCX_OP_GET;
    p->p_req = NULL;
    p->p_addr = peer;
    p->p_force = HM_SUCCESS;
    p->p_canceled = false;
    p->p_queued = false;
    p->p_buf = (const char *)pc->rp_local->m_base + pc->rp_local_off;
    p->p_len = len;
    p->p_raddr = k->k_base + remote_off;
    p->p_rkey = k;
    p->p_memh = ((struct ucx_mem *)hm_na_mem_priv(pc->rp_local))->m_memh;
    hmi_list_init(&p->p_link);
    if (len == 0) {
        hm_na_op_complete(op, HM_SUCCESS);
        return HM_SUCCESS;
    }
    return hmi_ucx_rma_post(c, op);
}
