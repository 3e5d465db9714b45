/*
 * Addresses inside RPCs (hm_proc_addr) and comparing addresses.
 *
 * Wire form of hm_proc_addr:
 *
 *   u32 len      0: no address (NULL); else 1..HM_ADDR_URI_MAX-1
 *   len bytes    the URI as hm_addr_to_string prints it, no NUL
 *
 * Every byte of a decoded URI is peer-supplied, so it is checked before any
 * transport sees it: the length, that every byte is printable ASCII (no NUL,
 * space or control byte), that it names the receiving class's protocol, and
 * the "#N" suffix. Only then does the NA lookup parse it, with the same
 * strict parser that checks the URIs peers put in their own messages.
 * Design note: resolving at decode (rather than handing out a string for the
 * user to look up) is what makes the address usable at once; the price is
 * that a ucx+tcp decode may block for the hello round trip to a peer not yet
 * known, as hm_addr_lookup does.
 */
#include <string.h>

#include "core/core_internal.h"
#include "proc/proc_internal.h"
#include "util/log.h"

static hm_return_t addr_proc_bad(const char *what)
{
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_DEBUG, "address decode: %s", what);
    return HM_PROTOCOL_ERROR;
}

/* The URI of `addr` into `buf` (HM_ADDR_URI_MAX bytes); its length, 0 on failure. */
static size_t addr_uri(const hm_addr_t *addr, char *buf)
{
    size_t size = HM_ADDR_URI_MAX;
    if (hm_addr_to_string(addr, buf, &size) != HM_SUCCESS)
        return 0;
    return size - 1;
}

static hm_return_t addr_proc_encode(hm_proc_t *proc, hm_addr_t *addr)
{
    char uri[HM_ADDR_URI_MAX];
    uint32_t len = 0;
    if (addr != NULL) {
        len = (uint32_t)addr_uri(addr, uri);
        if (len == 0)
            return HM_INVALID_ARG;
    }
    hm_return_t ret = hm_proc_uint32(proc, &len);
    if (ret != HM_SUCCESS || len == 0)
        return ret;
    return hm_proc_raw(proc, uri, len);
}

/* The checks a peer's URI passes before the transport parses it. */
static hm_return_t addr_proc_check(hm_context_t *ctx, const char *uri, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (uri[i] < 0x21 || uri[i] > 0x7e)
            return addr_proc_bad("a byte that is not printable ASCII");
    const char *protocol = hm_class_protocol(ctx->c_class);
    size_t plen = strlen(protocol);
    if (len <= plen + 3 || memcmp(uri, protocol, plen) != 0 ||
        memcmp(uri + plen, "://", 3) != 0)
        return addr_proc_bad("not an address of the receiving class's protocol");
    return HM_SUCCESS;
}

static hm_return_t addr_proc_decode(hm_proc_t *proc, hm_addr_t **addr_out)
{
    *addr_out = NULL;
    uint32_t len;
    hm_return_t ret = hm_proc_uint32(proc, &len);
    if (ret != HM_SUCCESS || len == 0)
        return ret;
    if (len >= HM_ADDR_URI_MAX)
        return addr_proc_bad("URI length out of bounds");
    char uri[HM_ADDR_URI_MAX];
    ret = hm_proc_raw(proc, uri, len);
    if (ret != HM_SUCCESS)
        return ret;
    uri[len] = '\0';
    hm_context_t *ctx = hmi_proc_context(proc);
    if (ctx == NULL) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                "hm_proc_addr decodes inside hm_get_input/hm_get_output only");
        return HM_INVALID_ARG;
    }
    ret = addr_proc_check(ctx, uri, len);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hmi_addr_lookup_printed(ctx, uri, addr_out);
    if (ret == HM_INVALID_ARG) /* the transport's parser refused it */
        return addr_proc_bad("malformed URI");
    return ret;
}

hm_return_t hm_proc_addr(hm_proc_t *proc, void *data)
{
    if (proc == NULL || data == NULL)
        return HM_INVALID_ARG;
    hm_addr_t **addr = data;
    switch (hm_proc_get_op(proc)) {
    case HM_PROC_ENCODE:
        return addr_proc_encode(proc, *addr);
    case HM_PROC_DECODE:
        return addr_proc_decode(proc, addr);
    case HM_PROC_FREE:
        hm_addr_free(*addr);
        *addr = NULL;
        return HM_SUCCESS;
    }
    return HM_INVALID_ARG;
}

int hm_addr_cmp(const hm_addr_t *a, const hm_addr_t *b)
{
    if (a == b)
        return 0;
    if (a == NULL || b == NULL)
        return a == NULL ? -1 : 1;
    if (a->a_ctx == b->a_ctx && a->a_na == b->a_na) /* canonical per context */
        return a->a_ctx_index == b->a_ctx_index ? 0 : (a->a_ctx_index < b->a_ctx_index ? -1 : 1);
    char ua[HM_ADDR_URI_MAX], ub[HM_ADDR_URI_MAX];
    if (addr_uri(a, ua) == 0 || addr_uri(b, ub) == 0)
        return (uintptr_t)a < (uintptr_t)b ? -1 : 1;
    int c = strcmp(ua, ub);
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

bool hm_addr_is_self(const hm_addr_t *addr)
{
    if (addr == NULL)
        return false;
    hm_addr_t *self;
    if (hm_addr_self(addr->a_ctx, &self) != HM_SUCCESS)
        return false;
    bool same = hm_addr_cmp(addr, self) == 0;
    hm_addr_free(self);
    return same;
}
