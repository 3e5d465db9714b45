/*
 * The owner's key table (see na_keytab.h for the contract and the layout).
 */
#include "na/na_keytab.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "util/log.h"

/* Slots in the table: 16 MiB of address space, pages touched as used. */
#define KEYTAB_CAPACITY (1u << 18)
/* Random words fetched per getrandom(2) call. */
#define KEYTAB_RANDOM_BATCH 128u

static struct {
    pthread_mutex_t t_lock;
    unsigned int t_refs;
    unsigned char *t_map;         /* header, then the entries */
    size_t t_map_len;
    uint32_t *t_free;             /* stack of freed slots */
    uint32_t t_free_top;
    uint32_t t_fresh;             /* slots never used start here */
    uint32_t t_live;
    uint64_t t_random[KEYTAB_RANDOM_BATCH];
    unsigned int t_random_left;
    bool t_atfork;
} keytab = {.t_lock = PTHREAD_MUTEX_INITIALIZER};

static struct hmi_keytab_header *keytab_header(void)
{
    return (struct hmi_keytab_header *)(void *)keytab.t_map;
}

static struct hmi_keytab_entry *keytab_entry(uint32_t slot)
{
    return (struct hmi_keytab_entry *)(void *)(keytab.t_map + hmi_keytab_entry_offset(slot));
}

/* In a forked child: the table is its copy now; say whose it is. */
static void keytab_atfork_child(void)
{
    pthread_mutex_init(&keytab.t_lock, NULL);
    if (keytab.t_map != NULL)
        keytab_header()->h_pid = (uint32_t)getpid();
}

static hm_return_t keytab_map(void)
{
    size_t len = (size_t)hmi_keytab_entry_offset(KEYTAB_CAPACITY);
    int fd = memfd_create(HMI_KEYTAB_NAME, MFD_CLOEXEC);
    if (fd < 0) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "na: memfd_create(%s): %s", HMI_KEYTAB_NAME,
                strerror(errno));
        return HM_NOMEM;
    }
    void *map = MAP_FAILED;
    if (ftruncate(fd, (off_t)len) == 0)
        map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd); /* the mapping keeps the memfd alive, and its name in /proc/PID/maps */
    uint32_t *free_stack = map == MAP_FAILED ? NULL : malloc(KEYTAB_CAPACITY * sizeof(uint32_t));
    if (free_stack == NULL) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "na: cannot map the key table (%zu bytes): %s",
                len, strerror(map == MAP_FAILED ? err : ENOMEM));
        if (map != MAP_FAILED)
            munmap(map, len);
        return HM_NOMEM;
    }
    keytab.t_map = map;
    keytab.t_map_len = len;
    keytab.t_free = free_stack;
    keytab.t_free_top = 0;
    keytab.t_fresh = 0;
    keytab.t_live = 0;
    struct hmi_keytab_header *h = keytab_header();
    h->h_magic = HMI_KEYTAB_MAGIC;
    h->h_pid = (uint32_t)getpid();
    h->h_capacity = KEYTAB_CAPACITY;
    return HM_SUCCESS;
}

hm_return_t hmi_keytab_acquire(void)
{
    hm_return_t ret = HM_SUCCESS;
    pthread_mutex_lock(&keytab.t_lock);
    if (keytab.t_map == NULL)
        ret = keytab_map();
    if (ret == HM_SUCCESS) {
        keytab.t_refs++;
        if (!keytab.t_atfork)
            keytab.t_atfork = pthread_atfork(NULL, NULL, keytab_atfork_child) == 0;
    }
    pthread_mutex_unlock(&keytab.t_lock);
    return ret;
}

void hmi_keytab_release(void)
{
    pthread_mutex_lock(&keytab.t_lock);
    if (keytab.t_refs > 0 && --keytab.t_refs == 0 && keytab.t_live == 0) {
        munmap(keytab.t_map, keytab.t_map_len);
        free(keytab.t_free);
        keytab.t_map = NULL;
        keytab.t_free = NULL;
    }
    pthread_mutex_unlock(&keytab.t_lock);
}

/* One random word; lock held. 0 when the kernel gives no randomness. */
static uint64_t keytab_random(void)
{
    if (keytab.t_random_left == 0) {
        ssize_t n = getrandom(keytab.t_random, sizeof(keytab.t_random), 0);
        if (n != (ssize_t)sizeof(keytab.t_random)) {
            hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "na: getrandom: %s",
                    n < 0 ? strerror(errno) : "short read");
            return 0;
        }
        keytab.t_random_left = KEYTAB_RANDOM_BATCH;
    }
    uint64_t word = keytab.t_random[--keytab.t_random_left];
    keytab.t_random[keytab.t_random_left] = 0; /* a used key does not linger here */
    return word;
}

/* A free slot, or KEYTAB_CAPACITY when the table is full; lock held. */
static uint32_t keytab_slot_take(void)
{
    if (keytab.t_free_top > 0)
        return keytab.t_free[--keytab.t_free_top];
    if (keytab.t_fresh < KEYTAB_CAPACITY)
        return keytab.t_fresh++;
    return KEYTAB_CAPACITY;
}

