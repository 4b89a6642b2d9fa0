// SPDX-License-Identifier: MIT
/* The llama-server-style endpoints beside the OpenAI ones, as data: request
 * parsing and response JSON of POST /tokenize and POST /detokenize (the names
 * and shapes llama-server uses, so its clients work unchanged), and GET /props
 * (what the server runs: model, context, block size, chat template, tiers).
 * No I/O here.
 *
 * Thread-safety: every function is reentrant; the tokenizer is immutable. */
#ifndef KVT_API_LLAMA_H
#define KVT_API_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "api_openai.h"
#include "api_response.h"
#include "kvtier.h"
#include "sampler.h"
#include "tokenizer.h"

/* POST /tokenize {"content": TEXT, "add_special": false, "parse_special": true,
 * "with_pieces": false}. Answers {"tokens": [ids]} or, with with_pieces,
 * {"tokens": [{"id", "piece"}]} where piece is the token's text when it is
 * valid UTF-8, else the array of its bytes (as llama-server does).
 * add_special adds what the model's prompts get (kvt_tokenizer_add_special);
 * parse_special maps the text of control tokens to those tokens.
 * Returns a malloc'd JSON body (caller frees), or NULL with *err (400). */
char *kvt_api_tokenize(const kvt_tokenizer *t, const char *body, size_t len, kvt_api_error *err);

/* POST /detokenize {"tokens": [ids]} answers {"content": TEXT}: the pieces
 * concatenated (control tokens as their text), invalid UTF-8 replaced by
 * U+FFFD. Ids outside [0, n_vocab) are a 400. Returns a malloc'd JSON body
 * (caller frees), or NULL with *err. */
char *kvt_api_detokenize(const kvt_tokenizer *t, const char *body, size_t len, kvt_api_error *err);

/* What GET /props reports. Strings borrowed. */
typedef struct {
    const char *model_id; /* the served name (--alias) */
    const char *model_path;
    const char *arch; /* "llama", "qwen2" */
    int32_t n_ctx, n_ctx_train, n_vocab, n_embd, n_layer;
    uint64_t n_params;
    int32_t block_size;                         /* tokens per KV page / cache block */
    int32_t parallel;                           /* sequences decoded together (llama-server's total_slots) */
    const char *chat_family;                    /* "chatml", ... as rendered */
    const char *chat_template;                  /* the Jinja template in use (--chat-template-file's, else the
                                                   model's), or NULL */
    int jinja;                                  /* chat prompts are that template's rendering (--jinja) */
    const char *kv_dtype;                       /* "f16", "f32", "q8_0" */
    const char *device, *device_name;           /* "cpu" or "vulkan:N"; "cpu" or the GPU's name */
    uint64_t tier_budget_bytes[KVT_TIER_COUNT]; /* 0: the tier is off */
    int32_t max_tokens_default;                 /* max_tokens of a request that gives none (chat) */
    int32_t n_predict_default;                  /* -n, or -1: none given */
    float temperature_default, top_p_default;   /* --temp, --top-p, or OpenAI's defaults */
    int32_t top_k_default;                      /* --top-k, or 0: off */
    const char *bos_token, *eos_token;          /* the vocabulary's texts of them ("" where it has none) */
} kvt_api_props;

/* The JSON of GET /props (malloc'd; caller frees). */
char *kvt_api_props_json(const kvt_api_props *p);

/* One answer of POST /completion (llama-server's own route), or one event of
 * its stream. Strings borrowed. */
typedef struct {
    const char *content; /* the text (of this event, when streaming) */
    const char *model;
    int32_t index, id_slot;
    int stop;                  /* the whole answer, or the stream's last event: the figures below are added */
    const char *stop_type;     /* "eos" (end of generation), "word" (a stop string) or "limit" (n_predict) */
    const char *stopping_word; /* with "word": the stop string that ended it; else NULL */
    const int32_t *tokens;     /* return_tokens: the generated ids (of this event, when streaming) */
    size_t n_tokens;
    int32_t n_evaluated, n_decoded; /* the prompt's tokens and those generated so far, on every event */
    int32_t prompt_n;               /* prompt tokens computed (llama-server's timings.prompt_n: not the cached ones) */
    int32_t cache_n;                /* prompt tokens reused from the cache */
    int32_t predicted_n;            /* tokens generated */
    double prompt_ms, predicted_ms;
    const kvt_api_logprobs *probs; /* n_probs > 0: completion_probabilities of these tokens; else NULL */
    /* with stop: the prompt as text (NULL: left out) and what the request ran with, as
     * llama-server's "generation_settings" lists them (sampling, limits, stop strings) */
    const char *prompt;
    const kvt_sampler_params *sp;
    int32_t n_predict, n_probs;
    int ignore_eos, stream;
    char *const *stop_words;
    int n_stop_words;
    const kvt_api_usage *usage; /* with stop: the "kvtier" cache report; else NULL */
} kvt_api_llama_completion;

/* {"content", "tokens", "index", "id_slot", "stop", "tokens_predicted",
 * "tokens_evaluated", ...}: with stop also "model",
 * "tokens_predicted", "tokens_evaluated" (the whole prompt), "tokens_cached"
 * (what the sequence held at the end: prompt and generated tokens, as
 * llama-server counts its slot), "stop_type", "stopping_word", "truncated" and "timings"
 * {cache_n, prompt_n, prompt_ms, prompt_per_token_ms, prompt_per_second,
 * predicted_n, predicted_ms, predicted_per_token_ms, predicted_per_second}.
 * A new cJSON object (caller owns). */
struct cJSON *kvt_api_llama_completion_obj(const kvt_api_llama_completion *c);

#endif
