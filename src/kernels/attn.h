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
 * so the softmax sees its bits. Every output element of the value pass is
 * out = fma(w_t, v_t, out) over t in order. So a score or output depends only
 * on its own inputs, never on how many heads, tokens or keys a call covers; the
 * SIMD paths (AVX-512, AVX2) and the scalar path produce the same bits. */
#ifndef KVT_ATTN_H
#define KVT_ATTN_H

#include <stdint.h>

/* scores[g * ld + t] = scale * dot(q + g * hd, key t) for g < G, t < T.
 * q: G x hd floats; kt: the transposed K block, hd rows of `stride` elements
 * (f16 when f16, else f32), key t in column t. */
void kvt_attn_qk(const float *q, int32_t G, int32_t hd, const void *kt, int32_t stride, int f16, int32_t T,
                 float scale, float *scores, int64_t ld);

/* out[g * hd + d] = fma(w[g * ld + t], V[t][d], out[g * hd + d]) for t = 0..T-1
 * in order, g < G, d < hd. v: T rows of hd elements (f16 when f16, else f32). */
void kvt_attn_av(const float *w, int64_t ld, int32_t G, const void *v, int f16, int32_t T, int32_t hd, float *out);

#endif
