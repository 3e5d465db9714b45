/*
 * The NA layer's own RMA (owner-checked classes, see enum hmi_na_rma_kind in
 * na.h): the key format and the two engines that move bytes.
 *
 *   na_rkey.c   packed keys: what a descriptor carries, and its parse
 *   na_swrma.c  RMA over messages: the requester asks, the owner checks its
 *               key table and copies (every protocol; the fallback of CMA)
 *   na_cma.c    RMA with process_vm_readv/writev between processes of one
 *               host: the requester reads the owner's key-table entry out
 *               of the owner and checks it before it copies
 *
 * Internal to src/na: the core and bulk only see hmi_na_mem_key_pack,
 * hmi_na_rkey_unpack and hmi_na_rma.
 */
#ifndef HM_NA_RMA_H
#define HM_NA_RMA_H

#include <stdbool.h>
#include <stdint.h>

#include "na/na.h"
#include "na/na_keytab.h"

/* Which engine an op was posted to (hmi_na_op_t.o_engine). */
enum hmi_na_engine {
    HMI_NA_ENGINE_NONE = 0,
    HMI_NA_ENGINE_PLUGIN = 1, /* native: the plugin's rma slot */
    HMI_NA_ENGINE_SWRMA = 2,
    HMI_NA_ENGINE_CMA = 3,
};

/* ---- Keys (na_rkey.c) ------------------------------------------------------ */

/*
 * A packed owner-checked key, HMI_NA_KEY_SIZE bytes, little-endian:
 *
 *    0  u32  magic "HMK3"
 *    4  u8   version (1)
 *    5  u8   flags: HMI_NA_KEY_F_CMA (the owner may be reached with CMA,
 *            the pid below is its pid)
 *    6  u8   access bits granted (hmi_na_access)
 *    7  u8   reserved, 0
 *    8  u32  owner's pid with HMI_NA_KEY_F_CMA, else 0
 *   12  u32  key-table slot
 *   16  u64  key, first word (never 0)
 *   24  u64  key, second word (never 0)
 *   32  u64  region length
 *
 * No address of the owner's travels: offsets are relative to the region,
 * and only the owner (or a CMA reader, from the owner's own table) turns
 * them into addresses. The length and access let a requester refuse a
 * transfer that cannot succeed without asking; the owner's check is the
 * one that counts.
 */
#define HMI_NA_KEY_SIZE 40u
#define HMI_NA_KEY_MAGIC 0x334b4d48u /* "HMK3" */
#define HMI_NA_KEY_VERSION 1u
#define HMI_NA_KEY_F_CMA 0x01u

/* An unpacked key (the handle hmi_na_rkey_unpack returns). */
struct hmi_na_rkey {
    hmi_na_addr_t *k_peer;        /* the peer that sent it; transfers go to it only */
    uint32_t k_pid;              /* with CMA: the owner's pid as the key says */
    uint32_t k_slot;
    struct hmi_keytab_key k_key;
    uint64_t k_len;
    unsigned int k_access;
    bool k_cma;                  /* HMI_NA_KEY_F_CMA */
    void *k_native;              /* HM_NA_RMA_NATIVE: the plugin's handle */
};

/* Pack `mem` (exposed in the key table) into HMI_NA_KEY_SIZE bytes at `out`. */
void hmi_na_key_encode(const hmi_na_mem_t *mem, bool cma, unsigned char *out);
/*
 * Parse a key from the network: magic, version, known flags and access, zero
 * reserved byte, a non-zero key, a pid with the CMA flag and only with it.
 * HM_PROTOCOL_ERROR with *why set (a static string); never reads past
 * `len`, which must be exactly HMI_NA_KEY_SIZE.
 */
hm_return_t hmi_na_key_decode(const void *buf, size_t len, struct hmi_na_rkey *out,
                              const char **why);

/* ---- RMA over messages (na_swrma.c) ---------------------------------------- */

/* First word of every message of the protocol; no core header starts so. */
#define HMI_SWRMA_MAGIC 0x414d5248u /* "HRMA" */

/* Per-context state: made at context open, freed at close. */
hm_return_t hmi_swrma_context_init(hmi_na_context_t *ctx);
/*
 * Context close, before the plugin's context_close: ops still waiting
 * complete with HM_CANCELED; owner-side work still queued is dropped (its
 * peer references released while the plugin's context is still open).
 */
void hmi_swrma_context_stop(hmi_na_context_t *ctx);
/*
 * Context close, after the plugin's context_close (no message arrives any
 * more, every send of the engine has completed): frees the engine's
 * buffers and state.
 */
void hmi_swrma_context_fini(hmi_na_context_t *ctx);
/* Progress part: the owner's queued replies, the requester's queued pieces. */
int hmi_swrma_progress(hmi_na_context_t *ctx);
/* Is work queued that progress would do now (so the context must not sleep)? */
bool hmi_swrma_pending(hmi_na_context_t *ctx);
/*
 * When progress must look at stalled peers again (hmi_na_wake_ns): while
 * work waits for a send buffer that peers which took nothing for
 * HM_SWRMA_STALL_MS hold; UINT64_MAX otherwise.
 */
uint64_t hmi_swrma_wake_ns(hmi_na_context_t *ctx);
/* A message of the protocol (first word HMI_SWRMA_MAGIC); releases it. */
void hmi_swrma_recv(hmi_na_context_t *ctx, hmi_na_addr_t *source, void *buf, size_t len,
                    uintptr_t token);
