/*
 * UCX plugin: the class (one ucp_context per class) and the ops table.
 *
 * Transports are chosen here, programmatically, with ucp_config_modify, so a
 * user never has to set UCX_* variables: ucx+tcp uses the "tcp" transport
 * (worker-address connections, the address handed out by Hermod's own
 * listener, ucx_addr.c), ucx+shm uses posix/sysv shared
 * memory for messages, plus "self" for loopback.
 *
 * No RMA: the ucp_context is opened without UCP_FEATURE_RMA. UCX 1.13 moves
 * ucp_get_nbx / ucp_put_nbx over tcp and between shared-memory workers by
 * emulating them with active messages that the *target* serves from its
 * progress, copying whatever address the request names: with the feature on,
 * any peer could read and write any byte of a Hermod process. Without it the
 * handlers are not installed. RMA for this plugin's classes is the NA layer's
 * owner-checked RMA (na_rma.h): messages, or CMA between shm peers.
 */
#include "na/ucx/ucx_internal.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

/* ---- Tunables ------------------------------------------------------------- */

const struct hmi_na_tunable hmi_ucx_tunables[UCX_TUNE_COUNT] = {
    [UCX_TUNE_EAGER_LIMIT] = {"HM_UCX_EAGER_LIMIT", HMI_NA_TUNABLE_SIZE, "65536", 4096,
                              16u << 20, "largest message in bytes, Hermod header included"},
    [UCX_TUNE_POOL_KEEP] = {"HM_UCX_POOL_KEEP", HMI_NA_TUNABLE_SIZE, "64", 0, 1u << 20,
                            "receive buffers (of the eager limit each) a context keeps for "
                            "reuse"},
    [UCX_TUNE_TCP_TLS] = {"HM_UCX_TCP_TLS", HMI_NA_TUNABLE_STRING, "tcp", 0, 0,
                          "UCX transports (UCX_TLS syntax) behind ucx+tcp"},
    /* No "cma": UCX's cma transport reads a rendezvous message's payload
     * from the pid the sender's own UCX address names, so a peer forging
     * it could make us read another process into our receive buffer. */
    [UCX_TUNE_SHM_TLS] = {"HM_UCX_SHM_TLS", HMI_NA_TUNABLE_STRING, "posix,sysv,self", 0, 0,
                          "UCX transports (UCX_TLS syntax) behind ucx+shm"},
    [UCX_TUNE_CONNECT_MS] = {"HM_UCX_CONNECT_MS", HMI_NA_TUNABLE_SIZE, "10000", 0, 86400000u,
                             "ucx+tcp: longest a connection's hello exchange may take (ms)"},
    /* Measured (ARCHITECTURE, Owner-checked CMA): below 64 KiB a get or put
     * over UCX's shared-memory messages beat the two syscalls of a CMA op in
     * busy, default and wait mode alike. */
    [UCX_TUNE_CMA_MIN] = {"HM_UCX_CMA_MIN", HMI_NA_TUNABLE_SIZE, "65536", 0, (size_t)1 << 40,
                          "ucx+shm: bulk ops of fewer bytes go over messages, not "
                          "process_vm_readv/writev (0: CMA for every op)"},
    /* A sender's write of a slot takes a few hundred ns: a second of it is a
     * sender that died inside (ucx_fifo.c). */
    [UCX_TUNE_FIFO_HOLE_MS] = {"HM_UCX_FIFO_HOLE_MS", HMI_NA_TUNABLE_SIZE, "1000", 10, 3600000,
                               "ucx+shm: a slot of our receive FIFO left unwritten this long "
                               "(ms) is taken for a killed sender's and filled"},
    [UCX_TUNE_WARM] = {"HM_UCX_WARM", HMI_NA_TUNABLE_SIZE, "1", 0, 1,
                       "1: each context connects to itself when it opens, so that its first "
                       "peer does not pay UCX's first-connection costs; 0: off"},
};

/* ---- Status mapping ------------------------------------------------------- */

