/*
 * server_rpc.c: the object store's RPC handlers. Every field a client sends
 * is validated before the store or a transfer sees it; large values move by
 * bulk, pulled by the server for a put and pushed for a get, and the handle
 * is answered from the transfer's callback.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

/* reply: answer `handle` and drop the handler's reference to it. */
static void reply(hm_handle_t *handle, uint32_t status, uint64_t size, const void *data,
                  uint64_t len)
{
    struct obj_reply out = {.status = status, .size = size, .inline_ = {data, len}};
    hm_return_t ret = hm_respond(handle, &out, NULL, NULL);
    if (ret != HM_SUCCESS)
        fprintf(stderr, "hm-objstore-server: respond: %s\n", hm_strerror(ret));
    hm_handle_destroy(handle);
}

/* A put or get whose value is moving by bulk. */
struct xfer_op {
    struct server *srv;
    hm_handle_t *handle;       /* answered when the transfer ends */
    struct store_value *value; /* one reference */
    hm_bulk_t *local;          /* over value->data */
    char key[OBJ_KEY_MAX + 1]; /* put: where the value goes */
};

static uint64_t held_bytes(struct store *st)
{
    uint64_t objects, bytes;
    store_totals(st, &objects, &bytes);
    return bytes;
}

/* put's validation: a defined status for every inconsistent request. */
static obj_status_t put_check(const struct obj_put_in *in)
{
    if (!obj_key_valid(in->key))
        return OBJ_INVALID;
    if (in->size > OBJ_VALUE_MAX)
        return OBJ_TOOBIG;
    if (in->bulk == NULL)
        return in->inline_.len == in->size ? OBJ_OK : OBJ_INVALID;
    if (in->inline_.len != 0 || in->size == 0 || hm_bulk_size(in->bulk) != in->size)
        return OBJ_INVALID;
    return OBJ_OK;
}

static void put_pulled_cb(const hm_bulk_cb_info_t *info)
{
    struct xfer_op *op = info->arg;
    struct store *st = op->srv->store;
    uint32_t status = OBJ_XFER;

    hm_bulk_free(op->local);
    if (info->ret == HM_SUCCESS) {
        status = store_insert(st, op->key, op->value);
    } else {
        fprintf(stderr, "hm-objstore-server: put %s: pull failed: %s\n", op->key,
                hm_strerror(info->ret));
        store_value_unref(st, op->value); /* frees what the transfer held */
    }
    reply(op->handle, status, held_bytes(st), NULL, 0);
    free(op);
}

/*
 * Move `op->value`'s bytes between the store and the client's handle
 * `remote` (`kind`: pull into the value, push from it): OBJ_OK, answered
 * from `done`; otherwise the value's reference and `op` are released and
 * the caller answers. The transfer holds its own references to both
 * handles, so the caller's input may go at once.
 */
static obj_status_t value_transfer(struct xfer_op *op, hm_handle_t *handle, hm_bulk_t *remote,
                                   hm_bulk_op_t kind, hm_bulk_cb_t done)
{
    struct store_value *value = op->value;
    size_t size = (size_t)value->size;
    hm_bulk_perm_t perm = kind == HM_BULK_PULL ? HM_BULK_WRITE_ONLY : HM_BULK_READ_ONLY;
    hm_return_t ret = hm_bulk_create(op->srv->cls, 1, &value->data, &size, perm, &op->local);

    if (ret == HM_SUCCESS) {
        hm_bulk_xfer_t x = {.op = kind, .origin_addr = hm_handle_get_addr(handle),
                            .origin = remote, .local = op->local, .size = size};
        hm_bulk_opts_t opts = {.field_mask = HM_BULK_OPT_TIMEOUT,
                               .timeout_ms = op->srv->xfer_timeout_ms};
        ret = hm_bulk_transfer(hm_handle_get_context(handle), &x, &opts, done, op, NULL);
        if (ret != HM_SUCCESS)
            hm_bulk_free(op->local);
    }
    if (ret == HM_SUCCESS)
        return OBJ_OK;
    store_value_unref(op->srv->store, value);
    free(op);
    return ret == HM_PERMISSION || ret == HM_INVALID_ARG ? OBJ_INVALID : OBJ_XFER;
}

/* A transfer's record, or NULL (the value's reference is then dropped). */
static struct xfer_op *xfer_op_new(struct server *srv, hm_handle_t *handle,
                                   struct store_value *value)
{
    struct xfer_op *op = calloc(1, sizeof(*op));

