// SPDX-License-Identifier: MIT
/* The generic route handlers: generation (/v1/completions,
 * /v1/chat/completions, /v1/rag/chat/completions, /v1/cache/prefill), which
 * queue a request for the engine thread and answer with its JSON or an SSE
 * stream (generate_reply.c); /tokenize and /detokenize; and the GET pages (/health,
 * /v1/models, /props, /metrics, /dashboard). The route table and dispatch are
 * in http_router.c, the /v1/cache admin handlers in handlers_admin.c. */
#include "http_send.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "api_llama.h"
#include "common.h"
#include "dashboard.h"
#include "kv_quant.h"

/* The request kind of a body: chat for the chat routes, and for the prefill
 * route when it has "messages"; completions otherwise. */
static kvt_api_kind kind_of(route r, const char *body, size_t len) {
    if (r == R_CHAT || r == R_RAG || r == R_APPLY_TEMPLATE) return KVT_API_CHAT;
    if (r != R_PREFILL && r != R_CACHE_PIN && r != R_CACHE_PREFETCH && r != R_CACHE_LOOKUP) return KVT_API_COMPLETION;
    cJSON *root = cJSON_ParseWithLength(body, len);
    kvt_api_kind k = root && cJSON_GetObjectItemCaseSensitive(root, "messages") ? KVT_API_CHAT : KVT_API_COMPLETION;
    cJSON_Delete(root);
    return k;
}

/* Whether name is the served model: its id or another name it answers to (--alias, the file's name).
 * An empty name is no name, as llama.cpp's clients send it. */
int kvt_srv_model_known(const kvt_server *s, const char *name) {
    if (!*name || !strcmp(name, s->p.model_id)) return 1;
    for (size_t i = 0; i < s->p.n_model_names; i++)
        if (!strcmp(name, s->p.model_names[i])) return 1;
    return 0;
}

int kvt_srv_parse_body(kvt_server *s, route r, const char *body, size_t len, kvt_api_request *a, kvt_api_error *err) {
    if (kvt_api_parse(kind_of(r, body, len), body, len, s->n_vocab, s->n_ctx, s->p.max_tokens_limit, a, err))
        return KVT_EARG;
    if (a->model && !kvt_srv_model_known(s, a->model)) {
        kvt_api_errorf(err, 404, "invalid_request_error", "model", "model_not_found",
                       "The model '%.200s' does not exist: this server serves '%.200s' (GET /v1/models)", a->model,
                       s->p.model_id);
        kvt_api_request_free(a);
        return KVT_EARG;
    }
    return 0;
}

int kvt_srv_parse(kvt_server *s, const conn_state *cs, kvt_api_request *a, kvt_api_error *err) {
    if (kvt_srv_parse_body(s, cs->r, cs->body ? cs->body : "", cs->len, a, err)) return KVT_EARG;
    if (cs->r != R_RAG && a->rag_json) {
        kvt_api_request_free(a);
        return kvt_api_errorf(err, 400, "invalid_request_error", "kvtier.rag", "unsupported_parameter",
                              "'kvtier.rag' is read only by /v1/rag/chat/completions");
    }
    kvt_srv_session_default(s, cs, &a->session);
    return 0;
}

/* Why this server cannot embed a RAG question (p.rag_dense is 0), for the 400. */
static const char *no_dense_reason(const kvt_server *s) {
    if (!kvt_rag_vectors(s->p.rag).dim) return "its index has no vectors (build it with `kvtier rag index --embed`)";
    if (kvt_rag_check_embedder(s->p.rag, s->model, kvt_rag_vectors(s->p.rag).pooling)) return kvt_errmsg();
    return "dense retrieval is off on this server";
}

/* RAG (docs/rag.md "The RAG route"): kvtier.rag is read only on its route (kvt_srv_parse);
 * there the question retrieves chunks that become the request's documents. Dense and hybrid
 * retrieval first embed the question as an engine request, pooled as the index's vectors are. */
