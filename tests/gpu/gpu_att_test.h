// SPDX-License-Identifier: MIT
/* Shared by the tests of the GPU KV store and attention (f16/f32 pages and
 * q8_0 pages): a random pool of pages over 1..4 chunks with its host image,
 * an attention case (sequences in shuffled pages, a batch of queries and its
 * token table), the double-precision reference and the check that a token
 * alone gets the bits it gets in its batch. */
#ifndef KVT_GPU_ATT_TEST_H
#define KVT_GPU_ATT_TEST_H

#include <math.h>
#include <string.h>

#include "gpu_fwd_test.h"
#include "ops.h"

/* A pool: its shape, the chunks' host image, and page numbers shuffled for the tables. */
typedef struct {
    kvt_gpu_kv kv;
    uint32_t n_pages, row; /* row: bytes of one token's row of head_dim values (q8_0) */
    unsigned char *img[KVT_GPU_KV_CHUNKS];
    uint64_t img_bytes[KVT_GPU_KV_CHUNKS];
    uint32_t *perm;
} att_pool;

/* Lays n_pages of p->kv (its shape and page_stride set) over 1..4 chunks:
 * host images filled with the byte fill, or random bytes when fill < 0, the
 * device buffers, and the page numbers shuffled. */
static inline void att_pool_chunks(kvt_gpu_dev *d, att_pool *p, uint32_t n_pages, int fill) {
    p->kv.n_chunks = (int)KVT_MIN(fwd_pick(1, KVT_GPU_KV_CHUNKS), n_pages);
    p->kv.pages_per_chunk = (n_pages + (uint32_t)p->kv.n_chunks - 1) / (uint32_t)p->kv.n_chunks;
    p->kv.n_chunks = (int)((n_pages + p->kv.pages_per_chunk - 1) / p->kv.pages_per_chunk);
    p->n_pages = n_pages;
    for (int c = 0; c < p->kv.n_chunks; c++) {
        uint32_t pages = KVT_MIN(p->kv.pages_per_chunk, n_pages - (uint32_t)c * p->kv.pages_per_chunk);
        p->img_bytes[c] = pages * p->kv.page_stride;
        p->img[c] = malloc(p->img_bytes[c]);
        if (fill >= 0) memset(p->img[c], fill, p->img_bytes[c]);
        for (uint64_t i = 0; fill < 0 && i < p->img_bytes[c]; i++) p->img[c][i] = (unsigned char)fwd_next();
        p->kv.chunk[c] = fwd_buf(d, p->img_bytes[c], NULL);
    }
    p->perm = malloc(n_pages * sizeof *p->perm);
    for (uint32_t i = 0; i < n_pages; i++) p->perm[i] = i;
    for (uint32_t i = n_pages; i > 1; i--) {
        uint32_t j = fwd_next() % i, t = p->perm[i - 1];
        p->perm[i - 1] = p->perm[j], p->perm[j] = t;
    }
}

static inline void att_pool_free(att_pool *p) {
    for (int c = 0; c < p->kv.n_chunks; c++) {
        kvt_gpu_buf_free(p->kv.chunk[c]);
        free(p->img[c]);
    }
    free(p->perm);
}

static inline int att_pool_upload(kvt_gpu_dev *d, att_pool *p) {
    int rc = 0;
    for (int c = 0; c < p->kv.n_chunks && !rc; c++) {
        rc = p->kv.chunk[c] ? kvt_gpu_upload(d, p->kv.chunk[c], 0, p->img[c], p->img_bytes[c]) : -1;
        CHECKF(rc == 0, "%s", kvt_errmsg());
    }
    return rc;
}

/* One attention case: the pool with its sequences written in, the batch's queries and token table. */
typedef struct {
    att_pool p;
    uint32_t layer, n_head, n_tok, n_seq, len[3], tab[3], max_ctx;
    float scale, *q, *kr, *vr; /* kr, vr: [seq][pos][g][d], the values the pages hold */
    uint32_t *meta, n_meta, *seq;
} att_case;

/* Picks 1..3 sequences of 1..max_ctx tokens; gives back the pages they need
 * (the caller makes a->p with that many, then calls att_case_tables). */
