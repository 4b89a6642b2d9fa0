// SPDX-License-Identifier: MIT
/* The GPU KV store and attention against plain C, on Vulkan device 0
 * (lavapipe here), over a sampled sweep (the seed is printed; $KVT_GPU_SEED
 * replays one) of f16 and f32 pages, head dims 32..256, odd head counts and
 * GQA, blocks of 16, 32 and 64, contexts 1..2048 in shuffled pages over 1..4
 * chunks, batches 1..64:
 *  - kv_store writes each token's K and V into the documented page layout:
 *    the pool read back equals, byte for byte, the CPU's image of it, f16
 *    values being kvt_f32_to_f16's bits (random bit patterns with NaNs, infs,
 *    ties, f16 subnormals and overflow edges), and nothing else changes;
 *  - attention is within ATT_TOL (f32 pages) or ATT_TOL_F16 (f16 pages; the
 *    weights are rounded to f16 before V) of a double reference over the same
 *    pages, relative to sum p |v|, and reads nothing but keys 0..pos of the
 *    token's table (everything else in the pool is NaN);
 *  - a token alone gets the bits it gets in its batch.
 * No validation message may appear. Skips (77) without a device. */
#include <math.h>
#include <string.h>

#include "gpu_fwd_test.h"
#include "ops.h"

/* f32 pages: scores from 256-term f32 dots and the device's exp (a few ulp). */
#define ATT_TOL 2e-5
/* f16 pages: each softmax weight rounded to f16 before V (2^-12 relative, more
 * for weights below 2^-14, f16 subnormals) while the sum takes them unrounded;
 * seeds tried stay under 4e-4. */
#define ATT_TOL_F16 1e-3

static double max_att_err[2];
static uint64_t n_f16_values;

/* A random pool: its shape, the chunks' host image (NaN bytes), and page numbers shuffled for the tables. */
typedef struct {
    kvt_gpu_kv kv;
    uint32_t n_pages;
    unsigned char *img[KVT_GPU_KV_CHUNKS];
    uint64_t img_bytes[KVT_GPU_KV_CHUNKS];
    uint32_t *perm;
} pool;

static void pool_make(kvt_gpu_dev *d, pool *p, int f16, uint32_t n_head_kv, uint32_t hd, uint32_t block,
                      uint32_t n_pages) {
    memset(p, 0, sizeof *p);
    uint64_t esize = f16 ? 2 : 4;
    p->kv = (kvt_gpu_kv){.n_layer = 2,
                         .n_head_kv = n_head_kv,
                         .head_dim = hd,
                         .block = block,
                         .dtype = f16 ? KVT_GPU_KV_F16 : KVT_GPU_KV_F32};
    p->kv.page_stride = 2ull * 2 * n_head_kv * block * hd * esize + 4 * fwd_pick(0, 2);
    p->kv.n_chunks = (int)KVT_MIN(fwd_pick(1, KVT_GPU_KV_CHUNKS), n_pages);
    p->kv.pages_per_chunk = (n_pages + (uint32_t)p->kv.n_chunks - 1) / (uint32_t)p->kv.n_chunks;
    p->kv.n_chunks = (int)((n_pages + p->kv.pages_per_chunk - 1) / p->kv.pages_per_chunk);
    p->n_pages = n_pages;
    for (int c = 0; c < p->kv.n_chunks; c++) {
        uint32_t pages = KVT_MIN(p->kv.pages_per_chunk, n_pages - (uint32_t)c * p->kv.pages_per_chunk);
        p->img_bytes[c] = pages * p->kv.page_stride;
        p->img[c] = malloc(p->img_bytes[c]);
        memset(p->img[c], 0xff, p->img_bytes[c]); /* NaN in f16 and f32 */
        p->kv.chunk[c] = fwd_buf(d, p->img_bytes[c], NULL);
    }
    p->perm = malloc(n_pages * sizeof *p->perm);
    for (uint32_t i = 0; i < n_pages; i++) p->perm[i] = i;
    for (uint32_t i = n_pages; i > 1; i--) {
        uint32_t j = fwd_next() % i, t = p->perm[i - 1];
        p->perm[i - 1] = p->perm[j], p->perm[j] = t;
    }
}

static void pool_free(pool *p) {
    for (int c = 0; c < p->kv.n_chunks; c++) {
        kvt_gpu_buf_free(p->kv.chunk[c]);
        free(p->img[c]);
    }
    free(p->perm);
}

