// SPDX-License-Identifier: MIT
/* Compute kernels for the forward pass: float conversions, the weight-matrix
 * product (F32, F16, BF16, Q8_0, the legacy weights Q4_0, Q4_1, Q5_0, Q5_1,
 * IQ4_NL and the K-quant weights Q2_K..Q6_K and IQ4_XS) and the
 * per-token elementwise ops.
 *
 * Numerics. Every reduction follows one canonical order, the same in every
 * code path and every instruction-set variant (scalar, AVX2, AVX-512):
 *   - a dot product of length K runs 16 f32 lanes, lane j accumulating with a
 *     fused multiply-add the elements k = j, j+16, j+32, ... in increasing k
 *     (missing tail elements count as +0 * +0), then the lanes are summed by the
 *     tree s8[i]=l[i]+l[i+8], s4[i]=s8[i]+s8[i+4], s2[i]=s4[i]+s4[i+2], s2[0]+s2[1];
 *   - Q8_0, in one of two orders, process-wide (kvt_ops_set_q8_order, or
 *     KVT_Q8_ORDER=block in the environment), llama.cpp's two x86 orders:
 *     "lanes" (the default; llama.cpp's ggml_vec_dot_q8_0_q8_0 and tinyBLAS,
 *     what its x86 build runs without AMX): 8 lanes from +0; for blocks
 *     b = 0, 1, ... in order, lane j takes the exact integer sum of elements
 *     4j..4j+3 of block b and does lane = fma((float)isum, d_w * d_x, lane);
 *     then the 8 lanes are summed by s4[i]=l[i]+l[i+4],
 *     (s4[0]+s4[2]) + (s4[1]+s4[3]);
 *     "block" (llama.cpp's AMX backend, what its x86 build runs for Q8_0 on
 *     CPUs with AMX): one f32 accumulator from +0 takes the blocks in order,
 *     acc = fma((float)isum, d_w * d_x, acc), isum the exact integer dot of
 *     the block's 32 weights and activation quants (SIMD code may form it in
 *     any order); the "amx" variant runs its prefill on tiles;
 *   - Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL (quant_legacy.h; not yet llama.cpp's order): for
 *     block pair (2m, 2m+1), lane j < 8 takes the exact integer sum of elements
 *     4j..4j+3 of block 2m, lane 8+j those of block 2m+1, and does
 *     lane = fma((float)isum, d_w * d_x, lane), then the 16-lane tree; the
 *     weights' integers being q - 8 (Q4_0), q - 16 (Q5_0), q (Q4_1, Q5_1) or
 *     the code book's value (IQ4_NL; the lanes are llama.cpp's IQ4_NL vec_dot's),
 *     a missing block of an odd count contributing fma(0, 0, lane); then, for Q4_1/Q5_1 only,
 *     once per block pair after those 16 fmas, every lane does
 *     lane = fma(m_j, s_j, lane), where m_0, s_0 are the min of block 2m and
 *     the activation sum s of block 2m, m_8, s_8 those of block 2m+1, and all
 *     other m_j, s_j are 0.
 *   - K types (Q2_K..Q6_K and IQ4_XS, quant_k.h): no lanes. One f32 accumulator starts at
 *     +0 and takes the super-blocks b = 0, 1, ... in order; for each, two exact
 *     integers over its 16 groups g of 16 weights (unpacked codes u, group
 *     scales sc and mins mn, code offset off, Q8_K quants q and group sums bs):
 *       S = sum_g sc[g] * (sum_{i in g} u[i] * q[i] - off * bs[g]),
 *       M = sum_g mn[g] * bs[g],
 *     then acc = fma((float)S, d_w * d_x, acc) and, for the types with mins
 *     (Q2_K, Q4_K, Q5_K), acc = fma(-(float)M, dmin_w * d_x, acc). As the
 *     integers are exact, SIMD code may form them in any order.
 * Hence results are batch invariant (independent of the batch size, the
 * token's position in it, the thread count and the tiling), and all variants
 * give the same bits; tests/kernels/test_ops.c checks both.
 *
 * Activations are first rounded the way llama.cpp's CPU backend does for the
 * weight type: to f16 for F16 weights, to bf16 for BF16 weights, to Q8_0 per
 * 32-block for Q8_0, Q4_0 and Q5_0 weights (as llama.cpp's AVX
 * quantize_row_q8_0: d = amax/127 stored as f16, q = x * (127/amax) rounded
 * half to even), to Q8_1 for Q4_1 and Q5_1 weights
 * (Q8_0 plus s = d * sum(q) with the unrounded d, stored as f16), to Q8_K per
 * 256-block for the K types (quant_k.h: iscale = -127/(the value of largest
 * magnitude), q = round-half-even(x * iscale) capped at 127, d = 1/iscale in
 * f32, sums of each 16 q); F32 weights take f32 activations.
 */
