// SPDX-License-Identifier: MIT
/* The engine on a GPU (a Vulkan device of src/gpu): the weights are uploaded
 * once, T0's page pool lives in device memory, and a chunk's forward pass is
 * recorded as dispatches of the device's kernels. The host keeps what is
 * small and shared with the CPU path: slot reservation and page tables, the
 * embedding rows and the rope angles (the same functions as the CPU engine),
 * and sampling. Pages reach the host only through the page I/O calls, each
 * run one batched copy through a staging buffer.
 *
 * It runs every architecture of the CPU engine (the variations of
 * src/model/arch.c: biases, q/k head norms, post-norms, GELU, scaled queries
 * and embeddings, soft-capping, sliding windows with their own rope) with
 * the weight types of src/gpu (F32, F16, Q8_0 and the 4-6 bit quants) and f16,
 * f32 or q8_0 KV; anything else is refused when the engine is made, naming what. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "engine_gpu_impl.h"
#include "kv_quant.h"
#include "model.h"
#include "ops.h"

/* Why this model cannot run on the GPU engine yet, or 0. Every architecture
 * the CPU engine runs (llama, qwen2, qwen3, phi3, gemma2, gemma3) runs here. */
static int model_supported(const kvt_model *m, kvt_kv_dtype kv) {
    const kvt_hparams *hp = &m->hp;
    const char *why = NULL;
    if (kv == KVT_KV_Q8_0 && hp->head_dim % 32) why = "q8_0 KV with a head size that is not a multiple of 32";
    else if (hp->rope_dim % 2 || hp->head_dim % 2) why = "an odd head or rope dimension";
    else if (hp->head_dim > 256) why = "heads wider than 256";
    if (!why) return 0;
    return kvt_fail(KVT_EUNSUPPORTED,
                    "the GPU engine cannot run this %s model in this version: it has %s, which only the CPU "
                    "engine runs (--device cpu)",
                    hp->arch_name, why);
}

static int upload_w(kvt_eng_gpu *g, const kvt_wmat *w, const char *name, int32_t layer, kvt_gpu_wmat **out) {
    if (!kvt_gpu_wmat_supported(w->type))
        return kvt_fail(KVT_EUNSUPPORTED,
                        "%s%.0d %s: weights of type %s have no GPU kernel (every type the model loader "
                        "accepts has one)",
                        layer >= 0 ? "layer " : "", layer, name, kvt_ggml_type_name(w->type));
    int rc = kvt_gpu_wmat_new(g->d, w->type, (uint32_t)w->rows, (uint32_t)w->cols, w->data, w->row_bytes, out);
    if (rc) return kvt_fail_prefix(rc, "uploading %s: ", name), rc;
    g->weight_bytes += kvt_gpu_wmat_bytes(*out);
    return 0;
}

static int upload_f32(kvt_eng_gpu *g, const float *v, int64_t n, kvt_gpu_buf **out) {
    int rc = kvt_gpu_buf_new(g->d, KVT_GPU_DEVICE, (uint64_t)n * 4, out);
    if (!rc) rc = kvt_gpu_upload(g->d, *out, 0, v, (uint64_t)n * 4);
    if (!rc) g->weight_bytes += (uint64_t)n * 4;
    return rc;
}

/* A per-layer vector of the architecture variations, when the model has it. */
static int upload_opt(kvt_eng_gpu *g, const float *v, int64_t n, kvt_gpu_buf **out) {
    return v ? upload_f32(g, v, n, out) : 0;
}

/* Layer l's biases and extra norms (those the model has). */
static int upload_arch(kvt_engine *e, kvt_eng_gpu *g, int32_t l) {
    const kvt_hparams *hp = &e->model->hp;
    const kvt_layer *L = &e->model->layers[l];
    gpu_layer *G = &g->L[l];
    int rc = upload_opt(g, L->bq, e->q_dim, &G->bq);
    if (!rc) rc = upload_opt(g, L->bk, e->kv_dim, &G->bk);
    if (!rc) rc = upload_opt(g, L->bv, e->kv_dim, &G->bv);
    if (!rc) rc = upload_opt(g, L->q_norm, hp->head_dim, &G->q_norm);
    if (!rc) rc = upload_opt(g, L->k_norm, hp->head_dim, &G->k_norm);
    if (!rc) rc = upload_opt(g, L->post_attn_norm, hp->n_embd, &G->post_attn_norm);
    if (!rc) rc = upload_opt(g, L->post_ffn_norm, hp->n_embd, &G->post_ffn_norm);
    return rc ? kvt_fail_prefix(rc, "layer %d's biases and norms: ", l) : 0;
}

