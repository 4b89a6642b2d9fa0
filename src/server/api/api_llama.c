// SPDX-License-Identifier: MIT
/* /tokenize, /detokenize and /props (see api_llama.h): llama-server's names
 * and shapes, built with cJSON. */
#include "api_llama.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_types.h"
#include "api_utf8.h"
#include "common.h"

#define PIECE_INIT 64                      /* bytes of one token's text, grown as needed */
#define SEED_SHOWN_MAX 9007199254740992ull /* 2^53: larger integers lose digits as JSON numbers */

static const char *const INVALID = "invalid_request_error";

static char *print_free(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s ? s : kvt_xstrdup("{}"); /* cJSON fails only when out of memory */
}

/* The body as a JSON object whose fields have the types a body of kind holds, or NULL with *err. */
static cJSON *parse_object(const char *body, size_t len, kvt_api_body kind, kvt_api_error *err) {
    if (memchr(body, 0, len)) {
        kvt_api_errorf(err, 400, INVALID, NULL, "invalid_json", "the request body holds a NUL byte");
        return NULL;
    }
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        kvt_api_errorf(err, 400, INVALID, NULL, "invalid_json", "the request body must be a JSON object");
        return NULL;
    }
    if (kvt_api_check_types(kind, root, err)) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static int opt_bool(const cJSON *root, const char *name, int dflt, int *out, kvt_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    *out = dflt;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v))
        return kvt_api_errorf(err, 400, INVALID, name, "invalid_type", "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* Whether s[0..n) is valid UTF-8 without NUL bytes (sanitizing would change nothing). */
static int utf8_clean(const char *s, size_t n) {
    size_t m;
    char *c = kvt_utf8_sanitize(s, n, &m);
    int same = m == n && !memcmp(c, s, n);
    free(c);
    return same;
}

char *kvt_api_tokenize(const kvt_tokenizer *t, const char *body, size_t len, kvt_api_error *err) {
    cJSON *root = parse_object(body, len, KVT_BODY_TOKENIZE, err);
    if (!root) return NULL;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(root, "content");
    int add_special, parse_special, with_pieces;
    if (!cJSON_IsString(content) && !cJSON_IsArray(content)) {
        kvt_api_errorf(err, 400, INVALID, "content", content ? "invalid_type" : "missing_required_parameter",
                       "'content' must be a string, or an array of strings and token ids");
        goto fail;
    }
    if (cJSON_IsArray(content) && kvt_api_check_pieces(content, "content", "content", kvt_tokenizer_n_vocab(t), err))
        goto fail;
    /* llama-server's defaults: no BOS unless asked, control tokens recognised */
    if (opt_bool(root, "add_special", 0, &add_special, err) ||
        opt_bool(root, "parse_special", 1, &parse_special, err) || opt_bool(root, "with_pieces", 0, &with_pieces, err))
        goto fail;
    int32_t *ids = NULL;
    size_t n = 0;
    int add = add_special ? kvt_tokenizer_add_special(t) : 0;
    /* an array as llama-server reads it: the ids as given, the texts tokenized in place (special
     * tokens only for a text that comes first) */
    int rc = cJSON_IsArray(content)
        ? kvt_api_tokenize_mixed(t, content, add, parse_special, SIZE_MAX, &ids, &n)
        : kvt_tokenize(t, content->valuestring, strlen(content->valuestring), add, parse_special, &ids, &n);
    if (rc) {
        kvt_api_errorf(err, 400, INVALID, "content", NULL, "cannot tokenize: %s", kvt_errmsg());
        goto fail;
    }
    cJSON_Delete(root);
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "tokens");
    size_t cap = PIECE_INIT;
    char *piece = kvt_xmalloc(cap);
    for (size_t i = 0; i < n; i++) {
        if (!with_pieces) {
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
            continue;
        }
        int pl = kvt_token_piece(t, ids[i], piece, cap, 1);
        if (pl > (int)cap) {
            piece = kvt_xrealloc(piece, cap = (size_t)pl);
            pl = kvt_token_piece(t, ids[i], piece, cap, 1);
        }
        if (pl < 0) pl = 0;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "id", ids[i]);
        if (utf8_clean(piece, (size_t)pl)) {
            char *s = kvt_xmalloc((size_t)pl + 1);
            memcpy(s, piece, (size_t)pl);
            s[pl] = 0;
            cJSON_AddStringToObject(e, "piece", s);
            free(s);
        } else { /* part of a character: the bytes, as llama-server gives them */
            cJSON *b = cJSON_AddArrayToObject(e, "piece");
            for (int k = 0; k < pl; k++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)piece[k]));
        }
        cJSON_AddItemToArray(arr, e);
    }
    free(piece);
    free(ids);
    return print_free(o);
