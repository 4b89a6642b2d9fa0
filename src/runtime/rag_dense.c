// SPDX-License-Identifier: MIT
/* Dense vectors for the RAG index (rag.h "dense vectors and hybrid
 * retrieval"): the embedder that turns a chunk or a question into a pooled,
 * L2-normalised vector, the checks that a question is embedded as the index
 * was, and dense and hybrid (reciprocal rank fusion) retrieval. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "engine.h"
#include "model.h"
#include "rag_internal.h"
#include "tokenizer.h"

#define EMBED_CTX_MAX 4096 /* tokens of a text embedded at most (the rest is cut) */
#define EMBED_SLICE 256    /* tokens per engine call: bounds the hidden rows held at once */

/* llama.cpp's pooling_type numbers in GGUF metadata: 0 none, 1 mean, 2 cls, 3 last, 4 rank. */
#define GGUF_POOL_CLS 2
#define GGUF_POOL_LAST 3
#define GGUF_POOL_MAX 4

const char *kvt_rag_pooling_name(int p) {
    return p == KVT_RAG_POOL_MEAN ? "mean" : p == KVT_RAG_POOL_LAST ? "last" : p == KVT_RAG_POOL_CLS ? "cls" : "?";
}

int kvt_rag_pooling_parse(const char *s) {
    if (!strcmp(s, "mean")) return KVT_RAG_POOL_MEAN;
    if (!strcmp(s, "last")) return KVT_RAG_POOL_LAST;
    if (!strcmp(s, "cls")) return KVT_RAG_POOL_CLS;
    return -1;
}

int kvt_rag_pooling_default(const kvt_model *m, kvt_rag_pooling *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.pooling_type", m->hp.arch_name);
    int32_t t = 0;
    int rc = kvt_hp_int(m->gguf, key, 0, GGUF_POOL_MAX, &t);
    if (rc && rc != KVT_ENOTFOUND) return rc;
    *out = t == GGUF_POOL_LAST ? KVT_RAG_POOL_LAST : t == GGUF_POOL_CLS ? KVT_RAG_POOL_CLS : KVT_RAG_POOL_MEAN;
    return 0;
}

const char *kvt_rag_retrieve_name(kvt_rag_retrieve r) {
    return r == KVT_RAG_RETRIEVE_DENSE ? "dense" : r == KVT_RAG_RETRIEVE_HYBRID ? "hybrid" : "bm25";
}

int kvt_rag_retrieve_parse(const char *s) {
    if (!strcmp(s, "bm25")) return KVT_RAG_RETRIEVE_BM25;
    if (!strcmp(s, "dense")) return KVT_RAG_RETRIEVE_DENSE;
    if (!strcmp(s, "hybrid")) return KVT_RAG_RETRIEVE_HYBRID;
    return -1;
}

/* ---- the embedder ----------------------------------------------------------------------- */

struct kvt_rag_embedder {
    const kvt_model *m;
    kvt_engine *e;
    kvt_rag_pooling pool;
    int32_t dim, n_ctx;
    double *sum;
    float *hidden;
};

int kvt_rag_embedder_new(const kvt_model *m, kvt_rag_pooling pool, int32_t n_threads, kvt_rag_embedder **out) {
    return kvt_rag_embedder_new_on(m, pool, n_threads, 0, out);
}

int kvt_rag_embedder_new_on(const kvt_model *m, kvt_rag_pooling pool, int32_t n_threads, int32_t device,
                            kvt_rag_embedder **out) {
    *out = NULL;
    if (m->vocab_only || pool < KVT_RAG_POOL_MEAN || pool > KVT_RAG_POOL_CLS)
        return kvt_fail(KVT_EARG, "an embedder needs a fully loaded model and a pooling of mean, last or cls");
    kvt_engine_params p = kvt_engine_default_params();
    p.n_threads = n_threads;
    p.device = device;
    p.n_ctx = KVT_MIN(m->hp.n_ctx_train > 0 ? m->hp.n_ctx_train : EMBED_CTX_MAX, EMBED_CTX_MAX);
    p.n_pages = (p.n_ctx + p.block_size - 1) / p.block_size + 1;
    p.max_seqs = 1;
    kvt_rag_embedder *x = kvt_xcalloc(1, sizeof *x);
    int rc = kvt_engine_new(m, p, &x->e);
    if (rc) {
        free(x);
        return rc;
    }
    x->m = m;
    x->pool = pool;
    x->dim = m->hp.n_embd;
    x->n_ctx = p.n_ctx;
    x->sum = kvt_xmalloc((size_t)x->dim * sizeof *x->sum);
    x->hidden = kvt_xmalloc((size_t)EMBED_SLICE * (size_t)x->dim * sizeof *x->hidden);
    *out = x;
    return 0;
}

