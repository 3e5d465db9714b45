/*
 * Groups: members, queries, cached addresses, subgroups and removal.
 * Members are kept sorted by rank so that every rank builds the same
 * collective trees and finds a rank by binary search.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "group/group_internal.h"
#include "group/tree.h"
#include "util/log.h"
#include "util/time.h"

static uint32_t group_detect_ms(const hm_group_opts_t *opts)
{
    if (opts != NULL && (opts->field_mask & HM_GROUP_OPT_DETECT_MS))
        return opts->detect_ms;
    const char *env = getenv("HM_GROUP_DETECT_MS");
    if (env != NULL && *env != '\0')
        return (uint32_t)strtoul(env, NULL, 10);
    return HM_GROUP_DETECT_MS_DEFAULT;
}

static hm_return_t group_set_name(hm_group_t *group, const hm_group_opts_t *opts,
                                  const char *default_name)
{
    const char *name = default_name;
    if (opts != NULL && (opts->field_mask & HM_GROUP_OPT_NAME))
        name = opts->name;
    if (name == NULL || name[0] == '\0' || strlen(name) >= HMI_GROUP_NAME_MAX) {
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "group: a name of 1 to %d bytes is needed",
                HMI_GROUP_NAME_MAX - 1);
        return HM_INVALID_ARG;
    }
    strcpy(group->g_name, name);
    group->g_hash = hmi_group_hash(name);
    return HM_SUCCESS;
}

static int member_cmp(const void *a, const void *b)
{
    const struct hmi_member *x = a, *y = b;
    return x->m_rank < y->m_rank ? -1 : x->m_rank > y->m_rank;
}

/* Copy and sort the members; refuse duplicates and empty URIs. */
static hm_return_t group_fill(hm_group_t *group, const hm_rank_t *ranks,
                              const char *const *uris, uint32_t count)
{
    group->g_members = calloc(count, sizeof(*group->g_members));
    group->g_ranks = calloc(count, sizeof(*group->g_ranks));
    if (group->g_members == NULL || group->g_ranks == NULL)
        return HM_NOMEM;
    for (uint32_t i = 0; i < count; i++) {
        if (uris[i] == NULL || uris[i][0] == '\0' || ranks[i] == HM_RANK_NONE) {
            hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "group: rank %u has no URI", ranks[i]);
            return HM_INVALID_ARG;
        }
        group->g_members[i].m_rank = ranks[i];
        group->g_members[i].m_uri = strdup(uris[i]);
        if (group->g_members[i].m_uri == NULL)
            return HM_NOMEM;
        group->g_size = i + 1;
    }
    qsort(group->g_members, count, sizeof(*group->g_members), member_cmp);
    for (uint32_t i = 0; i < count; i++) {
        group->g_ranks[i] = group->g_members[i].m_rank;
        if (i > 0 && group->g_ranks[i] == group->g_ranks[i - 1]) {
            hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "group: rank %u given twice",
                    group->g_ranks[i]);
            return HM_INVALID_ARG;
        }
    }
    return HM_SUCCESS;
}

static void group_free(hm_group_t *group)
{
    for (uint32_t i = 0; i < group->g_size; i++) {
        free(group->g_members[i].m_uri);
        if (group->g_members[i].m_addr != NULL)
            hm_addr_free(group->g_members[i].m_addr);
    }
    free(group->g_members);
    free(group->g_ranks);
    free(group);
}

/*
 * The first collective id this caller starts; the next ones count up. Ranks
 * find a collective by its id alone, so ids of different origins must not
 * meet: a random start (not the clock, which ranks released together by
 * one PMIx fence might read in the same nanosecond) makes that as unlikely
 * as 64 bits allow, and the ids of others cannot be guessed by a peer.
 */
static uint64_t group_coll_seed(void)
{
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof(seed), 0) != (ssize_t)sizeof(seed))
        seed = hmi_time_ns() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 32;
    return seed | 1u; /* 0 marks an empty slot of the answer cache */
}

static hm_return_t group_init(hm_group_t *group, hm_context_t *ctx,
                              const hm_group_opts_t *opts)
{
    group->g_ctx = ctx;
    group->g_cls = hm_context_class(ctx);
    group->g_detect_ms = group_detect_ms(opts);
    if (opts != NULL && (opts->field_mask & HM_GROUP_OPT_FAILURE_CB)) {
        group->g_failure_cb = opts->failure_cb;
        group->g_failure_arg = opts->failure_arg;
    }
    hmi_list_init(&group->g_nodes);
    hmi_list_init(&group->g_link);
    group->g_coll_next = group_coll_seed();
    return hmi_gclass_get(group->g_cls, &group->g_gc);
}

