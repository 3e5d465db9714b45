/*
 * SHA-256 (FIPS 180-4), one-shot. Used for the job-key digest of the hello
 * frame (src/na/na_hello.c); not a hot path. Checked against the FIPS
 * vectors in tests/unit/test_util_sha256.c.
 */
#ifndef HM_UTIL_SHA256_H
#define HM_UTIL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define HMI_SHA256_LEN 32

/* The digest of `len` bytes at `data` into `out`. */
void hmi_sha256(const void *data, size_t len, uint8_t out[HMI_SHA256_LEN]);

#endif
