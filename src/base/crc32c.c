/* CRC32C with a run-time choice between the SSE4.2 instruction and a
 * slicing-by-8 table built once on first use (pthread_once), so the checksum
 * works on any CPU and is fast on the ones disk caches run on. */
#include "crc32c.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define CRC_HAVE_X86 1
#else
#define CRC_HAVE_X86 0
#endif

#define CRC32C_POLY_REFLECTED 0x82F63B78u
#define CRC_SLICES 8
#define CRC_TABLE_SIZE 256

static uint32_t table[CRC_SLICES][CRC_TABLE_SIZE];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void build_table(void) {
    for (uint32_t i = 0; i < CRC_TABLE_SIZE; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (c & 1 ? CRC32C_POLY_REFLECTED : 0);
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < CRC_TABLE_SIZE; i++)
        for (int s = 1; s < CRC_SLICES; s++) table[s][i] = (table[s - 1][i] >> 8) ^ table[0][table[s - 1][i] & 0xFF];
}

uint32_t kvt_crc32c_sw(uint32_t crc, const void *p, size_t n) {
    pthread_once(&table_once, build_table);
    const uint8_t *b = p;
    uint32_t c = ~crc;
    while (n && ((uintptr_t)b & 7)) {
        c = (c >> 8) ^ table[0][(c ^ *b++) & 0xFF];
        n--;
    }
    /* slicing-by-8: eight table lookups per 8 bytes instead of eight dependent steps */
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        w ^= c;
        c = table[7][w & 0xFF] ^ table[6][(w >> 8) & 0xFF] ^ table[5][(w >> 16) & 0xFF] ^
            table[4][(w >> 24) & 0xFF] ^ table[3][(w >> 32) & 0xFF] ^ table[2][(w >> 40) & 0xFF] ^
            table[1][(w >> 48) & 0xFF] ^ table[0][w >> 56];
        b += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ table[0][(c ^ *b++) & 0xFF];
    return ~c;
}

#if CRC_HAVE_X86 && defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t c = ~crc;
    while (n && ((uintptr_t)b & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *b++);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        c = _mm_crc32_u64(c, w);
        b += 8;
        n -= 8;
    }
    while (n--) c = _mm_crc32_u8((uint32_t)c, *b++);
    return ~(uint32_t)c;
}

/* __builtin_cpu_supports reads a table libgcc fills before main: no state of ours, no race. */
int kvt_crc32c_hw(void) { return __builtin_cpu_supports("sse4.2") ? 1 : 0; }

uint32_t kvt_crc32c(uint32_t crc, const void *p, size_t n) {
    return kvt_crc32c_hw() ? crc_hw(crc, p, n) : kvt_crc32c_sw(crc, p, n);
}
#else
int kvt_crc32c_hw(void) { return 0; }
uint32_t kvt_crc32c(uint32_t crc, const void *p, size_t n) { return kvt_crc32c_sw(crc, p, n); }
#endif
