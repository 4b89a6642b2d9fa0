// SPDX-License-Identifier: MIT
/* The engine's private state and the helpers its files share (engine.c: the
 * pool, sequences and forward pass; engine_attn.c: attention over the pages;
 * engine_blend.c: re-rotating stored K and recomputing tokens a sequence
 * already holds). Not for use outside src/engine/. */
#ifndef KVT_ENGINE_IMPL_H
#define KVT_ENGINE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "model.h"

/* Pages start on this boundary so SIMD loads of K/V rows can be aligned. */
#define PAGE_ALIGN 64
/* Free-list terminator and "no page" marker. */
#define NO_PAGE (-1)
/* Per-thread attention scratch regions start on this many floats (64 bytes). */
#define SCRATCH_ALIGN_FLOATS 16

/* ggml (and so the reference outputs) computes Q·K with Q rounded to the K
 * dtype and the softmax weights rounded to the V dtype before P·V. Doing the
 * same for an f16 cache keeps us within a few ulps of llama.cpp at no cost. */
#define ATTN_ROUND_TO_KV_DTYPE 1

/* The GPU engine (engine_gpu.c, engine_gpu_run.c), when the engine runs on a
 * device: NULL on the CPU. */
typedef struct kvt_eng_gpu kvt_eng_gpu;

typedef struct {
    int active;
    int32_t len;     /* tokens */
    int32_t n_pages; /* ceil(len / B) */
    int32_t *pages;  /* (max_pages_per_seq) */
} seq_state;

struct kvt_engine {
    const kvt_model *model;
    kvt_engine_params p;
    kvt_eng_gpu *gpu; /* the forward pass and the pages on a device, or NULL */
    kvt_pool *pool;
    size_t row_bytes; /* bytes of one stored K or V row (head_dim values of kv_dtype) */
    int32_t kv_dim;   /* n_head_kv * head_dim */
    int32_t q_dim;    /* n_head * head_dim */

    /* page pool. page_bytes is a whole page's layout (every layer), what page
     * I/O moves. Where the layers live: on the CPU all in page_mem; on a GPU
     * the first dev_layers layers run there and hold their KV in the device's
     * pool, the first dev_page_bytes of each page's layout; with partial
     * offload (dev_layers below the layer count) the others run on the CPU
     * and page_mem holds only each page's tail from dev_page_bytes on,
     * page_stride bytes apart (kvt_eng_kv_offset counts from layer
     * dev_layers). */
    size_t page_bytes, page_stride;         /* stride: page_mem's bytes per page, rounded up to PAGE_ALIGN (0: none) */
    uint8_t *page_mem;                      /* (n_pages, page_stride), or NULL when every layer is on the device */
    int32_t dev_layers;                     /* layers on the device, the first ones: 0 on the CPU */
    size_t dev_page_bytes, dev_page_stride; /* the device's share of a page (page_mem's starts there in a page's
                                             * layout), and its stride in the device pool */
    int no_host_pages;                      /* kvt_page_host*() return NULL (kvt_engine_set_host_pages) */
    int32_t *refcount;                      /* (n_pages) */
    int32_t *free_next;                     /* (n_pages) free-list links */
    int32_t free_head, n_free;

    /* sequences */
    seq_state *seqs; /* (max_seqs) */
    int32_t max_pages_per_seq;
    int32_t *batch_count; /* (max_seqs) scratch for decode() checks */

    /* activations for one chunk of up to nb = n_batch tokens */
    float *x;            /* (nb, n_embd) residual stream */
    float *xb;           /* (nb, n_embd) normed input / projection output */
    float *q;            /* (nb, q_dim) */
    float *k;            /* (nb, kv_dim) */
    float *v;            /* (nb, kv_dim) */
    float *att;          /* (nb, q_dim) attention output, heads concatenated */
    float *hb;           /* (nb, n_ff) gate, then silu(gate) * up */
    float *hb2;          /* (nb, n_ff) up */
    float *rope_cos;     /* (nb, rope_dim/2) */
    float *rope_sin;     /* (nb, rope_dim/2) */
    float *rope_cos_alt; /* (nb, rope_dim/2) sliding layers with their own rope base (gemma3), else NULL */
    float *rope_sin_alt; /* (nb, rope_dim/2) */
    int32_t *pos;        /* (nb) position of each token in its sequence */
    int32_t *tseq;       /* (nb) sequence of each token */
    int32_t *tpage;      /* (nb) page receiving each token's K/V */
    int32_t *tslot;      /* (nb) slot within that page */
    int32_t *wanted;     /* (nb) chunk rows that want logits */
    int32_t *agroup;     /* (nb + 1) first chunk row of each attention group (engine_attn.c) */
    /* per-thread attention scratch, scratch_stride floats per thread, in regions
     * at these float offsets (see kvt_eng_attn_scratch_layout) */
    float *scratch;
    size_t scratch_stride;
    size_t sc_qh, sc_kdq, sc_vdq, sc_tmp, sc_acc, sc_runs;
    uint8_t *qrow; /* (row_bytes) q8_0 KV: one K row quantized before it goes into its page column */
};

