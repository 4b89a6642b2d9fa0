// SPDX-License-Identifier: MIT
/* OpenAI request parsing and validation (cJSON, api_openai.h): the raw-body
 * pass before parsing, then each field. Errors name the offending field in
 * "param", as OpenAI does, so clients can show them. Responses are in
 * api_response.c, the field audit in api_audit.c. */
#include "api_openai.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_audit.h"
#include "api_tools.h"
#include "api_types.h"
#include "common.h"

#define MAX_TEMPERATURE 2.0
#define MAX_PENALTY 2.0 /* presence and frequency penalties, as OpenAI bounds them */
#define MAX_REPEAT_PENALTY 10.0
#define MAX_LOGIT_BIAS 100.0
#define MAX_DYNATEMP_EXPONENT 100.0
#define MAX_MIROSTAT_TAU 100.0 /* bits of surprise: no vocabulary comes near */
#define MAX_DRY_MULTIPLIER 100.0
#define MAX_DRY_BASE 100.0
#define MAX_SAFE_INT 9007199254740991.0 /* 2^53 - 1: larger JSON numbers are not exact integers */

static const char *const INVALID = "invalid_request_error";

static int parse_kvtier(const cJSON *root, kvt_api_request *r, kvt_api_error *err);

/* ---- parsing --------------------------------------------------------------- */

#define NUM_INT 1   /* get_number: the value must be an integer */
#define NUM_ABOVE 2 /* get_number: the value must be above lo, not equal to it */

/* d as a message shows it: integers in full (2147483647, not 2.14748e+09), others as %g. */
static const char *num_text(double d, char buf[32]) {
    if (d == floor(d) && fabs(d) <= MAX_SAFE_INT) snprintf(buf, 32, "%.0f", d);
    else snprintf(buf, 32, "%g", d);
    return buf;
}

static const char *json_type(const cJSON *v) {
    return cJSON_IsString(v) ? "a string"
        : cJSON_IsBool(v)    ? "a boolean"
        : cJSON_IsArray(v)   ? "an array"
        : cJSON_IsObject(v)  ? "an object"
                             : "a number";
}

/* The number name of root, in [lo, hi] ((lo, hi] with NUM_ABOVE), an integer with NUM_INT.
 * name may be dotted ("kvtier.priority"): its last part is looked up, the whole names it in
 * the error (it must be static: err->param keeps it). Absent or null: *has 0. The message of
 * every failure states the whole constraint. */
static int get_number(const cJSON *root, const char *name, double lo, double hi, int flags, double *out, int *has,
                      kvt_api_error *err) {
    const char *dot = strrchr(name, '.');
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, dot ? dot + 1 : name);
    if (has) *has = 0;
    if (!v || cJSON_IsNull(v)) return 0;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (isfinite(d) && (flags & NUM_ABOVE ? d > lo : d >= lo) && d <= hi && (!(flags & NUM_INT) || d == floor(d))) {
        *out = d;
        if (has) *has = 1;
        return 0;
    }
    char l[32], h[32], g[48], got[64];
    if (!cJSON_IsNumber(v)) snprintf(got, sizeof got, ", got %s", json_type(v));
    else if (!isfinite(d)) snprintf(got, sizeof got, ", got a number beyond the range of a double");
    else snprintf(got, sizeof got, ", got %s", num_text(d, g));
    return kvt_api_errorf(err, 400, INVALID, name, cJSON_IsNumber(v) ? "invalid_value" : "invalid_type",
                          "'%s' must be %s %s %s %s %s%s", name, flags & NUM_INT ? "an integer" : "a finite number",
                          flags & NUM_ABOVE ? "above" : "from", num_text(lo, l),
                          flags & NUM_ABOVE ? "and at most" : "to", num_text(hi, h), got);
}

static int get_bool(const cJSON *root, const char *name, int *out, kvt_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v))
        return kvt_api_errorf(err, 400, INVALID, name, "invalid_type", "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* Text content of messages[i]: a string, or an array of {type:"text", text} parts, joined with a
 * newline between them as llama-server and vLLM join them (none after an empty start). Absent, null
 * or an empty array: *out NULL (whether a message may go without is its role's rule). */
static int message_content(const cJSON *c, size_t i, char **out, kvt_api_error *err) {
    *out = NULL;
    if (!c || cJSON_IsNull(c) || (cJSON_IsArray(c) && !c->child)) return 0;
    if (cJSON_IsString(c)) {
        *out = kvt_xstrdup(c->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(c))
        return kvt_api_error_item(err, "messages", i, ".content", "invalid_type",
                                  "messages[%zu].content must be a string or an array of text parts, got %s", i,
                                  json_type(c));
    size_t len = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text))
            return kvt_api_error_item(err, "messages", i, ".content", "unsupported_content",
                                      "messages[%zu].content: only text parts ({\"type\": \"text\", \"text\": "
                                      "...}) are supported",
                                      i);
        len += strlen(text->valuestring) + 1;
    }
    char *s = kvt_xmalloc(len + 1);
    size_t o = 0;
    cJSON_ArrayForEach(part, c) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t l = strlen(t);
        if (o) s[o++] = '\n';
        memcpy(s + o, t, l);
        o += l;
    }
    s[o] = 0;
    *out = s;
    return 0;
}

/* messages[i]'s role (roles[*k]) and the fields that role needs, as OpenAI requires them: a
 * content for every role but an assistant's that carries tool calls, and a tool_call_id for a
 * tool's result. param names the field with its place ("messages[1].tool_call_id"). */
