/*
 * The address table a plugin keeps per context so that its addresses stay
 * canonical (na.h: one object per peer and context): keyed by the
 * transport's own name for the peer, as bytes (ucx: the peer's URI; ofi: its
 * endpoint name). A lookup and every arriving message that names the peer
 * find the same entry.
 *
 * Intrusive: the entry lives inside the plugin's address and the table
 * never allocates or frees one; the name bytes are the plugin's and must
 * stay unchanged while the entry is in the table. Names whose hashes
 * collide are chained, so a find compares bytes and never returns another
 * peer. When a dead peer leaves the table is the plugin's policy (ucx: at
 * once, so a new lookup dials again; ofi: at context close, a dead name
 * stays dead). Not thread-safe: the context's thread only.
 */
#ifndef HM_NA_ADDRTAB_H
#define HM_NA_ADDRTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hermod/types.h>

#include "util/hmap.h"

struct hmi_na_addrtab_entry {
    struct hmi_na_addrtab_entry *e_next; /* same hash */
    const void *e_name;                  /* the plugin's bytes */
    size_t e_len;
    uint64_t e_hash;
    bool e_in; /* in a table */
};

/* Hash of a name; tests pass a poor one to force collisions. */
typedef uint64_t (*hmi_na_addrtab_hash_fn)(const void *name, size_t len);

struct hmi_na_addrtab {
    struct hmi_hmap t_heads;       /* hash -> first entry of its chain */
    hmi_na_addrtab_hash_fn t_hash; /* never NULL after init */
    size_t t_count;                /* entries in the table */
};

/* An empty table (allocates nothing: inserts do); `hash` NULL: SipHash-2-4
 * under the process's random key (util/siphash.h). */
void hmi_na_addrtab_init(struct hmi_na_addrtab *t, hmi_na_addrtab_hash_fn hash);
/* Forget every entry (each is marked out of the table; none is freed). */
void hmi_na_addrtab_fini(struct hmi_na_addrtab *t);

/* The entry named `name`, or NULL. */
struct hmi_na_addrtab_entry *hmi_na_addrtab_find(const struct hmi_na_addrtab *t,
                                                 const void *name, size_t len);
/*
 * Put `e` in under `name` (the caller found no entry of that name first).
 * HM_NOMEM (e stays out), HM_EXISTS (`e` is in a table already).
 */
hm_return_t hmi_na_addrtab_insert(struct hmi_na_addrtab *t, struct hmi_na_addrtab_entry *e,
                                  const void *name, size_t len);
/* Take `e` out; nothing when it is not in. Never allocates, never fails. */
void hmi_na_addrtab_remove(struct hmi_na_addrtab *t, struct hmi_na_addrtab_entry *e);

#endif /* HM_NA_ADDRTAB_H */
