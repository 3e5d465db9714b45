/*
 * Groups from PMIx (ranks started by mpirun or srun): each rank puts the
 * URI of its context under "hm.group.NAME", commits, fences with data
 * collection, then reads every other rank's URI. Built only when
 * pkg-config finds pmix (HM_GROUP_PMIX); otherwise the call fails with
 * HM_NOT_SUPPORTED and says why.
 */
#include <stdlib.h>
#include <string.h>

#include "group/group_internal.h"
#include "util/log.h"

#ifndef HM_GROUP_PMIX

hm_return_t hm_group_create_pmix(hm_context_t *ctx, const hm_group_opts_t *opts,
                                 hm_group_t **group_out)
{
    (void)opts;
    if (ctx == NULL || group_out == NULL)
        return HM_INVALID_ARG;
    hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR,
            "group: this Hermod was built without PMIx (pkg-config did not find \"pmix\"; "
            "on Debian: apt-get install libpmix-dev, then reconfigure)");
    return HM_NOT_SUPPORTED;
}

void hmi_group_pmix_fini(void)
{
}

#else /* HM_GROUP_PMIX */

#include <pmix.h>

static hm_return_t pmix_fail(const char *what, pmix_status_t st)
{
    hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "group: %s: %s", what, PMIx_Error_string(st));
    return HM_TRANSPORT_ERROR;
}

void hmi_group_pmix_fini(void)
{
    PMIx_Finalize(NULL, 0);
}

static hm_return_t pmix_publish(hm_context_t *ctx, const char *key)
{
    hm_addr_t *self;
    char uri[1024];
    size_t size = sizeof(uri);
    hm_return_t ret = hm_addr_self(ctx, &self);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hm_addr_to_string(self, uri, &size);
    hm_addr_free(self);
    if (ret != HM_SUCCESS)
        return ret;
    pmix_value_t val;
    PMIX_VALUE_CONSTRUCT(&val);
    pmix_status_t st = PMIx_Value_load(&val, uri, PMIX_STRING);
    if (st == PMIX_SUCCESS)
        st = PMIx_Put(PMIX_GLOBAL, key, &val);
    if (st == PMIX_SUCCESS)
        st = PMIx_Commit();
    PMIx_Value_destruct(&val);
    return st == PMIX_SUCCESS ? HM_SUCCESS : pmix_fail("publishing the URI", st);
}

static hm_return_t pmix_fence(const pmix_proc_t *me)
{
    pmix_proc_t all;
    pmix_info_t info;
    bool collect = true;
    PMIX_LOAD_PROCID(&all, me->nspace, PMIX_RANK_WILDCARD);
    PMIX_INFO_CONSTRUCT(&info);
    pmix_status_t st = PMIx_Info_load(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    if (st == PMIX_SUCCESS)
        st = PMIx_Fence(&all, 1, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    return st == PMIX_SUCCESS ? HM_SUCCESS : pmix_fail("PMIx_Fence", st);
}

static hm_return_t pmix_job_size(const pmix_proc_t *me, uint32_t *size_out)
{
    pmix_proc_t all;
    pmix_value_t *val = NULL;
    PMIX_LOAD_PROCID(&all, me->nspace, PMIX_RANK_WILDCARD);
    pmix_status_t st = PMIx_Get(&all, PMIX_JOB_SIZE, NULL, 0, &val);
    if (st != PMIX_SUCCESS)
        return pmix_fail("PMIx_Get(job size)", st);
    hm_return_t ret = HM_SUCCESS;
    if (val->type == PMIX_UINT32)
        *size_out = val->data.uint32;
    else
        ret = pmix_fail("PMIx_Get(job size): not a uint32", PMIX_ERR_BAD_PARAM);
    PMIX_VALUE_RELEASE(val);
    return ret;
}

/* Read every rank's URI into uris[] (malloc'd strings). */
static hm_return_t pmix_read_all(const pmix_proc_t *me, const char *key, uint32_t n,
                                 char **uris)
{
    for (uint32_t r = 0; r < n; r++) {
        pmix_proc_t peer;
        pmix_value_t *val = NULL;
        PMIX_LOAD_PROCID(&peer, me->nspace, r);
        pmix_status_t st = PMIx_Get(&peer, key, NULL, 0, &val);
        if (st != PMIX_SUCCESS)
            return pmix_fail("PMIx_Get(a rank's URI)", st);
        if (val->type == PMIX_STRING && val->data.string != NULL)
            uris[r] = strdup(val->data.string);
        PMIX_VALUE_RELEASE(val);
        if (uris[r] == NULL)
            return HM_NOMEM;
    }
    return HM_SUCCESS;
}

static hm_return_t pmix_build(hm_context_t *ctx, const hm_group_opts_t *opts,
                              const pmix_proc_t *me, hm_group_t **group_out)
{
    const char *name = HM_GROUP_NAME_DEFAULT;
    if (opts != NULL && (opts->field_mask & HM_GROUP_OPT_NAME) && opts->name != NULL)
        name = opts->name;
    char key[PMIX_MAX_KEYLEN];
    snprintf(key, sizeof(key), "hm.group.%s", name);
    uint32_t n = 0;
    hm_return_t ret = pmix_publish(ctx, key);
    hm_return_t fence = pmix_fence(me); /* even after a failure: the others wait in it */
    if (ret == HM_SUCCESS)
        ret = fence;
    if (ret == HM_SUCCESS)
        ret = pmix_job_size(me, &n);
    if (ret != HM_SUCCESS)
        return ret;
    char **uris = calloc(n, sizeof(*uris));
    hm_rank_t *ranks = calloc(n, sizeof(*ranks));
    if (uris == NULL || ranks == NULL)
        ret = HM_NOMEM;
    if (ret == HM_SUCCESS)
        ret = pmix_read_all(me, key, n, uris);
    for (uint32_t r = 0; ret == HM_SUCCESS && r < n; r++)
        ranks[r] = r;
    if (ret == HM_SUCCESS)
        ret = hmi_group_new(ctx, ranks, (const char *const *)uris, n, me->rank, opts,
                            HM_GROUP_NAME_DEFAULT, 1, group_out);
    for (uint32_t r = 0; uris != NULL && r < n; r++)
        free(uris[r]);
    free(uris);
    free(ranks);
    return ret;
}

hm_return_t hm_group_create_pmix(hm_context_t *ctx, const hm_group_opts_t *opts,
                                 hm_group_t **group_out)
{
    if (ctx == NULL || group_out == NULL)
        return HM_INVALID_ARG;
    if (getenv("PMIX_RANK") == NULL && getenv("PMIX_NAMESPACE") == NULL) {
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR,
                "group: not started by a PMIx launcher (no PMIX_RANK in the environment; "
                "run under mpirun or srun)");
        return HM_NOT_SUPPORTED;
    }
    pmix_proc_t me;
    pmix_status_t st = PMIx_Init(&me, NULL, 0);
    if (st != PMIX_SUCCESS) {
        pmix_fail("PMIx_Init", st);
        return HM_NOT_SUPPORTED;
    }
    hm_return_t ret = pmix_build(ctx, opts, &me, group_out);
    if (ret != HM_SUCCESS) {
        PMIx_Finalize(NULL, 0);
        return ret;
    }
    (*group_out)->g_pmix = true;
    return HM_SUCCESS;
}

#endif /* HM_GROUP_PMIX */