static int upload_weights(kvt_engine *e, kvt_eng_gpu *g) {
    const kvt_model *m = e->model;
    const kvt_hparams *hp = &m->hp;
    g->L = kvt_xcalloc((size_t)e->dev_layers, sizeof *g->L);
    g->n_layer = e->dev_layers;
    int rc = 0;
    for (int32_t l = 0; !rc && l < g->n_layer; l++) {
        const kvt_layer *L = &m->layers[l];
        gpu_layer *G = &g->L[l];
        rc = upload_w(g, &L->wq, "attn_q", l, &G->wq);
        if (!rc) rc = upload_w(g, &L->wk, "attn_k", l, &G->wk);
        if (!rc) rc = upload_w(g, &L->wv, "attn_v", l, &G->wv);
        if (!rc) rc = upload_w(g, &L->wo, "attn_output", l, &G->wo);
        if (!rc) rc = upload_w(g, &L->w_gate, "ffn_gate", l, &G->wg);
        if (!rc) rc = upload_w(g, &L->w_up, "ffn_up", l, &G->wu);
        if (!rc) rc = upload_w(g, &L->w_down, "ffn_down", l, &G->wd);
        if (!rc) rc = upload_f32(g, L->attn_norm, hp->n_embd, &G->attn_norm);
        if (!rc) rc = upload_f32(g, L->ffn_norm, hp->n_embd, &G->ffn_norm);
        if (!rc) rc = upload_arch(e, g, l);
    }
    if (g->n_layer < hp->n_layer) return rc; /* partial offload: the final norm and logits run on the CPU */
    if (!rc) rc = upload_w(g, &m->output, "output", -1, &g->out);
    if (!rc) rc = upload_f32(g, m->output_norm, hp->n_embd, &g->out_norm);
    return rc;
}

/* The page pool in chunks of whole pages, none over the binding limit. A
 * page here is the device's share of a page's layout: every layer, or with
 * partial offload the layers the device runs (the first ones). */
