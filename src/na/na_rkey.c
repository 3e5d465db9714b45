/*
 * Owner-checked keys: the layout is in na_rma.h. Encoding is a fixed record;
 * decoding treats every byte as hostile.
 */
#include <string.h>
#include <unistd.h>

#include "na/na_rma.h"
#include "util/le.h"

#define NA_KEY_ACCESS_ALL (HM_NA_ACCESS_READ | HM_NA_ACCESS_WRITE)

void hmi_na_key_encode(const hmi_na_mem_t *mem, bool cma, unsigned char *out)
{
    hmi_le_put32(out, HMI_NA_KEY_MAGIC);
    out[4] = HMI_NA_KEY_VERSION;
    out[5] = cma ? HMI_NA_KEY_F_CMA : 0;
    out[6] = (unsigned char)(mem->m_access & NA_KEY_ACCESS_ALL);
    out[7] = 0;
    hmi_le_put32(out + 8, cma ? (uint32_t)getpid() : 0);
    hmi_le_put32(out + 12, mem->m_slot);
    hmi_le_put64(out + 16, mem->m_key.k0);
    hmi_le_put64(out + 24, mem->m_key.k1);
    hmi_le_put64(out + 32, (uint64_t)mem->m_len);
}

hm_return_t hmi_na_key_decode(const void *buf, size_t len, struct hmi_na_rkey *out,
                              const char **why)
{
    const unsigned char *in = buf;
    if (buf == NULL || len != HMI_NA_KEY_SIZE) {
        *why = "not the size of a key";
        return HM_PROTOCOL_ERROR;
    }
    if (hmi_le_get32(in) != HMI_NA_KEY_MAGIC || in[4] != HMI_NA_KEY_VERSION) {
        *why = "bad magic or version";
        return HM_PROTOCOL_ERROR;
    }
    if ((in[5] & ~HMI_NA_KEY_F_CMA) != 0 || (in[6] & ~NA_KEY_ACCESS_ALL) != 0 || in[7] != 0) {
        *why = "unknown flags or access bits";
        return HM_PROTOCOL_ERROR;
    }
    struct hmi_na_rkey k = {
        .k_cma = (in[5] & HMI_NA_KEY_F_CMA) != 0,
        .k_access = in[6],
        .k_pid = hmi_le_get32(in + 8),
        .k_slot = hmi_le_get32(in + 12),
        .k_key = {.k0 = hmi_le_get64(in + 16), .k1 = hmi_le_get64(in + 24)},
        .k_len = hmi_le_get64(in + 32),
    };
    if (k.k_key.k0 == 0 || k.k_key.k1 == 0) {
        *why = "a zero key";
        return HM_PROTOCOL_ERROR;
    }
    if (k.k_cma != (k.k_pid != 0) || k.k_pid > INT32_MAX) {
        *why = "a pid without the CMA flag, or the flag without a pid";
        return HM_PROTOCOL_ERROR;
    }
    *out = k;
    return HM_SUCCESS;
}
