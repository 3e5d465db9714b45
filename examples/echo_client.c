/*
 * echo_client: sends a string to echo_server and prints what comes back.
 *
 *   echo_client URI MESSAGE
 *
 * URI is the address echo_server printed (e.g. ucx+tcp://127.0.0.1:41234).
 * The client opens the same transport, forwards the RPC, then drives
 * progress and trigger until its completion callback has run. (hm_call()
 * does all of that in one call; the loop is spelled out here because it is
 * what an asynchronous program does.)
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echo.h"

#define ECHO_TIMEOUT_MS 5000

/* Filled by the completion callback. */
struct reply {
    bool done;
    hm_return_t ret;
};

/*
 * Runs from hm_trigger once the RPC completed: with the response
 * (HM_SUCCESS), or HM_TIMEOUT, HM_UNREACHABLE, or the server's error.
 */
static void echo_done_cb(const hm_cb_info_t *info)
{
    struct reply *reply = info->arg;

    reply->ret = info->ret;
    reply->done = true;
    if (info->ret != HM_SUCCESS)
        return;

    /* Decode the response in place, print it, release the receive buffer. */
    struct echo_msg out;
    reply->ret = hm_get_output(info->handle, &out);
    if (reply->ret != HM_SUCCESS)
        return;
    printf("%s\n", out.text != NULL ? out.text : "(null)");
    reply->ret = hm_free_output(info->handle, &out);
}

/* The URI this client opens: the server's transport, any local port. */
static int client_uri(const char *server_uri, char *buf, size_t size)
{
    const char *sep = strstr(server_uri, "://");

    if (sep == NULL) {
        fprintf(stderr, "echo_client: not a URI: %s\n", server_uri);
        return -1;
    }
    int len = (int)(sep - server_uri);
    bool tcp = len >= 4 && strncmp(sep - 4, "+tcp", 4) == 0;
    snprintf(buf, size, "%.*s://%s", len, server_uri, tcp ? "127.0.0.1:0" : "");
    return 0;
}

/* Forward one echo RPC on `handle` and wait for its callback. */
static hm_return_t echo_once(hm_context_t *ctx, hm_handle_t *handle, const char *text)
{
    struct echo_msg in = {.text = text};
    struct reply reply = {.done = false, .ret = HM_SUCCESS};
    hm_forward_opts_t opts = {.field_mask = HM_FORWARD_OPT_TIMEOUT,
                              .timeout_ms = ECHO_TIMEOUT_MS};
    hm_return_t ret;

    ret = hm_forward(handle, &in, echo_done_cb, &reply, &opts);
    if (ret != HM_SUCCESS)
        return ret; /* the callback will not run */

    /* The deadline in opts bounds this loop: the callback always runs. */
    while (!reply.done) {
        ret = hm_progress(ctx, 100);
        if (ret != HM_SUCCESS && ret != HM_TIMEOUT)
            return ret;
        hm_trigger(ctx, 16, NULL);
    }
    return reply.ret;
}

int main(int argc, char **argv)
{
    hm_class_t *cls = NULL;
    hm_context_t *ctx = NULL;
    hm_addr_t *server = NULL;
    hm_handle_t *handle = NULL;
    char uri[256];
    hm_id_t id;
    hm_return_t ret;
    int status = EXIT_FAILURE;

    if (argc != 3) {
        fprintf(stderr, "usage: %s SERVER_URI MESSAGE\n", argv[0]);
        return EXIT_FAILURE;
    }
    if (client_uri(argv[1], uri, sizeof(uri)) != 0)
        return EXIT_FAILURE;

    ret = hm_class_create(uri, NULL, &cls);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "echo_client: cannot open %s: %s (%s)\n", uri, hm_strerror(ret),
                hm_error_detail());
        return EXIT_FAILURE;
    }
    /* Same name and procs as the server; no handler on a pure client. */
    ret = hm_register(cls, ECHO_RPC_NAME, echo_msg_proc, echo_msg_proc, NULL, &id);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "echo_client: hm_register: %s\n", hm_strerror(ret));
        goto err_class;
    }
    ret = hm_context_create(cls, NULL, &ctx);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "echo_client: hm_context_create: %s\n", hm_strerror(ret));
        goto err_class;
    }
    ret = hm_addr_lookup(ctx, argv[1], &server);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "echo_client: cannot reach %s: %s (%s)\n", argv[1],
                hm_strerror(ret), hm_error_detail());
        goto err_context;
    }
    ret = hm_handle_create(ctx, server, id, &handle);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "echo_client: hm_handle_create: %s\n", hm_strerror(ret));
        goto err_addr;
    }

    ret = echo_once(ctx, handle, argv[2]);
    if (ret == HM_SUCCESS)
        status = EXIT_SUCCESS;
    else
        fprintf(stderr, "echo_client: echo failed: %s\n", hm_strerror(ret));

    hm_handle_destroy(handle);
err_addr:
    hm_addr_free(server);
err_context:
    ret = hm_context_destroy(ctx);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "echo_client: hm_context_destroy: %s\n", hm_strerror(ret));
        status = EXIT_FAILURE;
    }
err_class:
    ret = hm_class_destroy(cls);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "echo_client: hm_class_destroy: %s\n", hm_strerror(ret));
        status = EXIT_FAILURE;
    }
    return status;
}
