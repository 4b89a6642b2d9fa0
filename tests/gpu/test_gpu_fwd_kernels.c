// SPDX-License-Identifier: MIT
/* The forward pass's matmul and elementwise GPU kernels against plain C, on
 * Vulkan device 0 (lavapipe here), over a sampled sweep of shapes (the seed is
 * printed; $KVT_GPU_SEED replays one):
 *  - kvt_gpu_rec_matmul with F32, F16, BF16 and Q8_0 weight matrices (rows
 *    1..300, cols up to 1024, batch 1..64, rows written at y_off of ldy-wide
 *    rows): within MM_TOL of a double reference over the exactly dequantized
 *    weights (d * q for Q8_0, whose activations are also quantized to Q8_0 as
 *    the CPU does: the reference takes them as d_x * q_x; BF16's activations
 *    are rounded to bf16 as the CPU does, and so in the reference), relative
 *    to sum |w x|; nothing outside the rows written;
 *    a token alone gets the bits of its row in a batch; on a second device
 *    with a 64 KiB binding limit and staged transfers, where the matrix is many
 *    slices, the same bits as unsliced; a row over the limit and an
 *    unsupported type are refused;
 *  - rope (NORM and NEOX), add and silu_mul against the CPU's formulas.
 * No validation message may appear. Skips (77) without a device. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "gpu_fwd_test.h"
#include "ops.h"
#include "types.h"

/* f32 accumulation of <= 1024 terms: 16 sequential fmas per invocation, then a
 * 6-level tree, each step within 2^-24 relative: 1e-5 of sum |w x| is wide. */
#define MM_TOL 1e-5
/* Q8_0 activations: a value whose x * (127/amax) lies within a few ulps of a
 * half is rounded to one integer or the other depending on the last bit of
 * the quotient, and a device's division need not be correctly rounded (the
 * shader corrects it with one fma step, which a driver may not fuse). Tokens
 * with such a value may be off by one quantization step of it: 2e-3 of
 * sum |w x| bounds that for these shapes (observed up to 6e-4). */
#define MM_TOL_NEAR_TIE 2e-3
/* rope: two roundings (the product, the fma) of |a| + |b| scale values. */
#define ROPE_TOL 1e-6
/* silu: exp and a division at the device's precision (a few ulp). */
#define SILU_TOL 1e-5
#define SENTINEL 12345.0f

static double max_mm_err, max_rope_err, max_silu_err;

/* A random matrix of type in the CPU's layout (row_bytes apart), and its dequantized f32 values into wf. */
static void *make_weights(uint32_t type, uint32_t rows, uint32_t cols, size_t row_bytes, float *wf) {
    unsigned char *w = calloc(rows, row_bytes);
    for (uint32_t r = 0; r < rows; r++) {
        unsigned char *row = w + (size_t)r * row_bytes;
        float *o = wf + (size_t)r * cols;
        for (uint32_t c = 0; c < cols; c++) {
            if (type == KVT_TYPE_F32) {
                o[c] = fwd_unit();
                memcpy(row + c * 4, &o[c], 4);
            }
            if (type == KVT_TYPE_F16) {
                uint16_t h = kvt_f32_to_f16(fwd_unit());
                memcpy(row + c * 2, &h, 2);
                o[c] = kvt_f16_to_f32(h);
            }
            if (type == KVT_TYPE_BF16) { /* across magnitudes */
                uint16_t h = kvt_f32_to_bf16(ldexpf(fwd_unit(), (int)fwd_pick(0, 40) - 20));
                memcpy(row + c * 2, &h, 2);
                o[c] = kvt_bf16_to_f32(h);
            }
            if (type == KVT_TYPE_Q8_0) {
                unsigned char *blk = row + c / 32 * 34;
                if (c % 32 == 0) { /* scales across magnitudes, subnormal f16 ones too */
                    uint16_t d = kvt_f32_to_f16(ldexpf(fwd_unit(), -(int)fwd_pick(0, 20)));
                    memcpy(blk, &d, 2);
                }
                uint16_t d;
                memcpy(&d, blk, 2);
                int8_t q = (int8_t)(fwd_next() >> 24);
                blk[2 + c % 32] = (unsigned char)q;
                o[c] = kvt_f16_to_f32(d) * (float)q;
            }
        }
    }
    return w;
}

/* x as a Q8_0 matmul sees it: each block of 32 quantized as the CPU quantizes
 * activations (d = amax/127 rounded to f16, q = x * (127/amax) rounded half
 * to even), then d * q. */
