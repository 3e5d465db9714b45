/*
 * The ofi class: one fi_getinfo per class for the protocol's provider, then
 * its fabric and domain. The memory-registration modes the provider asks for
 * are recorded here and honoured by every registration (ofi_msg.c,
 * ofi_rma.c); none is assumed. The ops table closes the file.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "na/ofi/ofi_internal.h"
#include "util/log.h"

/* MR modes we know how to honour; the provider picks among them. */
#define OFI_MR_MODES_SUPPORTED \
    (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT)

hm_return_t hmi_ofi_status(int fi_err)
{
    switch (fi_err) {
    case 0:
        return HM_SUCCESS;
    case FI_ECANCELED:
        return HM_CANCELED;
    case FI_ENOMEM:
        return HM_NOMEM;
    case FI_EAGAIN:
        return HM_AGAIN;
    case FI_EMSGSIZE:
    case FI_ETOOSMALL:
        return HM_MSGSIZE;
    case FI_ENODATA:
    case FI_ENOSYS:
    case FI_EOPNOTSUPP:
        return HM_NOT_SUPPORTED;
    case FI_EACCES:
    case FI_EPERM:
        return HM_PERMISSION;
    case FI_EINVAL:
        return HM_INVALID_ARG;
    case FI_ETIMEDOUT:
        return HM_TIMEOUT;
    default:
        /* connection refused/reset, host unreachable, I/O error on the wire */
        return HM_UNREACHABLE;
    }
}

hm_return_t hmi_ofi_error(const char *what, const char *detail, int fi_ret)
{
    int err = fi_ret < 0 ? -fi_ret : fi_ret;
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ofi: %s%s%s: %s", what, detail ? " " : "",
            detail ? detail : "", fi_strerror(err));
    return hmi_ofi_status(err);
}

size_t hmi_ofi_inject_size(const hmi_na_class_t *cls)
{
    const struct ofi_class *k = ofi_class(cls);
    return k->k_inject_size > OFI_HDR_SIZE ? k->k_inject_size - OFI_HDR_SIZE : 0;
}

hm_return_t hmi_ofi_mr_reg(struct ofi_class *k, struct ofi_context *x, void *buf, size_t len,
                           uint64_t access, struct fid_mr **mr_out, void **desc_out)
{
    uint64_t key = 0;
    if (!(k->k_mr_mode & FI_MR_PROV_KEY))
        key = atomic_fetch_add(&k->k_next_key, 1);
    struct fid_mr *mr;
    int rc = fi_mr_reg(k->k_domain, buf, len, access, 0, key, 0, &mr, NULL);
    if (rc != 0)
        return hmi_ofi_error("fi_mr_reg", k->k_quirk->q_protocol, rc);
    if (k->k_mr_mode & FI_MR_ENDPOINT) {
        hmi_na_context_t *owner = x ? x->x_na : atomic_load(&k->k_mr_ctx);
        if (owner == NULL) {
            fi_close(&mr->fid);
            hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR,
                    "ofi: FI_MR_ENDPOINT: no context open to bind the region to");
            return HM_NOT_SUPPORTED;
        }
        rc = fi_mr_bind(mr, &ofi_ctx(owner)->x_ep->fid, 0);
        if (rc == 0)
            rc = fi_mr_enable(mr);
        if (rc != 0) {
            fi_close(&mr->fid);
            return hmi_ofi_error("fi_mr_bind/enable", NULL, rc);
        }
    }
    *mr_out = mr;
    *desc_out = fi_mr_desc(mr);
    return HM_SUCCESS;
}

/* The hints for `q`; NULL if out of memory. */
static struct fi_info *plugin_hints(const struct ofi_quirk *q, const struct ofi_class *k,
                                    bool source)
{
    struct fi_info *hints = fi_allocinfo();
    if (hints == NULL)
        return NULL;
    hints->caps = q->q_caps & ~(uint64_t)FI_SOURCE;
    if (source)
        hints->caps |= FI_SOURCE;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->addr_format = q->q_addr_format;
    hints->ep_attr->type = q->q_ep_type;
    hints->domain_attr->mr_mode = OFI_MR_MODES_SUPPORTED;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->domain_attr->control_progress = FI_PROGRESS_AUTO;
    hints->fabric_attr->prov_name = strdup(q->q_provider);
    if (hints->fabric_attr->prov_name == NULL)
        goto err;
    if (k->k_listen_set) {
        hints->src_addr = malloc(k->k_listen.n_len);
        if (hints->src_addr == NULL)
            goto err;
        memcpy(hints->src_addr, k->k_listen.n_bytes, k->k_listen.n_len);
        hints->src_addrlen = k->k_listen.n_len;
        if (q->q_addr == OFI_ADDR_SOCKADDR_IN &&
            ((const struct sockaddr *)hints->src_addr)->sa_family == AF_INET6)
            hints->addr_format = FI_SOCKADDR_IN6; /* "[v6]" in the URI */
    }
    return hints;

err:
    fi_freeinfo(hints);
    return NULL;
}

