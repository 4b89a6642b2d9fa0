// SPDX-License-Identifier: MIT
/* Q4_K, Q6_K and IQ4_XS prefill on AVX-512 VNNI, 16 tokens per vector: the K-quant
 * reduction of ops.h (two exact integers per row, token and super-block,
 * then the scalar dot's fused multiply-adds) with a quarter of the vector
 * multiplies of ops_k_x86.c's unpacking path.
 *
 * That path dots one token at a time: each 64 codes of a row cost a maddubs
 * and a dpwssd per token (the group scales applied in every step), then
 * horizontal sums per token. Here one zmm holds one row's sums for 16
 * tokens: a chunk of tokens' activations is rearranged once (token n's 4
 * quants of dword d side by side, as the AMX kernels stage them), each row's
 * codes are unpacked once per chunk, and the dot takes them 4 at a time as a
 * broadcast from memory, one vpdpbusd per 4 codes of a row and 16 tokens.
 * A group's scale then multiplies its sums once for the 16 tokens.
 *
 * vpdpbusd multiplies unsigned by signed bytes, and its broadcast operand is
 * the signed one. So the activations are staged as q + 128 (u8) and the codes
 * as s8 (Q4_K's u in 0..15; Q6_K's u - 32, which takes off its code offset;
 * IQ4_XS's book values, -127..113), and each group's dot starts at -128 * the
 * sum of its codes, so that it ends at the exact sum of codes times quants. A
 * group is one scale's codes: 32 for Q4_K and IQ4_XS, 16 for Q6_K. Q4_K's M
 * (mins times the sums of each 32 quants) is one vpdpwssd per two sub-blocks
 * against int16 pairs of those sums.
 *
 * Bounds: a Q4_K group's sum is at most 32 * 15 * 127 in magnitude, a Q6_K
 * group's 16 * 32 * 127 and an IQ4_XS group's 32 * 127 * 127, times a scale
 * of at most 63 (Q4_K), 128 (Q6_K) or 32 (IQ4_XS), summed over 8 or 16
 * groups: all within int32, so S and M are the
 * same exact integers as every other path's, and with the same fused
 * multiply-adds in the same order the results are the same bits. */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops_amx.h"
#include "ops_impl.h"
#include "ops_k_impl.h"
#include "quant_k.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#define INLINE512 static inline __attribute__((always_inline)) T512

#define QKT_N KVT_AMX_N           /* tokens per vector (the AMX kernels' token staging) */
#define QKT_R 4                   /* weight rows per tile */
#define QKT_DW (KVT_QK / 4)       /* dwords of 4 codes in a super-block */
#define QKT_PAIRS 4               /* Q4_K: int16 pairs of the 8 sub-block quant sums */
#define QKT_CHUNK_BYTES (1 << 20) /* staged activation bytes per chunk of tokens (half a 2 MiB L2) */
#define QKT_MIN_TOKENS 8          /* fewer tokens: ops_k_x86.c's paths waste less */
#define QKT_CODE_BIAS 0x80        /* activations are staged as q + 128 (q xor 0x80) */
#define Q6_OFFSET 32              /* Q6_K's code offset (kvt_qk_code_offset) */

/* The layouts this file runs (a constant in each inlined copy of the tile). */
enum { QKT_Q4K, QKT_Q6K, QKT_IQ4XS };
static int qkt_gdw(int kind) { return kind == QKT_Q6K ? KVT_QK_GROUP / 4 : 2 * KVT_QK_GROUP / 4; }

/* One token vector's activations of one super-block: x[d][n] = token n's
 * quants 4d..4d+3 (+ 128, as u8); bs[p][n] = (sum of token n's quants of
 * sub-block 2p, of 2p + 1) as an int16 pair (Q4_K only); dx[n] its scale. */
typedef struct {
    _Alignas(64) int32_t x[QKT_DW][QKT_N];
    _Alignas(64) int32_t bs[QKT_PAIRS][QKT_N];
    _Alignas(64) float dx[QKT_N];
} qkt_acts;

