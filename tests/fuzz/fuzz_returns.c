/*
 * libFuzzer target: a response's returned pushes (bulk_return.c), as the
 * client, owner of the memory, checks and copies them. The input sits in a
 * malloc'd buffer of its exact size. The request had three pins over one
 * region with guard bytes around each buffer: 0 read-only and eager, 1
 * write-only and eager (two segments, the only one that asked), 2 plain
 * write-only. Whatever the bytes, nothing outside pin 1's buffer may change,
 * and a section that applies must name only pin 1.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bulk/bulk_internal.h"
#include "proc/proc_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t hm_fuzz_seed(uint8_t *buf, size_t cap);

#define FZ_GUARD 32u
#define FZ_SEG0 128u
#define FZ_SEG1 192u
#define FZ_OTHER 64u
/* Region: guard, pin 0, guard, pin 1 (seg0, seg1), guard, pin 2, guard. */
#define FZ_PIN0 FZ_GUARD
#define FZ_PIN1 (FZ_PIN0 + FZ_OTHER + FZ_GUARD)
#define FZ_PIN2 (FZ_PIN1 + FZ_SEG0 + FZ_SEG1 + FZ_GUARD)
#define FZ_REGION (FZ_PIN2 + FZ_OTHER + FZ_GUARD)

static struct hmi_bulk_rcache fz_rcache = {.rc_eager_max = 4096};

struct fz_pin {
    hm_bulk_t *bulk;
    hmi_na_mem_t mems[2];
    hmi_na_mem_t *mem_ptrs[2];
};

static void fz_pin_init(struct fz_pin *p, uint8_t *base, const size_t *lens, uint32_t count,
                        hm_bulk_perm_t perm, bool carry)
{
    p->bulk = hmi_bulk_alloc(count, 0);
    if (p->bulk == NULL)
        abort();
    for (uint32_t i = 0; i < count; i++) {
        p->mems[i] = (hmi_na_mem_t){.m_base = base, .m_len = lens[i]};
        p->mem_ptrs[i] = &p->mems[i];
        p->bulk->b_lens[i] = lens[i];
        p->bulk->b_size += lens[i];
        base += lens[i];
    }
    p->bulk->b_mems = p->mem_ptrs;
    p->bulk->b_perm = perm;
    p->bulk->b_carry = carry;
    p->bulk->b_class = (hmi_na_class_t *)(uintptr_t)0x1000; /* local: never dereferenced */
    p->bulk->b_rcache = &fz_rcache;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t region[FZ_REGION], before[FZ_REGION];
    uint8_t *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    for (size_t i = 0; i < FZ_REGION; i++)
        region[i] = (uint8_t)(i * 7 + 3);
    memcpy(before, region, sizeof(region));
    const size_t other[1] = {FZ_OTHER}, eager[2] = {FZ_SEG0, FZ_SEG1};
    struct fz_pin pins[3];
    fz_pin_init(&pins[0], region + FZ_PIN0, other, 1, HM_BULK_READ_ONLY, true);
    fz_pin_init(&pins[1], region + FZ_PIN1, eager, 2, HM_BULK_WRITE_ONLY, true);
    fz_pin_init(&pins[2], region + FZ_PIN2, other, 1, HM_BULK_WRITE_ONLY, false);
    hm_bulk_t *bulks[3] = {pins[0].bulk, pins[1].bulk, pins[2].bulk};
    hm_proc_t p;
    hmi_proc_init(&p, HM_PROC_DECODE, buf, size, NULL);
    (void)hmi_bulk_returns_apply(&p, bulks, 3);
    if (hm_proc_get_size(&p) > size)
        abort(); /* read past the input */
    /* Only pin 1's bytes may change, whether the section applied or not. */
    if (memcmp(region, before, FZ_PIN1) != 0 ||
        memcmp(region + FZ_PIN2 - FZ_GUARD, before + FZ_PIN2 - FZ_GUARD,
               FZ_REGION - (FZ_PIN2 - FZ_GUARD)) != 0)
        abort();
    for (int i = 0; i < 3; i++)
        free(pins[i].bulk); /* fake local handles: nothing registered */
    free(buf);
    return 0;
}

/* A valid section: two entries into pin 1, one across its segments. */
size_t hm_fuzz_seed(uint8_t *buf, size_t cap)
{
    uint8_t bytes[200];
    memset(bytes, 0x5a, sizeof(bytes));
    hm_proc_t p;
    uint8_t count = 2, index = 1;
    uint32_t offs[2] = {0, 100};
    uint64_t lens[2] = {16, 200};
    hmi_proc_init(&p, HM_PROC_ENCODE, buf, cap, NULL);
    hm_return_t ret = hm_proc_uint8(&p, &count);
    for (int i = 0; i < 2 && ret == HM_SUCCESS; i++) {
        hm_bytes_t b = {.data = bytes, .len = lens[i]};
        if ((ret = hm_proc_uint8(&p, &index)) == HM_SUCCESS &&
            (ret = hm_proc_uint32(&p, &offs[i])) == HM_SUCCESS)
            ret = hm_proc_bytes(&p, &b);
    }
    return ret == HM_SUCCESS && !hmi_proc_overflowed(&p) ? hm_proc_get_size(&p) : 0;
}
