// SPDX-License-Identifier: MIT
/* The engine: the KV page pool, sequences (page tables) and the forward pass
 * of llama-family models over a batch of tokens from several sequences.
 * Attention reads K/V only through page tables; see engine.h for the layout
 * and the batch-invariance contract. */
#include "engine_impl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "arch_ops.h"
#include "attn.h"
#include "common.h"
#include "kv_quant.h"
#include "model.h"
#include "ops.h"

/* Pools of at least this size are aligned to it and advised as huge pages. */
#define POOL_HUGE (2u << 20)

/* The page pool's memory. Its pages are first written by a prefill or a
 * restore; in a fresh process a 4 KiB page at a time that is one fault per
 * 4 KiB (8,192 for a 32 MiB restore), each costly on a virtual machine. A
 * large pool is 2 MiB aligned and advised as transparent huge pages, so it
 * faults in 2 MiB at a time; where the kernel gives none the advice is
 * ignored. NULL if the memory cannot be had. */
static uint8_t *pool_alloc(size_t n) {
    if (n < POOL_HUGE) return aligned_alloc(PAGE_ALIGN, n);
    void *p = NULL;
    size_t len = (n + POOL_HUGE - 1) / POOL_HUGE * POOL_HUGE;
    if (posix_memalign(&p, POOL_HUGE, len)) return NULL;
    (void)madvise(p, len, MADV_HUGEPAGE);
    return p;
}

kvt_engine_params kvt_engine_default_params(void) {
    kvt_engine_params p = {0};
    p.block_size = KVT_DEFAULT_BLOCK_SIZE;
    p.kv_dtype = KVT_KV_F16;
    p.kv_active_bytes = KVT_DEFAULT_KV_ACTIVE_BYTES;
    p.n_pages = 0;
    p.n_threads = 1;
    p.n_batch = KVT_DEFAULT_N_BATCH;
    p.max_seqs = KVT_DEFAULT_MAX_SEQS;
    p.n_ctx = 0;
    p.gpu_memory_fraction = KVT_DEFAULT_GPU_MEMORY_FRACTION;
    p.n_gpu_layers = -1;
    return p;
}

static float *alloc_f32(int64_t n) { return kvt_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(float)); }
static int32_t *alloc_i32(int64_t n) { return kvt_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t)); }

/* The forward pass's buffers for a batch of p.n_batch tokens (shapes in
 * kvt_engine's fields), and the per-thread scratch. */
static void alloc_activations(kvt_engine *e) {
    const kvt_hparams *hp = &e->model->hp;
    int64_t nb = e->p.n_batch, rope_half = hp->rope_dim / 2;
    e->x = alloc_f32(nb * hp->n_embd);
    e->xb = alloc_f32(nb * hp->n_embd);
    e->q = alloc_f32(nb * e->q_dim);
    e->k = alloc_f32(nb * e->kv_dim);
    e->v = alloc_f32(nb * e->kv_dim);
    e->att = alloc_f32(nb * e->q_dim);
    e->hb = alloc_f32(nb * hp->n_ff);
    e->hb2 = alloc_f32(nb * hp->n_ff);
    e->rope_cos = alloc_f32(nb * rope_half);
    e->rope_sin = alloc_f32(nb * rope_half);
    if (hp->rope_base_swa > 0) {
        e->rope_cos_alt = alloc_f32(nb * rope_half);
        e->rope_sin_alt = alloc_f32(nb * rope_half);
    }
    e->pos = alloc_i32(nb);
    e->tseq = alloc_i32(nb);
    e->tpage = alloc_i32(nb);
    e->tslot = alloc_i32(nb);
    e->wanted = alloc_i32(nb);
    e->agroup = alloc_i32(nb + 1);
    kvt_eng_attn_scratch_layout(e);
    e->scratch = alloc_f32((int64_t)kvt_pool_threads(e->pool) * (int64_t)e->scratch_stride);
    e->qrow = kvt_xmalloc(e->row_bytes);
}

/* Every page free, refcount 0, on the free list in ascending id order so
 * that allocation order is reproducible. */
static void pages_init(kvt_engine *e) {
    int32_t n = e->p.n_pages;
    e->refcount = kvt_xcalloc((size_t)n, sizeof(int32_t));
    e->free_next = alloc_i32(n);
    for (int32_t i = 0; i < n; i++) e->free_next[i] = i + 1 < n ? i + 1 : NO_PAGE;
    e->free_head = 0;
    e->n_free = n;
}

/* A pool from a budget (--kv-active) that holds less than one context works,
 * but a sequence as long as the context never fits: says so, with what would. */
static void warn_short_pool(const kvt_engine_params *p, size_t page_stride) {
    int64_t ctx_pages = ((int64_t)p->n_ctx + p->block_size - 1) / p->block_size;
    if (p->n_pages < 1 || p->n_pages >= ctx_pages) return;
    char t[32];
    kvt_logk(KVT_LOG_WARN, "kv_active_bytes,t0_tokens,ctx",
             "--kv-active %llu bytes holds %lld tokens, less than one context of %d (--ctx-size): a longer sequence "
             "cannot run; give at least %s for one",
             (unsigned long long)p->kv_active_bytes, (long long)p->n_pages * p->block_size, p->n_ctx,
             kvt_size_text((uint64_t)ctx_pages * page_stride, t));
}

/* Where a page's layers live (engine_impl.h): on the CPU all in page_mem; on
 * a device its first n_gpu_layers (all when -1 or at least the layer count)
 * there, the rest in page_mem. */
