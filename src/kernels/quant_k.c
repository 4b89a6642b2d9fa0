// SPDX-License-Identifier: MIT
/* K-quant super-blocks: where every bit of each type sits (unpack and pack),
 * dequantization, Q8_K activations and the canonical scalar dot product that
 * the SIMD kernels (ops_k_x86.c) reproduce bit for bit. */
#include "quant_k.h"

#include <math.h>
#include <string.h>

#include "ops_impl.h"
#include "quant_legacy.h"

#define Q3K_SCALE_BIAS 32
#define Q3K_OFF 4
#define Q6K_OFF 32
#define SUB32 32 /* Q4_K/Q5_K and IQ4_XS scale their weights in sub-blocks of 32 (two groups) */
#define IQ4XS_SCALE_BIAS 32
#define IQ4XS_OFF 128 /* the code book's values + 128 are the unsigned codes */

static const uint8_t iq4_biased[16] = KVT_IQ4NL_BIASED;

int kvt_qk_is_k(uint32_t type) { return (type >= KVT_TYPE_Q2_K && type <= KVT_TYPE_Q6_K) || type == KVT_TYPE_IQ4_XS; }

size_t kvt_qk_block_bytes(uint32_t type) {
    switch (type) {
    case KVT_TYPE_Q2_K: return 84;
    case KVT_TYPE_Q3_K: return 110;
    case KVT_TYPE_Q4_K: return 144;
    case KVT_TYPE_Q5_K: return 176;
    case KVT_TYPE_Q6_K: return 210;
    case KVT_TYPE_IQ4_XS: return 136;
    default: return 0;
    }
}

int kvt_qk_code_offset(uint32_t type) {
    return type == KVT_TYPE_Q3_K ? Q3K_OFF : type == KVT_TYPE_Q6_K ? Q6K_OFF : type == KVT_TYPE_IQ4_XS ? IQ4XS_OFF : 0;
}

int kvt_qk_has_min(uint32_t type) { return type == KVT_TYPE_Q2_K || type == KVT_TYPE_Q4_K || type == KVT_TYPE_Q5_K; }

static float f16_at(const uint8_t *p) { return kvt_f16_to_f32(kvt_load_u16(p)); }

/* Q4_K/Q5_K: eight 6-bit scales and mins in 12 bytes. Bytes 0-3 hold scales
 * 0-3 (low 6 bits) and the top 2 bits of scales 4-7; bytes 4-7 the same for
 * mins; bytes 8-11 the low nibbles of scale (low) and min (high) 4-7. */
static void unpack_scales6(const uint8_t *s, int sub, uint8_t *sc, uint8_t *mn) {
    if (sub < 4) {
        *sc = s[sub] & 63;
        *mn = s[sub + 4] & 63;
    } else {
        *sc = (uint8_t)((s[sub + 4] & 0xF) | ((s[sub - 4] >> 6) << 4));
        *mn = (uint8_t)((s[sub + 4] >> 4) | ((s[sub] >> 6) << 4));
    }
}

static void pack_scales6(const uint8_t *sc, const uint8_t *mn, uint8_t *s) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
    }
}

/* Q3_K: sixteen 6-bit scales in 12 bytes. Low nibbles: groups 0-7 in the low
 * halves of bytes 0-7, groups 8-15 in their high halves; the top 2 bits of
 * group g sit in byte 8 + g%4 at bit 2*(g/4). */
static int q3_scale(const uint8_t *s, int g) {
    int lo = g < 8 ? s[g] & 0xF : s[g - 8] >> 4;
    int hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
    return (lo | (hi << 4)) - Q3K_SCALE_BIAS;
}

/* IQ4_XS: sub-block j's 6-bit scale takes nibble j%2 of scales_l[j/2] as its
 * bits 0-3 and bits 2j..2j+1 of scales_h as its bits 4-5. */
static int iq4xs_scale(const uint8_t *blk, int j) {
    int lo = (blk[KVT_IQ4XS_SCALES_L + j / 2] >> (4 * (j % 2))) & 0xF;
    int hi = (kvt_load_u16(blk + KVT_IQ4XS_SCALES_H) >> (2 * j)) & 3;
    return (lo | (hi << 4)) - IQ4XS_SCALE_BIAS;
}

/* The code book index of an unpacked IQ4_XS code (the inverse of iq4_biased). */
static unsigned iq4_index(unsigned u) {
    for (unsigned c = 0; c < 16; c++)
        if (iq4_biased[c] == u) return c;
    return 0;
}

