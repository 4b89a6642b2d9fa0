// SPDX-License-Identifier: MIT
/* The RAG surface as data (api_rag.h): kvtier.rag options, retrieval and
 * planning into fixed context blocks, the kvtier.rag report, the prefill answer. */
#include "api_rag.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "api_utf8.h"
#include "common.h"

#define INVALID "invalid_request_error"

static const char *const TIER_NAMES[KVT_TIER_COUNT] = {"T0", "T1", "T2", "T3"};

#define RRF_K_MAX 1000000

/* kvtier.rag.retrieve and .rrf_k into out. 0, or KVT_EARG with *err. */
static int retrieve_options(const cJSON *o, kvt_api_rag *out, kvt_api_error *err) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "retrieve"), *k = cJSON_GetObjectItemCaseSensitive(o, "rrf_k");
    if (r && !cJSON_IsNull(r)) {
        int m = cJSON_IsString(r) ? kvt_rag_retrieve_parse(r->valuestring) : -1;
        if (m < 0)
            return kvt_api_errorf(err, 400, INVALID, "kvtier.rag.retrieve", "invalid_value",
                                  "'kvtier.rag.retrieve' must be \"bm25\" (terms), \"dense\" (cosine between "
                                  "embeddings) or \"hybrid\" (both, fused by reciprocal rank)");
        out->retrieve = (kvt_rag_retrieve)m;
    }
    if (k && !cJSON_IsNull(k)) {
        if (!cJSON_IsNumber(k) || !(k->valuedouble >= 1 && k->valuedouble <= RRF_K_MAX) ||
            k->valuedouble != (double)(int)k->valuedouble)
            return kvt_api_errorf(err, 400, INVALID, "kvtier.rag.rrf_k",
                                  cJSON_IsNumber(k) ? "invalid_value" : "invalid_type",
                                  "'kvtier.rag.rrf_k' must be an integer from 1 to %d", RRF_K_MAX);
        out->rrf_k = (int32_t)k->valuedouble;
    }
    return 0;
}

int kvt_api_rag_options(const char *rag_json, const kvt_api_rag *defaults, kvt_api_rag *out, kvt_api_error *err) {
    memset(out, 0, sizeof *out);
    out->k = defaults->k;
    out->retrieve = defaults->retrieve;
    out->rrf_k = defaults->rrf_k;
    out->order = KVT_RAG_ORDER_CACHED;
    if (!rag_json) return 0;
    cJSON *o = cJSON_Parse(rag_json);
    int rc = 0;
    if (!cJSON_IsObject(o)) {
        rc = kvt_api_errorf(err, 400, INVALID, "kvtier.rag", "invalid_type",
                            "'kvtier.rag' must be an object {\"k\", \"order\", \"retrieve\", \"rrf_k\"}");
        goto done;
    }
    for (const cJSON *f = o->child; f; f = f->next)
        if (strcmp(f->string, "k") && strcmp(f->string, "order") && strcmp(f->string, "retrieve") &&
            strcmp(f->string, "rrf_k")) {
            rc = kvt_api_errorf(err, 400, INVALID, "kvtier.rag", "unknown_field",
                                "'kvtier.rag.%.64s' is not a field kvtier knows (k, order, retrieve, rrf_k)", f->string);
            goto done;
        }
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "k"), *ord = cJSON_GetObjectItemCaseSensitive(o, "order");
    if (k && !cJSON_IsNull(k)) {
        /* the range first: converting a value out of int's range (1e309 is inf) is undefined */
        if (!cJSON_IsNumber(k) || !(k->valuedouble >= 1 && k->valuedouble <= KVT_RAG_MAX_K) ||
            k->valuedouble != (double)(int)k->valuedouble) {
            rc = kvt_api_errorf(err, 400, INVALID, "kvtier.rag.k", cJSON_IsNumber(k) ? "invalid_value" : "invalid_type",
                                "'kvtier.rag.k' must be an integer from 1 to %d", KVT_RAG_MAX_K);
            goto done;
        }
        out->k = (int32_t)k->valuedouble;
    }
    if (ord && !cJSON_IsNull(ord)) {
        int m = cJSON_IsString(ord) ? kvt_rag_order_parse(ord->valuestring) : -1;
        if (m < 0) {
            rc = kvt_api_errorf(err, 400, INVALID, "kvtier.rag.order", "invalid_value",
                                "'kvtier.rag.order' must be \"cached\" (follow what the cache holds, then by chunk "
                                "number; the default), \"canonical\" (by chunk number) or \"score\" (best first)");
            goto done;
        }
        out->order = (kvt_rag_order)m;
    }
    rc = retrieve_options(o, out, err);
