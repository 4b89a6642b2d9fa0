// SPDX-License-Identifier: MIT
/* The quantized-weight matmuls on Vulkan device 0 (lavapipe here) against the
 * CPU's kvt_matmul, for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K and IQ4_XS
 * matrices made by the CPU's quantizers, over a sampled sweep of small shapes
 * (the seed is printed; $KVT_GPU_SEED replays one):
 *  - within QTOL of the CPU, relative to sum |w x| of the row: both quantize
 *    the activations the same way (Q8_0, Q8_1 or Q8_K) and form each block's term
 *    the same way, so only the order in which the block terms are summed
 *    differs (the CPU's lanes or one accumulator, the GPU's invocations and
 *    tree); the largest error seen is printed;
 *  - the integer dot product shaders (OpSDot) and the plain integer ones
 *    (KVT_VK_NO_INT_DOT=1, a second device, which also runs batches over 8
 *    tokens 16 to a matmul workgroup, KVT_VK_MM_TOKS=16) give the same bits;
 *  - a token alone gets the bits of its row in a batch; for F16, Q8_0 and
 *    Q4_K, every token of batches of 1, 7, 8, 9, 31, 32, 33 and 100 tokens
 *    (either side of each workgroup width) gets its bits alone;
 *  - KVT_VK_MM_TOKS other than 8, 16 or 32 fails the open, naming it;
 *  - two matmuls of different x in one recording, with no barrier between
 *    them, get what each gets alone (the shared activation scratch);
 *  - the quantized activations themselves (the kernels' scratch read back),
 *    on rows crafted so that x * 127 / amax lies within an ulp of a half, are
 *    the CPU quantizers' bit for bit: Q8_0's int8 values and f16-rounded
 *    scales and Q8_1's f16-rounded block sums, Q8_K's int8 values, f32
 *    scales and sums of 16.
 * No validation message may appear. Skips (77) without a device. */
#include <math.h>
#include <string.h>

#include "gpu_fwd_test.h"
#include "ops.h"
#include "ops_impl.h"
#include "quant_k.h"
#include "quant_legacy.h"
#include "types.h"

/* The block terms are summed in another order: each of the <= 64 invocations
 * sums at most a few terms, then the tree, against the CPU's lanes; each sum
 * rounds at 2^-24 relative, so a few 1e-7 of sum |w x| at these lengths,
 * more where cancellation leaves a small sum (observed up to 2.5e-6 over five
 * seeds); 1e-5 leaves room and still catches a wrong block, scale or code
 * (those move a result by 1e-3 or more). */
#define QTOL 1e-5

static double max_err;

static const struct {
    uint32_t type;
    const char *name;
    uint32_t block;
} TYPES[] = {{KVT_TYPE_Q8_0, "Q8_0", 32},  {KVT_TYPE_Q4_0, "Q4_0", 32},  {KVT_TYPE_Q5_0, "Q5_0", 32},
             {KVT_TYPE_Q4_1, "Q4_1", 32},  {KVT_TYPE_Q5_1, "Q5_1", 32},  {KVT_TYPE_IQ4_NL, "IQ4_NL", 32},
             {KVT_TYPE_Q4_K, "Q4_K", 256}, {KVT_TYPE_Q5_K, "Q5_K", 256}, {KVT_TYPE_Q6_K, "Q6_K", 256},
             {KVT_TYPE_Q2_K, "Q2_K", 256}, {KVT_TYPE_Q3_K, "Q3_K", 256}, {KVT_TYPE_IQ4_XS, "IQ4_XS", 256}};

/* y = W x for n_tok tokens on device d; 0 or a failed check. */
static int gpu_mm(kvt_gpu_dev *d, kvt_gpu_kernels *k, const kvt_gpu_wmat *w, const float *x, uint32_t cols,
                  uint32_t rows, uint32_t n_tok, float *y) {
    kvt_gpu_buf *bx = fwd_buf(d, (uint64_t)n_tok * cols * 4, x), *by = fwd_buf(d, (uint64_t)n_tok * rows * 4, NULL);
    int rc = -1;
    if (bx && by) {
        rc = kvt_gpu_begin(d);
        if (!rc) rc = fwd_submit(d, kvt_gpu_rec_matmul(k, w, by, rows, 0, bx, n_tok), "matmul");
        if (!rc) rc = fwd_get(d, by, y, (uint64_t)n_tok * rows * 4);
    }
    kvt_gpu_buf_free(bx);
    kvt_gpu_buf_free(by);
    return rc;
}

