/*
 * Intrusive multi-producer single-consumer queue (Vyukov). Any thread may
 * push; one thread at a time pops. Push is wait-free; pop is lock-free and
 * may return NULL while a push is half done (hmi_mpsc_empty tells the two
 * apart: it is false then).
 */
#ifndef HM_UTIL_MPSC_H
#define HM_UTIL_MPSC_H

#include <stdatomic.h>
#include <stdbool.h>

struct hmi_mpsc_node {
    _Atomic(struct hmi_mpsc_node *) next;
};

struct hmi_mpsc {
    _Atomic(struct hmi_mpsc_node *) head; /* producers swap in here */
    struct hmi_mpsc_node *tail;           /* consumer pops from here */
    struct hmi_mpsc_node stub;
};

void hmi_mpsc_init(struct hmi_mpsc *q);
void hmi_mpsc_push(struct hmi_mpsc *q, struct hmi_mpsc_node *node);
/* The oldest node, or NULL if empty or a push is in progress. */
struct hmi_mpsc_node *hmi_mpsc_pop(struct hmi_mpsc *q);

/* Inline: the core asks it several times per RPC (every progress pass and
 * forward), and the call cost more than the two loads. */
static inline bool hmi_mpsc_empty(struct hmi_mpsc *q)
{
    return q->tail == &q->stub &&
           atomic_load_explicit(&q->head, memory_order_acquire) == &q->stub;
}

#endif
