/*
 * Intrusive circular doubly linked list. A list head is a `struct hmi_list`
 * initialised with hmi_list_init; elements embed one and are found again
 * with hmi_container_of.
 */
#ifndef HM_UTIL_LIST_H
#define HM_UTIL_LIST_H

#include <stdbool.h>
#include <stddef.h>

#define hmi_container_of(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

struct hmi_list {
    struct hmi_list *next;
    struct hmi_list *prev;
};

static inline void hmi_list_init(struct hmi_list *head)
{
    head->next = head;
    head->prev = head;
}

static inline bool hmi_list_empty(const struct hmi_list *head)
{
    return head->next == head;
}

static inline void hmi_list_insert_between(struct hmi_list *item, struct hmi_list *prev,
                                           struct hmi_list *next)
{
    item->prev = prev;
    item->next = next;
    prev->next = item;
    next->prev = item;
}

static inline void hmi_list_push_back(struct hmi_list *head, struct hmi_list *item)
{
    hmi_list_insert_between(item, head->prev, head);
}

static inline void hmi_list_push_front(struct hmi_list *head, struct hmi_list *item)
{
    hmi_list_insert_between(item, head, head->next);
}

/* Unlink `item`; it is left self-linked so a second remove is harmless. */
static inline void hmi_list_remove(struct hmi_list *item)
{
    item->prev->next = item->next;
    item->next->prev = item->prev;
    hmi_list_init(item);
}

/* First element, unlinked, or NULL when empty. */
static inline struct hmi_list *hmi_list_pop_front(struct hmi_list *head)
{
    struct hmi_list *first = head->next;
    if (first == head)
        return NULL;
    hmi_list_remove(first);
    return first;
}

/* Is `item` linked into some list (assumes it was initialised or removed)? */
static inline bool hmi_list_linked(const struct hmi_list *item)
{
    return item->next != item;
}

/* Move every element of `from` to the back of `to`; `from` ends empty. */
static inline void hmi_list_splice_back(struct hmi_list *to, struct hmi_list *from)
{
    if (hmi_list_empty(from))
        return;
    from->next->prev = to->prev;
    to->prev->next = from->next;
    from->prev->next = to;
    to->prev = from->prev;
    hmi_list_init(from);
}

#endif