static int rag_prepare(kvt_server *s, struct MHD_Connection *c, const conn_state *cs, kvt_api_request *a,
                       kvt_api_rag *rag, kvt_api_error *err) {
    if (cs->r != R_RAG) return 0;
    if (!s->p.rag)
        return kvt_api_errorf(err, 404, "invalid_request_error", NULL, "not_found",
                              "this server has no RAG index: start it with --rag-index INDEX");
    kvt_api_rag defaults = {.k = s->p.rag_k, .retrieve = (kvt_rag_retrieve)s->p.rag_retrieve, .rrf_k = s->p.rag_rrf_k};
    if (kvt_api_rag_options(a->rag_json, &defaults, rag, err)) return KVT_EARG;
    if (rag->retrieve == KVT_RAG_RETRIEVE_BM25 || !kvt_api_rag_question(a))
        return kvt_api_rag_retrieve(s->p.rag, a, rag, NULL, err);
    if (!s->p.rag_dense)
        return kvt_api_errorf(err, 400, "invalid_request_error", "kvtier.rag.retrieve", "unsupported_value",
                              "this server cannot retrieve \"%s\": %s", kvt_rag_retrieve_name(rag->retrieve),
                              no_dense_reason(s));
    float *q = kvt_xmalloc((size_t)s->model->hp.n_embd * sizeof *q);
    double t0 = kvt_now();
    int rc = kvt_srv_embed_question(s, c, cs, kvt_api_rag_question(a), a->cache_salt, kvt_rag_vectors(s->p.rag).pooling,
                                    q, err);
    rag->embed_ms = (kvt_now() - t0) * 1e3;
    if (!rc) rc = kvt_api_rag_retrieve(s->p.rag, a, rag, q, err);
    free(q);
    return rc;
}

