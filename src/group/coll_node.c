/*
 * One rank's part of one collective: see coll_node.h for the protocol.
 * Budgets: a node with R ms left gives a child R*6/10 ms to answer and
 * waits R*8/10 ms for it, so a silent child leaves R/5 ms to adopt its
 * children and a child's answer has R/5 ms to travel back. Every level
 * shrinks the budget, and the origin's callback runs by its deadline.
 */
#include <stdlib.h>
#include <string.h>

#include "group/coll_node.h"
#include "util/log.h"
#include "util/time.h"

#define COLL_CHILD_BUDGET_NUM 6 /* tenths of the time left a child gets */
#define COLL_CHILD_WAIT_NUM 8   /* tenths of the time left we wait for it */

static void node_timer_cb(hm_timer_t *timer, void *arg);
static void node_kid_cb(const hm_cb_info_t *info);
static void node_send_kid(struct hmi_coll_node *node, uint32_t pos);
static void node_send_children(struct hmi_coll_node *node, uint32_t pos);

static void *node_dup(const void *src, size_t len)
{
    void *dst = malloc(len > 0 ? len : 1);
    if (dst != NULL && len > 0)
        memcpy(dst, src, len);
    return dst;
}

static hm_return_t node_fill(struct hmi_coll_node *node, const struct hmi_coll_spec *spec)
{
    hm_group_t *group = node->n_group;
    node->n_live = malloc(group->g_size * sizeof(*node->n_live));
    node->n_excl = node_dup(spec->excl, spec->nexcl * sizeof(*spec->excl));
    node->n_in = node_dup(spec->in, spec->in_len);
    if (node->n_live == NULL || node->n_excl == NULL || node->n_in == NULL)
        return HM_NOMEM;
    node->n_nexcl = spec->nexcl;
    node->n_in_len = spec->in_len;
    uint32_t n = hmi_tree_live(group->g_ranks, group->g_size, spec->excl, spec->nexcl,
                               node->n_live);
    node->n_tree = (struct hmi_tree){
        .t_kind = (hm_tree_kind_t)(spec->tree_word & 0xffu),
        .t_k = spec->tree_word >> 8,
        .t_n = n,
        .t_root = hmi_tree_find(node->n_live, n, spec->root),
    };
    if (!hmi_tree_valid(&node->n_tree))
        return HM_INVALID_ARG;
    size_t out_size = node->n_ops->co_ops.out_size;
    if (out_size > 0) {
        node->n_acc = calloc(1, out_size);
        node->n_tmp = calloc(1, out_size);
        if (node->n_acc == NULL || node->n_tmp == NULL)
            return HM_NOMEM;
    }
    return hm_timer_create(group->g_ctx, node_timer_cb, node, &node->n_timer);
}

static void node_free(struct hmi_coll_node *node)
{
    hm_group_t *group = node->n_group;
    hm_class_t *cls = group->g_cls;
    if (node->n_has_acc)
        hm_proc_release(cls, node->n_ops->co_ops.out_proc, node->n_acc);
    for (uint32_t i = 0; i < node->n_nkids; i++)
        free(node->n_kids[i]);
    hmi_coll_bulk_release(node);
    hm_timer_destroy(node->n_timer);
    free(node->n_kids);
    free(node->n_parents);
    free(node->n_failed);
    free(node->n_acc);
    free(node->n_acc_buf);
    free(node->n_tmp);
    free(node->n_live);
    free(node->n_excl);
    free(node->n_in);
    free(node);
    group->g_nodes_alive--;
}

