/*
 * The NA tunables tables (na_tunable.h), all of them: the NA layer's and
 * every compiled-in plugin's. Every entry is well formed and its default
 * parses; a bad value falls back to the default with a warning naming the
 * variable; hm_tunables_print and hm_info list every variable.
 * Usage: na_tunables HM_INFO_PATH
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <hermod/core.h>

#include "na/na.h"
#include "na/na_swrma_int.h"
#include "util/log.h"

static const char *hm_info_path;

#define ALL_MAX 64u

/* Every entry of every table, flattened. */
struct all_tunables {
    const struct hmi_na_tunable *a_entry[ALL_MAX];
    size_t a_count;
};

static bool collect(void *arg, const char *owner, const struct hmi_na_tunable *table,
                    size_t count)
{
    struct all_tunables *all = arg;
    assert_non_null(owner);
    assert_true(count > 0);
    for (size_t i = 0; i < count; i++) {
        assert_true(all->a_count < ALL_MAX);
        all->a_entry[all->a_count++] = &table[i];
    }
    return true;
}

static void all_collect(struct all_tunables *all)
{
    all->a_count = 0;
    hmi_na_tunable_tables(collect, all);
    assert_true(all->a_count >= HMI_NA_TUNE_COUNT);
}

/* Run the lookup of `t`'s kind with stderr captured into `log` (NUL-terminated). */
static size_t lookup_captured(const struct hmi_na_tunable *t, char *log, size_t size)
{
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fileno(tmp), STDERR_FILENO) >= 0);
    size_t v = t->t_kind == HMI_NA_TUNABLE_BOOL ? hmi_na_tunable_bool(t) : hmi_na_tunable_size(t);
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    rewind(tmp);
    size_t n = fread(log, 1, size - 1, tmp);
    log[n] = '\0';
    fclose(tmp);
    return v;
}

/* Every entry: a unique HM_ name, help, a known kind, a default that parses in bounds. */
static void test_defaults_parse(void **state)
{
    (void)state;
    struct all_tunables all;
    all_collect(&all);
    for (size_t i = 0; i < all.a_count; i++) {
        const struct hmi_na_tunable *t = all.a_entry[i];
        assert_true(strncmp(t->t_name, "HM_", 3) == 0);
        assert_true(t->t_help != NULL && t->t_help[0] != '\0');
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(all.a_entry[j]->t_name, t->t_name);
        unsetenv(t->t_name);
        if (hmi_na_tunable_is_text(t)) {
            assert_ptr_equal(hmi_na_tunable_string(t), t->t_default);
            continue;
        }
        assert_true(t->t_kind == HMI_NA_TUNABLE_SIZE || t->t_kind == HMI_NA_TUNABLE_BOOL);
        assert_non_null(t->t_default);
        size_t def = SIZE_MAX;
        if (!hmi_na_tunable_parse(t, t->t_default, &def))
            fail_msg("%s: default \"%s\" does not parse", t->t_name, t->t_default);
        assert_true(t->t_min <= def && def <= t->t_max);
        char log[512];
        assert_int_equal(lookup_captured(t, log, sizeof(log)), def);
        assert_string_equal(log, ""); /* the default is no reason to warn */
    }
    /* The NA's defaults that code also names. */
    assert_int_equal(hmi_na_tunable_size(&hmi_na_tunables[HMI_NA_TUNE_SWRMA_JOBS_PEER]),
                     SWRMA_JOBS_PEER);
    assert_int_equal(hmi_na_tunable_size(&hmi_na_tunables[HMI_NA_TUNE_SWRMA_BUFS]), SWRMA_BUFS);
    assert_int_equal(hmi_na_tunable_size(&hmi_na_tunables[HMI_NA_TUNE_SWRMA_JOBS]), SWRMA_JOBS);
    assert_true(hmi_na_tunable_bool(&hmi_na_tunables[HMI_NA_TUNE_CMA]));
}

/* `text` in the environment: the default is used and the warning names the variable. */
static void check_falls_back(const struct hmi_na_tunable *t, const char *text)
{
    size_t def = 0;
    assert_true(hmi_na_tunable_parse(t, t->t_default, &def));
    assert_int_equal(setenv(t->t_name, text, 1), 0);
    char log[512];
    size_t got = lookup_captured(t, log, sizeof(log));
    if (got != def)
        fail_msg("%s=\"%s\" gave %zu, not the default %zu", t->t_name, text, got, def);
    if (strstr(log, t->t_name) == NULL || strstr(log, "warn") == NULL)
        fail_msg("%s=\"%s\": no warning naming it: \"%s\"", t->t_name, text, log);
    unsetenv(t->t_name);
}

