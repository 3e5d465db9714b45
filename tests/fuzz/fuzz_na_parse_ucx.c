/*
 * fuzz_na_parse's UCX case: a ucx URI as a peer's header names it, parsed
 * without resolving; what parses prints canonically and parses back the same.
 */
#include <string.h>

#include "na/ucx/ucx_internal.h"

void hm_fuzz_ucx_uri(const char *text);

void hm_fuzz_ucx_uri(const char *text)
{
    static struct ucx_uri u, again; /* large: a decoded worker address */
    if (hmi_ucx_uri_parse(text, false, &u) != HM_SUCCESS)
        return;
    char canon[UCX_URI_MAX], canon2[UCX_URI_MAX];
    size_t len = hmi_ucx_uri_format(&u, canon, sizeof(canon));
    if (len == 0 || len >= sizeof(canon) || u.u_waddr_len > sizeof(u.u_waddr))
        __builtin_trap();
    if (hmi_ucx_uri_parse(canon, false, &again) != HM_SUCCESS ||
        hmi_ucx_uri_format(&again, canon2, sizeof(canon2)) != len || strcmp(canon, canon2) != 0)
        __builtin_trap();
}
