/*
 * objstore_client.c: the object store's client library (objstore_client.h).
 *
 * An operation is one struct objc_op. Writes (put, del) fan out to all r
 * replicas at once and finish when every one answered; reads (get, stat)
 * go to one replica at a time, the next after an RPC failure. Each RPC has
 * its own handle, made when it is sent and destroyed in its callback.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "objstore_client.h"

#define OBJC_MAX_REPLICAS 8

enum objc_kind { OBJC_PUT, OBJC_GET, OBJC_DEL, OBJC_STAT };

struct objc {
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_group_t *group;
    uint32_t nranks;
    unsigned int nctx;       /* data contexts per rank (#1..#nctx); 0: use #0 */
    unsigned int replicas;
    unsigned int timeout_ms;
    unsigned int inflight;   /* operations not yet completed */
    uint64_t *down_until;    /* per rank index: until when (ns, CLOCK_MONOTONIC) gets
                                try it last; 0: up, RANK_DEAD: never again */
    hm_addr_t **addrs;       /* per rank index and data context, looked up lazily */
    struct objc_op *done;    /* operations that failed before any RPC left: their
                                callbacks run from the next objc_progress */
};

struct objc_op {
    objc_t *c;
    enum objc_kind kind;
    objc_cb_t cb;
    void *arg;
    char key[OBJ_KEY_MAX + 1];
    const void *data; /* put */
    void *buf;        /* get */
    uint64_t size;    /* put: value size; get: buf capacity */
    hm_bulk_t *bulk;  /* over data (put) or buf (get), NULL when inline */
    uint32_t targets[OBJC_MAX_REPLICAS]; /* rank indexes, primary first */
    unsigned int ntargets, pending;
    uint32_t tried;   /* reads: bit i set once targets[i] was tried */
    struct objc_result res;
    bool have_res;
    struct objc_op *next_done;
};

struct objc_rpc {
    struct objc_op *op;
    uint32_t target; /* rank index */
};

uint32_t objc_ranks(const objc_t *c)
{
    return c->nranks;
}

unsigned int objc_inflight(const objc_t *c)
{
    return c->inflight;
}

static uint64_t key_hash(const char *key)
{
    return obj_key_hash(key);
}

unsigned int objc_placement(const objc_t *c, const char *key, hm_rank_t *ranks, unsigned int max)
{
    uint32_t primary = (uint32_t)(key_hash(key) % c->nranks);
    unsigned int n = 0;
    for (; n < c->replicas && n < max; n++)
        hm_group_rank_at(c->group, (primary + n) % c->nranks, &ranks[n]);
    return n;
}

/* The address of the data context that serves `key` on rank index `idx`. */
static hm_return_t rank_addr(objc_t *c, uint32_t idx, const char *key, hm_addr_t **addr_out)
{
    unsigned int nctx = c->nctx > 0 ? c->nctx : 1;
    unsigned int ci = (unsigned int)((key_hash(key) >> 32) % nctx);
    hm_addr_t **slot = &c->addrs[(size_t)idx * nctx + ci];
    if (*slot == NULL) {
        hm_rank_t rank;
        hm_return_t ret = hm_group_rank_at(c->group, idx, &rank);
        if (ret == HM_SUCCESS)
            ret = hm_group_addr(c->group, rank, c->nctx > 0 ? ci + 1 : HM_GROUP_CTX_SAME, slot);
        if (ret != HM_SUCCESS)
            return ret;
    }
    *addr_out = *slot;
    return HM_SUCCESS;
}

static void op_finish(struct objc_op *op)
{
    objc_t *c = op->c;
    op->res.arg = op->arg;
    hm_bulk_free(op->bulk);
    c->inflight--;
    op->cb(&op->res);
    free(op);
}

#define RANK_DEAD UINT64_MAX
#define RANK_SUSPECT_NS (10ull * 1000000000ull) /* a rank that timed out is tried last */

/*
 * A failed RPC changes how later reads pick the rank; store answers do not.
 * HM_UNREACHABLE is the transport's word that the peer is gone: the rank is
 * never read again. A timeout or a transport error may be a slow or
 * restarted rank: for RANK_SUSPECT_NS it is read only when no other replica
 * is left, then it is back in line (a rank given up for good after one
 * slow RPC would, after two, leave keys unreadable whose replicas are up).
 * Each change is said once on stderr: a failed system test must show which
 * failure made this process give up a rank.
 */
