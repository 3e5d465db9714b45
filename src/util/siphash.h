/*
 * SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed 64-bit hash. With a
 * key a peer does not know, the peer cannot choose names whose hashes
 * collide, so tables keyed by peer-chosen bytes keep their chains short.
 * Not a MAC for anything on the wire: only for hashing into tables.
 */
#ifndef HM_UTIL_SIPHASH_H
#define HM_UTIL_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

/* The hash of `len` bytes at `data` under the 128-bit `key`. */
uint64_t hmi_siphash(const uint64_t key[2], const void *data, size_t len);

/*
 * This process's table key: 128 random bits from getrandom(2), drawn once
 * (thread-safe). If the kernel gives none, a key mixed from the clock, the
 * pid and an address, with a warning: weaker, never fatal.
 */
const uint64_t *hmi_siphash_process_key(void);

#endif
