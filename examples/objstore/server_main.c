/*
 * hm-objstore-server: one shard of the object store; alone, or N ranks
 * under mpirun that form a group over PMIx.
 *
 *   hm-objstore-server [-u URI] [--group-file PATH] [--mem-cap BYTES]
 *                      [--xfer-timeout MS]
 *
 * Contexts: one control context, index 0, driven by the main thread, holds
 * the group and serves the collectives (count, list-prefix); then one data
 * context per NUMA node (hm_context_create_per_node), indexes 1..N, each
 * with its own progress thread, serves put/get/del/stat. The group's URIs
 * are those of context 0: a peer reaches context i only through context
 * 0's address with "#i" (on tcp each context has its own listener, and a
 * message for #0 sent to #1's port is dropped). The count collective tells
 * clients N.
 *
 * Rank 0 writes the group file once every rank answers a count collective,
 * so a client that sees the file can use every rank. SIGTERM or SIGINT
 * stops the server cleanly.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server.h"

#define SERVER_MAX_CTX 64

struct server_opts {
    const char *uri;
    const char *group_file;
    uint64_t mem_cap;
    uint32_t xfer_timeout_ms;
};

struct server_run {
    struct server srv;
    hm_context_t *data[SERVER_MAX_CTX];
    hm_context_t *ctl;
    hm_group_t *group;
};

static volatile sig_atomic_t server_stop;

static void on_signal(int sig)
{
    (void)sig;
    server_stop = 1;
}

static int fail(const char *what, hm_return_t ret)
{
    fprintf(stderr, "hm-objstore-server: %s: %s (%s)\n", what, hm_strerror(ret),
            hm_error_detail());
    return -1;
}

/* "64M", "1G", "4096": bytes; 0 and sets *ok false when malformed. */
static uint64_t parse_bytes(const char *s, bool *ok)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    switch (*end) {
    case 'K': case 'k': shift = 10; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
    default: break;
    }
    *ok = end != s && *end == '\0' && *s != '-';
    return (uint64_t)v << shift;
}

/* "2000": milliseconds, 1 .. 2^32-1; sets *ok false otherwise. */
static uint32_t parse_ms(const char *s, bool *ok)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    *ok = end != s && *end == '\0' && *s != '-' && v >= 1 && v <= UINT32_MAX;
    return *ok ? (uint32_t)v : 0;
}