static void split_layers(kvt_engine *e, const kvt_engine_params *p) {
    const int32_t L = e->model->hp.n_layer;
    e->dev_layers = !p->device ? 0 : p->n_gpu_layers < 0 || p->n_gpu_layers >= L ? L : p->n_gpu_layers;
    e->dev_page_bytes = e->page_bytes / (size_t)L * (size_t)e->dev_layers;
    e->dev_page_stride = (e->dev_page_bytes + PAGE_ALIGN - 1) / PAGE_ALIGN * PAGE_ALIGN;
    e->page_stride = (e->page_bytes - e->dev_page_bytes + PAGE_ALIGN - 1) / PAGE_ALIGN * PAGE_ALIGN;
}

/* The page pool's host share, n_pages of page_stride bytes (none when the device holds every layer). */
static int host_pages_alloc(kvt_engine *e) {
    uint64_t bytes;
    if (e->page_stride == 0) return 0;
    if (kvt_mul_ovf((uint64_t)e->p.n_pages, e->page_stride, &bytes) || bytes > SIZE_MAX / 2)
        return kvt_fail(KVT_ELIMIT, "KV pool of %d pages is too large", e->p.n_pages);
    e->page_mem = pool_alloc((size_t)bytes);
    if (!e->page_mem)
        return kvt_fail(-ENOMEM, "cannot allocate %llu bytes of KV pages%s", (unsigned long long)bytes,
                        e->dev_layers ? " in host memory for the layers on the CPU" : "");
    return 0;
}

/* Long: the checks, the page sizes, the pool (from a page count, a byte budget, or planned by the GPU engine),
 * sequences, threads, activations, and the device. */
int kvt_engine_new(const kvt_model *model, kvt_engine_params p, kvt_engine **out) {
    *out = NULL;
    if (!model || model->vocab_only) return kvt_fail(KVT_EARG, "engine needs a model loaded with its weights");
    const kvt_hparams *hp = &model->hp;
    if (p.block_size < 1 || p.n_threads < 1 || p.n_batch < 1 || p.max_seqs < 1 || p.n_ctx < 0 || p.n_pages < 0 ||
        p.device < 0 || (p.kv_dtype != KVT_KV_F16 && p.kv_dtype != KVT_KV_F32 && p.kv_dtype != KVT_KV_Q8_0))
        return kvt_fail(KVT_EARG, "invalid engine parameters");
    if (p.gpu_memory_fraction == 0) p.gpu_memory_fraction = KVT_DEFAULT_GPU_MEMORY_FRACTION;
    if (!(p.gpu_memory_fraction > 0 && p.gpu_memory_fraction <= 1) || p.n_gpu_layers < -1)
        return kvt_fail(KVT_EARG, "gpu_memory_fraction %g must be in (0, 1] and n_gpu_layers %d at least -1",
                        (double)p.gpu_memory_fraction, p.n_gpu_layers);
    if (kvt_kv_row_bytes(p.kv_dtype, hp->head_dim) == 0)
        return kvt_fail(KVT_EARG, "KV type %s needs a head_dim that is a multiple of %d; this model's head_dim is %d",
                        kvt_kv_dtype_name(p.kv_dtype), KVT_KV_Q8_BLOCK, hp->head_dim);
    if (p.n_ctx == 0) p.n_ctx = hp->n_ctx_train;
    if (p.device && p.n_gpu_layers == 0) { /* as llama.cpp's -ngl 0: no layer on the device */
        kvt_logk(KVT_LOG_INFO, "n_gpu_layers", "--n-gpu-layers 0: every layer runs on the CPU, and so does the engine");
        p.device = 0;
        if (p.n_pages == 0 && p.kv_active_bytes == 0) /* the device would have planned it: a context per sequence */
            p.n_pages = (int32_t)KVT_MIN((int64_t)INT32_MAX,
                                         ((int64_t)p.n_ctx + p.block_size - 1) / p.block_size * (p.max_seqs + 1));
    }
    kvt_model_warn_ctx(model, p.n_ctx);

    kvt_engine *e = kvt_xcalloc(1, sizeof *e);
    e->model = model;
    e->row_bytes = kvt_kv_row_bytes(p.kv_dtype, hp->head_dim);
    e->kv_dim = hp->n_head_kv * hp->head_dim;
    e->q_dim = hp->n_head * hp->head_dim;
    e->page_bytes = (size_t)kvt_model_kv_token_bytes(model, p.kv_dtype) * (size_t)p.block_size;
    split_layers(e, &p);
    /* what one page takes in T0, on the device and in host memory together */
    const size_t t0_stride = e->dev_page_stride + e->page_stride;
    /* on a device with neither a page count nor a budget, the GPU engine plans the pool */
    const int planned = p.device && p.n_pages == 0 && p.kv_active_bytes == 0;
    const int from_budget = p.n_pages == 0 && !planned;
    if (from_budget) {
        uint64_t n = p.kv_active_bytes / t0_stride;
        p.n_pages = n > INT32_MAX ? INT32_MAX : (int32_t)n;
    }
    if (from_budget) warn_short_pool(&p, t0_stride);
    /* a pool given in pages (eval, embeddings) owes nothing to the budget: kept 0 so that no message names
     * --kv-active to a caller that has no such flag */
    if (!from_budget) p.kv_active_bytes = 0;
    if (p.n_pages < 1 && !planned) {
        char t[32];
        int rc = kvt_fail(KVT_ELIMIT,
                          "--kv-active %llu bytes holds no KV page: one takes %zu bytes here (%d tokens); "
                          "give at least %s",
                          (unsigned long long)p.kv_active_bytes, t0_stride, p.block_size, kvt_size_text(t0_stride, t));
        free(e);
        return rc;
    }
    e->p = p;
    uint64_t pool_bytes;
    if (kvt_mul_ovf((uint64_t)p.n_pages, t0_stride, &pool_bytes) || pool_bytes > SIZE_MAX / 2) {
        free(e);
        return kvt_fail(KVT_ELIMIT, "KV pool of %d pages is too large", p.n_pages);
    }
    /* on a device no host pointer reaches a page: the cache moves pages by page I/O */
    e->no_host_pages = p.device != 0;
    int rc = p.device ? 0 : host_pages_alloc(e);
    if (rc) {
        free(e);
        return rc;
    }
    e->max_pages_per_seq = (p.n_ctx + p.block_size - 1) / p.block_size;
    e->seqs = kvt_xcalloc((size_t)p.max_seqs, sizeof *e->seqs);
    e->batch_count = alloc_i32(p.max_seqs);

    e->pool = kvt_pool_new(p.n_threads);
    if (!e->pool) {
        kvt_engine_free(e);
        return kvt_fail(-ENOMEM, "cannot start %d worker threads", p.n_threads);
    }
    alloc_activations(e);
    /* a planned pool's size is known after the device's plan; the host share follows it */
    rc = p.device ? kvt_eng_gpu_new(e, p.device - 1) : 0;
    if (!rc && p.device) rc = host_pages_alloc(e);
    if (rc) {
        kvt_engine_free(e);
        return rc;
    }
    pages_init(e);
    *out = e;
    return 0;
}

