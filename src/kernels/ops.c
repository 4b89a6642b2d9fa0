// SPDX-License-Identifier: MIT
/* Kernel front end: float conversions, variant dispatch, activation rounding,
 * the threaded matmul driver, and the scalar variant — the executable
 * definition of the canonical numerics (ops.h) that the SIMD variants match. */
#include "ops.h"

#if defined(__x86_64__) || defined(__i386__)
#endif

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "ops_impl.h"
#include "quant_k.h"
#include "log.h"
#include "quant_legacy.h"

#define OPS_NUMERICS_ID "kvt-ops-l16-v3"              /* Q8_0 "lanes" */
#define OPS_NUMERICS_ID_Q8_BLOCK "kvt-ops-l16-v3-q8b" /* Q8_0 "block" */
/* Rows handed to one thread are a multiple of this (every tile height divides it). */
#define OPS_ROW_ALIGN 16
/* Convert activations on the pool only when there are at least this many tokens. */
#define OPS_PARALLEL_CONVERT_MIN 16
/* Scratch alignment: a cache line (and an AVX-512 vector). */
#define OPS_SCRATCH_ALIGN 64

/* ---- scalar conversions ------------------------------------------------ */

#define F32_SIGN 0x80000000u
#define F32_ABS 0x7fffffffu
#define F32_INF 0x7f800000u
#define F32_QUIET 0x00400000u
#define F16_SIGN 0x8000u
#define F16_INF 0x7c00u
#define F16_QUIET 0x0200u
#define F16_MANT 0x03ffu
#define F16_MANT_BITS 10
#define F16_EXP_MAX 0x1f
/* f32 and f16 exponent biases differ by 127 - 15. */
#define F16_REBIAS 112
/* |f| >= 65520 rounds to f16 infinity; |f| < 2^-14 is an f16 subnormal. */
#define F32_F16_OVERFLOW 0x477ff000u
#define F32_F16_MIN_NORMAL 0x38800000u
/* f32 mantissa bits dropped going to f16: 23 - 10. */
#define F16_DROP_BITS 13
#define BF16_QUIET 0x0040u
#define BF16_SHIFT 16

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Rounds v >> shift to nearest, ties to even (shift >= 1). */
static inline uint32_t shift_rne(uint32_t v, unsigned shift) {
    uint32_t q = v >> shift, rem = v & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return q;
}

uint16_t kvt_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u & F32_SIGN) >> BF16_SHIFT);
    u &= F32_ABS;
    if (u > F32_INF) /* NaN: quiet it, keep the top of the payload (as F16C does) */
        return (uint16_t)(sign | F16_INF | F16_QUIET | ((u >> F16_DROP_BITS) & F16_MANT));
    if (u >= F32_F16_OVERFLOW) return (uint16_t)(sign | F16_INF);
    if (u >= F32_F16_MIN_NORMAL) /* normal: rebias; a rounding carry may bump the exponent */
        return (uint16_t)(sign | shift_rne(u - ((uint32_t)F16_REBIAS << KVT_F32_MANT_BITS), F16_DROP_BITS));
    /* f16 subnormal (or zero): units of 2^-24, value = mant * 2^(e - 126) units */
    uint32_t e = u >> KVT_F32_MANT_BITS;
    if (e == 0) return sign; /* f32 subnormals are far below half the smallest f16 */
    uint32_t mant = (u & ((1u << KVT_F32_MANT_BITS) - 1)) | (1u << KVT_F32_MANT_BITS);
    unsigned shift = (unsigned)(KVT_F32_EXP_BIAS - 1) - e;
    if (shift > KVT_F32_MANT_BITS + 1) return sign;
    return (uint16_t)(sign | shift_rne(mant, shift));
}

