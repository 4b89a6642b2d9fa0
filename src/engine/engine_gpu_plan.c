// SPDX-License-Identifier: MIT
/* The GPU engine's memory plan. The engine may take a share of its device's
 * memory (gpu_memory_fraction, 0.9 by default, as vLLM's
 * gpu_memory_utilization) of the largest device-local heap. The activations
 * and the weights come out of that budget first; a pool whose size was not
 * given (n_pages and kv_active_bytes both 0) gets what is left, and a given
 * one must fit in it. Whatever does not fit is refused before the weights are
 * uploaded, naming the sizes and what would fit.
 *
 * A device whose memory is the host's RAM (type "cpu", as Mesa's lavapipe)
 * reports a heap that the whole machine shares; the plan takes at most
 * HOST_PLAN_BYTES of it there. On any device but a discrete GPU the staging
 * buffers (with kvt_pages_stage's, made later) come from the same memory, so
 * they count with the activations.
 *
 * The pool is at most what the kernels' KVT_GPU_KV_CHUNKS KV bindings reach
 * (each binding at most the device's largest storage binding); a planned pool
 * stops there and says so.
 *
 * With partial offload (n_gpu_layers N below the layer count) the device
 * holds the first N layers' weights and their share of each page; the output
 * matrix, the other layers and their share of each page are the CPU's, in
 * host memory. Every page has both shares, so a planned pool is also held to
 * max_seqs contexts: the host memory it takes grows with it. When the model
 * (or its first N layers) does not fit, the refusal names the largest N that
 * would, from the per-layer weight bytes. */
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "engine_gpu_impl.h"
#include "model.h"

#define HOST_PLAN_BYTES (1ull << 30)

/* The device memory the plan works with. */
static uint64_t plan_device_bytes(const kvt_gpu_info *in) {
    uint64_t heap = 0;
    for (int h = 0; h < in->n_heaps; h++)
        if (in->heap_device_local[h] && in->heap_bytes[h] > heap) heap = in->heap_bytes[h];
    if (!strcmp(in->type, "cpu") && heap > HOST_PLAN_BYTES) heap = HOST_PLAN_BYTES;
    return heap;
}

static uint64_t wbytes(const kvt_wmat *w) { return (uint64_t)w->rows * w->row_bytes; }

/* What one layer's weights take on the device (as the CPU holds them: the
 * device's layouts differ by a few bytes per slice). */
static uint64_t layer_bytes(const kvt_model *m, int32_t l) {
    const kvt_layer *L = &m->layers[l];
    return wbytes(&L->wq) + wbytes(&L->wk) + wbytes(&L->wv) + wbytes(&L->wo) + wbytes(&L->w_gate) + wbytes(&L->w_up) +
        wbytes(&L->w_down) + 2 * (uint64_t)m->hp.n_embd * 4;
}

/* The output matrix and norm; the embedding rows stay on the host. */
static uint64_t head_bytes(const kvt_model *m) { return wbytes(&m->output) + (uint64_t)m->hp.n_embd * 4; }

static int32_t ctx_pages(const kvt_engine *e) { return (e->p.n_ctx + e->p.block_size - 1) / e->p.block_size; }

/* b as "12.3 MiB" or "4.56 GiB" in one of a few rotating buffers (for one message). */
static const char *sz(uint64_t b) {
    static _Thread_local char ring[8][32];
    static _Thread_local int next;
    char *s = ring[next++ % 8];
    if (b >= (1ull << 30)) snprintf(s, sizeof ring[0], "%.2f GiB", (double)b / (1 << 30));
    else snprintf(s, sizeof ring[0], "%.1f MiB", (double)b / (1 << 20));
    return s;
}

/* The fraction f as the flag takes it: two decimals, or two significant digits below 0.01 (so that a
 * tiny share does not read as 0.00), in one of a few rotating buffers. */
static const char *fr(float f) {
    static _Thread_local char ring[4][32];
    static _Thread_local int next;
    char *s = ring[next++ % 4];
    if ((double)f >= 0.01) snprintf(s, sizeof ring[0], "%.2f", (double)f);
    else snprintf(s, sizeof ring[0], "%.2g", (double)f);
    return s;
}

/* The most layers whose weights, with their share of kv bytes of KV, fit in room. */
static int32_t largest_layers(const kvt_model *m, uint64_t room, uint64_t kv) {
    int32_t L = m->hp.n_layer, n = 0;
    uint64_t used = 0;
    while (n < L) {
        used += layer_bytes(m, n);
        if (used + kv * (uint64_t)(n + 1) / (uint64_t)L > room) break;
        n++;
    }
    return n;
}

