/*
 * echo_server: answers the echo RPC with the string it received.
 *
 *   echo_server [-u URI] [-a FILE] [-n COUNT]
 *
 *   -u URI    transport and listen address (default sock+tcp://127.0.0.1:0;
 *             port 0 picks a free port)
 *   -a FILE   also write the address clients use to FILE (for scripts)
 *   -n COUNT  exit after answering COUNT requests (default: serve forever)
 *
 * It prints the address to give echo_client, then serves until done.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "echo.h"

/* What the handler needs; attached to the RPC with hm_register_data. */
struct server {
    unsigned long served; /* responses sent so far */
    unsigned long limit;  /* stop after this many; 0 = never */
};

/* Runs once a response has left (or failed): counts it. */
static void echo_sent_cb(const hm_cb_info_t *info)
{
    struct server *srv = info->arg;

    if (info->ret != HM_SUCCESS)
        fprintf(stderr, "echo_server: response failed: %s\n", hm_strerror(info->ret));
    srv->served++;
}

/*
 * The RPC handler, run from hm_trigger. It owns one reference to `handle`
 * and must drop it with hm_handle_destroy, whatever happens. Returning an
 * error without having responded sends an error response to the client.
 */
static hm_return_t echo_handler(hm_handle_t *handle)
{
    struct server *srv = hm_handle_get_data(handle);
    struct echo_msg in;
    hm_return_t ret;

    ret = hm_get_input(handle, &in);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "echo_server: bad input: %s\n", hm_strerror(ret));
        hm_handle_destroy(handle);
        return ret;
    }
    printf("echo_server: received \"%s\"\n", in.text != NULL ? in.text : "(null)");

    /* The output points at the input's string: hm_respond encodes it at
     * once, so the input may be freed right after. */
    struct echo_msg out = {.text = in.text};
    ret = hm_respond(handle, &out, echo_sent_cb, srv);
    if (ret != HM_SUCCESS)
        fprintf(stderr, "echo_server: hm_respond: %s\n", hm_strerror(ret));
    hm_free_input(handle, &in);
    hm_handle_destroy(handle);
    return ret;
}

/*
 * self_uri: our address as a URI, in a malloc'd string (NULL on failure).
 * Addresses vary in length (a shared-memory one carries the whole UCX
 * worker address), so ask for the size first.
 */
static char *self_uri(hm_context_t *ctx)
{
    hm_addr_t *self = NULL;
    char *uri = NULL;
    size_t size = 0;
    hm_return_t ret;

    ret = hm_addr_self(ctx, &self);
    if (ret != HM_SUCCESS)
        goto fail;
    ret = hm_addr_to_string(self, NULL, &size); /* HM_MSGSIZE, and the size */
    if (ret == HM_MSGSIZE) {
        uri = malloc(size);
        ret = uri != NULL ? hm_addr_to_string(self, uri, &size) : HM_NOMEM;
    }
    hm_addr_free(self);
    if (ret != HM_SUCCESS)
        goto fail;
    return uri;
fail:
    fprintf(stderr, "echo_server: cannot get own address: %s\n", hm_strerror(ret));
    free(uri);
    return NULL;
}

/* write_line: `text` and a newline into a new file `path`; -1 with errno set. */
static int write_line(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    if (f == NULL)
        return -1;
    int failed = fprintf(f, "%s\n", text) < 0;
    failed |= fclose(f) != 0; /* always close, even after a failed write */
    return failed ? -1 : 0;
}

/* Print our address, and write it to `path` if given. */
static int publish_address(hm_context_t *ctx, const char *path)
{
    char *uri = self_uri(ctx);
    int rc = 0;

    if (uri == NULL)
        return -1;
    printf("echo_server: listening on %s\n", uri);
    fflush(stdout);
    if (path != NULL) {
        /* Write to a temporary name, then rename: a script polling for the
         * file never reads half an address. */
        char tmp[4096];
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        if (write_line(tmp, uri) != 0 || rename(tmp, path) != 0) {
            perror(path);
            rc = -1;
        }
    }
    free(uri);
    return rc;
}

/* Progress and trigger until `srv->limit` responses have left. */
static int serve(hm_context_t *ctx, struct server *srv)
{
    while (srv->limit == 0 || srv->served < srv->limit) {
        /* Wait up to 100 ms for network events, then run the handlers and
         * completion callbacks they queued, on this thread. */
        hm_return_t ret = hm_progress(ctx, 100);
        if (ret != HM_SUCCESS && ret != HM_TIMEOUT) {
            fprintf(stderr, "echo_server: hm_progress: %s\n", hm_strerror(ret));
            return -1;
        }
        hm_trigger(ctx, 64, NULL); /* HM_TIMEOUT just means nothing was queued */
    }
    return 0;
}

static void usage(const char *prog)
{
    fprintf(stderr, "usage: %s [-u URI] [-a ADDRESS_FILE] [-n COUNT]\n", prog);
}

int main(int argc, char **argv)
{
    const char *uri = "sock+tcp://127.0.0.1:0";
    const char *addr_file = NULL;
    struct server srv = {0};
    hm_class_t *cls = NULL;
    hm_context_t *ctx = NULL;
    hm_return_t ret;
    int opt, status = EXIT_FAILURE;

    while ((opt = getopt(argc, argv, "u:a:n:h")) != -1) {
        switch (opt) {
        case 'u': uri = optarg; break;
        case 'a': addr_file = optarg; break;
        case 'n': srv.limit = strtoul(optarg, NULL, 10); break;
        case 'h': usage(argv[0]); return EXIT_SUCCESS;
        default: usage(argv[0]); return EXIT_FAILURE;
        }
    }

    /* 1. Open the transport. */
    ret = hm_class_create(uri, NULL, &cls);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "echo_server: cannot open %s: %s (%s)\n", uri, hm_strerror(ret),
                hm_error_detail());
        return EXIT_FAILURE;
    }
    /* 2. Register the RPC with its procs and handler, and the handler's data. */
    hm_id_t id;
    ret = hm_register(cls, ECHO_RPC_NAME, echo_msg_proc, echo_msg_proc, echo_handler, &id);
    if (ret == HM_SUCCESS)
        ret = hm_register_data(cls, id, &srv, NULL);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "echo_server: cannot register %s: %s\n", ECHO_RPC_NAME,
                hm_strerror(ret));
        goto err_class;
    }
    /* 3. A context: where progress happens and callbacks run. */
    ret = hm_context_create(cls, NULL, &ctx);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "echo_server: hm_context_create: %s\n", hm_strerror(ret));
        goto err_class;
    }
    /* 4. Tell clients where we are, then serve. */
    if (publish_address(ctx, addr_file) == 0 && serve(ctx, &srv) == 0)
        status = EXIT_SUCCESS;

    ret = hm_context_destroy(ctx);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "echo_server: hm_context_destroy: %s\n", hm_strerror(ret));
        status = EXIT_FAILURE;
    }
err_class:
    ret = hm_class_destroy(cls);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "echo_server: hm_class_destroy: %s\n", hm_strerror(ret));
        status = EXIT_FAILURE;
    }
    return status;
}
