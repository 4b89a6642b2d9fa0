// SPDX-License-Identifier: MIT
/* AVX2 and AVX-512 (VNNI) kernels for the K-quant weights against Q8_K
 * activations. Both compute the canonical K-quant reduction of ops.h: two
 * exact integers per super-block (any summation order gives them), then the
 * same f32 fused multiply-adds in the same order as quant_k.c's scalar dot.
 *
 * A super-block is first unpacked (as kvt_qk_unpack, with vector shifts) into
 * 256 unsigned codes and 16 int16 group scales; the integer dot is then
 * maddubs (u8 x s8 -> pairs of int16, no saturation: 63 * 127 * 2 < 2^15)
 * followed by madd / dpwssd against the group scales. Rows are taken RM at a
 * time; each unpacked super-block serves every token of a chunk. At decode
 * (n <= DIRECT_MAX_TOKENS) the AVX-512 variant skips that staging for Q4_K and
 * Q6_K and unpacks in registers straight into the dot, and so does the AVX2
 * variant with its own instructions (see the end of the file). The AVX-512
 * variant runs Q4_K and Q6_K from 8 tokens (Q4_K from 9), and Q4_K steps of
 * 2 to 8 tokens, in ops_qkt_avx512.c (16 and 4 tokens per vector), the same
 * bits. IQ4_XS, whose unpacked codes (up to 241) would saturate maddubs,
 * takes a direct kernel of its own (AVX2 instructions on its book values as
 * signed bytes) at every token count, but for prefill of 8 tokens or more on
 * AVX-512 (and AMX's variant), which ops_qkt_avx512.c runs. */
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ops_amx.h"
#include "ops_impl.h"
#include "ops_k_impl.h"
#include "quant_k.h"

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INLINE2 static inline __attribute__((always_inline)) T2
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#define INLINE512 static inline __attribute__((always_inline)) T512

#define RM 4      /* weight rows per tile (hsum4x8_epi32 sums exactly four) */
#define TCHUNK 64 /* tokens per chunk: each unpacked super-block serves them all */

typedef struct {
    _Alignas(64) uint8_t u[KVT_QK];
    _Alignas(32) int16_t sc[KVT_QK_NGROUP];
    _Alignas(32) int16_t corr[KVT_QK_NGROUP]; /* off * sc[g], subtracted times the group's sum */
    _Alignas(32) int16_t mn[KVT_QK_NGROUP];
    float d, dmin;
} kblk;

/* ---- unpacking (AVX2 instructions; the AVX-512 kernel inlines them too) ---- */

INLINE2 __m256i ld256(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)(const void *)p); }
INLINE2 void st256(uint8_t *p, __m256i v) { _mm256_store_si256((__m256i *)(void *)p, v); }
/* bits [s, s+width) of every byte */
INLINE2 __m256i bits8(__m256i v, int s, int mask) {
    return _mm256_and_si256(_mm256_srli_epi16(v, s), _mm256_set1_epi8((char)mask));
}
/* `val` in bytes whose bit `bit` is set, else 0 */
INLINE2 __m256i bit_to(__m256i v, int bit, int val) {
    const __m256i m = _mm256_set1_epi8((char)(1 << bit));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, m), m), _mm256_set1_epi8((char)val));
}
static inline uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
/* 16 bytes to 16 int16 in o (signed or not) */
INLINE2 void widen16(int16_t *o, __m128i b, int is_signed) {
    _mm256_store_si256((__m256i *)(void *)o, is_signed ? _mm256_cvtepi8_epi16(b) : _mm256_cvtepu8_epi16(b));
}