/* One row's super-block: codes (s8), per scale group the dot's start and the
 * scale, Q4_K's mins as int16 pairs (sub-blocks 2p, 2p + 1), the f32 scales. */
typedef struct {
    _Alignas(64) int8_t c[KVT_QK];
    int32_t start[KVT_QK_NGROUP]; /* Q4_K: the first 8 */
    int32_t sc[KVT_QK_NGROUP];
    int32_t mn[QKT_PAIRS];
    float d, dmin;
} qkt_row;

static int32_t pair16(int lo, int hi) { return (int32_t)(((uint32_t)(uint16_t)hi << 16) | (uint16_t)lo); }

/* Rearranges tokens [t0, t0 + nt) (nt <= 16; the rest zero) of super-block b. */
static T512 void qkt_pack(const kvt_acts *a, int64_t t0, int nt, int64_t b, int mins, qkt_acts *o) {
    const int64_t nsb = a->kpad / KVT_QK, ngr = a->kpad / KVT_QK_GROUP;
    kvt_amx_gather_tokens(a->kq + t0 * a->kpad + b * KVT_QK, a->kpad, nt, QKT_DW, QKT_CODE_BIAS, o->x);
    for (int n = 0; n < QKT_N; n++) o->dx[n] = n < nt ? a->kd[(t0 + n) * nsb + b] : 0.0f;
    if (!mins) return;
    for (int n = 0; n < QKT_N; n++) {
        const int16_t *bs = a->kbs + (t0 + n) * ngr + b * KVT_QK_NGROUP;
        for (int p = 0; p < QKT_PAIRS; p++)
            o->bs[p][n] = n < nt ? pair16(bs[4 * p] + bs[4 * p + 1], bs[4 * p + 2] + bs[4 * p + 3]) : 0;
    }
}

/* The 256 codes of a super-block as s8, 64 per vector in activation order. */
INLINE512 void qkt_codes(const uint8_t *blk, int kind, __m512i c[4]) {
    const __m512i m4 = _mm512_set1_epi8(0xF);
    if (kind == QKT_IQ4XS) { /* 32 bytes: sub-blocks 2v (bytes 0-15) and 2v + 1, low nibbles first */
        const __m512i book = _mm512_broadcast_i32x4(
            _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113));
        for (int v = 0; v < 4; v++) {
            const __m256i p = _mm256_loadu_si256((const __m256i *)(const void *)(blk + KVT_IQ4XS_QS + 32 * v));
            const __m512i n = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(p), _mm256_srli_epi16(p, 4), 1),
                                               m4); /* 128-bit lanes: lo 2v, lo 2v+1, hi 2v, hi 2v+1 */
            c[v] = _mm512_shuffle_epi8(book, _mm512_shuffle_i64x2(n, n, _MM_SHUFFLE(3, 1, 2, 0)));
        }
        return;
    }
    if (kind == QKT_Q4K) { /* 32 bytes of nibbles: 32 codes in the low ones, the next 32 in the high */
        for (int v = 0; v < 4; v++) {
            const __m256i p = _mm256_loadu_si256((const __m256i *)(const void *)(blk + KVT_Q4K_QS + 32 * v));
            c[v] = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(p), _mm256_srli_epi16(p, 4), 1), m4);
        }
        return;
    }
    const __m512i m30 = _mm512_set1_epi8(0x30), off = _mm512_set1_epi8(Q6_OFFSET);
    for (int h = 0; h < 2; h++) { /* 128 codes: low nibbles from ql[64h..], 2-bit highs from qh[32h..] */
        const __m512i l = _mm512_loadu_si512((const void *)(blk + KVT_Q6K_QL + 64 * h));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(blk + KVT_Q6K_QH + 32 * h));
        const __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
        const __m512i u0 = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_slli_epi16(hh, 4), m30));
        const __m512i u1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), _mm512_and_si512(hh, m30));
        c[2 * h] = _mm512_sub_epi8(u0, off);
        c[2 * h + 1] = _mm512_sub_epi8(u1, off);
    }
}

