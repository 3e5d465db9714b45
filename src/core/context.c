/*
 * Contexts: an NA context plus the pools that keep the RPC path free of
 * malloc after warm-up (handles, send slots), the completion queue, the
 * deadline heap and the counters.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/core_internal.h"
#include "core/stats.h"
#include "util/log.h"
#include "util/siphash.h"
#include "util/outstruct.h"

#define CTX_DEFAULT_POOL 64u
#define CTX_DEFAULT_SPIN_US 50u

/* ---- handle pool ----------------------------------------------------------- */

/* Room for one more slot in the cookie table (and in the list of trimmed slots). */
static bool ctx_table_room(hm_context_t *ctx)
{
    if (ctx->c_table_size < ctx->c_table_cap)
        return true;
    uint32_t cap = ctx->c_table_cap ? ctx->c_table_cap * 2 : 64;
    hm_handle_t **grown = realloc(ctx->c_table, cap * sizeof(*grown));
    if (grown == NULL)
        return false;
    ctx->c_table = grown;
    uint64_t *slots = realloc(ctx->c_slots_free, cap * sizeof(*slots));
    if (slots == NULL)
        return false; /* the table is bigger, its capacity not yet */
    ctx->c_slots_free = slots;
    ctx->c_table_cap = cap;
    return true;
}

/*
 * A new slot's first generation: unpredictable, so that a cookie (slot and
 * generation, the RPC's name on the wire) cannot be guessed by a peer that
 * has not seen it. The response path also checks who answers (forward.c,
 * dropped_foreign), but on ofi+tcp a sender's name is its own claim, so
 * there the cookie is the lock that is left. Keyed with the process's
 * random key (util/siphash.h), over the context and the slot.
 */
static uint32_t ctx_first_gen(const hm_context_t *ctx, uint32_t slot)
{
    const void *words[2] = {ctx, (const void *)(uintptr_t)slot};
    return (uint32_t)hmi_siphash(hmi_siphash_process_key(), words, sizeof(words));
}

/* Make one more handle, in a trimmed handle's slot (going on from its
 * generation, so its old cookies stay stale) or a new one. */
static hm_handle_t *ctx_handle_new(hm_context_t *ctx)
{
    bool reuse = ctx->c_slots_free_count > 0;
    if (!reuse && !ctx_table_room(ctx))
        return NULL;
    hm_handle_t *handle = calloc(1, sizeof(*handle));
    if (handle == NULL)
        return NULL;
    handle->h_ctx = ctx;
    if (reuse) {
        uint64_t freed = ctx->c_slots_free[--ctx->c_slots_free_count];
        handle->h_slot = (uint32_t)freed;
        handle->h_gen = (uint32_t)(freed >> 32) + 1;
    } else {
        handle->h_slot = ctx->c_table_size++;
        handle->h_gen = ctx_first_gen(ctx, handle->h_slot);
    }
    hmi_list_init(&handle->h_link);
    hmi_comp_init(&handle->h_done, HMI_COMP_OF_HANDLE);
    hmi_timer_init(&handle->h_timer);
    ctx->c_table[handle->h_slot] = handle;
    return handle;
}

/* Handles in the pool, idle. */
static uint32_t ctx_handles_idle(const hm_context_t *ctx)
{
    return ctx->c_table_size - ctx->c_slots_free_count - ctx->c_handles_alive;
}

/*
 * Pools grow by doubling (at most CTX_GROW_MAX at a time), so the number of
 * growth steps during warm-up is logarithmic in the high-water mark and the
 * steady state never allocates.
 */
#define CTX_GROW_MAX 1024u

static uint32_t ctx_grow_count(uint32_t current)
{
    return current < 16 ? 16 : current > CTX_GROW_MAX ? CTX_GROW_MAX : current;
}

static void ctx_handles_grow(hm_context_t *ctx)
{
    for (uint32_t n = ctx_grow_count(ctx->c_table_size - ctx->c_slots_free_count); n > 0;
         n--) {
        hm_handle_t *handle = ctx_handle_new(ctx);
        if (handle == NULL)
            return;
        hmi_list_push_back(&ctx->c_free_handles, &handle->h_link);
    }
}