#ifndef KVT_OPS_H
#define KVT_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "types.h"
#include "threadpool.h"

/* ---- scalar conversions ------------------------------------------------ */

/* IEEE binary16 <-> binary32, round to nearest even; inf, NaN (quiet, payload
 * truncated) and subnormals handled. */
uint16_t kvt_f32_to_f16(float f);
float kvt_f16_to_f32(uint16_t h);
/* bfloat16: round to nearest even; a NaN stays a (quiet) NaN. bf16 -> f32 is exact. */
uint16_t kvt_f32_to_bf16(float f);
float kvt_bf16_to_f32(uint16_t h);
/* Row conversions; the same bits as the scalar functions. x and y must not overlap. */
void kvt_f32_to_f16_row(const float *x, uint16_t *y, int64_t n);
void kvt_f16_to_f32_row(const uint16_t *x, float *y, int64_t n);

/* ---- weight matrices --------------------------------------------------- */

/* A weight matrix in GGUF layout: `rows` rows of `cols` elements, row-major.
 * rows = output features, cols = input features (GGUF ne[1], ne[0]). Row r
 * starts at data + r * row_bytes; no alignment is required. For the quantized
 * types, cols is a multiple of their block (32; 256 for the K types). */
typedef struct {
    uint32_t type; /* KVT_TYPE_F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K or IQ4_XS */
    int64_t rows, cols;
    const void *data; /* borrowed; must outlive every call that uses it */
    size_t row_bytes;
} kvt_wmat;

/* Bytes of one row of `cols` elements of `type` (0 for an unsupported type or
 * a quantized type's cols that is not a multiple of its block: 32, or 256 for
 * the K types). */
size_t kvt_wmat_row_bytes(uint32_t type, int64_t cols);

/* Y[t][r] = sum_k W[r][k] * X[t][k] for t in [0,n), r in [0,rows).
 * X is n rows of w->cols floats with row stride ldx (>= cols); Y is n rows of
 * w->rows floats with row stride ldy (>= rows); X and Y must not overlap.
 * Splits the rows over the pool's threads (pool may be NULL: caller only).
 * Batch invariant as described at the top. Allocates a scratch copy of the
 * rounded activations; aborts with a message if that allocation fails. */
void kvt_matmul(kvt_pool *pool, const kvt_wmat *w, const float *x, int64_t ldx, int64_t n, float *y, int64_t ldy);

/* kvt_matmul(pool, w[i], x, ldx, n, y[i], ldy[i]) for i in [0, count), every
 * Y bit for bit as those calls give it, but in one run of the pool: matrices
 * of the same type and cols share one conversion of X (decode's q/k/v and
 * gate/up), and the threads split their rows taken end to end. Consecutive
 * matrices that differ in type or cols are run as separate groups. */
void kvt_matmul_multi(kvt_pool *pool, const kvt_wmat *const *w, int count, const float *x, int64_t ldx, int64_t n,
                      float *const *y, const int64_t *ldy);

/* Converts row r (0 <= r < rows) of w to w->cols floats in out (exact for
 * F32/F16/BF16; d*q for Q8_0, d*(q - zero) or d*q + m for the legacy types;
 * the K types as llama.cpp's dequantize_row_*, see quant_k.h). */
void kvt_wmat_row_f32(const kvt_wmat *w, int64_t r, float *out);

