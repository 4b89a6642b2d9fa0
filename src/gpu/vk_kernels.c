// SPDX-License-Identifier: MIT
/* The kernels' pipelines, and the first two kernels: f16-weight matmul and
 * RMSNorm, each the same for every batch size (src/gpu/shaders/common.glsl).
 * The forward pass's other kernels are recorded in vk_fwd.c. */
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "vk_impl.h"

/* Push-constant words of the forward pass's kernels (as their shaders declare them). */
#define MM_PUSH 7   /* rows, cols, n_tok, ldy, y_off, sbase, xbase */
#define QA_PUSH 3   /* the activation quantize passes: cols, n_tok, xbase */
#define ROPE_PUSH 5 /* n_heads, head_dim, rope_dim, neox, n_tok */
#define KV_PUSH 12  /* kv.glsl: the pool's shape, n_tok, n_head, scale, window, softcap */

/* The weight matmuls' shaders: f32, f16, bf16, then the quantized types in vk_fwd.c's order. */
static const char *const MM_NAMES[3] = {"matmul_wf32", "matmul_wf16", "matmul_wbf16"};
static const char *const MM_Q[KVT_VK_NQ] = {"q8_0", "q4_0", "q5_0",   "q4_k", "q5_k", "q6_k",
                                            "q4_1", "q5_1", "iq4_nl", "q2_k", "q3_k", "iq4_xs"};

/* The shader of weight matmul `which` (kvt_vk_mm_pipe's numbering) in buf: for the quantized types OpSDot
 * where the device has integer dot products, else the plain integer shader (`_i`), which gives the same bits. */
static const char *mm_name(const kvt_gpu_dev *d, int which, char *buf, size_t cap) {
    if (which < 3) return MM_NAMES[which];
    snprintf(buf, cap, "matmul_w%s%s", MM_Q[which - 3], d->int_dot ? "" : "_i");
    return buf;
}

int kvt_vk_mm_pipe(kvt_gpu_kernels *k, int which, uint32_t n_tok, kvt_gpu_pipe **p, uint32_t *toks, uint32_t *rows) {
    const kvt_gpu_info *in = &k->d->info;
    if (which == 1 && in->coopmat_on) return kvt_vk_cm_pipe(k, n_tok, p, toks, rows);
    *p = k->mm[which];
    *toks = 8;
    *rows = in->mm_rows;
    if (n_tok <= 8 || in->mm_toks <= 8) return 0;
    if (!k->mm_wide[which]) {
        char name[32];
        uint32_t spec[2] = {in->mm_toks, in->mm_rows_wide};
        int rc = kvt_vk_pipe_new_spec(k->d, mm_name(k->d, which, name, sizeof name), 3, MM_PUSH * 4, spec, 2,
                                      &k->mm_wide[which]);
        if (rc) return rc;
    }
    *p = k->mm_wide[which];
    *toks = in->mm_toks;
    *rows = in->mm_rows_wide;
    return 0;
}

int kvt_gpu_kernels_new(kvt_gpu_dev *d, kvt_gpu_kernels **out) {
    *out = NULL;
    if (!d->storage16)
        return kvt_fail(KVT_EUNSUPPORTED,
                        "gpu kernels: Vulkan device '%s' lacks storageBuffer16BitAccess (16-bit "
                        "storage), which the f16 KV pages need",
                        d->info.name);
    kvt_gpu_kernels *k = kvt_xcalloc(1, sizeof *k);
    k->d = d;
    const struct {
        kvt_gpu_pipe **p;
        const char *name;
        int n_bufs;
        uint32_t push_words;
    } all[] = {{&k->matmul_f16, "matmul_f16", 3, 3},
               {&k->rmsnorm, "rmsnorm", 3, 3},
               {&k->quant[0], "quant_q8_0", 2, QA_PUSH},
               {&k->quant[1], "quant_q8_k", 2, QA_PUSH},
               {&k->rope, "rope", 3, ROPE_PUSH},
               {&k->add, "add", 2, 1},
               {&k->silu_mul, "silu_mul", 2, 1},
               {&k->kv_store[KVT_GPU_KV_F32], "kv_store_f32", 7, KV_PUSH},
               {&k->kv_store[KVT_GPU_KV_F16], "kv_store_f16", 7, KV_PUSH},
               {&k->kv_store[KVT_GPU_KV_Q8_0], "kv_store_q8_0", 7, KV_PUSH},
               {&k->attention[KVT_GPU_KV_F32], "attention_f32", 7, KV_PUSH},
               {&k->attention[KVT_GPU_KV_F16], "attention_f16", 7, KV_PUSH},
               {&k->attention[KVT_GPU_KV_Q8_0], "attention_q8_0", 7, KV_PUSH}};
    int rc = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0] && !rc; i++)
        rc = kvt_vk_pipe_lazy(d, all[i].name, all[i].n_bufs, all[i].push_words * 4, all[i].p);
    uint32_t spec[2] = {8, d->info.mm_rows}; /* MM_TOKS, MM_ROWS (matmul_w.glsl) */
    for (int i = 0; i < 3 + KVT_VK_NQ && !rc; i++) {
        char name[32];
        rc = kvt_vk_pipe_lazy_spec(d, mm_name(d, i, name, sizeof name), 3, MM_PUSH * 4, spec, 2, &k->mm[i]);
    }
    if (!rc) rc = kvt_vk_arch_pipes_new(k);
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
    kvt_gpu_pipe *more[] = {k->quant[0], k->quant[1], k->rope, k->add, k->silu_mul};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) kvt_gpu_pipe_free(more[i]);
    for (int t = 0; t < KVT_GPU_KV_DTYPES; t++) kvt_gpu_pipe_free(k->kv_store[t]), kvt_gpu_pipe_free(k->attention[t]);
    for (int i = 0; i < 3 + KVT_VK_NQ; i++) kvt_gpu_pipe_free(k->mm[i]), kvt_gpu_pipe_free(k->mm_wide[i]);
    kvt_gpu_pipe_free(k->cm[0]), kvt_gpu_pipe_free(k->cm[1]);
    kvt_gpu_buf_free(k->xq);
    for (int i = 0; i < k->n_retired; i++) kvt_gpu_buf_free(k->retired[i]);
    free(k->retired);
    kvt_vk_arch_pipes_free(k);
    free(k);
}

