// SPDX-License-Identifier: MIT
/* Attention of a chunk's tokens over their sequences' pages (the page layout
 * is above kvt_eng_kv_offset in engine.c). Scores and outputs go through
 * attn.h, whose per-element operation order depends only on the element's own
 * inputs: that is the batch invariance, and it is why tokens may be tiled.
 *
 * Tiles: consecutive chunk rows of one sequence that all see keys from
 * position 0 (no sliding-window cut) attend together, as many as keep their
 * score rows within TILE_SCORE_BYTES (and their query heads within
 * TILE_HEADS): each K page is read once for the query heads of every token of
 * the tile, one call per page, while it is in L1 (a KV head has only G =
 * n_head / n_head_kv query heads of one token). Tokens whose own keys end
 * before a page skip it; scores past a token's own position inside a page it
 * needs are computed and never read; its softmax covers its own keys. The
 * value pass walks the keys in blocks of pages: each block's V rows serve one
 * call for all the tokens that go on past the block, their lane sums (attn.h)
 * carried from block to block, and one call per token that ends inside it,
 * which finishes that token's output: the same fma chains in the same order,
 * so the same bits as a token attending alone. */
#include "engine_impl.h"

#include <math.h>
#include <string.h>

#include "arch_ops.h"
#include "attn.h"
#include "attn_decode.h"
#include "common.h"
#include "kv_quant.h"
#include "ops.h"

/* The value pass reads V in blocks of this many keys (whole pages, at least
 * one): small enough to stay in L2 while every token of a tile uses it; q8_0
 * pages of a block are dequantized once for all of them. */
#define AV_BLOCK_KEYS 512
/* A tile's score rows (query heads x keys, f32) per thread: the bound on the
 * attention scratch that grows with the context (one row at 32k keys is 128
 * KiB), and its query heads, whose q rows stay in L1 while a page is read. */
#define TILE_SCORE_BYTES ((size_t)4 << 20)
#define TILE_HEADS 64
/* Query heads the smallest tile may take whatever its keys (the scratch is
 * sized for them at n_ctx keys): two AVX-512 score tiles' worth. */
#define GROUP_HEADS 8
/* An f16 page or V block is widened to f32 once for the whole tile when the
 * tile has more query heads than this: the kernels take at most 4 heads per
 * pass over a page (attn_avx512.c), so they would widen each vector once per
 * 4 heads. f16 -> f32 is exact, so the bits are those of the f16 kernels. */
#define WIDEN_HEADS 4
#ifndef PREFETCH_PAGES
#define PREFETCH_PAGES 2 /* pages of K or V requested ahead of the one read */
#endif

/* Tokens the smallest tile may take: as many as fill GROUP_HEADS query heads. */
static int32_t attn_group_tokens(const kvt_engine *e) {
    const int32_t G = e->model->hp.n_head / e->model->hp.n_head_kv;
    return G >= GROUP_HEADS ? 1 : GROUP_HEADS / G;
}

/* The most query heads a tile takes: TILE_HEADS, whole tokens, at least one. */
static int32_t tile_heads_max(const kvt_engine *e) {
    const int32_t G = e->model->hp.n_head / e->model->hp.n_head_kv;
    return KVT_MAX(G, KVT_MAX(TILE_HEADS, attn_group_tokens(e) * G) / G * G);
}

/* The stride of a tile's score rows for keys [lo, n_max): a whole number of
 * 64-byte lines. */
static int64_t score_ld(int32_t lo, int32_t n_max) { return (n_max - lo + 15) / 16 * 16; }

/* V blocks of the value pass, in pages. */
static int32_t av_block_pages(const kvt_engine *e) { return KVT_MAX(1, AV_BLOCK_KEYS / e->p.block_size); }

/* Page p's block of (layer, K or V, kv head gk). */
static const uint8_t *kv_block(const kvt_engine *e, const seq_state *st, int32_t layer, int kv, int32_t gk, int32_t p) {
    return (const uint8_t *)kvt_page_data_const(e, st->pages[p]) + kvt_eng_kv_offset(e, layer, kv, gk, 0);
}

