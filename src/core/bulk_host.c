/*
 * The core's side of bulk's host interface (bulk/bulk.h): how bulk's public
 * functions turn a class, a context and an address into what the bulk layer
 * works on. Registered by hm_class_create, before any class exists that a
 * bulk call could be given.
 */
#include "core/core_internal.h"

static struct hmi_bulk_rcache *host_class_rcache(hm_class_t *cls)
{
    return cls->k_rcache;
}

static struct hmi_bulk_host *host_context(hm_context_t *ctx)
{
    return ctx->c_bulk;
}

static hmi_na_addr_t *host_addr_peer(hm_context_t *ctx, const hm_addr_t *addr)
{
    return addr->a_ctx == ctx ? addr->a_na : NULL;
}

/* A transfer's timeout: one of the context's user timers, armed at once. */
static hm_timer_t *host_timer_start(hm_context_t *ctx, unsigned int ms,
                                    void (*fire)(hm_timer_t *timer, void *arg), void *arg)
{
    hm_timer_t *timer = NULL;
    if (hm_timer_create(ctx, fire, arg, &timer) != HM_SUCCESS)
        return NULL;
    if (hm_timer_arm(timer, ms) != HM_SUCCESS) {
        hm_timer_destroy(timer);
        return NULL;
    }
    return timer;
}

static const struct hmi_bulk_host_ops core_bulk_host = {
    .class_rcache = host_class_rcache,
    .context_host = host_context,
    .addr_peer = host_addr_peer,
    .enter = hmi_ctx_enter,
    .leave = hmi_ctx_leave,
    .timer_start = host_timer_start,
    .timer_free = hm_timer_destroy,
};

void hmi_core_bulk_host_register(void)
{
    hmi_bulk_host_register(&core_bulk_host);
}
