/*
 * Placement of contexts on NUMA nodes (DESIGN §9): the parts of
 * context_place.c that tests reach directly. The hooks the context calls
 * (hmi_ctx_place, hmi_ctx_place_buffer, hmi_ctx_place_thread) are declared
 * in core_internal.h with the context itself.
 */
#ifndef HM_CORE_CONTEXT_PLACE_H
#define HM_CORE_CONTEXT_PLACE_H

#include "core/core_internal.h"

/* Values of hmi_ctx_place.cp_memory and cp_thread; a refusal is -(hm_return_t). */
enum hmi_place_state {
    HMI_PLACE_NONE = 0,  /* nothing bound yet: no buffer, or no thread started */
    HMI_PLACE_BOUND = 1, /* every buffer so far / the progress thread is bound */
};

/* Most device names asked of a transport; the rest are not considered. */
#define HMI_PLACE_DEVICES_MAX 32u

/*
 * hmi_ctx_place_decide: where a context on `node` of `topo` runs, choosing
 * among the `n` device names `candidates` gives (transport spelling, NULL
 * when n is 0) with hmi_topo_place: the first on the node, else the first of
 * unknown locality, else the first. Fills *out (cp_node, cp_topo, cp_device,
 * cp_reason; both states HMI_PLACE_NONE) only on success. Does not block.
 * Fails with HM_INVALID_ARG (node out of range, a NULL name), logged.
 */
hm_return_t hmi_ctx_place_decide(struct hmi_topo *topo, unsigned node,
                                 const char *const *candidates, size_t n,
                                 struct hmi_ctx_place *out);

#endif