hm_handle_t *hmi_handle_get(hm_context_t *ctx)
{
    if (hmi_list_empty(&ctx->c_free_handles))
        ctx_handles_grow(ctx);
    struct hmi_list *link = hmi_list_pop_front(&ctx->c_free_handles);
    hm_handle_t *handle = link ? hmi_container_of(link, hm_handle_t, h_link) : NULL;
    if (handle == NULL) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "out of memory for a handle");
        return NULL;
    }
    uint32_t slot = handle->h_slot, gen = handle->h_gen;
    char *stage = handle->h_stage, *copy = handle->h_copy;
    size_t stage_cap = handle->h_stage_cap, copy_cap = handle->h_copy_cap;
    memset(handle, 0, sizeof(*handle));
    handle->h_ctx = ctx;
    handle->h_slot = slot;
    handle->h_gen = gen;
    handle->h_stage = stage;
    handle->h_stage_cap = stage_cap;
    handle->h_copy = copy;
    handle->h_copy_cap = copy_cap;
    atomic_init(&handle->h_refs, 1);
    atomic_init(&handle->h_busy, false);
    hmi_list_init(&handle->h_link);
    hmi_comp_init(&handle->h_done, HMI_COMP_OF_HANDLE);
    hmi_timer_init(&handle->h_timer);
    ctx->c_handles_alive++;
    uint32_t idle = ctx_handles_idle(ctx);
    if (idle < ctx->c_handles_low)
        ctx->c_handles_low = idle;
    return handle;
}

/* Return a handle whose last reference is gone. */
void hmi_handle_put(hm_handle_t *handle)
{
    hm_context_t *ctx = handle->h_ctx;
    hmi_handle_release_msg(handle);
    hmi_returns_release(handle);
    hmi_admit_leave(handle); /* before its address, which carries the peer's share */
    if (handle->h_addr)
        hm_addr_free(handle->h_addr);
    handle->h_addr = NULL;
    handle->h_gen++; /* stale cookies no longer match */
    handle->h_state = HMI_H_IDLE;
    ctx->c_handles_alive--;
    hmi_list_push_front(&ctx->c_free_handles, &handle->h_link);
}

/* ---- send slots -------------------------------------------------------------- */

static void ctx_send_done(hmi_na_op_t *op, hm_return_t status);
static struct hmi_send_slot *ctx_send_slot_new(hm_context_t *ctx);

struct hmi_send_slot *hmi_send_slot_new(hm_context_t *ctx, size_t size)
{
    hmi_na_class_t *na = ctx->c_class->k_na;
    struct hmi_send_slot *slot = calloc(1, sizeof(*slot));
    if (slot == NULL)
        return NULL;
    slot->s_ctx = ctx;
    slot->s_op = hmi_na_op_create(na);
    if (slot->s_op == NULL)
        goto err_free_slot;
    slot->s_buf = hmi_na_msg_buf_alloc(na, size, &slot->s_desc);
    if (slot->s_buf == NULL)
        goto err_free_op;
    slot->s_op->o_cb = ctx_send_done;
    slot->s_op->o_arg = slot;
    hmi_list_init(&slot->s_link);
    return slot;

err_free_op:
    hmi_na_op_destroy(slot->s_op);
err_free_slot:
    free(slot);
    return NULL;
}

/* An eager-limit slot of the context's pool, placed on its node. */
static struct hmi_send_slot *ctx_send_slot_new(hm_context_t *ctx)
{
    struct hmi_send_slot *slot = hmi_send_slot_new(ctx, ctx->c_class->k_msg_limit);
    if (slot == NULL)
        return NULL;
    hmi_ctx_place_buffer(ctx, slot->s_buf, ctx->c_class->k_msg_limit);
    ctx->c_sends_total++;
    return slot;
}

void hmi_send_slot_free(struct hmi_send_slot *slot)
{
    hmi_na_class_t *na = slot->s_ctx->c_class->k_na;
    hmi_na_msg_buf_free(na, slot->s_buf, slot->s_desc);
    hmi_na_op_destroy(slot->s_op);
    free(slot);
}

