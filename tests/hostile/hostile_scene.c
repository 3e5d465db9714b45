/* The scene of the listener tests (hostile_scene.h). */
#include "hostile_scene.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hostile_wire.h"

#define PROBE_FIELDS 8

/* The probe's body: a fresh client reads the server's counters and prints them. */
static int probe_main(void *arg)
{
    struct hostile_scene *s = arg;
    struct core_client cli;
    memset(&cli, 0, sizeof(cli));
    struct core_server_stats st;
    if (core_client_open(&cli, s->protocol, s->server.uri) != HM_SUCCESS ||
        core_server_stats(&cli, &st) != HM_SUCCESS ||
        (s->stop_server && core_call(&cli, cli.ids.shutdown, NULL, NULL, 5000) != HM_SUCCESS)) {
        core_client_close(&cli);
        return 1;
    }
    core_client_close(&cli);
    char line[256];
    snprintf(line, sizeof(line), "%llu %llu %llu %llu %llu %llu %llu %llu",
             (unsigned long long)st.listen_accepted,
             (unsigned long long)st.listen_refused_frame,
             (unsigned long long)st.listen_refused_key,
             (unsigned long long)st.listen_refused_slow,
             (unsigned long long)st.listen_refused_busy,
             (unsigned long long)st.dropped_malformed,
             (unsigned long long)st.marked_handled,
             (unsigned long long)st.requests_received);
    hm_test_ready(line);
    return 0;
}

void hostile_scene_probe(struct hostile_scene *s, struct core_server_stats *st)
{
    struct hm_test_child probe;
    char line[256];
    unsigned long long v[PROBE_FIELDS];
    assert_int_equal(hm_test_spawn(&probe, probe_main, s), 0);
    assert_int_equal(hm_test_recv(&probe, line, sizeof(line), 30000), 0);
    assert_int_equal(hm_test_wait(&probe, 20), 0);
    assert_int_equal(sscanf(line, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                            &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]),
                     PROBE_FIELDS);
    memset(st, 0, sizeof(*st));
    st->listen_accepted = v[0];
    st->listen_refused_frame = v[1];
    st->listen_refused_key = v[2];
    st->listen_refused_slow = v[3];
    st->listen_refused_busy = v[4];
    st->dropped_malformed = v[5];
    st->marked_handled = v[6];
    st->requests_received = v[7];
}

void hostile_scene_start(struct hostile_scene *s, const char *protocol, bool keep_good)
{
    memset(s, 0, sizeof(*s));
    s->protocol = protocol;
    assert_int_equal(core_server_start(&s->server, protocol, 200), 0);
    s->port = hostile_uri_port(s->server.uri);
    assert_true(s->port != 0);
    if (keep_good)
        assert_int_equal(hostile_good_start_kept(&s->good, protocol, s->server.uri), 0);
    else
        assert_int_equal(hostile_good_start(&s->good, protocol, s->server.uri), 0);
    hostile_scene_probe(s, &s->before);
    s->rss_before_kb = hostile_rss_kb(s->server.child.pid);
    assert_true(s->rss_before_kb > 0);
}

void hostile_scene_attack(hm_test_fn_t attack, void *arg)
{
    struct hm_test_child attacker;
    assert_int_equal(hm_test_spawn(&attacker, attack, arg), 0);
    assert_int_equal(hm_test_wait(&attacker, 90), 0);
}

void hostile_scene_end(struct hostile_scene *s, struct core_server_stats *after)
{
    uint64_t rss_after_kb = hostile_rss_kb(s->server.child.pid);
    unsigned long ok = 0, failed = 0;
    assert_int_equal(hostile_good_stop(&s->good, &ok, &failed), 0);
    printf("# good client: %lu RPCs ok, %lu failed; server RSS %llu -> %llu KiB\n", ok, failed,
           (unsigned long long)s->rss_before_kb, (unsigned long long)rss_after_kb);
    assert_int_equal(failed, 0);
    assert_true(ok >= HOSTILE_GOOD_BATCH);
    assert_true(rss_after_kb > 0); /* alive */
    assert_true(rss_after_kb < s->rss_before_kb + HOSTILE_RSS_GROWTH_KB);
    s->stop_server = true;
    hostile_scene_probe(s, after); /* still serving a new client, then told to exit */
    /* A clean exit: a sanitizer's report in the server fails the test. */
    assert_int_equal(hm_test_server_stop(&s->server, 30), 0);
}