static void q8_activations(const float *x, size_t n, size_t cols, float *out, unsigned char *near_tie) {
    for (size_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xb[i]));
        float id = amax != 0 ? 127.0f / amax : 0, d = kvt_f16_to_f32(kvt_f32_to_f16(amax / 127.0f));
        for (int i = 0; i < 32; i++) {
            float p = xb[i] * id, frac = fabsf(p - truncf(p));
            if (fabsf(frac - 0.5f) <= 4 * fabsf(p) * FLT_EPSILON) near_tie[b * 32 / cols] = 1;
            out[b * 32 + i] = d * nearbyintf(p);
        }
    }
}

/* y (n_tok rows of ldy, SENTINEL first) = W x on the device; 0 or a failed check. */
static int run_mm(kvt_gpu_dev *d, kvt_gpu_kernels *k, const kvt_gpu_wmat *w, const float *x, uint32_t cols,
                  uint32_t n_tok, uint32_t ldy, uint32_t y_off, float *y) {
    size_t ny = (size_t)n_tok * ldy;
    for (size_t i = 0; i < ny; i++) y[i] = SENTINEL;
    kvt_gpu_buf *bx = fwd_buf(d, (uint64_t)n_tok * cols * 4, x), *by = fwd_buf(d, ny * 4, y);
    int rc = -1;
    if (bx && by) {
        rc = kvt_gpu_begin(d);
        if (!rc) rc = fwd_submit(d, kvt_gpu_rec_matmul(k, w, by, ldy, y_off, bx, n_tok), "matmul");
        if (!rc) rc = fwd_get(d, by, y, ny * 4);
    }
    kvt_gpu_buf_free(bx);
    kvt_gpu_buf_free(by);
    return rc;
}

static void mm_compare(const float *wf, const float *x, const float *y, uint32_t rows, uint32_t cols, uint32_t n_tok,
                       uint32_t ldy, uint32_t y_off, const unsigned char *near_tie, const char *what) {
    int over = 0, touched = 0;
    for (uint32_t t = 0; t < n_tok; t++) {
        for (uint32_t i = 0; i < ldy; i++)
            touched += (i < y_off || i >= y_off + rows) && y[(size_t)t * ldy + i] != SENTINEL;
        for (uint32_t r = 0; r < rows; r++) {
            double ref = 0, mag = 0;
            for (uint32_t c = 0; c < cols; c++) {
                double p = (double)wf[(size_t)r * cols + c] * x[(size_t)t * cols + c];
                ref += p;
                mag += fabs(p);
            }
            double e = fabs(y[(size_t)t * ldy + y_off + r] - ref) / (mag > 0 ? mag : 1);
            if (near_tie && near_tie[t]) over += !(e <= MM_TOL_NEAR_TIE);
            else over += !(e <= MM_TOL);
            if (!(near_tie && near_tie[t])) max_mm_err = e > max_mm_err ? e : max_mm_err;
        }
    }
    CHECKF(over == 0, "%s %ux%u x %u: %d results off by more than %g", what, rows, cols, n_tok, over, MM_TOL);
    CHECKF(touched == 0, "%s %ux%u x %u: %d values outside the rows written changed", what, rows, cols, n_tok, touched);
}