static void note_failure(objc_t *c, uint32_t idx, hm_return_t ret)
{
    if (ret != HM_UNREACHABLE && ret != HM_TIMEOUT && ret != HM_TRANSPORT_ERROR)
        return;
    uint64_t *until = &c->down_until[idx];
    if (*until == RANK_DEAD)
        return;
    if (ret == HM_UNREACHABLE) {
        fprintf(stderr, "hm-objstore: rank index %u given up: %s\n", idx, hm_strerror(ret));
        *until = RANK_DEAD;
        return;
    }
    uint64_t now = obj_now_ns();
    if (*until <= now)
        fprintf(stderr, "hm-objstore: rank index %u read last for %llu s: %s\n", idx,
                RANK_SUSPECT_NS / 1000000000ull, hm_strerror(ret));
    *until = now + RANK_SUSPECT_NS;
}

/* Not tried by reads before the others (timed out lately, or dead). */
static bool rank_down(const objc_t *c, uint32_t idx, uint64_t now)
{
    return c->down_until[idx] > now;
}

static hm_return_t rpc_send(struct objc_op *op, uint32_t target);

/* Record one RPC's result into the operation; the first failure wins. */
static void op_record(struct objc_op *op, uint32_t target, hm_return_t ret, uint32_t status,
                      uint64_t size)
{
    hm_rank_t rank = HM_RANK_NONE;
    hm_group_rank_at(op->c->group, target, &rank);
    bool failed = ret != HM_SUCCESS || status != OBJ_OK;
    if (!op->have_res || (failed && op->res.ret == HM_SUCCESS && op->res.status == OBJ_OK)) {
        op->res = (struct objc_result){.ret = ret, .status = status, .size = size, .rank = rank};
        op->have_res = true;
    }
}

/* Reads: the next replica not tried yet, in placement order, those not down
 * first, then those that only timed out; never a dead one. True if an RPC
 * left. */
static bool read_retry(struct objc_op *op)
{
    uint64_t now = obj_now_ns();
    for (int pass = 0; pass < 2; pass++) {
        for (unsigned int i = 0; i < op->ntargets; i++) {
            uint32_t t = op->targets[i];
            if ((op->tried & (1u << i)) || op->c->down_until[t] == RANK_DEAD ||
                (pass == 0 && rank_down(op->c, t, now)))
                continue;
            op->tried |= 1u << i;
            op->have_res = false;
            if (rpc_send(op, t) == HM_SUCCESS)
                return true;
        }
    }
    return false;
}

/* Decode a reply into the op; a get copies an inline value into its buffer. */
static void rpc_reply(struct objc_op *op, hm_handle_t *h, uint32_t target)
{
    struct obj_reply out;
    hm_return_t ret = hm_get_output(h, &out);
    if (ret != HM_SUCCESS) {
        op_record(op, target, ret, OBJ_OK, 0);
        return;
    }
    uint32_t status = out.status;
    if (op->kind == OBJC_GET && status == OBJ_OK && out.inline_.len > 0) {
        if (out.inline_.len != out.size || out.inline_.len > op->size)
            status = out.inline_.len != out.size ? OBJ_INVALID : OBJ_TOOSMALL;
        else
            memcpy(op->buf, out.inline_.data, out.inline_.len);
    }
    if (op->kind == OBJC_GET && status == OBJ_OK && out.size > op->size)
        status = OBJ_TOOSMALL; /* never trust a size the buffer cannot hold */
    op_record(op, target, HM_SUCCESS, status, out.size);
    hm_free_output(h, &out);
}

static void rpc_done(const hm_cb_info_t *info)
{
    struct objc_rpc *rpc = info->arg;
    struct objc_op *op = rpc->op;
    uint32_t target = rpc->target;

    free(rpc);
    if (info->ret == HM_SUCCESS) {
        rpc_reply(op, info->handle, target);
    } else {
        note_failure(op->c, target, info->ret);
        op_record(op, target, info->ret, OBJ_OK, 0);
    }
    hm_handle_destroy(info->handle);
    bool reading = op->kind == OBJC_GET || op->kind == OBJC_STAT;
    if (reading && info->ret != HM_SUCCESS)
        read_retry(op); /* under this RPC's reference: see op_start */
    if (--op->pending == 0)
        op_finish(op);
}

static hm_id_t op_rpc_id(enum objc_kind kind)
{
    static const char *const names[] = {OBJ_RPC_PUT, OBJ_RPC_GET, OBJ_RPC_DEL, OBJ_RPC_STAT};
    return hm_rpc_id(names[kind]);
}

