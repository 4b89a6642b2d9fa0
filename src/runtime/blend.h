// SPDX-License-Identifier: MIT
/* Approximate reuse of documents (opt-in, off by default): the CacheBlend idea
 * over kvtier's fixed context blocks.
 *
 * Exact reuse takes a document's KV only after the very tokens it was
 * computed after. A document that moved (another order, another neighbour)
 * misses. kvt_blend places such documents from their stored KV instead:
 *
 *   1. Stored KV. A document d of a prompt [P][d1]...[dk][question] (P: the
 *      tokens before the first document, block-aligned by the documents rule)
 *      is stored as the exact cache blocks of [P][d]: what a request with d
 *      first computes, what `rag prewarm` and /v1/cache/prefill compute, under
 *      the ordinary chained keys (so they can never be confused with another
 *      prefix, and live in every tier). Missing, they are computed now, in a
 *      side sequence, and cached for next time (n_stored).
 *   2. Placement. Each document after the exact prefix gets fresh pages with a
 *      copy of its stored KV, K rotated from its stored position (|P|) to its
 *      place (kvt_engine_rerope_page: exact math, rope being a rotation
 *      linear in the position); V copied.
 *   3. Selection. The placed tokens run through layers [0, layer) in full and
 *      layer `layer`'s K/V is compared with the placed one; the deviation
 *      (squared L2 of K and V over the kv heads) ranks them.
 *      With layer2 > layer, a second stage: the KVT_BLEND_STAGE1_WIDEN x
 *      (ratio x placed) that deviate most at `layer` run on through layers
 *      [0, layer2) and are ranked again by their deviation at layer2.
 *   4. Recompute. The ratio of them that deviate most run through every layer
 *      in place, attending to the assembled cache; the rest keep the stored KV
 *      (fresh for layers <= layer).
 * The question after the documents is then computed as usual.
 *
 * Nothing from the first placed document on is registered in the exact cache
 * (the chain is closed): those pages and everything after them are not what a
 * cold run computes. With ratio 1 every placed token is recomputed in order,
 * which gives exactly a cold run's bytes (the tests check it). */
#ifndef KVT_BLEND_H
#define KVT_BLEND_H

#include <stddef.h>
#include <stdint.h>

#include "cache.h"

#define KVT_BLEND_DEFAULT_RATIO KVT_DEFAULT_RECOMPUTE_RATIO /* kvtier.h: CacheBlend's 15% */
#define KVT_BLEND_DEFAULT_LAYER 1 /* the deviation is measured at the second layer, as CacheBlend does */

#define KVT_BLEND_STAGE1_WIDEN 2 /* two-stage selection: the first stage keeps this many times the final count */

typedef struct {
    float ratio;    /* fraction of the placed tokens recomputed through every layer, in [0, 1] */
    int32_t layer;  /* layer whose KV deviation selects them; clamped to the model's last */
    int32_t layer2; /* > layer: two stages (CacheBlend's gradual filtering): `layer` keeps
                       KVT_BLEND_STAGE1_WIDEN times the final count, which run on through layer2,
                       whose deviation picks the final ones; <= layer (the default, 0): one stage */
} kvt_blend_params;

kvt_blend_params kvt_blend_default_params(void);

typedef struct {
    int32_t n_docs;       /* documents placed from stored KV */
    int32_t n_placed;     /* their tokens */
    int32_t n_recomputed; /* of those, recomputed through every layer (the rest are reused approximately) */
    int32_t n_exact;      /* tokens computed exactly before the first placed document (finishing a document) */
    int32_t n_stored;     /* document tokens computed to store [P][d] because it was not cached */
    int32_t steps;        /* kvt_blend_step calls it took (1 for kvt_blend) */
    double ms;            /* time spent */
} kvt_blend_result;

/* seq holds prompt[0..len) (kvt_cache_attach under root, chain initialised
 * for it); doc_starts (n_docs + 1 entries, kvt_render_documents_spans) says
 * where the documents are. Places every document from the second on that the
 * exact prefix does not cover and that ends before the prompt's last token,
 * as above; seq then holds the prompt up to the end of the last placed
 * document, and chain is closed (nothing more of seq is registered). Does
 * nothing (res zero) when there is no such document. Errors: KVT_ELIMIT (KV
 * memory, sequence slots), KVT_EARG; seq may then hold placed pages, so the
 * caller frees it. The same as kvt_blend_begin and kvt_blend_step with an
 * unbounded budget. */
int kvt_blend(kvt_cache *c, kvt_hash128 root, int32_t seq, const int32_t *prompt, int32_t n_prompt,
              const size_t *doc_starts, size_t n_docs, kvt_chain *chain, const kvt_blend_params *bp,
              kvt_blend_result *res);

/* ---- the same in bounded steps --------------------------------------------------- */

/* kvt_blend's work as a job a scheduler advances a chunk at a time, running
 * other sequences between the chunks (kvtier serve does, with its prefill
 * chunk). The result is the same bit for bit whatever the budgets: every
 * token is computed with the same arithmetic as in one pass (the engine's
 * results do not depend on how a run of tokens is cut into batches, and each
 * phase writes only K/V that the tokens after it read). */
typedef struct kvt_blend_job kvt_blend_job;

/* Starts kvt_blend's work on seq (arguments as kvt_blend's; prompt and
 * doc_starts are borrowed until kvt_blend_job_free). *out is NULL when there
 * is nothing to place (seq is then untouched). Errors: KVT_EARG (documents
 * not on block boundaries). Computes nothing yet. */
int kvt_blend_begin(kvt_cache *c, kvt_hash128 root, int32_t seq, const int32_t *prompt, int32_t n_prompt,
                    const size_t *doc_starts, size_t n_docs, const kvt_blend_params *bp, kvt_blend_job **out);

/* Does at most budget tokens of the job's work (>= 1): tokens fed to finish
 * a document or store [P][d], tokens run through the selection layer or
 * recomputed, and one per page placed. chain: seq's key chain, the same at
 * every step (registered while the exact part is fed, then closed). Returns
 * 1 while work remains, 0 when seq holds the prompt up to the last placed
 * document, or an error as kvt_blend's (the job is then dead: free it and seq). */
int kvt_blend_step(kvt_blend_job *j, kvt_chain *chain, int32_t budget);

/* Counts so far (final once kvt_blend_step returned 0); valid until the job is freed. */
const kvt_blend_result *kvt_blend_job_result(const kvt_blend_job *j);

/* Frees the job and the side sequence it may hold (not seq, whose placed
 * pages stay with it: free seq to drop them). NULL is a no-op. A job may be
 * freed between any two steps: cancellation. */
void kvt_blend_job_free(kvt_blend_job *j);

#endif