float kvt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & F16_SIGN) << BF16_SHIFT;
    uint32_t e = (h >> F16_MANT_BITS) & F16_EXP_MAX, mant = h & F16_MANT;
    if (e == 0) { /* zero or subnormal: exact in f32 */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (e == F16_EXP_MAX) /* inf, or NaN made quiet (as F16C does) */
        return bits_f32(sign | F32_INF | (mant ? F32_QUIET : 0) | (mant << F16_DROP_BITS));
    return bits_f32(sign | ((e + F16_REBIAS) << KVT_F32_MANT_BITS) | (mant << F16_DROP_BITS));
}

uint16_t kvt_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & F32_ABS) > F32_INF) return (uint16_t)((u >> BF16_SHIFT) | BF16_QUIET);
    /* round to nearest even: add 0x7fff plus the lowest kept bit, then truncate */
    return (uint16_t)((u + 0x7fffu + ((u >> BF16_SHIFT) & 1)) >> BF16_SHIFT);
}

float kvt_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << BF16_SHIFT); }

/* ---- the canonical exp ------------------------------------------------- */

float kvt_expf(float x) {
    /* comparisons written as the SIMD min/max behave (NaN takes the bound) */
    float xc = x < KVT_EXP_HI ? x : KVT_EXP_HI;
    xc = xc > KVT_EXP_LO ? xc : KVT_EXP_LO;
    float nf = fmaf(xc, KVT_EXP_LOG2E, KVT_EXP_ROUND) - KVT_EXP_ROUND;
    float r = fmaf(nf, -KVT_EXP_LN2_HI, xc);
    r = fmaf(nf, -KVT_EXP_LN2_LO, r);
    float p = KVT_EXP_C7;
    p = fmaf(p, r, KVT_EXP_C6);
    p = fmaf(p, r, KVT_EXP_C5);
    p = fmaf(p, r, KVT_EXP_C4);
    p = fmaf(p, r, KVT_EXP_C3);
    p = fmaf(p, r, KVT_EXP_C2);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    int32_t n = (int32_t)nf;
    float scale = bits_f32((uint32_t)(n + KVT_F32_EXP_BIAS) << KVT_F32_MANT_BITS);
    return x < KVT_EXP_LO ? 0.0f : p * scale;
}

/* ---- scalar variant ---------------------------------------------------- */

/* The canonical lane tree (ops.h). */
static float lanes_sum(const float *l) {
    float s8[8], s4[4], s2[2];
    for (int i = 0; i < 8; i++) s8[i] = l[i] + l[i + 8];
    for (int i = 0; i < 4; i++) s4[i] = s8[i] + s8[i + 4];
    for (int i = 0; i < 2; i++) s2[i] = s4[i] + s4[i + 2];
    return s2[0] + s2[1];
}
float kvt_ops_lanes_sum(const float *l) { return lanes_sum(l); }

/* Element k of a row of type `type` as f32. */
static inline float w_elem(uint32_t type, const uint8_t *row, int64_t k) {
    switch (type) {
    case KVT_TYPE_F16: return kvt_f16_to_f32(kvt_load_u16(row + 2 * k));
    case KVT_TYPE_BF16: return kvt_bf16_to_f32(kvt_load_u16(row + 2 * k));
    default: {
        float v;
        memcpy(&v, row + 4 * k, sizeof v);
        return v;
    }
    }
}

static float sc_dot_row(uint32_t type, const uint8_t *row, const float *x, int64_t k) {
    float l[KVT_LANES] = {0};
    for (int64_t kk = 0; kk < k; kk += KVT_LANES)
        for (int j = 0; j < KVT_LANES; j++) {
            int64_t e = kk + j;
            float wv = e < k ? w_elem(type, row, e) : 0.0f, xv = e < k ? x[e] : 0.0f;
            l[j] = fmaf(wv, xv, l[j]);
        }
    return lanes_sum(l);
}