enum MHD_Result kvt_srv_handle_generate(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    kvt_api_request a;
    kvt_api_error err;
    kvt_api_rag rag = {0};
    if (cs->r == R_COMPLETIONS && kvt_srv_completion_is_multi(cs)) return kvt_srv_handle_llama(s, c, cs);
    if (kvt_srv_parse(s, cs, &a, &err)) return kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
    if (rag_prepare(s, c, cs, &a, &rag, &err) ||
        (cs->r == R_PREFILL && a.stream &&
         kvt_api_errorf(&err, 400, "invalid_request_error", "stream", "unsupported_parameter",
                        "'stream' is not supported on /v1/cache/prefill")) ||
        (cs->r == R_PREFILL && a.approximate &&
         kvt_api_errorf(&err, 400, "invalid_request_error", "kvtier.reuse", "unsupported_parameter",
                        "/v1/cache/prefill stores exact KV; 'kvtier.reuse': \"approximate\" is for generation"))) {
        kvt_api_request_free(&a);
        return kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
    }
    srv_req *r = kvt_srv_make_request(s, &a, cs->key, &err);
    if (r && kvt_srv_add_choices(s, &a, cs->key, r, &err)) {
        kvt_srv_unref_engine_choices(s, r);
        kvt_srv_unref_choices(s, r);
        r = NULL;
    }
    kvt_api_request_free(&a);
    if (!r) return kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
    snprintf(r->request_id, sizeof r->request_id, "%s", cs->request_id);
    r->prefill_only = cs->r == R_PREFILL;
    r->want_block_tiers = cs->r == R_RAG;
    r->plan_cached = cs->r == R_RAG && rag.order == KVT_RAG_ORDER_CACHED;
    kvt_prompt_ring_put(s->recent, r->salt, r->salt_len, r->prompt, r->n_prompt);
    if (kvt_srv_enqueue(s, r)) {
        kvt_srv_unref_engine_choices(s, r);
        kvt_srv_unref_choices(s, r);
        kvt_api_errorf(&err, 503, "server_error", NULL, "overloaded",
                       "the server is busy (%d requests queued) or shutting down; retry later", s->p.queue);
        return kvt_srv_send_error(s, c, cs->label, &err, MHD_HTTP_HEADER_RETRY_AFTER, RETRY_AFTER_S);
    }
    if (r->stream) {
        struct MHD_Response *resp = kvt_srv_stream_response(s, r, c, &cs->usage, &cs->has_usage,
                                                            cs->r == R_RAG ? &rag : NULL);
        if (!resp) return MHD_NO;
        return kvt_srv_send_response(s, c, cs->label, MHD_HTTP_OK, resp);
    }
    if (kvt_srv_wait_done(s, c, &r, 1, &r, 1)) {
        kvt_srv_unref_choices(s, r);
        cs->status = STATUS_CLIENT_GONE;
        kvt_metrics_count_request(s->metrics, cs->label, STATUS_CLIENT_GONE);
        return MHD_NO;
    }
    cs->usage = kvt_srv_total_usage(r); /* done is final: the engine no longer writes r */
    cs->has_usage = 1;
    enum MHD_Result ret;
    srv_req *failed = NULL;
    for (int32_t i = 0; i <= r->n_sib && !failed; i++)
        if ((i ? r->sib[i - 1] : r)->err_status) failed = i ? r->sib[i - 1] : r;
    if (failed) {
        kvt_api_errorf(&err, failed->err_status, failed->err_status >= 500 ? "server_error" : "invalid_request_error",
                       NULL, NULL, "%s", failed->err_msg);
        ret = kvt_srv_send_error(s, c, cs->label, &err, failed->err_status == 503 ? MHD_HTTP_HEADER_RETRY_AFTER : NULL,
                                 RETRY_AFTER_S);
    } else {
        char *json = cs->r == R_PREFILL ? kvt_api_prefill_json(&r->usage, s->block)
                                        : kvt_srv_response_json(s, r, cs->r == R_RAG ? &rag : NULL);
        ret = kvt_srv_send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", json, NULL, NULL);
    }
    kvt_srv_unref_choices(s, r);
    return ret;
}

/* POST /tokenize and /detokenize: the tokenizer is immutable, so the handler thread answers. */
enum MHD_Result kvt_srv_handle_tokenize(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    kvt_api_error err;
    const char *body = cs->body ? cs->body : "";
    char *json = cs->r == R_TOKENIZE ? kvt_api_tokenize(s->tok, body, cs->len, &err)
                                     : kvt_api_detokenize(s->tok, body, cs->len, &err);
    if (!json) return kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
    return kvt_srv_send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", json, NULL, NULL);
}

/* GET /health: the slot counts, 200; once the engine's GPU was lost (every request fails until a restart),
 * a 503 whose status is "error", with the reason and the device, so that routers and load balancers stop
 * sending it requests. */
enum MHD_Result kvt_srv_handle_health(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    pthread_mutex_lock(&s->mu);
    int lost = s->device_lost, busy = s->n_active, queued = s->q_len;
    pthread_mutex_unlock(&s->mu);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", lost ? "error" : "ok");
    cJSON_AddNumberToObject(o, "slots_busy", busy);
    cJSON_AddNumberToObject(o, "slots_total", s->p.parallel);
    cJSON_AddNumberToObject(o, "queued", queued);
    if (lost) {
        char *dev = kvt_utf8_sanitize(kvt_engine_device_name(s->e), strlen(kvt_engine_device_name(s->e)), NULL);
        cJSON_AddStringToObject(o, "error", "the GPU was lost: every request fails until the server is restarted");
        cJSON_AddStringToObject(o, "device", dev);
        free(dev);
    }
    char *b = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return kvt_srv_send_text(s, c, cs->label, lost ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK, "application/json", b,
                             NULL, NULL);
}