fail:
    cJSON_Delete(root);
    return NULL;
}

char *kvt_api_detokenize(const kvt_tokenizer *t, const char *body, size_t len, kvt_api_error *err) {
    cJSON *root = parse_object(body, len, KVT_BODY_DETOKENIZE, err);
    if (!root) return NULL;
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    int32_t n_vocab = kvt_tokenizer_n_vocab(t);
    if (!cJSON_IsArray(toks)) {
        kvt_api_errorf(err, 400, INVALID, "tokens", toks ? "invalid_type" : "missing_required_parameter",
                       "'tokens' must be an array of token ids");
        cJSON_Delete(root);
        return NULL;
    }
    size_t n = (size_t)cJSON_GetArraySize(toks), k = 0;
    int32_t *ids = kvt_xmalloc((n ? n : 1) * sizeof *ids);
    const cJSON *v;
    cJSON_ArrayForEach(v, toks) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
        if (d != floor(d) || d < 0 || d >= n_vocab) {
            kvt_api_errorf(err, 400, INVALID, "tokens", "invalid_value", "token ids must be integers in [0, %d)",
                           n_vocab);
            free(ids);
            cJSON_Delete(root);
            return NULL;
        }
        ids[k++] = (int32_t)d;
    }
    cJSON_Delete(root);
    char *text = NULL;
    size_t tl = 0;
    int rc = n ? kvt_detokenize(t, ids, n, 1, &text, &tl) : 0;
    free(ids);
    if (rc) {
        kvt_api_errorf(err, 400, INVALID, "tokens", NULL, "cannot detokenize: %s", kvt_errmsg());
        return NULL;
    }
    char *clean = kvt_utf8_sanitize(text ? text : "", tl, NULL);
    free(text);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", clean);
    free(clean);
    return print_free(o);
}

char *kvt_api_props_json(const kvt_api_props *p) {
    static const char *const tiers[KVT_TIER_COUNT] = {"T0", "T1", "T2", "T3"};
    static const char *const what[KVT_TIER_COUNT] = {"active", "ram", "disk", "remote"};
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", p->model_id);
    cJSON_AddStringToObject(o, "model_path", p->model_path);
    cJSON_AddNumberToObject(o, "n_ctx", p->n_ctx);
    cJSON_AddNumberToObject(o, "block_size", p->block_size);
    cJSON_AddNumberToObject(o, "total_slots", p->parallel);
    cJSON_AddStringToObject(o, "kv_dtype", p->kv_dtype);
    cJSON_AddStringToObject(o, "device", p->device);
    cJSON_AddStringToObject(o, "device_name", p->device_name);
    cJSON_AddStringToObject(o, "chat_template_family", p->chat_family);
    if (p->chat_template) cJSON_AddStringToObject(o, "chat_template", p->chat_template);
    else cJSON_AddNullToObject(o, "chat_template");
    /* which of the two renders chat prompts: the template itself, or the family's built-in rendering */
    cJSON_AddBoolToObject(o, "jinja", p->jinja);
    cJSON *m = cJSON_AddObjectToObject(o, "model_meta");
    cJSON_AddStringToObject(m, "arch", p->arch);
    cJSON_AddNumberToObject(m, "n_ctx_train", p->n_ctx_train);
    cJSON_AddNumberToObject(m, "n_vocab", p->n_vocab);
    cJSON_AddNumberToObject(m, "n_embd", p->n_embd);
    cJSON_AddNumberToObject(m, "n_layer", p->n_layer);
    cJSON_AddNumberToObject(m, "n_params", (double)p->n_params);
    cJSON *t = cJSON_AddObjectToObject(o, "tiers");
    for (int i = 0; i < KVT_TIER_COUNT; i++) {
        cJSON *e = cJSON_AddObjectToObject(t, tiers[i]);
        cJSON_AddStringToObject(e, "kind", what[i]);
        cJSON_AddBoolToObject(e, "enabled", p->tier_budget_bytes[i] > 0);
        cJSON_AddNumberToObject(e, "budget_bytes", (double)p->tier_budget_bytes[i]);
    }
    cJSON *g = cJSON_AddObjectToObject(o, "default_generation_settings");
    cJSON_AddNumberToObject(g, "n_ctx", p->n_ctx);
    cJSON_AddNumberToObject(g, "max_tokens", p->max_tokens_default);
    /* llama-server's names for what a request that sets nothing gets, as GET /slots shows them */
    cJSON *d = cJSON_AddObjectToObject(g, "params");
    cJSON_AddNumberToObject(d, "n_predict", p->n_predict_default);
    cJSON_AddNumberToObject(d, "temperature", p->temperature_default);
    cJSON_AddNumberToObject(d, "top_k", p->top_k_default);
    cJSON_AddNumberToObject(d, "top_p", p->top_p_default);
    cJSON_AddStringToObject(o, "bos_token", p->bos_token ? p->bos_token : "");
    cJSON_AddStringToObject(o, "eos_token", p->eos_token ? p->eos_token : "");
    cJSON_AddStringToObject(o, "build_info", "kvtier " KVT_VERSION);
    return print_free(o);
}

