// SPDX-License-Identifier: MIT
/* Attention kernels over one page-run of K/V rows (f16 or f32), for a group
 * of query heads that share a KV head (GQA).
 *
 * Layout: K is stored transposed in a page, [head_dim][B] (row d holds
 * dimension d of the page's B tokens), so one vector load covers 16 keys; V is
 * [B][head_dim].
 *
 * Numerics (the cache's correctness invariant rests on them): every score is
 * a 16-lane dot, lane j taking l_j = fma(q[d], k[d], l_j) for d = j, j+16, ...
 * in order from +0, the lanes summed by the canonical tree (ops.h), times
 * scale: the order of llama.cpp's prefill (tinyBLAS) K*Q product with f16 K,
 * so the softmax sees its bits. Every output element of the value pass is a
 * 16-lane sum by key: lane j is l_j = fma(w_t, v_t, l_j) over the keys t with
 * t mod 16 == j (t counted from position 0 of the sequence, as llama.cpp's KV
 * cell index), in order from +0, and the lanes are summed by the same
 * canonical tree: the order of llama.cpp's prefill (tinyBLAS) V*softmax
 * product with f16 V, over its f16 weights. A key outside a window or beyond
 * the last one is a weight of exactly 0 there, which leaves its lane as it
 * was, so it is simply skipped here. So a score or output depends only on its
 * own inputs, never on how many heads, tokens or keys a call covers; the SIMD
 * paths (AVX-512, AVX2) and the scalar path produce the same bits. */
#ifndef KVT_ATTN_H
#define KVT_ATTN_H

#include <stdint.h>

/* What K and V elements the kernels read (their `kind`): f32, f16, or q8_0
 * as pages store it (kv_quant.h: K as a column block, V as rows of 34-byte
 * blocks; head_dim a multiple of 32). A q8_0 element is read as
 * f32(f16 scale) * (float)q, the float kvt_kv_q8_dequant_columns/rows give
 * for it, so reading q8_0 pages directly gives the bits of reading their
 * dequantized copy as f32: only the work differs (no copy written and read
 * back). */
#define KVT_ATTN_F32 0
#define KVT_ATTN_F16 1
#define KVT_ATTN_Q8 2

/* scores[g * ld + t] = scale * dot(q + g * hd, key t) for g < G, t < T.
 * q: G x hd floats; kt: the transposed K block, hd rows of `stride` elements
 * (f16 when f16, else f32), key t in column t. */
void kvt_attn_qk(const float *q, int32_t G, int32_t hd, const void *kt, int32_t stride, int f16, int32_t T, float scale,
                 float *scores, int64_t ld);
/* The same over a q8_0 K column block of B tokens (kv_quant.h), keys t0 ..
 * t0 + T - 1 of it: scores[g * ld + t] for its key t0 + t. */
void kvt_attn_qk_q8(const float *q, int32_t G, int32_t hd, const uint8_t *cols, int32_t B, int32_t t0, int32_t T,
                    float scale, float *scores, int64_t ld);

/* Lane classes of a score (by dimension) or of a value-pass output (by key). */
#define KVT_ATTN_LANES 16

/* One run of consecutive keys of the value pass (one page, or part of one). */
typedef struct {
    const void *v;  /* T rows of hd elements of the pass's kind (KVT_ATTN_*) */
    const float *w; /* the weight of key t for head g is w[g * ld + t] */
    int32_t T;      /* keys */
    int32_t pos;    /* the position of its first key */
} kvt_attn_run;

/* The value pass over n_runs runs, for G heads. With j = (pos + t) %
 * KVT_ATTN_LANES for key t of a run, lane sum j of output (g, d) is
 *   l = fma(w[g * ld + t], V[t][d], l)
 * over the runs in order and their keys in order, starting from
 * acc_in[(g * KVT_ATTN_LANES + j) * hd + d], or from +0 when acc_in is NULL.
 * When acc_out is not NULL the lane sums are stored there (same layout; it may
 * be acc_in), so a pass can be split over calls; when out is not NULL,
 * out[g * hd + d] = the canonical tree (ops.h) over the 16 lane sums. */
void kvt_attn_av(const kvt_attn_run *runs, int32_t n_runs, int64_t ld, int32_t G, int kind, int32_t hd,
                 const float *acc_in, float *acc_out, float *out);

/* The value pass for lane classes j0 <= j < j1 only (0 <= j0 <= j1 <= 16):
 * their lane sums step through their own keys exactly as in kvt_attn_av and
 * are stored to acc_out; the other lanes of acc_out are neither read nor
 * written. So threads that own disjoint ranges of classes can share one
 * acc_out, and a split by lane class gives the bits of the whole pass. */
void kvt_attn_av_lanes(const kvt_attn_run *runs, int32_t n_runs, int64_t ld, int32_t G, int kind, int32_t hd,
                       int32_t j0, int32_t j1, const float *acc_in, float *acc_out);

#endif