/* A row's nb super-blocks, unpacked for the tiles. */
static T512 void qkt_row_unpack(uint32_t type, const uint8_t *row, int64_t nb, qkt_row *o) {
    const size_t bb = kvt_qk_block_bytes(type);
    const int kind = type == KVT_TYPE_Q6_K ? QKT_Q6K : type == KVT_TYPE_IQ4_XS ? QKT_IQ4XS : QKT_Q4K;
    const int gdw = qkt_gdw(kind);
    const __m512i bias = _mm512_set1_epi8((char)QKT_CODE_BIAS);
    for (int64_t b = 0; b < nb; b++, o++) {
        const uint8_t *blk = row + (size_t)b * bb;
        kvt_qk_block s;
        kvt_qk_unpack_scales(type, blk, &s);
        __m512i c[4];
        qkt_codes(blk, kind, c);
        _Alignas(64) int32_t sums[QKT_DW]; /* 128 * the sum of each dword's 4 codes */
        for (int v = 0; v < 4; v++) {
            _mm512_store_si512(o->c + 64 * v, c[v]);
            _mm512_store_si512(sums + 16 * v, _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, c[v]));
        }
        for (int g = 0; g < QKT_DW / gdw; g++) {
            int32_t t = 0;
            for (int d = 0; d < gdw; d++) t += sums[g * gdw + d];
            o->start[g] = -t;
            o->sc[g] = s.sc[kind == QKT_Q6K ? g : 2 * g]; /* Q4_K, IQ4_XS: both groups of a sub-block carry its scale */
        }
        for (int p = 0; p < QKT_PAIRS; p++) o->mn[p] = pair16(s.mn[4 * p], s.mn[4 * p + 2]);
        o->d = s.d;
        o->dmin = s.dmin;
    }
}

/* Rows rw[i] (their nb unpacked super-blocks) x one token vector through all
 * nb super-blocks: out[i] holds row i's 16 outputs. kind a constant after
 * inlining: Q6_K (16 groups of 4 dwords, no mins), Q4_K (8 of 8, mins) or
 * IQ4_XS (8 of 8, no mins). */
