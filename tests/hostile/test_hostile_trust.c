/*
 * Promise checked: a class that will face untrusted peers never opens a
 * transport whose library a peer's bytes can abort. hm_class_info_t.peers
 * says, per protocol, whether the transport survived tests/hostile ("any:")
 * or must face trusted peers only ("trusted only: why"); with untrusted_peers
 * (option or HM_UNTRUSTED_PEERS=1) hm_class_create refuses the latter with
 * HM_NOT_SUPPORTED and says why, and opens the former.
 *
 * ucx+tcp must say "trusted only": UCX's own tcp port asserts on a framed
 * packet with a bad length (UCX 1.13 tcp_ep.c), which Hermod cannot front.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <hermod.h>

static const char *uri;

static bool trusted_only(void)
{
    hm_class_t *cls;
    hm_class_info_t info = {.size = sizeof(info)};
    assert_int_equal(hm_class_create(uri, NULL, &cls), HM_SUCCESS);
    assert_int_equal(hm_class_get_info(cls, &info), HM_SUCCESS);
    assert_non_null(info.peers);
    bool only = strncmp(info.peers, "trusted only: ", 14) == 0;
    assert_true(only || strncmp(info.peers, "any: ", 5) == 0);
    assert_int_equal(hm_class_destroy(cls), HM_SUCCESS);
    return only;
}

/* Create with `opts` (may be NULL) and check the outcome the policy wants. */
static void expect_create(const hm_class_opts_t *opts, bool refused)
{
    hm_class_t *cls = NULL;
    hm_return_t ret = hm_class_create(uri, opts, &cls);
    if (refused) {
        assert_int_equal(ret, HM_NOT_SUPPORTED);
        assert_null(cls);
        assert_non_null(strstr(hm_error_detail(), "untrusted peers"));
        return;
    }
    assert_int_equal(ret, HM_SUCCESS);
    assert_int_equal(hm_class_destroy(cls), HM_SUCCESS);
}

static void test_known_protocols(void **state)
{
    (void)state;
    bool only = trusted_only();
    if (strncmp(uri, "ucx+tcp", 7) == 0)
        assert_true(only);
    else if (strncmp(uri, "ofi+tcp", 7) == 0 || strstr(uri, "+shm") != NULL)
        assert_false(only); /* tests/hostile runs every attack on these */
}

static void test_option(void **state)
{
    (void)state;
    bool only = trusted_only();
    hm_class_opts_t opts = {.field_mask = HM_CLASS_OPT_UNTRUSTED_PEERS, .untrusted_peers = true};
    expect_create(&opts, only);
    opts.untrusted_peers = false;
    expect_create(&opts, false);
}

static void test_environment(void **state)
{
    (void)state;
    bool only = trusted_only();
    assert_int_equal(setenv("HM_UNTRUSTED_PEERS", "1", 1), 0);
    expect_create(NULL, only);
    /* the option wins over the environment */
    hm_class_opts_t opts = {.field_mask = HM_CLASS_OPT_UNTRUSTED_PEERS, .untrusted_peers = false};
    expect_create(&opts, false);
    assert_int_equal(setenv("HM_UNTRUSTED_PEERS", "0", 1), 0);
    expect_create(NULL, false);
    assert_int_equal(unsetenv("HM_UNTRUSTED_PEERS"), 0);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PROTOCOL_URI\n", argv[0]);
        return 2;
    }
    uri = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_protocols),
        cmocka_unit_test(test_option),
        cmocka_unit_test(test_environment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
