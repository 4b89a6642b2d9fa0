// SPDX-License-Identifier: MIT
/* Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL (and file-format Q8_0): layouts, dequantization,
 * llama.cpp-compatible quantizers and the scalar canonical dot (see
 * quant_legacy.h for the formats, ops.h for the numerics). */
#include "quant_legacy.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "ops_impl.h"

#define QL_HALF (KVT_QL_BLOCK / 2)
#define QL_NIBBLE 0x0F
#define QL_BIT4 0x10
#define Q4_LEVELS 15 /* largest 4-bit quant */
#define Q5_LEVELS 31 /* largest 5-bit quant */
#define Q8_LEVELS 127
/* llama.cpp's scale for the symmetric types: d = max / -8 (Q4_0), / -16 (Q5_0),
 * with max the element of largest magnitude, sign kept. */
#define Q4_0_DIV -8.0f
#define Q5_0_DIV -16.0f

static const kvt_ql_layout layouts[] = {KVT_QL_LAYOUT_Q4_0, KVT_QL_LAYOUT_Q4_1, KVT_QL_LAYOUT_Q5_0, KVT_QL_LAYOUT_Q5_1,
                                        KVT_QL_LAYOUT_IQ4_NL};
static const uint8_t iq4nl_biased[16] = KVT_IQ4NL_BIASED;

const kvt_ql_layout *kvt_ql_layout_of(uint32_t type) {
    return kvt_ql_is_legacy(type) ? &layouts[kvt_ql_index(type)] : NULL;
}

static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

void kvt_ql_unpack_block(const kvt_ql_layout *L, const uint8_t *blk, int8_t q[KVT_QL_BLOCK]) {
    const uint8_t *qs = blk + L->qs_off;
    const uint32_t qh = L->qh_off >= 0 ? load_u32(blk + L->qh_off) : 0;
    for (int j = 0; j < QL_HALF; j++) {
        int lo = qs[j] & QL_NIBBLE, hi = qs[j] >> 4;
        lo |= (int)((qh >> j) & 1) << 4;
        hi |= (int)((qh >> (j + QL_HALF)) & 1) << 4;
        if (L->nl) lo = iq4nl_biased[lo], hi = iq4nl_biased[hi];
        q[j] = (int8_t)(lo - L->zero);
        q[j + QL_HALF] = (int8_t)(hi - L->zero);
    }
}

void kvt_ql_dequant_row(uint32_t type, const uint8_t *row, float *out, int64_t n) {
    const kvt_ql_layout *L = kvt_ql_layout_of(type);
    int8_t q[KVT_QL_BLOCK];
    for (int64_t b = 0; b < n / KVT_QL_BLOCK; b++) {
        const uint8_t *blk = row + b * L->bytes;
        const float d = kvt_f16_to_f32(kvt_load_u16(blk));
        const float m = L->m_off >= 0 ? kvt_f16_to_f32(kvt_load_u16(blk + L->m_off)) : 0.0f;
        kvt_ql_unpack_block(L, blk, q);
        for (int i = 0; i < KVT_QL_BLOCK; i++)
            out[b * KVT_QL_BLOCK + i] = L->m_off >= 0 ? d * (float)q[i] + m : d * (float)q[i];
    }
}

/* ---- quantizers (llama.cpp's reference rounding, operation for operation:
 * the build is ISO C, so nothing is contracted into an fma) ------------------ */

static void put_f16(uint8_t *p, float f) {
    uint16_t h = kvt_f32_to_f16(f);
    memcpy(p, &h, sizeof h);
}

/* Packs 32 quants (0..31) into qs nibbles and, for Q5, the qh bits. */
static void pack_block(const kvt_ql_layout *L, uint8_t *blk, const uint8_t q[KVT_QL_BLOCK]) {
    uint32_t qh = 0;
    for (int j = 0; j < QL_HALF; j++) {
        blk[L->qs_off + j] = (uint8_t)((q[j] & QL_NIBBLE) | ((q[j + QL_HALF] & QL_NIBBLE) << 4));
        qh |= (uint32_t)((q[j] & QL_BIT4) >> 4) << j;
        qh |= (uint32_t)((q[j + QL_HALF] & QL_BIT4) >> 4) << (j + QL_HALF);
    }
    if (L->qh_off >= 0) memcpy(blk + L->qh_off, &qh, sizeof qh);
}

