/*
 * Send contexts: what each fi_send is posted with (struct ofi_sendctx).
 *
 * Why not the op itself. The core reuses an op as soon as it has
 * completed. When a peer fails, the plugin ends the sends to it that the
 * provider still holds, without waiting for completions that rxm may bring
 * late (an EPIPE after the connection broke) or never (what it forgot with
 * the connection). Had the send been posted with the op as its context, a
 * late completion would end the op's next use, a send to another peer, and
 * could declare that live peer dead (objstore kill-r2 over ofi+tcp, CI,
 * 2026-11-27: "op completed twice", then a live rank "dead: Transport
 * endpoint is not connected"), or touch an op the core has freed. With a
 * context of its own per post, the ended send's context stays behind as a
 * tomb and its late completion finds only that.
 *
 * Cost: one list pop at post and one push at completion. Contexts come
 * in chunks of SENDCTX_CHUNK, one made at open: a server answering 64
 * RPCs in flight made a context per new peak of sends posted at once, and
 * core_alloc's no-allocation check caught 49 allocations in its steady
 * state. The pool grows to the most sends posted at once, plus the
 * tombs. A tomb whose completion never comes (rxm forgets the unfinished
 * segments of a large send on a closed connection) would stay until the
 * endpoint closes, and a server whose clients keep dying with responses
 * in flight would grow without bound. So a tomb older than OFI_TOMB_NS
 * goes back to the pool when the next one is made: rxm makes a closed
 * connection's completions while closing it (rxm_close_conn reads the tcp
 * provider's CQ to the end), and the old rule's wait for them ended
 * within 31 ms in the runs measured (ARCHITECTURE, "Peer failure").
 */
#include <stdlib.h>

#include "na/ofi/ofi_internal.h"
#include "util/compiler.h"
#include "util/log.h"

#define SENDCTX_CHUNK 64u

/* One allocation of SENDCTX_CHUNK contexts, on x_sendctx_chunks. */
struct sendctx_chunk {
    struct hmi_list c_link;
    struct ofi_sendctx c_ctx[SENDCTX_CHUNK];
};

/* SENDCTX_CHUNK more contexts onto the free list; false when out of memory. */
static bool sendctx_grow(struct ofi_context *x)
{
    struct sendctx_chunk *chunk = calloc(1, sizeof(*chunk));
    if (chunk == NULL)
        return false;
    hmi_list_push_back(&x->x_sendctx_chunks, &chunk->c_link);
    for (unsigned int i = 0; i < SENDCTX_CHUNK; i++) {
        struct ofi_sendctx *s = &chunk->c_ctx[i];
        s->s_req.r_kind = OFI_REQ_SEND;
        hmi_list_push_back(&x->x_sendctx_free, &s->s_link);
    }
    return true;
}

void hmi_ofi_sendctx_open(struct ofi_context *x)
{
    hmi_list_init(&x->x_sendctx_free);
    hmi_list_init(&x->x_sendctx_chunks);
    hmi_list_init(&x->x_tombs);
    (void)sendctx_grow(x); /* else the first send tries again */
}

void hmi_ofi_sendctx_close(struct ofi_context *x)
{
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&x->x_sendctx_chunks)) != NULL)
        free(hmi_container_of(link, struct sendctx_chunk, c_link));
    hmi_list_init(&x->x_sendctx_free);
    hmi_list_init(&x->x_tombs);
}

struct ofi_sendctx *hmi_ofi_sendctx_take(struct ofi_context *x, struct ofi_op *p)
{
    if (hmi_unlikely(hmi_list_empty(&x->x_sendctx_free)) && !sendctx_grow(x))
        return NULL;
    struct ofi_sendctx *s =
        hmi_container_of(hmi_list_pop_front(&x->x_sendctx_free), struct ofi_sendctx, s_link);
    s->s_op = p;
    p->p_sctx = s;
    return s;
}

void hmi_ofi_sendctx_untake(struct ofi_context *x, struct ofi_op *p)
{
    struct ofi_sendctx *s = p->p_sctx;
    p->p_sctx = NULL;
    s->s_op = NULL;
    hmi_list_push_front(&x->x_sendctx_free, &s->s_link);
}

struct ofi_op *hmi_ofi_sendctx_done(struct ofi_context *x, struct ofi_sendctx *s)
{
    struct ofi_op *p = s->s_op;
    if (hmi_unlikely(p == NULL)) {
        if (!s->s_tomb) { /* in the pool: a tomb's completion after OFI_TOMB_NS */
            hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN,
                    "ofi: a completion for a send ended over a minute ago: ignored");
            return NULL;
        }
        hmi_list_remove(&s->s_link); /* off x_tombs */
        s->s_tomb = false;
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG,
                "ofi: a completion for a send already ended (a failed peer's)");
    } else {
        p->p_sctx = NULL;
        s->s_op = NULL;
    }
    hmi_list_push_front(&x->x_sendctx_free, &s->s_link);
    return p;
}

/* Back to the pool: the tombs (oldest first on x_tombs) made before
 * `now` - OFI_TOMB_NS. */
static void sendctx_expire(struct ofi_context *x, uint64_t now)
{
    while (!hmi_list_empty(&x->x_tombs)) {
        struct ofi_sendctx *s = hmi_container_of(x->x_tombs.next, struct ofi_sendctx, s_link);
        if (now - s->s_buried_ns < OFI_TOMB_NS)
            break;
        hmi_list_remove(&s->s_link);
        s->s_tomb = false;
        hmi_list_push_back(&x->x_sendctx_free, &s->s_link);
    }
}

void hmi_ofi_sendctx_bury(struct ofi_context *x, struct ofi_op *p, uint64_t now)
{
    struct ofi_sendctx *s = p->p_sctx;
    sendctx_expire(x, now);
    p->p_sctx = NULL;
    s->s_op = NULL;
    s->s_tomb = true;
    s->s_buried_ns = now;
    hmi_list_push_back(&x->x_tombs, &s->s_link);
}
