/*
 * CRC32C (Castagnoli). hmi_crc32c uses the SSE4.2 crc32 instruction when the
 * CPU has it (checked once) and a table-driven fallback otherwise; both are
 * exposed so tests check each against published vectors.
 * Usage: crc = hmi_crc32c(0, buf, len); chaining: hmi_crc32c(crc, more, n).
 */
#ifndef HM_UTIL_CRC32C_H
#define HM_UTIL_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

uint32_t hmi_crc32c(uint32_t crc, const void *buf, size_t len);
uint32_t hmi_crc32c_sw(uint32_t crc, const void *buf, size_t len);
/* SSE4.2 version; only call when hmi_crc32c_hw_available(). */
uint32_t hmi_crc32c_hw(uint32_t crc, const void *buf, size_t len);
bool hmi_crc32c_hw_available(void);

#endif