static int pool_upload(kvt_gpu_dev *d, pool *p) {
    int rc = 0;
    for (int c = 0; c < p->kv.n_chunks && !rc; c++) {
        rc = p->kv.chunk[c] ? kvt_gpu_upload(d, p->kv.chunk[c], 0, p->img[c], p->img_bytes[c]) : -1;
        CHECKF(rc == 0, "%s", kvt_errmsg());
    }
    return rc;
}

/* The address in the image of element d of slot s of (layer, kv, g) in page pg. */
static unsigned char *pool_at(pool *p, uint32_t pg, uint32_t layer, int kv, uint32_t g, uint32_t s, uint32_t d) {
    const kvt_gpu_kv *k = &p->kv;
    uint64_t blk = ((uint64_t)(layer * 2 + (uint32_t)kv) * k->n_head_kv + g) * k->block * k->head_dim;
    uint64_t el = blk + (kv == 0 ? (uint64_t)d * k->block + s : (uint64_t)s * k->head_dim + d);
    return p->img[pg / k->pages_per_chunk] + (pg % k->pages_per_chunk) * k->page_stride +
        el * (k->dtype == KVT_GPU_KV_F16 ? 2 : 4);
}

/* Stores f into the image as the page's type and returns the value stored. */
static float pool_put(pool *p, unsigned char *at, float f) {
    if (p->kv.dtype != KVT_GPU_KV_F16) {
        memcpy(at, &f, 4);
        return f;
    }
    uint16_t h = kvt_f32_to_f16(f);
    memcpy(at, &h, 2);
    return kvt_f16_to_f32(h);
}

/* A value for the f16 conversion: any bit pattern, a tie between f16 values or next to one, an f16
 * subnormal, the overflow edge, or an ordinary number. */
static float conv_value(void) {
    uint32_t u = fwd_next(), kind = fwd_next() % 5;
    float f;
    if (kind == 0) memcpy(&f, &u, 4);
    if (kind == 1) { /* halfway between two f16 values, or an f32 ulp off it */
        float a = kvt_f16_to_f32((uint16_t)(u & 0x7bff)), b = kvt_f16_to_f32((uint16_t)((u & 0x7bff) + 1));
        f = (float)(((double)a + b) / 2);
        uint32_t fb;
        memcpy(&fb, &f, 4);
        fb += (uint32_t)((int)(fwd_next() % 3) - 1);
        memcpy(&f, &fb, 4);
        if (u & 0x80000000u) f = -f;
    }
    if (kind == 2) f = ldexpf(fwd_unit(), -14 - (int)fwd_pick(0, 12));
    if (kind == 3) f = (u & 1 ? -1 : 1) * (65504.0f + (float)fwd_pick(0, 40) * 0.8f);
    if (kind == 4) f = fwd_unit() * 8;
    return f;
}

