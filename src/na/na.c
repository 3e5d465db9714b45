/*
 * NA dispatch: finds a plugin by URI scheme, allocates every NA object with
 * the plugin's private state, keeps op state honest (each post completes
 * once) and runs op callbacks after plugin progress.
 */
#include "na/na.h"
#include "na/na_rma.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/compiler.h"
#include "util/log.h"

/* Private state follows the public struct, aligned for any type. */
#define NA_PRIV_ALIGN 16u

static size_t na_align(size_t n)
{
    return (n + NA_PRIV_ALIGN - 1) & ~(size_t)(NA_PRIV_ALIGN - 1);
}

/* Allocate `pub` bytes then `priv` bytes, zeroed; *priv_out points at the latter. */
static void *na_alloc_with_priv(size_t pub, size_t priv, void **priv_out)
{
    size_t head = na_align(pub);
    char *mem = aligned_alloc(NA_PRIV_ALIGN, na_align(head + priv));
    if (mem == NULL)
        return NULL;
    memset(mem, 0, head + priv);
    *priv_out = priv ? mem + head : NULL;
    return mem;
}

/* The slots every plugin must fill; checked once when a class opens. */
static bool na_ops_complete(const struct hmi_na_ops *ops)
{
    return ops->name && ops->protocols && ops->class_open && ops->class_close &&
           ops->context_open && ops->context_close && ops->addr_lookup && ops->addr_self &&
           ops->addr_to_string && ops->addr_ref && ops->addr_unref && ops->msg_buf_alloc &&
           ops->msg_buf_free && ops->msg_send && ops->msg_release && ops->progress &&
           ops->poll_fd && ops->poll_arm && ops->cancel &&
           (ops->nap_arm != NULL) == (ops->nap != NULL) &&
           (ops->nap != NULL) == (ops->nap_wake != NULL);
}

/* The memory slots a class with native RMA needs. */
static bool na_ops_native_rma(const struct hmi_na_ops *ops)
{
    return ops->mem_register && ops->mem_deregister && ops->mem_key_pack &&
           ops->rkey_unpack && ops->rkey_release && ops->rma;
}

/* After class_open: native RMA has its slots, owner-checked RMA its key table. */
static hm_return_t na_class_rma_init(hmi_na_class_t *cls)
{
    if (cls->c_rma_kind == HM_NA_RMA_NATIVE) {
        if (na_ops_native_rma(&cls->c_ops))
            return HM_SUCCESS;
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "%s: native RMA without the memory slots",
                cls->c_protocol);
        return HM_FAULT;
    }
    cls->c_rma_iov_limit = HM_NA_RMA_IOV_MAX; /* the engines take any count */
    if (cls->c_cma && !hmi_cma_enabled()) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_INFO, "%s: HM_CMA=0: RMA over messages only",
                cls->c_protocol);
        cls->c_cma = false; /* our keys do not offer it either */
    }
    return hmi_keytab_acquire();
}

static bool na_has_protocol(const struct hmi_na_ops *ops, const char *proto, size_t len)
{
    for (const char *const *p = ops->protocols; *p; p++)
        if (strlen(*p) == len && memcmp(*p, proto, len) == 0)
            return true;
    return false;
}

/* Split "ucx+tcp://rest" into plugin, protocol and rest; find the plugin. */
static hm_return_t na_parse_uri(const char *uri, const struct hmi_na_ops **ops_out,
                                const char **proto_out, size_t *proto_len_out,
                                const char **rest_out)
{
    const char *plus = strchr(uri, '+');
    const char *sep = strstr(uri, "://");
    if (plus == NULL || sep == NULL || plus > sep) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR,
                "malformed URI \"%s\" (expected plugin+protocol://address)", uri);
        return HM_INVALID_ARG;
    }
    size_t name_len = (size_t)(plus - uri);
    for (const struct hmi_na_ops *const *p = hmi_na_plugins; *p; p++) {
        if (strlen((*p)->name) != name_len || memcmp((*p)->name, uri, name_len) != 0)
            continue;
        *ops_out = *p;
        *proto_out = plus + 1;
        *proto_len_out = (size_t)(sep - plus - 1);
        *rest_out = sep + 3;
        return HM_SUCCESS;
    }
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "plugin \"%.*s\" of URI \"%s\" is not built in",
            (int)name_len, uri, uri);
    return HM_NOT_SUPPORTED;
}