hm_return_t hmi_coll_node_new(hm_group_t *group, const struct hmi_coll_spec *spec,
                              struct hmi_coll_node **node_out)
{
    const struct hmi_coll_ops *ops = hmi_coll_ops_get(group->g_cls, spec->user_id);
    if (ops == NULL)
        return HM_NOENTRY;
    struct hmi_coll_node *node = calloc(1, sizeof(*node));
    if (node == NULL)
        return HM_NOMEM;
    node->n_group = group;
    node->n_refs = 1; /* the answer */
    node->n_id = spec->id;
    node->n_user_id = spec->user_id;
    node->n_ops = ops;
    node->n_version = spec->version;
    node->n_tree_word = spec->tree_word;
    node->n_root = spec->root;
    node->n_answer_by = hmi_time_ns() + (uint64_t)spec->budget_ms * 1000000u;
    hmi_list_init(&node->n_link);
    group->g_nodes_alive++;
    hm_return_t ret = node_fill(node, spec);
    if (ret == HM_SUCCESS)
        ret = hm_timer_arm(node->n_timer, spec->budget_ms);
    if (ret != HM_SUCCESS) {
        node_free(node);
        return ret;
    }
    *node_out = node;
    return HM_SUCCESS;
}

void hmi_coll_node_unref(struct hmi_coll_node *node)
{
    if (--node->n_refs == 0)
        node_free(node);
}

hm_return_t hmi_coll_node_add_parent(struct hmi_coll_node *node, hm_handle_t *parent)
{
    if (node->n_nparents == node->n_parents_cap) {
        uint32_t cap = node->n_parents_cap ? node->n_parents_cap * 2 : 2;
        hm_handle_t **p = realloc(node->n_parents, cap * sizeof(*p));
        if (p == NULL)
            return HM_NOMEM;
        node->n_parents = p;
        node->n_parents_cap = cap;
    }
    node->n_parents[node->n_nparents++] = parent;
    return HM_SUCCESS;
}

hm_return_t hmi_coll_node_fail(struct hmi_coll_node *node, hm_rank_t rank, hm_return_t why)
{
    if (node->n_nfailed == node->n_failed_cap) {
        uint32_t cap = node->n_failed_cap ? node->n_failed_cap * 2 : 4;
        uint64_t *f = realloc(node->n_failed, cap * sizeof(*f));
        if (f == NULL)
            return HM_NOMEM;
        node->n_failed = f;
        node->n_failed_cap = cap;
    }
    node->n_failed[node->n_nfailed++] = (uint64_t)rank << 32 | (uint32_t)why;
    return HM_SUCCESS;
}

hm_return_t hmi_coll_node_merge(struct hmi_coll_node *node, void *bytes, size_t len, bool take,
                                uint32_t contributed)
{
    const hm_coll_ops_t *ops = &node->n_ops->co_ops;
    hm_class_t *cls = node->n_group->g_cls;
    hm_return_t ret = HM_SUCCESS;
    if (ops->out_size == 0) {
        node->n_contributed += contributed;
        return HM_SUCCESS;
    }
    if (!node->n_has_acc) { /* the first output becomes the aggregate, in bytes we own */
        void *own = take ? bytes : node_dup(bytes, len);
        if (own == NULL)
            return HM_NOMEM;
        ret = hm_proc_decode(cls, ops->out_proc, own, len, node->n_acc);
        if (ret != HM_SUCCESS) {
            free(own);
            return ret;
        }
        node->n_acc_buf = own;
        node->n_has_acc = true;
        node->n_contributed += contributed;
        return HM_SUCCESS;
    }
    memset(node->n_tmp, 0, ops->out_size);
    ret = hm_proc_decode(cls, ops->out_proc, bytes, len, node->n_tmp);
    if (ret == HM_SUCCESS) {
        ret = ops->aggregate(node->n_acc, node->n_tmp, ops->arg);
        hm_proc_release(cls, ops->out_proc, node->n_tmp);
    }
    if (take)
        free(bytes);
    if (ret == HM_SUCCESS)
        node->n_contributed += contributed;
    return ret;
}

/* ---- children ---------------------------------------------------------------- */

static uint32_t node_ms_left(const struct hmi_coll_node *node)
{
    uint64_t now = hmi_time_ns();
    return now >= node->n_answer_by ? 0 : (uint32_t)((node->n_answer_by - now) / 1000000u);
}

