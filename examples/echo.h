/*
 * The echo RPC, shared by echo_server.c and echo_client.c: its name and the
 * procs of its arguments. Both sides register the same name with the same
 * procs; the RPC id is a hash of the name, so they agree without talking.
 */
#ifndef HERMOD_EXAMPLE_ECHO_H
#define HERMOD_EXAMPLE_ECHO_H

#include <hermod.h>

#define ECHO_RPC_NAME "example.echo"

/* Input and output of the RPC: one string each way. */
struct echo_msg {
    hm_string_t text; /* on decode, points into the receive buffer */
};

/* The struct, described field by field; the proc encodes, decodes and frees. */
static const hm_proc_field_t echo_msg_fields[] = {
    HM_PROC_FIELD(struct echo_msg, text, hm_proc_string),
};

static inline hm_return_t echo_msg_proc(hm_proc_t *proc, void *data)
{
    return hm_proc_struct(proc, data, echo_msg_fields, HM_PROC_FIELD_COUNT(echo_msg_fields));
}

#endif /* HERMOD_EXAMPLE_ECHO_H */
