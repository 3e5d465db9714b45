/*
 * Vyukov's intrusive MPSC queue.
 *
 * Producers link nodes in two steps: swap themselves in as `head`, then
 * point the previous head's `next` at themselves. Between the two the list
 * is briefly cut, which is the "push in progress" state in which pop returns
 * NULL although the queue is not empty. The consumer keeps a stub node so
 * the list is never empty and it never touches `head` except to compare.
 *
 * Memory orders: the exchange on `head` is acq_rel so that a producer's
 * store of node->next = NULL is ordered before the next producer's store of
 * node->next = itself; the store linking prev->next is a release and the
 * consumer's load of `next` an acquire, which publishes the node's payload.
 */
#include <stddef.h>

#include "util/mpsc.h"

void hmi_mpsc_init(struct hmi_mpsc *q)
{
    atomic_init(&q->stub.next, NULL);
    atomic_init(&q->head, &q->stub);
    q->tail = &q->stub;
}

void hmi_mpsc_push(struct hmi_mpsc *q, struct hmi_mpsc_node *node)
{
    atomic_store_explicit(&node->next, NULL, memory_order_relaxed);
    struct hmi_mpsc_node *prev = atomic_exchange_explicit(&q->head, node, memory_order_acq_rel);
    atomic_store_explicit(&prev->next, node, memory_order_release);
}

static struct hmi_mpsc_node *mpsc_next(struct hmi_mpsc_node *node)
{
    return atomic_load_explicit(&node->next, memory_order_acquire);
}

struct hmi_mpsc_node *hmi_mpsc_pop(struct hmi_mpsc *q)
{
    struct hmi_mpsc_node *tail = q->tail;
    struct hmi_mpsc_node *next = mpsc_next(tail);
    if (tail == &q->stub) { /* skip the stub */
        if (next == NULL)
            return NULL;
        q->tail = next;
        tail = next;
        next = mpsc_next(next);
    }
    if (next != NULL) {
        q->tail = next;
        return tail;
    }
    /* `tail` is the last linked node: a push is half done, or it is the last one. */
    if (tail != atomic_load_explicit(&q->head, memory_order_acquire))
        return NULL;
    hmi_mpsc_push(q, &q->stub); /* put the stub behind it so it can be taken */
    next = mpsc_next(tail);
    if (next != NULL) {
        q->tail = next;
        return tail;
    }
    return NULL; /* a producer got in before the stub: retry later */
}