/* Send the operation's RPC to rank index `target`. */
static hm_return_t rpc_send(struct objc_op *op, uint32_t target)
{
    objc_t *c = op->c;
    hm_addr_t *addr = NULL;
    hm_handle_t *h = NULL;
    struct objc_rpc *rpc = malloc(sizeof(*rpc));
    hm_return_t ret = rpc != NULL ? rank_addr(c, target, op->key, &addr) : HM_NOMEM;
    if (ret == HM_SUCCESS)
        ret = hm_handle_create(c->ctx, addr, op_rpc_id(op->kind), &h);
    if (ret == HM_SUCCESS) {
        hm_forward_opts_t fo = {.field_mask = HM_FORWARD_OPT_TIMEOUT, .timeout_ms = c->timeout_ms};
        *rpc = (struct objc_rpc){.op = op, .target = target};
        if (op->kind == OBJC_PUT) {
            bool inl = op->bulk == NULL;
            struct obj_put_in in = {.key = op->key, .size = op->size, .bulk = op->bulk,
                                    .inline_ = {inl ? op->data : NULL, inl ? op->size : 0}};
            ret = hm_forward(h, &in, rpc_done, rpc, &fo);
        } else {
            struct obj_key_in in = {.key = op->key, .bulk = op->bulk};
            ret = hm_forward(h, &in, rpc_done, rpc, &fo);
        }
    }
    if (ret != HM_SUCCESS) {
        hm_handle_destroy(h);
        free(rpc);
        note_failure(c, target, ret);
        op_record(op, target, ret, OBJ_OK, 0);
        return ret;
    }
    op->pending++;
    return HM_SUCCESS;
}

/* Send to the first live target (reads) or to all (writes). An operation
 * that no RPC left for is queued for its callback. */
static void op_start(objc_t *c, struct objc_op *op)
{
    hm_rank_t ranks[OBJC_MAX_REPLICAS];
    uint32_t primary = (uint32_t)(key_hash(op->key) % c->nranks);
    op->ntargets = objc_placement(c, op->key, ranks, OBJC_MAX_REPLICAS);
    for (unsigned int i = 0; i < op->ntargets; i++)
        op->targets[i] = (primary + i) % c->nranks;
    c->inflight++;
    /* A guard reference: looking up an address ("#N") waits with hm_call,
     * which runs other callbacks of the context, possibly this op's own. */
    op->pending++;
    if (op->kind == OBJC_GET || op->kind == OBJC_STAT) {
        if (!read_retry(op) && !op->have_res) /* every replica dead */
            op_record(op, op->targets[0], HM_UNREACHABLE, OBJ_OK, 0);
    } else {
        for (unsigned int i = 0; i < op->ntargets; i++)
            rpc_send(op, op->targets[i]);
    }
    if (--op->pending == 0) {
        op->next_done = c->done;
        c->done = op;
    }
}

static hm_return_t op_new(objc_t *c, enum objc_kind kind, const char *key, objc_cb_t cb,
                          void *arg, struct objc_op **op_out)
{
    if (c == NULL || cb == NULL || !obj_key_valid(key))
        return HM_INVALID_ARG;
    struct objc_op *op = calloc(1, sizeof(*op));
    if (op == NULL)
        return HM_NOMEM;
    *op = (struct objc_op){.c = c, .kind = kind, .cb = cb, .arg = arg};
    memcpy(op->key, key, strlen(key) + 1);
    *op_out = op;
    return HM_SUCCESS;
}

hm_return_t objc_put_async(objc_t *c, const char *key, const void *data, uint64_t size,
                           objc_cb_t cb, void *arg)
{
    struct objc_op *op;
    if ((data == NULL && size > 0) || size > OBJ_VALUE_MAX)
        return HM_INVALID_ARG;
    hm_return_t ret = op_new(c, OBJC_PUT, key, cb, arg, &op);
    if (ret != HM_SUCCESS)
        return ret;
    op->data = data;
    op->size = size;
    if (size > OBJ_INLINE_MAX) {
        void *buf = (void *)data; /* registered for peers to read only */
        size_t len = (size_t)size;
        ret = hm_bulk_create(c->cls, 1, &buf, &len, HM_BULK_READ_ONLY, &op->bulk);
        if (ret != HM_SUCCESS) {
            free(op);
            return ret;
        }
    }
    op_start(c, op);
    return HM_SUCCESS;
}

