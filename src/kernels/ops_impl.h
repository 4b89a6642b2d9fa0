// SPDX-License-Identifier: MIT
/* Internal to the kernels: the per-variant function table and the prepared
 * (rounded, zero-padded) activations that kvt_matmul hands to a variant.
 * Every variant must produce the canonical numerics described in ops.h. */
#ifndef KVT_OPS_IMPL_H
#define KVT_OPS_IMPL_H

#include <stdint.h>
#include <string.h>

#include "attn.h"
#include "ops.h"

/* Lanes of the canonical dot product (one AVX-512 vector, two AVX2 ones). */
#define KVT_LANES 16
/* Q8_0 block geometry: scale bytes, then KVT_Q8_0_BLOCK int8 values. */
#define KVT_Q8_0_SCALE_BYTES 2
#define KVT_Q8_0_BYTES (KVT_Q8_0_SCALE_BYTES + KVT_Q8_0_BLOCK)
/* Integer sums of this many adjacent int8 products form one Q8_0 lane value. */
#define KVT_Q8_GROUP 4
/* Lanes of the Q8_0 dot (ops.h): one per group of a block. */
#define KVT_Q8_LANES (KVT_Q8_0_BLOCK / KVT_Q8_GROUP)
/* Activation int8 values are stored offset by this (as u8) so that AVX-512
 * VNNI (unsigned x signed bytes) can take them; kernels subtract it back. */
#define KVT_Q8_ACT_BIAS 128
/* Q8_0 activation quantization maps each block's amax to this (llama.cpp). */
#define KVT_Q8_MAX 127.0f

/* Decode's software prefetch of the weight rows it streams (each read once
 * per token): KVT_PF_TILES tiles ahead, into L2 (prefetcht1), not L1. On the
 * AMD Zen 4 here, prefetcht0 held one core to 8 GB/s on a 140 MB Q8_0 matrix
 * (bench_ops ... stream) where a plain linear read reaches 23; into L2 the
 * kernel reaches 18-20, and the 2-thread decode of the bench model went from
 * 69 to 93-104 tok/s. */
#define KVT_PF_TILES 2
#define KVT_PREFETCH_WEIGHTS(p) __builtin_prefetch((const void *)(p), 0, 2)

/* Activations after rounding for the weight type. Rows are zero padded to
 * `kpad` elements (a multiple of 2 * KVT_Q8_0_BLOCK) so kernels may read whole
 * vectors past cols; padded Q8_0 values are q = 0 with d = 0. */
typedef struct {
    int64_t n, k, kpad;
    const float *xf;    /* F32/F16/BF16: n x kpad floats (already rounded) */
    const uint8_t *xq;  /* Q8_0 and legacy weights: n x kpad bytes, q + KVT_Q8_ACT_BIAS */
    const float *xd;    /* Q8_0 and legacy weights: n x (kpad / KVT_Q8_0_BLOCK) block scales */
    const float *xs;    /* Q8_1 (Q4_1/Q5_1 weights): n x (kpad / 32) block sums d * sum(q), else NULL */
    const int8_t *kq;   /* K types (Q8_K, quant_k.h): n x kpad int8 quants */
    const float *kd;    /* K types: n x (kpad / 256) super-block scales */
    const int16_t *kbs; /* K types: n x (kpad / 16) sums of each 16 quants */
} kvt_acts;

