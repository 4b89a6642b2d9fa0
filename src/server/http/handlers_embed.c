// SPDX-License-Identifier: MIT
/* POST /v1/embeddings (OpenAI's) and /embedding (llama-server's), with
 * --embeddings: each input becomes one prefill-only engine request whose
 * prompt goes through the cache like any other (its blocks are committed, and
 * last-token pooling reuses a cached prefix), while the engine step sums the
 * final hidden rows its pooling takes (sched_step.c). Here the sum becomes
 * the mean (mean pooling) and is L2-normalised. Inputs run in windows of
 * --parallel requests, answered in input order. */
#include "http_send.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "api_types.h"
#include "common.h"

#define EMBED_MAX_INPUTS 2048 /* inputs in one request */

static const char *const INVALID = "invalid_request_error";

/* One input's tokens. */
typedef struct {
    int32_t *ids;
    size_t n;
} embed_input;

typedef struct {
    embed_input *in;
    int n;
    int base64;
    const char *field; /* "input" or "content" */
} embed_body;

static void body_free(embed_body *b) {
    for (int i = 0; i < b->n; i++) free(b->in[i].ids);
    free(b->in);
}

/* Whether v is a non-empty array of numbers only (one input given as token ids). */
static int is_id_array(const cJSON *v) {
    if (!cJSON_IsArray(v) || !cJSON_GetArraySize(v)) return 0;
    for (const cJSON *e = v->child; e; e = e->next)
        if (!cJSON_IsNumber(e)) return 0;
    return 1;
}

/* Input i from v (a string, an array of token ids, or an array of strings and token ids) into
 * b->in[i]. 0, or -1 with *err. */
static int one_input(kvt_server *s, const cJSON *v, int i, int many, embed_body *b, kvt_api_error *err) {
    char where[64];
    if (many) snprintf(where, sizeof where, "%s[%d]", b->field, i);
    else snprintf(where, sizeof where, "%s", b->field);
    embed_input *in = &b->in[i];
    size_t max = (size_t)s->n_ctx;
    if (cJSON_IsString(v)) {
        const char *t = v->valuestring;
        if (!*t) return kvt_api_errorf(err, 400, INVALID, b->field, "invalid_value", "'%s' is an empty string", where);
        int rc = kvt_tokenize_max(s->tok, t, strlen(t), kvt_tokenizer_add_special(s->tok), 1, max, &in->ids, &in->n);
        if (rc == KVT_ELIMIT)
            return kvt_api_errorf(err, 400, INVALID, b->field, "context_length_exceeded",
                                  "'%s' is longer than the context of %d tokens", where, s->n_ctx);
        if (rc) return kvt_api_errorf(err, 400, INVALID, b->field, "invalid_value", "'%s' cannot be tokenized", where);
    } else if (kvt_api_prompt_is_mixed(v)) { /* strings and token ids: the ids as given, the texts tokenized */
        if (kvt_api_check_pieces(v, b->field, where, s->n_vocab, err)) return -1;
        int rc = kvt_api_tokenize_mixed(s->tok, v, kvt_tokenizer_add_special(s->tok), 1, max, &in->ids, &in->n);
        if (rc == KVT_ELIMIT)
            return kvt_api_errorf(err, 400, INVALID, b->field, "context_length_exceeded",
                                  "'%s' is longer than the context of %d tokens", where, s->n_ctx);
        if (rc) return kvt_api_errorf(err, 400, INVALID, b->field, "invalid_value", "'%s' cannot be tokenized", where);
    } else if (is_id_array(v)) {
        size_t n = (size_t)cJSON_GetArraySize(v);
        if (n > max)
            return kvt_api_errorf(err, 400, INVALID, b->field, "context_length_exceeded",
                                  "'%s' has %zu tokens, more than the context of %d", where, n, s->n_ctx);
        in->ids = kvt_xmalloc(n * sizeof *in->ids);
        for (const cJSON *e = v->child; e; e = e->next) {
            double d = e->valuedouble;
            if (d != floor(d) || d < 0 || d >= s->n_vocab)
                return kvt_api_errorf(err, 400, INVALID, b->field, "invalid_value",
                                      "'%s' holds %g, not a token id of this model (0 to %d)", where, d, s->n_vocab - 1);
            in->ids[in->n++] = (int32_t)d;
        }
    } else {
        return kvt_api_errorf(err, 400, INVALID, b->field, "invalid_type",
                              "'%s' must be a string, an array of token ids, or an array of strings and token ids",
                              where);
    }
    if (!in->n)
        return kvt_api_errorf(err, 400, INVALID, b->field, "invalid_value", "'%s' has no tokens to embed", where);
    return 0;
}