hm_return_t hmi_na_class_open(const char *uri, hmi_na_class_t **cls_out)
{
    const struct hmi_na_ops *ops;
    const char *proto, *rest;
    size_t proto_len;
    hm_return_t ret = na_parse_uri(uri, &ops, &proto, &proto_len, &rest);
    if (ret != HM_SUCCESS)
        return ret;
    if (!na_ops_complete(ops)) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "plugin %s lacks mandatory ops", ops->name);
        return HM_FAULT;
    }
    if (!na_has_protocol(ops, proto, proto_len)) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "%s: no protocol \"%.*s\"", ops->name,
                (int)proto_len, proto);
        return HM_NOT_SUPPORTED;
    }
    void *priv;
    hmi_na_class_t *cls = na_alloc_with_priv(sizeof(*cls), ops->class_size, &priv);
    if (cls == NULL)
        return HM_NOMEM;
    cls->c_ops = *ops;
    cls->c_priv = priv;
    snprintf(cls->c_protocol, sizeof(cls->c_protocol), "%s+%.*s", ops->name,
             (int)proto_len, proto);
    char proto_z[32];
    snprintf(proto_z, sizeof(proto_z), "%.*s", (int)proto_len, proto);
    ret = ops->class_open(cls, proto_z, rest);
    if (ret != HM_SUCCESS) {
        free(cls);
        return ret;
    }
    ret = na_class_rma_init(cls);
    if (ret != HM_SUCCESS) {
        ops->class_close(cls);
        free(cls);
        return ret;
    }
    if (cls->c_rma_iov_limit == 0)
        cls->c_rma_iov_limit = 1;
    if (cls->c_rma_iov_limit > HM_NA_RMA_IOV_MAX)
        cls->c_rma_iov_limit = HM_NA_RMA_IOV_MAX;
    *cls_out = cls;
    return HM_SUCCESS;
}

hm_return_t hmi_na_class_close(hmi_na_class_t *cls)
{
    if (cls->c_nctx != 0) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "%s: class closed with %u contexts open",
                cls->c_protocol, cls->c_nctx);
        return HM_BUSY;
    }
    cls->c_ops.class_close(cls);
    if (cls->c_rma_kind == HM_NA_RMA_OWNER_CHECKED)
        hmi_keytab_release();
    free(cls);
    return HM_SUCCESS;
}

hm_return_t hmi_na_context_open(hmi_na_class_t *cls, unsigned int index,
                               hmi_na_recv_cb_t recv_cb, void *recv_arg,
                               hmi_na_fail_cb_t fail_cb, void *fail_arg,
                               hmi_na_context_t **ctx_out)
{
    return hmi_na_context_open_on(cls, index, NULL, recv_cb, recv_arg, fail_cb, fail_arg,
                                 ctx_out);
}

hm_return_t hmi_na_context_open_on(hmi_na_class_t *cls, unsigned int index,
                                  const struct hmi_na_context_hints *hints,
                                  hmi_na_recv_cb_t recv_cb, void *recv_arg,
                                  hmi_na_fail_cb_t fail_cb, void *fail_arg,
                                  hmi_na_context_t **ctx_out)
{
    void *priv;
    hmi_na_context_t *ctx = na_alloc_with_priv(sizeof(*ctx), cls->c_ops.context_size, &priv);
    if (ctx == NULL)
        return HM_NOMEM;
    ctx->x_class = cls;
    ctx->x_index = index;
    ctx->x_device = hints ? hints->device : NULL;
    ctx->x_never_sleeps = hints && hints->never_sleeps;
    ctx->x_contact_spin_ns = hints ? hints->contact_spin_ns : 0;
    ctx->x_recv_cb = recv_cb;
    ctx->x_recv_arg = recv_arg;
    ctx->x_fail_cb = fail_cb;
    ctx->x_fail_arg = fail_arg;
    ctx->x_priv = priv;
    hmi_list_init(&ctx->x_done);
    hmi_list_init(&ctx->x_deferred);
    hm_return_t ret = cls->c_ops.context_open(ctx);
    ctx->x_device = NULL; /* the caller's string */
    if (ret != HM_SUCCESS) {
        free(ctx);
        return ret;
    }
    if (cls->c_rma_kind == HM_NA_RMA_OWNER_CHECKED) {
        ret = hmi_swrma_context_init(ctx);
        if (ret != HM_SUCCESS) {
            cls->c_ops.context_close(ctx);
            free(ctx);
            return ret;
        }
    }
    cls->c_nctx++;
    *ctx_out = ctx;
    return HM_SUCCESS;
}