INLINE512 void qkt_tile(const qkt_row *const rw[QKT_R], const qkt_acts *x, int64_t nb, const int kind,
                        __m512 out[QKT_R]) {
    const int gdw = qkt_gdw(kind);
    const __m512 sign = _mm512_set1_ps(-0.0f);
    __m512 acc[QKT_R];
    _Pragma("GCC unroll 8") for (int i = 0; i < QKT_R; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const qkt_acts *xb = x + b;
        /* the next super-block's activations, a line per dword (they come from L2); past the
         * last this points beyond the staging, which a prefetch may */
        const char *pf = (const char *)(const void *)(xb + 1);
        __m512i S[QKT_R];
        _Pragma("GCC unroll 8") for (int i = 0; i < QKT_R; i++) S[i] = _mm512_setzero_si512();
        for (int g = 0; g < QKT_DW / gdw; g++) {
            __m512i P[QKT_R];
            _Pragma("GCC unroll 8") for (int i = 0; i < QKT_R; i++) P[i] = _mm512_set1_epi32(rw[i][b].start[g]);
            _Pragma("GCC unroll 8") for (int j = 0; j < gdw; j++) {
                const int d = g * gdw + j;
                _mm_prefetch(pf + 64 * d, _MM_HINT_T0);
                const __m512i xv = _mm512_load_si512(xb->x[d]);
                _Pragma("GCC unroll 8") for (int i = 0; i < QKT_R; i++)
                    P[i] = _mm512_dpbusd_epi32(P[i], xv, _mm512_set1_epi32((int32_t)kvt_load_u32(rw[i][b].c + 4 * d)));
            }
            _Pragma("GCC unroll 8") for (int i = 0; i < QKT_R; i++)
                S[i] = _mm512_add_epi32(S[i], _mm512_mullo_epi32(P[i], _mm512_set1_epi32(rw[i][b].sc[g])));
        }
        const __m512 dx = _mm512_load_ps(xb->dx);
        _Pragma("GCC unroll 8") for (int i = 0; i < QKT_R; i++)
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[i]), _mm512_mul_ps(_mm512_set1_ps(rw[i][b].d), dx), acc[i]);
        if (kind == QKT_Q4K) {
            _Pragma("GCC unroll 8") for (int c = 0; c < (int)(sizeof(qkt_acts) / 64) - QKT_DW; c++)
                _mm_prefetch(pf + 64 * (QKT_DW + c), _MM_HINT_T0);
            __m512i M[QKT_R];
            _Pragma("GCC unroll 8") for (int i = 0; i < QKT_R; i++) M[i] = _mm512_setzero_si512();
            _Pragma("GCC unroll 4") for (int p = 0; p < QKT_PAIRS; p++) {
                const __m512i bv = _mm512_load_si512(xb->bs[p]);
                _Pragma("GCC unroll 8") for (int i = 0; i < QKT_R; i++)
                    M[i] = _mm512_dpwssd_epi32(M[i], bv, _mm512_set1_epi32(rw[i][b].mn[p]));
            }
            _Pragma("GCC unroll 8") for (int i = 0; i < QKT_R; i++)
                acc[i] = _mm512_fmadd_ps(_mm512_xor_ps(_mm512_cvtepi32_ps(M[i]), sign),
                                         _mm512_mul_ps(_mm512_set1_ps(rw[i][b].dmin), dx), acc[i]);
        } else {
            _mm_prefetch(pf + 64 * (sizeof(qkt_acts) / 64 - 1), _MM_HINT_T0);
        }
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < QKT_R; i++) out[i] = acc[i];
}

/* The whole matmul: staging, the chunk, row-group and token-vector loops, write-back. */
T512 int64_t kvt_qkt_mm_avx512(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    const uint32_t type = w->type;
    const int64_t nb = a->k / KVT_QK;
    if ((type != KVT_TYPE_Q4_K && type != KVT_TYPE_Q6_K && type != KVT_TYPE_IQ4_XS) || a->n < QKT_MIN_TOKENS ||
        r1 <= r0 || nb == 0)
        return 0;
    const int kind = type == KVT_TYPE_Q6_K ? QKT_Q6K : type == KVT_TYPE_IQ4_XS ? QKT_IQ4XS : QKT_Q4K;
    const int64_t chunk = kvt_amx_chunk_tokens(QKT_CHUNK_BYTES, sizeof(qkt_acts) * (size_t)nb, a->n);
    qkt_acts *xs = aligned_alloc(64, sizeof(qkt_acts) * (size_t)(chunk / QKT_N * nb));
    qkt_row *rs = aligned_alloc(64, sizeof(qkt_row) * (size_t)(QKT_R * nb));
    if (!xs || !rs) {
        free(xs), free(rs);
        return 0;
    }
    for (int64_t c0 = 0; c0 < a->n; c0 += chunk) {
        const int64_t nt = a->n - c0 < chunk ? a->n - c0 : chunk;
        const int64_t vecs = (nt + QKT_N - 1) / QKT_N;
        for (int64_t s = 0; s < vecs; s++) {
            const int64_t t0 = c0 + s * QKT_N;
            const int tn = (int)(c0 + nt - t0 < QKT_N ? c0 + nt - t0 : QKT_N);
            for (int64_t b = 0; b < nb; b++) qkt_pack(a, t0, tn, b, kind == QKT_Q4K, &xs[s * nb + b]);
        }
        for (int64_t r = r0; r < r1; r += QKT_R) {
            const int nr = (int)(r1 - r < QKT_R ? r1 - r : QKT_R);
            const qkt_row *rw[QKT_R];
            for (int i = 0; i < QKT_R; i++) { /* rows past r1 repeat the last (results dropped) */
                if (i < nr)
                    qkt_row_unpack(type, (const uint8_t *)w->data + (size_t)(r + i) * w->row_bytes, nb, rs + i * nb);
                rw[i] = rs + (i < nr ? i : nr - 1) * nb;
            }
            for (int64_t s = 0; s < vecs; s++) {
                __m512 out[QKT_R];
                if (kind == QKT_Q6K) qkt_tile(rw, &xs[s * nb], nb, QKT_Q6K, out);
                else if (kind == QKT_IQ4XS) qkt_tile(rw, &xs[s * nb], nb, QKT_IQ4XS, out);
                else qkt_tile(rw, &xs[s * nb], nb, QKT_Q4K, out);
                const int64_t t0 = c0 + s * QKT_N;
                const int tn = (int)(c0 + nt - t0 < QKT_N ? c0 + nt - t0 : QKT_N);
                _Alignas(64) float o[QKT_R][QKT_N];
                for (int i = 0; i < QKT_R; i++) _mm512_store_ps(o[i], out[i]);
                for (int n = 0; n < tn; n++)
                    for (int i = 0; i < nr; i++) y[(t0 + n) * ldy + r + i] = o[i][n];
            }
        }
    }
    free(xs), free(rs);
    return r1 - r0;
}