static void ctx_sends_grow(hm_context_t *ctx)
{
    for (uint32_t n = ctx_grow_count(ctx->c_sends_total); n > 0; n--) {
        struct hmi_send_slot *slot = ctx_send_slot_new(ctx);
        if (slot == NULL)
            return;
        hmi_list_push_back(&ctx->c_free_sends, &slot->s_link);
    }
}

struct hmi_send_slot *hmi_send_slot_get(hm_context_t *ctx)
{
    if (hmi_list_empty(&ctx->c_free_sends))
        ctx_sends_grow(ctx);
    struct hmi_list *link = hmi_list_pop_front(&ctx->c_free_sends);
    struct hmi_send_slot *slot =
        link ? hmi_container_of(link, struct hmi_send_slot, s_link) : NULL;
    if (slot == NULL) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "out of memory for a send buffer");
        return NULL;
    }
    slot->s_handle = NULL;
    slot->s_cookie = 0;
    ctx->c_sends_busy++;
    if (ctx->c_sends_total - ctx->c_sends_busy < ctx->c_sends_low)
        ctx->c_sends_low = ctx->c_sends_total - ctx->c_sends_busy;
    return slot;
}

void hmi_send_slot_put(struct hmi_send_slot *slot)
{
    slot->s_ctx->c_sends_busy--;
    hmi_list_push_front(&slot->s_ctx->c_free_sends, &slot->s_link);
}

/* NA completion of a send: route it by what the slot carried. */
static void ctx_send_done(hmi_na_op_t *op, hm_return_t status)
{
    struct hmi_send_slot *slot = op->o_arg;
    hm_context_t *ctx = slot->s_ctx;
    enum hmi_send_kind kind = slot->s_kind;
    hm_handle_t *handle = slot->s_handle;
    uint64_t cookie = slot->s_cookie;
    if (kind == HMI_SEND_REPLY) { /* a counted error reply: its own pool */
        hmi_admit_reply_done(slot, status);
        return;
    }
    hmi_send_slot_put(slot);
    if (status != HM_SUCCESS && status != HM_CANCELED)
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_DEBUG, "send failed: %s", hm_strerror(status));
    if (kind == HMI_SEND_REQUEST)
        hmi_forward_send_done(ctx, cookie, status);
    else if (kind == HMI_SEND_RESPONSE)
        hmi_respond_send_done(handle, status);
}

/* ---- completion queue ------------------------------------------------------------ */

void hmi_comp_enqueue(hm_handle_t *handle, enum hmi_comp_kind kind)
{
    handle->h_comp = kind;
    hmi_list_push_back(&handle->h_ctx->c_comp, &handle->h_done.cp_link);
    atomic_fetch_add_explicit(&handle->h_ctx->c_comp_gen, 1, memory_order_relaxed);
}

/* ---- create / destroy ---------------------------------------------------------------- */

static hm_progress_mode_t ctx_mode_from_env(hm_progress_mode_t mode)
{
    const char *env = getenv("HM_PROGRESS");
    if (env == NULL)
        return mode;
    if (strcasecmp(env, "busy") == 0)
        return HM_PROGRESS_BUSY;
    if (strcasecmp(env, "wait") == 0)
        return HM_PROGRESS_WAIT;
    if (strcasecmp(env, "default") == 0)
        return HM_PROGRESS_DEFAULT;
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN, "HM_PROGRESS=%s ignored (busy|wait|default)",
            env);
    return mode;
}

static void ctx_apply_opts(hm_context_t *ctx, const hm_context_opts_t *opts,
                           uint32_t *pool_size)
{
    uint64_t mask = opts ? opts->field_mask : 0;
    ctx->c_mode = (mask & HM_CONTEXT_OPT_PROGRESS_MODE) ? opts->progress_mode
                                                        : HM_PROGRESS_DEFAULT;
    ctx->c_mode = ctx_mode_from_env(ctx->c_mode);
    ctx->c_timeout_ms = (mask & HM_CONTEXT_OPT_TIMEOUT) ? opts->timeout_ms : 0;
    ctx->c_spin_us = (mask & HM_CONTEXT_OPT_SPIN_US) ? opts->spin_us : CTX_DEFAULT_SPIN_US;
    *pool_size = (mask & HM_CONTEXT_OPT_POOL_SIZE) ? opts->pool_size : CTX_DEFAULT_POOL;
}