/* Long: the stores of one random batch, then the pool read back against the image. */
static void check_kv_store(kvt_gpu_dev *d, kvt_gpu_kernels *k, int f16, uint32_t nkv, uint32_t hd, uint32_t n_tok) {
    pool p;
    uint32_t block = 16u << fwd_pick(0, 2), n_pages = fwd_pick((n_tok + block - 1) / block, 8), layer = fwd_pick(0, 1);
    pool_make(d, &p, f16, nkv, hd, block, n_pages);
    size_t row = (size_t)nkv * hd;
    float *kx = malloc(n_tok * row * 4), *vx = malloc(n_tok * row * 4);
    uint32_t *meta = calloc((size_t)n_tok * 4, 4), *slots = malloc((size_t)n_pages * block * 4);
    for (uint32_t i = 0; i < n_pages * block; i++) slots[i] = i;
    for (uint32_t t = 0; t < n_tok; t++) { /* distinct random (page, slot) pairs */
        uint32_t j = t + fwd_next() % (n_pages * block - t), s = slots[j];
        slots[j] = slots[t], slots[t] = s;
        meta[4 * t] = t, meta[4 * t + 1] = s / block, meta[4 * t + 2] = s % block;
        for (uint32_t g = 0; g < nkv; g++)
            for (uint32_t dd = 0; dd < hd; dd++) {
                float kv[2] = {conv_value(), conv_value()};
                kx[t * row + g * hd + dd] = kv[0], vx[t * row + g * hd + dd] = kv[1];
                for (int w = 0; w < 2; w++) pool_put(&p, pool_at(&p, s / block, layer, w, g, s % block, dd), kv[w]);
            }
    }
    unsigned char *want[KVT_GPU_KV_CHUNKS];
    for (int c = 0; c < p.kv.n_chunks; c++) { /* the device starts from NaNs; want is what it should end with */
        want[c] = p.img[c];
        p.img[c] = malloc(p.img_bytes[c]);
        memset(p.img[c], 0xff, p.img_bytes[c]);
    }
    kvt_gpu_buf *bk = fwd_buf(d, n_tok * row * 4, kx), *bv = fwd_buf(d, n_tok * row * 4, vx);
    kvt_gpu_buf *bm = fwd_buf(d, (uint64_t)n_tok * 16, meta);
    if (bk && bv && bm && !pool_upload(d, &p) && !kvt_gpu_begin(d) &&
        !fwd_submit(d, kvt_gpu_rec_kv_store(k, &p.kv, layer, bk, bv, bm, n_tok), "kv_store"))
        for (int c = 0; c < p.kv.n_chunks; c++)
            if (!fwd_get(d, p.kv.chunk[c], p.img[c], p.img_bytes[c]))
                CHECKF(memcmp(p.img[c], want[c], p.img_bytes[c]) == 0,
                       "kv_store %s: chunk %d of %d differs from "
                       "the CPU's image (%u tokens, %u kv heads x %u, block %u)",
                       p.kv.dtype == KVT_GPU_KV_F16 ? "f16" : "f32", c, p.kv.n_chunks, n_tok, nkv, hd, block);
    if (p.kv.dtype == KVT_GPU_KV_F16) n_f16_values += 2ull * n_tok * row;
    for (int c = 0; c < p.kv.n_chunks; c++) free(want[c]);
    kvt_gpu_buf_free(bk), kvt_gpu_buf_free(bv), kvt_gpu_buf_free(bm);
    free(kx), free(vx), free(meta), free(slots);
    pool_free(&p);
}

/* One attention case: the pool with its sequences written in, the batch's queries and token table. */
typedef struct {
    pool p;
    uint32_t layer, n_head, n_tok, n_seq, len[3], tab[3], max_ctx;
    float scale, *q, *kr, *vr; /* kr, vr: [seq][pos][g][d] as stored */
    uint32_t *meta, n_meta, *seq;
} att_case;

/* Long: sequences in shuffled pages with random K/V, then the batch's tokens and their table. */
static void att_make(kvt_gpu_dev *d, att_case *a, int f16, uint32_t nkv, uint32_t group, uint32_t hd, uint32_t block,
                     uint32_t max_ctx, uint32_t n_tok) {
    memset(a, 0, sizeof *a);
    a->n_seq = fwd_pick(1, 3), a->n_head = nkv * group, a->n_tok = n_tok, a->layer = fwd_pick(0, 1);
    a->scale = 1.0f / sqrtf((float)hd);
    a->max_ctx = max_ctx;
    uint32_t n_pages = 1;
    for (uint32_t s = 0; s < a->n_seq; s++) n_pages += (a->len[s] = fwd_pick(1, max_ctx)) / block + 1;
    pool_make(d, &a->p, f16, nkv, hd, block, n_pages);
    size_t per = (size_t)max_ctx * nkv * hd;
    a->kr = malloc(a->n_seq * per * 4), a->vr = malloc(a->n_seq * per * 4);
    a->n_meta = 4 * n_tok + n_pages;
    a->meta = calloc(a->n_meta, 4);
    a->seq = malloc(n_tok * 4);
    for (uint32_t s = 0, next = 0; s < a->n_seq; s++) {
        a->tab[s] = 4 * n_tok + next;
        for (uint32_t j = 0; j < a->len[s]; j++) {
            if (j % block == 0) a->meta[a->tab[s] + j / block] = a->p.perm[next++];
            uint32_t pg = a->meta[a->tab[s] + j / block];
            for (uint32_t g = 0; g < nkv; g++)
                for (uint32_t dd = 0; dd < hd; dd++) {
                    size_t i = s * per + ((size_t)j * nkv + g) * hd + dd;
                    a->kr[i] = pool_put(&a->p, pool_at(&a->p, pg, a->layer, 0, g, j % block, dd), fwd_unit());
                    a->vr[i] = pool_put(&a->p, pool_at(&a->p, pg, a->layer, 1, g, j % block, dd), fwd_unit());
                }
        }
    }
    a->q = malloc((size_t)n_tok * a->n_head * hd * 4);
    for (size_t i = 0; i < (size_t)n_tok * a->n_head * hd; i++) a->q[i] = fwd_unit() * 4;
    for (uint32_t t = 0; t < n_tok; t++) { /* the last positions (a prefill), or anywhere */
        uint32_t s = a->seq[t] = fwd_next() % a->n_seq, len = a->len[s];
        uint32_t pos = fwd_pick(0, 1) ? len - 1 - KVT_MIN(len - 1, n_tok - 1 - t) : fwd_next() % len;
        a->meta[4 * t] = pos, a->meta[4 * t + 1] = a->meta[a->tab[s] + pos / block];
        a->meta[4 * t + 2] = pos % block, a->meta[4 * t + 3] = a->tab[s];
    }
}