/* The inputs and options of a body (already strict JSON). 0, or -1 with *err. */
static int parse_body(kvt_server *s, const conn_state *cs, cJSON *j, embed_body *b, kvt_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "input");
    b->field = "input";
    if (!v && cs->r == R_LLAMA_EMBEDDING) {
        v = cJSON_GetObjectItemCaseSensitive(j, "content");
        b->field = "content";
    }
    if (!v)
        return kvt_api_errorf(err, 400, INVALID, b->field, "missing_required_parameter", "'%s' is required", b->field);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "encoding_format");
    if (fmt && !cJSON_IsNull(fmt)) {
        if (!cJSON_IsString(fmt) || (strcmp(fmt->valuestring, "float") && strcmp(fmt->valuestring, "base64")))
            return kvt_api_errorf(err, 400, INVALID, "encoding_format", "invalid_value",
                                  "'encoding_format' must be \"float\" or \"base64\"");
        b->base64 = !strcmp(fmt->valuestring, "base64");
    }
    const cJSON *dim = cJSON_GetObjectItemCaseSensitive(j, "dimensions");
    if (dim && !cJSON_IsNull(dim) && (!cJSON_IsNumber(dim) || dim->valuedouble != s->model->hp.n_embd))
        return kvt_api_errorf(err, 400, INVALID, "dimensions", "invalid_value",
                              "'dimensions' must be this model's embedding size, %d: vectors are not shortened",
                              s->model->hp.n_embd);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (model && !cJSON_IsNull(model) && !cJSON_IsString(model))
        return kvt_api_errorf(err, 400, INVALID, "model", "invalid_type", "'model' must be a string");
    if (cJSON_IsString(model) && !kvt_srv_model_known(s, model->valuestring)) /* as every other route answers */
        return kvt_api_errorf(err, 404, INVALID, "model", "model_not_found",
                              "The model '%.200s' does not exist: this server serves '%.200s' (GET /v1/models)",
                              model->valuestring, s->p.model_id);
    /* an array holding a string and a token id is one input, as llama-server reads it */
    int many = cJSON_IsArray(v) && !is_id_array(v) && !kvt_api_prompt_is_mixed(v);
    int n = many ? cJSON_GetArraySize(v) : 1;
    if (n < 1 || n > EMBED_MAX_INPUTS)
        return kvt_api_errorf(err, 400, INVALID, b->field, "invalid_value", "'%s' must hold 1 to %d inputs", b->field,
                              EMBED_MAX_INPUTS);
    b->in = kvt_xcalloc((size_t)n, sizeof *b->in);
    b->n = n;
    int i = 0;
    for (const cJSON *e = many ? v->child : v; e && i < n; e = many ? e->next : NULL, i++)
        if (one_input(s, e, i, many, b, err)) return -1;
    return 0;
}

/* An engine request for one input: prefill only, pooled as the server says. */
static srv_req *embed_request(kvt_server *s, const conn_state *cs, const char *cache_salt, embed_input *in) {
    srv_req *r = kvt_xcalloc(1, sizeof *r);
    r->refs = 1;
    r->id_slot = -1;
    r->kind = KVT_API_COMPLETION;
    r->t_arrival = kvt_now();
    r->created = (int64_t)time(NULL);
    kvt_srv_cond_init(&r->cv);
    r->usage.hide_report = s->p.hide_cached_tokens;
    r->salt = kvt_srv_tenant_salt(cs->key, cache_salt, &r->salt_len);
    r->prompt = in->ids;
    r->n_prompt = (int32_t)in->n;
    in->ids = NULL;
    r->sp = kvt_sampler_default_params();
    r->prefill_only = 1;
    r->embed = s->p.pooling;
    pthread_mutex_lock(&s->mu);
    uint64_t id = s->next_id++;
    pthread_mutex_unlock(&s->mu);
    snprintf(r->id, sizeof r->id, "embd-%llx%06llx", (unsigned long long)r->created, (unsigned long long)id);
    snprintf(r->request_id, sizeof r->request_id, "%s", cs->request_id);
    return r;
}

/* r's pooled, L2-normalised vector into v (n_embd floats). */
static void finish_vector(const kvt_server *s, const srv_req *r, float *v) {
    const int64_t D = s->model->hp.n_embd;
    double count = r->embed == KVT_POOL_MEAN ? r->n_prompt : 1, norm = 0;
    for (int64_t d = 0; d < D; d++) {
        v[d] = r->embed_sum ? (float)(r->embed_sum[d] / count) : 0.0f;
        norm += (double)v[d] * v[d];
    }
    norm = sqrt(norm);
    for (int64_t d = 0; d < D && norm > 0; d++) v[d] = (float)(v[d] / norm);
}

