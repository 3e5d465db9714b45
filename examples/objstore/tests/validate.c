/*
 * objstore_validate GROUP_FILE URI: sends the server requests that fail
 * validation, built by hand (public API, not the client library, which
 * would refuse to build them), and checks each gets its defined status
 * while the server keeps serving. Prints "validate: OK" when all passed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../objstore_proto.h"

static int failures;

static void expect(const char *what, hm_return_t ret, const struct obj_reply *out, uint32_t want)
{
    uint32_t got = ret == HM_SUCCESS ? out->status : UINT32_MAX;
    if (got != want) {
        fprintf(stderr, "validate: FAIL: %s: rpc %s, status %u (want %u: %s)\n", what,
                hm_strerror(ret), got, want, obj_status_str(want));
        failures++;
    } else {
        printf("validate: %s -> %s\n", what, obj_status_str(want));
    }
}

/* One put with the given fields; the reply's status checked. */
static void put_case(hm_context_t *ctx, hm_addr_t *addr, const char *what,
                     const struct obj_put_in *in, uint32_t want)
{
    hm_handle_t *h = NULL;
    struct obj_reply out = {0};
    hm_return_t ret = hm_handle_create(ctx, addr, hm_rpc_id(OBJ_RPC_PUT), &h);
    if (ret == HM_SUCCESS)
        ret = hm_call(h, in, &out, 10000);
    expect(what, ret, &out, want);
    if (ret == HM_SUCCESS)
        hm_free_output(h, &out);
    hm_handle_destroy(h);
}

static void key_case(hm_context_t *ctx, hm_addr_t *addr, const char *rpc, const char *what,
                     const struct obj_key_in *in, uint32_t want)
{
    hm_handle_t *h = NULL;
    struct obj_reply out = {0};
    hm_return_t ret = hm_handle_create(ctx, addr, hm_rpc_id(rpc), &h);
    if (ret == HM_SUCCESS)
        ret = hm_call(h, in, &out, 10000);
    expect(what, ret, &out, want);
    if (ret == HM_SUCCESS)
        hm_free_output(h, &out);
    hm_handle_destroy(h);
}

static hm_bulk_t *bulk_over(hm_class_t *cls, void *buf, size_t size, hm_bulk_perm_t perm)
{
    hm_bulk_t *b = NULL;
    if (hm_bulk_create(cls, 1, &buf, &size, perm, &b) != HM_SUCCESS)
        failures++;
    return b;
}

static void run_cases(hm_class_t *cls, hm_context_t *ctx, hm_addr_t *addr)
{
    static char big[16 << 10];
    char long_key[OBJ_KEY_MAX + 2];
    memset(long_key, 'k', sizeof(long_key) - 1);
    long_key[sizeof(long_key) - 1] = '\0';
    hm_bulk_t *ro = bulk_over(cls, big, 8 << 10, HM_BULK_READ_ONLY);
    hm_bulk_t *wo_small = bulk_over(cls, big, 6 << 10, HM_BULK_WRITE_ONLY);

    put_case(ctx, addr, "put with an empty key", &(struct obj_put_in){.key = "", .size = 1,
             .inline_ = {"x", 1}}, OBJ_INVALID);
    put_case(ctx, addr, "put with a NULL key", &(struct obj_put_in){.key = NULL, .size = 1,
             .inline_ = {"x", 1}}, OBJ_INVALID);
    put_case(ctx, addr, "put with a 256-byte key", &(struct obj_put_in){.key = long_key,
             .size = 1, .inline_ = {"x", 1}}, OBJ_INVALID);
    put_case(ctx, addr, "put announcing 10 bytes, 5 inline", &(struct obj_put_in){.key = "v",
             .size = 10, .inline_ = {"12345", 5}}, OBJ_INVALID);
    put_case(ctx, addr, "put of 64 MiB + 1", &(struct obj_put_in){.key = "v",
             .size = OBJ_VALUE_MAX + 1}, OBJ_TOOBIG);
    put_case(ctx, addr, "put announcing 16 KiB over an 8 KiB handle", &(struct obj_put_in){
             .key = "v", .size = 16 << 10, .bulk = ro}, OBJ_INVALID);
    put_case(ctx, addr, "put with a handle and inline bytes", &(struct obj_put_in){
             .key = "v", .size = 8 << 10, .inline_ = {"x", 1}, .bulk = ro}, OBJ_INVALID);
    put_case(ctx, addr, "put from a handle peers may not read", &(struct obj_put_in){
             .key = "v", .size = 6 << 10, .bulk = wo_small}, OBJ_INVALID);
    put_case(ctx, addr, "a valid 8 KiB put", &(struct obj_put_in){.key = "v", .size = 8 << 10,
             .bulk = ro}, OBJ_OK);
    key_case(ctx, addr, OBJ_RPC_GET, "get into a 6 KiB handle", &(struct obj_key_in){
             .key = "v", .bulk = wo_small}, OBJ_TOOSMALL);
    key_case(ctx, addr, OBJ_RPC_GET, "get into a handle peers may not write",
             &(struct obj_key_in){.key = "v", .bulk = ro}, OBJ_INVALID);
    key_case(ctx, addr, OBJ_RPC_GET, "get with an empty key", &(struct obj_key_in){.key = ""},
             OBJ_INVALID);
    key_case(ctx, addr, OBJ_RPC_DEL, "del with a handle", &(struct obj_key_in){.key = "v",
             .bulk = ro}, OBJ_INVALID);
    key_case(ctx, addr, OBJ_RPC_STAT, "stat of a missing key", &(struct obj_key_in){
             .key = "missing"}, OBJ_NOKEY);
    key_case(ctx, addr, OBJ_RPC_DEL, "del of the valid put", &(struct obj_key_in){.key = "v"},
             OBJ_OK);
    hm_bulk_free(ro);
    hm_bulk_free(wo_small);
}

