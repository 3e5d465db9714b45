/*
 * The completion record: what a context's one completion queue holds.
 *
 * Everything that has a callback to run from hm_trigger (an RPC handle, a
 * bulk transfer, a user timer) embeds one record, so queuing a completion
 * allocates nothing. The record says whose it is; hm_trigger (the core's
 * trigger.c) finds the object again with hmi_container_of and hands it to
 * that layer's functions (a bulk record goes to hmi_bulk_comp_run and
 * hmi_bulk_comp_release, see bulk/bulk.h): it never reads the object itself.
 *
 * Contract: a record is on at most one queue at a time, and it is pushed and
 * taken under the lock of the context that owns the queue.
 */
#ifndef HM_UTIL_COMP_H
#define HM_UTIL_COMP_H

#include <stdint.h>

#include "util/list.h"

enum hmi_comp_owner {
    HMI_COMP_OF_HANDLE = 1, /* core: hm_handle_t */
    HMI_COMP_OF_BULK = 2,   /* bulk: a transfer (hm_bulk_op_id_t) */
    HMI_COMP_OF_TIMER = 3,  /* core: hm_timer_t */
};

struct hmi_comp {
    struct hmi_list cp_link; /* in the context's completion queue while due */
    uint8_t cp_owner;        /* enum hmi_comp_owner, set once when the object is made */
};

static inline void hmi_comp_init(struct hmi_comp *comp, enum hmi_comp_owner owner)
{
    hmi_list_init(&comp->cp_link);
    comp->cp_owner = (uint8_t)owner;
}

#endif
