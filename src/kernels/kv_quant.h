// SPDX-License-Identifier: MIT
/* KV element types in pages (kvt_kv_dtype): the bytes of a stored row of K or
 * V values, and the q8_0 encoding of such rows with the dequantization that
 * attention reads them through.
 *
 * q8_0 (the block format of llama.cpp's GGML_TYPE_Q8_0 and `-ctk/-ctv q8_0`):
 * a row of n values, n a multiple of KVT_KV_Q8_BLOCK, is n / 32 blocks of
 * KVT_KV_Q8_BLOCK_BYTES = 34 bytes, each an f16 scale d (little-endian) then
 * 32 int8 values q. For each block of 32 inputs x:
 *   amax = max |x_i| by fmaxf (a NaN input does not raise it)
 *   d    = amax / 127 in f32; the block stores f16(d), round to nearest even
 *   q_i  = roundf(x_i * id), id = 1 / d in f32 from the UNROUNDED d (0 when
 *          d == 0), as llama.cpp's quantize_row_q8_0_ref. roundf rounds half
 *          away from zero whatever the FP rounding mode; the result is clamped
 *          to [-127, 127] and a NaN product becomes 0, so no input is undefined
 *          behaviour.
 *   read back: value_i = f32(f16 d) * (float)q_i, one correctly rounded f32
 *          multiply.
 * |x_i - value_i| <= d/2 + 127 * |d - f16(d)| (about 0.56 d) for finite x.
 *
 * Two layouts of the same blocks:
 *   rows (V):  T rows, row t = its n / 32 blocks of 34 bytes, as above.
 *   columns (K): a block of up to B tokens in two parts, the f16 scales
 *              [n / 32][B] and then the int8 values [n][B]: the bytes of
 *              token t's blocks are column t. Attention wants K transposed,
 *              [dim][token] (attn.h), and from columns that is one contiguous,
 *              vectorized pass per dimension; from rows it is a strided scalar
 *              transpose (which made prefill 10x slower on tiny-llama).
 *              Both parts together take the same B * n / 32 * 34 bytes.
 * Either way a token is quantized on its own row, elementwise: its stored
 * bytes depend only on its own K/V, and the values read back only on those
 * bytes, in every instruction-set variant (a product of an exact f16 and an
 * exact small integer, one rounding). That keeps cold and warm runs
 * bit-identical (docs/design.md "Invariants"). All functions are pure
 * and thread-safe. */
#ifndef KVT_KV_QUANT_H
#define KVT_KV_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

#define KVT_KV_Q8_BLOCK 32      /* values per q8_0 block */
#define KVT_KV_Q8_SCALE_BYTES 2 /* the f16 scale that opens a block */
#define KVT_KV_Q8_BLOCK_BYTES (KVT_KV_Q8_SCALE_BYTES + KVT_KV_Q8_BLOCK)

/* Bytes of a row of n K or V values stored as dt: 2n for f16, 4n for f32,
 * 34 n / 32 for q8_0. 0 when dt is unknown, n < 0, or dt is q8_0 and n is not
 * a multiple of KVT_KV_Q8_BLOCK (such a row cannot be stored). */
size_t kvt_kv_row_bytes(kvt_kv_dtype dt, int32_t n);

/* "f16", "f32", "q8_0"; "?" for an unknown value. Static storage. */
const char *kvt_kv_dtype_name(kvt_kv_dtype dt);
/* Parses one of those names into *out. Returns 0, or KVT_EARG for anything else. */
int kvt_kv_dtype_parse(const char *name, kvt_kv_dtype *out);

/* The f32 value of the little-endian f16 scale at p (a block's first 2 bytes). */
float kvt_kv_q8_scale(const uint8_t *p);

/* Encodes x[0..n) as q8_0 into out (kvt_kv_row_bytes(KVT_KV_Q8_0, n) bytes,
 * no alignment needed). n must be a multiple of KVT_KV_Q8_BLOCK. */
void kvt_kv_q8_quantize_row(const float *x, int32_t n, uint8_t *out);

/* Dequantizes T consecutive q8_0 rows of n values each (rows: T x
 * kvt_kv_row_bytes(KVT_KV_Q8_0, n) bytes) into out[t * n + i]: the
 * [token][dim] layout of a V block. */
void kvt_kv_q8_dequant_rows(const uint8_t *rows, int32_t T, int32_t n, float *out);

/* Copies one quantized row (kvt_kv_q8_quantize_row's output for n values)
 * into column t (< B) of a column block of B tokens (cols). */
void kvt_kv_q8_put_column(const uint8_t *row, int32_t n, int32_t B, int32_t t, uint8_t *cols);

/* Dequantizes columns 0..T-1 (T <= B) of a column block of B tokens into
 * out[i * B + t], i < n: the [dim][token] layout kvt_attn_qk takes with stride
 * B. The values equal kvt_kv_q8_dequant_rows' for the same quantized rows;
 * columns t >= T of out are left untouched. */
void kvt_kv_q8_dequant_columns(const uint8_t *cols, int32_t B, int32_t T, int32_t n, float *out);

#endif