/* ---- Q4_K steps of 2 to 8 tokens ------------------------------------------
 * Several sequences decoding at once. ops_k_x86.c's direct path dots each
 * token on its own against a row's decoded super-block (a maddubs and a dpwssd
 * per 64 codes and token, then horizontal sums per token). Here one zmm holds
 * 4 tokens' quants of one group of 16 codes (a 128-bit lane per token), and a
 * row's 16 packed bytes, broadcast to the 4 lanes, give masked and shifted the
 * codes of two groups: one vpdpbusd per 16 codes for 4 tokens, two per
 * sub-block (32 codes, whose dword sums stay within 8 * 15 * 127, an int16)
 * before the one vpdpwssd that applies its scale. 5 to 8 tokens are two such
 * sets of 4, the row's codes decoded once for both. The lanes of 4 rows are
 * then summed by a transpose into one vector of 4 tokens x 4 rows, and the
 * scalar dot's fused multiply-adds run on it: the same exact S and M and the
 * same fmas per output, so the same bits. */

#define FEW_T 4    /* tokens per set: one per 128-bit lane */
#define FEW_SETS 2 /* sets of 4 tokens, at most */
#define FEW_R 4    /* rows per group: one 4 x 4 transpose */
#define FEW_MIN 2  /* one token stays on the direct path, which streams the weights */
#define FEW_SUBS (KVT_QK / 32)

/* One super-block's activations of a set of up to 4 tokens (the rest zero). */
typedef struct {
    _Alignas(64) int8_t x[KVT_QK_NGROUP][FEW_T][KVT_QK_GROUP]; /* token t's quants of group g */
    _Alignas(64) int16_t bs[FEW_T][FEW_SUBS];                  /* token t's sums of each 32 quants */
    _Alignas(64) float dx[FEW_T][FEW_R];                       /* token t's scale, once per row */
} few_acts;