typedef struct {
    const char *name;
    /* Y[t][r] for r in [r0, r1), t in [0, a->n), w->type in {F32, F16, BF16, Q8_0}. */
    void (*matmul_rows)(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy);
    /* The same for the K types (Q2_K..Q6_K) with Q8_K activations (kq, kd, kbs). */
    void (*matmul_k_rows)(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy);
    /* The same for the legacy types (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) with Q8_0 activations
     * (xq, xd), plus the Q8_1 sums (xs) for Q4_1 and Q5_1. */
    void (*matmul_ql_rows)(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy);
    /* One token's Q8_0 (s NULL) or Q8_1 activations from k floats (k a
     * multiple of 32): ops.c's quantize_q8_row is the definition, every
     * variant gives its bits (NaN inputs included). */
    void (*quantize_q8_row)(const float *x, int64_t k, uint8_t *q, float *d, float *s);
    /* One token's Q8_K activations (k a multiple of 256): quant_k.c's
     * kvt_qk_quantize_acts is the definition, every variant gives its bits. */
    void (*quantize_q8k_row)(const float *x, int64_t k, int8_t *q, float *d, int16_t *bsums);
    float (*dot_f32)(const float *a, const float *b, int64_t n);
    float (*dot_f32_f16)(const float *a, const uint16_t *b, int64_t n);
    void (*axpy_f32)(float *y, float a, const float *x, int64_t n);
    void (*axpy_f16)(float *y, float a, const uint16_t *x, int64_t n);
    void (*f32_to_f16_row)(const float *x, uint16_t *y, int64_t n);
    void (*f16_to_f32_row)(const uint16_t *x, float *y, int64_t n);
    /* y[i] = x[i] rounded to f16 (resp. bf16) and back; y may equal x. */
    void (*round_f16_row)(const float *x, float *y, int64_t n);
    void (*round_bf16_row)(const float *x, float *y, int64_t n);
    /* x[i] = exp(x[i] - m) (the vector exp), returns the sum as llama.cpp's
     * softmax forms it: x[i] in lane (ph + i) % 16 of chunk (ph + i) / 16
     * (0 <= ph < 16), each chunk summed by the 16-lane tree (missing lanes
     * +0), the chunk sums added in order in double. */
    double (*exp_sum)(float *x, float m, int64_t n, int ph);
    float (*max)(const float *x, int64_t n);
    /* x[i] *= s, one rounding each; with f16, then rounded to f16 and back. */
    void (*scale_row)(float *x, int64_t n, float s, int f16);
    void (*silu_mul)(float *gate, const float *up, int64_t n);
    /* attention (attn.h): kvt_attn_qk, and kvt_attn_av_lanes (kvt_attn_av is lanes 0..16) */
    void (*attn_qk)(const float *q, int32_t G, int32_t hd, const void *kt, int32_t stride, int kind, int32_t t_base,
                    int32_t T, float scale, float *scores, int64_t ld);
    void (*attn_av)(const kvt_attn_run *runs, int32_t n_runs, int64_t ld, int32_t G, int kind, int32_t hd, int32_t j0,
                    int32_t j1, const float *acc_in, float *acc_out, float *out);
    /* q8_0 KV (kv_quant.h): kvt_kv_q8_dequant_rows and kvt_kv_q8_dequant_columns */
    void (*kv_q8_dequant_rows)(const uint8_t *rows, int32_t T, int32_t n, float *out);
    void (*kv_q8_dequant_columns)(const uint8_t *cols, int32_t B, int32_t T, int32_t n, float *out);
} kvt_ops_vtable;

/* The selected variant's table (what kvt_ops_variant() names). */
const kvt_ops_vtable *kvt_ops_active(void);
/* The attention kernels for the tables: attn.c's scalar path, attn_avx512.c's
 * and attn_avx2.c's. */
void kvt_attn_qk_scalar(const float *q, int32_t G, int32_t hd, const void *kt, int32_t stride, int kind, int32_t t_base,
                        int32_t T, float scale, float *scores, int64_t ld);
void kvt_attn_av_scalar(const kvt_attn_run *runs, int32_t n_runs, int64_t ld, int32_t G, int kind, int32_t hd,
                        int32_t j0, int32_t j1, const float *acc_in, float *acc_out, float *out);
void kvt_attn_qk_avx512(const float *q, int32_t G, int32_t hd, const void *kt, int32_t stride, int kind, int32_t t_base,
                        int32_t T, float scale, float *scores, int64_t ld);
void kvt_attn_av_avx512(const kvt_attn_run *runs, int32_t n_runs, int64_t ld, int32_t G, int kind, int32_t hd,
                        int32_t j0, int32_t j1, const float *acc_in, float *acc_out, float *out);
void kvt_attn_qk_avx2(const float *q, int32_t G, int32_t hd, const void *kt, int32_t stride, int kind, int32_t t_base,
                      int32_t T, float scale, float *scores, int64_t ld);
void kvt_attn_av_avx2(const kvt_attn_run *runs, int32_t n_runs, int64_t ld, int32_t G, int kind, int32_t hd, int32_t j0,
                      int32_t j1, const float *acc_in, float *acc_out, float *out);
/* kv_quant.c's, likewise. */
void kvt_kv_q8_dequant_rows_scalar(const uint8_t *rows, int32_t T, int32_t n, float *out);
void kvt_kv_q8_dequant_columns_scalar(const uint8_t *cols, int32_t B, int32_t T, int32_t n, float *out);
void kvt_kv_q8_dequant_rows_avx512(const uint8_t *rows, int32_t T, int32_t n, float *out);
void kvt_kv_q8_dequant_columns_avx512(const uint8_t *cols, int32_t B, int32_t T, int32_t n, float *out);

/* The canonical lane tree (ops.h) over KVT_LANES lane values. */
float kvt_ops_lanes_sum(const float *l);

/* NULL when the compiler or CPU cannot run the variant. */
const kvt_ops_vtable *kvt_ops_avx512(void);
const kvt_ops_vtable *kvt_ops_amx(void); /* "amx": avx512 with AMX Q8_0 and K-quant prefill, or NULL */
const kvt_ops_vtable *kvt_ops_avx2(void);
/* K-quant matmul_k_rows of each variant (quant_k.c, ops_k_x86.c). */
void kvt_qk_mm_scalar(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy);
void kvt_qk_mm_avx2(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy);
void kvt_qk_mm_avx512(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy);
/* kvt_qk_mm_avx512 with prefill (more than 2 tokens) on AMX tiles: the same
 * bits. Only where kvt_cpu_has_amx(). */
void kvt_qk_mm_amx(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy);
/* Q8_0 prefill on AMX tiles (ops_q8_amx.c): Y for rows [r0, r0 + R) with
 * the bits of the other variants, where R is (r1 - r0) rounded down to 16
 * rows, or 0 (nothing written) for another type, the "lanes" Q8_0 order,
 * fewer than 3 tokens or no memory for the staging. Returns R; the caller does the rest. Only where
 * kvt_cpu_has_amx(). */
