/*
 * Canonical-address table (na_addrtab.h): a hash map from the hash of a
 * name to the first entry of a chain of entries with that hash.
 */
#include "na/na_addrtab.h"

#include <string.h>

#include "util/siphash.h"

/*
 * Names are the peer's bytes (its URI, its endpoint name): hashed under this
 * process's random key, so a peer cannot choose names that chain.
 */
static uint64_t addrtab_siphash(const void *name, size_t len)
{
    return hmi_siphash(hmi_siphash_process_key(), name, len);
}

void hmi_na_addrtab_init(struct hmi_na_addrtab *t, hmi_na_addrtab_hash_fn hash)
{
    t->t_hash = hash != NULL ? hash : addrtab_siphash;
    t->t_count = 0;
    t->t_heads = (struct hmi_hmap){0}; /* hmi_hmap_init(.., 0) without its error path */
}

static void addrtab_forget_chain(uint64_t key, void *value, void *arg)
{
    (void)key;
    (void)arg;
    struct hmi_na_addrtab_entry *e = value, *next;
    for (; e != NULL; e = next) {
        next = e->e_next;
        e->e_next = NULL;
        e->e_in = false;
    }
}

void hmi_na_addrtab_fini(struct hmi_na_addrtab *t)
{
    hmi_hmap_foreach(&t->t_heads, addrtab_forget_chain, NULL);
    hmi_hmap_destroy(&t->t_heads);
    t->t_count = 0;
}

struct hmi_na_addrtab_entry *hmi_na_addrtab_find(const struct hmi_na_addrtab *t,
                                                 const void *name, size_t len)
{
    struct hmi_na_addrtab_entry *e = hmi_hmap_get(&t->t_heads, t->t_hash(name, len));
    for (; e != NULL; e = e->e_next)
        if (e->e_len == len && memcmp(e->e_name, name, len) == 0)
            return e;
    return NULL;
}

hm_return_t hmi_na_addrtab_insert(struct hmi_na_addrtab *t, struct hmi_na_addrtab_entry *e,
                                  const void *name, size_t len)
{
    if (e->e_in)
        return HM_EXISTS;
    e->e_name = name;
    e->e_len = len;
    e->e_hash = t->t_hash(name, len);
    struct hmi_na_addrtab_entry *head = hmi_hmap_get(&t->t_heads, e->e_hash);
    if (head != NULL) { /* behind the head: no map change, no allocation */
        e->e_next = head->e_next;
        head->e_next = e;
    } else {
        e->e_next = NULL;
        hm_return_t ret = hmi_hmap_put(&t->t_heads, e->e_hash, e);
        if (ret != HM_SUCCESS)
            return ret;
    }
    e->e_in = true;
    t->t_count++;
    return HM_SUCCESS;
}

void hmi_na_addrtab_remove(struct hmi_na_addrtab *t, struct hmi_na_addrtab_entry *e)
{
    if (!e->e_in)
        return;
    struct hmi_na_addrtab_entry *head = hmi_hmap_get(&t->t_heads, e->e_hash);
    if (head == e) {
        hmi_hmap_remove(&t->t_heads, e->e_hash);
        /* Re-putting the key just removed never grows the map: it cannot fail. */
        if (e->e_next != NULL)
            (void)hmi_hmap_put(&t->t_heads, e->e_hash, e->e_next);
    } else {
        struct hmi_na_addrtab_entry *prev = head;
        while (prev != NULL && prev->e_next != e)
            prev = prev->e_next;
        if (prev != NULL)
            prev->e_next = e->e_next;
    }
    e->e_next = NULL;
    e->e_in = false;
    t->t_count--;
}
