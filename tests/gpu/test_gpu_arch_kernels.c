// SPDX-License-Identifier: MIT
/* The architecture variations' GPU kernels against the CPU engine's own
 * functions (arch_ops.c) and plain C, on Vulkan device 0 (lavapipe here),
 * over sampled sizes (the seed is printed; $KVT_GPU_SEED replays one):
 *  - add_bias and scale: exact (one rounding each, as in C);
 *  - softcap: within SOFTCAP_TOL of kvt_softcap, over values from 1e-6 to
 *    1e30 of either sign: no NaN or infinity where tanh saturates;
 *  - gelu_mul: kvt_gelu_mul's f16-rounded GELU, most values bit for bit and
 *    none more than one f16 step away (a tanh a few ulp off can cross a
 *    rounding boundary), on both sides of the +-10 cut-offs;
 *  - every kernel checks its shapes: a buffer too small or a cap of 0 is
 *    refused naming it.
 * No validation message may appear. Skips (77) without a device. */
#include <math.h>
#include <string.h>

#include "arch_ops.h"
#include "gpu_fwd_test.h"

/* tanh written out with exp: a few ulp of the result, relative. */
#define SOFTCAP_TOL 2e-6

static double max_softcap_err;
static size_t gelu_exact, gelu_total;

/* n values across the ranges the kernels meet, and the extremes. */
static void fill_values(float *x, size_t n, float spread) {
    static const float edges[] = {0.0f,  -0.0f,  1e-6f,   -1e-6f, 0.125f, -0.125f, 9.99f,
                                  10.0f, -10.0f, -10.01f, 1e4f,   -1e4f,  1e30f,   -1e30f};
    for (size_t i = 0; i < n; i++) {
        if (i < KVT_ARRAY_LEN(edges)) x[i] = edges[i];
        else x[i] = fwd_unit() * spread * (fwd_pick(0, 3) == 0 ? 10.0f : 1.0f);
    }
}

/* Runs one recorded kernel (rc from recording it) and downloads x's n floats into got. */
static int run_get(kvt_gpu_dev *d, int rc, const char *what, kvt_gpu_buf *x, float *got, size_t n) {
    return fwd_submit(d, rc, what) || fwd_get(d, x, got, n * 4);
}

/* Long: bias and scale exactly, then softcap and gelu_mul against arch_ops.c. */
static void check_kernels(kvt_gpu_dev *d, kvt_gpu_kernels *k) {
    uint32_t width = fwd_pick(1, 300), rows = fwd_pick(1, 40);
    size_t n = (size_t)width * rows;
    float *x = malloc(n * 4), *b = malloc(width * 4), *u = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
    fill_values(x, n, 4.0f);
    for (uint32_t i = 0; i < width; i++) b[i] = fwd_unit() * 2.0f;
    for (size_t i = 0; i < n; i++) u[i] = fwd_unit() * 3.0f;
    kvt_gpu_buf *bx = fwd_buf(d, n * 4, x), *bb = fwd_buf(d, width * 4, b), *bu = fwd_buf(d, n * 4, u);
    const float s = fwd_unit() * 2.0f, cap = 0.5f + (float)fwd_pick(0, 60);
    if (!bx || !bb || !bu || kvt_gpu_begin(d)) goto out;
    int rc = kvt_gpu_rec_add_bias(k, bx, bb, width, rows);
    if (!rc) rc = kvt_gpu_rec_barrier(d);
    if (!rc) rc = kvt_gpu_rec_scale(k, bx, (uint32_t)n, s);
    if (run_get(d, rc, "add_bias, scale", bx, got, n)) goto out;
    int off = 0;
    for (size_t i = 0; i < n; i++) {
        want[i] = (x[i] + b[i % width]) * s;
        off += memcmp(&want[i], &got[i], 4) != 0 && !(isnan(want[i]) && isnan(got[i]));
    }
    CHECKF(off == 0, "add_bias + scale over %u x %u: %d values differ from C's", rows, width, off);
    /* softcap over the raw values (extremes included) */
    if (kvt_gpu_upload(d, bx, 0, x, n * 4) || kvt_gpu_begin(d) ||
        run_get(d, kvt_gpu_rec_softcap(k, bx, (uint32_t)n, cap), "softcap", bx, got, n))
        goto out;
    memcpy(want, x, n * 4);
    kvt_softcap(want, (int64_t)n, cap);
    off = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / fmax(fabs((double)want[i]), 1e-30);
        max_softcap_err = fmax(max_softcap_err, e);
        off += !(e <= SOFTCAP_TOL);
    }
    CHECKF(off == 0, "softcap %g over %zu values: %d off by more than %g", (double)cap, n, off, SOFTCAP_TOL);
    /* gelu_mul of the raw values and u */
    if (kvt_gpu_upload(d, bx, 0, x, n * 4) || kvt_gpu_begin(d) ||
        run_get(d, kvt_gpu_rec_gelu_mul(k, bx, bu, (uint32_t)n), "gelu_mul", bx, got, n))
        goto out;
    memcpy(want, x, n * 4);
    kvt_gelu_mul(want, u, (int64_t)n);
    off = 0;
    for (size_t i = 0; i < n; i++) {
        int same = memcmp(&want[i], &got[i], 4) == 0;
        gelu_exact += same, gelu_total++;
        /* one f16 step of the GELU value (2^-10 of it, or of the smallest normal f16) times |u| */
        double step = fmax(fabs((double)want[i] / u[i]), 6.2e-5) * 0x1p-10 * fabs((double)u[i]);
        off += !same && !(fabs((double)got[i] - want[i]) <= step * 1.001);
    }
    CHECKF(off == 0, "gelu_mul over %zu values: %d off by more than one f16 step", n, off);
