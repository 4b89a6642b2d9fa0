// SPDX-License-Identifier: MIT
/* The inference engine: a pool of KV pages, sequences that own page tables,
 * and the forward pass over a batch of tokens from any number of sequences.
 *
 * Pages. A page holds the K and V of every layer for B consecutive tokens of
 * one sequence (B = block_size) in ONE contiguous allocation, laid out as
 *     [layer][K|V][kv_head] blocks; for f16/f32 a K block is
 *     [head_dim][token-in-page] (transposed, so attention loads 16 keys per
 *     vector), a V block is [token-in-page][head_dim]; for q8_0 each token's
 *     rows are quantized in blocks of 32 along head_dim, V stored as rows and
 *     K as columns (kv_quant.h; engine.c kv_offset has the details)
 * so a page can be copied to RAM, disk or the network as one block and copied
 * back byte for byte. Pages are refcounted. A page whose refcount is above 1 is
 * shared and is never written: a sequence that would append into a shared,
 * partially filled page first copies it into a fresh page (copy on write).
 *
 * Sequences. A sequence is a page table plus a length. Token i of a sequence
 * lives in page table[i / B], slot i % B. Positions are implicit: a token fed
 * to a sequence is appended at position = current length.
 *
 * Numerics. Each (token, head) attention is computed in one fixed order —
 * scores for positions 0..pos in order, softmax, then V accumulated in order —
 * reading every K/V (including the batch's own tokens) from the pages, after
 * rounding to (or quantizing as) the KV dtype; q8_0 rows are dequantized
 * elementwise before the f32 kernels read them. With the batch-invariant kvt_matmul, a token's
 * logits are bit-identical whatever the batch size, chunking, thread count,
 * and whether its prefix was computed now, shared, or restored from copied bytes.
 *
 * Thread-safety: an engine is used by one thread at a time; it runs its own
 * worker pool inside kvt_engine_decode().
 */
#ifndef KVT_ENGINE_H
#define KVT_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"
#include "threadpool.h"

/* kvt_engine, kvt_kv_dtype, kvt_engine_params, kvt_engine_default_params,
 * kvt_engine_new and kvt_engine_free are declared in kvtier.h. */

const kvt_model *kvt_engine_model(const kvt_engine *e);
kvt_engine_params kvt_engine_params_of(const kvt_engine *e); /* effective params (n_pages, n_ctx filled in) */
kvt_pool *kvt_engine_pool(kvt_engine *e);                    /* owned by the engine */
int32_t kvt_engine_n_vocab(const kvt_engine *e);

/* ---- the device ---------------------------------------------------------------- */

/* The numerics id of this engine's kernels, part of every cache key so that
 * blocks computed by other kernels never serve it: the CPU kernels' id, or
 * for a GPU the backend, vendor, device, driver version, pipeline-cache UUID
 * and a hash of the shaders. */
const char *kvt_engine_numerics_id(const kvt_engine *e);
/* Where the engine runs, for messages: "cpu" or the device's name. */
const char *kvt_engine_device_name(const kvt_engine *e);
/* 1 when the engine's GPU was lost: every later step fails until the process
 * makes a new engine (0 on the CPU, and on a GPU that works). */
int kvt_engine_device_lost(const kvt_engine *e);
/* What a GPU engine moved and ran (all 0 on the CPU): page I/O runs and pages
 * each way, page-to-page copy runs, the submissions they took, forward
 * chunks and tokens. A run is one submission when it fits the staging
 * buffer, so io_submits == runs_out + runs_in + runs_copy when all did.
 * Of the pages copied in and out, pages_direct went straight between the
 * device and host memory mapped for it (kvt_engine_host_alloc's, or
 * kvt_pages_stage's), pages_bounced through the engine's own staging buffer
 * with a host memcpy each. */
