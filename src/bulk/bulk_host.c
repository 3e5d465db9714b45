/*
 * A context's bulk state (bulk/bulk.h, "the host interface"): where its
 * finished transfers go, and its pool of transfer objects.
 *
 * The pool. A transfer object is allocated together with its NA ops (one
 * per unit of depth) and both stay together in the pool when it ends, so a
 * context that keeps transferring allocates nothing per transfer once it has
 * as many objects as it had transfers in flight at its peak. A get takes the
 * most recently used idle object with room for the depth asked (the default
 * depth is the same for every transfer, so that is the first one). The pool
 * is bounded like the core's other pools: whatever stayed idle for a whole
 * trim interval, above the retained amount, is freed (hmi_bulk_host_trim,
 * called from the core's trim.c).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "bulk/bulk_internal.h"
#include "util/log.h"

static _Atomic(const struct hmi_bulk_host_ops *) bulk_host_table;

void hmi_bulk_host_register(const struct hmi_bulk_host_ops *ops)
{
    atomic_store_explicit(&bulk_host_table, ops, memory_order_release);
}

const struct hmi_bulk_host_ops *hmi_bulk_host_table(void)
{
    return atomic_load_explicit(&bulk_host_table, memory_order_acquire);
}

hm_return_t hmi_bulk_host_create(hmi_na_context_t *na, hm_context_t *owner,
                                 struct hmi_list *queue, struct hmi_bulk_host **host_out)
{
    if (na == NULL || queue == NULL || host_out == NULL)
        return HM_INVALID_ARG;
    struct hmi_bulk_host *host = calloc(1, sizeof(*host));
    if (host == NULL)
        return HM_NOMEM;
    host->h_na = na;
    host->h_owner = owner;
    host->h_queue = queue;
    hmi_list_init(&host->h_free);
    *host_out = host;
    return HM_SUCCESS;
}

void hmi_bulk_host_count_pushes(struct hmi_bulk_host *host, _Atomic uint64_t *gen)
{
    host->h_queue_gen = gen;
}

static void xfer_free(hm_bulk_op_id_t *op)
{
    for (uint32_t i = 0; i < op->t_cap; i++)
        hmi_na_op_destroy(op->t_ops[i]);
    free(op);
}

/* Free up to `count` idle transfers, coldest first (the free list is LIFO). */
static uint32_t host_free_idle(struct hmi_bulk_host *host, uint32_t count)
{
    uint32_t freed = 0;
    while (freed < count && !hmi_list_empty(&host->h_free)) {
        struct hmi_list *link = host->h_free.prev;
        hmi_list_remove(link);
        xfer_free(hmi_container_of(link, hm_bulk_op_id_t, t_comp.cp_link));
        host->h_nfree--;
        freed++;
    }
    return freed;
}

void hmi_bulk_host_destroy(struct hmi_bulk_host *host)
{
    if (host == NULL)
        return;
    if (host->h_alive != 0)
        hmi_log(HMI_SUBSYS_BULK, HMI_LOG_ERROR,
                "bulk host destroyed with %u transfers alive (they leak)", host->h_alive);
    host_free_idle(host, UINT32_MAX);
    free(host);
}

uint32_t hmi_bulk_host_alive(const struct hmi_bulk_host *host)
{
    return host->h_alive;
}

uint64_t hmi_bulk_host_allocs(const struct hmi_bulk_host *host)
{
    return host->h_allocs;
}

uint64_t hmi_bulk_host_eager_pulls(const struct hmi_bulk_host *host)
{
    return host->h_eager_pulls;
}

uint64_t hmi_bulk_host_returned_pushes(const struct hmi_bulk_host *host)
{
    return host->h_returned_pushes;
}

uint32_t hmi_bulk_host_trim(struct hmi_bulk_host *host, uint32_t retain)
{
    uint32_t excess = host->h_free_low > retain ? host->h_free_low - retain : 0;
    uint32_t freed = host_free_idle(host, excess);
    host->h_free_low = host->h_nfree;
    return freed;
}

/* A new transfer object with `cap` NA ops of the host's class. */
static hm_bulk_op_id_t *xfer_alloc(struct hmi_bulk_host *host, uint32_t cap,
                                   hmi_na_op_cb_t piece_done)
{
    hm_bulk_op_id_t *op = calloc(1, sizeof(*op) + 2 * (size_t)cap * sizeof(hmi_na_op_t *));
    if (op == NULL)
        return NULL;
    op->t_ops = (hmi_na_op_t **)(op + 1);
    op->t_idle = op->t_ops + cap;
    for (uint32_t i = 0; i < cap; i++) {
        op->t_ops[i] = hmi_na_op_create(host->h_na->x_class);
        if (op->t_ops[i] == NULL) {
            xfer_free(op); /* op->t_cap counts the ops made so far */
            return NULL;
        }
        op->t_ops[i]->o_cb = piece_done;
        op->t_ops[i]->o_arg = op;
        op->t_cap++;
    }
    host->h_allocs++;
    return op;
}

/* The most recently used idle transfer with room for `depth` ops, unlinked, or NULL. */
static hm_bulk_op_id_t *host_take_idle(struct hmi_bulk_host *host, uint32_t depth)
{
    for (struct hmi_list *l = host->h_free.next; l != &host->h_free; l = l->next) {
        hm_bulk_op_id_t *op = hmi_container_of(l, hm_bulk_op_id_t, t_comp.cp_link);
        if (op->t_cap < depth)
            continue;
        hmi_list_remove(l);
        if (--host->h_nfree < host->h_free_low)
            host->h_free_low = host->h_nfree;
        return op;
    }
    return NULL;
}

hm_bulk_op_id_t *hmi_bulk_xfer_get(struct hmi_bulk_host *host, uint32_t depth,
                                   hmi_na_op_cb_t piece_done)
{
    hm_bulk_op_id_t *op = host_take_idle(host, depth);
    if (op == NULL)
        op = xfer_alloc(host, depth, piece_done);
    if (op == NULL)
        return NULL;
    /* Clear the previous transfer's state; the ops and their arrays stay. */
    uint32_t cap = op->t_cap;
    hmi_na_op_t **ops = op->t_ops, **idle = op->t_idle;
    memset(op, 0, sizeof(*op));
    op->t_cap = cap;
    op->t_ops = ops;
    op->t_idle = idle;
    hmi_comp_init(&op->t_comp, HMI_COMP_OF_BULK);
    op->t_host = host;
    op->t_depth = depth;
    for (uint32_t i = 0; i < depth; i++)
        op->t_idle[op->t_nidle++] = op->t_ops[i];
    host->h_alive++;
    return op;
}

void hmi_bulk_xfer_put(hm_bulk_op_id_t *op)
{
    struct hmi_bulk_host *host = op->t_host;
    host->h_alive--;
    op->t_host = NULL; /* idle: hm_bulk_cancel of a stale id finds no host */
    hmi_list_push_front(&host->h_free, &op->t_comp.cp_link);
    host->h_nfree++;
}
