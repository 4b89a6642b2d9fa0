// SPDX-License-Identifier: MIT
/* Decode attention over pages (attn_decode.h). Memory, not arithmetic, is
 * what limits it at depth: a KV head's K block and V rows sit in every page
 * at the page's stride, so each page starts cold and the hardware prefetcher
 * (which stays within 4 KiB) never runs ahead. So the next pages' K is
 * prefetched while a page is scored, and the value pass, whose 16 lane
 * classes each step through every 16th row, runs a chunk of pages at a time,
 * a group of classes after another, each group's rows requested half a
 * chunk before the group reads them (so every line arrives a fixed time
 * ahead of its use, where the next chunk's lines in page order came too late
 * for the first groups of the next chunk); the lane sums carry from
 * chunk to chunk exactly (attn.h), so chunking changes no bit. The
 * prefetches go out in shares between kernel calls (a page's scores 16 keys
 * at a time, a chunk's values a few lane classes at a time) rather than in
 * one burst: a burst of a whole page's lines fills the core's queue of
 * misses and stalls the arithmetic behind it until the lines arrive, where
 * shares let the two overlap. q8_0 pages are read as they are stored, each
 * value dequantized in the kernel's registers (attn.h), so they take the f16
 * walk with half the bytes and no staging copy. */
#include "attn_decode.h"

#include <string.h>

#include "arch_ops.h"
#include "common.h"
#include "kv_quant.h"
#include "ops.h"

#define PREFETCH_PAGES 2       /* pages of K requested ahead of the one being scored */
#define CHUNK_BYTES (32 << 10) /* the V a value-pass chunk makes the kernel read */
#define LINE 64
#define SCORE_KEYS 16 /* keys scored per kernel call, between shares of the prefetch */
/* kernel calls per value-pass chunk, between shares of the prefetch: 4
 * class groups of 4 classes; 8 groups of 2 took 1.09x the 2-thread time of
 * bench_attn depth on Zen 5 (median of 6 alternated pairs), each kernel call
 * covering too few rows to hide its share of the prefetch */
#define VALUE_STEPS 4
#define VALUE_LEAD 2 /* f16/f32 V: rows are requested 1/VALUE_LEAD of a chunk before their class group reads them */

void kvt_attn_prefetch_bytes(const void *p, size_t n) {
    const uint8_t *a = (const uint8_t *)p - ((uintptr_t)p & (LINE - 1)), *end = (const uint8_t *)p + n;
    for (; a < end; a += LINE) __builtin_prefetch(a, 0, 3);
}

static size_t k_block_bytes(const kvt_attn_dec *a) { return (size_t)a->B * kvt_kv_row_bytes(a->dtype, a->hd); }

int32_t kvt_attn_dec_chunk_pages(kvt_kv_dtype dtype, int32_t B, int32_t hd) {
    const size_t pages = CHUNK_BYTES / ((size_t)B * kvt_kv_row_bytes(dtype, hd));
    return pages > 1 ? (int32_t)pages : 1;
}

int32_t kvt_attn_dec_first_page(const kvt_attn_dec *a) { return a->lo / a->B; }
int32_t kvt_attn_dec_end_page(const kvt_attn_dec *a) { return (a->n_keys + a->B - 1) / a->B; }

/* Share i of n of the lines of the n_bytes at p requested into the cache.
 * Always inlined: as a function of its own gcc finds it has no side effects
 * and drops the calls. */
static inline __attribute__((always_inline)) void prefetch_share(const uint8_t *p, size_t n_bytes, int32_t i,
                                                                 int32_t n) {
    if (!p) return;
    const size_t off = (uintptr_t)p & (LINE - 1), lines = (off + n_bytes + LINE - 1) / LINE;
    for (size_t l = lines * (size_t)i / (size_t)n, e = lines * (size_t)(i + 1) / (size_t)n; l < e; l++)
        __builtin_prefetch(p - off + l * LINE, 0, 3);
}

void kvt_attn_dec_scores(const kvt_attn_dec *a, const float *q, int32_t p0, int32_t p1, const kvt_attn_dec_buf *buf) {
    const int32_t B = a->B, f16 = a->dtype == KVT_KV_F16, q8 = a->dtype == KVT_KV_Q8_0;
    const size_t kb = k_block_bytes(a), esz = f16 ? sizeof(uint16_t) : sizeof(float);
    for (int32_t p = p0; p < p1 && p < p0 + PREFETCH_PAGES; p++) kvt_attn_prefetch_bytes(a->pages[p], kb);
    for (int32_t p = p0; p < p1; p++) {
        const int32_t t0 = p * B, s = KVT_MAX(a->lo, t0) - t0, T = KVT_MIN(B, a->n_keys - t0) - s;
        const uint8_t *ahead = p + PREFETCH_PAGES < p1 ? a->pages[p + PREFETCH_PAGES] : NULL;
        float *sc = buf->scores + (t0 + s - a->lo);
        const int32_t steps = (T + SCORE_KEYS - 1) / SCORE_KEYS;
        for (int32_t i = 0; i < steps; i++) {
            const int32_t u = i * SCORE_KEYS, n = KVT_MIN(SCORE_KEYS, T - u);
            prefetch_share(ahead, kb, i, steps);
            if (q8) kvt_attn_qk_q8(q, a->G, a->hd, a->pages[p], B, s + u, n, a->scale, sc + u, buf->ld);
            else kvt_attn_qk(q, a->G, a->hd, a->pages[p] + (size_t)(s + u) * esz, B, f16, n, a->scale, sc + u, buf->ld);
        }
    }
}