/* `pos` did not answer (`why`): list it and reach its children ourselves. */
static void node_adopt(struct hmi_coll_node *node, uint32_t pos, hm_return_t why)
{
    hm_rank_t rank = node->n_live[pos];
    if (hmi_coll_node_fail(node, rank, why) != HM_SUCCESS)
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "collective: out of memory listing rank %u",
                rank);
    if (!node->n_answered)
        node_send_children(node, pos);
}

static hm_return_t node_kid_forward(struct hmi_coll_node *node, struct hmi_coll_kid *kid,
                                    hm_addr_t *addr, uint32_t left)
{
    hm_group_t *group = node->n_group;
    struct hmi_coll_in in = {
        .ci_group = group->g_hash,
        .ci_id = node->n_id,
        .ci_version = node->n_version,
        .ci_root = node->n_root,
        .ci_tree = node->n_tree_word,
        .ci_user_id = node->n_user_id,
        .ci_budget_ms = left * COLL_CHILD_BUDGET_NUM / 10,
        .ci_sender = group->g_self,
        .ci_excluded = {.elems = node->n_excl, .count = node->n_nexcl},
        .ci_input = {.elems = node->n_in, .count = node->n_in_len},
    };
    hm_forward_opts_t fopts = {
        .field_mask = HM_FORWARD_OPT_TIMEOUT,
        .timeout_ms = left * COLL_CHILD_WAIT_NUM / 10,
    };
    hm_return_t ret = hm_handle_create(group->g_ctx, addr, group->g_gc->gc_coll_id,
                                       &kid->k_handle);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hm_forward(kid->k_handle, &in, node_kid_cb, kid, &fopts);
    if (ret != HM_SUCCESS) {
        hm_handle_destroy(kid->k_handle);
        kid->k_handle = NULL;
        return ret;
    }
    node->n_sends++;
    node->n_kids_open++;
    node->n_refs++;
    return HM_SUCCESS;
}

static struct hmi_coll_kid *node_kid_new(struct hmi_coll_node *node, uint32_t pos)
{
    if (node->n_nkids == node->n_kids_cap) {
        uint32_t cap = node->n_kids_cap ? node->n_kids_cap * 2 : 8;
        struct hmi_coll_kid **k = realloc(node->n_kids, cap * sizeof(*k));
        if (k == NULL)
            return NULL;
        node->n_kids = k;
        node->n_kids_cap = cap;
    }
    struct hmi_coll_kid *kid = calloc(1, sizeof(*kid));
    if (kid == NULL)
        return NULL;
    kid->k_node = node;
    kid->k_pos = pos;
    node->n_kids[node->n_nkids++] = kid;
    return kid;
}

static void node_send_kid(struct hmi_coll_node *node, uint32_t pos)
{
    hm_group_t *group = node->n_group;
    struct hmi_member *m = hmi_group_member(group, node->n_live[pos]);
    uint32_t left = node_ms_left(node);
    hm_addr_t *addr = NULL;
    hm_return_t ret = HM_UNREACHABLE;
    if (m == NULL || m->m_dead) { /* removed since, or known dead: do not wait for it */
        node_adopt(node, pos, HM_UNREACHABLE);
        return;
    }
    if (left * COLL_CHILD_BUDGET_NUM / 10 == 0) {
        node_adopt(node, pos, HM_TIMEOUT);
        return;
    }
    struct hmi_coll_kid *kid = node_kid_new(node, pos);
    if (kid == NULL) {
        node_adopt(node, pos, HM_NOMEM);
        return;
    }
    ret = hmi_group_addr(group, m, &addr);
    if (ret == HM_SUCCESS)
        ret = node_kid_forward(node, kid, addr, left);
    if (ret != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_INFO, "collective: cannot reach rank %u: %s",
                m->m_rank, hm_strerror(ret));
        if (ret == HM_UNREACHABLE)
            hmi_detect_dead(group, m->m_rank, ret);
        node_adopt(node, pos, ret);
    }
}

void hmi_coll_node_launch(struct hmi_coll_node *node, uint32_t self_pos)
{
    if (self_pos == HMI_TREE_NONE) { /* an origin outside the tree: its one child is the root */
        node_send_kid(node, node->n_tree.t_root);
        return;
    }
    node_send_children(node, self_pos);
}

