/*
 * Admission control of a serving context: budgets of requests in service
 * and of overflow bytes, per context and per peer context, checked when a
 * request arrives and before anything is allocated for it.
 *
 * A request is "in service" from its arrival until its server handle goes
 * back to the pool: queued for its handler, in it, held by it, responding
 * until the response has left, holding an overflowed response until the
 * ACK. So the budget of requests also bounds the responses stuck towards a
 * peer that never progresses, and the receive buffers its requests hold.
 *
 * A request past a budget is not run: it is answered HM_OVERLOADED with a
 * retry hint (the wire header's budget field), and the client's hm_forward
 * sends it again (retry.c). An overflow announcing more bytes than a whole
 * budget can ever hold is answered HM_MSGSIZE instead: retrying cannot help.
 * The answer costs a send slot from a pool of header-sized buffers. Replies
 * in flight are bounded (admit_posts_full), the last quarter of the bound
 * kept for peers with few in flight; past it a reply waits as a record in
 * its sender's queue, and senders with records are served in turn
 * (admit_flush_ring), so one whose replies do not complete holds back only
 * its own. Records are bounded per context, and per sender for a quiet
 * sender (admit_live: it has replies pending and took none lately); at the
 * context's bound the sender with the most waiting loses its newest, or,
 * for a live sender, a quiet one does (admit_evict, overload_evictions), so
 * a sender with few always gets one and a live one is not crowded out. A
 * request is dropped unanswered (overload_drops) when it is one-way, its
 * peer stalled or is dead, its sender is quiet and at its own record bound,
 * or it is evicted: so a peer that floods and never progresses costs the
 * server a bounded amount, and cannot take others' answers, while a client
 * that takes its replies, however slowly, is always answered.
 *
 * A handler may add bytes of its own to its request's share
 * (hm_handle_admit_bytes): memory it allocates at a size the peer chose.
 *
 * Per-peer means per sender as the transport names it: the counters are
 * plain fields of the context and of the sender's record (admit_peer.c:
 * one per NA address, whatever context indexes its requests claim), touched
 * only by the thread driving the context.
 */
#include <stdlib.h>

#include "core/core_internal.h"
#include "proc/proc_internal.h"
#include "util/log.h"
#include "util/time.h"

/* `value`, or the number in environment variable `name`; `expect` says what
 * it must be, in the warning for one that does not parse. */
static uint64_t admit_env(const char *name, uint64_t value, const char *expect)
{
    const char *env = getenv(name);
    if (env == NULL || *env == '\0')
        return value;
    char *end;
    unsigned long long parsed = strtoull(env, &end, 10);
    if (*end != '\0') {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN, "%s=%s ignored (%s)", name, env, expect);
        return value;
    }
    return parsed;
}

#define ADMIT_COUNT "a count, 0: no limit"
#define ADMIT_BYTES "bytes, 0: no limit"
#define ADMIT_HOLD "milliseconds, 1 to 2^32-1"

static uint32_t admit_u32(uint64_t value)
{
    return value > UINT32_MAX ? UINT32_MAX : (uint32_t)value;
}

/* A bound on error replies: from `name`, within [HMI_ADMIT_BOUND_MIN, 2^30]. */
static uint32_t admit_bound(const char *name, uint32_t value)
{
    uint64_t bound = admit_env(name, value, "a count");
    if (bound < HMI_ADMIT_BOUND_MIN || bound > (1u << 30)) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN, "%s=%llu ignored (from %u to 2^30)", name,
                (unsigned long long)bound, HMI_ADMIT_BOUND_MIN);
        return value;
    }
    return (uint32_t)bound;
}

/* overflow_hold_ms: HM_OVERFLOW_HOLD_MS if set and valid, else the option
 * (hm_context_create refused 0), else the default. */
static uint32_t admit_hold_ms(const hm_context_opts_t *opts)
{
    uint32_t value = opts && (opts->field_mask & HM_CONTEXT_OPT_OVERFLOW_HOLD)
                         ? opts->overflow_hold_ms
                         : HM_OVERFLOW_HOLD_DEFAULT_MS;
    uint64_t hold = admit_env("HM_OVERFLOW_HOLD_MS", value, ADMIT_HOLD);
    if (hold == 0 || hold > UINT32_MAX) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN, "HM_OVERFLOW_HOLD_MS=%llu ignored (%s)",
                (unsigned long long)hold, ADMIT_HOLD);
        return value;
    }
    return (uint32_t)hold;
}