typedef struct {
    uint64_t runs_out, runs_in, runs_copy, pages_out, pages_in, io_submits;
    uint64_t chunks, tokens;
    uint64_t pages_direct, pages_bounced;
} kvt_eng_gpu_stats;
kvt_eng_gpu_stats kvt_engine_gpu_stats(const kvt_engine *e);
/* Device memory the weights take (0 on the CPU). */
uint64_t kvt_engine_weight_device_bytes(const kvt_engine *e);
/* How a GPU engine split its device's memory (engine_gpu_plan.c). */
typedef struct {
    uint64_t device_bytes; /* the memory planned with: the largest device-local heap (see engine_gpu_plan.c) */
    float fraction;        /* the share of it the engine may take (gpu_memory_fraction) */
    uint64_t budget;       /* device_bytes * fraction */
    uint64_t weight_bytes, act_bytes, kv_bytes; /* what each takes; act_bytes counts staging on shared memory */
    int32_t n_pages;                            /* the pool */
    int planned;            /* 1: the pool was sized from the budget; 0: it was given (--kv-active) */
    int binding_capped;     /* 1: the budget held more pages than the kernels' KV bindings reach */
    int seqs_capped;        /* 1: partial offload held a planned pool to max_seqs contexts */
    int32_t gpu_layers;     /* layers on the device: the model's, or fewer with partial offload */
    uint64_t host_kv_bytes; /* partial offload: the other layers' share of the pool, in host memory */
    int32_t binding_pages;  /* the most pages those bindings reach */
} kvt_engine_mem;
/* 0 and *out for a GPU engine; KVT_EUNSUPPORTED on the CPU. */
int kvt_engine_device_memory(const kvt_engine *e, kvt_engine_mem *out);
/* The start-up line's words for it: the device, its memory and the split,
 * and the pool's capacity in tokens and in sessions of n_ctx tokens; "" on
 * the CPU. */
void kvt_engine_describe_memory(const kvt_engine *e, char *buf, size_t cap);

/* ---- pages ---------------------------------------------------------------- */

/* Bytes of one page (every page has this size). */
size_t kvt_page_bytes(const kvt_engine *e);
/* Bytes of K (or V) of one layer and kv head inside a page: B rows of
 * kvt_kv_row_bytes(kv_dtype, head_dim). */
size_t kvt_page_stride_head(const kvt_engine *e);
int32_t kvt_page_count(const kvt_engine *e);      /* pool size */
int32_t kvt_page_free_count(const kvt_engine *e); /* pages with refcount 0 */

/* Takes a free page with refcount 1 into *id. Its contents are unspecified.
 * Returns KVT_ELIMIT (pool exhausted) without side effects. */
int kvt_page_alloc(kvt_engine *e, int32_t *id);
/* Adds a reference. The page must be allocated (refcount >= 1). */
void kvt_page_ref(kvt_engine *e, int32_t id);
/* Drops a reference; at 0 the page returns to the free list. Returns the new refcount. */
int32_t kvt_page_unref(kvt_engine *e, int32_t id);
int32_t kvt_page_refcount(const kvt_engine *e, int32_t id);
/* True if more than one holder references the page; such a page must not be written. */
int kvt_page_is_shared(const kvt_engine *e, int32_t id);
/* The page's kvt_page_bytes() bytes, owned by the engine, valid until kvt_engine_free().
 * Writing is only allowed to a page the caller holds the only reference to.
 * For the engine's own kernels and tests: the cache and the runtime go
 * through the page I/O calls below, which an engine with pages in device
 * memory can also serve. */
void *kvt_page_data(kvt_engine *e, int32_t id); /* NULL when the pages are on a device */
const void *kvt_page_data_const(const kvt_engine *e, int32_t id);

/* ---- page I/O --------------------------------------------------------------
 * Code outside the engine (the cache, blending) moves page bytes only through
 * these calls, never through kvt_page_data(): each call takes a whole run of
 * pages, so an engine whose pages live in device memory can serve it as one
 * batched transfer. Every host buffer holds kvt_page_bytes() bytes. Writing
 * (copy in, copy) is only allowed to pages the caller holds the only
 * reference to. Each returns 0, or KVT_EARG naming a bad page id (then
 * nothing was copied). */