static int check_message(const cJSON *msg, size_t i, const char *const *roles, size_t n_roles, size_t *k,
                         kvt_api_error *err) {
    if (!cJSON_IsObject(msg))
        return kvt_api_error_item(err, "messages", i, "", "invalid_type", "messages[%zu] must be an object, got %s", i,
                                  json_type(msg));
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
    if (!cJSON_IsString(role))
        return kvt_api_error_item(err, "messages", i, ".role", role ? "invalid_type" : "missing_required_parameter",
                                  "messages[%zu].role is required: a string", i);
    for (*k = 0; *k < n_roles && strcmp(role->valuestring, roles[*k]);) ++*k;
    if (*k == n_roles)
        return kvt_api_error_item(err, "messages", i, ".role", "invalid_value",
                                  "messages[%zu].role '%.32s' is not a role: it must be system, developer, user, "
                                  "assistant or tool",
                                  i, role->valuestring);
    const char *rs = roles[*k];
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
    int has_content = content && !cJSON_IsNull(content) && !(cJSON_IsArray(content) && !content->child);
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
    if (!has_content && !(!strcmp(rs, "assistant") && cJSON_IsArray(calls) && calls->child))
        return kvt_api_error_item(err, "messages", i, ".content", "missing_required_parameter",
                                  "messages[%zu].content is required for role '%s'%s", i, rs,
                                  strcmp(rs, "assistant") ? " (a string or text parts)"
                                                          : " unless the message carries 'tool_calls'");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "tool_call_id");
    if (!strcmp(rs, "tool") && (!cJSON_IsString(id) || !*id->valuestring))
        return kvt_api_error_item(err, "messages", i, ".tool_call_id",
                                  id ? "invalid_value" : "missing_required_parameter",
                                  "messages[%zu].tool_call_id is required for role 'tool': the id of the call it "
                                  "answers (a non-empty string)",
                                  i);
    return 0;
}

/* Whether id is the id of a tool call that an assistant message of r's first r->n_msgs carries. */
static int call_id_known(const kvt_api_request *r, const char *id) {
    for (size_t j = 0; j < r->n_msgs; j++) {
        const cJSON *c;
        cJSON_ArrayForEach(c, r->msg_tools[j].tool_calls) {
            const cJSON *cid = cJSON_GetObjectItemCaseSensitive(c, "id");
            if (cJSON_IsString(cid) && !strcmp(cid->valuestring, id)) return 1;
        }
    }
    return 0;
}

static int parse_messages(const cJSON *root, kvt_api_request *r, kvt_api_error *err) {
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!m)
        return kvt_api_errorf(err, 400, INVALID, "messages", "missing_required_parameter", "'messages' is required");
    if (!cJSON_IsArray(m))
        return kvt_api_errorf(err, 400, INVALID, "messages", "invalid_type", "'messages' must be an array");
    int n = cJSON_GetArraySize(m);
    if (n < 1 || n > KVT_API_MAX_MESSAGES)
        return kvt_api_errorf(err, 400, INVALID, "messages", "invalid_value",
                              "'messages' must hold between 1 and %d messages", KVT_API_MAX_MESSAGES);
    r->msgs = kvt_xcalloc((size_t)n, sizeof *r->msgs);
    r->msg_tools = kvt_xcalloc((size_t)n, sizeof *r->msg_tools);
    const cJSON *msg;
    cJSON_ArrayForEach(msg, m) {
        size_t k = 0;
        if (check_message(msg, r->n_msgs, roles, KVT_ARRAY_LEN(roles), &k, err)) return -1;
        const char *rs = roles[k];
        /* a tool's result answers a call made before it, as OpenAI requires: one that answers no call
         * would be rendered as the result of a call the model never saw */
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "tool_call_id");
        if (!strcmp(rs, "tool") && !call_id_known(r, id->valuestring))
            return kvt_api_error_item(err, "messages", r->n_msgs, ".tool_call_id", "invalid_value",
                                      "messages[%zu].tool_call_id '%.64s' answers no call: it must be the id of a "
                                      "tool_calls[] entry of an earlier assistant message",
                                      r->n_msgs, id->valuestring);
        char *content = NULL;
        kvt_api_msg_tools *mt = &r->msg_tools[r->n_msgs];
        if (kvt_api_parse_msg_tools(msg, r->n_msgs, rs, mt, err)) return -1;
        if (message_content(cJSON_GetObjectItemCaseSensitive(msg, "content"), r->n_msgs, &content, err)) {
            /* not yet counted in n_msgs, so kvt_api_tools_free would not see what its tool fields hold */
            cJSON_Delete(mt->tool_calls);
            free(mt->tool_call_id);
            free(mt->reasoning);
            free(mt->name);
            memset(mt, 0, sizeof *mt);
            return -1;
        }
        /* "developer" is OpenAI's newer name for the system role */
        r->msgs[r->n_msgs].role = kvt_xstrdup(k <= 1 ? "system" : rs);
        r->msgs[r->n_msgs].content = content ? content : kvt_xstrdup("");
        r->n_msgs++;
    }
    return 0;
}

