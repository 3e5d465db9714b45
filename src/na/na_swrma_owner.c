/*
 * RMA over messages: the owner's side. Every byte a peer reaches goes
 * through hmi_keytab_pin at the moment it is copied, on this side:
 *
 *  - PUT_DATA is handled statelessly: pin the range it names, copy from the
 *    receive buffer, unpin, acknowledge. Nothing is kept per request.
 *  - GET_REQ is checked whole at once (so a refusal is immediate), then
 *    queued as a job that streams the region a message at a time; each
 *    chunk is pinned again as it is copied, so a region freed mid-get stops
 *    the get with ERR HM_PERMISSION and its memory is never read after.
 *
 *  - CANCEL drops the job of that request id from that peer at once; one
 *    that names no job (finished, unknown, forged) is counted and ignored,
 *    never answered.
 *
 * Memory is bounded whatever peers send: at most s_jobs_max (HM_SWRMA_JOBS) queued jobs and
 * s_bufs_max (HM_SWRMA_BUFS) send buffers per context, and at most s_jobs_peer_max jobs of
 * one peer (the address the plugin delivered the request from; nothing in
 * the request names the peer), so one peer cannot take every record. A get
 * over the context's cap is refused with ERR HM_BUSY (the requester asks
 * again), over its peer's cap with ERR HM_OVERLOADED (the requester's op
 * fails so). A PUT_ACK or ERR that finds no send buffer is noted in its
 * peer's record (up to a requester's window) and sent when the peer's
 * share has room (hmi_swrma_peer_note_reply); past that it waits as a job,
 * and one that finds no job record either is dropped and counted
 * (ss_dropped): only a peer with more requests outstanding than a
 * requester may have loses answers.
 *
 * Every reply counts against its peer's share of the send buffers
 * (SWRMA_SHARE in flight, na_swrma_peer.c): a peer that asks and then stops
 * reading holds at most that many, its further replies wait as its jobs,
 * and other peers' gets and acknowledgements go on. Peers with jobs are
 * served round-robin, each peer's jobs in turn.
 */
#include <string.h>

#include "na/na_swrma_int.h"
#include "util/log.h"

/* Send PUT_ACK or ERR now, or queue it, or drop it (counted). */
static void owner_reply(struct hmi_swrma_ctx *s, hmi_na_addr_t *peer, enum swrma_type type,
                        uint64_t id, uint64_t value)
{
    struct swrma_peer *pr = hmi_swrma_peer_get(s, peer);
    struct swrma_buf *b = NULL;
    if (pr != NULL && hmi_swrma_peer_room(pr))
        b = hmi_swrma_buf_get(s, false);
    if (b != NULL) {
        hmi_swrma_encode_reply(b->sb_data, type, id, value);
        /* A dead peer: nobody waits. A failed send updated (maybe freed) `pr` itself. */
        if (hmi_swrma_buf_send(s, b, pr, peer, SWRMA_ACK_SIZE) == HM_SUCCESS)
            hmi_swrma_peer_update(s, pr);
        return;
    }
    /* Noted first: needs no job record, which may be what ran out. */
    if (pr != NULL && value <= UINT32_MAX &&
        hmi_swrma_peer_note_reply(s, pr, type, id, (uint32_t)value))
        return;
    struct swrma_job *job;
    if (pr == NULL || hmi_swrma_job_get(s, peer, &job) != HM_SUCCESS) {
        s->s_stats.ss_dropped++;
        s->s_jobs_short = true; /* a reason to look for stalled peers (na_swrma.c) */
        if (pr != NULL)
            hmi_swrma_peer_update(s, pr);
        return;
    }
    job->j_id = id;
    job->j_kind = SWRMA_JOB_REPLY;
    job->j_reply_type = (uint8_t)type;
    job->j_value = value;
    hmi_swrma_job_queue(s, job);
}

static void owner_refuse(struct hmi_swrma_ctx *s, hmi_na_addr_t *peer, uint64_t id,
                         hm_return_t status)
{
    if (status == HM_PERMISSION)
        s->s_stats.ss_refused++;
    else if (status == HM_BUSY) {
        s->s_stats.ss_busy++;
        s->s_jobs_short = true; /* a reason to look for stalled peers (na_swrma.c) */
    }
    else if (status == HM_OVERLOADED)
        s->s_stats.ss_overloaded++;
    owner_reply(s, peer, SWRMA_ERR, id, (uint64_t)status);
}

