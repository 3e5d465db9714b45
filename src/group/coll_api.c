/*
 * Collectives: hm_coll_start (the origin), the internal RPC's handler (a
 * rank receiving its part), and the calls a user's handler makes.
 */
#include <stdlib.h>
#include <string.h>

#include "group/coll_node.h"
#include "util/log.h"

#define COLL_TIMEOUT_DEFAULT_MS 10000u

/* ---- the origin ------------------------------------------------------------------ */

static hm_return_t coll_tree_word(const hm_coll_opts_t *opts, uint32_t *word_out)
{
    hm_tree_kind_t kind = HM_TREE_KNOMIAL;
    uint32_t k = 2;
    if (opts != NULL && (opts->field_mask & HM_COLL_OPT_TREE)) {
        kind = opts->tree;
        k = opts->k;
    }
    if (kind == HM_TREE_FLAT)
        k = 2;
    if ((kind != HM_TREE_KNOMIAL && kind != HM_TREE_KARY && kind != HM_TREE_FLAT) || k < 2 ||
        k > HMI_TREE_K_MAX)
        return HM_INVALID_ARG;
    *word_out = (uint32_t)kind | k << 8;
    return HM_SUCCESS;
}

/* The root: asked for, else the caller (a member not excluded), else the lowest live rank. */
static hm_return_t coll_root(const hm_group_t *group, const hm_coll_opts_t *opts,
                             const hm_rank_t *live, uint32_t nlive, hm_rank_t *root_out)
{
    hm_rank_t root = HM_RANK_NONE;
    if (opts != NULL && (opts->field_mask & HM_COLL_OPT_ROOT))
        root = opts->root;
    else if (hmi_tree_find(live, nlive, group->g_self) != HMI_TREE_NONE)
        root = group->g_self;
    else if (nlive > 0)
        root = live[0];
    if (root == HM_RANK_NONE || hmi_tree_find(live, nlive, root) == HMI_TREE_NONE)
        return HM_INVALID_ARG;
    *root_out = root;
    return HM_SUCCESS;
}

static hm_return_t coll_encode_input(hm_group_t *group, const hm_coll_ops_t *ops,
                                     const void *in, void **buf_out, size_t *len_out)
{
    size_t need = 0;
    *buf_out = NULL;
    *len_out = 0;
    if (ops->in_proc == NULL)
        return HM_SUCCESS;
    if (in == NULL)
        return HM_INVALID_ARG;
    hm_return_t ret = hm_proc_encode(group->g_cls, ops->in_proc, in, NULL, 0, &need);
    if (ret != HM_SUCCESS && ret != HM_MSGSIZE)
        return ret;
    void *buf = malloc(need > 0 ? need : 1);
    if (buf == NULL)
        return HM_NOMEM;
    ret = hm_proc_encode(group->g_cls, ops->in_proc, in, buf, need, &need);
    if (ret != HM_SUCCESS) {
        free(buf);
        return ret;
    }
    *buf_out = buf;
    *len_out = need;
    return HM_SUCCESS;
}

/* Fill `spec` from the call; the live list lets us check the root. */
static hm_return_t coll_spec(hm_group_t *group, hm_id_t id, const hm_coll_opts_t *opts,
                             struct hmi_coll_spec *spec)
{
    hm_return_t ret = coll_tree_word(opts, &spec->tree_word);
    if (ret != HM_SUCCESS)
        return ret;
    spec->id = group->g_coll_next++;
    spec->user_id = id;
    spec->version = group->g_version;
    spec->budget_ms = COLL_TIMEOUT_DEFAULT_MS;
    if (opts != NULL && (opts->field_mask & HM_COLL_OPT_TIMEOUT))
        spec->budget_ms = opts->timeout_ms;
    if (opts != NULL && (opts->field_mask & HM_COLL_OPT_EXCLUDE)) {
        if (opts->excluded_count > 0 && opts->excluded == NULL)
            return HM_INVALID_ARG;
        spec->excl = opts->excluded;
        spec->nexcl = opts->excluded_count;
    }
    hm_rank_t *live = malloc(group->g_size * sizeof(*live));
    if (live == NULL)
        return HM_NOMEM;
    uint32_t nlive = hmi_tree_live(group->g_ranks, group->g_size, spec->excl, spec->nexcl, live);
    ret = coll_root(group, opts, live, nlive, &spec->root);
    free(live);
    if (ret == HM_SUCCESS && spec->budget_ms == 0)
        ret = HM_INVALID_ARG;
    return ret;
}