/* Random weights quantized by the CPU, rows of row_bytes. */
static unsigned char *make_weights(uint32_t type, uint32_t rows, uint32_t cols, size_t row_bytes) {
    unsigned char *w = malloc((size_t)rows * row_bytes);
    float *row = malloc((size_t)cols * 4);
    for (uint32_t r = 0; r < rows; r++) {
        float scale = ldexpf(1.0f, -(int)fwd_pick(0, 6));
        for (uint32_t c = 0; c < cols; c++) row[c] = fwd_unit() * scale;
        unsigned char *o = w + (size_t)r * row_bytes;
        if (kvt_qk_is_k(type)) kvt_qk_quantize_row(type, row, cols, o);
        else kvt_ql_quantize_row(type, row, o, cols);
    }
    free(row);
    return w;
}

/* Activations with blocks of varied scale, an all-zero block and an outlier channel sometimes. */
static void make_x(float *x, uint32_t n_tok, uint32_t cols) {
    for (uint32_t t = 0; t < n_tok; t++)
        for (uint32_t c = 0; c < cols; c++) x[(size_t)t * cols + c] = fwd_unit() * ldexpf(1.0f, (int)(c / 32 % 5) - 2);
    if (fwd_pick(0, 1)) memset(x, 0, 32 * 4);
    if (fwd_pick(0, 1)) x[(size_t)(n_tok - 1) * cols + fwd_pick(0, cols - 1)] = 3000.0f;
}

/* Long: one case: the CPU reference, both GPU paths, single tokens. */
static void check_case(kvt_gpu_dev *d, kvt_gpu_kernels *k, kvt_gpu_dev *di, kvt_gpu_kernels *ki, int ti, uint32_t rows,
                       uint32_t cols, uint32_t n_tok) {
    uint32_t type = TYPES[ti].type;
    size_t row_bytes = kvt_wmat_row_bytes(type, cols);
    unsigned char *w = make_weights(type, rows, cols, row_bytes);
    float *x = malloc((size_t)n_tok * cols * 4), *yc = malloc((size_t)n_tok * rows * 4);
    float *y = malloc((size_t)n_tok * rows * 4), *yi = malloc((size_t)n_tok * rows * 4), *y1 = malloc(rows * 4);
    float *wf = malloc((size_t)rows * cols * 4);
    make_x(x, n_tok, cols);
    kvt_wmat wm = {.type = type, .rows = rows, .cols = cols, .data = w, .row_bytes = row_bytes};
    kvt_matmul(NULL, &wm, x, cols, n_tok, yc, rows);
    for (uint32_t r = 0; r < rows; r++) kvt_wmat_row_f32(&wm, r, wf + (size_t)r * cols);
    kvt_gpu_wmat *m = NULL, *mi = NULL;
    int rc = kvt_gpu_wmat_new(d, type, rows, cols, w, row_bytes, &m);
    if (!rc) rc = kvt_gpu_wmat_new(di, type, rows, cols, w, row_bytes, &mi);
    CHECKF(rc == 0, "%s %ux%u: %s", TYPES[ti].name, rows, cols, kvt_errmsg());
    if (!rc && !gpu_mm(d, k, m, x, cols, rows, n_tok, y) && !gpu_mm(di, ki, mi, x, cols, rows, n_tok, yi)) {
        int over = 0;
        for (uint32_t t = 0; t < n_tok; t++)
            for (uint32_t r = 0; r < rows; r++) {
                double mag = 0;
                for (uint32_t c = 0; c < cols; c++)
                    mag += fabs((double)wf[(size_t)r * cols + c] * x[(size_t)t * cols + c]);
                double e = fabs((double)y[(size_t)t * rows + r] - yc[(size_t)t * rows + r]) / (mag > 0 ? mag : 1);
                over += !(e <= QTOL);
                max_err = e > max_err ? e : max_err;
            }
        CHECKF(over == 0, "%s %ux%u x %u: %d results off the CPU's by more than %g of sum|w x|", TYPES[ti].name, rows,
               cols, n_tok, over, QTOL);
        CHECKF(memcmp(y, yi, (size_t)n_tok * rows * 4) == 0, "%s %ux%u x %u: OpSDot and plain integer shaders differ",
               TYPES[ti].name, rows, cols, n_tok);
        uint32_t t = fwd_pick(0, n_tok - 1);
        if (!gpu_mm(d, k, m, x + (size_t)t * cols, cols, rows, 1, y1))
            CHECKF(memcmp(y1, y + (size_t)t * rows, rows * 4) == 0,
                   "%s %ux%u: token %u alone differs from its row in a batch of %u", TYPES[ti].name, rows, cols, t,
                   n_tok);
    }
    kvt_gpu_wmat_free(m);
    kvt_gpu_wmat_free(mi);
    free(w);
    free(wf);
    free(x);
    free(yc);
    free(y);
    free(yi);
    free(y1);
}

