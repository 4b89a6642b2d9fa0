// SPDX-License-Identifier: MIT
/* The GPU engine's memory plan on Vulkan device 0 (lavapipe here), the
 * device's memory made small with KVT_VK_MEM_LIMIT:
 *  - a pool left unsized gets exactly the pages that the budget
 *    (gpu_memory_fraction of the memory) holds after the weights and the
 *    activations, with any fraction; without a limit, a software device is
 *    planned with at most 1 GiB and the pool stops at what the kernels' KV
 *    bindings reach, saying so;
 *  - a given pool that fits is kept; one page more is refused naming both
 *    sizes and the largest pool that fits;
 *  - a planned pool under one context is refused naming the --ctx-size that
 *    fits (for want of memory or of binding reach), a page over one binding
 *    with KVT_EPAGE, naming --block-size;
 *  - a model that does not fit is refused naming the largest -ngl that would
 *    (from the per-layer weight bytes), and with that -ngl it runs: the device
 *    holds that layer's weights only and no logits buffers (the output matrix
 *    is the CPU's; the hint counts that), and a planned pool stops at max_seqs
 *    contexts (each page also takes host memory); -ngl below the layer count
 *    on a model that fits runs so too, -ngl 0 makes a CPU engine, -1, the
 *    layer count and 99 put every layer on the device; a fraction of 0 is
 *    the default, one outside (0, 1] is KVT_EARG;
 *  - on an F16 model no quantize scratch is made or planned; on a quantized
 *    model the kernels' quantize scratch is made up front at
 *    its exact size for a chunk (kvt_gpu_quant_scratch_bytes of the widest
 *    matmul input), the plan's device activations are exactly the buffers
 *    made with it, and a forward pass of a whole context never grows it.
 * No validation message may appear. Skips (77) without a device. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine.h"
#include "engine_gpu_impl.h" /* the device buffers and kernels */
#include "gpu_test.h"
#include "model.h"

#define B 16
#define CTX 64 /* one context: 4 pages */

static kvt_engine_params params(int32_t n_pages, float fraction, int32_t ngl) {
    kvt_engine_params ep = kvt_engine_default_params();
    ep.block_size = B;
    ep.n_pages = n_pages;
    ep.kv_active_bytes = 0; /* with n_pages 0: planned */
    ep.n_ctx = CTX;
    ep.n_threads = 1;
    ep.max_seqs = 2;
    ep.device = 1;
    ep.gpu_memory_fraction = fraction;
    ep.n_gpu_layers = ngl;
    return ep;
}

static void set_limit(uint64_t bytes) {
    char v[32];
    snprintf(v, sizeof v, "%llu", (unsigned long long)bytes);
    setenv("KVT_VK_MEM_LIMIT", v, 1);
}

/* An engine's plan, or rc and its message when it is refused. */
static int plan_of(const kvt_model *m, kvt_engine_params ep, kvt_engine_mem *mem) {
    kvt_engine *e = NULL;
    int rc = kvt_engine_new(m, ep, &e);
    if (!rc) {
        CHECK(kvt_engine_device_memory(e, mem) == 0);
        CHECKF(kvt_page_count(e) == mem->n_pages, "the engine has %d pages, its plan %d", kvt_page_count(e),
               mem->n_pages);
        /* the pool is usable to its last page */
        int32_t s, tok[CTX];
        for (int i = 0; i < CTX; i++) tok[i] = 1 + i;
        CHECK(kvt_seq_new(e, NULL, 0, 0, &s) == 0 && kvt_engine_feed(e, s, tok, CTX, 0, NULL) == 0);
    }
    kvt_engine_free(e);
    return rc;
}

static uint64_t wbytes(const kvt_wmat *w) { return (uint64_t)w->rows * w->row_bytes; }
static uint64_t layer_bytes(const kvt_model *m, int32_t l) {
    const kvt_layer *L = &m->layers[l];
    return wbytes(&L->wq) + wbytes(&L->wk) + wbytes(&L->wv) + wbytes(&L->wo) + wbytes(&L->w_gate) + wbytes(&L->w_up) +
        wbytes(&L->w_down) + 2 * (uint64_t)m->hp.n_embd * 4;
}

static int says(const char *what) {
    int ok = strstr(kvt_errmsg(), what) != NULL;
    if (!ok) fprintf(stderr, "  the message: %s\n  lacks: %s\n", kvt_errmsg(), what);
    return ok;
}

