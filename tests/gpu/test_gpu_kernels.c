// SPDX-License-Identifier: MIT
/* The first GPU kernels against the CPU, on Vulkan device 0 (lavapipe here),
 * over a sampled sweep of shapes (rows/cols 1..1024 with odd sizes, batch
 * 1..64; the seed is printed and $KVT_GPU_SEED replays one):
 *  - matmul_f16 (y = W x, W rows in f16): within MATMUL_TOL of a double
 *    reference, relative to sum |w x| of the row;
 *  - rmsnorm: within RMS_TOL of the CPU's kvt_rmsnorm, relative to |y|;
 *  - for both, a decode step (batch 1) of a token equals that token's row of
 *    the larger batch bit for bit (one kernel, one reduction order, any batch).
 * No validation message may appear. Skips (77) without a device. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "gpu_test.h"
#include "ops.h"

/* f32 accumulation over <= 1024 terms: 16 sequential fmas per invocation and a
 * 6-level tree, each step at most 2^-24 relative; 1e-5 leaves a wide margin. */
#define MATMUL_TOL 1e-5
/* Different sum order and a float (not double) mean, then two products. */
#define RMS_TOL 1e-5

static uint64_t rng;
static uint32_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float unit(void) { return (float)next() / 4294967296.0f * 2.0f - 1.0f; }
static uint32_t pick(uint32_t lo, uint32_t hi) { return lo + next() % (hi - lo + 1); }

static double max_mm_err, max_rms_err;

static kvt_gpu_buf *dev_buf(kvt_gpu_dev *d, uint64_t bytes, const void *data) {
    kvt_gpu_buf *b = NULL;
    int rc = kvt_gpu_buf_new(d, KVT_GPU_DEVICE, bytes, &b);
    CHECKF(rc == 0, "%s", kvt_errmsg());
    if (!rc && data) CHECKF(kvt_gpu_upload(d, b, 0, data, bytes) == 0, "%s", kvt_errmsg());
    return b;
}

/* Runs y = W x for n_tok tokens of x on the device into out. */
static int run_matmul(kvt_gpu_dev *d, kvt_gpu_kernels *k, kvt_gpu_buf *w, const float *x, uint32_t rows, uint32_t cols,
                      uint32_t n_tok, float *out) {
    kvt_gpu_buf *bx = dev_buf(d, (uint64_t)n_tok * cols * 4, x), *by = dev_buf(d, (uint64_t)n_tok * rows * 4, NULL);
    int rc = -1;
    if (bx && by) {
        rc = kvt_gpu_begin(d);
        if (!rc) rc = kvt_gpu_rec_matmul_f16(k, by, w, bx, rows, cols, n_tok);
        if (!rc) rc = kvt_gpu_submit(d);
        if (!rc) rc = kvt_gpu_download(d, by, 0, out, (uint64_t)n_tok * rows * 4);
        CHECKF(rc == 0, "matmul %ux%u x %u: %s", rows, cols, n_tok, kvt_errmsg());
    }
    kvt_gpu_buf_free(bx);
    kvt_gpu_buf_free(by);
    return rc;
}

static void check_matmul(kvt_gpu_dev *d, kvt_gpu_kernels *k, uint32_t rows, uint32_t cols, uint32_t n_tok) {
    uint64_t wn = (uint64_t)rows * cols;
    uint16_t *w = calloc(wn + 1, sizeof *w); /* + 1: the shader reads halves in pairs */
    float *wf = malloc(wn * sizeof *wf), *x = malloc((size_t)n_tok * cols * 4), *y = malloc((size_t)n_tok * rows * 4);
    float *y1 = malloc((size_t)rows * 4);
    for (uint64_t i = 0; i < wn; i++) wf[i] = kvt_f16_to_f32(w[i] = kvt_f32_to_f16(unit()));
    for (uint64_t i = 0; i < (uint64_t)n_tok * cols; i++) x[i] = unit();
    kvt_gpu_buf *bw = dev_buf(d, (wn + 1) / 2 * 4, w);
    if (bw && !run_matmul(d, k, bw, x, rows, cols, n_tok, y)) {
        int over = 0;
        for (uint32_t t = 0; t < n_tok; t++)
            for (uint32_t r = 0; r < rows; r++) {
                double ref = 0, mag = 0;
                for (uint32_t c = 0; c < cols; c++) {
                    double p = (double)wf[(uint64_t)r * cols + c] * x[(uint64_t)t * cols + c];
                    ref += p;
                    mag += fabs(p);
                }
                double e = fabs(y[(uint64_t)t * rows + r] - ref) / (mag > 0 ? mag : 1);
                if (e > max_mm_err) max_mm_err = e;
                over += e > MATMUL_TOL;
            }
        CHECKF(over == 0, "matmul %ux%u x %u: %d results off by more than %g", rows, cols, n_tok, over, MATMUL_TOL);
        /* decode: the last token alone, and (batches over 2) one from the middle */
        uint32_t toks[2] = {n_tok - 1, n_tok / 2};
        for (int i = 0; i < (n_tok > 2 ? 2 : 1); i++) {
            uint32_t t = toks[i];
            if (run_matmul(d, k, bw, x + (uint64_t)t * cols, rows, cols, 1, y1)) continue;
            CHECKF(memcmp(y1, y + (uint64_t)t * rows, (size_t)rows * 4) == 0,
                   "matmul %ux%u: token %u alone differs from its row in a batch of %u", rows, cols, t, n_tok);
        }
    }
    kvt_gpu_buf_free(bw);
    free(w);
    free(wf);
    free(x);
    free(y);
    free(y1);
}