/* Run the callbacks of completed ops. Callbacks may post again. */
static int na_dispatch(hmi_na_context_t *ctx)
{
    int count = 0;
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&ctx->x_done)) != NULL) {
        hmi_na_op_t *op = hmi_container_of(link, hmi_na_op_t, o_link);
        op->o_state = HM_NA_OP_IDLE;
        op->o_cb(op, op->o_status);
        count++;
    }
    return count;
}

int hmi_na_context_drain(hmi_na_context_t *ctx)
{
    hmi_list_splice_back(&ctx->x_done, &ctx->x_deferred);
    return na_dispatch(ctx);
}

void hmi_na_context_close(hmi_na_context_t *ctx)
{
    hmi_na_class_t *cls = ctx->x_class;
    if (ctx->x_rma != NULL)
        hmi_swrma_context_stop(ctx); /* releases peers while the plugin context lives */
    ctx->x_closing = true;
    cls->c_ops.context_close(ctx);
    if (cls->c_rma_kind == HM_NA_RMA_OWNER_CHECKED)
        hmi_swrma_context_fini(ctx);
    hmi_cma_context_fini(ctx);
    hmi_na_context_drain(ctx);
    cls->c_nctx--;
    free(ctx);
}

hmi_na_op_t *hmi_na_op_create(hmi_na_class_t *cls)
{
    void *priv;
    hmi_na_op_t *op = na_alloc_with_priv(sizeof(*op), cls->c_ops.op_size, &priv);
    if (op == NULL)
        return NULL;
    op->o_priv = priv;
    hmi_list_init(&op->o_link);
    return op;
}

void hmi_na_op_destroy(hmi_na_op_t *op)
{
    if (op == NULL)
        return;
    hmi_swrma_op_free(op);
    free(op);
}

/* Owner-checked: a region that grants peers any access goes into the key table. */
static hm_return_t na_mem_expose(hmi_na_mem_t *mem)
{
    if ((mem->m_access & (HM_NA_ACCESS_READ | HM_NA_ACCESS_WRITE)) == 0)
        return HM_SUCCESS; /* local only: no key */
    hm_return_t ret =
        hmi_keytab_add(mem->m_base, mem->m_len, mem->m_access, &mem->m_slot, &mem->m_key);
    mem->m_exposed = ret == HM_SUCCESS;
    return ret;
}

hm_return_t hmi_na_mem_register(hmi_na_class_t *cls, void *base, size_t len,
                               unsigned int access, hmi_na_mem_t **mem_out)
{
    void *priv;
    hmi_na_mem_t *mem = na_alloc_with_priv(sizeof(*mem), cls->c_ops.mem_size, &priv);
    if (mem == NULL)
        return HM_NOMEM;
    mem->m_class = cls;
    mem->m_base = base;
    mem->m_len = len;
    mem->m_access = access;
    mem->m_priv = priv;
    hm_return_t ret = cls->c_rma_kind == HM_NA_RMA_NATIVE ? cls->c_ops.mem_register(cls, mem)
                                                          : na_mem_expose(mem);
    if (ret != HM_SUCCESS) {
        free(mem);
        return ret;
    }
    *mem_out = mem;
    return HM_SUCCESS;
}

void hmi_na_mem_deregister(hmi_na_mem_t *mem)
{
    hmi_na_class_t *cls = mem->m_class;
    if (cls->c_rma_kind == HM_NA_RMA_NATIVE)
        cls->c_ops.mem_deregister(cls, mem);
    else if (mem->m_exposed)
        hmi_keytab_remove(mem->m_slot);
    free(mem);
}

hm_return_t hmi_na_mem_key_pack(hmi_na_mem_t *mem, void *buf, size_t *size)
{
    hmi_na_class_t *cls = mem->m_class;
    if (cls->c_rma_kind == HM_NA_RMA_NATIVE)
        return cls->c_ops.mem_key_pack(cls, mem, buf, size);
    if (!mem->m_exposed)
        return HM_INVALID_ARG; /* grants no access: nothing for a peer to hold */
    bool fits = buf != NULL && *size >= HMI_NA_KEY_SIZE;
    *size = HMI_NA_KEY_SIZE;
    if (!fits)
        return HM_MSGSIZE;
    hmi_na_key_encode(mem, cls->c_cma, buf);
    return HM_SUCCESS;
}

