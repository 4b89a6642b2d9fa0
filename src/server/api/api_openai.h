// SPDX-License-Identifier: MIT
/* The OpenAI-compatible HTTP surface as data, its request side: parsing and
 * validating request bodies of /v1/completions and /v1/chat/completions into
 * kvt_api_request, and the errors they get (kvt_api_error, api_error.h). The
 * JSON of responses, stream chunks and the model list is api_response.h's,
 * an error's api_error.h's; the UTF-8 helpers both use are api_utf8.h's. No
 * I/O here.
 *
 * Thread-safety: every function is reentrant (no shared state). */
#ifndef KVT_API_OPENAI_H
#define KVT_API_OPENAI_H

#include <stddef.h>
#include <stdint.h>

#include "api_error.h"
#include "chat.h"
#include "kvtier.h"
#include "sampler.h"

typedef enum { KVT_API_COMPLETION = 0, KVT_API_CHAT = 1 } kvt_api_kind;

#define KVT_API_MAX_STOP 16           /* stop strings per request (OpenAI allows 4) */
#define KVT_API_MAX_STOP_LEN 256      /* bytes of one stop string */
#define KVT_API_MAX_MESSAGES 4096     /* messages per chat request */
#define KVT_API_MAX_SALT 1024         /* bytes of cache_salt */
#define KVT_API_MAX_JSON_VALUES 65536 /* JSON values in a body, besides a prompt's token ids */
#define KVT_API_MAX_LOGIT_BIAS 1024   /* logit_bias entries at most */
#define KVT_API_MAX_TOP_LOGPROBS 20   /* top_logprobs (chat) and logprobs (completions) at most, as OpenAI */
#define KVT_API_MAX_N 16              /* choices per request (n); also at most the server's --parallel */

#define KVT_API_PRIORITY_MIN (-1000)
#define KVT_API_PRIORITY_MAX 1000
#define KVT_API_KEEP_WARM_MAX_S 86400
#define KVT_API_MAX_DOCUMENTS 256 /* kvtier.documents per request */
#define KVT_API_MAX_DOC_ID 256    /* bytes of a document id */
#define KVT_API_STOP_TEXT_MAX 96  /* bytes of each differing-text excerpt in reuse_stop */

/* kvtier's own request object, {"kvtier": {session_id, priority, keep_warm_s}}:
 * which agent session a request belongs to, how much its KV matters against
 * other sessions' (higher is kept longer and scheduled first), and how long
 * to keep it warm in T0 after the reply while the agent waits on a tool. */
typedef struct {
    char session_id[KVT_SESSION_NAME_MAX + 1]; /* "" = none */
    int priority;                              /* default 0 */
    double keep_warm_s;                        /* < 0: not given (the server's default applies) */
} kvt_api_session;

/* tool_choice (OpenAI): whether the model may, must, or must not call a tool. */
typedef enum { KVT_TOOL_AUTO = 0, KVT_TOOL_NONE, KVT_TOOL_REQUIRED, KVT_TOOL_NAMED } kvt_tool_choice;
/* response_format (OpenAI), or llama.cpp's top-level json_schema. */
typedef enum { KVT_FORMAT_TEXT = 0, KVT_FORMAT_JSON_OBJECT, KVT_FORMAT_JSON_SCHEMA } kvt_response_format;

#define KVT_API_MAX_TOOLS 64     /* tools per request (a forced choice is one grammar alternative each) */
#define KVT_API_MAX_TOOL_NAME 64 /* bytes of a function name, [A-Za-z0-9_-] as OpenAI */

/* What a chat message carries besides role and content (api_tools.c). */
typedef struct {
    struct cJSON *tool_calls; /* assistant: [{id, type, function: {name, arguments}}], validated (owned), or NULL */
    char *tool_call_id;       /* tool: the call it answers (owned), or NULL */
    char *reasoning;          /* assistant: reasoning_content sent back with the reply (owned), or NULL */
    char *name;               /* any role: the participant's "name" (owned), or NULL; only a Jinja template
                                 sees it (messages[i].name), as the built-in families' templates ignore it */
} kvt_api_msg_tools;

