/*
 * The one list of NA plugins, each under its build flag. A new plugin adds
 * its ops table here, and that is the only source file outside its folder
 * it edits (its tunables ride on the ops table, na_tunable.h); na.h ("What
 * your plugin must solve") lists the other places it touches: three CMake
 * files and README's tables.
 */
#include "na/na.h"

#ifdef HM_NA_UCX
extern const struct hmi_na_ops hmi_na_ucx_ops;
#endif
#ifdef HM_NA_OFI
extern const struct hmi_na_ops hmi_na_ofi_ops;
#endif
#ifdef HM_NA_VERBS
extern const struct hmi_na_ops hmi_na_verbs_ops;
#endif
#ifdef HM_NA_SOCK
extern const struct hmi_na_ops hmi_na_sock_ops;
#endif

const struct hmi_na_ops *const hmi_na_plugins[] = {
#ifdef HM_NA_UCX
    &hmi_na_ucx_ops,
#endif
#ifdef HM_NA_OFI
    &hmi_na_ofi_ops,
#endif
#ifdef HM_NA_VERBS
    &hmi_na_verbs_ops,
#endif
#ifdef HM_NA_SOCK
    &hmi_na_sock_ops,
#endif
    NULL,
};
