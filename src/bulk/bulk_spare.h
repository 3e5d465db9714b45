/*
 * Spare blocks for remote handles that carry their contents (bulk_spare.c):
 * a bounded, lock-free reserve of freed blocks in a few size classes.
 */
#ifndef HM_BULK_SPARE_H
#define HM_BULK_SPARE_H

#include <stddef.h>

/* The size class to allocate for `need` bytes, or 0 when none holds it
 * (then allocate exactly, and give the block back with cap 0). */
size_t hmi_bulk_spare_size(size_t need);
/* A block of exactly `cap` bytes (a class size): a spare, or a new one; NULL
 * when out of memory. */
void *hmi_bulk_spare_take(size_t cap);
/* Keep `block` (of class size `cap`) as a spare, or free it (cap 0, or the
 * class full). NULL is ignored. */
void hmi_bulk_spare_give(void *block, size_t cap);

#endif
