/*
 * RMA over messages: the requester's side.
 *
 * A posted op takes an entry of the context's table; the request id of its
 * piece p is (entry generation << 32 | entry index << 8 | p), so a reply
 * names its op and piece, and a reply for an entry's older use (late, after
 * cancel, forged) fails the generation check and is dropped (ss_late).
 *
 * A get sends one GET_REQ per piece; the owner streams the piece back in
 * GET_DATA messages; each must lie within the piece and overlap no byte
 * already placed (checked before the one copy into local memory), so the
 * piece is complete exactly when its bytes add up. A duplicate, overlapping
 * or too long GET_DATA fails the op (HM_PROTOCOL_ERROR): counting bytes
 * alone once let a hostile owner complete a get with part of it never
 * written. Order is not relied on: ofi+tcp was seen to deliver a piece's
 * chunks out of order under load. A piece keeps p_done, its prefix placed
 * without a gap; runs placed past a gap wait in q_ahead (at most
 * SWRMA_AHEAD per op; an owner has at most SWRMA_SHARE messages in flight to us)
 * and join the prefix when the gap fills; more than that fails the op. A get given up (canceled,
 * or failed on a bad reply) sends CANCEL for each piece still streaming, so
 * the owner drops its job. A put cuts each piece into PUT_DATA messages
 * of what fits in one, at most SWRMA_WINDOW unacknowledged per op. Ops with
 * a message to send wait on their peer's pr_sendq; peers take send buffers
 * in turn (at most SWRMA_REQ_BUFS, SWRMA_SHARE per peer), and each peer's
 * ops in turn; progress continues them. Per peer, at most s_window requests
 * (GET_REQ pieces unanswered, PUT_DATA unacknowledged, q_inflight summed in
 * pr_asked) are outstanding, below the owner's per-peer job cap, so however
 * many ops a caller starts its owner never refuses them over that cap; the
 * rest wait here (ss_window_waits). An op completes once, when every byte is
 * placed or acknowledged, or at its first error.
 */
#include <stdlib.h>
#include <string.h>

#include "na/na_swrma_int.h"
#include "util/log.h"

#define REQ_PIECE_BITS 8u
#define REQ_INDEX_MASK 0xffffffu

_Static_assert(HM_NA_RMA_IOV_MAX <= (1u << REQ_PIECE_BITS), "piece index fits the id");

static uint64_t req_id(const struct swrma_op *q, unsigned int piece)
{
    return (uint64_t)q->q_gen << 32 | (uint64_t)q->q_index << REQ_PIECE_BITS | piece;
}

/* The live op `id` names and its piece, or NULL. */
static struct swrma_op *req_lookup(struct hmi_swrma_ctx *s, uint64_t id, unsigned int *piece)
{
    uint32_t index = (uint32_t)(id >> REQ_PIECE_BITS) & REQ_INDEX_MASK;
    if (index >= s->s_table_size)
        return NULL;
    struct swrma_entry *e = &s->s_table[index];
    if (e->e_op == NULL || e->e_gen != (uint32_t)(id >> 32))
        return NULL;
    *piece = (unsigned int)(id & ((1u << REQ_PIECE_BITS) - 1));
    return *piece < e->e_op->q_count ? e->e_op : NULL;
}

/* Double the table (warm-up only); false at the cap or without memory. */
static bool req_table_grow(struct hmi_swrma_ctx *s)
{
    uint32_t old = s->s_table_size;
    uint32_t size = old ? old * 2 : SWRMA_TABLE_MIN;
    if (size > SWRMA_TABLE_MAX)
        return false;
    struct swrma_entry *table = realloc(s->s_table, size * sizeof(*table));
    if (table == NULL)
        return false;
    for (uint32_t i = old; i < size; i++)
        table[i] = (struct swrma_entry){
            .e_next_free = i + 1 < size ? i + 1 : s->s_table_free};
    s->s_table = table;
    s->s_table_size = size;
    s->s_table_free = old;
    return true;
}