/* Long: each sizing rule against figures computed here from the first plan's. */
static void check_plan(const kvt_model *m) {
    unsetenv("KVT_VK_MEM_LIMIT");
    kvt_engine_mem base = {0};
    CHECKF(plan_of(m, params(0, 0.9f, -1), &base) == 0, "a planned engine: %s", kvt_errmsg());
    printf("plan: no limit: device %llu bytes, budget %llu, weights %llu, activations %llu, pool %d pages "
           "(bindings reach %d)\n",
           (unsigned long long)base.device_bytes, (unsigned long long)base.budget,
           (unsigned long long)base.weight_bytes, (unsigned long long)base.act_bytes, base.n_pages, base.binding_pages);
    CHECK(base.planned && base.n_pages > 0 && base.n_pages <= base.binding_pages);
    CHECKF(base.device_bytes <= (1ull << 30), "a software device planned with %llu bytes (at most 1 GiB)",
           (unsigned long long)base.device_bytes);
    CHECK(base.binding_capped == (base.n_pages == base.binding_pages));
    const uint64_t w = base.weight_bytes, a = base.act_bytes, stride = base.kv_bytes / (uint64_t)base.n_pages;
    /* a device that holds the weights, the activations and 10.5 pages: 10 pages, with fraction 1 and 0.5 */
    uint64_t lim = w + a + 10 * stride + stride / 2;
    set_limit(lim);
    kvt_engine_mem p = {0};
    CHECKF(plan_of(m, params(0, 1.0f, -1), &p) == 0 && p.n_pages == 10 && p.planned && !p.binding_capped,
           "fraction 1: %d pages (want 10): %s", p.n_pages, kvt_errmsg());
    CHECK(p.device_bytes == lim && p.budget == lim && p.act_bytes == a && p.weight_bytes == w);
    set_limit(2 * lim);
    CHECKF(plan_of(m, params(0, 0.5f, -1), &p) == 0 && p.n_pages == 10, "fraction 0.5: %d pages (want 10): %s",
           p.n_pages, kvt_errmsg());
    /* a given pool: 10 pages fit, 11 are refused naming both sizes and the 10 that fit */
    set_limit(lim);
    CHECKF(plan_of(m, params(10, 1.0f, -1), &p) == 0 && p.n_pages == 10 && !p.planned, "10 given pages: %s",
           kvt_errmsg());
    /* given in pages (as eval does): named in tokens, not by a flag the caller may not have */
    int rc = plan_of(m, params(11, 1.0f, -1), &p);
    char fit[80];
    snprintf(fit, sizeof fit, "the largest pool that fits is 10 pages (%d tokens)", 10 * B);
    CHECKF(rc == KVT_ELIMIT && says("a KV pool of 11 pages") && says(fit) && !strstr(kvt_errmsg(), "--kv-active"),
           "11 given pages: rc %d", rc);
    /* given by size (--kv-active): named by that flag */
    kvt_engine_params by_size = params(0, 1.0f, -1);
    by_size.kv_active_bytes = 11 * stride;
    rc = plan_of(m, by_size, &p);
    snprintf(fit, sizeof fit, "the largest pool that fits is 10 pages (--kv-active %llu)",
             (unsigned long long)(10 * stride));
    CHECKF(rc == KVT_ELIMIT && says("a KV pool of 11 pages") && says(fit), "11 pages by size: rc %d", rc);
    /* a planned pool under one context (4 pages): for want of memory, or of binding reach */
    set_limit(w + a + 3 * stride);
    rc = plan_of(m, params(0, 1.0f, -1), &p);
    char ctx_fit[64];
    snprintf(ctx_fit, sizeof ctx_fit, "lower --ctx-size to %d or less", 3 * B);
    CHECKF(rc == KVT_ELIMIT && says("does not fit") && says("the KV of one 64-token context") && says(ctx_fit),
           "3 pages: rc %d", rc);
    unsetenv("KVT_VK_MEM_LIMIT");
    char one[32];
    snprintf(one, sizeof one, "%llu", (unsigned long long)stride);
    setenv("KVT_VK_MAX_BINDING", one, 1);
    kvt_engine_params wide = params(0, 0.9f, -1);
    wide.n_ctx = CTX + B;
    char half[32];
    snprintf(half, sizeof half, "%llu", (unsigned long long)stride / 2);
    setenv("KVT_VK_MAX_BINDING", half, 1);
    kvt_engine_mem q;
    int rc2 = plan_of(m, params(0, 0.9f, -1), &q);
    /* a code of its own, which eval tells from a pool over its limit (KVT_ELIMIT) without reading the text */
    CHECKF(rc2 == KVT_EPAGE && says("larger than this device's largest binding") && says("--block-size"),
           "a page over one binding: rc %d", rc2);
    setenv("KVT_VK_MAX_BINDING", one, 1);
    rc = plan_of(m, wide, &p);
    unsetenv("KVT_VK_MAX_BINDING");
    CHECKF(rc == KVT_ELIMIT &&
               says("the kernels' KV bindings hold 4 KV pages (64 tokens), less than one context of 80") &&
               says("--ctx-size to 64"),
           "bindings of one page: rc %d", rc);
    set_limit(lim);
    /* the model does not fit: the largest -ngl from the per-layer bytes (2 layers; the KV of one context
     * shared out by layer) */
    const uint64_t l0 = layer_bytes(m, 0), ctx_kv = (CTX / B) * stride;
    set_limit(a + l0 + ctx_kv / 2 + 1);
    rc = plan_of(m, params(0, 1.0f, -1), &p);
    CHECKF(rc == KVT_ELIMIT && says("does not fit") && says("that would fit is 1 of 2") && says("give -ngl 1"),
           "room for one layer: rc %d", rc);
    /* ... and -ngl 1 runs there: one layer's weights on the device, a pool of at least that layer's share of
     * one context (the activations it leaves out give it more) */
    rc = plan_of(m, params(0, 1.0f, 1), &p);
    CHECKF(rc == 0 && p.weight_bytes < l0 + l0 / 8 && p.n_pages >= CTX / B,
           "-ngl 1 where one layer fits: rc %d (%s), weights %llu (a layer %llu), capped %d, %d pages", rc,
           rc ? kvt_errmsg() : "", (unsigned long long)p.weight_bytes, (unsigned long long)l0, p.seqs_capped, p.n_pages);
    /* with -ngl 1 the output matrix runs on the CPU: the device makes no logits buffers, so its activations
     * are fewer, and a device with room for one layer next to those is offered -ngl 1, which runs there */
    unsetenv("KVT_VK_MEM_LIMIT");
    kvt_engine *part = NULL;
    rc = kvt_engine_new(m, params(8, 0.9f, 1), &part);
    kvt_engine_mem pm = {0};
    CHECKF(rc == 0 && kvt_engine_device_memory(part, &pm) == 0 && pm.act_bytes < a &&
               kvt_gpu_buf_size(part->gpu->logits) == 4 && kvt_gpu_buf_size(part->gpu->out_stage) == 4,
           "-ngl 1: activations %llu bytes (all layers: %llu), logits buffer %llu bytes",
           (unsigned long long)pm.act_bytes, (unsigned long long)a,
           rc ? 0ull : (unsigned long long)kvt_gpu_buf_size(part->gpu->logits));
    kvt_engine_free(part);
    const uint64_t ap = pm.act_bytes;
    set_limit(ap + l0 + ctx_kv / 2 + 1);
    rc = plan_of(m, params(0, 1.0f, -1), &p);
    CHECKF(rc == KVT_ELIMIT && says("that would fit is 1 of 2"), "room for one layer without logits: rc %d", rc);
    rc = plan_of(m, params(0, 1.0f, 1), &p);
    CHECKF(rc == 0 && p.act_bytes == ap && !p.seqs_capped && p.n_pages == CTX / B,
           "-ngl 1 there: rc %d (%s), capped %d, %d pages", rc, rc ? kvt_errmsg() : "", p.seqs_capped, p.n_pages);
    set_limit(ap / 2);
    rc = plan_of(m, params(0, 1.0f, 1), &p);
    CHECKF(rc == KVT_ELIMIT && says("that would fit is 0 of 2"), "room for no layer, -ngl 1: rc %d", rc);
    /* -ngl on a model that fits: the first layer on the device, the pool as given */
    unsetenv("KVT_VK_MEM_LIMIT");
    rc = plan_of(m, params(8, 0.9f, 1), &p);
    CHECKF(rc == 0 && p.n_pages == 8 && !p.seqs_capped, "-ngl 1: rc %d (%s)", rc, rc ? kvt_errmsg() : "");
    /* planned, it stops at max_seqs (2) contexts: every page takes host memory too */
    rc = plan_of(m, params(0, 0.9f, 1), &p);
    CHECKF(rc == 0 && p.seqs_capped && p.n_pages == 2 * (CTX / B), "-ngl 1 planned: rc %d, capped %d, %d pages", rc,
           p.seqs_capped, p.n_pages);
    kvt_engine *cpu = NULL;
    rc = kvt_engine_new(m, params(8, 0.9f, 0), &cpu);
    CHECKF(rc == 0 && !strcmp(kvt_engine_device_name(cpu), "cpu"), "-ngl 0 on a device: a CPU engine (rc %d)", rc);
    kvt_engine_free(cpu);
    int32_t all[] = {-1, 2, 99};
    for (int i = 0; i < 3; i++)
        CHECKF(plan_of(m, params(8, 0.9f, all[i]), &p) == 0, "-ngl %d: %s", all[i], kvt_errmsg());
    CHECKF(plan_of(m, params(8, 0.0f, -1), &p) == 0 && p.fraction == KVT_DEFAULT_GPU_MEMORY_FRACTION,
           "fraction 0 is the default: %s", kvt_errmsg());
    float bad[] = {-0.5f, 1.01f, NAN};
    for (int i = 0; i < 3; i++) {
        rc = plan_of(m, params(8, bad[i], -1), &p);
        CHECKF(rc == KVT_EARG && says("gpu_memory_fraction"), "fraction %g: rc %d", (double)bad[i], rc);
    }
    CHECK(plan_of(m, params(8, 0.9f, -2), &p) == KVT_EARG);
}

