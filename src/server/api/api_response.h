// SPDX-License-Identifier: MIT
/* The OpenAI-compatible HTTP surface as data, its response side: the JSON of
 * responses, stream chunks, tool calls, the usage chunk and the model list,
 * with kvtier's cache report (an error's JSON is api_error.h's). Every
 * builder returns a malloc'd NUL-terminated string the caller frees (or a
 * cJSON object the caller owns). No I/O here.
 *
 * Thread-safety: every function is reentrant (no shared state). */
#ifndef KVT_API_RESPONSE_H
#define KVT_API_RESPONSE_H

#include <stddef.h>
#include <stdint.h>

#include "api_openai.h"
#include "kvtier.h"
#include "tokenizer.h"

/* Usage and kvtier's cache report for one request. */
typedef struct {
    int32_t prompt_tokens, completion_tokens;
    int32_t cached_tokens;               /* prompt tokens restored from the cache */
    int32_t tier_tokens[KVT_TIER_COUNT]; /* ... by tier */
    int32_t computed_tokens;             /* prompt tokens prefilled */
    double restore_ms, prefill_ms, ttft_ms;
    const char *disk_decision;  /* disk blocks matched: "restore" or "recompute"; NULL: none (static) */
    int32_t planned_tokens;     /* prompt tokens the lookup matched (>= cached_tokens) */
    int32_t prefetched_tokens;  /* of the cached ones, restored into T0 while the request waited */
    int32_t late_cached_tokens; /* of the cached ones, taken as its prefill began (computed meanwhile) */
    double queued_ms;           /* from arrival to admission into a sequence slot */
    int64_t admission_seq;      /* the order of admissions (1, 2, ...; 0: none); cache-aware
                                              scheduling may admit a later arrival first */
    const char *shortfall;      /* why cached < planned (kvt_shortfall_name); NULL: none */
    int has_reuse_stop;         /* reuse_stop is filled (a request that went through the cache) */
    kvt_reuse_stop reuse_stop;  /* where reuse stopped and why */
    char stop_prompt_text[KVT_API_STOP_TEXT_MAX]; /* diverged: the prompt's text from token_offset (UTF-8) */
    char stop_cached_text[KVT_API_STOP_TEXT_MAX]; /* diverged: the nearest cached block's text from there */
    int approximate;                              /* the request asked for approximate reuse: the report has its part */
    int32_t approximate_tokens;                   /* prompt tokens reused approximately (placed, not recomputed) */
    int32_t recomputed_tokens;                    /* placed tokens recomputed through every layer */
    int32_t stored_tokens;                        /* document tokens computed to store [P][doc] for placing */
    int32_t approximate_documents;                /* documents placed */
    int32_t approximate_steps;                    /* engine steps the placement took (a prefill chunk each) */
    int32_t approximate_interleaved;              /* decode tokens other requests got during those steps */
    float recompute_ratio;
    /* a chat (a Jinja template or the built-in family rendering): why its first assistant turn that was
     * kept as text, not as its generated ids, was (static: "rewritten", "reasoning_dropped", "tool_calls",
     * "unknown_reply"), and that turn's index in messages; NULL: every one was spliced */
    const char *rerendered_why;
    int32_t rerendered_msg;
    /* a chat rendered otherwise than the server's default: "builtin" (static) where the model's
     * template renders no tools and this chat carries them; NULL: the default */
    const char *renderer;
    /* a follow-up naming a stored response (previous_response_id) that kept its ids: how many of
     * them stood for its history, rendered and tokenized no more (0: it was, history_rerendered
     * says why, static) */
    int has_history;
    int32_t history_tokens_reused;
    const char *history_rerendered;
    /* generation paused for want of KV memory (--kv-active) while other requests ran: how often,
     * and on resuming, the prompt and reply tokens restored from the cache and recomputed */
    int32_t preemptions, resumed_cached_tokens, resumed_computed_tokens;
    double resume_ms;
    int show_cached_text; /* a diverged reuse_stop shows the cached side too (cached_text and
                                              cached_tokens: --explain-text); else only the prompt's side */
    int hide_report;      /* --hide-cached-tokens: no cached counts anywhere in the answer; the
                                              "kvtier" object says {"cache_report": "hidden"} */
} kvt_api_usage;

/* One generated token's log-probability and its most likely alternatives
 * (kvt_logprobs: log-softmax of the sampler's logits in double). */
typedef struct {
    int32_t id;
    double logprob;
    int32_t n_top;
    int32_t top_id[KVT_API_MAX_TOP_LOGPROBS];
    double top_logprob[KVT_API_MAX_TOP_LOGPROBS];
} kvt_api_logprob;

/* The logprobs of a response or chunk: items[0..n) in generation order. The
 * tokenizer gives each token's text. text_offset (completions) counts the
 * characters of the whole completion before items[0] (code points, as a
 * Python string indexes it; kvt_api_token_chars); a token's offset is the
 * index of the character its first byte belongs to. */