void hmi_admit_init(hm_context_t *ctx, const hm_context_opts_t *opts)
{
    uint64_t mask = opts ? opts->field_mask : 0;
    struct hmi_admit *ad = &ctx->c_admit;
    ad->ad_max_requests = admit_u32(admit_env(
        "HM_MAX_REQUESTS",
        (mask & HM_CONTEXT_OPT_MAX_REQUESTS) ? opts->max_requests : HM_MAX_REQUESTS_DEFAULT,
        ADMIT_COUNT));
    ad->ad_max_requests_peer = admit_u32(admit_env(
        "HM_MAX_REQUESTS_PEER", (mask & HM_CONTEXT_OPT_MAX_REQUESTS_PEER)
                                    ? opts->max_requests_per_peer
                                    : HM_MAX_REQUESTS_PEER_DEFAULT,
        ADMIT_COUNT));
    ad->ad_max_bytes = admit_env("HM_MAX_OVERFLOW", (mask & HM_CONTEXT_OPT_MAX_OVERFLOW)
                                                        ? opts->max_overflow_bytes
                                                        : HM_MAX_OVERFLOW_DEFAULT,
                                 ADMIT_BYTES);
    ad->ad_max_bytes_peer = admit_env("HM_MAX_OVERFLOW_PEER",
                                      (mask & HM_CONTEXT_OPT_MAX_OVERFLOW_PEER)
                                          ? opts->max_overflow_bytes_per_peer
                                          : HM_MAX_OVERFLOW_PEER_DEFAULT,
                                      ADMIT_BYTES);
    uint64_t hint = admit_env("HM_RETRY_HINT_US", (mask & HM_CONTEXT_OPT_RETRY_HINT)
                                                      ? opts->retry_hint_us
                                                      : HM_RETRY_HINT_DEFAULT_US,
                              "microseconds");
    ad->ad_hint_us = hint > HMI_WIRE_RETRY_MAX_US ? HMI_WIRE_RETRY_MAX_US : (uint32_t)hint;
    ad->ad_hold_ms = admit_hold_ms(opts);
    ad->ad_replies_max = admit_bound("HM_ADMIT_REPLIES", HMI_ADMIT_REPLIES_CTX);
    ad->ad_waiting_max = admit_bound("HM_ADMIT_WAITING", HMI_ADMIT_DEFERRED_MAX);
}

/* Bytes an overflowed request announces (its descriptor's first field); 0 if unreadable. */
static uint64_t admit_announced(hm_context_t *ctx, const struct hmi_wire_header *hdr,
                                const void *buf)
{
    if ((hdr->flags & HMI_WIRE_F_OVERFLOW) == 0)
        return 0;
    hm_proc_t p;
    uint64_t len = 0;
    hmi_proc_init(&p, HM_PROC_DECODE, (char *)buf + HMI_WIRE_HEADER_SIZE, hdr->payload_len,
                  ctx->c_class);
    if (hm_proc_uint64(&p, &len) != HM_SUCCESS || len > HMI_OVERFLOW_MAX)
        return 0; /* malformed: the descriptor check refuses it, allocating nothing */
    return len;
}

/* `used` + `more` past `max` (0: no limit)? */
static bool admit_over(uint64_t used, uint64_t more, uint64_t max)
{
    return max != 0 && (more > max || used > max - more);
}

hm_return_t hmi_admit_check(hm_context_t *ctx, hm_addr_t *peer,
                            const struct hmi_wire_header *hdr, const void *buf,
                            uint64_t *bytes_out)
{
    const struct hmi_admit *ad = &ctx->c_admit;
    uint64_t bytes = admit_announced(ctx, hdr, buf);
    *bytes_out = bytes;
    if ((ad->ad_max_bytes_peer != 0 && bytes > ad->ad_max_bytes_peer) ||
        (ad->ad_max_bytes != 0 && bytes > ad->ad_max_bytes)) {
        static struct hmi_log_limit budget_log; /* a peer can cause it: rate-limited */
        hmi_log_limited(&budget_log, HMI_SUBSYS_CORE, HMI_LOG_WARN,
                        "context %u refused an overflow of %llu bytes: above its budget",
                        ctx->c_index, (unsigned long long)bytes);
        return HM_MSGSIZE;
    }
    const hm_addr_t *sender = hmi_admit_acct(peer);
    if (admit_over(ad->ad_requests, 1, ad->ad_max_requests) ||
        admit_over(sender->a_adm_requests, 1, ad->ad_max_requests_peer) ||
        admit_over(ad->ad_bytes, bytes, ad->ad_max_bytes) ||
        admit_over(sender->a_adm_bytes, bytes, ad->ad_max_bytes_peer))
        return HM_OVERLOADED;
    return HM_SUCCESS;
}