static void att_free(att_case *a) {
    pool_free(&a->p);
    free(a->q), free(a->kr), free(a->vr), free(a->meta), free(a->seq);
}

/* Runs attention for n_tok tokens of q (meta: their table) into out; 0 or a failed check. */
static int att_run(kvt_gpu_dev *d, kvt_gpu_kernels *k, att_case *a, const float *q, const uint32_t *meta,
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

/* Row g of position j of sequence s as the pages hold it (K, or V when v). */
static const float *kv_row(const att_case *a, int v, uint32_t s, uint32_t j, uint32_t g) {
    size_t per = (size_t)a->max_ctx * a->p.kv.n_head_kv * a->p.kv.head_dim;
    return (v ? a->vr : a->kr) + s * per + ((size_t)j * a->p.kv.n_head_kv + g) * a->p.kv.head_dim;
}

/* Long: the double reference of every (token, head), each output against its tolerance. */
static void att_compare(const att_case *a, const float *out, const char *what) {
    uint32_t hd = a->p.kv.head_dim, over = 0;
    int f16 = a->p.kv.dtype == KVT_GPU_KV_F16;
    double *p = malloc(a->max_ctx * sizeof *p), tol = f16 ? ATT_TOL_F16 : ATT_TOL;
    float *q = malloc(hd * sizeof *q);
    for (uint32_t t = 0; t < a->n_tok; t++)
        for (uint32_t h = 0; h < a->n_head; h++) {
            uint32_t g = h / (a->n_head / a->p.kv.n_head_kv), n = a->meta[4 * t] + 1, s = a->seq[t];
            for (uint32_t dd = 0; dd < hd; dd++) {
                float x = a->q[((size_t)t * a->n_head + h) * hd + dd];
                q[dd] = f16 ? kvt_f16_to_f32(kvt_f32_to_f16(x)) : x;
            }
            double m = -INFINITY, sum = 0;
            for (uint32_t j = 0; j < n; j++) {
                const float *kk = kv_row(a, 0, s, j, g);
                double dot = 0;
                for (uint32_t dd = 0; dd < hd; dd++) dot += (double)q[dd] * kk[dd];
                p[j] = dot * a->scale;
                m = p[j] > m ? p[j] : m;
            }
            for (uint32_t j = 0; j < n; j++) sum += (p[j] = exp(p[j] - m));
            for (uint32_t dd = 0; dd < hd; dd++) {
                double ref = 0, mag = 0;
                for (uint32_t j = 0; j < n; j++) {
                    double v = kv_row(a, 1, s, j, g)[dd];
                    ref += p[j] / sum * v, mag += p[j] / sum * fabs(v);
                }
                double e = fabs(out[((size_t)t * a->n_head + h) * hd + dd] - ref) / (mag > 1e-30 ? mag : 1e-30);
                max_att_err[f16] = e > max_att_err[f16] ? e : max_att_err[f16];
                over += !(e <= tol);
            }
        }
    CHECKF(over == 0, "%s: %u outputs off by more than %g", what, over, tol);
    free(p);
    free(q);
}

/* Long: one random case: the batch against the reference, then two tokens alone against their rows. */
static void check_attention(kvt_gpu_dev *d, kvt_gpu_kernels *k, int f16, uint32_t nkv, uint32_t group, uint32_t hd,
                            uint32_t block, uint32_t max_ctx, uint32_t n_tok) {
    att_case a;
    att_make(d, &a, f16, nkv, group, hd, block, max_ctx, n_tok);
    char what[160];
    snprintf(what, sizeof what,
             "attention %s: %u heads (%u kv) x %u, block %u, %u pages in %d chunks, context <= %u, "
             "%u tokens",
             f16 ? "f16" : "f32", a.n_head, nkv, hd, block, a.p.n_pages, a.p.kv.n_chunks, max_ctx, n_tok);
    size_t row = (size_t)a.n_head * hd;
    float *out = malloc(n_tok * row * 4), *out1 = malloc(row * 4);
    if (!pool_upload(d, &a.p) && !att_run(d, k, &a, a.q, a.meta, a.n_meta, n_tok, out)) {
        att_compare(&a, out, what);
        uint32_t toks[2] = {n_tok - 1, fwd_next() % n_tok};
        for (int i = 0; i < 2; i++) { /* alone: its row of the meta, then its sequence's table */
            uint32_t t = toks[i], s = a.seq[t], n_tab = a.p.n_pages;
            uint32_t *m1 = calloc(4 + n_tab, 4);
            memcpy(m1, a.meta + 4 * t, 16);
            m1[3] = 4;
            memcpy(m1 + 4, a.meta + a.tab[s], (a.n_meta - a.tab[s]) * 4);
            if (!att_run(d, k, &a, a.q + t * row, m1, 4 + n_tab, 1, out1))
                CHECKF(memcmp(out1, out + t * row, row * 4) == 0, "%s: token %u alone differs from its row", what, t);
            free(m1);
        }
    }
    free(out), free(out1);
    att_free(&a);
}

int main(void) {
    gpu_test_start();
    fwd_seed("gpu attention");
    kvt_gpu_dev *d = NULL;
    CHECKF(kvt_gpu_open(0, &d) == 0, "%s", kvt_errmsg());
    kvt_gpu_kernels *k = NULL;
    if (d) {
        printf("gpu attention: validation layer %s\n", kvt_gpu_validating(d) ? "on" : "off");
        CHECKF(kvt_gpu_kernels_new(d, &k) == 0, "%s", kvt_errmsg());
    }
    if (k) {
        for (int i = 0; i < 3; i++) check_kv_store(d, k, 1, 4, 256, 64); /* 128 Ki f16 conversions each */
        for (int i = 0; i < 8; i++)
            check_kv_store(d, k, (int)fwd_pick(0, 1), fwd_pick(1, 4), 2 * fwd_pick(16, 128), fwd_pick(1, 64));
        printf("gpu attention: kv_store matched kvt_f32_to_f16 on %llu f16 values\n", (unsigned long long)n_f16_values);
        /* {f16, kv heads, group, head_dim, block, context, tokens}: the edges, then a sample */
        static const uint32_t fixed[][7] = {{1, 1, 1, 32, 16, 1, 1},    {0, 2, 3, 64, 32, 200, 64},
                                            {1, 1, 7, 80, 64, 100, 9},  {1, 3, 1, 96, 16, 2048, 2},
                                            {0, 1, 5, 128, 64, 700, 5}, {1, 2, 2, 256, 32, 1500, 3}};
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
            const uint32_t *f = fixed[i];
            check_attention(d, k, (int)f[0], f[1], f[2], f[3], f[4], f[5], f[6]);
        }
        for (int i = 0; i < 10; i++) {
            uint32_t hd = 2 * fwd_pick(16, 128), nkv = fwd_pick(1, 3), group = fwd_pick(1, 3), ctx = fwd_pick(1, 2048);
            uint64_t cost = (uint64_t)ctx * hd * nkv * group; /* per token: keep each case's work bounded */
            uint32_t n_tok = (uint32_t)KVT_MAX(1, KVT_MIN(fwd_pick(1, 64), 20000000ull / cost));
            check_attention(d, k, (int)fwd_pick(0, 1), nkv, group, hd, 16u << fwd_pick(0, 2), ctx, n_tok);
        }
        printf("gpu attention: max error %.3g of sum p|v| with f32 pages (tolerance %g), %.3g with f16 pages "
               "(tolerance %g)\n",
               max_att_err[0], ATT_TOL, max_att_err[1], ATT_TOL_F16);
    }
    kvt_gpu_kernels_free(k);
    kvt_gpu_close(d);
    gpu_test_no_validation_messages(0);
    return kvt_test_done("test_gpu_attention");
}
