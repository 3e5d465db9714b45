/*
 * Hermod: basic types shared by every layer of the public API.
 */
#ifndef HERMOD_TYPES_H
#define HERMOD_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hermod/version.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(HM_BUILDING)
#define HM_EXPORT __attribute__((visibility("default")))
#else
#define HM_EXPORT
#endif

/*
 * Status codes. 0 is success; "in progress" is not an error and has no code.
 * The list is written once: the enum and hm_strerror()'s strings both come
 * from it, so they cannot drift apart. Values are stable: they travel in
 * error responses.
 */
#define HM_RETURN_LIST(X)                                                      \
    X(HM_SUCCESS, 0, "success")                                                \
    X(HM_TIMEOUT, 1, "timed out")                                              \
    X(HM_CANCELED, 2, "canceled")                                              \
    X(HM_AGAIN, 3, "resource temporarily unavailable, try again")              \
    X(HM_NOMEM, 4, "out of memory")                                            \
    X(HM_INVALID_ARG, 5, "invalid argument")                                   \
    X(HM_PROTOCOL_ERROR, 6, "protocol error (malformed or inconsistent data)") \
    X(HM_NOENTRY, 7, "no such entry (unknown RPC id, address or object)")      \
    X(HM_MSGSIZE, 8, "message too large")                                      \
    X(HM_UNREACHABLE, 9, "peer unreachable or dead")                           \
    X(HM_PERMISSION, 10, "permission denied")                                  \
    X(HM_NOT_SUPPORTED, 11, "not supported")                                   \
    X(HM_EXISTS, 12, "already exists")                                         \
    X(HM_BUSY, 13, "busy: object still in use")                                \
    X(HM_TRANSPORT_ERROR, 14, "transport error")                               \
    X(HM_FAULT, 15, "internal error")                                          \
    X(HM_STALE, 16, "stale group version (membership differs)")               \
    X(HM_OVERLOADED, 17, "server over its admission budget, retry later")      \
    X(HM_INCOMPATIBLE, 18, "peer serves no compatible version of the RPC's protocol") \
    X(HM_CHECKSUM_MISMATCH, 19, "peer's checksum setting differs from ours")

#define HM_RETURN_ENUM_ENTRY(name, value, text) name = value,
typedef enum hm_return { HM_RETURN_LIST(HM_RETURN_ENUM_ENTRY) HM_RETURN_MAX } hm_return_t;
#undef HM_RETURN_ENUM_ENTRY

/* hm_strerror: a static string describing `ret`; never NULL ("unknown error" out of range). */
HM_EXPORT const char *hm_strerror(hm_return_t ret);

/*
 * hm_error_detail: the last error log line produced on the calling thread
 * (e.g. "ucx: cannot open protocol \"shm\": no such device"), whether or not
 * logging is enabled; "" when there is none. Valid until the thread's next
 * failing Hermod call.
 */
HM_EXPORT const char *hm_error_detail(void);

/* A 128-bit UUID, sent as its 16 bytes in order. */
typedef struct hm_uuid {
    uint8_t bytes[16];
} hm_uuid_t;

#ifdef __cplusplus
}
#endif

#endif /* HERMOD_TYPES_H */