void kvt_qk_unpack_scales(uint32_t type, const uint8_t *blk, kvt_qk_block *b) {
    uint8_t sc, mn;
    switch (type) {
    case KVT_TYPE_Q2_K:
        for (int g = 0; g < KVT_QK_NGROUP; g++) {
            b->sc[g] = blk[KVT_Q2K_SCALES + g] & 0xF;
            b->mn[g] = blk[KVT_Q2K_SCALES + g] >> 4;
        }
        b->d = f16_at(blk + KVT_Q2K_D);
        b->dmin = f16_at(blk + KVT_Q2K_DMIN);
        break;
    case KVT_TYPE_Q3_K:
        for (int g = 0; g < KVT_QK_NGROUP; g++) {
            b->sc[g] = (int16_t)q3_scale(blk + KVT_Q3K_SCALES, g);
            b->mn[g] = 0;
        }
        b->d = f16_at(blk + KVT_Q3K_D);
        b->dmin = 0.0f;
        break;
    case KVT_TYPE_Q4_K:
    case KVT_TYPE_Q5_K:
        for (int j = 0; j < KVT_QK / SUB32; j++) {
            unpack_scales6(blk + KVT_Q45K_SCALES, j, &sc, &mn);
            b->sc[2 * j] = b->sc[2 * j + 1] = sc;
            b->mn[2 * j] = b->mn[2 * j + 1] = mn;
        }
        b->d = f16_at(blk + KVT_Q45K_D);
        b->dmin = f16_at(blk + KVT_Q45K_DMIN);
        break;
    case KVT_TYPE_Q6_K:
        for (int g = 0; g < KVT_QK_NGROUP; g++) {
            b->sc[g] = (int8_t)blk[KVT_Q6K_SCALES + g];
            b->mn[g] = 0;
        }
        b->d = f16_at(blk + KVT_Q6K_D);
        b->dmin = 0.0f;
        break;
    case KVT_TYPE_IQ4_XS:
        for (int j = 0; j < KVT_QK / SUB32; j++) {
            b->sc[2 * j] = b->sc[2 * j + 1] = (int16_t)iq4xs_scale(blk, j);
            b->mn[2 * j] = b->mn[2 * j + 1] = 0;
        }
        b->d = f16_at(blk + KVT_IQ4XS_D);
        b->dmin = 0.0f;
        break;
    }
}

/* Code bit positions. Q2_K/Q3_K: weight i = 128h + 32j + l takes bits 2j..2j+1
 * of qs[32h + l]; Q3_K's bit 2 is bit 4h+j of hmask[l]. Q4_K/Q5_K: weight
 * i = 64c + 32s + l takes nibble s of qs[32c + l]; Q5_K's bit 4 is bit 2c+s of
 * qh[l]. Q6_K: weight i = 128h + 32k + l takes nibble k/2 of
 * ql[64h + 32(k%2) + l] and bits 2k..2k+1 of qh[32h + l] as its bits 4-5.
 * IQ4_XS: weight i = 32j + 16s + l takes nibble s of qs[16j + l] as its code
 * book index. */
void kvt_qk_unpack(uint32_t type, const uint8_t *blk, kvt_qk_block *b) {
    kvt_qk_unpack_scales(type, blk, b);
    for (int i = 0; i < KVT_QK; i++) {
        int h = i / 128, j = (i % 128) / 32, l = i % 32, c = i / 64, s = (i % 64) / 32;
        unsigned u = 0;
        switch (type) {
        case KVT_TYPE_Q2_K: u = (blk[KVT_Q2K_QS + 32 * h + l] >> (2 * j)) & 3; break;
        case KVT_TYPE_Q3_K:
            u = ((blk[KVT_Q3K_QS + 32 * h + l] >> (2 * j)) & 3) | (((blk[KVT_Q3K_HMASK + l] >> (4 * h + j)) & 1) << 2);
            break;
        case KVT_TYPE_Q4_K: u = (blk[KVT_Q4K_QS + 32 * c + l] >> (4 * s)) & 0xF; break;
        case KVT_TYPE_Q5_K:
            u = ((blk[KVT_Q5K_QS + 32 * c + l] >> (4 * s)) & 0xF) | (((blk[KVT_Q5K_QH + l] >> (2 * c + s)) & 1) << 4);
            break;
        case KVT_TYPE_Q6_K:
            u = ((blk[KVT_Q6K_QL + 64 * h + 32 * (j % 2) + l] >> (4 * (j / 2))) & 0xF) |
                (((blk[KVT_Q6K_QH + 32 * h + l] >> (2 * j)) & 3) << 4);
            break;
        case KVT_TYPE_IQ4_XS:
            u = iq4_biased[(blk[KVT_IQ4XS_QS + 16 * (i / 32) + i % 16] >> (4 * ((i % 32) / 16))) & 0xF];
            break;
        }
        b->u[i] = (uint8_t)u;
    }
}

