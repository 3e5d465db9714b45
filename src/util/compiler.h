/* Compiler helpers shared by the library. */
#ifndef HM_UTIL_COMPILER_H
#define HM_UTIL_COMPILER_H

#define hmi_likely(x) __builtin_expect(!!(x), 1)
#define hmi_unlikely(x) __builtin_expect(!!(x), 0)
#define HMI_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