/* Send to every tree child of `pos` (ours, or an adopted rank's). */
static void node_send_children(struct hmi_coll_node *node, uint32_t pos)
{
    uint32_t count = hmi_tree_children(&node->n_tree, pos, NULL, 0);
    if (count == 0)
        return;
    uint32_t *kids = malloc(count * sizeof(*kids));
    if (kids == NULL) { /* cannot even list them: they are reported, not reached */
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "collective: out of memory for children");
        return;
    }
    hmi_tree_children(&node->n_tree, pos, kids, count);
    for (uint32_t i = 0; i < count; i++)
        node_send_kid(node, kids[i]);
    free(kids);
}

/*
 * A child's answer is its claims about its subtree: at most that many ranks
 * contributed or failed, and every failed rank one of them. Anything else
 * (a count past the subtree, a rank outside it) is malformed: the child is
 * then listed as failed with HM_PROTOCOL_ERROR and its subtree adopted, and
 * nothing of its answer counts.
 */
static bool node_kid_plausible(const struct hmi_coll_node *node, uint32_t pos,
                               const struct hmi_coll_out *out)
{
    uint32_t most = hmi_tree_subtree_size(&node->n_tree, pos);
    if (out->co_contributed > most || out->co_failed.count > most)
        return false;
    if (node->n_ops->co_ops.out_size > 0 && !out->co_has_output && out->co_contributed > 0)
        return false; /* contributions without their output */
    const uint64_t *failed = out->co_failed.elems;
    for (uint64_t i = 0; i < out->co_failed.count; i++) {
        uint32_t at = hmi_tree_find(node->n_live, node->n_tree.t_n, (hm_rank_t)(failed[i] >> 32));
        if (at == HMI_TREE_NONE || !hmi_tree_in_subtree(&node->n_tree, pos, at))
            return false;
    }
    return true;
}

/* A child's answer: merge its subtree's aggregate and failures. */
static hm_return_t node_kid_merge(struct hmi_coll_node *node, struct hmi_coll_kid *kid)
{
    struct hmi_coll_out out;
    hm_return_t ret = hm_get_output(kid->k_handle, &out);
    if (ret != HM_SUCCESS)
        return ret;
    if (!node_kid_plausible(node, kid->k_pos, &out)) {
        static struct hmi_log_limit bad_log; /* a peer can cause it: rate-limited */
        hmi_log_limited(&bad_log, HMI_SUBSYS_GROUP, HMI_LOG_WARN,
                        "collective: rank %u answered for ranks outside its subtree",
                        node->n_live[kid->k_pos]);
        hm_free_output(kid->k_handle, &out);
        return HM_PROTOCOL_ERROR;
    }
    const uint64_t *failed = out.co_failed.elems;
    for (uint64_t i = 0; i < out.co_failed.count && ret == HM_SUCCESS; i++)
        ret = hmi_coll_node_fail(node, (hm_rank_t)(failed[i] >> 32),
                                 (hm_return_t)(uint32_t)failed[i]);
    /* A collective without output counts its ranks only (co_has_output is 0). */
    if (ret == HM_SUCCESS && (out.co_has_output || node->n_ops->co_ops.out_size == 0))
        ret = hmi_coll_node_merge(node, (void *)out.co_output.elems,
                                  (size_t)out.co_output.count, false, out.co_contributed);
    hm_free_output(kid->k_handle, &out);
    return ret;
}

static void node_kid_cb(const hm_cb_info_t *info)
{
    struct hmi_coll_kid *kid = info->arg;
    struct hmi_coll_node *node = kid->k_node;
    hm_group_t *group = node->n_group;
    hm_rank_t rank = node->n_live[kid->k_pos];
    hm_return_t ret = info->ret;
    node->n_kids_open--;
    if (ret == HM_SUCCESS)
        hmi_group_heard(group, rank);
    if (!node->n_answered) {
        if (ret == HM_SUCCESS)
            ret = node_kid_merge(node, kid);
        if (ret == HM_UNREACHABLE)
            hmi_detect_dead(group, rank, ret);
        if (ret != HM_SUCCESS)
            node_adopt(node, kid->k_pos, ret);
    }
    hm_handle_destroy(kid->k_handle);
    kid->k_handle = NULL;
    hmi_coll_node_check(node);
    hmi_coll_node_unref(node);
}

