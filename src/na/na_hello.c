/* The hello frame: encoding and checks (layout in na_hello.h). */
#include "na/na_hello.h"
#include "na/na_tunable.h"

#include <stdlib.h>
#include <string.h>

#include "util/sha256.h"

#define HELLO_KEY_DOMAIN "hermod-job-key-v1"

static void hello_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void hello_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t hello_get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t hello_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void hmi_na_hello_key_set(struct hmi_na_hello_key *key, const char *text)
{
    memset(key, 0, sizeof(*key));
    if (text == NULL || text[0] == '\0')
        return;
    size_t dom = sizeof(HELLO_KEY_DOMAIN), len = strlen(text);
    uint8_t *buf = malloc(dom + len);
    if (buf == NULL) {
        /* Never run without the key we were given: a digest of the key alone. */
        hmi_sha256(text, len, key->hk_digest);
    } else {
        memcpy(buf, HELLO_KEY_DOMAIN, dom); /* NUL included: the domain ends there */
        memcpy(buf + dom, text, len);
        hmi_sha256(buf, dom + len, key->hk_digest);
        free(buf);
    }
    key->hk_set = true;
}

void hmi_na_hello_key_from_env(struct hmi_na_hello_key *key)
{
    hmi_na_hello_key_set(key, hmi_na_tunable_string(&hmi_na_tunables[HMI_NA_TUNE_JOB_KEY]));
}

size_t hmi_na_hello_encode(void *buf, size_t size, const struct hmi_na_hello_key *key,
                          unsigned int flags, const void *payload, size_t len)
{
    if (len > HM_NA_HELLO_PAYLOAD_MAX || size < HM_NA_HELLO_HDR + len)
        return 0;
    uint8_t *p = buf;
    memset(p, 0, HM_NA_HELLO_HDR);
    hello_put32(p, HM_NA_HELLO_MAGIC);
    hello_put16(p + 4, HM_NA_HELLO_VERSION);
    if (key->hk_set) {
        flags |= HM_NA_HELLO_F_KEYED;
        memcpy(p + 16, key->hk_digest, HM_NA_HELLO_DIGEST);
    }
    hello_put16(p + 6, (uint16_t)flags);
    hello_put32(p + 8, (uint32_t)len);
    if (len > 0)
        memcpy(p + HM_NA_HELLO_HDR, payload, len);
    return HM_NA_HELLO_HDR + len;
}

/* Equal digests, in time that does not depend on where they differ. */
static bool hello_digest_equal(const uint8_t *a, const uint8_t *b)
{
    volatile uint8_t diff = 0;
    for (unsigned int i = 0; i < HM_NA_HELLO_DIGEST; i++)
        diff |= (uint8_t)(a[i] ^ b[i]);
    return diff == 0;
}

enum hmi_na_hello_verdict hmi_na_hello_check(const void *hdr, bool want_reply,
                                           const struct hmi_na_hello_key *key,
                                           size_t *len_out)
{
    const uint8_t *p = hdr;
    unsigned int flags = hello_get16(p + 6);
    uint32_t len = hello_get32(p + 8);
    if (hello_get32(p) != HM_NA_HELLO_MAGIC || hello_get16(p + 4) != HM_NA_HELLO_VERSION ||
        (flags & ~(HM_NA_HELLO_F_REPLY | HM_NA_HELLO_F_KEYED)) != 0 ||
        ((flags & HM_NA_HELLO_F_REPLY) != 0) != want_reply || hello_get32(p + 12) != 0 ||
        len > HM_NA_HELLO_PAYLOAD_MAX)
        return HM_NA_HELLO_BAD_FRAME;
    if (!(flags & HM_NA_HELLO_F_KEYED)) {
        static const uint8_t zeros[HM_NA_HELLO_DIGEST];
        if (memcmp(p + 16, zeros, HM_NA_HELLO_DIGEST) != 0)
            return HM_NA_HELLO_BAD_FRAME;
    }
    if (key->hk_set && (!(flags & HM_NA_HELLO_F_KEYED) ||
                        !hello_digest_equal(p + 16, key->hk_digest)))
        return HM_NA_HELLO_BAD_KEY;
    *len_out = len;
    return HM_NA_HELLO_OK;
}