void kvt_engine_free(kvt_engine *e) {
    if (!e) return;
    kvt_eng_gpu_free(e->gpu);
    if (e->seqs)
        for (int32_t s = 0; s < e->p.max_seqs; s++) free(e->seqs[s].pages);
    free(e->seqs);
    free(e->batch_count);
    free(e->page_mem);
    free(e->refcount);
    free(e->free_next);
    if (e->pool) kvt_pool_free(e->pool);
    free(e->x), free(e->xb), free(e->q), free(e->k), free(e->v), free(e->att);
    free(e->hb), free(e->hb2), free(e->rope_cos), free(e->rope_sin), free(e->rope_cos_alt), free(e->rope_sin_alt);
    free(e->pos), free(e->tseq), free(e->tpage), free(e->tslot), free(e->wanted), free(e->agroup);
    free(e->scratch);
    free(e->qrow);
    free(e);
}

const kvt_model *kvt_engine_model(const kvt_engine *e) { return e->model; }
const char *kvt_engine_numerics_id(const kvt_engine *e) {
    return e->gpu ? kvt_eng_gpu_numerics(e->gpu) : kvt_ops_numerics_id();
}
const char *kvt_engine_device_name(const kvt_engine *e) { return e->gpu ? kvt_eng_gpu_name(e->gpu) : "cpu"; }
int kvt_engine_device_lost(const kvt_engine *e) { return e->gpu && kvt_eng_gpu_lost(e->gpu); }
kvt_eng_gpu_stats kvt_engine_gpu_stats(const kvt_engine *e) {
    kvt_eng_gpu_stats s = {0};
    if (e->gpu) s = *kvt_eng_gpu_stats_of(e->gpu);
    return s;
}
uint64_t kvt_engine_weight_device_bytes(const kvt_engine *e) { return e->gpu ? kvt_eng_gpu_weight_bytes(e->gpu) : 0; }
kvt_engine_params kvt_engine_params_of(const kvt_engine *e) { return e->p; }
kvt_pool *kvt_engine_pool(kvt_engine *e) { return e->pool; }
int32_t kvt_engine_n_vocab(const kvt_engine *e) { return e->model->hp.n_vocab; }

/* ---- pages ---------------------------------------------------------------- */

size_t kvt_page_bytes(const kvt_engine *e) { return e->page_bytes; }
size_t kvt_page_stride_head(const kvt_engine *e) { return (size_t)e->p.block_size * e->row_bytes; }
int32_t kvt_page_count(const kvt_engine *e) { return e->p.n_pages; }
int32_t kvt_page_free_count(const kvt_engine *e) { return e->n_free; }

static int page_valid(const kvt_engine *e, int32_t id) { return id >= 0 && id < e->p.n_pages; }

int kvt_page_alloc(kvt_engine *e, int32_t *id) {
    if (e->free_head == NO_PAGE) return kvt_fail(KVT_ELIMIT, "KV page pool exhausted (%d pages)", e->p.n_pages);
    int32_t p = e->free_head;
    e->free_head = e->free_next[p];
    e->n_free--;
    e->refcount[p] = 1;
    *id = p;
    return 0;
}

void kvt_page_ref(kvt_engine *e, int32_t id) {
    if (!page_valid(e, id) || e->refcount[id] < 1) {
        kvt_logk(KVT_LOG_ERROR, "page", "kvt_page_ref on free or invalid page %d", id);
        return;
    }
    e->refcount[id]++;
}

int32_t kvt_page_unref(kvt_engine *e, int32_t id) {
    if (!page_valid(e, id) || e->refcount[id] < 1) {
        kvt_logk(KVT_LOG_ERROR, "page", "kvt_page_unref on free or invalid page %d", id);
        return 0;
    }
    if (--e->refcount[id] == 0) {
        e->free_next[id] = e->free_head;
        e->free_head = id;
        e->n_free++;
    }
    return e->refcount[id];
}

int32_t kvt_page_refcount(const kvt_engine *e, int32_t id) { return page_valid(e, id) ? e->refcount[id] : 0; }
int kvt_page_is_shared(const kvt_engine *e, int32_t id) { return page_valid(e, id) && e->refcount[id] > 1; }
void *kvt_page_data(kvt_engine *e, int32_t id) {
    return e->page_mem ? e->page_mem + (size_t)id * e->page_stride : NULL;
}
const void *kvt_page_data_const(const kvt_engine *e, int32_t id) { return e->page_mem + (size_t)id * e->page_stride; }