void kvt_attn_dec_softmax(const kvt_attn_dec *a, float *row) {
    const int32_t n = a->n_keys - a->lo;
    if (a->softcap > 0) kvt_softcap(row, n, a->softcap);
    if (a->round_f16) kvt_softmax_at_f16(row, n, a->lo); /* as llama.cpp: the weights meet an f16 cache in f16 */
    else kvt_softmax_at(row, n, a->lo);
}

/* The next run of keys at or after k and before end whose lane classes lie
 * in [j0, j1): its first key, *n keys long (0 when there is none). */
static int32_t class_run(int32_t k, int32_t end, int32_t j0, int32_t j1, int32_t *n) {
    while (k < end) {
        const int32_t j = k % KVT_ATTN_LANES, base = k - j;
        if (j < j0) k = base + j0;
        else if (j >= j1) k = base + KVT_ATTN_LANES + j0;
        else {
            *n = KVT_MIN(base + j1, end) - k;
            return k;
        }
    }
    *n = 0;
    return end;
}

/* Keys [k0, k1) of page p that the classes [j0, j1) read, requested into
 * the cache. */
static void touch_rows(const kvt_attn_dec *a, int32_t p, int32_t k0, int32_t k1, int32_t j0, int32_t j1) {
    const size_t rb = kvt_kv_row_bytes(a->dtype, a->hd);
    const uint8_t *v = a->pages[p] + a->v_delta;
    int32_t n;
    for (int32_t k = class_run(k0, k1, j0, j1, &n); n > 0; k = class_run(k + n, k1, j0, j1, &n))
        kvt_attn_prefetch_bytes(v + (size_t)(k - p * a->B) * rb, (size_t)n * rb);
}

static void prefetch_chunk(const kvt_attn_dec *a, int32_t p0, int32_t p1, int32_t j0, int32_t j1) {
    for (int32_t p = p0; p < p1; p++)
        touch_rows(a, p, KVT_MAX(a->lo, p * a->B), KVT_MIN(a->n_keys, (p + 1) * a->B), j0, j1);
}

void kvt_attn_dec_values(const kvt_attn_dec *a, int32_t j0, int32_t j1, const kvt_attn_dec_buf *buf) {
    const int32_t B = a->B, hd = a->hd;
    const int kind = a->dtype == KVT_KV_Q8_0 ? KVT_ATTN_Q8 : a->dtype == KVT_KV_F16 ? KVT_ATTN_F16 : KVT_ATTN_F32;
    const int32_t chunk = kvt_attn_dec_chunk_pages(a->dtype, B, hd), pe = kvt_attn_dec_end_page(a);
    const size_t rb = kvt_kv_row_bytes(a->dtype, hd);
    int first = 1;
    for (int32_t c0 = kvt_attn_dec_first_page(a); c0 < pe; c0 += chunk) {
        const int32_t c1 = KVT_MIN(pe, c0 + chunk);
        int32_t nr = 0;
        for (int32_t p = c0; p < c1; p++) {
            const int32_t t0 = p * B, s = KVT_MAX(a->lo, t0) - t0, T = KVT_MIN(B, a->n_keys - t0) - s;
            buf->runs[nr++] = (kvt_attn_run){a->pages[p] + a->v_delta + (size_t)s * rb, buf->scores + (t0 + s - a->lo),
                                             T, t0 + s};
        }
        /* classes in groups; before each, the rows that the group `lead`
         * groups later reads are requested: a class group's rows are lines of
         * its own (an f16 or f32 row is whole lines; q8_0 rows of 68 bytes
         * share a line with a neighbour, which another group may request
         * again, a hit), so each line is requested about once, a fixed time
         * before its use. */
        const int32_t nj = j1 - j0, steps = KVT_MIN(VALUE_STEPS, nj), lead = KVT_MAX(1, steps / VALUE_LEAD);
        for (int32_t i = 0; i < steps; i++) {
            const int32_t ja = j0 + nj * i / steps, jb = j0 + nj * (i + 1) / steps;
            const int32_t n = i + lead, k0 = KVT_MIN(pe, c0 + n / steps * chunk), g = n % steps;
            prefetch_chunk(a, k0, KVT_MIN(pe, k0 + chunk), j0 + nj * g / steps, j0 + nj * (g + 1) / steps);
            kvt_attn_av_lanes(buf->runs, nr, buf->ld, a->G, kind, hd, ja, jb, first ? NULL : buf->acc, buf->acc);
        }
        first = 0;
    }
    if (first) /* no keys: the classes' sums are +0 */
        for (int32_t g = 0; g < a->G; g++)
            memset(buf->acc + ((size_t)g * KVT_ATTN_LANES + (size_t)j0) * (size_t)hd, 0,
                   (size_t)(j1 - j0) * (size_t)hd * sizeof(float));
}

void kvt_attn_dec_finish(const kvt_attn_dec *a, const float *acc, float *out) {
    kvt_attn_av(NULL, 0, 0, a->G, 0, a->hd, acc, NULL, out);
}

void kvt_attn_decode(const kvt_attn_dec *a, const float *q, float *out, const kvt_attn_dec_buf *buf) {
    kvt_attn_dec_scores(a, q, kvt_attn_dec_first_page(a), kvt_attn_dec_end_page(a), buf);
    prefetch_chunk(
        a, kvt_attn_dec_first_page(a),
        KVT_MIN(kvt_attn_dec_end_page(a), kvt_attn_dec_first_page(a) + kvt_attn_dec_chunk_pages(a->dtype, a->B, a->hd)),
        0, KVT_ATTN_LANES);
    for (int32_t g = 0; g < a->G; g++) kvt_attn_dec_softmax(a, buf->scores + (size_t)g * (size_t)buf->ld);
    kvt_attn_dec_values(a, 0, KVT_ATTN_LANES, buf);
    kvt_attn_dec_finish(a, buf->acc, out);
}