hm_return_t hmi_keytab_add(const void *base, size_t len, unsigned int access,
                           uint32_t *slot_out, struct hmi_keytab_key *key_out)
{
    hm_return_t ret = HM_SUCCESS;
    pthread_mutex_lock(&keytab.t_lock);
    struct hmi_keytab_key key = {.k0 = keytab_random(), .k1 = keytab_random()};
    uint32_t slot = KEYTAB_CAPACITY;
    if (keytab.t_map == NULL)
        ret = HM_FAULT;
    else if (key.k0 == 0 || key.k1 == 0)
        ret = HM_FAULT; /* no randomness (or, once in 2^64, a zero word) */
    else if ((slot = keytab_slot_take()) == KEYTAB_CAPACITY)
        ret = HM_NOMEM;
    if (ret == HM_SUCCESS) {
        struct hmi_keytab_entry *e = keytab_entry(slot);
        e->e_base = (uint64_t)(uintptr_t)base;
        e->e_len = (uint64_t)len;
        e->e_access = access;
        atomic_store_explicit(&e->e_key1, key.k1, memory_order_release);
        atomic_store_explicit(&e->e_key0, key.k0, memory_order_release);
        atomic_store_explicit(&e->e_tail, key.k0, memory_order_release);
        keytab.t_live++;
    } else {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "na: cannot expose %zu bytes: key table %s",
                len, ret == HM_NOMEM ? "full" : "has no random key");
    }
    pthread_mutex_unlock(&keytab.t_lock);
    if (ret == HM_SUCCESS) {
        *slot_out = slot;
        *key_out = key;
    }
    return ret;
}

void hmi_keytab_remove(uint32_t slot)
{
    if (keytab.t_map == NULL || slot >= KEYTAB_CAPACITY)
        return;
    struct hmi_keytab_entry *e = keytab_entry(slot);
    /* Revoke first (sequentially consistent, against hmi_keytab_pin's
     * busy-then-key order), then wait for the copies that got in before. */
    atomic_store(&e->e_key0, 0);
    atomic_store(&e->e_tail, 0);
    while (atomic_load(&e->e_busy) != 0)
        sched_yield();
    atomic_store(&e->e_key1, 0);
    pthread_mutex_lock(&keytab.t_lock);
    keytab.t_free[keytab.t_free_top++] = slot;
    keytab.t_live--;
    pthread_mutex_unlock(&keytab.t_lock);
}

/* Range and access rules shared by both checks. */
static hm_return_t keytab_range_ok(uint64_t base, uint64_t region_len, unsigned int access,
                                   uint64_t off, uint64_t len, unsigned int need,
                                   uint64_t *addr_out)
{
    if (off > region_len || len > region_len - off || (need & ~access) != 0 || need == 0)
        return HM_PERMISSION;
    *addr_out = base + off;
    return HM_SUCCESS;
}

hm_return_t hmi_keytab_pin(uint32_t slot, const struct hmi_keytab_key *key, uint64_t off,
                           uint64_t len, unsigned int need, void **addr_out)
{
    if (keytab.t_map == NULL || slot >= KEYTAB_CAPACITY || key->k0 == 0)
        return HM_PERMISSION;
    struct hmi_keytab_entry *e = keytab_entry(slot);
    if (atomic_load_explicit(&e->e_key0, memory_order_acquire) != key->k0)
        return HM_PERMISSION; /* the common refusal: no pin taken */
    atomic_fetch_add(&e->e_busy, 1);
    uint64_t addr;
    hm_return_t ret = HM_PERMISSION;
    if (atomic_load(&e->e_key0) == key->k0 && atomic_load(&e->e_key1) == key->k1 &&
        atomic_load(&e->e_tail) == key->k0)
        ret = keytab_range_ok(e->e_base, e->e_len, e->e_access, off, len, need, &addr);
    if (ret != HM_SUCCESS) {
        atomic_fetch_sub(&e->e_busy, 1);
        return ret;
    }
    *addr_out = (void *)(uintptr_t)addr;
    return HM_SUCCESS;
}

void hmi_keytab_unpin(uint32_t slot)
{
    atomic_fetch_sub(&keytab_entry(slot)->e_busy, 1);
}

hm_return_t hmi_keytab_check_image(const struct hmi_keytab_entry *img,
                                   const struct hmi_keytab_key *key, uint64_t off,
                                   uint64_t len, unsigned int need, uint64_t *addr_out)
{
    /* A plain copy of another process's bytes: read the fields as values. */
    uint64_t key0 = atomic_load_explicit(&img->e_key0, memory_order_relaxed);
    uint64_t key1 = atomic_load_explicit(&img->e_key1, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&img->e_tail, memory_order_relaxed);
    if (key->k0 == 0 || key0 != key->k0 || key1 != key->k1 || tail != key->k0)
        return HM_PERMISSION;
    if (img->e_base + img->e_len < img->e_base)
        return HM_PERMISSION;
    return keytab_range_ok(img->e_base, img->e_len, img->e_access, off, len, need, addr_out);
}

bool hmi_keytab_check_header(const struct hmi_keytab_header *img, uint32_t pid, uint32_t slot)
{
    return img->h_magic == HMI_KEYTAB_MAGIC && img->h_pid == pid && slot < img->h_capacity &&
           img->h_capacity <= KEYTAB_CAPACITY;
}

uint32_t hmi_keytab_live(void)
{
    pthread_mutex_lock(&keytab.t_lock);
    uint32_t live = keytab.t_live;
    pthread_mutex_unlock(&keytab.t_lock);
    return live;
}