static int parse_stop(const cJSON *root, kvt_api_request *r, kvt_api_error *err) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (!s || cJSON_IsNull(s)) return 0;
    if (cJSON_IsString(s)) {
        if (strlen(s->valuestring) > KVT_API_MAX_STOP_LEN)
            return kvt_api_errorf(err, 400, INVALID, "stop", "invalid_value", "a stop string is longer than %d bytes",
                                  KVT_API_MAX_STOP_LEN);
        if (*s->valuestring) r->stop[r->n_stop++] = kvt_xstrdup(s->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(s))
        return kvt_api_errorf(err, 400, INVALID, "stop", "invalid_type",
                              "'stop' must be a string or an array of strings");
    if (cJSON_GetArraySize(s) > KVT_API_MAX_STOP)
        return kvt_api_errorf(err, 400, INVALID, "stop", "invalid_value", "at most %d stop strings are allowed",
                              KVT_API_MAX_STOP);
    const cJSON *e;
    cJSON_ArrayForEach(e, s) {
        if (!cJSON_IsString(e))
            return kvt_api_errorf(err, 400, INVALID, "stop", "invalid_type", "'stop' must be an array of strings");
        if (strlen(e->valuestring) > KVT_API_MAX_STOP_LEN)
            return kvt_api_errorf(err, 400, INVALID, "stop", "invalid_value", "a stop string is longer than %d bytes",
                                  KVT_API_MAX_STOP_LEN);
        if (*e->valuestring) r->stop[r->n_stop++] = kvt_xstrdup(e->valuestring);
    }
    return 0;
}

/* Chat: "logprobs": bool and "top_logprobs": N (which needs logprobs, as
 * OpenAI rules). Completions: "logprobs": N, the alternatives per token. */
static int parse_logprobs(const cJSON *root, kvt_api_request *r, kvt_api_error *err) {
    double d;
    int has;
    if (r->kind == KVT_API_COMPLETION) {
        if (get_number(root, "logprobs", 0, KVT_API_MAX_TOP_LOGPROBS, NUM_INT, &d, &has, err)) return -1;
        r->logprobs = has;
        r->top_logprobs = has ? (int32_t)d : 0;
        return 0;
    }
    if (get_bool(root, "logprobs", &r->logprobs, err) ||
        get_number(root, "top_logprobs", 0, KVT_API_MAX_TOP_LOGPROBS, NUM_INT, &d, &has, err))
        return -1;
    if (has && d > 0 && !r->logprobs)
        return kvt_api_errorf(err, 400, INVALID, "top_logprobs", "invalid_value",
                              "'top_logprobs' needs 'logprobs' to be true");
    r->top_logprobs = has ? (int32_t)d : 0;
    return 0;
}

/* llama-server's logit_bias: an array of n (at least 1, at most the limit; bias_id and bias
 * allocated for them by the caller) [id, bias] and [text, bias] pairs, where bias false bans
 * the token (-inf) and a text stands for each of its tokens (kvt_srv_make_request tokenizes it).
 * The pairs add up, as llama-server's do. */
static int parse_bias_pairs(const cJSON *lb, int n, int32_t n_vocab, kvt_api_request *r, kvt_api_error *err) {
    r->bias_text = kvt_xmalloc((size_t)n * sizeof *r->bias_text);
    r->bias_text_bias = kvt_xmalloc((size_t)n * sizeof *r->bias_text_bias);
    for (const cJSON *e = lb->child; e; e = e->next) {
        const cJSON *what = cJSON_GetArrayItem(e, 0), *v = cJSON_GetArrayItem(e, 1);
        double id = cJSON_IsNumber(what) ? what->valuedouble : -1;
        int text = cJSON_IsString(what) && *what->valuestring;
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || (!text && !(id >= 0 && id < n_vocab && id == floor(id))))
            return kvt_api_errorf(err, 400, INVALID, "logit_bias", "invalid_value",
                                  "'logit_bias' as an array holds [token, bias] pairs whose token is an id in [0, %d) "
                                  "or a non-empty text",
                                  n_vocab);
        if (!cJSON_IsFalse(v) && !(cJSON_IsNumber(v) && fabs(v->valuedouble) <= MAX_LOGIT_BIAS))
            return kvt_api_errorf(err, 400, INVALID, "logit_bias", "invalid_value",
                                  "a 'logit_bias' pair's bias must be a finite number from -100 to 100, or false to "
                                  "ban the token");
        float bias = cJSON_IsFalse(v) ? -INFINITY : (float)v->valuedouble;
        if (text) {
            r->bias_text[r->n_bias_text] = kvt_xstrdup(what->valuestring);
            r->bias_text_bias[r->n_bias_text++] = bias;
        } else {
            r->bias_id[r->n_bias] = (int32_t)id;
            r->bias[r->n_bias++] = bias;
        }
    }
    return 0;
}

/* presence_penalty, frequency_penalty (OpenAI), repeat_penalty, the penalty
 * window (llama-server's repeat_last_n, or penalty_last_n as llama.cpp's
 * sampler calls it), repetition_penalty (vLLM), min_p (llama.cpp) and
 * logit_bias {"id": bias} (OpenAI). */
