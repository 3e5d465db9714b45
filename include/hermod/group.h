/*
 * Hermod groups: ordered sets of ranks, and collective RPCs over them
 * (docs/ARCHITECTURE.md, "Groups and collectives"). Built on the public
 * core API only.
 *
 * A group is a list of ranks (distinct numbers, kept in increasing order),
 * each with the URI of its context, a version, a name, and, on a member,
 * the caller's own rank. Ranks keep their numbers in subgroups and after
 * removals. A group lives on one local context: addresses are looked up
 * there lazily, on first use, and cached; its collectives and keepalives
 * are sent and served there. Ranks of one group find each other's group
 * by its name: every rank must create it with the same name (default
 * "hm.world") on a context with the same index.
 *
 * Threading: a group is used from the thread that drives its context (its
 * callbacks run from hm_trigger there). Create and destroy it from that
 * thread too.
 *
 * Collectives. One rank, or a client attached to the group from outside,
 * sends a registered collective RPC to every rank of the group minus an
 * exclusion list. It travels down a tree (k-nomial by default, k-ary or
 * flat), each rank forwarding it to its children, running the handler once
 * and combining its own output with its children's by the aggregation
 * callback; the caller gets one aggregate and the list of ranks that did
 * not contribute, with the reason. A rank whose parent in the tree is dead
 * or silent is reached by its grandparent instead (its subtree is adopted),
 * and the dead rank alone is reported. Deadlines shrink down the tree, so
 * the caller's callback runs by its deadline whatever the ranks do.
 */
#ifndef HERMOD_GROUP_H
#define HERMOD_GROUP_H

#include <hermod/bulk.h>
#include <hermod/core.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hm_group hm_group_t;
typedef uint32_t hm_rank_t;

/* Not a rank: hm_group_rank of a non-member, "no root chosen". */
#define HM_RANK_NONE UINT32_MAX
/* Most ranks a group may have. */
#define HM_GROUP_MAX_SIZE 65536u
/* Default name and failure-detection bound. */
#define HM_GROUP_NAME_DEFAULT "hm.world"
#define HM_GROUP_DETECT_MS_DEFAULT 5000u

/* A member that died or was found dead (see hm_group_opts_t.failure_cb). */
typedef void (*hm_group_failure_cb_t)(hm_group_t *group, hm_rank_t rank, hm_return_t why,
                                      void *arg);

enum hm_group_opt_field {
    HM_GROUP_OPT_NAME = 1u << 0,      /* .name */
    HM_GROUP_OPT_DETECT_MS = 1u << 1, /* .detect_ms */
    HM_GROUP_OPT_FAILURE_CB = 1u << 2 /* .failure_cb, .failure_arg */
};

typedef struct hm_group_opts {
    uint64_t field_mask;
    /* Ranks find each other's group by this name (copied; at most 63 bytes).
     * Default HM_GROUP_NAME_DEFAULT. */
    const char *name;
    /* A member that dies is reported within about this many milliseconds
     * (default 5000, env HM_GROUP_DETECT_MS; 0: no keepalive, death is only
     * seen when an RPC to it fails). Each member watches its two neighbours
     * in rank order: it sends them a keepalive when it has heard nothing
     * from them for half this time, and declares them dead when the
     * transport reports the peer gone or the keepalive is not answered
     * within the other half. */
    uint32_t detect_ms;
    /* Called once per member found dead (by keepalive or a failed RPC of
     * this group); the application may then hm_group_remove_rank it. */
    hm_group_failure_cb_t failure_cb;
    void *failure_arg;
} hm_group_opts_t;

/* ---- Building ----------------------------------------------------------------- */

/*
 * hm_group_create_list: a group of `count` ranks numbered 0..count-1, rank i
 * at uris[i] (as printed by hm_addr_to_string, possibly with "#N"). `self`
 * is the caller's rank, or HM_RANK_NONE for a client that is not a member.
 * Copies the URIs; looks nothing up yet. `opts` may be NULL. Version 1.
 * Errors: HM_INVALID_ARG (ctx, uris or group_out NULL, no ranks, more than
 * HM_GROUP_MAX_SIZE, a NULL or empty URI, self out of range, a name that is
 * NULL, empty or too long), HM_EXISTS (a group of that name already lives
 * on ctx), HM_NOMEM.
 */
HM_EXPORT hm_return_t hm_group_create_list(hm_context_t *ctx, const char *const *uris,
                                           uint32_t count, hm_rank_t self,
                                           const hm_group_opts_t *opts, hm_group_t **group_out);

