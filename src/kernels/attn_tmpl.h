// SPDX-License-Identifier: MIT
/* The tiling of the SIMD attention kernels (attn.h), written once for every
 * instruction-set variant: attn_avx2.c and attn_avx512.c define the vector
 * type and a handful of operations on it, then include this file, which
 * defines the two kernels from them. The numerics are those of attn.h: a
 * score is one lane of a vector of keys, its dot kept in 16 lane classes
 * d mod 16 (one fma per step from +0), summed by the canonical lane tree, then
 * one multiply by the scale; a lane-class sum of the value pass (one of 16
 * per output element, by key t mod 16) is one lane of a vector of dimensions,
 * stepped through its keys in order. Which keys, heads or dimensions share a tile never changes a bit,
 * and a value pass may cover only lane classes j0 .. j1 - 1 (out is then NULL).
 *
 * The includer defines, before including:
 *   ATT_LANES                     floats per vector
 *   ATT_V, ATT_M                  the vector type and a lane-mask type
 *   ATT_INLINE                    `static inline`, always inlined, with the target attribute
 *   ATT_TARGET                    the target attribute alone (for the two kernels)
 *   ATT_GROUP_MAX, ATT_QK_KVEC    score tile: heads x vectors of keys (QK_KVEC 1 or 2)
 *   ATT_QK_CLASSES                lane classes the score tile runs side by side (1, 2 or 4)
 *   ATT_TREE_HEADS                at most this many heads (2 or 4) take the tree-order score tile
 *   ATT_AV_HEADS, ATT_AV_CHUNKS   value tile: heads x vectors of dimensions
 *   ATT_QK_NAME, ATT_AV_NAME      the names of the kernels to define
 * and, as ATT_INLINE functions:
 *   ATT_M att_mask(int32_t left)        the first min(left, ATT_LANES) lanes
 *   ATT_V att_zero(void), att_set1(float), att_fma(a, b, c) = a * b + c (one
 *         rounding), att_mul(a, b), att_add(a, b)
 *   ATT_V att_load(p, f16, off, m)     the lanes of m from element off of p (f16
 *         or f32); lanes outside m are 0 and not read
 *   ATT_V att_load_f32(p, m), void att_store_f32(p, m, v)   likewise for f32.
 *   ATT_V att_load_q8(q, sc, m)        q8_0 K columns: the lanes of m of
 *         f32(sc[i]) * (float)q[i] (f16 scales sc, int8 values q)
 *   ATT_V att_load_q8_row(blk, i, m)   q8_0 V: the lanes of m of the block of
 *         34 bytes at blk from its value i (i + ATT_LANES <= 32), each
 *         f32(its f16 scale) * (float)q
 * Those products are the ones kvt_kv_q8_dequant_columns/rows return (one
 * correctly rounded f32 multiply of exact operands), so a kernel reading q8_0
 * pages directly gives the bits of one reading their dequantized floats.
 * The tile functions take their counts as arguments but are always inlined
 * into switches on constants, so the accumulator arrays become registers. */

#include <stdint.h>

#include "attn.h"

#if ATT_QK_KVEC != 1 && ATT_QK_KVEC != 2
#error "ATT_QK_KVEC must be 1 or 2"
#endif
#if ATT_TREE_HEADS != 2 && ATT_TREE_HEADS != 4
#error "ATT_TREE_HEADS must be 2 or 4"
#endif
#if ATT_GROUP_MAX != 4 && ATT_GROUP_MAX != 6 && ATT_GROUP_MAX != 8
#error "ATT_GROUP_MAX must be 4, 6 or 8"
#endif
#if ATT_QK_CLASSES != 1 && ATT_QK_CLASSES != 2 && ATT_QK_CLASSES != 4
#error "ATT_QK_CLASSES must be 1, 2 or 4"
#endif
#if ATT_AV_HEADS != 4 || ATT_AV_CHUNKS < 3 || ATT_AV_CHUNKS > 4
#error "the value tile is 4 heads x 3 or 4 vectors"
#endif

/* Where a score kernel reads K: p with `stride` elements per dimension (f32
 * or f16), or for q8_0 (kind KVT_ATTN_Q8) a column block's int8 values q and
 * f16 scales sc, both already offset to the kernel's first column. kind is a
 * constant in every instantiation (the kernels switch on it once), so each
 * tile compiles to one element type's loads. */
typedef struct {
    const void *p;
    const int8_t *q;
    const uint16_t *sc;
    int64_t stride;
} att_kref;

