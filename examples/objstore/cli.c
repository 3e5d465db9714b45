/*
 * hm-objstore: the object store's command-line client.
 *
 *   hm-objstore -g GROUP_FILE [-u URI] [-r REPLICAS] [-t TIMEOUT_MS] VERB ...
 *     put KEY VALUE | put KEY @FILE   store a value (a string, or a file's bytes)
 *     get KEY                         write the value to stdout
 *     del KEY | stat KEY
 *     count                           objects and bytes over every rank (collective)
 *     list PREFIX                     keys starting with PREFIX (collective)
 *     bench ...                       the load generator (hm-objstore bench -h)
 *     put-stop KEY VALUE|@FILE        for tests: send the put, then stop this process
 *                                     (SIGSTOP) with the transfer pending, so a
 *                                     test can kill a client mid-put for sure
 *
 * Exit status: 0 done, 1 the RPC failed (transport, deadline, bad usage),
 * 2 the store refused (no such key, memory cap, invalid argument).
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static int usage(void)
{
    fputs("usage: hm-objstore -g GROUP_FILE [-u URI] [-r REPLICAS] [-t TIMEOUT_MS] "
          "put|get|del|stat|count|list|bench ...\n", stderr);
    return 1;
}

static int result_exit(const char *verb, const char *key, const struct objc_result *res)
{
    if (res->ret == HM_SUCCESS && res->status == OBJ_OK)
        return 0;
    fprintf(stderr, "hm-objstore: %s %s: %s (rank %d)\n", verb, key, objc_result_str(res),
            res->rank == HM_RANK_NONE ? -1 : (int)res->rank);
    return res->ret != HM_SUCCESS ? 1 : 2;
}

/* The bytes of `arg`: the string itself, or the file named after '@'. */
static void *value_of(const char *arg, uint64_t *size)
{
    if (arg[0] != '@') {
        *size = strlen(arg);
        return strdup(arg);
    }
    FILE *f = fopen(arg + 1, "rb");
    if (f == NULL) {
        perror(arg + 1);
        return NULL;
    }
    char *buf = NULL;
    long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (len >= 0 && (uint64_t)len <= OBJ_VALUE_MAX && fseek(f, 0, SEEK_SET) == 0)
        buf = malloc((size_t)len + 1);
    if (buf != NULL && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf == NULL)
        fprintf(stderr, "hm-objstore: cannot read %s (at most 64 MiB)\n", arg + 1);
    *size = buf != NULL ? (uint64_t)len : 0;
    return buf;
}

static int do_collective(objc_t *c, const char *verb, const char *prefix)
{
    uint32_t failed = 0;
    hm_return_t ret;
    if (strcmp(verb, "count") == 0) {
        struct obj_count_out out;
        ret = objc_count(c, &out, &failed);
        printf("objects %llu bytes %llu server_rss_kB %llu ranks_failed %u\n",
               (unsigned long long)out.objects, (unsigned long long)out.bytes,
               (unsigned long long)out.rss_kb, failed);
    } else {
        struct obj_list_out *out = malloc(sizeof(*out));
        if (out == NULL)
            return 1;
        ret = objc_list(c, prefix, out, &failed);
        for (uint32_t at = 0; at < out->used; at += (uint32_t)strlen(out->keys + at) + 1)
            printf("%s\n", out->keys + at);
        printf("# %llu keys matched%s, %u ranks failed\n", (unsigned long long)out->matched,
               out->truncated ? " (list truncated)" : "", failed);
        free(out);
    }
    if (ret != HM_SUCCESS)
        fprintf(stderr, "hm-objstore: %s: %s\n", verb, hm_strerror(ret));
    return ret == HM_SUCCESS ? 0 : 1;
}

static void put_stop_cb(const struct objc_result *res)
{
    *(struct objc_result *)res->arg = *res;
}

/* put-stop: the request leaves, then the process stops where it would serve
 * the server's pull; after SIGCONT it finishes like put. A stat of the key
 * first connects to the context that serves it (a connection still being
 * set up when the process stops would never reach the server). */
static struct objc_result put_stop(objc_t *c, const char *key, const void *value, uint64_t size)
{
    struct objc_result res = {.ret = HM_TIMEOUT, .rank = HM_RANK_NONE};
    objc_stat(c, key);
    hm_return_t ret = objc_put_async(c, key, value, size, put_stop_cb, &res);
    if (ret != HM_SUCCESS)
        return (struct objc_result){.ret = ret, .rank = HM_RANK_NONE};
    for (int i = 0; i < 3; i++)
        objc_progress(c, 0);
    raise(SIGSTOP);
    while (objc_inflight(c) > 0)
        objc_progress(c, 100);
    return res;
}

static int do_verb(objc_t *c, int argc, char **argv)
{
    const char *verb = argv[0], *key = argc > 1 ? argv[1] : NULL;
    struct objc_result res;
    if (strcmp(verb, "count") == 0 || strcmp(verb, "list") == 0)
        return do_collective(c, verb, key != NULL ? key : "");
    if (key == NULL)
        return usage();
    if ((strcmp(verb, "put") == 0 || strcmp(verb, "put-stop") == 0) && argc == 3) {
        uint64_t size;
        void *value = value_of(argv[2], &size);
        if (value == NULL)
            return 1;
        res = verb[3] == '\0' ? objc_put(c, key, value, size) : put_stop(c, key, value, size);
        free(value);
    } else if (strcmp(verb, "get") == 0) {
        void *value = NULL;
        res = objc_get(c, key, &value);
        if (value != NULL && fwrite(value, 1, res.size, stdout) != res.size)
            perror("stdout");
        free(value);
    } else if (strcmp(verb, "del") == 0) {
        res = objc_del(c, key);
    } else if (strcmp(verb, "stat") == 0) {
        res = objc_stat(c, key);
        if (res.ret == HM_SUCCESS && res.status == OBJ_OK)
            printf("%s size %llu rank %u\n", key, (unsigned long long)res.size, res.rank);
    } else {
        return usage();
    }
    return result_exit(verb, key, &res);
}

int main(int argc, char **argv)
{
    struct objc_opts copts = {.group_file = getenv("HM_OBJSTORE_GROUP"), .replicas = 1};
    int c;
    while ((c = getopt(argc, argv, "+g:u:r:t:h")) != -1) {
        switch (c) {
        case 'g': copts.group_file = optarg; break;
        case 'u': copts.uri = optarg; break;
        case 'r': copts.replicas = (unsigned int)strtoul(optarg, NULL, 10); break;
        case 't': copts.timeout_ms = (unsigned int)strtoul(optarg, NULL, 10); break;
        default: return usage();
        }
    }
    if (optind >= argc || copts.group_file == NULL)
        return usage();
    argc -= optind;
    argv += optind;
    if (strcmp(argv[0], "bench") == 0) {
        struct bench_opts bo = {.client = copts};
        if (bench_parse(argc, argv, &bo) != 0)
            return 1;
        return bench_run(&bo);
    }
    objc_t *client = NULL;
    hm_return_t ret = objc_open(&copts, &client);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "hm-objstore: cannot attach to %s: %s (%s)\n", copts.group_file,
                hm_strerror(ret), hm_error_detail());
        return 1;
    }
    int rc = do_verb(client, argc, argv);
    objc_close(client);
    return rc;
}
