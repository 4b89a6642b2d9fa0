// SPDX-License-Identifier: MIT
/* The first compute kernels: f16-weight matmul and RMSNorm, one pipeline each,
 * the same for every batch size (src/gpu/shaders/common.glsl). */
#include <stdlib.h>

#include "common.h"
#include "vk_impl.h"

#define MAX_GROUPS_X 32768u /* below the guaranteed maxComputeWorkGroupCount of 65535 */

struct kvt_gpu_kernels {
    kvt_gpu_dev *d;
    kvt_gpu_pipe *matmul_f16, *rmsnorm;
};

int kvt_gpu_kernels_new(kvt_gpu_dev *d, kvt_gpu_kernels **out) {
    kvt_gpu_kernels *k = kvt_xcalloc(1, sizeof *k);
    k->d = d;
    int rc = kvt_gpu_pipe_new(d, "matmul_f16", 3, 3 * sizeof(uint32_t), &k->matmul_f16);
    if (!rc) rc = kvt_gpu_pipe_new(d, "rmsnorm", 3, 3 * sizeof(uint32_t), &k->rmsnorm);
    if (rc) {
        kvt_gpu_kernels_free(k);
        k = NULL;
    }
    *out = k;
    return rc;
}

void kvt_gpu_kernels_free(kvt_gpu_kernels *k) {
    if (!k) return;
    kvt_gpu_pipe_free(k->matmul_f16);
    kvt_gpu_pipe_free(k->rmsnorm);
    free(k);
}

/* n workgroups along x, spilling into z past MAX_GROUPS_X (the shaders index x + z * gx). */
static void spread(uint32_t n, uint32_t *gx, uint32_t *gz) {
    *gx = n < MAX_GROUPS_X ? n : MAX_GROUPS_X;
    *gz = (n + *gx - 1) / *gx;
}

/* bytes of the buffer b must hold; KVT_ELIMIT naming what if not. */
static int need(const kvt_gpu_buf *b, uint64_t bytes, const char *op, const char *what) {
    if (kvt_gpu_buf_size(b) >= bytes) return 0;
    return kvt_fail(KVT_ELIMIT, "gpu %s: %s needs %llu bytes, its buffer has %llu", op, what,
                    (unsigned long long)bytes, (unsigned long long)kvt_gpu_buf_size(b));
}

int kvt_gpu_rec_matmul_f16(kvt_gpu_kernels *k, kvt_gpu_buf *y, kvt_gpu_buf *w, kvt_gpu_buf *x, uint32_t rows,
                           uint32_t cols, uint32_t n_tok) {
    if (!rows || !cols || !n_tok || n_tok > 65535)
        return kvt_fail(KVT_EARG, "gpu matmul_f16: rows %u, cols %u, tokens %u (each > 0, tokens <= 65535)", rows,
                        cols, n_tok);
    uint64_t wn = (uint64_t)rows * cols;
    int rc = need(w, (wn + 1) / 2 * 4, "matmul_f16", "w (f16, rounded up to 4 bytes)");
    if (!rc) rc = need(x, (uint64_t)n_tok * cols * 4, "matmul_f16", "x");
    if (!rc) rc = need(y, (uint64_t)n_tok * rows * 4, "matmul_f16", "y");
    if (!rc && wn > UINT32_MAX) rc = kvt_fail(KVT_ELIMIT, "gpu matmul_f16: %llu weights, over 2^32", (unsigned long long)wn);
    if (rc) return rc;
    uint32_t push[3] = {rows, cols, n_tok}, g[3];
    spread(rows, &g[0], &g[2]);
    g[1] = n_tok;
    kvt_gpu_buf *b[3] = {y, w, x};
    return kvt_gpu_rec_dispatch(k->d, k->matmul_f16, b, push, g);
}

int kvt_gpu_rec_rmsnorm(kvt_gpu_kernels *k, kvt_gpu_buf *y, kvt_gpu_buf *x, kvt_gpu_buf *weight, uint32_t n,
                        uint32_t n_tok, float eps) {
    if (!n || !n_tok) return kvt_fail(KVT_EARG, "gpu rmsnorm: n %u, tokens %u (each > 0)", n, n_tok);
    int rc = need(x, (uint64_t)n_tok * n * 4, "rmsnorm", "x");
    if (!rc) rc = need(y, (uint64_t)n_tok * n * 4, "rmsnorm", "y");
    if (!rc) rc = need(weight, (uint64_t)n * 4, "rmsnorm", "weight");
    if (rc) return rc;
    union {
        uint32_t u[3];
        float f[3];
    } push = {.u = {n, n_tok, 0}};
    push.f[2] = eps;
    uint32_t g[3] = {0, 1, 0};
    spread(n_tok, &g[0], &g[2]);
    kvt_gpu_buf *b[3] = {y, x, weight};
    return kvt_gpu_rec_dispatch(k->d, k->rmsnorm, b, push.u, g);
}
