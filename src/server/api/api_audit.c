// SPDX-License-Identifier: MIT
/* The field audit of request bodies (api_audit.h): the fields OpenAI's and
 * llama.cpp's clients send that kvtier does not read, accepted only at their
 * neutral value. */
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
    {"prediction", AUDIT_ACCEPT, 0, NULL},   /* predicted outputs speed up; the output stays the same */
    {"cache_prompt", AUDIT_ACCEPT, 0, NULL}, /* llama.cpp: kvtier always caches */
    /* not supported yet: refused unless neutral */
    {"best_of", AUDIT_NUMBER, 1, "1"},
    {"echo", AUDIT_FALSE, 0, "false"},
    {"suffix", AUDIT_EMPTY, 0, "\"\""},
    {"typical_p", AUDIT_NUMBER, 1, "1"},
    {"tfs_z", AUDIT_NUMBER, 1, "1"},
    {"mirostat", AUDIT_NUMBER, 0, "0"},
    {"dynatemp_range", AUDIT_NUMBER, 0, "0"},
    {"xtc_probability", AUDIT_NUMBER, 0, "0"},
    {"dry_multiplier", AUDIT_NUMBER, 0, "0"},
    {"top_n_sigma", AUDIT_AT_MOST, 0, "-1 (or any value up to 0)"},
    {"min_keep", AUDIT_AT_MOST, 1, "0 or 1"},
    {"t_max_predict_ms", AUDIT_AT_MOST, 0, "0"},
    {"n_indent", AUDIT_AT_MOST, 0, "0"},
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
};

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
        for (const char *p = f->allowed; *p;) {
            size_t l = strcspn(p, ",");
            if (l == n && !strncmp(p, v->valuestring, n)) return 1;
            p += l + (p[l] == ',');
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
        return kvt_api_errorf(err, 400, INVALID, name, "unsupported_parameter",
                              "'%s' is not supported yet: kvtier would ignore it and the output would differ from what "
                              "it asks; leave it out or send null or %s",
                              name, AUDIT[i].allowed);
    }
    return 0;
}

const char *kvt_api_audit_name(const char *key, size_t len) {
    for (size_t i = 0; i < KVT_ARRAY_LEN(AUDIT); i++)
        if (strlen(AUDIT[i].name) == len && !memcmp(AUDIT[i].name, key, len)) return AUDIT[i].name;
    return NULL;
}
