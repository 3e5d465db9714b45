/*
 * The owner's key table: every region this process exposes to peers, by
 * slot, with a random 128-bit key, its base, length and the access granted.
 *
 * It is the one authority for "may a peer touch these bytes?" on every
 * protocol whose RMA is not enforced by hardware (DESIGN §8, "Trust"):
 *
 *  - RMA over messages (na_swrma.c): the owner looks the request up here
 *    (hmi_keytab_pin) before it copies a byte, on its own side.
 *  - CMA (na_cma.c): a peer on the same host reads the entry out of this
 *    process with process_vm_readv and checks it (hmi_keytab_check_image)
 *    before it copies. A peer that can read the table can already read all
 *    of this process's memory, so reading it grants nothing new; what it
 *    proves is that the region's owner registered these bytes and handed
 *    out this key, and that the registration is still live.
 *
 * The table is one per process, in a MAP_PRIVATE mapping of a memfd named
 * HMI_KEYTAB_NAME, so a peer finds it in /proc/PID/maps (the kernel says
 * where it is: no address a peer sent is ever trusted). Its first
 * HMI_KEYTAB_ENTRY bytes are a header (magic, owner pid, capacity); slot s
 * is the entry at hmi_keytab_entry_offset(s).
 *
 * Keys come from getrandom(2): a peer that was never given a key cannot
 * guess it, and a key is never reused, so a descriptor of a freed region
 * fails. Slots are reused; keys are not.
 *
 * Torn reads. A remote reader copies an entry while its owner may rewrite
 * it. The owner publishes a registration by writing base, length and access
 * first, then the key, then e_tail (a copy of the key's first word); it
 * revokes by clearing the key, then e_tail. A reader accepts an entry only if
 * both the key and the tail match its descriptor: the kernel copies in
 * address order, so the fields it read between them belong to that
 * registration.
 *
 * Threads: any thread may add and remove (one mutex; not on the per-RPC
 * path). hmi_keytab_pin / unpin are lock-free.
 *
 * fork(): the child gets a copy of the table (its own copy of the memory
 * too); the header's pid is rewritten in the child, so a peer reading the
 * child sees the child's pid.
 */
#ifndef HM_NA_KEYTAB_H
#define HM_NA_KEYTAB_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hermod/types.h>

#define HMI_KEYTAB_NAME "hermod-keys"
#define HMI_KEYTAB_MAGIC 0x5942544b594d4548ull /* "HEMYKTBY" little-endian */
#define HMI_KEYTAB_ENTRY 64u                   /* bytes per entry and header */

/* A region's random key, as it travels in a descriptor. Never all zero. */
struct hmi_keytab_key {
    uint64_t k0;
    uint64_t k1;
};

/* One entry, exactly as it lies in the mapping (and as a peer reads it). */
struct hmi_keytab_entry {
    _Atomic uint64_t e_key0;  /* 0: free or being rewritten */
    _Atomic uint64_t e_key1;
    uint64_t e_base;
    uint64_t e_len;
    uint32_t e_access;        /* hmi_na_access bits */
    _Atomic uint32_t e_busy;  /* local copies in progress (hmi_keytab_pin) */
    uint64_t e_pad[2];
    _Atomic uint64_t e_tail;  /* == e_key0 while live; written last */
};

/* The table's header, at offset 0 of the mapping. */
struct hmi_keytab_header {
    uint64_t h_magic;         /* HMI_KEYTAB_MAGIC */
    uint32_t h_pid;           /* the owner's pid (rewritten after fork) */
    uint32_t h_capacity;      /* slots */
    uint64_t h_pad[6];
};

_Static_assert(sizeof(struct hmi_keytab_entry) == HMI_KEYTAB_ENTRY, "entry size");
_Static_assert(sizeof(struct hmi_keytab_header) == HMI_KEYTAB_ENTRY, "header size");

/* Byte offset of slot `slot` from the start of the mapping. */
static inline uint64_t hmi_keytab_entry_offset(uint32_t slot)
{
    return (uint64_t)(slot + 1u) * HMI_KEYTAB_ENTRY;
}

/* Map the table on first use (every NA class takes a reference). */
hm_return_t hmi_keytab_acquire(void);
void hmi_keytab_release(void);

/*
 * Expose [base, base+len) with `access` (hmi_na_access bits): a fresh slot
 * and key. HM_NOMEM when the table is full, HM_FAULT when no randomness.
 */
hm_return_t hmi_keytab_add(const void *base, size_t len, unsigned int access,
                           uint32_t *slot_out, struct hmi_keytab_key *key_out);
/*
 * Revoke `slot`: from this call on no new access is granted, and the call
 * returns only once local copies in progress (pins) have ended. A peer that
 * checked the entry over CMA before the revocation may still finish the copy
 * it checked (see ARCHITECTURE, "Trust").
 */
void hmi_keytab_remove(uint32_t slot);

/*
 * The owner's check for a request from the network: is `key` live in `slot`,
 * is [off, off+len) inside its region, is `need` granted? On success *addr_out
 * is where the bytes are and the entry is pinned (it cannot be revoked until
 * hmi_keytab_unpin). HM_PERMISSION otherwise (unknown slot, wrong or revoked
 * key, out of range, not granted), with nothing pinned.
 */
hm_return_t hmi_keytab_pin(uint32_t slot, const struct hmi_keytab_key *key, uint64_t off,
                           uint64_t len, unsigned int need, void **addr_out);
void hmi_keytab_unpin(uint32_t slot);

/*
 * A requester's check of an entry image it read from the owner (CMA): the
 * same rules as hmi_keytab_pin, without pinning. *addr_out is the address in
 * the owner's process. HM_PERMISSION otherwise.
 */
hm_return_t hmi_keytab_check_image(const struct hmi_keytab_entry *img,
                                   const struct hmi_keytab_key *key, uint64_t off,
                                   uint64_t len, unsigned int need, uint64_t *addr_out);
/*
 * A requester's check of a header image it read from process `pid`:
 * magic, pid, and that `slot` is below the capacity.
 */
bool hmi_keytab_check_header(const struct hmi_keytab_header *img, uint32_t pid, uint32_t slot);

/* Live entries (for tests and hm_info). */
uint32_t hmi_keytab_live(void);

#endif /* HM_NA_KEYTAB_H */
