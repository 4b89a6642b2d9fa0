// SPDX-License-Identifier: MIT
/* CRC32C: the standard check value, known vectors, the hardware and table
 * paths agree on every length and alignment, and extension equals one pass. */
#include <string.h>

#include "crc32c.h"
#include "testutil.h"

int main(void) {
    CHECK(kvt_crc32c(0, "123456789", 9) == 0xE3069283u);
    CHECK(kvt_crc32c_sw(0, "123456789", 9) == 0xE3069283u);
    static uint8_t zeros[32], ones[32];
    memset(ones, 0xFF, sizeof ones);
    CHECK(kvt_crc32c(0, zeros, 32) == 0x8A9136AAu); /* RFC 3720 B.4 */
    CHECK(kvt_crc32c(0, ones, 32) == 0x62A8AB43u);
    uint8_t buf[1000];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)(x = x * 1103515245u + 12345u) >> 3;
    for (size_t off = 0; off < 9; off++)
        for (size_t n = 0; n + off <= sizeof buf; n += 37) {
            CHECK(kvt_crc32c(0, buf + off, n) == kvt_crc32c_sw(0, buf + off, n));
            size_t h = n / 3;
            CHECK(kvt_crc32c(kvt_crc32c(0, buf + off, h), buf + off + h, n - h) == kvt_crc32c(0, buf + off, n));
        }
    /* long inputs take the three-lane path: lengths around its 12 KiB chunks, every alignment */
    static uint8_t big[5 * 12288 + 64];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 5);
    const size_t lens[] = {12287, 12288, 12289, 12288 + 7, 24575, 24576, 24583, 3 * 12288 + 4093, 5 * 12288};
    for (size_t off = 0; off < 9; off++)
        for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
            size_t n = lens[k];
            CHECKF(kvt_crc32c(0, big + off, n) == kvt_crc32c_sw(0, big + off, n), "length %zu at offset %zu", n, off);
            CHECK(kvt_crc32c(0x1234567u, big + off, n) == kvt_crc32c_sw(0x1234567u, big + off, n));
        }
    memset(big, 0, sizeof big); /* zeros and ones: the lane join must not cancel them out */
    CHECK(kvt_crc32c(0, big, 3 * 12288) == kvt_crc32c_sw(0, big, 3 * 12288));
    memset(big, 0xFF, sizeof big);
    CHECK(kvt_crc32c(7, big + 1, 3 * 12288 + 5) == kvt_crc32c_sw(7, big + 1, 3 * 12288 + 5));
    printf("crc32c: hardware path %s\n", kvt_crc32c_hw() ? "on" : "off");
    return kvt_test_done("test_crc32c");
}
