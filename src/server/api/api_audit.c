// SPDX-License-Identifier: MIT
/* The field audit of request bodies (api_audit.h): the fields OpenAI's and
 * llama.cpp's clients send that kvtier does not read, accepted only at their
 * neutral value; llama.cpp's "samplers" order and DRY's sequence breakers. */
#include "api_audit.h"

#include <string.h>

#include <cjson/cJSON.h>

#include "common.h"

static const char *const INVALID = "invalid_request_error";

/* Every request field OpenAI's and llama.cpp's clients send that kvtier does
 * not read elsewhere, with what kvtier does with it. The rule for the whole
 * API: a field that would change the output is honoured or rejected with a
 * 400 naming it, never silently ignored. A field here is accepted at its
 * neutral value (null, absent, or the value that changes nothing) and
 * rejected at any other; AUDIT_ACCEPT fields never change the output. The
 * table in docs/api.md "Request fields" lists the same, with the honoured ones. */
typedef enum {
    AUDIT_ACCEPT,        /* does not change the output: accepted and ignored */
    AUDIT_NUMBER,        /* a number equal to neutral */
    AUDIT_AT_MOST,       /* a number at most neutral (llama.cpp's "off" is any value up to it) */
    AUDIT_FALSE,         /* false */
    AUDIT_EMPTY,         /* "", [] or {} */
    AUDIT_STRINGS,       /* one of the comma-separated strings in allowed */
    AUDIT_NULL,          /* null (or absent) only */
    AUDIT_TEXT_MODALITY, /* modalities ["text"] */
} audit_rule;

typedef struct {
    const char *name;
    audit_rule rule;
    double neutral;      /* AUDIT_NUMBER, AUDIT_AT_MOST */
    const char *allowed; /* AUDIT_STRINGS; also how the message names the neutral value */
} audit_field;

static const audit_field AUDIT[] = {
    /* the output does not depend on these */
    {"user", AUDIT_ACCEPT, 0, NULL},
    {"metadata", AUDIT_ACCEPT, 0, NULL},
    {"store", AUDIT_ACCEPT, 0, NULL},
    {"service_tier", AUDIT_ACCEPT, 0, NULL},
    {"safety_identifier", AUDIT_ACCEPT, 0, NULL},
    {"prompt_cache_key", AUDIT_ACCEPT, 0, NULL},
    {"prediction", AUDIT_ACCEPT, 0, NULL},      /* predicted outputs speed up; the output stays the same */
    {"cache_prompt", AUDIT_ACCEPT, 0, NULL},    /* llama.cpp: kvtier always caches */
    {"t_max_prompt_ms", AUDIT_ACCEPT, 0, NULL}, /* llama-server b4748 reads it not (code-completion clients send it) */
    /* not supported yet: refused unless neutral */
    {"best_of", AUDIT_NUMBER, 1, "1"},
    {"echo", AUDIT_FALSE, 0, "false"},
    {"suffix", AUDIT_EMPTY, 0, "\"\" (/v1/completions and /infill fill in the middle)"},
    {"tfs_z", AUDIT_NUMBER, 1, "1"},
    {"top_n_sigma", AUDIT_AT_MOST, 0, "-1 (or any value up to 0)"},
    {"post_sampling_probs", AUDIT_FALSE, 0, "false"},
    {"lora", AUDIT_EMPTY, 0, "[]"},
    {"n_probs", AUDIT_NUMBER, 0, "0 (use logprobs)"},
    {"functions", AUDIT_EMPTY, 0, "[] (use tools)"},
    {"function_call", AUDIT_STRINGS, 0, "none,auto (use tool_choice)"},
    {"modalities", AUDIT_TEXT_MODALITY, 0, "[\"text\"]"},
    {"audio", AUDIT_NULL, 0, "null"},
    {"reasoning_effort", AUDIT_NULL, 0, "null"},
    {"verbosity", AUDIT_NULL, 0, "null"},
    {"web_search_options", AUDIT_NULL, 0, "null"},
    /* vLLM's, Text Generation Inference's and OpenRouter's sampling and
     * structured-output fields, which their users send to any OpenAI server */
    {"min_tokens", AUDIT_AT_MOST, 0, "0"},
    {"stop_token_ids", AUDIT_EMPTY, 0, "[]"},
    {"include_stop_str_in_output", AUDIT_FALSE, 0, "false"},
    {"continue_final_message", AUDIT_FALSE, 0, "false"},
    {"use_beam_search", AUDIT_FALSE, 0, "false"},
    {"top_a", AUDIT_NUMBER, 0, "0"},
    {"guided_json", AUDIT_NULL, 0, "null (use response_format)"},
    {"guided_regex", AUDIT_NULL, 0, "null (use grammar)"},
    {"guided_choice", AUDIT_NULL, 0, "null (use grammar)"},
    {"guided_grammar", AUDIT_NULL, 0, "null (use grammar)"},
    {"structured_outputs", AUDIT_NULL, 0, "null (use response_format)"},
};