ATT_INLINE ATT_V att_kload(const att_kref *k, const int kind, int32_t d, int64_t t, ATT_M m) {
    if (kind == KVT_ATTN_Q8)
        return att_load_q8(k->q + (int64_t)d * k->stride + t, k->sc + (int64_t)(d / 32) * k->stride + t, m);
    return att_load(k->p, kind == KVT_ATTN_F16, (int64_t)d * k->stride + t, m);
}

/* Element i of V row t (hd elements) of a run, as ATT_LANES lanes. */
ATT_INLINE ATT_V att_vload(const void *v, const int kind, int32_t hd, int32_t t, int32_t i, ATT_M m) {
    if (kind == KVT_ATTN_Q8)
        return att_load_q8_row((const uint8_t *)v + (int64_t)t * (hd / 32 * 34) + (int64_t)(i / 32) * 34, i % 32, m);
    return att_load(v, kind == KVT_ATTN_F16, (int64_t)t * hd + i, m);
}

/* A score tile: gn heads x nvec vectors of keys. The dot of each score is kept
 * in 16 lane classes (d mod 16): class j is one fma chain over d = j, j + 16,
 * ... from +0, computed for the whole tile at once so each K row is loaded
 * once for every head. ATT_QK_CLASSES classes run side by side, those the
 * canonical lane tree of ops.h (kvt_ops_lanes_sum's order) adds first: one
 * class j; or j and j + 8 (the tree's first level); or j, j + 8, j + 4 and
 * j + 12 (its first two levels). Their sum waits in part[] for the levels
 * left, then one multiply by the scale. More classes at once means fewer
 * partial sums written and read back per fma, for the same chains. */
ATT_INLINE void att_qk_tile(const float *q, int32_t hd, const att_kref *kt, const int kind, int32_t t0, const ATT_M *m,
                            float *scores, int64_t ld, ATT_V vscale, const int gn, const int nvec) {
    enum { NC = ATT_QK_CLASSES, NJ = 16 / ATT_QK_CLASSES };
    static const int32_t cls[4] = {0, 8, 4, 12}; /* the classes of a set, from its first */
    ATT_V part[NJ][ATT_GROUP_MAX][ATT_QK_KVEC];
    for (int j = 0; j < NJ; j++) {
        ATT_V acc[NC][ATT_GROUP_MAX][ATT_QK_KVEC];
        _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++) _Pragma("GCC unroll 8") for (int g = 0; g < gn; g++)
            _Pragma("GCC unroll 2") for (int vi = 0; vi < nvec; vi++) acc[c][g][vi] = att_zero();
        for (int32_t d0 = 0; d0 < hd; d0 += 16) {
            _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++) {
                const int32_t d = d0 + j + cls[c];
                if (d >= hd) continue;
                ATT_V kx[ATT_QK_KVEC];
                _Pragma("GCC unroll 2") for (int vi = 0; vi < nvec; vi++)
                    kx[vi] = att_kload(kt, kind, d, t0 + vi * ATT_LANES, m[vi]);
                _Pragma("GCC unroll 8") for (int g = 0; g < gn; g++) {
                    ATT_V qd = att_set1(q[(int64_t)g * hd + d]);
                    _Pragma("GCC unroll 2") for (int vi = 0; vi < nvec; vi++)
                        acc[c][g][vi] = att_fma(qd, kx[vi], acc[c][g][vi]);
                }
            }
        }
        _Pragma("GCC unroll 8") for (int g = 0; g < gn; g++) _Pragma("GCC unroll 2") for (int vi = 0; vi < nvec; vi++) {
            if (NC == 1) part[j][g][vi] = acc[0][g][vi];
            else if (NC == 2) part[j][g][vi] = att_add(acc[0][g][vi], acc[NC - 1][g][vi]);
            else
                part[j][g][vi] = att_add(att_add(acc[0][g][vi], acc[1 % NC][g][vi]),
                                         att_add(acc[2 % NC][g][vi], acc[3 % NC][g][vi]));
        }
    }
    _Pragma("GCC unroll 8") for (int g = 0; g < gn; g++) _Pragma("GCC unroll 2") for (int vi = 0; vi < nvec; vi++) {
        ATT_V l[NJ];
        for (int j = 0; j < NJ; j++) l[j] = part[j][g][vi];
        for (int n = NJ / 2; n > 0; n /= 2)
            for (int j = 0; j < n; j++) l[j] = att_add(l[j], l[j + n]);
        att_store_f32(scores + (int64_t)g * ld + t0 + vi * ATT_LANES, m[vi], att_mul(l[0], vscale));
    }
}

