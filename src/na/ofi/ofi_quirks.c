/*
 * What each ofi protocol asks of libfabric, and what its provider does that
 * the contract has to work around. One row per protocol; the code reads the
 * named fields and never tests a provider's name.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "na/ofi/ofi_internal.h"
#include "util/compiler.h"
#include "util/log.h"

const struct ofi_quirk hmi_ofi_quirks[] = {
    {
        .q_protocol = "tcp",
        .q_provider = "tcp;ofi_rxm",
        .q_ep_type = FI_EP_RDM,
        /* No FI_RMA: the tcp provider serves a peer's read or write itself and,
         * on a key it refuses, never completes it and stalls the connection;
         * RMA is the NA layer's, checked by the owner (na_rma.h). */
        /* No FI_MULTI_RECV either: with several peers sending at once, rxm
         * (libfabric 1.17) delivered corrupted payloads into multi-recv slabs
         * (found by examples/objstore; one buffer per post is clean). */
        .q_caps = FI_MSG,
        .q_addr = OFI_ADDR_SOCKADDR_IN,
        .q_addr_format = FI_SOCKADDR_IN,
        .q_multi_recv = false,
        .q_source = false,
        .q_wait_fd = true,
        .q_watch_pid = false,
        .q_probe = true,
        .q_port_check = true,
        .q_warm_sends = true,
        .q_rma_fails_named = true,
        /* rxm survives hostile bytes (tests/hostile runs every attack here,
         * with trust declared), but two of the promises a class opened
         * without trust makes are not rxm's to keep (ARCHITECTURE, Known
         * limits): bounded memory, and a peer's acts never passing for
         * another's. */
        .q_trusted_only = "trusted only: rxm (libfabric 1.17) takes a sender's name on its "
                          "word, so a local process can take over another's connection, and "
                          "a flood while rxm closes a connection grows memory without a cap "
                          "(use sock+tcp)",
        .q_note = "rxm offers no FI_SOURCE: every message names its sender (8 bytes for "
                  "IPv4, 28 for IPv6); "
                  "a dead peer shows only as a failed send, so quiet peers we sent to are "
                  "probed, and a peer whose sends cannot connect has its port checked; "
                  "reads and writes of a broken connection come back as errors",
    },
    {
        .q_protocol = "shm",
        .q_provider = "shm",
        .q_ep_type = FI_EP_RDM,
        /* No FI_RMA: shm copies a read or write with CMA into the pid the
         * peer's own region names, without checking the range against the
         * registration; RMA is the NA layer's (na_rma.h: CMA checked
         * against the owner's key table, or messages). */
        .q_caps = FI_MSG | FI_MULTI_RECV | FI_SOURCE,
        .q_addr = OFI_ADDR_SHM,
        .q_addr_format = FI_ADDR_STR,
        .q_multi_recv = true,
        .q_source = true,
        .q_wait_fd = false,
        .q_watch_pid = true,
        .q_probe = false,
        .q_doorbell = true,
        .q_inject_only = true,
        .q_note = "FI_SOURCE names a wrong entry for senders not in the AV, so the name "
                  "rides until the peer has answered; a CQ with FI_WAIT_FD fails "
                  "(FI_ENOSYS): blocking uses our doorbell; FI_OPT_MIN_MULTI_RECV crashes "
                  "before fi_enable; peer death is never reported: pids watched by pidfd; "
                  "a failed read or write comes back with no context; sends past the inject "
                  "size complete in order from one queue, so one to a stopped peer held "
                  "back all: every send is an inject, larger messages go as fragments "
                  "(libfabric 1.17)",
    },
    {
        .q_protocol = "verbs",
        .q_provider = "verbs;ofi_rxm",
        .q_ep_type = FI_EP_RDM,
        /* rxm, as tcp: no multi-recv slabs */
        .q_caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
        .q_addr = OFI_ADDR_SOCKADDR_IN,
        .q_addr_format = FI_SOCKADDR_IN,
        .q_multi_recv = false,
        .q_source = false,
        .q_wait_fd = true,
        .q_watch_pid = false,
        .q_probe = true,
        .q_mem_pins = true,
        .q_rma_native = true,
        .q_trusted_only = "trusted only: not tested against hostile peers (needs RDMA hardware)",
        .q_rma_fails_named = true,
        .q_note = "as tcp (rxm on top); needs FI_MR_LOCAL and provider keys; the NIC checks "
                  "every RMA against its memory regions (native RMA)",
    },
};

const size_t hmi_ofi_nquirks = HMI_ARRAY_LEN(hmi_ofi_quirks);

const struct ofi_quirk *hmi_ofi_quirk_find(const char *protocol)
{
    for (size_t i = 0; i < hmi_ofi_nquirks; i++)
        if (strcmp(hmi_ofi_quirks[i].q_protocol, protocol) == 0)
            return &hmi_ofi_quirks[i];
    return NULL;
}

/*
 * libfabric parameters set by default (setenv without overwrite), with why.
 * rxm's shared receive context: 256 bounce buffers shared by all
 * connections instead of 128 per connection. Each process's resident
 * memory halved (45 MB against 95 MB under hm-perf rpc) with the same
 * no-op round trip and rate (ofi+tcp busy, 1 and 16 in flight, back to
 * back). It does not bound a flood by itself: rxm still allocates bounce
 * buffers without limit for messages that find no receive posted, which
 * our CQ batch (ofi_context.c, CTX_CQ_BATCH) keeps from happening.
 */
