/*
 * objstore_client.h: the object store's client library.
 *
 * A client attaches to the server ranks through the group file that rank 0
 * writes, places each key on a rank by hash (obj_key_hash % ranks) and a
 * data context of that rank by the hash's high half, and with replication
 * factor r writes to that rank and the r-1 ranks after it: a put succeeds
 * when all r acknowledge it. A get reads the primary, then the next replica
 * when the primary's RPC fails (dead, unreachable, timed out). Later gets
 * skip a rank the transport reported dead (HM_UNREACHABLE), and try a rank
 * that timed out in the last 10 s only after the other replicas; count and
 * list-prefix leave both out. count and list-prefix are collectives over
 * the group, aggregated up its tree.
 *
 * Threading: a client is used by one thread. Nothing runs behind the
 * caller's back: callbacks of the asynchronous calls run from
 * objc_progress (and from the synchronous calls, which progress too).
 * Every result has two layers: `ret` is Hermod's status of the RPC (a
 * transport failure, a deadline); `status` is the store's answer
 * (obj_status_t) when ret is HM_SUCCESS.
 */
#ifndef OBJSTORE_CLIENT_H
#define OBJSTORE_CLIENT_H

#include "objstore_proto.h"

typedef struct objc objc_t;

struct objc_opts {
    const char *group_file; /* required: written by hm-objstore-server --group-file */
    const char *uri;        /* this client's transport; NULL: the servers' protocol
                               (tcp on 127.0.0.1) */
    unsigned int replicas;  /* replication factor r, 1..ranks (0 means 1) */
    unsigned int timeout_ms; /* deadline of every RPC (0: 10000) */
};

struct objc_result {
    hm_return_t ret;  /* the RPC's status (HM_SUCCESS: `status` is the store's answer) */
    uint32_t status;  /* obj_status_t */
    uint64_t size;    /* get/stat: the value's size */
    hm_rank_t rank;   /* the rank that answered, or the first that failed */
    void *arg;
};

typedef void (*objc_cb_t)(const struct objc_result *res);

/* objc_open: attach to the group. Blocks reading the file.
 * Errors: HM_INVALID_ARG, hm_class_create's, hm_group_create_file's, HM_NOMEM. */
hm_return_t objc_open(const struct objc_opts *opts, objc_t **client_out);
/* objc_close: waits (progressing) for RPCs still in flight, then frees all. */
void objc_close(objc_t *client);

uint32_t objc_ranks(const objc_t *client);
/* The ranks that hold `key`: primary first; returns how many (r). */
unsigned int objc_placement(const objc_t *client, const char *key, hm_rank_t *ranks,
                            unsigned int max);

/*
 * objc_put_async / objc_get_async: start a put of `size` bytes at `data`,
 * or a get into `buf` of `cap` bytes; `cb` runs once, from objc_progress.
 * `data` and `buf` must stay valid until then. A get of a value larger
 * than `cap` completes with OBJ_TOOSMALL and the value's size.
 * Fail at once (cb does not run): HM_INVALID_ARG (key not 1..255 bytes,
 * size above 64 MiB, NULL pointers), HM_NOMEM, hm_bulk_create's.
 */
hm_return_t objc_put_async(objc_t *client, const char *key, const void *data, uint64_t size,
                           objc_cb_t cb, void *arg);
hm_return_t objc_get_async(objc_t *client, const char *key, void *buf, uint64_t cap,
                           objc_cb_t cb, void *arg);
/* objc_progress: move the client's RPCs and run their callbacks; waits up
 * to timeout_ms for something to happen. Returns how many callbacks ran. */
unsigned int objc_progress(objc_t *client, unsigned int timeout_ms);
/* RPCs in flight. */
unsigned int objc_inflight(const objc_t *client);

/* Synchronous forms. objc_get allocates the value (free() it) and retries
 * with a buffer of the right size if the first was too small. */
struct objc_result objc_put(objc_t *client, const char *key, const void *data, uint64_t size);
struct objc_result objc_get(objc_t *client, const char *key, void **data_out);
struct objc_result objc_del(objc_t *client, const char *key);
struct objc_result objc_stat(objc_t *client, const char *key);

/* Collectives over every rank. `failed` gets the ranks that did not
 * contribute (may be NULL). ret: HM_SUCCESS when every rank answered. */
hm_return_t objc_count(objc_t *client, struct obj_count_out *out, uint32_t *failed);
hm_return_t objc_list(objc_t *client, const char *prefix, struct obj_list_out *out,
                      uint32_t *failed);

/* A one-line description of a result ("ok", "no such key", "timed out"...). */
const char *objc_result_str(const struct objc_result *res);

#endif /* OBJSTORE_CLIENT_H */
