// SPDX-License-Identifier: MIT
/* One request end to end: match the prompt against the cache, restore what is
 * cached, prefill the rest, decode, and register every completed block
 * (prompt and generated) so later requests can reuse it. */
#ifndef KVT_GENERATE_H
#define KVT_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "blend.h"
#include "cache.h"
#include "engine.h"
#include "sampler.h"
#include "tokenizer.h"

typedef enum {
    KVT_STOP_EOG = 0,    /* the model produced an end-of-generation token */
    KVT_STOP_LENGTH = 1, /* max_tokens reached */
    KVT_STOP_CTX = 2,    /* the context is full */
    KVT_STOP_CALLER = 3, /* on_token asked to stop */
} kvt_stop_reason;

typedef struct {
    int32_t max_tokens;       /* tokens to generate at most */
    kvt_sampler *sampler;     /* borrowed */
    const kvt_tokenizer *tok; /* for end-of-generation tokens; may be NULL (never stop early) */
    /* Called with each generated token before it is fed back; nonzero stops. */
    int (*on_token)(void *ctx, int32_t token);
    void *ctx;
    const void *salt; /* tenant salt (NULL: shared) */
    size_t salt_len;
    float *first_logits; /* if set, receives the prompt's last-position logits (n_vocab) */
    int progress;        /* progress lines (progress.h) while prefilling at least
                                       KVT_PREFILL_PROGRESS_TOKENS tokens, where kvt_progress_wanted() */
    /* Approximate reuse (blend.h), opt-in: with blend set (and a cache), the
     * documents at doc_starts (n_docs + 1 entries) that the exact prefix does
     * not cover are placed from their stored KV. NULL: exact reuse only. */
    const kvt_blend_params *blend;
    const size_t *doc_starts;
    size_t n_docs;
} kvt_gen_params;

/* A prefill this long is worth a progress line on a terminal (run, eval) and a
 * log line in serve: seconds of CPU work on a model of a few billion weights. */
#define KVT_PREFILL_PROGRESS_TOKENS 512

typedef struct {
    int32_t n_prompt;
    int32_t n_reused;                    /* prompt tokens restored from the cache */
    int32_t tier_tokens[KVT_TIER_COUNT]; /* ... by tier */
    int32_t n_computed;                  /* prompt tokens prefilled (with blend: exact, recomputed and after) */
    int32_t n_generated;
    double restore_ms, prefill_ms, ttft_ms, decode_ms;
    kvt_stop_reason stop;
    kvt_t2_decision t2_decision; /* disk blocks matched: restored, recomputed, or none */
    int32_t n_planned;           /* prompt tokens the lookup matched */
    kvt_shortfall shortfall;     /* why n_reused < n_planned */
    kvt_reuse_stop reuse_stop;   /* where reuse stopped and why (cache only) */
    kvt_blend_result blend;      /* approximate reuse: blend.n_placed - blend.n_recomputed tokens
                                               were reused approximately (zero without it) */
} kvt_gen_result;

/* Runs one request. cache may be NULL (no reuse, nothing registered). On
 * success, *tokens_out (if non-NULL) receives a malloc'd array of the prompt
 * followed by the generated tokens (n_prompt + n_generated ids). The
 * sequence is freed before returning; its full blocks stay cached in T0.
 * Errors: KVT_ELIMIT (context or KV memory), KVT_EARG, with kvt_errmsg(). */
int kvt_generate(kvt_engine *e, kvt_cache *cache, const int32_t *prompt, int32_t n_prompt, const kvt_gen_params *p,
                 int32_t **tokens_out, kvt_gen_result *res);

#endif
