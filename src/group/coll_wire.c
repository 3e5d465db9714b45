/* Procs of the group layer's internal RPCs (coll_wire.h). */
#include "group/coll_wire.h"

static const hm_proc_field_t coll_in_fields[] = {
    HM_PROC_FIELD(struct hmi_coll_in, ci_group, hm_proc_uint64),
    HM_PROC_FIELD(struct hmi_coll_in, ci_id, hm_proc_uint64),
    HM_PROC_FIELD(struct hmi_coll_in, ci_version, hm_proc_uint32),
    HM_PROC_FIELD(struct hmi_coll_in, ci_root, hm_proc_uint32),
    HM_PROC_FIELD(struct hmi_coll_in, ci_tree, hm_proc_uint32),
    HM_PROC_FIELD(struct hmi_coll_in, ci_user_id, hm_proc_uint32),
    HM_PROC_FIELD(struct hmi_coll_in, ci_budget_ms, hm_proc_uint32),
    HM_PROC_FIELD(struct hmi_coll_in, ci_sender, hm_proc_uint32),
    HM_PROC_FIELD(struct hmi_coll_in, ci_excluded, hm_proc_array_u32),
    HM_PROC_FIELD(struct hmi_coll_in, ci_input, hm_proc_array_u8),
};

static const hm_proc_field_t coll_out_fields[] = {
    HM_PROC_FIELD(struct hmi_coll_out, co_contributed, hm_proc_uint32),
    HM_PROC_FIELD(struct hmi_coll_out, co_has_output, hm_proc_uint32),
    HM_PROC_FIELD(struct hmi_coll_out, co_output, hm_proc_array_u8),
    HM_PROC_FIELD(struct hmi_coll_out, co_failed, hm_proc_array_u64),
};

static const hm_proc_field_t ping_in_fields[] = {
    HM_PROC_FIELD(struct hmi_ping_in, pi_group, hm_proc_uint64),
    HM_PROC_FIELD(struct hmi_ping_in, pi_sender, hm_proc_uint32),
};

hm_return_t hmi_coll_in_proc(hm_proc_t *proc, void *data)
{
    return hm_proc_struct(proc, data, coll_in_fields, HM_PROC_FIELD_COUNT(coll_in_fields));
}

hm_return_t hmi_coll_out_proc(hm_proc_t *proc, void *data)
{
    return hm_proc_struct(proc, data, coll_out_fields, HM_PROC_FIELD_COUNT(coll_out_fields));
}

hm_return_t hmi_ping_in_proc(hm_proc_t *proc, void *data)
{
    return hm_proc_struct(proc, data, ping_in_fields, HM_PROC_FIELD_COUNT(ping_in_fields));
}
