// SPDX-License-Identifier: MIT
/* The kernels that the architectures other than llama add to the forward
 * pass (qwen2's biases, phi3's and gemma's query scale, gemma2's logit
 * soft-cap, gemma's GELU): elementwise, one invocation per element, shapes
 * checked here so a shader never indexes past a buffer. */
#include <math.h>
#include <stdlib.h>

#include "common.h"
#include "vk_impl.h"

enum { ARCH_ADD_BIAS, ARCH_SCALE, ARCH_SOFTCAP, ARCH_GELU_MUL };

int kvt_vk_arch_pipes_new(kvt_gpu_kernels *k) {
    static const struct {
        const char *name;
        int n_bufs;
        uint32_t push_words;
    } all[KVT_VK_ARCH_PIPES] = {
        [ARCH_ADD_BIAS] = {"add_bias", 2, 2},
        [ARCH_SCALE] = {"scale", 1, 2},
        [ARCH_SOFTCAP] = {"softcap", 1, 2},
        [ARCH_GELU_MUL] = {"gelu_mul", 2, 1},
    };
    int rc = 0;
    for (int i = 0; i < KVT_VK_ARCH_PIPES && !rc; i++)
        rc = kvt_vk_pipe_lazy(k->d, all[i].name, all[i].n_bufs, all[i].push_words * 4, &k->arch[i]);
    return rc;
}

void kvt_vk_arch_pipes_free(kvt_gpu_kernels *k) {
    for (int i = 0; i < KVT_VK_ARCH_PIPES; i++) kvt_gpu_pipe_free(k->arch[i]);
}

/* A flat grid of n invocations, KVT_WG to a workgroup (kvt_flat_id). */
static void flat_groups(uint64_t n, uint32_t g[3]) {
    kvt_vk_spread((uint32_t)((n + 63) / 64), &g[0], &g[2]);
    g[1] = 1;
}

/* Records pipeline p over n elements of x (and y when not NULL) with push words. */
static int rec_flat(kvt_gpu_kernels *k, int pipe, const char *op, kvt_gpu_buf *x, kvt_gpu_buf *y, uint64_t y_bytes,
                    uint64_t n, const void *push) {
    if (!n || n > UINT32_MAX) return kvt_fail(KVT_EARG, "gpu %s: %llu elements (1..2^32-1)", op, (unsigned long long)n);
    int rc = kvt_vk_need(x, n * 4, op, "x");
    if (!rc && y) rc = kvt_vk_need(y, y_bytes, op, "its second operand");
    if (rc) return rc;
    uint32_t g[3];
    flat_groups(n, g);
    kvt_gpu_buf *b[2] = {x, y};
    return kvt_gpu_rec_dispatch(k->d, k->arch[pipe], b, push, g);
}

int kvt_gpu_rec_add_bias(kvt_gpu_kernels *k, kvt_gpu_buf *x, kvt_gpu_buf *b, uint32_t width, uint32_t n_rows) {
    if (!width || !n_rows) return kvt_fail(KVT_EARG, "gpu add_bias: width %u, rows %u (each > 0)", width, n_rows);
    uint64_t n = (uint64_t)width * n_rows;
    uint32_t push[2] = {(uint32_t)n, width};
    return rec_flat(k, ARCH_ADD_BIAS, "add_bias", x, b, (uint64_t)width * 4, n, push);
}

int kvt_gpu_rec_scale(kvt_gpu_kernels *k, kvt_gpu_buf *x, uint32_t n, float s) {
    union {
        uint32_t u[2];
        float f[2];
    } push = {.u = {n, 0}};
    push.f[1] = s;
    return rec_flat(k, ARCH_SCALE, "scale", x, NULL, 0, n, push.u);
}

int kvt_gpu_rec_softcap(kvt_gpu_kernels *k, kvt_gpu_buf *x, uint32_t n, float cap) {
    if (!(cap > 0.0f) || isinf(cap)) return kvt_fail(KVT_EARG, "gpu softcap: cap %g (finite, > 0)", (double)cap);
    union {
        uint32_t u[2];
        float f[2];
    } push = {.u = {n, 0}};
    push.f[1] = cap;
    return rec_flat(k, ARCH_SOFTCAP, "softcap", x, NULL, 0, n, push.u);
}

int kvt_gpu_rec_gelu_mul(kvt_gpu_kernels *k, kvt_gpu_buf *g, kvt_gpu_buf *u, uint32_t n) {
    return rec_flat(k, ARCH_GELU_MUL, "gelu_mul", g, u, (uint64_t)n * 4, n, &n);
}