/* Per-token ms and tokens per second of n tokens in ms, as llama-server's timings give them. */
static void add_rates(cJSON *t, const char *pre, int32_t n, double ms) {
    char k[48];
    snprintf(k, sizeof k, "%s_n", pre);
    cJSON_AddNumberToObject(t, k, n);
    snprintf(k, sizeof k, "%s_ms", pre);
    cJSON_AddNumberToObject(t, k, ms);
    snprintf(k, sizeof k, "%s_per_token_ms", pre);
    cJSON_AddNumberToObject(t, k, n > 0 ? ms / n : 0);
    snprintf(k, sizeof k, "%s_per_second", pre);
    cJSON_AddNumberToObject(t, k, ms > 0 ? 1e3 * n / ms : 0);
}

/* llama-server's "generation_settings" under its names, with the values the request ran with. */
static cJSON *settings_obj(const kvt_api_llama_completion *c) {
    const kvt_sampler_params *sp = c->sp;
    cJSON *g = cJSON_CreateObject();
    cJSON_AddNumberToObject(g, "n_predict", c->n_predict);
    /* a seed the request or --seed gave is below 2^53; one the server drew (64 random bits) shows as
     * llama-server's "random" value, so the field stays an integer a client can read as one */
    cJSON_AddNumberToObject(g, "seed", sp->seed <= SEED_SHOWN_MAX ? (double)sp->seed : 4294967295.0);
    cJSON_AddNumberToObject(g, "temperature", sp->temp);
    cJSON_AddNumberToObject(g, "top_k", sp->top_k);
    cJSON_AddNumberToObject(g, "top_p", sp->top_p);
    cJSON_AddNumberToObject(g, "min_p", sp->min_p);
    /* the sampler's FLT_MIN is a request's 0 (its 0 is off, which a request says with 1) */
    double typ = sp->typical_p <= 0 || sp->typical_p >= 1 ? 1 : sp->typical_p <= FLT_MIN ? 0 : sp->typical_p;
    cJSON_AddNumberToObject(g, "typical_p", typ);
    cJSON_AddNumberToObject(g, "xtc_probability", sp->xtc_probability);
    cJSON_AddNumberToObject(g, "xtc_threshold", sp->xtc_threshold);
    cJSON_AddNumberToObject(g, "dynatemp_range", sp->dynatemp_range);
    cJSON_AddNumberToObject(g, "dynatemp_exponent", sp->dynatemp_exponent);
    cJSON_AddNumberToObject(g, "mirostat", sp->mirostat);
    cJSON_AddNumberToObject(g, "mirostat_tau", sp->mirostat_tau);
    cJSON_AddNumberToObject(g, "mirostat_eta", sp->mirostat_eta);
    cJSON_AddNumberToObject(g, "min_keep", KVT_MAX(0, sp->min_keep));
    cJSON_AddNumberToObject(g, "dry_multiplier", sp->dry_multiplier);
    cJSON_AddNumberToObject(g, "dry_base", sp->dry_base);
    cJSON_AddNumberToObject(g, "dry_allowed_length", sp->dry_allowed_length);
    cJSON_AddNumberToObject(g, "dry_penalty_last_n", sp->dry_penalty_last_n);
    cJSON_AddNumberToObject(g, "repeat_last_n", sp->penalty_last_n > 0 ? sp->penalty_last_n : -1);
    cJSON_AddNumberToObject(g, "repeat_penalty", sp->repeat_penalty);
    cJSON_AddNumberToObject(g, "repetition_penalty",
                            sp->repetition_penalty > 0 ? sp->repetition_penalty : 1); /* vLLM's */
    cJSON_AddNumberToObject(g, "presence_penalty", sp->presence_penalty);
    cJSON_AddNumberToObject(g, "frequency_penalty", sp->frequency_penalty);
    cJSON *stop = cJSON_AddArrayToObject(g, "stop");
    for (int i = 0; i < c->n_stop_words; i++) cJSON_AddItemToArray(stop, cJSON_CreateString(c->stop_words[i]));
    cJSON_AddNumberToObject(g, "max_tokens", c->n_predict);
    cJSON_AddBoolToObject(g, "ignore_eos", c->ignore_eos);
    cJSON_AddBoolToObject(g, "stream", c->stream);
    cJSON_AddNumberToObject(g, "n_probs", c->n_probs);
    return g;
}

