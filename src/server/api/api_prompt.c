// SPDX-License-Identifier: MIT
/* A completion's "prompt" (api_openai.h) in the forms llama-server takes: a
 * string, an array of token ids, a mixed array of strings and token ids (one
 * prompt), or an array of such prompts; and the tokens of a mixed array. The
 * checks name the item at fault by its place ("prompt[1][2]"), so a client
 * sees what is wrong rather than a type message about a form it did not mean. */
#include "api_openai.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tokenizer.h"

static const char *const INVALID = "invalid_request_error";

int kvt_api_prompt_is_mixed(const cJSON *p) {
    int str = 0, num = 0;
    if (!cJSON_IsArray(p)) return 0;
    for (const cJSON *e = p->child; e; e = e->next) {
        str |= cJSON_IsString(e);
        num |= cJSON_IsNumber(e);
    }
    return str && num;
}

/* Whether p is a non-empty array of numbers only (one prompt as token ids). */
static int is_ids(const cJSON *p) {
    if (!cJSON_IsArray(p) || !p->child) return 0;
    for (const cJSON *e = p->child; e; e = e->next)
        if (!cJSON_IsNumber(e)) return 0;
    return 1;
}

static const char *type_name(const cJSON *v) {
    return cJSON_IsNull(v)  ? "null"
        : cJSON_IsBool(v)   ? "a boolean"
        : cJSON_IsObject(v) ? "an object"
        : cJSON_IsArray(v)  ? "an array"
        : cJSON_IsString(v) ? "a string"
                            : "a number";
}

/* Item k of the one prompt at `where` (under the request's field `field`): a token id in
 * [0, n_vocab), or where texts are allowed a non-empty string. 0, or -1 with *err. */
static int check_item(const cJSON *e, const char *field, const char *where, int k, int texts, int32_t n_vocab,
                      kvt_api_error *err) {
    if (cJSON_IsNumber(e)) {
        double d = e->valuedouble;
        if (d != floor(d))
            return kvt_api_errorf(err, 400, INVALID, field, "invalid_value",
                                  "%s[%d] is %g, not a token id: token ids are integers in [0, %d)", where, k, d,
                                  n_vocab);
        if (d < 0 || d >= n_vocab)
            return kvt_api_errorf(err, 400, INVALID, field, "invalid_value",
                                  "%s[%d] is a token id outside [0, %d): %.0f", where, k, n_vocab, d);
        return 0;
    }
    if (cJSON_IsString(e) && texts) {
        if (*e->valuestring) return 0;
        return kvt_api_errorf(err, 400, INVALID, field, "invalid_value",
                              "%s[%d] is an empty string: each text of a prompt that mixes strings and token ids "
                              "must hold text",
                              where, k);
    }
    return kvt_api_errorf(err, 400, INVALID, field, "invalid_type", "%s[%d] is %s: %s", where, k, type_name(e),
                          texts ? "a prompt that mixes strings and token ids holds only strings and integer token ids"
                                : "a prompt of token ids holds only integer token ids");
}

/* One prompt at `where`: a string, or a non-empty array of token ids or of strings and token ids
 * (texts: strings are allowed in any array, as /tokenize's content). 0, or -1 with *err. */
static int check_one(const cJSON *p, const char *field, const char *where, int texts, int32_t n_vocab,
                     kvt_api_error *err) {
    if (cJSON_IsString(p)) return 0;
    if (!cJSON_IsArray(p))
        return kvt_api_errorf(err, 400, INVALID, field, "invalid_type",
                              "%s is %s: a prompt is a string, an array of token ids, or an array of strings and "
                              "token ids",
                              where, type_name(p));
    if (!p->child)
        return kvt_api_errorf(err, 400, INVALID, field, "invalid_value",
                              "%s is an empty array: give text or at least one token id", where);
    texts |= kvt_api_prompt_is_mixed(p);
    int k = 0;
    for (const cJSON *e = p->child; e; e = e->next, k++)
        if (check_item(e, field, where, k, texts, n_vocab, err)) return -1;
    return 0;
}

int kvt_api_check_pieces(const cJSON *p, const char *field, const char *where, int32_t n_vocab, kvt_api_error *err) {
    return check_one(p, field, where, 1, n_vocab, err) ? KVT_EARG : 0;
}