/* Options that no context can have (numa_node is checked where it is placed). */
static bool ctx_opts_valid(const hm_context_opts_t *opts)
{
    return opts == NULL || (opts->field_mask & HM_CONTEXT_OPT_OVERFLOW_HOLD) == 0 ||
           opts->overflow_hold_ms != 0;
}

static int ctx_opt_node(const hm_context_opts_t *opts)
{
    return opts && (opts->field_mask & HM_CONTEXT_OPT_NUMA_NODE) ? opts->numa_node : -1;
}

static bool ctx_opt_thread(const hm_context_opts_t *opts)
{
    return opts && (opts->field_mask & HM_CONTEXT_OPT_PROGRESS_THREAD) && opts->progress_thread;
}

/* The class's table of contexts, which "#N" lookups read (locate.c). */
static hm_return_t ctx_class_add(hm_context_t *ctx)
{
    hm_class_t *cls = ctx->c_class;
    hm_return_t ret = HM_SUCCESS;
    pthread_mutex_lock(&cls->k_lock);
    if (ctx->c_index >= cls->k_ctxs_cap) {
        unsigned int cap = cls->k_ctxs_cap ? cls->k_ctxs_cap * 2 : 8;
        while (cap <= ctx->c_index)
            cap *= 2;
        hm_context_t **grown = realloc(cls->k_ctxs, cap * sizeof(*grown));
        if (grown == NULL) {
            ret = HM_NOMEM;
            goto out;
        }
        memset(grown + cls->k_ctxs_cap, 0, (cap - cls->k_ctxs_cap) * sizeof(*grown));
        cls->k_ctxs = grown;
        cls->k_ctxs_cap = cap;
    }
    cls->k_ctxs[ctx->c_index] = ctx;
    cls->k_nctx++;
out:
    pthread_mutex_unlock(&cls->k_lock);
    return ret;
}

static void ctx_class_remove(hm_context_t *ctx)
{
    hm_class_t *cls = ctx->c_class;
    pthread_mutex_lock(&cls->k_lock);
    cls->k_ctxs[ctx->c_index] = NULL;
    cls->k_nctx--;
    pthread_mutex_unlock(&cls->k_lock);
}

/* The next index of the class; HMI_CTX_MAX when there is none left. */
static unsigned int ctx_class_next_index(hm_class_t *cls)
{
    pthread_mutex_lock(&cls->k_lock);
    unsigned int index = cls->k_next_ctx;
    if (index < HMI_CTX_MAX)
        cls->k_next_ctx++;
    pthread_mutex_unlock(&cls->k_lock);
    return index;
}

/*
 * Fill the pools up front so the first RPCs do not allocate either. A server
 * handle lives from the request's arrival until its response has left, which
 * can overlap the peer's next request, so handles (a few hundred bytes each)
 * get twice the count of send slots (an eager-limit buffer each).
 */
static hm_return_t ctx_prefill(hm_context_t *ctx, uint32_t count)
{
    for (uint32_t i = 0; i < 2 * count; i++) {
        hm_handle_t *handle = ctx_handle_new(ctx);
        if (handle == NULL)
            return HM_NOMEM;
        hmi_list_push_back(&ctx->c_free_handles, &handle->h_link);
    }
    for (uint32_t i = 0; i < count; i++) {
        struct hmi_send_slot *slot = ctx_send_slot_new(ctx);
        if (slot == NULL)
            return HM_NOMEM;
        hmi_list_push_back(&ctx->c_free_sends, &slot->s_link);
    }
    return HM_SUCCESS;
}

