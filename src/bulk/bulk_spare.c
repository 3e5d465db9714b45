/*
 * Spare blocks for handles that carry their contents (bulk_spare.h).
 *
 * Decoding such a handle is the hot allocation of a small pull: a server
 * answering RPCs that carry a 4 KiB read-only handle made and freed a
 * ~4.4 KiB block per RPC, which glibc serves from its unsorted bins (no
 * thread cache above 1 KiB): about 800 instructions per RPC with the
 * consolidation it triggers (callgrind). A few freed blocks per size class
 * are kept instead, in slots taken and filled with atomic exchanges, so any
 * thread may free what another made. Bounded: SPARE_SLOTS blocks of each of
 * SPARE_CLASSES classes (2, 4, 8 and 16 KiB), 120 KiB in all, never freed
 * (reachable until the process ends).
 */
#include "bulk/bulk_spare.h"

#include <stdatomic.h>
#include <stdlib.h>

#define SPARE_MIN_SHIFT 11u /* 2 KiB */
#define SPARE_CLASSES 4u    /* 2, 4, 8, 16 KiB */
#define SPARE_SLOTS 4u

static _Atomic(void *) spare_slots[SPARE_CLASSES][SPARE_SLOTS];

/* The class of a block of `cap` bytes (a class size), or SPARE_CLASSES. */
static unsigned int spare_class_of(size_t cap)
{
    for (unsigned int c = 0; c < SPARE_CLASSES; c++)
        if (cap == (size_t)1 << (SPARE_MIN_SHIFT + c))
            return c;
    return SPARE_CLASSES;
}

/* The size class to allocate for `need` bytes, or 0 when none holds it. */
static size_t spare_size(size_t need)
{
#if defined(__SANITIZE_ADDRESS__)
    /* Under ASan every handle is freed for real, so that a use after free
     * of one is still caught; the reserve is plain enough to go untested. */
    (void)need;
    return 0;
#endif
    for (unsigned int c = 0; c < SPARE_CLASSES; c++) {
        size_t cap = (size_t)1 << (SPARE_MIN_SHIFT + c);
        if (need <= cap)
            return cap;
    }
    return 0;
}

/* A block of exactly `cap` bytes (a class size): a spare, or a new one. */
static void *spare_take(size_t cap)
{
    unsigned int c = spare_class_of(cap);
    for (unsigned int i = 0; c < SPARE_CLASSES && i < SPARE_SLOTS; i++) {
        void *block = atomic_exchange_explicit(&spare_slots[c][i], NULL, memory_order_acquire);
        if (block != NULL)
            return block;
    }
    return malloc(cap);
}

void *hmi_bulk_spare_alloc(size_t need, size_t *cap_out)
{
    size_t cap = spare_size(need);
    *cap_out = cap;
    return cap ? spare_take(cap) : malloc(need);
}

void hmi_bulk_spare_give(void *block, size_t cap)
{
    unsigned int c = spare_class_of(cap);
    for (unsigned int i = 0; block != NULL && c < SPARE_CLASSES && i < SPARE_SLOTS; i++) {
        void *empty = NULL;
        if (atomic_compare_exchange_strong_explicit(&spare_slots[c][i], &empty, block,
                                                    memory_order_release, memory_order_relaxed))
            return;
    }
    free(block);
}