/* `peer` died: its ops complete with HM_UNREACHABLE, its queued work is dropped. */
void hmi_swrma_peer_failed(hmi_na_context_t *ctx, hmi_na_addr_t *peer);
/* The rma slot's contract (na.h) for owner-checked keys. */
hm_return_t hmi_swrma_rma(hmi_na_context_t *ctx, hmi_na_op_t *op, enum hmi_na_rma_dir dir,
                          hmi_na_addr_t *peer, const struct hmi_na_rma_piece *pieces,
                          unsigned int count);
/* hmi_na_cancel for an op of this engine. */
hm_return_t hmi_swrma_cancel(hmi_na_context_t *ctx, hmi_na_op_t *op);

/*
 * Counters of one context, since it opened (monotonic). The owner's side:
 *   ss_refused    requests the key table refused (ERR HM_PERMISSION sent):
 *                 unknown slot, wrong or revoked key, range or access
 *   ss_busy       GET_REQs refused over the job cap (ERR HM_BUSY sent)
 *   ss_overloaded GET_REQs refused over the per-peer job cap (ERR
 *                 HM_OVERLOADED sent; the requester's op fails so)
 *   ss_dropped    replies dropped: no send buffer and no job record left
 *                 (context or per-peer cap)
 *   ss_cancels    CANCELs that dropped a job
 *   ss_cancel_unknown CANCELs that named no job (finished, unknown): ignored
 * either side:
 *   ss_malformed  messages dropped because they do not parse (size, version,
 *                 type, reserved fields, a length that disagrees with the
 *                 message), or a reply that disagrees with its op (its op
 *                 then fails with HM_PROTOCOL_ERROR)
 * the requester's side:
 *   ss_late       replies for no live op: late, after cancel, or forged
 *   ss_foreign    replies naming a live op of ours that came from another
 *                 peer than the op's owner: dropped, the op untouched
 *   ss_cancels_sent CANCELs sent for gets given up (canceled, or failed on
 *                 a bad reply) while their data was still coming
 *   ss_cancels_lost CANCELs not sent: the waiting ring was full, or the
 *                 send failed (the owner streams on; replies are "late")
 *   ss_window_waits times a peer's ops waited at the requester's window
 *                 of requests outstanding per peer (once per episode)
 * either side:
 *   ss_share_waits times a peer's work waited because it held its share of
 *                 the send buffers (8 of HM_SWRMA_BUFS) in flight (once per
 *                 episode)
 *   ss_stalled    peers given up (hmi_na_peer_drop): they held send buffers
 *                 and took none of our messages for HM_SWRMA_STALL_MS while
 *                 other peers' work waited for a buffer
 * and gauges: ss_bufs (send buffers made, <= HM_SWRMA_BUFS), ss_jobs (jobs
 * queued), ss_peers (per-peer records in use).
 */
struct hmi_swrma_stats {
    uint64_t ss_refused;
    uint64_t ss_busy;
    uint64_t ss_dropped;
    uint64_t ss_malformed;
    uint64_t ss_late;
    uint64_t ss_foreign;
    uint64_t ss_overloaded;
    uint64_t ss_cancels;
    uint64_t ss_cancel_unknown;
    uint64_t ss_cancels_sent;
    uint64_t ss_cancels_lost;
    uint64_t ss_window_waits;
    uint64_t ss_share_waits;
    uint64_t ss_stalled;
    uint64_t ss_bufs;
    uint64_t ss_jobs;
    uint64_t ss_peers;
};
/* Copy the counters of `ctx` (all zero for a class without the engine). */
void hmi_swrma_stats(hmi_na_context_t *ctx, struct hmi_swrma_stats *out);

/* ---- CMA (na_cma.c) ---------------------------------------------------------- */

/*
 * Move an op with process_vm_readv/writev (every piece's key has the CMA
 * flag, the class sets c_cma). HM_AGAIN, with the op untouched, when CMA
 * cannot be used for it (the kernel refuses it here, or will not show us the
 * owner): the caller takes na_swrma. Otherwise HM_SUCCESS and the op
 * completes (deferred to the next progress), HM_PERMISSION among them: a key
 * whose pid is not the peer's, a pid without a Hermod key table (a forged
 * pid), an entry that does not grant the access (na_cma.c).
 */
hm_return_t hmi_cma_rma(hmi_na_context_t *ctx, hmi_na_op_t *op, enum hmi_na_rma_dir dir,
                        hmi_na_addr_t *peer, const struct hmi_na_rma_piece *pieces,
                        unsigned int count);

/* Context close: free what hmi_cma_rma keeps per context (ctx->x_cma). */
void hmi_cma_context_fini(hmi_na_context_t *ctx);
/* False when HM_CMA=0 asks for no CMA (the class then clears c_cma). */
bool hmi_cma_enabled(void);

/* ---- Shared by the engines (na.c) -------------------------------------------- */

/* Complete `op` at the next progress rather than in this one (x_deferred). */
void hmi_na_op_complete_deferred(hmi_na_op_t *op, hm_return_t status);
/* Free what an engine keeps in op->o_rma (hmi_na_op_destroy). */
void hmi_swrma_op_free(hmi_na_op_t *op);

#endif /* HM_NA_RMA_H */