int64_t kvt_q8_mm_amx(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy);
/* Q8_0 prefill in the "lanes" order on AVX-512 VNNI, 16 tokens per vector
 * (ops_q8l_avx512.c): Y for rows [r0, r0 + R) with the bits of the other
 * variants, where R is (r1 - r0) rounded down to 2 rows, or 0 (nothing
 * written) for another type, the "block" order, fewer than 8 tokens or no
 * memory for the staging. Returns R; the caller does the rest. */
int64_t kvt_q8l_mm_avx512(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy);
/* Q4_K, Q6_K and IQ4_XS prefill on AVX-512 VNNI, 16 tokens per vector
 * (ops_qkt_avx512.c): Y for rows [r0, r1) with the bits of the other
 * variants, returning r1 - r0; or 0 (nothing written) for another type,
 * fewer than 8 tokens or no memory for the staging. */
int64_t kvt_qkt_mm_avx512(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy);
/* Q4_K steps of 2 to 8 tokens on AVX-512 VNNI, 4 tokens per vector (the
 * same file): the same contract; 0 for another type or token count. */
int64_t kvt_qk4_few_avx512(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy);
/* 1 when the Q8_0 order is "block" (ops.h), 0 for "lanes". */
int kvt_ops_q8_block(void);
/* 1 when the CPU has AMX-TILE and AMX-INT8 and the kernel let this process
 * use them (asked once), else 0. */
int kvt_cpu_has_amx(void);
/* Legacy-type matmul_ql_rows of each variant (quant_legacy.c, ops_q_avx2.c, ops_q_avx512.c). */
void kvt_ql_mm_scalar(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy);
void kvt_ql_mm_avx2(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy);
void kvt_ql_mm_avx512(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy);

/* The canonical exp's constants (ops.c's scalar code and the SIMD kernels). */
#define KVT_EXP_HI 88.0f      /* inputs clamped here (exp stays finite) */
#define KVT_EXP_LO -87.33654f /* ln(FLT_MIN): below it the result is 0 */
#define KVT_EXP_LOG2E 1.44269504088896341f
#define KVT_EXP_LN2_HI 0.693145751953125f /* ln 2 split so n*LN2_HI is exact */
#define KVT_EXP_LN2_LO 1.42860682030941723212e-6f
#define KVT_EXP_ROUND 12582912.0f /* 1.5 * 2^23: adding it rounds to an integer */
/* Taylor coefficients 1/k! for k = 7..2, then 1, 1 (Horner, highest first). */
#define KVT_EXP_C7 (1.0f / 5040.0f)
#define KVT_EXP_C6 (1.0f / 720.0f)
#define KVT_EXP_C5 (1.0f / 120.0f)
#define KVT_EXP_C4 (1.0f / 24.0f)
#define KVT_EXP_C3 (1.0f / 6.0f)
#define KVT_EXP_C2 0.5f
/* The vector exp: the approximation llama.cpp's AVX-512 CPU backend evaluates
 * silu and the attention softmax with (ARM's optimized-routines expf: n =
 * round(x log2 e) by the 1.5*2^23 shift, b = x - n ln2 in two fused steps, a
 * degree-5 polynomial j in b and b^2, then j * 2^n with one rounding), so that
 * the matmuls after them see the same bits. |n| > 192 gives 0 (n <= 0) or inf.
 * For |n| <= 192, j * 2^n = (j * 2^(n>>1)) * 2^(n - (n>>1)): the first product
 * is exact, both powers are normal, so the AVX2 kernel needs no scalef. */
#define KVT_SEXP_SHIFT 0x1.8p23f
#define KVT_SEXP_LOG2E 0x1.715476p+0f
#define KVT_SEXP_LN2_HI 0x1.62e4p-1f
#define KVT_SEXP_LN2_LO 0x1.7f7d1cp-20f
#define KVT_SEXP_P1 0x1.ffffecp-1f
#define KVT_SEXP_P2 0x1.fffdb6p-2f
#define KVT_SEXP_P3 0x1.555e66p-3f
#define KVT_SEXP_P4 0x1.573e2ep-5f
#define KVT_SEXP_P5 0x1.0e4020p-7f
#define KVT_SEXP_NMAX 192.0f
#define KVT_F32_EXP_BIAS 127
#define KVT_F32_MANT_BITS 23

/* The vector exp above, one element (ops.c); the SIMD kernels compute the
 * same bits. */
float kvt_ops_vexpf(float x);

static inline uint16_t kvt_load_u16(const void *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline uint32_t kvt_load_u32(const void *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* F16C support from CPUID (leaf 1, ECX bit 29): clang's __builtin_cpu_supports
 * does not know "f16c", gcc's does; one definition serves both. Inline here, so
 * a variant's availability check does not call back into ops.c. */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
static inline int kvt_cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#else
static inline int kvt_cpu_has_f16c(void) { return 0; }
#endif

#endif
