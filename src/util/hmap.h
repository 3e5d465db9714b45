/*
 * Hash map from 64-bit keys to pointers: open addressing with linear
 * probing and backward-shift deletion, power-of-two capacity, grows at 3/4
 * load. Not thread-safe. Lookups do no allocation; inserts allocate only
 * when growing.
 */
#ifndef HM_UTIL_HMAP_H
#define HM_UTIL_HMAP_H

#include <stddef.h>
#include <stdint.h>

#include <hermod/types.h>

struct hmi_hmap_slot {
    uint64_t key;
    void *value; /* NULL marks an empty slot: values must not be NULL */
};

struct hmi_hmap {
    struct hmi_hmap_slot *slots;
    size_t capacity; /* power of two, or 0 before the first insert */
    size_t count;
};

/* Initialise an empty map with room for `expected` entries (0 is fine). */
hm_return_t hmi_hmap_init(struct hmi_hmap *map, size_t expected);
void hmi_hmap_destroy(struct hmi_hmap *map);
/* HM_EXISTS if the key is present, HM_INVALID_ARG for a NULL value, HM_NOMEM. */
hm_return_t hmi_hmap_put(struct hmi_hmap *map, uint64_t key, void *value);
/* The value, or NULL. */
void *hmi_hmap_get(const struct hmi_hmap *map, uint64_t key);
/* Remove and return the value, or NULL if absent. */
void *hmi_hmap_remove(struct hmi_hmap *map, uint64_t key);
/* Call `fn` for each entry; `fn` must not modify the map. */
void hmi_hmap_foreach(const struct hmi_hmap *map,
                      void (*fn)(uint64_t key, void *value, void *arg), void *arg);
/* A good 64-bit mix (splitmix64 finaliser) for keys that are pointers. */
uint64_t hmi_hash64(uint64_t x);

#endif