/* Long: a switch over the five K-quant block layouts. */
INLINE2 void unpack_k(uint32_t type, const uint8_t *blk, kblk *o) {
    uint32_t a0, a1, a2;
    switch (type) {
    case KVT_TYPE_Q2_K: {
        __m128i s = _mm_loadu_si128((const __m128i *)(const void *)(blk + KVT_Q2K_SCALES));
        widen16(o->sc, _mm_and_si128(s, _mm_set1_epi8(0xF)), 0);
        widen16(o->mn, _mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(0xF)), 0);
        o->d = _cvtsh_ss(kvt_load_u16(blk + KVT_Q2K_D));
        o->dmin = _cvtsh_ss(kvt_load_u16(blk + KVT_Q2K_DMIN));
        for (int h = 0; h < 2; h++) {
            __m256i v = ld256(blk + KVT_Q2K_QS + 32 * h);
            for (int j = 0; j < 4; j++) st256(o->u + 128 * h + 32 * j, bits8(v, 2 * j, 3));
        }
        break;
    }
    case KVT_TYPE_Q3_K: {
        a0 = ld32(blk + KVT_Q3K_SCALES);
        a1 = ld32(blk + KVT_Q3K_SCALES + 4);
        a2 = ld32(blk + KVT_Q3K_SCALES + 8);
        const uint32_t lo4 = 0x0f0f0f0fu, hi2 = 0x03030303u;
        __m128i s = _mm_set_epi32((int)(((a1 >> 4) & lo4) | (((a2 >> 6) & hi2) << 4)),
                                  (int)(((a0 >> 4) & lo4) | (((a2 >> 4) & hi2) << 4)),
                                  (int)((a1 & lo4) | (((a2 >> 2) & hi2) << 4)), (int)((a0 & lo4) | ((a2 & hi2) << 4)));
        widen16(o->sc, _mm_sub_epi8(s, _mm_set1_epi8(32)), 1);
        memset(o->mn, 0, sizeof o->mn);
        o->d = _cvtsh_ss(kvt_load_u16(blk + KVT_Q3K_D));
        o->dmin = 0.0f;
        __m256i hm = ld256(blk + KVT_Q3K_HMASK);
        for (int h = 0; h < 2; h++) {
            __m256i v = ld256(blk + KVT_Q3K_QS + 32 * h);
            for (int j = 0; j < 4; j++)
                st256(o->u + 128 * h + 32 * j, _mm256_or_si256(bits8(v, 2 * j, 3), bit_to(hm, 4 * h + j, 4)));
        }
        break;
    }
    case KVT_TYPE_Q4_K:
    case KVT_TYPE_Q5_K: {
        a0 = ld32(blk + KVT_Q45K_SCALES);
        a1 = ld32(blk + KVT_Q45K_SCALES + 4);
        a2 = ld32(blk + KVT_Q45K_SCALES + 8);
        const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, hi2 = 0x03030303u;
        __m128i s = _mm_set_epi32(0, 0, (int)((a2 & lo4) | (((a0 >> 6) & hi2) << 4)), (int)(a0 & lo6));
        __m128i m = _mm_set_epi32(0, 0, (int)(((a2 >> 4) & lo4) | (((a1 >> 6) & hi2) << 4)), (int)(a1 & lo6));
        widen16(o->sc, _mm_unpacklo_epi8(s, s), 0); /* one scale per 32 = two groups */
        widen16(o->mn, _mm_unpacklo_epi8(m, m), 0);
        o->d = _cvtsh_ss(kvt_load_u16(blk + KVT_Q45K_D));
        o->dmin = _cvtsh_ss(kvt_load_u16(blk + KVT_Q45K_DMIN));
        const int q5 = type == KVT_TYPE_Q5_K;
        const uint8_t *qs = blk + (q5 ? KVT_Q5K_QS : KVT_Q4K_QS);
        __m256i qh = q5 ? ld256(blk + KVT_Q5K_QH) : _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i v = ld256(qs + 32 * c), lo = bits8(v, 0, 0xF), hi = bits8(v, 4, 0xF);
            if (q5) {
                lo = _mm256_or_si256(lo, bit_to(qh, 2 * c, 16));
                hi = _mm256_or_si256(hi, bit_to(qh, 2 * c + 1, 16));
            }
            st256(o->u + 64 * c, lo);
            st256(o->u + 64 * c + 32, hi);
        }
        break;
    }
    default: { /* Q6_K */
        widen16(o->sc, _mm_loadu_si128((const __m128i *)(const void *)(blk + KVT_Q6K_SCALES)), 1);
        memset(o->mn, 0, sizeof o->mn);
        o->d = _cvtsh_ss(kvt_load_u16(blk + KVT_Q6K_D));
        o->dmin = 0.0f;
        for (int h = 0; h < 2; h++) {
            __m256i l0 = ld256(blk + KVT_Q6K_QL + 64 * h), l1 = ld256(blk + KVT_Q6K_QL + 64 * h + 32),
                    qh = ld256(blk + KVT_Q6K_QH + 32 * h);
            st256(o->u + 128 * h, _mm256_or_si256(bits8(l0, 0, 0xF), _mm256_slli_epi16(bits8(qh, 0, 3), 4)));
            st256(o->u + 128 * h + 32, _mm256_or_si256(bits8(l1, 0, 0xF), _mm256_slli_epi16(bits8(qh, 2, 3), 4)));
            st256(o->u + 128 * h + 64, _mm256_or_si256(bits8(l0, 4, 0xF), _mm256_slli_epi16(bits8(qh, 4, 3), 4)));
            st256(o->u + 128 * h + 96, _mm256_or_si256(bits8(l1, 4, 0xF), _mm256_slli_epi16(bits8(qh, 6, 3), 4)));
        }
        break;
    }
    }
    const __m256i sc = _mm256_load_si256((const __m256i *)(const void *)o->sc);
    _mm256_store_si256((__m256i *)(void *)o->corr,
                       _mm256_mullo_epi16(sc, _mm256_set1_epi16((short)kvt_qk_code_offset(type))));
}

/* ---- the tile driver, shared by both variants ---- */

_Static_assert(RM == 4, "the drivers sum and scale four rows per vector");

/* [sum(s0), sum(s1), sum(s2), sum(s3)] of four 8-lane int32 vectors (exact). */
INLINE2 __m128i hsum4x8_epi32(__m256i s0, __m256i s1, __m256i s2, __m256i s3) {
    __m256i u = _mm256_hadd_epi32(_mm256_hadd_epi32(s0, s1), _mm256_hadd_epi32(s2, s3));
    return _mm_add_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1));
}

/* For RM unpacked rows against one token's Q8_K block, DOT gives the RM
 * values S and M (ops.h) as int32 lanes; then, row by row, the two fused
 * multiply-adds of the scalar dot (lanes do not interact). */
#define DEF_MM(NAME, TARGET, PREP, DOT) \
    TARGET void NAME(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) { \
        const uint8_t *base = w->data; \
        const size_t bb = kvt_qk_block_bytes(w->type); \
        const int has_min = kvt_qk_has_min(w->type); \
        const int64_t nb = a->k / KVT_QK, kpad = a->kpad; \
        const __m128 sign = _mm_set1_ps(-0.0f); \
        kblk kb[RM]; \
        PREP##_vecs sv[RM]; \
        _Alignas(16) float acc[TCHUNK][RM]; \
        for (int64_t c0 = 0; c0 < a->n; c0 += TCHUNK) { \
            const int64_t nt = a->n - c0 < TCHUNK ? a->n - c0 : TCHUNK; \
            for (int64_t r = r0; r < r1; r += RM) { \
                const uint8_t *wr[RM]; \
                for (int i = 0; i < RM; i++) /* rows past r1 repeat the last (results dropped) */ \
                    wr[i] = base + (size_t)(r + i < r1 ? r + i : r1 - 1) * w->row_bytes; \
                memset(acc, 0, sizeof acc[0] * (size_t)nt); \
                for (int64_t b = 0; b < nb; b++) { \
                    for (int i = 0; i < RM; i++) { \
                        unpack_k(w->type, wr[i] + (size_t)b * bb, &kb[i]); \
                        PREP(&kb[i], &sv[i]); \
                    } \
                    const __m128 dw = _mm_setr_ps(kb[0].d, kb[1].d, kb[2].d, kb[3].d); \
                    const __m128 mw = _mm_setr_ps(kb[0].dmin, kb[1].dmin, kb[2].dmin, kb[3].dmin); \
                    for (int64_t t = 0; t < nt; t++) { \
                        const int64_t tok = c0 + t; \
                        const int8_t *q = a->kq + tok * kpad + b * KVT_QK; \
                        const int16_t *bs = a->kbs + tok * (kpad / KVT_QK_GROUP) + b * KVT_QK_NGROUP; \
                        const __m128 dx = _mm_set1_ps(a->kd[tok * (kpad / KVT_QK) + b]); \
                        __m128i S, M; \
                        DOT(kb, sv, q, bs, &S, &M); \
                        __m128 v = _mm_fmadd_ps(_mm_cvtepi32_ps(S), _mm_mul_ps(dw, dx), _mm_load_ps(acc[t])); \
                        if (has_min) v = _mm_fmadd_ps(_mm_xor_ps(_mm_cvtepi32_ps(M), sign), _mm_mul_ps(mw, dx), v); \
                        _mm_store_ps(acc[t], v); \
                    } \
                } \
                for (int i = 0; i < RM && r + i < r1; i++) \
                    for (int64_t t = 0; t < nt; t++) y[(c0 + t) * ldy + r + i] = acc[t][i]; \
            } \
        } \
    }

