/*
 * RMA over messages: per-peer records (issue 13, a peer that stops
 * reading). A peer is the address the plugin delivered a message from (or
 * an op was posted to), never a field of a message. Its record holds:
 *
 *  - its share: send buffers in flight to it, at most SWRMA_SHARE of the
 *    context's s_bufs_max (HM_SWRMA_BUFS). A peer that stops reading holds
 *    at most that many; its further messages wait in its own queues while every other
 *    peer's go on;
 *  - the owner's jobs for it (at most s_jobs_peer_max), served in turn;
 *  - the requester's ops with a message for it, and its window: requests
 *    outstanding there (GET_REQ pieces unanswered, PUT_DATA unacknowledged),
 *    at most s_window, below the owner's per-peer job cap.
 *
 * Peers that may send are on s_owner_ready / s_req_ready, served
 * round-robin.
 *
 * The share bounds one peer, not a coalition: s_bufs_max / SWRMA_SHARE
 * peers that stop reading hold every buffer. So while others' work waits
 * for a buffer, a peer that holds some and took none of our messages for
 * s_stall_ns (its sends neither complete nor fail) is given up as dead
 * (hmi_na_peer_drop): the plugin ends its ops, which hands the buffers
 * back, and the core fails its RPCs. A peer that is only slow while nobody
 * waits keeps its buffers.
 *
 * Records are made SWRMA_PEER_CHUNK at a time on first need, reused, and
 * freed at context close; a record is in use while its peer has jobs, live
 * ops or sends in flight, so the owner keeps at most s_jobs_max +
 * s_bufs_max of them for peers whatever they send.
 */
#include <stdio.h>
#include <stdlib.h>

#include "na/na_swrma_int.h"

/* A block of records; blocks are linked through b_next. */
struct swrma_peer_block {
    struct swrma_peer_block *b_next;
    struct swrma_peer b_recs[SWRMA_PEER_CHUNK];
};

struct swrma_peer *hmi_swrma_peer_find(const struct hmi_swrma_ctx *s, hmi_na_addr_t *addr)
{
    if (s->s_peers.capacity == 0)
        return NULL;
    return hmi_hmap_get(&s->s_peers, (uint64_t)(uintptr_t)addr);
}

/* Make SWRMA_PEER_CHUNK more free records; false without memory. */
static bool peer_block_make(struct hmi_swrma_ctx *s)
{
    struct swrma_peer_block *blk = calloc(1, sizeof(*blk));
    if (blk == NULL)
        return false;
    blk->b_next = s->s_peer_chunks;
    s->s_peer_chunks = blk;
    for (unsigned int i = 0; i < SWRMA_PEER_CHUNK; i++)
        hmi_list_push_back(&s->s_peer_free, &blk->b_recs[i].pr_all);
    return true;
}

struct swrma_peer *hmi_swrma_peer_get(struct hmi_swrma_ctx *s, hmi_na_addr_t *addr)
{
    struct swrma_peer *pr = hmi_swrma_peer_find(s, addr);
    if (pr != NULL)
        return pr;
    if (hmi_list_empty(&s->s_peer_free) && !peer_block_make(s))
        return NULL;
    pr = hmi_container_of(s->s_peer_free.next, struct swrma_peer, pr_all);
    if (hmi_hmap_put(&s->s_peers, (uint64_t)(uintptr_t)addr, pr) != HM_SUCCESS)
        return NULL; /* the map grows only while warming up */
    hmi_list_remove(&pr->pr_all);
    *pr = (struct swrma_peer){.pr_addr = addr};
    hmi_list_init(&pr->pr_owner_link);
    hmi_list_init(&pr->pr_req_link);
    hmi_list_init(&pr->pr_jobs);
    hmi_list_init(&pr->pr_sendq);
    hmi_list_push_back(&s->s_peers_used, &pr->pr_all);
    s->s_peers_live++;
    return pr;
}

bool hmi_swrma_peer_room(const struct swrma_peer *pr)
{
    return pr->pr_bufs < SWRMA_SHARE;
}

/* Put `link` on `list` (at the back) when `want`, else off it. */
static void peer_link(struct hmi_list *list, struct hmi_list *link, bool want)
{
    if (want && !hmi_list_linked(link))
        hmi_list_push_back(list, link);
    else if (!want && hmi_list_linked(link))
        hmi_list_remove(link);
}

/* Count each episode of work held back (share full, or window full). */
static void peer_count_held(struct hmi_swrma_ctx *s, struct swrma_peer *pr, bool share_full,
                            bool window_full)
{
    bool work = !hmi_list_empty(&pr->pr_jobs) || pr->pr_nnotes != 0 ||
                !hmi_list_empty(&pr->pr_sendq);
    bool held_share = work && share_full;
    bool held_window = !hmi_list_empty(&pr->pr_sendq) && window_full;
    if (held_share && !pr->pr_held_share)
        s->s_stats.ss_share_waits++;
    if (held_window && !pr->pr_held_window)
        s->s_stats.ss_window_waits++;
    pr->pr_held_share = held_share;
    pr->pr_held_window = held_window;
}

