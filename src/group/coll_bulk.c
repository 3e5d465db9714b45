/*
 * Chained bulk broadcast: a collective whose input carries a bulk handle
 * (hm_coll_ops_t.has_bulk). Each rank pulls the data once from whoever sent
 * it the request (its parent, or an adopter), into memory of its own, and
 * passes its own handle down, so the root serves the payload to its direct
 * children only (about log N pulls in a k-nomial tree, not N).
 *
 * The pull runs before the rank forwards: children cannot pull data their
 * parent does not have yet. (Pipelining the pull by pieces would overlap
 * the levels; not done.)
 */
#include <stdlib.h>
#include <string.h>

#include "group/coll_node.h"
#include "util/log.h"

struct coll_fetch {
    struct hmi_coll_node *f_node;
    void *f_in;          /* the decoded input, holding the sender's handle */
};

static hm_bulk_t *fetch_field(const struct hmi_coll_node *node, void *in)
{
    hm_bulk_t *bulk;
    memcpy(&bulk, (char *)in + node->n_ops->co_ops.bulk_offset, sizeof(bulk));
    return bulk;
}

static void fetch_end(struct coll_fetch *f)
{
    struct hmi_coll_node *node = f->f_node;
    hm_proc_release(node->n_group->g_cls, node->n_ops->co_ops.in_proc, f->f_in);
    free(f->f_in);
    free(f);
}

/* Re-encode the input with our handle in place of the sender's. */
static hm_return_t fetch_reencode(struct hmi_coll_node *node, void *in)
{
    const hm_coll_ops_t *ops = &node->n_ops->co_ops;
    hm_class_t *cls = node->n_group->g_cls;
    hm_bulk_t *theirs = fetch_field(node, in);
    size_t need = 0;
    void *buf = NULL;
    memcpy((char *)in + ops->bulk_offset, &node->n_bulk, sizeof(hm_bulk_t *));
    hm_return_t ret = hm_proc_encode(cls, ops->in_proc, in, NULL, 0, &need);
    if (ret == HM_SUCCESS || ret == HM_MSGSIZE) {
        buf = malloc(need > 0 ? need : 1);
        ret = buf != NULL ? hm_proc_encode(cls, ops->in_proc, in, buf, need, &need) : HM_NOMEM;
    }
    if (ret == HM_SUCCESS) {
        free(node->n_in);
        node->n_in = buf;
        node->n_in_len = need;
    } else {
        free(buf);
    }
    memcpy((char *)in + ops->bulk_offset, &theirs, sizeof(hm_bulk_t *));
    return ret;
}

static void fetch_done(const hm_bulk_cb_info_t *info)
{
    struct coll_fetch *f = info->arg;
    struct hmi_coll_node *node = f->f_node;
    hm_return_t ret = info->ret;
    node->n_fetch = NULL;
    if (ret == HM_SUCCESS)
        ret = fetch_reencode(node, f->f_in);
    fetch_end(f);
    node->n_own_pending = false;
    if (node->n_answered) { /* too late: nothing to forward to */
        hmi_coll_node_unref(node);
        return;
    }
    if (ret != HM_SUCCESS) { /* children pull from our sender instead; we are listed */
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_INFO, "collective: bulk input not pulled: %s",
                hm_strerror(ret));
        hmi_coll_bulk_release(node);
        hmi_coll_node_fail(node, node->n_group->g_self, ret);
        node->n_starting = true; /* see hmi_coll_node_proceed */
        hmi_coll_node_launch(node, hmi_tree_find(node->n_live, node->n_tree.t_n,
                                                 node->n_group->g_self));
        node->n_starting = false;
        hmi_coll_node_check(node);
    } else {
        hmi_coll_node_proceed(node);
    }
    hmi_coll_node_unref(node);
}