/* ---- AVX2 ---- */

typedef struct {
    __m256i scl[KVT_QK / 32]; /* per 32 codes: 8 lanes of sc[2p], 8 of sc[2p+1] */
} prep2_vecs;

INLINE2 void prep2(const kblk *k, prep2_vecs *v) {
    const __m256i sc = _mm256_load_si256((const __m256i *)(const void *)k->sc);
    /* dword p holds (sc[2p], sc[2p+1]); spread the first over the low lane, the second the high */
    const __m256i spread = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2,
                                            3, 2, 3, 2, 3, 2, 3);
    for (int p = 0; p < KVT_QK / 32; p++)
        v->scl[p] = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(sc, _mm256_set1_epi32(p)), spread);
}

/* Per row: 8 lanes of scaled code products minus the offset correction, and
 * 8 lanes of mins times group sums; then summed four rows at once. */
INLINE2 void dot2(const kblk *k, const prep2_vecs *v, const int8_t *q, const int16_t *bs, __m128i *S, __m128i *M) {
    const __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)bs);
    __m256i s[RM], m[RM];
    for (int i = 0; i < RM; i++)
        s[i] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                _mm256_madd_epi16(b, _mm256_load_si256((const __m256i *)(const void *)k[i].corr)));
    for (int p = 0; p < KVT_QK / 32; p++) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(q + 32 * p));
        for (int i = 0; i < RM; i++) {
            __m256i prod = _mm256_maddubs_epi16(_mm256_load_si256((const __m256i *)(const void *)(k[i].u + 32 * p)), x);
            s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(prod, v[i].scl[p]));
        }
    }
    for (int i = 0; i < RM; i++) m[i] = _mm256_madd_epi16(b, _mm256_load_si256((const __m256i *)(const void *)k[i].mn));
    *S = hsum4x8_epi32(s[0], s[1], s[2], s[3]);
    *M = hsum4x8_epi32(m[0], m[1], m[2], m[3]);
}

DEF_MM(qk_mm_unpacked2, T2 static, prep2, dot2)

/* ---- AVX-512 VNNI ---- */

typedef struct {
    __m512i scl[KVT_QK / 64]; /* per 64 codes: 8 lanes each of sc[4p..4p+3] */
} prep512_vecs;

/* int16 lane l of chunk p (64 codes) takes group 4p + l/8 of the 16 group scales in sc */
INLINE512 __m512i group_scales512(__m512i sc, int p) {
    const __m512i idx = _mm512_add_epi16(
        _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13,
                                           12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                          3),
        _mm512_set1_epi16((short)(4 * p)));
    return _mm512_permutexvar_epi16(idx, sc);
}

INLINE512 void prep512(const kblk *k, prep512_vecs *v) {
    const __m512i sc = _mm512_zextsi256_si512(_mm256_load_si256((const __m256i *)(const void *)k->sc));
    for (int p = 0; p < KVT_QK / 64; p++) v->scl[p] = group_scales512(sc, p);
}

INLINE512 void dot512(const kblk *k, const prep512_vecs *v, const int8_t *q, const int16_t *bs, __m128i *S, __m128i *M) {
    const __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)bs);
    __m512i acc[RM];
    for (int i = 0; i < RM; i++) acc[i] = _mm512_setzero_si512();
    for (int p = 0; p < KVT_QK / 64; p++) {
        const __m512i x = _mm512_loadu_si512((const void *)(q + 64 * p));
        for (int i = 0; i < RM; i++)
            acc[i] = _mm512_dpwssd_epi32(
                acc[i], _mm512_maddubs_epi16(_mm512_load_si512((const void *)(k[i].u + 64 * p)), x), v[i].scl[p]);
    }
    __m256i s[RM], m[RM];
    for (int i = 0; i < RM; i++) {
        __m256i corr = _mm256_madd_epi16(b, _mm256_load_si256((const __m256i *)(const void *)k[i].corr));
        s[i] = _mm256_sub_epi32(_mm256_add_epi32(_mm512_castsi512_si256(acc[i]), _mm512_extracti64x4_epi64(acc[i], 1)),
                                corr);
        m[i] = _mm256_madd_epi16(b, _mm256_load_si256((const __m256i *)(const void *)k[i].mn));
    }
    *S = hsum4x8_epi32(s[0], s[1], s[2], s[3]);
    *M = hsum4x8_epi32(m[0], m[1], m[2], m[3]);
}

DEF_MM(qk_mm_unpacked512, T512 static, prep512, dot512)

/* ---- AMX (tiles, int8) ----------------------------------------------------
 * Prefill on CPUs with AMX-INT8: the same two exact integers per row, token
 * and super-block as every variant (so the same bits), from tile products.
 * A tile (16 weight rows x one scale unit of codes, the codes less their
 * offset so that they are s8) times B (the unit's activations of 16 tokens in
 * VNNI order) gives the unit's 16 x 16 integer dots; S adds them times the
 * rows' unit scales (vpmulld). M = sum_g mn[g] * bs[g] is the dot of the
 * activations with each row's mins spread over its codes, one more tile
 * product per unit on the same activation tile, with no scaling. Then the
 * fused multiply-adds of the scalar dot, 16 tokens per vector. A unit is 32
 * codes for Q4_K/Q5_K (a scale per 32), else 16. Rows AMX_M at a time,
 * tokens AMX_N at a time, chunks of AMX_CHUNK tokens whose activations are
 * rearranged once for every row. */
