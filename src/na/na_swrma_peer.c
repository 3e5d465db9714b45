/*
 * RMA over messages: per-peer records (issue 13, a peer that stops
 * reading). A peer is the address the plugin delivered a message from (or
 * an op was posted to), never a field of a message. Its record holds:
 *
 *  - its share: send buffers in flight to it, at most SWRMA_SHARE of the
 *    context's SWRMA_BUFS. A peer that stops reading holds at most that
 *    many; its further messages wait in its own queues while every other
 *    peer's go on;
 *  - the owner's jobs for it (at most s_jobs_peer_max), served in turn;
 *  - the requester's ops with a message for it, and its window: requests
 *    outstanding there (GET_REQ pieces unanswered, PUT_DATA unacknowledged),
 *    at most s_window, below the owner's per-peer job cap.
 *
 * Peers that may send are on s_owner_ready / s_req_ready, served
 * round-robin. Records are made SWRMA_PEER_CHUNK at a time on first need,
 * reused, and freed at context close; a record is in use while its peer
 * has jobs, live ops or sends in flight, so the owner keeps at most
 * SWRMA_JOBS + SWRMA_BUFS of them for peers whatever they send.
 */
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
    bool work = !hmi_list_empty(&pr->pr_jobs) || !hmi_list_empty(&pr->pr_sendq);
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
              !hmi_list_empty(&pr->pr_jobs) && !share_full);
    peer_link(&s->s_req_ready, &pr->pr_req_link,
              !hmi_list_empty(&pr->pr_sendq) && !share_full && !window_full);
    if (pr->pr_jobs_n != 0 || pr->pr_bufs != 0 || pr->pr_ops != 0)
        return;
    (void)hmi_hmap_remove(&s->s_peers, (uint64_t)(uintptr_t)pr->pr_addr);
    hmi_list_remove(&pr->pr_all);
    hmi_list_push_front(&s->s_peer_free, &pr->pr_all);
    pr->pr_addr = NULL;
    s->s_peers_live--;
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