typedef struct {
    int32_t page;
    void *host;
} kvt_page_out; /* page -> host */
typedef struct {
    int32_t page;
    const void *host;
} kvt_page_in; /* host -> page */
int kvt_pages_copy_out(const kvt_engine *e, const kvt_page_out *io, size_t n);
int kvt_pages_copy_in(kvt_engine *e, const kvt_page_in *io, size_t n);
/* Page to page: dst[i] gets the bytes of src[i], i < n. */
int kvt_pages_copy(kvt_engine *e, const int32_t *dst, const int32_t *src, size_t n);
/* A host buffer for n pages (page i at i * kvt_page_bytes()) that the engine
 * copies pages in from and out to with no other host copy: pinned memory a
 * device reaches by DMA. Tiers read restored blocks straight into it. It is
 * the caller's until the next kvt_pages_stage call (page I/O leaves it as
 * it is). NULL when the engine has no such memory or not that much (the CPU
 * engine: always); callers then use their own. */
void *kvt_pages_stage(kvt_engine *e, size_t n);
/* Host memory the engine copies pages from and to with no host copy of its
 * own, for long-lived stores of page bytes (T1's arena): on a GPU, memory
 * mapped for the device (pinned), which page I/O reaches by DMA, many pages
 * of a run in one copy; on the CPU, ordinary memory. Aligned to 64 bytes, at
 * most kvt_engine_host_max() bytes. NULL when the engine cannot give that
 * much (kvt_errmsg says why): the caller then uses ordinary memory, which
 * page I/O serves through a staging copy. Freed with kvt_engine_host_free,
 * before the engine is. */
void *kvt_engine_host_alloc(kvt_engine *e, size_t bytes);
void kvt_engine_host_free(kvt_engine *e, void *p);
size_t kvt_engine_host_max(const kvt_engine *e);
/* The zero-copy fast path: the page's bytes at a host address that tiers can
 * read into or write from directly (the CPU engine's pages are host memory),
 * or NULL when the engine cannot expose its pages to the host (a device
 * engine, or host pages turned off); callers then go through the copy calls.
 * The same rules as kvt_page_data() apply to the pointer. */
void *kvt_page_host(kvt_engine *e, int32_t id);
const void *kvt_page_host_const(const kvt_engine *e, int32_t id);
/* Turns the fast path off (on = 0) or back on: kvt_page_host*() then return
 * NULL, so the copy path a device engine forces can be exercised on the CPU. */
void kvt_engine_set_host_pages(kvt_engine *e, int on);

/* ---- sequences ------------------------------------------------------------ */

/* Creates a sequence whose first n_pages pages are the given existing pages
 * holding its first n_tokens tokens ((n_pages-1)*B < n_tokens <= n_pages*B, or
 * both 0 for an empty sequence). The sequence takes its own reference on each
 * page; the caller keeps its references (drop them to hand the pages over).
 * The sequence never writes a page while it is shared. Returns the sequence id
 * in *seq. Errors: KVT_EARG (bad counts or page ids), KVT_ELIMIT (no free
 * sequence slot, or n_tokens over n_ctx). */
int kvt_seq_new(kvt_engine *e, const int32_t *pages, int32_t n_pages, int32_t n_tokens, int32_t *seq);
/* Releases the sequence's page references and its id. Unknown ids are ignored. */
void kvt_seq_free(kvt_engine *e, int32_t seq);
/* Tokens in the sequence; -1 for an unknown id. */
int32_t kvt_seq_len(const kvt_engine *e, int32_t seq);
/* The page table (ceil(len / B) ids), owned by the engine, valid until the
 * sequence next grows or is freed. NULL for an unknown id. */
const int32_t *kvt_seq_pages(const kvt_engine *e, int32_t seq, int32_t *n_pages);
/* Pages appending `add` tokens to seq will take from the pool (new pages, plus
 * a copy of a shared, partly filled last page): what to kvt_cache_reserve
 * before feeding them. 0 for an invalid seq. */
int32_t kvt_seq_pages_needed(const kvt_engine *e, int32_t seq, int32_t add);

/* ---- forward pass ----------------------------------------------------------- */