static int parse_penalties(const cJSON *root, int32_t n_vocab, kvt_api_request *r, kvt_api_error *err) {
    double d;
    int has;
    r->repeat_penalty = 1.0f;
    if (get_number(root, "presence_penalty", -MAX_PENALTY, MAX_PENALTY, 0, &d, &r->has_presence_penalty, err))
        return -1;
    if (r->has_presence_penalty) r->presence_penalty = (float)d;
    if (get_number(root, "frequency_penalty", -MAX_PENALTY, MAX_PENALTY, 0, &d, &r->has_frequency_penalty, err))
        return -1;
    if (r->has_frequency_penalty) r->frequency_penalty = (float)d;
    if (get_number(root, "repeat_penalty", 0, MAX_REPEAT_PENALTY, NUM_ABOVE, &d, &r->has_repeat_penalty, err))
        return -1;
    if (r->has_repeat_penalty) r->repeat_penalty = (float)d;
    if (get_number(root, "repetition_penalty", 0, MAX_REPEAT_PENALTY, NUM_ABOVE, &d, &has, err)) return -1;
    r->repetition_penalty = has ? (float)d : 0; /* vLLM's; absent: off */
    if (get_number(root, "min_p", 0, 1, 0, &d, &r->has_min_p, err)) return -1;
    if (r->has_min_p) r->min_p = (float)d;
    /* the two names of one window: a body with both is ambiguous */
    const cJSON *w1 = cJSON_GetObjectItemCaseSensitive(root, "repeat_last_n"),
                *w2 = cJSON_GetObjectItemCaseSensitive(root, "penalty_last_n");
    if (w1 && !cJSON_IsNull(w1) && w2 && !cJSON_IsNull(w2))
        return kvt_api_errorf(err, 400, INVALID, "repeat_last_n", "invalid_value",
                              "'repeat_last_n' and 'penalty_last_n' name the same window: send one of them");
    if (get_number(root, "repeat_last_n", -1, INT32_MAX, NUM_INT, &d, &has, err)) return -1;
    if (!has && get_number(root, "penalty_last_n", -1, INT32_MAX, NUM_INT, &d, &has, err)) return -1;
    r->has_penalty_last_n = has; /* 0 turns the penalties off (the server's defaults too): request_sampling */
    if (has) r->penalty_last_n = (int32_t)d;
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(root, "logit_bias");
    if (!lb || cJSON_IsNull(lb)) return 0;
    if (!cJSON_IsArray(lb) && !cJSON_IsObject(lb))
        return kvt_api_errorf(err, 400, INVALID, "logit_bias", "invalid_type",
                              "'logit_bias' must be an object of token ids to biases (OpenAI's) or an array of "
                              "[token id or text, bias] pairs (llama-server's)");
    int n = cJSON_GetArraySize(lb);
    if (n > KVT_API_MAX_LOGIT_BIAS)
        return kvt_api_errorf(err, 400, INVALID, "logit_bias", "invalid_value", "'logit_bias' has more than %d entries",
                              KVT_API_MAX_LOGIT_BIAS);
    if (!n) return 0;
    r->bias_id = kvt_xmalloc((size_t)n * sizeof *r->bias_id);
    r->bias = kvt_xmalloc((size_t)n * sizeof *r->bias);
    if (cJSON_IsArray(lb)) return parse_bias_pairs(lb, n, n_vocab, r, err);
    for (const cJSON *e = lb->child; e; e = e->next) {
        /* a key as a token id is written: decimal digits without a sign, space or leading zero, so
         * that no two keys ("5", "05", " 5") name one token and add up past the bias range (the
         * strict parse already refuses a key given twice) */
        const char *k = e->string;
        size_t digits = strspn(k, "0123456789");
        long id = digits && digits <= 10 && !k[digits] && (k[0] != '0' || digits == 1) ? strtol(k, NULL, 10) : -1;
        if (id < 0 || id >= n_vocab)
            return kvt_api_errorf(err, 400, INVALID, "logit_bias", "invalid_value",
                                  "'logit_bias' keys must be token ids in [0, %d), written in decimal without sign, "
                                  "spaces or leading zeros; got '%.32s'",
                                  n_vocab, k);
        if (!cJSON_IsNumber(e) || !(fabs(e->valuedouble) <= MAX_LOGIT_BIAS))
            return kvt_api_errorf(err, 400, INVALID, "logit_bias", "invalid_value",
                                  "'logit_bias' values must be finite numbers from -100 to 100");
        r->bias_id[r->n_bias] = (int32_t)id;
        r->bias[r->n_bias++] = (float)e->valuedouble;
    }
    return 0;
}

/* llama.cpp's samplers beyond top-k, top-p and min-p: typical_p, XTC, min_keep, the dynamic
 * temperature, Mirostat and DRY, with llama.cpp's defaults where absent. */
static int parse_llama_samplers(const cJSON *root, kvt_api_request *r, kvt_api_error *err) {
    static const struct {
        const char *name;
        double lo, hi, dflt;
        int flags;
    } F[] = {
        {"typical_p", 0, 1, 1, 0},
        {"xtc_probability", 0, 1, 0, 0},
        {"xtc_threshold", 0, 1, 0.1, 0},
        {"dynatemp_range", 0, MAX_TEMPERATURE, 0, 0},
        {"dynatemp_exponent", 0, MAX_DYNATEMP_EXPONENT, 1, 0},
        {"mirostat", 0, 2, 0, NUM_INT},
        {"mirostat_tau", 0, MAX_MIROSTAT_TAU, 5, 0},
        {"mirostat_eta", 0, 1, 0.1, 0},
        {"min_keep", INT32_MIN, INT32_MAX, 0, NUM_INT}, /* at or below 1: one candidate, as llama.cpp's 0 */
        {"dry_multiplier", 0, MAX_DRY_MULTIPLIER, 0, 0},
        {"dry_base", 0, MAX_DRY_BASE, 1.75, 0}, /* below 1: off */
        {"dry_allowed_length", 0, INT32_MAX, 2, NUM_INT},
        {"dry_penalty_last_n", -1, INT32_MAX, -1, NUM_INT}, /* -1: all, 0: off */
    };
    double v[KVT_ARRAY_LEN(F)];
    for (size_t i = 0; i < KVT_ARRAY_LEN(F); i++) {
        int has;
        if (get_number(root, F[i].name, F[i].lo, F[i].hi, F[i].flags, &v[i], &has, err)) return -1;
        if (!has) v[i] = F[i].dflt;
        r->sampling_given |= has ? 1u << i : 0; /* F is in KVT_API_GIVEN_*'s order */
    }
    /* typical_p 0 keeps the one most typical token, as llama.cpp's does: the sampler's 0 is off */
    r->typical_p = v[0] > 0 ? (float)v[0] : FLT_MIN;
    r->xtc_probability = (float)v[1], r->xtc_threshold = (float)v[2];
    r->dynatemp_range = (float)v[3], r->dynatemp_exponent = (float)v[4], r->mirostat = (int32_t)v[5];
    r->mirostat_tau = (float)v[6], r->mirostat_eta = (float)v[7], r->min_keep = (int32_t)v[8];
    r->dry_multiplier = (float)v[9], r->dry_base = (float)v[10], r->dry_allowed_length = (int32_t)v[11];
    r->dry_penalty_last_n = (int32_t)v[12];
    return kvt_api_parse_dry_breakers(root, r, err);
}