/* The Q8_0 lane tree (ops.h): llama.cpp's horizontal sum of 8 lanes. */
static float q8_lanes_sum(const float *l) {
    float s4[4];
    for (int i = 0; i < 4; i++) s4[i] = l[i] + l[i + 4];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

/* The Q8_0 dot (ops.h) in the selected order: "lanes" (8 lanes of 4-product
 * sums per block, then the lane tree) or "block" (one accumulator, one exact
 * integer per block, when block is 1). */
static float sc_dot_q8(const uint8_t *row, const uint8_t *xq, const float *xd, int64_t k, int block) {
    float l[KVT_Q8_LANES] = {0}, acc = 0.0f;
    for (int64_t b = 0; b < k / KVT_Q8_0_BLOCK; b++) {
        const uint8_t *blk = row + b * KVT_Q8_0_BYTES;
        const float d = kvt_f16_to_f32(kvt_load_u16(blk)) * xd[b];
        int32_t isum = 0;
        for (int g = 0; g < KVT_Q8_LANES; g++) {
            int32_t gsum = 0;
            for (int e = 0; e < KVT_Q8_GROUP; e++) {
                const int idx = g * KVT_Q8_GROUP + e;
                gsum += (int32_t)(int8_t)blk[KVT_Q8_0_SCALE_BYTES + idx] *
                    ((int32_t)xq[b * KVT_Q8_0_BLOCK + idx] - KVT_Q8_ACT_BIAS);
            }
            if (!block) l[g] = fmaf((float)gsum, d, l[g]);
            isum += gsum;
        }
        if (block) acc = fmaf((float)isum, d, acc);
    }
    return block ? acc : q8_lanes_sum(l);
}

static void sc_matmul_rows(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    const int64_t nbp = a->kpad / KVT_Q8_0_BLOCK;
    const int q8_block = kvt_ops_q8_block();
    for (int64_t t = 0; t < a->n; t++)
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
            y[t * ldy + r] = w->type == KVT_TYPE_Q8_0
                ? sc_dot_q8(row, a->xq + t * a->kpad, a->xd + t * nbp, a->k, q8_block)
                : sc_dot_row(w->type, row, a->xf + t * a->kpad, a->k);
        }
}

static float sc_dot_f32(const float *a, const float *b, int64_t n) {
    return sc_dot_row(KVT_TYPE_F32, (const uint8_t *)b, a, n);
}
static float sc_dot_f32_f16(const float *a, const uint16_t *b, int64_t n) {
    return sc_dot_row(KVT_TYPE_F16, (const uint8_t *)b, a, n);
}
static void sc_axpy_f32(float *y, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}
static void sc_axpy_f16(float *y, float a, const uint16_t *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = fmaf(a, kvt_f16_to_f32(x[i]), y[i]);
}
static void sc_f32_to_f16_row(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = kvt_f32_to_f16(x[i]);
}
static void sc_f16_to_f32_row(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = kvt_f16_to_f32(x[i]);
}
static void sc_round_f16_row(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = kvt_f16_to_f32(kvt_f32_to_f16(x[i]));
}
static void sc_round_bf16_row(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = kvt_bf16_to_f32(kvt_f32_to_bf16(x[i]));
}
static double sc_exp_sum(float *x, float m, int64_t n, int ph) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ph = 0) {
        float l[KVT_LANES] = {0};
        for (int j = ph; j < KVT_LANES && i < n; j++, i++) l[j] = x[i] = kvt_ops_vexpf(x[i] - m);
        sum += (double)lanes_sum(l);
    }
    return sum;
}
static void sc_scale_row(float *x, int64_t n, float s, int f16) {
    for (int64_t i = 0; i < n; i++) x[i] = f16 ? kvt_f16_to_f32(kvt_f32_to_f16(x[i] * s)) : x[i] * s;
}