#define AMX_M 16        /* weight rows per tile */
#define AMX_N KVT_AMX_N /* tokens per tile (one zmm of int32 or f32) */
#define AMX_CHUNK 256   /* tokens whose activations are rearranged at once */
#define AMX_SUBS (AMX_CHUNK / AMX_N)
#define AMX_DW (KVT_QK / 4) /* dwords of one token's super-block */
#define TILE_CS 0           /* tile registers: 0-3 the dots of 4 scale units in flight, */
#define AMX_INFLIGHT 4
#define TILE_CM 4 /*   4 the M dots, 5 a unit's codes, 6 its spread mins, */
#define TILE_A 5  /*   7 its activations */
#define TILE_AM 6
#define TILE_B 7

/* One chunk's activations: per token tile and super-block, bt[d][n] = dword d
 * of token n's 256 codes (B tiles are rows of it), and dx[n]. */
typedef struct {
    _Alignas(64) int32_t bt[AMX_DW][AMX_N];
    _Alignas(64) float dx[AMX_N];
} amx_acts;

/* A row tile's unpacked super-blocks: codes as s8 (less the offset) and the
 * mins spread over their codes. */
typedef struct {
    _Alignas(64) int8_t c[AMX_M][KVT_QK];
    _Alignas(64) uint8_t mn[AMX_M][KVT_QK];
    _Alignas(64) int32_t sc[KVT_QK_NGROUP][AMX_M]; /* per unit (group index), per row */
    _Alignas(64) float d[AMX_M], dmin[AMX_M];
} amx_rows;

static int g_amx_ok;
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;

#define ARCH_REQ_XCOMP_PERM 0x1023 /* Linux: ask for the AMX tile state */
#define XFEATURE_XTILEDATA 18
static void amx_probe(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    if (!(d & (1u << 24)) || !(d & (1u << 25))) return; /* AMX-TILE, AMX-INT8 */
    g_amx_ok = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

int kvt_cpu_has_amx(void) {
    pthread_once(&g_amx_once, amx_probe);
    return g_amx_ok;
}

/* Rearranges tokens [t0, t0 + nt) (nt <= AMX_N; the rest zero) of super-block b. */
static T_AMX void amx_pack(const kvt_acts *a, int64_t t0, int nt, int64_t b, amx_acts *o) {
    kvt_amx_gather_tokens(a->kq + t0 * a->kpad + b * KVT_QK, a->kpad, nt, AMX_DW, 0, o->bt);
    for (int n = 0; n < AMX_N; n++) o->dx[n] = n < nt ? a->kd[(t0 + n) * (a->kpad / KVT_QK) + b] : 0.0f;
}

static T_AMX void amx_unpack_rows(uint32_t type, const uint8_t *const *wr, int64_t b, size_t bb, amx_rows *o) {
    const int off = kvt_qk_code_offset(type), has_min = kvt_qk_has_min(type);
    kblk kb;
    for (int i = 0; i < AMX_M; i++) {
        unpack_k(type, wr[i] + (size_t)b * bb, &kb);
        for (int j = 0; j < KVT_QK; j += 64)
            _mm512_store_si512(o->c[i] + j, _mm512_sub_epi8(_mm512_load_si512(kb.u + j), _mm512_set1_epi8((char)off)));
        if (has_min)
            for (int g = 0; g < KVT_QK_NGROUP; g++)
                memset(o->mn[i] + g * KVT_QK_GROUP, (uint8_t)kb.mn[g], KVT_QK_GROUP);
        for (int g = 0; g < KVT_QK_NGROUP; g++) o->sc[g][i] = kb.sc[g];
        o->d[i] = kb.d;
        o->dmin[i] = kb.dmin;
    }
}

/* The dots of scale unit u0 into tile T (and, with has_min, its part of M). */
#define AMX_UNIT_DOT(T, u0) \
    do { \
        _tile_zero(T); \
        _tile_loadd(TILE_A, &w->c[0][u0], KVT_QK); \
        _tile_loadd(TILE_B, &x->bt[(u0) / 4][0], AMX_N * 4); \
        _tile_dpbssd(T, TILE_A, TILE_B); \
        if (has_min) { \
            _tile_loadd(TILE_AM, &w->mn[0][u0], KVT_QK); \
            _tile_dpbusd(TILE_CM, TILE_AM, TILE_B); \
        } \
    } while (0)

/* acc[i][n] for the tile's rows and tokens, through one super-block: the
 * units AMX_INFLIGHT at a time (each into its own tile, so that a tile is
 * stored while the next ones multiply), then S, M and the fused
 * multiply-adds. */
static T_AMX void amx_block(const amx_rows *w, const amx_acts *x, int unit, int has_min, float acc[AMX_M][AMX_N]) {
    _Alignas(64) int32_t c[AMX_INFLIGHT][AMX_M][AMX_N];
    __m512i S[AMX_M];
    for (int i = 0; i < AMX_M; i++) S[i] = _mm512_setzero_si512();
    if (has_min) _tile_zero(TILE_CM);
    for (int u0 = 0; u0 < KVT_QK; u0 += AMX_INFLIGHT * unit) {
        AMX_UNIT_DOT(0, u0);
        AMX_UNIT_DOT(1, u0 + unit);
        AMX_UNIT_DOT(2, u0 + 2 * unit);
        AMX_UNIT_DOT(3, u0 + 3 * unit);
        _tile_stored(0, c[0], AMX_N * 4);
        _tile_stored(1, c[1], AMX_N * 4);
        _tile_stored(2, c[2], AMX_N * 4);
        _tile_stored(3, c[3], AMX_N * 4);
        for (int j = 0; j < AMX_INFLIGHT; j++) {
            const int32_t *sc = w->sc[(u0 + j * unit) / KVT_QK_GROUP];
            for (int i = 0; i < AMX_M; i++)
                S[i] = _mm512_add_epi32(S[i], _mm512_mullo_epi32(_mm512_load_si512(c[j][i]), _mm512_set1_epi32(sc[i])));
        }
    }
    if (has_min) _tile_stored(TILE_CM, c[0], AMX_N * 4);
    const __m512 dx = _mm512_load_ps(x->dx);
    for (int i = 0; i < AMX_M; i++) {
        __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[i]), _mm512_mul_ps(_mm512_set1_ps(w->d[i]), dx),
                                   _mm512_load_ps(acc[i]));
        if (has_min) {
            const __m512 m = _mm512_xor_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[0][i])), _mm512_set1_ps(-0.0f));
            v = _mm512_fmadd_ps(m, _mm512_mul_ps(_mm512_set1_ps(w->dmin[i]), dx), v);
        }
        _mm512_store_ps(acc[i], v);
    }
}