    if (op == NULL) {
        store_value_unref(srv->store, value);
        return NULL;
    }
    *op = (struct xfer_op){.srv = srv, .handle = handle, .value = value};
    return op;
}

/* Start pulling the value: as value_transfer. */
static obj_status_t put_pull(struct server *srv, hm_handle_t *handle, const struct obj_put_in *in,
                             struct store_value *value)
{
    struct xfer_op *op = xfer_op_new(srv, handle, value);

    if (op == NULL)
        return OBJ_XFER;
    memcpy(op->key, in->key, strlen(in->key) + 1);
    return value_transfer(op, handle, in->bulk, HM_BULK_PULL, put_pulled_cb);
}

static hm_return_t put_handler(hm_handle_t *handle)
{
    struct server *srv = hm_handle_get_data(handle);
    struct obj_put_in in;
    struct store_value *value = NULL;
    hm_return_t ret = hm_get_input(handle, &in);

    if (ret != HM_SUCCESS) {
        hm_handle_destroy(handle);
        return ret;
    }
    obj_status_t status = put_check(&in);
    if (status == OBJ_OK)
        status = store_value_new(srv->store, in.size, &value);
    if (status == OBJ_OK && in.bulk == NULL) {
        if (in.size > 0)
            memcpy(value->data, in.inline_.data, in.size);
        status = store_insert(srv->store, in.key, value);
    } else if (status == OBJ_OK) {
        /* The transfer holds its own references to both handles, so the
         * input (and its decoded remote handle) may go at once. */
        status = put_pull(srv, handle, &in, value);
        if (status == OBJ_OK) {
            hm_free_input(handle, &in);
            return HM_SUCCESS; /* answered by put_pulled_cb */
        }
    }
    hm_free_input(handle, &in);
    reply(handle, status, held_bytes(srv->store), NULL, 0);
    return HM_SUCCESS;
}

static void get_pushed_cb(const hm_bulk_cb_info_t *info)
{
    struct xfer_op *op = info->arg;
    uint64_t size = op->value->size;

    hm_bulk_free(op->local);
    store_value_unref(op->srv->store, op->value);
    reply(op->handle, info->ret == HM_SUCCESS ? OBJ_OK : OBJ_XFER, size, NULL, 0);
    free(op);
}

/* Push `value` into the client's handle (checked to be large enough): as
 * value_transfer. */
static obj_status_t get_push(struct server *srv, hm_handle_t *handle, hm_bulk_t *remote,
                             struct store_value *value)
{
    struct xfer_op *op = xfer_op_new(srv, handle, value);

    if (op == NULL)
        return OBJ_XFER;
    return value_transfer(op, handle, remote, HM_BULK_PUSH, get_pushed_cb);
}

static hm_return_t get_handler(hm_handle_t *handle)
{
    struct server *srv = hm_handle_get_data(handle);
    struct obj_key_in in;
    struct store_value *value = NULL;
    hm_return_t ret = hm_get_input(handle, &in);

    if (ret != HM_SUCCESS) {
        hm_handle_destroy(handle);
        return ret;
    }
    obj_status_t status = obj_key_valid(in.key) ? OBJ_OK : OBJ_INVALID;
    if (status == OBJ_OK)
        status = store_lookup(srv->store, in.key, &value);
    uint64_t size = value != NULL ? value->size : 0;
    if (status == OBJ_OK && size > OBJ_INLINE_MAX) {
        if (in.bulk == NULL || hm_bulk_size(in.bulk) < size) {
            status = OBJ_TOOSMALL;
        } else {
            status = get_push(srv, handle, in.bulk, value); /* drops `value` */
            value = NULL;
            if (status == OBJ_OK) {
                hm_free_input(handle, &in);
                return HM_SUCCESS; /* answered by get_pushed_cb */
            }
        }
    }
    hm_free_input(handle, &in);
    bool inline_ = status == OBJ_OK && value != NULL;
    reply(handle, status, size, inline_ ? value->data : NULL, inline_ ? size : 0); /* encoded at once */
    if (value != NULL)
        store_value_unref(srv->store, value);
    return HM_SUCCESS;
}