/* ---- sequences ------------------------------------------------------------ */

static seq_state *seq_get(const kvt_engine *e, int32_t seq) {
    if (seq < 0 || seq >= e->p.max_seqs || !e->seqs[seq].active) return NULL;
    return &e->seqs[seq];
}

int kvt_seq_new(kvt_engine *e, const int32_t *pages, int32_t n_pages, int32_t n_tokens, int32_t *seq) {
    int32_t B = e->p.block_size;
    if (n_pages < 0 || n_tokens < 0 || (n_pages > 0 && !pages) || (int64_t)n_pages != ((int64_t)n_tokens + B - 1) / B)
        return kvt_fail(KVT_EARG, "%d tokens do not fill %d pages of %d", n_tokens, n_pages, B);
    if (n_tokens > e->p.n_ctx) return kvt_fail(KVT_ELIMIT, "%d tokens exceed the context of %d", n_tokens, e->p.n_ctx);
    for (int32_t i = 0; i < n_pages; i++)
        if (!page_valid(e, pages[i]) || e->refcount[pages[i]] < 1)
            return kvt_fail(KVT_EARG, "page %d is not allocated", pages[i]);
    for (int32_t s = 0; s < e->p.max_seqs; s++) {
        seq_state *st = &e->seqs[s];
        if (st->active) continue;
        if (!st->pages) st->pages = alloc_i32(e->max_pages_per_seq);
        st->active = 1;
        st->len = n_tokens;
        st->n_pages = n_pages;
        for (int32_t i = 0; i < n_pages; i++) {
            st->pages[i] = pages[i];
            e->refcount[pages[i]]++;
        }
        *seq = s;
        return 0;
    }
    return kvt_fail(KVT_ELIMIT, "all %d sequence slots are in use", e->p.max_seqs);
}

void kvt_seq_free(kvt_engine *e, int32_t seq) {
    seq_state *st = seq_get(e, seq);
    if (!st) return;
    for (int32_t i = 0; i < st->n_pages; i++) kvt_page_unref(e, st->pages[i]);
    st->active = 0;
    st->len = st->n_pages = 0;
}

int32_t kvt_seq_len(const kvt_engine *e, int32_t seq) {
    const seq_state *st = seq_get(e, seq);
    return st ? st->len : -1;
}

const int32_t *kvt_seq_pages(const kvt_engine *e, int32_t seq, int32_t *n_pages) {
    const seq_state *st = seq_get(e, seq);
    if (!st) return NULL;
    if (n_pages) *n_pages = st->n_pages;
    return st->pages;
}

/* Pages that appending `add` tokens to st will take from the pool: new pages
 * past the table, plus one copy if the tail page is partial and shared. */
static int64_t pages_needed(const kvt_engine *e, const seq_state *st, int32_t add) {
    if (add <= 0) return 0;
    int32_t B = e->p.block_size;
    int64_t total = ((int64_t)st->len + add + B - 1) / B;
    int64_t need = total - st->n_pages;
    if (st->len % B && e->refcount[st->pages[st->n_pages - 1]] > 1) need++;
    return need;
}

int32_t kvt_seq_pages_needed(const kvt_engine *e, int32_t seq, int32_t add) {
    const seq_state *st = seq_get(e, seq);
    return st ? (int32_t)pages_needed(e, st, add) : 0;
}

/* Makes room for one more token in st and returns where its K/V go. Fails
 * only when copying a shared tail page on a device fails (then st is as it
 * was): decode() checked that the pool has the pages. */
static int seq_reserve_slot(kvt_engine *e, seq_state *st, int32_t *page, int32_t *slot) {
    int32_t B = e->p.block_size;
    int32_t s = st->len % B;
    if (s == 0) {
        int32_t id = NO_PAGE;
        kvt_page_alloc(e, &id);
        st->pages[st->n_pages++] = id;
    } else {
        int32_t *tail = &st->pages[st->n_pages - 1];
        if (e->refcount[*tail] > 1) {
            /* copy on write: others still read the shared page */
            int32_t id = NO_PAGE;
            kvt_page_alloc(e, &id);
            int rc = kvt_pages_copy(e, &id, tail, 1);
            if (rc) {
                kvt_page_unref(e, id);
                return rc;
            }
            kvt_page_unref(e, *tail);
            *tail = id;
        }
    }
    *page = st->pages[st->n_pages - 1];
    *slot = s;
    st->len++;
    return 0;
}

/* Cuts st back to len tokens (<= its length), dropping the pages past them:
 * how a failed device chunk undoes its slots. */
static void seq_truncate(kvt_engine *e, seq_state *st, int32_t len) {
    int32_t keep = (len + e->p.block_size - 1) / e->p.block_size;
    while (st->n_pages > keep) kvt_page_unref(e, st->pages[--st->n_pages]);
    st->len = len;
}

/* ---- forward pass ----------------------------------------------------------- */

