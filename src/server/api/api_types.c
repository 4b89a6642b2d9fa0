// SPDX-License-Identifier: MIT
/* The type check of request fields (api_types.h): the tables of every field
 * each kind of body reads or accepts, with the JSON types it may hold, and
 * the walk that finds each field a path names. */
#include "api_types.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common.h"

/* JSON types, as a set. NUL marks a field where null means "absent" (a
 * member of an object; an array's element or a map's value is never absent). */
enum { NUL = 1, BOOL = 2, NUM = 4, STR = 8, ARR = 16, OBJ = 32 };

#define TYPE_PATH_MAX 128 /* bytes of a field's place ("messages[12].tool_calls[0].function.name") */
#define TYPE_KEY_SHOWN 40 /* bytes of a map's key ("metadata.KEY") in that place */

/* A field by its path: '.' between object keys, "[]" for every element of
 * an array, "[N]" for its element N, "*" for every value of an object used
 * as a map. */
typedef struct {
    const char *path;
    unsigned types;
} type_rule;

static const type_rule GENERATION[] = {
    {"model", STR | NUL},
    {"max_tokens", NUM | NUL},
    {"max_completion_tokens", NUM | NUL},
    {"n_predict", NUM | NUL},
    {"temperature", NUM | NUL},
    {"top_p", NUM | NUL},
    {"top_k", NUM | NUL},
    {"min_p", NUM | NUL},
    {"seed", NUM | NUL},
    {"n", NUM | NUL},
    {"top_logprobs", NUM | NUL},
    {"presence_penalty", NUM | NUL},
    {"frequency_penalty", NUM | NUL},
    {"repeat_penalty", NUM | NUL},
    {"repeat_last_n", NUM | NUL},
    {"penalty_last_n", NUM | NUL},
    {"samplers", STR | ARR | NUL},
    {"samplers[]", STR},
    {"logit_bias", OBJ | ARR | NUL},
    {"logit_bias.*", NUM},
    {"logit_bias[]", ARR},
    {"logit_bias[][0]", NUM | STR},  /* llama-server's pairs: [token id or text, */
    {"logit_bias[][1]", NUM | BOOL}, /*                       bias or false] */
    {"stop", STR | ARR | NUL},
    {"stop[]", STR},
    {"stream", BOOL | NUL},
    {"stream_options", OBJ | NUL},
    {"stream_options.include_usage", BOOL | NUL},
    {"ignore_eos", BOOL | NUL},
    {"cache_salt", STR | NUL},
    {"tools", ARR | NUL},
    {"tools[]", OBJ},
    {"tools[].type", STR},
    {"tools[].function", OBJ},
    {"tools[].function.name", STR},
    {"tools[].function.description", STR | NUL},
    {"tools[].function.parameters", OBJ | NUL},
    {"tools[].function.strict", BOOL | NUL},
    {"tool_choice", STR | OBJ | NUL},
    {"tool_choice.type", STR},
    {"tool_choice.function", OBJ},
    {"tool_choice.function.name", STR},
    {"parallel_tool_calls", BOOL | NUL},
    {"response_format", OBJ | NUL},
    {"response_format.type", STR},
    {"response_format.schema", OBJ | NUL},
    {"response_format.json_schema", OBJ},
    {"response_format.json_schema.name", STR},
    {"response_format.json_schema.description", STR | NUL},
    {"response_format.json_schema.schema", OBJ},
    {"response_format.json_schema.strict", BOOL | NUL},
    {"json_schema", OBJ | NUL},
    {"grammar", STR | NUL},
    /* the audited fields (api_audit.c): accepted, or only at their neutral value */
    {"user", STR | NUL},
    {"metadata", OBJ | NUL},
    {"metadata.*", STR},
    {"store", BOOL | NUL},
    {"service_tier", STR | NUL},
    {"safety_identifier", STR | NUL},
    {"prompt_cache_key", STR | NUL},
    {"prediction", OBJ | NUL},
    {"prediction.type", STR},
    {"prediction.content", STR | ARR},
    {"cache_prompt", BOOL | NUL},
    {"best_of", NUM | NUL},
    {"echo", BOOL | NUL},
    {"suffix", STR | NUL},
    {"typical_p", NUM | NUL},
    {"tfs_z", NUM | NUL},
    {"mirostat", NUM | NUL},
    {"dynatemp_range", NUM | NUL},
    {"dynatemp_exponent", NUM | NUL},
    {"mirostat_tau", NUM | NUL},
    {"mirostat_eta", NUM | NUL},
    {"xtc_threshold", NUM | NUL},
    {"dry_base", NUM | NUL},
    {"dry_allowed_length", NUM | NUL},
    {"dry_penalty_last_n", NUM | NUL},
    {"dry_sequence_breakers", ARR | NUL},
    {"dry_sequence_breakers[]", STR},
    {"xtc_probability", NUM | NUL},
    {"dry_multiplier", NUM | NUL},
    {"top_n_sigma", NUM | NUL},
    {"min_keep", NUM | NUL},
    {"t_max_predict_ms", NUM | NUL},
    {"n_indent", NUM | NUL},
    {"post_sampling_probs", BOOL | NUL},
    {"lora", ARR | NUL},
    {"n_probs", NUM | NUL},
    {"functions", ARR | NUL},
    {"function_call", STR | OBJ | NUL},
    {"modalities", ARR | NUL},
    {"modalities[]", STR},
    {"audio", OBJ | NUL},
    {"reasoning_effort", STR | NUL},
    {"verbosity", STR | NUL},
    {"web_search_options", OBJ | NUL},
    {"repetition_penalty", NUM | NUL},
    {"min_tokens", NUM | NUL},
    {"stop_token_ids", ARR | NUL},
    {"stop_token_ids[]", NUM},
    {"include_stop_str_in_output", BOOL | NUL},
    {"continue_final_message", BOOL | NUL},
    {"use_beam_search", BOOL | NUL},
    {"top_a", NUM | NUL},
    {"guided_json", OBJ | STR | NUL},
    {"guided_regex", STR | NUL},
    {"guided_choice", ARR | NUL},
    {"guided_choice[]", STR},
    {"guided_grammar", STR | NUL},
    {"structured_outputs", OBJ | NUL},
    {NULL, 0},
};