static size_t round_up_floats(size_t n) {
    return (n + SCRATCH_ALIGN_FLOATS - 1) / SCRATCH_ALIGN_FLOATS * SCRATCH_ALIGN_FLOATS;
}

/* A decode row's regions in a thread's attention scratch (offsets in floats,
 * each on a 64-byte boundary; attn_decode.h): what one (row, KV head) item
 * keeps between the parts of a split decode (score rows of stride n_ctx,
 * lane sums, page pointers), then what one thread works in (q rounded to
 * f16, runs). Returns the floats needed. */
typedef struct {
    size_t scores, acc, pages, qh, runs;
} dec_layout;

static size_t decode_layout(const kvt_engine *e, dec_layout *l) {
    const kvt_hparams *hp = &e->model->hp;
    const size_t G = (size_t)(hp->n_head / hp->n_head_kv), hd = (size_t)hp->head_dim, B = (size_t)e->p.block_size;
    const size_t ctx = (size_t)e->p.n_ctx;
    const size_t chunk = (size_t)kvt_attn_dec_chunk_pages(e->p.kv_dtype, (int32_t)B, (int32_t)hd);
    l->scores = 0;
    l->acc = round_up_floats(G * ctx);
    l->pages = l->acc + round_up_floats(G * KVT_ATTN_LANES * hd);
    l->qh = l->pages + round_up_floats((ctx / B + 2) * sizeof(const uint8_t *) / sizeof(float));
    l->runs = l->qh + round_up_floats(G * hd);
    return l->runs + round_up_floats(chunk * sizeof(kvt_attn_run) / sizeof(float));
}

/* Lays out one thread's attention scratch (attn_tokens), each region sized for
 * its largest use and starting on a 64-byte boundary; H = a tile's query heads
 * (at most tile_heads_max), ld = its score rows' stride (score_ld):
 *   scores (H, ld) f32          softmax weights of the tile's query heads: at
 *                               most TILE_SCORE_BYTES, or the smallest tile's
 *                               rows at n_ctx keys where that is more
 *   qh     (H, head_dim) f32    the tile's q rows side by side (rounded to f16 for f16 KV)
 *   kdq    (head_dim, B) f32    one page's K dequantized, transposed (q8_0 KV)
 *   vdq    (block, head_dim) f32   one V block of the value pass dequantized (q8_0 KV)
 *   tmp    (H, head_dim) u16        f16 staging for the q rows (f16 KV)
 *   acc    (H, 16, head_dim) f32  the value pass's lane sums between blocks (attn.h)
 *   runs   (pages per sequence) kvt_attn_run   the value pass's runs of keys */
void kvt_eng_attn_scratch_layout(kvt_engine *e) {
    const kvt_hparams *hp = &e->model->hp;
    const size_t G = (size_t)(hp->n_head / hp->n_head_kv), hd = (size_t)hp->head_dim, B = (size_t)e->p.block_size;
    const size_t ctx = (size_t)e->p.n_ctx, H = (size_t)tile_heads_max(e), H0 = (size_t)attn_group_tokens(e) * G;
    const size_t ld = (size_t)score_ld(0, e->p.n_ctx), vblock = (size_t)av_block_pages(e) * B;
    const int f16 = e->p.kv_dtype == KVT_KV_F16, q8 = e->p.kv_dtype == KVT_KV_Q8_0;
    size_t tmp_u16 = H * hd;
    e->sc_qh = round_up_floats(KVT_MAX(H0 * ld, KVT_MIN(TILE_SCORE_BYTES / sizeof(float), H * ld)));
    e->sc_kdq = e->sc_qh + round_up_floats(H * hd);
    e->sc_vdq = e->sc_kdq + round_up_floats(q8 || f16 ? hd * B : 0);
    e->sc_tmp = e->sc_vdq + round_up_floats(q8 || f16 ? vblock * hd : 0);
    e->sc_acc = e->sc_tmp + round_up_floats(f16 ? (tmp_u16 + 1) / 2 : 0);
    e->sc_runs = e->sc_acc + round_up_floats(H * KVT_ATTN_LANES * hd);
    e->scratch_stride = e->sc_runs + round_up_floats((ctx / B + 2) * sizeof(kvt_attn_run) / sizeof(float));
    dec_layout lay;
    e->scratch_stride = KVT_MAX(e->scratch_stride, decode_layout(e, &lay));
}