hm_return_t hmi_ucx_status(ucs_status_t status)
{
    switch (status) {
    case UCS_OK:
        return HM_SUCCESS;
    case UCS_ERR_CANCELED:
        return HM_CANCELED;
    case UCS_ERR_NO_MEMORY:
        return HM_NOMEM;
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_BUSY:
        return HM_AGAIN;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
        return HM_INVALID_ARG;
    case UCS_ERR_MESSAGE_TRUNCATED:
    case UCS_ERR_EXCEEDS_LIMIT:
        return HM_MSGSIZE;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_TIMED_OUT:
        return HM_UNREACHABLE;
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NO_DEVICE:
        return HM_NOT_SUPPORTED;
    case UCS_ERR_NO_ELEM:
        return HM_NOENTRY;
    default:
        return HM_TRANSPORT_ERROR;
    }
}

/* ---- Class ---------------------------------------------------------------- */

static hm_return_t ucx_config_set(ucp_config_t *config, const char *name, const char *value)
{
    ucs_status_t status = ucp_config_modify(config, name, value);
    if (status != UCS_OK) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: cannot set UCX_%s=%s: %s", name, value,
                ucs_status_string(status));
        return HM_NOT_SUPPORTED;
    }
    return HM_SUCCESS;
}

/*
 * tcp with a concrete listen address: UCX's own tcp lanes use the interface
 * that holds it (UCX_NET_DEVICES, default "all"), and IPv6 first when the
 * address is IPv6 (UCX_TCP_AF_PRIO, default "inet,inet6"), so the URI's
 * choice of network is the data's too. A variable the user set wins.
 * Verified with UCX 1.13.1: over an interface's global IPv6 address the lanes
 * are IPv6; over ::1 UCX's tcp offers no IPv6 ("network device 'lo' is not
 * available" with inet6 alone), so there the lanes use lo's IPv4 address
 * while our listener and the URI stay IPv6. The key is "AF_PRIO": UCX
 * applies modified transport keys without their "TCP_" prefix.
 */
static hm_return_t ucx_config_devices(const struct ucx_class *k, ucp_config_t *config)
{
    const struct hmi_uri_host *l = &k->k_listen.u_tcp;
    if (k->k_proto != UCX_PROTO_TCP || l->hp_wildcard)
        return HM_SUCCESS;
    hm_return_t ret = HM_SUCCESS;
    if (getenv("UCX_NET_DEVICES") == NULL && l->hp_ifname[0] != '\0')
        ret = ucx_config_set(config, "NET_DEVICES", l->hp_ifname);
    if (ret == HM_SUCCESS && getenv("UCX_TCP_AF_PRIO") == NULL &&
        l->hp_addr.ss_family == AF_INET6)
        ret = ucx_config_set(config, "AF_PRIO", "inet6,inet");
    return ret;
}