/*
 * hm_group_create_file: a group from a file written by hm_group_write_file
 * (or by hand): one rank per line, either "URI" (the line's rank is the
 * number of ranks before it) or "RANK URI"; blank lines and lines starting
 * with '#' are skipped, except "# hermod group NAME version V", which sets
 * the name (unless opts give one) and the version. `self` as above: a
 * client outside the job attaches with HM_RANK_NONE. Blocks reading the
 * file. Errors: HM_INVALID_ARG (ctx, path or group_out NULL), HM_NOENTRY
 * (cannot open it), HM_PROTOCOL_ERROR (no rank, a malformed, too long or
 * duplicate line, a version that is not 1..UINT32_MAX, with the line number
 * in hm_error_detail()), and those of hm_group_create_list.
 */
HM_EXPORT hm_return_t hm_group_create_file(hm_context_t *ctx, const char *path, hm_rank_t self,
                                           const hm_group_opts_t *opts, hm_group_t **group_out);

/*
 * hm_group_write_file: write the group (name, version, every rank and its
 * URI) to `path` so that others can attach to it. Writes a temporary file
 * beside it and renames it, so a reader never sees half a file. Blocks.
 * Errors: HM_INVALID_ARG (group or path NULL, path empty), HM_NOENTRY (the
 * temporary file cannot be created: no such directory, no permission),
 * HM_TRANSPORT_ERROR (writing or renaming failed, e.g. path is a
 * directory; nothing is left behind), HM_NOMEM.
 */
HM_EXPORT hm_return_t hm_group_write_file(const hm_group_t *group, const char *path);

/*
 * hm_group_create_pmix: the group of every process of this job, for ranks
 * started by mpirun or srun. Each rank puts the URI of `ctx` into PMIx, all
 * fence, and each reads the others', so this blocks until every rank of the
 * job has called it (the fence is collective). The rank is the process's
 * PMIx rank. Initializes PMIx if needed (and finalizes it at destroy).
 * Errors: HM_INVALID_ARG (ctx or group_out NULL), HM_NOT_SUPPORTED when
 * Hermod was built without PMIx or the process was not started by a PMIx
 * launcher (at once, without blocking; hm_error_detail() says which),
 * HM_TRANSPORT_ERROR when a PMIx call fails (with its message), and those
 * of hm_group_create_list.
 */
HM_EXPORT hm_return_t hm_group_create_pmix(hm_context_t *ctx, const hm_group_opts_t *opts,
                                           hm_group_t **group_out);

/*
 * hm_group_create_sub: a new group of `count` ranks of `parent` (any order,
 * no duplicates), with the parent's URIs and the caller's rank if it is one
 * of them. Its name comes from opts (required: peers must agree on it),
 * its version is 1. Errors: HM_INVALID_ARG (parent, ranks or group_out
 * NULL, count 0 or above the parent's size, a rank not in parent, a
 * duplicate, no name), HM_EXISTS (the name is taken on the context),
 * HM_NOMEM.
 */
HM_EXPORT hm_return_t hm_group_create_sub(hm_group_t *parent, const hm_rank_t *ranks,
                                          uint32_t count, const hm_group_opts_t *opts,
                                          hm_group_t **group_out);

/*
 * hm_group_destroy: free the group, its cached addresses and its timers.
 * HM_BUSY while collectives it started or serves are in flight (progress
 * until their callbacks ran, and answer every request its handlers hold);
 * HM_INVALID_ARG for NULL. Not checked: a group already destroyed.
 */
HM_EXPORT hm_return_t hm_group_destroy(hm_group_t *group);

/* ---- Queries ------------------------------------------------------------------- */

/*
 * The caller's rank, or HM_RANK_NONE when it is not a member. With a NULL
 * group the queries return HM_RANK_NONE, 0 (size and version: a group has
 * at least one rank and its version starts at 1), or NULL.
 */
HM_EXPORT hm_rank_t hm_group_rank(const hm_group_t *group);
HM_EXPORT uint32_t hm_group_size(const hm_group_t *group);
HM_EXPORT uint32_t hm_group_version(const hm_group_t *group);
HM_EXPORT const char *hm_group_name(const hm_group_t *group);
HM_EXPORT hm_context_t *hm_group_context(const hm_group_t *group);
/* hm_group_rank_at: the rank at position `index` (0..size-1), in increasing
 * order. HM_INVALID_ARG for NULL arguments or index >= size. */
HM_EXPORT hm_return_t hm_group_rank_at(const hm_group_t *group, uint32_t index,
                                       hm_rank_t *rank_out);
/* hm_group_uri: rank's URI (borrowed, valid while the rank is in the group).
 * HM_INVALID_ARG for NULL arguments, HM_NOENTRY for a rank not in the group. */
