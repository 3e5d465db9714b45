/*
 * hm_stats_print prints every counter of hm_stats_t (issue 17: it printed
 * 20 of 24 then): each counter gets a distinct value, and each value must
 * come out once, on its own "prefix name value" line; no name twice. A
 * caller's size bounds what is printed, and one below the first version
 * prints nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <hermod.h>

#define COUNTERS ((sizeof(hm_stats_t) - offsetof(hm_stats_t, requests_sent)) / sizeof(uint64_t))

/* Counter i (0-based, in struct order) gets 1000 + i. */
static hm_stats_t stats_numbered(void)
{
    hm_stats_t st = {.size = sizeof(st)};
    for (size_t i = 0; i < COUNTERS; i++) {
        uint64_t value = 1000 + i;
        memcpy((char *)&st + offsetof(hm_stats_t, requests_sent) + i * sizeof(uint64_t), &value,
               sizeof(value));
    }
    return st;
}

/* What hm_stats_print wrote, as a NUL-terminated string (free it). */
static char *print_to_string(const hm_stats_t *st, const char *prefix)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    hm_stats_print(st, prefix, out);
    assert_int_equal(fclose(out), 0);
    return text;
}

/* Parse "pfx name value" lines; marks seen[value - 1000]; returns the line count. */
static size_t check_lines(char *text, bool *seen, char names[][64])
{
    size_t lines = 0;
    for (char *save, *line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        char name[64];
        unsigned long long value;
        assert_int_equal(sscanf(line, "s. %63s %llu", name, &value), 2);
        assert_true(value >= 1000 && value < 1000 + COUNTERS);
        assert_false(seen[value - 1000]); /* each counter once */
        seen[value - 1000] = true;
        for (size_t i = 0; i < lines; i++)
            assert_string_not_equal(names[i], name); /* no name twice */
        snprintf(names[lines], 64, "%s", name);
        lines++;
    }
    return lines;
}

static void test_every_counter_printed(void **state)
{
    (void)state;
    hm_stats_t st = stats_numbered();
    char *text = print_to_string(&st, "s. ");
    bool seen[COUNTERS] = {false};
    char names[COUNTERS][64];
    assert_int_equal(check_lines(text, seen, names), COUNTERS);
    for (size_t i = 0; i < COUNTERS; i++)
        assert_true(seen[i]);
    free(text);
    /* The four it used to leave out, by name. */
    text = print_to_string(&st, "s. ");
    assert_non_null(strstr(text, "s. credit_waits 1020\n"));
    assert_non_null(strstr(text, "s. credit_queue_peak 1021\n"));
    assert_non_null(strstr(text, "s. submissions_queued 1022\n"));
    assert_non_null(strstr(text, "s. wakeups 1023\n"));
    free(text);
}

static void test_size_bounds_printing(void **state)
{
    (void)state;
    hm_stats_t st = stats_numbered();
    st.size = HM_STATS_SIZE_V1 - 1; /* below the first version: nothing */
    char *text = print_to_string(&st, "s. ");
    assert_string_equal(text, "");
    free(text);
    st.size = 0;
    text = print_to_string(&st, "s. ");
    assert_string_equal(text, "");
    free(text);
    st.size = HM_STATS_SIZE_V1;
    text = print_to_string(&st, "s. ");
    assert_non_null(strstr(text, "s. pool_trimmed "));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_counter_printed),
        cmocka_unit_test(test_size_bounds_printing),
    };
    return cmocka_run_group_tests_name("core_stats_print", tests, NULL, NULL);
}
