// SPDX-License-Identifier: MIT
/* K-quant weight quantizers: choose each group's scale (and min) by a small
 * search over candidate grids, each scored by a weighted least-squares fit,
 * then quantize the per-group scales against one f16 super-block scale and
 * round every weight with the scales it will be dequantized with. IQ4_XS
 * searches each sub-block's scale against its code book the same way. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ops.h"
#include "quant_k.h"
#include "quant_legacy.h"

/* Candidate grids: the code range is stretched by nmax + STEP*s, s in [lo, hi]. */
#define FIT_STEP 0.1f
#define FIT_AFFINE_LO -10
#define FIT_AFFINE_HI 10
#define FIT_SYM_LO -9
#define FIT_SYM_HI 9
#define FIT_TINY 1e-15f
#define MAX_SUB 32

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* x[i] ~ a * L[i] - m with L in [0, nmax], a >= 0, m >= 0, minimizing
 * sum w (a L + b - x)^2 (b = -m) over the candidate code assignments. */
static void fit_affine(const float *x, const float *w, int n, int nmax, uint8_t *L, float *a_out, float *m_out) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
    }
    if (lo > 0) lo = 0;
    memset(L, 0, (size_t)n);
    *a_out = 0.0f;
    *m_out = -lo;
    if (hi == lo) return;
    /* the plain min/max grid is the starting point */
    float best_a = (hi - lo) / (float)nmax, best_b = lo, best_err = 0.0f;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(kvt_qk_round((x[i] - lo) / best_a), 0, nmax);
        float e = best_a * L[i] + best_b - x[i];
        best_err += w[i] * e * e;
    }
    uint8_t c[MAX_SUB];
    for (int s = FIT_AFFINE_LO; s <= FIT_AFFINE_HI; s++) {
        float iscale = ((float)nmax + FIT_STEP * (float)s) / (hi - lo);
        double sw = 0, sl = 0, sl2 = 0, sx = 0, sxl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(kvt_qk_round((x[i] - lo) * iscale), 0, nmax);
            c[i] = (uint8_t)l;
            sw += w[i];
            sl += w[i] * l;
            sl2 += w[i] * l * l;
            sx += w[i] * x[i];
            sxl += w[i] * x[i] * l;
        }
        double det = sw * sl2 - sl * sl;
        if (!(det > 0)) continue;
        double a = (sw * sxl - sx * sl) / det, b = (sl2 * sx - sl * sxl) / det;
        if (b > 0) { /* the offset may only lower the codes' values */
            b = 0;
            a = sxl / sl2;
        }
        if (!(a > 0)) continue;
        float err = 0.0f;
        for (int i = 0; i < n; i++) {
            float e = (float)a * c[i] + (float)b - x[i];
            err += w[i] * e * e;
        }
        if (err < best_err) {
            best_err = err;
            best_a = (float)a;
            best_b = (float)b;
            memcpy(L, c, (size_t)n);
        }
    }
    *a_out = best_a;
    *m_out = -best_b;
}

/* x[i] ~ a * L[i] with L in [-nmax, nmax-1] (a may be negative: the value of
 * largest magnitude goes to the roomier end, -nmax); weights x^2. Returns a. */
static float fit_symmetric(const float *x, int n, int nmax) {
    float amax = 0.0f, mx = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            mx = x[i];
        }
    if (amax < FIT_TINY) return 0.0f;
    double best = -1.0, best_a = 0.0;
    for (int s = FIT_SYM_LO; s <= FIT_SYM_HI; s++) {
        float iscale = -((float)nmax + FIT_STEP * (float)s) / mx;
        double sxl = 0, sl2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(kvt_qk_round(iscale * x[i]), -nmax, nmax - 1);
            double w = (double)x[i] * x[i];
            sxl += w * x[i] * l;
            sl2 += w * l * l;
        }
        /* the fitted error is sum w x^2 - sxl^2 / sl2: maximize the last term */
        if (sl2 > 0 && sxl * sxl / sl2 > best) {
            best = sxl * sxl / sl2;
            best_a = sxl / sl2;
        }
    }
    return (float)best_a;
}

/* Integer scales against one f16 super-scale: q = round(v / d), d = vmax / levels. */
static uint16_t quantize_scales(const float *v, int n, float vmax, int levels, int lo, int hi, int16_t *q) {
    uint16_t dh = kvt_f32_to_f16(vmax / (float)levels);
    float d = kvt_f16_to_f32(dh);
    for (int i = 0; i < n; i++) q[i] = (int16_t)(d != 0.0f ? clampi(kvt_qk_round(v[i] / d), lo, hi) : 0);
    return dh;
}

