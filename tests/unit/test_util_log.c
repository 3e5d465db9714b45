/*
 * Logging: hm_error_detail with logging off, line format, environment
 * parsing (each case in a forked child, since the environment is read once
 * per process), the subsystem filter, and the rate limit of lines a peer
 * can cause (hmi_log_limited).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <hermod/types.h>

#include "util/log.h"

/* stderr capture: fd 2 is pointed at a temporary file between begin and end. */
struct capture {
    FILE *file;
    int saved_fd;
};

static void capture_begin(struct capture *c)
{
    c->file = tmpfile();
    assert_non_null(c->file);
    c->saved_fd = dup(STDERR_FILENO);
    assert_true(c->saved_fd >= 0);
    assert_true(dup2(fileno(c->file), STDERR_FILENO) >= 0);
}

/* Restore stderr and return what was written in between (in `buf`). */
static const char *capture_end(struct capture *c, char *buf, size_t size)
{
    assert_true(dup2(c->saved_fd, STDERR_FILENO) >= 0);
    close(c->saved_fd);
    rewind(c->file);
    size_t n = fread(buf, 1, size - 1, c->file);
    buf[n] = '\0';
    fclose(c->file);
    return buf;
}

static void test_error_detail_when_off(void **state)
{
    char out[256];
    struct capture c;
    assert_string_equal(hm_error_detail(), "");
    assert_false(hmi_log_enabled(HMI_SUBSYS_NA, HMI_LOG_ERROR));
    capture_begin(&c);
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "na: cannot open \"%s\": %d", "shm", 19);
    capture_end(&c, out, sizeof(out));
    assert_string_equal(out, ""); /* logging is off: nothing on stderr */
    assert_string_equal(hm_error_detail(), "na: cannot open \"shm\": 19");
}

static void test_warn_does_not_set_detail(void **state)
{
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "first");
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN, "a warning");
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_DEBUG, "a debug line");
    assert_string_equal(hm_error_detail(), "first");
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "second");
    assert_string_equal(hm_error_detail(), "second");
}

static void *detail_in_thread(void *arg)
{
    const char **seen = arg;
    seen[0] = hm_error_detail()[0] == '\0' ? "empty" : "set";
    hmi_log(HMI_SUBSYS_UTIL, HMI_LOG_ERROR, "thread error");
    seen[1] = strcmp(hm_error_detail(), "thread error") == 0 ? "own" : "other";
    return NULL;
}

static void test_detail_is_per_thread(void **state)
{
    const char *seen[2] = {NULL, NULL};
    pthread_t t;
    hmi_log(HMI_SUBSYS_UTIL, HMI_LOG_ERROR, "main error");
    assert_int_equal(pthread_create(&t, NULL, detail_in_thread, seen), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_string_equal(seen[0], "empty");
    assert_string_equal(seen[1], "own");
    assert_string_equal(hm_error_detail(), "main error");
}

static void test_line_format_and_filter(void **state)
{
    char out[512];
    struct capture c;
    hmi_log_set_level(HMI_SUBSYS_NA, HMI_LOG_WARN);
    capture_begin(&c);
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN, "hello %d", 42);
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_INFO, "too verbose");
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN, "core is off");
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "bad %s", "thing");
    capture_end(&c, out, sizeof(out));
    hmi_log_set_level(HMI_SUBSYS_NA, HMI_LOG_NONE);
    assert_string_equal(out, "hm: na: warn: hello 42\nhm: na: error: bad thing\n");
    assert_string_equal(hm_error_detail(), "bad thing");
}

static void test_long_message_truncated(void **state)
{
    static char big[3000], out[4000];
    struct capture c;
    memset(big, 'x', sizeof(big) - 1);
    hmi_log_set_level(HMI_SUBSYS_PROC, HMI_LOG_ERROR);
    capture_begin(&c);
    hmi_log(HMI_SUBSYS_PROC, HMI_LOG_ERROR, "%s", big);
    capture_end(&c, out, sizeof(out));
    hmi_log_set_level(HMI_SUBSYS_PROC, HMI_LOG_NONE);
    size_t len = strlen(out);
    assert_true(len > 256 && len < sizeof(big));
    assert_int_equal(out[len - 1], '\n');
    assert_non_null(strstr(out, "hm: proc: error: xxx"));
    size_t detail = strlen(hm_error_detail());
    assert_true(detail >= 255 && detail < sizeof(big));
}

/*
 * In a child: set HM_LOG / HM_LOG_SUBSYS (NULL = unset), read them, and
 * exit 0 if each subsystem's level matches `expect`, else 1.
 */
