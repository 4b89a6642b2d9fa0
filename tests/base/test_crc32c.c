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
    printf("crc32c: hardware path %s\n", kvt_crc32c_hw() ? "on" : "off");
    return kvt_test_done("test_crc32c");
}
