// SPDX-License-Identifier: MIT
/* Fuzz driver: the disk-tier record parser, MAC check and decoder must reject
 * any byte string cleanly and never read outside it. Built for libFuzzer with clang
 * (-DKVT_FUZZ=ON) and, in every build, as a replay test over
 * fuzz/corpus/disk_record plus deterministic mutations. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tier_disk.h"

/* Decode at most this much: a declared length is attacker-controlled. */
#define FUZZ_DECODE_MAX (4u << 20)
/* The corpus records are signed with this key (KVT_DISK_KEY_BYTES of 'K'),
 * under both MAC schemes (gmac-*, blake2b-*), so mutations reach the matching
 * and the failing path of each; v1-* and v2-* are older formats (foreign). */
#define FUZZ_KEY_BYTE 0x4b

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kvt_disk_record r;
    volatile uint64_t sink = 0;
    if (kvt_disk_record_parse(data, size, 0, &r) == 0) {
        for (uint32_t i = 0; i < r.block_tokens; i++) {
            int32_t t;
            memcpy(&t, (const uint8_t *)r.tokens + 4 * i, 4);
            sink += (uint32_t)t;
        }
    }
    if (kvt_disk_record_parse(data, size, 1, &r) == 0) {
        uint8_t key[KVT_DISK_KEY_BYTES];
        memset(key, FUZZ_KEY_BYTE, sizeof key);
        sink += (uint64_t)kvt_disk_record_check_mac(&r, key);
    }
    if (kvt_disk_record_parse(data, size, 1, &r) == 0 && r.payload_bytes <= FUZZ_DECODE_MAX) {
        uint8_t *out = malloc(r.payload_bytes);
        if (out && kvt_disk_record_decode(&r, out, r.payload_bytes) == 0) sink += out[r.payload_bytes - 1];
        free(out);
    }
    (void)sink;
    return 0;
}
