/* Binary min-heap of deadlines; see timer.h. */
#include "core/timer.h"

#include <stdlib.h>

void hmi_timer_init(struct hmi_timer *timer)
{
    timer->t_deadline_ns = 0;
    timer->t_index = HMI_TIMER_UNSET;
}

hm_return_t hmi_timer_heap_init(struct hmi_timer_heap *heap, size_t capacity)
{
    heap->count = 0;
    heap->capacity = capacity ? capacity : 16;
    heap->items = calloc(heap->capacity, sizeof(*heap->items));
    return heap->items ? HM_SUCCESS : HM_NOMEM;
}

void hmi_timer_heap_destroy(struct hmi_timer_heap *heap)
{
    for (size_t i = 0; i < heap->count; i++)
        heap->items[i]->t_index = HMI_TIMER_UNSET;
    free(heap->items);
    heap->items = NULL;
    heap->count = heap->capacity = 0;
}

static void heap_place(struct hmi_timer_heap *heap, size_t i, struct hmi_timer *timer)
{
    heap->items[i] = timer;
    timer->t_index = i;
}

static void heap_sift_up(struct hmi_timer_heap *heap, size_t i)
{
    struct hmi_timer *timer = heap->items[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (heap->items[parent]->t_deadline_ns <= timer->t_deadline_ns)
            break;
        heap_place(heap, i, heap->items[parent]);
        i = parent;
    }
    heap_place(heap, i, timer);
}

static void heap_sift_down(struct hmi_timer_heap *heap, size_t i)
{
    struct hmi_timer *timer = heap->items[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= heap->count)
            break;
        if (child + 1 < heap->count &&
            heap->items[child + 1]->t_deadline_ns < heap->items[child]->t_deadline_ns)
            child++;
        if (heap->items[child]->t_deadline_ns >= timer->t_deadline_ns)
            break;
        heap_place(heap, i, heap->items[child]);
        i = child;
    }
    heap_place(heap, i, timer);
}

hm_return_t hmi_timer_add(struct hmi_timer_heap *heap, struct hmi_timer *timer,
                          uint64_t deadline_ns)
{
    if (hmi_timer_armed(timer))
        hmi_timer_remove(heap, timer);
    if (heap->count == heap->capacity) {
        size_t capacity = heap->capacity * 2;
        struct hmi_timer **items = realloc(heap->items, capacity * sizeof(*items));
        if (items == NULL)
            return HM_NOMEM;
        heap->items = items;
        heap->capacity = capacity;
    }
    timer->t_deadline_ns = deadline_ns;
    heap_place(heap, heap->count++, timer);
    heap_sift_up(heap, timer->t_index);
    return HM_SUCCESS;
}

void hmi_timer_remove(struct hmi_timer_heap *heap, struct hmi_timer *timer)
{
    size_t i = timer->t_index;
    if (i == HMI_TIMER_UNSET || i >= heap->count || heap->items[i] != timer)
        return;
    timer->t_index = HMI_TIMER_UNSET;
    struct hmi_timer *last = heap->items[--heap->count];
    if (last == timer)
        return;
    heap_place(heap, i, last);
    heap_sift_up(heap, i);
    heap_sift_down(heap, last->t_index);
}