void hmi_admit_enter(hm_handle_t *handle, uint64_t bytes)
{
    struct hmi_admit *ad = &handle->h_ctx->c_admit;
    hm_addr_t *sender = hmi_admit_acct(handle->h_addr);
    handle->h_admitted = true;
    handle->h_adm_bytes = bytes;
    handle->h_adm_overflow = bytes;
    ad->ad_requests++;
    ad->ad_bytes += bytes;
    sender->a_adm_requests++;
    sender->a_adm_bytes += bytes;
}

void hmi_admit_leave(hm_handle_t *handle)
{
    if (!handle->h_admitted)
        return;
    struct hmi_admit *ad = &handle->h_ctx->c_admit;
    hm_addr_t *sender = hmi_admit_acct(handle->h_addr);
    handle->h_admitted = false;
    ad->ad_requests--;
    ad->ad_bytes -= handle->h_adm_bytes;
    sender->a_adm_requests--;
    sender->a_adm_bytes -= handle->h_adm_bytes;
    handle->h_adm_bytes = handle->h_adm_overflow = 0;
}

void hmi_admit_release_overflow(hm_handle_t *handle)
{
    uint64_t bytes = handle->h_adm_overflow;
    if (!handle->h_admitted || bytes == 0)
        return;
    struct hmi_admit *ad = &handle->h_ctx->c_admit;
    hm_addr_t *sender = hmi_admit_acct(handle->h_addr);
    handle->h_adm_overflow = 0;
    handle->h_adm_bytes -= bytes;
    ad->ad_bytes -= bytes;
    sender->a_adm_bytes -= bytes;
}

/* More bytes for an admitted request: HM_MSGSIZE past a whole budget, HM_OVERLOADED now. */
static hm_return_t admit_more_bytes(hm_handle_t *handle, uint64_t bytes)
{
    struct hmi_admit *ad = &handle->h_ctx->c_admit;
    hm_addr_t *sender = hmi_admit_acct(handle->h_addr);
    if (admit_over(handle->h_adm_bytes, bytes, ad->ad_max_bytes_peer) ||
        admit_over(handle->h_adm_bytes, bytes, ad->ad_max_bytes) ||
        admit_over(ad->ad_bytes, bytes, UINT64_MAX)) /* no budget: the counters must not wrap */
        return HM_MSGSIZE;
    if (admit_over(ad->ad_bytes, bytes, ad->ad_max_bytes) ||
        admit_over(sender->a_adm_bytes, bytes, ad->ad_max_bytes_peer))
        return HM_OVERLOADED;
    handle->h_adm_bytes += bytes;
    ad->ad_bytes += bytes;
    sender->a_adm_bytes += bytes;
    return HM_SUCCESS;
}

hm_return_t hm_handle_admit_bytes(hm_handle_t *handle, uint64_t bytes)
{
    if (handle == NULL || !handle->h_server)
        return HM_INVALID_ARG;
    hm_context_t *ctx = handle->h_ctx;
    bool took = hmi_ctx_enter(ctx);
    hm_return_t ret = handle->h_admitted ? admit_more_bytes(handle, bytes) : HM_INVALID_ARG;
    hmi_ctx_leave(ctx, took);
    if (ret == HM_OVERLOADED || ret == HM_MSGSIZE) {
        static struct hmi_log_limit more_log; /* a peer can cause it: rate-limited */
        hmi_log_limited(&more_log, HMI_SUBSYS_CORE, HMI_LOG_WARN,
                        "context %u refused %llu more bytes for a request: %s", ctx->c_index,
                        (unsigned long long)bytes, hm_strerror(ret));
    }
    return ret;
}