/* Long: one case end to end: weights, the batch, the reference, decode steps, the sliced device. */
static void check_matmul(kvt_gpu_dev *d, kvt_gpu_dev *sliced, kvt_gpu_kernels *k, kvt_gpu_kernels *ks, uint32_t type,
                         uint32_t rows, uint32_t cols, uint32_t n_tok) {
    static const char *names[] =
        {[KVT_TYPE_F32] = "F32", [KVT_TYPE_F16] = "F16", [KVT_TYPE_BF16] = "BF16", [KVT_TYPE_Q8_0] = "Q8_0"};
    size_t row_bytes = type == KVT_TYPE_F32 ? cols * 4u : type == KVT_TYPE_Q8_0 ? cols / 32u * 34u : cols * 2u;
    row_bytes += fwd_pick(0, 1) * 6; /* rows with a gap after them, sometimes */
    uint32_t y_off = fwd_pick(0, 3), ldy = rows + y_off + fwd_pick(0, 2);
    float *wf = malloc((size_t)rows * cols * 4), *x = malloc((size_t)n_tok * cols * 4);
    float *y = malloc((size_t)n_tok * ldy * 4), *y1 = malloc((size_t)ldy * 4);
    void *w = make_weights(type, rows, cols, row_bytes, wf);
    for (size_t i = 0; i < (size_t)n_tok * cols; i++) x[i] = fwd_unit();
    kvt_gpu_wmat *m = NULL;
    int rc = kvt_gpu_wmat_new(d, type, rows, cols, w, row_bytes, &m);
    CHECKF(rc == 0, "%s", kvt_errmsg());
    if (!rc && !run_mm(d, k, m, x, cols, n_tok, ldy, y_off, y)) {
        float *xr = x;
        unsigned char *tie = NULL;
        if (type == KVT_TYPE_Q8_0) {
            tie = calloc(n_tok, 1);
            q8_activations(x, (size_t)n_tok * cols, cols, xr = malloc((size_t)n_tok * cols * 4), tie);
        }
        if (type == KVT_TYPE_BF16) {
            xr = malloc((size_t)n_tok * cols * 4);
            for (size_t i = 0; i < (size_t)n_tok * cols; i++) xr[i] = kvt_bf16_to_f32(kvt_f32_to_bf16(x[i]));
        }
        mm_compare(wf, xr, y, rows, cols, n_tok, ldy, y_off, tie, names[type]);
        if (xr != x) free(xr);
        free(tie);
        uint32_t toks[2] = {n_tok - 1, n_tok / 2};
        for (int i = 0; i < (n_tok > 2 ? 2 : 1); i++) {
            uint32_t t = toks[i];
            if (!run_mm(d, k, m, x + (size_t)t * cols, cols, 1, ldy, y_off, y1))
                CHECKF(memcmp(y1, y + (size_t)t * ldy, (size_t)ldy * 4) == 0,
                       "%s %ux%u: token %u alone differs from its row in a batch of %u", names[type], rows, cols, t,
                       n_tok);
        }
    }
    /* the sliced device holds x and y of a few tokens only (64 KiB buffers) */
    uint32_t ns = KVT_MIN(n_tok, (uint32_t)(kvt_gpu_max_binding(sliced) / 4 / KVT_MAX(cols, ldy)));
    kvt_gpu_wmat *ms = NULL;
    if (!rc && ns > 0) {
        rc = kvt_gpu_wmat_new(sliced, type, rows, cols, w, row_bytes, &ms);
        CHECKF(rc == 0, "sliced: %s", kvt_errmsg());
        float *ys = malloc((size_t)ns * ldy * 4);
        if (!rc && !run_mm(sliced, ks, ms, x, cols, ns, ldy, y_off, ys))
            CHECKF(memcmp(ys, y, (size_t)ns * ldy * 4) == 0,
                   "%s %ux%u x %u: sliced (%llu bytes in %llu-byte "
                   "bindings) differs from unsliced",
                   names[type], rows, cols, ns, (unsigned long long)kvt_gpu_wmat_bytes(ms),
                   (unsigned long long)kvt_gpu_max_binding(sliced));
        free(ys);
    }
    kvt_gpu_wmat_free(m);
    kvt_gpu_wmat_free(ms);
    free(w);
    free(wf);
    free(x);
    free(y);
    free(y1);
}

/* Refusals: a type without a kernel (IQ3_S, which the CPU does not run
 * either), Q8_0 cols off the block, a row over the binding limit, y too narrow. */