/* Where chunk row i's G query heads of KV head gk start in e->q and e->att. */
static size_t heads_at(const kvt_engine *e, int32_t i, int32_t gk) {
    const kvt_hparams *hp = &e->model->hp;
    return (size_t)i * (size_t)e->q_dim + (size_t)gk * (size_t)(hp->n_head / hp->n_head_kv) * (size_t)hp->head_dim;
}

/* Row 0 of page p's V rows for (layer, kv head gk) as the value kernel reads
 * them: f16/f32 in the page itself; q8_0 rows [0, n) dequantized into dq
 * (elementwise, so the values depend only on the stored bytes). */
static const void *v_rows(const kvt_engine *e, const seq_state *st, int32_t layer, int32_t gk, int32_t p, int32_t n,
                          int widen, float *dq) {
    const uint8_t *pg = (const uint8_t *)kvt_page_data_const(e, st->pages[p]) + kvt_eng_kv_offset(e, layer, 1, gk, 0);
    if (e->p.kv_dtype == KVT_KV_Q8_0) kvt_kv_q8_dequant_rows(pg, n, e->model->hp.head_dim, dq);
    else if (widen) kvt_f16_to_f32_row((const uint16_t *)(const void *)pg, dq, (int64_t)n * e->model->hp.head_dim);
    else return pg;
    return dq;
}

/* The value pass's runs over keys [k0, k1) of the V block whose pages start
 * at key b0 (rows of page i at vb[i]), with the weight of key k at w[k - lo]
 * (head g's at w + g * ld). */
static int32_t block_runs(const kvt_engine *e, const void *const *vb, int32_t b0, int32_t k0, int32_t k1, int32_t lo,
                          int f16, const float *w, kvt_attn_run *runs) {
    const int32_t B = e->p.block_size;
    const size_t row = (size_t)e->model->hp.head_dim * (f16 ? sizeof(uint16_t) : sizeof(float));
    int32_t nr = 0;
    for (int32_t t0 = k0 / B * B; t0 < k1; t0 += B) {
        const int32_t a = KVT_MAX(k0, t0) - t0, T = KVT_MIN(B, k1 - t0) - a;
        runs[nr++] = (kvt_attn_run){(const uint8_t *)vb[(t0 - b0) / B] + (size_t)a * row, w + (t0 + a - lo), T, t0 + a};
    }
    return nr;
}

/* The value pass of a tile's m tokens (rows i0 ..) over keys [lo, pos + 1)
 * each, weights in scores (stride ld), by V blocks of av_block_pages pages:
 * in each block, one call for every run of consecutive tokens that go on past
 * it (their lane sums carried in acc to the next block), then one call per
 * token that ends in it, which writes the token's output. */
