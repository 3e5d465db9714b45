/*
 * dying_servers_client URI TIMEOUT_MS: one long-lived client for
 * dying_servers.sh. Each line of stdin names a server (an echo_server,
 * which may be dying), optionally followed by a space and a deadline of
 * its own; the client looks it up, calls the echo RPC with that deadline
 * (else TIMEOUT_MS) and prints one line per server, "result: " and
 * the call's status (hm_strerror), or "wrong echo". At the end of stdin it closes its context
 * and class and exits 0 if both close cleanly.
 *
 * What the test checks with it: a server that dies at any point of a
 * client's first contact (lookup, connection, RPC) costs the client that
 * call, with an error within its deadline, and nothing else.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echo.h"

#define TEXT "are you there"

/* One server: its lookup and one call; the status to print. */
static const char *call_one(hm_context_t *ctx, hm_id_t id, const char *uri,
                            unsigned int timeout_ms)
{
    hm_addr_t *server = NULL;
    hm_return_t ret = hm_addr_lookup(ctx, uri, &server);
    if (ret != HM_SUCCESS)
        return hm_strerror(ret);
    hm_handle_t *handle = NULL;
    ret = hm_handle_create(ctx, server, id, &handle);
    if (ret == HM_SUCCESS) {
        struct echo_msg in = {.text = TEXT}, out = {.text = NULL};
        ret = hm_call(handle, &in, &out, timeout_ms);
        if (ret == HM_SUCCESS) {
            bool same = out.text != NULL && strcmp(out.text, TEXT) == 0;
            ret = hm_free_output(handle, &out);
            if (ret == HM_SUCCESS && !same) {
                hm_handle_destroy(handle);
                hm_addr_free(server);
                return "wrong echo";
            }
        }
        hm_handle_destroy(handle);
    }
    hm_addr_free(server);
    return hm_strerror(ret);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s URI TIMEOUT_MS\n", argv[0]);
        return EXIT_FAILURE;
    }
    unsigned int timeout_ms = (unsigned int)strtoul(argv[2], NULL, 10);
    hm_class_t *cls = NULL;
    hm_context_t *ctx = NULL;
    hm_id_t id;
    hm_return_t ret = hm_class_create(argv[1], NULL, &cls);
    if (ret == HM_SUCCESS)
        ret = hm_register(cls, ECHO_RPC_NAME, echo_msg_proc, echo_msg_proc, NULL, &id);
    if (ret == HM_SUCCESS)
        ret = hm_context_create(cls, NULL, &ctx);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "dying_servers_client: cannot open %s: %s\n", argv[1],
                hm_strerror(ret));
        if (cls != NULL)
            (void)hm_class_destroy(cls);
        return EXIT_FAILURE;
    }
    char line[1024];
    while (fgets(line, sizeof(line), stdin) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        /* "URI [TIMEOUT_MS]": a line may set its own deadline (URIs hold no space). */
        unsigned int line_timeout_ms = timeout_ms;
        char *space = strchr(line, ' ');
        if (space != NULL) {
            *space = '\0';
            line_timeout_ms = (unsigned int)strtoul(space + 1, NULL, 10);
        }
        /* Tagged: a transport library may log to stdout too (UCX does). */
        printf("result: %s\n", call_one(ctx, id, line, line_timeout_ms));
        fflush(stdout);
    }
    int status = EXIT_SUCCESS;
    ret = hm_context_destroy(ctx);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "dying_servers_client: hm_context_destroy: %s\n", hm_strerror(ret));
        status = EXIT_FAILURE;
    }
    ret = hm_class_destroy(cls);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "dying_servers_client: hm_class_destroy: %s\n", hm_strerror(ret));
        status = EXIT_FAILURE;
    }
    return status;
}
