/*
 * server_store.c: the shard's hash table (chained, power-of-two buckets,
 * doubled at load 1) and its memory accounting (see server_store.h).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "server_store.h"

struct store_entry {
    struct store_entry *next;
    uint64_t hash;
    struct store_value *value;
    char key[]; /* NUL-terminated */
};

struct store {
    pthread_mutex_t lock;
    struct store_entry **buckets;
    size_t nbuckets; /* power of two */
    uint64_t objects;
    uint64_t bytes; /* reserved or held by live values */
    uint64_t cap;   /* 0: none */
};

struct store *store_create(uint64_t cap)
{
    struct store *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return NULL;
    st->nbuckets = 1024;
    st->buckets = calloc(st->nbuckets, sizeof(*st->buckets));
    if (st->buckets == NULL) {
        free(st);
        return NULL;
    }
    pthread_mutex_init(&st->lock, NULL);
    st->cap = cap;
    return st;
}

/*
 * Values of STORE_MMAP_MIN bytes or more get pages of their own (mmap), so
 * that deleting them gives the memory back to the system at once. From
 * malloc they would not: glibc raises its mmap threshold after the first
 * large free, and later large values then stay in the heap after free.
 */
#define STORE_MMAP_MIN ((uint64_t)64 << 10)

static void *value_alloc(uint64_t size)
{
    if (size < STORE_MMAP_MIN)
        return malloc(size > 0 ? size : 1);
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p != MAP_FAILED ? p : NULL;
}

static void value_free(struct store_value *value)
{
    if (value->size < STORE_MMAP_MIN)
        free(value->data);
    else
        munmap(value->data, value->size);
    free(value);
}

void store_destroy(struct store *st)
{
    if (st == NULL)
        return;
    for (size_t b = 0; b < st->nbuckets; b++) {
        struct store_entry *e = st->buckets[b], *next;
        for (; e != NULL; e = next) {
            next = e->next;
            value_free(e->value);
            free(e);
        }
    }
    free(st->buckets);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

obj_status_t store_value_new(struct store *st, uint64_t size, struct store_value **value_out)
{
    pthread_mutex_lock(&st->lock);
    bool over = st->cap != 0 && (size > st->cap || st->bytes > st->cap - size);
    if (!over)
        st->bytes += size;
    pthread_mutex_unlock(&st->lock);
    if (over)
        return OBJ_FULL;
    struct store_value *value = calloc(1, sizeof(*value));
    void *data = value != NULL ? value_alloc(size) : NULL;
    if (value == NULL || data == NULL) {
        free(value);
        pthread_mutex_lock(&st->lock);
        st->bytes -= size;
        pthread_mutex_unlock(&st->lock);
        return OBJ_NOMEM;
    }
    value->data = data;
    value->size = size;
    value->refs = 1;
    *value_out = value;
    return OBJ_OK;
}

void store_value_unref(struct store *st, struct store_value *value)
{
    pthread_mutex_lock(&st->lock);
    bool last = --value->refs == 0;
    if (last)
        st->bytes -= value->size;
    pthread_mutex_unlock(&st->lock);
    if (last)
        value_free(value);
}

/* The slot pointing at `key`'s entry (or the bucket's end); lock held. */
static struct store_entry **store_find(struct store *st, const char *key, uint64_t hash)
{
    struct store_entry **slot = &st->buckets[hash & (st->nbuckets - 1)];
    while (*slot != NULL && ((*slot)->hash != hash || strcmp((*slot)->key, key) != 0))
        slot = &(*slot)->next;
    return slot;
}

/* Double the table when it is as full as it is wide; lock held. A failed
 * allocation just leaves longer chains. */
static void store_grow(struct store *st)
{
    if (st->objects < st->nbuckets)
        return;
    size_t n = st->nbuckets * 2;
    struct store_entry **nb = calloc(n, sizeof(*nb));
    if (nb == NULL)
        return;
    for (size_t b = 0; b < st->nbuckets; b++) {
        struct store_entry *e = st->buckets[b], *next;
        for (; e != NULL; e = next) {
            next = e->next;
            e->next = nb[e->hash & (n - 1)];
            nb[e->hash & (n - 1)] = e;
        }
    }
    free(st->buckets);
    st->buckets = nb;
    st->nbuckets = n;
}

obj_status_t store_insert(struct store *st, const char *key, struct store_value *value)
{
    uint64_t hash = obj_key_hash(key);
    size_t len = strlen(key);
    struct store_entry *fresh = malloc(sizeof(*fresh) + len + 1);
    struct store_value *old = NULL;

    if (fresh == NULL) {
        store_value_unref(st, value);
        return OBJ_NOMEM;
    }
    pthread_mutex_lock(&st->lock);
    struct store_entry **slot = store_find(st, key, hash);
    if (*slot != NULL) {
        old = (*slot)->value;
        (*slot)->value = value;
    } else {
        fresh->next = NULL;
        fresh->hash = hash;
        fresh->value = value;
        memcpy(fresh->key, key, len + 1);
        *slot = fresh;
        fresh = NULL;
        st->objects++;
        store_grow(st);
    }
    pthread_mutex_unlock(&st->lock);
    free(fresh);
    if (old != NULL)
        store_value_unref(st, old);
    return OBJ_OK;
}

obj_status_t store_lookup(struct store *st, const char *key, struct store_value **value_out)
{
    pthread_mutex_lock(&st->lock);
    struct store_entry *e = *store_find(st, key, obj_key_hash(key));
    if (e != NULL) {
        e->value->refs++;
        *value_out = e->value;
    }
    pthread_mutex_unlock(&st->lock);
    return e != NULL ? OBJ_OK : OBJ_NOKEY;
}

obj_status_t store_remove(struct store *st, const char *key)
{
    pthread_mutex_lock(&st->lock);
    struct store_entry **slot = store_find(st, key, obj_key_hash(key));
    struct store_entry *e = *slot;
    if (e != NULL) {
        *slot = e->next;
        st->objects--;
    }
    pthread_mutex_unlock(&st->lock);
    if (e == NULL)
        return OBJ_NOKEY;
    store_value_unref(st, e->value);
    free(e);
    return OBJ_OK;
}

void store_totals(struct store *st, uint64_t *objects, uint64_t *bytes)
{
    pthread_mutex_lock(&st->lock);
    *objects = st->objects;
    *bytes = st->bytes;
    pthread_mutex_unlock(&st->lock);
}

void store_each_prefix(struct store *st, const char *prefix, void (*fn)(const char *key, void *arg),
                       void *arg)
{
    size_t plen = strlen(prefix);
    pthread_mutex_lock(&st->lock);
    for (size_t b = 0; b < st->nbuckets; b++)
        for (struct store_entry *e = st->buckets[b]; e != NULL; e = e->next)
            if (strncmp(e->key, prefix, plen) == 0)
                fn(e->key, arg);
    pthread_mutex_unlock(&st->lock);
}
