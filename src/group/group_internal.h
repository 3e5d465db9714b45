/*
 * Group internals shared by the files of src/group. The group layer uses
 * the public core API only (hermod/core.h, bulk.h, proc.h).
 *
 * Files: group.c (members, queries, addresses, subgroups, removal),
 * group_file.c (URI files), group_pmix.c (PMIx), gclass.c (per-class state:
 * the internal RPCs, the groups that serve them, registered collectives),
 * tree.c (topologies), coll_wire.c (the internal RPC's arguments),
 * coll_node.c (one rank's part of one collective), coll_api.c (start,
 * handler entry, hm_coll_* calls), coll_bulk.c (chained bulk broadcast),
 * group_detect.c (keepalive and failure reports).
 */
#ifndef HM_GROUP_INTERNAL_H
#define HM_GROUP_INTERNAL_H

#include <pthread.h>

#include <hermod/group.h>

#include "util/list.h"

#define HMI_GROUP_NAME_MAX 64
#define HMI_COLL_CACHE 32 /* answers of finished collectives kept for duplicates */

struct hmi_member {
    hm_rank_t m_rank;
    char *m_uri;         /* owned */
    hm_addr_t *m_addr;   /* cached lookup (HM_GROUP_CTX_SAME), or NULL */
    uint64_t m_heard_ns; /* last time anything of this group came from it */
    bool m_dead;         /* reported dead (failure_cb ran) */
    struct hmi_ping *m_ping; /* keepalive in flight, or NULL */
};

/* A finished collective's answer, for a late duplicate request. */
struct hmi_coll_done {
    uint64_t d_id;       /* 0: empty slot */
    hm_id_t d_user_id;   /* with d_root and d_tree_word: which collective it was */
    hm_rank_t d_root;
    uint32_t d_tree_word;
    uint32_t d_contributed;
    bool d_has_out;
    void *d_out;         /* encoded aggregate (owned) */
    size_t d_out_len;
    uint64_t *d_failed;  /* (rank << 32 | error), owned */
    uint32_t d_nfailed;
};

struct hmi_gclass;
struct hmi_ping;

struct hm_group {
    hm_context_t *g_ctx;
    hm_class_t *g_cls;
    struct hmi_gclass *g_gc;
    struct hmi_list g_link;       /* in g_gc's list */
    char g_name[HMI_GROUP_NAME_MAX];
    uint64_t g_hash;              /* of the name: finds the group on the wire */
    uint32_t g_version;
    hm_rank_t g_self;             /* HM_RANK_NONE: not a member */
    struct hmi_member *g_members; /* g_size, increasing rank */
    hm_rank_t *g_ranks;           /* the same ranks, alone (for trees) */
    uint32_t g_size;
    bool g_pmix;                  /* PMIx_Finalize at destroy */

    /* Failure detection (group_detect.c). */
    uint32_t g_detect_ms;
    hm_group_failure_cb_t g_failure_cb;
    void *g_failure_arg;
    hm_timer_t *g_ka_timer;

    /* Collectives (coll_*.c). */
    uint64_t g_coll_next;         /* next collective id this caller starts */
    struct hmi_list g_nodes;      /* this rank's part of collectives in flight */
    uint32_t g_nodes_alive;       /* nodes not freed yet (also origins, answered ones) */
    struct hmi_coll_done g_done[HMI_COLL_CACHE];
    uint32_t g_done_next;
};

/* Per-class state, attached to the internal collective RPC's registration. */
struct hmi_gclass {
    hm_class_t *gc_cls;
    hm_id_t gc_coll_id;   /* "hm.group.coll" */
    hm_id_t gc_ping_id;   /* "hm.group.ping" */
    pthread_mutex_t gc_lock; /* guards gc_groups */
    struct hmi_list gc_groups;
};

/* A registered collective (hm_coll_register), attached to its RPC id. */
struct hmi_coll_ops {
    hm_coll_ops_t co_ops;
    char co_name[HMI_GROUP_NAME_MAX];
};

/* gclass.c */
hm_return_t hmi_gclass_get(hm_class_t *cls, struct hmi_gclass **gc_out);
void hmi_gclass_add(struct hmi_gclass *gc, hm_group_t *group);
void hmi_gclass_remove(struct hmi_gclass *gc, hm_group_t *group);
/* The group named by `hash` on `ctx`, or NULL. */
hm_group_t *hmi_gclass_find(struct hmi_gclass *gc, hm_context_t *ctx, uint64_t hash);
const struct hmi_coll_ops *hmi_coll_ops_get(hm_class_t *cls, hm_id_t id);
uint64_t hmi_group_hash(const char *name);

/* group.c */
/* Build a group from (rank, uri) pairs (ranks distinct, any order); URIs copied. */
hm_return_t hmi_group_new(hm_context_t *ctx, const hm_rank_t *ranks, const char *const *uris,
                          uint32_t count, hm_rank_t self, const hm_group_opts_t *opts,
                          const char *default_name, uint32_t version, hm_group_t **group_out);
struct hmi_member *hmi_group_member(const hm_group_t *group, hm_rank_t rank);
/* The cached address of rank's context as in its URI (borrowed), looked up if needed. */
hm_return_t hmi_group_addr(hm_group_t *group, struct hmi_member *m, hm_addr_t **addr_out);
/* Something of this group came from `rank`: it is alive. */
void hmi_group_heard(hm_group_t *group, hm_rank_t rank);
/* The same for a request that names `rank` as its sender: counted only when
 * it came from that rank's address (cached by an earlier lookup), so a peer
 * cannot keep a dead rank looking alive by naming it. */
void hmi_group_heard_from(hm_group_t *group, hm_rank_t rank, const hm_addr_t *source);

/* group_pmix.c: drop the reference hm_group_create_pmix took on PMIx. */
void hmi_group_pmix_fini(void);

/* group_detect.c */
hm_return_t hmi_detect_start(hm_group_t *group);
/* Stop the keepalives; those in flight are detached and end on their own. */
void hmi_detect_stop(hm_group_t *group);
/* `m` leaves the group: detach its keepalive. */
void hmi_detect_forget(hm_group_t *group, struct hmi_member *m);
/* `rank` is dead (`why`): mark it and tell the application once. */
void hmi_detect_dead(hm_group_t *group, hm_rank_t rank, hm_return_t why);
hm_return_t hmi_ping_handler(hm_handle_t *handle);

/* coll_api.c */
hm_return_t hmi_coll_handler(hm_handle_t *handle);
void hmi_coll_cache_clear(hm_group_t *group);

#endif