static int make_pool(kvt_engine *e, kvt_eng_gpu *g) {
    const kvt_hparams *hp = &e->model->hp;
    kvt_gpu_kv *kv = &g->kv;
    kv->n_layer = (uint32_t)e->dev_layers;
    kv->n_head_kv = (uint32_t)hp->n_head_kv;
    kv->head_dim = (uint32_t)hp->head_dim;
    kv->block = (uint32_t)e->p.block_size;
    kv->dtype = e->p.kv_dtype == KVT_KV_Q8_0 ? KVT_GPU_KV_Q8_0
        : e->p.kv_dtype == KVT_KV_F16        ? KVT_GPU_KV_F16
                                             : KVT_GPU_KV_F32;
    kv->page_stride = e->dev_page_stride;
    uint64_t maxb = kvt_gpu_max_binding(g->d), per = maxb / e->dev_page_stride;
    if (per == 0) { /* the largest block whose page (64-byte aligned) fits one binding */
        uint64_t tok = e->dev_page_bytes / (size_t)e->p.block_size, fit = maxb / PAGE_ALIGN * PAGE_ALIGN / tok;
        char what[80] = "use --device cpu";
        if (fit) snprintf(what, sizeof what, "use a --block-size of at most %llu", (unsigned long long)fit);
        return kvt_fail(KVT_EPAGE,
                        "a KV page of %zu bytes (%d tokens) is larger than this device's largest binding (%llu "
                        "bytes); %s",
                        e->dev_page_bytes, e->p.block_size, (unsigned long long)maxb, what);
    }
    kv->pages_per_chunk = per > (uint64_t)e->p.n_pages ? (uint32_t)e->p.n_pages : (uint32_t)per;
    uint64_t n_chunks = ((uint64_t)e->p.n_pages + kv->pages_per_chunk - 1) / kv->pages_per_chunk;
    if (n_chunks > KVT_GPU_KV_CHUNKS) {
        /* --kv-active, named only where the pool came from it or was planned, counts both shares of a page
         * (the host's is 0 with every layer here), in exact bytes: a rounded figure could round up a page */
        const uint64_t reach = per * KVT_GPU_KV_CHUNKS, t0 = e->dev_page_stride + e->page_stride;
        char fix[128];
        if (e->p.kv_active_bytes || g->mem.planned)
            snprintf(fix, sizeof fix, "lower --kv-active to %llu (%.2f MiB, %llu pages) or less",
                     (unsigned long long)(reach * t0), (double)(reach * t0) / (1 << 20), (unsigned long long)reach);
        else snprintf(fix, sizeof fix, "they hold a pool of %llu pages or less", (unsigned long long)reach);
        return kvt_fail(KVT_ELIMIT,
                        "a KV pool of %d pages (%.1f MiB on the device) needs %d bindings of at most %.2f MiB on "
                        "this device, over the %d the GPU engine binds; %s",
                        e->p.n_pages, (double)e->p.n_pages * (double)e->dev_page_stride / (1 << 20), (int)n_chunks,
                        (double)maxb / (1 << 20), KVT_GPU_KV_CHUNKS, fix);
    }
    kv->n_chunks = (int)n_chunks;
    for (int c = 0; c < kv->n_chunks; c++) {
        uint64_t pages = KVT_MIN((uint64_t)kv->pages_per_chunk,
                                 (uint64_t)e->p.n_pages - (uint64_t)c * kv->pages_per_chunk);
        int rc = kvt_gpu_buf_new(g->d, KVT_GPU_DEVICE, pages * e->dev_page_stride, &kv->chunk[c]);
        if (rc) return kvt_fail_prefix(rc, "the KV pool in device memory: "), rc;
    }
    return 0;
}

/* One activation or staging buffer: where it goes, its bytes and kind. */
typedef struct {
    kvt_gpu_buf **slot;
    uint64_t bytes;
    kvt_gpu_buf_kind kind;
} act_buf;

#define N_ACT 17

static act_buf dev_f32(kvt_gpu_buf **slot, uint64_t n) { return (act_buf){slot, (n ? n : 1) * 4, KVT_GPU_DEVICE}; }

static int quantized(const kvt_wmat *w) {
    return w->type != KVT_TYPE_F32 && w->type != KVT_TYPE_F16 && w->type != KVT_TYPE_BF16;
}

/* The columns the quantized-activation scratch holds per token: a matmul's
 * widest input, or 0 where every weight is F32, F16 or BF16 (no matmul quantizes
 * its input, so no scratch is reserved or planned). */
static uint32_t matmul_cols(const kvt_engine *e) {
    const kvt_model *m = e->model;
    const kvt_hparams *hp = &m->hp;
    int any = quantized(&m->output);
    for (int32_t l = 0; !any && l < hp->n_layer; l++) {
        const kvt_layer *L = &m->layers[l];
        any = quantized(&L->wq) || quantized(&L->wk) || quantized(&L->wv) || quantized(&L->wo) ||
            quantized(&L->w_gate) || quantized(&L->w_up) || quantized(&L->w_down);
    }
    return any ? (uint32_t)KVT_MAX(KVT_MAX(hp->n_embd, hp->n_ff), e->q_dim) : 0;
}

/* Long: the activations for a chunk of g->nb tokens and the staging buffers, sized (into bufs, N_ACT of
 * them) before anything is made, so that the memory plan sees them first. */