/* Long: the whole AMX matmul (tile setup, chunk and row loops, write-back). */
static T_AMX int qk_mm_amx(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    const uint32_t type = w->type;
    const size_t bb = kvt_qk_block_bytes(type);
    const int has_min = kvt_qk_has_min(type);
    const int unit = type == KVT_TYPE_Q4_K || type == KVT_TYPE_Q5_K ? 2 * KVT_QK_GROUP : KVT_QK_GROUP;
    const int64_t nb = a->k / KVT_QK;
    amx_acts *xs = aligned_alloc(64, sizeof(amx_acts) * (size_t)(AMX_SUBS * nb));
    amx_rows *rows = aligned_alloc(64, sizeof(amx_rows));
    float(*acc)[AMX_M][AMX_N] = aligned_alloc(64, sizeof(float) * AMX_SUBS * AMX_M * AMX_N);
    if (!xs || !rows || !acc) {
        free(xs), free(rows), free(acc);
        return -1;
    }
    kvt_amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = TILE_CS; t <= TILE_CM; t++) cfg.rows[t] = AMX_M, cfg.colsb[t] = AMX_N * 4;
    cfg.rows[TILE_A] = cfg.rows[TILE_AM] = AMX_M;
    cfg.colsb[TILE_A] = cfg.colsb[TILE_AM] = (uint16_t)unit;
    cfg.rows[TILE_B] = (uint8_t)(unit / 4), cfg.colsb[TILE_B] = AMX_N * 4;
    _tile_loadconfig(&cfg);
    for (int64_t c0 = 0; c0 < a->n; c0 += AMX_CHUNK) {
        const int64_t nt = a->n - c0 < AMX_CHUNK ? a->n - c0 : AMX_CHUNK;
        const int subs = (int)((nt + AMX_N - 1) / AMX_N);
        for (int s = 0; s < subs; s++)
            for (int64_t b = 0; b < nb; b++) {
                const int64_t t0 = c0 + (int64_t)s * AMX_N;
                amx_pack(a, t0, (int)(c0 + nt - t0 < AMX_N ? c0 + nt - t0 : AMX_N), b, &xs[s * nb + b]);
            }
        for (int64_t r = r0; r < r1; r += AMX_M) {
            const uint8_t *wr[AMX_M];
            for (int i = 0; i < AMX_M; i++) /* rows past r1 repeat the last (results dropped) */
                wr[i] = (const uint8_t *)w->data + (size_t)(r + i < r1 ? r + i : r1 - 1) * w->row_bytes;
            memset(acc, 0, sizeof(float) * (size_t)subs * AMX_M * AMX_N);
            for (int64_t b = 0; b < nb; b++) {
                amx_unpack_rows(type, wr, b, bb, rows);
                for (int s = 0; s < subs; s++) amx_block(rows, &xs[s * nb + b], unit, has_min, acc[s]);
            }
            for (int s = 0; s < subs; s++)
                kvt_amx_store_transposed(acc[s], (int)(nt - s * AMX_N < AMX_N ? nt - s * AMX_N : AMX_N),
                                         (int)(r1 - r < AMX_M ? r1 - r : AMX_M), y + (c0 + s * AMX_N) * ldy + r, ldy);
        }
    }
    _tile_release();
    free(xs), free(rows), free(acc);
    return 0;
}

/* ---- decode path: Q4_K and Q6_K straight from the packed bytes ----
 *
 * For a few tokens the unpacked form above costs more than it saves: every
 * super-block would be written out and read back for a few dots (up to 4
 * tokens, several sequences decoding at once; from 5 on the two cost about
 * the same per token). Here the codes go from the packed bytes into the VNNI
 * dot in registers (a 32-byte load of Q4_K nibbles, shifted copy in the upper
 * half, one mask: 64 codes in activation order; Q6_K: 64 low nibbles and the
 * matching 2-bit highs from one 64-byte and one 32-byte load), and the scales
 * are decoded per super-block in registers. The integers S and M are the same exact sums, so the results
 * are the same bits as the unpacking path and the scalar dot. The AVX2 copy
 * takes 32 codes per step, maddubs then madd against the group scales. */

#define DIRECT_MAX_TOKENS 4 /* up to this many tokens per call take the direct path */

/* The AVX-512 direct dots in two halves, so that with several tokens each
 * row's super-block is decoded once for all of them: DEC turns the packed
 * block into 4 vectors of 64 codes (u8, activation order) and their int16
 * group scales; DOT takes one token through them to 8 int32 lanes summing to
 * S and 4 to M (bs: the token's 16 group sums; bs2: the 8 sums of each two). */
typedef struct {
    __m512i u[KVT_QK / 64], scl[KVT_QK / 64];
    __m128i mins; /* Q4_K: the 8 mins as int16 */
    __m256i sc16; /* Q6_K: the 16 group scales as int16 */
} kdec512;

INLINE512 void q4k_dec512(const uint8_t *blk, kdec512 *o) {
    const __m128i sm = kvt_q45k_scales_vec(blk);
    /* int16 lanes 0..7 the scales, 8..15 the mins */
    const __m512i sc = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(sm));
    const __m512i lo = _mm512_set1_epi8(0xF);
    /* lane l of chunk c (64 codes = sub-blocks 2c, 2c+1) takes scale 2c + l/16 */
    const __m512i half = _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17,
                                                            16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           4);
    for (int c = 0; c < 4; c++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(blk + KVT_Q4K_QS + 32 * c));
        o->u[c] = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1), lo);
        o->scl[c] = _mm512_permutexvar_epi16(_mm512_add_epi16(half, _mm512_set1_epi16((short)(2 * c))), sc);
    }
    o->mins = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
}