/* Small head groups (G <= ATT_TREE_HEADS, decode with GQA): a tile of gn
 * heads x one vector of keys whose lane classes are computed in the order
 * that lets each level of the canonical tree (the order above) be added as
 * soon as both its halves exist: classes j and j + 8 give level 8, two of
 * those four apart give level 4, and so on. At most five partial sums per
 * head are live, so nothing waits in memory; the bits are the tile's above. */
ATT_INLINE void att_qk_class(const float *q, int32_t hd, const att_kref *kt, const int kind, int32_t t0, ATT_M m, int j,
                             ATT_V *acc, const int gn) {
    _Pragma("GCC unroll 4") for (int g = 0; g < gn; g++) acc[g] = att_zero();
    for (int32_t d = j; d < hd; d += 16) {
        const ATT_V kx = att_kload(kt, kind, d, t0, m);
        _Pragma("GCC unroll 4") for (int g = 0; g < gn; g++)
            acc[g] = att_fma(att_set1(q[(int64_t)g * hd + d]), kx, acc[g]);
    }
}

/* Level 4 of the tree at j (< 4): (class j + class j+8) + (class j+4 + class j+12). */
ATT_INLINE void att_qk_quad(const float *q, int32_t hd, const att_kref *kt, const int kind, int32_t t0, ATT_M m, int j,
                            ATT_V *s4, const int gn) {
    ATT_V a[ATT_TREE_HEADS], b[ATT_TREE_HEADS], s8[ATT_TREE_HEADS];
    att_qk_class(q, hd, kt, kind, t0, m, j, a, gn);
    att_qk_class(q, hd, kt, kind, t0, m, j + 8, b, gn);
    _Pragma("GCC unroll 4") for (int g = 0; g < gn; g++) s8[g] = att_add(a[g], b[g]);
    att_qk_class(q, hd, kt, kind, t0, m, j + 4, a, gn);
    att_qk_class(q, hd, kt, kind, t0, m, j + 12, b, gn);
    _Pragma("GCC unroll 4") for (int g = 0; g < gn; g++) s4[g] = att_add(s8[g], att_add(a[g], b[g]));
}

ATT_INLINE void att_qk_tree_tile(const float *q, int32_t hd, const att_kref *kt, const int kind, int32_t t0, ATT_M m,
                                 float *scores, int64_t ld, ATT_V vscale, const int gn) {
    ATT_V x[ATT_TREE_HEADS], y[ATT_TREE_HEADS], s2[ATT_TREE_HEADS];
    att_qk_quad(q, hd, kt, kind, t0, m, 0, x, gn);
    att_qk_quad(q, hd, kt, kind, t0, m, 2, y, gn);
    _Pragma("GCC unroll 4") for (int g = 0; g < gn; g++) s2[g] = att_add(x[g], y[g]);
    att_qk_quad(q, hd, kt, kind, t0, m, 1, x, gn);
    att_qk_quad(q, hd, kt, kind, t0, m, 3, y, gn);
    _Pragma("GCC unroll 4") for (int g = 0; g < gn; g++)
        att_store_f32(scores + (int64_t)g * ld + t0, m, att_mul(att_add(s2[g], att_add(x[g], y[g])), vscale));
}

/* One head group of a score tile: nvec (1 or QK_KVEC) vectors of keys, GN heads. */
#if ATT_QK_KVEC == 2
#define ATT_QK_GN(GN) \
    (nvec == 2 ? att_qk_tile(qg, hd, kt, kind, t0, m, sg, ld, vscale, GN, 2) \
               : att_qk_tile(qg, hd, kt, kind, t0, m, sg, ld, vscale, GN, 1))
#else
#define ATT_QK_GN(GN) att_qk_tile(qg, hd, kt, kind, t0, m, sg, ld, vscale, GN, 1)
#endif