/* Q4_0 / Q5_0: symmetric around the element of largest magnitude. */
static void quant_sym(const kvt_ql_layout *L, const float *x, uint8_t *blk, float div, int levels) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < KVT_QL_BLOCK; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    const float d = max / div, id = d != 0.0f ? 1.0f / d : 0.0f;
    const float offset = (float)L->zero + 0.5f;
    uint8_t q[KVT_QL_BLOCK];
    for (int j = 0; j < KVT_QL_BLOCK; j++) {
        const float v = x[j] * id;
        const int8_t t = (int8_t)(v + offset); /* truncation, as llama.cpp's cast */
        q[j] = (uint8_t)(t < levels ? t : levels);
    }
    put_f16(blk, d);
    pack_block(L, blk, q);
}

/* Q4_1 / Q5_1: min and range. */
static void quant_min(const kvt_ql_layout *L, const float *x, uint8_t *blk, int levels) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < KVT_QL_BLOCK; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / (float)levels, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t q[KVT_QL_BLOCK];
    for (int j = 0; j < KVT_QL_BLOCK; j++) {
        const float v = (x[j] - min) * id;
        if (levels == Q4_LEVELS) {
            const int8_t t = (int8_t)(v + 0.5f);
            q[j] = (uint8_t)(t < levels ? t : levels);
        } else {
            q[j] = (uint8_t)(v + 0.5f); /* llama.cpp does not clamp Q5_1 */
        }
    }
    put_f16(blk, d);
    put_f16(blk + L->m_off, min);
    pack_block(L, blk, q);
}

/* IQ4_NL: the code book scaled by d, d tried at 2 * IQ4NL_TRIES + 1 values
 * within 10 % of max / -127 and of max / 113 (max the element of largest
 * magnitude, sign kept: on either end of the book); each weight takes the
 * nearest scaled value, and the d with the least x^2-weighted squared error
 * wins (the first of equals). */
#define IQ4NL_TRIES 7
#define IQ4NL_STEP 0.1f
static float iq4nl_codes(const float *x, float d, uint8_t q[KVT_QL_BLOCK]) {
    static const int8_t values[16] = KVT_IQ4NL_VALUES;
    float err = 0.0f;
    for (int j = 0; j < KVT_QL_BLOCK; j++) {
        int best = 0;
        float bd = FLT_MAX;
        /* d * values[c] is monotonic in c, so the error falls, then rises:
         * the scan can stop at the first rise (the same code as a full scan) */
        for (int c = 0; c < 16; c++) {
            const float e = fabsf(x[j] - d * (float)values[c]);
            if (e < bd) bd = e, best = c;
            else if (e > bd) break;
        }
        q[j] = (uint8_t)best;
        err += x[j] * x[j] * bd * bd;
    }
    return err;
}

static void quant_iq4nl(const kvt_ql_layout *L, const float *x, uint8_t *blk) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < KVT_QL_BLOCK; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    uint8_t q[KVT_QL_BLOCK], t[KVT_QL_BLOCK];
    float best_d = 0.0f, best_err = FLT_MAX;
    memset(q, 0, sizeof q);                         /* an all-zero block keeps d = 0: every weight 0 */
    static const float ends[2] = {-127.0f, 113.0f}; /* max on the book's negative or positive end */
    for (int e = 0; amax > 0.0f && e < 2; e++)
        for (int i = -IQ4NL_TRIES; i <= IQ4NL_TRIES; i++) {
            /* d through its f16 rounding, so the codes fit the scale stored */
            const float d = kvt_f16_to_f32(kvt_f32_to_f16(max / (ends[e] * (1.0f + IQ4NL_STEP * (float)i / 8.0f))));
            const float err = iq4nl_codes(x, d, t);
            if (err < best_err) best_err = err, best_d = d, memcpy(q, t, sizeof q);
        }
    put_f16(blk, best_d);
    pack_block(L, blk, q);
}