/* Two x, two outputs, one recording without a barrier between the matmuls:
 * the second must quantize its own x, not reuse the first's. */
static void check_two_in_one(kvt_gpu_dev *d, kvt_gpu_kernels *k) {
    enum { rows = 16, cols = 256, n = 3 };
    size_t rb = kvt_wmat_row_bytes(KVT_TYPE_Q4_K, cols);
    unsigned char *w = make_weights(KVT_TYPE_Q4_K, rows, cols, rb);
    float x[2][n * cols], y[2][n * rows], ya[n * rows];
    make_x(x[0], n, cols);
    make_x(x[1], n, cols);
    kvt_gpu_wmat *m = NULL;
    CHECKF(kvt_gpu_wmat_new(d, KVT_TYPE_Q4_K, rows, cols, w, rb, &m) == 0, "%s", kvt_errmsg());
    kvt_gpu_buf *bx[2] = {fwd_buf(d, sizeof x[0], x[0]), fwd_buf(d, sizeof x[1], x[1])};
    kvt_gpu_buf *by[2] = {fwd_buf(d, sizeof y[0], NULL), fwd_buf(d, sizeof y[1], NULL)};
    if (m && bx[0] && bx[1] && by[0] && by[1]) {
        int rc = kvt_gpu_begin(d);
        for (int i = 0; i < 2 && !rc; i++) rc = kvt_gpu_rec_matmul(k, m, by[i], rows, 0, bx[i], n);
        if (!fwd_submit(d, rc, "two matmuls") && !fwd_get(d, by[0], y[0], sizeof y[0]) &&
            !fwd_get(d, by[1], y[1], sizeof y[1]))
            for (int i = 0; i < 2; i++)
                if (!gpu_mm(d, k, m, x[i], cols, rows, n, ya))
                    CHECKF(memcmp(ya, y[i], sizeof ya) == 0, "matmul %d of two in one recording differs from alone", i);
    }
    for (int i = 0; i < 2; i++) {
        kvt_gpu_buf_free(bx[i]);
        kvt_gpu_buf_free(by[i]);
    }
    kvt_gpu_wmat_free(m);
    free(w);
}

/* Weights of type (F16, or a quantized type by the CPU's quantizer) for the batch-shape check. */
static unsigned char *make_any_weights(uint32_t type, uint32_t rows, uint32_t cols, size_t *rb) {
    *rb = kvt_wmat_row_bytes(type, cols);
    if (type != KVT_TYPE_F16) return make_weights(type, rows, cols, *rb);
    uint16_t *w = malloc((size_t)rows * cols * 2);
    for (size_t i = 0; i < (size_t)rows * cols; i++) w[i] = kvt_f32_to_f16(fwd_unit());
    return (unsigned char *)w;
}