static hm_return_t req_table_take(struct hmi_swrma_ctx *s, struct swrma_op *q)
{
    if (s->s_table_free == UINT32_MAX && !req_table_grow(s))
        return HM_NOMEM;
    uint32_t index = s->s_table_free;
    struct swrma_entry *e = &s->s_table[index];
    s->s_table_free = e->e_next_free;
    e->e_gen = e->e_gen + 1 ? e->e_gen + 1 : 1; /* never 0: no id is 0 */
    e->e_op = q;
    q->q_index = index;
    q->q_gen = e->e_gen;
    q->q_posted = true;
    s->s_live_ops++;
    return HM_SUCCESS;
}

/* Give back `q`'s entry and its share of its peer (window, live ops). */
static void req_release(struct hmi_swrma_ctx *s, struct swrma_op *q)
{
    struct swrma_entry *e = &s->s_table[q->q_index];
    e->e_op = NULL;
    e->e_next_free = s->s_table_free;
    s->s_table_free = q->q_index;
    s->s_live_ops--;
    q->q_posted = false;
    hmi_list_remove(&q->q_sendq);
    struct swrma_peer *pr = q->q_prec;
    q->q_prec = NULL;
    pr->pr_asked -= q->q_inflight; /* given up or done: no longer outstanding here */
    q->q_inflight = 0;
    pr->pr_ops--;
    hmi_swrma_peer_update(s, pr);
}

/* Complete `q` with `status`: its entry is freed, its local bytes no longer touched. */
static void req_finish(struct hmi_swrma_ctx *s, struct swrma_op *q, hm_return_t status)
{
    req_release(s, q);
    if (s->s_in_post)
        hmi_na_op_complete_deferred(q->q_op, status);
    else
        hmi_na_op_complete(q->q_op, status);
}

/* Has `q` a message it may send now? */
static bool req_can_send(const struct swrma_op *q)
{
    for (unsigned int i = 0; i < q->q_count; i++) {
        const struct swrma_piece *p = &q->q_pieces[i];
        if (p->p_next < p->p_len)
            return q->q_dir == HM_NA_RMA_GET || q->q_inflight < SWRMA_WINDOW;
    }
    return false;
}

/* `q` to the back of its peer's ops, if it has a message to send. */
static void req_enqueue(struct hmi_swrma_ctx *s, struct swrma_op *q)
{
    if (!hmi_list_linked(&q->q_sendq) && req_can_send(q))
        hmi_list_push_back(&q->q_prec->pr_sendq, &q->q_sendq);
    hmi_swrma_peer_update(s, q->q_prec);
}

/* One request of `q` answered (piece placed, PUT_DATA acknowledged, refused busy). */
static void req_answered(struct swrma_op *q)
{
    q->q_inflight--;
    q->q_prec->pr_asked--;
}

/* Fill `b` with the next message of `q`; its length. */
static size_t req_fill(struct hmi_swrma_ctx *s, struct swrma_op *q, struct swrma_buf *b)
{
    unsigned int i = 0;
    while (q->q_pieces[i].p_next == q->q_pieces[i].p_len)
        i++; /* req_can_send said one is left */
    struct swrma_piece *p = &q->q_pieces[i];
    b->sb_req = req_id(q, i);
    if (q->q_dir == HM_NA_RMA_GET) {
        hmi_swrma_encode_req(b->sb_data, SWRMA_GET_REQ, b->sb_req, p->p_slot, &p->p_key,
                             p->p_remote_off, p->p_len);
        hmi_swrma_encode_get_max(b->sb_data, s->s_buf_size);
        p->p_next = p->p_len;
        return SWRMA_REQ_SIZE;
    }
    uint64_t room = s->s_buf_size - SWRMA_REQ_SIZE;
    uint64_t chunk = p->p_len - p->p_next < room ? p->p_len - p->p_next : room;
    hmi_swrma_encode_req(b->sb_data, SWRMA_PUT_DATA, b->sb_req, p->p_slot, &p->p_key,
                         p->p_remote_off + p->p_next, chunk);
    memcpy(b->sb_data + SWRMA_REQ_SIZE, p->p_local + p->p_next, (size_t)chunk);
    p->p_next += chunk;
    return SWRMA_REQ_SIZE + (size_t)chunk;
}