/* Bits of kvt_api_request.sampling_given, in the order of the fields there. */
enum {
    KVT_API_GIVEN_TYPICAL_P = 1 << 0,
    KVT_API_GIVEN_XTC_PROBABILITY = 1 << 1,
    KVT_API_GIVEN_XTC_THRESHOLD = 1 << 2,
    KVT_API_GIVEN_DYNATEMP_RANGE = 1 << 3,
    KVT_API_GIVEN_DYNATEMP_EXPONENT = 1 << 4,
    KVT_API_GIVEN_MIROSTAT = 1 << 5,
    KVT_API_GIVEN_MIROSTAT_TAU = 1 << 6,
    KVT_API_GIVEN_MIROSTAT_ETA = 1 << 7,
    KVT_API_GIVEN_MIN_KEEP = 1 << 8,
    KVT_API_GIVEN_DRY_MULTIPLIER = 1 << 9,
    KVT_API_GIVEN_DRY_BASE = 1 << 10,
    KVT_API_GIVEN_DRY_ALLOWED_LENGTH = 1 << 11,
    KVT_API_GIVEN_DRY_PENALTY_LAST_N = 1 << 12,
    KVT_API_GIVEN_DRY_BREAKERS = 1 << 13,
};

/* A validated request. Every pointer is owned by the struct
 * (kvt_api_request_free releases them). */
typedef struct {
    kvt_api_kind kind;
    char *model;         /* NULL if absent */
    char *prompt;        /* completions: prompt text, NULL when prompt_ids is used */
    int32_t *prompt_ids; /* completions: a prompt given as token ids */
    size_t n_prompt_ids;
    struct cJSON *prompt_mixed; /* completions: a prompt that mixes strings and token ids ([12, "text", 34]),
                                   checked (owned); NULL for the other forms */
    kvt_chat_msg *msgs;         /* chat: messages (role/content strings owned here) */
    size_t n_msgs;
    int32_t max_tokens;                        /* 0 = not given (the server picks) */
    int32_t n;                                 /* choices, 1..KVT_API_MAX_N */
    float temperature;                         /* default 1 */
    float top_p;                               /* default 1 */
    int32_t top_k;                             /* 0 = off */
    int has_temperature, has_top_p, has_top_k; /* given in the request (else the server's defaults apply) */
    float min_p;                               /* 0 = off */
    float presence_penalty, frequency_penalty; /* OpenAI's, in [-2, 2]; 0 = off */
    float repeat_penalty;                      /* llama.cpp's; 1 = off */
    float repetition_penalty;                  /* vLLM's, over the prompt and the reply; 0 = off */
    int32_t penalty_last_n; /* llama.cpp's window as given: the last N tokens of prompt and reply, -1 all, 0 off */
    /* each given in the request (else the server's defaults, --min-p ..., apply) */
    int has_min_p, has_presence_penalty, has_frequency_penalty, has_repeat_penalty, has_penalty_last_n;
    /* llama.cpp's other samplers as the sampler takes them (kvt_sampler_params), llama.cpp's defaults
     * when absent; each is off at its neutral value (typical_p 1, xtc_probability 0, dynatemp_range 0,
     * mirostat 0, min_keep 0 or 1) and at 0, for requests that other parsers fill */
    float typical_p, xtc_probability, xtc_threshold, dynatemp_range, dynatemp_exponent, mirostat_tau, mirostat_eta;
    int32_t mirostat, min_keep;
    float dry_multiplier, dry_base;
    int32_t dry_allowed_length, dry_penalty_last_n;
    char **dry_breakers; /* dry_sequence_breakers (owned), n_dry_breakers of them */
    int32_t n_dry_breakers;
    unsigned sampling_given; /* which of them the request gave (KVT_API_GIVEN_*); the others are the server's */
    int32_t *bias_id;        /* logit_bias: n_bias token ids and their biases in [-100, 100] */
    float *bias;             /* (-inf: llama-server's false, the token is never picked) */
    int32_t n_bias;
    char **bias_text; /* llama-server's [TEXT, bias] pairs: each token of TEXT gets bias_text_bias[i] */
    float *bias_text_bias;
    int32_t n_bias_text;
    /* llama.cpp's "samplers" (api_audit.c): given or not, and the steps kvtier runs for them, in order */
    int has_samplers;
    int32_t n_sampler_steps;
    uint8_t sampler_steps[KVT_SAMPLER_MAX_STEPS];
    uint64_t seed;
    int has_seed;
    char *stop[KVT_API_MAX_STOP];
    int n_stop;
    int stream, include_usage;
    int ignore_eos;           /* llama.cpp extension: do not stop at end-of-generation tokens */
    int32_t n_indent;         /* llama.cpp's: a line after a newline indented less ends the reply; <= 0: off */
    int64_t t_max_predict_ms; /* llama.cpp's: once a newline was generated, the reply ends past this; <= 0: off */
    int logprobs;             /* return each generated token's logprob (chat: logprobs true; completions:
                                "logprobs": N given) */
    int32_t top_logprobs;     /* ... and the N most likely alternatives (chat: top_logprobs; completions:
                                logprobs), 0..KVT_API_MAX_TOP_LOGPROBS */
    char *cache_salt;         /* NULL if absent or empty */
    kvt_api_session session;  /* the "kvtier" object */
    kvt_document *docs;       /* kvtier.documents (id/text owned here), rendered as fixed context blocks */
    size_t n_docs;
    char *rag_json;        /* kvtier.rag as JSON text (only /v1/rag/chat/completions takes it), or NULL */
    int approximate;       /* kvtier.reuse "approximate": documents may be placed from stored KV (blend.h) */
    float recompute_ratio; /* kvtier.recompute_ratio in [0, 1]; < 0: the server's default */
    /* tools and structured output (api_tools.c) */
    kvt_api_msg_tools *msg_tools; /* chat: n_msgs entries */
    struct cJSON *tools; /* validated [{type: "function", function: {name, description?, parameters?}}] or NULL */
    kvt_tool_choice tool_choice;
    char *tool_name;         /* KVT_TOOL_NAMED: the function */
    int parallel_tool_calls; /* default 1 */
    kvt_response_format format;
    struct cJSON *schema; /* KVT_FORMAT_JSON_SCHEMA: the schema (owned) */
    char *gbnf;           /* llama.cpp's "grammar": GBNF text the output must follow (owned), or NULL */
    /* chat: chat_template_kwargs, an object of extra template variables (owned), or NULL */
    struct cJSON *template_kwargs;
    int reasoning_format; /* chat: KVT_API_REASONING_*, from llama-server's "reasoning_format" */
    /* set by the Responses handler, never parsed: the stored response a follow-up names (its prompt and
     * reply ids, borrowed; jinja -1: it kept none), or NULL; and whether this request's own are kept */
    const struct kvt_resp_prefix *history;
    int keep_history;
} kvt_api_request;

