/*
 * Admission: who a request's sender is. Per-peer budgets must hold for the
 * sender the transport names, not for the context index its request claims
 * (a wire field any peer writes): one peer claiming many indexes once got a
 * full per-peer budget for each.
 *
 * So a sender's admission counters live on one address per NA address, its
 * record: the cached address of reserved index HMI_ADMIT_ACCT_INDEX (no
 * context has it, HMI_CTX_MAX). Each cached source address (NA address,
 * claimed index), through which responses are routed, references its
 * sender's record (a_adm_acct), and admit.c counts on the record. A sender
 * may have at most HMI_ADMIT_INDEXES_PEER claimed indexes cached: past that,
 * a request claiming a new one is dropped unanswered (overload_drops), so a
 * peer cannot make the server cache up to 65,535 addresses either. The
 * count lasts as long as the cache entries (until the peer dies or the
 * context is destroyed).
 */
#include "core/core_internal.h"
#include "util/compiler.h"
#include "util/log.h"

hm_return_t hmi_admit_source(hm_context_t *ctx, hmi_na_addr_t *source, uint16_t claimed,
                             hm_addr_t **out)
{
    /* The usual request: its entry is cached and tied to its record already
     * (one lookup instead of two; the record is what a_adm_acct holds). */
    hm_addr_t *peer = NULL;
    if (hmi_likely(claimed != HMI_ADMIT_ACCT_INDEX)) {
        peer = hmi_addr_cache_find(ctx, source, claimed);
        if (hmi_likely(peer != NULL && peer->a_adm_acct != NULL)) {
            *out = peer;
            return HM_SUCCESS;
        }
    }
    hm_addr_t *acct = hmi_addr_cached(ctx, source, HMI_ADMIT_ACCT_INDEX);
    if (acct == NULL)
        return HM_NOMEM;
    if (claimed == HMI_ADMIT_ACCT_INDEX) { /* no context has it: its record answers */
        *out = acct;
        return HM_SUCCESS;
    }
    if (peer == NULL && acct->a_adm_indexes >= HMI_ADMIT_INDEXES_PEER) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_DEBUG,
                "request claiming context %u dropped: its sender claimed %u already", claimed,
                acct->a_adm_indexes);
        return HM_OVERLOADED;
    }
    if (peer == NULL && (peer = hmi_addr_cached(ctx, source, claimed)) == NULL)
        return HM_NOMEM;
    if (peer->a_adm_acct == NULL) { /* first request through this entry */
        peer->a_adm_acct = hm_addr_dup(acct);
        acct->a_adm_indexes++;
    }
    *out = peer;
    return HM_SUCCESS;
}