int hmi_swrma_req_progress(struct hmi_swrma_ctx *s)
{
    int sent = 0;
    struct swrma_buf *b;
    hmi_swrma_cancels_flush(s);
    if (s->s_cancel_count > 0)
        return 0; /* no buffer for the requester */
    while (!hmi_list_empty(&s->s_req_ready) && (b = hmi_swrma_buf_get(s, true)) != NULL) {
        struct swrma_peer *pr = hmi_container_of(hmi_list_pop_front(&s->s_req_ready),
                                                 struct swrma_peer, pr_req_link);
        struct swrma_op *q =
            hmi_container_of(hmi_list_pop_front(&pr->pr_sendq), struct swrma_op, q_sendq);
        size_t len = req_fill(s, q, b);
        hm_return_t ret = hmi_swrma_buf_send(s, b, pr, q->q_peer, len);
        if (ret != HM_SUCCESS) {
            req_finish(s, q, ret); /* puts its peer back in turn, or gives it back */
            continue;
        }
        q->q_inflight++;
        pr->pr_asked++;
        req_enqueue(s, q); /* to the back: peers, and a peer's ops, take turns */
        sent++;
    }
    return sent;
}

/* First use of `op` with this engine: its state, kept until hmi_na_op_destroy. */
static struct swrma_op *req_op_state(hmi_na_op_t *op)
{
    if (op->o_rma == NULL) {
        struct swrma_op *q = calloc(1, sizeof(*q));
        if (q == NULL)
            return NULL;
        q->q_op = op;
        hmi_list_init(&q->q_sendq);
        op->o_rma = q;
    }
    return op->o_rma;
}

/* Copy the caller's pieces; zero-length ones count as done. */
static void req_copy_pieces(struct swrma_op *q, const struct hmi_na_rma_piece *pieces,
                            unsigned int count)
{
    q->q_count = count;
    q->q_left = 0;
    q->q_inflight = 0;
    q->q_nahead = 0;
    for (unsigned int i = 0; i < count; i++) {
        const struct hmi_na_rkey *k = pieces[i].rp_rkey;
        q->q_pieces[i] = (struct swrma_piece){
            .p_local = (unsigned char *)pieces[i].rp_local->m_base + pieces[i].rp_local_off,
            .p_slot = k->k_slot,
            .p_key = k->k_key,
            .p_remote_off = pieces[i].rp_remote_off,
            .p_len = pieces[i].rp_len,
        };
        q->q_left += pieces[i].rp_len;
    }
}

hm_return_t hmi_swrma_rma(hmi_na_context_t *ctx, hmi_na_op_t *op, enum hmi_na_rma_dir dir,
                          hmi_na_addr_t *peer, const struct hmi_na_rma_piece *pieces,
                          unsigned int count)
{
    struct hmi_swrma_ctx *s = swrma_of(ctx);
    struct swrma_op *q = req_op_state(op);
    if (q == NULL)
        return HM_NOMEM;
    struct swrma_peer *pr = hmi_swrma_peer_get(s, peer);
    if (pr == NULL)
        return HM_NOMEM;
    hm_return_t ret = req_table_take(s, q);
    if (ret != HM_SUCCESS) {
        hmi_swrma_peer_update(s, pr); /* gives it back if it was made for this op */
        return ret;
    }
    pr->pr_ops++;
    q->q_prec = pr;
    q->q_peer = peer;
    q->q_dir = dir;
    req_copy_pieces(q, pieces, count);
    s->s_in_post = true;
    if (q->q_left == 0)
        req_finish(s, q, HM_SUCCESS);
    else
        req_enqueue(s, q);
    hmi_swrma_req_progress(s); /* the first messages leave now */
    s->s_in_post = false;
    return HM_SUCCESS;
}

