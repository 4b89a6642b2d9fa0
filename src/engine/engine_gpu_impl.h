// SPDX-License-Identifier: MIT
/* The GPU engine's state, shared by engine_gpu.c (making it) and
 * engine_gpu_run.c (the forward pass and page I/O). Not for use outside
 * src/engine/. */
#ifndef KVT_ENGINE_GPU_IMPL_H
#define KVT_ENGINE_GPU_IMPL_H

#include "engine_impl.h"
#include "gpu.h"

/* Layers in one command list (kvt_gpu_flush) once the first few are queued:
 * a layer is ~20 dispatches, and a list holds a bounded number of them. */
#define LAYERS_PER_SUBMIT 8
/* The page I/O staging buffer's size: runs longer than this go in pieces. */
#define IO_STAGE_BYTES (64ull << 20)
/* The logits staging buffer's size, for one pass of the output matrix. */
#define LOGITS_STAGE_BYTES (64ull << 20)

/* A layer the device runs: with partial offload (kvt_engine.dev_layers below
 * the layer count) only the first ones have one, and the output matrix and
 * norm stay on the CPU (out and out_norm NULL). */
typedef struct {
    kvt_gpu_wmat *wq, *wk, *wv, *wo, *wg, *wu, *wd;
    kvt_gpu_buf *attn_norm, *ffn_norm;
    /* the architecture variations' (NULL where the model has none): q/k/v
     * biases, per-head q/k norms, and the norms of each block's output */
    kvt_gpu_buf *bq, *bk, *bv, *q_norm, *k_norm, *post_attn_norm, *post_ffn_norm;
} gpu_layer;

struct kvt_eng_gpu {
    kvt_gpu_dev *d;
    kvt_gpu_kernels *k;
    kvt_gpu_kv kv;
    int32_t n_layer; /* entries of L */
    gpu_layer *L;
    kvt_gpu_wmat *out;
    kvt_gpu_buf *out_norm;
    int32_t nb;  /* tokens per chunk */
    uint32_t lg; /* wanted rows per pass of the output matrix */
    /* device activations (engine_impl.h's host ones, by the same names) */
    kvt_gpu_buf *x, *xb, *q, *k_, *v, *att, *hb, *hb2, *cs, *sn, *meta, *xw, *xw2, *logits;
    kvt_gpu_buf *in_stage, *out_stage, *io_stage;
    kvt_gpu_buf *user_stage; /* kvt_pages_stage's: made on first use, at most io_pages pages */
    kvt_gpu_buf **pinned;    /* kvt_eng_gpu_host_alloc's buffers (T1's arena), page I/O copies straight */
    size_t n_pinned, cap_pinned;
    uint64_t off_cs, off_sn, off_meta; /* in in_stage; x at 0 */
    /* the rope angles of sliding layers with their own base (gemma3), and
     * their staging buffer (cos, then sin); NULL for other models */
    kvt_gpu_buf *cs_alt, *sn_alt, *alt_stage;
    uint32_t meta_words;
    uint32_t io_pages; /* pages io_stage holds */
    uint64_t weight_bytes;
    uint64_t act_dev_bytes, act_stage_bytes; /* the activations', and the staging buffers' with kvt_pages_stage's */
    /* what the logits buffers (xw, xw2, logits, out_stage) add on the device and in staging with every layer
     * here (part of the above then); with partial offload they are one-float stand-ins */
    uint64_t head_dev_bytes, head_stage_bytes;
    kvt_engine_mem mem; /* the memory plan (engine_gpu_plan.c) */
    kvt_eng_gpu_stats st;
    char numerics[128];
};

/* The memory plan (engine_gpu_plan.c). Before the weights go up (the
 * activations made): whether the model, its activations and the smallest
 * pool (one context when planned, the given pool otherwise) fit the budget,
 * and n_gpu_layers; KVT_ELIMIT / KVT_EUNSUPPORTED naming the sizes and what
 * would fit. After: the pool's pages, into e->p.n_pages when planned. */
int kvt_eng_gpu_plan_fit(kvt_engine *e, kvt_eng_gpu *g);
int kvt_eng_gpu_plan_pool(kvt_engine *e, kvt_eng_gpu *g);

#endif