hm_return_t hm_coll_start(hm_group_t *group, hm_id_t id, const void *in, hm_coll_cb_t cb,
                          void *arg, const hm_coll_opts_t *opts)
{
    struct hmi_coll_spec spec = {0};
    struct hmi_coll_node *node;
    void *buf;
    if (group == NULL || cb == NULL)
        return HM_INVALID_ARG;
    const struct hmi_coll_ops *ops = hmi_coll_ops_get(group->g_cls, id);
    if (ops == NULL)
        return HM_NOENTRY;
    hm_return_t ret = coll_spec(group, id, opts, &spec);
    if (ret == HM_SUCCESS)
        ret = coll_encode_input(group, &ops->co_ops, in, &buf, &spec.in_len);
    if (ret != HM_SUCCESS)
        return ret;
    spec.in = buf;
    ret = hmi_coll_node_new(group, &spec, &node);
    free(buf);
    if (ret != HM_SUCCESS)
        return ret;
    node->n_origin = true;
    node->n_cb = cb;
    node->n_cb_arg = arg;
    node->n_starting = true;
    if (spec.root == group->g_self) { /* we are the root: our part is the tree's root */
        hmi_list_push_back(&group->g_nodes, &node->n_link);
        hmi_coll_node_proceed(node);
    } else {
        hmi_coll_node_launch(node, HMI_TREE_NONE);
    }
    node->n_starting = false;
    if (!node->n_own_pending && node->n_kids_open == 0)
        hm_timer_arm(node->n_timer, 0); /* all done already: answer from hm_trigger */
    return HM_SUCCESS;
}

/* ---- a rank's part ------------------------------------------------------------------ */

void hmi_coll_node_proceed(struct hmi_coll_node *node)
{
    hm_group_t *group = node->n_group;
    bool starting = node->n_starting;
    node->n_refs++; /* a handler that responds at once may answer (and free) it */
    /* Looking up a child's address may block, driving the context: a child
     * that answers meanwhile must not make us answer before our own part
     * has even started. */
    node->n_starting = true;
    hmi_coll_node_launch(node, hmi_tree_find(node->n_live, node->n_tree.t_n, group->g_self));
    hmi_coll_node_run_own(node);
    node->n_starting = starting;
    hmi_coll_node_check(node);
    hmi_coll_node_unref(node);
}

void hmi_coll_node_run_own(struct hmi_coll_node *node)
{
    const hm_coll_ops_t *ops = &node->n_ops->co_ops;
    if (ops->handler == NULL) {
        hmi_coll_node_fail(node, node->n_group->g_self, HM_NOENTRY);
        return;
    }
    hm_coll_req_t *req = calloc(1, sizeof(*req));
    if (req == NULL) {
        hmi_coll_node_fail(node, node->n_group->g_self, HM_NOMEM);
        return;
    }
    req->r_node = node;
    node->n_req = req;
    node->n_own_pending = true;
    node->n_refs += 2; /* the request's, and ours across the call */
    hm_return_t ret = ops->handler(req);
    if ((unsigned int)ret >= HM_RETURN_MAX)
        ret = HM_FAULT; /* not an hm_return_t: hm_coll_respond_error would refuse it */
    if (ret != HM_SUCCESS && node->n_req == req)
        hm_coll_respond_error(req, ret);
    hmi_coll_node_unref(node);
}

static hm_return_t coll_refuse(hm_handle_t *handle, struct hmi_coll_in *in, hm_return_t why)
{
    hm_free_input(handle, in);
    hm_return_t ret = hm_respond_error(handle, why, NULL, NULL);
    hm_handle_destroy(handle);
    return ret;
}