/* GET /v1/models: the list of the one model; GET /v1/models/{id} (OpenAI's retrieve): that
 * model's object for any name it answers to, else a 404 model_not_found as a request naming it gets. */
enum MHD_Result kvt_srv_handle_models(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    const kvt_hparams *hp = &s->model->hp;
    const char *item = cs->r == R_MODEL_ITEM ? cs->path + strlen("/v1/models/") : NULL;
    if (item && !kvt_srv_model_known(s, item)) {
        kvt_api_error err;
        kvt_api_errorf(&err, 404, "invalid_request_error", "model", "model_not_found",
                       "The model '%.200s' does not exist: this server serves '%.200s' (GET /v1/models)", item,
                       s->p.model_id);
        return kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
    }
    kvt_api_model_info mi = {.id = s->p.model_id,
                             .created = s->started, /* the same on every call, as OpenAI's is */
                             .n_ctx = s->n_ctx,
                             .n_ctx_train = hp->n_ctx_train,
                             .n_vocab = s->n_vocab,
                             .n_embd = hp->n_embd,
                             .n_params = s->model->n_params};
    return kvt_srv_send_text(s, c, cs->label, MHD_HTTP_OK, "application/json",
                             item ? kvt_api_model_json(&mi) : kvt_api_models_json(&mi), NULL, NULL);
}

/* The vocabulary's text of token tok as valid UTF-8 (malloc'd), "" for tok < 0. */
static char *token_text_of(const kvt_server *s, int32_t tok) {
    size_t n = 0;
    const char *t = tok >= 0 ? kvt_tokenizer_token_text(s->tok, tok, &n) : NULL;
    return kvt_utf8_sanitize(t ? t : "", t ? n : 0, NULL);
}

/* Where the engine runs, as --device names it: "cpu" or "vulkan:N", into buf. */
static const char *device_of(const kvt_server *s, char *buf, size_t cap) {
    int32_t d = kvt_engine_params_of(s->e).device;
    if (d > 0) snprintf(buf, cap, "vulkan:%d", d - 1);
    else snprintf(buf, cap, "cpu");
    return buf;
}

enum MHD_Result kvt_srv_handle_props(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    const kvt_hparams *hp = &s->model->hp;
    kvt_engine_params ep = kvt_engine_params_of(s->e);
    char dev[32];
    kvt_api_props p = {.device = device_of(s, dev, sizeof dev),
                       .device_name = kvt_engine_device_name(s->e),
                       .model_id = s->p.model_id,
                       .model_path = s->model->path,
                       .arch = hp->arch_name,
                       .n_ctx = s->n_ctx,
                       .n_ctx_train = hp->n_ctx_train,
                       .n_vocab = s->n_vocab,
                       .n_embd = hp->n_embd,
                       .n_layer = hp->n_layer,
                       .n_params = s->model->n_params,
                       .block_size = s->block,
                       .parallel = s->p.parallel,
                       .chat_family = kvt_chat_family_name(s->p.chat),
                       .chat_template = s->p.jinja_text ? s->p.jinja_text : s->model->chat_template,
                       .jinja = s->p.jinja != NULL,
                       .kv_dtype = kvt_kv_dtype_name(ep.kv_dtype),
                       .max_tokens_default = s->p.max_tokens_limit,
                       .n_predict_default = s->p.default_max_tokens ? s->p.default_max_tokens : -1,
                       .temperature_default = s->p.default_temperature,
                       .top_p_default = s->p.default_top_p,
                       .top_k_default = s->p.default_top_k};
    char *bos = token_text_of(s, kvt_tokenizer_bos(s->tok)), *eos = token_text_of(s, kvt_tokenizer_eos(s->tok));
    p.bos_token = bos;
    p.eos_token = eos;
    pthread_mutex_lock(&s->mu);
    p.tier_budget_bytes[KVT_TIER_T0] = (uint64_t)s->snap.t0_pages_total * kvt_page_bytes(s->e);
    p.tier_budget_bytes[KVT_TIER_T1] = s->snap.t1_budget_bytes;
    p.tier_budget_bytes[KVT_TIER_T2] = s->snap.t2_budget_bytes;
    pthread_mutex_unlock(&s->mu);
    char *json = kvt_api_props_json(&p);
    free(bos);
    free(eos);
    return kvt_srv_send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", json, NULL, NULL);
}