/* ---- answering ------------------------------------------------------------------- */

static int failed_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sort the failures by rank and drop repeats of a rank (first error kept). */
static void node_sort_failed(struct hmi_coll_node *node)
{
    uint32_t n = 0;
    if (node->n_nfailed == 0) /* n_failed may be NULL: qsort must not see it */
        return;
    qsort(node->n_failed, node->n_nfailed, sizeof(*node->n_failed), failed_cmp);
    for (uint32_t i = 0; i < node->n_nfailed; i++) {
        if (n > 0 && node->n_failed[n - 1] >> 32 == node->n_failed[i] >> 32)
            continue;
        node->n_failed[n++] = node->n_failed[i];
    }
    node->n_nfailed = n;
}

/* The aggregate, encoded (malloc'd); *len_out 0 and NULL when there is none. */
static hm_return_t node_encode_acc(struct hmi_coll_node *node, void **buf_out, size_t *len_out)
{
    const hm_coll_ops_t *ops = &node->n_ops->co_ops;
    size_t need = 0;
    *buf_out = NULL;
    *len_out = 0;
    if (!node->n_has_acc)
        return HM_SUCCESS;
    hm_return_t ret = hm_proc_encode(node->n_group->g_cls, ops->out_proc, node->n_acc, NULL, 0,
                                     &need);
    if (ret != HM_SUCCESS && ret != HM_MSGSIZE)
        return ret;
    void *buf = malloc(need > 0 ? need : 1);
    if (buf == NULL)
        return HM_NOMEM;
    ret = hm_proc_encode(node->n_group->g_cls, ops->out_proc, node->n_acc, buf, need, &need);
    if (ret != HM_SUCCESS) {
        free(buf);
        return ret;
    }
    *buf_out = buf;
    *len_out = need;
    return HM_SUCCESS;
}

/* Keep this answer for a duplicate request that comes later (a ring). */
static void node_cache(struct hmi_coll_node *node, void *out, size_t len)
{
    hm_group_t *group = node->n_group;
    struct hmi_coll_done *d = &group->g_done[group->g_done_next];
    group->g_done_next = (group->g_done_next + 1) % HMI_COLL_CACHE;
    free(d->d_out);
    free(d->d_failed);
    memset(d, 0, sizeof(*d));
    d->d_failed = node_dup(node->n_failed, node->n_nfailed * sizeof(uint64_t));
    d->d_out = out != NULL ? node_dup(out, len) : NULL;
    if (d->d_failed == NULL || (out != NULL && d->d_out == NULL)) {
        free(d->d_failed);
        free(d->d_out);
        memset(d, 0, sizeof(*d));
        return;
    }
    d->d_id = node->n_id;
    d->d_user_id = node->n_user_id;
    d->d_root = node->n_root;
    d->d_tree_word = node->n_tree_word;
    d->d_contributed = node->n_contributed;
    d->d_has_out = node->n_has_acc;
    d->d_out_len = len;
    d->d_nfailed = node->n_nfailed;
}

static void node_respond(hm_handle_t *parent, const struct hmi_coll_out *out)
{
    hm_return_t ret = hm_respond(parent, out, NULL, NULL);
    if (ret != HM_SUCCESS)
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_INFO, "collective: answer not sent: %s",
                hm_strerror(ret));
    hm_handle_destroy(parent);
}

