/*
 * The one list of NA plugins, each under its build flag. A new plugin adds
 * its table here; na.h ("What your plugin must solve") lists the few other
 * places it touches (CMake and README).
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
    NULL,
};
