/*
 * Attackers: processes that send hand-made requests, with no credits and no
 * retries, and never look at the answers (they are dropped as late).
 */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/core_internal.h"
#include "hostile.h"
#include "na/na_rma.h"
#include "proc/proc_internal.h"
#include "util/time.h"

#define MID_OVERFLOW (768u << 10) /* an overflow a small budget can hold, once */
#define FLOOD_BATCH 64u

struct craft {
    hm_context_t *ctx;
    hm_addr_t *srv;
    uint64_t sent;
    bool claim;        /* claim `origin` instead of our context's index */
    uint16_t origin;
    uint32_t budget_us; /* the requests' deadline; 0: none */
};

/* Payload of an overflow descriptor for `bulk` (`len` bytes) into `buf`. */
static size_t craft_descriptor(hm_context_t *ctx, void *buf, size_t room, hm_bulk_t *bulk,
                               uint64_t len)
{
    hm_proc_t p;
    uint32_t zero32 = 0;
    uint64_t zero64 = 0;
    hmi_proc_init(&p, HM_PROC_ENCODE, buf, room, ctx->c_class);
    if (hm_proc_uint64(&p, &len) != HM_SUCCESS || hm_proc_uint32(&p, &zero32) != HM_SUCCESS ||
        hm_proc_uint32(&p, &zero32) != HM_SUCCESS || hm_proc_uint64(&p, &zero64) != HM_SUCCESS ||
        hm_proc_bulk(&p, &bulk) != HM_SUCCESS)
        return 0;
    return hm_proc_get_size(&p);
}

/*
 * Send one request for `name`: no payload, or an overflow descriptor of
 * `bulk` announcing `len` bytes. Cookies name no handle of ours, so the
 * answers are dropped on arrival.
 */
static hm_return_t craft_send(struct craft *c, const char *name, hm_bulk_t *bulk, uint64_t len)
{
    hm_context_t *ctx = c->ctx;
    bool took = hmi_ctx_enter(ctx);
    struct hmi_send_slot *slot = hmi_send_slot_get(ctx);
    hm_return_t ret = HM_NOMEM;
    if (slot == NULL)
        goto out;
    size_t room = ctx->c_class->k_msg_limit - HMI_WIRE_HEADER_SIZE;
    size_t used = bulk ? craft_descriptor(ctx, (char *)slot->s_buf + HMI_WIRE_HEADER_SIZE, room,
                                          bulk, len)
                       : 0;
    struct hmi_wire_header hdr = {
        .flags = (uint8_t)(HMI_WIRE_F_REQUEST | (bulk ? HMI_WIRE_F_OVERFLOW : 0)),
        .origin_ctx = c->claim ? c->origin : ctx->c_index,
        .target_ctx = c->srv->a_ctx_index,
        .rpc_id = hm_rpc_id(name),
        .payload_len = (uint32_t)used,
        .cookie = (c->sent << 32) | UINT32_MAX,
        .budget_us = c->budget_us ? c->budget_us : HMI_WIRE_NO_BUDGET,
    };
    hmi_wire_encode(slot->s_buf, &hdr, false);
    slot->s_kind = HMI_SEND_RAW;
    ret = hmi_send_post(slot, c->srv, HMI_WIRE_HEADER_SIZE + used);
    if (ret != HM_SUCCESS)
        hmi_send_slot_put(slot);
    else
        c->sent++;
out:
    hmi_ctx_leave(ctx, took);
    return ret;
}

/* Let our sends leave (and the answers be dropped). */
static void craft_drain(struct craft *c)
{
    for (int i = 0; i < 1000 && c->ctx->c_sends_busy > 0; i++) {
        hm_progress(c->ctx, 1);
        hm_trigger(c->ctx, 1u << 20, NULL);
    }
}

