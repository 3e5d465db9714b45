/*
 * Little-endian loads and stores of fixed-width integers at any alignment:
 * every wire format of Hermod is little-endian whatever the host.
 */
#ifndef HM_UTIL_LE_H
#define HM_UTIL_LE_H

#include <stdint.h>

static inline void hmi_le_put32(unsigned char *out, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        out[i] = (unsigned char)(v >> (8 * i));
}

static inline void hmi_le_put64(unsigned char *out, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        out[i] = (unsigned char)(v >> (8 * i));
}

static inline uint32_t hmi_le_get32(const unsigned char *in)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | in[i];
    return v;
}

static inline uint64_t hmi_le_get64(const unsigned char *in)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | in[i];
    return v;
}

#endif /* HM_UTIL_LE_H */