hm_return_t hmi_na_rkey_unpack(hmi_na_context_t *ctx, hmi_na_addr_t *peer, const void *key,
                              size_t key_len, void **rkey_out)
{
    hmi_na_class_t *cls = ctx->x_class;
    struct hmi_na_rkey *k = calloc(1, sizeof(*k));
    if (k == NULL)
        return HM_NOMEM;
    k->k_peer = peer;
    hm_return_t ret;
    const char *why = "";
    if (cls->c_rma_kind == HM_NA_RMA_NATIVE) {
        ret = cls->c_ops.rkey_unpack(ctx, peer, key, key_len, &k->k_native);
    } else {
        ret = hmi_na_key_decode(key, key_len, k, &why);
        k->k_peer = peer;
        k->k_cma = k->k_cma && cls->c_cma; /* CMA only between processes of one host */
        if (ret != HM_SUCCESS)
            hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "%s: malformed remote key (%zu bytes): %s",
                    cls->c_protocol, key_len, why);
    }
    if (ret != HM_SUCCESS) {
        free(k);
        return ret;
    }
    *rkey_out = k;
    return HM_SUCCESS;
}

void hmi_na_rkey_release(hmi_na_context_t *ctx, void *rkey)
{
    struct hmi_na_rkey *k = rkey;
    if (k == NULL)
        return;
    if (k->k_native != NULL)
        ctx->x_class->c_ops.rkey_release(ctx, k->k_native);
    free(k);
}

int hmi_na_progress(hmi_na_context_t *ctx)
{
    /* Ops completed since the last call (e.g. sends that left inside their
     * post, copies made at their post) are dispatched first, so their
     * buffers and handles are back in the pools before the transport
     * delivers new work. */
    hmi_list_splice_back(&ctx->x_done, &ctx->x_deferred);
    int events = na_dispatch(ctx);
    events += ctx->x_class->c_ops.progress(ctx);
    if (ctx->x_rma != NULL)
        events += hmi_swrma_progress(ctx);
    return events + na_dispatch(ctx);
}

int hmi_na_poll_fd(hmi_na_context_t *ctx)
{
    return ctx->x_class->c_ops.poll_fd(ctx);
}

/* Work the NA layer itself holds: completions to run, owner-checked RMA to serve. */
static bool na_work_queued(hmi_na_context_t *ctx)
{
    return !hmi_list_empty(&ctx->x_deferred) || !hmi_list_empty(&ctx->x_done) ||
           (ctx->x_rma != NULL && hmi_swrma_pending(ctx));
}

hm_return_t hmi_na_poll_arm(hmi_na_context_t *ctx)
{
    if (na_work_queued(ctx))
        return HM_AGAIN;
    return ctx->x_class->c_ops.poll_arm(ctx);
}

hm_return_t hmi_na_nap_arm(hmi_na_context_t *ctx)
{
    if (ctx->x_class->c_ops.nap_arm == NULL)
        return HM_NOT_SUPPORTED;
    if (na_work_queued(ctx))
        return HM_AGAIN;
    return ctx->x_class->c_ops.nap_arm(ctx);
}

bool hmi_na_nap(hmi_na_context_t *ctx, int ms)
{
    return ctx->x_class->c_ops.nap(ctx, ms);
}

void hmi_na_nap_wake(hmi_na_context_t *ctx)
{
    if (ctx->x_class->c_ops.nap_wake != NULL)
        ctx->x_class->c_ops.nap_wake(ctx);
}

void hmi_na_deliver(hmi_na_context_t *ctx, hmi_na_addr_t *source, void *buf, size_t len,
                   uintptr_t token)
{
    uint32_t magic = 0;
    if (len >= sizeof(magic))
        memcpy(&magic, buf, sizeof(magic));
    if (hmi_unlikely(magic == HMI_SWRMA_MAGIC) && ctx->x_rma != NULL) {
        hmi_swrma_recv(ctx, source, buf, len, token);
        return;
    }
    ctx->x_recv_cb(ctx->x_recv_arg, source, buf, len, token);
}

void hmi_na_peer_failed(hmi_na_context_t *ctx, hmi_na_addr_t *peer)
{
    if (ctx->x_rma != NULL)
        hmi_swrma_peer_failed(ctx, peer);
    if (ctx->x_fail_cb)
        ctx->x_fail_cb(ctx->x_fail_arg, peer);
}

void hmi_na_peer_expect(hmi_na_context_t *ctx, hmi_na_addr_t *peer)
{
    if (ctx->x_class->c_ops.peer_expect != NULL)
        ctx->x_class->c_ops.peer_expect(ctx, peer);
}