static void quant_q8_0(const float *x, uint8_t *blk) {
    float amax = 0.0f;
    for (int j = 0; j < KVT_QL_BLOCK; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
    const float d = amax / (float)Q8_LEVELS, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(blk, d);
    for (int j = 0; j < KVT_QL_BLOCK; j++) blk[KVT_Q8_0_SCALE_BYTES + j] = (uint8_t)(int8_t)roundf(x[j] * id);
}

int kvt_ql_quantize_row(uint32_t type, const float *x, uint8_t *out, int64_t n) {
    const kvt_ql_layout *L = kvt_ql_layout_of(type);
    if (!L && type != KVT_TYPE_Q8_0) return -1;
    const size_t bytes = L ? L->bytes : KVT_Q8_0_BYTES;
    for (int64_t b = 0; b < n / KVT_QL_BLOCK; b++) {
        const float *xb = x + b * KVT_QL_BLOCK;
        uint8_t *blk = out + (size_t)b * bytes;
        switch (type) {
        case KVT_TYPE_Q4_0: quant_sym(L, xb, blk, Q4_0_DIV, Q4_LEVELS); break;
        case KVT_TYPE_Q5_0: quant_sym(L, xb, blk, Q5_0_DIV, Q5_LEVELS); break;
        case KVT_TYPE_Q4_1: quant_min(L, xb, blk, Q4_LEVELS); break;
        case KVT_TYPE_Q5_1: quant_min(L, xb, blk, Q5_LEVELS); break;
        case KVT_TYPE_IQ4_NL: quant_iq4nl(L, xb, blk); break;
        default: quant_q8_0(xb, blk); break;
        }
    }
    return 0;
}

/* ---- the canonical dot (ops.h) -------------------------------------------- */

float kvt_ql_dot_scalar(uint32_t type, const uint8_t *row, const uint8_t *xq, const float *xd, const float *xs,
                        int64_t k) {
    const kvt_ql_layout *L = kvt_ql_layout_of(type);
    const int64_t nb = k / KVT_QL_BLOCK;
    const int lanes_per_block = KVT_LANES / 2, group = KVT_QL_BLOCK / lanes_per_block;
    float l[KVT_LANES] = {0};
    int8_t q[KVT_QL_BLOCK];
    for (int64_t b0 = 0; b0 < nb; b0 += 2) {
        float mw[KVT_LANES] = {0}, sx[KVT_LANES] = {0};
        for (int h = 0; h < 2; h++) {
            const int64_t b = b0 + h;
            const uint8_t *blk = row + b * L->bytes;
            float dd = 0.0f;
            if (b < nb) {
                kvt_ql_unpack_block(L, blk, q);
                dd = kvt_f16_to_f32(kvt_load_u16(blk)) * xd[b];
                if (L->m_off >= 0) {
                    mw[h * lanes_per_block] = kvt_f16_to_f32(kvt_load_u16(blk + L->m_off));
                    sx[h * lanes_per_block] = xs[b];
                }
            } else {
                memset(q, 0, sizeof q);
            }
            for (int g = 0; g < lanes_per_block; g++) {
                int32_t isum = 0;
                for (int e = 0; e < group; e++) {
                    const int i = g * group + e;
                    isum += (int32_t)q[i] * ((int32_t)xq[b * KVT_QL_BLOCK + i] - KVT_Q8_ACT_BIAS);
                }
                l[h * lanes_per_block + g] = fmaf((float)isum, dd, l[h * lanes_per_block + g]);
            }
        }
        if (L->m_off >= 0)
            for (int j = 0; j < KVT_LANES; j++) l[j] = fmaf(mw[j], sx[j], l[j]);
    }
    return kvt_ops_lanes_sum(l);
}

void kvt_ql_mm_scalar(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    const int64_t nbp = a->kpad / KVT_QL_BLOCK;
    for (int64_t t = 0; t < a->n; t++)
        for (int64_t r = r0; r < r1; r++)
            y[t * ldy + r] = kvt_ql_dot_scalar(w->type, (const uint8_t *)w->data + (size_t)r * w->row_bytes,
                                               a->xq + t * a->kpad, a->xd + t * nbp, a->xs ? a->xs + t * nbp : NULL,
                                               a->k);
}