/* y[t] = W x[t] for t < n_tok, each token a matmul of its own (n_tok 1), all in one recording; 0 or a failed
 * check. */
static int gpu_mm_singles(kvt_gpu_dev *d, kvt_gpu_kernels *k, const kvt_gpu_wmat *w, const float *x, uint32_t cols,
                          uint32_t rows, uint32_t n_tok, float *y) {
    kvt_gpu_buf **bx = calloc(n_tok, sizeof *bx), *by = fwd_buf(d, (uint64_t)n_tok * rows * 4, NULL);
    int rc = by ? 0 : -1;
    for (uint32_t t = 0; t < n_tok && !rc; t++)
        if (!(bx[t] = fwd_buf(d, (uint64_t)cols * 4, x + (size_t)t * cols))) rc = -1;
    if (!rc) {
        rc = kvt_gpu_begin(d);
        for (uint32_t t = 0; t < n_tok && !rc; t++) rc = kvt_gpu_rec_matmul(k, w, by, n_tok * rows, t * rows, bx[t], 1);
        rc = fwd_submit(d, rc, "single-token matmuls");
    }
    if (!rc) rc = fwd_get(d, by, y, (uint64_t)n_tok * rows * 4);
    for (uint32_t t = 0; t < n_tok; t++) kvt_gpu_buf_free(bx[t]);
    free(bx);
    kvt_gpu_buf_free(by);
    return rc;
}

/* Every batch size around the matmul's workgroup widths (8 tokens up to 8, kvt_gpu_info.mm_toks beyond)
 * gives each token the bits it gets alone, on both devices (d: OpSDot where present, di: plain integers and
 * KVT_VK_MM_TOKS=16), for F16, Q8_0 and Q4_K weights; the two devices agree. */
static void check_batch_shapes(kvt_gpu_dev *d, kvt_gpu_kernels *k, kvt_gpu_dev *di, kvt_gpu_kernels *ki) {
    enum { rows = 5, cols = 512, max_tok = 100 };
    static const uint32_t types[3] = {KVT_TYPE_F16, KVT_TYPE_Q8_0, KVT_TYPE_Q4_K};
    static const uint32_t ns[] = {1, 7, 8, 9, 31, 32, 33, max_tok};
    float *x = malloc((size_t)max_tok * cols * 4), *one = malloc((size_t)2 * max_tok * rows * 4);
    float *y = malloc((size_t)2 * max_tok * rows * 4);
    make_x(x, max_tok, cols);
    for (int ti = 0; ti < 3; ti++) {
        size_t rb;
        unsigned char *w = make_any_weights(types[ti], rows, cols, &rb);
        kvt_gpu_wmat *m[2] = {NULL, NULL};
        kvt_gpu_dev *dev[2] = {d, di};
        kvt_gpu_kernels *ker[2] = {k, ki};
        int bad = 0, rc = 0;
        for (int v = 0; v < 2 && !rc; v++) rc = kvt_gpu_wmat_new(dev[v], types[ti], rows, cols, w, rb, &m[v]);
        CHECKF(rc == 0, "batch shapes, type %u: %s", types[ti], kvt_errmsg());
        for (int v = 0; v < 2 && !rc; v++)
            rc = gpu_mm_singles(dev[v], ker[v], m[v], x, cols, rows, max_tok, one + (size_t)v * max_tok * rows);
        for (size_t i = 0; i < sizeof ns / sizeof ns[0] && !rc; i++) {
            for (int v = 0; v < 2 && !rc; v++) {
                float *yv = y + (size_t)v * max_tok * rows;
                rc = gpu_mm(dev[v], ker[v], m[v], x, cols, rows, ns[i], yv);
                bad += !rc && memcmp(yv, one + (size_t)v * max_tok * rows, (size_t)ns[i] * rows * 4) != 0;
            }
            bad += !rc && memcmp(y, y + (size_t)max_tok * rows, (size_t)ns[i] * rows * 4) != 0;
        }
        CHECKF(bad == 0,
               "batch shapes, type %u: %d of %zu batch sizes differ from their tokens alone or between the "
               "devices",
               types[ti], bad, sizeof ns / sizeof ns[0]);
        for (int v = 0; v < 2; v++) kvt_gpu_wmat_free(m[v]);
        free(w);
    }
    free(x);
    free(one);
    free(y);
}

