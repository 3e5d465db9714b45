/*
 * UCX plugin: describe an endpoint's lanes. UCX 1.13 has no query for the
 * transports of an endpoint, so this parses the output of ucp_ep_print_info,
 * whose lane lines read like
 *   "#                 lane[0]:  1:posix/memory.0 md[1]  -> ... am am_bw#0"
 * and keeps the transport name between "N:" and "/".
 */
#include "na/ucx/ucx_lanes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "na/ucx/ucx_internal.h"

/* Append `tl` (length len) to the list in buf unless already there. */
static bool ucx_lanes_add(char *buf, size_t size, const char *tl, size_t len)
{
    for (const char *p = buf; *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n == len && memcmp(p, tl, len) == 0)
            return true;
        p += n + (comma != NULL);
    }
    size_t used = strlen(buf);
    size_t need = used + (used > 0) + len + 1;
    if (need > size)
        return false;
    if (used > 0)
        buf[used++] = ',';
    memcpy(buf + used, tl, len);
    buf[used + len] = '\0';
    return true;
}

/* Transport named on one "lane[i]:" line, or NULL. */
static const char *ucx_lanes_tl(const char *line, size_t *len_out)
{
    const char *p = strstr(line, "lane[");
    if (p == NULL || (p = strstr(p, "]:")) == NULL)
        return NULL;
    p += 2;
    while (*p == ' ')
        p++;
    const char *colon = strchr(p, ':');
    const char *slash = strchr(p, '/');
    if (colon == NULL || slash == NULL || colon > slash)
        return NULL;
    *len_out = (size_t)(slash - colon - 1);
    return colon + 1;
}

hm_return_t hmi_ucx_addr_describe(hmi_na_addr_t *addr, char *buf, size_t size)
{
    if (buf == NULL || size == 0)
        return HM_MSGSIZE;
    ucp_ep_h ep = hmi_ucx_addr_ep(addr);
    if (ep == NULL)
        return HM_UNREACHABLE;
    char *text = NULL;
    size_t text_len = 0;
    FILE *f = open_memstream(&text, &text_len);
    if (f == NULL)
        return HM_NOMEM;
    ucp_ep_print_info(ep, f);
    fclose(f);
    buf[0] = '\0';
    hm_return_t ret = HM_SUCCESS;
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        size_t len;
        const char *tl = ucx_lanes_tl(line, &len);
        if (tl != NULL && len > 0 && !ucx_lanes_add(buf, size, tl, len))
            ret = HM_MSGSIZE;
    }
    free(text);
    return ret;
}