_Static_assert(KVT_REQ_ID_MAX == REQUEST_ID_MAX && KVT_REQ_TENANT_MAX == TENANT_HEX_LEN + 1, "dashboard_ring sizes");

void kvt_srv_note_recent(kvt_server *s, const conn_state *cs, const char *tenant, double total_ms) {
    const kvt_api_usage *u = &cs->usage;
    kvt_req_entry e = {.t_end = (double)time(NULL),
                       .endpoint = cs->label,
                       .status = cs->status,
                       .prompt_tokens = u->prompt_tokens,
                       .computed_tokens = u->computed_tokens,
                       .generated_tokens = u->completion_tokens,
                       .ttft_ms = u->ttft_ms,
                       .total_ms = total_ms,
                       .has_stop = u->has_reuse_stop,
                       .stop_reason = u->reuse_stop.reason,
                       .stop_block = u->reuse_stop.block,
                       .stop_token = u->reuse_stop.token_offset};
    snprintf(e.request_id, sizeof e.request_id, "%s", cs->request_id);
    snprintf(e.tenant, sizeof e.tenant, "%s", tenant);
    memcpy(e.tier_tokens, u->tier_tokens, sizeof e.tier_tokens);
    kvt_req_ring_put(s->reqs, &e);
}

enum MHD_Result kvt_srv_handle_metrics(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    if (cs->r == R_DASHBOARD_REQUESTS) {
        kvt_req_entry e[KVT_REQ_RING_DEFAULT];
        int32_t n = kvt_req_ring_take(s->reqs, e, KVT_REQ_RING_DEFAULT);
        return kvt_srv_send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", kvt_req_ring_json(e, n), NULL, NULL);
    }
    char dev[32];
    kvt_metrics_gauges g = {.page_bytes = kvt_page_bytes(s->e),
                            .block_tokens = s->block,
                            .parallel = s->p.parallel,
                            .inflight_body_bytes = kvt_http_guard_held(s->guard),
                            .deadline_closed = kvt_http_guard_expired(s->guard),
                            .device = device_of(s, dev, sizeof dev),
                            .device_name = kvt_engine_device_name(s->e),
                            .numerics = kvt_engine_numerics_id(s->e)};
    pthread_mutex_lock(&s->mu);
    g.device_lost = s->device_lost;
    g.cache = s->snap;
    g.queue_depth = s->q_len;
    g.active = s->n_active;
    pthread_mutex_unlock(&s->mu);
    char *text = kvt_metrics_render(s->metrics, &g);
    if (cs->r == R_DASHBOARD) {
        kvt_req_entry e[KVT_REQ_RING_DEFAULT];
        int32_t n = kvt_req_ring_take(s->reqs, e, KVT_REQ_RING_DEFAULT);
        char *html = kvt_dashboard_html(text, e, n);
        free(text);
        return kvt_srv_send_text(s, c, cs->label, MHD_HTTP_OK, "text/html; charset=utf-8", html,
                                 "Content-Security-Policy", KVT_DASHBOARD_CSP);
    }
    if (s->p.metrics_names) { /* the same figures under llama-server's (and vLLM's) names */
        kvt_metrics_totals t;
        kvt_metrics_get_totals(s->metrics, &t);
        text = kvt_metrics_render_compat(text, s->p.metrics_names, &t, &g);
    }
    return kvt_srv_send_text(s, c, cs->label, MHD_HTTP_OK, "text/plain; version=0.0.4", text, NULL, NULL);
}