ATT_INLINE void att_qk_body(const float *q, int32_t G, int32_t hd, const att_kref *kt, const int kind, int32_t T,
                            ATT_V vscale, float *scores, int64_t ld) {
    if (G <= ATT_TREE_HEADS) {
        for (int32_t t0 = 0; t0 < T; t0 += ATT_LANES) {
            const ATT_M m = att_mask(T - t0);
            switch (G) {
            case 1: att_qk_tree_tile(q, hd, kt, kind, t0, m, scores, ld, vscale, 1); break;
#if ATT_TREE_HEADS > 2
            case 2: att_qk_tree_tile(q, hd, kt, kind, t0, m, scores, ld, vscale, 2); break;
            case 3: att_qk_tree_tile(q, hd, kt, kind, t0, m, scores, ld, vscale, 3); break;
#endif
            default: att_qk_tree_tile(q, hd, kt, kind, t0, m, scores, ld, vscale, ATT_TREE_HEADS); break;
            }
        }
        return;
    }
    for (int32_t t0 = 0; t0 < T; t0 += ATT_LANES * ATT_QK_KVEC) {
        int32_t nvec = (T - t0 + ATT_LANES - 1) / ATT_LANES;
        if (nvec > ATT_QK_KVEC) nvec = ATT_QK_KVEC;
        ATT_M m[ATT_QK_KVEC];
        for (int32_t vi = 0; vi < ATT_QK_KVEC; vi++) m[vi] = att_mask(vi < nvec ? T - t0 - vi * ATT_LANES : 0);
        for (int32_t g0 = 0; g0 < G; g0 += ATT_GROUP_MAX) {
            const int32_t gn = G - g0 < ATT_GROUP_MAX ? G - g0 : ATT_GROUP_MAX;
            const float *qg = q + (int64_t)g0 * hd;
            float *sg = scores + (int64_t)g0 * ld;
            switch (gn) {
            case 1: ATT_QK_GN(1); break;
            case 2: ATT_QK_GN(2); break;
            case 3: ATT_QK_GN(3); break;
#if ATT_GROUP_MAX > 4
            case 4: ATT_QK_GN(4); break;
            case 5: ATT_QK_GN(5); break;
#endif
#if ATT_GROUP_MAX > 6
            case 6: ATT_QK_GN(6); break;
            case 7: ATT_QK_GN(7); break;
#endif
            default: ATT_QK_GN(ATT_GROUP_MAX); break;
            }
        }
    }
}
#undef ATT_QK_GN

ATT_TARGET void ATT_QK_NAME(const float *q, int32_t G, int32_t hd, const void *kt, int32_t stride, int kind,
                            int32_t t_base, int32_t T, float scale, float *scores, int64_t ld) {
    const ATT_V vscale = att_set1(scale);
    att_kref k = {NULL, NULL, NULL, stride};
    switch (kind) {
    case KVT_ATTN_Q8:
        k.sc = (const uint16_t *)kt + t_base;
        k.q = (const int8_t *)kt + (int64_t)(hd / 32) * stride * 2 + t_base;
        att_qk_body(q, G, hd, &k, KVT_ATTN_Q8, T, vscale, scores, ld);
        break;
    case KVT_ATTN_F16:
        k.p = (const uint16_t *)kt + t_base;
        att_qk_body(q, G, hd, &k, KVT_ATTN_F16, T, vscale, scores, ld);
        break;
    default:
        k.p = (const float *)kt + t_base;
        att_qk_body(q, G, hd, &k, KVT_ATTN_F32, T, vscale, scores, ld);
        break;
    }
}

/* A value tile: gn heads (from g0) x cn vectors of dimensions (from c0). Lane
 * class j's sums start from acc_in (or +0), step through the keys of every
 * run whose position is j mod 16 in order (one fma each; each V row is loaded
 * once for every head of the tile), and are written to acc_out and/or kept
 * for the lane tree whose result goes to out. */
