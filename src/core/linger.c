/*
 * Lingering pins: the bulk handles (and overflow buffer) of a request that
 * ended by timeout or cancel while the server may still be transferring
 * from them.
 *
 * A response means the server is done with the request's memory; a timeout
 * or a cancel only means the caller stopped waiting. Freeing the memory
 * then let a server's pull read freed pages: over UCX tcp the client's own
 * progress served that read and crashed (test_bulk_overflow). So the pins
 * move here and are released by whichever comes first: the late response
 * (or error reply: a server that drops an expired request says so), the
 * server's death, context destroy, or HMI_LINGER_MS.
 *
 * Late responses are rare, so records sit on a FIFO list (expiry order:
 * all get the same bound) and are matched by a scan.
 */
#include <stdlib.h>

#include "core/core_internal.h"
#include "util/log.h"
#include "util/time.h"

struct hmi_linger {
    struct hmi_list l_link;
    uint64_t l_cookie;
    hmi_na_addr_t *l_peer;    /* one reference */
    uint64_t l_expiry_ns;
    uint32_t l_npins;
    hm_bulk_t *l_pins[HMI_HANDLE_PINS + 1]; /* + the overflow buffer */
};

void hmi_linger_pins(hm_handle_t *handle)
{
    hm_context_t *ctx = handle->h_ctx;
    if (handle->h_npins == 0 && handle->h_overflow == NULL)
        return;
    struct hmi_linger *l = calloc(1, sizeof(*l));
    if (l == NULL) { /* cannot keep them: release now, as before lingering existed */
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN, "no memory to keep a request's bulk pins");
        hmi_handle_unpin(handle);
        return;
    }
    while (handle->h_npins > 0)
        l->l_pins[l->l_npins++] = handle->h_pins[--handle->h_npins];
    if (handle->h_overflow != NULL)
        l->l_pins[l->l_npins++] = handle->h_overflow;
    handle->h_overflow = NULL;
    l->l_cookie = hmi_cookie(handle->h_gen, handle->h_slot);
    l->l_peer = handle->h_addr->a_na;
    hmi_na_addr_ref(ctx->c_class->k_na, l->l_peer);
    l->l_expiry_ns = hmi_time_ns() + (uint64_t)HMI_LINGER_MS * 1000000u;
    hmi_list_push_back(&ctx->c_linger, &l->l_link);
    ctx->c_stats.pins_lingering++;
}

static void linger_release(hm_context_t *ctx, struct hmi_linger *l)
{
    hmi_list_remove(&l->l_link);
    while (l->l_npins > 0)
        hm_bulk_free(l->l_pins[--l->l_npins]);
    hmi_na_addr_unref(ctx->c_class->k_na, l->l_peer);
    free(l);
}

bool hmi_linger_response(hm_context_t *ctx, uint64_t cookie)
{
    struct hmi_list *link = ctx->c_linger.next;
    while (link != &ctx->c_linger) {
        struct hmi_linger *l = hmi_container_of(link, struct hmi_linger, l_link);
        if (l->l_cookie == cookie) {
            linger_release(ctx, l);
            return true;
        }
        link = link->next;
    }
    return false;
}

void hmi_linger_peer(hm_context_t *ctx, hmi_na_addr_t *peer)
{
    struct hmi_list *link = ctx->c_linger.next;
    while (link != &ctx->c_linger) {
        struct hmi_list *next = link->next;
        struct hmi_linger *l = hmi_container_of(link, struct hmi_linger, l_link);
        if (l->l_peer == peer)
            linger_release(ctx, l);
        link = next;
    }
}

void hmi_linger_expire(hm_context_t *ctx, uint64_t now_ns)
{
    while (!hmi_list_empty(&ctx->c_linger)) {
        struct hmi_linger *l = hmi_container_of(ctx->c_linger.next, struct hmi_linger, l_link);
        if (l->l_expiry_ns > now_ns)
            return;
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_INFO,
                "bulk handles of a request that timed out released after %u ms without "
                "a late response",
                HMI_LINGER_MS);
        linger_release(ctx, l);
    }
}

uint32_t hmi_linger_ref_all(hm_context_t *ctx, hm_bulk_t **out)
{
    uint32_t count = 0;
    for (struct hmi_list *link = ctx->c_linger.next; link != &ctx->c_linger; link = link->next) {
        struct hmi_linger *l = hmi_container_of(link, struct hmi_linger, l_link);
        for (uint32_t i = 0; i < l->l_npins; i++, count++) {
            if (out == NULL)
                continue;
            hm_bulk_ref(l->l_pins[i]);
            out[count] = l->l_pins[i];
        }
    }
    return count;
}

void hmi_linger_release_all(hm_context_t *ctx)
{
    while (!hmi_list_empty(&ctx->c_linger))
        linger_release(ctx, hmi_container_of(ctx->c_linger.next, struct hmi_linger, l_link));
}
