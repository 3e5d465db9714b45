/*
 * NA tunables (na_tunable.h): the NA layer's own table, the one parse and
 * warn rule, and hm_tunables_print, the public face hm_info uses.
 */
#include "na/na_tunable.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hermod/core.h>

#include "na/na.h"
#include "util/log.h"

const struct hmi_na_tunable hmi_na_tunables[HMI_NA_TUNE_COUNT] = {
    /* The default is SWRMA_JOBS_PEER (na_swrma_int.h; tests/na/na_tunables.c
     * checks they agree). No upper bound: 0 or past the context's job
     * records (HM_SWRMA_JOBS) means the context's cap (na_swrma.c). */
    [HMI_NA_TUNE_SWRMA_JOBS_PEER] = {"HM_SWRMA_JOBS_PEER", HMI_NA_TUNABLE_SIZE, "256", 0,
                                     SIZE_MAX,
                                     "RMA over messages: gets an owner context streams for one "
                                     "peer at once (0 or past HM_SWRMA_JOBS: the context's cap)"},
    [HMI_NA_TUNE_CMA] = {"HM_CMA", HMI_NA_TUNABLE_BOOL, "1", 0, 1,
                         "0: no process_vm_readv/writev for bulk RMA between processes of one "
                         "host (shm protocols): RMA over messages instead"},
    [HMI_NA_TUNE_JOB_KEY] = {"HM_JOB_KEY", HMI_NA_TUNABLE_SECRET, NULL, 0, 0,
                             "the job's key: listeners answer only hellos carrying its "
                             "digest (ucx+tcp, sock+tcp)"},
    /* The bulk layer's (bulk_proc.c): NA is the lowest table every layer
     * above can read. The upper bound keeps a handle's bytes within one
     * message of any class (64 KiB eager limits). */
    [HMI_NA_TUNE_BULK_EAGER] = {"HM_BULK_EAGER", HMI_NA_TUNABLE_SIZE, "4096", 0, 65536,
                                "largest bulk handle created with HM_BULK_EAGER whose bytes "
                                "travel with the RPC sending it (0: never)"},
    /* The default is SWRMA_BUFS (na_swrma_int.h). At least 2 shares, so one
     * peer never holds all of them. */
    [HMI_NA_TUNE_SWRMA_BUFS] = {"HM_SWRMA_BUFS", HMI_NA_TUNABLE_SIZE, "256", 16, 4096,
                                "RMA over messages: send buffers of a context (eager-limit "
                                "bytes each, made on need); 8 at most in flight to one peer"},
    [HMI_NA_TUNE_SWRMA_STALL_MS] = {"HM_SWRMA_STALL_MS", HMI_NA_TUNABLE_SIZE, "10000", 0,
                                    3600000,
                                    "RMA over messages: a peer holding send buffers that took "
                                    "none of our messages this long, while other peers wait "
                                    "for a buffer, is given up as dead (0: never)"},
    /* The default is SWRMA_JOBS (na_swrma_int.h). */
    [HMI_NA_TUNE_SWRMA_JOBS] = {"HM_SWRMA_JOBS", HMI_NA_TUNABLE_SIZE, "4096", 64, 65536,
                                "RMA over messages: gets (and queued replies) an owner context "
                                "keeps at once, all peers together (about 112 bytes each)"},
};

bool hmi_na_tunable_parse(const struct hmi_na_tunable *t, const char *text, size_t *value_out)
{
    if (t->t_kind == HMI_NA_TUNABLE_BOOL) {
        if (strcmp(text, "0") != 0 && strcmp(text, "1") != 0)
            return false;
        *value_out = text[0] == '1';
        return true;
    }
    if (t->t_kind != HMI_NA_TUNABLE_SIZE || text[0] < '0' || text[0] > '9')
        return false; /* strtoull would take a sign or blanks */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 0);
    if (errno != 0 || *end != '\0' || v > SIZE_MAX || v < t->t_min || v > t->t_max)
        return false;
    *value_out = (size_t)v;
    return true;
}