/* Page layout. A page is n_layer * 2 * n_head_kv blocks, in the order
 * [layer][K, V][kv head], each of B rows of row_bytes:
 *   f16/f32  K block: [head_dim][B] elements (transposed: row d holds dimension
 *            d of the page's B tokens, so kvt_attn_qk loads 16 keys per vector);
 *            V block: [B][head_dim] elements.
 *   q8_0     each token's K and V rows are quantized along head_dim when they
 *            are stored, in blocks of 32 (an f16 scale and 32 int8; kv_quant.h).
 *            V block: [B] rows of head_dim / 32 such blocks (kv_quant.h "rows").
 *            K block: the same bytes in columns, f16 scales [head_dim / 32][B]
 *            then int8 [head_dim][B] (kv_quant.h "columns"), so that
 *            attention dequantizes a page's K straight into the transposed f32
 *            [head_dim][B] that kvt_attn_qk takes, one vector per 16 keys.
 * Every block of a page has B * row_bytes bytes. kv_offset gives the byte
 * offset of the block of (layer, kv, head) plus slot rows; for a transposed or
 * column K block only slot 0 (the block start) is meaningful. With partial
 * offload page_mem holds only the layers from dev_layers on, and the offset
 * counts from there (the device's layers come first in a page's layout). */
size_t kvt_eng_kv_offset(const kvt_engine *e, int32_t layer, int kv, int32_t head, int32_t slot) {
    const kvt_hparams *hp = &e->model->hp;
    size_t row = (((size_t)(layer - e->dev_layers) * 2 + (size_t)kv) * (size_t)hp->n_head_kv + (size_t)head) *
            (size_t)e->p.block_size +
        (size_t)slot;
    return row * e->row_bytes;
}

/* cos/sin of every rotated pair for one position. theta_i = pos * base^(-2i/rope_dim),
 * built by repeated multiplication in f32 the way ggml does, then divided by the
 * frequency factor (llama3, phi3) and multiplied by the linear scale; YaRN
 * blends that scaled angle with the unscaled one by its ramp (model.h). cos
 * and sin are then multiplied by the magnitude: rope.scaling.attn_factor
 * (phi3's LongRoPE), times YaRN's temperature. alt: the rope of sliding layers
 * that have their own (gemma3: rope_base_swa, no scaling). */
void kvt_eng_rope_angles(const kvt_model *m, int32_t pos, int alt, int unscaled, float *cs, float *sn) {
    const kvt_hparams *hp = &m->hp;
    int32_t half = hp->rope_dim / 2;
    const float base = alt ? hp->rope_base_swa : hp->rope_base, fscale = alt ? 1.0f : hp->rope_freq_scale;
    const float *factors = alt ? NULL : m->rope_freq_factors;
    const int yarn = !alt && hp->rope_scaling == KVT_ROPE_SCALING_YARN;
    const float mscale = unscaled ? 1.0f : alt ? hp->rope_attn_factor : hp->rope_yarn_mscale;
    float theta_scale = powf(base, -2.0f / (float)hp->rope_dim);
    float theta = (float)pos;
    for (int32_t i = 0; i < half; i++) {
        float ff = factors ? factors[i] : 1.0f;
        float t = fscale * (theta / ff);
        if (yarn) t = kvt_rope_yarn_mix(hp, i, t, theta / ff);
        cs[i] = cosf(t);
        sn[i] = sinf(t);
        if (mscale != 1.0f) {
            cs[i] *= mscale;
            sn[i] *= mscale;
        }
        theta *= theta_scale;
    }
}

/* Rotates the leading rope_dim dims of each head of one token's q or k row. */
void kvt_eng_rope_apply(const kvt_hparams *hp, float *row, int32_t n_heads, const float *cs, const float *sn) {
    int32_t half = hp->rope_dim / 2;
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = row + (size_t)h * (size_t)hp->head_dim;
        for (int32_t i = 0; i < half; i++) {
            /* NORM pairs neighbours (2i, 2i+1); NEOX pairs the two halves (i, i+half) */
            int32_t a = hp->rope_style == KVT_ROPE_NEOX ? i : 2 * i;
            int32_t b = hp->rope_style == KVT_ROPE_NEOX ? i + half : 2 * i + 1;
            /* as llama.cpp's rope compiles on x86: its compiler contracts
             * x0*cos - x1*sin and x0*sin + x1*cos into one fma each, fusing
             * x0's product (x1's is rounded first), in the NORM and the NEOX
             * loops alike (vfmaddsub231ps with x0 broadcast; found by
             * comparing llama.cpp's roped q with kvtier's bit for bit) */
            float x0 = v[a], x1 = v[b];
            v[a] = fmaf(x0, cs[i], -(x1 * sn[i]));
            v[b] = fmaf(x0, sn[i], x1 * cs[i]);
        }
    }
}

void kvt_eng_put_k_row(kvt_engine *e, uint8_t *pg, int32_t layer, int32_t g, int32_t slot, const float *kr) {
    const int32_t hd = e->model->hp.head_dim, B = e->p.block_size;
    uint8_t *kd = pg + kvt_eng_kv_offset(e, layer, 0, g, 0); /* transposed: [head_dim][B], or q8_0 columns */
    if (e->p.kv_dtype == KVT_KV_Q8_0) {
        kvt_kv_q8_quantize_row(kr, hd, e->qrow);
        kvt_kv_q8_put_column(e->qrow, hd, B, slot, kd);
    } else if (e->p.kv_dtype == KVT_KV_F16) {
        /* rounded a run at a time by the vector kernel (the same bits as kvt_f32_to_f16), then spread */
        uint16_t h[64];
        for (int32_t d0 = 0; d0 < hd; d0 += 64) {
            const int32_t nd = hd - d0 < 64 ? hd - d0 : 64;
            kvt_f32_to_f16_row(kr + d0, h, nd);
            for (int32_t d = 0; d < nd; d++) ((uint16_t *)(void *)kd)[(size_t)(d0 + d) * B + slot] = h[d];
        }
    } else {
        for (int32_t d = 0; d < hd; d++) ((float *)(void *)kd)[(size_t)d * B + slot] = kr[d];
    }
}

