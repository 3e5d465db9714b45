/*
 * Deadlines of RPCs in flight: a binary min-heap of timers embedded in
 * their owners. Insert, remove and pop are O(log n); the heap's array grows
 * by doubling, so after warm-up no operation allocates.
 */
#ifndef HM_CORE_TIMER_H
#define HM_CORE_TIMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hermod/types.h>

#define HMI_TIMER_UNSET SIZE_MAX

struct hmi_timer {
    uint64_t t_deadline_ns;
    size_t t_index; /* position in the heap, HMI_TIMER_UNSET when not in it */
};

struct hmi_timer_heap {
    struct hmi_timer **items;
    size_t count;
    size_t capacity;
};

void hmi_timer_init(struct hmi_timer *timer);
hm_return_t hmi_timer_heap_init(struct hmi_timer_heap *heap, size_t capacity);
void hmi_timer_heap_destroy(struct hmi_timer_heap *heap);
hm_return_t hmi_timer_add(struct hmi_timer_heap *heap, struct hmi_timer *timer,
                          uint64_t deadline_ns);
/* Remove `timer` if it is in the heap; harmless otherwise. */
void hmi_timer_remove(struct hmi_timer_heap *heap, struct hmi_timer *timer);
/* The earliest timer, or NULL. */
static inline struct hmi_timer *hmi_timer_first(const struct hmi_timer_heap *heap)
{
    return heap->count ? heap->items[0] : NULL;
}
static inline bool hmi_timer_armed(const struct hmi_timer *timer)
{
    return timer->t_index != HMI_TIMER_UNSET;
}

#endif