/* `q`, a live get, is given up: tell the owner to stop each piece it still streams. */
static void req_cancel_remote(struct hmi_swrma_ctx *s, struct swrma_op *q)
{
    if (q->q_dir != HM_NA_RMA_GET)
        return; /* a put's owner keeps nothing per request */
    for (unsigned int i = 0; i < q->q_count; i++) {
        const struct swrma_piece *p = &q->q_pieces[i];
        if (p->p_next == p->p_len && p->p_done < p->p_len) /* asked, not all joined */
            hmi_swrma_cancel_send(s, q->q_peer, req_id(q, i));
    }
}

hm_return_t hmi_swrma_cancel(hmi_na_context_t *ctx, hmi_na_op_t *op)
{
    struct swrma_op *q = op->o_rma;
    if (q == NULL || !q->q_posted)
        return HM_NOENTRY;
    struct hmi_swrma_ctx *s = swrma_of(ctx);
    req_cancel_remote(s, q);
    req_finish(s, q, HM_CANCELED);
    return HM_SUCCESS;
}

void hmi_swrma_op_free(hmi_na_op_t *op)
{
    free(op->o_rma);
    op->o_rma = NULL;
}

/* A reply that contradicts its op: the op fails, the message is counted. */
static void req_bad_reply(struct hmi_swrma_ctx *s, struct swrma_op *q)
{
    s->s_stats.ss_malformed++;
    req_cancel_remote(s, q);
    req_finish(s, q, HM_PROTOCOL_ERROR);
}

/* Does [off, off + len) of piece `piece` overlap a run placed ahead? Runs of it (out). */
static bool req_ahead_overlaps(const struct swrma_op *q, unsigned int piece, uint64_t off,
                               uint64_t len, unsigned int *runs)
{
    *runs = 0;
    for (unsigned int i = 0; i < q->q_nahead; i++) {
        const struct swrma_run *r = &q->q_ahead[i];
        if (r->r_piece != piece)
            continue;
        (*runs)++;
        if (off < r->r_off + r->r_len && r->r_off < off + len)
            return true;
    }
    return false;
}

/* Grow piece `piece`'s prefix over the runs that now start where it ends. */
static void req_ahead_join(struct swrma_op *q, unsigned int piece)
{
    struct swrma_piece *p = &q->q_pieces[piece];
    for (unsigned int i = 0; i < q->q_nahead;) {
        struct swrma_run *r = &q->q_ahead[i];
        if (r->r_piece == piece && r->r_off == p->p_done) {
            p->p_done += r->r_len;
            *r = q->q_ahead[--q->q_nahead];
            i = 0; /* the next run may be anywhere */
            continue;
        }
        i++;
    }
}

/*
 * Is GET_DATA [off, off + len) new bytes of the piece: within it, not before
 * its prefix's end, overlapping no run, and room to keep it if it is ahead?
 */
static bool req_data_fits(const struct swrma_op *q, unsigned int piece, uint64_t off,
                          uint64_t len)
{
    const struct swrma_piece *p = &q->q_pieces[piece];
    unsigned int runs;
    if (off < p->p_done || off > p->p_len || len > p->p_len - off ||
        req_ahead_overlaps(q, piece, off, len, &runs))
        return false;
    return off == p->p_done || q->q_nahead < SWRMA_AHEAD;
}

static void req_get_data(struct hmi_swrma_ctx *s, struct swrma_op *q, unsigned int piece,
                         const struct swrma_msg *m)
{
    struct swrma_piece *p = &q->q_pieces[piece];
    if (q->q_dir != HM_NA_RMA_GET || p->p_next != p->p_len ||
        !req_data_fits(q, piece, m->m_off, m->m_len)) {
        req_bad_reply(s, q);
        return;
    }
    memcpy(p->p_local + m->m_off, m->m_data, (size_t)m->m_len);
    q->q_left -= m->m_len;
    if (m->m_off == p->p_done) {
        p->p_done += m->m_len;
        req_ahead_join(q, piece);
    } else {
        q->q_ahead[q->q_nahead++] =
            (struct swrma_run){.r_off = m->m_off, .r_len = m->m_len, .r_piece = piece};
    }
    if (p->p_done == p->p_len) {
        req_answered(q);
        hmi_swrma_peer_update(s, q->q_prec); /* the window may let another op ask */
    }
    if (q->q_left == 0)
        req_finish(s, q, HM_SUCCESS);
}