static int act_layout(kvt_engine *e, kvt_eng_gpu *g, act_buf *bufs) {
    const kvt_hparams *hp = &e->model->hp;
    const uint64_t maxb = kvt_gpu_max_binding(g->d);
    const uint64_t widest = (uint64_t)KVT_MAX(KVT_MAX(hp->n_embd, hp->n_ff), KVT_MAX(e->q_dim, e->kv_dim));
    /* with partial offload the output matrix runs on the CPU: no logits buffers (a large vocabulary's take
     * 128 MiB), so the plan leaves that memory to the layers */
    const int head = e->dev_layers == hp->n_layer;
    uint64_t nb = KVT_MIN((uint64_t)e->p.n_batch, maxb / (widest * 4));
    if (nb > 4096) nb = 4096;
    if (nb == 0 || (head && (uint64_t)hp->n_vocab * 4 > maxb))
        return kvt_fail(KVT_ELIMIT, "this device's largest binding (%llu bytes) cannot hold one row of %lld floats",
                        (unsigned long long)maxb, (long long)KVT_MAX((int64_t)widest, (int64_t)hp->n_vocab));
    g->nb = (int32_t)nb;
    uint64_t lg = KVT_MIN(KVT_MIN(maxb, LOGITS_STAGE_BYTES) / ((uint64_t)hp->n_vocab * 4), nb);
    g->lg = (uint32_t)(lg ? lg : 1);
    const uint64_t D = (uint64_t)hp->n_embd, half = (uint64_t)hp->rope_dim / 2, V = (uint64_t)hp->n_vocab;
    /* what the logits buffers add over their one-float stand-ins (for the plan's -ngl hint) */
    g->head_dev_bytes = (uint64_t)g->lg * (2 * D + V) * 4 - 3 * 4, g->head_stage_bytes = (uint64_t)g->lg * V * 4 - 4;
    const uint64_t hl = head ? g->lg : 0; /* the rows the logits buffers hold */
    g->meta_words = (uint32_t)(KVT_GPU_META_WORDS * nb + KVT_MIN(nb, (uint64_t)e->p.max_seqs) * e->max_pages_per_seq);
    g->off_cs = nb * D * 4;
    const uint64_t angles = nb * half > 0 ? nb * half : 1;
    g->off_sn = g->off_cs + angles * 4;
    g->off_meta = g->off_sn + angles * 4;
    uint64_t io = KVT_MAX(1ull, IO_STAGE_BYTES / e->page_bytes);
    if (e->p.n_pages > 0 && io > (uint64_t)e->p.n_pages) io = (uint64_t)e->p.n_pages; /* 0: planned later */
    g->io_pages = (uint32_t)io;
    act_buf l[N_ACT] = {
        dev_f32(&g->x, nb * D),
        dev_f32(&g->xb, nb * D),
        dev_f32(&g->q, nb * (uint64_t)e->q_dim),
        dev_f32(&g->k_, nb * (uint64_t)e->kv_dim),
        dev_f32(&g->v, nb * (uint64_t)e->kv_dim),
        dev_f32(&g->att, nb * (uint64_t)e->q_dim),
        dev_f32(&g->hb, nb * (uint64_t)hp->n_ff),
        dev_f32(&g->hb2, nb * (uint64_t)hp->n_ff),
        dev_f32(&g->cs, nb * half),
        dev_f32(&g->sn, nb * half),
        dev_f32(&g->meta, g->meta_words),
        dev_f32(&g->xw, hl * D),
        dev_f32(&g->xw2, hl * D),
        dev_f32(&g->logits, hl * V),
        {&g->in_stage, g->off_meta + (uint64_t)g->meta_words * 4, KVT_GPU_STAGING},
        {&g->out_stage, KVT_MAX(hl * V * 4, 4ull), KVT_GPU_STAGING},
        {&g->io_stage, io * e->page_bytes, KVT_GPU_STAGING},
    };
    memcpy(bufs, l, sizeof l);
    for (int i = 0; i < N_ACT - 1; i++) {
        if (bufs[i].kind == KVT_GPU_DEVICE) g->act_dev_bytes += bufs[i].bytes;
        else g->act_stage_bytes += bufs[i].bytes;
    }
    /* the kernels' quantized-activation scratch, reserved for the chunk in make_activations */
    if (matmul_cols(e)) g->act_dev_bytes += kvt_gpu_quant_scratch_bytes((uint32_t)g->nb, matmul_cols(e));
    if (e->rope_cos_alt) /* make_alt_rope's: the sliding layers' angles, on the device and staged */
        g->act_dev_bytes += 2 * angles * 4, g->act_stage_bytes += 2 * angles * 4;
    /* the page I/O staging buffer and kvt_pages_stage's (made on first use) at their largest, so that the
     * plan does not depend on the pool it plans */
    g->act_stage_bytes += 2 * KVT_MAX(1ull, IO_STAGE_BYTES / e->page_bytes) * e->page_bytes;
    return 0;
}