static void ctx_free_pools(hm_context_t *ctx)
{
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&ctx->c_free_sends)) != NULL)
        hmi_send_slot_free(hmi_container_of(link, struct hmi_send_slot, s_link));
    hmi_admit_deferred_free(ctx);
    while ((link = hmi_list_pop_front(&ctx->c_admit.ad_free_replies)) != NULL)
        hmi_send_slot_free(hmi_container_of(link, struct hmi_send_slot, s_link));
    for (uint32_t i = 0; i < ctx->c_table_size; i++) {
        if (ctx->c_table[i] == NULL) /* trimmed */
            continue;
        free(ctx->c_table[i]->h_stage);
        free(ctx->c_table[i]->h_copy);
        free(ctx->c_table[i]);
    }
    free(ctx->c_table);
    free(ctx->c_slots_free);
    hmi_bulk_host_destroy(ctx->c_bulk); /* its idle transfers */
    ctx->c_bulk = NULL;
    ctx->c_table = NULL;
    ctx->c_slots_free = NULL;
    ctx->c_table_size = ctx->c_table_cap = ctx->c_slots_free_count = 0;
}

/* Everything but the NA context and the pools; undone by ctx_fini_state. */
static hm_return_t ctx_init_state(hm_context_t *ctx, const hm_context_opts_t *opts,
                                  uint32_t pool_size)
{
    hmi_list_init(&ctx->c_comp);
    hmi_list_init(&ctx->c_linger);
    hmi_list_init(&ctx->c_free_handles);
    hmi_list_init(&ctx->c_free_sends);
    hmi_list_init(&ctx->c_admit.ad_free_replies);
    hmi_list_init(&ctx->c_admit.ad_ring);
    hm_return_t ret = hmi_hmap_init(&ctx->c_addr_cache, 64);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hmi_timer_heap_init(&ctx->c_timers, pool_size);
    if (ret != HM_SUCCESS)
        goto err_cache;
    ret = hmi_timer_heap_init(&ctx->c_utimers, 16);
    if (ret != HM_SUCCESS)
        goto err_timers;
    ret = hmi_credit_init(ctx, opts);
    if (ret != HM_SUCCESS)
        goto err_utimers;
    ret = hmi_ctx_drive_init(ctx);
    if (ret != HM_SUCCESS)
        goto err_credit;
    hmi_admit_init(ctx, opts);
    ctx->c_retain = pool_size;
    ctx->c_retry_rng = (uint64_t)(uintptr_t)ctx * 0x9e3779b97f4a7c15ull | 1u;
    return HM_SUCCESS;

err_credit:
    hmi_credit_fini(ctx);
err_utimers:
    hmi_timer_heap_destroy(&ctx->c_utimers);
err_timers:
    hmi_timer_heap_destroy(&ctx->c_timers);
err_cache:
    hmi_hmap_destroy(&ctx->c_addr_cache);
    return ret;
}

static void ctx_fini_state(hm_context_t *ctx)
{
    hmi_ctx_drive_fini(ctx);
    hmi_credit_fini(ctx);
    hmi_timer_heap_destroy(&ctx->c_utimers);
    hmi_timer_heap_destroy(&ctx->c_timers);
    hmi_hmap_destroy(&ctx->c_addr_cache);
}

/* Placement, the NA context and the pools. */
static hm_return_t ctx_open(hm_context_t *ctx, const hm_context_opts_t *opts,
                            uint32_t pool_size)
{
    hm_class_t *cls = ctx->c_class;
    hm_return_t ret = hmi_ctx_place(ctx, ctx_opt_node(opts));
    if (ret != HM_SUCCESS)
        return ret;
    struct hmi_na_context_hints hints = {
        .device = ctx->c_place.cp_device[0] ? ctx->c_place.cp_device : NULL,
        .never_sleeps = ctx->c_mode == HM_PROGRESS_BUSY, /* fixed for the context's life */
        .contact_spin_ns = ctx->c_mode == HM_PROGRESS_BUSY      ? UINT64_MAX
                           : ctx->c_mode == HM_PROGRESS_DEFAULT ? HMI_FIRST_CONTACT_SPIN_NS
                                                                : 0,
    };
    ret = hmi_na_context_open_on(cls->k_na, ctx->c_index, &hints, hmi_recv_cb, ctx,
                                hmi_peer_fail_cb, ctx, &ctx->c_na);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hmi_bulk_host_create(ctx->c_na, ctx, &ctx->c_comp, &ctx->c_bulk);
    if (ret == HM_SUCCESS)
        hmi_bulk_host_count_pushes(ctx->c_bulk, &ctx->c_comp_gen);
    if (ret == HM_SUCCESS)
        ret = ctx_prefill(ctx, pool_size);
    if (ret == HM_SUCCESS)
        ret = hmi_locate_self(ctx);
    ctx->c_na_peers_seen = ctx->c_na->x_peers_made; /* our own records: no first contact */
    if (ret != HM_SUCCESS) {
        hmi_na_context_close(ctx->c_na);
        ctx_free_pools(ctx);
    }
    return ret;
}