/* max_tokens and max_completion_tokens (the newer name; either is accepted, the newer wins) into
 * r->max_tokens, 0 when neither is given. -1 is llama-server's "no limit" (its web UI sends it by
 * default): the server's default, as when none is given. 0, or -1 with *err. */
static int parse_max_tokens(const cJSON *root, int32_t limit, kvt_api_request *r, kvt_api_error *err) {
    double mt = 0, mct = 0;
    int has = 0, has2 = 0;
    const cJSON *mtv = cJSON_GetObjectItemCaseSensitive(root, "max_tokens");
    int mt_none = cJSON_IsNumber(mtv) && mtv->valuedouble == -1;
    if ((!mt_none && get_number(root, "max_tokens", 1, limit, NUM_INT, &mt, &has, err)) ||
        get_number(root, "max_completion_tokens", 1, limit, NUM_INT, &mct, &has2, err))
        return -1;
    r->max_tokens = has2 ? (int32_t)mct : has ? (int32_t)mt : 0;
    return 0;
}

/* stream_options (read after stream): allowed only with a stream, as OpenAI has it. */
static int parse_stream_options(const cJSON *root, kvt_api_request *r, kvt_api_error *err) {
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (!so || cJSON_IsNull(so)) return 0;
    if (!cJSON_IsObject(so))
        return kvt_api_errorf(err, 400, INVALID, "stream_options", "invalid_type", "'stream_options' must be an object");
    if (!r->stream) /* options of a stream that is not asked for are a mistake, not a no-op */
        return kvt_api_errorf(err, 400, INVALID, "stream_options", "invalid_value",
                              "'stream_options' is only allowed with 'stream': true (send it null or leave it out)");
    const cJSON *iu = cJSON_GetObjectItemCaseSensitive(so, "include_usage");
    if (iu && !cJSON_IsNull(iu) && !cJSON_IsBool(iu))
        return kvt_api_errorf(err, 400, INVALID, "stream_options.include_usage", "invalid_type",
                              "'stream_options.include_usage' must be a boolean");
    r->include_usage = cJSON_IsTrue(iu);
    return 0;
}

