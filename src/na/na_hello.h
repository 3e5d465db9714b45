/*
 * The hello frame: what a peer must send on a fresh TCP connection to a
 * Hermod listener before the listener hands it anything of the transport's
 * (src/na/na_listen.c). Plugin-neutral: UCX uses it to guard the exchange of
 * worker addresses; another plugin whose library cannot take raw input may
 * use it the same way.
 *
 * Layout, 48 bytes, little-endian, then `length` payload bytes:
 *
 *   0  magic    u32  "HMHL" (0x4c484d48)
 *   4  version  u16  1
 *   6  flags    u16  HM_NA_HELLO_F_REPLY (set by the listener's answer),
 *                    HM_NA_HELLO_F_KEYED (the digest field holds a job key's)
 *   8  length   u32  payload bytes, at most HM_NA_HELLO_PAYLOAD_MAX
 *  12  reserved u32  0
 *  16  digest   32 bytes: SHA-256 of "hermod-job-key-v1" and the job key, or
 *                    zeros without HM_NA_HELLO_F_KEYED
 *
 * The job key (HM_JOB_KEY) separates jobs: a listener with a key refuses a
 * hello without the same key's digest, and a dialer with a key refuses an
 * answer without it. It is not authentication: the digest travels in clear
 * and works as well as the key for anyone who can read the traffic.
 */
#ifndef HM_NA_HELLO_H
#define HM_NA_HELLO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hermod/types.h>

#define HM_NA_HELLO_MAGIC 0x4c484d48u
#define HM_NA_HELLO_VERSION 1u
#define HM_NA_HELLO_HDR 48u
#define HM_NA_HELLO_PAYLOAD_MAX 4096u
#define HM_NA_HELLO_F_REPLY 0x1u
#define HM_NA_HELLO_F_KEYED 0x2u
#define HM_NA_HELLO_DIGEST 32u

/* A job key as the frame carries it. */
struct hmi_na_hello_key {
    bool hk_set;
    uint8_t hk_digest[HM_NA_HELLO_DIGEST];
};

/* Why a frame was refused. */
enum hmi_na_hello_verdict {
    HM_NA_HELLO_OK = 0,
    HM_NA_HELLO_BAD_FRAME, /* magic, version, flags, reserved or length */
    HM_NA_HELLO_BAD_KEY,   /* job key missing or different */
};

/* The key of HM_JOB_KEY (unset or empty: no key). */
void hmi_na_hello_key_from_env(struct hmi_na_hello_key *key);
/* The key of `text` (NULL or "": no key). */
void hmi_na_hello_key_set(struct hmi_na_hello_key *key, const char *text);

/*
 * Write a frame (header, then `len` payload bytes) into `buf` of `size`
 * bytes. Returns its length, or 0 if it does not fit or len is past
 * HM_NA_HELLO_PAYLOAD_MAX.
 */
size_t hmi_na_hello_encode(void *buf, size_t size, const struct hmi_na_hello_key *key,
                          unsigned int flags, const void *payload, size_t len);

/*
 * Check the HM_NA_HELLO_HDR bytes of a frame's header against what its
 * receiver expects: a reply or a request (`want_reply`), and the receiver's
 * own job key (compared in constant time; a receiver without a key takes
 * any). On HM_NA_HELLO_OK, *len_out is the payload length that follows.
 */
enum hmi_na_hello_verdict hmi_na_hello_check(const void *hdr, bool want_reply,
                                           const struct hmi_na_hello_key *key,
                                           size_t *len_out);

#endif
