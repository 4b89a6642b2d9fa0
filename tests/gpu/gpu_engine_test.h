// SPDX-License-Identifier: MIT
/* Shared by the tests that hold the GPU engine to the CPU engine: every
 * position's logits of a prompt, and the comparison that bounds how far the
 * GPU's logits may stray and where its top-1 may differ. */
#ifndef KVT_GPU_ENGINE_TEST_H
#define KVT_GPU_ENGINE_TEST_H

#include <math.h>

#include "engine.h"
#include "gpu_test.h"

/* F32 and F16 weights: f32 sums in another order (fixed trees against the
 * CPU's SIMD lanes) move these models' logits (|logit| < 4) by a few 1e-3
 * (observed 4e-3 with f16 KV, 1.4e-6 with f32 KV); 0.02 is the bound. Q8_0:
 * both engines quantize activations to Q8_0 the same way, but a 1-ulp
 * difference upstream moves a value near a rounding boundary by a whole step
 * (amax/127, ~1% of the block), and that carries: observed 0.065; 0.2 is the
 * bound, and Q4_1's (Q8_1 activations, the same steps). The same holds for q8_0 KV, where both engines quantize K and V
 * alike (observed 0.016). Top-1 must agree wherever the CPU's best logit leads the next by
 * more than twice the bound; the raw agreement is printed. */
#define GPU_LOGIT_TOL 0.02
#define GPU_LOGIT_TOL_Q8 0.2

/* An engine over m on the CPU (device 0) or on Vulkan device 0 (device 1)
 * with the first ngl layers there (-1: all): pages of block tokens, n_pages of
 * them, a context of 512, 2 threads, 4 sequences, batches of n_batch, KV dt;
 * NULL (a failed check) if it cannot be made. */
static inline kvt_engine *gpu_engine_on(const kvt_model *m, int32_t device, int32_t ngl, int32_t block, int32_t n_pages,
                                        int32_t n_batch, kvt_kv_dtype dt) {
    kvt_engine_params ep = kvt_engine_default_params();
    ep.block_size = block;
    ep.n_pages = n_pages;
    ep.n_ctx = 512;
    ep.n_threads = 2;
    ep.max_seqs = 4;
    ep.n_batch = n_batch;
    ep.kv_dtype = dt;
    ep.device = device;
    ep.n_gpu_layers = ngl;
    kvt_engine *e = NULL;
    int rc = kvt_engine_new(m, ep, &e);
    CHECKF(rc == 0, "engine on %s, -ngl %d: %s", device ? "vulkan:0" : "cpu", ngl, kvt_errmsg());
    return e;
}

/* The whole-layout bytes of seq's first n pages (at most 8), copied out;
 * zeros after a failed check. */
static inline uint8_t *gpu_pages_of(kvt_engine *e, int32_t seq, int32_t n) {
    int32_t np;
    const int32_t *pt = kvt_seq_pages(e, seq, &np);
    const size_t pb = kvt_page_bytes(e);
    uint8_t *out = calloc((size_t)n, pb);
    kvt_page_out io[8];
    int ok = n <= 8 && np >= n;
    for (int32_t i = 0; ok && i < n; i++) io[i] = (kvt_page_out){pt[i], out + (size_t)i * pb};
    CHECKF(ok && kvt_pages_copy_out(e, io, (size_t)n) == 0, "copy out %d pages of %d: %s", n, np, kvt_errmsg());
    return out;
}

/* Every position's logits of p on a fresh sequence of e; NULL (a failed check) on failure. */
static inline float *gpu_all_logits(kvt_engine *e, const int32_t *p, int32_t n) {
    int32_t V = kvt_engine_n_vocab(e), s;
    float *l = malloc((size_t)n * (size_t)V * sizeof(float));
    int rc = kvt_seq_new(e, NULL, 0, 0, &s);
    if (!rc) {
        rc = kvt_engine_feed(e, s, p, n, 1, l);
        kvt_seq_free(e, s);
    }
    CHECKF(rc == 0, "feed: %s", kvt_errmsg());
    if (rc) free(l), l = NULL;
    return l;
}

static inline int32_t gpu_argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* How far the best logit leads the second. */
static inline float gpu_lead(const float *x, int32_t n) {
    int32_t b = gpu_argmax(x, n);
    float second = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (i != b && x[i] > second) second = x[i];
    return x[b] - second;
}

typedef struct {
    int agree;   /* positions where the top-1 token is the same */
    double dmax; /* the largest |GPU - CPU| logit */
    double lmax; /* the largest |CPU| logit, for scale */
} gpu_logit_cmp;

/* The GPU's logits g against the CPU's c at n positions of V each: every
 * logit finite and within tol, and the top-1 different only where the CPU's
 * leads by at most 2 tol (a near tie rounding may flip). what names the case
 * in the failed checks; the figures come back for the test to print. */
static inline gpu_logit_cmp gpu_compare_logits(const float *c, const float *g, int32_t n, int32_t V, double tol,
                                               const char *what) {
    gpu_logit_cmp r = {0, 0, 0};
    int clear_miss = 0, finite = 1;
    for (int32_t t = 0; t < n; t++) {
        const float *a = c + (size_t)t * V, *b = g + (size_t)t * V;
        int same = gpu_argmax(a, V) == gpu_argmax(b, V);
        r.agree += same;
        clear_miss += !same && gpu_lead(a, V) > 2 * tol;
        for (int32_t i = 0; i < V; i++) {
            finite &= isfinite(a[i]) && isfinite(b[i]);
            r.dmax = fmax(r.dmax, fabs((double)a[i] - b[i]));
            r.lmax = fmax(r.lmax, fabs((double)a[i]));
        }
    }
    CHECKF(finite, "%s: a logit is not finite", what);
    CHECKF(r.dmax <= tol, "%s: logits differ from the CPU's by %g (bound %g)", what, r.dmax, tol);
    CHECKF(clear_miss == 0, "%s: top-1 differs at %d positions where the CPU's leads by more than %g", what, clear_miss,
           2 * tol);
    return r;
}

#endif
