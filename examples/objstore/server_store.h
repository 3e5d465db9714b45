/*
 * server_store.h: one shard's objects, in memory: a hash table of keys to
 * reference-counted values, under a memory cap.
 *
 * Memory accounting: a value's bytes count against the cap from the moment
 * a put reserves them (before its bulk pull starts) until the last
 * reference to the value is dropped, so concurrent puts cannot together
 * pass the cap, and a get pushing a value that a later put replaced keeps
 * it counted until the push ends. Thread-safe: one mutex (handlers run on
 * the progress threads of several contexts).
 */
#ifndef OBJSTORE_SERVER_STORE_H
#define OBJSTORE_SERVER_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "objstore_proto.h"

struct store;

/* A value: `size` bytes at `data`; owned by its references. */
struct store_value {
    void *data;
    uint64_t size;
    unsigned int refs; /* guarded by the store's mutex */
};

/* store_create: an empty store of at most `cap` value bytes (0: no cap). NULL on ENOMEM. */
struct store *store_create(uint64_t cap);
/* store_destroy: frees every object; no value may still be referenced by a transfer. */
void store_destroy(struct store *st);

/*
 * store_value_new: reserve `size` bytes under the cap and allocate them.
 * OBJ_FULL past the cap, OBJ_NOMEM if malloc failed (the reservation is
 * undone). The value has one reference: insert it or store_value_unref it.
 */
obj_status_t store_value_new(struct store *st, uint64_t size, struct store_value **value_out);
/* Drop a reference; the last one frees the bytes and gives them back to the cap. */
void store_value_unref(struct store *st, struct store_value *value);

/* store_insert: `key` now maps to `value` (takes the caller's reference);
 * an older value is unreferenced. OBJ_NOMEM (the value is unreferenced). */
obj_status_t store_insert(struct store *st, const char *key, struct store_value *value);
/* store_lookup: a new reference to the value of `key`, or OBJ_NOKEY. */
obj_status_t store_lookup(struct store *st, const char *key, struct store_value **value_out);
/* store_remove: OBJ_NOKEY when absent. */
obj_status_t store_remove(struct store *st, const char *key);

/* Objects and value bytes held (bytes include values still referenced by transfers). */
void store_totals(struct store *st, uint64_t *objects, uint64_t *bytes);
/* Call `fn` on every key that starts with `prefix` (under the store's lock). */
void store_each_prefix(struct store *st, const char *prefix, void (*fn)(const char *key, void *arg),
                       void *arg);

#endif /* OBJSTORE_SERVER_STORE_H */