static void test_bad_values_fall_back(void **state)
{
    (void)state;
    static const char *const bad[] = {"lots", "-1", " 5", "12abc", "0x", ""}; /* "" ends the list */
    struct all_tunables all;
    all_collect(&all);
    for (size_t i = 0; i < all.a_count; i++) {
        const struct hmi_na_tunable *t = all.a_entry[i];
        if (hmi_na_tunable_is_text(t))
            continue;
        for (size_t b = 0; bad[b][0] != '\0'; b++)
            check_falls_back(t, bad[b]);
        char text[32];
        if (t->t_min > 0) {
            snprintf(text, sizeof(text), "%zu", t->t_min - 1);
            check_falls_back(t, text);
        }
        if (t->t_max < SIZE_MAX) {
            snprintf(text, sizeof(text), "%zu", t->t_max + 1);
            check_falls_back(t, text);
        }
        check_falls_back(t, "99999999999999999999999"); /* past 64 bits */
        /* A good value is taken, an empty one is the default. */
        snprintf(text, sizeof(text), "%zu", t->t_max);
        setenv(t->t_name, text, 1);
        assert_int_equal(t->t_kind == HMI_NA_TUNABLE_BOOL ? hmi_na_tunable_bool(t)
                                                           : hmi_na_tunable_size(t),
                         t->t_max);
        setenv(t->t_name, "", 1);
        size_t def = 0;
        assert_true(hmi_na_tunable_parse(t, t->t_default, &def));
        assert_int_equal(hmi_na_tunable_size(t), def);
        unsetenv(t->t_name);
    }
}

static void test_strings(void **state)
{
    (void)state;
    const struct hmi_na_tunable *key = &hmi_na_tunables[HMI_NA_TUNE_JOB_KEY];
    setenv(key->t_name, "job-a", 1);
    assert_string_equal(hmi_na_tunable_string(key), "job-a");
    setenv(key->t_name, "", 1);
    assert_null(hmi_na_tunable_string(key));
    unsetenv(key->t_name);
}

/* hm_tunables_print: every variable, a set value shown, a secret one not. */
static void test_print_lists_every_variable(void **state)
{
    (void)state;
    struct all_tunables all;
    all_collect(&all);
    setenv("HM_SWRMA_JOBS_PEER", "123", 1);
    setenv("HM_JOB_KEY", "not-for-stdout", 1);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    assert_int_equal(hm_tunables_print(out), HM_SUCCESS);
    assert_int_equal(fclose(out), 0);
    unsetenv("HM_SWRMA_JOBS_PEER");
    unsetenv("HM_JOB_KEY");
    for (size_t i = 0; i < all.a_count; i++)
        if (strstr(text, all.a_entry[i]->t_name) == NULL)
            fail_msg("hm_tunables_print does not list %s", all.a_entry[i]->t_name);
    assert_non_null(strstr(text, "\"123\""));
    assert_null(strstr(text, "not-for-stdout"));
    free(text);
}

/* hm_info (the installed tool) prints every table. */
static void test_hm_info_lists_every_variable(void **state)
{
    (void)state;
    struct all_tunables all;
    all_collect(&all);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "'%s' 2>/dev/null", hm_info_path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof(text) - 1, p);
    text[n] = '\0';
    int status = pclose(p);
    assert_true(status != -1);
    for (size_t i = 0; i < all.a_count; i++)
        if (strstr(text, all.a_entry[i]->t_name) == NULL)
            fail_msg("hm_info does not list %s", all.a_entry[i]->t_name);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s HM_INFO_PATH\n", argv[0]);
        return 2;
    }
    hm_info_path = argv[1];
    hmi_log_set_level(HMI_SUBSYS_NA, HMI_LOG_WARN); /* the warnings are checked */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_parse),
        cmocka_unit_test(test_bad_values_fall_back),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_print_lists_every_variable),
        cmocka_unit_test(test_hm_info_lists_every_variable),
    };
    return cmocka_run_group_tests_name("na_tunables", tests, NULL, NULL);
}