hm_return_t hmi_group_new(hm_context_t *ctx, const hm_rank_t *ranks, const char *const *uris,
                          uint32_t count, hm_rank_t self, const hm_group_opts_t *opts,
                          const char *default_name, uint32_t version, hm_group_t **group_out)
{
    if (ctx == NULL || uris == NULL || group_out == NULL || count == 0 ||
        count > HM_GROUP_MAX_SIZE)
        return HM_INVALID_ARG;
    hm_group_t *group = calloc(1, sizeof(*group));
    if (group == NULL)
        return HM_NOMEM;
    group->g_version = version;
    group->g_self = self;
    hm_return_t ret = group_set_name(group, opts, default_name);
    if (ret == HM_SUCCESS)
        ret = group_fill(group, ranks, uris, count);
    if (ret == HM_SUCCESS && self != HM_RANK_NONE &&
        hmi_tree_find(group->g_ranks, group->g_size, self) == HMI_TREE_NONE) {
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "group: own rank %u is not a member", self);
        ret = HM_INVALID_ARG;
    }
    if (ret == HM_SUCCESS)
        ret = group_init(group, ctx, opts);
    if (ret == HM_SUCCESS && hmi_gclass_find(group->g_gc, ctx, group->g_hash) != NULL) {
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR,
                "group: a group named \"%s\" already lives on this context", group->g_name);
        ret = HM_EXISTS;
    }
    if (ret == HM_SUCCESS)
        ret = hmi_detect_start(group);
    if (ret != HM_SUCCESS) {
        group_free(group);
        return ret;
    }
    hmi_gclass_add(group->g_gc, group);
    *group_out = group;
    return HM_SUCCESS;
}

hm_return_t hm_group_create_list(hm_context_t *ctx, const char *const *uris, uint32_t count,
                                 hm_rank_t self, const hm_group_opts_t *opts,
                                 hm_group_t **group_out)
{
    if (uris == NULL || count == 0 || count > HM_GROUP_MAX_SIZE)
        return HM_INVALID_ARG;
    hm_rank_t *ranks = malloc(count * sizeof(*ranks));
    if (ranks == NULL)
        return HM_NOMEM;
    for (uint32_t i = 0; i < count; i++)
        ranks[i] = i;
    hm_return_t ret = hmi_group_new(ctx, ranks, uris, count, self, opts, HM_GROUP_NAME_DEFAULT,
                                    1, group_out);
    free(ranks);
    return ret;
}

hm_return_t hm_group_create_sub(hm_group_t *parent, const hm_rank_t *ranks, uint32_t count,
                                const hm_group_opts_t *opts, hm_group_t **group_out)
{
    if (parent == NULL || ranks == NULL || count == 0 || count > parent->g_size ||
        opts == NULL || !(opts->field_mask & HM_GROUP_OPT_NAME))
        return HM_INVALID_ARG;
    const char **uris = malloc(count * sizeof(*uris));
    if (uris == NULL)
        return HM_NOMEM;
    hm_rank_t self = HM_RANK_NONE;
    for (uint32_t i = 0; i < count; i++) {
        struct hmi_member *m = hmi_group_member(parent, ranks[i]);
        if (m == NULL) {
            free(uris);
            hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "group: rank %u is not in \"%s\"",
                    ranks[i], parent->g_name);
            return HM_INVALID_ARG;
        }
        uris[i] = m->m_uri;
        if (ranks[i] == parent->g_self)
            self = ranks[i];
    }
    hm_return_t ret = hmi_group_new(parent->g_ctx, ranks, uris, count, self, opts, NULL, 1,
                                    group_out);
    free(uris);
    return ret;
}

hm_return_t hm_group_destroy(hm_group_t *group)
{
    if (group == NULL)
        return HM_INVALID_ARG;
    if (group->g_nodes_alive != 0) {
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR,
                "group \"%s\": destroyed with %u collectives in flight", group->g_name,
                group->g_nodes_alive);
        return HM_BUSY;
    }
    hmi_detect_stop(group); /* keepalives in flight end on their own */
    hmi_gclass_remove(group->g_gc, group);
    hmi_coll_cache_clear(group);
    bool pmix = group->g_pmix;
    group_free(group);
    if (pmix)
        hmi_group_pmix_fini();
    return HM_SUCCESS;
}

hm_rank_t hm_group_rank(const hm_group_t *group)
{
    return group != NULL ? group->g_self : HM_RANK_NONE;
}

uint32_t hm_group_size(const hm_group_t *group)
{
    return group != NULL ? group->g_size : 0;
}

uint32_t hm_group_version(const hm_group_t *group)
{
    return group != NULL ? group->g_version : 0;
}

const char *hm_group_name(const hm_group_t *group)
{
    return group != NULL ? group->g_name : NULL;
}

hm_context_t *hm_group_context(const hm_group_t *group)
{
    return group != NULL ? group->g_ctx : NULL;
}

