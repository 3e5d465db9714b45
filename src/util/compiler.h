/* Compiler helpers shared by the library. */
#ifndef HM_UTIL_COMPILER_H
#define HM_UTIL_COMPILER_H

#define hmi_likely(x) __builtin_expect(!!(x), 1)
#define hmi_unlikely(x) __builtin_expect(!!(x), 0)
#define HMI_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#include <stdatomic.h>

/*
 * hmi_fence: a full (sequentially consistent) fence. ThreadSanitizer does
 * not model fences and gcc refuses them under it (-Wtsan); the fences that
 * use this order memory shared with other processes, which TSan cannot see
 * anyway, so under TSan an x86 mfence keeps the hardware ordering.
 */
static inline void hmi_fence(void)
{
#if defined(__SANITIZE_THREAD__) && (defined(__x86_64__) || defined(__i386__))
    __asm__ __volatile__("mfence" ::: "memory");
#else
    atomic_thread_fence(memory_order_seq_cst);
#endif
}

/* hmi_cpu_relax: a pause inside a spin on memory another CPU writes. */
static inline void hmi_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

#endif
