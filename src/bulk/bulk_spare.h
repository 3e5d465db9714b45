/*
 * Spare blocks for remote handles that carry their contents (bulk_spare.c):
 * a bounded, lock-free reserve of freed blocks in a few size classes.
 */
#ifndef HM_BULK_SPARE_H
#define HM_BULK_SPARE_H

#include <stddef.h>

/* A block of at least `need` bytes: from the spares when a class holds it,
 * else malloc'd; `*cap_out` gets the cap to give it back with (0: none). */
void *hmi_bulk_spare_alloc(size_t need, size_t *cap_out);
/* Keep `block` (of class size `cap`) as a spare, or free it (cap 0, or the
 * class full). NULL is ignored. */
void hmi_bulk_spare_give(void *block, size_t cap);

#endif