/* kvtier's own object, on every generating route */
static const type_rule KVTIER[] = {
    {"kvtier", OBJ | NUL},
    {"kvtier.session_id", STR | NUL},
    {"kvtier.priority", NUM | NUL},
    {"kvtier.keep_warm_s", NUM | NUL},
    {"kvtier.documents", ARR | NUL},
    {"kvtier.documents[]", OBJ},
    {"kvtier.documents[].id", STR},
    {"kvtier.documents[].text", STR},
    {"kvtier.rag", OBJ | NUL},
    {"kvtier.rag.k", NUM | NUL},
    {"kvtier.rag.order", STR | NUL},
    {"kvtier.rag.retrieve", STR | NUL},
    {"kvtier.rag.rrf_k", NUM | NUL},
    {"kvtier.reuse", STR | NUL},
    {"kvtier.recompute_ratio", NUM | NUL},
    {NULL, 0},
};

static const type_rule CHAT[] = {
    {"messages", ARR},
    {"messages[]", OBJ},
    {"messages[].role", STR},
    {"messages[].content", STR | ARR | NUL},
    {"messages[].content[]", OBJ},
    {"messages[].content[].type", STR},
    {"messages[].content[].text", STR},
    {"messages[].name", STR | NUL},
    {"messages[].tool_call_id", STR | NUL},
    {"messages[].tool_calls", ARR | NUL},
    {"messages[].tool_calls[]", OBJ},
    {"messages[].tool_calls[].id", STR},
    {"messages[].tool_calls[].type", STR},
    {"messages[].tool_calls[].function", OBJ},
    {"messages[].tool_calls[].function.name", STR},
    {"messages[].tool_calls[].function.arguments", STR},
    {"messages[].reasoning_content", STR | NUL},
    {"messages[].refusal", STR | NUL},
    {"logprobs", BOOL | NUL},
    {"chat_template_kwargs", OBJ | NUL},
    {"reasoning_format", STR | NUL},
    {NULL, 0},
};

