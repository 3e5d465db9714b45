/* SipHash-2-4 and the process's table key (siphash.h). */
#include "util/siphash.h"

#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "util/hmap.h"
#include "util/log.h"

static inline uint64_t rotl(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

struct sip_state {
    uint64_t v0, v1, v2, v3;
};

static void sip_round(struct sip_state *s)
{
    s->v0 += s->v1;
    s->v1 = rotl(s->v1, 13);
    s->v1 ^= s->v0;
    s->v0 = rotl(s->v0, 32);
    s->v2 += s->v3;
    s->v3 = rotl(s->v3, 16);
    s->v3 ^= s->v2;
    s->v0 += s->v3;
    s->v3 = rotl(s->v3, 21);
    s->v3 ^= s->v0;
    s->v2 += s->v1;
    s->v1 = rotl(s->v1, 17);
    s->v1 ^= s->v2;
    s->v2 = rotl(s->v2, 32);
}

/* Two compression rounds per 8-byte word. */
static void sip_absorb(struct sip_state *s, uint64_t m)
{
    s->v3 ^= m;
    sip_round(s);
    sip_round(s);
    s->v0 ^= m;
}

/* Bytes in little-endian order, whatever the host's. */
static uint64_t load_le(const unsigned char *p, size_t n)
{
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++)
        w |= (uint64_t)p[i] << (8 * i);
    return w;
}

uint64_t hmi_siphash(const uint64_t key[2], const void *data, size_t len)
{
    const unsigned char *p = data;
    struct sip_state s = {
        .v0 = key[0] ^ 0x736f6d6570736575ull,
        .v1 = key[1] ^ 0x646f72616e646f6dull,
        .v2 = key[0] ^ 0x6c7967656e657261ull,
        .v3 = key[1] ^ 0x7465646279746573ull,
    };
    size_t whole = len - len % 8;
    for (size_t i = 0; i < whole; i += 8)
        sip_absorb(&s, load_le(p + i, 8));
    /* The last word: the remaining bytes, and the length's low byte on top. */
    sip_absorb(&s, load_le(p + whole, len % 8) | ((uint64_t)(len & 0xff) << 56));
    s.v2 ^= 0xff;
    for (int i = 0; i < 4; i++)
        sip_round(&s);
    return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

static uint64_t process_key[2];
static pthread_once_t process_key_once = PTHREAD_ONCE_INIT;

static void process_key_draw(void)
{
    if (getrandom(process_key, sizeof(process_key), GRND_NONBLOCK) ==
        (ssize_t)sizeof(process_key))
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    process_key[0] = hmi_hash64((uint64_t)now.tv_nsec ^ ((uint64_t)now.tv_sec << 30));
    process_key[1] = hmi_hash64((uint64_t)getpid() ^ (uint64_t)(uintptr_t)&now);
    hmi_log(HMI_SUBSYS_UTIL, HMI_LOG_WARN,
            "getrandom gave no table key; using the clock and pid (weaker)");
}

const uint64_t *hmi_siphash_process_key(void)
{
    pthread_once(&process_key_once, process_key_draw);
    return process_key;
}
