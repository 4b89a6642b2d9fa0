// SPDX-License-Identifier: MIT
/* q8_0 KV pages on Vulkan device 0 (lavapipe here) against the CPU's q8_0
 * codec (kv_quant.h), over a sampled sweep (the seed is printed;
 * $KVT_GPU_SEED replays one) of head dims 32..256, 1..4 kv heads, blocks of
 * 1..64 tokens (odd ones too, so that rows and columns straddle words), pools
 * over 1..4 chunks and batches 1..64:
 *  - kv_store quantizes each token's K and V rows into the bytes that
 *    kvt_kv_q8_quantize_row and kvt_kv_q8_put_column give, byte for byte, and
 *    changes nothing else in the pool; the rows mix ordinary values of any
 *    magnitude, exact ties (x * id = k + 1/2), zero groups, NaNs and infs;
 *  - attention over q8_0 pages is within ATT_TOL of a double reference over
 *    the values the CPU's dequantizers read from the same bytes, relative to
 *    sum p |v| (the largest error is printed), and a token alone gets the bits
 *    it gets in its batch.
 * No validation message may appear. Skips (77) without a device. */
#include <math.h>
#include <string.h>

#include "gpu_att_test.h"
#include "kv_quant.h"
#include "ops.h"

/* The GPU reads the CPU's values exactly (a scale times an int8); what is
 * left is f32 dots of up to 256 terms in another order and the device's exp,
 * as with f32 pages. */
#define ATT_TOL 2e-5

static double max_att_err;
static uint64_t n_groups, n_ties;

/* A pool of q8_0 pages full of random bytes. */
static void pool_make(kvt_gpu_dev *d, att_pool *p, uint32_t n_head_kv, uint32_t hd, uint32_t block, uint32_t n_pages) {
    memset(p, 0, sizeof *p);
    p->row = hd / KVT_KV_Q8_BLOCK * KVT_KV_Q8_BLOCK_BYTES;
    p->kv = (kvt_gpu_kv){.n_layer = 2, .n_head_kv = n_head_kv, .head_dim = hd, .block = block, .dtype = KVT_GPU_KV_Q8_0};
    p->kv.page_stride = (2ull * 2 * n_head_kv * block * p->row + 3) / 4 * 4 + 4 * fwd_pick(0, 2);
    att_pool_chunks(d, p, n_pages, -1);
}

/* The start in the image of the block of (layer, kv, g) in page pg, as the engine lays pages out. */
static unsigned char *block_at(att_pool *p, uint32_t pg, uint32_t layer, int kv, uint32_t g) {
    const kvt_gpu_kv *k = &p->kv;
    uint64_t blk = ((uint64_t)(layer * 2 + (uint32_t)kv) * k->n_head_kv + g) * k->block * p->row;
    return p->img[pg / k->pages_per_chunk] + (pg % k->pages_per_chunk) * k->page_stride + blk;
}

/* Quantizes token rows kr, vr (head_dim each) of kv head g into slot s of page pg, as the CPU engine stores them. */
static void put_token(att_pool *p, uint32_t pg, uint32_t layer, uint32_t g, uint32_t s, const float *kr,
                      const float *vr) {
    uint8_t q[KVT_KV_Q8_BLOCK_BYTES * 8];
    kvt_kv_q8_quantize_row(kr, (int32_t)p->kv.head_dim, q);
    kvt_kv_q8_put_column(q, (int32_t)p->kv.head_dim, (int32_t)p->kv.block, (int32_t)s, block_at(p, pg, layer, 0, g));
    kvt_kv_q8_quantize_row(vr, (int32_t)p->kv.head_dim, block_at(p, pg, layer, 1, g) + (size_t)s * p->row);
}

/* Fills a group of 32 values: ordinary ones at a random magnitude, exact ties
 * (amax 127 * 2^e, values (k + 1/2) 2^e), zeros, or some NaN and inf among
 * ordinary ones. Groups whose amax is under 2^-100 are not made (their
 * scales would be f32 subnormals, which a device may flush). */