/* The scaled sum of a decoded super-block against 256 activation bytes, 16 lanes of 32-bit sums
 * (both K types' dots start with it). */
INLINE512 __m512i kdot512(const kdec512 *w, const int8_t *q) {
    __m512i acc = _mm512_setzero_si512();
    for (int c = 0; c < 4; c++)
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(w->u[c], _mm512_loadu_si512((const void *)(q + 64 * c))),
                                  w->scl[c]);
    return acc;
}

INLINE512 void q4k_dot512(const kdec512 *w, const int8_t *q, __m256i bs, __m128i bs2, __m256i *S, __m128i *M) {
    (void)bs;
    const __m512i acc = kdot512(w, q);
    *S = _mm256_add_epi32(_mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64(acc, 1));
    *M = _mm_madd_epi16(bs2, w->mins);
}

/* Q6_K: the code offset 32 is taken off via the group sums. */
INLINE512 void q6k_dec512(const uint8_t *blk, kdec512 *o) {
    o->sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(blk + KVT_Q6K_SCALES)));
    const __m512i sc = _mm512_zextsi256_si512(o->sc16);
    const __m512i m4 = _mm512_set1_epi8(0xF), m30 = _mm512_set1_epi8(0x30);
    for (int h = 0; h < 2; h++) {
        const __m512i l = _mm512_loadu_si512((const void *)(blk + KVT_Q6K_QL + 64 * h));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(blk + KVT_Q6K_QH + 32 * h));
        const __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
        o->u[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_slli_epi16(hh, 4), m30));
        o->u[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), _mm512_and_si512(hh, m30));
        o->scl[2 * h] = group_scales512(sc, 2 * h);
        o->scl[2 * h + 1] = group_scales512(sc, 2 * h + 1);
    }
}

INLINE512 void q6k_dot512(const kdec512 *w, const int8_t *q, __m256i bs, __m128i bs2, __m256i *S, __m128i *M) {
    (void)bs2;
    const __m512i acc = kdot512(w, q);
    /* S = sum(sc * u * q) - 32 * sum_g sc[g] * bs[g] */
    const __m256i corr = _mm256_madd_epi16(bs, _mm256_slli_epi16(w->sc16, 5));
    *S = _mm256_sub_epi32(_mm256_add_epi32(_mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64(acc, 1)), corr);
    *M = _mm_setzero_si128();
}

/* The AVX2 copies: the same S and M, 32 codes per step. */
INLINE2 void q4k_direct2(const uint8_t *blk, const int8_t *q, __m256i bs, __m128i bs2, __m256i *S, __m128i *M) {
    (void)bs;
    const __m128i sm = kvt_q45k_scales_vec(blk);
    _Alignas(16) uint8_t scm[16];
    _mm_store_si128((__m128i *)(void *)scm, sm);
    const __m256i lo = _mm256_set1_epi8(0xF);
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) { /* 64 codes: sub-block 2c in the low nibbles, 2c + 1 in the high */
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(blk + KVT_Q4K_QS + 32 * c));
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(q + 64 * c));
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(q + 64 * c + 32));
        const __m256i p0 = _mm256_maddubs_epi16(_mm256_and_si256(v, lo), x0);
        const __m256i p1 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), lo), x1);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p0, _mm256_set1_epi16(scm[2 * c])));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p1, _mm256_set1_epi16(scm[2 * c + 1])));
    }
    *S = acc;
    *M = _mm_madd_epi16(bs2, _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)));
}

INLINE2 void q6k_direct2(const uint8_t *blk, const int8_t *q, __m256i bs, __m128i bs2, __m256i *S, __m128i *M) {
    (void)bs2;
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(blk + KVT_Q6K_SCALES)));
    /* int16 lanes 0-7 take group 2p's scale, 8-15 group 2p + 1's (as prep2) */
    const __m256i spread = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2,
                                            3, 2, 3, 2, 3, 2, 3);
    const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) { /* 128 codes: ql[64h..], qh[32h..] */
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(const void *)(blk + KVT_Q6K_QL + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(const void *)(blk + KVT_Q6K_QL + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(blk + KVT_Q6K_QH + 32 * h));
        const __m256i u[4] = {
            _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
            _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                            _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
        };
        for (int j = 0; j < 4; j++) {
            const int p = 4 * h + j; /* codes 32p..32p+31 */
            const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(q + 32 * p));
            const __m256i scl = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(sc16, _mm256_set1_epi32(p)), spread);
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u[j], x), scl));
        }
    }
    const __m256i corr = _mm256_madd_epi16(bs, _mm256_slli_epi16(sc16, 5));
    *S = _mm256_sub_epi32(acc, corr);
    *M = _mm_setzero_si128();
}

/* IQ4_XS: each code looked up as its book value (int8), then the value's sign
 * moved onto the activation so that maddubs multiplies |value| <= 127 by a
 * signed byte (its codes + 128 would overflow maddubs' int16 pairs); the
 * integer S is the scalar dot's, formed in another order. */