/* A chat request's "reasoning_format": the server's --reasoning-format when
 * absent; "deepseek" or "auto": a reply's <think>...</think> goes to
 * reasoning_content; "none": it stays in content. */
enum { KVT_API_REASONING_DEFAULT = 0, KVT_API_REASONING_SPLIT, KVT_API_REASONING_NONE };

/* Parses and validates body[0..len) (need not be NUL-terminated) as a request
 * of kind. Token ids in a prompt are checked against n_vocab; max_tokens
 * above max_tokens_limit is an error. The fields OpenAI's and llama.cpp's
 * clients send that kvtier does not support yet (tools, response_format,
 * best_of, mirostat, ...; echo, which the server answers before this) are a 400 naming them unless they hold
 * their neutral value, so none that would change the output is silently
 * ignored (the audit table in api_audit.c and docs/api.md "Request fields"); other unknown
 * fields are ignored, as OpenAI clients send many.
 *
 * Memory stays proportional to what a valid request can use: before anything
 * is parsed, a pass over the raw text rejects a prompt of n_ctx or more token
 * ids ("context_length_exceeded": one token must be left to generate) and a
 * body of more than n_ctx + KVT_API_MAX_JSON_VALUES JSON values.
 *
 * The body must already have passed kvt_api_check_body (api_body.h), which
 * the HTTP layer runs once on every POST body before any handler: exactly
 * one JSON value with only whitespace around it, no duplicate keys, no
 * \u0000 (C strings cannot carry NUL), no raw control bytes, valid UTF-8, at
 * any depth, each fault a 400 naming its JSON pointer and the top-level field
 * it is under. kvt_api_parse does not check that again; a caller outside the
 * server (a test, a fuzzer) runs kvt_api_check_body first, as the server does.
 *
 * Returns 0 and *out (free with kvt_api_request_free), or KVT_EARG with *err filled
 * (status 400) and *out zeroed. */
int kvt_api_parse(kvt_api_kind kind, const char *body, size_t len, int32_t n_vocab, int32_t n_ctx,
                  int32_t max_tokens_limit, kvt_api_request *out, kvt_api_error *err);
void kvt_api_request_free(kvt_api_request *r);

/* What one lexical pass over a raw body learns before anything is allocated
 * (kvt_api_parse's first step; the server's choice of route for a completion
 * body). It assumes nothing about validity (kvt_api_check_body judged that
 * before); on valid JSON its counts are exact or slightly high, never low. */