ATT_INLINE void att_av_tile(const kvt_attn_run *runs, int32_t n_runs, int64_t ld, const int kind, int32_t hd,
                            int32_t g0, int32_t c0, int32_t j0, int32_t j1, const float *acc_in, float *acc_out,
                            float *out, const int gn, const int cn) {
    ATT_M mask[ATT_AV_CHUNKS];
    ATT_V part[16][ATT_AV_HEADS][ATT_AV_CHUNKS];
    _Pragma("GCC unroll 4") for (int c = 0; c < cn; c++) mask[c] = att_mask(hd - (c0 + c) * ATT_LANES);
    for (int32_t j = j0; j < j1; j++) {
        ATT_V a[ATT_AV_HEADS][ATT_AV_CHUNKS];
        _Pragma("GCC unroll 4") for (int g = 0; g < gn; g++) _Pragma("GCC unroll 4") for (int c = 0; c < cn; c++)
            a[g][c] = acc_in ? att_load_f32(acc_in + ((int64_t)(g0 + g) * 16 + j) * hd + (c0 + c) * ATT_LANES, mask[c])
                             : att_zero();
        for (int32_t r = 0; r < n_runs; r++) {
            const void *v = runs[r].v;
            const float *w = runs[r].w + (int64_t)g0 * ld;
            for (int32_t t = (j - runs[r].pos) & 15; t < runs[r].T; t += 16) {
                ATT_V vx[ATT_AV_CHUNKS];
                _Pragma("GCC unroll 4") for (int c = 0; c < cn; c++)
                    vx[c] = att_vload(v, kind, hd, t, (c0 + c) * ATT_LANES, mask[c]);
                _Pragma("GCC unroll 4") for (int g = 0; g < gn; g++) {
                    ATT_V wt = att_set1(w[(int64_t)g * ld + t]);
                    _Pragma("GCC unroll 4") for (int c = 0; c < cn; c++) a[g][c] = att_fma(wt, vx[c], a[g][c]);
                }
            }
        }
        _Pragma("GCC unroll 4") for (int g = 0; g < gn; g++) _Pragma("GCC unroll 4") for (int c = 0; c < cn; c++) {
            if (acc_out)
                att_store_f32(acc_out + ((int64_t)(g0 + g) * 16 + j) * hd + (c0 + c) * ATT_LANES, mask[c], a[g][c]);
            part[j][g][c] = a[g][c];
        }
    }
    if (!out) return;
    _Pragma("GCC unroll 4") for (int g = 0; g < gn; g++) _Pragma("GCC unroll 4") for (int c = 0; c < cn; c++) {
        ATT_V l[8];
        for (int j = 0; j < 8; j++) l[j] = att_add(part[j][g][c], part[j + 8][g][c]);
        for (int j = 0; j < 4; j++) l[j] = att_add(l[j], l[j + 4]);
        for (int j = 0; j < 2; j++) l[j] = att_add(l[j], l[j + 2]);
        att_store_f32(out + (int64_t)(g0 + g) * hd + (c0 + c) * ATT_LANES, mask[c], att_add(l[0], l[1]));
    }
}

/* One head group of a value tile: GN heads, cn (1..AV_CHUNKS) vectors of dimensions. */
#define ATT_AV_CALL(GN, CN) att_av_tile(runs, n_runs, ld, kind, hd, g0, c0, j0, j1, acc_in, acc_out, out, GN, CN)
#if ATT_AV_CHUNKS > 3
#define ATT_AV_C4(GN) \
    case 3: \
        ATT_AV_CALL(GN, 3); \
        break;
#else
#define ATT_AV_C4(GN)
#endif
#define ATT_AV_GN(GN) \
    switch (cn) { \
    case 1: ATT_AV_CALL(GN, 1); break; \
    case 2: \
        ATT_AV_CALL(GN, 2); \
        break; \
        ATT_AV_C4(GN) \
    default: ATT_AV_CALL(GN, ATT_AV_CHUNKS); break; \
    }

ATT_INLINE void att_av_body(const kvt_attn_run *runs, int32_t n_runs, int64_t ld, int32_t G, const int kind, int32_t hd,
                            int32_t j0, int32_t j1, const float *acc_in, float *acc_out, float *out) {
    const int32_t chunks = (hd + ATT_LANES - 1) / ATT_LANES;
    for (int32_t g0 = 0; g0 < G; g0 += ATT_AV_HEADS) {
        const int32_t gn = G - g0 < ATT_AV_HEADS ? G - g0 : ATT_AV_HEADS;
        for (int32_t c0 = 0; c0 < chunks; c0 += ATT_AV_CHUNKS) {
            const int32_t cn = chunks - c0 < ATT_AV_CHUNKS ? chunks - c0 : ATT_AV_CHUNKS;
            switch (gn) {
            case 1: ATT_AV_GN(1) break;
            case 2: ATT_AV_GN(2) break;
            case 3: ATT_AV_GN(3) break;
            default: ATT_AV_GN(ATT_AV_HEADS) break;
            }
        }
    }
}
#undef ATT_AV_GN
#undef ATT_AV_C4
#undef ATT_AV_CALL

ATT_TARGET void ATT_AV_NAME(const kvt_attn_run *runs, int32_t n_runs, int64_t ld, int32_t G, int kind, int32_t hd,
                            int32_t j0, int32_t j1, const float *acc_in, float *acc_out, float *out) {
    switch (kind) {
    case KVT_ATTN_Q8: att_av_body(runs, n_runs, ld, G, KVT_ATTN_Q8, hd, j0, j1, acc_in, acc_out, out); break;
    case KVT_ATTN_F16: att_av_body(runs, n_runs, ld, G, KVT_ATTN_F16, hd, j0, j1, acc_in, acc_out, out); break;
    default: att_av_body(runs, n_runs, ld, G, KVT_ATTN_F32, hd, j0, j1, acc_in, acc_out, out); break;
    }
}
