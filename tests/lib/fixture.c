/* One server process and its address; see fixture.h. */
#include "fixture.h"

#include <stdio.h>

/* After the spawn: the ready line into srv->uri, or the server is killed. */
static int fx_await_ready(struct hm_test_server *srv)
{
    srv->uri[0] = '\0';
    if (hm_test_recv(&srv->child, srv->uri, sizeof(srv->uri), HM_TEST_READY_MS) == 0)
        return 0;
    fprintf(stderr, "fixture: server %ld sent no ready line (it exited, or %d ms passed)\n",
            (long)srv->child.pid, HM_TEST_READY_MS);
    hm_test_child_kill(&srv->child);
    return -1;
}

int hm_test_server_start(struct hm_test_server *srv, hm_test_fn_t fn, void *arg,
                         unsigned int life_s)
{
    if (hm_test_spawn_captured(&srv->child, fn, arg, life_s) != 0) {
        perror("fixture: fork");
        return -1;
    }
    return fx_await_ready(srv);
}

int hm_test_server_exec(struct hm_test_server *srv, char *const argv[], unsigned int life_s)
{
    if (hm_test_spawn_exec(&srv->child, argv, life_s) != 0) {
        perror("fixture: fork");
        return -1;
    }
    return fx_await_ready(srv);
}

int hm_test_server_stop(struct hm_test_server *srv, int timeout_s)
{
    return hm_test_wait(&srv->child, timeout_s);
}

int hm_test_server_stop_while(struct hm_test_server *srv, int timeout_s, hm_test_idle_fn_t idle,
                              void *arg)
{
    return hm_test_wait_while(&srv->child, timeout_s, idle, arg);
}

int hm_test_server_kill(struct hm_test_server *srv)
{
    return hm_test_child_kill(&srv->child);
}