static float sc_max(const float *x, int64_t n) {
    float m = x[0];
    for (int64_t i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}
/* The vector exp (ops_impl.h): ldexpf scales with one rounding, as scalef does. */
float kvt_ops_vexpf(float x) {
    float n = fmaf(x, KVT_SEXP_LOG2E, KVT_SEXP_SHIFT) - KVT_SEXP_SHIFT;
    float b = fmaf(-n, KVT_SEXP_LN2_HI, x);
    b = fmaf(-n, KVT_SEXP_LN2_LO, b);
    float u = b * b;
    float j = fmaf(fmaf(fmaf(KVT_SEXP_P5, b, KVT_SEXP_P4), u, fmaf(KVT_SEXP_P3, b, KVT_SEXP_P2)), u,
                   fmaf(KVT_SEXP_P1, b, 1.0f));
    if (n != n) return n;
    if (fabsf(n) > KVT_SEXP_NMAX) return n <= 0.0f ? 0.0f : INFINITY;
    return ldexpf(j, (int)n);
}
static void sc_silu_mul(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) gate[i] = gate[i] / (1.0f + kvt_ops_vexpf(0.0f - gate[i])) * up[i];
}

/* Q8_0 as llama.cpp's CPU backend quantizes activations on x86 (the AVX
 * quantize_row_q8_0, not the scalar reference): d = amax/127 rounded to f16,
 * q = round-half-even(x * (127/amax)) (0 when amax is 0). With s (Q8_1, for
 * Q4_1/Q5_1 weights) also s = d * sum(q) rounded to f16, d unrounded (its AVX
 * quantize_row_q8_1). 127/amax is not 1/d: the products differ by an ulp for
 * many x, enough to move a value near a half to the other integer. The
 * definition of kvt_ops_vtable.quantize_q8_row; the SIMD variants vectorize it. */
static void sc_quantize_q8_row(const float *x, int64_t k, uint8_t *q, float *d, float *s) {
    for (int64_t b = 0; b < k / KVT_Q8_0_BLOCK; b++) {
        const float *xb = x + b * KVT_Q8_0_BLOCK;
        float amax = 0.0f;
        for (int i = 0; i < KVT_Q8_0_BLOCK; i++) amax = fmaxf(amax, fabsf(xb[i]));
        float db = amax / KVT_Q8_MAX, id = amax != 0.0f ? KVT_Q8_MAX / amax : 0.0f;
        d[b] = kvt_f16_to_f32(kvt_f32_to_f16(db));
        uint32_t sum = 0; /* wraps (only a NaN block, whose q are INT_MIN, gets there) */
        for (int i = 0; i < KVT_Q8_0_BLOCK; i++) {
            int qi = (int)nearbyintf(xb[i] * id); /* the default mode: ties to even */
            sum += (uint32_t)qi;
            q[b * KVT_Q8_0_BLOCK + i] = (uint8_t)(qi + KVT_Q8_ACT_BIAS);
        }
        if (s) s[b] = kvt_f16_to_f32(kvt_f32_to_f16((float)(int32_t)sum * db));
    }
}

static const kvt_ops_vtable ops_scalar = {
    .name = "scalar",
    .matmul_rows = sc_matmul_rows,
    .matmul_k_rows = kvt_qk_mm_scalar,
    .matmul_ql_rows = kvt_ql_mm_scalar,
    .quantize_q8_row = sc_quantize_q8_row,
    .quantize_q8k_row = kvt_qk_quantize_acts,
    .dot_f32 = sc_dot_f32,
    .dot_f32_f16 = sc_dot_f32_f16,
    .axpy_f32 = sc_axpy_f32,
    .axpy_f16 = sc_axpy_f16,
    .f32_to_f16_row = sc_f32_to_f16_row,
    .f16_to_f32_row = sc_f16_to_f32_row,
    .round_f16_row = sc_round_f16_row,
    .round_bf16_row = sc_round_bf16_row,
    .exp_sum = sc_exp_sum,
    .max = sc_max,
    .scale_row = sc_scale_row,
    .silu_mul = sc_silu_mul,
    .attn_qk = kvt_attn_qk_scalar,
    .attn_av = kvt_attn_av_scalar,
    .kv_q8_dequant_rows = kvt_kv_q8_dequant_rows_scalar,
    .kv_q8_dequant_columns = kvt_kv_q8_dequant_columns_scalar,
};