/* Writes one token's k and v rows (already roped) into its page slot, rounded
 * to (or, for q8_0, quantized as) the KV dtype: see the page layout above
 * kvt_eng_kv_offset. V is a row; K a column (kvt_eng_put_k_row). */
void kvt_eng_store_kv(kvt_engine *e, int32_t layer, int32_t i) {
    const kvt_hparams *hp = &e->model->hp;
    uint8_t *pg = kvt_page_data(e, e->tpage[i]);
    for (int32_t g = 0; g < hp->n_head_kv; g++) {
        const float *kr = e->k + (size_t)i * (size_t)e->kv_dim + (size_t)g * (size_t)hp->head_dim;
        const float *vr = e->v + (size_t)i * (size_t)e->kv_dim + (size_t)g * (size_t)hp->head_dim;
        void *vd = pg + kvt_eng_kv_offset(e, layer, 1, g, e->tslot[i]);
        if (e->p.kv_dtype == KVT_KV_Q8_0) kvt_kv_q8_quantize_row(vr, hp->head_dim, vd);
        else if (e->p.kv_dtype == KVT_KV_F16) kvt_f32_to_f16_row(vr, vd, hp->head_dim);
        else memcpy(vd, vr, (size_t)hp->head_dim * sizeof(float));
        kvt_eng_put_k_row(e, pg, layer, g, e->tslot[i], kr);
    }
}

static void add_bias(float *y, const float *bias, int32_t n, int32_t width) {
    if (!bias) return;
    for (int32_t i = 0; i < n; i++) kvt_add(y + (size_t)i * (size_t)width, bias, width);
}

void kvt_eng_chunk_begin(kvt_engine *e, int32_t n) {
    const kvt_model *m = e->model;
    const kvt_hparams *hp = &m->hp;
    const int64_t half = hp->rope_dim / 2;
    for (int32_t i = 0; i < n; i++) {
        kvt_eng_rope_angles(m, e->pos[i], 0, 0, e->rope_cos + i * half, e->rope_sin + i * half);
        if (e->rope_cos_alt)
            kvt_eng_rope_angles(m, e->pos[i], 1, 0, e->rope_cos_alt + i * half, e->rope_sin_alt + i * half);
    }
    if (hp->embd_scale != 1.0f) kvt_scale(e->x, (int64_t)n * hp->n_embd, hp->embd_scale);
}

/* The per-token steps between the matmuls (norms, bias, rope, residual adds,
 * the FFN activation) over chunk rows [i0, i1) of layer l. Each row's
 * operations depend on that row alone, so eng_rows may split the rows over
 * the pool's threads with the same bits. */
typedef void (*rows_fn)(kvt_engine *e, int32_t l, int32_t i0, int32_t i1);

/* Rows below this run on the calling thread: a decode step's one row is not worth a wake-up. */
#define ROWS_PARALLEL_MIN 16

typedef struct {
    kvt_engine *e;
    int32_t l, n;
    rows_fn fn;
} rows_job;

static void rows_worker(void *ctx, int ith, int nth) {
    const rows_job *j = ctx;
    const int32_t i0 = (int32_t)((int64_t)j->n * ith / nth), i1 = (int32_t)((int64_t)j->n * (ith + 1) / nth);
    if (i0 < i1) j->fn(j->e, j->l, i0, i1);
}

static void eng_rows(kvt_engine *e, int32_t l, int32_t n, rows_fn fn) {
    if (n < ROWS_PARALLEL_MIN || kvt_pool_threads(e->pool) < 2) {
        fn(e, l, 0, n);
        return;
    }
    rows_job j = {e, l, n, fn};
    kvt_pool_run(e->pool, rows_worker, &j);
}

/* h = attn_norm(x), the input of the q/k/v projections */
static void attn_in_rows(kvt_engine *e, int32_t l, int32_t i0, int32_t i1) {
    const kvt_hparams *hp = &e->model->hp;
    const int64_t D = hp->n_embd;
    kvt_rmsnorm_rows(e->xb + i0 * D, e->x + i0 * D, e->model->layers[l].attn_norm, i1 - i0, D, hp->rms_eps);
}

/* q/k/v biases, q/k head norms, rope and q's scale */
static void qkv_post_rows(kvt_engine *e, int32_t l, int32_t i0, int32_t i1) {
    const kvt_hparams *hp = &e->model->hp;
    const kvt_layer *L = &e->model->layers[l];
    const int64_t half = hp->rope_dim / 2, hd = hp->head_dim;
    const float *rc = L->alt_rope ? e->rope_cos_alt : e->rope_cos, *rs = L->alt_rope ? e->rope_sin_alt : e->rope_sin;
    float *q = e->q + (size_t)i0 * (size_t)e->q_dim, *k = e->k + (size_t)i0 * (size_t)e->kv_dim;
    add_bias(q, L->bq, i1 - i0, e->q_dim);
    add_bias(k, L->bk, i1 - i0, e->kv_dim);
    add_bias(e->v + (size_t)i0 * (size_t)e->kv_dim, L->bv, i1 - i0, e->kv_dim);
    if (L->q_norm) { /* qwen3, gemma3: each head RMS-normed before rope (heads are contiguous rows) */
        kvt_rmsnorm_rows(q, q, L->q_norm, (int64_t)(i1 - i0) * hp->n_head, hd, hp->rms_eps);
        kvt_rmsnorm_rows(k, k, L->k_norm, (int64_t)(i1 - i0) * hp->n_head_kv, hd, hp->rms_eps);
    }
    for (int32_t i = i0; i < i1; i++) {
        float *qi = e->q + (size_t)i * (size_t)e->q_dim, *ki = e->k + (size_t)i * (size_t)e->kv_dim;
        kvt_eng_rope_apply(hp, qi, hp->n_head, rc + i * half, rs + i * half);
        kvt_eng_rope_apply(hp, ki, hp->n_head_kv, rc + i * half, rs + i * half);
        if (hp->q_scale > 0) kvt_scale(qi, e->q_dim, hp->q_scale);
    }
}

