/*
 * The service the context tests (label "ctx") talk to: a server in a child
 * process with one or more contexts, one thread driving them all, and RPCs
 * that let a test see what the server saw (requests outstanding per client,
 * their order, which context served them). argv[1] is the protocol URI.
 */
#ifndef HM_TESTS_CTX_TEST_H
#define HM_TESTS_CTX_TEST_H

#include <hermod.h>

#include "fixture_hm.h"

#define CTX_TEST_CLIENTS 8u /* client ids 0..7 */

struct ctx_ids {
    hm_id_t tagged;  /* ctx_tag in, ctx_tag out (with the serving context); may be held */
    hm_id_t hold;    /* ctx_tag in: held until "release" for that client */
    hm_id_t release; /* ctx_tag in (client): responds to every held "hold" of it */
    hm_id_t report;  /* ctx_tag in (client): ctx_report out */
    hm_id_t stop;    /* responds, then the server exits */
    hm_id_t expose;  /* no input; out: a readable bulk handle over CTX_EXPOSE_SIZE bytes
                        holding ctx_expose_byte(i) at offset i */
};

#define CTX_EXPOSE_SIZE (1u << 20)

static inline uint8_t ctx_expose_byte(size_t i)
{
    return (uint8_t)(i * 7u + 3u);
}

struct ctx_tag {
    uint32_t client; /* < CTX_TEST_CLIENTS */
    uint32_t seq;    /* per client, from 0 */
    uint32_t served_by; /* out: index of the server context that served it */
};

struct ctx_report {
    uint32_t received;     /* "tagged" requests of that client */
    uint32_t max_outstanding; /* most held at once (tagged + hold) */
    uint32_t order_errors; /* requests whose seq was not the next one */
    uint32_t max_total;    /* most "tagged" requests held at once, all clients */
};

/* What the server does with "tagged" requests. */
struct ctx_server_args {
    const char *protocol;
    unsigned int contexts;     /* contexts to open (>= 1); the URI printed is context 0's */
    bool per_node;             /* open them with hm_context_create_per_node, plus the rest */
    uint32_t hold_until;       /* 0: answer "tagged" at once; else hold them until this
                                  many are held (all clients, all contexts), then
                                  answer them all */
    uint32_t expect;           /* ...or until one client has sent this many (its last
                                  batch) */
    unsigned int life_s;       /* the server exits after life_s + CTX_SERVER_GRACE_S at
                                  most (SIGALRM); the test's own alarm comes first */
    bool respond_threads;      /* "tagged" answered at once by two worker threads, which
                                  free the input, respond and drop the handle (the
                                  submission queue's server side) */
};

hm_return_t ctx_register(hm_class_t *cls, struct ctx_ids *ids);
/* Child body (hm_test_server_start): runs the server described by `arg`. */
int ctx_server_main(void *arg);
#define CTX_SERVER_GRACE_S 30u
/* Start it (the fixture); its URI is server->uri. 0 or -1. */
int ctx_server_start(struct hm_test_server *server, struct ctx_server_args *args);
/* hm_call with a timeout; the output is decoded into `out` then freed. */
hm_return_t ctx_call(hm_context_t *ctx, hm_addr_t *addr, hm_id_t id, struct ctx_tag *in,
                     void *out, unsigned timeout_ms);
/* A test's server child and the client class that talks to it. */
struct ctx_env {
    struct hm_test_server server; /* its process; its URI is context 0's */
    hm_class_t *cls;
    struct ctx_ids ids;
};

/* Start the server `args` describes, then create and register the client class. 0 or -1. */
int ctx_env_open(struct ctx_env *env, struct ctx_server_args *args, const char *protocol);
/* A context of `cls` with its own progress thread, or NULL. */
hm_context_t *ctx_threaded_context(hm_class_t *cls);

/* Ask the server to stop through (ctx, addr) and reap it: its exit status (0: clean). */
int ctx_env_stop(struct ctx_env *env, hm_context_t *ctx, hm_addr_t *addr);

/*
 * Ask the server to stop (through `addr`) and reap it. Returns its exit
 * status: 0 when clean (a sanitizer's report makes it non-zero), else what
 * hm_test_wait says.
 */
int ctx_server_stop(struct hm_test_server *server, hm_context_t *ctx, hm_addr_t *addr,
                    const struct ctx_ids *ids);

#endif
