/*
 * Credits (DESIGN §6): a limit of requests in flight per peer context and
 * per context. A request takes a credit when it leaves and gives it back
 * when it ends (response, timeout, cancel, dead peer, failed send). Past a
 * limit the request waits, staged in its handle, on its peer's queue; peers
 * with a queue wait in the order they blocked. Whenever credits return, the
 * next progress pass sends what waits, oldest first per peer. A request
 * never overtakes an older one to the same peer: it queues behind it even
 * when a credit is free.
 *
 * So a server never sees more than credits_per_peer requests of one client
 * context outstanding: its receive buffers cannot be overrun by it.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core_internal.h"
#include "util/log.h"

static uint32_t credit_env(uint32_t value)
{
    const char *env = getenv("HM_CREDITS");
    if (env == NULL || *env == '\0')
        return value;
    char *end;
    unsigned long parsed = strtoul(env, &end, 10);
    if (*end != '\0' || parsed > UINT32_MAX) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN, "HM_CREDITS=%s ignored (a count, 0: none)",
                env);
        return value;
    }
    return (uint32_t)parsed;
}

hm_return_t hmi_credit_init(hm_context_t *ctx, const hm_context_opts_t *opts)
{
    uint64_t mask = opts ? opts->field_mask : 0;
    ctx->c_credits_peer = (mask & HM_CONTEXT_OPT_CREDITS_PEER) ? opts->credits_per_peer
                                                              : HM_CREDITS_PER_PEER_DEFAULT;
    ctx->c_credits_peer = credit_env(ctx->c_credits_peer);
    ctx->c_credits_total = (mask & HM_CONTEXT_OPT_CREDITS_TOTAL) ? opts->credits_total
                                                                : HM_CREDITS_TOTAL_DEFAULT;
    hmi_list_init(&ctx->c_waiting_peers);
    return hmi_hmap_init(&ctx->c_peers, 16);
}

static void credit_peer_free(uint64_t key, void *value, void *arg)
{
    (void)key;
    hm_context_t *ctx = arg;
    struct hmi_peer *peer = value;
    hmi_na_addr_unref(ctx->c_class->k_na, peer->p_na);
    free(peer);
}

void hmi_credit_fini(hm_context_t *ctx)
{
    hmi_hmap_foreach(&ctx->c_peers, credit_peer_free, ctx);
    hmi_hmap_destroy(&ctx->c_peers);
}

static uint64_t credit_key(hmi_na_addr_t *na, uint16_t index)
{
    return ((uint64_t)(uintptr_t)na << 16) | index; /* as the address cache */
}

static struct hmi_peer *credit_peer(hm_context_t *ctx, const hm_addr_t *addr)
{
    uint64_t key = credit_key(addr->a_na, addr->a_ctx_index);
    struct hmi_peer *peer = hmi_hmap_get(&ctx->c_peers, key);
    if (peer != NULL)
        return peer;
    peer = calloc(1, sizeof(*peer));
    if (peer == NULL)
        return NULL;
    peer->p_na = addr->a_na;
    peer->p_index = addr->a_ctx_index;
    hmi_list_init(&peer->p_queue);
    hmi_list_init(&peer->p_wait_link);
    if (hmi_hmap_put(&ctx->c_peers, key, peer) != HM_SUCCESS) {
        free(peer);
        return NULL;
    }
    hmi_na_addr_ref(ctx->c_class->k_na, peer->p_na); /* the key stays this peer's */
    return peer;
}

static bool credit_available(const hm_context_t *ctx, const struct hmi_peer *peer)
{
    return (ctx->c_credits_peer == 0 || peer->p_inflight < ctx->c_credits_peer) &&
           (ctx->c_credits_total == 0 || ctx->c_inflight < ctx->c_credits_total);
}

static void credit_grant(hm_context_t *ctx, struct hmi_peer *peer, hm_handle_t *handle)
{
    peer->p_inflight++;
    ctx->c_inflight++;
    handle->h_credit = true;
}

bool hmi_credit_take(hm_context_t *ctx, hm_handle_t *handle)
{
    struct hmi_peer *peer = credit_peer(ctx, handle->h_addr);
    handle->h_peer = peer;
    if (peer == NULL) { /* no memory for the record: send uncounted rather than fail */
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN, "out of memory for a peer's credits");
        return true;
    }
    if (!hmi_list_empty(&peer->p_queue) || !credit_available(ctx, peer))
        return false;
    credit_grant(ctx, peer, handle);
    return true;
}