static inline uint32_t att_case_begin(att_case *a, uint32_t nkv, uint32_t group, uint32_t hd, uint32_t block,
                                      uint32_t max_ctx, uint32_t n_tok) {
    memset(a, 0, sizeof *a);
    a->n_seq = fwd_pick(1, 3), a->n_head = nkv * group, a->n_tok = n_tok, a->layer = fwd_pick(0, 1);
    a->scale = 1.0f / sqrtf((float)hd);
    a->max_ctx = max_ctx;
    uint32_t n_pages = 1;
    for (uint32_t s = 0; s < a->n_seq; s++) n_pages += (a->len[s] = fwd_pick(1, max_ctx)) / block + 1;
    return n_pages;
}

/* Each sequence's table of shuffled pages, and room for its values. */
static inline void att_case_tables(att_case *a) {
    uint32_t block = a->p.kv.block;
    size_t per = (size_t)a->max_ctx * a->p.kv.n_head_kv * a->p.kv.head_dim;
    a->kr = malloc(a->n_seq * per * 4), a->vr = malloc(a->n_seq * per * 4);
    a->n_meta = 4 * a->n_tok + a->p.n_pages;
    a->meta = calloc(a->n_meta, 4);
    a->seq = malloc(a->n_tok * 4);
    for (uint32_t s = 0, next = 0; s < a->n_seq; s++) {
        a->tab[s] = 4 * a->n_tok + next;
        for (uint32_t j = 0; j < a->len[s]; j += block) a->meta[a->tab[s] + j / block] = a->p.perm[next++];
    }
}

/* The page of position j of sequence s. */
static inline uint32_t att_page(const att_case *a, uint32_t s, uint32_t j) {
    return a->meta[a->tab[s] + j / a->p.kv.block];
}

/* Row g of position j of sequence s as the pages hold it (K, or V when v). */
static inline float *att_row(const att_case *a, int v, uint32_t s, uint32_t j, uint32_t g) {
    size_t per = (size_t)a->max_ctx * a->p.kv.n_head_kv * a->p.kv.head_dim;
    return (v ? a->vr : a->kr) + s * per + ((size_t)j * a->p.kv.n_head_kv + g) * a->p.kv.head_dim;
}

/* The batch's queries, and each token's place: the last positions of its sequence (a prefill), or anywhere. */
static inline void att_case_tokens(att_case *a) {
    uint32_t hd = a->p.kv.head_dim, block = a->p.kv.block, n_tok = a->n_tok;
    a->q = malloc((size_t)n_tok * a->n_head * hd * 4);
    for (size_t i = 0; i < (size_t)n_tok * a->n_head * hd; i++) a->q[i] = fwd_unit() * 4;
    for (uint32_t t = 0; t < n_tok; t++) {
        uint32_t s = a->seq[t] = fwd_next() % a->n_seq, len = a->len[s];
        uint32_t pos = fwd_pick(0, 1) ? len - 1 - KVT_MIN(len - 1, n_tok - 1 - t) : fwd_next() % len;
        a->meta[4 * t] = pos, a->meta[4 * t + 1] = a->meta[a->tab[s] + pos / block];
        a->meta[4 * t + 2] = pos % block, a->meta[4 * t + 3] = a->tab[s];
    }
}

static inline void att_case_free(att_case *a) {
    att_pool_free(&a->p);
    free(a->q), free(a->kr), free(a->vr), free(a->meta), free(a->seq);
}

/* Runs attention for n_tok tokens of q (meta: their table) into out; 0 or a failed check. */
static inline int att_run(kvt_gpu_dev *d, kvt_gpu_kernels *k, att_case *a, const float *q, const uint32_t *meta,
                          uint32_t n_meta, uint32_t n_tok, float *out) {
    uint64_t bytes = (uint64_t)n_tok * a->n_head * a->p.kv.head_dim * 4;
    kvt_gpu_buf *bq = fwd_buf(d, bytes, q), *bo = fwd_buf(d, bytes, NULL), *bm = fwd_buf(d, n_meta * 4ull, meta);
    int rc = -1;
    if (bq && bo && bm && !kvt_gpu_begin(d)) {
        rc = kvt_gpu_rec_attention(k, &a->p.kv, a->layer, bo, bq, bm, a->n_head, a->scale, n_tok);
        rc = fwd_submit(d, rc, "attention");
        if (!rc) rc = fwd_get(d, bo, out, bytes);
    }
    kvt_gpu_buf_free(bq), kvt_gpu_buf_free(bo), kvt_gpu_buf_free(bm);
    return rc;
}