typedef struct {
    const kvt_api_logprob *items;
    size_t n;
    const kvt_tokenizer *tok;
    size_t text_offset;
} kvt_api_logprobs;

/* One tool call of a reply, as OpenAI returns it. Strings owned (kvt_api_calls_free). */
typedef struct {
    char *id; /* "call_..." */
    char *name;
    char *arguments; /* a JSON object's text */
} kvt_api_call;

/* Identity of one response, shared by its chunks. Strings borrowed. calls:
 * the tool calls of a chat reply (message.content is then the text, or null
 * when empty, and message.tool_calls lists them). */
typedef struct {
    kvt_api_kind kind;
    const char *id;
    int64_t created;
    const char *model;
    const kvt_api_call *calls;
    size_t n_calls;
    int32_t index;  /* the choice a chunk belongs to (n > 1) */
    int usage_null; /* a stream with stream_options.include_usage: each chunk before the usage chunk
                       carries "usage": null, as OpenAI's do */
} kvt_api_head;

/* One choice of a response with n of them (kvt_api_response_json_n). */
typedef struct {
    const char *text;
    const char *finish_reason;
    const kvt_api_logprobs *lp; /* NULL: "logprobs": null */
    const kvt_api_call *calls;  /* chat tool calls, as kvt_api_head's */
    size_t n_calls;
    const char *reasoning; /* chat: message.reasoning_content when not NULL or empty */
} kvt_api_choice;

/* A response of n choices (index 0..n-1); h's calls are ignored. */
char *kvt_api_response_json_n(const kvt_api_head *h, const kvt_api_choice *c, size_t n, const kvt_api_usage *u);

/* The response object's common fields (id, object, created, model), for the
 * other builders of responses (api_tools.c). */
struct cJSON *kvt_api_head_obj(const kvt_api_head *h, int chunk);
/* The JSON of responses, malloc'd NUL-terminated strings the caller frees.
 * text must be valid UTF-8 without NUL bytes (kvt_utf8_sanitize). lp NULL:
 * "logprobs": null; else OpenAI's shape for the kind: chat {"content":
 * [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]},
 * completions {tokens, token_logprobs, top_logprobs: [{token: logprob}],
 * text_offset}. */
/* The characters token id adds to a text (its bytes that begin a UTF-8
 * character), which move a completions text_offset on. */
size_t kvt_api_token_chars(const kvt_tokenizer *t, int32_t id);
char *kvt_api_response_json(const kvt_api_head *h, const char *text, const char *finish_reason, const kvt_api_usage *u,
                            const kvt_api_logprobs *lp);
/* One streaming chunk. role_only: the chat opener (delta {role, content:""}).
 * finish_reason non-NULL marks the last choice chunk, which also carries the
 * "kvtier" cache report from u (u may be NULL otherwise). */
char *kvt_api_chunk_json(const kvt_api_head *h, const char *text, int role_only, const char *finish_reason,
                         const kvt_api_usage *u, const kvt_api_logprobs *lp);
/* A chat stream chunk whose delta carries reasoning text (delta.reasoning_content). */
char *kvt_api_reasoning_chunk_json(const kvt_api_head *h, const char *reasoning);
/* The "kvtier" object of a response: cached tokens by tier, reuse_stop,
 * computed tokens, timings (under u->hide_report only {"cache_report":
 * "hidden"}: counts and restore times would tell one client what another has
 * cached). A new cJSON object the caller owns. */
struct cJSON *kvt_api_kvtier_obj(const kvt_api_usage *u);
/* {"token", "logprob", "bytes"} of token id (chat's logprobs entry), a new cJSON object. */
struct cJSON *kvt_api_token_logprob_obj(const kvt_tokenizer *t, int32_t id, double logprob);
/* The usage chunk (stream_options.include_usage): choices [] and usage. */
char *kvt_api_usage_chunk_json(const kvt_api_head *h, const kvt_api_usage *u);
/* OpenAI's tool_calls array; index_field adds "index" to each (stream deltas). */
struct cJSON *kvt_api_calls_obj(const kvt_api_call *c, size_t n, int index_field);
/* A stream chunk whose delta carries tool call i whole (id, type, name and
 * arguments at once, which clients reassemble like a split one). */
char *kvt_api_call_chunk_json(const kvt_api_head *h, const kvt_api_call *c, size_t i);
/* What /v1/models says of the served model. Strings borrowed. */
typedef struct {
    const char *id;
    int64_t created;
    int32_t n_ctx; /* the context a request may use (prompt + generated) */
    int32_t n_ctx_train, n_vocab, n_embd;
    uint64_t n_params;
} kvt_api_model_info;

/* The model list: one model with context_length and a "meta" object
 * (n_ctx, n_ctx_train, n_vocab, n_embd, n_params; llama-server's names). */
char *kvt_api_models_json(const kvt_api_model_info *m);
/* That one model's object alone (GET /v1/models/{id}). */
char *kvt_api_model_json(const kvt_api_model_info *m);

#endif
