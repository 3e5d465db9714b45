/* Hermod-level pieces of the test fixture; see fixture_hm.h. */
#include "fixture_hm.h"

#include <stdio.h>
#include <string.h>

int hm_test_self_uri(hm_context_t *ctx, char *buf, size_t size)
{
    hm_addr_t *self;
    if (hm_addr_self(ctx, &self) != HM_SUCCESS)
        return -1;
    hm_return_t ret = hm_addr_to_string(self, buf, &size);
    hm_addr_free(self);
    return ret == HM_SUCCESS ? 0 : -1;
}

int hm_test_ready_self(hm_context_t *ctx)
{
    char uri[HM_TEST_URI_MAX];
    if (hm_test_self_uri(ctx, uri, sizeof(uri)) != 0)
        return -1;
    return hm_test_ready(uri);
}

int hm_test_client_uri(const char *protocol, char *buf, size_t size)
{
    const char *sep = strstr(protocol, "://");
    if (sep == NULL)
        return -1;
    int len = snprintf(buf, size, "%.*s://%s", (int)(sep - protocol), protocol,
                       strstr(protocol, "+tcp") ? "127.0.0.1:0" : "");
    return len >= 0 && (size_t)len < size ? 0 : -1;
}

hm_return_t hm_test_context_close(hm_context_t *ctx, int tries)
{
    hm_return_t ret = hm_context_destroy(ctx);
    for (int i = 0; i < tries && ret == HM_BUSY; i++) {
        hm_progress(ctx, 10);
        hm_trigger(ctx, UINT32_MAX, NULL);
        ret = hm_context_destroy(ctx);
    }
    return ret;
}