static struct hmi_wire_header admit_reply_header(hm_context_t *ctx,
                                                 const struct hmi_wire_header *req,
                                                 hm_return_t error)
{
    struct hmi_wire_header hdr = {
        .flags = HMI_WIRE_F_RESPONSE | HMI_WIRE_F_ERROR,
        .origin_ctx = ctx->c_index,
        .target_ctx = req->origin_ctx,
        .rpc_id = req->rpc_id,
        .cookie = req->cookie,
        .budget_us = error == HM_OVERLOADED ? ctx->c_admit.ad_hint_us : HMI_WIRE_NO_BUDGET,
        .ret = (int32_t)error,
        .recv_kib = ctx->c_class->k_recv_kib,
    };
    hmi_protocol_reply_fields(ctx->c_class, req, &hdr);
    return hdr;
}

/*
 * A peer that has stopped taking its replies: it has some waiting and took
 * none for HMI_ADMIT_STALL_MS. Only to such a peer may answers be dropped
 * (and a few more are still posted first, HMI_ADMIT_REPLIES_PEER). A client
 * busy posting a burst (it progresses only once all are posted) is not
 * stalled: it takes its replies well within the stall time.
 */
static bool admit_peer_stalled(hm_addr_t *peer)
{
    const hm_addr_t *sender = hmi_admit_acct(peer);
    if (sender->a_adm_replies + sender->a_adm_deferred < HMI_ADMIT_REPLIES_PEER)
        return false;
    return hmi_time_ns() - sender->a_adm_taken_ns > (uint64_t)HMI_ADMIT_STALL_MS * 1000000u;
}

/*
 * No room to post one more reply to `peer` now: it waits (admit_defer)
 * instead. A peer may have half the context's bound in flight; the last
 * quarter of it is kept for peers with fewer than HMI_ADMIT_REPLIES_PEER in
 * flight, so peers whose replies stopped completing (they do not read) can
 * never take every post from the others.
 */
static bool admit_posts_full(hm_context_t *ctx, hm_addr_t *peer)
{
    const struct hmi_admit *ad = &ctx->c_admit;
    uint32_t mine = hmi_admit_acct(peer)->a_adm_replies;
    if (ad->ad_replies >= ad->ad_replies_max || mine >= ad->ad_replies_max / 2)
        return true;
    return mine >= HMI_ADMIT_REPLIES_PEER &&
           ad->ad_replies >= ad->ad_replies_max - ad->ad_replies_max / 4;
}

static struct hmi_send_slot *admit_reply_slot(hm_context_t *ctx)
{
    struct hmi_admit *ad = &ctx->c_admit;
    struct hmi_list *link = hmi_list_pop_front(&ad->ad_free_replies);
    if (link != NULL) {
        if (--ad->ad_replies_idle < ad->ad_replies_low)
            ad->ad_replies_low = ad->ad_replies_idle;
        return hmi_container_of(link, struct hmi_send_slot, s_link);
    }
    return hmi_send_slot_new(ctx, HMI_WIRE_HEADER_SIZE);
}

static void admit_reply_slot_put(struct hmi_send_slot *slot)
{
    struct hmi_admit *ad = &slot->s_ctx->c_admit;
    ad->ad_replies_idle++;
    hmi_list_push_front(&ad->ad_free_replies, &slot->s_link);
}

/* Start the stall clock when `peer` gets its first waiting reply. */
static void admit_clock_start(hm_addr_t *peer)
{
    hm_addr_t *sender = hmi_admit_acct(peer);
    if (sender->a_adm_replies == 0 && sender->a_adm_deferred == 0)
        sender->a_adm_taken_ns = hmi_time_ns();
}

/* Count a reply to `peer` as posted, or as gone (`taken`: sent). */
static void admit_reply_count(hm_context_t *ctx, hm_addr_t *peer, bool posted, bool taken)
{
    struct hmi_admit *ad = &ctx->c_admit;
    hm_addr_t *sender = hmi_admit_acct(peer);
    if (posted) {
        admit_clock_start(peer);
        sender->a_adm_replies++;
        ad->ad_replies++;
        return;
    }
    ad->ad_replies--;
    sender->a_adm_replies--;
    if (taken)
        sender->a_adm_taken_ns = hmi_time_ns();
}

/* A post that failed for a reason that passes (resources), not a dead peer. */
static bool admit_transient(hm_return_t ret)
{
    return ret != HM_UNREACHABLE && ret != HM_INVALID_ARG && ret != HM_MSGSIZE;
}