/* o[b * sets + set]: token 4 * set + t in lane t. */
static T512 void few_pack(const kvt_acts *a, int64_t nb, int sets, few_acts *o) {
    const int64_t nsb = a->kpad / KVT_QK, ngr = a->kpad / KVT_QK_GROUP;
    memset(o, 0, sizeof *o * (size_t)(nb * sets));
    for (int64_t b = 0; b < nb; b++)
        for (int tok = 0; tok < (int)a->n; tok++) {
            few_acts *f = &o[b * sets + tok / FEW_T];
            const int t = tok % FEW_T;
            const int8_t *q = a->kq + tok * a->kpad + b * KVT_QK;
            const int16_t *bs = a->kbs + tok * ngr + b * KVT_QK_NGROUP;
            for (int g = 0; g < KVT_QK_NGROUP; g++) memcpy(f->x[g][t], q + KVT_QK_GROUP * g, KVT_QK_GROUP);
            for (int s = 0; s < FEW_SUBS; s++) f->bs[t][s] = (int16_t)(bs[2 * s] + bs[2 * s + 1]);
            for (int i = 0; i < FEW_R; i++) f->dx[t][i] = a->kd[tok * nsb + b];
        }
}

/* One row's super-block against `sets` (a constant) sets of tokens x[0..sets):
 * S[s] and M[s] as 4 dwords per token lane. */
INLINE512 void few_row(const uint8_t *blk, const few_acts *x, const int sets, __m512i S[FEW_SETS], __m512i M[FEW_SETS]) {
    const __m128i sm = kvt_q45k_scales_vec(blk);
    _Alignas(64) int32_t sc[16]; /* the 8 scales, then the 8 mins */
    _mm512_store_si512(sc, _mm512_cvtepu8_epi32(sm));
    const __m512i mins = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)));
    const __m512i m4 = _mm512_set1_epi8(0xF);
    __m512i s0[FEW_SETS], s1[FEW_SETS];
    _Pragma("GCC unroll 2") for (int k = 0; k < sets; k++) {
        M[k] = _mm512_madd_epi16(_mm512_load_si512(x[k].bs), mins);
        s0[k] = s1[k] = _mm512_setzero_si512();
    }
    for (int c = 0; c < 4; c++) { /* 32 packed bytes: sub-block 2c in the low nibbles, 2c + 1 in the high */
        const uint8_t *qs = blk + KVT_Q4K_QS + 32 * c;
        const __m512i pa = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)qs));
        const __m512i pb = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)(qs + 16)));
        const __m512i la = _mm512_and_si512(pa, m4), lb = _mm512_and_si512(pb, m4);
        const __m512i ha = _mm512_and_si512(_mm512_srli_epi16(pa, 4), m4);
        const __m512i hb = _mm512_and_si512(_mm512_srli_epi16(pb, 4), m4);
        const __m512i scl = _mm512_set1_epi32(sc[2 * c]), sch = _mm512_set1_epi32(sc[2 * c + 1]);
        _Pragma("GCC unroll 2") for (int k = 0; k < sets; k++) {
            const __m512i lo = _mm512_dpbusd_epi32(
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), la, _mm512_load_si512(x[k].x[4 * c])), lb,
                _mm512_load_si512(x[k].x[4 * c + 1]));
            const __m512i hi = _mm512_dpbusd_epi32(
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), ha, _mm512_load_si512(x[k].x[4 * c + 2])), hb,
                _mm512_load_si512(x[k].x[4 * c + 3]));
            s0[k] = _mm512_dpwssd_epi32(s0[k], lo, scl);
            s1[k] = _mm512_dpwssd_epi32(s1[k], hi, sch);
        }
    }
    _Pragma("GCC unroll 2") for (int k = 0; k < sets; k++) S[k] = _mm512_add_epi32(s0[k], s1[k]);
}

/* Per 128-bit lane: [sum(s0), sum(s1), sum(s2), sum(s3)] of the lane's 4 dwords (exact). */
INLINE512 __m512i few_sum4x4(__m512i s0, __m512i s1, __m512i s2, __m512i s3) {
    const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(s0, s1), _mm512_unpackhi_epi32(s0, s1));
    const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(s2, s3), _mm512_unpackhi_epi32(s2, s3));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
}

/* The whole step for `sets` (a constant) sets of tokens: the row-group and super-block loops,
 * the fmas, write-back. */