/* fi_getinfo for the protocol, with FI_SOURCE if the quirk asks and it is granted. */
static hm_return_t plugin_getinfo(struct ofi_class *k)
{
    const struct ofi_quirk *q = k->k_quirk;
    int rc = -FI_ENODATA;
    for (int source = q->q_source; source >= 0; source--) {
        struct fi_info *hints = plugin_hints(q, k, source);
        if (hints == NULL)
            return HM_NOMEM;
        rc = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &k->k_info);
        fi_freeinfo(hints);
        if (rc == 0) {
            k->k_source = source && (k->k_info->caps & FI_SOURCE);
            return HM_SUCCESS;
        }
    }
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ofi: cannot open provider \"%s\" for ofi+%s: %s",
            q->q_provider, q->q_protocol, fi_strerror(-rc));
    return HM_NOT_SUPPORTED;
}

/*
 * Pieces per RMA op: what the provider takes on both sides of one
 * fi_readmsg / fi_writemsg (local iovs and remote rma_iovs), capped by the
 * HM_OFI_RMA_IOV tunable (at most OFI_RMA_IOV_MAX, what an op holds).
 */
static unsigned int plugin_rma_iov_limit(const struct fi_info *info)
{
    size_t limit = hmi_ofi_tunable(OFI_TUNE_RMA_IOV);
    if (info->tx_attr->iov_limit < limit)
        limit = info->tx_attr->iov_limit;
    if (info->tx_attr->rma_iov_limit < limit)
        limit = info->tx_attr->rma_iov_limit;
    return limit == 0 ? 1u : (unsigned int)limit;
}

/*
 * Slabs for a fragmenting protocol. One progress call drains the whole
 * command queue of our region: up to rx_attr->size injects of up to
 * k_inject_size bytes (1 MiB with FI_SHM_RX_SIZE 256 x 4 KiB; 4 MiB with
 * shm's own default of 1024). What finds no slab posted becomes an
 * unexpected message, and libfabric 1.17's shm, out of entries for those,
 * leaks one per retry until it stops receiving for good (with 1024 and 8
 * slabs of 512 KiB, na_ofi_eagain_ofi+shm saw every send to it meet
 * -FI_EAGAIN once 8 KiB messages went as fragments). So twice that drain
 * stays posted: it holds one full queue while the slabs of the previous
 * wait to be posted again (8 slabs cover it at 256).
 */
static size_t plugin_frag_slabs(const struct fi_info *info, const struct ofi_class *k)
{
    size_t drain = info->rx_attr->size * k->k_inject_size;
    size_t need = (2 * drain + k->k_slab_size - 1) / k->k_slab_size;
    if (need > 4096)
        need = 4096;
    return k->k_nslabs > need ? k->k_nslabs : need;
}

