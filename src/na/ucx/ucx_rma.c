/*
 * UCX plugin: memory registration, remote keys, put and get.
 *
 * mem_register maps the caller's buffer with ucp_mem_map (no allocation) and
 * packs its rkey once. A packed key is a fixed header of UCX_KEY_HDR bytes,
 * little-endian, then UCX's rkey:
 *
 *    0  u32  magic "MHK2"
 *    4  u8   version (2)
 *    5  u8   flags: UCX_KEY_F_CMA (shm: the pid below may be read and written
 *            with process_vm_readv / process_vm_writev)
 *    6  u8   access bits granted (hm_na_access)
 *    7  u8   reserved, 0
 *    8  u32  owner's pid (getpid() at registration) with UCX_KEY_F_CMA, else 0
 *   12  u32  UCX rkey length (0 only for an empty region)
 *   16  u64  base address
 *   24  u64  length
 *   32  ...  UCX rkey bytes (ucp_rkey_pack)
 *
 * Offsets on the wire are relative to the start of the region and the peer
 * checks them against its length. tcp keys have the same layout, without the
 * flag and with pid 0.
 *
 * shm (see "RMA over shm" in ucx_internal.h): an op whose key has
 * UCX_KEY_F_CMA and the peer's pid is one process_vm_readv (get) or
 * process_vm_writev (put), made inside the rma call after the range and the
 * access granted are checked; the op completes at the next progress, with
 * the data in place, for puts too.
 * The syscall is made only after the peer's pidfd said the process is
 * alive, so a pid reused by another process cannot be reached (reuse needs
 * the peer to exit, be reaped and its pid to come round again between the
 * check and the copy). EPERM / ENOSYS turn CMA off for the class, with one
 * warning, and the op (and every later one) takes UCX's path.
 *
 * UCX's path (tcp, keys without the flag, CMA refused): a put is reported
 * complete only once the data is at the peer (ucp_put_nbx, then
 * ucp_ep_flush_nbx); a get once the data is here. One call per transfer,
 * whatever its size: UCX fragments. ucp_put_nbx / ucp_get_nbx move one
 * contiguous range (UCX 1.13 has no remote scatter list), so the class's
 * c_rma_iov_limit is 1 and every op carries one piece, on both paths.
 */
#include "na/ucx/ucx_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "util/log.h"

#define UCX_KEY_MAGIC 0x324b484du /* "MHK2" */
#define UCX_KEY_VERSION 2
#define UCX_KEY_ACCESS_ALL (HM_NA_ACCESS_READ | HM_NA_ACCESS_WRITE)

/* ---- Keys ------------------------------------------------------------------ */

static void ucx_put_le32(unsigned char *out, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        out[i] = (unsigned char)(v >> (8 * i));
}

static void ucx_put_le64(unsigned char *out, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        out[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t ucx_get_le32(const unsigned char *in)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | in[i];
    return v;
}

static uint64_t ucx_get_le64(const unsigned char *in)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | in[i];
    return v;
}

void hmi_ucx_key_encode(const struct ucx_key *y, unsigned char *out)
{
    ucx_put_le32(out, UCX_KEY_MAGIC);
    out[4] = UCX_KEY_VERSION;
    out[5] = (unsigned char)y->y_flags;
    out[6] = (unsigned char)y->y_access;
    out[7] = 0;
    ucx_put_le32(out + 8, y->y_pid);
    ucx_put_le32(out + 12, y->y_rkey_len);
    ucx_put_le64(out + 16, y->y_base);
    ucx_put_le64(out + 24, y->y_len);
}

