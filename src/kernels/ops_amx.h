/* What the AMX kernels (ops_k_x86.c, ops_q8_amx.c) share: their target
 * attribute and the tile configuration a matmul loads for its duration. */
#ifndef KVT_OPS_AMX_H
#define KVT_OPS_AMX_H

#include <immintrin.h>
#include <stdint.h>

#define T_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,amx-tile,amx-int8")))

/* The 64-byte operand of ldtilecfg (palette 1): bytes per row and rows of
 * each of the 8 tile registers. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} kvt_amx_cfg;

#endif