HM_EXPORT hm_return_t hm_group_uri(const hm_group_t *group, hm_rank_t rank, const char **uri_out);

/*
 * hm_group_addr: the address of context `ctx_index` of `rank` (the rank's
 * URI with "#ctx_index" in place of any "#N" it had), or of the context in
 * the group's URI itself with HM_GROUP_CTX_SAME. Looked up on first use
 * (may block while connecting) and cached; returns a new reference
 * (hm_addr_free it). HM_INVALID_ARG for NULL arguments, HM_NOENTRY for a
 * rank not in the group, and the errors of hm_addr_lookup.
 */
#define HM_GROUP_CTX_SAME UINT32_MAX
HM_EXPORT hm_return_t hm_group_addr(hm_group_t *group, hm_rank_t rank, uint32_t ctx_index,
                                    hm_addr_t **addr_out);

/*
 * hm_group_remove_rank: take `rank` out of the group (typically after the
 * failure callback) and bump the version. Collectives already started keep
 * the membership they started with. HM_NOENTRY if it is not a member
 * (HM_RANK_NONE never is); HM_INVALID_ARG for NULL, to remove oneself, or
 * to remove the last rank (a group is never empty).
 */
HM_EXPORT hm_return_t hm_group_remove_rank(hm_group_t *group, hm_rank_t rank);

/* ---- Collective RPCs --------------------------------------------------------------- */

typedef struct hm_coll_req hm_coll_req_t;

/*
 * A collective's handler runs once on every live rank, from hm_trigger. It
 * reads its input with hm_coll_get_input and answers with hm_coll_respond
 * exactly once, then or later (from another callback). Returning an error
 * without having responded makes that error this rank's contribution: the
 * rank is listed as failed with it.
 */
typedef hm_return_t (*hm_coll_handler_t)(hm_coll_req_t *req);

/*
 * Aggregation: fold `other` (a decoded output: this rank's own or a
 * subtree's aggregate) into `acc`. Called in whatever order the outputs
 * arrive; must be associative and commutative. `other` is valid only during
 * the call. `acc` is encoded with the output proc when it travels up, so
 * pointer fields changed here must point to memory that outlives the
 * collective. An error drops `other` (its ranks are listed as failed with
 * that error).
 */
typedef hm_return_t (*hm_coll_aggregate_t)(void *acc, const void *other, void *arg);

typedef struct hm_coll_ops {
    hm_proc_cb_t in_proc;          /* input proc (NULL: no input) */
    hm_proc_cb_t out_proc;         /* output proc (NULL: no output) */
    size_t in_size;                /* sizeof the input struct (0 with no input) */
    size_t out_size;               /* sizeof the output struct (0 with no output) */
    hm_coll_handler_t handler;     /* NULL on a client that only starts them */
    hm_coll_aggregate_t aggregate; /* required when out_size > 0 */
    void *arg;                     /* passed to aggregate; hm_coll_req_arg */
    /* Chained bulk broadcast: when has_bulk, the input struct holds an
     * hm_bulk_t * at bulk_offset. Each rank pulls the data once from its
     * parent into memory of its own and passes its own handle down, so the
     * root serves the payload only to its children. The handler sees the
     * rank's local copy (hm_coll_bulk_data). */
    bool has_bulk;
    size_t bulk_offset;
} hm_coll_ops_t;

/*
 * hm_coll_register: register collective `name` on `cls` (every rank and
 * client of the groups that use it). Copies `ops`. The id is hm_rpc_id(name);
 * `id_out` may be NULL, as for hm_register. HM_EXISTS when the name is already registered (as a collective or an
 * RPC), HM_INVALID_ARG for a NULL cls, name or ops, a name of 64 bytes or more,
 * missing callbacks or procs, or a bulk handle that does not fit in the
 * input (bulk_offset + sizeof(hm_bulk_t *) > in_size).
 */
HM_EXPORT hm_return_t hm_coll_register(hm_class_t *cls, const char *name,
                                       const hm_coll_ops_t *ops, hm_id_t *id_out);

typedef enum hm_tree_kind {
    HM_TREE_KNOMIAL = 0, /* rank i's children: i + j*k^m for every k^m > i, j = 1..k-1 */
    HM_TREE_KARY = 1,    /* rank i's children: k*i+1 .. k*i+k */
    HM_TREE_FLAT = 2,    /* the root sends to every rank */
} hm_tree_kind_t;

enum hm_coll_opt_field {
    HM_COLL_OPT_TREE = 1u << 0,     /* .tree, .k */
    HM_COLL_OPT_TIMEOUT = 1u << 1,  /* .timeout_ms */
    HM_COLL_OPT_ROOT = 1u << 2,     /* .root */
    HM_COLL_OPT_EXCLUDE = 1u << 3,  /* .excluded, .excluded_count */
};