static void node_call_origin(struct hmi_coll_node *node)
{
    hm_coll_failure_t *failed = calloc(node->n_nfailed ? node->n_nfailed : 1, sizeof(*failed));
    hm_coll_result_t result = {
        .ret = HM_SUCCESS,
        .out = node->n_has_acc ? node->n_acc : NULL,
        .contributed = node->n_contributed,
        .failed = failed,
        .failed_count = failed != NULL ? node->n_nfailed : 0,
        .root_sends = node->n_sends,
        .arg = node->n_cb_arg,
    };
    for (uint32_t i = 0; failed != NULL && i < node->n_nfailed; i++) {
        failed[i].rank = (hm_rank_t)(node->n_failed[i] >> 32);
        failed[i].error = (hm_return_t)(uint32_t)node->n_failed[i];
    }
    if (failed == NULL)
        result.ret = HM_NOMEM;
    else if (node->n_nfailed > 0)
        result.ret = failed[0].error;
    node->n_cb(&result);
    free(failed);
}

static void node_answer(struct hmi_coll_node *node)
{
    void *out = NULL;
    size_t len = 0;
    node->n_answered = true;
    hm_timer_disarm(node->n_timer);
    hmi_coll_bulk_abandon(node);
    hmi_list_remove(&node->n_link);
    node_sort_failed(node);
    hm_return_t ret = node_encode_acc(node, &out, &len);
    if (ret != HM_SUCCESS) { /* the ranks in the aggregate are lost: say so */
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "collective: cannot encode the aggregate: %s",
                hm_strerror(ret));
        node->n_has_acc = false;
        node->n_contributed = 0;
    }
    struct hmi_coll_out answer = {
        .co_contributed = node->n_contributed,
        .co_has_output = node->n_has_acc,
        .co_output = {.elems = out, .count = len},
        .co_failed = {.elems = node->n_failed, .count = node->n_nfailed},
    };
    if (!node->n_origin || node->n_nparents > 0)
        node_cache(node, out, len);
    for (uint32_t i = 0; i < node->n_nparents; i++)
        node_respond(node->n_parents[i], &answer);
    node->n_nparents = 0;
    free(out);
    if (node->n_origin)
        node_call_origin(node);
    hmi_coll_node_unref(node); /* the answer's reference */
}

void hmi_coll_node_check(struct hmi_coll_node *node)
{
    if (!node->n_answered && !node->n_starting && !node->n_own_pending &&
        node->n_kids_open == 0)
        node_answer(node);
}

/* The deadline: whoever has not answered is listed as timed out. */
static void node_timer_cb(hm_timer_t *timer, void *arg)
{
    struct hmi_coll_node *node = arg;
    (void)timer;
    if (node->n_answered)
        return;
    if (node->n_own_pending)
        hmi_coll_node_fail(node, node->n_group->g_self, HM_TIMEOUT);
    for (uint32_t i = 0; i < node->n_nkids; i++) {
        struct hmi_coll_kid *kid = node->n_kids[i];
        if (kid->k_handle != NULL) {
            hmi_coll_node_fail(node, node->n_live[kid->k_pos], HM_TIMEOUT);
            hm_cancel(kid->k_handle); /* its callback still runs, and finds us answered */
        }
    }
    node_answer(node);
}

bool hmi_coll_cache_answer(hm_group_t *group, const struct hmi_coll_in *in, hm_handle_t *parent)
{
    for (uint32_t i = 0; i < HMI_COLL_CACHE; i++) {
        const struct hmi_coll_done *d = &group->g_done[i];
        if (d->d_id != in->ci_id || in->ci_id == 0 || d->d_user_id != in->ci_user_id ||
            d->d_root != in->ci_root || d->d_tree_word != in->ci_tree)
            continue;
        struct hmi_coll_out answer = {
            .co_contributed = d->d_contributed,
            .co_has_output = d->d_has_out,
            .co_output = {.elems = d->d_out, .count = d->d_out_len},
            .co_failed = {.elems = d->d_failed, .count = d->d_nfailed},
        };
        node_respond(parent, &answer);
        return true;
    }
    return false;
}

void hmi_coll_cache_clear(hm_group_t *group)
{
    for (uint32_t i = 0; i < HMI_COLL_CACHE; i++) {
        free(group->g_done[i].d_out);
        free(group->g_done[i].d_failed);
        memset(&group->g_done[i], 0, sizeof(group->g_done[i]));
    }
}
