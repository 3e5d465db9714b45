/*
 * Failure detection. Two signals:
 *  - the transport's: an RPC of this group to a peer the transport reports
 *    dead fails with HM_UNREACHABLE (collectives and keepalives alike);
 *  - keepalives: every member watches its two neighbours in rank order (the
 *    ring), and sends one a keepalive RPC when nothing of this group has
 *    come from it for detect_ms/4; a keepalive unanswered after detect_ms/2
 *    declares it dead. So a dead neighbour is reported within about
 *    detect_ms, and an idle group costs two small RPCs per member per
 *    detect_ms/4 instead of N.
 * Each death is reported once, through the group's failure callback, by the
 * ranks that saw it (its neighbours, and any rank whose RPC to it failed);
 * Hermod does not spread the news: the application decides (it may remove
 * the rank everywhere, bumping the version).
 *
 * A keepalive in flight owns a small record; when its member leaves or the
 * group is destroyed, the record is detached (p_group NULL) and its
 * callback only frees it.
 */
#include <stdlib.h>

#include "group/coll_wire.h"
#include "group/group_internal.h"
#include "util/log.h"
#include "util/time.h"

struct hmi_ping {
    hm_group_t *p_group;  /* NULL once detached */
    hm_rank_t p_rank;
    hm_handle_t *p_handle;
};

static void detect_ping_cb(const hm_cb_info_t *info)
{
    struct hmi_ping *ping = info->arg;
    hm_group_t *group = ping->p_group;
    if (group != NULL) {
        struct hmi_member *m = hmi_group_member(group, ping->p_rank);
        if (m != NULL)
            m->m_ping = NULL;
        if (info->ret == HM_UNREACHABLE || info->ret == HM_TIMEOUT)
            hmi_detect_dead(group, ping->p_rank, info->ret);
        else if (info->ret != HM_CANCELED)
            hmi_group_heard(group, ping->p_rank); /* any answer, even an error: alive */
    }
    hm_handle_destroy(ping->p_handle);
    free(ping);
}

static void detect_ping(hm_group_t *group, struct hmi_member *m)
{
    hm_addr_t *addr;
    struct hmi_ping *ping = calloc(1, sizeof(*ping));
    if (ping == NULL)
        return;
    ping->p_group = group;
    ping->p_rank = m->m_rank;
    struct hmi_ping_in in = {.pi_group = group->g_hash, .pi_sender = group->g_self};
    hm_forward_opts_t fopts = {.field_mask = HM_FORWARD_OPT_TIMEOUT,
                               .timeout_ms = group->g_detect_ms / 2};
    hm_return_t ret = hmi_group_addr(group, m, &addr);
    if (ret == HM_SUCCESS)
        ret = hm_handle_create(group->g_ctx, addr, group->g_gc->gc_ping_id, &ping->p_handle);
    if (ret == HM_SUCCESS) {
        ret = hm_forward(ping->p_handle, &in, detect_ping_cb, ping, &fopts);
        if (ret != HM_SUCCESS)
            hm_handle_destroy(ping->p_handle);
    }
    if (ret != HM_SUCCESS) {
        free(ping);
        if (ret == HM_UNREACHABLE)
            hmi_detect_dead(group, m->m_rank, ret);
        return;
    }
    m->m_ping = ping;
}

/* Watch neighbour `m`: ping it if it has been quiet. */
static void detect_watch(hm_group_t *group, struct hmi_member *m, uint64_t now)
{
    uint64_t quiet_ns = (uint64_t)group->g_detect_ms / 4 * 1000000u;
    if (m->m_dead || m->m_ping != NULL || m->m_rank == group->g_self)
        return;
    if (now - m->m_heard_ns >= quiet_ns)
        detect_ping(group, m);
}

static void detect_tick(hm_timer_t *timer, void *arg)
{
    hm_group_t *group = arg;
    uint64_t now = hmi_time_ns();
    uint32_t n = group->g_size;
    uint32_t pos = 0;
    while (pos < n && group->g_ranks[pos] != group->g_self)
        pos++;
    if (pos < n && n > 1) {
        detect_watch(group, &group->g_members[(pos + 1) % n], now);
        detect_watch(group, &group->g_members[(pos + n - 1) % n], now);
    }
    hm_timer_arm(timer, group->g_detect_ms / 4 > 0 ? group->g_detect_ms / 4 : 1);
}

hm_return_t hmi_detect_start(hm_group_t *group)
{
    if (group->g_detect_ms == 0 || group->g_self == HM_RANK_NONE || group->g_size < 2)
        return HM_SUCCESS;
    uint64_t now = hmi_time_ns();
    for (uint32_t i = 0; i < group->g_size; i++)
        group->g_members[i].m_heard_ns = now; /* a grace period to start */
    hm_return_t ret = hm_timer_create(group->g_ctx, detect_tick, group, &group->g_ka_timer);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hm_timer_arm(group->g_ka_timer, group->g_detect_ms / 4 > 0 ? group->g_detect_ms / 4 : 1);
    if (ret != HM_SUCCESS) {
        hm_timer_destroy(group->g_ka_timer);
        group->g_ka_timer = NULL;
    }
    return ret;
}

void hmi_detect_forget(hm_group_t *group, struct hmi_member *m)
{
    (void)group;
    if (m->m_ping != NULL) {
        m->m_ping->p_group = NULL;
        hm_cancel(m->m_ping->p_handle);
        m->m_ping = NULL;
    }
}

void hmi_detect_stop(hm_group_t *group)
{
    hm_timer_destroy(group->g_ka_timer);
    group->g_ka_timer = NULL;
    for (uint32_t i = 0; i < group->g_size; i++)
        hmi_detect_forget(group, &group->g_members[i]);
}

void hmi_detect_dead(hm_group_t *group, hm_rank_t rank, hm_return_t why)
{
    struct hmi_member *m = hmi_group_member(group, rank);
    if (m == NULL || m->m_dead)
        return;
    m->m_dead = true;
    hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_INFO, "group \"%s\": rank %u is dead (%s)",
            group->g_name, rank, hm_strerror(why));
    if (group->g_failure_cb != NULL)
        group->g_failure_cb(group, rank, why, group->g_failure_arg);
}

hm_return_t hmi_ping_handler(hm_handle_t *handle)
{
    struct hmi_gclass *gc = hm_registered_data(hm_context_class(hm_handle_get_context(handle)),
                                               hm_rpc_id("hm.group.coll"));
    struct hmi_ping_in in;
    hm_return_t ret = hm_get_input(handle, &in);
    if (ret != HM_SUCCESS) {
        hm_handle_destroy(handle);
        return ret;
    }
    hm_group_t *group = gc != NULL ? hmi_gclass_find(gc, hm_handle_get_context(handle),
                                                     in.pi_group)
                                   : NULL;
    if (group != NULL)
        hmi_group_heard_from(group, in.pi_sender, hm_handle_get_addr(handle));
    hm_free_input(handle, &in);
    ret = group != NULL ? hm_respond(handle, NULL, NULL, NULL)
                        : hm_respond_error(handle, HM_NOENTRY, NULL, NULL);
    hm_handle_destroy(handle);
    return ret;
}