static void check_env(const char *level, const char *subsys,
                      const hmi_log_level_t expect[HMI_SUBSYS_COUNT])
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int bad = (level ? setenv("HM_LOG", level, 1) : unsetenv("HM_LOG")) != 0;
        bad |= (subsys ? setenv("HM_LOG_SUBSYS", subsys, 1) : unsetenv("HM_LOG_SUBSYS")) != 0;
        int devnull = freopen("/dev/null", "w", stderr) == NULL; /* complaints */
        hmi_log_init();
        for (int i = 0; i < HMI_SUBSYS_COUNT; i++)
            bad |= hmi_log_levels[i] != expect[i];
        _exit(bad || devnull ? 1 : 0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

#define N HMI_LOG_NONE
static void test_levels_from_env(void **state)
{
    check_env(NULL, NULL, (hmi_log_level_t[]){N, N, N, N, N, N});
    check_env("", "na", (hmi_log_level_t[]){N, N, N, N, N, N});
    check_env("error", NULL, (hmi_log_level_t[]){1, 1, 1, 1, 1, 1});
    check_env("WARN", NULL, (hmi_log_level_t[]){2, 2, 2, 2, 2, 2});
    check_env("warning", "", (hmi_log_level_t[]){2, 2, 2, 2, 2, 2});
    check_env("info", NULL, (hmi_log_level_t[]){3, 3, 3, 3, 3, 3});
    check_env("debug", NULL, (hmi_log_level_t[]){4, 4, 4, 4, 4, 4});
    check_env("none", NULL, (hmi_log_level_t[]){N, N, N, N, N, N});
    check_env("loud", NULL, (hmi_log_level_t[]){N, N, N, N, N, N});
}

static void test_subsys_from_env(void **state)
{
    /* order: util, na, proc, core, bulk, group */
    check_env("debug", "na,core", (hmi_log_level_t[]){N, 4, N, 4, N, N});
    check_env("warn", "group", (hmi_log_level_t[]){N, N, N, N, N, 2});
    check_env("info", "util,,PROC,bulk", (hmi_log_level_t[]){3, N, 3, N, 3, N});
    check_env("error", "bogus,na", (hmi_log_level_t[]){N, 1, N, N, N, N});
    check_env("error", "bogus", (hmi_log_level_t[]){1, 1, 1, 1, 1, 1});
    check_env("error", "na,core,proc,util,bulk,group", (hmi_log_level_t[]){1, 1, 1, 1, 1, 1});
}
#undef N

/* Environment parsing, then filtering, seen from the child's stderr. */
static void test_subsys_filter_output(void **state)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], STDERR_FILENO);
        setenv("HM_LOG", "info", 1);
        setenv("HM_LOG_SUBSYS", "core", 1);
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "na error");
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_DEBUG, "core debug");
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_INFO, "core info");
        _exit(0);
    }
    close(fds[1]);
    char out[256];
    size_t n = 0;
    ssize_t r;
    while ((r = read(fds[0], out + n, sizeof(out) - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = '\0';
    close(fds[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_string_equal(out, "hm: core: info: core info\n");
}

/* The limiter's decisions over explicit seconds: 10 a second, then a count. */
static void test_limit_admit(void **state)
{
    struct hmi_log_limit limit = {0};
    uint32_t suppressed = 99;
    for (unsigned i = 0; i < HMI_LOG_LIMIT_LINES; i++) {
        assert_true(hmi_log_limit_admit(&limit, 5, &suppressed));
        assert_int_equal(suppressed, 0);
    }
    for (unsigned i = 0; i < 15; i++)
        assert_false(hmi_log_limit_admit(&limit, 5, &suppressed));
    assert_true(hmi_log_limit_admit(&limit, 6, &suppressed)); /* a new second */
    assert_int_equal(suppressed, 15);
    assert_true(hmi_log_limit_admit(&limit, 6, &suppressed));
    assert_int_equal(suppressed, 0); /* reported once */
    assert_true(hmi_log_limit_admit(&limit, 0, &suppressed)); /* second 0 is a window too */
}

static size_t count_lines(const char *text, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

/*
 * 1000 peer-caused lines from one call site write at most two windows'
 * worth (the calls may straddle a second), and a suppressed error line
 * still sets hm_error_detail.
 */
static void test_limited_lines(void **state)
{
    static char out[64 * 1024];
    static struct hmi_log_limit limit;
    struct capture c;
    hmi_log_set_level(HMI_SUBSYS_CORE, HMI_LOG_WARN);
    capture_begin(&c);
    for (int i = 0; i < 1000; i++)
        hmi_log_limited(&limit, HMI_SUBSYS_CORE, HMI_LOG_WARN, "dropped message %d", i);
    hmi_log_limited(&limit, HMI_SUBSYS_CORE, HMI_LOG_ERROR, "the last one");
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN, "an unlimited line");
    capture_end(&c, out, sizeof(out));
    hmi_log_set_level(HMI_SUBSYS_CORE, HMI_LOG_NONE);
    size_t lines = count_lines(out, "hm: core: warn: dropped message ");
    assert_true(lines >= HMI_LOG_LIMIT_LINES && lines <= 2 * HMI_LOG_LIMIT_LINES);
    assert_non_null(strstr(out, "hm: core: warn: dropped message 0\n"));
    assert_non_null(strstr(out, "hm: core: warn: an unlimited line\n"));
    assert_string_equal(hm_error_detail(), "the last one");
}

int main(void)
{
    /* The process under test starts with logging off whatever the caller's shell says. */
    unsetenv("HM_LOG");
    unsetenv("HM_LOG_SUBSYS");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels_from_env),
        cmocka_unit_test(test_subsys_from_env),
        cmocka_unit_test(test_subsys_filter_output),
        cmocka_unit_test(test_error_detail_when_off),
        cmocka_unit_test(test_warn_does_not_set_detail),
        cmocka_unit_test(test_detail_is_per_thread),
        cmocka_unit_test(test_line_format_and_filter),
        cmocka_unit_test(test_long_message_truncated),
        cmocka_unit_test(test_limit_admit),
        cmocka_unit_test(test_limited_lines),
    };
    return cmocka_run_group_tests_name("util_log", tests, NULL, NULL);
}
