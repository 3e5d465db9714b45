/*
 * README's environment tables name every variable of every NA tunables
 * table (the NA layer's and each compiled-in plugin's), each as a row
 * "| `HM_NAME` |". Fails for a variable a table has and README lacks.
 * Usage: na_tunables_readme README.md
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "na/na.h"

static const char *readme_path;

struct readme_check {
    const char *c_text; /* the whole README */
    size_t c_checked;
};

/* Every variable of one table has its row. */
static bool check_table(void *arg, const char *owner, const struct hmi_na_tunable *table,
                        size_t count)
{
    struct readme_check *c = arg;
    for (size_t i = 0; i < count; i++) {
        char row[128];
        snprintf(row, sizeof(row), "\n| `%s` |", table[i].t_name);
        if (strstr(c->c_text, row) == NULL)
            fail_msg("README.md has no row \"| `%s` |\" (%s's tunable): add it to the "
                     "environment table",
                     table[i].t_name, owner);
        c->c_checked++;
    }
    return true;
}

static void test_readme_lists_every_variable(void **state)
{
    (void)state;
    FILE *f = fopen(readme_path, "r");
    assert_non_null(f);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    assert_true(n < sizeof(text) - 1); /* the whole file */
    text[n] = '\0';
    fclose(f);
    struct readme_check c = {.c_text = text};
    hmi_na_tunable_tables(check_table, &c);
    assert_true(c.c_checked >= HMI_NA_TUNE_COUNT);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s README.md\n", argv[0]);
        return 2;
    }
    readme_path = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readme_lists_every_variable),
    };
    return cmocka_run_group_tests_name("na_tunables_readme", tests, NULL, NULL);
}