/* ---- dispatch ---------------------------------------------------------- */

static const kvt_ops_vtable *g_ops;
static pthread_once_t g_ops_once = PTHREAD_ONCE_INIT;

static const kvt_ops_vtable *variant_by_name(const char *name) {
    if (!strcmp(name, "scalar")) return &ops_scalar;
    if (!strcmp(name, "avx2")) return kvt_ops_avx2();
    if (!strcmp(name, "avx512")) return kvt_ops_avx512();
    if (!strcmp(name, "amx")) return kvt_ops_amx();
    return NULL;
}

static void ops_select_default(void) {
    const char *env = getenv("KVT_OPS_VARIANT");
    const kvt_ops_vtable *v = env && *env ? variant_by_name(env) : NULL;
    if (!v) v = kvt_ops_amx();
    if (!v) v = kvt_ops_avx512();
    if (!v) v = kvt_ops_avx2();
    if (!v) v = &ops_scalar;
    if (!g_ops) g_ops = v;
}

/* The Q8_0 order: 0 "lanes" (default), 1 "block" (KVT_Q8_ORDER=block). */
static int g_q8_block;
static pthread_once_t g_q8_once = PTHREAD_ONCE_INIT;
static void q8_order_default(void) {
    const char *env = getenv("KVT_Q8_ORDER");
    g_q8_block = env && !strcmp(env, "block");
}

int kvt_ops_q8_block(void) {
    pthread_once(&g_q8_once, q8_order_default);
    return g_q8_block;
}

int kvt_ops_set_q8_order(const char *name) {
    if (!name || (strcmp(name, "lanes") && strcmp(name, "block"))) return -1;
    pthread_once(&g_q8_once, q8_order_default);
    g_q8_block = !strcmp(name, "block");
    return 0;
}

const char *kvt_ops_q8_order(void) { return kvt_ops_q8_block() ? "block" : "lanes"; }

static inline const kvt_ops_vtable *ops(void) {
    pthread_once(&g_ops_once, ops_select_default);
    return g_ops;
}

int kvt_ops_force_variant(const char *name) {
    const kvt_ops_vtable *v = name ? variant_by_name(name) : NULL;
    if (!v) return -1;
    pthread_once(&g_ops_once, ops_select_default);
    g_ops = v;
    return 0;
}

const char *kvt_ops_variant(void) { return ops()->name; }
const kvt_ops_vtable *kvt_ops_active(void) { return ops(); }
const char *kvt_ops_numerics_id(void) { return kvt_ops_q8_block() ? OPS_NUMERICS_ID_Q8_BLOCK : OPS_NUMERICS_ID; }

/* ---- public elementwise ops -------------------------------------------- */

void kvt_f32_to_f16_row(const float *x, uint16_t *y, int64_t n) { ops()->f32_to_f16_row(x, y, n); }
void kvt_f16_to_f32_row(const uint16_t *x, float *y, int64_t n) { ops()->f16_to_f32_row(x, y, n); }
float kvt_dot_f32_f16(const float *a, const uint16_t *b, int64_t n) { return ops()->dot_f32_f16(a, b, n); }
float kvt_dot_f32(const float *a, const float *b, int64_t n) { return ops()->dot_f32(a, b, n); }
void kvt_axpy_f16(float *y, float a, const uint16_t *x, int64_t n) { ops()->axpy_f16(y, a, x, n); }
void kvt_axpy_f32(float *y, float a, const float *x, int64_t n) { ops()->axpy_f32(y, a, x, n); }
void kvt_silu_mul(float *gate, const float *up, int64_t n) { ops()->silu_mul(gate, up, n); }

void kvt_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

/* As llama.cpp's CPU rms_norm: each square rounded to f32, summed in order in
 * double, the mean rounded to f32. Per token, so batch invariant. */