INLINE2 void iq4xs_direct2(const uint8_t *blk, const int8_t *q, __m256i bs, __m128i bs2, __m256i *S, __m128i *M) {
    (void)bs;
    (void)bs2;
    const __m256i book = _mm256_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
                                          -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
    const __m256i lo = _mm256_set1_epi8(0xF);
    const unsigned sh = kvt_load_u16(blk + KVT_IQ4XS_SCALES_H);
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) { /* sub-blocks 2c (bytes 0-15) and 2c + 1 (bytes 16-31) */
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(blk + KVT_IQ4XS_QS + 32 * c));
        const __m256i vl = _mm256_shuffle_epi8(book, _mm256_and_si256(v, lo));
        const __m256i vh = _mm256_shuffle_epi8(book, _mm256_and_si256(_mm256_srli_epi16(v, 4), lo));
        const uint8_t sl = blk[KVT_IQ4XS_SCALES_L + c];
        const int ls0 = ((sl & 0xF) | (((sh >> (4 * c)) & 3) << 4)) - 32;
        const int ls1 = ((sl >> 4) | (((sh >> (4 * c + 2)) & 3) << 4)) - 32;
        const __m256i w0 = _mm256_permute2x128_si256(vl, vh, 0x20), w1 = _mm256_permute2x128_si256(vl, vh, 0x31);
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(q + 64 * c));
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(q + 64 * c + 32));
        const __m256i p0 = _mm256_maddubs_epi16(_mm256_abs_epi8(w0), _mm256_sign_epi8(x0, w0));
        const __m256i p1 = _mm256_maddubs_epi16(_mm256_abs_epi8(w1), _mm256_sign_epi8(x1, w1));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p0, _mm256_set1_epi16((short)ls0)));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p1, _mm256_set1_epi16((short)ls1)));
    }
    *S = acc;
    *M = _mm_setzero_si128();
}

#define DEF_DIRECT(NAME, TARGET, ONE) \
    TARGET static void NAME(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) { \
        const uint8_t *base = w->data; \
        const size_t bb = kvt_qk_block_bytes(w->type); \
        const int has_min = kvt_qk_has_min(w->type); \
        const int64_t nb = a->k / KVT_QK, kpad = a->kpad; \
        const __m128 sign = _mm_set1_ps(-0.0f); \
        const size_t pf_ahead = (size_t)RM * w->row_bytes * KVT_PF_TILES; /* rows: contiguous */ \
        const size_t doff = has_min ? KVT_Q45K_D : w->type == KVT_TYPE_Q6_K ? KVT_Q6K_D : KVT_IQ4XS_D; \
        for (int64_t r = r0; r < r1; r += RM) { \
            const uint8_t *wr[RM]; \
            for (int i = 0; i < RM; i++) wr[i] = base + (size_t)(r + i < r1 ? r + i : r1 - 1) * w->row_bytes; \
            for (int64_t t = 0; t < a->n; t++) { \
                __m128 acc = _mm_setzero_ps(); \
                for (int64_t b = 0; b < nb; b++) { \
                    const int8_t *q = a->kq + t * kpad + b * KVT_QK; \
                    const __m256i bs = _mm256_loadu_si256( \
                        (const __m256i *)(const void *)(a->kbs + t * (kpad / KVT_QK_GROUP) + b * KVT_QK_NGROUP)); \
                    const __m128 dx = _mm_set1_ps(a->kd[t * (kpad / KVT_QK) + b]); \
                    const __m256i bsp = _mm256_madd_epi16(bs, _mm256_set1_epi16(1)); \
                    const __m128i bs2 = _mm_packs_epi32(_mm256_castsi256_si128(bsp), _mm256_extracti128_si256(bsp, 1)); \
                    __m256i s[RM]; \
                    __m128i m[RM]; \
                    float dw[RM], mw[RM]; \
                    for (int i = 0; i < RM; i++) { \
                        const uint8_t *blk = wr[i] + (size_t)b * bb; \
                        /* decode streams each weight once: the same block KVT_PF_TILES tiles on */ \
                        if (t == 0) \
                            for (size_t o = 0; o < bb + 63; o += 64) KVT_PREFETCH_WEIGHTS(blk + pf_ahead + o); \
                        ONE(blk, q, bs, bs2, &s[i], &m[i]); \
                    } \
                    for (int i = 0; i < RM; i++) { \
                        const uint8_t *blk = wr[i] + (size_t)b * bb; \
                        dw[i] = _cvtsh_ss(kvt_load_u16(blk + doff)); \
                        mw[i] = has_min ? _cvtsh_ss(kvt_load_u16(blk + KVT_Q45K_DMIN)) : 0.0f; \
                    } \
                    const __m128i S = hsum4x8_epi32(s[0], s[1], s[2], s[3]); \
                    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(S), _mm_mul_ps(_mm_loadu_ps(dw), dx), acc); \
                    if (has_min) { \
                        const __m128i M = _mm_hadd_epi32(_mm_hadd_epi32(m[0], m[1]), _mm_hadd_epi32(m[2], m[3])); \
                        acc = _mm_fmadd_ps(_mm_xor_ps(_mm_cvtepi32_ps(M), sign), _mm_mul_ps(_mm_loadu_ps(mw), dx), \
                                           acc); \
                    } \
                } \
                _Alignas(16) float out[RM]; \
                _mm_store_ps(out, acc); \
                for (int i = 0; i < RM && r + i < r1; i++) y[t * ldy + r + i] = out[i]; \
            } \
        } \
    }

/* The AVX-512 form for n (1 to DIRECT_MAX_TOKENS, a constant after inlining)
 * tokens of Q4_K (q6 = 0) or Q6_K weights: per row group and super-block,
 * each row is decoded once and every token dotted with it; each token keeps
 * its own accumulator, which takes the super-blocks in order with the same
 * two fmas as DEF_DIRECT, so the bits do not depend on the token count. */