hm_return_t hmi_ucx_key_decode(const void *key, size_t key_len, struct ucx_key *out,
                               const char **why)
{
    const unsigned char *in = key;
    if (key == NULL || key_len < UCX_KEY_HDR) {
        *why = "shorter than its header";
        return HM_PROTOCOL_ERROR;
    }
    if (ucx_get_le32(in) != UCX_KEY_MAGIC || in[4] != UCX_KEY_VERSION) {
        *why = "bad magic or version";
        return HM_PROTOCOL_ERROR;
    }
    struct ucx_key y = {
        .y_flags = in[5],
        .y_access = in[6],
        .y_pid = ucx_get_le32(in + 8),
        .y_rkey_len = ucx_get_le32(in + 12),
        .y_base = ucx_get_le64(in + 16),
        .y_len = ucx_get_le64(in + 24),
    };
    if ((y.y_flags & ~UCX_KEY_F_CMA) != 0 || (y.y_access & ~UCX_KEY_ACCESS_ALL) != 0 ||
        in[7] != 0) {
        *why = "unknown flags or access bits";
        return HM_PROTOCOL_ERROR;
    }
    if (y.y_rkey_len != key_len - UCX_KEY_HDR || (y.y_rkey_len == 0) != (y.y_len == 0)) {
        *why = "UCX rkey length does not match the key or the region";
        return HM_PROTOCOL_ERROR;
    }
    if (y.y_base + y.y_len < y.y_base) {
        *why = "region wraps around the address space";
        return HM_PROTOCOL_ERROR;
    }
    bool cma = (y.y_flags & UCX_KEY_F_CMA) != 0;
    if (cma != (y.y_pid != 0) || y.y_pid > INT32_MAX || (cma && y.y_len == 0)) {
        *why = "pid without the CMA flag, or the flag without a pid or a region";
        return HM_PROTOCOL_ERROR;
    }
    *out = y;
    return HM_SUCCESS;
}

hm_return_t hmi_ucx_key_cma_pid(const struct ucx_key *y, enum ucx_proto proto,
                                const hm_na_addr_t *peer, pid_t *pid_out, const char **why)
{
    *pid_out = 0;
    if (!(y->y_flags & UCX_KEY_F_CMA))
        return HM_SUCCESS;
    if (proto != UCX_PROTO_SHM) {
        *why = "a shared-memory key on tcp";
        return HM_PROTOCOL_ERROR;
    }
    if (peer == NULL || peer->a_pid == 0 || (uint32_t)peer->a_pid != y->y_pid) {
        *why = "its pid is not the peer's";
        return HM_PROTOCOL_ERROR;
    }
    /* Only a process whose exit we would see (or ourselves): see the top. */
    if (peer->a_pidfd >= 0 || peer->a_pid == getpid())
        *pid_out = peer->a_pid;
    return HM_SUCCESS;
}

/* ---- Registration ---------------------------------------------------------- */

hm_return_t hmi_ucx_mem_register(hm_na_class_t *cls, hm_na_mem_t *mem)
{
    struct ucx_class *k = ucx_cls(cls);
    struct ucx_mem *m = hm_na_mem_priv(mem);
    m->m_memh = NULL;
    m->m_rkey_buf = NULL;
    m->m_rkey_len = 0;
    m->m_pid = 0;
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
    if (k->k_cma_keys)
        m->m_pid = getpid();
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
    size_t need = UCX_KEY_HDR + m->m_rkey_len;
    if (buf == NULL || *size < need) {
        *size = need;
        return HM_MSGSIZE;
    }
    struct ucx_key y = {
        .y_flags = m->m_pid != 0 ? UCX_KEY_F_CMA : 0,
        .y_access = mem->m_access & UCX_KEY_ACCESS_ALL,
        .y_pid = (uint32_t)m->m_pid,
        .y_rkey_len = (uint32_t)m->m_rkey_len,
        .y_base = (uint64_t)(uintptr_t)mem->m_base,
        .y_len = (uint64_t)mem->m_len,
    };
    unsigned char *out = buf;
    hmi_ucx_key_encode(&y, out);
    if (m->m_rkey_len > 0)
        memcpy(out + UCX_KEY_HDR, m->m_rkey_buf, m->m_rkey_len);
    *size = need;
    return HM_SUCCESS;
}