static int parse_root(const cJSON *root, kvt_api_kind kind, int32_t n_vocab, int32_t max_tokens_limit,
                      kvt_api_request *r, kvt_api_error *err) {
    if (!cJSON_IsObject(root))
        return kvt_api_errorf(err, 400, INVALID, NULL, "invalid_json", "the request body must be a JSON object");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model))
            return kvt_api_errorf(err, 400, INVALID, "model", "invalid_type", "'model' must be a string");
        r->model = kvt_xstrdup(model->valuestring);
    }
    if (kind == KVT_API_CHAT ? parse_messages(root, r, err) : kvt_api_parse_prompt(root, n_vocab, r, err)) return -1;
    if (kvt_api_parse_samplers(root, r, err) || kvt_api_audit_fields(root, err) || kvt_api_parse_tools(root, r, err))
        return -1;

    double d;
    int has;
    if (parse_max_tokens(root, max_tokens_limit, r, err)) return -1;
    /* llama.cpp's name for it, read when neither OpenAI name is given; -1 there means "no limit" */
    double np = 0;
    if (!r->max_tokens && get_number(root, "n_predict", -1, max_tokens_limit, NUM_INT, &np, &has, err)) return -1;
    if (!r->max_tokens && has && np > 0) r->max_tokens = (int32_t)np;
    r->temperature = 1.0f;
    if (get_number(root, "temperature", 0, MAX_TEMPERATURE, 0, &d, &r->has_temperature, err)) return -1;
    if (r->has_temperature) r->temperature = (float)d;
    r->top_p = 1.0f;
    if (get_number(root, "top_p", 0, 1, NUM_ABOVE, &d, &r->has_top_p, err)) return -1;
    if (r->has_top_p) r->top_p = (float)d;
    if (get_number(root, "top_k", -1, INT32_MAX, NUM_INT, &d, &r->has_top_k, err)) return -1;
    if (r->has_top_k) r->top_k = d < 0 ? 0 : (int32_t)d;
    if (get_number(root, "seed", -MAX_SAFE_INT, MAX_SAFE_INT, NUM_INT, &d, &r->has_seed, err)) return -1;
    /* -1 (or 4294967295, the same 32 bits) is llama.cpp's "pick a random seed", which its clients
     * send for the default: a fresh seed per request, as without one */
    if (r->has_seed && (d == -1 || d == 4294967295.0)) r->has_seed = 0;
    if (r->has_seed) r->seed = (uint64_t)(int64_t)d;
    if (parse_logprobs(root, r, err) || parse_penalties(root, n_vocab, r, err) || parse_llama_samplers(root, r, err))
        return -1;
    if (get_number(root, "n", 1, KVT_API_MAX_N, NUM_INT, &d, &has, err)) return -1;
    r->n = has ? (int32_t)d : 1;
    if (parse_stop(root, r, err) || get_bool(root, "stream", &r->stream, err) ||
        get_bool(root, "ignore_eos", &r->ignore_eos, err))
        return -1;
    /* llama-server's code-completion limits (any value up to 0: off) */
    if (get_number(root, "n_indent", INT32_MIN, INT32_MAX, NUM_INT, &d, &has, err)) return -1;
    r->n_indent = has ? (int32_t)d : 0;
    if (get_number(root, "t_max_predict_ms", -MAX_SAFE_INT, MAX_SAFE_INT, NUM_INT, &d, &has, err)) return -1;
    r->t_max_predict_ms = has ? (int64_t)d : 0;
    if (parse_stream_options(root, r, err)) return -1;
    const cJSON *salt = cJSON_GetObjectItemCaseSensitive(root, "cache_salt");
    if (salt && !cJSON_IsNull(salt)) {
        if (!cJSON_IsString(salt))
            return kvt_api_errorf(err, 400, INVALID, "cache_salt", "invalid_type", "'cache_salt' must be a string");
        if (strlen(salt->valuestring) > KVT_API_MAX_SALT)
            return kvt_api_errorf(err, 400, INVALID, "cache_salt", "invalid_value",
                                  "'cache_salt' is longer than %d bytes", KVT_API_MAX_SALT);
        if (*salt->valuestring) r->cache_salt = kvt_xstrdup(salt->valuestring);
    }
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(root, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw) &&
        r->kind == KVT_API_CHAT) { /* extra variables for the chat template (the server decides if it may) */
        if (!cJSON_IsObject(kw))
            return kvt_api_errorf(err, 400, INVALID, "chat_template_kwargs", "invalid_type",
                                  "'chat_template_kwargs' must be an object of template variables");
        r->template_kwargs = cJSON_Duplicate(kw, 1);
    }
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "reasoning_format");
    if (rf && !cJSON_IsNull(rf) && r->kind == KVT_API_CHAT) {
        const char *v = cJSON_IsString(rf) ? rf->valuestring : "";
        if (!strcmp(v, "none")) r->reasoning_format = KVT_API_REASONING_NONE;
        else if (!strcmp(v, "deepseek") || !strcmp(v, "auto")) r->reasoning_format = KVT_API_REASONING_SPLIT;
        else
            return kvt_api_errorf(err, 400, INVALID, "reasoning_format", "invalid_value",
                                  "'reasoning_format' must be \"none\", \"deepseek\" or \"auto\"");
    }
    return parse_kvtier(root, r, err);
}

static int session_parse(const cJSON *kv, kvt_api_session *out, kvt_api_error *err);

int kvt_api_parse_session(const cJSON *kv, kvt_api_session *out, kvt_api_error *err) {
    return session_parse(kv, out, err) ? KVT_EARG : 0;
}

static int session_parse(const cJSON *kv, kvt_api_session *out, kvt_api_error *err) {
    memset(out, 0, sizeof *out);
    out->keep_warm_s = -1;
    if (!kv || cJSON_IsNull(kv)) return 0;
    if (!cJSON_IsObject(kv))
        return kvt_api_errorf(err, 400, INVALID, "kvtier", "invalid_type", "'kvtier' must be an object");
    static const char *const known[] = {"session_id", "priority", "keep_warm_s",    "documents",
                                        "rag",        "reuse",    "recompute_ratio"};
    for (const cJSON *f = kv->child; f; f = f->next) {
        size_t i = 0;
        while (i < KVT_ARRAY_LEN(known) && strcmp(f->string, known[i])) i++;
        if (i == KVT_ARRAY_LEN(known))
            return kvt_api_errorf(err, 400, INVALID, "kvtier", "unknown_field",
                                  "'kvtier.%.64s' is not a field kvtier knows (session_id, priority, keep_warm_s, "
                                  "documents, rag, reuse, recompute_ratio)",
                                  f->string);
    }
    const cJSON *sid = cJSON_GetObjectItemCaseSensitive(kv, "session_id");
    if (sid && !cJSON_IsNull(sid)) {
        if (!cJSON_IsString(sid) || !*sid->valuestring || strlen(sid->valuestring) > KVT_SESSION_NAME_MAX)
            return kvt_api_errorf(err, 400, INVALID, "kvtier.session_id", "invalid_value",
                                  "'kvtier.session_id' must be a string of 1..%d bytes", KVT_SESSION_NAME_MAX);
        snprintf(out->session_id, sizeof out->session_id, "%s", sid->valuestring);
    }
    double d;
    int has;
    if (get_number(kv, "kvtier.priority", KVT_API_PRIORITY_MIN, KVT_API_PRIORITY_MAX, NUM_INT, &d, &has, err))
        return -1;
    if (has) out->priority = (int)d;
    if (get_number(kv, "kvtier.keep_warm_s", 0, KVT_API_KEEP_WARM_MAX_S, 0, &d, &has, err)) return -1;
    if (has) out->keep_warm_s = d;
    if (out->keep_warm_s >= 0 && !out->session_id[0])
        return kvt_api_errorf(err, 400, INVALID, "kvtier.keep_warm_s", "invalid_value",
                              "'kvtier.keep_warm_s' needs a 'kvtier.session_id' to keep warm");
    return 0;
}

