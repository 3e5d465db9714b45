/*
 * libFuzzer target: the wire header check on arbitrary bytes. It must never
 * read outside the input, and whatever it accepts must re-encode to the same
 * header bytes (so the check and the encoder agree on every field).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct hmi_wire_header hdr;
    for (int require = 0; require < 2; require++) {
        if (hmi_wire_check(data, size, require, &hdr) != HMI_WIRE_OK)
            continue;
        uint8_t *copy = malloc(size);
        if (copy == NULL)
            return 0;
        memcpy(copy, data, size);
        bool checksum = hdr.flags & HMI_WIRE_F_CHECKSUM;
        hdr.flags &= (uint8_t)~HMI_WIRE_F_CHECKSUM;
        hmi_wire_encode(copy, &hdr, checksum);
        if (memcmp(copy, data, HMI_WIRE_HEADER_SIZE) != 0)
            abort();
        free(copy);
    }
    return 0;
}