/* Byte offset of the (layer, kv = 0 K / 1 V, head) block of a page plus
 * slot rows (see the page layout in engine.c). */
size_t kvt_eng_kv_offset(const kvt_engine *e, int32_t layer, int kv, int32_t head, int32_t slot);
/* cos/sin of every rotated pair at position pos (alt: the sliding layers'
 * own rope). unscaled leaves out rope_attn_factor: a pure rotation, which is
 * what moving an already-rotated key by pos positions takes. */
void kvt_eng_rope_angles(const kvt_model *m, int32_t pos, int alt, int unscaled, float *cs, float *sn);
/* Rotates the leading rope_dim dims of each of n_heads heads of row. */
void kvt_eng_rope_apply(const kvt_hparams *hp, float *row, int32_t n_heads, const float *cs, const float *sn);
/* Writes one K row (head_dim values, already roped) of token slot of page
 * memory pg, layer, kv head g, in the KV dtype. */
void kvt_eng_put_k_row(kvt_engine *e, uint8_t *pg, int32_t layer, int32_t g, int32_t slot, const float *kr);
/* The forward pass in pieces, over the n tokens of the chunk set up in
 * pos/tseq/tpage/tslot with their embeddings in x:
 *   chunk_begin  rope angles and the embedding scale
 *   layers       layers [l0, l1): K/V stored, attention, feed-forward
 *   layer_qkv    layer l's q, k, v (normed, biased, roped) into e->q/k/v, nothing stored
 *   store_kv     token i's k and v rows of layer l into its slot */
void kvt_eng_chunk_begin(kvt_engine *e, int32_t n);
void kvt_eng_layers(kvt_engine *e, int32_t n, int32_t l0, int32_t l1);
void kvt_eng_layer_qkv(kvt_engine *e, int32_t l, int32_t n);
void kvt_eng_store_kv(kvt_engine *e, int32_t layer, int32_t i);
/* engine_attn.c: sizes the per-thread attention scratch (sc_* offsets,
 * scratch_stride) for the engine's model, context and KV dtype; and layer
 * l's attention of the chunk's n tokens, whose K/V are stored, into e->att. */
void kvt_eng_attn_scratch_layout(kvt_engine *e);
void kvt_eng_attention(kvt_engine *e, int32_t l, int32_t n);

/* ---- the GPU engine -------------------------------------------------------
 * kvt_eng_gpu_new opens Vulkan device index for e (whose params, page sizes
 * and pool size are set), checks that the model runs there, uploads the
 * weights and makes the device page pool; on failure e->gpu stays NULL and
 * the error says what. forward runs a chunk set up as for forward_chunk
 * (engine.c), n <= kvt_eng_gpu_chunk tokens, and writes the normed final
 * hidden rows want_hidden marks (NULL: none) at *hidden, advancing it, as
 * forward_chunk does. The page I/O calls are the engine's (engine.h) for a
 * device pool, ids already checked. */
int kvt_eng_gpu_new(kvt_engine *e, int index);
void kvt_eng_gpu_free(kvt_eng_gpu *g);
int32_t kvt_eng_gpu_chunk(const kvt_eng_gpu *g);
int kvt_eng_gpu_forward(kvt_engine *e, int32_t n, int32_t n_want, float *logits, const int8_t *want_hidden,
                        float **hidden);
int kvt_eng_gpu_pages_out(kvt_eng_gpu *g, const kvt_page_out *io, size_t n, size_t page_bytes);
int kvt_eng_gpu_pages_in(kvt_eng_gpu *g, const kvt_page_in *io, size_t n, size_t page_bytes);
int kvt_eng_gpu_pages_copy(kvt_eng_gpu *g, const int32_t *dst, const int32_t *src, size_t n, size_t page_bytes);
void *kvt_eng_gpu_stage(kvt_eng_gpu *g, size_t n, size_t page_bytes);
void *kvt_eng_gpu_host_alloc(kvt_eng_gpu *g, size_t bytes);
void kvt_eng_gpu_host_free(kvt_eng_gpu *g, void *p);
size_t kvt_eng_gpu_host_max(const kvt_eng_gpu *g);
const char *kvt_eng_gpu_numerics(const kvt_eng_gpu *g);
const char *kvt_eng_gpu_name(const kvt_eng_gpu *g);
int kvt_eng_gpu_lost(const kvt_eng_gpu *g);
uint64_t kvt_eng_gpu_weight_bytes(const kvt_eng_gpu *g);
const kvt_eng_gpu_stats *kvt_eng_gpu_stats_of(const kvt_eng_gpu *g);
const kvt_engine_mem *kvt_eng_gpu_mem(const kvt_eng_gpu *g);

#endif
