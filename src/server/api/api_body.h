// SPDX-License-Identifier: MIT
/* The check every HTTP request body gets before its handler parses it
 * (json_strict.h's rules, as an OpenAI-style 400), and what each body's
 * parser reads at the top level, for `kvtier serve --strict`. Private to
 * src/server/.
 *
 * Thread-safety: reentrant (no shared state). */
#ifndef KVT_API_BODY_H
#define KVT_API_BODY_H

#include <stddef.h>

#include "api_openai.h"

/* The kinds of body, by what their parsers read. */
typedef enum {
    KVT_BODY_COMPLETION,       /* /v1/completions */
    KVT_BODY_LLAMA_COMPLETION, /* /completion (llama-server's): a completion and its id_slot */
    KVT_BODY_INFILL,           /* /infill (llama-server's): a /completion and the code around the gap */
    KVT_BODY_CHAT,             /* /v1/chat/completions, /v1/rag/chat/completions */
    KVT_BODY_PROMPT,           /* /v1/cache/prefill, pin and prefetch: a "prompt" or a "messages" request */
    KVT_BODY_TOKENIZE,         /* /tokenize */
    KVT_BODY_DETOKENIZE,       /* /detokenize */
    KVT_BODY_UNPIN,            /* /v1/cache/unpin */
    KVT_BODY_EMBEDDING,        /* /v1/embeddings, /embedding (handlers_embed.c) */
    KVT_BODY_RESPONSES,        /* /v1/responses (api_responses.c) */
    KVT_BODY_NONE,             /* /v1/cache/flush: reads no field */
} kvt_api_body;

/* Checks body[0..len) with kvt_json_check (duplicate keys, \u0000, raw
 * control bytes, invalid UTF-8 and unpaired surrogates refused at any depth;
 * at most KVT_API_MAX_JSON_VALUES keys and cJSON's nesting limit). With
 * strict, a top-level field a body of kind does not read is refused too
 * (by default such fields are ignored, as OpenAI does). Returns 0, or
 * KVT_EARG with *err a 400 whose message names the fault, its JSON pointer
 * and byte offset, and whose param is the top-level field it is under when
 * that is one kvtier reads. */
int kvt_api_check_body(kvt_api_body kind, const char *body, size_t len, int strict, kvt_api_error *err);

#endif