done:
    cJSON_Delete(o);
    return rc;
}

const char *kvt_api_rag_question(const kvt_api_request *a) {
    if (!a->n_msgs || strcmp(a->msgs[a->n_msgs - 1].role, "user") || !*a->msgs[a->n_msgs - 1].content) return NULL;
    return a->msgs[a->n_msgs - 1].content;
}

int kvt_api_rag_retrieve(const kvt_rag_index *idx, kvt_api_request *a, kvt_api_rag *rag, const float *qvec,
                         kvt_api_error *err) {
    if (a->n_docs)
        return kvt_api_errorf(err, 400, INVALID, "kvtier.documents", "unsupported_parameter",
                              "'kvtier.documents' cannot be given here: /v1/rag/chat/completions retrieves the "
                              "documents itself (use /v1/chat/completions to send your own)");
    if (!kvt_api_rag_question(a))
        return kvt_api_errorf(err, 400, INVALID, "messages", "invalid_value",
                              "the last message must be the user's question (role \"user\", non-empty content)");
    double t0 = kvt_now();
    rag->n_hits = kvt_rag_retrieve_k(idx, rag->retrieve, kvt_api_rag_question(a), qvec, rag->k, rag->rrf_k, rag->hits);
    double t1 = kvt_now();
    kvt_document docs[KVT_RAG_MAX_K];
    kvt_rag_plan(idx, rag->order, rag->hits, rag->n_hits, docs);
    rag->retrieve_ms = (t1 - t0) * 1e3;
    rag->plan_ms = (kvt_now() - t1) * 1e3;
    if (!rag->n_hits) return 0;
    a->docs = kvt_xcalloc((size_t)rag->n_hits, sizeof *a->docs);
    for (int32_t i = 0; i < rag->n_hits; i++) {
        a->docs[i].id = kvt_xstrdup(docs[i].id);
        a->docs[i].text = kvt_xstrdup(docs[i].text);
    }
    a->n_docs = (size_t)rag->n_hits;
    return 0;
}

/* A string as valid UTF-8 for JSON (names come from file names). */
static void add_clean_string(cJSON *o, const char *name, const char *s) {
    char *c = kvt_utf8_sanitize(s, strlen(s), NULL);
    cJSON_AddStringToObject(o, name, c);
    free(c);
}