/* Whether the pool's size came from --kv-active (run, serve) rather than as a page count from the caller (eval,
 * embeddings, tests): only then may a message name that flag, or --ctx-size, as the way to change it. */
static int pool_from_flags(const kvt_engine *e, const kvt_engine_mem *mem) {
    return mem->planned || e->p.kv_active_bytes != 0;
}

static int not_fit(const kvt_engine *e, const kvt_eng_gpu *g, uint64_t weights, uint64_t kv) {
    const kvt_engine_mem *mem = &g->mem;
    const kvt_gpu_info *in = kvt_gpu_dev_info(g->d);
    const int32_t L = e->model->hp.n_layer;
    /* a run with fewer layers makes no logits buffers, and holds neither the output matrix nor its logits */
    uint64_t act = mem->act_bytes;
    if (e->dev_layers == L) act -= g->head_dev_bytes + (strcmp(in->type, "discrete") ? g->head_stage_bytes : 0);
    uint64_t room = mem->budget > act ? mem->budget - act : 0;
    /* kv is the device's share for dev_layers layers: largest_layers wants every layer's */
    int32_t fit = largest_layers(e->model, room, kv / (uint64_t)e->dev_layers * (uint64_t)L);
    if (fit == L) fit = L - 1; /* every layer but not the output matrix: -ngl L would be this run again */
    char what[96], ngl[96] = "";
    if (fit) snprintf(ngl, sizeof ngl, "give -ngl %d to run the other layers on the CPU, or ", fit);
    if (mem->planned) snprintf(what, sizeof what, "the KV of one %d-token context", e->p.n_ctx);
    else if (e->p.kv_active_bytes) snprintf(what, sizeof what, "the KV pool asked for (--kv-active)");
    else snprintf(what, sizeof what, "a KV pool of %d pages", e->p.n_pages);
    return kvt_fail(KVT_ELIMIT,
                    "the model does not fit in the memory of %s: its weights (%s), activations (%s) and %s (%s) "
                    "need %s, over the %s that --gpu-memory-fraction %s of its %s allows. The largest "
                    "--n-gpu-layers (-ngl) that would fit is %d of %d: %suse --device cpu, %s, "
                    "or a smaller or more quantized model",
                    in->name, sz(weights), sz(mem->act_bytes), what, sz(kv), sz(weights + mem->act_bytes + kv),
                    sz(mem->budget), fr(mem->fraction), sz(mem->device_bytes), fit, L, ngl,
                    pool_from_flags(e, mem) ? "a smaller --ctx-size" : "a smaller KV pool");
}

/* The most pages the kernels' KVT_GPU_KV_CHUNKS KV bindings reach (0: a page is over one binding). */
static uint64_t binding_reach(const kvt_engine *e, const kvt_eng_gpu *g) {
    return kvt_gpu_max_binding(g->d) / e->dev_page_stride * KVT_GPU_KV_CHUNKS;
}

/* The weights and activations fit but not one context's KV of a planned pool (the device's share of it,
 * with partial offload): names the longest context that fits (in the budget and the KV bindings' reach). */
static int context_not_fit(const kvt_engine *e, const kvt_eng_gpu *g, uint64_t weights, uint64_t kv) {
    const kvt_engine_mem *mem = &g->mem;
    uint64_t room = mem->budget - weights - mem->act_bytes, pages = room / e->dev_page_stride;
    uint64_t reach = binding_reach(e, g);
    if (pages > reach) pages = reach;
    return kvt_fail(KVT_ELIMIT,
                    "the KV of one %d-token context (%s) does not fit in the memory of %s: the %s that "
                    "--gpu-memory-fraction %s of its %s allows leaves %s after the weights (%s) and activations "
                    "(%s); lower --ctx-size to %llu or less, or raise --gpu-memory-fraction",
                    e->p.n_ctx, sz(kv), kvt_gpu_dev_info(g->d)->name, sz(mem->budget), fr(mem->fraction),
                    sz(mem->device_bytes), sz(room), sz(weights), sz(mem->act_bytes),
                    (unsigned long long)(pages * (uint64_t)e->p.block_size));
}

/* 0 when a given pool fits next to weights bytes of weights, else KVT_ELIMIT naming the largest that does:
 * within the budget and within the pages the kernels' KV bindings reach, so that the pool it names runs
 * (a larger one that the memory holds would be refused by make_pool next). */
