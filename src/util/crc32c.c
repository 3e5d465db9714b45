/*
 * CRC32C (Castagnoli, reflected polynomial 0x82F63B78).
 *
 * Convention: the value passed in and returned is the finished CRC (already
 * xored with 0xFFFFFFFF), so hmi_crc32c(0, buf, len) is the standard CRC32C
 * and feeding a result back in continues it over the next bytes.
 *
 * The software version is slicing-by-8 over tables built once at first use
 * (8 KiB; building them costs less than embedding 2,048 constants). The
 * SSE4.2 version is compiled with a target attribute, not a global
 * -msse4.2, so the library still runs on CPUs without it; the choice is made
 * once and cached in a function pointer.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "util/crc32c.h"

#if defined(__x86_64__) || defined(__i386__)
#define CRC_HAVE_X86 1
#include <nmmintrin.h>
#else
#define CRC_HAVE_X86 0
#endif

#define CRC_POLY 0x82F63B78u

static uint32_t crc_table[8][256];
static pthread_once_t crc_table_once = PTHREAD_ONCE_INIT;

static void crc_table_build(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (CRC_POLY & (0u - (c & 1u)));
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = crc_table[0][n];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xFF] ^ (c >> 8);
            crc_table[t][n] = c;
        }
    }
}

/* A little-endian 64-bit load from any alignment. */
static uint64_t crc_load_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

uint32_t hmi_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    (void)pthread_once(&crc_table_once, crc_table_build);
    crc = ~crc;
    for (; len >= 8; len -= 8, p += 8) {
        uint64_t v = crc_load_le64(p) ^ crc;
        crc = crc_table[7][v & 0xFF] ^ crc_table[6][(v >> 8) & 0xFF] ^
              crc_table[5][(v >> 16) & 0xFF] ^ crc_table[4][(v >> 24) & 0xFF] ^
              crc_table[3][(v >> 32) & 0xFF] ^ crc_table[2][(v >> 40) & 0xFF] ^
              crc_table[1][(v >> 48) & 0xFF] ^ crc_table[0][v >> 56];
    }
    for (; len > 0; len--, p++)
        crc = crc_table[0][(crc ^ *p) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

#if CRC_HAVE_X86

/* Bytes one at a time up to an 8-byte boundary, then words, then the tail. */
__attribute__((target("sse4.2"))) uint32_t hmi_crc32c_hw(uint32_t crc, const void *buf,
                                                         size_t len)
{
    const unsigned char *p = buf;
    crc = ~crc;
    for (; len > 0 && ((uintptr_t)p & 7) != 0; len--, p++)
        crc = _mm_crc32_u8(crc, *p);
#if defined(__x86_64__)
    for (; len >= 8; len -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, sizeof(v));
        crc = (uint32_t)_mm_crc32_u64(crc, v);
    }
#endif
    for (; len >= 4; len -= 4, p += 4) {
        uint32_t v;
        memcpy(&v, p, sizeof(v));
        crc = _mm_crc32_u32(crc, v);
    }
    for (; len > 0; len--, p++)
        crc = _mm_crc32_u8(crc, *p);
    return ~crc;
}

bool hmi_crc32c_hw_available(void)
{
    __builtin_cpu_init(); /* needed if we run before the runtime's constructor */
    return __builtin_cpu_supports("sse4.2");
}

#else /* !CRC_HAVE_X86: no instruction to use; keep the symbol for callers and tests */

uint32_t hmi_crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
    return hmi_crc32c_sw(crc, buf, len);
}

bool hmi_crc32c_hw_available(void)
{
    return false;
}

#endif

typedef uint32_t (*crc_fn)(uint32_t crc, const void *buf, size_t len);

static uint32_t crc_resolve(uint32_t crc, const void *buf, size_t len);

/* Relaxed is enough: every value stored is a valid function, and each one
 * initialises what it needs itself. */
static _Atomic(crc_fn) crc_impl = crc_resolve;

static uint32_t crc_resolve(uint32_t crc, const void *buf, size_t len)
{
    crc_fn fn = hmi_crc32c_hw_available() ? hmi_crc32c_hw : hmi_crc32c_sw;
    atomic_store_explicit(&crc_impl, fn, memory_order_relaxed);
    return fn(crc, buf, len);
}

uint32_t hmi_crc32c(uint32_t crc, const void *buf, size_t len)
{
    return atomic_load_explicit(&crc_impl, memory_order_relaxed)(crc, buf, len);
}
