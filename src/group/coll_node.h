/*
 * One rank's part of one collective (a "node" of its tree), and the
 * origin's. A node:
 *  - forwards the request to its children (computed from the tree), each
 *    with a budget that leaves it time to answer;
 *  - runs the user's handler once (members only);
 *  - folds its own output and each child's answer into one aggregate;
 *  - when a child fails (dead, refused, or silent past its deadline), lists
 *    it and sends the request to that child's children itself (adoption),
 *    so a dead interior rank costs only its own contribution;
 *  - answers every requester (its parent, and an adopter that reached it
 *    too) once its own part and every child are done, or at its deadline;
 *    a request that arrives after that is answered from the group's cache
 *    of recent answers, so no rank runs a handler twice.
 *
 * Lifetime: references for the pending answer, each child RPC in flight,
 * and the user's request object while the handler holds it; freed with
 * the last. Everything runs on the thread that drives the group's context.
 */
#ifndef HM_GROUP_COLL_NODE_H
#define HM_GROUP_COLL_NODE_H

#include "group/coll_wire.h"
#include "group/group_internal.h"
#include "group/tree.h"

struct hmi_coll_node;

struct hmi_coll_kid {
    struct hmi_coll_node *k_node;
    uint32_t k_pos;         /* in the node's live list */
    hm_handle_t *k_handle;  /* the RPC in flight, NULL once done */
};

struct hm_coll_req {
    struct hmi_coll_node *r_node;
    void *r_in;             /* what hm_coll_get_input decoded into, or NULL */
};

struct hmi_coll_node {
    hm_group_t *n_group;
    struct hmi_list n_link;     /* in g_nodes while it can take duplicates */
    uint32_t n_refs;
    uint64_t n_id;
    hm_id_t n_user_id;
    const struct hmi_coll_ops *n_ops;
    uint32_t n_version;
    uint32_t n_tree_word;       /* kind | k << 8, as on the wire */
    hm_rank_t n_root;
    struct hmi_tree n_tree;     /* over n_live */
    hm_rank_t *n_live;          /* the collective's live list (owned) */
    hm_rank_t *n_excl;          /* its exclusion list, to pass on (owned) */
    uint32_t n_nexcl;
    void *n_in;                 /* the user's encoded input (owned, aligned) */
    size_t n_in_len;
    uint64_t n_answer_by;       /* ns */
    hm_timer_t *n_timer;

    /* Who gets the answer. */
    hm_handle_t **n_parents;    /* server handles of the requests (one ref each) */
    uint32_t n_nparents, n_parents_cap;
    bool n_origin;              /* the caller of hm_coll_start: n_cb gets the result */
    hm_coll_cb_t n_cb;
    void *n_cb_arg;
    bool n_answered;
    bool n_starting;            /* launching (lookups may drive the context) or inside
                                   hm_coll_start: do not answer yet */

    /* Own part. */
    bool n_own_pending;         /* the handler has not responded yet */
    hm_coll_req_t *n_req;

    /* Children, including adopted ones. */
    struct hmi_coll_kid **n_kids;
    uint32_t n_nkids, n_kids_cap, n_kids_open;
    uint32_t n_sends;           /* requests this node sent */

    /* Aggregate. */
    void *n_acc;                /* decoded output (out_size), valid when n_has_acc */
    void *n_acc_buf;            /* the encoded bytes n_acc points into (owned) */
    void *n_tmp;                /* decode room for one other output (out_size) */
    bool n_has_acc;
    uint32_t n_contributed;
    uint64_t *n_failed;         /* rank << 32 | error */
    uint32_t n_nfailed, n_failed_cap;

    /* Chained bulk broadcast (coll_bulk.c). */
    hm_bulk_t *n_bulk;          /* this rank's copy, passed to children */
    void *n_bulk_mem;
    size_t n_bulk_len;
    hm_handle_t *n_bulk_charged; /* the request its bytes are charged to (a ref): the
                                    charge lasts as long as the copy */
    hm_bulk_op_id_t *n_fetch;   /* the pull into it while in flight (canceled at answer) */
};

/* What a node is made from: the request's fields, or the origin's call. */
struct hmi_coll_spec {
    uint64_t id;
    hm_id_t user_id;
    uint32_t version;
    uint32_t tree_word;
    hm_rank_t root;
    const hm_rank_t *excl;
    uint32_t nexcl;
    const void *in;
    size_t in_len;
    uint32_t budget_ms;
};

hm_return_t hmi_coll_node_new(hm_group_t *group, const struct hmi_coll_spec *spec,
                              struct hmi_coll_node **node_out);
void hmi_coll_node_unref(struct hmi_coll_node *node);
/* Send to the first children: the tree's (self_pos), or just the root (origin). */
void hmi_coll_node_launch(struct hmi_coll_node *node, uint32_t self_pos);
/* Run the user's handler on this rank (a member). */
void hmi_coll_node_run_own(struct hmi_coll_node *node);
/* A member's node once its input is here: launch its children, run its handler. */
void hmi_coll_node_proceed(struct hmi_coll_node *node);
/* Answer now if nothing is pending. */
void hmi_coll_node_check(struct hmi_coll_node *node);
/* Fold an encoded output (one rank's or a subtree's) into the aggregate. */
hm_return_t hmi_coll_node_merge(struct hmi_coll_node *node, void *bytes, size_t len,
                                bool take, uint32_t contributed);
hm_return_t hmi_coll_node_fail(struct hmi_coll_node *node, hm_rank_t rank, hm_return_t why);
/* Answer a late duplicate of `in` (same id, collective, root and tree) from
 * the cache; false if not cached. */
bool hmi_coll_cache_answer(hm_group_t *group, const struct hmi_coll_in *in, hm_handle_t *parent);
hm_return_t hmi_coll_node_add_parent(struct hmi_coll_node *node, hm_handle_t *parent);

/*
 * coll_bulk.c: pull the input's bulk data from `from` (the sender) into
 * memory of this rank, put this rank's own handle into the input its
 * children get, then hmi_coll_node_proceed (at once when there is none; a
 * failed pull lists this rank and passes the sender's handle on instead).
 */
void hmi_coll_bulk_fetch(struct hmi_coll_node *node, hm_addr_t *from);
void hmi_coll_bulk_release(struct hmi_coll_node *node);
/* The node answered: a pull still in flight is canceled (its callback then
 * frees the copy), so a sender that never serves it holds nothing. */
void hmi_coll_bulk_abandon(struct hmi_coll_node *node);

#endif