/* del and stat: key only; stat answers the size. */
static hm_return_t key_handler(hm_handle_t *handle, bool remove)
{
    struct server *srv = hm_handle_get_data(handle);
    struct obj_key_in in;
    struct store_value *value = NULL;
    uint64_t size = 0;
    hm_return_t ret = hm_get_input(handle, &in);

    if (ret != HM_SUCCESS) {
        hm_handle_destroy(handle);
        return ret;
    }
    obj_status_t status = obj_key_valid(in.key) && in.bulk == NULL ? OBJ_OK : OBJ_INVALID;
    if (status == OBJ_OK && remove) {
        status = store_remove(srv->store, in.key);
    } else if (status == OBJ_OK) {
        status = store_lookup(srv->store, in.key, &value);
        if (status == OBJ_OK) {
            size = value->size;
            store_value_unref(srv->store, value);
        }
    }
    hm_free_input(handle, &in);
    reply(handle, status, size, NULL, 0);
    return HM_SUCCESS;
}

static hm_return_t del_handler(hm_handle_t *handle)
{
    return key_handler(handle, true);
}

static hm_return_t stat_handler(hm_handle_t *handle)
{
    return key_handler(handle, false);
}

uint64_t server_rss_kb(void)
{
    unsigned long pages_total = 0, pages_rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        return 0;
    if (fscanf(f, "%lu %lu", &pages_total, &pages_rss) != 2)
        pages_rss = 0;
    fclose(f);
    return (uint64_t)pages_rss * 4; /* 4 KiB pages on this platform */
}

static hm_return_t count_handler(hm_coll_req_t *req)
{
    struct server *srv = hm_coll_req_arg(req);
    struct obj_count_out out = {.rss_kb = server_rss_kb(), .contexts = srv->nctx};
    store_totals(srv->store, &out.objects, &out.bytes);
    return hm_coll_respond(req, &out);
}

static void list_one(const char *key, void *arg)
{
    obj_list_append(arg, key);
}

static hm_return_t list_handler(hm_coll_req_t *req)
{
    struct server *srv = hm_coll_req_arg(req);
    struct obj_list_in in;
    hm_return_t ret = hm_coll_get_input(req, &in);
    if (ret != HM_SUCCESS)
        return ret;
    if (in.prefix == NULL || strnlen(in.prefix, OBJ_KEY_MAX + 1) > OBJ_KEY_MAX)
        return HM_INVALID_ARG; /* listed against this rank */
    struct obj_list_out *out = calloc(1, sizeof(*out));
    if (out == NULL)
        return HM_NOMEM;
    store_each_prefix(srv->store, in.prefix, list_one, out);
    ret = hm_coll_respond(req, out);
    free(out);
    return ret;
}

hm_return_t server_register(struct server *srv)
{
    static const struct {
        const char *name;
        hm_proc_cb_t in;
        hm_rpc_handler_t handler;
    } rpcs[] = {
        {OBJ_RPC_PUT, obj_put_in_proc, put_handler},
        {OBJ_RPC_GET, obj_key_in_proc, get_handler},
        {OBJ_RPC_DEL, obj_key_in_proc, del_handler},
        {OBJ_RPC_STAT, obj_key_in_proc, stat_handler},
    };
    hm_return_t ret = HM_SUCCESS;
    hm_id_t id;
    for (size_t i = 0; ret == HM_SUCCESS && i < sizeof(rpcs) / sizeof(rpcs[0]); i++) {
        ret = hm_register(srv->cls, rpcs[i].name, rpcs[i].in, obj_reply_proc, rpcs[i].handler,
                          &id);
        if (ret == HM_SUCCESS)
            ret = hm_register_data(srv->cls, id, srv, NULL);
    }
    hm_coll_ops_t count = {.out_proc = obj_count_out_proc,
                           .out_size = sizeof(struct obj_count_out), .handler = count_handler,
                           .aggregate = obj_count_aggregate, .arg = srv};
    hm_coll_ops_t list = {.in_proc = obj_list_in_proc, .out_proc = obj_list_out_proc,
                          .in_size = sizeof(struct obj_list_in),
                          .out_size = sizeof(struct obj_list_out), .handler = list_handler,
                          .aggregate = obj_list_aggregate, .arg = srv};
    if (ret == HM_SUCCESS)
        ret = hm_coll_register(srv->cls, OBJ_COLL_COUNT, &count, &id);
    if (ret == HM_SUCCESS)
        ret = hm_coll_register(srv->cls, OBJ_COLL_LIST, &list, &id);
    return ret;
}