void kvt_api_documents_free(kvt_document *d, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free((char *)d[i].id);
        free((char *)d[i].text);
    }
    free(d);
}

int kvt_api_parse_documents(const cJSON *kv, kvt_document **out, size_t *n_out, kvt_api_error *err) {
    *out = NULL;
    *n_out = 0;
    const cJSON *ds = cJSON_IsObject(kv) ? cJSON_GetObjectItemCaseSensitive(kv, "documents") : NULL;
    if (!ds || cJSON_IsNull(ds)) return 0;
    int n = cJSON_IsArray(ds) ? cJSON_GetArraySize(ds) : -1;
    if (n < 0 || n > KVT_API_MAX_DOCUMENTS)
        return kvt_api_errorf(err, 400, INVALID, "kvtier.documents", "invalid_type",
                              "'kvtier.documents' must be an array of at most %d {\"id\", \"text\"} objects",
                              KVT_API_MAX_DOCUMENTS);
    kvt_document *d = kvt_xcalloc((size_t)(n ? n : 1), sizeof *d);
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(ds, i);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id"), *tx = cJSON_GetObjectItemCaseSensitive(e, "text");
        int fields = 0;
        for (const cJSON *f = cJSON_IsObject(e) ? e->child : NULL; f; f = f->next) fields++;
        if (!cJSON_IsString(id) || !*id->valuestring || strlen(id->valuestring) > KVT_API_MAX_DOC_ID ||
            !cJSON_IsString(tx) || fields != 2) {
            kvt_api_documents_free(d, (size_t)i);
            return kvt_api_errorf(err, 400, INVALID, "kvtier.documents", "invalid_value",
                                  "'kvtier.documents[%d]' must be {\"id\": 1..%d bytes, \"text\": string} and "
                                  "nothing else",
                                  i, KVT_API_MAX_DOC_ID);
        }
        for (int j = 0; j < i; j++) /* an id names one document: the same id twice is ambiguous */
            if (!strcmp(d[j].id, id->valuestring)) {
                kvt_api_documents_free(d, (size_t)i);
                return kvt_api_error_item(err, "kvtier.documents", (size_t)i, ".id", "invalid_value",
                                          "'kvtier.documents[%d].id' repeats the id of kvtier.documents[%d]: each "
                                          "document needs its own id",
                                          i, j);
            }
        d[i].id = kvt_xstrdup(id->valuestring);
        d[i].text = kvt_xstrdup(tx->valuestring);
    }
    *out = d;
    *n_out = (size_t)n;
    return 0;
}

/* kvtier.reuse ("exact", the default, or "approximate": docs/rag.md
 * "Approximate reuse") and kvtier.recompute_ratio. Approximate reuse makes the output
 * depend on what the cache holds, so it is refused with a seed, which asks
 * for output that replays. */
static int parse_reuse(const cJSON *kv, kvt_api_request *r, kvt_api_error *err) {
    return kvt_api_parse_reuse(kv, r->has_seed, &r->approximate, &r->recompute_ratio, err);
}

int kvt_api_parse_reuse(const cJSON *kv, int has_seed, int *approximate, float *ratio, kvt_api_error *err) {
    kvt_api_request req = {.has_seed = has_seed}, *r = &req;
    r->recompute_ratio = -1;
    const cJSON *reuse = cJSON_IsObject(kv) ? cJSON_GetObjectItemCaseSensitive(kv, "reuse") : NULL;
    if (reuse && !cJSON_IsNull(reuse)) {
        if (!cJSON_IsString(reuse) || (strcmp(reuse->valuestring, "exact") && strcmp(reuse->valuestring, "approximate")))
            return kvt_api_errorf(err, 400, INVALID, "kvtier.reuse", "invalid_value",
                                  "'kvtier.reuse' must be \"exact\" (the default) or \"approximate\"");
        r->approximate = !strcmp(reuse->valuestring, "approximate");
    }
    double d;
    int has = 0;
    if (cJSON_IsObject(kv) && get_number(kv, "kvtier.recompute_ratio", 0, 1, 0, &d, &has, err)) return -1;
    if (has && !r->approximate)
        return kvt_api_errorf(err, 400, INVALID, "kvtier.recompute_ratio", "invalid_value",
                              "'kvtier.recompute_ratio' needs 'kvtier.reuse': \"approximate\"");
    if (has) r->recompute_ratio = (float)d;
    if (r->approximate && r->has_seed)
        return kvt_api_errorf(err, 400, INVALID, "kvtier.reuse", "unsupported_parameter",
                              "'kvtier.reuse': \"approximate\" cannot be combined with 'seed': a seed asks for output "
                              "that replays exactly, and approximate reuse makes the output depend on what the cache "
                              "holds");
    *approximate = r->approximate;
    *ratio = r->recompute_ratio;
    return 0;
}

static int parse_kvtier(const cJSON *root, kvt_api_request *r, kvt_api_error *err) {
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(root, "kvtier");
    if (kvt_api_parse_session(kv, &r->session, err) || parse_reuse(kv, r, err)) return -1;
    const cJSON *rag = cJSON_IsObject(kv) ? cJSON_GetObjectItemCaseSensitive(kv, "rag") : NULL;
    if (rag && !cJSON_IsNull(rag)) r->rag_json = cJSON_PrintUnformatted(rag); /* the RAG endpoint reads it */
    return kvt_api_parse_documents(kv, &r->docs, &r->n_docs, err);
}

