/*
 * The scene of the tests that attack a TCP listener (test_hostile_listener,
 * test_hostile_sock*): a test server in a process of its own, a good client
 * process running RPCs through fresh lookups all along (so its hellos meet
 * the attack), attackers in processes of their own, and the server's
 * counters read by a probe client in a child (the test process itself never
 * opens a transport). The functions fail the running cmocka test.
 */
#ifndef HM_TESTS_HOSTILE_SCENE_H
#define HM_TESTS_HOSTILE_SCENE_H

#include <stdbool.h>
#include <stdint.h>

#include "hostile_test.h"

struct hostile_scene {
    const char *protocol;
    struct hm_test_server server; /* its process and URI */
    struct hostile_good good;
    uint16_t port;                /* the server URI's port */
    uint64_t rss_before_kb;       /* the server's VmRSS once the scene is set */
    struct core_server_stats before; /* its counters then */
    bool stop_server;             /* the probe asks the server to exit after reading */
};

/*
 * Start the server and the good client; read the counters and VmRSS before
 * any attack. `keep_good`: the good client opens one client before the
 * attack and keeps it (a peer the server knew before), instead of a fresh
 * lookup per batch.
 */
void hostile_scene_start(struct hostile_scene *s, const char *protocol, bool keep_good);
/*
 * The server's counters, read by a new client in a child (so the server
 * must still serve one). Filled: the listen_* counters, dropped_malformed,
 * marked_handled and requests_received; the others are 0.
 */
void hostile_scene_probe(struct hostile_scene *s, struct core_server_stats *st);
/* Run attack(arg) in a child of its own; it must exit 0 within 90 s. */
void hostile_scene_attack(hm_test_fn_t attack, void *arg);
/*
 * The promises every scene ends with: the good client's RPCs all
 * succeeded (at least a batch), the server's VmRSS grew by less than
 * HOSTILE_RSS_GROWTH_KB, a new client is served (the counters in `after`),
 * and the server exits cleanly when told to.
 */
void hostile_scene_end(struct hostile_scene *s, struct core_server_stats *after);

#endif