static int parse_opts(int argc, char **argv, struct server_opts *o)
{
    static const struct option longs[] = {
        {"uri", required_argument, NULL, 'u'},
        {"group-file", required_argument, NULL, 'g'},
        {"mem-cap", required_argument, NULL, 'm'},
        {"xfer-timeout", required_argument, NULL, 'x'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    bool ok = true;
    *o = (struct server_opts){.uri = "sock+tcp://127.0.0.1:0",
                              .xfer_timeout_ms = OBJ_XFER_TIMEOUT_DEFAULT_MS};
    while ((c = getopt_long(argc, argv, "u:g:m:x:h", longs, NULL)) != -1) {
        switch (c) {
        case 'u': o->uri = optarg; break;
        case 'g': o->group_file = optarg; break;
        case 'm': o->mem_cap = parse_bytes(optarg, &ok); break;
        case 'x': o->xfer_timeout_ms = parse_ms(optarg, &ok); break;
        default:
            fprintf(stderr, "usage: %s [-u URI] [--group-file PATH] [--mem-cap BYTES[K|M|G]] "
                            "[--xfer-timeout MS]\n",
                    argv[0]);
            return c == 'h' ? 1 : -1;
        }
        if (!ok) {
            fprintf(stderr, "hm-objstore-server: bad %s \"%s\"\n",
                    c == 'x' ? "timeout (1 ms or more)" : "size", optarg);
            return -1;
        }
    }
    return 0;
}

/*
 * A dead rank is only logged, not removed: hm_group_remove_rank bumps the
 * group's version, and clients attached from the group file (version 1)
 * would then get HM_STALE from every collective. The collectives report a
 * dead rank as failed anyway, and clients exclude the ranks they saw die.
 */
static void on_rank_failure(hm_group_t *group, hm_rank_t rank, hm_return_t why, void *arg)
{
    (void)arg;
    fprintf(stderr, "hm-objstore-server: rank %u sees rank %u dead (%s)\n", hm_group_rank(group),
            rank, hm_strerror(why));
}

/* The group: every rank of the mpirun job, or this process alone. */
static hm_return_t join_group(struct server_run *r)
{
    hm_group_opts_t gopts = {.field_mask = HM_GROUP_OPT_NAME | HM_GROUP_OPT_FAILURE_CB,
                             .name = OBJ_GROUP_NAME, .failure_cb = on_rank_failure};
    if (getenv("PMIX_RANK") != NULL)
        return hm_group_create_pmix(r->ctl, &gopts, &r->group);
    hm_addr_t *self = NULL;
    char uri[4096];
    size_t size = sizeof(uri);
    hm_return_t ret = hm_addr_self(r->ctl, &self);
    if (ret == HM_SUCCESS)
        ret = hm_addr_to_string(self, uri, &size);
    hm_addr_free(self);
    const char *uris[1] = {uri};
    if (ret == HM_SUCCESS)
        ret = hm_group_create_list(r->ctl, uris, 1, 0, &gopts, &r->group);
    return ret;
}

static void drive(hm_context_t *ctx, unsigned int timeout_ms)
{
    hm_progress(ctx, timeout_ms);
    hm_trigger(ctx, UINT32_MAX, NULL);
}

struct ready_wait {
    bool done;
    hm_return_t ret;
};

static void ready_cb(const hm_coll_result_t *res)
{
    struct ready_wait *w = res->arg;
    w->ret = res->ret;
    w->done = true;
}

/* Rank 0: a count collective until every rank answers (30 s at most). */
static hm_return_t wait_all_ranks(struct server_run *r)
{
    hm_return_t ret = HM_TIMEOUT;
    hm_coll_opts_t copts = {.field_mask = HM_COLL_OPT_TIMEOUT, .timeout_ms = 2000};
    for (int attempt = 0; attempt < 15 && ret != HM_SUCCESS && !server_stop; attempt++) {
        struct ready_wait w = {0};
        ret = hm_coll_start(r->group, hm_rpc_id(OBJ_COLL_COUNT), NULL, ready_cb, &w, &copts);
        while (ret == HM_SUCCESS && !w.done)
            drive(r->ctl, 100);
        if (ret == HM_SUCCESS)
            ret = w.ret;
    }
    return ret;
}

static int server_open(const struct server_opts *o, struct server_run *r)
{
    hm_context_opts_t copts = {.field_mask = HM_CONTEXT_OPT_PROGRESS_THREAD,
                               .progress_thread = true};
    hm_return_t ret = hm_class_create(o->uri, NULL, &r->srv.cls);
    if (ret != HM_SUCCESS)
        return fail("cannot open the protocol", ret);
    r->srv.xfer_timeout_ms = o->xfer_timeout_ms;
    r->srv.store = store_create(o->mem_cap);
    if (r->srv.store == NULL)
        return fail("store", HM_NOMEM);
    ret = server_register(&r->srv);
    if (ret != HM_SUCCESS)
        return fail("registering the RPCs", ret);
    ret = hm_context_create(r->srv.cls, NULL, &r->ctl);
    if (ret != HM_SUCCESS)
        return fail("control context", ret);
    ret = hm_context_create_per_node(r->srv.cls, &copts, r->data, SERVER_MAX_CTX, &r->srv.nctx);
    if (ret != HM_SUCCESS)
        return fail("data contexts", ret);
    for (unsigned int i = 0; i < r->srv.nctx; i++) {
        hm_context_info_t info = {.size = sizeof(info)};
        if (hm_context_get_info(r->data[i], &info) != HM_SUCCESS || info.index != i + 1)
            return fail("data contexts are not #1..#N", HM_FAULT);
    }
    ret = join_group(r);
    if (ret != HM_SUCCESS)
        return fail("forming the group", ret);
    if (hm_group_rank(r->group) != 0)
        return 0;
    ret = wait_all_ranks(r);
    if (ret != HM_SUCCESS)
        return fail("not every rank answers", ret);
    if (o->group_file != NULL) {
        ret = hm_group_write_file(r->group, o->group_file);
        if (ret != HM_SUCCESS)
            return fail("writing the group file", ret);
    }
    return 0;
}

static void server_close(struct server_run *r)
{
    for (int i = 0; r->group != NULL && i < 500; i++) {
        if (hm_group_destroy(r->group) == HM_SUCCESS)
            break;
        drive(r->ctl, 10);
    }
    for (unsigned int i = 0; i < r->srv.nctx; i++) {
        hm_return_t ret = HM_BUSY;
        for (int tries = 0; ret == HM_BUSY && tries < 200; tries++) {
            ret = hm_context_destroy(r->data[i]);
            if (ret == HM_BUSY)
                usleep(10000); /* its progress thread finishes what is in flight */
        }
        if (ret != HM_SUCCESS)
            fprintf(stderr, "hm-objstore-server: data context %u: %s\n", i, hm_strerror(ret));
    }
    if (r->ctl != NULL && hm_context_destroy(r->ctl) != HM_SUCCESS)
        fprintf(stderr, "hm-objstore-server: the control context did not close\n");
    store_destroy(r->srv.store);
    if (r->srv.cls != NULL && hm_class_destroy(r->srv.cls) != HM_SUCCESS)
        fprintf(stderr, "hm-objstore-server: the class did not close\n");
}

int main(int argc, char **argv)
{
    struct server_opts o;
    struct server_run r = {0};
    int rc = parse_opts(argc, argv, &o);
    if (rc != 0)
        return rc > 0 ? EXIT_SUCCESS : EXIT_FAILURE;
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    rc = server_open(&o, &r);
    if (rc == 0) {
        printf("hm-objstore-server: rank %u of %u pid %ld contexts %u mem-cap %llu rss_kb %llu\n",
               hm_group_rank(r.group), hm_group_size(r.group), (long)getpid(), r.srv.nctx,
               (unsigned long long)o.mem_cap, (unsigned long long)server_rss_kb());
        if (hm_group_rank(r.group) == 0)
            printf("hm-objstore-server: ready, %u ranks%s%s\n", hm_group_size(r.group),
                   o.group_file != NULL ? ", group file " : "",
                   o.group_file != NULL ? o.group_file : "");
        fflush(stdout);
        while (!server_stop)
            drive(r.ctl, 100);
    }
    server_close(&r);
    return rc == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