/* x += post_attn_norm(attention output); then h = ffn_norm(x) */
static void attn_out_rows(kvt_engine *e, int32_t l, int32_t i0, int32_t i1) {
    const kvt_hparams *hp = &e->model->hp;
    const kvt_layer *L = &e->model->layers[l];
    const int64_t D = hp->n_embd;
    float *xb = e->xb + i0 * D, *x = e->x + i0 * D;
    if (L->post_attn_norm) kvt_rmsnorm_rows(xb, xb, L->post_attn_norm, i1 - i0, D, hp->rms_eps);
    kvt_add(x, xb, (int64_t)(i1 - i0) * D);
    kvt_rmsnorm_rows(xb, x, L->ffn_norm, i1 - i0, D, hp->rms_eps);
}

/* gate = act(gate) * up, act silu or gelu */
static void ffn_act_rows(kvt_engine *e, int32_t l, int32_t i0, int32_t i1) {
    (void)l;
    const kvt_hparams *hp = &e->model->hp;
    const int64_t F = hp->n_ff, cnt = (int64_t)(i1 - i0) * F;
    if (hp->ffn_act == KVT_FFN_GELU) kvt_gelu_mul(e->hb + i0 * F, e->hb2 + i0 * F, cnt);
    else kvt_silu_mul(e->hb + i0 * F, e->hb2 + i0 * F, cnt);
}

/* x += post_ffn_norm(FFN output) */
static void ffn_out_rows(kvt_engine *e, int32_t l, int32_t i0, int32_t i1) {
    const kvt_hparams *hp = &e->model->hp;
    const kvt_layer *L = &e->model->layers[l];
    const int64_t D = hp->n_embd;
    float *xb = e->xb + i0 * D;
    if (L->post_ffn_norm) kvt_rmsnorm_rows(xb, xb, L->post_ffn_norm, i1 - i0, D, hp->rms_eps);
    kvt_add(e->x + i0 * D, xb, (int64_t)(i1 - i0) * D);
}

void kvt_eng_layer_qkv(kvt_engine *e, int32_t l, int32_t n) {
    const kvt_layer *L = &e->model->layers[l];
    eng_rows(e, l, n, attn_in_rows);
    const kvt_wmat *wqkv[] = {&L->wq, &L->wk, &L->wv};
    float *yqkv[] = {e->q, e->k, e->v};
    const int64_t ldqkv[] = {e->q_dim, e->kv_dim, e->kv_dim};
    kvt_matmul_multi(e->pool, wqkv, 3, e->xb, e->model->hp.n_embd, n, yqkv, ldqkv);
    eng_rows(e, l, n, qkv_post_rows);
}

void kvt_eng_layers(kvt_engine *e, int32_t n, int32_t l0, int32_t l1) {
    const kvt_model *m = e->model;
    const int64_t D = m->hp.n_embd, F = m->hp.n_ff;
    kvt_pool *pool = e->pool;
    for (int32_t l = l0; l < l1; l++) {
        const kvt_layer *L = &m->layers[l];
        /* attention block */
        kvt_eng_layer_qkv(e, l, n);
        for (int32_t i = 0; i < n; i++) kvt_eng_store_kv(e, l, i);
        /* every token of the chunk is in the pages before any attends, so each
         * reads its predecessors as stored bytes, exactly as a later batch would */
        kvt_eng_attention(e, l, n);
        kvt_matmul(pool, &L->wo, e->att, e->q_dim, n, e->xb, D);
        eng_rows(e, l, n, attn_out_rows);

        /* feed-forward block: x += W_down · (act(W_gate·h) * (W_up·h)) */
        const kvt_wmat *wgu[] = {&L->w_gate, &L->w_up};
        float *ygu[] = {e->hb, e->hb2};
        const int64_t ldgu[] = {F, F};
        kvt_matmul_multi(pool, wgu, 2, e->xb, D, n, ygu, ldgu);
        eng_rows(e, l, n, ffn_act_rows);
        kvt_matmul(pool, &L->w_down, e->hb, F, n, e->xb, D);
        eng_rows(e, l, n, ffn_out_rows);
    }
}

/* Runs n (<= n_batch) tokens whose slots are reserved (pos/tseq/tpage/tslot
 * filled, embeddings in x) through the layers; writes the normed final hidden
 * state of the rows want_hidden marks at *hidden (advancing it), and the
 * logits of the n_want rows listed in wanted to logits. */