typedef struct hm_coll_opts {
    uint64_t field_mask;
    hm_tree_kind_t tree;       /* default HM_TREE_KNOMIAL */
    uint32_t k;                /* radix / arity, 2..64 (default 2; ignored for flat) */
    uint32_t timeout_ms;       /* the callback runs by then (default 10000) */
    hm_rank_t root;            /* tree root (default: the caller if a member, else the
                                  lowest rank not excluded) */
    const hm_rank_t *excluded; /* ranks not to send to (copied; unknown ranks ignored) */
    uint32_t excluded_count;
} hm_coll_opts_t;

/* One rank that did not contribute, and why. */
typedef struct hm_coll_failure {
    hm_rank_t rank;
    hm_return_t error; /* HM_UNREACHABLE (dead), HM_TIMEOUT, HM_STALE, a handler's error... */
} hm_coll_failure_t;

typedef struct hm_coll_result {
    /* HM_SUCCESS when every rank sent to contributed; otherwise the error of
     * the lowest failed rank (the aggregate of the others is still in out). */
    hm_return_t ret;
    const void *out;                 /* the aggregate (NULL if no rank contributed) */
    uint32_t contributed;            /* ranks whose output is in `out` (no output: that answered) */
    const hm_coll_failure_t *failed; /* ranks that did not, in increasing rank order */
    uint32_t failed_count;
    uint32_t root_sends;             /* requests this caller sent for it (tree fan-out) */
    void *arg;
} hm_coll_result_t;

/* Runs once, from hm_trigger; everything in `result` is valid during the call only. */
typedef void (*hm_coll_cb_t)(const hm_coll_result_t *result);

/*
 * hm_coll_start: send collective `id` with input `in` to every rank of
 * `group` but the excluded ones. Does not block; `cb` runs exactly once,
 * by the deadline. `in` is encoded before the call returns, but a bulk
 * handle in it must stay alive until `cb` has run. `opts` may be NULL.
 * Fails at once (cb does not run): HM_NOENTRY (id not registered as a
 * collective on the group's class), HM_INVALID_ARG (group or cb NULL, in
 * NULL when the collective has an input, bad options: unknown tree, k out
 * of 2..64, timeout 0, excluded NULL with a count, the root excluded or
 * not a member, every rank excluded), HM_NOMEM, or the input's encoding
 * error.
 */
HM_EXPORT hm_return_t hm_coll_start(hm_group_t *group, hm_id_t id, const void *in,
                                    hm_coll_cb_t cb, void *arg, const hm_coll_opts_t *opts);

/* ---- Inside a collective's handler --------------------------------------------------- */

/* hm_coll_get_input: decode the input into `in` (valid until hm_coll_respond).
 * HM_INVALID_ARG for NULL arguments or a second call; a decoding error. */
HM_EXPORT hm_return_t hm_coll_get_input(hm_coll_req_t *req, void *in);
/*
 * hm_coll_bulk_data: with has_bulk, this rank's copy of the broadcast data
 * (valid until hm_coll_respond); NULL and 0 when the input carried none.
 * HM_INVALID_ARG for NULL arguments.
 */
HM_EXPORT hm_return_t hm_coll_bulk_data(hm_coll_req_t *req, const void **data_out,
                                        size_t *size_out);
/*
 * hm_coll_respond: this rank's output (encoded at once; NULL with no output),
 * or with hm_coll_respond_error an error to be listed against this rank.
 * Exactly once per request; `req` is gone when it returns. HM_TIMEOUT when
 * the rank's deadline passed first (the output is dropped, the rank was
 * reported as timed out); an output encoding error is returned and listed
 * against this rank. Refused, with `req` still the caller's to answer:
 * HM_INVALID_ARG for a NULL req, a NULL out when the collective has an
 * output, and an error that is HM_SUCCESS or not an hm_return_t. Not
 * checked: a request already answered (it is freed).
 * hm_coll_req_group / hm_coll_req_arg: NULL for a NULL req.
 */
HM_EXPORT hm_return_t hm_coll_respond(hm_coll_req_t *req, const void *out);
HM_EXPORT hm_return_t hm_coll_respond_error(hm_coll_req_t *req, hm_return_t error);
HM_EXPORT hm_group_t *hm_coll_req_group(const hm_coll_req_t *req);
HM_EXPORT void *hm_coll_req_arg(const hm_coll_req_t *req);

#ifdef __cplusplus
}
#endif

#endif /* HERMOD_GROUP_H */