typedef struct {
    size_t values;       /* JSON values, at most: 1 + commas + containers outside strings */
    size_t prompt_items; /* items in the top-level "prompt" array (1 for an empty one), or 0 */
    char prompt_first;   /* the first byte of that array's first item ('"', '[', a digit), or 0 */
    int prompt_mixed;    /* that array holds both a string and a number (one mixed prompt) */
    int echo_true;       /* the top-level "echo" is true */
    int suffix_text;     /* the top-level "suffix" is a string other than "" (fill in the middle) */
} kvt_api_body_scan;
void kvt_api_scan_body(const char *b, size_t n, kvt_api_body_scan *sc);

struct cJSON;
struct kvt_tokenizer;

/* A completion's "prompt" (api_prompt.c), in llama-server's forms: a string, an array of token ids,
 * an array that mixes strings and token ids (ONE prompt: each string tokenized in place, the ids as
 * given), or an array of prompts, each a string, an array of token ids or a mixed array. */
/* Whether p is an array holding both a string and a number among its own items: one mixed prompt. */
int kvt_api_prompt_is_mixed(const struct cJSON *p);
/* Checks every prompt p holds (NULL: absent), the value of the request's field `field` ("prompt",
 * "input", "content"; a static string): token ids integers in [0, n_vocab), no empty array, no
 * empty string in a mixed prompt, nothing else nested. 0, or KVT_EARG with *err filled (param
 * field, the message naming the item at fault: "prompt[1][2] is a token id outside [0, V)"). */
int kvt_api_check_prompt(const struct cJSON *p, const char *field, int32_t n_vocab, kvt_api_error *err);
/* Checks p as ONE prompt whose array may hold strings in any mix with token ids (/tokenize's
 * "content": ["a", "b"] is the two texts one after the other), at `where` under field (the
 * place a message names: "input[2]"). 0, or KVT_EARG with *err. */
int kvt_api_check_pieces(const struct cJSON *p, const char *field, const char *where, int32_t n_vocab,
                         kvt_api_error *err);
/* root's "prompt", checked, into r (prompt, prompt_ids or prompt_mixed): one prompt; an array of
 * several is a 400 (the routes that take several split the body first). 0, or -1 with *err. */
int kvt_api_parse_prompt(const struct cJSON *root, int32_t n_vocab, kvt_api_request *r, kvt_api_error *err);
/* The ids of p, a checked array of strings and token ids, as llama-server makes them: each id as
 * given, each string tokenized where it stands (parse_special: control tokens written in it parsed,
 * as llama-server's completions do), and `add` (the
 * tokenizer's special tokens, kvt_tokenizer_add_special flags, or 0) only for a string that is p's
 * first item. *out (malloc'd) and *n. 0, KVT_ELIMIT past max_tokens, or an error code (*out NULL). */
int kvt_api_tokenize_mixed(const struct kvt_tokenizer *t, const struct cJSON *p, int add, int parse_special,
                           size_t max_tokens, int32_t **out, size_t *n);

/* Parses the "kvtier" object kv (NULL or JSON null: defaults). Unknown fields
 * are a 400 naming them: each one would change how the KV is kept. Returns 0
 * or KVT_EARG with *err filled. */
struct cJSON;
int kvt_api_parse_session(const struct cJSON *kv, kvt_api_session *out, kvt_api_error *err);

/* kvtier.reuse and kvtier.recompute_ratio of the "kvtier" object kv (docs/rag.md
 * "Approximate reuse"): *approximate 1 for "approximate" (0 for "exact" or
 * none), *ratio the ratio or -1 when not given. A bad value, a ratio without
 * "approximate", and "approximate" with has_seed (a seed asks for output that
 * replays) are KVT_EARG with *err naming the field. */
int kvt_api_parse_reuse(const struct cJSON *kv, int has_seed, int *approximate, float *ratio, kvt_api_error *err);

/* kvtier.documents of the "kvtier" object kv (NULL, or no "documents": none):
 * [{"id": 1..KVT_API_MAX_DOC_ID bytes, "text": string}], at most
 * KVT_API_MAX_DOCUMENTS. Returns 0 and a malloc'd *out of *n (strings owned;
 * free with kvt_api_documents_free), or KVT_EARG with *err filled. */
int kvt_api_parse_documents(const struct cJSON *kv, kvt_document **out, size_t *n, kvt_api_error *err);
void kvt_api_documents_free(kvt_document *d, size_t n);

#endif