/* The floats' little-endian bytes in base64. */
static char *base64_f32(const float *v, int64_t n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t len = (size_t)n * 4;
    unsigned char *b = kvt_xmalloc(len ? len : 1);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++) b[i * 4 + k] = (unsigned char)(u >> (8 * k));
    }
    char *out = kvt_xmalloc((len + 2) / 3 * 4 + 1), *o = out;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t w = (uint32_t)b[i] << 16 | (i + 1 < len ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < len ? b[i + 2] : 0);
        *o++ = A[w >> 18 & 63];
        *o++ = A[w >> 12 & 63];
        *o++ = i + 1 < len ? A[w >> 6 & 63] : '=';
        *o++ = i + 2 < len ? A[w & 63] : '=';
    }
    *o = 0;
    free(b);
    return out;
}

static cJSON *float_array(const float *v, int64_t n) {
    cJSON *a = cJSON_CreateArray();
    for (int64_t d = 0; d < n; d++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[d]));
    return a;
}

/* The answer: OpenAI's list with usage (and kvtier's cache report unless
 * --hide-cached-tokens), or llama-server's array of {index, embedding: [[...]]}. */
static char *answer(const kvt_server *s, const conn_state *cs, const embed_body *b, srv_req **reqs) {
    const int64_t D = s->model->hp.n_embd;
    float *v = kvt_xmalloc((size_t)D * sizeof *v);
    int native = cs->r == R_LLAMA_EMBEDDING;
    cJSON *data = cJSON_CreateArray();
    int64_t prompt = 0, cached = 0;
    for (int i = 0; i < b->n; i++) {
        finish_vector(s, reqs[i], v);
        prompt += reqs[i]->n_prompt;
        cached += reqs[i]->usage.cached_tokens;
        cJSON *o = cJSON_CreateObject();
        if (!native) cJSON_AddStringToObject(o, "object", "embedding");
        cJSON_AddNumberToObject(o, "index", i);
        if (native) {
            cJSON *rows = cJSON_CreateArray();
            cJSON_AddItemToArray(rows, float_array(v, D));
            cJSON_AddItemToObject(o, "embedding", rows);
        } else if (b->base64) {
            char *t = base64_f32(v, D);
            cJSON_AddStringToObject(o, "embedding", t);
            free(t);
        } else {
            cJSON_AddItemToObject(o, "embedding", float_array(v, D));
        }
        cJSON_AddItemToArray(data, o);
    }
    free(v);
    cJSON *root = data;
    if (!native) {
        root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "object", "list");
        cJSON_AddItemToObject(root, "data", data);
        cJSON_AddStringToObject(root, "model", s->p.model_id);
        cJSON *u = cJSON_AddObjectToObject(root, "usage");
        cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt);
        cJSON_AddNumberToObject(u, "total_tokens", (double)prompt);
        if (!s->p.hide_cached_tokens) {
            cJSON *k = cJSON_AddObjectToObject(root, "kvtier");
            cJSON_AddNumberToObject(k, "cached_tokens", (double)cached);
            cJSON_AddNumberToObject(k, "computed_tokens", (double)(prompt - cached));
            cJSON_AddStringToObject(k, "pooling",
                                    s->p.pooling == KVT_POOL_LAST      ? "last"
                                        : s->p.pooling == KVT_POOL_CLS ? "cls"
                                                                       : "mean");
        }
    }
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return json;
}

/* Queues and waits for inputs [from, to), at most --parallel at a time so the
 * queue keeps room. 0, -1 with *err (a full queue), or 1 when the client left. */
static int run_window(kvt_server *s, struct MHD_Connection *c, const conn_state *cs, const char *salt, embed_body *b,
                      srv_req **reqs, int from, int to, kvt_api_error *err) {
    for (int i = from; i < to; i++) {
        srv_req *r = embed_request(s, cs, salt, &b->in[i]);
        if (kvt_srv_enqueue(s, r)) {
            kvt_srv_req_unref(s, r);
            return kvt_api_errorf(err, 503, "server_error", NULL, "overloaded",
                                  "the server is busy (%d requests queued) or shutting down; retry later", s->p.queue);
        }
        reqs[i] = r;
    }
    /* a client that left cancels every input queued so far, not just this window's */
    return kvt_srv_wait_done(s, c, reqs + from, to - from, reqs, b->n) ? 1 : 0;
}