static void owner_put(struct hmi_swrma_ctx *s, hmi_na_addr_t *source, const struct swrma_msg *m)
{
    void *dst;
    hm_return_t ret =
        hmi_keytab_pin(m->m_slot, &m->m_key, m->m_off, m->m_len, HM_NA_ACCESS_WRITE, &dst);
    if (ret != HM_SUCCESS) {
        owner_refuse(s, source, m->m_id, ret);
        return;
    }
    memcpy(dst, m->m_data, (size_t)m->m_len);
    hmi_keytab_unpin(m->m_slot);
    owner_reply(s, source, SWRMA_PUT_ACK, m->m_id, m->m_len);
}

static void owner_get(struct hmi_swrma_ctx *s, hmi_na_addr_t *source, const struct swrma_msg *m)
{
    void *src;
    hm_return_t ret =
        hmi_keytab_pin(m->m_slot, &m->m_key, m->m_off, m->m_len, HM_NA_ACCESS_READ, &src);
    if (ret != HM_SUCCESS) {
        owner_refuse(s, source, m->m_id, ret);
        return;
    }
    hmi_keytab_unpin(m->m_slot); /* checked whole now; each chunk is pinned again */
    struct swrma_job *job;
    ret = hmi_swrma_job_get(s, source, &job);
    if (ret != HM_SUCCESS) {
        owner_refuse(s, source, m->m_id, ret);
        return;
    }
    job->j_id = m->m_id;
    job->j_kind = SWRMA_JOB_GET;
    job->j_slot = m->m_slot;
    job->j_key = m->m_key;
    job->j_off = m->m_off;
    job->j_len = m->m_len;
    job->j_sent = 0;
    job->j_max_msg = m->m_max_msg != 0 && m->m_max_msg < s->s_buf_size ? m->m_max_msg
                                                                        : s->s_buf_size;
    hmi_swrma_job_queue(s, job);
}

/*
 * CANCEL: drop the job `source` queued for request `id`. A linear walk of
 * that peer's jobs (at most its cap, no allocation); a CANCEL is sent once
 * per abandoned piece.
 */
static void owner_cancel(struct hmi_swrma_ctx *s, hmi_na_addr_t *source, uint64_t id)
{
    struct swrma_peer *pr = hmi_swrma_peer_find(s, source);
    struct hmi_list *link;
    for (link = pr != NULL ? pr->pr_jobs.next : NULL; pr != NULL && link != &pr->pr_jobs;
         link = link->next) {
        struct swrma_job *job = hmi_container_of(link, struct swrma_job, j_link);
        if (job->j_id == id) {
            hmi_list_remove(link);
            hmi_swrma_job_put(s, job);
            hmi_swrma_peer_update(s, pr);
            s->s_stats.ss_cancels++;
            return;
        }
    }
    s->s_stats.ss_cancel_unknown++; /* finished, never asked, or forged: no answer */
}

void hmi_swrma_owner_recv(struct hmi_swrma_ctx *s, hmi_na_addr_t *source,
                          const struct swrma_msg *m)
{
    if (m->m_type == SWRMA_PUT_DATA)
        owner_put(s, source, m);
    else if (m->m_type == SWRMA_CANCEL)
        owner_cancel(s, source, m->m_id);
    else
        owner_get(s, source, m);
}

/*
 * Send the next chunk of a get into `b`; true when the job is over (last
 * chunk sent, refused, or the peer unreachable).
 */
static bool owner_get_chunk(struct hmi_swrma_ctx *s, struct swrma_job *job, struct swrma_buf *b)
{
    uint64_t room = job->j_max_msg - SWRMA_DATA_SIZE; /* fits the requester's buffers */
    uint64_t chunk = job->j_len - job->j_sent < room ? job->j_len - job->j_sent : room;
    void *src;
    hm_return_t ret = hmi_keytab_pin(job->j_slot, &job->j_key, job->j_off + job->j_sent, chunk,
                                     HM_NA_ACCESS_READ, &src);
    if (ret != HM_SUCCESS) {
        /* Revoked since the request was checked: the get stops here. */
        s->s_stats.ss_refused++;
        hmi_swrma_encode_reply(b->sb_data, SWRMA_ERR, job->j_id, (uint64_t)ret);
        (void)hmi_swrma_buf_send(s, b, job->j_prec, job->j_peer, SWRMA_ACK_SIZE);
        return true;
    }
    hmi_swrma_encode_data(b->sb_data, job->j_id, job->j_sent, chunk);
    memcpy(b->sb_data + SWRMA_DATA_SIZE, src, (size_t)chunk);
    hmi_keytab_unpin(job->j_slot);
    if (hmi_swrma_buf_send(s, b, job->j_prec, job->j_peer,
                           SWRMA_DATA_SIZE + (size_t)chunk) != HM_SUCCESS)
        return true;
    job->j_sent += chunk;
    return job->j_sent == job->j_len;
}

