/*
 * UCX plugin: which UCX transports an address's endpoint uses. For tests and
 * hm_info; not part of the NA contract (no ops slot: only the UCX plugin has
 * lanes).
 */
#ifndef HM_NA_UCX_LANES_H
#define HM_NA_UCX_LANES_H

#include <stddef.h>

#include "na/na.h"

/*
 * hmi_ucx_addr_describe: write the transports of the lanes of the endpoint
 * used to send to `addr` as a comma-separated list of unique UCX transport
 * names in lane order ("posix,cma", "tcp"), NUL-terminated, into `buf`.
 * `addr` must belong to a ucx context; the endpoint is connected if it was
 * not yet. Before wireup has finished (tcp: before the first exchange) the
 * list may name only the connection-manager lane. Does not block.
 * HM_UNREACHABLE for a dead peer, HM_MSGSIZE if `size` is too small,
 * HM_NOMEM.
 */
hm_return_t hmi_ucx_addr_describe(hmi_na_addr_t *addr, char *buf, size_t size);

#endif