void kvt_qk_pack(uint32_t type, const kvt_qk_block *b, uint16_t d, uint16_t dmin, uint8_t *blk) {
    memset(blk, 0, kvt_qk_block_bytes(type));
    uint8_t sc8[8], mn8[8];
    switch (type) {
    case KVT_TYPE_Q2_K:
        for (int g = 0; g < KVT_QK_NGROUP; g++) blk[KVT_Q2K_SCALES + g] = (uint8_t)(b->sc[g] | (b->mn[g] << 4));
        memcpy(blk + KVT_Q2K_D, &d, 2);
        memcpy(blk + KVT_Q2K_DMIN, &dmin, 2);
        break;
    case KVT_TYPE_Q3_K:
        for (int g = 0; g < KVT_QK_NGROUP; g++) {
            int v = b->sc[g] + Q3K_SCALE_BIAS;
            blk[KVT_Q3K_SCALES + (g % 8)] |= (uint8_t)((v & 0xF) << (g < 8 ? 0 : 4));
            blk[KVT_Q3K_SCALES + 8 + g % 4] |= (uint8_t)((v >> 4) << (2 * (g / 4)));
        }
        memcpy(blk + KVT_Q3K_D, &d, 2);
        break;
    case KVT_TYPE_Q4_K:
    case KVT_TYPE_Q5_K:
        for (int j = 0; j < 8; j++) {
            sc8[j] = (uint8_t)b->sc[2 * j];
            mn8[j] = (uint8_t)b->mn[2 * j];
        }
        pack_scales6(sc8, mn8, blk + KVT_Q45K_SCALES);
        memcpy(blk + KVT_Q45K_D, &d, 2);
        memcpy(blk + KVT_Q45K_DMIN, &dmin, 2);
        break;
    case KVT_TYPE_Q6_K:
        for (int g = 0; g < KVT_QK_NGROUP; g++) blk[KVT_Q6K_SCALES + g] = (uint8_t)(int8_t)b->sc[g];
        memcpy(blk + KVT_Q6K_D, &d, 2);
        break;
    case KVT_TYPE_IQ4_XS: {
        uint16_t sh = 0;
        for (int j = 0; j < KVT_QK / SUB32; j++) {
            int v = b->sc[2 * j] + IQ4XS_SCALE_BIAS;
            blk[KVT_IQ4XS_SCALES_L + j / 2] |= (uint8_t)((v & 0xF) << (4 * (j % 2)));
            sh |= (uint16_t)(((v >> 4) & 3) << (2 * j));
        }
        memcpy(blk + KVT_IQ4XS_SCALES_H, &sh, 2);
        memcpy(blk + KVT_IQ4XS_D, &d, 2);
        break;
    }
    }
    for (int i = 0; i < KVT_QK; i++) {
        int h = i / 128, j = (i % 128) / 32, l = i % 32, c = i / 64, s = (i % 64) / 32;
        unsigned u = b->u[i];
        switch (type) {
        case KVT_TYPE_Q2_K: blk[KVT_Q2K_QS + 32 * h + l] |= (uint8_t)((u & 3) << (2 * j)); break;
        case KVT_TYPE_Q3_K:
            blk[KVT_Q3K_QS + 32 * h + l] |= (uint8_t)((u & 3) << (2 * j));
            blk[KVT_Q3K_HMASK + l] |= (uint8_t)(((u >> 2) & 1) << (4 * h + j));
            break;
        case KVT_TYPE_Q4_K: blk[KVT_Q4K_QS + 32 * c + l] |= (uint8_t)((u & 0xF) << (4 * s)); break;
        case KVT_TYPE_Q5_K:
            blk[KVT_Q5K_QS + 32 * c + l] |= (uint8_t)((u & 0xF) << (4 * s));
            blk[KVT_Q5K_QH + l] |= (uint8_t)(((u >> 4) & 1) << (2 * c + s));
            break;
        case KVT_TYPE_Q6_K:
            blk[KVT_Q6K_QL + 64 * h + 32 * (j % 2) + l] |= (uint8_t)((u & 0xF) << (4 * (j / 2)));
            blk[KVT_Q6K_QH + 32 * h + l] |= (uint8_t)(((u >> 4) & 3) << (2 * j));
            break;
        case KVT_TYPE_IQ4_XS:
            blk[KVT_IQ4XS_QS + 16 * (i / 32) + i % 16] |= (uint8_t)(iq4_index(u) << (4 * ((i % 32) / 16)));
            break;
        }
    }
}