INLINE512 void few_mm(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy,
                      const few_acts *xs, const int sets) {
    const int64_t nb = a->k / KVT_QK;
    const uint8_t *base = w->data;
    const size_t bb = kvt_qk_block_bytes(w->type);
    const size_t pf_ahead = (size_t)FEW_R * w->row_bytes * KVT_PF_TILES; /* rows: contiguous */
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t r = r0; r < r1; r += FEW_R) {
        const int nr = (int)(r1 - r < FEW_R ? r1 - r : FEW_R);
        const uint8_t *wr[FEW_R];
        for (int i = 0; i < FEW_R; i++) /* rows past r1 repeat the last (results dropped) */
            wr[i] = base + (size_t)(r + (i < nr ? i : nr - 1)) * w->row_bytes;
        __m512 acc[FEW_SETS];
        _Pragma("GCC unroll 2") for (int k = 0; k < sets; k++) acc[k] = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            __m512i S[FEW_R][FEW_SETS], M[FEW_R][FEW_SETS];
            _Alignas(16) uint16_t dh[2 * FEW_R]; /* the rows' d, then their dmin (f16) */
            _Pragma("GCC unroll 4") for (int i = 0; i < FEW_R; i++) {
                const uint8_t *blk = wr[i] + (size_t)b * bb;
                /* decode streams each weight once: the same block KVT_PF_TILES row groups on */
                for (size_t o = 0; o < bb + 63; o += 64) KVT_PREFETCH_WEIGHTS(blk + pf_ahead + o);
                few_row(blk, &xs[b * sets], sets, S[i], M[i]);
                dh[i] = kvt_load_u16(blk + KVT_Q45K_D);
                dh[FEW_R + i] = kvt_load_u16(blk + KVT_Q45K_DMIN);
            }
            const __m256 dm = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)dh));
            const __m512 dw = _mm512_broadcast_f32x4(_mm256_castps256_ps128(dm));
            const __m512 mw = _mm512_broadcast_f32x4(_mm256_extractf128_ps(dm, 1));
            /* lane t, element i: token 4k + t, row i */
            _Pragma("GCC unroll 2") for (int k = 0; k < sets; k++) {
                const __m512 dx = _mm512_load_ps(xs[b * sets + k].dx[0]);
                const __m512i Sk = few_sum4x4(S[0][k], S[1][k], S[2][k], S[3][k]);
                const __m512i Mk = few_sum4x4(M[0][k], M[1][k], M[2][k], M[3][k]);
                acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(Sk), _mm512_mul_ps(dw, dx), acc[k]);
                acc[k] = _mm512_fmadd_ps(_mm512_xor_ps(_mm512_cvtepi32_ps(Mk), sign), _mm512_mul_ps(mw, dx), acc[k]);
            }
        }
        _Alignas(64) float o[FEW_SETS][FEW_T][FEW_R];
        _Pragma("GCC unroll 2") for (int k = 0; k < sets; k++) _mm512_store_ps(o[k][0], acc[k]);
        for (int t = 0; t < (int)a->n; t++)
            for (int i = 0; i < nr; i++) y[t * ldy + r + i] = o[t / FEW_T][t % FEW_T][i];
    }
}

T512 int64_t kvt_qk4_few_avx512(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    const int64_t nb = a->k / KVT_QK;
    if (w->type != KVT_TYPE_Q4_K || a->n < FEW_MIN || a->n > FEW_SETS * FEW_T || r1 <= r0 || nb == 0) return 0;
    const int sets = (int)(a->n + FEW_T - 1) / FEW_T;
    few_acts *xs = aligned_alloc(64, sizeof(few_acts) * (size_t)(nb * sets));
    if (!xs) return 0;
    few_pack(a, nb, sets, xs);
    if (sets == 1) few_mm(w, a, r0, r1, y, ldy, xs, 1);
    else few_mm(w, a, r0, r1, y, ldy, xs, 2);
    free(xs);
    return r1 - r0;
}