/* Memory the server may pull: never touched, so it costs us no RSS. */
static void *attack_region(uint64_t len)
{
    void *region = mmap(NULL, len, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return region == MAP_FAILED ? NULL : region;
}

static int attack_flood(struct craft *c, hm_class_t *cls, uint64_t big)
{
    void *region = attack_region(big);
    if (region == NULL)
        return 10;
    size_t sizes[2] = {big, MID_OVERFLOW < big ? MID_OVERFLOW : big};
    hm_bulk_t *bulk_big, *bulk_mid;
    if (hm_bulk_create(cls, 1, &region, &sizes[0], HM_BULK_READ_ONLY, &bulk_big) != HM_SUCCESS ||
        hm_bulk_create(cls, 1, &region, &sizes[1], HM_BULK_READ_ONLY, &bulk_mid) != HM_SUCCESS)
        return 11;
    char line[64];
    for (bool signaled = false;; signaled = true) {
        craft_send(c, HOSTILE_SINK, bulk_big, sizes[0]);
        craft_send(c, HOSTILE_SINK, bulk_mid, sizes[1]);
        for (uint32_t i = 0; i < FLOOD_BATCH; i++)
            craft_send(c, HOSTILE_SINK, NULL, 0);
        craft_drain(c);
        if (!signaled) {
            snprintf(line, sizeof(line), "sent %llu", (unsigned long long)c->sent);
            hm_test_signal(line);
        }
        if (hm_test_await(line, sizeof(line), 1) == 0 && strcmp(line, "stop") == 0)
            break;
    }
    snprintf(line, sizeof(line), "done %llu", (unsigned long long)c->sent);
    hm_test_signal(line);
    /* The server may still be pulling from us: stay until the parent kills us. */
    for (;;) {
        hm_progress(c->ctx, 100);
        hm_trigger(c->ctx, 1u << 20, NULL);
    }
    return 0;
}

static int attack_stall(struct craft *c, uint32_t count)
{
    char line[64];
    for (uint32_t i = 0; i < count; i++) {
        craft_send(c, HOSTILE_FILL, NULL, 0);
        if (i % 256 == 255)
            craft_drain(c);
    }
    craft_drain(c);
    snprintf(line, sizeof(line), "sent %llu", (unsigned long long)c->sent);
    hm_test_signal(line);
    for (;;)
        pause(); /* never progress again: the parent kills us */
    return 0;
}

/* While withheld, the RMA messages that reach a context (peers' pull
 * requests) go nowhere; the rest go on to its receive callback. One
 * context per process. */
static struct {
    hmi_na_context_t *na;
    void *saved_rma;
    hmi_na_recv_cb_t saved_cb;
    void *saved_arg;
} withheld;

static void withhold_recv(void *arg, hmi_na_addr_t *source, void *buf, size_t len,
                          uintptr_t token)
{
    uint32_t magic = 0;
    (void)arg;
    if (len >= sizeof(magic))
        memcpy(&magic, buf, sizeof(magic));
    if (magic == HMI_SWRMA_MAGIC)
        hmi_na_msg_release(withheld.na, token);
    else
        withheld.saved_cb(withheld.saved_arg, source, buf, len, token);
}

void hostile_withhold_rma(hm_context_t *ctx, bool on)
{
    hmi_na_context_t *na = ctx->c_na;
    if (on) {
        withheld.na = na;
        withheld.saved_rma = na->x_rma;
        withheld.saved_cb = na->x_recv_cb;
        withheld.saved_arg = na->x_recv_arg;
        na->x_rma = NULL; /* hmi_na_deliver gives RMA messages to the receive callback */
        na->x_recv_cb = withhold_recv;
    } else {
        na->x_rma = withheld.saved_rma;
        na->x_recv_cb = withheld.saved_cb;
    }
}

/* One request whose arguments the server must pull from us, which we never serve. */
static int attack_hold(struct craft *c, hm_class_t *cls, uint64_t len, uint32_t budget_ms,
                       uint32_t serve_ms)
{
    char line[64];
    void *region = attack_region(len), *zeros = attack_region(len);
    size_t size = len, used = 0;
    hm_bulk_t *bulk;
    /* Arguments that decode: an hm_bytes_t whose encoding is `len` bytes
     * (its bytes from another mapping: encoding copies them into `region`). */
    hm_bytes_t bytes = {.data = zeros, .len = len};
    if (region == NULL || zeros == NULL ||
        hm_proc_encode(cls, hm_proc_bytes, &bytes, NULL, 0, &used) != HM_MSGSIZE)
        return 10;
    bytes.len = len - (used - len);
    if (hm_proc_encode(cls, hm_proc_bytes, &bytes, region, len, &used) != HM_SUCCESS ||
        used != len ||
        hm_bulk_create(cls, 1, &region, &size, HM_BULK_READ_ONLY, &bulk) != HM_SUCCESS)
        return 10;
    c->budget_us = budget_ms * 1000u;
    if (serve_ms == 0)
        hostile_withhold_rma(c->ctx, true); /* not even while our send leaves */
    if (craft_send(c, HOSTILE_BYTES, bulk, len) != HM_SUCCESS) /* answered, if it comes */
        return 11;
    craft_drain(c);
    for (uint64_t end = hmi_time_ns() + (uint64_t)serve_ms * 1000000u; hmi_time_ns() < end;)
        hm_progress(c->ctx, 1); /* serves the pull; the answer is never triggered */
    snprintf(line, sizeof(line), "sent %llu", (unsigned long long)c->sent);
    hm_test_signal(line);
    for (;;)
        pause(); /* never progress again: the parent kills us */
    return 0;
}

/* Requests claiming ever other origin contexts: each once had a budget of its own. */
static int attack_cycle(struct craft *c, uint32_t count, uint16_t contexts)
{
    char line[64];
    c->claim = true;
    for (uint32_t i = 0; i < count; i++) {
        c->origin = (uint16_t)(i % contexts);
        craft_send(c, HOSTILE_SINK, NULL, 0);
        if (i % 64 == 63)
            craft_drain(c);
    }
    craft_drain(c);
    snprintf(line, sizeof(line), "sent %llu", (unsigned long long)c->sent);
    hm_test_signal(line);
    for (;;) { /* answers to contexts we do not have are dropped; the parent kills us */
        hm_progress(c->ctx, 100);
        hm_trigger(c->ctx, 1u << 20, NULL);
    }
    return 0;
}

int hostile_attacker_main(void *arg)
{
    const struct hostile_attacker_args *args = arg;
    hm_class_t *cls;
    hm_context_opts_t opts = {
        .field_mask = HM_CONTEXT_OPT_CREDITS_PEER | HM_CONTEXT_OPT_CREDITS_TOTAL,
    }; /* no credits: as much as the transport takes */
    struct craft c = {0};
    if (hm_class_create(args->protocol, NULL, &cls) != HM_SUCCESS ||
        hm_context_create(cls, &opts, &c.ctx) != HM_SUCCESS ||
        hm_addr_lookup(c.ctx, args->server_uri, &c.srv) != HM_SUCCESS)
        return 9;
    if (args->attack == HOSTILE_FLOOD)
        return attack_flood(&c, cls, args->overflow_bytes);
    if (args->attack == HOSTILE_HOLD)
        return attack_hold(&c, cls, args->overflow_bytes, args->budget_ms, args->serve_ms);
    if (args->attack == HOSTILE_CYCLE)
        return attack_cycle(&c, args->count, args->contexts ? args->contexts : 1);
    return attack_stall(&c, args->count);
}