static hm_return_t coll_new_part(hm_group_t *group, hm_handle_t *handle,
                                 struct hmi_coll_in *in)
{
    struct hmi_coll_spec spec = {
        .id = in->ci_id,
        .user_id = in->ci_user_id,
        .version = in->ci_version,
        .tree_word = in->ci_tree,
        .root = in->ci_root,
        .excl = in->ci_excluded.elems,
        .nexcl = (uint32_t)in->ci_excluded.count,
        .in = in->ci_input.elems,
        .in_len = (size_t)in->ci_input.count,
        .budget_ms = in->ci_budget_ms,
    };
    struct hmi_coll_node *node;
    if (group->g_self == HM_RANK_NONE || in->ci_excluded.count > group->g_size)
        return coll_refuse(handle, in, HM_INVALID_ARG);
    hm_return_t ret = hmi_coll_node_new(group, &spec, &node);
    if (ret == HM_SUCCESS &&
        hmi_tree_find(node->n_live, node->n_tree.t_n, group->g_self) == HMI_TREE_NONE) {
        hmi_coll_node_unref(node); /* we are excluded: a confused sender */
        ret = HM_INVALID_ARG;
    }
    if (ret == HM_SUCCESS)
        ret = hmi_coll_node_add_parent(node, handle);
    if (ret != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_INFO, "collective refused: %s", hm_strerror(ret));
        return coll_refuse(handle, in, ret);
    }
    hm_free_input(handle, in);
    hmi_list_push_back(&group->g_nodes, &node->n_link);
    const hm_coll_ops_t *ops = &node->n_ops->co_ops;
    if (ops->has_bulk)
        hmi_coll_bulk_fetch(node, hm_handle_get_addr(handle)); /* proceeds when pulled */
    else
        hmi_coll_node_proceed(node);
    return HM_SUCCESS;
}

static struct hmi_coll_node *coll_find_node(hm_group_t *group, uint64_t id)
{
    for (struct hmi_list *l = group->g_nodes.next; l != &group->g_nodes; l = l->next) {
        struct hmi_coll_node *node = hmi_container_of(l, struct hmi_coll_node, n_link);
        if (node->n_id == id)
            return node;
    }
    return NULL;
}

hm_return_t hmi_coll_handler(hm_handle_t *handle)
{
    struct hmi_gclass *gc = hm_handle_get_data(handle);
    struct hmi_coll_in in;
    hm_return_t ret = hm_get_input(handle, &in);
    if (ret != HM_SUCCESS) {
        hm_handle_destroy(handle);
        return ret; /* the core answers with the error */
    }
    hm_group_t *group = hmi_gclass_find(gc, hm_handle_get_context(handle), in.ci_group);
    if (group == NULL)
        return coll_refuse(handle, &in, HM_NOENTRY);
    if (in.ci_sender != HM_RANK_NONE)
        hmi_group_heard_from(group, in.ci_sender, hm_handle_get_addr(handle));
    if (in.ci_version != group->g_version) {
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_INFO,
                "group \"%s\": collective of version %u refused (ours is %u)", group->g_name,
                in.ci_version, group->g_version);
        return coll_refuse(handle, &in, HM_STALE);
    }
    struct hmi_coll_node *node = coll_find_node(group, in.ci_id);
    if (node != NULL && (node->n_user_id != in.ci_user_id || node->n_root != in.ci_root ||
                         node->n_tree_word != in.ci_tree)) /* not a duplicate: a forgery */
        return coll_refuse(handle, &in, HM_PROTOCOL_ERROR);
    if (node != NULL) { /* reached twice (adopted): one answer for both */
        if (hmi_coll_node_add_parent(node, handle) != HM_SUCCESS)
            return coll_refuse(handle, &in, HM_NOMEM);
        hm_free_input(handle, &in);
        return HM_SUCCESS;
    }
    if (hmi_coll_cache_answer(group, &in, handle)) {
        hm_free_input(handle, &in);
        return HM_SUCCESS;
    }
    return coll_new_part(group, handle, &in);
}

/* ---- inside the user's handler ------------------------------------------------------- */

