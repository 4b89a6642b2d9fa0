// SPDX-License-Identifier: MIT
/* The forward pass's kernels: weight matrices (F32, F16 and the quantized
 * types of matmul_q.glsl) uploaded as row slices that each fit one binding,
 * their matmul, RoPE, add, SwiGLU, and the KV store and attention over the
 * paged KV pool. Shapes are checked here, so a shader never indexes past a
 * buffer; what only the device knows (the meta table's pages and slots) the
 * shaders check themselves. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "types.h"
#include "vk_impl.h"

#define Q8_BLOCK 32             /* values per q8_0 KV group */
#define Q8_BLOCK_BYTES 34       /* its f16 scale, then 32 int8 */
#define UPLOAD_BYTES (4u << 20) /* rows repacked per upload */
#define MAX_HEAD_DIM 256        /* attention.glsl */
#define MAX_TOKENS 65535u       /* the y (or x) dimension of a dispatch */

/* A quantized weight type as the GPU stores it (matmul_q.glsl): each block's
 * codes, the byte ranges code[0] then code[1] of the CPU's block, become
 * words of the slice's code region; its scales, bytes meta_off.. of the
 * block, padded to meta_bytes, go to the scale region after it. Activations
 * are quantized to Q8_K (256-blocks) for the K types, else to Q8_0 with the
 * Q8_1 block sums (which only Q4_1 and Q5_1 read). */
typedef struct {
    uint32_t type, elems, bytes; /* weights per block, bytes per block in the CPU's layout */
    uint16_t code_off[2], code_len[2];
    uint16_t meta_off, meta_len, meta_bytes;
} qfmt;

static const qfmt QFMT[KVT_VK_NQ] = {
    /* in the order of kvt_gpu_kernels' mm_q */
    {KVT_TYPE_Q8_0, 32, 34, {2, 0}, {32, 0}, 0, 2, 2},         {KVT_TYPE_Q4_0, 32, 18, {2, 0}, {16, 0}, 0, 2, 2},
    {KVT_TYPE_Q5_0, 32, 22, {6, 2}, {16, 4}, 0, 2, 2},         {KVT_TYPE_Q4_K, 256, 144, {16, 0}, {128, 0}, 0, 16, 16},
    {KVT_TYPE_Q5_K, 256, 176, {48, 16}, {128, 32}, 0, 16, 16}, {KVT_TYPE_Q6_K, 256, 210, {0, 0}, {192, 0}, 192, 18, 20},
    {KVT_TYPE_Q4_1, 32, 20, {4, 0}, {16, 0}, 0, 4, 4},         {KVT_TYPE_Q5_1, 32, 24, {8, 4}, {16, 4}, 0, 4, 4},
    {KVT_TYPE_IQ4_NL, 32, 18, {2, 0}, {16, 0}, 0, 2, 2},       {KVT_TYPE_Q2_K, 256, 84, {16, 0}, {64, 16}, 80, 4, 4},
    {KVT_TYPE_Q3_K, 256, 110, {32, 0}, {64, 32}, 96, 14, 16},  {KVT_TYPE_IQ4_XS, 256, 136, {8, 0}, {128, 0}, 0, 8, 8},
};

/* The index of type in QFMT, or -1 (F32, F16, BF16 or unsupported). */
static int qfmt_index(uint32_t type) {
    for (int i = 0; i < KVT_VK_NQ; i++)
        if (QFMT[i].type == type) return i;
    return -1;
}

struct kvt_gpu_wmat {
    kvt_gpu_dev *d;
    uint32_t type, rows, cols;
    const qfmt *q;       /* NULL for F32, F16 and BF16 */
    uint32_t slice_rows; /* rows of every slice but the last */
    int n_slices;
    kvt_gpu_buf **slice;
    uint64_t bytes;
};

int kvt_gpu_wmat_supported(uint32_t type) {
    return type == KVT_TYPE_F32 || type == KVT_TYPE_F16 || type == KVT_TYPE_BF16 || qfmt_index(type) >= 0;
}