hm_return_t objc_get_async(objc_t *c, const char *key, void *buf, uint64_t cap, objc_cb_t cb,
                           void *arg)
{
    struct objc_op *op;
    if (buf == NULL && cap > 0)
        return HM_INVALID_ARG;
    hm_return_t ret = op_new(c, OBJC_GET, key, cb, arg, &op);
    if (ret != HM_SUCCESS)
        return ret;
    op->buf = buf;
    op->size = cap;
    if (cap > OBJ_INLINE_MAX) {
        size_t len = (size_t)cap;
        ret = hm_bulk_create(c->cls, 1, &buf, &len, HM_BULK_WRITE_ONLY, &op->bulk);
        if (ret != HM_SUCCESS) {
            free(op);
            return ret;
        }
    }
    op_start(c, op);
    return HM_SUCCESS;
}

unsigned int objc_progress(objc_t *c, unsigned int timeout_ms)
{
    unsigned int ran = 0;
    while (c->done != NULL) {
        struct objc_op *op = c->done;
        c->done = op->next_done;
        op_finish(op);
        ran++;
    }
    if (ran == 0)
        hm_progress(c->ctx, timeout_ms);
    else
        hm_progress(c->ctx, 0);
    unsigned int count = 0;
    hm_trigger(c->ctx, UINT32_MAX, &count);
    return ran + count;
}

/* ---- synchronous forms ---------------------------------------------------- */

struct objc_wait {
    bool done;
    struct objc_result res;
};

static void wait_cb(const struct objc_result *res)
{
    struct objc_wait *w = res->arg;
    w->res = *res;
    w->done = true;
}

static struct objc_result wait_for(objc_t *c, struct objc_wait *w, hm_return_t started)
{
    if (started != HM_SUCCESS)
        return (struct objc_result){.ret = started, .rank = HM_RANK_NONE};
    while (!w->done)
        objc_progress(c, 100);
    return w->res;
}

struct objc_result objc_put(objc_t *c, const char *key, const void *data, uint64_t size)
{
    struct objc_wait w = {0};
    return wait_for(c, &w, objc_put_async(c, key, data, size, wait_cb, &w));
}

static struct objc_result key_only(objc_t *c, enum objc_kind kind, const char *key)
{
    struct objc_wait w = {0};
    struct objc_op *op;
    hm_return_t ret = op_new(c, kind, key, wait_cb, &w, &op);
    if (ret == HM_SUCCESS)
        op_start(c, op);
    return wait_for(c, &w, ret);
}

struct objc_result objc_del(objc_t *c, const char *key)
{
    return key_only(c, OBJC_DEL, key);
}

struct objc_result objc_stat(objc_t *c, const char *key)
{
    return key_only(c, OBJC_STAT, key);
}

struct objc_result objc_get(objc_t *c, const char *key, void **data_out)
{
    uint64_t cap = OBJ_INLINE_MAX;
    for (int attempt = 0; attempt < 3; attempt++) { /* the value may grow between tries */
        struct objc_wait w = {0};
        void *buf = malloc(cap > 0 ? cap : 1);
        if (buf == NULL)
            return (struct objc_result){.ret = HM_NOMEM, .rank = HM_RANK_NONE};
        struct objc_result res = wait_for(c, &w, objc_get_async(c, key, buf, cap, wait_cb, &w));
        if (res.ret == HM_SUCCESS && res.status == OBJ_TOOSMALL && res.size <= OBJ_VALUE_MAX) {
            free(buf);
            cap = res.size;
            continue;
        }
        if (res.ret == HM_SUCCESS && res.status == OBJ_OK)
            *data_out = buf;
        else
            free(buf);
        return res;
    }
    return (struct objc_result){.ret = HM_SUCCESS, .status = OBJ_TOOSMALL, .rank = HM_RANK_NONE};
}

const char *objc_result_str(const struct objc_result *res)
{
    return res->ret != HM_SUCCESS ? hm_strerror(res->ret) : obj_status_str(res->status);
}

/* ---- collectives ---------------------------------------------------------- */

struct coll_wait {
    bool done;
    hm_return_t ret;
    uint32_t failed;
    void *out;
    size_t out_size;
};

static void coll_cb(const hm_coll_result_t *r)
{
    struct coll_wait *w = r->arg;
    w->done = true;
    w->ret = r->ret;
    w->failed = r->failed_count;
    if (r->out != NULL)
        memcpy(w->out, r->out, w->out_size);
}