static int run_rms(kvt_gpu_dev *d, kvt_gpu_kernels *k, kvt_gpu_buf *g, const float *x, uint32_t n, uint32_t n_tok,
                   float *out) {
    uint64_t bytes = (uint64_t)n_tok * n * 4;
    kvt_gpu_buf *bx = dev_buf(d, bytes, x), *by = dev_buf(d, bytes, NULL);
    int rc = -1;
    if (bx && by) {
        rc = kvt_gpu_begin(d);
        if (!rc) rc = kvt_gpu_rec_rmsnorm(k, by, bx, g, n, n_tok, 1e-5f);
        if (!rc) rc = kvt_gpu_submit(d);
        if (!rc) rc = kvt_gpu_download(d, by, 0, out, bytes);
        CHECKF(rc == 0, "rmsnorm %u x %u: %s", n, n_tok, kvt_errmsg());
    }
    kvt_gpu_buf_free(bx);
    kvt_gpu_buf_free(by);
    return rc;
}

static void check_rmsnorm(kvt_gpu_dev *d, kvt_gpu_kernels *k, uint32_t n, uint32_t n_tok) {
    size_t total = (size_t)n_tok * n;
    float *x = malloc(total * 4), *g = malloc((size_t)n * 4), *y = malloc(total * 4), *ref = malloc(total * 4);
    float *y1 = malloc((size_t)n * 4);
    float scale = (float)(1u << (next() % 12)) / 64.0f; /* rows of different magnitudes */
    for (size_t i = 0; i < total; i++) x[i] = unit() * scale;
    for (uint32_t i = 0; i < n; i++) g[i] = 1.0f + unit() * 0.5f;
    kvt_gpu_buf *bg = dev_buf(d, (uint64_t)n * 4, g);
    if (bg && !run_rms(d, k, bg, x, n, n_tok, y)) {
        int over = 0;
        for (uint32_t t = 0; t < n_tok; t++) kvt_rmsnorm(ref + (size_t)t * n, x + (size_t)t * n, g, n, 1e-5f);
        for (size_t i = 0; i < total; i++) {
            double e = fabs((double)y[i] - ref[i]) / (fabs(ref[i]) > 1e-30 ? fabs(ref[i]) : 1);
            if (e > max_rms_err) max_rms_err = e;
            over += e > RMS_TOL;
        }
        CHECKF(over == 0, "rmsnorm %u x %u: %d results off by more than %g", n, n_tok, over, RMS_TOL);
        uint32_t t = n_tok / 2;
        if (!run_rms(d, k, bg, x + (size_t)t * n, n, 1, y1))
            CHECKF(memcmp(y1, y + (size_t)t * n, (size_t)n * 4) == 0,
                   "rmsnorm %u: token %u alone differs from its row in a batch of %u", n, t, n_tok);
    }
    kvt_gpu_buf_free(bg);
    free(x);
    free(g);
    free(y);
    free(ref);
    free(y1);
}

int main(void) {
    gpu_test_start();
    const char *s = getenv("KVT_GPU_SEED");
    uint64_t seed = s ? strtoull(s, NULL, 10) : (uint64_t)time(NULL);
    printf("gpu kernels: seed %llu (KVT_GPU_SEED=%llu replays it)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    rng = seed * 0x9E3779B97F4A7C15ull | 1;
    kvt_gpu_dev *d;
    int rc = kvt_gpu_open(0, &d);
    CHECKF(rc == 0, "%s", kvt_errmsg());
    if (rc) return kvt_test_done("test_gpu_kernels");
    printf("gpu kernels: validation layer %s\n", kvt_gpu_validating(d) ? "on" : "off");
    kvt_gpu_kernels *k;
    rc = kvt_gpu_kernels_new(d, &k);
    CHECKF(rc == 0, "%s", kvt_errmsg());
    if (!rc) {
        /* the edges, then a random sample */
        static const uint32_t fixed[][3] = {{1, 1, 1},   {1, 1024, 64},   {1024, 1, 3},     {63, 65, 1},
                                            {64, 64, 2}, {1023, 1024, 5}, {1024, 1024, 64}, {40000, 8, 2}};
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
            check_matmul(d, k, fixed[i][0], fixed[i][1], fixed[i][2]);
        for (int i = 0; i < 24; i++) check_matmul(d, k, pick(1, 1024), pick(1, 1024), pick(1, 64));
        static const uint32_t rfixed[][2] = {{1, 1}, {1, 64}, {63, 7}, {64, 2}, {65, 33}, {1024, 64}, {4096, 3}};
        for (size_t i = 0; i < sizeof rfixed / sizeof rfixed[0]; i++) check_rmsnorm(d, k, rfixed[i][0], rfixed[i][1]);
        for (int i = 0; i < 24; i++) check_rmsnorm(d, k, pick(1, 1024), pick(1, 64));
        printf("gpu kernels: matmul_f16 max error %.3g of sum|w*x| (tolerance %g); rmsnorm max error %.3g of |y| against "
               "kvt_rmsnorm (tolerance %g)\n",
               max_mm_err, MATMUL_TOL, max_rms_err, RMS_TOL);
        kvt_gpu_kernels_free(k);
    }
    kvt_gpu_close(d);
    gpu_test_no_validation_messages(0);
    return kvt_test_done("test_gpu_kernels");
}
