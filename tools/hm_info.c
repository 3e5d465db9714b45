/*
 * hm_info: what Hermod can do on this machine.
 *
 * Prints the library version, the protocols compiled in, and for each one
 * whether a class opens here (with the transport's reason when it does not,
 * and the eager limit when it does, with where a context per NUMA node
 * would be placed: its device and why, and for tcp the interfaces a URI may
 * name to listen on), then the topology: NUMA nodes, their
 * cores, and the network devices with the node closest to each, then the
 * environment: the core's variables and every network tunables table (the
 * NA layer's and each plugin's, hm_tunables_print). Exit
 * status: 0 when at least one protocol opens, 1 otherwise (a topology that
 * cannot be read is reported but does not change it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hermod.h>

/*
 * info_default_uri: a URI that opens `proto` with a default listen address:
 * loopback with a free port for "+tcp" protocols, nothing for the others.
 */
static void info_default_uri(const char *proto, char *buf, size_t size)
{
    const char *plus = strchr(proto, '+');
    const char *addr = "";

    if (plus != NULL && strcmp(plus, "+tcp") == 0)
        addr = "127.0.0.1:0";
    snprintf(buf, size, "%s://%s", proto, addr);
}

#define INFO_NODES_MAX 64u /* nodes shown; the rest are not placed */

/*
 * info_print_placement: one context per node of `cls`, as
 * hm_context_create_per_node makes them, and where each went. The contexts
 * are destroyed again; a failure is one line.
 */
static void info_print_placement(hm_class_t *cls)
{
    hm_context_t *ctxs[INFO_NODES_MAX];
    hm_context_info_t info = {.size = sizeof(info)};
    unsigned int n = 0;
    hm_return_t ret = hm_context_create_per_node(cls, NULL, ctxs, INFO_NODES_MAX, &n);

    if (ret != HM_SUCCESS) {
        printf("%19s placement: %s: %s\n", "", hm_strerror(ret), hm_error_detail());
        return;
    }
    for (unsigned int i = 0; i < n; i++) {
        if (hm_context_get_info(ctxs[i], &info) == HM_SUCCESS)
            printf("%19s %s; device %s, memory %s\n", "", info.placement,
                   info.device[0] != '\0' ? info.device : "(transport's choice)",
                   info.memory_bound ? "bound" : "not bound");
    }
    for (unsigned int i = 0; i < n; i++)
        hm_context_destroy(ctxs[i]);
}

/* info_probe: try to open `proto`; print its line and placement. Returns 1 if it opened. */
static int info_probe(const char *proto)
{
    char uri[256];
    hm_class_t *cls = NULL;
    hm_return_t ret;

    /* Probing opens contexts but serves no peer: show trusted-only
     * protocols too; their "peers it may face" line says so. */
    const hm_class_opts_t opts = {.field_mask = HM_CLASS_OPT_TRUSTED_PEERS,
                                  .trusted_peers = true};

    info_default_uri(proto, uri, sizeof(uri));
    ret = hm_class_create(uri, &opts, &cls);
    if (ret != HM_SUCCESS) {
        const char *detail = hm_error_detail();
        printf("  %-12s no   %s: %s%s%s\n", proto, uri, hm_strerror(ret),
               detail[0] != '\0' ? ": " : "", detail);
        return 0;
    }
    hm_class_info_t info = {.size = sizeof(info)};
    bool have_info = hm_class_get_info(cls, &info) == HM_SUCCESS;
    if (have_info && info.inject_limit > 0)
        printf("  %-12s yes  %s (eager limit %zu bytes, inject %zu bytes)\n", proto, uri,
               info.eager_limit, info.inject_limit);
    else
        printf("  %-12s yes  %s (eager limit %zu bytes)\n", proto, uri,
               hm_class_eager_limit(cls));
    if (have_info) {
        printf("  %-12s      bulk access by peers: %s\n", "", info.rma);
        printf("  %-12s      peers it may face: %s\n", "", info.peers);
    }
    info_print_placement(cls);
    if (strstr(proto, "+tcp") != NULL) {
        printf("  %-12s      listens on (URI host: interface name or address):\n", "");
        if (hm_listen_interfaces_print(proto, stdout) != HM_SUCCESS)
            printf("  %-12s      interfaces: %s\n", "", hm_error_detail());
    }
    ret = hm_class_destroy(cls);
    if (ret != HM_SUCCESS)
        printf("  %-12s     warning: hm_class_destroy: %s\n", proto, hm_strerror(ret));
    return 1;
}

/* info_print_topo: the topology section; a failure is one line, not an exit. */
static void info_print_topo(void)
{
    hm_return_t ret;

    ret = hm_topo_print(stdout);
    if (ret != HM_SUCCESS)
        printf("topology: unavailable: %s: %s\n", hm_strerror(ret), hm_error_detail());
}

/*
 * info_print_env: the environment variables that change Hermod's behaviour:
 * the core's here, then the network layer's tables (hm_tunables_print).
 */
static void info_print_env(void)
{
    static const char *const vars[][2] = {
        {"HM_LOG", "log level: error|warn|info|debug (default: off)"},
        {"HM_LOG_SUBSYS", "log only these subsystems: na,core,..."},
        {"HM_PROGRESS", "progress mode: busy|wait|default (default: spin, then wait)"},
        {"HM_CREDITS", "RPCs in flight per peer context (default 256; 0: no limit)"},
        {"HM_MAX_REQUESTS", "server: requests in service per context (default 4096; 0: none)"},
        {"HM_MAX_REQUESTS_PEER", "server: requests in service per peer (default 512; 0: none)"},
        {"HM_MAX_OVERFLOW", "server: overflow bytes held per context (default 2 GiB; 0: none)"},
        {"HM_MAX_OVERFLOW_PEER", "server: overflow bytes per peer (default 1 GiB; 0: none)"},
        {"HM_RETRY_HINT_US", "server: retry hint of HM_OVERLOADED answers (default 500)"},
        {"HM_OVERFLOW_HOLD_MS", "server: overflow pull/hold without a deadline (default 30000)"},
        {"HM_BULK_RCACHE", "idle bulk registrations kept for reuse (default 256; 0: off)"},
        {"HM_TOPO_XML", "hwloc XML file to read the topology from (default: this machine)"},
    };

    printf("environment:\n");
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *val = getenv(vars[i][0]);
        printf("  %-14s %-10s %s\n", vars[i][0], val != NULL ? val : "(unset)", vars[i][1]);
    }
    hm_return_t ret = hm_tunables_print(stdout);
    if (ret != HM_SUCCESS)
        printf("network tunables: %s\n", hm_strerror(ret));
}

int main(int argc, char **argv)
{
    const char *const *protos = hm_protocol_list();
    int usable = 0;

    if (argc > 1) {
        fprintf(stderr, "usage: %s\n(prints what Hermod supports here; no options)\n",
                argv[0]);
        return strcmp(argv[1], "--help") == 0 ? 0 : 2;
    }
    printf("hermod %s\n", HM_VERSION_STRING);
    printf("protocols compiled in:\n");
    if (protos == NULL || protos[0] == NULL)
        printf("  (none: no network plugin was built)\n");
    for (size_t i = 0; protos != NULL && protos[i] != NULL; i++)
        usable += info_probe(protos[i]);
    info_print_topo();
    info_print_env();
    return usable > 0 ? 0 : 1;
}