/* Post the reply `hdr` to `peer`; on failure nothing of it is left. */
static hm_return_t admit_post(hm_context_t *ctx, hm_addr_t *peer,
                              const struct hmi_wire_header *hdr)
{
    struct hmi_send_slot *slot = admit_reply_slot(ctx);
    if (slot == NULL)
        return HM_NOMEM;
    hmi_wire_encode(slot->s_buf, hdr, ctx->c_class->k_checksum);
    slot->s_kind = HMI_SEND_REPLY;
    slot->s_peer = hm_addr_dup(peer);
    admit_reply_count(ctx, peer, true, false);
    hm_return_t ret = hmi_send_post(slot, peer, HMI_WIRE_HEADER_SIZE);
    if (ret != HM_SUCCESS) {
        admit_reply_count(ctx, peer, false, false);
        hm_addr_free(slot->s_peer);
        slot->s_peer = NULL;
        admit_reply_slot_put(slot);
        return ret;
    }
    ctx->c_stats.responses_sent++;
    if (hdr->ret == HM_OVERLOADED || hdr->ret == HM_MSGSIZE)
        ctx->c_stats.overload_replies++;
    return HM_SUCCESS;
}

struct admit_deferred {
    struct hmi_list d_link;  /* in its sender's a_adm_waiting */
    hm_addr_t *d_peer;       /* one reference */
    struct hmi_wire_header d_hdr;
};

static void admit_drop(hm_context_t *ctx, const char *why)
{
    ctx->c_stats.overload_drops++;
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_DEBUG, "error reply dropped: %s", why);
}

/* Take `d` off `sender`'s queue and free it; `sender` may be freed with it. */
static void admit_wait_remove(hm_context_t *ctx, hm_addr_t *sender, struct admit_deferred *d)
{
    struct hmi_admit *ad = &ctx->c_admit;
    hmi_list_remove(&d->d_link);
    ad->ad_deferred_count--;
    if (--sender->a_adm_deferred == 0) {
        hmi_list_remove(&sender->a_adm_ring);
        ad->ad_ring_count--;
        if (ad->ad_heaviest == sender)
            ad->ad_heaviest = NULL;
    }
    hm_addr_free(d->d_peer); /* it holds its sender's record: the last use of `sender` */
    free(d);
}

/*
 * The sender with the most replies waiting, as known: kept while senders
 * only gain records or lose them to eviction (one at a time, so it stays
 * within one of the most), forgotten when its own are posted or dropped.
 * Then found again, at the context's bound only, among the first
 * HMI_ADMIT_HEAVY_SCAN senders of the ring: a bounded walk, never all peers.
 */
static hm_addr_t *admit_heaviest(hm_context_t *ctx)
{
    struct hmi_admit *ad = &ctx->c_admit;
    if (ad->ad_heaviest != NULL)
        return ad->ad_heaviest;
    uint32_t walked = 0;
    for (struct hmi_list *l = ad->ad_ring.next;
         l != &ad->ad_ring && walked < HMI_ADMIT_HEAVY_SCAN; l = l->next, walked++) {
        hm_addr_t *sender = hmi_container_of(l, hm_addr_t, a_adm_ring);
        if (ad->ad_heaviest == NULL || sender->a_adm_deferred > ad->ad_heaviest->a_adm_deferred)
            ad->ad_heaviest = sender;
    }
    return ad->ad_heaviest;
}

/*
 * Is `sender` taking its replies at `now`: none pending, or one taken (or
 * its first posted) within HMI_ADMIT_QUIET_MS? A sender not live is quiet.
 */
static bool admit_live(const hm_addr_t *sender, uint64_t now)
{
    if (sender->a_adm_replies + sender->a_adm_deferred == 0)
        return true;
    return now - sender->a_adm_taken_ns <= (uint64_t)HMI_ADMIT_QUIET_MS * 1000000u;
}

/* A quiet sender with replies waiting, other than `sender`, among the first
 * HMI_ADMIT_HEAVY_SCAN of the ring; NULL if none. */
static hm_addr_t *admit_quiet_one(hm_context_t *ctx, const hm_addr_t *sender, uint64_t now)
{
    struct hmi_admit *ad = &ctx->c_admit;
    uint32_t walked = 0;
    for (struct hmi_list *l = ad->ad_ring.next;
         l != &ad->ad_ring && walked < HMI_ADMIT_HEAVY_SCAN; l = l->next, walked++) {
        hm_addr_t *other = hmi_container_of(l, hm_addr_t, a_adm_ring);
        if (other != sender && !admit_live(other, now))
            return other;
    }
    return NULL;
}