/* Long: the scratch's size (none for F16 weights, whose matmuls quantize nothing), the plan's device
 * activations against the buffers made, then a forward pass. */
static void check_quant_scratch(const char *file, uint32_t type) {
    unsetenv("KVT_VK_MEM_LIMIT");
    kvt_model *m = kvt_test_tiny_model_typed(file, 512, type);
    CHECK(m != NULL);
    kvt_engine *e = NULL;
    if (!m || kvt_engine_new(m, params(8, 0.9f, -1), &e) != 0) {
        CHECKF(0, "a %s engine: %s", kvt_ggml_type_name(type), kvt_errmsg());
        kvt_model_free(m);
        return;
    }
    const kvt_eng_gpu *g = e->gpu;
    const kvt_hparams *hp = &m->hp;
    uint32_t cols = (uint32_t)(hp->n_embd > hp->n_ff ? hp->n_embd : hp->n_ff);
    if ((uint32_t)e->q_dim > cols) cols = (uint32_t)e->q_dim;
    const uint64_t want = type == KVT_TYPE_F16 ? 0 : kvt_gpu_quant_scratch_bytes((uint32_t)g->nb, cols);
    CHECKF(kvt_gpu_kernels_scratch_bytes(g->k) == want, "%s: the scratch has %llu bytes up front (want %llu)",
           kvt_ggml_type_name(type), (unsigned long long)kvt_gpu_kernels_scratch_bytes(g->k), (unsigned long long)want);
    /* every device activation buffer the engine made, the scratch with them, is what the plan counts */
    kvt_gpu_buf *const made[] = {g->x,  g->xb, g->q,    g->k_, g->v,   g->att,    g->hb,     g->hb2,
                                 g->cs, g->sn, g->meta, g->xw, g->xw2, g->logits, g->cs_alt, g->sn_alt};
    uint64_t sum = kvt_gpu_kernels_scratch_bytes(g->k);
    for (size_t i = 0; i < sizeof made / sizeof made[0]; i++) sum += made[i] ? kvt_gpu_buf_size(made[i]) : 0;
    CHECKF(g->act_dev_bytes == sum, "the plan counts %llu bytes of device activations, the engine made %llu",
           (unsigned long long)g->act_dev_bytes, (unsigned long long)sum);
    int32_t s, tok[CTX];
    for (int i = 0; i < CTX; i++) tok[i] = 1 + i;
    CHECKF(kvt_seq_new(e, NULL, 0, 0, &s) == 0 && kvt_engine_feed(e, s, tok, CTX, 0, NULL) == 0, "a forward pass: %s",
           kvt_errmsg());
    CHECKF(kvt_gpu_kernels_scratch_regrowths(g->k) == 0 && kvt_gpu_kernels_scratch_bytes(g->k) == want,
           "the forward pass grew the scratch %d times to %llu bytes", kvt_gpu_kernels_scratch_regrowths(g->k),
           (unsigned long long)kvt_gpu_kernels_scratch_bytes(g->k));
    kvt_engine_free(e);
    kvt_model_free(m);
}

int main(void) {
    kvt_test_gpu_variant();
    gpu_test_start();
    kvt_model *m = kvt_test_tiny_model_typed("gpu_plan.gguf", 512, KVT_TYPE_F16);
    CHECK(m != NULL);
    if (m) check_plan(m);
    kvt_model_free(m);
    check_quant_scratch("gpu_plan_q8.gguf", KVT_TYPE_Q8_0);
    check_quant_scratch("gpu_plan_f16.gguf", KVT_TYPE_F16);
    gpu_test_no_validation_messages(0);
    return kvt_test_done("test_gpu_plan");
}