void kvt_vk_spread(uint32_t n, uint32_t *gx, uint32_t *gz) {
    *gx = n < KVT_VK_MAX_GROUPS_X ? n : KVT_VK_MAX_GROUPS_X;
    *gz = (n + *gx - 1) / *gx;
}

int kvt_vk_need(const kvt_gpu_buf *b, uint64_t bytes, const char *op, const char *what) {
    if (kvt_gpu_buf_size(b) >= bytes) return 0;
    return kvt_fail(KVT_ELIMIT, "gpu %s: %s needs %llu bytes, its buffer has %llu", op, what, (unsigned long long)bytes,
                    (unsigned long long)kvt_gpu_buf_size(b));
}

int kvt_gpu_rec_matmul_f16(kvt_gpu_kernels *k, kvt_gpu_buf *y, kvt_gpu_buf *w, kvt_gpu_buf *x, uint32_t rows,
                           uint32_t cols, uint32_t n_tok) {
    if (!rows || !cols || !n_tok || n_tok > 65535)
        return kvt_fail(KVT_EARG, "gpu matmul_f16: rows %u, cols %u, tokens %u (each > 0, tokens <= 65535)", rows, cols,
                        n_tok);
    uint64_t wn = (uint64_t)rows * cols;
    int rc = kvt_vk_need(w, (wn + 1) / 2 * 4, "matmul_f16", "w (f16, rounded up to 4 bytes)");
    if (!rc) rc = kvt_vk_need(x, (uint64_t)n_tok * cols * 4, "matmul_f16", "x");
    if (!rc) rc = kvt_vk_need(y, (uint64_t)n_tok * rows * 4, "matmul_f16", "y");
    if (!rc && wn > UINT32_MAX)
        rc = kvt_fail(KVT_ELIMIT, "gpu matmul_f16: %llu weights, over 2^32", (unsigned long long)wn);
    if (rc) return rc;
    uint32_t push[3] = {rows, cols, n_tok}, g[3];
    kvt_vk_spread(rows, &g[0], &g[2]);
    g[1] = n_tok;
    kvt_gpu_buf *b[3] = {y, w, x};
    return kvt_gpu_rec_dispatch(k->d, k->matmul_f16, b, push, g);
}

int kvt_gpu_rec_rmsnorm(kvt_gpu_kernels *k, kvt_gpu_buf *y, kvt_gpu_buf *x, kvt_gpu_buf *weight, uint32_t n,
                        uint32_t n_tok, float eps) {
    if (!n || !n_tok) return kvt_fail(KVT_EARG, "gpu rmsnorm: n %u, tokens %u (each > 0)", n, n_tok);
    int rc = kvt_vk_need(x, (uint64_t)n_tok * n * 4, "rmsnorm", "x");
    if (!rc) rc = kvt_vk_need(y, (uint64_t)n_tok * n * 4, "rmsnorm", "y");
    if (!rc) rc = kvt_vk_need(weight, (uint64_t)n * 4, "rmsnorm", "weight");
    if (rc) return rc;
    union {
        uint32_t u[3];
        float f[3];
    } push = {.u = {n, n_tok, 0}};
    push.f[2] = eps;
    uint32_t g[3] = {0, 1, 0};
    kvt_vk_spread(n_tok, &g[0], &g[2]);
    kvt_gpu_buf *b[3] = {y, x, weight};
    return kvt_gpu_rec_dispatch(k->d, k->rmsnorm, b, push.u, g);
}