/*
 * Whose reply goes to make room for one of `sender`'s: the sender with the
 * most waiting, if it has more than `sender` would (and a quiet sender never
 * takes from a live one); else, for a live `sender`, any quiet sender. NULL:
 * `sender`'s own reply goes.
 */
static hm_addr_t *admit_victim(hm_context_t *ctx, hm_addr_t *sender)
{
    hm_addr_t *heavy = admit_heaviest(ctx);
    if (heavy != NULL && heavy != sender && heavy->a_adm_deferred <= sender->a_adm_deferred + 1) {
        /* The one known may have fallen behind (seen: 1 record, with 256 among
         * 10 senders): look again. Not when it is `sender`, a flood's usual
         * case, so a flooder's refusals do not each walk the ring. */
        ctx->c_admit.ad_heaviest = NULL;
        heavy = admit_heaviest(ctx);
    }
    uint64_t now = hmi_time_ns();
    bool live = admit_live(sender, now);
    if (heavy != NULL && heavy->a_adm_deferred > sender->a_adm_deferred + 1 &&
        (live || !admit_live(heavy, now)))
        return heavy;
    return live ? admit_quiet_one(ctx, sender, now) : NULL;
}

/*
 * The context's records are all taken and `sender` wants one: drop the
 * newest reply of admit_victim's choice. So a sender with few waiting
 * always gets a record, the heaviest pay for the bound, and a sender taking
 * its replies is never crowded out by senders that stopped taking theirs.
 */
static bool admit_evict(hm_context_t *ctx, hm_addr_t *sender)
{
    hm_addr_t *victim = admit_victim(ctx, sender);
    if (victim == NULL)
        return false;
    struct admit_deferred *d =
        hmi_container_of(victim->a_adm_waiting.prev, struct admit_deferred, d_link);
    ctx->c_stats.overload_evictions++;
    admit_drop(ctx, "evicted for another sender's");
    admit_wait_remove(ctx, victim, d); /* if heaviest, it stays within one of the most */
    return true;
}

/* Keep the reply to post later, behind its sender's others. */
static void admit_defer(hm_context_t *ctx, hm_addr_t *peer, const struct hmi_wire_header *hdr)
{
    struct hmi_admit *ad = &ctx->c_admit;
    hm_addr_t *sender = hmi_admit_acct(peer);
    if (sender->a_adm_deferred >= ad->ad_waiting_max / 8 && !admit_live(sender, hmi_time_ns())) {
        admit_drop(ctx, "too many waiting for this sender");
        return;
    }
    if (ad->ad_deferred_count >= ad->ad_waiting_max && !admit_evict(ctx, sender)) {
        admit_drop(ctx, "too many waiting, this sender the heaviest");
        return;
    }
    struct admit_deferred *d = malloc(sizeof(*d));
    if (d == NULL) {
        admit_drop(ctx, "out of memory");
        return;
    }
    admit_clock_start(peer);
    d->d_peer = hm_addr_dup(peer);
    d->d_hdr = *hdr;
    hmi_list_push_back(&sender->a_adm_waiting, &d->d_link);
    if (sender->a_adm_deferred++ == 0) {
        hmi_list_push_back(&ad->ad_ring, &sender->a_adm_ring);
        ad->ad_ring_count++;
    }
    ad->ad_deferred_count++;
    if (ad->ad_heaviest != NULL && sender->a_adm_deferred > ad->ad_heaviest->a_adm_deferred)
        ad->ad_heaviest = sender;
}

/* Answer now, later, or (stalled or dead peer) never. */
static void admit_answer(hm_context_t *ctx, hm_addr_t *peer, const struct hmi_wire_header *hdr)
{
    if (admit_peer_stalled(peer)) {
        admit_drop(ctx, "peer stalled");
        return;
    }
    if (hmi_admit_acct(peer)->a_adm_deferred != 0 || admit_posts_full(ctx, peer)) {
        admit_defer(ctx, peer, hdr); /* in order, behind its sender's waiting */
        return;
    }
    hm_return_t ret = admit_post(ctx, peer, hdr);
    if (ret == HM_SUCCESS)
        return;
    if (admit_transient(ret))
        admit_defer(ctx, peer, hdr);
    else
        admit_drop(ctx, hm_strerror(ret));
}

/*
 * Post `sender`'s waiting replies while it has room. A stalled sender's are
 * dropped. Returns once its queue is empty (the sender may then be freed)
 * or it has no room.
 */