bool hmi_na_peer_drop(hmi_na_context_t *ctx, hmi_na_addr_t *peer, const char *why)
{
    return ctx->x_class->c_ops.peer_drop != NULL &&
           ctx->x_class->c_ops.peer_drop(ctx, peer, why);
}

uint64_t hmi_na_wake_ns(hmi_na_context_t *ctx)
{
    return ctx->x_rma != NULL ? hmi_swrma_wake_ns(ctx) : UINT64_MAX;
}

/* Queue a posted op's completion on `list` (x_done or x_deferred), once. */
static void na_op_queue(hmi_na_op_t *op, hm_return_t status, struct hmi_list *list)
{
    if (hmi_unlikely(op->o_state != HM_NA_OP_POSTED)) {
        if (op->o_ctx != NULL)
            op->o_ctx->x_ops_twice++;
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "op %p completed twice (state %u), ignored",
                (void *)op, op->o_state);
        return;
    }
    op->o_state = HM_NA_OP_COMPLETED;
    op->o_status = status;
    hmi_list_push_back(list, &op->o_link);
}

void hmi_na_op_complete_deferred(hmi_na_op_t *op, hm_return_t status)
{
    na_op_queue(op, status, &op->o_ctx->x_deferred);
}

void hmi_na_op_complete(hmi_na_op_t *op, hm_return_t status)
{
    na_op_queue(op, status, &op->o_ctx->x_done);
}

/* Mark `op` posted on `ctx`; refuse an op that is still in flight. */
static hm_return_t na_op_begin(hmi_na_context_t *ctx, hmi_na_op_t *op)
{
    if (hmi_unlikely(op->o_state != HM_NA_OP_IDLE || op->o_cb == NULL))
        return HM_BUSY;
    if (hmi_unlikely(ctx->x_closing))
        return HM_CANCELED; /* see x_closing: `dest` may be freed already */
    op->o_ctx = ctx;
    op->o_engine = HMI_NA_ENGINE_NONE;
    op->o_state = HM_NA_OP_POSTED;
    return HM_SUCCESS;
}

/* A post failed: the op never completes, so it is idle again. */
static hm_return_t na_op_end(hmi_na_op_t *op, hm_return_t ret)
{
    if (ret != HM_SUCCESS && op->o_state == HM_NA_OP_POSTED)
        op->o_state = HM_NA_OP_IDLE;
    return ret;
}

hm_return_t hmi_na_msg_send(hmi_na_context_t *ctx, hmi_na_addr_t *dest, const void *buf,
                           size_t len, void *desc, hmi_na_op_t *op)
{
    if (hmi_unlikely(len > ctx->x_class->c_eager_limit))
        return HM_MSGSIZE;
    hm_return_t ret = na_op_begin(ctx, op);
    if (ret != HM_SUCCESS)
        return ret;
    return na_op_end(op, ctx->x_class->c_ops.msg_send(ctx, dest, buf, len, desc, op));
}

/* Every piece names a local region and a key, its local range inside the region. */
static bool na_rma_pieces_ok(const struct hmi_na_rma_piece *pieces, unsigned int count)
{
    for (unsigned int i = 0; i < count; i++) {
        const struct hmi_na_rma_piece *pc = &pieces[i];
        if (pc->rp_local == NULL || pc->rp_rkey == NULL ||
            pc->rp_local_off > pc->rp_local->m_len ||
            pc->rp_len > pc->rp_local->m_len - pc->rp_local_off)
            return false;
    }
    return true;
}

/*
 * Owner-checked pieces: every key came from `peer` (a descriptor reaches
 * only the memory of the peer that sent it), and the remote range and the
 * access fit what the key says. The owner checks again; this refuses early
 * what cannot succeed: HM_INVALID_ARG for a range outside the key, as the
 * rma slot's contract says for every class, HM_PERMISSION for an access the
 * key does not grant. Sets *all_cma when every key offers CMA.
 */
static hm_return_t na_rma_keys_ok(enum hmi_na_rma_dir dir, hmi_na_addr_t *peer,
                                  const struct hmi_na_rma_piece *pieces, unsigned int count,
                                  bool *all_cma)
{
    unsigned int need = dir == HM_NA_RMA_PUT ? HM_NA_ACCESS_WRITE : HM_NA_ACCESS_READ;
    bool cma = true;
    for (unsigned int i = 0; i < count; i++) {
        const struct hmi_na_rkey *k = pieces[i].rp_rkey;
        if (k->k_peer != peer)
            return HM_INVALID_ARG;
        if (pieces[i].rp_remote_off > k->k_len ||
            pieces[i].rp_len > k->k_len - pieces[i].rp_remote_off)
            return HM_INVALID_ARG; /* past what the key itself says (na.h) */
        if (!(k->k_access & need))
            return HM_PERMISSION;
        cma = cma && k->k_cma;
    }
    *all_cma = cma;
    return HM_SUCCESS;
}

