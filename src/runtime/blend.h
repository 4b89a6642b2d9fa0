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

#define KVT_BLEND_DEFAULT_RATIO 0.15f /* CacheBlend's: ~15% recomputed keeps quality close to a full prefill */
#define KVT_BLEND_DEFAULT_LAYER 1     /* the deviation is measured at the second layer, as CacheBlend does */

typedef struct {
    float ratio;   /* fraction of the placed tokens recomputed through every layer, in [0, 1] */
    int32_t layer; /* layer whose KV deviation selects them; clamped to the model's last */
} kvt_blend_params;

kvt_blend_params kvt_blend_default_params(void);

typedef struct {
    int32_t n_docs;       /* documents placed from stored KV */
    int32_t n_placed;     /* their tokens */
    int32_t n_recomputed; /* of those, recomputed through every layer (the rest are reused approximately) */
    int32_t n_exact;      /* tokens computed exactly before the first placed document (finishing a document) */
    int32_t n_stored;     /* document tokens computed to store [P][d] because it was not cached */
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
 * caller frees it (chain is closed either way). */
int kvt_blend(kvt_cache *c, kvt_hash128 root, int32_t seq, const int32_t *prompt, int32_t n_prompt,
              const size_t *doc_starts, size_t n_docs, kvt_chain *chain, const kvt_blend_params *bp,
              kvt_blend_result *res);

#endif