static int given_pool_fits(const kvt_engine *e, const kvt_eng_gpu *g, uint64_t weights) {
    const kvt_engine_mem *mem = &g->mem;
    uint64_t pool = (uint64_t)e->p.n_pages * e->dev_page_stride, used = weights + mem->act_bytes;
    uint64_t room = mem->budget > used ? mem->budget - used : 0, fit = room / e->dev_page_stride;
    uint64_t reach = binding_reach(e, g);
    if (pool <= room) return 0;
    if (fit > reach) fit = reach;
    /* a pool from --kv-active is named by it; one the caller counted in pages, by its tokens */
    char given[64], fits[128];
    if (e->p.kv_active_bytes) {
        snprintf(given, sizeof given, "--kv-active");
        snprintf(fits, sizeof fits, "--kv-active %llu), or leave --kv-active out to have it planned",
                 (unsigned long long)(fit * (e->dev_page_stride + e->page_stride)));
    } else {
        snprintf(given, sizeof given, "%lld tokens", (long long)e->p.n_pages * e->p.block_size);
        snprintf(fits, sizeof fits, "%llu tokens)", (unsigned long long)fit * (unsigned long long)e->p.block_size);
    }
    return kvt_fail(KVT_ELIMIT,
                    "a KV pool of %d pages (%s, %s) does not fit: the %s that --gpu-memory-fraction %s "
                    "of this device's %s allows leaves %s after the weights (%s) and activations (%s); the largest "
                    "pool that fits%s is %llu pages (%s",
                    e->p.n_pages, sz(pool), given, sz(mem->budget), fr(mem->fraction), sz(mem->device_bytes), sz(room),
                    sz(weights), sz(mem->act_bytes),
                    fit == reach ? " (held to what the kernels' KV bindings reach)" : "", (unsigned long long)fit, fits);
}

int kvt_eng_gpu_plan_fit(kvt_engine *e, kvt_eng_gpu *g) {
    const kvt_model *m = e->model;
    kvt_engine_mem *mem = &g->mem;
    const kvt_gpu_info *in = kvt_gpu_dev_info(g->d);
    const int32_t L = m->hp.n_layer;
    mem->device_bytes = plan_device_bytes(in);
    mem->fraction = e->p.gpu_memory_fraction;
    mem->budget = (uint64_t)((double)mem->device_bytes * (double)mem->fraction);
    mem->act_bytes = g->act_dev_bytes + (strcmp(in->type, "discrete") ? g->act_stage_bytes : 0);
    mem->planned = e->p.n_pages == 0;
    uint64_t weights = e->dev_layers == L ? head_bytes(m) : 0;
    for (int32_t l = 0; l < e->dev_layers; l++) weights += layer_bytes(m, l);
    uint64_t kv = (uint64_t)(mem->planned ? ctx_pages(e) : e->p.n_pages) * e->dev_page_stride;
    uint64_t need_min = weights + mem->act_bytes + (mem->planned ? kv : e->dev_page_stride);
    if (need_min > mem->budget && mem->planned && weights + mem->act_bytes < mem->budget)
        return context_not_fit(e, g, weights, kv);
    if (need_min > mem->budget) return not_fit(e, g, weights, kv);
    return mem->planned ? 0 : given_pool_fits(e, g, weights);
}

/* The largest block size below the engine's whose pages, as many as room bytes and the kernels' KV bindings
 * hold, reach one context; 0 when none does. A page is 64-byte aligned, so the bindings end in a remainder
 * smaller than a page: smaller pages waste less of it, though not steadily, hence the search. */
static int32_t block_reaching_ctx(const kvt_engine *e, const kvt_eng_gpu *g, uint64_t room) {
    const uint64_t tok = e->dev_page_bytes / (size_t)e->p.block_size, maxb = kvt_gpu_max_binding(g->d);
    for (int32_t b = e->p.block_size - 1; b >= 1; b--) {
        uint64_t stride = (tok * (uint64_t)b + PAGE_ALIGN - 1) / PAGE_ALIGN * PAGE_ALIGN;
        uint64_t pages = KVT_MIN(room / stride, maxb / stride * KVT_GPU_KV_CHUNKS);
        if (pages * (uint64_t)b >= (uint64_t)e->p.n_ctx) return b;
    }
    return 0;
}

/* The pool's pages into mem, with the host share that follows them. */
static int pool_planned(kvt_engine *e, kvt_engine_mem *mem, int32_t n_pages) {
    mem->n_pages = e->p.n_pages = n_pages;
    mem->kv_bytes = (uint64_t)n_pages * e->dev_page_stride;
    mem->host_kv_bytes = (uint64_t)n_pages * e->page_stride;
    return 0;
}