/* Native RMA: the same pieces with the plugin's own key handles. */
static hm_return_t na_rma_native(hmi_na_context_t *ctx, hmi_na_op_t *op, enum hmi_na_rma_dir dir,
                                 hmi_na_addr_t *peer, const struct hmi_na_rma_piece *pieces,
                                 unsigned int count)
{
    struct hmi_na_rma_piece native[HM_NA_RMA_IOV_MAX];
    for (unsigned int i = 0; i < count; i++) {
        native[i] = pieces[i];
        native[i].rp_rkey = ((const struct hmi_na_rkey *)pieces[i].rp_rkey)->k_native;
    }
    op->o_engine = HMI_NA_ENGINE_PLUGIN;
    return ctx->x_class->c_ops.rma(ctx, op, dir, peer, native, count);
}

/* The bytes an op moves (each piece's length was checked against its region). */
static size_t na_rma_bytes(const struct hmi_na_rma_piece *pieces, unsigned int count)
{
    size_t bytes = 0;
    for (unsigned int i = 0; i < count; i++)
        bytes += pieces[i].rp_len;
    return bytes;
}

/* Owner-checked RMA: CMA where every key offers it, the op is not too small
 * for it (c_cma_min) and it works; else messages. */
static hm_return_t na_rma_owner_checked(hmi_na_context_t *ctx, hmi_na_op_t *op,
                                        enum hmi_na_rma_dir dir, hmi_na_addr_t *peer,
                                        const struct hmi_na_rma_piece *pieces,
                                        unsigned int count)
{
    bool all_cma;
    hm_return_t ret = na_rma_keys_ok(dir, peer, pieces, count, &all_cma);
    if (ret != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR,
                "%s: %s refused before asking the owner: a key from another peer, a range "
                "past the region, or access not granted",
                ctx->x_class->c_protocol, dir == HM_NA_RMA_PUT ? "put" : "get");
        return ret;
    }
    if (all_cma && ctx->x_class->c_cma && na_rma_bytes(pieces, count) >= ctx->x_class->c_cma_min) {
        op->o_engine = HMI_NA_ENGINE_CMA;
        ret = hmi_cma_rma(ctx, op, dir, peer, pieces, count);
        if (ret != HM_AGAIN)
            return ret;
    }
    op->o_engine = HMI_NA_ENGINE_SWRMA;
    return hmi_swrma_rma(ctx, op, dir, peer, pieces, count);
}

hm_return_t hmi_na_rma(hmi_na_context_t *ctx, hmi_na_op_t *op, enum hmi_na_rma_dir dir,
                      hmi_na_addr_t *peer, const struct hmi_na_rma_piece *pieces,
                      unsigned int count)
{
    if (hmi_unlikely(count == 0 || count > ctx->x_class->c_rma_iov_limit || pieces == NULL ||
                     peer == NULL || (dir != HM_NA_RMA_PUT && dir != HM_NA_RMA_GET) ||
                     !na_rma_pieces_ok(pieces, count))) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR,
                "%s: rma refused: %u pieces (limit %u), direction %d, or a piece "
                "without a region or key or outside its local region",
                ctx->x_class->c_protocol, count, ctx->x_class->c_rma_iov_limit, (int)dir);
        return HM_INVALID_ARG;
    }
    hm_return_t ret = na_op_begin(ctx, op);
    if (ret != HM_SUCCESS)
        return ret;
    if (ctx->x_class->c_rma_kind == HM_NA_RMA_NATIVE)
        ret = na_rma_native(ctx, op, dir, peer, pieces, count);
    else
        ret = na_rma_owner_checked(ctx, op, dir, peer, pieces, count);
    return na_op_end(op, ret);
}

hm_return_t hmi_na_cancel(hmi_na_op_t *op)
{
    if (op->o_state != HM_NA_OP_POSTED)
        return HM_NOENTRY;
    switch (op->o_engine) {
    case HMI_NA_ENGINE_SWRMA:
        return hmi_swrma_cancel(op->o_ctx, op);
    case HMI_NA_ENGINE_CMA:
        return HM_NOENTRY; /* moved at its post: its status stands */
    default:
        return op->o_ctx->x_class->c_ops.cancel(op->o_ctx, op);
    }
}