static void value_pass(kvt_engine *e, const seq_state *st, int32_t layer, int32_t gk, int32_t i0, int32_t m, int32_t lo,
                       int64_t ld, const float *scores, float *scratch) {
    const kvt_hparams *hp = &e->model->hp;
    const int32_t hd = hp->head_dim, G = hp->n_head / hp->n_head_kv, B = e->p.block_size, bp = av_block_pages(e);
    /* f16 V rows widened once for every token of the tile, or read as they are */
    const int widen = e->p.kv_dtype == KVT_KV_F16 && m * G > WIDEN_HEADS, f16 = e->p.kv_dtype == KVT_KV_F16 && !widen;
    const size_t hacc = (size_t)KVT_ATTN_LANES * (size_t)hd; /* one head's lane sums */
    float *acc = scratch + e->sc_acc, *vdq = scratch + e->sc_vdq;
    kvt_attn_run *runs = (kvt_attn_run *)(void *)(scratch + e->sc_runs);
    const void *vb[AV_BLOCK_KEYS];
    int32_t n_max = 0;
    for (int32_t t = 0; t < m; t++) n_max = KVT_MAX(n_max, e->pos[i0 + t] + 1);
    for (int32_t b0 = lo / B * B; b0 < n_max; b0 += bp * B) {
        const int32_t b1 = KVT_MIN(b0 + bp * B, n_max), k0 = KVT_MAX(lo, b0), first = b0 <= lo;
        for (int32_t p = 0; b0 + p * B < b1; p++) {
            if (b0 + (p + PREFETCH_PAGES) * B < n_max)
                kvt_attn_prefetch_bytes(kv_block(e, st, layer, 1, gk, b0 / B + p + PREFETCH_PAGES),
                                        (size_t)B * e->row_bytes);
            vb[p] = v_rows(e, st, layer, gk, b0 / B + p, KVT_MIN(B, b1 - b0 - p * B), widen, vdq + (size_t)p * B * hd);
        }
        for (int32_t t = 0; t < m;) { /* tokens that go on past the block */
            int32_t u = t;
            while (u < m && e->pos[i0 + u] + 1 > b1) u++;
            if (u == t) {
                t++;
                continue;
            }
            const size_t h0 = (size_t)t * (size_t)G;
            const int32_t nr = block_runs(e, vb, b0, k0, b1, lo, f16, scores + h0 * (size_t)ld, runs);
            kvt_attn_av(runs, nr, ld, (u - t) * G, f16, hd, first ? NULL : acc + h0 * hacc, acc + h0 * hacc, NULL);
            t = u;
        }
        for (int32_t t = 0; t < m; t++) { /* tokens that end in it */
            const int32_t end = e->pos[i0 + t] + 1;
            if (end <= k0 || end > b1) continue;
            const size_t h0 = (size_t)t * (size_t)G;
            const int32_t nr = block_runs(e, vb, b0, k0, end, lo, f16, scores + h0 * (size_t)ld, runs);
            kvt_attn_av(runs, nr, ld, G, f16, hd, first ? NULL : acc + h0 * hacc, NULL,
                        e->att + heads_at(e, i0 + t, gk));
        }
    }
}

/* Attention of chunk rows i0 .. i0 + m - 1 (one tile, see the top) for the G
 * query heads of each that share KV head gk. */
