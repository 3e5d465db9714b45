/*
 * NA tunables: one table format for the NA layer and every plugin.
 *
 * A tunable is an environment variable HM_* with a default, a kind and,
 * for a number, bounds. Each owner keeps one const array of them: the NA
 * layer's shared ones (hmi_na_tunables, na_tunable.c) and each plugin's,
 * which its ops table points at (hmi_na_ops.tunables / ntunables). The
 * owner reads an entry with the lookup of its kind when it opens a class or
 * context; hm_tunables_print (hm_info) prints every table, and
 * tests/na/na_tunables*.c check every entry (its default parses; README
 * lists it).
 *
 * One rule for every value: unset or empty means the default; a value that
 * does not parse or is out of bounds is logged as a warning naming the
 * variable and the default is used instead. Never an error.
 */
#ifndef HM_NA_TUNABLE_H
#define HM_NA_TUNABLE_H

#include <stdbool.h>
#include <stddef.h>

enum hmi_na_tunable_kind {
    HMI_NA_TUNABLE_SIZE = 1, /* unsigned number (decimal, or 0x hex) in [t_min, t_max] */
    HMI_NA_TUNABLE_BOOL,     /* "0" or "1" */
    HMI_NA_TUNABLE_STRING,   /* any text */
    HMI_NA_TUNABLE_SECRET,   /* any text; hm_info says whether it is set, never its value */
};

struct hmi_na_tunable {
    const char *t_name;    /* the environment variable, "HM_..." */
    enum hmi_na_tunable_kind t_kind;
    const char *t_default; /* as a user would write it; NULL: unset (strings only) */
    size_t t_min, t_max;   /* SIZE only: accepted range, both included */
    const char *t_help;    /* one line for hm_info */
};

/* The NA layer's own tunables, shared by every plugin (na_tunable.c). */
enum hmi_na_tunable_id {
    HMI_NA_TUNE_SWRMA_JOBS_PEER, /* na_swrma.c */
    HMI_NA_TUNE_CMA,             /* na_cma.c */
    HMI_NA_TUNE_JOB_KEY,         /* na_hello.c */
    HMI_NA_TUNE_BULK_EAGER,      /* read by the bulk layer (bulk_rcache.c), per class */
    HMI_NA_TUNE_SWRMA_BUFS,      /* na_swrma.c */
    HMI_NA_TUNE_SWRMA_STALL_MS,  /* na_swrma.c */
    HMI_NA_TUNE_SWRMA_JOBS,      /* na_swrma.c */
    HMI_NA_TUNE_COUNT
};
extern const struct hmi_na_tunable hmi_na_tunables[HMI_NA_TUNE_COUNT];

/*
 * Parse `text` as a value of `t` (never the environment): true and
 * *value_out set when it is one (a BOOL gives 0 or 1); false otherwise.
 * Not for STRING entries (every text is one).
 */
bool hmi_na_tunable_parse(const struct hmi_na_tunable *t, const char *text, size_t *value_out);

/* The value in force, by the rule above. `t` must be of the kind named. */
size_t hmi_na_tunable_size(const struct hmi_na_tunable *t);
bool hmi_na_tunable_bool(const struct hmi_na_tunable *t);
/* The environment's text when set and non-empty, else t_default (may be NULL). */
const char *hmi_na_tunable_string(const struct hmi_na_tunable *t);

/* Whether `t` holds text (STRING or SECRET): read with hmi_na_tunable_string. */
static inline bool hmi_na_tunable_is_text(const struct hmi_na_tunable *t)
{
    return t->t_kind == HMI_NA_TUNABLE_STRING || t->t_kind == HMI_NA_TUNABLE_SECRET;
}

/*
 * Every table: the NA layer's, then each compiled-in plugin's (by its
 * name). Calls `fn` once per table; stops early when it returns false.
 */
typedef bool (*hmi_na_tunable_table_fn)(void *arg, const char *owner,
                                        const struct hmi_na_tunable *table, size_t count);
void hmi_na_tunable_tables(hmi_na_tunable_table_fn fn, void *arg);

#endif /* HM_NA_TUNABLE_H */