/* A batch: entry i appends token[i] to sequence seq[i] (entries of one sequence
 * in order). want_logits[i] != 0 asks for entry i's next-token logits; a NULL
 * want_logits means "only the last entry". want_hidden[i] != 0 asks for entry
 * i's final hidden state: the last layer's output after the output norm, the
 * row the output matrix turns into logits (what embeddings pool). Those rows
 * go to hidden, n_embd floats per such entry, in batch order, independent of
 * the logits; NULL want_hidden asks for none. Both engines compute them; a
 * GPU engine's rows come from its own kernels, so they agree with the CPU's
 * to rounding, not bit for bit. */
typedef struct {
    int32_t n;
    const int32_t *token;      /* (n) */
    const int32_t *seq;        /* (n) */
    const int8_t *want_logits; /* (n) or NULL */
    const int8_t *want_hidden; /* (n) or NULL */
    float *hidden;             /* (n_wanted_hidden * n_embd) or NULL when none are wanted */
} kvt_batch;

/* Runs the model over the batch in chunks of n_batch tokens, appending each
 * token's K/V to its sequence. Logits of the entries that want them are written
 * to logits, one row of n_vocab floats per such entry, in batch order (caller
 * allocates n_wanted * n_vocab floats; may be NULL if none are wanted).
 * Checks before computing anything, so a failure leaves every sequence as it
 * was: KVT_EARG (bad token or sequence id), KVT_ELIMIT (a sequence would exceed
 * n_ctx, or the pool has too few free pages — kvt_errmsg() says how many). */
int kvt_engine_decode(kvt_engine *e, const kvt_batch *batch, float *logits);

/* Convenience: appends n tokens to seq; writes the last token's logits to
 * logits (n_vocab floats) if non-NULL, or every token's (n * n_vocab) when
 * all_logits is nonzero. */
int kvt_engine_feed(kvt_engine *e, int32_t seq, const int32_t *tokens, int32_t n, int all_logits, float *logits);

/* ---- approximate reuse (engine_blend.c; src/runtime/blend.c uses them) --------- */

/* Moves the K of every layer and token in page by delta positions: each key,
 * roped at position p when it was computed, becomes the key roped at p + delta
 * (rotated by delta's angles; the same math as roping at p + delta, up to
 * rounding to the KV dtype twice). V does not depend on the position and is
 * left as it is. The caller must hold the page's only reference (KVT_EARG). */
int kvt_engine_rerope_page(kvt_engine *e, int32_t page, int32_t delta);

/* Appends n_pages full pages to seq, which must end on a page boundary: the
 * sequence grows by n_pages * B tokens whose K/V are the pages' bytes, and
 * takes its own reference on each (the caller keeps its own). KVT_EARG,
 * KVT_ELIMIT (context) without side effects. */
int kvt_seq_append_pages(kvt_engine *e, int32_t seq, const int32_t *pages, int32_t n_pages);
/* kvt_seq_append_pages for pages holding n_tokens tokens, as kvt_seq_new takes
 * them ((n_pages-1)*B < n_tokens <= n_pages*B, or both 0): a partly filled
 * last page is copied when the sequence first writes to it while shared.
 * The cache appends the blocks other sequences computed with it (late reuse). */
int kvt_seq_append(kvt_engine *e, int32_t seq, const int32_t *pages, int32_t n_pages, int32_t n_tokens);

/* Recomputes n tokens seq already holds, at their positions pos[] (strictly
 * ascending, each in a page only seq references), in place: each token reads
 * keys 0..pos from the pages as they are then (earlier recomputed tokens
 * included), and its K/V overwrite its slot layer by layer, in chunks of
 * n_batch. Recomputing every token after a point in order reproduces a cold
 * run's bytes exactly. With dev == NULL, all layers. With dev (n floats): only
 * the layers below dev_layer, then dev_layer's K/V, whose squared distance to
 * what the slot held is written to dev[i] before the fresh K/V replace it (the
 * KV deviation CacheBlend selects tokens by). Checks everything first:
 * KVT_EARG without side effects. */
int kvt_engine_recompute(kvt_engine *e, int32_t seq, const int32_t *tokens, const int32_t *pos, int32_t n,
                         int32_t dev_layer, float *dev);

#endif
