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

#include "gpu_att_test.h"
#include "ops.h"

/* f32 pages: scores from 256-term f32 dots and the device's exp (a few ulp). */
#define ATT_TOL 2e-5
/* f16 pages: each softmax weight rounded to f16 before V (2^-12 relative, more
 * for weights below 2^-14, f16 subnormals) while the sum takes them unrounded;
 * seeds tried stay under 4e-4. */
#define ATT_TOL_F16 1e-3

static double max_att_err[2];
static uint64_t n_f16_values;

/* A random pool of f16 or f32 pages, NaN bytes throughout. */
static void pool_make(kvt_gpu_dev *d, att_pool *p, int f16, uint32_t n_head_kv, uint32_t hd, uint32_t block,
                      uint32_t n_pages) {
    memset(p, 0, sizeof *p);
    uint64_t esize = f16 ? 2 : 4;
    p->kv = (kvt_gpu_kv){.n_layer = 2,
                         .n_head_kv = n_head_kv,
                         .head_dim = hd,
                         .block = block,
                         .dtype = f16 ? KVT_GPU_KV_F16 : KVT_GPU_KV_F32};
    p->kv.page_stride = 2ull * 2 * n_head_kv * block * hd * esize + 4 * fwd_pick(0, 2);
    att_pool_chunks(d, p, n_pages, 0xff); /* NaN in f16 and f32 */
}

/* The address in the image of element d of slot s of (layer, kv, g) in page pg. */
static unsigned char *pool_at(att_pool *p, uint32_t pg, uint32_t layer, int kv, uint32_t g, uint32_t s, uint32_t d) {
    const kvt_gpu_kv *k = &p->kv;
    uint64_t blk = ((uint64_t)(layer * 2 + (uint32_t)kv) * k->n_head_kv + g) * k->block * k->head_dim;
    uint64_t el = blk + (kv == 0 ? (uint64_t)d * k->block + s : (uint64_t)s * k->head_dim + d);
    return p->img[pg / k->pages_per_chunk] + (pg % k->pages_per_chunk) * k->page_stride +
        el * (k->dtype == KVT_GPU_KV_F16 ? 2 : 4);
}

/* Stores f into the image as the page's type and returns the value stored. */
static float pool_put(att_pool *p, unsigned char *at, float f) {
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
    att_pool p;
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
    if (bk && bv && bm && !att_pool_upload(d, &p) && !kvt_gpu_begin(d) &&
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
    att_pool_free(&p);
}

/* Sequences of random K/V in shuffled pages, then the batch's tokens and their table. */
static void att_make(kvt_gpu_dev *d, att_case *a, int f16, uint32_t nkv, uint32_t group, uint32_t hd, uint32_t block,
                     uint32_t max_ctx, uint32_t n_tok) {
    pool_make(d, &a->p, f16, nkv, hd, block, att_case_begin(a, nkv, group, hd, block, max_ctx, n_tok));
    att_case_tables(a);
    for (uint32_t s = 0; s < a->n_seq; s++)
        for (uint32_t j = 0; j < a->len[s]; j++)
            for (uint32_t g = 0; g < nkv; g++) {
                float *kr = att_row(a, 0, s, j, g), *vr = att_row(a, 1, s, j, g);
                for (uint32_t dd = 0; dd < hd; dd++) {
                    uint32_t pg = att_page(a, s, j);
                    kr[dd] = pool_put(&a->p, pool_at(&a->p, pg, a->layer, 0, g, j % block, dd), fwd_unit());
                    vr[dd] = pool_put(&a->p, pool_at(&a->p, pg, a->layer, 1, g, j % block, dd), fwd_unit());
                }
            }
    att_case_tokens(a);
}

/* One random case: the batch against the reference, then two tokens alone against their rows. */
static void check_attention(kvt_gpu_dev *d, kvt_gpu_kernels *k, int f16, uint32_t nkv, uint32_t group, uint32_t hd,
                            uint32_t block, uint32_t max_ctx, uint32_t n_tok) {
    att_case a;
    att_make(d, &a, f16, nkv, group, hd, block, max_ctx, n_tok);
    char what[160];
    snprintf(what, sizeof what,
             "attention %s: %u heads (%u kv) x %u, block %u, %u pages in %d chunks, context <= %u, "
             "%u tokens",
             f16 ? "f16" : "f32", a.n_head, nkv, hd, block, a.p.n_pages, a.p.kv.n_chunks, max_ctx, n_tok);
    att_check(d, k, &a, what, f16, f16 ? ATT_TOL_F16 : ATT_TOL, &max_att_err[f16]);
    att_case_free(&a);
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
