/* hm_strerror: strings from the same list as the enum (include/hermod/types.h). */
#include <hermod/types.h>

#define HM_RETURN_STRING_ENTRY(name, value, text) [value] = text,
static const char *const hm_return_strings[HM_RETURN_MAX] = {
    HM_RETURN_LIST(HM_RETURN_STRING_ENTRY)};
#undef HM_RETURN_STRING_ENTRY

const char *hm_strerror(hm_return_t ret)
{
    if ((unsigned)ret >= HM_RETURN_MAX || hm_return_strings[ret] == NULL)
        return "unknown error";
    return hm_return_strings[ret];
}
