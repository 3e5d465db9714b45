/*
 * objstore_proto.c: procs, aggregations and helpers shared by the object
 * store's server and client (see objstore_proto.h).
 */
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "objstore_proto.h"

static const char *const obj_status_names[OBJ_STATUS_MAX] = {
    [OBJ_OK] = "ok",
    [OBJ_NOKEY] = "no such key",
    [OBJ_FULL] = "refused: the shard's memory cap would be passed",
    [OBJ_INVALID] = "invalid argument (key, size or handle)",
    [OBJ_TOOBIG] = "value larger than 64 MiB",
    [OBJ_TOOSMALL] = "the reader's buffer is smaller than the value",
    [OBJ_XFER] = "bulk transfer with the client failed",
    [OBJ_NOMEM] = "server out of memory",
};

const char *obj_status_str(uint32_t status)
{
    return status < OBJ_STATUS_MAX ? obj_status_names[status] : "unknown objstore status";
}

static const hm_proc_field_t put_in_fields[] = {
    HM_PROC_FIELD(struct obj_put_in, key, hm_proc_string),
    HM_PROC_FIELD(struct obj_put_in, size, hm_proc_uint64),
    HM_PROC_FIELD(struct obj_put_in, inline_, hm_proc_bytes),
    HM_PROC_FIELD(struct obj_put_in, bulk, hm_proc_bulk),
};

hm_return_t obj_put_in_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, put_in_fields, HM_PROC_FIELD_COUNT(put_in_fields));
}

static const hm_proc_field_t key_in_fields[] = {
    HM_PROC_FIELD(struct obj_key_in, key, hm_proc_string),
    HM_PROC_FIELD(struct obj_key_in, bulk, hm_proc_bulk),
};

hm_return_t obj_key_in_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, key_in_fields, HM_PROC_FIELD_COUNT(key_in_fields));
}

static const hm_proc_field_t reply_fields[] = {
    HM_PROC_FIELD(struct obj_reply, status, hm_proc_uint32),
    HM_PROC_FIELD(struct obj_reply, size, hm_proc_uint64),
    HM_PROC_FIELD(struct obj_reply, inline_, hm_proc_bytes),
};

hm_return_t obj_reply_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, reply_fields, HM_PROC_FIELD_COUNT(reply_fields));
}

static const hm_proc_field_t count_out_fields[] = {
    HM_PROC_FIELD(struct obj_count_out, objects, hm_proc_uint64),
    HM_PROC_FIELD(struct obj_count_out, bytes, hm_proc_uint64),
    HM_PROC_FIELD(struct obj_count_out, rss_kb, hm_proc_uint64),
    HM_PROC_FIELD(struct obj_count_out, contexts, hm_proc_uint32),
};

hm_return_t obj_count_out_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, count_out_fields, HM_PROC_FIELD_COUNT(count_out_fields));
}

hm_return_t obj_list_in_proc(hm_proc_t *p, void *d)
{
    return hm_proc_string(p, &((struct obj_list_in *)d)->prefix);
}

/* The key bytes travel with their length; a peer's length above the array is
 * refused before any byte is copied, and keys that do not end with a NUL are
 * refused after (a reader walks them with strlen). */
hm_return_t obj_list_out_proc(hm_proc_t *p, void *d)
{
    struct obj_list_out *out = d;
    hm_return_t ret = hm_proc_uint64(p, &out->matched);
    if (ret == HM_SUCCESS)
        ret = hm_proc_uint32(p, &out->used);
    if (ret == HM_SUCCESS)
        ret = hm_proc_uint32(p, &out->truncated);
    if (ret != HM_SUCCESS || hm_proc_get_op(p) == HM_PROC_FREE)
        return ret;
    if (out->used > OBJ_LIST_BYTES || out->truncated > 1)
        return HM_PROTOCOL_ERROR;
    if (out->used == 0)
        return HM_SUCCESS;
    ret = hm_proc_raw(p, out->keys, out->used);
    if (ret == HM_SUCCESS && hm_proc_get_op(p) == HM_PROC_DECODE &&
        out->keys[out->used - 1] != '\0')
        return HM_PROTOCOL_ERROR;
    return ret;
}

hm_return_t obj_count_aggregate(void *acc, const void *other, void *arg)
{
    struct obj_count_out *a = acc;
    const struct obj_count_out *o = other;
    (void)arg;
    a->objects += o->objects;
    a->bytes += o->bytes;
    a->rss_kb += o->rss_kb;
    if (o->contexts < a->contexts)
        a->contexts = o->contexts;
    return HM_SUCCESS;
}

hm_return_t obj_list_aggregate(void *acc, const void *other, void *arg)
{
    struct obj_list_out *a = acc;
    const struct obj_list_out *o = other;
    (void)arg;
    a->matched += o->matched;
    if (o->truncated)
        a->truncated = 1;
    size_t room = OBJ_LIST_BYTES - a->used;
    if (o->used <= room) {
        memcpy(a->keys + a->used, o->keys, o->used);
        a->used += o->used;
    } else {
        a->truncated = 1; /* keys are not split: the whole other list is left out */
    }
    return HM_SUCCESS;
}

bool obj_key_valid(const char *key)
{
    if (key == NULL)
        return false;
    size_t len = strnlen(key, OBJ_KEY_MAX + 1);
    return len >= 1 && len <= OBJ_KEY_MAX;
}

uint64_t obj_key_hash(const char *key)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *c = (const unsigned char *)key; *c != '\0'; c++) {
        h ^= *c;
        h *= 0x100000001b3ull;
    }
    return h;
}

void obj_list_append(struct obj_list_out *out, const char *key)
{
    size_t len = strlen(key) + 1;
    out->matched++;
    if (len > OBJ_LIST_BYTES - out->used) {
        out->truncated = 1;
        return;
    }
    memcpy(out->keys + out->used, key, len);
    out->used += (uint32_t)len;
}

uint64_t obj_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