int kvt_srv_embed_question(kvt_server *s, struct MHD_Connection *c, const conn_state *cs, const char *text,
                           const char *cache_salt, int pooling, float *v, kvt_api_error *err) {
    embed_input in = {0};
    int rc = kvt_tokenize(s->tok, text, strlen(text), kvt_tokenizer_add_special(s->tok), 0, &in.ids, &in.n);
    if (rc || !in.n) {
        free(in.ids);
        return kvt_api_errorf(err, 400, INVALID, "messages", "invalid_value",
                              "the question cannot be tokenized to embed it for dense retrieval");
    }
    in.n = KVT_MIN(in.n, (size_t)s->n_ctx);
    srv_req *r = embed_request(s, cs, cache_salt, &in);
    r->embed = pooling;
    if (kvt_srv_enqueue(s, r)) {
        kvt_srv_req_unref(s, r);
        return kvt_api_errorf(err, 503, "server_error", NULL, "overloaded",
                              "the server is busy (%d requests queued) or shutting down; retry later", s->p.queue);
    }
    if (kvt_srv_wait_done(s, c, &r, 1, &r, 1)) {
        kvt_srv_req_unref(s, r);
        return kvt_api_errorf(err, 400, INVALID, NULL, "client_gone", "the client went away");
    }
    rc = r->err_status ? kvt_api_errorf(err, r->err_status, r->err_status >= 500 ? "server_error" : INVALID, NULL, NULL,
                                        "embedding the question: %s", r->err_msg)
                       : 0;
    if (!rc) finish_vector(s, r, v);
    kvt_srv_req_unref(s, r);
    return rc;
}

enum MHD_Result kvt_srv_handle_embeddings(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    kvt_api_error err;
    if (!s->p.embeddings) {
        kvt_api_errorf(&err, 404, INVALID, NULL, "not_found",
                       "embeddings are off on this server: start it with --embeddings");
        return kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
    }
    cJSON *j = cJSON_ParseWithLength(cs->body ? cs->body : "", cs->len);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return kvt_srv_send_errorf(s, c, cs->label, 400, INVALID, "invalid_json", "the body must be a JSON object");
    }
    embed_body b = {0};
    const cJSON *salt = cJSON_GetObjectItemCaseSensitive(j, "cache_salt");
    /* -1 for a refused body (rc 1 would say the client left) */
    int rc = kvt_api_check_types(KVT_BODY_EMBEDDING, j, &err) ? -1 : parse_body(s, cs, j, &b, &err);
    if (!rc && salt && !cJSON_IsNull(salt) && !cJSON_IsString(salt))
        rc = kvt_api_errorf(&err, 400, INVALID, "cache_salt", "invalid_type", "'cache_salt' must be a string");
    srv_req **reqs = kvt_xcalloc((size_t)KVT_MAX(b.n, 1), sizeof *reqs);
    const char *salt_text = cJSON_IsString(salt) ? salt->valuestring : NULL;
    int window = KVT_MAX(1, KVT_MIN(s->p.parallel, s->p.queue));
    for (int i = 0; !rc && i < b.n; i += window)
        rc = run_window(s, c, cs, salt_text, &b, reqs, i, KVT_MIN(b.n, i + window), &err);
    enum MHD_Result ret = MHD_NO;
    srv_req *failed = NULL;
    for (int i = 0; !rc && i < b.n && !failed; i++)
        if (reqs[i]->err_status) failed = reqs[i];
    if (rc == 1) {
        cs->status = STATUS_CLIENT_GONE;
        kvt_metrics_count_request(s->metrics, cs->label, STATUS_CLIENT_GONE);
    } else if (rc) {
        ret = kvt_srv_send_error(s, c, cs->label, &err, err.status == 503 ? MHD_HTTP_HEADER_RETRY_AFTER : NULL,
                                 RETRY_AFTER_S);
    } else if (failed) {
        kvt_api_errorf(&err, failed->err_status, failed->err_status >= 500 ? "server_error" : INVALID, NULL, NULL, "%s",
                       failed->err_msg);
        ret = kvt_srv_send_error(s, c, cs->label, &err, failed->err_status == 503 ? MHD_HTTP_HEADER_RETRY_AFTER : NULL,
                                 RETRY_AFTER_S);
    } else {
        ret = kvt_srv_send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", answer(s, cs, &b, reqs), NULL, NULL);
    }
    for (int i = 0; i < b.n; i++)
        if (reqs[i]) kvt_srv_req_unref(s, reqs[i]);
    free(reqs);
    body_free(&b);
    cJSON_Delete(j);
    return ret;
}