static void ctx_close(hm_context_t *ctx)
{
    hmi_na_context_close(ctx->c_na);
    ctx_free_pools(ctx);
}

hm_return_t hm_context_create(hm_class_t *cls, const hm_context_opts_t *opts,
                              hm_context_t **ctx_out)
{
    if (cls == NULL || ctx_out == NULL || !ctx_opts_valid(opts))
        return HM_INVALID_ARG;
    hm_return_t ret = hmi_live_check(cls, HMI_LIVE_CLASS);
    if (ret != HM_SUCCESS)
        return ret;
    unsigned int index = ctx_class_next_index(cls);
    if (index >= HMI_CTX_MAX)
        return HM_NOT_SUPPORTED;
    hm_context_t *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return HM_NOMEM;
    uint32_t pool_size;
    ctx->c_class = cls;
    ctx->c_index = (uint16_t)index;
    ctx_apply_opts(ctx, opts, &pool_size);
    ret = ctx_init_state(ctx, opts, pool_size);
    if (ret != HM_SUCCESS)
        goto err_free;
    ret = ctx_open(ctx, opts, pool_size);
    if (ret != HM_SUCCESS)
        goto err_state;
    ret = ctx_class_add(ctx);
    if (ret != HM_SUCCESS)
        goto err_close;
    ret = hmi_live_add(ctx, HMI_LIVE_CONTEXT);
    if (ret != HM_SUCCESS)
        goto err_class;
    if (ctx_opt_thread(opts)) {
        ret = hmi_ctx_thread_start(ctx);
        if (ret != HM_SUCCESS)
            goto err_live;
    }
    *ctx_out = ctx;
    return HM_SUCCESS;

err_live:
    hmi_live_remove(ctx);
err_class:
    ctx_class_remove(ctx);
err_close:
    ctx_close(ctx);
err_state:
    ctx_fini_state(ctx);
err_free:
    free(ctx);
    return ret;
}

/*
 * Bulk handles a peer may still be reading (lingering pins, overflowed
 * responses not yet acknowledged): one more reference on each, so their
 * memory outlives the NA context's drain. A transport may serve a peer's
 * transfer from its own queues during that drain (UCX's shared-memory
 * software RMA answers a peer's get from our progress, copying from our
 * buffer), so freeing them with their records would let it read freed
 * memory. On no memory: NULL, and they are freed with their records.
 */
static hm_bulk_t **ctx_keep_held_bulks(hm_context_t *ctx, uint32_t *count_out)
{
    uint32_t count = hmi_linger_ref_all(ctx, NULL) + hmi_overflow_ref_all(ctx, NULL);
    hm_bulk_t **kept = count ? malloc(count * sizeof(*kept)) : NULL;
    *count_out = 0;
    if (kept == NULL)
        return NULL;
    uint32_t lingering = hmi_linger_ref_all(ctx, kept);
    *count_out = lingering + hmi_overflow_ref_all(ctx, kept + lingering);
    return kept;
}

static void ctx_free_kept_bulks(hm_bulk_t **kept, uint32_t count)
{
    for (uint32_t i = 0; i < count; i++)
        hm_bulk_free(kept[i]);
    free(kept);
}

/*
 * HM_BUSY, and nothing changed, while the user still holds something of the
 * context. Server handles kept only for an overflow response's ACK do not
 * count: destroy releases them.
 */
static hm_return_t ctx_check_idle(hm_context_t *ctx)
{
    uint32_t handles = ctx->c_handles_alive - hmi_overflow_releasable(ctx);
    uint32_t bulks = hmi_bulk_host_alive(ctx->c_bulk);
    if (handles == 0 && bulks == 0 && ctx->c_utimers_alive == 0 &&
        !hmi_comp_pending(ctx))
        return HM_SUCCESS;
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
            "context %u destroyed with %u handles, %u bulk transfers and %u timers alive%s",
            ctx->c_index, handles, bulks, ctx->c_utimers_alive,
            hmi_comp_pending(ctx) ? " and callbacks not triggered" : "");
    return HM_BUSY;
}