/* Each block's largest magnitude (signed, first) at a random scale, its other
 * values within an ulp of (j + 1/2) * amax / 127: a quotient 127 / amax (or
 * -127 / m) one ulp off moves many of them to the other integer. */
static void make_edge_x(float *x, size_t n, uint32_t block) {
    for (size_t b = 0; b < n / block; b++) {
        float *xb = x + b * block;
        float amax = ldexpf(0.5f + 0.5f * fabsf(fwd_unit()), (int)fwd_pick(0, 16) - 8);
        double step = (double)amax / 127.0;
        xb[0] = fwd_pick(0, 1) ? -amax : amax;
        for (uint32_t j = 1; j < block; j++) {
            float v = (float)(((double)fwd_pick(0, 125) + 0.5) * step);
            for (uint32_t u = fwd_pick(0, 2); u > 0; u--) v = nextafterf(v, u == 1 ? 0.0f : amax);
            xb[j] = fwd_pick(0, 1) ? -v : v;
        }
    }
}

/* The GPU's quantized activations of x (n_tok rows of cols) for weights of type (Q8_0 or Q4_K: their
 * activation formats) against the CPU's; returns how many values or scales differ, -1 on a failed check. */
static long edge_round(kvt_gpu_dev *d, kvt_gpu_kernels *k, uint32_t type, const float *x, uint32_t n_tok,
                       uint32_t cols) {
    const int kq = type == KVT_TYPE_Q4_K;
    const uint32_t bl = kq ? 256 : 32, nblk = n_tok * (cols / bl), rows = 1;
    size_t rb = kvt_wmat_row_bytes(type, cols);
    unsigned char *w = make_weights(type, rows, cols, rb);
    float y[16];
    const uint64_t words = (uint64_t)n_tok * cols / 4 + nblk + (kq ? nblk * 8 : nblk);
    uint32_t *g = malloc(words * 4);
    kvt_gpu_wmat *m = NULL;
    long off = -1;
    CHECKF(n_tok <= 16 && kvt_gpu_wmat_new(d, type, rows, cols, w, rb, &m) == 0, "%s", kvt_errmsg());
    if (m && !gpu_mm(d, k, m, x, cols, rows, n_tok, y) && !fwd_get(d, kvt_gpu_kernels_scratch(k), g, words * 4)) {
        const int8_t *gq = (const int8_t *)g;
        const float *gd = (const float *)(g + (size_t)n_tok * cols / 4);
        const int16_t *gs = (const int16_t *)(g + (size_t)n_tok * cols / 4 + nblk);
        const float *g1 = (const float *)(g + (size_t)n_tok * cols / 4 + nblk); /* Q8_1 sums */
        uint8_t q8[256];
        int8_t qk[256];
        float dd[8], s1[8];
        int16_t sums[16];
        off = 0;
        for (uint32_t t = 0; t < n_tok; t++)
            for (uint32_t c = 0; c < cols; c += 256) {
                const float *xr = x + (size_t)t * cols + c;
                const size_t at = (size_t)t * cols + c, bi = at / bl;
                if (kq) {
                    kvt_qk_quantize_acts(xr, 256, qk, dd, sums);
                    for (int i = 0; i < 256; i++) off += qk[i] != gq[at + i];
                    off += memcmp(&dd[0], &gd[bi], 4) != 0;
                    for (int i = 0; i < 16; i++) off += sums[i] != gs[bi * 16 + i];
                } else {
                    kvt_ops_active()->quantize_q8_row(xr, 256, q8, dd, s1);
                    for (int i = 0; i < 256; i++) off += (int)q8[i] - KVT_Q8_ACT_BIAS != gq[at + i];
                    off += memcmp(dd, &gd[bi], 8 * 4) != 0;
                    off += memcmp(s1, &g1[bi], 8 * 4) != 0;
                }
            }
    }
    kvt_gpu_wmat_free(m);
    free(w);
    free(g);
    return off;
}