static void fill_group(float *x) {
    uint32_t kind = fwd_next() % 6;
    int e = (int)fwd_pick(0, 60) - 30;
    for (int i = 0; i < KVT_KV_Q8_BLOCK; i++) x[i] = ldexpf(fwd_unit(), e);
    if (kind == 1) {
        for (int i = 0; i < KVT_KV_Q8_BLOCK; i++) x[i] = ldexpf((float)((int)fwd_pick(0, 253) - 127) + 0.5f, e);
        x[fwd_next() % KVT_KV_Q8_BLOCK] = ldexpf(fwd_next() & 1 ? 127.0f : -127.0f, e);
        n_ties++;
    }
    if (kind == 2)
        for (int i = 0; i < KVT_KV_Q8_BLOCK; i++) x[i] = fwd_next() & 1 ? 0.0f : -0.0f;
    if (kind == 3) x[fwd_next() % KVT_KV_Q8_BLOCK] = NAN;
    if (kind == 4) x[fwd_next() % KVT_KV_Q8_BLOCK] = fwd_next() & 1 ? INFINITY : -INFINITY;
    if (kind == 5) { /* values a hair off the rounding boundaries */
        for (int i = 0; i < KVT_KV_Q8_BLOCK; i++) x[i] = nextafterf(x[i], fwd_next() & 1 ? INFINITY : -INFINITY);
        x[0] = ldexpf(100.0f, e), x[1] = nextafterf(ldexpf(0.5f, e) * 100.0f / 127.0f, 0.0f);
    }
    n_groups++;
}

/* Long: the stores of one random batch, then the pool read back against the CPU's image. */
static void check_kv_store(kvt_gpu_dev *d, kvt_gpu_kernels *k, uint32_t nkv, uint32_t hd, uint32_t block,
                           uint32_t n_tok) {
    att_pool p;
    uint32_t n_pages = fwd_pick((n_tok + block - 1) / block, (n_tok + block - 1) / block + 4), layer = fwd_pick(0, 1);
    pool_make(d, &p, nkv, hd, block, n_pages);
    size_t row = (size_t)nkv * hd;
    float *kx = malloc(n_tok * row * 4), *vx = malloc(n_tok * row * 4);
    uint32_t *meta = calloc((size_t)n_tok * 4, 4), *slots = malloc((size_t)n_pages * block * 4);
    for (uint32_t i = 0; i < n_pages * block; i++) slots[i] = i;
    unsigned char *was[KVT_GPU_KV_CHUNKS];
    for (int c = 0; c < p.kv.n_chunks; c++) { /* the device starts from the random image; p.img becomes the want */
        was[c] = malloc(p.img_bytes[c]);
        memcpy(was[c], p.img[c], p.img_bytes[c]);
    }
    for (uint32_t t = 0; t < n_tok; t++) { /* distinct random (page, slot) pairs */
        uint32_t j = t + fwd_next() % (n_pages * block - t), s = slots[j];
        slots[j] = slots[t], slots[t] = s;
        meta[4 * t] = t, meta[4 * t + 1] = s / block, meta[4 * t + 2] = s % block;
        for (size_t i = 0; i < row; i += KVT_KV_Q8_BLOCK) fill_group(kx + t * row + i), fill_group(vx + t * row + i);
        for (uint32_t g = 0; g < nkv; g++)
            put_token(&p, s / block, layer, g, s % block, kx + t * row + g * hd, vx + t * row + g * hd);
    }
    kvt_gpu_buf *bk = fwd_buf(d, n_tok * row * 4, kx), *bv = fwd_buf(d, n_tok * row * 4, vx);
    kvt_gpu_buf *bm = fwd_buf(d, (uint64_t)n_tok * 16, meta);
    int ok = 1;
    for (int c = 0; c < p.kv.n_chunks && ok; c++)
        ok = p.kv.chunk[c] && kvt_gpu_upload(d, p.kv.chunk[c], 0, was[c], p.img_bytes[c]) == 0;
    if (bk && bv && bm && ok && !kvt_gpu_begin(d) &&
        !fwd_submit(d, kvt_gpu_rec_kv_store(k, &p.kv, layer, bk, bv, bm, n_tok), "kv_store q8_0"))
        for (int c = 0; c < p.kv.n_chunks; c++)
            if (!fwd_get(d, p.kv.chunk[c], was[c], p.img_bytes[c])) {
                uint64_t i = 0;
                while (i < p.img_bytes[c] && was[c][i] == p.img[c][i]) i++;
                CHECKF(i == p.img_bytes[c],
                       "kv_store q8_0: chunk %d of %d differs from the CPU's image at byte %llu (page %llu, byte "
                       "%llu: %02x, not %02x; %u tokens, %u kv heads x %u, block %u)",
                       c, p.kv.n_chunks, (unsigned long long)i, (unsigned long long)(i / p.kv.page_stride),
                       (unsigned long long)(i % p.kv.page_stride), i < p.img_bytes[c] ? was[c][i] : 0,
                       i < p.img_bytes[c] ? p.img[c][i] : 0, n_tok, nkv, hd, block);
            }
    for (int c = 0; c < p.kv.n_chunks; c++) free(was[c]);
    kvt_gpu_buf_free(bk), kvt_gpu_buf_free(bv), kvt_gpu_buf_free(bm);
    free(kx), free(vx), free(meta), free(slots);
    att_pool_free(&p);
}