void hmi_credit_queue(hm_context_t *ctx, hm_handle_t *handle)
{
    struct hmi_peer *peer = handle->h_peer;
    if (hmi_list_empty(&peer->p_queue))
        hmi_list_push_back(&ctx->c_waiting_peers, &peer->p_wait_link);
    hmi_list_push_back(&peer->p_queue, &handle->h_link);
    handle->h_queued = true;
    ctx->c_queued++;
    ctx->c_stats.credit_waits++;
    if (ctx->c_queued > ctx->c_stats.credit_queue_peak)
        ctx->c_stats.credit_queue_peak = ctx->c_queued;
}

static void credit_unqueue(hm_context_t *ctx, hm_handle_t *handle)
{
    struct hmi_peer *peer = handle->h_peer;
    hmi_list_remove(&handle->h_link);
    handle->h_queued = false;
    ctx->c_queued--;
    if (hmi_list_empty(&peer->p_queue))
        hmi_list_remove(&peer->p_wait_link);
}

void hmi_credit_end(hm_context_t *ctx, hm_handle_t *handle)
{
    if (handle->h_queued)
        credit_unqueue(ctx, handle);
    if (handle->h_credit) {
        handle->h_peer->p_inflight--;
        ctx->c_inflight--;
        handle->h_credit = false;
        if (handle->h_peer->p_inflight != 0) /* answers still due from it */
            hmi_na_peer_expect(ctx->c_na, handle->h_peer->p_na);
    }
    handle->h_peer = NULL;
}

/* Send from `peer`'s queue while it has credits. */
static void credit_pump_peer(hm_context_t *ctx, struct hmi_peer *peer)
{
    while (!hmi_list_empty(&peer->p_queue) && credit_available(ctx, peer)) {
        struct hmi_list *link = peer->p_queue.next;
        hm_handle_t *handle = hmi_container_of(link, hm_handle_t, h_link);
        credit_unqueue(ctx, handle); /* may take the peer off the waiting list */
        handle->h_peer = peer;
        credit_grant(ctx, peer, handle);
        hmi_forward_send_staged(handle);
    }
}

void hmi_credit_pump(hm_context_t *ctx)
{
    /* One round over the peers that wait, in the order they blocked; a peer
     * still blocked afterwards goes to the back, so none starves another. */
    struct hmi_list round;
    hmi_list_init(&round);
    hmi_list_splice_back(&round, &ctx->c_waiting_peers);
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&round)) != NULL) {
        struct hmi_peer *peer = hmi_container_of(link, struct hmi_peer, p_wait_link);
        hmi_list_push_back(&ctx->c_waiting_peers, &peer->p_wait_link);
        credit_pump_peer(ctx, peer); /* leaves the list once its queue is empty */
        if (ctx->c_credits_total != 0 && ctx->c_inflight >= ctx->c_credits_total)
            break;
    }
    /* Peers this round did not reach stay ahead of the ones it moved back. */
    hmi_list_splice_back(&round, &ctx->c_waiting_peers);
    hmi_list_splice_back(&ctx->c_waiting_peers, &round);
}

struct credit_match {
    hmi_na_addr_t *na;
    uint64_t keys[64];
    size_t count;
};

static void credit_collect(uint64_t key, void *value, void *arg)
{
    struct credit_match *match = arg;
    const struct hmi_peer *peer = value;
    if (peer->p_na == match->na && match->count < 64 && peer->p_inflight == 0 &&
        hmi_list_empty(&peer->p_queue))
        match->keys[match->count++] = key;
}

void hmi_credit_drop_peer(hm_context_t *ctx, hmi_na_addr_t *na)
{
    /* Its requests have all ended (hmi_forward_fail_peer ran first). A peer
     * with more than 64 contexts keeps the rest until the context ends. */
    struct credit_match match = {.na = na};
    hmi_hmap_foreach(&ctx->c_peers, credit_collect, &match);
    for (size_t i = 0; i < match.count; i++)
        credit_peer_free(0, hmi_hmap_remove(&ctx->c_peers, match.keys[i]), ctx);
}