static void rms_apply(float *out, const float *x, const float *weight, int64_t n, double sum, float eps) {
    float mean = (float)(sum / (double)n);
    float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * weight[i];
}

void kvt_rmsnorm(float *out, const float *x, const float *weight, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float sq = x[i] * x[i];
        sum += (double)sq;
    }
    rms_apply(out, x, weight, n, sum, eps);
}

/* Four rows at a time: their sums are four independent chains, each still
 * the sequential double sum of its own row, so the adds overlap and the bits
 * are kvt_rmsnorm's. */
#define RMS_ROWS 4
void kvt_rmsnorm_rows(float *out, const float *x, const float *weight, int64_t rows, int64_t n, float eps) {
    int64_t r = 0;
    for (; r + RMS_ROWS <= rows; r += RMS_ROWS) {
        const float *xr = x + r * n;
        double sum[RMS_ROWS] = {0.0, 0.0, 0.0, 0.0};
        for (int64_t i = 0; i < n; i++)
            for (int j = 0; j < RMS_ROWS; j++) {
                float sq = xr[j * n + i] * xr[j * n + i];
                sum[j] += (double)sq;
            }
        for (int j = 0; j < RMS_ROWS; j++) rms_apply(out + (r + j) * n, xr + j * n, weight, n, sum[j], eps);
    }
    for (; r < rows; r++) kvt_rmsnorm(out + r * n, x + r * n, weight, n, eps);
}

void kvt_softmax(float *x, int64_t n) { kvt_softmax_at(x, n, 0); }

static void softmax_row(float *x, int64_t n, int64_t first, int f16) {
    const kvt_ops_vtable *v = ops();
    float m = v->max(x, n);
    float inv = (float)(1.0 / v->exp_sum(x, m, n, (int)(first % KVT_LANES))); /* as ggml: 1/sum in double */
    v->scale_row(x, n, inv, f16);
}

void kvt_softmax_at(float *x, int64_t n, int64_t first) { softmax_row(x, n, first, 0); }
void kvt_softmax_at_f16(float *x, int64_t n, int64_t first) { softmax_row(x, n, first, 1); }

/* ---- weight matrices --------------------------------------------------- */

size_t kvt_wmat_row_bytes(uint32_t type, int64_t cols) {
    if (cols < 0) return 0;
    switch (type) {
    case KVT_TYPE_F32: return (size_t)cols * sizeof(float);
    case KVT_TYPE_F16:
    case KVT_TYPE_BF16: return (size_t)cols * sizeof(uint16_t);
    case KVT_TYPE_Q8_0: return cols % KVT_Q8_0_BLOCK ? 0 : (size_t)(cols / KVT_Q8_0_BLOCK) * KVT_Q8_0_BYTES;
    default: {
        if (kvt_qk_is_k(type)) return cols % KVT_QK ? 0 : (size_t)(cols / KVT_QK) * kvt_qk_block_bytes(type);
        const kvt_ql_layout *L = kvt_ql_layout_of(type);
        return L && cols % KVT_QL_BLOCK == 0 ? (size_t)(cols / KVT_QL_BLOCK) * L->bytes : 0;
    }
    }
}

void kvt_wmat_row_f32(const kvt_wmat *w, int64_t r, float *out) {
    const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
    if (w->type == KVT_TYPE_Q8_0) {
        for (int64_t b = 0; b < w->cols / KVT_Q8_0_BLOCK; b++) {
            const uint8_t *blk = row + b * KVT_Q8_0_BYTES;
            float d = kvt_f16_to_f32(kvt_load_u16(blk));
            for (int i = 0; i < KVT_Q8_0_BLOCK; i++)
                out[b * KVT_Q8_0_BLOCK + i] = d * (float)(int8_t)blk[KVT_Q8_0_SCALE_BYTES + i];
        }
        return;
    }
    if (kvt_qk_is_k(w->type)) {
        kvt_qk_dequant_row(w->type, row, w->cols, out);
        return;
    }
    if (kvt_ql_is_legacy(w->type)) {
        kvt_ql_dequant_row(w->type, row, out, w->cols);
        return;
    }
    /* element by element: rows need not be 2- or 4-byte aligned, and one row
     * per token is cheap */
    for (int64_t k = 0; k < w->cols; k++) out[k] = w_elem(w->type, row, k);
}