hm_return_t hm_coll_get_input(hm_coll_req_t *req, void *in)
{
    if (req == NULL || in == NULL || req->r_in != NULL)
        return HM_INVALID_ARG;
    struct hmi_coll_node *node = req->r_node;
    const hm_coll_ops_t *ops = &node->n_ops->co_ops;
    if (ops->in_proc == NULL)
        return HM_SUCCESS;
    hm_return_t ret = hm_proc_decode(node->n_group->g_cls, ops->in_proc, node->n_in,
                                     node->n_in_len, in);
    if (ret != HM_SUCCESS)
        return ret;
    if (ops->has_bulk && node->n_bulk != NULL) { /* the handler sees our copy */
        hm_bulk_t *decoded;
        memcpy(&decoded, (char *)in + ops->bulk_offset, sizeof(decoded));
        hm_bulk_free(decoded);
        memcpy((char *)in + ops->bulk_offset, &node->n_bulk, sizeof(hm_bulk_t *));
    }
    req->r_in = in;
    return HM_SUCCESS;
}

hm_return_t hm_coll_bulk_data(hm_coll_req_t *req, const void **data_out, size_t *size_out)
{
    if (req == NULL || data_out == NULL || size_out == NULL)
        return HM_INVALID_ARG;
    *data_out = req->r_node->n_bulk_mem;
    *size_out = req->r_node->n_bulk_len;
    return HM_SUCCESS;
}

/* Release the request; `contribute` runs first unless the deadline passed. */
static hm_return_t coll_req_end(hm_coll_req_t *req, const void *out, hm_return_t error)
{
    if (req == NULL || req->r_node->n_req != req)
        return HM_INVALID_ARG;
    struct hmi_coll_node *node = req->r_node;
    const hm_coll_ops_t *ops = &node->n_ops->co_ops;
    /* Refused before anything ends: the request stays the caller's. */
    if (error == HM_SUCCESS && ops->out_size > 0 && out == NULL)
        return HM_INVALID_ARG;
    hm_group_t *group = node->n_group;
    hm_return_t ret = HM_SUCCESS;
    if (req->r_in != NULL) {
        if (ops->has_bulk && node->n_bulk != NULL) /* ours: not the decoder's to free */
            memset((char *)req->r_in + ops->bulk_offset, 0, sizeof(hm_bulk_t *));
        hm_proc_release(group->g_cls, ops->in_proc, req->r_in);
    }
    if (node->n_answered) {
        ret = HM_TIMEOUT;
    } else if (error != HM_SUCCESS) {
        hmi_coll_node_fail(node, group->g_self, error);
    } else if (ops->out_size > 0) {
        void *buf = NULL;
        size_t len = 0;
        ret = coll_encode_input(group, &(hm_coll_ops_t){.in_proc = ops->out_proc}, out, &buf,
                                &len);
        if (ret == HM_SUCCESS)
            ret = hmi_coll_node_merge(node, buf, len, true, 1);
        if (ret != HM_SUCCESS)
            hmi_coll_node_fail(node, group->g_self, ret);
    } else {
        node->n_contributed++;
    }
    node->n_own_pending = false;
    node->n_req = NULL;
    free(req);
    hmi_coll_node_check(node);
    hmi_coll_node_unref(node);
    return ret;
}

hm_return_t hm_coll_respond(hm_coll_req_t *req, const void *out)
{
    return coll_req_end(req, out, HM_SUCCESS);
}

hm_return_t hm_coll_respond_error(hm_coll_req_t *req, hm_return_t error)
{
    if (error == HM_SUCCESS || (unsigned int)error >= HM_RETURN_MAX)
        return HM_INVALID_ARG; /* the request stays the caller's */
    return coll_req_end(req, NULL, error);
}

hm_group_t *hm_coll_req_group(const hm_coll_req_t *req)
{
    return req != NULL ? req->r_node->n_group : NULL;
}

void *hm_coll_req_arg(const hm_coll_req_t *req)
{
    return req != NULL ? req->r_node->n_ops->co_ops.arg : NULL;
}