void hmi_swrma_peer_update(struct hmi_swrma_ctx *s, struct swrma_peer *pr)
{
    bool share_full = !hmi_swrma_peer_room(pr);
    bool window_full = pr->pr_asked >= s->s_window;
    peer_count_held(s, pr, share_full, window_full);
    peer_link(&s->s_owner_ready, &pr->pr_owner_link,
              (!hmi_list_empty(&pr->pr_jobs) || pr->pr_nnotes != 0) && !share_full);
    peer_link(&s->s_req_ready, &pr->pr_req_link,
              !hmi_list_empty(&pr->pr_sendq) && !share_full && !window_full);
    if (pr->pr_jobs_n != 0 || pr->pr_bufs != 0 || pr->pr_ops != 0 || pr->pr_nnotes != 0)
        return;
    (void)hmi_hmap_remove(&s->s_peers, (uint64_t)(uintptr_t)pr->pr_addr);
    hmi_list_remove(&pr->pr_all);
    hmi_list_push_front(&s->s_peer_free, &pr->pr_all);
    pr->pr_addr = NULL;
    s->s_peers_live--;
}

bool hmi_swrma_peer_note_reply(struct hmi_swrma_ctx *s, struct swrma_peer *pr,
                               enum swrma_type type, uint64_t id, uint32_t value)
{
    if (pr->pr_nnotes == SWRMA_PEER_WINDOW)
        return false;
    if (pr->pr_nnotes == 0)
        s->s_ctx->x_class->c_ops.addr_ref(pr->pr_addr); /* until they are sent */
    pr->pr_notes[pr->pr_nnotes++] =
        (struct swrma_note){.n_id = id, .n_value = value, .n_type = (uint8_t)type};
    hmi_swrma_peer_update(s, pr);
    return true;
}

void hmi_swrma_peer_forget_notes(struct hmi_swrma_ctx *s, struct swrma_peer *pr)
{
    if (pr->pr_nnotes == 0)
        return;
    pr->pr_nnotes = 0;
    s->s_ctx->x_class->c_ops.addr_unref(pr->pr_addr);
}

void hmi_swrma_peers_fini(struct hmi_swrma_ctx *s)
{
    struct swrma_peer_block *blk = s->s_peer_chunks;
    while (blk != NULL) {
        struct swrma_peer_block *next = blk->b_next;
        free(blk);
        blk = next;
    }
    s->s_peer_chunks = NULL;
    hmi_hmap_destroy(&s->s_peers);
}

/* Does `pr` hold buffers that have not moved for the stall bound? */
static bool peer_stalled(const struct hmi_swrma_ctx *s, const struct swrma_peer *pr,
                         uint64_t now)
{
    return pr->pr_bufs > 0 && now - pr->pr_moved_ns >= s->s_stall_ns;
}

unsigned int hmi_swrma_peers_drop_stalled(struct hmi_swrma_ctx *s, uint64_t now)
{
    /* Collected first: dropping one reports its death, which changes the
     * records (its jobs and ops end) while the list is walked. */
    hmi_na_addr_t *stalled[SWRMA_SWEEP_MAX];
    unsigned int n = 0;
    struct hmi_list *l;
    for (l = s->s_peers_used.next; l != &s->s_peers_used && n < SWRMA_SWEEP_MAX; l = l->next) {
        struct swrma_peer *pr = hmi_container_of(l, struct swrma_peer, pr_all);
        if (peer_stalled(s, pr, now))
            stalled[n++] = pr->pr_addr;
    }
    if (n == 0)
        return 0;
    char why[96];
    snprintf(why, sizeof(why), "took none of our messages for %llu ms while others waited",
             (unsigned long long)(s->s_stall_ns / 1000000u));
    unsigned int dropped = 0;
    for (unsigned int i = 0; i < n; i++) {
        /* Looked up again: an earlier drop may have ended this record. */
        struct swrma_peer *pr = hmi_swrma_peer_find(s, stalled[i]);
        if (pr == NULL || !peer_stalled(s, pr, now))
            continue;
        /* Once per stall bound: a peer the plugin cannot drop (or whose
         * buffers come back only later) is not asked about at every sweep. */
        pr->pr_moved_ns = now;
        if (hmi_na_peer_drop(s->s_ctx, stalled[i], why)) {
            s->s_stats.ss_stalled++;
            dropped++;
        }
    }
    return dropped;
}
