/*
 * The group layer's internal RPCs and their arguments.
 *
 * "hm.group.coll" carries one collective to one rank. Each rank computes
 * its own children from (the group's ranks at `version`, `excluded`,
 * `root`, `tree`), so nothing about the tree travels but those inputs.
 * `budget_ms` is the time the receiver has to answer (clocks are not
 * shared). The answer is the subtree's aggregate, the number of ranks in it
 * and the ranks that did not contribute. A receiver whose group version
 * differs refuses with HM_STALE: trees computed from different
 * memberships would not cover the ranks once each.
 *
 * "hm.group.ping" is the keepalive: an empty answer says "alive".
 */
#ifndef HM_GROUP_COLL_WIRE_H
#define HM_GROUP_COLL_WIRE_H

#include <hermod/group.h>

struct hmi_coll_in {
    uint64_t ci_group;     /* hash of the group's name */
    uint64_t ci_id;        /* the collective, unique per origin and group */
    uint32_t ci_version;   /* group version of the origin */
    uint32_t ci_root;      /* root rank */
    uint32_t ci_tree;      /* kind | k << 8 */
    uint32_t ci_user_id;   /* the registered collective */
    uint32_t ci_budget_ms; /* time left to answer */
    uint32_t ci_sender;    /* rank of the sender, HM_RANK_NONE for a client */
    hm_array_t ci_excluded; /* uint32_t ranks */
    hm_array_t ci_input;    /* the user's input, encoded (uint8_t) */
};

struct hmi_coll_out {
    uint32_t co_contributed; /* ranks whose output is in co_output */
    uint32_t co_has_output;  /* 0: no rank contributed */
    hm_array_t co_output;    /* aggregate, encoded with the user's out proc */
    hm_array_t co_failed;    /* uint64_t: rank << 32 | error */
};

struct hmi_ping_in {
    uint64_t pi_group;
    uint32_t pi_sender;
};

hm_return_t hmi_coll_in_proc(hm_proc_t *proc, void *data);
hm_return_t hmi_coll_out_proc(hm_proc_t *proc, void *data);
hm_return_t hmi_ping_in_proc(hm_proc_t *proc, void *data);

#endif