static int forward_chunk(kvt_engine *e, int32_t n, int32_t n_want, float *logits, const int8_t *want_hidden,
                         float **hidden) {
    const kvt_model *m = e->model;
    const kvt_hparams *hp = &m->hp;
    const int64_t D = hp->n_embd;
    kvt_eng_chunk_begin(e, n);
    int32_t l0 = 0;
    if (e->gpu) {
        int rc = kvt_eng_gpu_forward(e, n, n_want, logits, want_hidden, hidden);
        if (rc || e->dev_layers == hp->n_layer) return rc;
        l0 = e->dev_layers; /* partial offload: x came back to the host after the device's layers */
    }
    kvt_eng_layers(e, n, l0, hp->n_layer);
    /* the same norm as the logits rows below, so a hidden row is exactly what the output matrix reads */
    for (int32_t i = 0; want_hidden && i < n; i++)
        if (want_hidden[i]) {
            kvt_rmsnorm(*hidden, e->x + (int64_t)i * D, m->output_norm, D, hp->rms_eps);
            *hidden += D;
        }
    if (n_want == 0) return 0;
    /* final norm only for the rows that want logits, packed so one matmul serves them */
    for (int32_t w = 0; w < n_want; w++)
        kvt_rmsnorm(e->xb + w * D, e->x + (int64_t)e->wanted[w] * D, m->output_norm, D, hp->rms_eps);
    kvt_matmul(e->pool, &m->output, e->xb, D, n_want, logits, hp->n_vocab);
    if (hp->final_softcap > 0) kvt_softcap(logits, (int64_t)n_want * hp->n_vocab, hp->final_softcap);
    return 0;
}

int kvt_engine_decode(kvt_engine *e, const kvt_batch *b, float *logits) {
    const kvt_hparams *hp = &e->model->hp;
    if (!b || b->n < 0 || (b->n > 0 && (!b->token || !b->seq))) return kvt_fail(KVT_EARG, "invalid batch");
    memset(e->batch_count, 0, (size_t)e->p.max_seqs * sizeof(int32_t));
    int64_t n_want_total = 0;
    for (int32_t i = 0; i < b->n; i++) {
        if (b->token[i] < 0 || b->token[i] >= hp->n_vocab)
            return kvt_fail(KVT_EARG, "batch entry %d: token %d is outside the vocabulary of %d", i, b->token[i],
                            hp->n_vocab);
        if (!seq_get(e, b->seq[i])) return kvt_fail(KVT_EARG, "batch entry %d: no sequence %d", i, b->seq[i]);
        e->batch_count[b->seq[i]]++;
        if (b->want_logits ? b->want_logits[i] != 0 : i == b->n - 1) n_want_total++;
    }
    if (n_want_total && !logits) return kvt_fail(KVT_EARG, "logits are wanted but no output buffer was given");
    int n_hidden = 0;
    for (int32_t i = 0; b->want_hidden && i < b->n; i++) n_hidden += b->want_hidden[i] != 0;
    if (n_hidden && !b->hidden) return kvt_fail(KVT_EARG, "hidden states are wanted but no output buffer was given");
    int64_t need = 0;
    for (int32_t s = 0; s < e->p.max_seqs; s++) {
        if (!e->batch_count[s]) continue;
        const seq_state *st = &e->seqs[s];
        if ((int64_t)st->len + e->batch_count[s] > e->p.n_ctx)
            return kvt_fail(KVT_ELIMIT, "sequence %d: %d + %d tokens exceed the context of %d", s, st->len,
                            e->batch_count[s], e->p.n_ctx);
        need += pages_needed(e, st, e->batch_count[s]);
    }
    if (need > e->n_free)
        return kvt_fail(KVT_ELIMIT, "batch needs %lld free KV pages, the pool has %d of %d", (long long)need, e->n_free,
                        e->p.n_pages);

    /* on a device a chunk can fail (a lost device): the sequences then go
     * back to their lengths before the call */
    int32_t *len0 = NULL;
    if (e->gpu) {
        len0 = alloc_i32(e->p.max_seqs);
        for (int32_t s = 0; s < e->p.max_seqs; s++) len0[s] = e->seqs[s].len;
    }
    const int32_t nbatch = e->gpu ? KVT_MIN(e->p.n_batch, kvt_eng_gpu_chunk(e->gpu)) : e->p.n_batch;
    float *out = logits, *hout = b->hidden;
    int rc = 0;
    for (int32_t c0 = 0; c0 < b->n && !rc; c0 += nbatch) {
        int32_t n = KVT_MIN(nbatch, b->n - c0);
        int32_t n_want = 0;
        for (int32_t i = 0; i < n && !rc; i++) {
            int32_t bi = c0 + i;
            seq_state *st = &e->seqs[b->seq[bi]];
            e->tseq[i] = b->seq[bi];
            e->pos[i] = st->len;
            rc = seq_reserve_slot(e, st, &e->tpage[i], &e->tslot[i]);
            kvt_wmat_row_f32(&e->model->tok_embd, b->token[bi], e->x + (int64_t)i * hp->n_embd);
            if (b->want_logits ? b->want_logits[bi] != 0 : bi == b->n - 1) e->wanted[n_want++] = i;
        }
        if (!rc) rc = forward_chunk(e, n, n_want, out, b->want_hidden ? b->want_hidden + c0 : NULL, &hout);
        if (n_want) out += (int64_t)n_want * hp->n_vocab;
    }
    if (rc && len0)
        for (int32_t s = 0; s < e->p.max_seqs; s++)
            if (e->batch_count[s]) seq_truncate(e, &e->seqs[s], len0[s]);
    free(len0);
    return rc;
}

int kvt_engine_feed(kvt_engine *e, int32_t seq, const int32_t *tokens, int32_t n, int all_logits, float *logits) {
    if (n < 0 || (n > 0 && !tokens)) return kvt_fail(KVT_EARG, "invalid token array");
    int32_t *seqs = alloc_i32(n);
    int8_t *want = kvt_xmalloc((size_t)(n > 0 ? n : 1));
    for (int32_t i = 0; i < n; i++) {
        seqs[i] = seq;
        want[i] = logits && (all_logits || i == n - 1);
    }
    kvt_batch b = {.n = n, .token = tokens, .seq = seqs, .want_logits = want};
    int rc = kvt_engine_decode(e, &b, logits);
    free(seqs);
    free(want);
    return rc;
}