/* Bytes of one row in the CPU's layout. */
static uint64_t cpu_row(const kvt_gpu_wmat *w) {
    if (w->q) return (uint64_t)w->cols / w->q->elems * w->q->bytes;
    return (uint64_t)w->cols * (w->type == KVT_TYPE_F32 ? 4 : 2);
}

/* Code words of one block. */
static uint32_t code_words(const qfmt *q) { return (uint32_t)(q->code_len[0] + q->code_len[1]) / 4; }

/* Device bytes of a slice of n rows: F32, F16 and BF16 rows back to back (F16
 * and BF16 padded to a word); a quantized type's codes, then its scales padded
 * to a word. */
static uint64_t slice_bytes(const kvt_gpu_wmat *w, uint64_t n) {
    if (w->type == KVT_TYPE_F32) return n * w->cols * 4;
    if (!w->q) return (n * w->cols + 1) / 2 * 4;
    uint64_t nb = n * (w->cols / w->q->elems);
    return nb * code_words(w->q) * 4 + (nb * w->q->meta_bytes + 3) / 4 * 4;
}

/* Repacks m rows from src (row_bytes apart) into codes and scales (matmul_q.glsl's layout). */
static void repack_rows(const kvt_gpu_wmat *w, const unsigned char *src, size_t row_bytes, uint32_t m,
                        unsigned char *codes, unsigned char *meta) {
    const qfmt *q = w->q;
    uint64_t nb = w->cols / q->elems, cb = code_words(q) * 4;
    memset(meta, 0, (size_t)(m * nb * q->meta_bytes) + 4); /* the padding word too */
    for (uint32_t i = 0; i < m; i++)
        for (uint64_t k = 0; k < nb; k++) {
            const unsigned char *blk = src + (size_t)i * row_bytes + k * q->bytes;
            unsigned char *c = codes + (i * nb + k) * cb;
            memcpy(c, blk + q->code_off[0], q->code_len[0]);
            memcpy(c + q->code_len[0], blk + q->code_off[1], q->code_len[1]);
            memcpy(meta + (i * nb + k) * q->meta_bytes, blk + q->meta_off, q->meta_len);
        }
}

/* Copies n rows from src (row_bytes apart) into slice b in its layout, a group of rows per upload. */
static int upload_rows(kvt_gpu_wmat *w, kvt_gpu_buf *b, const unsigned char *src, size_t row_bytes, uint32_t n) {
    uint64_t row = cpu_row(w);
    uint32_t group = (uint32_t)KVT_MIN(
        (uint64_t)n, KVT_MAX(2, UPLOAD_BYTES / row & ~1ull)); /* even: 2-byte scales stay word-aligned */
    uint64_t nb = w->q ? w->cols / w->q->elems : 0, cb = w->q ? code_words(w->q) * 4 : 0;
    uint64_t mb = w->q ? w->q->meta_bytes : 0, tmp_bytes = w->q ? group * nb * (cb + mb) + 4 : group * row;
    unsigned char *tmp = kvt_xmalloc((size_t)tmp_bytes);
    int rc = 0;
    for (uint32_t r = 0; r < n && !rc; r += group) {
        uint32_t m = KVT_MIN(group, n - r);
        if (!w->q) {
            for (uint32_t i = 0; i < m; i++) memcpy(tmp + i * row, src + (size_t)(r + i) * row_bytes, (size_t)row);
            rc = kvt_gpu_upload(w->d, b, r * row, tmp, m * row);
            continue;
        }
        unsigned char *codes = tmp, *meta = tmp + (size_t)(m * nb * cb);
        repack_rows(w, src + (size_t)r * row_bytes, row_bytes, m, codes, meta);
        rc = kvt_gpu_upload(w->d, b, r * nb * cb, codes, m * nb * cb);
        /* the last group's scales run to the slice's end (its padding word included) */
        uint64_t moff = n * nb * cb + r * nb * mb, mlen = KVT_MIN((m * nb * mb + 3) / 4 * 4, kvt_gpu_buf_size(b) - moff);
        if (!rc) rc = kvt_gpu_upload(w->d, b, moff, meta, mlen);
    }
    free(tmp);
    return rc;
}

