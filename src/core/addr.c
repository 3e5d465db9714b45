/*
 * Addresses: an NA address plus the index of the peer context it targets
 * ("...#N"). Sources of incoming requests come from a per-context cache so
 * that serving an RPC allocates nothing after the first request of a peer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_internal.h"
#include "util/compiler.h"
#include "util/log.h"

hm_addr_t *hmi_addr_create(hm_context_t *ctx, hmi_na_addr_t *na, uint16_t ctx_index)
{
    hm_addr_t *addr = calloc(1, sizeof(*addr));
    if (addr == NULL)
        return NULL;
    addr->a_ctx = ctx;
    addr->a_na = na;
    addr->a_ctx_index = ctx_index;
    addr->a_refs = 1;
    hmi_list_init(&addr->a_adm_waiting);
    hmi_list_init(&addr->a_adm_ring);
    return addr;
}

/* Cache key: NA addresses are canonical per peer, so the pointer names the
 * peer; user-space pointers fit in 48 bits on the platforms we build for. */
static uint64_t addr_cache_key(hmi_na_addr_t *na, uint16_t ctx_index)
{
    return ((uint64_t)(uintptr_t)na << 16) | ctx_index;
}

hm_addr_t *hmi_addr_cache_find(hm_context_t *ctx, hmi_na_addr_t *na, uint16_t ctx_index)
{
    return hmi_hmap_get(&ctx->c_addr_cache, addr_cache_key(na, ctx_index));
}

hm_addr_t *hmi_addr_cached(hm_context_t *ctx, hmi_na_addr_t *na, uint16_t ctx_index)
{
    uint64_t key = addr_cache_key(na, ctx_index);
    hm_addr_t *addr = hmi_hmap_get(&ctx->c_addr_cache, key);
    if (addr != NULL)
        return addr;
    hmi_na_addr_ref(ctx->c_class->k_na, na);
    addr = hmi_addr_create(ctx, na, ctx_index);
    if (addr == NULL)
        goto err_unref;
    if (hmi_hmap_put(&ctx->c_addr_cache, key, addr) != HM_SUCCESS)
        goto err_free;
    return addr; /* the cache owns this first reference */

err_free:
    free(addr);
err_unref:
    hmi_na_addr_unref(ctx->c_class->k_na, na);
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "out of memory for a peer address");
    return NULL;
}

struct addr_match {
    hmi_na_addr_t *na;
    uint64_t keys[32];
    size_t count;
};

static void addr_collect_peer(uint64_t key, void *value, void *arg)
{
    struct addr_match *match = arg;
    hm_addr_t *addr = value;
    if (addr->a_na == match->na && match->count < HMI_ARRAY_LEN(match->keys))
        match->keys[match->count++] = key;
}

/* Forget a dead peer: drop the cache's references (handles keep theirs). */
void hmi_addr_cache_drop(hm_context_t *ctx, hmi_na_addr_t *na)
{
    struct addr_match match = {.na = na};
    do {
        match.count = 0;
        hmi_hmap_foreach(&ctx->c_addr_cache, addr_collect_peer, &match);
        for (size_t i = 0; i < match.count; i++)
            hm_addr_free(hmi_hmap_remove(&ctx->c_addr_cache, match.keys[i]));
    } while (match.count == HMI_ARRAY_LEN(match.keys));
}

static void addr_cache_unref(uint64_t key, void *value, void *arg)
{
    hm_addr_free(value);
}

void hmi_addr_cache_clear(hm_context_t *ctx)
{
    hmi_hmap_foreach(&ctx->c_addr_cache, addr_cache_unref, NULL);
    hmi_hmap_destroy(&ctx->c_addr_cache);
    hmi_hmap_init(&ctx->c_addr_cache, 0);
}

/* Split "uri#N" into the NA URI (copied to `na_uri`) and N. */
static hm_return_t addr_split_index(const char *uri, char *na_uri, size_t size,
                                    uint16_t *index)
{
    const char *hash = strrchr(uri, '#');
    size_t len = hash ? (size_t)(hash - uri) : strlen(uri);
    *index = 0;
    if (len + 1 > size)
        return HM_INVALID_ARG;
    memcpy(na_uri, uri, len);
    na_uri[len] = '\0';
    if (hash == NULL)
        return HM_SUCCESS;
    char *end;
    if (hash[1] < '0' || hash[1] > '9') /* strtoul would take a sign or spaces */
        return HM_INVALID_ARG;
    unsigned long value = strtoul(hash + 1, &end, 10);
    if (*end != '\0' || value >= HMI_CTX_MAX)
        return HM_INVALID_ARG;
    *index = (uint16_t)value;
    return HM_SUCCESS;
}

/* `first` names the class's address with context N: replace it by N's own. */
static hm_return_t addr_locate(hm_context_t *ctx, hm_addr_t *first, hm_addr_t **addr_out)
{
    hmi_na_addr_t *na;
    hm_return_t ret = hmi_locate(ctx, first->a_na, first->a_ctx_index, &na);
    uint16_t index = first->a_ctx_index;
    hm_addr_free(first);
    if (ret != HM_SUCCESS)
        return ret;
    hm_addr_t *addr = hmi_addr_create(ctx, na, index);
    if (addr == NULL) {
        bool took = hmi_ctx_enter(ctx);
        hmi_na_addr_unref(ctx->c_class->k_na, na);
        hmi_ctx_leave(ctx, took);
        return HM_NOMEM;
    }
    *addr_out = addr;
    return HM_SUCCESS;
}