char *kvt_api_rag_response(char *response, const kvt_rag_index *idx, const kvt_api_rag *rag,
                           const kvt_api_rag_layout *lay, const kvt_api_usage *u) {
    const size_t *doc_starts = lay->doc_starts;
    const uint8_t *block_tiers = lay->block_tiers;
    int32_t n_block_tiers = lay->n_block_tiers, block = lay->block;
    cJSON *root = cJSON_Parse(response);
    cJSON *kv = cJSON_GetObjectItemCaseSensitive(root, "kvtier");
    if (!cJSON_IsObject(kv)) {
        cJSON_Delete(root);
        return response; /* an error body: nothing to add to */
    }
    free(response);
    cJSON *o = cJSON_AddObjectToObject(kv, "rag");
    cJSON_AddStringToObject(o, "order", kvt_rag_order_name(rag->order));
    cJSON_AddNumberToObject(o, "k", rag->k);
    cJSON_AddStringToObject(o, "retrieve", kvt_rag_retrieve_name(rag->retrieve));
    if (rag->retrieve == KVT_RAG_RETRIEVE_HYBRID) cJSON_AddNumberToObject(o, "rrf_k", rag->rrf_k);
    cJSON_AddNumberToObject(o, "retrieve_ms", rag->retrieve_ms);
    if (rag->retrieve != KVT_RAG_RETRIEVE_BM25) cJSON_AddNumberToObject(o, "embed_ms", rag->embed_ms);
    cJSON_AddNumberToObject(o, "plan_ms", rag->plan_ms + lay->cache_plan_ms);
    cJSON *arr = cJSON_AddArrayToObject(o, "chunks");
    int32_t cached_chunks = 0;
    for (int32_t i = 0; i < rag->n_hits; i++) {
        const kvt_rag_hit *h = &rag->hits[lay->doc_order ? lay->doc_order[i] : i];
        const kvt_rag_chunk *c = kvt_rag_chunk_at(idx, h->chunk);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "position", i);
        cJSON_AddNumberToObject(e, "chunk", h->chunk);
        add_clean_string(e, "id", c->id);
        add_clean_string(e, "doc", c->doc);
        cJSON_AddNumberToObject(e, "seq", c->seq);
        cJSON_AddNumberToObject(e, "score", h->score);
        cJSON_AddNumberToObject(e, "rank", h->rank);
        int32_t start = doc_starts ? (int32_t)doc_starts[i] : 0, end = doc_starts ? (int32_t)doc_starts[i + 1] : 0;
        cJSON_AddNumberToObject(e, "tokens", end - start);
        cJSON_AddItemToArray(arr, e);
        if (u->hide_report) continue; /* no cached counts (--hide-cached-tokens) */
        int32_t cached = KVT_MAX(0, KVT_MIN(end, u->cached_tokens) - start);
        cJSON_AddNumberToObject(e, "cached_tokens", cached);
        if (cached == end - start && end > start) cached_chunks++;
        /* the reused blocks of this chunk, by the tier each came from */
        int32_t by_tier[KVT_TIER_COUNT] = {0};
        for (int32_t t = start; t < start + cached; t += block) {
            int32_t b = t / block;
            if (b < n_block_tiers && block_tiers[b] < KVT_TIER_COUNT) by_tier[block_tiers[b]] += block;
        }
        cJSON *tiers = cJSON_AddObjectToObject(e, "tiers");
        for (int t = 0; t < KVT_TIER_COUNT; t++)
            if (by_tier[t]) cJSON_AddNumberToObject(tiers, TIER_NAMES[t], by_tier[t]);
    }
    if (!u->hide_report) cJSON_AddNumberToObject(o, "cached_chunks", cached_chunks);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

char *kvt_api_prefill_json(const kvt_api_usage *u, int32_t block) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "cache.prefill");
    cJSON_AddNumberToObject(o, "prompt_tokens", u->prompt_tokens);
    if (!u->hide_report) {
        cJSON_AddNumberToObject(o, "cached_tokens", u->cached_tokens);
        cJSON *t = cJSON_AddObjectToObject(o, "tiers");
        for (int i = 0; i < KVT_TIER_COUNT; i++) cJSON_AddNumberToObject(t, TIER_NAMES[i], u->tier_tokens[i]);
        cJSON_AddNumberToObject(o, "computed_tokens", u->computed_tokens);
        cJSON_AddNumberToObject(o, "prefill_ms", u->prefill_ms);
    }
    cJSON_AddNumberToObject(o, "stored_tokens", block > 0 ? u->prompt_tokens / block * block : 0);
    cJSON_AddItemToObject(o, "kvtier", kvt_api_kvtier_obj(u));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