static const type_rule COMPLETION[] = {
    {"prompt", STR | ARR}, /* its items: kvt_api_check_prompt, which knows the mixed form */
    {"logprobs", NUM | NUL},
    {NULL, 0},
};

/* llama-server's /completion, besides a completion's fields */
static const type_rule LLAMA[] = {
    {"id_slot", NUM | NUL},
    {"return_tokens", BOOL | NUL},
    {"response_fields", ARR | NUL},
    {"response_fields[]", STR},
    {NULL, 0},
};

/* llama-server's /infill, besides /completion's fields but its "prompt" (api_infill.c checks the
 * mixed arrays of input_prefix and input_suffix) */
static const type_rule INFILL[] = {
    {"prompt", STR | NUL},
    {"logprobs", NUM | NUL},
    {"input_prefix", STR | ARR},
    {"input_suffix", STR | ARR},
    {"input_extra", ARR | NUL},
    {"input_extra[]", OBJ},
    {"input_extra[].text", STR},
    {"input_extra[].filename", STR | NUL},
    {NULL, 0},
};

static const type_rule RESPONSES[] = {
    {"model", STR | NUL},
    {"input", STR | ARR | NUL},
    {"input[]", OBJ},
    {"input[].type", STR},
    {"input[].role", STR},
    {"input[].content", STR | ARR},
    {"input[].content[]", OBJ},
    {"input[].content[].type", STR},
    {"input[].content[].text", STR},
    {"input[].id", STR},
    {"input[].status", STR | NUL},
    {"input[].call_id", STR},
    {"input[].name", STR},
    {"input[].arguments", STR},
    {"input[].output", STR | ARR},
    {"input[].output[]", OBJ},
    {"input[].output[].type", STR},
    {"input[].output[].text", STR},
    {"instructions", STR | NUL},
    {"tools", ARR | NUL},
    {"tools[]", OBJ},
    {"tools[].type", STR},
    {"tools[].name", STR},
    {"tools[].description", STR | NUL},
    {"tools[].parameters", OBJ | NUL},
    {"tools[].strict", BOOL | NUL},
    {"tool_choice", STR | OBJ | NUL},
    {"tool_choice.type", STR},
    {"tool_choice.name", STR},
    {"parallel_tool_calls", BOOL | NUL},
    {"text", OBJ | NUL},
    {"text.format", OBJ | NUL},
    {"text.format.type", STR},
    {"text.format.name", STR},
    {"text.format.description", STR | NUL},
    {"text.format.schema", OBJ},
    {"text.format.strict", BOOL | NUL},
    {"text.verbosity", STR | NUL},
    {"max_output_tokens", NUM | NUL},
    {"temperature", NUM | NUL},
    {"top_p", NUM | NUL},
    {"top_k", NUM | NUL},
    {"min_p", NUM | NUL},
    {"seed", NUM | NUL},
    {"store", BOOL | NUL},
    {"stream", BOOL | NUL},
    {"stream_options", OBJ | NUL},
    {"stream_options.include_obfuscation", BOOL | NUL},
    {"previous_response_id", STR | NUL},
    {"cache_salt", STR | NUL},
    {"metadata", OBJ | NUL},
    {"metadata.*", STR},
    {"user", STR | NUL},
    {"service_tier", STR | NUL},
    {"safety_identifier", STR | NUL},
    {"prompt_cache_key", STR | NUL},
    {"include", ARR | NUL},
    {"include[]", STR},
    {"truncation", STR | NUL},
    {"reasoning", OBJ | NUL},
    {"reasoning.effort", STR | NUL},
    {"reasoning.summary", STR | NUL},
    {"background", BOOL | NUL},
    {"top_logprobs", NUM | NUL},
    {"max_tool_calls", NUM | NUL},
    {"conversation", STR | OBJ | NUL},
    {"prompt", OBJ | NUL},
    {NULL, 0},
};

