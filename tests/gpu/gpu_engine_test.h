// SPDX-License-Identifier: MIT
/* Shared by the tests that hold the GPU engine to the CPU engine: every
 * position's logits of a prompt, and the comparison that bounds how far the
 * GPU's logits may stray and where its top-1 may differ. */
#ifndef KVT_GPU_ENGINE_TEST_H
#define KVT_GPU_ENGINE_TEST_H

#include <math.h>

#include "engine.h"
#include "gpu_test.h"

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