/* Long: the double reference of every (token, head) over the values the pages
 * hold (the queries rounded to f16 first when q_f16), each output within tol
 * of it relative to sum p |v|; *max_err keeps the largest error. */
static inline void att_compare(const att_case *a, const float *out, const char *what, int q_f16, double tol,
                               double *max_err) {
    uint32_t hd = a->p.kv.head_dim, over = 0;
    double *p = malloc(a->max_ctx * sizeof *p);
    float *q = malloc(hd * sizeof *q);
    for (uint32_t t = 0; t < a->n_tok; t++)
        for (uint32_t h = 0; h < a->n_head; h++) {
            uint32_t g = h / (a->n_head / a->p.kv.n_head_kv), n = a->meta[4 * t] + 1, s = a->seq[t];
            for (uint32_t dd = 0; dd < hd; dd++) {
                float x = a->q[((size_t)t * a->n_head + h) * hd + dd];
                q[dd] = q_f16 ? kvt_f16_to_f32(kvt_f32_to_f16(x)) : x;
            }
            double m = -INFINITY, sum = 0;
            for (uint32_t j = 0; j < n; j++) {
                const float *kk = att_row(a, 0, s, j, g);
                double dot = 0;
                for (uint32_t dd = 0; dd < hd; dd++) dot += (double)q[dd] * kk[dd];
                p[j] = dot * a->scale;
                m = p[j] > m ? p[j] : m;
            }
            for (uint32_t j = 0; j < n; j++) sum += (p[j] = exp(p[j] - m));
            for (uint32_t dd = 0; dd < hd; dd++) {
                double ref = 0, mag = 0;
                for (uint32_t j = 0; j < n; j++) {
                    double v = att_row(a, 1, s, j, g)[dd];
                    ref += p[j] / sum * v, mag += p[j] / sum * fabs(v);
                }
                double e = fabs(out[((size_t)t * a->n_head + h) * hd + dd] - ref) / (mag > 1e-30 ? mag : 1e-30);
                *max_err = e > *max_err ? e : *max_err;
                over += !(e <= tol);
            }
        }
    CHECKF(over == 0, "%s: %u outputs off by more than %g", what, over, tol);
    free(p);
    free(q);
}

/* Long: the case's batch against the reference, then two tokens alone against their rows of the batch. */
static inline void att_check(kvt_gpu_dev *d, kvt_gpu_kernels *k, att_case *a, const char *what, int q_f16, double tol,
                             double *max_err) {
    size_t row = (size_t)a->n_head * a->p.kv.head_dim;
    float *out = malloc(a->n_tok * row * 4), *out1 = malloc(row * 4);
    if (!att_pool_upload(d, &a->p) && !att_run(d, k, a, a->q, a->meta, a->n_meta, a->n_tok, out)) {
        att_compare(a, out, what, q_f16, tol, max_err);
        uint32_t toks[2] = {a->n_tok - 1, fwd_next() % a->n_tok};
        for (int i = 0; i < 2; i++) { /* alone: its row of the meta, then its sequence's table */
            uint32_t t = toks[i], s = a->seq[t], n_tab = a->p.n_pages;
            uint32_t *m1 = calloc(4 + n_tab, 4);
            memcpy(m1, a->meta + 4 * t, 16);
            m1[3] = 4;
            memcpy(m1 + 4, a->meta + a->tab[s], (a->n_meta - a->tab[s]) * 4);
            if (!att_run(d, k, a, a->q + t * row, m1, 4 + n_tab, 1, out1))
                CHECKF(memcmp(out1, out + t * row, row * 4) == 0, "%s: token %u alone differs from its row", what, t);
            free(m1);
        }
    }
    free(out), free(out1);
}

#endif