static hm_return_t coll_run(objc_t *c, const char *name, const void *in, void *out,
                            size_t out_size, uint32_t *failed)
{
    struct coll_wait w = {.out = out, .out_size = out_size};
    hm_rank_t excluded[64];
    uint32_t nexcl = 0;
    uint64_t now = obj_now_ns();
    for (uint32_t i = 0; c->down_until != NULL && i < c->nranks && nexcl < 64; i++)
        if (rank_down(c, i, now) && nexcl + 1 < c->nranks)
            hm_group_rank_at(c->group, i, &excluded[nexcl++]);
    /* Ranks seen dead, or timed out lately, are left out rather than waited
     * for (and counted failed). */
    hm_coll_opts_t copts = {.field_mask = HM_COLL_OPT_TIMEOUT | HM_COLL_OPT_EXCLUDE,
                            .timeout_ms = c->timeout_ms, .excluded = excluded,
                            .excluded_count = nexcl};
    memset(out, 0, out_size);
    hm_return_t ret = hm_coll_start(c->group, hm_rpc_id(name), in, coll_cb, &w, &copts);
    while (ret == HM_SUCCESS && !w.done) {
        hm_progress(c->ctx, 100);
        hm_trigger(c->ctx, UINT32_MAX, NULL);
    }
    if (failed != NULL)
        *failed = ret == HM_SUCCESS ? w.failed + nexcl : c->nranks;
    return ret != HM_SUCCESS ? ret : w.ret;
}

hm_return_t objc_count(objc_t *c, struct obj_count_out *out, uint32_t *failed)
{
    return coll_run(c, OBJ_COLL_COUNT, NULL, out, sizeof(*out), failed);
}

hm_return_t objc_list(objc_t *c, const char *prefix, struct obj_list_out *out, uint32_t *failed)
{
    struct obj_list_in in = {.prefix = prefix != NULL ? prefix : ""};
    return coll_run(c, OBJ_COLL_LIST, &in, out, sizeof(*out), failed);
}

/* ---- attach and detach ------------------------------------------------------ */

/* The servers' protocol from the group file's first URI: "ucx+tcp://..."
 * gives "ucx+tcp://127.0.0.1:0", "ucx+shm://..." gives "ucx+shm://". */
static hm_return_t derive_uri(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    char line[8192];
    hm_return_t ret = HM_NOENTRY;
    if (f == NULL)
        return HM_NOENTRY;
    while (ret == HM_NOENTRY && fgets(line, sizeof(line), f) != NULL) {
        char *sep = strstr(line, "://");
        if (line[0] == '#' || sep == NULL)
            continue;
        char *start = sep;
        while (start > line && start[-1] != ' ')
            start--;
        int len = (int)(sep - start);
        bool tcp = len >= 3 && strncmp(sep - 3, "tcp", 3) == 0;
        snprintf(buf, size, "%.*s://%s", len, start, tcp ? "127.0.0.1:0" : "");
        ret = HM_SUCCESS;
    }
    fclose(f);
    return ret;
}

static hm_return_t client_register(hm_class_t *cls)
{
    static const char *const names[] = {OBJ_RPC_PUT, OBJ_RPC_GET, OBJ_RPC_DEL, OBJ_RPC_STAT};
    hm_return_t ret = HM_SUCCESS;
    hm_id_t id; /* hm_coll_register, unlike hm_register, requires id_out */
    for (size_t i = 0; ret == HM_SUCCESS && i < 4; i++)
        ret = hm_register(cls, names[i], i == 0 ? obj_put_in_proc : obj_key_in_proc,
                          obj_reply_proc, NULL, NULL);
    hm_coll_ops_t count = {.out_proc = obj_count_out_proc,
                           .out_size = sizeof(struct obj_count_out),
                           .aggregate = obj_count_aggregate};
    hm_coll_ops_t list = {.in_proc = obj_list_in_proc, .out_proc = obj_list_out_proc,
                          .in_size = sizeof(struct obj_list_in),
                          .out_size = sizeof(struct obj_list_out),
                          .aggregate = obj_list_aggregate};
    if (ret == HM_SUCCESS)
        ret = hm_coll_register(cls, OBJ_COLL_COUNT, &count, &id);
    if (ret == HM_SUCCESS)
        ret = hm_coll_register(cls, OBJ_COLL_LIST, &list, &id);
    return ret;
}