static void attn_tokens(kvt_engine *e, int32_t layer, int32_t i0, int32_t m, int32_t gk, float *scratch) {
    const kvt_hparams *hp = &e->model->hp;
    const int32_t hd = hp->head_dim, B = e->p.block_size, G = hp->n_head / hp->n_head_kv, H = m * G;
    const kvt_layer *L = &e->model->layers[layer];
    int32_t n_max = e->pos[i0] + 1;
    for (int32_t t = 1; t < m; t++) n_max = KVT_MAX(n_max, e->pos[i0 + t] + 1);
    /* a sliding layer sees keys [lo, pos] (tiles of several tokens have lo = 0).
     * Scores are indexed from lo, never from a page boundary, so the softmax
     * and the value sums run over the same elements in the same order
     * whatever the block size. */
    const int32_t pos = e->pos[i0];
    const int32_t lo = L->window && pos >= L->window ? pos - L->window + 1 : 0;
    const int64_t ld = score_ld(lo, n_max);
    const seq_state *st = &e->seqs[e->tseq[i0]];
    float *scores = scratch;                                              /* (H, ld) */
    float *qh = scratch + e->sc_qh;                                       /* (H, hd) */
    float *kdq = scratch + e->sc_kdq;                                     /* (hd, B), q8_0 KV */
    uint16_t *tmp = (uint16_t *)(void *)(scratch + e->sc_tmp);            /* (H, hd), f16 KV */
    const float scale = hp->q_scale > 0 ? 1.0f : 1.0f / sqrtf((float)hd); /* q_scale: q is scaled already */
    const int f16 = e->p.kv_dtype == KVT_KV_F16, q8 = e->p.kv_dtype == KVT_KV_Q8_0;
    const size_t qrow = (size_t)G * (size_t)hd; /* one token's heads of gk */

    const float *q = e->q + heads_at(e, i0, gk);
    if (m > 1 || (f16 && ATTN_ROUND_TO_KV_DTYPE)) {
        for (int32_t t = 0; t < m; t++) memcpy(qh + t * qrow, e->q + heads_at(e, i0 + t, gk), qrow * sizeof(float));
        if (f16 && ATTN_ROUND_TO_KV_DTYPE) { /* as llama.cpp: q meets an f16 cache in f16 */
            kvt_f32_to_f16_row(qh, tmp, (int64_t)H * hd);
            kvt_f16_to_f32_row(tmp, qh, (int64_t)H * hd);
        }
        q = qh;
    }
    /* q8_0 pages are read as f32: each page's K is dequantized into the
     * transposed f32 layout the kernel takes */
    const size_t esz = f16 ? sizeof(uint16_t) : sizeof(float); /* f16/f32 element */
    for (int32_t t0 = lo / B * B; t0 < n_max; t0 += B) {
        const uint8_t *pg = (const uint8_t *)kvt_page_data_const(e, st->pages[t0 / B]) +
            kvt_eng_kv_offset(e, layer, 0, gk, 0);
        if (t0 + PREFETCH_PAGES * B < n_max)
            kvt_attn_prefetch_bytes(kv_block(e, st, layer, 0, gk, t0 / B + PREFETCH_PAGES), (size_t)B * e->row_bytes);
        const int32_t a = KVT_MAX(lo, t0) - t0, T = KVT_MIN(B, n_max - t0) - a; /* keys t0+a .. t0+a+T-1 */
        int32_t s = 0; /* leading tokens whose keys all come before this page */
        while (e->pos[i0 + s] < t0 + a) s++;
        float *sc = scores + (size_t)s * (size_t)G * (size_t)ld + (t0 + a - lo);
        const float *qs = q + (size_t)s * qrow;
        if (q8) {
            kvt_kv_q8_dequant_columns(pg, B, a + T, hd, kdq);
            kvt_attn_qk(qs, H - s * G, hd, kdq + a, B, 0, T, scale, sc, ld);
        } else if (f16 && H - s * G > WIDEN_HEADS) { /* the page's K widened once for all the tile's heads */
            kvt_f16_to_f32_row((const uint16_t *)(const void *)pg, kdq, (int64_t)hd * B);
            kvt_attn_qk(qs, H - s * G, hd, kdq + a, B, 0, T, scale, sc, ld);
        } else {
            kvt_attn_qk(qs, H - s * G, hd, pg + (size_t)a * esz, B, f16, T, scale, sc, ld);
        }
    }
    for (int32_t r = 0; r < H; r++) {
        float *sg = scores + (size_t)r * (size_t)ld;
        const int32_t n_att = e->pos[i0 + r / G] + 1 - lo;
        if (hp->attn_softcap > 0) kvt_softcap(sg, n_att, hp->attn_softcap);
        if (f16 && ATTN_ROUND_TO_KV_DTYPE) kvt_softmax_at_f16(sg, n_att, lo); /* and so do the softmax weights */
        else kvt_softmax_at(sg, n_att, lo);
    }
    value_pass(e, st, layer, gk, i0, m, lo, ld, scores, scratch);
}

typedef struct {
    kvt_engine *e;
    int32_t layer, n_groups;
} attn_job;

static void attn_worker(void *ctx, int ith, int nth) {
    attn_job *job = ctx;
    kvt_engine *e = job->e;
    const int32_t n_kv = e->model->hp.n_head_kv;
    float *scratch = e->scratch + (size_t)ith * e->scratch_stride;
    const int64_t items = (int64_t)job->n_groups * n_kv;
    for (int64_t w = ith; w < items; w += nth) {
        const int32_t g = (int32_t)(w / n_kv), i0 = e->agroup[g];
        attn_tokens(e, job->layer, i0, e->agroup[g + 1] - i0, (int32_t)(w % n_kv), scratch);
    }
}

/* ---- decode: one query row per sequence (attn_decode.h) ---- */

/* Decode job: the rows of a chunk, each its own group, as (row, KV head)
 * items. Split: fewer items than threads, so every item is cut into parts
 * (scores by pages, the value pass by lane classes) run in three phases, and
 * item `it` keeps what its parts share in thread `it`'s scratch. */
typedef struct {
    kvt_engine *e;
    int32_t layer, items, phase, parts;
} dec_job;

static float *thread_scratch(const kvt_engine *e, int ith) { return e->scratch + (size_t)ith * e->scratch_stride; }