out:
    kvt_gpu_buf_free(bx), kvt_gpu_buf_free(bb), kvt_gpu_buf_free(bu);
    free(x), free(b), free(u), free(want), free(got);
}

static void check_refusals(kvt_gpu_dev *d, kvt_gpu_kernels *k) {
    kvt_gpu_buf *small = fwd_buf(d, 64, NULL);
    if (!small || kvt_gpu_begin(d)) return;
    CHECKF(kvt_gpu_rec_add_bias(k, small, small, 32, 1) == KVT_ELIMIT && strstr(kvt_errmsg(), "add_bias"),
           "a bias wider than its buffer: %s", kvt_errmsg());
    CHECKF(kvt_gpu_rec_scale(k, small, 17, 2.0f) == KVT_ELIMIT, "scale past the buffer: %s", kvt_errmsg());
    CHECKF(kvt_gpu_rec_softcap(k, small, 4, 0.0f) == KVT_EARG && strstr(kvt_errmsg(), "cap"), "a cap of 0: %s",
           kvt_errmsg());
    CHECKF(kvt_gpu_rec_gelu_mul(k, small, small, 0) == KVT_EARG, "gelu_mul of 0 elements: %s", kvt_errmsg());
    kvt_gpu_abort(d);
    kvt_gpu_buf_free(small);
}

int main(void) {
    gpu_test_start();
    fwd_seed("gpu arch kernels");
    kvt_gpu_dev *d = NULL;
    kvt_gpu_kernels *k = NULL;
    CHECKF(kvt_gpu_open(0, &d) == 0, "%s", kvt_errmsg());
    if (d) CHECKF(kvt_gpu_kernels_new(d, &k) == 0, "%s", kvt_errmsg());
    if (k) {
        for (int i = 0; i < 10; i++) check_kernels(d, k);
        check_refusals(d, k);
        printf("gpu arch kernels: softcap max error %.3g relative (tolerance %g); gelu_mul %zu of %zu values bit for "
               "bit with the CPU, the rest within one f16 step\n",
               max_softcap_err, SOFTCAP_TOL, gelu_exact, gelu_total);
    }
    kvt_gpu_kernels_free(k);
    kvt_gpu_close(d);
    gpu_test_no_validation_messages(0);
    return kvt_test_done("test_gpu_arch_kernels");
}
