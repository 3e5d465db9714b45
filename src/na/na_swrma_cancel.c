/*
 * RMA over messages: the requester's CANCELs. A get given up while its
 * owner still streams (canceled, or failed on a bad reply) sends CANCEL for
 * each piece, so the owner drops its job at once instead of streaming the
 * rest to nobody. A CANCEL takes a requester send buffer; when none is free
 * it waits in a ring of SWRMA_CANCELS (its peer referenced), sent first at
 * the next progress. Past the ring it is lost (ss_cancels_lost): the owner
 * then streams on and the requester drops the replies as late. No answer
 * comes back.
 */
#include "na/na_swrma_int.h"

/* Send CANCEL `id` to `peer` now; false when no buffer is free (nothing sent). */
static bool cancel_post(struct hmi_swrma_ctx *s, hmi_na_addr_t *peer, uint64_t id)
{
    struct swrma_buf *b = hmi_swrma_buf_get(s, true); /* sb_req names no op */
    if (b == NULL)
        return false;
    hmi_swrma_encode_cancel(b->sb_data, id);
    if (hmi_swrma_buf_send(s, b, NULL, peer, SWRMA_HDR_SIZE) == HM_SUCCESS)
        s->s_stats.ss_cancels_sent++;
    else
        s->s_stats.ss_cancels_lost++; /* the peer is going: its jobs go with it */
    return true;
}

/* Send the CANCELs that waited for a buffer, oldest first. */
void hmi_swrma_cancels_flush(struct hmi_swrma_ctx *s)
{
    hmi_na_class_t *cls = s->s_ctx->x_class;
    while (s->s_cancel_count > 0) {
        struct swrma_cancel *c = &s->s_cancels[s->s_cancel_head];
        if (!cancel_post(s, c->c_peer, c->c_id))
            return;
        cls->c_ops.addr_unref(c->c_peer);
        c->c_peer = NULL;
        s->s_cancel_head = (s->s_cancel_head + 1) % SWRMA_CANCELS;
        s->s_cancel_count--;
    }
}

bool hmi_swrma_req_cancels_waiting(const struct hmi_swrma_ctx *s)
{
    return s->s_cancel_count > 0;
}

void hmi_swrma_cancel_send(struct hmi_swrma_ctx *s, hmi_na_addr_t *peer, uint64_t id)
{
    if (s->s_cancel_count == 0 && cancel_post(s, peer, id))
        return;
    if (s->s_cancel_count == SWRMA_CANCELS) {
        s->s_stats.ss_cancels_lost++;
        return;
    }
    unsigned int at = (s->s_cancel_head + s->s_cancel_count) % SWRMA_CANCELS;
    struct swrma_cancel *c = &s->s_cancels[at];
    s->s_ctx->x_class->c_ops.addr_ref(peer);
    c->c_peer = peer;
    c->c_id = id;
    s->s_cancel_count++;
}

void hmi_swrma_cancels_drop(struct hmi_swrma_ctx *s, hmi_na_addr_t *peer)
{
    hmi_na_class_t *cls = s->s_ctx->x_class;
    unsigned int kept = 0;
    for (unsigned int n = 0; n < s->s_cancel_count; n++) {
        struct swrma_cancel c = s->s_cancels[(s->s_cancel_head + n) % SWRMA_CANCELS];
        if (peer == NULL || c.c_peer == peer) {
            cls->c_ops.addr_unref(c.c_peer);
            continue;
        }
        s->s_cancels[(s->s_cancel_head + kept++) % SWRMA_CANCELS] = c;
    }
    s->s_cancel_count = kept;
}