/* Codes from the final integer scales, as dequantization will read them. */
static void final_codes(uint32_t type, const float *x, kvt_qk_block *b) {
    const int off = kvt_qk_code_offset(type);
    const int umax = type == KVT_TYPE_Q2_K ? 3
        : type == KVT_TYPE_Q3_K            ? 7
        : type == KVT_TYPE_Q4_K            ? 15
        : type == KVT_TYPE_Q5_K            ? 31
                                           : 63;
    for (int g = 0; g < KVT_QK_NGROUP; g++) {
        const float dl = b->d * (float)b->sc[g], ml = b->dmin * (float)b->mn[g];
        for (int i = g * KVT_QK_GROUP; i < (g + 1) * KVT_QK_GROUP; i++)
            b->u[i] = (uint8_t)(dl != 0.0f ? clampi(kvt_qk_round((x[i] + ml) / dl) + off, 0, umax) : off);
    }
}

/* ---- IQ4_XS ----------------------------------------------------------------
 * Per sub-block of 32 the scale a is searched at 2 * IQ4XS_TRIES + 1 values
 * within 10 % of max / -127 and of max / 113 (max the element of largest
 * magnitude, sign kept: on either end of the book), each weight taking the
 * book value nearest x / a, scored by the x^2-weighted squared error. The
 * eight scales are then integers in [-32, 31] against one f16 d (the largest
 * at -32), each tried one step either way, and every weight takes the book
 * value nearest it at the scale it is dequantized with. */
#define IQ4XS_TRIES 7
#define IQ4XS_SUB 32
#define IQ4XS_SMIN -32
#define IQ4XS_SMAX 31
static const int8_t iq4_book[16] = KVT_IQ4NL_VALUES;

/* Book indices of n weights at scale a (the nearest a * value), and the
 * x^2-weighted squared error. |x - a b| = |a| |x / a - b|, so the index is
 * the count of the book's midpoints below x / a. */
static float iq4_codes(const float *x, int n, float a, uint8_t *c) {
    static const float mid[15] = {-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
                                  7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f};
    const float ia = a != 0.0f ? 1.0f / a : 0.0f; /* a = 0: every weight 0, whatever its code */
    float err = 0.0f;
    for (int j = 0; j < n; j++) {
        const float t = x[j] * ia;
        int k = 0;
        for (int m = 0; m < 15; m++) k += t > mid[m];
        const float e = x[j] - a * (float)iq4_book[k];
        c[j] = (uint8_t)k;
        err += x[j] * x[j] * e * e;
    }
    return err;
}

