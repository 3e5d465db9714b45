/*
 * server.h: the object store server's shared state and its RPC handlers.
 */
#ifndef OBJSTORE_SERVER_H
#define OBJSTORE_SERVER_H

#include "objstore_proto.h"
#include "server_store.h"

/* Attached to every RPC and collective as their data / arg. */
struct server {
    hm_class_t *cls;
    struct store *store;
    unsigned int nctx; /* data contexts (one per NUMA node) */
    /* A value's transfer with its client ends within this (then OBJ_XFER):
     * a client that never serves it would otherwise hold the value's memory,
     * charged to the shard's cap, for as long as it lives. */
    uint32_t xfer_timeout_ms;
};

#define OBJ_XFER_TIMEOUT_DEFAULT_MS 30000u

/* Register put/get/del/stat and the two collectives on `srv->cls`. */
hm_return_t server_register(struct server *srv);

/* Resident set of this process in kB (0 if unknown). */
uint64_t server_rss_kb(void);

#endif /* OBJSTORE_SERVER_H */
