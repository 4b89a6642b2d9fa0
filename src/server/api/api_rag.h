// SPDX-License-Identifier: MIT
/* The RAG surface as data (docs/rag.md "The RAG route"): POST /v1/rag/chat/completions's
 * options and retrieval, its `kvtier.rag` report, and the answer of
 * POST /v1/cache/prefill. No I/O here; reentrant. */
#ifndef KVT_API_RAG_H
#define KVT_API_RAG_H

#include <stddef.h>
#include <stdint.h>

#include "api_openai.h"
#include "api_response.h"
#include "rag.h"

/* One RAG request: its options and what was retrieved, in prompt order. */
typedef struct {
    int32_t k;                       /* chunks to retrieve (kvtier.rag.k) */
    kvt_rag_order order;             /* kvtier.rag.order */
    kvt_rag_retrieve retrieve;       /* kvtier.rag.retrieve */
    int32_t rrf_k;                   /* kvtier.rag.rrf_k (hybrid) */
    kvt_rag_hit hits[KVT_RAG_MAX_K]; /* in prompt order after kvt_api_rag_retrieve */
    int32_t n_hits;
    double retrieve_ms, plan_ms;
    double embed_ms; /* embedding the question (dense, hybrid) */
} kvt_api_rag;

/* Reads kvtier.rag (rag_json: the object's JSON text, or NULL for the
 * defaults, which *defaults gives: k, retrieve, rrf_k): {"k": 1..KVT_RAG_MAX_K,
 * "order": "cached" | "canonical" | "score", "retrieve": "bm25" | "dense" |
 * "hybrid", "rrf_k": 1..1000000}; any other field is a 400 naming it.
 * Returns 0 or KVT_EARG with *err. */
int kvt_api_rag_options(const char *rag_json, const kvt_api_rag *defaults, kvt_api_rag *out, kvt_api_error *err);

/* The question a RAG request asks (a's last message): NULL when it is not a
 * non-empty user message (kvt_api_rag_retrieve says so as a 400). */
const char *kvt_api_rag_question(const kvt_api_request *a);
/* Retrieves for the question (a's last message, which must be the user's) by
 * rag->retrieve (qvec: the question's vector for dense and hybrid),
 * plans the order, and puts the chunks into a->docs as fixed context blocks
 * (owned by a). A request that brings its own kvtier.documents is a 400. Returns 0 or KVT_EARG with *err. */
int kvt_api_rag_retrieve(const kvt_rag_index *idx, kvt_api_request *a, kvt_api_rag *rag, const float *qvec,
                         kvt_api_error *err);

/* Where the chunks ended up in the prompt, as the engine admitted it. */
typedef struct {
    const size_t *doc_starts;   /* n_hits + 1 prompt offsets, in prompt order */
    const int32_t *doc_order;   /* position -> index into the planned hits ("cached" order), or NULL: identity */
    const uint8_t *block_tiers; /* the tier of each matched block at admission ... */
    int32_t n_block_tiers;      /* ... n_block_tiers of them */
    int32_t block;              /* B */
    double cache_plan_ms;       /* kvt_rag_plan_cached's time (0: not run) */
} kvt_api_rag_layout;

/* Adds "rag" to the "kvtier" object of response (a JSON text, taken):
 * {order, k, retrieve (and rrf_k for hybrid), retrieve_ms, embed_ms (dense, hybrid), plan_ms, chunks: [{position, chunk, id, score, rank,
 * tokens, cached_tokens, tiers: {T0: n, ...}}], cached_chunks}, the chunks in
 * prompt order. A chunk's cached_tokens are the part of it inside the reused
 * prefix (u->cached_tokens), split by the tier each block came from. Returns
 * a malloc'd JSON text. */
char *kvt_api_rag_response(char *response, const kvt_rag_index *idx, const kvt_api_rag *rag,
                           const kvt_api_rag_layout *lay, const kvt_api_usage *u);

/* The answer of POST /v1/cache/prefill: {object "cache.prefill", prompt_tokens,
 * cached_tokens (reused, by tier in "tiers"), computed_tokens, stored_tokens
 * (the prompt's whole blocks, now cached), prefill_ms}. malloc'd. */
char *kvt_api_prefill_json(const kvt_api_usage *u, int32_t block);

#endif