static hm_return_t client_attach(objc_t *c, const struct objc_opts *o)
{
    char uri[256];
    const char *use = o->uri;
    hm_group_opts_t gopts = {.field_mask = HM_GROUP_OPT_NAME | HM_GROUP_OPT_DETECT_MS,
                             .name = OBJ_GROUP_NAME, .detect_ms = 0};
    hm_return_t ret = HM_SUCCESS;
    if (use == NULL) {
        ret = derive_uri(o->group_file, uri, sizeof(uri));
        use = uri;
    }
    if (ret == HM_SUCCESS)
        ret = hm_class_create(use, NULL, &c->cls);
    if (ret == HM_SUCCESS)
        ret = client_register(c->cls);
    if (ret == HM_SUCCESS)
        ret = hm_context_create(c->cls, NULL, &c->ctx);
    if (ret == HM_SUCCESS)
        ret = hm_group_create_file(c->ctx, o->group_file, HM_RANK_NONE, &gopts, &c->group);
    return ret;
}

/* Ask the ranks (count collective) how many data contexts each serves, so
 * keys spread over them; if no rank answers, everything goes to #0, which
 * serves the same RPCs. Only fails for lack of memory. */
static hm_return_t learn_contexts(objc_t *c)
{
    struct obj_count_out out;
    uint32_t failed = 0;
    hm_return_t ret = objc_count(c, &out, &failed);
    if (ret == HM_NOMEM)
        return ret;
    if (failed < c->nranks && out.contexts > 0 && out.contexts < 1024)
        c->nctx = out.contexts;
    size_t slots = (size_t)c->nranks * (c->nctx > 0 ? c->nctx : 1);
    c->addrs = calloc(slots, sizeof(*c->addrs));
    if (c->addrs == NULL)
        return HM_NOMEM;
    /* Look every data context up now, while nothing is in flight: a lookup
     * waits inside hm_call, running whatever callbacks come due. Ranks that
     * do not answer are looked up again when first used. */
    unsigned int nctx = c->nctx > 0 ? c->nctx : 1;
    for (uint32_t i = 0; i < c->nranks; i++) {
        hm_rank_t rank;
        if (hm_group_rank_at(c->group, i, &rank) != HM_SUCCESS)
            continue;
        for (unsigned int ci = 0; ci < nctx; ci++)
            hm_group_addr(c->group, rank, c->nctx > 0 ? ci + 1 : HM_GROUP_CTX_SAME,
                          &c->addrs[(size_t)i * nctx + ci]);
    }
    return HM_SUCCESS;
}

hm_return_t objc_open(const struct objc_opts *o, objc_t **client_out)
{
    if (o == NULL || o->group_file == NULL || client_out == NULL)
        return HM_INVALID_ARG;
    objc_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return HM_NOMEM;
    c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 10000;
    hm_return_t ret = client_attach(c, o);
    if (ret == HM_SUCCESS) {
        c->nranks = hm_group_size(c->group);
        c->nctx = 0;
        c->replicas = o->replicas > 0 ? o->replicas : 1;
        if (c->replicas > c->nranks || c->replicas > OBJC_MAX_REPLICAS)
            ret = HM_INVALID_ARG;
    }
    if (ret == HM_SUCCESS) {
        c->down_until = calloc(c->nranks, sizeof(*c->down_until));
        if (c->down_until == NULL)
            ret = HM_NOMEM;
    }
    if (ret == HM_SUCCESS)
        ret = learn_contexts(c);
    if (ret != HM_SUCCESS) {
        objc_close(c);
        return ret;
    }
    *client_out = c;
    return HM_SUCCESS;
}

void objc_close(objc_t *c)
{
    if (c == NULL)
        return;
    while (c->inflight > 0)
        objc_progress(c, 100);
    size_t slots = (size_t)c->nranks * (c->nctx > 0 ? c->nctx : 1);
    for (size_t i = 0; c->addrs != NULL && i < slots; i++)
        hm_addr_free(c->addrs[i]);
    for (int i = 0; c->group != NULL && i < 500; i++) {
        if (hm_group_destroy(c->group) == HM_SUCCESS)
            break;
        hm_progress(c->ctx, 10);
        hm_trigger(c->ctx, UINT32_MAX, NULL);
    }
    if (c->ctx != NULL && hm_context_destroy(c->ctx) != HM_SUCCESS)
        fprintf(stderr, "objstore client: the context did not close cleanly\n");
    if (c->cls != NULL)
        hm_class_destroy(c->cls);
    free(c->down_until);
    free(c->addrs);
    free(c);
}
