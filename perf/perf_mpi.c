/*
 * hm-perf under mpirun: rank 0 is the client, the other ranks are servers.
 * Each server puts its URI under "hm_perf.uri" in PMIx and every rank
 * fences (collecting the data); rank 0 then reads the URIs, measures with
 * its requests spread round-robin over the servers, and stops them all.
 * A server that cannot open puts an empty URI, so the fence still ends.
 *
 * Built only when pkg-config finds PMIx (HM_PERF_PMIX); without it the
 * mode says so and fails.
 */
#include <stdlib.h>
#include <string.h>

#include "perf.h"

bool perf_mpi_detected(void)
{
    return getenv("PMIX_RANK") != NULL || getenv("OMPI_COMM_WORLD_RANK") != NULL;
}

#ifndef HM_PERF_PMIX

int perf_mpi_run(const struct perf_opts *opts)
{
    (void)opts;
    fprintf(stderr, "hm-perf: started by mpirun, but this hm-perf was built without PMIx "
            "(pkg-config did not find \"pmix\"; on Debian: apt-get install libpmix-dev, "
            "then reconfigure). Run it without mpirun, or as server and client.\n");
    return -1;
}

#else /* HM_PERF_PMIX */

#include <pmix.h>

#define PERF_PMIX_KEY "hm_perf.uri"

static int pmix_fail(const char *what, pmix_status_t st)
{
    fprintf(stderr, "hm-perf: %s: %s\n", what, PMIx_Error_string(st));
    return -1;
}

/* mpi_fence: every rank of the job, collecting what was put. */
static int mpi_fence(const pmix_proc_t *me)
{
    pmix_proc_t all;
    pmix_info_t info;
    bool collect = true;
    pmix_status_t st;

    PMIX_LOAD_PROCID(&all, me->nspace, PMIX_RANK_WILDCARD);
    PMIX_INFO_CONSTRUCT(&info);
    st = PMIx_Info_load(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    if (st == PMIX_SUCCESS)
        st = PMIx_Fence(&all, 1, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    return st == PMIX_SUCCESS ? 0 : pmix_fail("PMIx_Fence", st);
}

static int mpi_job_size(const pmix_proc_t *me, uint32_t *size_out)
{
    pmix_proc_t all;
    pmix_value_t *val = NULL;
    pmix_status_t st;

    PMIX_LOAD_PROCID(&all, me->nspace, PMIX_RANK_WILDCARD);
    st = PMIx_Get(&all, PMIX_JOB_SIZE, NULL, 0, &val);
    if (st != PMIX_SUCCESS)
        return pmix_fail("PMIx_Get(job size)", st);
    if (val->type != PMIX_UINT32) {
        fprintf(stderr, "hm-perf: PMIx gave the job size as type %d\n", (int)val->type);
        PMIX_VALUE_RELEASE(val);
        return -1;
    }
    *size_out = val->data.uint32;
    PMIX_VALUE_RELEASE(val);
    return 0;
}

/* The server's publisher: put the URI ("" when it could not open), commit, fence. */
struct mpi_publish {
    const pmix_proc_t *me;
};

static int mpi_publish(const char *uri, void *arg)
{
    struct mpi_publish *pub = arg;
    pmix_value_t val;
    pmix_status_t st;
    int rc = 0;

    PMIX_VALUE_CONSTRUCT(&val);
    st = PMIx_Value_load(&val, uri != NULL ? uri : "", PMIX_STRING);
    if (st == PMIX_SUCCESS)
        st = PMIx_Put(PMIX_GLOBAL, PERF_PMIX_KEY, &val);
    if (st == PMIX_SUCCESS)
        st = PMIx_Commit();
    PMIx_Value_destruct(&val);
    if (st != PMIX_SUCCESS)
        rc = pmix_fail("publishing the URI", st);
    if (mpi_fence(pub->me) != 0) /* even after a failure: rank 0 waits in it */
        rc = -1;
    return uri != NULL ? rc : -1;
}

/* mpi_uri: rank `rank`'s URI, malloc'd; "" if that server could not open. */
static char *mpi_uri(const pmix_proc_t *me, uint32_t rank)
{
    pmix_proc_t peer;
    pmix_value_t *val = NULL;
    char *uri = NULL;
    pmix_status_t st;

    PMIX_LOAD_PROCID(&peer, me->nspace, rank);
    st = PMIx_Get(&peer, PERF_PMIX_KEY, NULL, 0, &val);
    if (st != PMIX_SUCCESS) {
        pmix_fail("PMIx_Get(server URI)", st);
        return NULL;
    }
    if (val->type == PMIX_STRING && val->data.string != NULL)
        uri = strdup(val->data.string);
    else
        fprintf(stderr, "hm-perf: rank %u published no URI\n", rank);
    PMIX_VALUE_RELEASE(val);
    return uri;
}

/* mpi_client: rank 0. Reads the servers' URIs, measures, stops them. */
static int mpi_client(const struct perf_opts *opts, const pmix_proc_t *me, uint32_t nranks)
{
    uint32_t n = nranks - 1, reached = 0;
    char **uris = calloc(n, sizeof(*uris));
    int rc = 0;

    if (uris == NULL) {
        fprintf(stderr, "hm-perf: out of memory\n");
        return -1;
    }
    if (mpi_fence(me) != 0)
        rc = -1;
    for (uint32_t r = 1; rc == 0 && r < nranks; r++) {
        char *uri = mpi_uri(me, r);
        if (uri == NULL || uri[0] == '\0') {
            fprintf(stderr, "hm-perf: the server of rank %u did not open\n", r);
            free(uri);
            rc = -1;
            continue;
        }
        uris[reached++] = uri;
    }
    if (rc == 0)
        rc = perf_client_run(opts, (const char *const *)uris, reached, true);
    else if (reached > 0)
        perf_client_stop(opts, (const char *const *)uris, reached);
    for (uint32_t i = 0; i < reached; i++)
        free(uris[i]);
    free(uris);
    return rc;
}

int perf_mpi_run(const struct perf_opts *opts)
{
    pmix_proc_t me;
    uint32_t nranks = 0;
    pmix_status_t st = PMIx_Init(&me, NULL, 0);
    int rc;

    if (st != PMIX_SUCCESS)
        return pmix_fail("PMIx_Init (is this mpirun's PMIx?)", st);
    rc = mpi_job_size(&me, &nranks);
    if (rc == 0 && nranks < 2) {
        fprintf(stderr, "hm-perf: under mpirun, give at least 2 ranks (rank 0 measures, "
                "the others serve)\n");
        rc = -1;
    }
    if (rc == 0 && me.rank == 0) {
        rc = mpi_client(opts, &me, nranks);
    } else if (rc == 0) {
        struct mpi_publish pub = {.me = &me};
        rc = perf_server_run(opts, mpi_publish, &pub);
    }
    st = PMIx_Finalize(NULL, 0);
    if (st != PMIX_SUCCESS)
        rc = pmix_fail("PMIx_Finalize", st);
    return rc;
}

#endif /* HM_PERF_PMIX */
