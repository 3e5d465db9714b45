/*
 * Shared pieces of the deploy tests (issue 16): the RPCs, a server process
 * body, and small client helpers. Every process registers every RPC.
 *
 *  deploy.echo     string in, "<tag>:<string>" out (the tag names who answered)
 *  deploy.where    nothing in, an address out: the server's "next" peer
 *  deploy.reflect  an address in, the same address out (decoded, re-encoded)
 *  deploy.shutdown the server responds, then leaves its loop
 */
#ifndef HM_TESTS_DEPLOY_H
#define HM_TESTS_DEPLOY_H

#include <hermod.h>

#include "harness.h"

struct deploy_str {
    hm_string_t str;
};

struct deploy_addr {
    hm_addr_t *addr;
    /* Client side only: raw bytes to put on the wire instead (hostile tests):
     * the length raw_len, then min(raw_len, 64) bytes of `raw`. */
    const void *raw;
    uint32_t raw_len;
};

struct deploy_ids {
    hm_id_t echo, where, reflect, shutdown;
};

hm_return_t deploy_str_proc(hm_proc_t *proc, void *data);
hm_return_t deploy_addr_proc(hm_proc_t *proc, void *data);

/* A server's state, attached to its RPCs (hm_register_data). */
struct deploy_server {
    char tag[32];
    hm_addr_t *next; /* answered by deploy.where (NULL: none) */
    int stop;
};

/* Register the RPCs on `cls`; handlers only when `tag` is not NULL (a server). */
hm_return_t deploy_register(hm_class_t *cls, struct deploy_ids *ids, const char *tag);

/* What a server child runs: listen on `uri`, optionally look up `next_uri`
 * (answered by deploy.where), serve until deploy.shutdown or `life_s`. */
struct deploy_server_args {
    const char *uri;
    const char *tag;
    const char *next_uri; /* may be NULL */
    unsigned int life_s;
};
int deploy_server_main(void *arg); /* hm_test_fn_t: ready(uri) once listening */

/* Client helpers: a call with a 10 s deadline; the echo's reply into `out`. */
hm_return_t deploy_echo(hm_context_t *ctx, hm_addr_t *to, hm_id_t echo, const char *text,
                        char *out, size_t out_size);
hm_return_t deploy_call_addr(hm_context_t *ctx, hm_addr_t *to, hm_id_t id,
                             const struct deploy_addr *in, hm_addr_t **out_addr);
/* Ask a server to shut down and reap it. 0 on a clean exit. */
int deploy_server_stop(hm_context_t *ctx, hm_addr_t *to, const struct deploy_ids *ids,
                       struct hm_test_child *child);

#endif
