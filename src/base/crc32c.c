// SPDX-License-Identifier: MIT
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
        c = table[7][w & 0xFF] ^ table[6][(w >> 8) & 0xFF] ^ table[5][(w >> 16) & 0xFF] ^ table[4][(w >> 24) & 0xFF] ^
            table[3][(w >> 32) & 0xFF] ^ table[2][(w >> 40) & 0xFF] ^ table[1][(w >> 48) & 0xFF] ^ table[0][w >> 56];
        b += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ table[0][(c ^ *b++) & 0xFF];
    return ~c;
}

#if CRC_HAVE_X86 && defined(__x86_64__)
/* The crc32 instruction takes a new 8 bytes every cycle but needs three
 * cycles for its result, so one dependent chain runs it at a third of its
 * speed. Long inputs run three chains side by side over three adjacent lanes
 * of CRC_LANE bytes, then join them: the CRC register is linear, so the state
 * after lane A then lane B is (A's state carried over CRC_LANE zero bytes) xor
 * (B's state from zero). Carrying a state over the zeros is a fixed linear
 * map, tabulated once per byte of the state from the instruction itself. */
#define CRC_LANE 4096
static uint32_t lane_shift[4][CRC_TABLE_SIZE];
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

__attribute__((target("sse4.2"))) static void build_shift(void) {
    uint32_t basis[32];
    for (int i = 0; i < 32; i++) {
        uint64_t c = (uint64_t)1 << i;
        for (int k = 0; k < CRC_LANE / 8; k++) c = _mm_crc32_u64(c, 0);
        basis[i] = (uint32_t)c;
    }
    for (int k = 0; k < 4; k++)
        for (int v = 0; v < CRC_TABLE_SIZE; v++) {
            uint32_t x = 0;
            for (int j = 0; j < 8; j++)
                if (v >> j & 1) x ^= basis[8 * k + j];
            lane_shift[k][v] = x;
        }
}

/* The raw register s carried over CRC_LANE zero bytes. */
static uint32_t shift_lane(uint32_t s) {
    return lane_shift[0][s & 0xFF] ^ lane_shift[1][(s >> 8) & 0xFF] ^ lane_shift[2][(s >> 16) & 0xFF] ^
        lane_shift[3][s >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t c = ~crc;
    while (n && ((uintptr_t)b & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *b++);
        n--;
    }
    if (n >= 3 * CRC_LANE) pthread_once(&shift_once, build_shift);
    for (; n >= 3 * CRC_LANE; b += 3 * CRC_LANE, n -= 3 * CRC_LANE) {
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < CRC_LANE; i += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, b + i, 8);
            memcpy(&w1, b + CRC_LANE + i, 8);
            memcpy(&w2, b + 2 * CRC_LANE + i, 8);
            c = _mm_crc32_u64(c, w0);
            c1 = _mm_crc32_u64(c1, w1);
            c2 = _mm_crc32_u64(c2, w2);
        }
        c = shift_lane(shift_lane((uint32_t)c) ^ (uint32_t)c1) ^ (uint32_t)c2;
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