static const type_rule TOKENIZE[] = {
    {"content", STR | ARR}, /* its items: kvt_api_check_pieces */
    {"add_special", BOOL | NUL}, {"parse_special", BOOL | NUL}, {"with_pieces", BOOL | NUL}, {NULL, 0},
};

static const type_rule DETOKENIZE[] = {
    {"tokens", ARR},
    {"tokens[]", NUM},
    {NULL, 0},
};

static const type_rule EMBEDDING[] = {
    {"input", STR | ARR},      {"input[]", STR | NUM | ARR},
    {"content", STR | ARR},    {"content[]", STR | NUM | ARR},
    {"model", STR | NUL},      {"encoding_format", STR | NUL},
    {"dimensions", NUM | NUL}, {"user", STR | NUL},
    {"cache_salt", STR | NUL}, {NULL, 0},
};

static const type_rule UNPIN[] = {
    {"pin_id", STR | NUL},
    {"session_id", STR | NUL},
    {"cache_salt", STR | NUL},
    {NULL, 0},
};

static unsigned type_of(const cJSON *v) {
    return cJSON_IsNull(v)  ? NUL
        : cJSON_IsBool(v)   ? BOOL
        : cJSON_IsNumber(v) ? NUM
        : cJSON_IsString(v) ? STR
        : cJSON_IsArray(v)  ? ARR
                            : OBJ;
}

/* The types of set, as a message says them ("a string or an array"). */
static void types_text(unsigned set, char *out, size_t cap) {
    static const struct {
        unsigned t;
        const char *name;
    } NAMES[] = {{STR, "a string"}, {NUM, "a number"},  {BOOL, "a boolean"},
                 {ARR, "an array"}, {OBJ, "an object"}, {NUL, "null"}};
    size_t o = 0, k = 0, total = 0;
    out[0] = 0;
    for (size_t i = 0; i < KVT_ARRAY_LEN(NAMES); i++) total += (set & NAMES[i].t) != 0;
    for (size_t i = 0; i < KVT_ARRAY_LEN(NAMES) && o < cap; i++) {
        if (!(set & NAMES[i].t)) continue;
        const char *sep = !k ? "" : k + 1 == total ? " or " : ", ";
        k++;
        o += (size_t)snprintf(out + o, cap - o, "%s%s", sep, NAMES[i].name);
    }
}

typedef struct {
    const type_rule *rule;
    char path[TYPE_PATH_MAX];
    kvt_api_error *err;
} walk;

static int refuse(walk *w, const cJSON *v, size_t plen) {
    char want[96], got[16];
    types_text(w->rule->types, want, sizeof want);
    types_text(type_of(v), got, sizeof got);
    w->path[KVT_MIN(plen, sizeof w->path - 1)] = 0;
    kvt_api_errorf(w->err, 400, "invalid_request_error", NULL, "invalid_type", "'%s' must be %s, got %s", w->path, want,
                   got);
    snprintf(w->err->param_text, sizeof w->err->param_text, "%s", w->path);
    w->err->param = w->err->param_text;
    return -1;
}

/* Appends to w->path at plen; the new length (kept within the buffer). */
static size_t put(walk *w, size_t plen, const char *fmt, const char *s, size_t n) {
    int k = snprintf(w->path + plen, sizeof w->path - plen, fmt, (int)n, s);
    return k < 0 ? plen : KVT_MIN(plen + (size_t)k, sizeof w->path - 1);
}