int32_t kvt_rag_embedder_dim(const kvt_rag_embedder *x) { return x->dim; }

void kvt_rag_embedder_free(kvt_rag_embedder *x) {
    if (!x) return;
    kvt_engine_free(x->e);
    free(x->sum);
    free(x->hidden);
    free(x);
}

/* Feeds ids[0..n) to seq slice by slice, adding the hidden rows the pooling
 * takes to x->sum in token order (as serve's engine step does). */
static int embed_feed(kvt_rag_embedder *x, int32_t seq, const int32_t *ids, int32_t n) {
    int32_t seqs[EMBED_SLICE];
    int8_t want[EMBED_SLICE];
    for (int32_t i = 0; i < EMBED_SLICE; i++) seqs[i] = seq;
    for (int32_t at = 0; at < n; at += EMBED_SLICE) {
        int32_t c = KVT_MIN(EMBED_SLICE, n - at), rows = 0;
        for (int32_t i = 0; i < c; i++) {
            int32_t pos = at + i;
            want[i] = x->pool == KVT_RAG_POOL_MEAN || (x->pool == KVT_RAG_POOL_LAST && pos == n - 1) ||
                (x->pool == KVT_RAG_POOL_CLS && pos == 0);
            rows += want[i];
        }
        int8_t no_logits[EMBED_SLICE] = {0};
        kvt_batch b = {.n = c,
                       .token = ids + at,
                       .seq = seqs,
                       .want_logits = no_logits,
                       .want_hidden = want,
                       .hidden = rows ? x->hidden : NULL};
        int rc = kvt_engine_decode(x->e, &b, NULL);
        if (rc) return rc;
        for (int32_t r = 0; r < rows; r++)
            for (int32_t d = 0; d < x->dim; d++) x->sum[d] += x->hidden[(size_t)r * (size_t)x->dim + (size_t)d];
    }
    return 0;
}

int kvt_rag_embed(kvt_rag_embedder *x, const char *text, size_t len, float *out) {
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = kvt_tokenize(x->m->tok, text, len, kvt_tokenizer_add_special(x->m->tok), 0, &ids, &n);
    if (rc) return rc;
    if (!n) {
        free(ids);
        return kvt_fail(KVT_EARG, "an empty text has no tokens to embed");
    }
    n = KVT_MIN(n, (size_t)x->n_ctx);
    int32_t seq;
    rc = kvt_seq_new(x->e, NULL, 0, 0, &seq);
    if (!rc) {
        memset(x->sum, 0, (size_t)x->dim * sizeof *x->sum);
        rc = embed_feed(x, seq, ids, (int32_t)n);
        kvt_seq_free(x->e, seq);
    }
    free(ids);
    if (rc) return rc;
    double count = x->pool == KVT_RAG_POOL_MEAN ? (double)n : 1, norm = 0;
    for (int32_t d = 0; d < x->dim; d++) {
        out[d] = (float)(x->sum[d] / count);
        norm += (double)out[d] * out[d];
    }
    norm = sqrt(norm);
    for (int32_t d = 0; d < x->dim && norm > 0; d++) out[d] = (float)(out[d] / norm);
    return 0;
}

/* ---- vectors in the index -------------------------------------------------------------- */

kvt_rag_vec_info kvt_rag_vectors(const kvt_rag_index *x) {
    return (kvt_rag_vec_info){x->dim, x->pooling, x->fingerprint, x->model_name ? x->model_name : ""};
}

const float *kvt_rag_vector_at(const kvt_rag_index *x, int32_t i) {
    return x->dim && i >= 0 && i < x->n_chunks ? x->vecs + (size_t)i * (size_t)x->dim : NULL;
}

static const char *base_name(const char *path) {
    const char *s = path ? strrchr(path, '/') : NULL;
    return s ? s + 1 : path ? path : "";
}

void kvt_rag_set_vectors(kvt_rag_index *x, const float *vecs, int32_t dim, const kvt_model *m, kvt_rag_pooling pool) {
    free(x->vecs);
    free(x->model_name);
    size_t n = (size_t)x->n_chunks * (size_t)dim;
    x->vecs = kvt_xmalloc(n * sizeof *x->vecs);
    memcpy(x->vecs, vecs, n * sizeof *x->vecs);
    x->dim = dim;
    x->pooling = pool;
    x->fingerprint = m->fingerprint;
    x->model_name = kvt_rag_strndup(base_name(m->path), KVT_MIN(strlen(base_name(m->path)), KVT_RAG_MODEL_NAME_MAX));
}