void kvt_qk_dequant_row(uint32_t type, const uint8_t *row, int64_t cols, float *out) {
    const size_t bb = kvt_qk_block_bytes(type);
    const int off = kvt_qk_code_offset(type);
    kvt_qk_block b;
    for (int64_t blk = 0; blk < cols / KVT_QK; blk++) {
        kvt_qk_unpack(type, row + (size_t)blk * bb, &b);
        float *y = out + blk * KVT_QK;
        for (int g = 0; g < KVT_QK_NGROUP; g++) {
            const float dl = b.d * (float)b.sc[g], ml = b.dmin * (float)b.mn[g];
            for (int i = g * KVT_QK_GROUP; i < (g + 1) * KVT_QK_GROUP; i++) {
                float p = dl * (float)((int)b.u[i] - off); /* separate roundings, never fused */
                y[i] = p - ml;
            }
        }
    }
}

void kvt_qk_quantize_acts(const float *x, int64_t k, int8_t *q, float *d, int16_t *bsums) {
    for (int64_t blk = 0; blk < k / KVT_QK; blk++) {
        const float *xb = x + blk * KVT_QK;
        int8_t *qb = q + blk * KVT_QK;
        float amax = 0.0f, mx = 0.0f;
        for (int i = 0; i < KVT_QK; i++) {
            float a = fabsf(xb[i]);
            if (a > amax) {
                amax = a;
                mx = xb[i];
            }
        }
        if (amax == 0.0f) {
            d[blk] = 0.0f;
            memset(qb, 0, KVT_QK);
            memset(bsums + blk * KVT_QK_NGROUP, 0, KVT_QK_NGROUP * sizeof *bsums);
            continue;
        }
        const float iscale = -(float)KVT_Q8K_MAX / mx;
        for (int i = 0; i < KVT_QK; i++) {
            int v = kvt_qk_round(iscale * xb[i]);
            qb[i] = (int8_t)(v < KVT_Q8K_MAX ? v : KVT_Q8K_MAX);
        }
        for (int g = 0; g < KVT_QK_NGROUP; g++) {
            int s = 0;
            for (int i = 0; i < KVT_QK_GROUP; i++) s += qb[g * KVT_QK_GROUP + i];
            bsums[blk * KVT_QK_NGROUP + g] = (int16_t)s;
        }
        d[blk] = 1.0f / iscale;
    }
}

/* The canonical order (ops.h): per super-block two exact integers, then at
 * most two fused multiply-adds into one f32 accumulator, super-blocks in
 * increasing order. */
float kvt_qk_dot(uint32_t type, const uint8_t *row, const int8_t *q, const float *d, const int16_t *bsums, int64_t k) {
    const size_t bb = kvt_qk_block_bytes(type);
    const int off = kvt_qk_code_offset(type), has_min = kvt_qk_has_min(type);
    kvt_qk_block b;
    float acc = 0.0f;
    for (int64_t blk = 0; blk < k / KVT_QK; blk++) {
        kvt_qk_unpack(type, row + (size_t)blk * bb, &b);
        const int8_t *qb = q + blk * KVT_QK;
        const int16_t *bs = bsums + blk * KVT_QK_NGROUP;
        int32_t S = 0, M = 0;
        for (int g = 0; g < KVT_QK_NGROUP; g++) {
            int32_t s = 0;
            for (int i = g * KVT_QK_GROUP; i < (g + 1) * KVT_QK_GROUP; i++) s += (int32_t)b.u[i] * qb[i];
            S += b.sc[g] * (s - off * bs[g]);
            M += b.mn[g] * bs[g];
        }
        acc = fmaf((float)S, b.d * d[blk], acc);
        if (has_min) acc = fmaf(-(float)M, b.dmin * d[blk], acc);
    }
    return acc;
}

void kvt_qk_mm_scalar(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    for (int64_t t = 0; t < a->n; t++)
        for (int64_t r = r0; r < r1; r++)
            y[t * ldy + r] = kvt_qk_dot(w->type, (const uint8_t *)w->data + (size_t)r * w->row_bytes,
                                        a->kq + t * a->kpad, a->kd + t * (a->kpad / KVT_QK),
                                        a->kbs + t * (a->kpad / KVT_QK_GROUP), a->k);
}