static int make_activations(kvt_engine *e, kvt_eng_gpu *g, const act_buf *bufs) {
    int rc = 0;
    for (int i = 0; i < N_ACT && !rc; i++) rc = kvt_gpu_buf_new(g->d, bufs[i].kind, bufs[i].bytes, bufs[i].slot);
    if (!rc && matmul_cols(e)) rc = kvt_gpu_kernels_reserve_scratch(g->k, (uint32_t)g->nb, matmul_cols(e));
    if (rc) kvt_fail_prefix(rc, "GPU activations for %d tokens: ", g->nb);
    return rc;
}

/* The second set of rope angles for sliding layers with their own base, and
 * its staging buffer, when the model has them. */
static int make_alt_rope(kvt_engine *e, kvt_eng_gpu *g) {
    if (!e->rope_cos_alt) return 0;
    const uint64_t n = KVT_MAX(1ull, (uint64_t)g->nb * (uint64_t)(e->model->hp.rope_dim / 2));
    int rc = kvt_gpu_buf_new(g->d, KVT_GPU_DEVICE, n * 4, &g->cs_alt);
    if (!rc) rc = kvt_gpu_buf_new(g->d, KVT_GPU_DEVICE, n * 4, &g->sn_alt);
    if (!rc) rc = kvt_gpu_buf_new(g->d, KVT_GPU_STAGING, 2 * n * 4, &g->alt_stage);
    if (rc) kvt_fail_prefix(rc, "the sliding layers' rope angles: ");
    return rc;
}

/* The device's numerics; with partial offload also how many layers it runs
 * and the CPU kernels' id, since the CPU computes the rest. */
static void numerics_id(const kvt_engine *e, kvt_eng_gpu *g) {
    const kvt_gpu_info *in = kvt_gpu_dev_info(g->d);
    int n = snprintf(g->numerics, sizeof g->numerics, "vk-%04x-%04x-%s", in->vendor_id, in->device_id, in->numerics);
    if (e->dev_layers < e->model->hp.n_layer && n > 0 && (size_t)n < sizeof g->numerics)
        snprintf(g->numerics + n, sizeof g->numerics - (size_t)n, "-ngl%d+%s", e->dev_layers, kvt_ops_numerics_id());
}

/* Appends to msg what the model needs against what the device has, for an
 * out-of-memory failure at load. */
static void oom_hint(const kvt_engine *e, const kvt_eng_gpu *g, char *msg, size_t cap) {
    uint64_t heap = 0;
    const kvt_gpu_info *in = g->d ? kvt_gpu_dev_info(g->d) : NULL;
    for (int h = 0; in && h < in->n_heaps; h++)
        if (in->heap_device_local[h] && in->heap_bytes[h] > heap) heap = in->heap_bytes[h];
    size_t len = strlen(msg);
    snprintf(msg + len, cap - len,
             " (the weights take %.2f GiB and the KV pool %.2f GiB; the device's memory is "
             "%.2f GiB: %s, or run a smaller model or --device cpu)",
             (double)e->model->weight_bytes / (1 << 30), (double)e->p.n_pages * (double)e->dev_page_stride / (1 << 30),
             (double)heap / (1 << 30),
             e->p.kv_active_bytes || g->mem.planned || !e->p.n_pages ? "lower --kv-active" : "use a smaller KV pool");
}

/* Long: the device, its kernels, the model check, activations, the memory plan, weights and pool in order,
 * undone on failure. */