/* Send one of `pr`'s noted replies in `b`. */
static void owner_send_note(struct hmi_swrma_ctx *s, struct swrma_peer *pr, struct swrma_buf *b)
{
    hmi_na_addr_t *peer = pr->pr_addr;
    const struct swrma_note *note = &pr->pr_notes[pr->pr_nnotes - 1];
    hmi_swrma_encode_reply(b->sb_data, (enum swrma_type)note->n_type, note->n_id,
                           note->n_value);
    /* Counted until sent: a failed send's own update must not free `pr`. */
    (void)hmi_swrma_buf_send(s, b, pr, peer, SWRMA_ACK_SIZE); /* dead peer: nobody waits */
    bool last = --pr->pr_nnotes == 0;
    hmi_swrma_peer_update(s, pr); /* to the back of the ready peers, or off (freed) */
    if (last)
        s->s_ctx->x_class->c_ops.addr_unref(peer);
}

/*
 * Send one message of the next ready peer's next job (peers, and each
 * peer's jobs, take turns); a peer whose share is full is not ready.
 */
int hmi_swrma_owner_progress(struct hmi_swrma_ctx *s)
{
    int sent = 0;
    struct swrma_buf *b;
    while (!hmi_list_empty(&s->s_owner_ready) && (b = hmi_swrma_buf_get(s, false)) != NULL) {
        struct swrma_peer *pr = hmi_container_of(hmi_list_pop_front(&s->s_owner_ready),
                                                 struct swrma_peer, pr_owner_link);
        if (pr->pr_nnotes != 0) { /* noted replies first: they wait in no job */
            owner_send_note(s, pr, b);
            sent++;
            continue;
        }
        struct swrma_job *job =
            hmi_container_of(hmi_list_pop_front(&pr->pr_jobs), struct swrma_job, j_link);
        bool over = true;
        if (job->j_kind == SWRMA_JOB_GET) {
            over = owner_get_chunk(s, job, b);
        } else {
            hmi_swrma_encode_reply(b->sb_data, job->j_reply_type, job->j_id, job->j_value);
            (void)hmi_swrma_buf_send(s, b, pr, job->j_peer, SWRMA_ACK_SIZE);
        }
        if (over)
            hmi_swrma_job_put(s, job);
        else
            hmi_list_push_back(&pr->pr_jobs, &job->j_link); /* round-robin among its gets */
        hmi_swrma_peer_update(s, pr); /* to the back of the ready peers, or off */
        sent++;
    }
    return sent;
}

/* Drop the queued jobs of `pr`. */
static void owner_drop_peer(struct hmi_swrma_ctx *s, struct swrma_peer *pr)
{
    hmi_swrma_peer_forget_notes(s, pr);
    while (!hmi_list_empty(&pr->pr_jobs)) {
        struct swrma_job *job =
            hmi_container_of(hmi_list_pop_front(&pr->pr_jobs), struct swrma_job, j_link);
        hmi_swrma_job_put(s, job);
    }
    hmi_swrma_peer_update(s, pr);
}

void hmi_swrma_owner_peer_failed(struct hmi_swrma_ctx *s, hmi_na_addr_t *peer)
{
    struct swrma_peer *pr = hmi_swrma_peer_find(s, peer);
    if (pr != NULL)
        owner_drop_peer(s, pr);
}

void hmi_swrma_owner_fini(struct hmi_swrma_ctx *s)
{
    struct hmi_list *link = s->s_peers_used.next;
    while (link != &s->s_peers_used) {
        struct hmi_list *next = link->next; /* `link` may go back to the free list */
        owner_drop_peer(s, hmi_container_of(link, struct swrma_peer, pr_all));
        link = next;
    }
}