hm_return_t hmi_ucx_rkey_unpack(hm_na_context_t *ctx, hm_na_addr_t *peer, const void *key,
                                size_t key_len, void **rkey_out)
{
    struct ucx_class *kc = ucx_cls(ctx->x_class);
    struct ucx_key y;
    pid_t pid;
    const char *why;
    hm_return_t ret = hmi_ucx_key_decode(key, key_len, &y, &why);
    if (ret != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: malformed remote key (%zu bytes) from %s: %s",
                key_len, peer ? peer->a_uri : "?", why);
        return ret;
    }
    ret = hmi_ucx_key_cma_pid(&y, kc->k_proto, peer, &pid, &why);
    if (ret != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR,
                "ucx: remote key of pid %lu from %s (pid %ld) refused: %s",
                (unsigned long)y.y_pid, peer ? peer->a_uri : "?",
                peer ? (long)peer->a_pid : 0l, why);
        return ret;
    }
    if (peer == NULL)
        return HM_INVALID_ARG;
    ucp_ep_h ep = hmi_ucx_addr_rma_ep(peer);
    if (ep == NULL)
        return HM_UNREACHABLE;
    struct ucx_rkey *k = calloc(1, sizeof(*k));
    if (k == NULL)
        return HM_NOMEM;
    k->k_base = y.y_base;
    k->k_len = y.y_len;
    k->k_peer = peer;
    k->k_pid = pid;
    k->k_access = y.y_access;
    if (y.y_rkey_len > 0) {
        /* Unpacked even with CMA: UCX's path is the fallback. */
        ucs_status_t status =
            ucp_ep_rkey_unpack(ep, (const unsigned char *)key + UCX_KEY_HDR, &k->k_rkey);
        if (status != UCS_OK) {
            hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: remote key from %s: %s", peer->a_uri,
                    ucs_status_string(status));
            free(k);
            return HM_PROTOCOL_ERROR;
        }
    }
    if ((y.y_flags & UCX_KEY_F_CMA) && pid == 0)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG,
                "ucx: %s: its pid is not watched, RMA with it goes through UCX", peer->a_uri);
    *rkey_out = k;
    return HM_SUCCESS;
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

/* ---- CMA (shm) -------------------------------------------------------------- */

/* Why the kernel may refuse CMA here, for the one warning. */
static const char *ucx_cma_hint(int err, char *buf, size_t size)
{
    if (err == ENOSYS)
        return "the kernel has no cross-memory attach";
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
    int scope = -1;
    if (f != NULL) {
        if (fscanf(f, "%d", &scope) != 1)
            scope = -1;
        fclose(f);
    }
    if (scope > 0)
        snprintf(buf, size, "kernel.yama.ptrace_scope is %d", scope);
    else
        snprintf(buf, size, "ptrace access to the peer denied (another user, or a "
                            "seccomp profile)");
    return buf;
}

/* The kernel refused CMA (EPERM, ENOSYS): UCX's path from now on, said once. */
static void ucx_cma_disable(struct ucx_class *k, const hm_na_addr_t *peer, int err)
{
    if (atomic_exchange(&k->k_cma_off, true))
        return; /* another context said it already */
    char hint[96];
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN,
            "ucx+shm: process_vm_readv/writev with %s refused (%s: %s); RMA goes through "
            "UCX from now on (emulated: it needs the peer's progress)",
            peer->a_uri, strerror(err), ucx_cma_hint(err, hint, sizeof(hint)));
}

/*
 * Copy `len` bytes between `local` and `raddr` in process `pid`: one
 * process_vm_readv (get) or process_vm_writev (put), again from where it
 * stopped after a partial transfer. 0, or the errno of the call that failed
 * (EFAULT for a call that moved nothing without an error).
 */