/* Check what fi_getinfo granted and derive the class's limits from it. */
static hm_return_t plugin_check_info(hmi_na_class_t *cls, struct ofi_class *k)
{
    const struct fi_info *info = k->k_info;
    k->k_mr_mode = info->domain_attr->mr_mode;
    if ((k->k_mr_mode & ~(uint64_t)OFI_MR_MODES_SUPPORTED) ||
        info->domain_attr->mr_key_size > sizeof(uint64_t)) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR,
                "ofi: provider \"%s\" needs MR mode 0x%llx / %zu-byte keys, not supported",
                k->k_quirk->q_provider, (unsigned long long)k->k_mr_mode,
                info->domain_attr->mr_key_size);
        return HM_NOT_SUPPORTED;
    }
    k->k_inject_size = info->tx_attr->inject_size;
    cls->c_inject_limit = hmi_ofi_inject_size(cls);
    cls->c_mem_pins = k->k_quirk->q_mem_pins;
    cls->c_rma_kind = k->k_quirk->q_rma_native ? HM_NA_RMA_NATIVE : HM_NA_RMA_OWNER_CHECKED;
    cls->c_cma = strcmp(k->k_quirk->q_protocol, "shm") == 0;
    cls->c_cma_min = hmi_ofi_tunable(OFI_TUNE_CMA_MIN);
    cls->c_trusted_only = k->k_quirk->q_trusted_only;
    k->k_max_msg = info->ep_attr->max_msg_size;
    if (k->k_max_msg == 0 || k->k_max_msg > ((size_t)1 << 30))
        k->k_max_msg = (size_t)1 << 30;
    k->k_rma_flags = info->tx_attr->op_flags | FI_COMPLETION;
    cls->c_rma_iov_limit = plugin_rma_iov_limit(info);
    k->k_multi_recv = k->k_quirk->q_multi_recv && (info->caps & FI_MULTI_RECV);
    k->k_frag = k->k_quirk->q_inject_only &&
                k->k_inject_size >= OFI_HDR_SIZE + 8 + OFI_NAME_MAX + OFI_FRAG_HDR_SIZE + 8;
    size_t eager = hmi_ofi_tunable(OFI_TUNE_EAGER_LIMIT);
    cls->c_eager_limit = eager;
    k->k_min_multi_recv = ofi_round8(eager) + OFI_BUF_ROOM;
    k->k_slab_size = k->k_min_multi_recv;
    k->k_nslabs = hmi_ofi_tunable(OFI_TUNE_SLABS);
    if (k->k_multi_recv) {
        size_t want = hmi_ofi_tunable(OFI_TUNE_SLAB_SIZE);
        k->k_slab_size = want > 4 * k->k_min_multi_recv ? want : 4 * k->k_min_multi_recv;
    } else if (k->k_nslabs < 256) {
        /* One message per buffer, and a request the core admits stays in its
         * buffer until its handler frees it: keep well more posted than the
         * requests a context typically holds, or it cannot even receive the
         * answers that would let them go (64 deadlocked hostile_flood). */
        k->k_nslabs = 256;
    }
    k->k_slab_size = ofi_round8(k->k_slab_size);
    if (k->k_frag && k->k_multi_recv)
        k->k_nslabs = plugin_frag_slabs(info, k);
    k->k_probe_ns = (uint64_t)hmi_ofi_tunable(OFI_TUNE_PROBE_MS) * 1000000u;
    k->k_stuck_ns = (uint64_t)hmi_ofi_tunable(OFI_TUNE_STUCK_MS) * 1000000u;
    k->k_lock_ns = (uint64_t)hmi_ofi_tunable(OFI_TUNE_SHM_LOCK_MS) * 1000000u;
    k->k_peers_max = hmi_ofi_tunable(OFI_TUNE_PEERS);
    return HM_SUCCESS;
}

/* True when `name` is among the domains k_devices lists already. */
static bool plugin_has_device(const struct ofi_class *k, const char *name)
{
    for (size_t i = 0; i < k->k_ndevices; i++) {
        if (strcmp(k->k_devices[i], name) == 0)
            return true;
    }
    return false;
}

/*
 * The devices of the class: the distinct domain names fi_getinfo offered for
 * the provider and listen address ("eth0" and "lo" for tcp without an
 * address, "mlx5_0"... for verbs), the class's own domain first.
 */
static void plugin_collect_devices(struct ofi_class *k)
{
    k->k_ndevices = 0;
    for (const struct fi_info *i = k->k_info; i != NULL; i = i->next) {
        const char *name = i->domain_attr != NULL ? i->domain_attr->name : NULL;
        if (k->k_ndevices == OFI_DEVICES_MAX)
            break;
        if (name != NULL && !plugin_has_device(k, name))
            k->k_devices[k->k_ndevices++] = name;
    }
}

/*
 * devices slot: only the class's own domain for now. Memory and message
 * buffers are registered once per class, on that domain, so a context on
 * another domain could not use them; offering the others would let the core
 * report a device the context does not use. Registering per domain would
 * lift this (ARCHITECTURE, known limits).
 */
static size_t ofi_devices(hmi_na_class_t *cls, const char **names, size_t max)
{
    const struct ofi_class *k = ofi_class(cls);
    if (k->k_ndevices == 0 || max == 0)
        return 0;
    names[0] = k->k_devices[0];
    return 1;
}