/* ---- matmul driver ----------------------------------------------------- */

typedef struct {
    const kvt_ops_vtable *v;
    const kvt_wmat *w; /* the first of `count` matrices (same type and cols) */
    const kvt_wmat *const *ws;
    float *const *ys;
    const int64_t *ldys;
    int count;
    int64_t units; /* OPS_ROW_ALIGN row groups of all the matrices together */
    const float *x;
    int64_t ldx;
    kvt_acts a;
    float *xf;
    uint8_t *xq;
    float *xd, *xs;
    int8_t *kq;
    float *kd;
    int16_t *kbs;
} matmul_job;

static void convert_tokens(matmul_job *j, int64_t t0, int64_t t1) {
    const int64_t k = j->a.k, kpad = j->a.kpad, nbp = kpad / KVT_Q8_0_BLOCK;
    for (int64_t t = t0; t < t1; t++) {
        const float *src = j->x + t * j->ldx;
        if (kvt_qk_is_k(j->w->type)) { /* k is a multiple of 256, so kpad == k */
            j->v->quantize_q8k_row(src, k, j->kq + t * kpad, j->kd + t * (kpad / KVT_QK),
                                   j->kbs + t * (kpad / KVT_QK_GROUP));
            continue;
        }
        if (j->xq) { /* Q8_0 and the legacy types */
            float *xs = j->xs ? j->xs + t * nbp : NULL;
            j->v->quantize_q8_row(src, k, j->xq + t * kpad, j->xd + t * nbp, xs);
            memset(j->xq + t * kpad + k, KVT_Q8_ACT_BIAS, (size_t)(kpad - k));
            for (int64_t b = k / KVT_Q8_0_BLOCK; b < nbp; b++) {
                j->xd[t * nbp + b] = 0.0f;
                if (xs) xs[b] = 0.0f;
            }
            continue;
        }
        switch (j->w->type) {
        case KVT_TYPE_F16: j->v->round_f16_row(src, j->xf + t * kpad, k); break;
        case KVT_TYPE_BF16: j->v->round_bf16_row(src, j->xf + t * kpad, k); break;
        default: memcpy(j->xf + t * kpad, src, (size_t)k * sizeof(float)); break;
        }
        memset(j->xf + t * kpad + k, 0, (size_t)(kpad - k) * sizeof(float));
    }
}

static void convert_task(void *ctx, int ith, int nth) {
    matmul_job *j = ctx;
    convert_tokens(j, j->a.n * ith / nth, j->a.n * (ith + 1) / nth);
}

static int64_t row_units(const kvt_wmat *w) { return w->rows > 0 ? (w->rows + OPS_ROW_ALIGN - 1) / OPS_ROW_ALIGN : 0; }

/* The thread's share: a contiguous run of row groups over the matrices laid
 * end to end, so each thread streams one stretch of weights whatever the count. */
static void matmul_task(void *ctx, int ith, int nth) {
    matmul_job *j = ctx;
    const int64_t u0 = j->units * ith / nth, u1 = j->units * (ith + 1) / nth;
    int64_t base = 0; /* first unit of matrix i */
    for (int i = 0; i < j->count && base < u1; i++) {
        const kvt_wmat *w = j->ws[i];
        const int64_t nu = row_units(w);
        int64_t r0 = (KVT_MAX(u0, base) - base) * OPS_ROW_ALIGN, r1 = (KVT_MIN(u1, base + nu) - base) * OPS_ROW_ALIGN;
        if (r1 > w->rows) r1 = w->rows;
        base += nu;
        if (r0 >= r1) continue;
        (kvt_qk_is_k(w->type)            ? j->v->matmul_k_rows
             : kvt_ql_is_legacy(w->type) ? j->v->matmul_ql_rows
                                         : j->v->matmul_rows)(w, &j->a, r0, r1, j->ys[i], j->ldys[i]);
    }
}