/* llama.cpp's samplers: the letter of the string form, the name of the array
 * form, and the step kvtier runs for it. */
static const struct {
    char letter;
    const char *name;
    int step;
} SAMPLERS[] = {
    {'e', "penalties", KVT_SAMPLE_PENALTIES},
    {'d', "dry", KVT_SAMPLE_DRY},
    {'k', "top_k", KVT_SAMPLE_TOP_K},
    {'y', "typ_p", KVT_SAMPLE_TYPICAL},
    {'p', "top_p", KVT_SAMPLE_TOP_P},
    {'m', "min_p", KVT_SAMPLE_MIN_P},
    {'x', "xtc", KVT_SAMPLE_XTC},
    {'t', "temperature", KVT_SAMPLE_TEMPERATURE},
    {'i', "infill", KVT_SAMPLE_INFILL},
};

static int sampler_by_letter(char c) {
    for (size_t i = 0; i < KVT_ARRAY_LEN(SAMPLERS); i++)
        if (SAMPLERS[i].letter == c) return (int)i;
    return -1;
}

/* Appends sampler k to r's order; -1 (and *err) when it cannot be. `what`
 * names the field or flag in messages. */
static int add_sampler(kvt_api_request *r, int k, const char *what, kvt_api_error *err) {
    if (r->n_sampler_steps == KVT_SAMPLER_MAX_STEPS)
        return kvt_api_errorf(err, 400, INVALID, "samplers", "invalid_value", "%s lists more than %d samplers", what,
                              KVT_SAMPLER_MAX_STEPS);
    r->sampler_steps[r->n_sampler_steps++] = (uint8_t)SAMPLERS[k].step;
    return 0;
}

static void samplers_clear(kvt_api_request *r) {
    r->has_samplers = 0;
    r->n_sampler_steps = 0;
}

/* The string form: one letter per sampler. */
static int add_letters(kvt_api_request *r, const char *text, const char *what, kvt_api_error *err) {
    for (const char *c = text; *c; c++) {
        int k = sampler_by_letter(*c);
        if (k < 0)
            return kvt_api_errorf(err, 400, INVALID, "samplers", "invalid_value",
                                  "%s has an unknown letter '%c': the letters are e (penalties), d (dry), k (top_k), "
                                  "y (typ_p), p (top_p), m (min_p), x (xtc), t (temperature) and i (infill)",
                                  what, (unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f ? '?' : *c);
        if (add_sampler(r, k, what, err)) return KVT_EARG;
    }
    return 0;
}

/* One name of the array form (name[0..len)); named NULL: not a string. */
static int add_name(kvt_api_request *r, const char *name, size_t len, const char *what, kvt_api_error *err) {
    int k = -1;
    for (size_t i = 0; name && i < KVT_ARRAY_LEN(SAMPLERS) && k < 0; i++)
        if (strlen(SAMPLERS[i].name) == len && !memcmp(SAMPLERS[i].name, name, len)) k = (int)i;
    if (k < 0)
        return kvt_api_errorf(err, 400, INVALID, "samplers", name ? "invalid_value" : "invalid_type",
                              "%s holds %s%.*s%s: the names are penalties, dry, top_k, typ_p, top_p, min_p, xtc, "
                              "temperature and infill",
                              what,
                              !name     ? "something that is not a name"
                                  : len ? "an unknown sampler '"
                                        : "an empty name",
                              name ? (int)KVT_MIN(len, 32) : 0, name ? name : "", name && len ? "'" : "");
    return add_sampler(r, k, what, err);
}

int kvt_api_parse_samplers(const cJSON *root, kvt_api_request *r, kvt_api_error *err) {
    samplers_clear(r);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "samplers");
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) {
        if (add_letters(r, v->valuestring, "'samplers'", err)) return KVT_EARG;
    } else if (cJSON_IsArray(v)) {
        for (const cJSON *e = v->child; e; e = e->next) {
            const char *name = cJSON_IsString(e) ? e->valuestring : NULL;
            if (add_name(r, name, name ? strlen(name) : 0, "'samplers'", err)) return KVT_EARG;
        }
    } else {
        return kvt_api_errorf(err, 400, INVALID, "samplers", "invalid_type",
                              "'samplers' must be an array of sampler names or a string of their letters");
    }
    r->has_samplers = 1;
    return 0;
}