cJSON *kvt_api_llama_completion_obj(const kvt_api_llama_completion *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", c->content ? c->content : "");
    cJSON *ids = cJSON_AddArrayToObject(o, "tokens"); /* empty unless return_tokens, as llama-server's */
    for (size_t i = 0; i < c->n_tokens; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(c->tokens[i]));
    cJSON_AddNumberToObject(o, "index", c->index);
    cJSON_AddNumberToObject(o, "id_slot", c->id_slot);
    cJSON_AddBoolToObject(o, "stop", c->stop);
    if (!c->stop) { /* the last event has the final figures below */
        cJSON_AddNumberToObject(o, "tokens_predicted", c->n_decoded);
        cJSON_AddNumberToObject(o, "tokens_evaluated", c->n_evaluated);
    }
    if (c->probs) {
        cJSON *arr = cJSON_AddArrayToObject(o, "completion_probabilities");
        for (size_t i = 0; i < c->probs->n; i++) {
            const kvt_api_logprob *it = &c->probs->items[i];
            cJSON *e = kvt_api_token_logprob_obj(c->probs->tok, it->id, it->logprob);
            cJSON_AddNumberToObject(e, "id", it->id);
            cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
            for (int32_t k = 0; k < it->n_top; k++) {
                cJSON *t = kvt_api_token_logprob_obj(c->probs->tok, it->top_id[k], it->top_logprob[k]);
                cJSON_AddNumberToObject(t, "id", it->top_id[k]);
                cJSON_AddItemToArray(top, t);
            }
            cJSON_AddItemToArray(arr, e);
        }
    }
    if (!c->stop) return o;
    int32_t prompt_tokens = c->prompt_n + c->cache_n;
    cJSON_AddStringToObject(o, "model", c->model);
    cJSON_AddNumberToObject(o, "tokens_predicted", c->predicted_n);
    cJSON_AddNumberToObject(o, "tokens_evaluated", prompt_tokens);
    cJSON_AddNumberToObject(o, "tokens_cached", prompt_tokens + c->predicted_n);
    if (c->sp) cJSON_AddItemToObject(o, "generation_settings", settings_obj(c));
    if (c->prompt) cJSON_AddStringToObject(o, "prompt", c->prompt);
    cJSON_AddBoolToObject(o, "has_new_line", c->content && strchr(c->content, '\n'));
    cJSON_AddStringToObject(o, "stop_type", c->stop_type ? c->stop_type : "eos");
    cJSON_AddStringToObject(o, "stopping_word", c->stopping_word ? c->stopping_word : "");
    cJSON_AddBoolToObject(o, "truncated", 0);
    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    cJSON_AddNumberToObject(t, "cache_n", c->cache_n);
    add_rates(t, "prompt", c->prompt_n, c->prompt_ms);
    add_rates(t, "predicted", c->predicted_n, c->predicted_ms);
    if (c->usage) cJSON_AddItemToObject(o, "kvtier", kvt_api_kvtier_obj(c->usage));
    return o;
}