INLINE512 void kdirect512(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy,
                          const int q6, const int n) {
    const uint8_t *base = w->data;
    const size_t bb = kvt_qk_block_bytes(w->type);
    const int64_t nb = a->k / KVT_QK, kpad = a->kpad;
    const __m128 sign = _mm_set1_ps(-0.0f);
    const size_t pf_ahead = (size_t)RM * w->row_bytes * KVT_PF_TILES; /* rows: contiguous */
    for (int64_t r = r0; r < r1; r += RM) {
        const uint8_t *wr[RM];
        for (int i = 0; i < RM; i++) wr[i] = base + (size_t)(r + i < r1 ? r + i : r1 - 1) * w->row_bytes;
        __m128 acc[DIRECT_MAX_TOKENS];
        _Pragma("GCC unroll 4") for (int t = 0; t < n; t++) acc[t] = _mm_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            __m256i bs[DIRECT_MAX_TOKENS], s[RM][DIRECT_MAX_TOKENS];
            __m128i bs2[DIRECT_MAX_TOKENS], m[RM][DIRECT_MAX_TOKENS];
            _Pragma("GCC unroll 4") for (int t = 0; t < n; t++) {
                bs[t] = _mm256_loadu_si256(
                    (const __m256i *)(const void *)(a->kbs + t * (kpad / KVT_QK_GROUP) + b * KVT_QK_NGROUP));
                const __m256i bsp = _mm256_madd_epi16(bs[t], _mm256_set1_epi16(1));
                bs2[t] = _mm_packs_epi32(_mm256_castsi256_si128(bsp), _mm256_extracti128_si256(bsp, 1));
            }
            float dw[RM], mw[RM];
            _Pragma("GCC unroll 4") for (int i = 0; i < RM; i++) {
                const uint8_t *blk = wr[i] + (size_t)b * bb;
                /* decode streams each weight once: the same block KVT_PF_TILES tiles on */
                for (size_t o = 0; o < bb + 63; o += 64) KVT_PREFETCH_WEIGHTS(blk + pf_ahead + o);
                kdec512 wv;
                if (q6) q6k_dec512(blk, &wv);
                else q4k_dec512(blk, &wv);
                _Pragma("GCC unroll 4") for (int t = 0; t < n; t++) {
                    const int8_t *q = a->kq + t * kpad + b * KVT_QK;
                    if (q6) q6k_dot512(&wv, q, bs[t], bs2[t], &s[i][t], &m[i][t]);
                    else q4k_dot512(&wv, q, bs[t], bs2[t], &s[i][t], &m[i][t]);
                }
                dw[i] = _cvtsh_ss(kvt_load_u16(blk + (q6 ? KVT_Q6K_D : KVT_Q45K_D)));
                mw[i] = q6 ? 0.0f : _cvtsh_ss(kvt_load_u16(blk + KVT_Q45K_DMIN));
            }
            _Pragma("GCC unroll 4") for (int t = 0; t < n; t++) {
                const __m128 dx = _mm_set1_ps(a->kd[t * (kpad / KVT_QK) + b]);
                const __m128i S = hsum4x8_epi32(s[0][t], s[1][t], s[2][t], s[3][t]);
                acc[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(S), _mm_mul_ps(_mm_loadu_ps(dw), dx), acc[t]);
                if (!q6) { /* Q4_K has mins */
                    const __m128i M = _mm_hadd_epi32(_mm_hadd_epi32(m[0][t], m[1][t]), _mm_hadd_epi32(m[2][t], m[3][t]));
                    acc[t] = _mm_fmadd_ps(_mm_xor_ps(_mm_cvtepi32_ps(M), sign), _mm_mul_ps(_mm_loadu_ps(mw), dx),
                                          acc[t]);
                }
            }
        }
        _Pragma("GCC unroll 4") for (int t = 0; t < n; t++) {
            _Alignas(16) float out[RM];
            _mm_store_ps(out, acc[t]);
            for (int i = 0; i < RM && r + i < r1; i++) y[t * ldy + r + i] = out[i];
        }
    }
}
#define DEF_DIRECT_N(NAME, Q6) \
    T512 static void NAME(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) { \
        switch (a->n) { \
        case 1: kdirect512(w, a, r0, r1, y, ldy, Q6, 1); break; \
        case 2: kdirect512(w, a, r0, r1, y, ldy, Q6, 2); break; \
        case 3: kdirect512(w, a, r0, r1, y, ldy, Q6, 3); break; \
        default: kdirect512(w, a, r0, r1, y, ldy, Q6, 4); break; \
        } \
    }
DEF_DIRECT_N(q4k_mm_direct512, 0)
DEF_DIRECT_N(q6k_mm_direct512, 1)
DEF_DIRECT(q4k_mm_direct2, T2, q4k_direct2)
DEF_DIRECT(q6k_mm_direct2, T2, q6k_direct2)
DEF_DIRECT(iq4xs_mm_direct2, T2, iq4xs_direct2)

T2 void kvt_qk_mm_avx2(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    if (w->type == KVT_TYPE_IQ4_XS) iq4xs_mm_direct2(w, a, r0, r1, y, ldy); /* any token count */
    else if (a->n <= DIRECT_MAX_TOKENS && w->type == KVT_TYPE_Q4_K) q4k_mm_direct2(w, a, r0, r1, y, ldy);
    else if (a->n <= DIRECT_MAX_TOKENS && w->type == KVT_TYPE_Q6_K) q6k_mm_direct2(w, a, r0, r1, y, ldy);
    else qk_mm_unpacked2(w, a, r0, r1, y, ldy);
}

T512 void kvt_qk_mm_avx512(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    if (w->type == KVT_TYPE_IQ4_XS) { /* prefill of 8 tokens or more on vectors of 16 tokens, else AVX2's */
        if (a->n <= DIRECT_MAX_TOKENS || kvt_qkt_mm_avx512(w, a, r0, r1, y, ldy) == 0)
            iq4xs_mm_direct2(w, a, r0, r1, y, ldy);
        return;
    }
    if (w->type == KVT_TYPE_Q4_K && kvt_qk4_few_avx512(w, a, r0, r1, y, ldy) != 0) return; /* 2-8 tokens */
    if (a->n <= DIRECT_MAX_TOKENS && w->type == KVT_TYPE_Q4_K) q4k_mm_direct512(w, a, r0, r1, y, ldy);
    else if (a->n <= DIRECT_MAX_TOKENS && w->type == KVT_TYPE_Q6_K) q6k_mm_direct512(w, a, r0, r1, y, ldy);
    else if (kvt_qkt_mm_avx512(w, a, r0, r1, y, ldy) == 0) qk_mm_unpacked512(w, a, r0, r1, y, ldy);
}

/* The AMX variant: the AVX-512 kernels, with prefill on tiles. */
T_AMX void kvt_qk_mm_amx(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    if (a->n > DIRECT_MAX_TOKENS && w->type != KVT_TYPE_IQ4_XS && qk_mm_amx(w, a, r0, r1, y, ldy) == 0) return;
    kvt_qk_mm_avx512(w, a, r0, r1, y, ldy); /* decode, or no memory for the staging: the same bits */
}