/* Everything but the lock and the state ctx_fini_state frees. */
static hm_return_t ctx_destroy_locked(hm_context_t *ctx)
{
    hm_return_t ret = ctx_check_idle(ctx);
    if (ret != HM_SUCCESS)
        return ret;
    uint32_t nkept;
    hm_bulk_t **kept = ctx_keep_held_bulks(ctx, &nkept);
    hmi_overflow_release_all(ctx); /* responses whose ACK has not come: shutting down */
    hmi_linger_release_all(ctx);
    hmi_addr_cache_clear(ctx);
    hmi_credit_fini(ctx); /* before the NA context: the records hold addresses */
    hmi_admit_deferred_free(ctx); /* so do refusals waiting to be sent */
    hmi_hmap_init(&ctx->c_peers, 0);
    /* Sends still in flight complete (canceled) here and return their slots. */
    hmi_na_context_close(ctx->c_na);
    ctx_free_kept_bulks(kept, nkept);
    ctx_free_pools(ctx);
    return HM_SUCCESS;
}

hm_return_t hm_context_destroy(hm_context_t *ctx)
{
    /* Claimed first: a second destroy, even a concurrent one, gets HM_NOENTRY. */
    hm_return_t ret = hmi_live_claim(ctx, HMI_LIVE_CONTEXT);
    if (ret != HM_SUCCESS)
        return ret;
    /* From its own callback: the join, or the callback lock, would wait for itself. */
    if (hmi_ctx_owned(ctx) || hmi_cb_owned(ctx)) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                "context %u destroyed from one of its own callbacks", ctx->c_index);
        hmi_live_restore(ctx, HMI_LIVE_CONTEXT);
        return HM_BUSY;
    }
    bool had_thread = ctx->c_has_thread;
    hmi_ctx_thread_stop(ctx); /* its last trigger has run */
    bool took = hmi_ctx_enter(ctx);
    hmi_submit_drain(ctx);
    ret = ctx_destroy_locked(ctx);
    if (ret != HM_SUCCESS) {
        hmi_ctx_leave(ctx, took);
        if (had_thread) /* still alive: it keeps its progress thread */
            (void)hmi_ctx_thread_start(ctx);
        hmi_live_restore(ctx, HMI_LIVE_CONTEXT);
        return ret;
    }
    hmi_live_remove(ctx);
    ctx_class_remove(ctx);
    atomic_store_explicit(&ctx->c_owner, NULL, memory_order_relaxed);
    pthread_mutex_unlock(&ctx->c_lock);
    ctx_fini_state(ctx);
    free(ctx);
    return HM_SUCCESS;
}

hm_class_t *hm_context_class(const hm_context_t *ctx)
{
    return ctx ? ctx->c_class : NULL;
}

hm_return_t hm_context_stats(hm_context_t *ctx, hm_stats_t *stats)
{
    if (ctx == NULL || stats == NULL || !hmi_out_size_ok(stats, HM_STATS_SIZE_V1))
        return HM_INVALID_ARG;
    hm_return_t ret = hmi_live_check(ctx, HMI_LIVE_CONTEXT);
    if (ret != HM_SUCCESS)
        return ret;
    bool took = hmi_ctx_enter(ctx);
    hm_stats_t full = ctx->c_stats;
    hmi_stats_read_na(ctx->c_na, &full);
    full.bulk_xfer_allocs = hmi_bulk_host_allocs(ctx->c_bulk);
    full.bulk_eager_pulls = hmi_bulk_host_eager_pulls(ctx->c_bulk);
    full.bulk_returned_pushes = hmi_bulk_host_returned_pushes(ctx->c_bulk);
    hmi_ctx_leave(ctx, took);
    full.size = sizeof(full);
    hmi_out_copy(stats, &full, sizeof(full));
    return HM_SUCCESS;
}
