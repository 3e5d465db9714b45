/*
 * libFuzzer target: hm_proc_bulk decoding of arbitrary bytes. The input sits
 * in a malloc'd buffer of its exact size; decode must never read outside it,
 * and what decodes must be canonical: re-encoding the remote handle gives
 * back exactly the bytes consumed.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bulk/bulk_internal.h"
#include "proc/proc_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t hm_fuzz_seed(uint8_t *buf, size_t cap);

static void fz_check_canonical(const uint8_t *in, size_t used, hm_bulk_t *bulk)
{
    uint8_t *out = malloc(used ? used : 1);
    size_t again = 0;
    if (out == NULL)
        abort();
    if (hmi_proc_run(hm_proc_bulk, HM_PROC_ENCODE, out, used, &bulk, NULL, &again) !=
            HM_SUCCESS ||
        again != used || memcmp(out, in, used) != 0)
        abort();
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    hm_bulk_t *bulk = NULL;
    size_t used = 0;
    if (hmi_proc_run(hm_proc_bulk, HM_PROC_DECODE, buf, size, &bulk, NULL, &used) ==
        HM_SUCCESS) {
        fz_check_canonical(buf, used, bulk);
        hm_bulk_free(bulk);
    } else if (bulk != NULL) {
        abort(); /* a failed decode leaves no handle */
    }
    free(buf);
    return 0;
}

/* A valid two-segment handle with 6- and 9-byte keys. */
size_t hm_fuzz_seed(uint8_t *buf, size_t cap)
{
    size_t klen[2] = {6, 9};
    hm_bulk_t *bulk = hmi_bulk_alloc(2, klen[0] + klen[1]);
    if (bulk == NULL)
        return 0;
    bulk->b_perm = HM_BULK_READ_ONLY;
    uint8_t *p = bulk->b_key_store;
    for (uint32_t i = 0; i < 2; i++) {
        bulk->b_lens[i] = 4096u << i;
        bulk->b_size += bulk->b_lens[i];
        bulk->b_keys[i] = p;
        bulk->b_key_lens[i] = (uint32_t)klen[i];
        memset(p, 0xa0 + (int)i, klen[i]);
        p += klen[i];
    }
    size_t used = 0;
    hm_return_t ret = hmi_proc_run(hm_proc_bulk, HM_PROC_ENCODE, buf, cap, &bulk, NULL, &used);
    hm_bulk_free(bulk);
    return ret == HM_SUCCESS && used <= cap ? used : 0;
}
