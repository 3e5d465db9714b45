/*
 * The sock plugin's class, tunables, message buffers and ops table
 * (sock_internal.h says what the plugin is and why).
 */
#include "na/sock/sock_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "util/log.h"

const struct hmi_na_tunable hmi_sock_tunables[SOCK_TUNE_COUNT] = {
    [SOCK_TUNE_EAGER_LIMIT] = {"HM_SOCK_EAGER_LIMIT", HMI_NA_TUNABLE_SIZE, "65536", 4096,
                               16u << 20, "sock+tcp: largest message in bytes, Hermod header "
                               "included (a peer's frame past it closes its connection)"},
    [SOCK_TUNE_CONNECT_MS] = {"HM_SOCK_CONNECT_MS", HMI_NA_TUNABLE_SIZE, "10000", 1, 86400000u,
                              "sock+tcp: longest a lookup waits for its TCP connection (ms)"},
    /* Each costs a descriptor and at most a frame of the eager limit while
     * it sends one. */
    [SOCK_TUNE_MAX_CONNS] = {"HM_SOCK_MAX_CONNS", HMI_NA_TUNABLE_SIZE, "1024", 1, 1u << 20,
                             "sock+tcp: inbound connections a context keeps (at most half "
                             "the descriptor limit); one more is refused (counted \"busy\"), "
                             "unless its host is below its share of them"},
    [SOCK_TUNE_LINGER_MS] = {"HM_SOCK_LINGER_MS", HMI_NA_TUNABLE_SIZE, "1000", 0, 600000,
                             "sock+tcp: a closing context waits at most this long (ms) for its "
                             "peers to close their side, so its last messages reach them"},
};

static const char sock_peers_any[] =
    "any: a sender is its TCP connection, each peer's memory is bounded by one frame "
    "(tests/hostile); the name in a peer's hello is its own claim, used only to print it";

/*
 * Inbound connections per context, at most half the process's soft
 * descriptor limit: past that, accept would fail for want of descriptors,
 * the connection would wait in the kernel's queue instead of being refused
 * and counted, and the process could open nothing else.
 */
static unsigned int sock_max_conns(void)
{
    size_t wanted = hmi_na_tunable_size(&hmi_sock_tunables[SOCK_TUNE_MAX_CONNS]);
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY ||
        lim.rlim_cur / 2 >= wanted)
        return (unsigned int)wanted;
    size_t cap = lim.rlim_cur / 2 > 0 ? (size_t)(lim.rlim_cur / 2) : 1;
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_INFO,
            "sock+tcp: %zu inbound connections per context, not %zu: half the descriptor "
            "limit (ulimit -n %llu)",
            cap, wanted, (unsigned long long)lim.rlim_cur);
    return (unsigned int)cap;
}

static hm_return_t sock_class_open(hmi_na_class_t *cls, const char *protocol, const char *listen)
{
    struct sock_class *k = sock_class(cls);
    if (strcmp(protocol, "tcp") != 0)
        return HM_NOT_SUPPORTED;
    if (hmi_uri_parse(listen, HMI_URI_LISTEN, &k->k_listen) != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "sock+tcp: bad listen address \"%s\"", listen);
        return HM_INVALID_ARG;
    }
    hmi_na_hello_key_from_env(&k->k_key);
    k->k_eager = hmi_na_tunable_size(&hmi_sock_tunables[SOCK_TUNE_EAGER_LIMIT]) & ~(size_t)7;
    k->k_connect_ms = (unsigned int)hmi_na_tunable_size(&hmi_sock_tunables[SOCK_TUNE_CONNECT_MS]);
    k->k_max_conns = sock_max_conns();
    k->k_linger_ms = (unsigned int)hmi_na_tunable_size(&hmi_sock_tunables[SOCK_TUNE_LINGER_MS]);
    cls->c_eager_limit = k->k_eager;
    cls->c_inject_limit = 0;
    cls->c_mem_pins = false;
    cls->c_rma_kind = HM_NA_RMA_OWNER_CHECKED;
    cls->c_cma = false;
    cls->c_trusted_only = NULL;
    cls->c_peers_any = sock_peers_any;
    return HM_SUCCESS;
}

static void sock_class_close(hmi_na_class_t *cls)
{
    (void)cls;
}

/* The frame header lives in the 8 bytes before the buffer; padding after it. */
static void *sock_msg_buf_alloc(hmi_na_class_t *cls, size_t size, void **desc_out)
{
    (void)cls;
    size_t padded = (size + 7) & ~(size_t)7;
    if (padded < size)
        return NULL;
    unsigned char *p = aligned_alloc(8, SOCK_FRAME_HDR + (padded == 0 ? 8 : padded));
    if (p == NULL)
        return NULL;
    *desc_out = NULL;
    return p + SOCK_FRAME_HDR;
}

static void sock_msg_buf_free(hmi_na_class_t *cls, void *buf, void *desc)
{
    (void)cls;
    (void)desc;
    if (buf != NULL)
        free((unsigned char *)buf - SOCK_FRAME_HDR);
}

static const char *const sock_protocols[] = {"tcp", NULL};

const struct hmi_na_ops hmi_na_sock_ops = {
    .name = "sock",
    .protocols = sock_protocols,
    .tunables = hmi_sock_tunables,
    .ntunables = SOCK_TUNE_COUNT,
    .class_size = sizeof(struct sock_class),
    .context_size = sizeof(struct sock_ctx),
    .op_size = sizeof(struct sock_op),
    .mem_size = 0,
    .class_open = sock_class_open,
    .class_close = sock_class_close,
    .context_open = hmi_sock_context_open,
    .context_close = hmi_sock_context_close,
    .addr_lookup = hmi_sock_addr_lookup,
    .addr_self = hmi_sock_addr_self,
    .addr_to_string = hmi_sock_addr_to_string,
    .addr_ref = hmi_sock_addr_ref,
    .addr_unref = hmi_sock_addr_unref,
    .peer_drop = hmi_sock_peer_drop,
    .msg_buf_alloc = sock_msg_buf_alloc,
    .msg_buf_free = sock_msg_buf_free,
    .msg_send = hmi_sock_msg_send,
    .msg_release = hmi_sock_msg_release,
    /* memory and rma slots: none, RMA is the NA's own (owner-checked) */
    .progress = hmi_sock_progress,
    .poll_fd = hmi_sock_poll_fd,
    .poll_arm = hmi_sock_poll_arm,
    .cancel = hmi_sock_cancel,
};