int kvt_rag_check_embedder(const kvt_rag_index *x, const kvt_model *m, kvt_rag_pooling pool) {
    if (!x->dim)
        return kvt_fail(KVT_EARG,
                        "the index has no dense vectors (it was built without --embed): use --retrieve bm25, or "
                        "rebuild it with `kvtier rag index --embed`");
    char a[33], b[33];
    kvt_fingerprint_hex(x->fingerprint, a);
    kvt_fingerprint_hex(m->fingerprint, b);
    if (memcmp(&x->fingerprint, &m->fingerprint, sizeof x->fingerprint) || x->dim != m->hp.n_embd)
        return kvt_fail(KVT_EARG,
                        "the index's vectors come from model %s (fingerprint %s, %d floats) but the question would "
                        "be embedded with %s (fingerprint %s, %d floats): give the index's model, or rebuild the "
                        "index with this one",
                        x->model_name, a, x->dim, base_name(m->path), b, m->hp.n_embd);
    if (x->pooling != pool)
        return kvt_fail(KVT_EARG,
                        "the index's vectors are pooled by %s but the question would be pooled by %s: give "
                        "--pooling %s, or rebuild the index",
                        kvt_rag_pooling_name(x->pooling), kvt_rag_pooling_name(pool), kvt_rag_pooling_name(x->pooling));
    return 0;
}

/* ---- retrieval --------------------------------------------------------------------------- */

/* Every chunk by cosine to q, best first (ties by id), into a malloc'd array. */
static kvt_rag_hit *rank_dense(const kvt_rag_index *x, const float *q) {
    double qn = 0;
    for (int32_t d = 0; d < x->dim; d++) qn += (double)q[d] * q[d];
    kvt_rag_hit *all = kvt_xmalloc((size_t)x->n_chunks * sizeof *all);
    for (int32_t c = 0; c < x->n_chunks; c++) {
        const float *v = x->vecs + (size_t)c * (size_t)x->dim;
        double dot = 0, vn = 0;
        for (int32_t d = 0; d < x->dim; d++) dot += (double)q[d] * v[d], vn += (double)v[d] * v[d];
        all[c] = (kvt_rag_hit){c, qn > 0 && vn > 0 ? dot / sqrt(qn * vn) : 0, 0};
    }
    kvt_rag_sort_by_score(x, all, x->n_chunks);
    return all;
}

static int32_t take(kvt_rag_hit *all, int32_t m, int32_t k, kvt_rag_hit *out) {
    int32_t got = KVT_MIN(m, k);
    for (int32_t i = 0; i < got; i++) {
        out[i] = all[i];
        out[i].rank = i;
    }
    free(all);
    return got;
}

int32_t kvt_rag_query_dense(const kvt_rag_index *x, const float *q, int32_t k, kvt_rag_hit *out) {
    if (k <= 0 || !x->dim || !q) return 0;
    return take(rank_dense(x, q), x->n_chunks, k, out);
}

int32_t kvt_rag_query_hybrid(const kvt_rag_index *x, const char *question, const float *q, int32_t k, int32_t rrf_k,
                             kvt_rag_hit *out) {
    if (k <= 0 || !x->dim || !q || rrf_k < 1) return 0;
    double *fused = kvt_xcalloc((size_t)x->n_chunks, sizeof *fused);
    kvt_rag_hit *lex = NULL, *dense = rank_dense(x, q);
    int32_t n_lex = kvt_rag_rank_bm25(x, question, &lex);
    for (int32_t i = 0; i < n_lex; i++) fused[lex[i].chunk] += 1.0 / (rrf_k + i + 1);
    for (int32_t i = 0; i < x->n_chunks; i++) fused[dense[i].chunk] += 1.0 / (rrf_k + i + 1);
    for (int32_t c = 0; c < x->n_chunks; c++) dense[c] = (kvt_rag_hit){c, fused[c], 0};
    free(lex);
    free(fused);
    kvt_rag_sort_by_score(x, dense, x->n_chunks);
    return take(dense, x->n_chunks, k, out);
}

int32_t kvt_rag_retrieve_k(const kvt_rag_index *x, kvt_rag_retrieve mode, const char *question, const float *q,
                           int32_t k, int32_t rrf_k, kvt_rag_hit *out) {
    if (mode == KVT_RAG_RETRIEVE_DENSE) return kvt_rag_query_dense(x, q, k, out);
    if (mode == KVT_RAG_RETRIEVE_HYBRID) return kvt_rag_query_hybrid(x, question, q, k, rrf_k, out);
    return kvt_rag_query(x, question, k, out);
}