/* Reads slot s of kv head g of page pg back through the CPU's dequantizers into kr and vr. */
static void read_token(att_pool *p, uint32_t pg, uint32_t layer, uint32_t g, uint32_t s, float *kr, float *vr) {
    uint32_t hd = p->kv.head_dim, B = p->kv.block;
    float *cols = malloc((size_t)hd * B * sizeof *cols);
    kvt_kv_q8_dequant_columns(block_at(p, pg, layer, 0, g), (int32_t)B, (int32_t)B, (int32_t)hd, cols);
    for (uint32_t d = 0; d < hd; d++) kr[d] = cols[(size_t)d * B + s];
    kvt_kv_q8_dequant_rows(block_at(p, pg, layer, 1, g) + (size_t)s * p->row, 1, (int32_t)hd, vr);
    free(cols);
}

/* Sequences of random K/V quantized into shuffled pages (read back through
 * the CPU's dequantizers for the reference), then the batch's tokens and their table. */
static void att_make(kvt_gpu_dev *d, att_case *a, uint32_t nkv, uint32_t group, uint32_t hd, uint32_t block,
                     uint32_t max_ctx, uint32_t n_tok) {
    pool_make(d, &a->p, nkv, hd, block, att_case_begin(a, nkv, group, hd, block, max_ctx, n_tok));
    att_case_tables(a);
    float *kx = malloc(hd * 4), *vx = malloc(hd * 4);
    for (uint32_t s = 0; s < a->n_seq; s++) {
        for (uint32_t j = 0; j < a->len[s]; j++)
            for (uint32_t g = 0; g < nkv; g++) {
                for (uint32_t dd = 0; dd < hd; dd++) kx[dd] = fwd_unit(), vx[dd] = fwd_unit();
                put_token(&a->p, att_page(a, s, j), a->layer, g, j % block, kx, vx);
            }
        for (uint32_t j = 0; j < a->len[s]; j++)
            for (uint32_t g = 0; g < nkv; g++)
                read_token(&a->p, att_page(a, s, j), a->layer, g, j % block, att_row(a, 0, s, j, g),
                           att_row(a, 1, s, j, g));
    }
    free(kx), free(vx);
    att_case_tokens(a);
}