/* Read the UCX configuration and select the transports behind `k`'s protocol. */
static hm_return_t ucx_config(const struct ucx_class *k, ucp_config_t **config_out)
{
    enum ucx_proto proto = k->k_proto;
    ucp_config_t *config;
    ucs_status_t status = ucp_config_read(NULL, NULL, &config);
    if (status != UCS_OK) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: cannot read the UCX configuration: %s",
                ucs_status_string(status));
        return HM_NOT_SUPPORTED;
    }
    const char *tls = hmi_na_tunable_string(
        &hmi_ucx_tunables[proto == UCX_PROTO_TCP ? UCX_TUNE_TCP_TLS : UCX_TUNE_SHM_TLS]);
    hm_return_t ret = ucx_config_set(config, "TLS", tls);
    if (ret == HM_SUCCESS)
        ret = ucx_config_set(config, "WARN_UNUSED_ENV_VARS", "n");
    /*
     * Every message is at most the eager limit (64 KiB by default), so
     * rendezvous buys nothing: it adds a round trip (measured on the 2-core
     * VM, 32 KiB no-op RPC: tcp 135 -> 42 us, shm 25 -> 13 us median) and, on
     * tcp, UCX 1.13's put-zcopy path asserts when the peer dies mid-transfer
     * (tcp_ep.c: PUT_TX_WAITING_ACK). A peer may still send rendezvous
     * messages; ucx_msg.c receives them.
     */
    if (ret == HM_SUCCESS)
        ret = ucx_config_set(config, "RNDV_THRESH", "inf");
    /*
     * UCX's adaptive progress leaves a transport interface that has no
     * endpoint yet out of ucp_worker_progress: its first message wakes UCX's
     * async thread, which turns the interface on. So a server's first
     * message from each new interface waits for that thread to get a core,
     * behind the spinning threads on a busy node. Polling every interface
     * always costs a look at each idle one per progress (a few here: the
     * NET_DEVICES above, or posix, sysv and self). Measured 2026-11-27 on
     * the 2-core VM, `hm-perf rpc --iters 500`, 10 runs each interleaved,
     * medians: ucx+tcp lookup 1.51 -> 0.76 ms, first RPC 1.61 -> 1.18 ms;
     * ucx+shm --busy first RPC 0.64 -> 0.46 ms (default mode: no change
     * seen). A user's UCX_ADAPTIVE_PROGRESS wins.
     */
    if (ret == HM_SUCCESS && getenv("UCX_ADAPTIVE_PROGRESS") == NULL)
        ret = ucx_config_set(config, "ADAPTIVE_PROGRESS", "n");
    if (ret == HM_SUCCESS)
        ret = ucx_config_devices(k, config);
    if (ret != HM_SUCCESS) {
        ucp_config_release(config);
        return ret;
    }
    *config_out = config;
    return HM_SUCCESS;
}

/*
 * Why ucx+tcp faces trusted peers only. Hermod's listener fronts the hello,
 * but UCX's own tcp port (its number is in the worker address) takes raw
 * bytes from anyone, and UCX 1.13 (and upstream today) asserts on a framed
 * packet whose length is bad (tcp_ep.c) and on a malformed worker address
 * (ucp_address_unpack). Before UCX 1.14 it also asserts when a peer goes
 * away after asking for a connection and before ours back to it is up
 * (ucp_request.c, a wireup REP purged from a failed tcp endpoint; removed
 * upstream in 1.14): a client killed at the wrong moment ends the server
 * (docs/ARCHITECTURE.md, Known limits). Shared memory is reachable only by
 * processes of the same user.
 */
static const char *ucx_tcp_trusted_only(void)
{
    unsigned major = 0, minor = 0, release = 0;
    ucp_get_version(&major, &minor, &release);
    if (major == 1 && minor < 14)
        return "trusted only: UCX's own tcp port aborts the process on a malformed packet, "
               "and this UCX on a peer that dies while connecting (use sock+tcp)";
    return "trusted only: UCX's own tcp port aborts the process on a malformed packet "
           "(use sock+tcp)";
}

