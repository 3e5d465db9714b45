/* Monotonic time. */
#ifndef HM_UTIL_TIME_H
#define HM_UTIL_TIME_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds since an arbitrary fixed point (CLOCK_MONOTONIC). */
static inline uint64_t hmi_time_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t hmi_time_us(void)
{
    return hmi_time_ns() / 1000u;
}

#endif