int kvt_eng_gpu_new(kvt_engine *e, int index) {
    int rc = model_supported(e->model, e->p.kv_dtype);
    if (rc) return rc;
    kvt_eng_gpu *g = kvt_xcalloc(1, sizeof *g);
    e->gpu = g;
    act_buf act[N_ACT];
    rc = kvt_gpu_open(index, &g->d);
    if (!rc) rc = kvt_gpu_kernels_new(g->d, &g->k);
    if (!rc) rc = act_layout(e, g, act);
    if (!rc) rc = kvt_eng_gpu_plan_fit(e, g);
    if (!rc) rc = make_activations(e, g, act);
    if (!rc) rc = make_alt_rope(e, g);
    if (!rc) rc = upload_weights(e, g);
    if (!rc) rc = kvt_eng_gpu_plan_pool(e, g);
    if (!rc) rc = make_pool(e, g);
    if (!rc) {
        numerics_id(e, g);
        return 0;
    }
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", kvt_errmsg());
    if (rc == -ENOMEM) oom_hint(e, g, msg, sizeof msg);
    kvt_eng_gpu_free(g);
    e->gpu = NULL;
    return kvt_fail(rc, "GPU engine on vulkan:%d: %s", index, msg);
}

void kvt_eng_gpu_free(kvt_eng_gpu *g) {
    if (!g) return;
    for (int32_t l = 0; l < g->n_layer; l++) {
        gpu_layer *G = &g->L[l];
        kvt_gpu_wmat_free(G->wq), kvt_gpu_wmat_free(G->wk), kvt_gpu_wmat_free(G->wv), kvt_gpu_wmat_free(G->wo);
        kvt_gpu_wmat_free(G->wg), kvt_gpu_wmat_free(G->wu), kvt_gpu_wmat_free(G->wd);
        kvt_gpu_buf_free(G->attn_norm), kvt_gpu_buf_free(G->ffn_norm);
        kvt_gpu_buf *arch[] = {G->bq, G->bk, G->bv, G->q_norm, G->k_norm, G->post_attn_norm, G->post_ffn_norm};
        for (size_t i = 0; i < KVT_ARRAY_LEN(arch); i++) kvt_gpu_buf_free(arch[i]);
    }
    kvt_gpu_buf_free(g->cs_alt), kvt_gpu_buf_free(g->sn_alt), kvt_gpu_buf_free(g->alt_stage);
    free(g->L);
    kvt_gpu_wmat_free(g->out);
    kvt_gpu_buf *bufs[] = {g->out_norm, g->x,        g->xb,        g->q,        g->k_,        g->v,  g->att,
                           g->hb,       g->hb2,      g->cs,        g->sn,       g->meta,      g->xw, g->xw2,
                           g->logits,   g->in_stage, g->out_stage, g->io_stage, g->user_stage};
    for (size_t i = 0; i < KVT_ARRAY_LEN(bufs); i++) kvt_gpu_buf_free(bufs[i]);
    for (int c = 0; c < g->kv.n_chunks; c++) kvt_gpu_buf_free(g->kv.chunk[c]);
    for (size_t i = 0; i < g->n_pinned; i++) kvt_gpu_buf_free(g->pinned[i]); /* what the cache did not give back */
    free(g->pinned);
    kvt_gpu_kernels_free(g->k);
    kvt_gpu_close(g->d);
    free(g);
}

int32_t kvt_eng_gpu_chunk(const kvt_eng_gpu *g) { return g->nb; }
const char *kvt_eng_gpu_numerics(const kvt_eng_gpu *g) { return g->numerics; }
const kvt_eng_gpu_stats *kvt_eng_gpu_stats_of(const kvt_eng_gpu *g) { return &g->st; }
uint64_t kvt_eng_gpu_weight_bytes(const kvt_eng_gpu *g) { return g->weight_bytes; }
const char *kvt_eng_gpu_name(const kvt_eng_gpu *g) { return kvt_gpu_dev_info(g->d)->name; }
int kvt_eng_gpu_lost(const kvt_eng_gpu *g) { return kvt_gpu_lost(g->d); }
