// SPDX-License-Identifier: MIT
/* Decode attention: one query row (the G query heads of one KV head) over
 * that KV head's keys in a sequence's pages, streamed page by page with the
 * next pages prefetched, and the value pass run in chunks of pages that stay
 * in cache while its 16 lane classes (attn.h) step through them.
 *
 * The work splits into parts that may run on different threads with the same
 * bits as one thread doing all of it:
 *   scores:  by pages (a score depends only on q and its own key);
 *   softmax: one call per query head (the whole row, in its own order);
 *   values:  by lane classes (key position mod 16), each class's sums
 *            stepping through its keys in order, as attn.h defines them;
 *   finish:  the canonical lane tree over the 16 classes.
 * Never by positions within a class: that would change the summation order
 * the numerics (and every stored block) rest on. */
#ifndef KVT_ATTN_DECODE_H
#define KVT_ATTN_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "kvtier.h"

/* One KV head's keys [lo, n_keys) and what attending them needs. */
typedef struct {
    const uint8_t *const *pages; /* pages[p]: the K block of page p (keys p * B ...): [hd][B] f16/f32, or q8_0 columns */
    ptrdiff_t v_delta;           /* page p's V rows start at pages[p] + v_delta */
    kvt_kv_dtype dtype;
    int32_t B, hd, G;     /* tokens per page, head dim, query heads of this KV head */
    int32_t lo, n_keys;   /* the keys seen */
    float scale, softcap; /* softcap 0: none */
    int round_f16;        /* f16 KV: q and the softmax weights meet it rounded to f16 */
} kvt_attn_dec;

/* Where the parts keep their work: score rows of stride ld (>= n_keys - lo)
 * for the G heads, the lane sums (G, 16, hd), and the runs of a value chunk
 * (chunk_pages entries; kvt_attn_dec_chunk_pages). */
typedef struct {
    float *scores;
    int64_t ld;
    float *acc;
    kvt_attn_run *runs;
} kvt_attn_dec_buf;

/* Pages a value-pass chunk covers: whole pages, about an L1 cache's worth of
 * the V bytes the kernel reads. */
int32_t kvt_attn_dec_chunk_pages(kvt_kv_dtype dtype, int32_t B, int32_t hd);

/* The pages holding the keys: [lo / B, (n_keys - 1) / B]. */
int32_t kvt_attn_dec_first_page(const kvt_attn_dec *a);
int32_t kvt_attn_dec_end_page(const kvt_attn_dec *a);

/* Scores of the keys in pages [p0, p1): head g's (q + g * hd, already
 * rounded when round_f16) into buf->scores[g * ld + key - lo]. */
void kvt_attn_dec_scores(const kvt_attn_dec *a, const float *q, int32_t p0, int32_t p1, const kvt_attn_dec_buf *buf);

/* Turns one head's score row (n_keys - lo values) into its softmax weights. */
void kvt_attn_dec_softmax(const kvt_attn_dec *a, float *row);

/* The value pass over every key, with the softmax weights in buf->scores,
 * for lane classes [j0, j1): their lane sums, from +0, into buf->acc (G, 16,
 * hd); other classes' lanes are not touched. */
void kvt_attn_dec_values(const kvt_attn_dec *a, int32_t j0, int32_t j1, const kvt_attn_dec_buf *buf);

/* out (G x hd) from the 16 lane sums in acc. */
void kvt_attn_dec_finish(const kvt_attn_dec *a, const float *acc, float *out);

/* All of the above on one thread, into buf's score rows and lane sums; q: G x
 * hd (rounded as needed), out: G x hd. */
void kvt_attn_decode(const kvt_attn_dec *a, const float *q, float *out, const kvt_attn_dec_buf *buf);

/* Requests into the cache every 64-byte line that the n bytes at p touch
 * (pages sit anywhere in the pool, so the hardware cannot guess the next
 * one; q8_0 rows and blocks need not start on a line). */
void kvt_attn_prefetch_bytes(const void *p, size_t n);

#endif
