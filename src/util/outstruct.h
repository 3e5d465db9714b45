/*
 * Output structs the caller sizes (hm_stats_t, hm_context_info_t,
 * hm_class_info_t, hm_bulk_cache_stats_t): their first field is `size_t
 * size`, which the caller sets to the sizeof it was compiled with. The
 * library fills a whole struct of its own, then copies min(caller's size,
 * its size) bytes of it after the size field, so a program built against
 * older headers gets the fields it knows and no byte past its struct. A
 * size below the struct's first version (HM_*_SIZE_V1) is refused
 * (HM_INVALID_ARG), as is a size that is not set.
 */
#ifndef HM_UTIL_OUTSTRUCT_H
#define HM_UTIL_OUTSTRUCT_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* The size the caller set in `out`'s first field. */
static inline size_t hmi_out_size(const void *out)
{
    size_t size;
    memcpy(&size, out, sizeof(size));
    return size;
}

/* Is the caller's struct at least the first version (`v1_size`)? */
static inline bool hmi_out_size_ok(const void *out, size_t v1_size)
{
    return hmi_out_size(out) >= v1_size;
}

/* Copy `full` (the library's whole struct of `full_size` bytes) into `out`
 * up to the caller's size, leaving its size field; checked with _size_ok. */
static inline void hmi_out_copy(void *out, const void *full, size_t full_size)
{
    size_t size = hmi_out_size(out);
    size_t len = size < full_size ? size : full_size;
    memcpy((char *)out + sizeof(size_t), (const char *)full + sizeof(size_t),
           len - sizeof(size_t));
}

#endif