int kvt_api_check_prompt(const cJSON *p, const char *field, int32_t n_vocab, kvt_api_error *err) {
    if (!p) return kvt_api_errorf(err, 400, INVALID, field, "missing_required_parameter", "'%s' is required", field);
    /* one prompt: llama-server reads an array holding a string and a number as one, not as several */
    if (!cJSON_IsArray(p) || !p->child || is_ids(p) || kvt_api_prompt_is_mixed(p))
        return check_one(p, field, field, 0, n_vocab, err) ? KVT_EARG : 0;
    int i = 0;
    for (const cJSON *e = p->child; e; e = e->next, i++) {
        char where[48];
        snprintf(where, sizeof where, "%.16s[%d]", field, i);
        if (!cJSON_IsString(e) && !cJSON_IsArray(e))
            return kvt_api_errorf(err, 400, INVALID, field, "invalid_type",
                                  "%s is %s: an array of prompts holds strings, arrays of token ids, and arrays of "
                                  "strings and token ids",
                                  where, type_name(e));
        if (check_one(e, field, where, 0, n_vocab, err)) return KVT_EARG;
    }
    return 0;
}

int kvt_api_parse_prompt(const cJSON *root, int32_t n_vocab, kvt_api_request *r, kvt_api_error *err) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (kvt_api_check_prompt(p, "prompt", n_vocab, err)) return -1;
    if (cJSON_IsString(p)) {
        r->prompt = kvt_xstrdup(p->valuestring);
        return 0;
    }
    if (cJSON_GetArraySize(p) == 1 && cJSON_IsString(p->child)) {
        r->prompt = kvt_xstrdup(p->child->valuestring);
        return 0;
    }
    if (kvt_api_prompt_is_mixed(p)) {
        r->prompt_mixed = cJSON_Duplicate(p, 1);
        return 0;
    }
    if (!is_ids(p)) /* several prompts: the routes that take them split the body first */
        return kvt_api_errorf(err, 400, INVALID, "prompt", "unsupported_value",
                              "only one prompt per request is supported here");
    r->prompt_ids = kvt_xmalloc((size_t)cJSON_GetArraySize(p) * sizeof *r->prompt_ids);
    for (const cJSON *e = p->child; e; e = e->next) r->prompt_ids[r->n_prompt_ids++] = (int32_t)e->valuedouble;
    return 0;
}

/* Appends the k ids of ids to *out of *n (capacity *cap). */
static void append_ids(int32_t **out, size_t *n, size_t *cap, const int32_t *ids, size_t k) {
    if (*n + k > *cap) {
        *cap = KVT_MAX(*n + k, 2 * *cap);
        *out = kvt_xrealloc(*out, *cap * sizeof **out);
    }
    memcpy(*out + *n, ids, k * sizeof *ids);
    *n += k;
}

int kvt_api_tokenize_mixed(const kvt_tokenizer *t, const cJSON *p, int add, int parse_special, size_t max_tokens,
                           int32_t **out, size_t *n) {
    size_t len = 0, cap = 0;
    int32_t *all = NULL;
    int rc = 0;
    for (const cJSON *e = p->child; e && !rc; e = e->next) {
        if (!cJSON_IsString(e)) {
            int32_t id = (int32_t)e->valuedouble;
            append_ids(&all, &len, &cap, &id, 1);
            continue;
        }
        /* the tokenizer's special tokens (BOS) go only to a string that comes first, as llama-server
         * adds them */
        int32_t *ids = NULL;
        size_t k = 0;
        rc = len > max_tokens ? KVT_ELIMIT
                              : kvt_tokenize_max(t, e->valuestring, strlen(e->valuestring), e == p->child ? add : 0,
                                                 parse_special, max_tokens - len, &ids, &k);
        if (!rc) append_ids(&all, &len, &cap, ids, k);
        free(ids);
    }
    if (!rc && len > max_tokens) rc = KVT_ELIMIT;
    if (rc) {
        free(all);
        all = NULL;
        len = 0;
    }
    *out = all;
    *n = len;
    return rc;
}
