// SPDX-License-Identifier: MIT
/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum of every
 * disk-tier record. Uses the SSE4.2 crc32 instruction when the CPU has it
 * (detected once at run time) and a table otherwise; both give equal results. */
#ifndef KVT_CRC32C_H
#define KVT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc (0 for a fresh checksum) over p[0..n) and returns the new value,
 * so kvt_crc32c(kvt_crc32c(0, a, na), b, nb) == CRC of a followed by b.
 * The standard check value: kvt_crc32c(0, "123456789", 9) == 0xE3069283.
 * Pure; thread-safe. */
uint32_t kvt_crc32c(uint32_t crc, const void *p, size_t n);

/* The portable table implementation, exposed so tests can compare it with the
 * hardware path. Same contract as kvt_crc32c. */
uint32_t kvt_crc32c_sw(uint32_t crc, const void *p, size_t n);

/* 1 if kvt_crc32c uses the CPU's crc32 instruction. */
int kvt_crc32c_hw(void);

#endif