static hm_return_t ofi_class_open(hmi_na_class_t *cls, const char *protocol, const char *listen)
{
    struct ofi_class *k = ofi_class(cls);
    k->k_quirk = hmi_ofi_quirk_find(protocol);
    if (k->k_quirk == NULL)
        return HM_NOT_SUPPORTED;
    hmi_ofi_provider_env();
    atomic_init(&k->k_next_key, 1);
    atomic_init(&k->k_mr_ctx, NULL);
    if (hmi_ofi_listen_parse(k->k_quirk->q_addr, listen, &k->k_listen, &k->k_listen_set) !=
        HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ofi+%s: bad listen address \"%s\"", protocol,
                listen);
        return HM_INVALID_ARG;
    }
    if (k->k_quirk->q_addr == OFI_ADDR_SHM)
        hmi_ofi_sweep_shm();
    hm_return_t ret = plugin_getinfo(k);
    if (ret != HM_SUCCESS)
        return ret;
    ret = plugin_check_info(cls, k);
    if (ret != HM_SUCCESS)
        goto err_info;
    plugin_collect_devices(k);
    int rc = fi_fabric(k->k_info->fabric_attr, &k->k_fabric, NULL);
    if (rc != 0) {
        ret = hmi_ofi_error("fi_fabric", k->k_quirk->q_provider, rc);
        goto err_info;
    }
    rc = fi_domain(k->k_fabric, k->k_info, &k->k_domain, NULL);
    if (rc != 0) {
        ret = hmi_ofi_error("fi_domain", k->k_quirk->q_provider, rc);
        goto err_fabric;
    }
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_INFO,
            "ofi: %s on \"%s\": eager %zu, inject %zu, mr_mode 0x%llx, source %d, "
            "multi_recv %d, fragments %d, rma iovs %u",
            cls->c_protocol, k->k_info->fabric_attr->prov_name, cls->c_eager_limit,
            k->k_inject_size, (unsigned long long)k->k_mr_mode, k->k_source,
            k->k_multi_recv, k->k_frag, cls->c_rma_iov_limit);
    return HM_SUCCESS;

err_fabric:
    fi_close(&k->k_fabric->fid);
err_info:
    fi_freeinfo(k->k_info);
    return ret == HM_SUCCESS ? HM_NOT_SUPPORTED : ret;
}

static void ofi_class_close(hmi_na_class_t *cls)
{
    struct ofi_class *k = ofi_class(cls);
    fi_close(&k->k_domain->fid);
    fi_close(&k->k_fabric->fid);
    fi_freeinfo(k->k_info);
}

static const char *const ofi_protocols[] = {"tcp", "shm", "verbs", NULL};

const struct hmi_na_ops hmi_na_ofi_ops = {
    .name = "ofi",
    .protocols = ofi_protocols,
    .class_size = sizeof(struct ofi_class),
    .context_size = sizeof(struct ofi_context),
    .op_size = sizeof(struct ofi_op),
    .mem_size = sizeof(struct ofi_mem),
    .tunables = hmi_ofi_tunables,
    .ntunables = OFI_TUNE_COUNT,
    .class_open = ofi_class_open,
    .class_close = ofi_class_close,
    .devices = ofi_devices,
    .context_open = hmi_ofi_context_open,
    .context_close = hmi_ofi_context_close,
    .addr_lookup = hmi_ofi_addr_lookup,
    .addr_self = hmi_ofi_addr_self,
    .addr_to_string = hmi_ofi_addr_to_string,
    .addr_ref = hmi_ofi_addr_ref,
    .addr_unref = hmi_ofi_addr_unref,
    .addr_pid = hmi_ofi_addr_pid,
    .peer_expect = hmi_ofi_peer_expect,
    .peer_drop = hmi_ofi_peer_drop,
    .msg_buf_alloc = hmi_ofi_msg_buf_alloc,
    .msg_buf_free = hmi_ofi_msg_buf_free,
    .msg_send = hmi_ofi_msg_send,
    .msg_release = hmi_ofi_msg_release,
    .mem_register = hmi_ofi_mem_register,
    .mem_deregister = hmi_ofi_mem_deregister,
    .mem_key_pack = hmi_ofi_mem_key_pack,
    .rkey_unpack = hmi_ofi_rkey_unpack,
    .rkey_release = hmi_ofi_rkey_release,
    .rma = hmi_ofi_rma,
    .progress = hmi_ofi_progress,
    .poll_fd = hmi_ofi_poll_fd,
    .poll_arm = hmi_ofi_poll_arm,
    .nap_arm = hmi_ofi_nap_arm,
    .nap = hmi_ofi_nap,
    .nap_wake = hmi_ofi_nap_wake,
    .cancel = hmi_ofi_cancel,
};