static hm_return_t ucx_class_open(hmi_na_class_t *cls, const char *protocol, const char *listen)
{
    struct ucx_class *k = ucx_cls(cls);
    if (strcmp(protocol, "tcp") == 0) {
        k->k_proto = UCX_PROTO_TCP;
    } else if (strcmp(protocol, "shm") == 0) {
        k->k_proto = UCX_PROTO_SHM;
    } else {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: unknown protocol \"%s\"", protocol);
        return HM_NOT_SUPPORTED;
    }
    if (hmi_ucx_listen_parse(k->k_proto, listen, &k->k_listen) != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx+%s: bad listen address \"%s\"", protocol,
                listen);
        return HM_INVALID_ARG;
    }
    /* The table's bounds hold: 4096..16 MiB, at most a day in ms. */
    k->k_eager_limit = hmi_na_tunable_size(&hmi_ucx_tunables[UCX_TUNE_EAGER_LIMIT]) & ~(size_t)7;
    k->k_pool_keep = hmi_na_tunable_size(&hmi_ucx_tunables[UCX_TUNE_POOL_KEEP]);
    k->k_fifo_hole_ns =
        (uint64_t)hmi_na_tunable_size(&hmi_ucx_tunables[UCX_TUNE_FIFO_HOLE_MS]) * 1000000u;
    k->k_connect_ms =
        (unsigned int)hmi_na_tunable_size(&hmi_ucx_tunables[UCX_TUNE_CONNECT_MS]);
    k->k_warm = hmi_na_tunable_size(&hmi_ucx_tunables[UCX_TUNE_WARM]) != 0;
    hmi_na_hello_key_from_env(&k->k_job_key);

    ucp_config_t *config;
    hm_return_t ret = ucx_config(k, &config);
    if (ret != HM_SUCCESS)
        return ret;
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                      UCP_PARAM_FIELD_NAME | UCP_PARAM_FIELD_REQUEST_SIZE,
        .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP, /* never RMA: see the top */
        .mt_workers_shared = 1, /* msg_buf_alloc may come from any thread */
        .name = "hermod",
        .request_size = sizeof(struct ucx_req),
    };
    ucs_status_t status = ucp_init(&params, config, &k->k_ucp);
    ucp_config_release(config);
    if (status != UCS_OK) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: cannot open protocol \"%s\": %s", protocol,
                ucs_status_string(status));
        return HM_NOT_SUPPORTED;
    }
    cls->c_eager_limit = k->k_eager_limit;
    cls->c_mem_pins = false; /* tcp and shared-memory lanes only: virtual addresses */
    cls->c_rma_kind = HM_NA_RMA_OWNER_CHECKED;
    cls->c_cma = k->k_proto == UCX_PROTO_SHM;
    cls->c_cma_min = hmi_na_tunable_size(&hmi_ucx_tunables[UCX_TUNE_CMA_MIN]);
    cls->c_trusted_only = k->k_proto == UCX_PROTO_TCP ? ucx_tcp_trusted_only() : NULL;
    return HM_SUCCESS;
}

static void ucx_class_close(hmi_na_class_t *cls)
{
    struct ucx_class *k = ucx_cls(cls);
    ucp_cleanup(k->k_ucp);
    k->k_ucp = NULL;
}

/* ---- Ops table ------------------------------------------------------------ */

static const char *const ucx_protocols[] = {"tcp", "shm", NULL};

const struct hmi_na_ops hmi_na_ucx_ops = {
    .name = "ucx",
    .protocols = ucx_protocols,
    .class_size = sizeof(struct ucx_class),
    .context_size = sizeof(struct ucx_ctx),
    .op_size = sizeof(struct ucx_op),
    .tunables = hmi_ucx_tunables,
    .ntunables = UCX_TUNE_COUNT,
    .class_open = ucx_class_open,
    .class_close = ucx_class_close,
    /* .devices stays NULL: UCX 1.13 chooses devices per ucp_context
     * (UCX_NET_DEVICES is read by ucp_init) and ucp_worker_params_t has no
     * device field (its cpu_mask only says where the worker's resources
     * should preferably be allocated). With one ucp_context per class, every
     * worker uses the class's devices; a choice per context would need a
     * ucp_context per context, and memory registered on each. */
    .context_open = hmi_ucx_context_open,
    .context_close = hmi_ucx_context_close,
    .addr_lookup = hmi_ucx_addr_lookup,
    .addr_self = hmi_ucx_addr_self,
    .addr_to_string = hmi_ucx_addr_to_string,
    .addr_ref = hmi_ucx_addr_ref,
    .addr_unref = hmi_ucx_addr_unref,
    .addr_pid = hmi_ucx_addr_pid,
    .peer_drop = hmi_ucx_peer_drop,
    .msg_buf_alloc = hmi_ucx_msg_buf_alloc,
    .msg_buf_free = hmi_ucx_msg_buf_free,
    .msg_send = hmi_ucx_msg_send,
    .msg_release = hmi_ucx_msg_release,
 /* memory and rma slots: none, RMA is the NA's (see the top) */
    .progress = hmi_ucx_progress,
    .poll_fd = hmi_ucx_poll_fd,
    .poll_arm = hmi_ucx_poll_arm,
    .cancel = hmi_ucx_cancel,
};