static void admit_flush_sender(hm_context_t *ctx, hm_addr_t *sender)
{
    bool stalled = admit_peer_stalled(sender);
    for (;;) {
        struct admit_deferred *d =
            hmi_container_of(sender->a_adm_waiting.next, struct admit_deferred, d_link);
        bool last = sender->a_adm_deferred == 1;
        hm_return_t ret = HM_TIMEOUT; /* stands for "peer stalled" */
        if (!stalled) {
            if (admit_posts_full(ctx, d->d_peer))
                return; /* one of its completions calls again */
            ret = admit_post(ctx, d->d_peer, &d->d_hdr);
            if (ret != HM_SUCCESS && admit_transient(ret))
                return; /* the next completion or trim tick tries again */
        }
        if (ret != HM_SUCCESS)
            admit_drop(ctx, ret == HM_TIMEOUT ? "peer stalled" : hm_strerror(ret));
        admit_wait_remove(ctx, sender, d);
        if (last)
            return;
        if (ctx->c_admit.ad_heaviest == sender)
            ctx->c_admit.ad_heaviest = NULL; /* it may be no longer the heaviest */
    }
}

/* Serve up to `visits` senders with replies waiting, in turn. */
static void admit_flush_ring(hm_context_t *ctx, uint32_t visits)
{
    struct hmi_list *ring = &ctx->c_admit.ad_ring;
    for (uint32_t i = 0; i < visits && !hmi_list_empty(ring); i++) {
        hm_addr_t *sender = hmi_container_of(ring->next, hm_addr_t, a_adm_ring);
        hmi_list_remove(&sender->a_adm_ring); /* to the back: the next call starts after it */
        hmi_list_push_back(ring, &sender->a_adm_ring);
        admit_flush_sender(ctx, sender);
    }
}

void hmi_admit_flush(hm_context_t *ctx)
{
    admit_flush_ring(ctx, HMI_ADMIT_FLUSH_VISITS);
}

void hmi_admit_deferred_free(hm_context_t *ctx)
{
    struct hmi_list *ring = &ctx->c_admit.ad_ring;
    while (!hmi_list_empty(ring)) {
        hm_addr_t *sender = hmi_container_of(ring->next, hm_addr_t, a_adm_ring);
        admit_wait_remove(ctx, sender,
                          hmi_container_of(sender->a_adm_waiting.next, struct admit_deferred,
                                           d_link));
    }
}

void hmi_admit_reply(hm_context_t *ctx, hm_addr_t *peer, const struct hmi_wire_header *req,
                     hm_return_t error)
{
    if (req->flags & HMI_WIRE_F_NO_RESPONSE) {
        ctx->c_stats.overload_drops++; /* no answer wanted */
        return;
    }
    struct hmi_wire_header hdr = admit_reply_header(ctx, req, error);
    admit_answer(ctx, peer, &hdr);
}

void hmi_admit_reply_done(struct hmi_send_slot *slot, hm_return_t status)
{
    hm_context_t *ctx = slot->s_ctx;
    hm_addr_t *peer = slot->s_peer;
    slot->s_peer = NULL;
    admit_reply_count(ctx, peer, false, status == HM_SUCCESS);
    admit_reply_slot_put(slot);
    hm_addr_t *sender = hmi_admit_acct(peer);
    if (sender->a_adm_deferred != 0) /* its own room first: `peer` holds the record */
        admit_flush_sender(ctx, sender);
    hm_addr_free(peer);
    hmi_admit_flush(ctx);
}

/* Idle reply slots that stayed idle a whole interval, past a few kept. */
uint32_t hmi_admit_trim(hm_context_t *ctx)
{
    struct hmi_admit *ad = &ctx->c_admit;
    admit_flush_ring(ctx, ad->ad_ring_count); /* posts that failed wait for no completion */
    uint32_t excess = ad->ad_replies_low > HMI_ADMIT_REPLIES_PEER
                          ? ad->ad_replies_low - HMI_ADMIT_REPLIES_PEER
                          : 0;
    uint32_t freed = 0;
    for (; freed < excess && !hmi_list_empty(&ad->ad_free_replies); freed++) {
        struct hmi_list *link = ad->ad_free_replies.prev;
        hmi_list_remove(link);
        hmi_send_slot_free(hmi_container_of(link, struct hmi_send_slot, s_link));
        ad->ad_replies_idle--;
    }
    ad->ad_replies_low = ad->ad_replies_idle;
    return freed;
}