/* The NA lookup of `na_uri`, as an address of `ctx` with context index `index`. */
static hm_return_t addr_lookup_na(hm_context_t *ctx, const char *na_uri, uint16_t index,
                                  unsigned int flags, hm_addr_t **addr_out)
{
    hmi_na_addr_t *na;
    bool took = hmi_ctx_enter(ctx);
    hm_return_t ret = hmi_na_addr_lookup(ctx->c_na, na_uri, flags, &na);
    hm_addr_t *addr = NULL;
    if (ret == HM_SUCCESS) {
        addr = hmi_addr_create(ctx, na, index);
        if (addr == NULL) {
            hmi_na_addr_unref(ctx->c_class->k_na, na);
            ret = HM_NOMEM;
        }
    }
    hmi_ctx_leave(ctx, took);
    if (ret == HM_SUCCESS)
        *addr_out = addr;
    return ret;
}

/*
 * An address as hm_addr_to_string printed it: its NA part is context N's own
 * address already (self, a located "#N", or a request's source), so no
 * locate round trip, which a handler decoding its input must not wait for.
 * The text is a peer's: literal addresses only (HMI_NA_LOOKUP_PEER_TEXT), so
 * a peer cannot make us query DNS, or wait on it, by naming a host.
 */
hm_return_t hmi_addr_lookup_printed(hm_context_t *ctx, const char *uri, hm_addr_t **addr_out)
{
    char na_uri[HM_ADDR_URI_MAX];
    uint16_t index;
    if (addr_split_index(uri, na_uri, sizeof(na_uri), &index) != HM_SUCCESS)
        return HM_INVALID_ARG;
    return addr_lookup_na(ctx, na_uri, index, HMI_NA_LOOKUP_PEER_TEXT, addr_out);
}

hm_return_t hm_addr_lookup(hm_context_t *ctx, const char *uri, hm_addr_t **addr_out)
{
    if (ctx == NULL || uri == NULL || addr_out == NULL)
        return HM_INVALID_ARG;
    hm_return_t ret = hmi_live_check(ctx, HMI_LIVE_CONTEXT);
    if (ret != HM_SUCCESS)
        return ret;
    char na_uri[1024];
    uint16_t index;
    if (addr_split_index(uri, na_uri, sizeof(na_uri), &index) != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "malformed address \"%.200s\"", uri);
        return HM_INVALID_ARG;
    }
    hm_addr_t *addr;
    ret = addr_lookup_na(ctx, na_uri, index, 0, &addr);
    if (ret != HM_SUCCESS)
        return ret;
    if (index != 0) /* context N of that class: ask it where N is */
        return addr_locate(ctx, addr, addr_out);
    *addr_out = addr;
    return HM_SUCCESS;
}

hm_return_t hm_addr_self(hm_context_t *ctx, hm_addr_t **addr_out)
{
    if (ctx == NULL || addr_out == NULL)
        return HM_INVALID_ARG;
    hm_return_t ret = hmi_live_check(ctx, HMI_LIVE_CONTEXT);
    if (ret != HM_SUCCESS)
        return ret;
    hmi_na_addr_t *na;
    bool took = hmi_ctx_enter(ctx);
    ret = hmi_na_addr_self(ctx->c_na, &na);
    hm_addr_t *addr = NULL;
    if (ret == HM_SUCCESS) {
        addr = hmi_addr_create(ctx, na, ctx->c_index);
        if (addr == NULL) {
            hmi_na_addr_unref(ctx->c_class->k_na, na);
            ret = HM_NOMEM;
        }
    }
    hmi_ctx_leave(ctx, took);
    if (ret != HM_SUCCESS)
        return ret;
    *addr_out = addr;
    return HM_SUCCESS;
}

hm_addr_t *hm_addr_dup(hm_addr_t *addr)
{
    if (addr)
        addr->a_refs++;
    return addr;
}

void hm_addr_free(hm_addr_t *addr)
{
    if (addr == NULL || --addr->a_refs != 0)
        return;
    hm_context_t *ctx = addr->a_ctx;
    hm_addr_t *acct = addr->a_adm_acct;
    bool took = hmi_ctx_enter(ctx); /* NA addresses belong to the driver */
    hmi_na_addr_unref(ctx->c_class->k_na, addr->a_na);
    hmi_ctx_leave(ctx, took);
    free(addr);
    hm_addr_free(acct); /* its sender's admission record (admit_peer.c), or NULL */
}

hm_return_t hm_addr_to_string(const hm_addr_t *addr, char *buf, size_t *size)
{
    if (addr == NULL || size == NULL || (buf == NULL && *size != 0))
        return HM_INVALID_ARG;
    hm_context_t *ctx = addr->a_ctx;
    char na_uri[1024];
    size_t na_size = sizeof(na_uri);
    bool took = hmi_ctx_enter(ctx);
    hm_return_t ret = hmi_na_addr_to_string(ctx->c_na, addr->a_na, na_uri,
                                                                 &na_size);
    hmi_ctx_leave(ctx, took);
    if (ret != HM_SUCCESS)
        return ret;
    int needed = addr->a_ctx_index
                     ? snprintf(buf, *size, "%s#%u", na_uri, (unsigned)addr->a_ctx_index)
                     : snprintf(buf, *size, "%s", na_uri);
    bool fits = (size_t)needed + 1 <= *size;
    *size = (size_t)needed + 1;
    return fits ? HM_SUCCESS : HM_MSGSIZE;
}