static void *scratch_alloc(size_t bytes) {
    size_t rounded = (bytes + OPS_SCRATCH_ALIGN - 1) / OPS_SCRATCH_ALIGN * OPS_SCRATCH_ALIGN;
    void *p = aligned_alloc(OPS_SCRATCH_ALIGN, rounded ? rounded : OPS_SCRATCH_ALIGN);
    if (!p) {
        kvt_logk(KVT_LOG_ERROR, "bytes", "out of memory for %zu bytes of matmul scratch", bytes);
        abort();
    }
    return p;
}

void kvt_matmul(kvt_pool *pool, const kvt_wmat *w, const float *x, int64_t ldx, int64_t n, float *y, int64_t ldy) {
    kvt_matmul_multi(pool, &w, 1, x, ldx, n, &y, &ldy);
}

void kvt_matmul_multi(kvt_pool *pool, const kvt_wmat *const *ws, int count, const float *x, int64_t ldx, int64_t n,
                      float *const *ys, const int64_t *ldys) {
    if (n <= 0 || count <= 0) return;
    int same = 1; /* the leading matrices that can share one conversion of x */
    while (same < count && ws[same]->type == ws[0]->type && ws[same]->cols == ws[0]->cols) same++;
    if (same < count) {
        kvt_matmul_multi(pool, ws, same, x, ldx, n, ys, ldys);
        kvt_matmul_multi(pool, ws + same, count - same, x, ldx, n, ys + same, ldys + same);
        return;
    }
    const kvt_wmat *w = ws[0];
    const int64_t pad = 2 * KVT_Q8_0_BLOCK;
    matmul_job j = {.v = ops(), .w = w, .ws = ws, .ys = ys, .ldys = ldys, .count = count, .x = x, .ldx = ldx};
    for (int i = 0; i < count; i++) j.units += row_units(ws[i]);
    if (j.units == 0) return;
    j.a.n = n;
    j.a.k = w->cols;
    j.a.kpad = (w->cols + pad - 1) / pad * pad;
    if (kvt_qk_is_k(w->type)) {
        j.kq = scratch_alloc((size_t)(n * j.a.kpad));
        j.kd = scratch_alloc((size_t)(n * (j.a.kpad / KVT_QK)) * sizeof(float));
        j.kbs = scratch_alloc((size_t)(n * (j.a.kpad / KVT_QK_GROUP)) * sizeof(int16_t));
    } else if (w->type == KVT_TYPE_Q8_0 || kvt_ql_is_legacy(w->type)) {
        j.xq = scratch_alloc((size_t)(n * j.a.kpad));
        j.xd = scratch_alloc((size_t)(n * (j.a.kpad / KVT_Q8_0_BLOCK)) * sizeof(float));
        if (kvt_ql_has_min(w->type)) j.xs = scratch_alloc((size_t)(n * (j.a.kpad / KVT_Q8_0_BLOCK)) * sizeof(float));
    } else {
        j.xf = scratch_alloc((size_t)(n * j.a.kpad) * sizeof(float));
    }
    j.a.xf = j.xf;
    j.a.xq = j.xq;
    j.a.xd = j.xd;
    j.a.xs = j.xs;
    j.a.kq = j.kq;
    j.a.kd = j.kd;
    j.a.kbs = j.kbs;
    if (n >= OPS_PARALLEL_CONVERT_MIN && kvt_pool_threads(pool) > 1) kvt_pool_run(pool, convert_task, &j);
    else convert_tokens(&j, 0, n);
    kvt_pool_run(pool, matmul_task, &j);
    free(j.xf);
    free(j.xq);
    free(j.xd);
    free(j.xs);
    free(j.kq);
    free(j.kd);
    free(j.kbs);
}