/* Rounds of crafted rows through both activation formats; every value must be the CPU's. */
static void check_exact_acts(kvt_gpu_dev *d, kvt_gpu_kernels *k) {
    enum { n_tok = 16, cols = 512, rounds = 6 };
    float *x = malloc((size_t)n_tok * cols * 4);
    static const uint32_t types[2] = {KVT_TYPE_Q8_0, KVT_TYPE_Q4_K};
    for (int ti = 0; ti < 2; ti++) {
        long off = 0;
        for (int r = 0; r < rounds && off >= 0; r++) {
            make_edge_x(x, (size_t)n_tok * cols, ti ? 256 : 32);
            long o = edge_round(d, k, types[ti], x, n_tok, cols);
            off = o < 0 ? o : off + o;
        }
        printf("gpu quant: %s activations at rounding edges: %ld of %d values and scales differ from the CPU's\n",
               ti ? "Q8_K" : "Q8_0/Q8_1", off, rounds * n_tok * cols);
        CHECKF(off == 0, "%s activations at rounding edges: %ld differ from the CPU's", ti ? "Q8_K" : "Q8_0", off);
    }
    free(x);
}

int main(void) {
    gpu_test_start();
    fwd_seed("gpu quant");
    kvt_gpu_dev *d = NULL, *di = NULL;
    CHECKF(kvt_gpu_open(0, &d) == 0, "%s", kvt_errmsg());
    setenv("KVT_VK_MM_TOKS", "12", 1);
    CHECKF(kvt_gpu_open(0, &di) != 0 && strstr(kvt_errmsg(), "KVT_VK_MM_TOKS"), "KVT_VK_MM_TOKS=12 opened: %s",
           kvt_errmsg());
    setenv("KVT_VK_NO_INT_DOT", "1", 1);
    setenv("KVT_VK_MM_TOKS", "16", 1);
    CHECKF(kvt_gpu_open(0, &di) == 0, "%s", kvt_errmsg());
    unsetenv("KVT_VK_NO_INT_DOT");
    unsetenv("KVT_VK_MM_TOKS");
    kvt_gpu_kernels *k = NULL, *ki = NULL;
    if (d && di) {
        printf("gpu quant: integer dot products (OpSDot) %s on device 0, %u tokens per matmul workgroup past 8; "
               "the second device has them off, %u\n",
               kvt_gpu_dev_info(d)->int_dot ? "in use" : "absent", kvt_gpu_dev_info(d)->mm_toks,
               kvt_gpu_dev_info(di)->mm_toks);
        CHECK(!kvt_gpu_dev_info(di)->int_dot);
        CHECK(kvt_gpu_dev_info(di)->mm_toks == 16);
        CHECKF(kvt_gpu_kernels_new(d, &k) == 0, "%s", kvt_errmsg());
        CHECKF(kvt_gpu_kernels_new(di, &ki) == 0, "%s", kvt_errmsg());
    }
    if (k && ki) {
        for (int ti = 0; ti < (int)(sizeof TYPES / sizeof TYPES[0]); ti++) {
            uint32_t bl = TYPES[ti].block, maxb = bl == 32 ? 24 : 4;
            check_case(d, k, di, ki, ti, 1, bl, 1);
            check_case(d, k, di, ki, ti, 70, bl * maxb, 9);
            for (int i = 0; i < 2; i++)
                check_case(d, k, di, ki, ti, fwd_pick(1, 80), bl * fwd_pick(1, maxb), fwd_pick(1, 12));
        }
        check_batch_shapes(d, k, di, ki);
        check_two_in_one(d, k);
        check_exact_acts(d, k);
        printf("gpu quant: largest error against the CPU's matmul %.3g of sum|w x| (tolerance %g)\n", max_err, QTOL);
    }
    kvt_gpu_kernels_free(k);
    kvt_gpu_kernels_free(ki);
    kvt_gpu_close(d);
    kvt_gpu_close(di);
    gpu_test_no_validation_messages(0);
    return kvt_test_done("test_gpu_quant");
}