/* Item `it`'s attention, its pages' pointers at `pages` (filled for [p0, p1)),
 * and buffers: the item's score rows and lane sums in `own`, the working
 * staging in `work` (thread scratch, laid out by decode_layout). */
static void dec_item(const kvt_engine *e, int32_t layer, int32_t it, int32_t p0, int32_t p1, float *own, float *work,
                     kvt_attn_dec *a, kvt_attn_dec_buf *buf) {
    const kvt_hparams *hp = &e->model->hp;
    const int32_t n_kv = hp->n_head_kv, i = it / n_kv, gk = it % n_kv, pos = e->pos[i];
    const int32_t window = e->model->layers[layer].window;
    dec_layout lay;
    decode_layout(e, &lay);
    const uint8_t **pages = (const uint8_t **)(void *)(own + lay.pages);
    const size_t koff = kvt_eng_kv_offset(e, layer, 0, gk, 0);
    const seq_state *st = &e->seqs[e->tseq[i]];
    for (int32_t p = p0; p < p1; p++) pages[p] = (const uint8_t *)kvt_page_data_const(e, st->pages[p]) + koff;
    *a = (kvt_attn_dec){.pages = pages,
                        .v_delta = (ptrdiff_t)(kvt_eng_kv_offset(e, layer, 1, gk, 0) - koff),
                        .dtype = e->p.kv_dtype,
                        .B = e->p.block_size,
                        .hd = hp->head_dim,
                        .G = hp->n_head / n_kv,
                        .lo = window && pos >= window ? pos - window + 1 : 0,
                        .n_keys = pos + 1,
                        .scale = hp->q_scale > 0 ? 1.0f : 1.0f / sqrtf((float)hp->head_dim),
                        .softcap = hp->attn_softcap,
                        .round_f16 = e->p.kv_dtype == KVT_KV_F16 && ATTN_ROUND_TO_KV_DTYPE};
    *buf = (kvt_attn_dec_buf){own + lay.scores, e->p.n_ctx, own + lay.acc, (kvt_attn_run *)(void *)(work + lay.runs)};
}

/* Item `it`'s q rows: as they are, or, as llama.cpp, rounded to f16 (into
 * work's qh) when they meet an f16 cache. */
static const float *dec_q(const kvt_engine *e, const kvt_attn_dec *a, int32_t it, float *work) {
    const int32_t n_kv = e->model->hp.n_head_kv;
    const float *q = e->q + heads_at(e, it / n_kv, it % n_kv);
    if (!a->round_f16) return q;
    dec_layout lay;
    decode_layout(e, &lay);
    float *qh = work + lay.qh;
    uint16_t h[256];
    for (int32_t i = 0, nq = a->G * a->hd; i < nq; i += 256) {
        const int32_t c = KVT_MIN(256, nq - i);
        kvt_f32_to_f16_row(q + i, h, c);
        kvt_f16_to_f32_row(h, qh + i, c);
    }
    return qh;
}

/* Where item `it`'s output rows go in e->att. */
static float *dec_out(const kvt_engine *e, int32_t it) {
    const int32_t n_kv = e->model->hp.n_head_kv;
    return e->att + heads_at(e, it / n_kv, it % n_kv);
}