static int ucx_cma_copy(pid_t pid, bool get, void *local, uint64_t raddr, size_t len)
{
    size_t done = 0;
    while (done < len) {
        struct iovec l = {.iov_base = (char *)local + done, .iov_len = len - done};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(raddr + done), .iov_len = len - done};
        ssize_t n = get ? process_vm_readv(pid, &l, 1, &r, 1, 0)
                        : process_vm_writev(pid, &l, 1, &r, 1, 0);
        if (hmi_likely(n > 0)) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        return n < 0 ? errno : EFAULT;
    }
    return 0;
}

/*
 * Move op `p` (one piece, checked) with CMA; the next progress completes it
 * (see "RMA over shm" in ucx_internal.h for why not at once). HM_AGAIN,
 * with the op untouched, when the kernel refused CMA: the caller takes
 * UCX's path. Otherwise HM_SUCCESS, the op queued with its status.
 */
static hm_return_t ucx_rma_cma(struct ucx_ctx *c, hm_na_op_t *op)
{
    struct ucx_op *p = ucx_op(op);
    struct ucx_rkey *k = p->p_rkey;
    bool get = p->p_kind == UCX_OP_GET;
    int err = ucx_cma_copy(k->k_pid, get, (void *)(uintptr_t)p->p_buf, p->p_raddr, p->p_len);
    if (hmi_likely(err == 0)) {
        hmi_ucx_op_copied(c, op, HM_SUCCESS);
        return HM_SUCCESS;
    }
    hm_return_t status;
    switch (err) {
    case EPERM:
    case ENOSYS:
        ucx_cma_disable(c->c_cls, p->p_addr, err);
        return HM_AGAIN;
    case ESRCH: /* gone: progress drains and reports it once its pidfd fires */
        (void)hmi_ucx_addr_exited(p->p_addr);
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "ucx: %s of %zu bytes with %s: process gone",
                get ? "get" : "put", p->p_len, p->p_addr->a_uri);
        status = HM_UNREACHABLE;
        break;
    case EFAULT:
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR,
                "ucx: %s of %zu bytes at 0x%llx in %s (pid %ld): not mapped there (or "
                "here, at %p)",
                get ? "get" : "put", p->p_len, (unsigned long long)p->p_raddr,
                p->p_addr->a_uri, (long)k->k_pid, (const void *)p->p_buf);
        status = HM_PROTOCOL_ERROR;
        break;
    default:
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: %s of %zu bytes with %s (pid %ld): %s",
                get ? "process_vm_readv" : "process_vm_writev", p->p_len, p->p_addr->a_uri,
                (long)k->k_pid, strerror(err));
        status = err == ENOMEM ? HM_NOMEM : HM_PROTOCOL_ERROR;
        break;
    }
    hmi_ucx_op_copied(c, op, status);
    return HM_SUCCESS;
}

/* ---- UCX's path and the rma slot ---------------------------------------------- */

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
    unsigned int need = dir == HM_NA_RMA_PUT ? HM_NA_ACCESS_WRITE : HM_NA_ACCESS_READ;
    if (k == NULL || peer == NULL || peer->a_ctx != c || k->k_peer != peer ||
        remote_off > k->k_len || len > k->k_len - remote_off || !(k->k_access & need)) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR,
                "ucx: %s of %zu bytes at %zu refused: no key or peer, a peer of another "
                "context or key, outside the remote region (%llu bytes), or not granted "
                "(access 0x%x)",
                dir == HM_NA_RMA_PUT ? "put" : "get", len, remote_off,
                k ? (unsigned long long)k->k_len : 0ull, k ? k->k_access : 0u);
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
    p->p_copied = false;
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
    /* The peer is alive as of the pidfd check above: CMA may reach it. */
    if (k->k_pid != 0 && !atomic_load_explicit(&c->c_cls->k_cma_off, memory_order_relaxed) &&
        ucx_rma_cma(c, op) == HM_SUCCESS)
        return HM_SUCCESS;
    return hmi_ucx_rma_post(c, op);
}