/* Checks every value at pat (the rest of w->rule's path) below v, whose place is w->path[0..plen). */
static int check_at(walk *w, const cJSON *v, const char *pat, size_t plen) {
    if (*pat == '.') pat++;
    if (!*pat) return v && !(type_of(v) & w->rule->types) ? refuse(w, v, plen) : 0;
    if (pat[0] == '[' && pat[1] == ']') {
        if (!cJSON_IsArray(v)) return 0; /* the array's own row judges its type */
        const char *rest = pat[2] == '.' ? pat + 3 : pat + 2;
        char idx[24];
        size_t i = 0;
        for (const cJSON *e = v->child; e; e = e->next, i++) {
            if (!*rest && (type_of(e) & w->rule->types)) continue; /* a right item: its place is not written */
            snprintf(idx, sizeof idx, "%zu", i);
            if (check_at(w, e, pat + 2, put(w, plen, "[%.*s]", idx, strlen(idx)))) return -1;
        }
        return 0;
    }
    if (pat[0] == '[') { /* "[N]": one element */
        char *end;
        unsigned long k = strtoul(pat + 1, &end, 10);
        const cJSON *e = cJSON_IsArray(v) && k < INT32_MAX ? cJSON_GetArrayItem(v, (int)k) : NULL;
        char idx[24];
        snprintf(idx, sizeof idx, "%lu", k);
        return e ? check_at(w, e, end + 1, put(w, plen, "[%.*s]", idx, strlen(idx))) : 0;
    }
    size_t n = strcspn(pat, ".[");
    if (!cJSON_IsObject(v)) return 0;
    const char *fmt = plen ? ".%.*s" : "%.*s";
    if (n == 1 && *pat == '*') {
        for (const cJSON *e = v->child; e; e = e->next)
            if (check_at(w, e, pat + 1, put(w, plen, fmt, e->string, KVT_MIN(strlen(e->string), TYPE_KEY_SHOWN))))
                return -1;
        return 0;
    }
    char key[64];
    snprintf(key, sizeof key, "%.*s", (int)KVT_MIN(n, sizeof key - 1), pat);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(v, key);
    return f ? check_at(w, f, pat + n, put(w, plen, fmt, key, strlen(key))) : 0;
}

static int check_table(const type_rule *t, const cJSON *root, kvt_api_error *err) {
    for (; t && t->path; t++) {
        walk w = {.rule = t, .err = err};
        if (check_at(&w, root, t->path, 0)) return KVT_EARG;
    }
    return 0;
}

int kvt_api_check_types(kvt_api_body kind, const cJSON *root, kvt_api_error *err) {
    if (!cJSON_IsObject(root)) return 0;
    const type_rule *t[4] = {NULL, NULL, NULL, NULL};
    if (kind == KVT_BODY_PROMPT) /* prefill, pin, prefetch: a chat or a completion, as the parser reads it */
        kind = cJSON_GetObjectItemCaseSensitive(root, "messages") ? KVT_BODY_CHAT : KVT_BODY_COMPLETION;
    switch (kind) {
    case KVT_BODY_COMPLETION: t[0] = COMPLETION, t[1] = GENERATION, t[2] = KVTIER; break;
    case KVT_BODY_LLAMA_COMPLETION: t[0] = LLAMA, t[1] = COMPLETION, t[2] = GENERATION, t[3] = KVTIER; break;
    case KVT_BODY_INFILL: t[0] = INFILL, t[1] = LLAMA, t[2] = GENERATION, t[3] = KVTIER; break;
    case KVT_BODY_CHAT: t[0] = CHAT, t[1] = GENERATION, t[2] = KVTIER; break;
    case KVT_BODY_TOKENIZE: t[0] = TOKENIZE; break;
    case KVT_BODY_DETOKENIZE: t[0] = DETOKENIZE; break;
    case KVT_BODY_UNPIN: t[0] = UNPIN; break;
    case KVT_BODY_EMBEDDING: t[0] = EMBEDDING; break;
    case KVT_BODY_RESPONSES: t[0] = RESPONSES, t[1] = KVTIER; break;
    case KVT_BODY_PROMPT:
    case KVT_BODY_NONE: break;
    }
    for (size_t i = 0; i < KVT_ARRAY_LEN(t); i++)
        if (check_table(t[i], root, err)) return KVT_EARG;
    return 0;
}