static void decode_worker(void *ctx, int ith, int nth) {
    dec_job *job = ctx;
    kvt_engine *e = job->e;
    float *work = thread_scratch(e, ith);
    const int32_t G = e->model->hp.n_head / e->model->hp.n_head_kv, B = e->p.block_size, P = job->parts;
    kvt_attn_dec a;
    kvt_attn_dec_buf buf;
    if (!P) { /* whole items, one thread each */
        for (int32_t it = ith; it < job->items; it += nth) {
            dec_item(e, job->layer, it, 0, (e->pos[it / e->model->hp.n_head_kv] + B) / B, work, work, &a, &buf);
            kvt_attn_decode(&a, dec_q(e, &a, it, work), dec_out(e, it), &buf);
        }
        return;
    }
    const int32_t count = job->items * (job->phase == 1 ? G : P);
    for (int32_t s = ith; s < count; s += nth) {
        const int32_t it = job->phase == 1 ? s / G : s / P, part = job->phase == 1 ? s % G : s % P;
        dec_item(e, job->layer, it, 0, 0, thread_scratch(e, it), work, &a, &buf);
        if (job->phase == 0) { /* scores of this part's pages */
            const int32_t pf = kvt_attn_dec_first_page(&a), np = kvt_attn_dec_end_page(&a) - pf;
            const int32_t p0 = pf + (int32_t)((int64_t)np * part / P), p1 = pf + (int32_t)((int64_t)np * (part + 1) / P);
            dec_item(e, job->layer, it, p0, p1, thread_scratch(e, it), work, &a, &buf);
            kvt_attn_dec_scores(&a, dec_q(e, &a, it, work), p0, p1, &buf);
        } else if (job->phase == 1) { /* softmax of one head's row */
            kvt_attn_dec_softmax(&a, buf.scores + (size_t)part * (size_t)buf.ld);
        } else { /* the value pass of this part's lane classes */
            const int32_t Q = KVT_MIN(P, KVT_ATTN_LANES);
            if (part < Q) kvt_attn_dec_values(&a, KVT_ATTN_LANES * part / Q, KVT_ATTN_LANES * (part + 1) / Q, &buf);
        }
    }
}

/* Decode attention of chunk rows 0 .. n-1 (each its own sequence's row). */
static void attention_decode(kvt_engine *e, int32_t l, int32_t n) {
    const int32_t nth = kvt_pool_threads(e->pool), items = n * e->model->hp.n_head_kv;
    dec_job job = {e, l, items, 0, 0};
    if (items >= nth) {
        kvt_pool_run(e->pool, decode_worker, &job);
        return;
    }
    job.parts = nth;
    for (job.phase = 0; job.phase < 3; job.phase++) kvt_pool_run(e->pool, decode_worker, &job);
    for (int32_t it = 0; it < items; it++) {
        kvt_attn_dec a;
        kvt_attn_dec_buf buf;
        dec_item(e, l, it, 0, 0, thread_scratch(e, it), thread_scratch(e, 0), &a, &buf);
        kvt_attn_dec_finish(&a, buf.acc, dec_out(e, it));
    }
}

/* Whether every row of the chunk is a sequence's only row in it (decode
 * steps): such rows take the decode path, which gives them the same bits. */
static int decode_rows(const kvt_engine *e, int32_t n) {
    for (int32_t i = 1; i < n; i++)
        if (e->tseq[i] == e->tseq[i - 1]) return 0;
    return n > 0;
}

void kvt_eng_attention(kvt_engine *e, int32_t l, int32_t n) {
    if (decode_rows(e, n)) {
        attention_decode(e, l, n);
        return;
    }
    /* a tile takes tokens while their score rows fit the scratch (sc_qh
     * floats, score_ld keys each), and no more than leave the chunk two
     * (tile, KV head) items per thread, so that every thread has work */
    const int32_t G = e->model->hp.n_head / e->model->hp.n_head_kv, n_kv = e->model->hp.n_head_kv;
    const int32_t per_thread = (int32_t)((int64_t)n * n_kv / (2 * kvt_pool_threads(e->pool)));
    const int32_t mmax = KVT_MAX(attn_group_tokens(e), KVT_MIN(tile_heads_max(e) / G, per_thread));
    const int32_t window = e->model->layers[l].window;
    int32_t ng = 0, n_max = 0;
    for (int32_t i = 0; i < n; i++) {
        const int32_t start = ng ? e->agroup[ng - 1] : 0, keys = KVT_MAX(n_max, e->pos[i] + 1);
        const int joins = ng && i - start < mmax && e->tseq[i] == e->tseq[start] &&
            (size_t)(i - start + 1) * (size_t)G * (size_t)score_ld(0, keys) <= e->sc_qh &&
            (!window || (e->pos[i] < window && e->pos[start] < window));
        if (!joins) e->agroup[ng++] = i;
        n_max = joins ? keys : e->pos[i] + 1;
    }
    e->agroup[ng] = n;
    attn_job job = {e, l, ng};
    kvt_pool_run(e->pool, attn_worker, &job);
}