/* ---- the raw text, before parsing -------------------------------------------- */

static int json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The first byte of b[i..n) that is not JSON whitespace, or 0. */
static char next_char(const char *b, size_t i, size_t n) {
    while (i < n && json_space(b[i])) i++;
    return i < n ? b[i] : 0;
}

static int number_start(char c) { return c == '-' || (c >= '0' && c <= '9'); }

void kvt_api_scan_body(const char *b, size_t n, kvt_api_body_scan *sc) {
    memset(sc, 0, sizeof *sc);
    sc->values = 1;
    long depth = 0;
    int prompt_key = 0; /* the latest top-level key is "prompt" */
    int in_prompt = 0;
    int str = 0, num = 0; /* the prompt array holds a string, a number */
    for (size_t i = 0; i < n; i++) {
        char c = b[i];
        if (c == '"') {
            size_t j = i + 1;
            while (j < n && b[j] != '"') j += b[j] == '\\' && j + 1 < n ? 2 : 1;
            size_t k = j + 1;
            while (k < n && json_space(b[k])) k++;
            if (in_prompt && depth == 2) str = 1;
            /* a string right inside the root object and followed by ':' is a key */
            if (depth == 1 && k < n && b[k] == ':') {
                prompt_key = j - i - 1 == 6 && !memcmp(b + i + 1, "prompt", 6);
                if (j - i - 1 == 4 && !memcmp(b + i + 1, "echo", 4)) sc->echo_true = next_char(b, k + 1, n) == 't';
                if (j - i - 1 == 6 && !memcmp(b + i + 1, "suffix", 6)) {
                    size_t v = k + 1;
                    while (v < n && json_space(b[v])) v++;
                    sc->suffix_text = v + 1 < n && b[v] == '"' && b[v + 1] != '"';
                }
            }
            i = j;
        } else if (c == '{' || c == '[') {
            sc->values++;
            /* at depth 1, a container is the value of the latest key */
            if (++depth == 2 && c == '[' && prompt_key) {
                in_prompt = 1;
                sc->prompt_items = 1;
                sc->prompt_first = next_char(b, i + 1, n);
                num |= number_start(sc->prompt_first);
            }
        } else if (c == '}' || c == ']') {
            if (depth-- == 2) in_prompt = 0;
        } else if (c == ',') {
            sc->values++;
            if (in_prompt && depth == 2) {
                sc->prompt_items++;
                num |= number_start(next_char(b, i + 1, n));
            }
        }
    }
    sc->prompt_mixed = str && num;
}

int kvt_api_parse(kvt_api_kind kind, const char *body, size_t len, int32_t n_vocab, int32_t n_ctx,
                  int32_t max_tokens_limit, kvt_api_request *out, kvt_api_error *err) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    const char *nul = memchr(body, 0, len);
    if (nul)
        return kvt_api_errorf(err, 400, INVALID, NULL, "invalid_json",
                              "the request body holds a NUL byte (at byte %td), which JSON does not allow", nul - body);
    kvt_api_body_scan sc;
    kvt_api_scan_body(body, len, &sc);
    if (kind == KVT_API_COMPLETION && sc.prompt_items >= (size_t)KVT_MAX(n_ctx, 1))
        return kvt_api_errorf(err, 400, INVALID, "prompt", "context_length_exceeded",
                              "This model's maximum context length is %d tokens. However, your prompt array has %zu "
                              "items; shorten it (at least one token must be left to generate).",
                              n_ctx, sc.prompt_items);
    size_t max_values = (size_t)KVT_MAX(n_ctx, 0) + KVT_API_MAX_JSON_VALUES;
    if (sc.values > max_values)
        return kvt_api_errorf(err, 400, INVALID, NULL, "too_many_values",
                              "the request body holds more than %zu JSON values", max_values);
    /* the body has passed the strict check (api_body.h) before it came here: the HTTP layer
     * checks every POST body once, so a cJSON failure is only out of memory */
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root)
        return kvt_api_errorf(err, 400, INVALID, NULL, "invalid_json",
                              "the request body could not be parsed (out of memory)");
    int rc = kvt_api_check_types(kind == KVT_API_CHAT ? KVT_BODY_CHAT : KVT_BODY_COMPLETION, root, err) ||
        parse_root(root, kind, n_vocab, max_tokens_limit, out, err);
    cJSON_Delete(root);
    if (rc) {
        kvt_api_request_free(out);
        out->kind = kind;
    }
    return rc ? KVT_EARG : 0; /* the field parsers stop with -1 and *err filled: one code outside */
}

void kvt_api_request_free(kvt_api_request *r) {
    free(r->model);
    free(r->prompt);
    free(r->prompt_ids);
    cJSON_Delete(r->prompt_mixed);
    for (size_t i = 0; i < r->n_msgs; i++) {
        free((char *)r->msgs[i].role);
        free((char *)r->msgs[i].content);
    }
    free(r->msgs);
    kvt_api_tools_free(r);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->cache_salt);
    cJSON_Delete(r->template_kwargs);
    free(r->bias_id);
    free(r->bias);
    for (int32_t i = 0; i < r->n_dry_breakers; i++) free(r->dry_breakers[i]);
    free(r->dry_breakers);
    for (int32_t i = 0; i < r->n_bias_text; i++) free(r->bias_text[i]);
    free(r->bias_text);
    free(r->bias_text_bias);
    kvt_api_documents_free(r->docs, r->n_docs);
    free(r->rag_json);
    memset(r, 0, sizeof *r);
}