/* One random case: the batch against the reference, then two tokens alone against their rows. */
static void check_attention(kvt_gpu_dev *d, kvt_gpu_kernels *k, uint32_t nkv, uint32_t group, uint32_t hd,
                            uint32_t block, uint32_t max_ctx, uint32_t n_tok) {
    att_case a;
    att_make(d, &a, nkv, group, hd, block, max_ctx, n_tok);
    char what[160];
    snprintf(what, sizeof what,
             "attention q8_0: %u heads (%u kv) x %u, block %u, %u pages in %d chunks, context <= %u, %u tokens",
             a.n_head, nkv, hd, block, a.p.n_pages, a.p.kv.n_chunks, max_ctx, n_tok);
    att_check(d, k, &a, what, 0, ATT_TOL, &max_att_err);
    att_case_free(&a);
}

/* A head_dim that is not a multiple of 32 is refused, naming it. */
static void check_refusal(kvt_gpu_kernels *k, kvt_gpu_dev *d) {
    att_pool p;
    pool_make(d, &p, 1, 32, 16, 1);
    p.kv.head_dim = 48;
    kvt_gpu_buf *b = fwd_buf(d, 4096, NULL);
    int rc = b && !kvt_gpu_begin(d) ? kvt_gpu_rec_kv_store(k, &p.kv, 0, b, b, b, 1) : 0;
    kvt_gpu_abort(d);
    CHECKF(rc == KVT_EARG && strstr(kvt_errmsg(), "head_dim 48"), "head_dim 48 with q8_0: rc %d, %s", rc, kvt_errmsg());
    kvt_gpu_buf_free(b);
    att_pool_free(&p);
}

int main(void) {
    gpu_test_start();
    fwd_seed("gpu kv q8_0");
    kvt_gpu_dev *d = NULL;
    CHECKF(kvt_gpu_open(0, &d) == 0, "%s", kvt_errmsg());
    kvt_gpu_kernels *k = NULL;
    if (d) {
        printf("gpu kv q8_0: validation layer %s\n", kvt_gpu_validating(d) ? "on" : "off");
        CHECKF(kvt_gpu_kernels_new(d, &k) == 0, "%s", kvt_errmsg());
    }
    if (k) {
        check_kv_store(d, k, 4, 256, 16, 64);
        check_kv_store(d, k, 1, 32, 1, 7); /* one-token pages: each column byte shares its word */
        for (int i = 0; i < 10; i++)
            check_kv_store(d, k, fwd_pick(1, 4), 32 * fwd_pick(1, 8), fwd_pick(1, 64), fwd_pick(1, 64));
        printf("gpu kv q8_0: kv_store matched the CPU's bytes on %llu groups of 32 (%llu of exact ties)\n",
               (unsigned long long)n_groups, (unsigned long long)n_ties);
        /* {kv heads, group, head_dim, block, context, tokens}: the edges, then a sample */
        static const uint32_t fixed[][6] = {{1, 1, 32, 16, 1, 1},
                                            {2, 3, 64, 17, 200, 64},
                                            {3, 1, 96, 32, 1500, 2},
                                            {2, 2, 256, 5, 300, 3}};
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
            const uint32_t *f = fixed[i];
            check_attention(d, k, f[0], f[1], f[2], f[3], f[4], f[5]);
        }
        for (int i = 0; i < 6; i++) {
            uint32_t hd = 32 * fwd_pick(1, 8), nkv = fwd_pick(1, 3), group = fwd_pick(1, 3), ctx = fwd_pick(1, 1024);
            uint64_t cost = (uint64_t)ctx * hd * nkv * group; /* per token: keep each case's work bounded */
            uint32_t n_tok = (uint32_t)KVT_MAX(1, KVT_MIN(fwd_pick(1, 64), 10000000ull / cost));
            check_attention(d, k, nkv, group, hd, fwd_pick(1, 64), ctx, n_tok);
        }
        printf("gpu kv q8_0: attention's max error %.3g of sum p|v| (tolerance %g)\n", max_att_err, ATT_TOL);
        check_refusal(k, d);
    }
    kvt_gpu_kernels_free(k);
    kvt_gpu_close(d);
    gpu_test_no_validation_messages(0);
    return kvt_test_done("test_gpu_kv_q8");
}
