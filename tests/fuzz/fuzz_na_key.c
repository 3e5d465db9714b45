/*
 * libFuzzer target: owner-checked keys and key-table entries from the network.
 *
 * The first HMI_NA_KEY_SIZE bytes (or all of a shorter input) are parsed as a
 * packed key: what parses must be canonical (packing the parsed fields gives
 * the same bytes back). The rest is read as a key-table entry image, as a CMA
 * reader copies it out of a peer, followed by an offset, a length and an
 * access: whatever the bytes, a check that passes must describe a range
 * inside the entry's region, with the access it grants, and a key that
 * matches the entry's key and tail.
 */
#include <stdint.h>
#include <string.h>

#include "na/na_rma.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t hm_fuzz_seed(uint8_t *buf, size_t cap);

static uint64_t fz_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void fz_key(const uint8_t *data, size_t size)
{
    struct hmi_na_rkey k;
    const char *why = NULL;
    if (hmi_na_key_decode(data, size, &k, &why) != HM_SUCCESS) {
        if (why == NULL)
            __builtin_trap(); /* every refusal says why */
        return;
    }
    if (size != HMI_NA_KEY_SIZE || k.k_key.k0 == 0 || k.k_key.k1 == 0)
        __builtin_trap();
    /* Canonical: the parsed fields pack back into the same bytes, pid aside
     * (encoding writes our own pid). */
    hmi_na_mem_t mem = {.m_len = (size_t)k.k_len, .m_access = k.k_access, .m_slot = k.k_slot,
                       .m_key = k.k_key};
    uint8_t again[HMI_NA_KEY_SIZE];
    hmi_na_key_encode(&mem, k.k_cma, again);
    if (memcmp(again, data, 8) != 0 || memcmp(again + 12, data + 12, HMI_NA_KEY_SIZE - 12) != 0)
        __builtin_trap();
}

#define FZ_TAIL (sizeof(struct hmi_keytab_entry) + 16 + 16 + 8 + 4)

static void fz_image(const uint8_t *p)
{
    struct hmi_keytab_entry img;
    memcpy(&img, p, sizeof(img));
    p += sizeof(img);
    struct hmi_keytab_key key = {.k0 = fz_le64(p), .k1 = fz_le64(p + 8)};
    uint64_t off = fz_le64(p + 16), len = fz_le64(p + 24), addr = 0;
    uint32_t access_bits = p[40] & 3u;
    if (hmi_keytab_check_image(&img, &key, off, len, access_bits, &addr) != HM_SUCCESS)
        return;
    uint64_t base = img.e_base, region = img.e_len;
    if (key.k0 == 0 || atomic_load(&img.e_key0) != key.k0 || atomic_load(&img.e_key1) != key.k1 ||
        atomic_load(&img.e_tail) != key.k0 || access_bits == 0 ||
        (access_bits & ~img.e_access) != 0 || off > region || len > region - off ||
        base + region < base || addr != base + off)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_key(data, size < HMI_NA_KEY_SIZE ? size : HMI_NA_KEY_SIZE);
    if (size >= HMI_NA_KEY_SIZE + FZ_TAIL)
        fz_image(data + HMI_NA_KEY_SIZE);
    return 0;
}

/* A valid key, then an entry image whose check passes. */
size_t hm_fuzz_seed(uint8_t *buf, size_t cap)
{
    if (cap < HMI_NA_KEY_SIZE + FZ_TAIL)
        return 0;
    hmi_na_mem_t mem = {.m_len = 4096, .m_access = 3, .m_slot = 7,
                       .m_key = {.k0 = 0x1122334455667788ull, .k1 = 0x99aabbccddeeff01ull}};
    hmi_na_key_encode(&mem, false, buf);
    struct hmi_keytab_entry img;
    memset(&img, 0, sizeof(img));
    atomic_store(&img.e_key0, mem.m_key.k0);
    atomic_store(&img.e_key1, mem.m_key.k1);
    atomic_store(&img.e_tail, mem.m_key.k0);
    img.e_base = 0x10000;
    img.e_len = 4096;
    img.e_access = 3;
    uint8_t *p = buf + HMI_NA_KEY_SIZE;
    memcpy(p, &img, sizeof(img));
    p += sizeof(img);
    memcpy(p, &mem.m_key.k0, 8);
    memcpy(p + 8, &mem.m_key.k1, 8);
    uint64_t off = 100, len = 200;
    memcpy(p + 16, &off, 8);
    memcpy(p + 24, &len, 8);
    memset(p + 32, 0, 8);
    p[40] = 1;
    return HMI_NA_KEY_SIZE + FZ_TAIL;
}