hm_return_t hm_group_rank_at(const hm_group_t *group, uint32_t index, hm_rank_t *rank_out)
{
    if (group == NULL || rank_out == NULL || index >= group->g_size)
        return HM_INVALID_ARG;
    *rank_out = group->g_ranks[index];
    return HM_SUCCESS;
}

struct hmi_member *hmi_group_member(const hm_group_t *group, hm_rank_t rank)
{
    uint32_t pos = hmi_tree_find(group->g_ranks, group->g_size, rank);
    return pos == HMI_TREE_NONE ? NULL : &group->g_members[pos];
}

hm_return_t hm_group_uri(const hm_group_t *group, hm_rank_t rank, const char **uri_out)
{
    if (group == NULL || uri_out == NULL)
        return HM_INVALID_ARG;
    struct hmi_member *m = hmi_group_member(group, rank);
    if (m == NULL)
        return HM_NOENTRY;
    *uri_out = m->m_uri;
    return HM_SUCCESS;
}

hm_return_t hmi_group_addr(hm_group_t *group, struct hmi_member *m, hm_addr_t **addr_out)
{
    if (m->m_addr == NULL) {
        hm_return_t ret = hm_addr_lookup(group->g_ctx, m->m_uri, &m->m_addr);
        if (ret != HM_SUCCESS) {
            m->m_addr = NULL;
            return ret;
        }
    }
    *addr_out = m->m_addr;
    return HM_SUCCESS;
}

/* "uri" with its "#N" suffix, if any, replaced by "#index". */
static char *group_uri_for_ctx(const char *uri, uint32_t index)
{
    const char *hash = strrchr(uri, '#');
    size_t base = hash != NULL ? (size_t)(hash - uri) : strlen(uri);
    char *out = malloc(base + 16);
    if (out != NULL)
        snprintf(out, base + 16, "%.*s#%u", (int)base, uri, index);
    return out;
}

hm_return_t hm_group_addr(hm_group_t *group, hm_rank_t rank, uint32_t ctx_index,
                          hm_addr_t **addr_out)
{
    if (group == NULL || addr_out == NULL)
        return HM_INVALID_ARG;
    struct hmi_member *m = hmi_group_member(group, rank);
    if (m == NULL)
        return HM_NOENTRY;
    if (ctx_index == HM_GROUP_CTX_SAME) {
        hm_addr_t *addr;
        hm_return_t ret = hmi_group_addr(group, m, &addr);
        if (ret == HM_SUCCESS)
            *addr_out = hm_addr_dup(addr);
        return ret;
    }
    char *uri = group_uri_for_ctx(m->m_uri, ctx_index);
    if (uri == NULL)
        return HM_NOMEM;
    hm_return_t ret = hm_addr_lookup(group->g_ctx, uri, addr_out); /* the core caches it */
    free(uri);
    return ret;
}

hm_return_t hm_group_remove_rank(hm_group_t *group, hm_rank_t rank)
{
    if (group == NULL || (rank == group->g_self && rank != HM_RANK_NONE))
        return HM_INVALID_ARG;
    uint32_t pos = hmi_tree_find(group->g_ranks, group->g_size, rank);
    if (pos == HMI_TREE_NONE)
        return HM_NOENTRY;
    if (group->g_size == 1) { /* a client's last rank: a group is never empty */
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "group \"%s\": rank %u is its last",
                group->g_name, rank);
        return HM_INVALID_ARG;
    }
    struct hmi_member *m = &group->g_members[pos];
    hmi_detect_forget(group, m); /* its keepalive, if any, ends on its own */
    free(m->m_uri);
    if (m->m_addr != NULL)
        hm_addr_free(m->m_addr);
    memmove(m, m + 1, (group->g_size - pos - 1) * sizeof(*m));
    memmove(&group->g_ranks[pos], &group->g_ranks[pos + 1],
            (group->g_size - pos - 1) * sizeof(*group->g_ranks));
    group->g_size--;
    group->g_version++;
    hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_INFO, "group \"%s\": rank %u removed, version %u",
            group->g_name, rank, group->g_version);
    return HM_SUCCESS;
}

void hmi_group_heard(hm_group_t *group, hm_rank_t rank)
{
    struct hmi_member *m = hmi_group_member(group, rank);
    if (m != NULL)
        m->m_heard_ns = hmi_time_ns();
}

void hmi_group_heard_from(hm_group_t *group, hm_rank_t rank, const hm_addr_t *source)
{
    struct hmi_member *m = hmi_group_member(group, rank);
    if (m != NULL && m->m_addr != NULL && source != NULL && hm_addr_cmp(m->m_addr, source) == 0)
        m->m_heard_ns = hmi_time_ns();
}