static void req_put_ack(struct hmi_swrma_ctx *s, struct swrma_op *q, unsigned int piece,
                        const struct swrma_msg *m)
{
    struct swrma_piece *p = &q->q_pieces[piece];
    if (q->q_dir != HM_NA_RMA_PUT || m->m_len > p->p_next - p->p_done || q->q_inflight == 0) {
        req_bad_reply(s, q);
        return;
    }
    p->p_done += m->m_len;
    q->q_left -= m->m_len;
    req_answered(q);
    if (q->q_left == 0)
        req_finish(s, q, HM_SUCCESS);
    else
        req_enqueue(s, q);
}

/* ERR: a get refused for being busy is asked again; anything else ends the op. */
static void req_err(struct hmi_swrma_ctx *s, struct swrma_op *q, unsigned int piece,
                    const struct swrma_msg *m)
{
    struct swrma_piece *p = &q->q_pieces[piece];
    unsigned int runs = 0;
    if (q->q_dir == HM_NA_RMA_GET)
        (void)req_ahead_overlaps(q, piece, 0, 0, &runs); /* counts the piece's runs */
    if (m->m_status == HM_BUSY && q->q_dir == HM_NA_RMA_GET && p->p_done == 0 && runs == 0 &&
        p->p_next == p->p_len) {
        p->p_next = 0;
        req_answered(q);
        req_enqueue(s, q);
        return;
    }
    req_finish(s, q, (hm_return_t)m->m_status);
}

void hmi_swrma_req_recv(struct hmi_swrma_ctx *s, hmi_na_addr_t *source,
                        const struct swrma_msg *m)
{
    unsigned int piece;
    struct swrma_op *q = req_lookup(s, m->m_id, &piece);
    if (q == NULL) {
        s->s_stats.ss_late++;
        return;
    }
    /* Ids are small and guessable: only the op's owner may answer it. */
    if (source != q->q_peer) {
        s->s_stats.ss_foreign++;
        static struct hmi_log_limit foreign_log; /* a peer can cause it: rate-limited */
        hmi_log_limited(&foreign_log, HMI_SUBSYS_NA, HMI_LOG_WARN,
                        "RMA reply for op 0x%llx from a peer that is not its owner: dropped",
                        (unsigned long long)m->m_id);
        return;
    }
    hmi_na_addr_t *peer = q->q_peer;
    if (m->m_type == SWRMA_GET_DATA)
        req_get_data(s, q, piece, m);
    else if (m->m_type == SWRMA_PUT_ACK)
        req_put_ack(s, q, piece, m);
    else
        req_err(s, q, piece, m);
    if (req_lookup(s, m->m_id, &piece) != NULL) /* more of it to come */
        hmi_na_peer_expect(s->s_ctx, peer);
}

void hmi_swrma_req_send_failed(struct hmi_swrma_ctx *s, uint64_t id, hm_return_t status)
{
    unsigned int piece;
    struct swrma_op *q = req_lookup(s, id, &piece);
    if (q != NULL)
        req_finish(s, q, status);
}

/* Complete every live op with `peer` (NULL: every op) with `status`. */
static void req_end_all(struct hmi_swrma_ctx *s, hmi_na_addr_t *peer, hm_return_t status)
{
    for (uint32_t i = 0; i < s->s_table_size && s->s_live_ops > 0; i++) {
        struct swrma_op *q = s->s_table[i].e_op;
        if (q != NULL && (peer == NULL || q->q_peer == peer))
            req_finish(s, q, status);
    }
}

void hmi_swrma_req_peer_failed(struct hmi_swrma_ctx *s, hmi_na_addr_t *peer)
{
    req_end_all(s, peer, HM_UNREACHABLE);
    hmi_swrma_cancels_drop(s, peer);
}

void hmi_swrma_req_fini(struct hmi_swrma_ctx *s)
{
    req_end_all(s, NULL, HM_CANCELED);
    hmi_swrma_cancels_drop(s, NULL);
}