/* The rows per slice: as many as one binding holds. */
static int plan_slices(kvt_gpu_wmat *w) {
    uint64_t max = kvt_gpu_max_binding(w->d), n = max / (slice_bytes(w, 64) / 64);
    n = KVT_MIN(n, (uint64_t)w->rows);
    while (n > 0 && slice_bytes(w, n) > max) n--;
    if (n == 0)
        return kvt_fail(KVT_ELIMIT,
                        "one row of %u columns (%llu bytes) is over the device's largest storage binding "
                        "of %llu bytes",
                        w->cols, (unsigned long long)slice_bytes(w, 1), (unsigned long long)max);
    w->slice_rows = (uint32_t)n;
    w->n_slices = (int)((w->rows + n - 1) / n);
    return 0;
}

int kvt_gpu_wmat_new(kvt_gpu_dev *d, uint32_t type, uint32_t rows, uint32_t cols, const void *data, size_t row_bytes,
                     kvt_gpu_wmat **out) {
    *out = NULL;
    if (!kvt_gpu_wmat_supported(type))
        return kvt_fail(KVT_EUNSUPPORTED,
                        "gpu weight matrix: type %u is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                        "Q5_1, IQ4_NL, Q2_K..Q6_K or IQ4_XS)",
                        type);
    if (!rows || !cols || !data)
        return kvt_fail(KVT_EARG, "gpu weight matrix: rows %u, cols %u (each > 0) and its data", rows, cols);
    int qi = qfmt_index(type);
    if (qi >= 0 && cols % QFMT[qi].elems)
        return kvt_fail(KVT_EARG, "gpu weight matrix: cols %u is not a multiple of the type's block of %u", cols,
                        QFMT[qi].elems);
    kvt_gpu_wmat *w = kvt_xcalloc(1, sizeof *w);
    *w = (kvt_gpu_wmat){.d = d, .type = type, .rows = rows, .cols = cols, .q = qi >= 0 ? &QFMT[qi] : NULL};
    if (row_bytes < cpu_row(w)) {
        int rc = kvt_fail(KVT_EARG, "gpu weight matrix: row_bytes %zu is under the %llu bytes of a row", row_bytes,
                          (unsigned long long)cpu_row(w));
        free(w);
        return rc;
    }
    int rc = plan_slices(w);
    if (!rc) w->slice = kvt_xcalloc((size_t)w->n_slices, sizeof *w->slice);
    for (int s = 0; s < w->n_slices && !rc; s++) {
        uint32_t r0 = (uint32_t)s * w->slice_rows, n = KVT_MIN(w->slice_rows, rows - r0);
        uint64_t bytes = slice_bytes(w, n);
        rc = kvt_gpu_buf_new(d, KVT_GPU_DEVICE, bytes, &w->slice[s]);
        if (!rc) rc = upload_rows(w, w->slice[s], (const unsigned char *)data + (size_t)r0 * row_bytes, row_bytes, n);
        w->bytes += bytes;
    }
    if (rc) {
        kvt_fail_prefix(rc, "gpu weight matrix %ux%u: ", rows, cols);
        kvt_gpu_wmat_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

void kvt_gpu_wmat_free(kvt_gpu_wmat *w) {
    if (!w) return;
    for (int s = 0; s < w->n_slices && w->slice; s++) kvt_gpu_buf_free(w->slice[s]);
    free(w->slice);
    free(w);
}

uint64_t kvt_gpu_wmat_bytes(const kvt_gpu_wmat *w) { return w->bytes; }

/* Makes the scratch hold bytes; an outgrown one is kept until the kernels are
 * freed, as the open recording may still use it. */
static int xq_reserve(kvt_gpu_kernels *k, uint64_t bytes) {
    if (k->xq && kvt_gpu_buf_size(k->xq) >= bytes) return 0;
    uint64_t want = KVT_MIN(KVT_MAX(bytes, k->xq ? 2 * kvt_gpu_buf_size(k->xq) : 0), kvt_gpu_max_binding(k->d));
    kvt_gpu_buf *b = NULL;
    int rc = kvt_gpu_buf_new(k->d, KVT_GPU_DEVICE, KVT_MAX(want, bytes), &b);
    if (rc) return kvt_fail_prefix(rc, "gpu matmul: the quantized activations: "), rc;
    if (k->xq) {
        k->retired = kvt_xrealloc(k->retired, (size_t)(k->n_retired + 1) * sizeof *k->retired);
        k->retired[k->n_retired++] = k->xq;
    }
    k->xq = b;
    k->xq_x = NULL;
    return 0;
}

int kvt_gpu_kernels_reserve_scratch(kvt_gpu_kernels *k, uint32_t n_tok, uint32_t cols) {
    return xq_reserve(k, kvt_gpu_quant_scratch_bytes(n_tok, cols));
}

uint64_t kvt_gpu_kernels_scratch_bytes(const kvt_gpu_kernels *k) { return k->xq ? kvt_gpu_buf_size(k->xq) : 0; }
int kvt_gpu_kernels_scratch_regrowths(const kvt_gpu_kernels *k) { return k->n_retired; }
kvt_gpu_buf *kvt_gpu_kernels_scratch(const kvt_gpu_kernels *k) { return k->xq; }

/* Records the quantize pass of x (n_tok rows of cols) into the scratch k->xq
 * for a matmul of format q, unless the scratch already holds it: the same x
 * quantized the same way with no barrier recorded since, so x cannot have been
 * written in between (a writer would have needed one before our read). *xbase
 * is where its scales start (in words). */
static int quantize_acts(kvt_gpu_kernels *k, const qfmt *q, kvt_gpu_buf *x, uint32_t n_tok, uint32_t cols,
                         uint32_t *xbase) {
    int kq = q->elems == 256;
    uint64_t nblk = (uint64_t)n_tok * (cols / q->elems), qwords = nblk * q->elems / 4;
    *xbase = (uint32_t)qwords;
    kvt_gpu_dev *d = k->d;
    if (k->xq_x == x && k->xq_n == n_tok && k->xq_cols == cols && k->xq_k == kq && k->xq_sync == d->n_sync) return 0;
    /* a matmul recorded since the last barrier may still read the scratch */
    int rc = k->xq && k->xq_sync == d->n_sync ? kvt_gpu_rec_barrier(d) : 0;
    if (!rc) rc = xq_reserve(k, (qwords + nblk + (kq ? nblk * 8 : nblk)) * 4); /* Q8_K's sums, Q8_0's Q8_1 sums */
    if (rc) return rc;
    uint32_t push[3] = {cols, n_tok, *xbase}, g[3] = {0, 1, 0};
    kvt_vk_spread((uint32_t)((nblk + 63) / 64), &g[0], &g[2]);
    kvt_gpu_buf *b[2] = {k->xq, x};
    rc = kvt_gpu_rec_dispatch(d, k->quant[kq], b, push, g);
    if (!rc) rc = kvt_gpu_rec_barrier(d);
    k->xq_x = rc ? NULL : x;
    k->xq_n = n_tok;
    k->xq_cols = cols;
    k->xq_k = kq;
    k->xq_sync = d->n_sync;
    return rc;
}

int kvt_gpu_rec_matmul(kvt_gpu_kernels *k, const kvt_gpu_wmat *w, kvt_gpu_buf *y, uint32_t ldy, uint32_t y_off,
                       kvt_gpu_buf *x, uint32_t n_tok) {
    if (!n_tok || n_tok > MAX_TOKENS) return kvt_fail(KVT_EARG, "gpu matmul: tokens %u (1..%u)", n_tok, MAX_TOKENS);
    if (y_off > ldy || w->rows > ldy - y_off)
        return kvt_fail(KVT_EARG, "gpu matmul: %u rows at y_off %u do not fit in a y row of ldy %u", w->rows, y_off,
                        ldy);
    int rc = kvt_vk_need(x, (uint64_t)n_tok * w->cols * 4, "matmul", "x");
    if (!rc) rc = kvt_vk_need(y, ((uint64_t)(n_tok - 1) * ldy + y_off + w->rows) * 4, "matmul", "y");
    if (rc) return rc;
    int which = w->q ? 3 + (int)(w->q - QFMT) : w->type == KVT_TYPE_F32 ? 0 : w->type == KVT_TYPE_BF16 ? 2 : 1;
    kvt_gpu_pipe *p;
    uint32_t xbase = 0, toks, mrows;
    rc = kvt_vk_mm_pipe(k, which, n_tok, &p, &toks, &mrows);
    kvt_gpu_buf *xin = x;
    if (w->q && !rc) {
        rc = quantize_acts(k, w->q, x, n_tok, w->cols, &xbase);
        xin = k->xq;
    }
    for (int s = 0; s < w->n_slices && !rc; s++) {
        uint32_t r0 = (uint32_t)s * w->slice_rows, n = KVT_MIN(w->slice_rows, w->rows - r0);
        uint32_t sbase = w->q ? n * (w->cols / w->q->elems) * code_words(w->q) : 0;
        uint32_t push[7] = {n, w->cols, n_tok, ldy, y_off + r0, sbase, xbase}, g[3];
        kvt_vk_spread((n + mrows - 1) / mrows, &g[0], &g[2]); /* the last workgroup may hold fewer rows */
        g[1] = (n_tok + toks - 1) / toks;
        kvt_gpu_buf *b[3] = {y, w->slice[s], xin};
        rc = kvt_gpu_rec_dispatch(k->d, p, b, push, g);
    }
    return rc;
}

/* A flat grid of n invocations, KVT_WG to a workgroup (kvt_flat_id). */
static void flat_groups(uint64_t n, uint32_t g[3]) {
    kvt_vk_spread((uint32_t)((n + 63) / 64), &g[0], &g[2]);
    g[1] = 1;
}

int kvt_gpu_rec_rope(kvt_gpu_kernels *k, kvt_gpu_buf *x, kvt_gpu_buf *cs, kvt_gpu_buf *sn, uint32_t n_heads,
                     uint32_t head_dim, uint32_t rope_dim, int neox, uint32_t n_tok) {
    uint64_t pairs = (uint64_t)n_tok * n_heads * (rope_dim / 2);
    if (!n_heads || !n_tok || !rope_dim || rope_dim % 2 || rope_dim > head_dim || pairs > UINT32_MAX)
        return kvt_fail(KVT_EARG, "gpu rope: heads %u, tokens %u (each > 0), rope_dim %u (even, 2..head_dim %u)",
                        n_heads, n_tok, rope_dim, head_dim);
    int rc = kvt_vk_need(x, (uint64_t)n_tok * n_heads * head_dim * 4, "rope", "x");
    if (!rc) rc = kvt_vk_need(cs, (uint64_t)n_tok * (rope_dim / 2) * 4, "rope", "cs");
    if (!rc) rc = kvt_vk_need(sn, (uint64_t)n_tok * (rope_dim / 2) * 4, "rope", "sn");
    if (rc) return rc;
    uint32_t push[5] = {n_heads, head_dim, rope_dim, neox != 0, n_tok}, g[3];
    flat_groups(pairs, g);
    kvt_gpu_buf *b[3] = {x, cs, sn};
    return kvt_gpu_rec_dispatch(k->d, k->rope, b, push, g);
}

/* x op= y elementwise over n floats with pipeline p. */
static int rec_elementwise(kvt_gpu_kernels *k, kvt_gpu_pipe *p, const char *op, kvt_gpu_buf *x, kvt_gpu_buf *y,
                           uint32_t n) {
    if (!n) return kvt_fail(KVT_EARG, "gpu %s: n is 0", op);
    int rc = kvt_vk_need(x, (uint64_t)n * 4, op, "its first operand");
    if (!rc) rc = kvt_vk_need(y, (uint64_t)n * 4, op, "its second operand");
    if (rc) return rc;
    uint32_t g[3];
    flat_groups(n, g);
    kvt_gpu_buf *b[2] = {x, y};
    return kvt_gpu_rec_dispatch(k->d, p, b, &n, g);
}

int kvt_gpu_rec_add(kvt_gpu_kernels *k, kvt_gpu_buf *x, kvt_gpu_buf *y, uint32_t n) {
    return rec_elementwise(k, k->add, "add", x, y, n);
}

int kvt_gpu_rec_silu_mul(kvt_gpu_kernels *k, kvt_gpu_buf *g, kvt_gpu_buf *u, uint32_t n) {
    return rec_elementwise(k, k->silu_mul, "silu_mul", g, u, n);
}

/* kv.glsl's push constants. */
typedef union {
    uint32_t u[12];
    float f[12];
} kv_push;

/* Bytes of one token's row of head_dim values in a page of dtype, and the
 * unit (bytes) the shaders index the pool in: f32 and f16 elements, q8_0 bytes. */
static uint64_t kv_row_bytes(kvt_gpu_kv_dtype dt, uint32_t head_dim) {
    return dt == KVT_GPU_KV_Q8_0 ? (uint64_t)head_dim / Q8_BLOCK * Q8_BLOCK_BYTES
                                 : (uint64_t)head_dim * (dt == KVT_GPU_KV_F16 ? 2 : 4);
}
static uint64_t kv_unit(kvt_gpu_kv_dtype dt) { return dt == KVT_GPU_KV_Q8_0 ? 1 : dt == KVT_GPU_KV_F16 ? 2 : 4; }

/* Checks the pool and layer, fills push's pool words and binds its chunks (an unused binding repeats chunk 0). */
static int kv_pool(const kvt_gpu_kv *kv, uint32_t layer, const char *op, kv_push *push, kvt_gpu_buf **bind) {
    if ((unsigned)kv->dtype >= KVT_GPU_KV_DTYPES)
        return kvt_fail(KVT_EARG, "gpu %s: KV dtype %d (f32 0, f16 1, q8_0 2)", op, (int)kv->dtype);
    if (!kv->n_layer || !kv->n_head_kv || !kv->head_dim || !kv->block || layer >= kv->n_layer ||
        (kv->dtype == KVT_GPU_KV_Q8_0 && kv->head_dim % Q8_BLOCK))
        return kvt_fail(KVT_EARG,
                        "gpu %s: layer %u of a pool of %u layers, %u kv heads, head_dim %u, block %u (each > 0, "
                        "head_dim a multiple of %d for q8_0)",
                        op, layer, kv->n_layer, kv->n_head_kv, kv->head_dim, kv->block, Q8_BLOCK);
    const uint64_t esize = kv_unit(kv->dtype),
                   page = (uint64_t)kv->n_layer * 2 * kv->n_head_kv * kv->block * kv_row_bytes(kv->dtype, kv->head_dim);
    if (kv->page_stride % 4 || kv->page_stride < page || !kv->pages_per_chunk)
        return kvt_fail(KVT_EARG,
                        "gpu %s: page_stride %llu (a multiple of 4, at least the page's %llu bytes), "
                        "pages_per_chunk %u (> 0)",
                        op, (unsigned long long)kv->page_stride, (unsigned long long)page, kv->pages_per_chunk);
    if (kv->n_chunks < 1 || kv->n_chunks > KVT_GPU_KV_CHUNKS)
        return kvt_fail(KVT_EARG, "gpu %s: n_chunks %d (1..%d)", op, kv->n_chunks, KVT_GPU_KV_CHUNKS);
    uint64_t full = (uint64_t)kv->pages_per_chunk * kv->page_stride, n_pages = 0;
    for (int c = 0; c < kv->n_chunks; c++) {
        uint64_t have = kv->chunk[c] ? kvt_gpu_buf_size(kv->chunk[c]) : 0;
        uint64_t pages = KVT_MIN(have / kv->page_stride, (uint64_t)kv->pages_per_chunk);
        if (pages == 0 || (c < kv->n_chunks - 1 && have < full))
            return kvt_fail(KVT_EARG, "gpu %s: KV chunk %d has %llu bytes, under %s page%s of %llu bytes", op, c,
                            (unsigned long long)have, c < kv->n_chunks - 1 ? "its pages_per_chunk" : "one",
                            c < kv->n_chunks - 1 ? "s" : "", (unsigned long long)kv->page_stride);
        n_pages += pages;
        bind[c] = kv->chunk[c];
    }
    for (int c = kv->n_chunks; c < KVT_GPU_KV_CHUNKS; c++) bind[c] = kv->chunk[0];
    uint32_t words[7] = {layer,
                         kv->n_head_kv,
                         kv->head_dim,
                         kv->block,
                         (uint32_t)(kv->page_stride / esize),
                         kv->pages_per_chunk,
                         (uint32_t)KVT_MIN(n_pages, (uint64_t)UINT32_MAX)};
    memcpy(push->u, words, sizeof words);
    return 0;
}

int kvt_gpu_rec_kv_store(kvt_gpu_kernels *k, const kvt_gpu_kv *kv, uint32_t layer, kvt_gpu_buf *kx, kvt_gpu_buf *vx,
                         kvt_gpu_buf *meta, uint32_t n_tok) {
    kv_push push = {{0}};
    kvt_gpu_buf *b[3 + KVT_GPU_KV_CHUNKS] = {kx, vx, meta};
    int rc = kv_pool(kv, layer, "kv_store", &push, b + 3);
    if (rc) return rc;
    if (!n_tok) return kvt_fail(KVT_EARG, "gpu kv_store: tokens is 0");
    uint64_t row = (uint64_t)kv->n_head_kv * kv->head_dim * 4;
    rc = kvt_vk_need(kx, n_tok * row, "kv_store", "kx");
    if (!rc) rc = kvt_vk_need(vx, n_tok * row, "kv_store", "vx");
    if (!rc) rc = kvt_vk_need(meta, (uint64_t)n_tok * KVT_GPU_META_WORDS * 4, "kv_store", "meta");
    if (rc) return rc;
    push.u[7] = n_tok;
    uint32_t g[3] = {0, 1, 0};
    kvt_vk_spread(n_tok, &g[0], &g[2]);
    return kvt_gpu_rec_dispatch(k->d, k->kv_store[kv->dtype], b, push.u, g);
}

int kvt_gpu_rec_attention(kvt_gpu_kernels *k, const kvt_gpu_kv *kv, uint32_t layer, kvt_gpu_buf *out, kvt_gpu_buf *q,
                          kvt_gpu_buf *meta, uint32_t n_head, float scale, uint32_t n_tok) {
    return kvt_gpu_rec_attention_arch(k, kv, layer, out, q, meta, n_head, scale, 0, 0.0f, n_tok);
}

int kvt_gpu_rec_attention_arch(kvt_gpu_kernels *k, const kvt_gpu_kv *kv, uint32_t layer, kvt_gpu_buf *out,
                               kvt_gpu_buf *q, kvt_gpu_buf *meta, uint32_t n_head, float scale, uint32_t window,
                               float softcap, uint32_t n_tok) {
    if (!(softcap >= 0.0f) || isinf(softcap))
        return kvt_fail(KVT_EARG, "gpu attention: softcap %g (0 for none, else a finite cap > 0)", (double)softcap);
    kv_push push = {{0}};
    kvt_gpu_buf *b[3 + KVT_GPU_KV_CHUNKS] = {out, q, meta};
    int rc = kv_pool(kv, layer, "attention", &push, b + 3);
    if (rc) return rc;
    if (kv->head_dim > MAX_HEAD_DIM || !n_head || n_head > MAX_TOKENS || n_head % kv->n_head_kv || !n_tok ||
        n_tok > MAX_TOKENS)
        return kvt_fail(KVT_EARG,
                        "gpu attention: head_dim %u (at most %d), n_head %u (a multiple of n_head_kv %u), "
                        "tokens %u (1..%u)",
                        kv->head_dim, MAX_HEAD_DIM, n_head, kv->n_head_kv, n_tok, MAX_TOKENS);
    uint64_t rows = (uint64_t)n_tok * n_head * kv->head_dim * 4;
    rc = kvt_vk_need(q, rows, "attention", "q");
    if (!rc) rc = kvt_vk_need(out, rows, "attention", "out");
    if (!rc) rc = kvt_vk_need(meta, (uint64_t)n_tok * KVT_GPU_META_WORDS * 4, "attention", "meta");
    if (rc) return rc;
    push.u[7] = n_tok;
    push.u[8] = n_head;
    push.f[9] = scale;
    push.u[10] = window;
    push.f[11] = softcap;
    uint32_t g[3] = {n_head, n_tok, 1};
    return kvt_gpu_rec_dispatch(k->d, k->attention[kv->dtype], b, push.u, g);
}
