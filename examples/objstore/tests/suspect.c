/*
 * The client's reads after timeouts (objstore_client.c, note_failure): a
 * rank whose RPC timed out is read last for a while, never given up for
 * good. With r=2 and a key K on ranks 1 and 2 (primary 1):
 *  1. rank 1 stopped (SIGSTOP): a get of K times out on rank 1, then reads
 *     rank 2;
 *  2. rank 1 resumed, rank 2 stopped: a get of K times out on rank 2, then
 *     reads rank 1, which timed out a moment ago (until 2026-11-27 the
 *     client gave rank 1 up for good there, and this get failed with both
 *     replicas taken for dead);
 *  3. rank 2 resumed: a get of K succeeds.
 *
 * Usage: objstore_suspect GROUP-FILE URI PID-OF-RANK-1 PID-OF-RANK-2
 * Exit 0 when every step holds. The caller resumes both ranks (SIGCONT)
 * whatever happens; this program does too on its way out.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../objstore_client.h"

#define SUSPECT_TIMEOUT_MS 2000u /* each RPC's deadline */
#define SUSPECT_VALUE "the value of a key on ranks 1 and 2"

static pid_t g_rank1, g_rank2;

static void resume_both(void)
{
    kill(g_rank1, SIGCONT);
    kill(g_rank2, SIGCONT);
}

/* Stop `pid` and wait until it is stopped: kill() returns before the
 * process is, and a request sent meanwhile may still be answered. */
static int stop_rank(pid_t pid)
{
    if (kill(pid, SIGSTOP) != 0)
        return -1;
    char path[64], stat[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    for (int i = 0; i < 5000; i++) {
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(stat, 1, sizeof(stat) - 1, f) : 0;
        if (f)
            fclose(f);
        stat[n] = '\0';
        const char *end = strrchr(stat, ')'); /* the state follows the name */
        if (end != NULL && end[1] == ' ' && end[2] == 'T')
            return 0;
        usleep(1000);
    }
    fprintf(stderr, "pid %d did not stop\n", (int)pid);
    return -1;
}

/* A key whose replicas are ranks 1 and 2, in that order. */
static int find_key(objc_t *c, char *key, size_t size)
{
    for (unsigned int i = 0; i < 100000; i++) {
        hm_rank_t ranks[2];
        snprintf(key, size, "suspect-%u", i);
        if (objc_placement(c, key, ranks, 2) == 2 && ranks[0] == 1 && ranks[1] == 2)
            return 0;
    }
    return -1;
}

/* Get `key`: it must succeed with SUSPECT_VALUE. */
static int check_get(objc_t *c, const char *key, const char *step)
{
    void *data = NULL;
    struct objc_result res = objc_get(c, key, &data);
    bool ok = res.ret == HM_SUCCESS && res.status == OBJ_OK &&
              res.size == sizeof(SUSPECT_VALUE) && memcmp(data, SUSPECT_VALUE, res.size) == 0;
    printf("%s: get %s: %s (rank %u)\n", step, key, objc_result_str(&res), (unsigned)res.rank);
    free(data);
    return ok ? 0 : -1;
}

static int run(objc_t *c)
{
    char key[64];
    if (find_key(c, key, sizeof(key)) != 0) {
        fprintf(stderr, "no key placed on ranks 1 and 2\n");
        return -1;
    }
    struct objc_result put = objc_put(c, key, SUSPECT_VALUE, sizeof(SUSPECT_VALUE));
    if (put.ret != HM_SUCCESS || put.status != OBJ_OK) {
        fprintf(stderr, "put %s: %s\n", key, objc_result_str(&put));
        return -1;
    }
    if (stop_rank(g_rank1) != 0 || check_get(c, key, "rank 1 stopped") != 0)
        return -1;
    if (kill(g_rank1, SIGCONT) != 0 || stop_rank(g_rank2) != 0 ||
        check_get(c, key, "rank 1 back, rank 2 stopped") != 0)
        return -1;
    if (kill(g_rank2, SIGCONT) != 0 || check_get(c, key, "rank 2 back") != 0)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s GROUP-FILE URI PID-OF-RANK-1 PID-OF-RANK-2\n", argv[0]);
        return 2;
    }
    g_rank1 = (pid_t)strtol(argv[3], NULL, 10);
    g_rank2 = (pid_t)strtol(argv[4], NULL, 10);
    if (g_rank1 <= 0 || g_rank2 <= 0) {
        fprintf(stderr, "bad pids\n");
        return 2;
    }
    struct objc_opts opts = {.group_file = argv[1], .uri = argv[2], .replicas = 2,
                             .timeout_ms = SUSPECT_TIMEOUT_MS};
    objc_t *c;
    hm_return_t ret = objc_open(&opts, &c);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "objc_open: %s\n", hm_strerror(ret));
        return 1;
    }
    int rc = run(c);
    resume_both();
    objc_close(c);
    return rc == 0 ? 0 : 1;
}