static const struct {
    const char *name, *value;
} ofi_provider_env[] = {
    {"FI_OFI_RXM_USE_SRX", "1"},
    {"FI_OFI_RXM_MSG_RX_SIZE", "256"},
    /* rxm reads its connection events every 10 ms by default while it has
     * no connect of its own in progress, so a server noticed a new client's
     * connection request, and each later step of the handshake, up to 10 ms
     * late. Every 100 us took the first RPC to a fresh ofi+tcp server from
     * 16 ms to 0.5 ms once the send buffers were made at open
     * (hmi_ofi_warm_sends; hm-perf rpc --busy, 2026-11-28; 1 ms: 2 ms), for
     * one epoll_wait(0) per 100 us of idle busy progress: no change seen in
     * the busy round trip or its p99. */
    {"FI_OFI_RXM_CM_PROGRESS_INTERVAL", "100"},
    /* shm's command queue per receiver (ofi_plugin.c, plugin_frag_slabs): one
     * progress call drains it all into our slabs, and we read at most
     * CTX_CQ_BATCH_FRAG completions per fi_cq_read: a drain must fit a batch. */
    {"FI_SHM_RX_SIZE", "256"},
    /* Removing a peer from the AV also closes rxm's connection to it (and
     * cancels what it still holds for it): a peer given up alive
     * (hmi_ofi_peer_drop) must give back the sends it stalled, and an
     * evicted peer's connection and its per-connection pools go with its
     * record instead of staying until the context closes. */
    {"FI_AV_REMOVE_CLEANUP", "1"},
};

static void ofi_provider_env_once(void)
{
    for (size_t i = 0; i < HMI_ARRAY_LEN(ofi_provider_env); i++)
        if (setenv(ofi_provider_env[i].name, ofi_provider_env[i].value, 0) != 0)
            hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN, "ofi: cannot set %s: %s",
                    ofi_provider_env[i].name, strerror(errno));
}

void hmi_ofi_provider_env(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    (void)pthread_once(&once, ofi_provider_env_once);
}

const struct hmi_na_tunable hmi_ofi_tunables[OFI_TUNE_COUNT] = {
    [OFI_TUNE_EAGER_LIMIT] = {"HM_OFI_EAGER_LIMIT", HMI_NA_TUNABLE_SIZE, "65536", 256, 16u << 20,
                              "largest message (bytes, Hermod header included)"},
    [OFI_TUNE_SLAB_SIZE] = {"HM_OFI_SLAB_SIZE", HMI_NA_TUNABLE_SIZE, "524288", 4096, 1u << 30,
                            "bytes per multi-receive slab (raised to hold 4 eager messages)"},
    [OFI_TUNE_SLABS] = {"HM_OFI_SLABS", HMI_NA_TUNABLE_SIZE, "8", 2, 4096,
                        "receive slabs posted per context (ofi+tcp: buffers, at least 256; "
                        "ofi+shm: at least 2 x FI_SHM_RX_SIZE x 4 KiB)"},
    [OFI_TUNE_PROBE_MS] = {"HM_OFI_PROBE_MS", HMI_NA_TUNABLE_SIZE, "1000", 10, 600000,
                           "silence (ms) after a send before a quiet peer is probed"},
    [OFI_TUNE_STUCK_MS] = {"HM_OFI_STUCK_MS", HMI_NA_TUNABLE_SIZE, "5000", 100, 3600000,
                           "a peer whose posts meet -FI_EAGAIN this long (ms) is dead"},
    /* The default is OFI_RMA_IOV_MAX (16); the test suite parses it against the bound. */
    [OFI_TUNE_RMA_IOV] = {"HM_OFI_RMA_IOV", HMI_NA_TUNABLE_SIZE, "16", 1,
                          OFI_RMA_IOV_MAX,
                          "most pieces per RMA op (also capped by the provider's "
                          "iov_limit and rma_iov_limit; 1: one fi_read/fi_write each)"},
    /* 0: shm's messages beat CMA only up to about 8 KiB in busy and default
     * mode, and lose twice over when the owner sleeps (it must wake to
     * answer; a wait-mode owner never spins): ARCHITECTURE, Owner-checked CMA. */
    [OFI_TUNE_CMA_MIN] = {"HM_OFI_CMA_MIN", HMI_NA_TUNABLE_SIZE, "0", 0, (size_t)1 << 40,
                          "ofi+shm: bulk ops of fewer bytes go over messages, not "
                          "process_vm_readv/writev (0: CMA for every op)"},
    /* Every name a message header carries costs a record and an AV entry
     * (about 0.7 KB): without a bound one ofi+tcp peer writing 1,000,000
     * names grew a server by 700 MB in 20 s. */
    [OFI_TUNE_PEERS] = {"HM_OFI_PEERS", HMI_NA_TUNABLE_SIZE, "65536", 16, 1u << 24,
                        "peer records per context: past it a new sender takes an idle "
                        "record, or fails a peer it cannot reach and may use half as many "
                        "again; beyond that it is refused"},
    /* The provider holds it for a few hundred ns per send: a second of it is
     * a holder that died inside (ofi_shmlock.c). */
    [OFI_TUNE_SHM_LOCK_MS] = {"HM_OFI_SHM_LOCK_MS", HMI_NA_TUNABLE_SIZE, "1000", 10, 3600000,
                              "ofi+shm: our region's lock held this long (ms) by a peer "
                              "is taken for a dead holder's and released"},
};

size_t hmi_ofi_tunable(enum ofi_tunable_id id)
{
    return hmi_na_tunable_size(&hmi_ofi_tunables[id]);
}
