/*
 * objstore_proto.h: what the object store's server and client agree on: RPC
 * names, argument structs and their procs, status codes, limits, placement.
 * Public Hermod API only.
 *
 * Wire contract (every field is checked by the server, which owns the memory):
 *  - put:  key, either the value inline (bulk NULL) or a bulk handle over
 *          the client's value that the server pulls; `size` must equal the
 *          inline length or the handle's size, and be <= OBJ_VALUE_MAX.
 *  - get:  key and an optional bulk handle (writable) the server pushes the
 *          value into. Values up to OBJ_INLINE_MAX come back inline; larger
 *          ones need a handle of at least their size, else OBJ_TOOSMALL
 *          with the size, so the client can retry with a big enough one.
 *  - del, stat: key only.
 * Every reply carries an objstore status (obj_status_t) beside the RPC's
 * own hm_return_t: "no such key" is an answer, not a transport failure.
 */
#ifndef OBJSTORE_PROTO_H
#define OBJSTORE_PROTO_H

#include <hermod.h>

#define OBJ_RPC_PUT "objstore.put"
#define OBJ_RPC_GET "objstore.get"
#define OBJ_RPC_DEL "objstore.del"
#define OBJ_RPC_STAT "objstore.stat"
#define OBJ_COLL_COUNT "objstore.count"
#define OBJ_COLL_LIST "objstore.list"
#define OBJ_GROUP_NAME "objstore"

#define OBJ_KEY_MAX 255u                 /* bytes, without the NUL; at least 1 */
#define OBJ_VALUE_MAX ((uint64_t)64 << 20) /* 64 MiB */
#define OBJ_INLINE_MAX 4096u             /* values up to this travel inline */
#define OBJ_LIST_BYTES 4096u             /* list-prefix: key bytes returned at most */

/* Answers of the store itself (0 = success). */
typedef enum obj_status {
    OBJ_OK = 0,
    OBJ_NOKEY = 1,    /* no object under that key */
    OBJ_FULL = 2,     /* the shard's memory cap would be passed: refused */
    OBJ_INVALID = 3,  /* an argument failed validation (key, size, handle) */
    OBJ_TOOBIG = 4,   /* value above OBJ_VALUE_MAX */
    OBJ_TOOSMALL = 5, /* get: the client's handle is smaller than the value */
    OBJ_XFER = 6,     /* the bulk transfer with the client failed */
    OBJ_NOMEM = 7,    /* the server could not allocate */
    OBJ_STATUS_MAX
} obj_status_t;

const char *obj_status_str(uint32_t status);

struct obj_put_in {
    hm_string_t key;
    uint64_t size;      /* bytes of the value */
    hm_bytes_t inline_; /* the value when bulk is NULL; empty otherwise */
    hm_bulk_t *bulk;    /* readable handle over the value, or NULL */
};

struct obj_key_in { /* get, del, stat */
    hm_string_t key;
    hm_bulk_t *bulk; /* get: writable handle for values > OBJ_INLINE_MAX; else NULL */
};

struct obj_reply {
    uint32_t status;    /* obj_status_t */
    uint64_t size;      /* get/stat: the value's size; put: the shard's bytes held */
    hm_bytes_t inline_; /* get: the value when small */
};

/* count: objects, value bytes and resident memory over every rank. */
struct obj_count_out {
    uint64_t objects;
    uint64_t bytes;
    uint64_t rss_kb;   /* the ranks' resident memory, summed */
    uint32_t contexts; /* data contexts per rank (#1..#contexts), the least over ranks */
};

/* list-prefix: in, the prefix; out, how many keys matched over all ranks and
 * up to OBJ_LIST_BYTES of them, NUL-separated (truncated flags the rest). */
struct obj_list_in {
    hm_string_t prefix;
};
struct obj_list_out {
    uint64_t matched;
    uint32_t used;      /* bytes of keys[] in use */
    uint32_t truncated; /* 1: some matching keys did not fit */
    char keys[OBJ_LIST_BYTES];
};

hm_return_t obj_put_in_proc(hm_proc_t *p, void *d);
hm_return_t obj_key_in_proc(hm_proc_t *p, void *d);
hm_return_t obj_reply_proc(hm_proc_t *p, void *d);
hm_return_t obj_count_out_proc(hm_proc_t *p, void *d);
hm_return_t obj_list_in_proc(hm_proc_t *p, void *d);
hm_return_t obj_list_out_proc(hm_proc_t *p, void *d);

/* Aggregations of the two collectives (associative, commutative). */
hm_return_t obj_count_aggregate(void *acc, const void *other, void *arg);
hm_return_t obj_list_aggregate(void *acc, const void *other, void *arg);

/* obj_key_valid: 1..OBJ_KEY_MAX bytes, NUL-terminated (decoded strings are). */
bool obj_key_valid(const char *key);

/* 64-bit FNV-1a of the key: placement (rank = hash % ranks, context from
 * the high half) is a pure function of the key and the group. */
uint64_t obj_key_hash(const char *key);

/* Append `key` and its NUL to out->keys if it fits, else set truncated. */
void obj_list_append(struct obj_list_out *out, const char *key);

/* CLOCK_MONOTONIC in nanoseconds (the client's rank states, the bench). */
uint64_t obj_now_ns(void);

#endif /* OBJSTORE_PROTO_H */
