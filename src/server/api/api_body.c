// SPDX-License-Identifier: MIT
/* The strict check of request bodies (api_body.h): json_strict.h's walk, the
 * top-level fields each body's parser reads, and the 400 a fault becomes. */
#include "api_body.h"

#include <string.h>

#include <cjson/cJSON.h>

#include "api_audit.h"
#include "api_responses.h"
#include "common.h"
#include "json_strict.h"

/* The top-level fields of /v1/completions and /v1/chat/completions bodies
 * besides "prompt" and "messages": what parse_root and its helpers read
 * (api_openai.c, tools and structured output in api_tools.c). The audited
 * fields (api_audit.c) are known too: they are read, to refuse any value
 * that would change the output. */
static const char *const GENERATION[] = {"model",
                                         "max_tokens",
                                         "max_completion_tokens",
                                         "n_predict",
                                         "temperature",
                                         "top_p",
                                         "top_k",
                                         "seed",
                                         "logprobs",
                                         "top_logprobs",
                                         "presence_penalty",
                                         "frequency_penalty",
                                         "repeat_penalty",
                                         "repetition_penalty",
                                         "min_p",
                                         "typical_p",
                                         "xtc_probability",
                                         "xtc_threshold",
                                         "dynatemp_range",
                                         "dynatemp_exponent",
                                         "mirostat",
                                         "mirostat_tau",
                                         "mirostat_eta",
                                         "min_keep",
                                         "dry_multiplier",
                                         "dry_base",
                                         "dry_allowed_length",
                                         "dry_penalty_last_n",
                                         "dry_sequence_breakers",
                                         "samplers",
                                         "penalty_last_n",
                                         "repeat_last_n",
                                         "logit_bias",
                                         "n",
                                         "stop",
                                         "stream",
                                         "ignore_eos",
                                         "n_indent",
                                         "t_max_predict_ms",
                                         "stream_options",
                                         "cache_salt",
                                         "kvtier",
                                         "tools",
                                         "tool_choice",
                                         "parallel_tool_calls",
                                         "response_format",
                                         "json_schema",
                                         "grammar",
                                         NULL};
static const char *const PROMPT[] = {"prompt", NULL};
static const char *const LLAMA_COMPLETION[] = {"prompt", "id_slot", "return_tokens", "response_fields",
                                               NULL};                                      /* handlers_llama.c */
static const char *const INFILL[] = {"input_prefix", "input_suffix", "input_extra", NULL}; /* api_infill.c */
static const char *const MESSAGES[] = {"messages", "chat_template_kwargs", "reasoning_format", NULL};
static const char *const TOKENIZE[] = {"content", "add_special", "parse_special", "with_pieces", NULL}; /* api_llama.c */
static const char *const DETOKENIZE[] = {"tokens", NULL};
static const char *const EMBEDDING[] = {"input",      "content", "model",      "encoding_format",
                                        "dimensions", "user",    "cache_salt", NULL}; /* handlers_embed.c */
static const char *const UNPIN[] = {"pin_id", "session_id", "cache_salt", NULL};      /* handlers_admin.c */

static const char *in_list(const char *const *l, const char *key, size_t len) {
    for (; *l; l++)
        if (strlen(*l) == len && !memcmp(*l, key, len)) return *l;
    return NULL;
}

/* The static name of key[0..len) among the fields a body of kind reads, or NULL. */
static const char *known_name(kvt_api_body kind, const char *key, size_t len) {
    const char *n = NULL;
    switch (kind) {
    case KVT_BODY_COMPLETION: n = in_list(PROMPT, key, len); break;
    case KVT_BODY_LLAMA_COMPLETION: n = in_list(LLAMA_COMPLETION, key, len); break;
    case KVT_BODY_INFILL:
        n = in_list(INFILL, key, len) ? in_list(INFILL, key, len) : in_list(LLAMA_COMPLETION, key, len);
        break;
    case KVT_BODY_CHAT: n = in_list(MESSAGES, key, len); break;
    case KVT_BODY_PROMPT:
        n = in_list(PROMPT, key, len) ? in_list(PROMPT, key, len) : in_list(MESSAGES, key, len);
        break;
    case KVT_BODY_TOKENIZE: return in_list(TOKENIZE, key, len);
    case KVT_BODY_DETOKENIZE: return in_list(DETOKENIZE, key, len);
    case KVT_BODY_UNPIN: return in_list(UNPIN, key, len);
    case KVT_BODY_EMBEDDING: return in_list(EMBEDDING, key, len);
    case KVT_BODY_RESPONSES: return kvt_api_resp_field(key, len);
    case KVT_BODY_NONE: return NULL;
    }
    if (!n) n = in_list(GENERATION, key, len);
    return n ? n : kvt_api_audit_name(key, len);
}

static int known(void *ctx, const char *key, size_t len) {
    return known_name(*(const kvt_api_body *)ctx, key, len) != NULL;
}

int kvt_api_check_body(kvt_api_body kind, const char *body, size_t len, int strict, kvt_api_error *err) {
    kvt_json_rules rules = {.max_keys = KVT_API_MAX_JSON_VALUES,
                            .max_depth = CJSON_NESTING_LIMIT,
                            .known = strict ? known : NULL,
                            .ctx = &kind};
    kvt_json_report rep;
    if (!kvt_json_check(body, len, &rules, &rep)) return 0;
    const char *inv = "invalid_request_error";
    if (rep.fault == KVT_JSON_UNKNOWN)
        return kvt_api_errorf(err, 400, inv, NULL, "unknown_field",
                              "%s: this server runs with --strict, which refuses top-level fields this endpoint does "
                              "not read",
                              rep.message);
    const char *code = rep.fault == KVT_JSON_DUPLICATE ? "duplicate_key"
        : rep.fault == KVT_JSON_NUL                    ? "invalid_value"
        : rep.fault == KVT_JSON_LIMIT                  ? "too_many_values"
                                                       : "invalid_json";
    /* a fault in the text of a field names it; a broken grammar or a limit is the body's */
    int in_text = rep.fault == KVT_JSON_DUPLICATE || rep.fault == KVT_JSON_NUL || rep.fault == KVT_JSON_TEXT;
    const char *param = in_text && rep.field[0] ? known_name(kind, rep.field, strlen(rep.field)) : NULL;
    return kvt_api_errorf(err, 400, inv, param, code, "%s", rep.message);
}