int kvt_api_parse_samplers_text(const char *text, const char *what, kvt_api_request *r, kvt_api_error *err) {
    samplers_clear(r);
    int names = strchr(text, ';') || strchr(text, ',');
    for (size_t i = 0; i < KVT_ARRAY_LEN(SAMPLERS) && !names; i++) names = !strcmp(text, SAMPLERS[i].name);
    if (!names && add_letters(r, text, what, err)) return KVT_EARG;
    for (const char *p = text; names;) {
        size_t n = strcspn(p, ";,");
        if (add_name(r, p, n, what, err)) return KVT_EARG;
        if (!p[n]) break;
        p += n + 1;
    }
    r->has_samplers = 1;
    return 0;
}

int kvt_api_parse_dry_breakers(const cJSON *root, kvt_api_request *r, kvt_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "dry_sequence_breakers");
    if (!v || cJSON_IsNull(v)) return 0;
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 1 || n > KVT_API_MAX_DRY_BREAKERS)
        return kvt_api_errorf(err, 400, INVALID, "dry_sequence_breakers", n < 0 ? "invalid_type" : "invalid_value",
                              "'dry_sequence_breakers' must be an array of 1 to %d strings", KVT_API_MAX_DRY_BREAKERS);
    r->dry_breakers = kvt_xcalloc((size_t)n, sizeof *r->dry_breakers);
    for (const cJSON *e = v->child; e; e = e->next) {
        size_t len = cJSON_IsString(e) ? strlen(e->valuestring) : 0;
        if (!len || len > KVT_API_MAX_DRY_BREAKER)
            return kvt_api_errorf(err, 400, INVALID, "dry_sequence_breakers", "invalid_value",
                                  "'dry_sequence_breakers' holds %s: each must be a string of 1 to %d bytes",
                                  !cJSON_IsString(e) ? "something that is not a string"
                                      : len          ? "a string too long"
                                                     : "an empty string",
                                  KVT_API_MAX_DRY_BREAKER);
        r->dry_breakers[r->n_dry_breakers++] = kvt_xstrdup(e->valuestring);
    }
    r->sampling_given |= KVT_API_GIVEN_DRY_BREAKERS;
    return 0;
}

static int audit_neutral(const audit_field *f, const cJSON *v) {
    switch (f->rule) {
    case AUDIT_ACCEPT: return 1;
    case AUDIT_NUMBER: return cJSON_IsNumber(v) && v->valuedouble == f->neutral;
    case AUDIT_AT_MOST: return cJSON_IsNumber(v) && v->valuedouble <= f->neutral;
    case AUDIT_FALSE: return cJSON_IsFalse(v);
    case AUDIT_EMPTY:
        return (cJSON_IsString(v) && !*v->valuestring) || ((cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child);
    case AUDIT_STRINGS: {
        if (!cJSON_IsString(v)) return 0;
        size_t n = strlen(v->valuestring);
        for (const char *p = f->allowed; *p;) { /* "a,b (a hint)": the words before the hint */
            size_t l = strcspn(p, ", ");
            if (l == n && !strncmp(p, v->valuestring, n)) return 1;
            p += strcspn(p, ",");
            p += *p == ',';
        }
        return 0;
    }
    case AUDIT_NULL: return 0;
    case AUDIT_TEXT_MODALITY:
        return cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && cJSON_IsString(v->child) &&
            !strcmp(v->child->valuestring, "text");
    }
    return 0;
}

/* A 400 naming the first field of AUDIT that is present and not neutral. */
int kvt_api_audit_fields(const cJSON *root, kvt_api_error *err) {
    for (size_t i = 0; i < KVT_ARRAY_LEN(AUDIT); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, AUDIT[i].name);
        if (!v || cJSON_IsNull(v) || audit_neutral(&AUDIT[i], v)) continue;
        const char *name = AUDIT[i].name; /* static: err->param may keep it */
        /* null is its only neutral value: say it once, with the hint after it ("null (use grammar)") */
        int only_null = AUDIT[i].rule == AUDIT_NULL;
        return kvt_api_errorf(err, 400, INVALID, name, "unsupported_parameter",
                              "'%s' is not supported yet: kvtier would ignore it and the output would differ from what "
                              "it asks; leave it out or send null%s%s",
                              name, only_null ? "" : " or ", only_null ? AUDIT[i].allowed + 4 : AUDIT[i].allowed);
    }
    return 0;
}

const char *kvt_api_audit_name(const char *key, size_t len) {
    for (size_t i = 0; i < KVT_ARRAY_LEN(AUDIT); i++)
        if (strlen(AUDIT[i].name) == len && !memcmp(AUDIT[i].name, key, len)) return AUDIT[i].name;
    return NULL;
}