static float iq4_fit(const float *x) {
    float amax = 0.0f, max = 0.0f, best_a = 0.0f, best_err = FLT_MAX;
    for (int j = 0; j < IQ4XS_SUB; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
    static const float ends[2] = {-127.0f, 113.0f};
    uint8_t c[IQ4XS_SUB];
    for (int e = 0; amax > 0.0f && e < 2; e++)
        for (int i = -IQ4XS_TRIES; i <= IQ4XS_TRIES; i++) {
            const float a = max / (ends[e] * (1.0f + FIT_STEP * (float)i / 8.0f));
            const float err = iq4_codes(x, IQ4XS_SUB, a, c);
            if (err < best_err) best_err = err, best_a = a;
        }
    return best_a;
}

static void quantize_iq4xs(const float *x, uint8_t *out) {
    kvt_qk_block b;
    memset(&b, 0, sizeof b);
    float scale[KVT_QK / IQ4XS_SUB], ms = 0.0f;
    for (int j = 0; j < KVT_QK / IQ4XS_SUB; j++) {
        scale[j] = iq4_fit(x + j * IQ4XS_SUB);
        if (fabsf(scale[j]) > fabsf(ms)) ms = scale[j];
    }
    int16_t ls[KVT_QK / IQ4XS_SUB];
    const uint16_t dh = quantize_scales(scale, KVT_QK / IQ4XS_SUB, ms, IQ4XS_SMIN, IQ4XS_SMIN, IQ4XS_SMAX, ls);
    b.d = kvt_f16_to_f32(dh);
    uint8_t c[IQ4XS_SUB], best_c[IQ4XS_SUB];
    for (int j = 0; j < KVT_QK / IQ4XS_SUB; j++) {
        const float *xs = x + j * IQ4XS_SUB;
        int best = ls[j];
        float best_err = FLT_MAX;
        for (int s = ls[j] - 1; s <= ls[j] + 1; s++) {
            if (s < IQ4XS_SMIN || s > IQ4XS_SMAX) continue;
            const float err = iq4_codes(xs, IQ4XS_SUB, b.d * (float)s, c); /* the dequantization's dl */
            if (err < best_err) best_err = err, best = s, memcpy(best_c, c, sizeof c);
        }
        b.sc[2 * j] = b.sc[2 * j + 1] = (int16_t)best;
        for (int i = 0; i < IQ4XS_SUB; i++) b.u[j * IQ4XS_SUB + i] = (uint8_t)(iq4_book[best_c[i]] + 128);
    }
    kvt_qk_pack(KVT_TYPE_IQ4_XS, &b, dh, 0, out);
}

static void quantize_block(uint32_t type, const float *x, uint8_t *out) {
    if (type == KVT_TYPE_IQ4_XS) {
        quantize_iq4xs(x, out);
        return;
    }
    kvt_qk_block b;
    memset(&b, 0, sizeof b);
    uint16_t dh = 0, dminh = 0;
    if (kvt_qk_has_min(type)) {
        /* Q2_K: 16 groups of 16, 2-bit codes, 4-bit scales; Q4_K/Q5_K: 8
         * sub-blocks of 32, 4/5-bit codes, 6-bit scales */
        const int sub = type == KVT_TYPE_Q2_K ? KVT_QK_GROUP : 32, nsub = KVT_QK / sub;
        const int nmax = type == KVT_TYPE_Q2_K ? 3 : type == KVT_TYPE_Q4_K ? 15 : 31;
        const int slev = type == KVT_TYPE_Q2_K ? 15 : 63;
        float scale[KVT_QK_NGROUP], mins[KVT_QK_NGROUP], w[MAX_SUB], smax = 0, mmax = 0;
        uint8_t L[MAX_SUB];
        for (int j = 0; j < nsub; j++) {
            const float *xs = x + j * sub;
            float ss = 0;
            for (int i = 0; i < sub; i++) ss += xs[i] * xs[i];
            float rms = sqrtf(ss / (float)sub);
            /* importance: large weights matter more, small ones still count */
            for (int i = 0; i < sub; i++) w[i] = type == KVT_TYPE_Q2_K ? fabsf(xs[i]) : rms + fabsf(xs[i]);
            fit_affine(xs, w, sub, nmax, L, &scale[j], &mins[j]);
            smax = fmaxf(smax, scale[j]);
            mmax = fmaxf(mmax, mins[j]);
        }
        int16_t qs[KVT_QK_NGROUP], qm[KVT_QK_NGROUP];
        dh = quantize_scales(scale, nsub, smax, slev, 0, slev, qs);
        dminh = quantize_scales(mins, nsub, mmax, slev, 0, slev, qm);
        for (int g = 0; g < KVT_QK_NGROUP; g++) {
            b.sc[g] = qs[g * KVT_QK_GROUP / sub];
            b.mn[g] = qm[g * KVT_QK_GROUP / sub];
        }
        b.d = kvt_f16_to_f32(dh);
        b.dmin = kvt_f16_to_f32(dminh);
    } else {
        /* Q3_K: codes -4..3, 6-bit signed scales; Q6_K: codes -32..31, int8 scales */
        const int nmax = type == KVT_TYPE_Q3_K ? 4 : 32;
        const int slo = type == KVT_TYPE_Q3_K ? -32 : -128, shi = type == KVT_TYPE_Q3_K ? 31 : 127;
        float scale[KVT_QK_NGROUP], ms = 0;
        for (int g = 0; g < KVT_QK_NGROUP; g++) {
            scale[g] = fit_symmetric(x + g * KVT_QK_GROUP, KVT_QK_GROUP, nmax);
            if (fabsf(scale[g]) > fabsf(ms)) ms = scale[g];
        }
        /* the largest scale goes to the roomier end of the scale range, -2^(bits-1) */
        dh = quantize_scales(scale, KVT_QK_NGROUP, ms, slo, slo, shi, b.sc);
        b.d = kvt_f16_to_f32(dh);
    }
    final_codes(type, x, &b);
    kvt_qk_pack(type, &b, dh, dminh, out);
}

int kvt_qk_quantize_row(uint32_t type, const float *x, int64_t n, uint8_t *out) {
    if (!kvt_qk_is_k(type)) return -1;
    for (int64_t blk = 0; blk < n / KVT_QK; blk++)
        quantize_block(type, x + blk * KVT_QK, out + (size_t)blk * kvt_qk_block_bytes(type));
    return 0;
}