static void check_matmul_refusals(kvt_gpu_dev *d, kvt_gpu_dev *sliced, kvt_gpu_kernels *k) {
    static float data[20000];
    kvt_gpu_wmat *m = NULL;
    static const uint32_t runs[] = {KVT_TYPE_F32,  KVT_TYPE_F16,  KVT_TYPE_BF16, KVT_TYPE_Q8_0,   KVT_TYPE_Q4_0,
                                    KVT_TYPE_Q4_1, KVT_TYPE_Q5_0, KVT_TYPE_Q5_1, KVT_TYPE_IQ4_NL, KVT_TYPE_Q2_K,
                                    KVT_TYPE_Q3_K, KVT_TYPE_Q4_K, KVT_TYPE_Q5_K, KVT_TYPE_Q6_K,   KVT_TYPE_IQ4_XS};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++)
        CHECKF(kvt_gpu_wmat_supported(runs[i]), "type %u has a kernel", runs[i]);
    CHECK(!kvt_gpu_wmat_supported(KVT_TYPE_IQ3_S) && !kvt_gpu_wmat_supported(KVT_TYPE_Q8_1));
    CHECK(kvt_gpu_wmat_new(d, KVT_TYPE_IQ3_S, 4, 256, data, 110, &m) == KVT_EUNSUPPORTED && !m);
    CHECK(strstr(kvt_errmsg(), "type 21") != NULL);
    CHECK(kvt_gpu_wmat_new(d, KVT_TYPE_Q8_0, 4, 40, data, 68, &m) == KVT_EARG && strstr(kvt_errmsg(), "40"));
    CHECK(kvt_gpu_wmat_new(d, KVT_TYPE_F32, 2, 8, data, 16, &m) == KVT_EARG && strstr(kvt_errmsg(), "row_bytes"));
    CHECKF(kvt_gpu_wmat_new(sliced, KVT_TYPE_F32, 1, 20000, data, 80000, &m) == KVT_ELIMIT && !m, "%s", kvt_errmsg());
    CHECK(kvt_gpu_wmat_new(d, KVT_TYPE_F32, 8, 8, data, 32, &m) == 0);
    kvt_gpu_buf *b = fwd_buf(d, 4096, NULL);
    if (m && b && !kvt_gpu_begin(d)) {
        CHECK(kvt_gpu_rec_matmul(k, m, b, 7, 0, b, 1) == KVT_EARG && strstr(kvt_errmsg(), "ldy"));
        CHECK(kvt_gpu_rec_matmul(k, m, b, 8, 0, b, 600) == KVT_ELIMIT && strstr(kvt_errmsg(), "x needs"));
        fwd_submit(d, 0, "refusals");
    }
    kvt_gpu_buf_free(b);
    kvt_gpu_wmat_free(m);
}

static void rope_ref(float *x, const float *cs, const float *sn, uint32_t n_heads, uint32_t hd, uint32_t rd, int neox,
                     uint32_t n_tok) {
    for (uint32_t t = 0; t < n_tok; t++)
        for (uint32_t h = 0; h < n_heads; h++)
            for (uint32_t i = 0; i < rd / 2; i++) {
                float *v = x + ((size_t)t * n_heads + h) * hd;
                uint32_t ia = neox ? i : 2 * i, ib = neox ? i + rd / 2 : 2 * i + 1;
                float a = v[ia], b = v[ib], c = cs[(size_t)t * rd / 2 + i], s = sn[(size_t)t * rd / 2 + i];
                v[ia] = fmaf(a, c, -(b * s));
                v[ib] = fmaf(a, s, b * c);
            }
}

/* Long: rope of a random shape against rope_ref, then add and silu_mul over its rows. */
static void check_elementwise(kvt_gpu_dev *d, kvt_gpu_kernels *k) {
    uint32_t n_heads = fwd_pick(1, 9), hd = 2 * fwd_pick(16, 128), rd = 2 * fwd_pick(1, hd / 2), n_tok = fwd_pick(1, 64);
    int neox = (int)fwd_pick(0, 1);
    size_t n = (size_t)n_tok * n_heads * hd, na = (size_t)n_tok * rd / 2;
    float *x = malloc(n * 4), *y = malloc(n * 4), *ref = malloc(n * 4), *got = malloc(n * 4);
    float *cs = malloc(na * 4), *sn = malloc(na * 4);
    for (size_t i = 0; i < n; i++) x[i] = fwd_unit() * 4, y[i] = fwd_unit() * 4;
    for (size_t i = 0; i < na; i++) {
        double a = fwd_unit() * 100.0;
        cs[i] = (float)cos(a), sn[i] = (float)sin(a);
    }
    kvt_gpu_buf *bx = fwd_buf(d, n * 4, x), *by = fwd_buf(d, n * 4, y), *bc = fwd_buf(d, na * 4, cs);
    kvt_gpu_buf *bs = fwd_buf(d, na * 4, sn);
    memcpy(ref, x, n * 4);
    rope_ref(ref, cs, sn, n_heads, hd, rd, neox, n_tok);
    if (bx && by && bc && bs && !kvt_gpu_begin(d) &&
        !fwd_submit(d, kvt_gpu_rec_rope(k, bx, bc, bs, n_heads, hd, rd, neox, n_tok), "rope") &&
        !fwd_get(d, bx, got, n * 4)) {
        int over = 0;
        for (size_t i = 0; i < n; i++) {
            double e = fabs((double)got[i] - ref[i]) / 8.0; /* |a| + |b| <= 8 */
            max_rope_err = e > max_rope_err ? e : max_rope_err;
            over += !(e <= ROPE_TOL);
        }
        CHECKF(over == 0, "rope %s %u heads x %u (rope %u) x %u: %d values off by more than %g", neox ? "neox" : "norm",
               n_heads, hd, rd, n_tok, over, ROPE_TOL);
    }
    /* add (exact: one correctly rounded sum), then silu_mul of the sum and y */
    memcpy(ref, got, n * 4);
    int ok = bx && by && !kvt_gpu_begin(d);
    if (ok) {
        int rc = kvt_gpu_rec_add(k, bx, by, (uint32_t)n);
        if (!rc) rc = kvt_gpu_rec_barrier(d);
        if (!rc) rc = kvt_gpu_rec_silu_mul(k, bx, by, (uint32_t)n);
        ok = !fwd_submit(d, rc, "add, silu_mul") && !fwd_get(d, bx, got, n * 4);
    }
    int over = 0;
    for (size_t i = 0; ok && i < n; i++) {
        float s = ref[i] + y[i];
        double want = (double)s / (1.0 + exp(-(double)s)) * y[i];
        double e = fabs(got[i] - want) / (fabs(want) > 1e-3 ? fabs(want) : 1e-3);
        max_silu_err = e > max_silu_err ? e : max_silu_err;
        over += !(e <= SILU_TOL);
    }
    CHECKF(over == 0, "add + silu_mul over %zu: %d values off by more than %g", n, over, SILU_TOL);
    kvt_gpu_buf *f[] = {bx, by, bc, bs};
    for (int i = 0; i < 4; i++) kvt_gpu_buf_free(f[i]);
    free(x), free(y), free(ref), free(got), free(cs), free(sn);
}