/*
 * A rank's list answer is decoded by every rank above it and by the client,
 * which walks the keys with strlen: an answer whose last key has no NUL
 * (built by hand here, as a hostile rank would send it) must be refused.
 */
static void list_answer_case(const char *what, const char *keys, uint32_t used,
                             hm_return_t want)
{
    static struct obj_list_out sent, got; /* 4 KiB each: not on the stack */
    static uint64_t wire[(sizeof(struct obj_list_out) + 64) / 8];
    size_t wire_len = 0;

    memset(&sent, 0, sizeof(sent));
    sent.matched = 1;
    sent.used = used;
    memcpy(sent.keys, keys, used);
    hm_return_t ret = hm_proc_encode(NULL, obj_list_out_proc, &sent, wire, sizeof(wire),
                                     &wire_len);
    if (ret == HM_SUCCESS)
        ret = hm_proc_decode(NULL, obj_list_out_proc, wire, wire_len, &got);
    if (ret == HM_SUCCESS)
        (void)hm_proc_release(NULL, obj_list_out_proc, &got);
    if (ret != want) {
        fprintf(stderr, "validate: FAIL: %s: decode %s (want %s)\n", what, hm_strerror(ret),
                hm_strerror(want));
        failures++;
    } else {
        printf("validate: %s -> %s\n", what, hm_strerror(want));
    }
}

static void list_answer_cases(void)
{
    list_answer_case("list answer a\\0bc\\0", "a\0bc", 5, HM_SUCCESS);
    list_answer_case("list answer a\\0bc without its last NUL", "a\0bc", 4,
                     HM_PROTOCOL_ERROR);
    static char full[OBJ_LIST_BYTES];
    memset(full, 'k', sizeof(full));
    list_answer_case("list answer of 4096 bytes without a NUL", full, OBJ_LIST_BYTES,
                     HM_PROTOCOL_ERROR);
}

int main(int argc, char **argv)
{
    hm_class_t *cls = NULL;
    hm_context_t *ctx = NULL;
    hm_group_t *group = NULL;
    hm_addr_t *addr = NULL;
    hm_group_opts_t gopts = {.field_mask = HM_GROUP_OPT_NAME | HM_GROUP_OPT_DETECT_MS,
                             .name = OBJ_GROUP_NAME, .detect_ms = 0};
    if (argc != 3) {
        fprintf(stderr, "usage: objstore_validate GROUP_FILE URI\n");
        return 2;
    }
    hm_return_t ret = hm_class_create(argv[2], NULL, &cls);
    if (ret == HM_SUCCESS)
        ret = hm_register(cls, OBJ_RPC_PUT, obj_put_in_proc, obj_reply_proc, NULL, NULL);
    for (int i = 0; i < 3 && ret == HM_SUCCESS; i++)
        ret = hm_register(cls, (const char *[]){OBJ_RPC_GET, OBJ_RPC_DEL, OBJ_RPC_STAT}[i],
                          obj_key_in_proc, obj_reply_proc, NULL, NULL);
    if (ret == HM_SUCCESS)
        ret = hm_context_create(cls, NULL, &ctx);
    if (ret == HM_SUCCESS)
        ret = hm_group_create_file(ctx, argv[1], HM_RANK_NONE, &gopts, &group);
    if (ret == HM_SUCCESS)
        ret = hm_group_addr(group, 0, HM_GROUP_CTX_SAME, &addr);
    list_answer_cases();
    if (ret == HM_SUCCESS)
        run_cases(cls, ctx, addr);
    else
        fprintf(stderr, "validate: FAIL: setup: %s (%s)\n", hm_strerror(ret), hm_error_detail());
    hm_addr_free(addr);
    if (group != NULL)
        hm_group_destroy(group);
    if (ctx != NULL)
        hm_context_destroy(ctx);
    if (cls != NULL)
        hm_class_destroy(cls);
    if (ret != HM_SUCCESS || failures > 0)
        return 1;
    printf("validate: OK\n");
    return 0;
}
