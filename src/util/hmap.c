/*
 * Hash map: open addressing, linear probing, backward-shift deletion.
 *
 * Backward shift (rather than tombstones) keeps every probe sequence free of
 * holes, so lookups stop at the first empty slot and the table never needs a
 * rehash to clean up after many removes.
 */
#include <stdlib.h>

#include "util/hmap.h"

#define HMAP_MIN_CAPACITY 8u

uint64_t hmi_hash64(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    x ^= x >> 31;
    return x;
}

/* Most entries a table of `capacity` slots holds before it grows (3/4 load). */
static size_t hmap_max_load(size_t capacity)
{
    return capacity / 4 * 3;
}

static size_t hmap_home(const struct hmi_hmap *map, uint64_t key)
{
    return (size_t)hmi_hash64(key) & (map->capacity - 1);
}

/* Slot holding `key`, or the empty slot where it would go. capacity > 0. */
static size_t hmap_find(const struct hmi_hmap *map, uint64_t key)
{
    size_t mask = map->capacity - 1;
    size_t i = hmap_home(map, key);
    while (map->slots[i].value != NULL && map->slots[i].key != key)
        i = (i + 1) & mask;
    return i;
}

/* Smallest power-of-two capacity holding `entries` under the load limit, or 0. */
static size_t hmap_capacity_for(size_t entries)
{
    size_t capacity = HMAP_MIN_CAPACITY;
    while (hmap_max_load(capacity) < entries) {
        if (capacity > SIZE_MAX / 2 / sizeof(struct hmi_hmap_slot))
            return 0;
        capacity *= 2;
    }
    return capacity;
}

/* Move every entry into a fresh table of `capacity` slots. */
static hm_return_t hmap_resize(struct hmi_hmap *map, size_t capacity)
{
    struct hmi_hmap_slot *slots = calloc(capacity, sizeof(*slots));
    if (slots == NULL)
        return HM_NOMEM;
    struct hmi_hmap old = *map;
    map->slots = slots;
    map->capacity = capacity;
    for (size_t i = 0; i < old.capacity; i++) {
        if (old.slots[i].value != NULL)
            map->slots[hmap_find(map, old.slots[i].key)] = old.slots[i];
    }
    free(old.slots);
    return HM_SUCCESS;
}

hm_return_t hmi_hmap_init(struct hmi_hmap *map, size_t expected)
{
    if (map == NULL)
        return HM_INVALID_ARG;
    map->slots = NULL;
    map->capacity = 0;
    map->count = 0;
    if (expected == 0)
        return HM_SUCCESS;
    size_t capacity = hmap_capacity_for(expected);
    if (capacity == 0)
        return HM_NOMEM;
    return hmap_resize(map, capacity);
}

void hmi_hmap_destroy(struct hmi_hmap *map)
{
    free(map->slots);
    map->slots = NULL;
    map->capacity = 0;
    map->count = 0;
}

hm_return_t hmi_hmap_put(struct hmi_hmap *map, uint64_t key, void *value)
{
    if (value == NULL)
        return HM_INVALID_ARG;
    if (map->capacity > 0 && map->slots[hmap_find(map, key)].value != NULL)
        return HM_EXISTS;
    if (map->count + 1 > hmap_max_load(map->capacity)) {
        size_t capacity = hmap_capacity_for(map->count + 1);
        if (capacity == 0)
            return HM_NOMEM;
        hm_return_t ret = hmap_resize(map, capacity);
        if (ret != HM_SUCCESS)
            return ret;
    }
    struct hmi_hmap_slot *slot = &map->slots[hmap_find(map, key)];
    slot->key = key;
    slot->value = value;
    map->count++;
    return HM_SUCCESS;
}

void *hmi_hmap_get(const struct hmi_hmap *map, uint64_t key)
{
    if (map->capacity == 0)
        return NULL;
    return map->slots[hmap_find(map, key)].value;
}

/*
 * Close the hole at `hole`: walk the cluster after it and pull back each
 * entry whose home slot is not cyclically in (hole, j], i.e. whose probe
 * sequence passes through the hole.
 */
static void hmap_shift_back(struct hmi_hmap *map, size_t hole)
{
    size_t mask = map->capacity - 1;
    for (size_t j = (hole + 1) & mask; map->slots[j].value != NULL; j = (j + 1) & mask) {
        size_t home = hmap_home(map, map->slots[j].key);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            map->slots[hole] = map->slots[j];
            hole = j;
        }
    }
    map->slots[hole].value = NULL;
    map->slots[hole].key = 0;
}

void *hmi_hmap_remove(struct hmi_hmap *map, uint64_t key)
{
    if (map->capacity == 0)
        return NULL;
    size_t i = hmap_find(map, key);
    void *value = map->slots[i].value;
    if (value == NULL)
        return NULL;
    hmap_shift_back(map, i);
    map->count--;
    return value;
}

void hmi_hmap_foreach(const struct hmi_hmap *map,
                      void (*fn)(uint64_t key, void *value, void *arg), void *arg)
{
    for (size_t i = 0; i < map->capacity; i++) {
        if (map->slots[i].value != NULL)
            fn(map->slots[i].key, map->slots[i].value, arg);
    }
}