/* A second device 0 with 64 KiB bindings and staged transfers (the environment is read at open). */
static kvt_gpu_dev *open_sliced(void) {
    char *old = getenv("KVT_VK_MAX_BINDING");
    kvt_gpu_dev *d = NULL;
    setenv("KVT_VK_MAX_BINDING", "65536", 1);
    setenv("KVT_VK_FORCE_STAGING", "1", 1);
    int rc = kvt_gpu_open(0, &d);
    CHECKF(rc == 0, "%s", kvt_errmsg());
    if (old) setenv("KVT_VK_MAX_BINDING", old, 1);
    else unsetenv("KVT_VK_MAX_BINDING");
    unsetenv("KVT_VK_FORCE_STAGING");
    return d;
}

int main(void) {
    gpu_test_start();
    fwd_seed("gpu fwd kernels");
    kvt_gpu_dev *d = NULL, *ds = open_sliced();
    CHECKF(kvt_gpu_open(0, &d) == 0, "%s", kvt_errmsg());
    kvt_gpu_kernels *k = NULL, *ks = NULL;
    if (d && ds) {
        printf("gpu fwd kernels: validation layer %s\n", kvt_gpu_validating(d) ? "on" : "off");
        CHECKF(kvt_gpu_kernels_new(d, &k) == 0, "%s", kvt_errmsg());
        CHECKF(kvt_gpu_kernels_new(ds, &ks) == 0, "%s", kvt_errmsg());
    }
    if (k && ks) {
        static const uint32_t types[4] = {KVT_TYPE_F32, KVT_TYPE_F16, KVT_TYPE_BF16, KVT_TYPE_Q8_0};
        static const uint32_t fixed[][3] = {{1, 32, 1}, {300, 1024, 3}, {64, 64, 64}, {7, 96, 2}};
        for (int t = 0; t < 4; t++) {
            for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
                check_matmul(d, ds, k, ks, types[t], fixed[i][0], fixed[i][1], fixed[i][2]);
            for (int i = 0; i < 8; i++) {
                uint32_t cols = types[t] == KVT_TYPE_Q8_0 ? 32 * fwd_pick(1, 32) : fwd_pick(1, 1024);
                check_matmul(d, ds, k, ks, types[t], fwd_pick(1, 300), cols, fwd_pick(1, 64));
            }
        }
        check_matmul_refusals(d, ds, k);
        for (int i = 0; i < 12; i++) check_elementwise(d, k);
        printf("gpu fwd kernels: matmul max error %.3g of sum|w*x| (tolerance %g); rope %.3g (tolerance %g); "
               "add + silu_mul %.3g relative (tolerance %g)\n",
               max_mm_err, MM_TOL, max_rope_err, ROPE_TOL, max_silu_err, SILU_TOL);
    }
    kvt_gpu_kernels_free(k);
    kvt_gpu_kernels_free(ks);
    kvt_gpu_close(d);
    kvt_gpu_close(ds);
    gpu_test_no_validation_messages(0);
    return kvt_test_done("test_gpu_fwd_kernels");
}