/* ---- per-token elementwise ops (same bits for a token whatever the batch) */

/* out = x / sqrt(mean(x^2) + eps) * weight, n elements; out may equal x. As
 * llama.cpp: each x*x rounded to f32, summed in order in double, the mean
 * rounded to f32, then out = (x * (1/sqrt(mean + eps))) * weight. */
void kvt_rmsnorm(float *out, const float *x, const float *weight, int64_t n, float eps);
/* kvt_rmsnorm of `rows` contiguous rows of n (out and x may be the same);
 * each row's bits as kvt_rmsnorm gives them alone. */
void kvt_rmsnorm_rows(float *out, const float *x, const float *weight, int64_t rows, int64_t n, float eps);
/* gate[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)), exp being
 * the approximation llama.cpp's AVX-512 backend uses for silu (ops_impl.h),
 * not kvt_expf, so the FFN's down projection sees llama.cpp's bits. */
void kvt_silu_mul(float *gate, const float *up, int64_t n);
/* y[i] += x[i]. */
void kvt_add(float *y, const float *x, int64_t n);
/* Dot products in the canonical order; b is f16 (a KV cache row). */
float kvt_dot_f32_f16(const float *a, const uint16_t *b, int64_t n);
float kvt_dot_f32(const float *a, const float *b, int64_t n);
/* y[i] = fma(a, x[i], y[i]) (one rounding). */
void kvt_axpy_f16(float *y, float a, const uint16_t *x, int64_t n);
void kvt_axpy_f32(float *y, float a, const float *x, int64_t n);
/* In place: x[i] = exp(x[i] - max) * (1/sum), as llama.cpp's CPU softmax:
 * exp the vector exp of silu (ops_impl.h; not kvt_expf), each 16 exps summed
 * by the 16-lane tree, those sums added in double, 1/sum taken in double and
 * rounded to f32. The same bits in every variant. Scores of -inf get exactly
 * 0. n >= 1. */
void kvt_softmax(float *x, int64_t n);
/* The same for scores of keys first, first+1, ... (first >= 0): the exps are
 * summed as llama.cpp's softmax sums them over a KV cache whose cell i holds
 * position i, in chunks of 16 cells (kvt_softmax: first = 0). */
void kvt_softmax_at(float *x, int64_t n, int64_t first);
/* kvt_softmax_at, then each weight rounded to f16 and back (as llama.cpp's
 * weights meet an f16 KV cache), in the same pass as the 1/sum scaling. */
void kvt_softmax_at_f16(float *x, int64_t n, int64_t first);
/* The kernels' own exp (|rel err| < 2e-7 vs expf), exposed for tests and for
 * callers that need the same bits. Inputs below ~-87.3 give 0, above 88 give exp(88). */
float kvt_expf(float x);

/* ---- variants ---------------------------------------------------------- */

/* The Q8_0 order (see Numerics above): "lanes" (default) or "block".
 * kvt_ops_set_q8_order returns 0, or -1 for another name; call it before any
 * matmul runs (it is read by every thread). The environment variable
 * KVT_Q8_ORDER=block sets the default. */
int kvt_ops_set_q8_order(const char *name);
const char *kvt_ops_q8_order(void);

/* Identifies the numerics of the kernels ("kvt-ops-l16-v3", with "-q8b" for
 * the Q8_0 "block" order). Every variant
 * computes the same bits, so the id does not name the variant; it changes
 * whenever any kernel's results change. Cache keys include it. */
const char *kvt_ops_numerics_id(void);
/* Name of the selected variant: "amx" (avx512 with the K-quant prefill on
 * AMX tiles), "avx512", "avx2" or "scalar". */
const char *kvt_ops_variant(void);
/* Forces a variant ("scalar", "avx2", "avx512", "amx"); returns 0, or -1 if the name
 * is unknown or the CPU lacks it (the selection is then unchanged). Not
 * thread-safe: call before any work. Without a call the best available variant
 * is used (KVT_OPS_VARIANT in the environment overrides that choice). */
int kvt_ops_force_variant(const char *name);

#endif