/* The environment's value of a SIZE or BOOL entry, by the rule of na_tunable.h. */
static size_t tunable_number(const struct hmi_na_tunable *t)
{
    size_t def = 0, value;
    if (!hmi_na_tunable_parse(t, t->t_default, &def))
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "%s: default \"%s\" does not parse", t->t_name,
                t->t_default); /* a bug in the table; the test suite catches it */
    const char *env = getenv(t->t_name);
    if (env == NULL || env[0] == '\0')
        return def;
    if (hmi_na_tunable_parse(t, env, &value))
        return value;
    if (t->t_kind == HMI_NA_TUNABLE_BOOL)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN, "%s=\"%s\" is not 0 or 1: using the default %s",
                t->t_name, env, t->t_default);
    else
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN,
                "%s=\"%s\" is not a number in %zu..%zu: using the default %s", t->t_name, env,
                t->t_min, t->t_max, t->t_default);
    return def;
}

size_t hmi_na_tunable_size(const struct hmi_na_tunable *t)
{
    return tunable_number(t);
}

bool hmi_na_tunable_bool(const struct hmi_na_tunable *t)
{
    return tunable_number(t) != 0;
}

const char *hmi_na_tunable_string(const struct hmi_na_tunable *t)
{
    const char *env = getenv(t->t_name);
    return env != NULL && env[0] != '\0' ? env : t->t_default;
}

void hmi_na_tunable_tables(hmi_na_tunable_table_fn fn, void *arg)
{
    if (!fn(arg, "na", hmi_na_tunables, HMI_NA_TUNE_COUNT))
        return;
    for (const struct hmi_na_ops *const *p = hmi_na_plugins; *p != NULL; p++)
        if ((*p)->ntunables > 0 && !fn(arg, (*p)->name, (*p)->tunables, (*p)->ntunables))
            return;
}

/* ---- hm_tunables_print ------------------------------------------------------- */

/* What `t` accepts, e.g. "a number 4096..16777216", "0 or 1", "text". */
static const char *tunable_accepts(const struct hmi_na_tunable *t, char *buf, size_t size)
{
    if (t->t_kind == HMI_NA_TUNABLE_BOOL)
        return "0 or 1";
    if (hmi_na_tunable_is_text(t))
        return "text";
    if (t->t_max == SIZE_MAX)
        snprintf(buf, size, "a number, %zu or more", t->t_min);
    else
        snprintf(buf, size, "a number %zu..%zu", t->t_min, t->t_max);
    return buf;
}

/* One variable: name, value in force and why, then its help. */
static void tunable_print(FILE *out, const struct hmi_na_tunable *t)
{
    char accepts[64];
    const char *env = getenv(t->t_name);
    const char *def = t->t_default != NULL ? t->t_default : "unset";
    size_t parsed;

    if (env == NULL || env[0] == '\0')
        fprintf(out, "    %-20s default %s", t->t_name, def);
    else if (t->t_kind == HMI_NA_TUNABLE_SECRET)
        fprintf(out, "    %-20s set (not shown); default %s", t->t_name, def);
    else if (!hmi_na_tunable_is_text(t) && !hmi_na_tunable_parse(t, env, &parsed))
        fprintf(out, "    %-20s set to \"%s\", not valid: default %s used", t->t_name, env, def);
    else
        fprintf(out, "    %-20s set to \"%s\"; default %s", t->t_name, env, def);
    fprintf(out, " (%s)\n      %s\n", tunable_accepts(t, accepts, sizeof(accepts)), t->t_help);
}

static bool tunable_print_table(void *arg, const char *owner, const struct hmi_na_tunable *table,
                                size_t count)
{
    FILE *out = arg;
    fprintf(out, "  %s:\n", owner);
    for (size_t i = 0; i < count; i++)
        tunable_print(out, &table[i]);
    return true;
}

hm_return_t hm_tunables_print(FILE *out)
{
    if (out == NULL)
        return HM_INVALID_ARG;
    fprintf(out, "network tunables (environment; unset or empty: the default):\n");
    hmi_na_tunable_tables(tunable_print_table, out);
    return ferror(out) ? HM_FAULT : HM_SUCCESS;
}