int kvt_eng_gpu_plan_pool(kvt_engine *e, kvt_eng_gpu *g) {
    kvt_engine_mem *mem = &g->mem;
    mem->weight_bytes = g->weight_bytes;
    mem->gpu_layers = e->dev_layers;
    uint64_t reach = binding_reach(e, g);
    if (reach == 0) return 0; /* a page over one binding: make_pool says so, naming --block-size */
    mem->binding_pages = (int32_t)KVT_MIN(reach, (uint64_t)INT32_MAX);
    if (!mem->planned) {
        int rc = given_pool_fits(e, g, mem->weight_bytes);
        return rc ? rc : pool_planned(e, mem, e->p.n_pages);
    }
    uint64_t used = mem->weight_bytes + mem->act_bytes, room = mem->budget > used ? mem->budget - used : 0;
    uint64_t pages = room / e->dev_page_stride;
    mem->binding_capped = pages > (uint64_t)mem->binding_pages;
    if (mem->binding_capped) pages = (uint64_t)mem->binding_pages;
    int32_t one = ctx_pages(e);
    const uint64_t seqs_pages = (uint64_t)one * (uint64_t)e->p.max_seqs;
    mem->seqs_capped = e->dev_layers < e->model->hp.n_layer && pages > seqs_pages;
    if (mem->seqs_capped) pages = seqs_pages;
    if (pages < (uint64_t)one) {
        char other[96] = ", or raise --gpu-memory-fraction";
        int32_t b = mem->binding_capped ? block_reaching_ctx(e, g, room) : 0;
        if (b)
            snprintf(other, sizeof other, ", or give --block-size %d: its pages leave less of each binding unused", b);
        else if (mem->binding_capped) other[0] = 0;
        return kvt_fail(KVT_ELIMIT,
                        "%s hold%s %llu KV pages (%llu tokens), less than one context of %d tokens: lower "
                        "--ctx-size to %llu or less%s",
                        mem->binding_capped ? "the kernels' KV bindings" : "the device memory left after the weights",
                        mem->binding_capped ? "" : "s", (unsigned long long)pages,
                        (unsigned long long)pages * (uint64_t)e->p.block_size, e->p.n_ctx,
                        (unsigned long long)pages * (uint64_t)e->p.block_size, other);
    }
    return pool_planned(e, mem, (int32_t)pages);
}

const kvt_engine_mem *kvt_eng_gpu_mem(const kvt_eng_gpu *g) { return &g->mem; }

int kvt_engine_device_memory(const kvt_engine *e, kvt_engine_mem *out) {
    if (!e->gpu) return kvt_fail(KVT_EUNSUPPORTED, "the engine runs on the CPU");
    *out = *kvt_eng_gpu_mem(e->gpu);
    return 0;
}

void kvt_engine_describe_memory(const kvt_engine *e, char *buf, size_t cap) {
    if (cap) buf[0] = 0;
    if (!e->gpu || !cap) return;
    const kvt_engine_mem *m = kvt_eng_gpu_mem(e->gpu);
    uint64_t tokens = (uint64_t)m->n_pages * (uint64_t)e->p.block_size;
    char how[128], split[192] = "";
    const int32_t L = e->model->hp.n_layer;
    if (e->dev_layers < L)
        snprintf(split, sizeof split,
                 "; the first %d of %d layers on the GPU, the other %d and the output matrix on the CPU, their KV "
                 "in host memory (%s)",
                 e->dev_layers, L, L - e->dev_layers, sz(m->host_kv_bytes));
    if (!m->planned) snprintf(how, sizeof how, "given");
    else if (m->seqs_capped) snprintf(how, sizeof how, "planned, held to --parallel %d contexts", e->p.max_seqs);
    else if (m->binding_capped)
        snprintf(how, sizeof how, "planned, held to the %d pages the kernels' %d KV bindings reach", m->binding_pages,
                 KVT_GPU_KV_CHUNKS);
    else snprintf(how, sizeof how, "planned");
    snprintf(buf, cap,
             "%s: device memory %s, the engine's share %s = %s: weights %s, activations %s, KV pool %s (%s): "
             "%d pages, %llu tokens, %.1f sessions of %d tokens%s",
             kvt_eng_gpu_name(e->gpu), sz(m->device_bytes), fr(m->fraction), sz(m->budget), sz(m->weight_bytes),
             sz(m->act_bytes), sz(m->kv_bytes), how, m->n_pages, (unsigned long long)tokens,
             (double)tokens / (double)(e->p.n_ctx > 0 ? e->p.n_ctx : 1), e->p.n_ctx, split);
}