static hm_return_t fetch_start(struct hmi_coll_node *node, struct coll_fetch *f,
                               hm_addr_t *from)
{
    hm_group_t *group = node->n_group;
    hm_bulk_t *theirs = fetch_field(node, f->f_in);
    if (theirs == NULL)
        return HM_NOENTRY; /* no data: nothing to chain */
    node->n_bulk_len = hm_bulk_size(theirs);
    /* The size is the sender's claim: it is charged to the context's
     * admission byte budgets (per context and per sender) before anything
     * is allocated, as an overflowed request's bytes are. */
    hm_return_t ret = node->n_nparents > 0
                          ? hm_handle_admit_bytes(node->n_parents[0], node->n_bulk_len)
                          : HM_INVALID_ARG; /* only a request's node fetches */
    if (ret != HM_SUCCESS)
        return ret;
    /* Released with the request's handle: keep one until the copy goes, or
     * an answer at the deadline would release the charge of a pull still
     * in flight. */
    node->n_bulk_charged = node->n_parents[0];
    hm_handle_ref(node->n_bulk_charged);
    node->n_bulk_mem = malloc(node->n_bulk_len > 0 ? node->n_bulk_len : 1);
    if (node->n_bulk_mem == NULL)
        return HM_NOMEM;
    ret = hm_bulk_create(group->g_cls, 1, &node->n_bulk_mem, &node->n_bulk_len,
                                     HM_BULK_READ_WRITE, &node->n_bulk);
    if (ret != HM_SUCCESS)
        return ret;
    hm_bulk_xfer_t xfer = {
        .op = HM_BULK_PULL,
        .origin_addr = from,
        .origin = theirs,
        .local = node->n_bulk,
        .size = node->n_bulk_len,
    };
    ret = hm_bulk_transfer(group->g_ctx, &xfer, NULL, fetch_done, f, &node->n_fetch);
    if (ret != HM_SUCCESS)
        node->n_fetch = NULL;
    return ret;
}

void hmi_coll_bulk_fetch(struct hmi_coll_node *node, hm_addr_t *from)
{
    const hm_coll_ops_t *ops = &node->n_ops->co_ops;
    struct coll_fetch *f = calloc(1, sizeof(*f));
    hm_return_t ret = HM_NOMEM;
    if (f != NULL) {
        f->f_node = node;
        f->f_in = calloc(1, ops->in_size);
    }
    if (f != NULL && f->f_in != NULL)
        ret = hm_proc_decode(node->n_group->g_cls, ops->in_proc, node->n_in, node->n_in_len,
                             f->f_in);
    if (ret == HM_SUCCESS) {
        ret = fetch_start(node, f, from);
        if (ret == HM_SUCCESS) {
            node->n_own_pending = true; /* the deadline lists us if the pull is slow */
            node->n_refs++;
            return;
        }
        hm_proc_release(node->n_group->g_cls, ops->in_proc, f->f_in);
    }
    if (f != NULL)
        free(f->f_in);
    free(f);
    hmi_coll_bulk_release(node);
    if (ret != HM_NOENTRY) /* a real failure, not "no data" */
        hmi_coll_node_fail(node, node->n_group->g_self, ret);
    if (ret == HM_NOENTRY) {
        hmi_coll_node_proceed(node);
    } else {
        node->n_refs++;
        node->n_starting = true; /* see hmi_coll_node_proceed */
        hmi_coll_node_launch(node, hmi_tree_find(node->n_live, node->n_tree.t_n,
                                                 node->n_group->g_self));
        node->n_starting = false;
        hmi_coll_node_check(node);
        hmi_coll_node_unref(node);
    }
}

void hmi_coll_bulk_release(struct hmi_coll_node *node)
{
    hm_bulk_free(node->n_bulk);
    free(node->n_bulk_mem);
    node->n_bulk = NULL;
    node->n_bulk_mem = NULL;
    node->n_bulk_len = 0;
    if (node->n_bulk_charged != NULL)
        hm_handle_destroy(node->n_bulk_charged);
    node->n_bulk_charged = NULL;
}

void hmi_coll_bulk_abandon(struct hmi_coll_node *node)
{
    if (node->n_fetch != NULL)
        (void)hm_bulk_cancel(node->n_fetch); /* HM_NOENTRY: its callback is queued */
}
