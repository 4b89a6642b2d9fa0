// SPDX-License-Identifier: MIT
/* serve's embedding flags (cli_serve_embed.h). */
#include "cli_serve_embed.h"

#include <stdio.h>
#include <string.h>

#include "common.h"
#include "rag.h"

enum { E_EMBEDDINGS = KVT_CLI_EMBED_ID_BASE, E_EMBEDDING, E_POOLING, E_RAG_RETRIEVE, E_RAG_RRF_K };

/* llama.cpp's pooling_type numbers in GGUF metadata: 0 none, 1 mean, 2 cls, 3 last, 4 rank. */
#define GGUF_POOL_MEAN 1
#define GGUF_POOL_CLS 2
#define GGUF_POOL_LAST 3
#define GGUF_POOL_MAX 4

static const kvt_cli_opt embed_opts[] = {
    {E_EMBEDDINGS, 0, "embeddings", NULL, NULL,
     "serve POST /v1/embeddings (OpenAI's) and /embedding (llama-server's):\none L2-normalised vector per input, pooled "
     "from the final hidden\nstate (after the output norm). Off by default: the routes are a 404.\n"
     "On --device vulkan the rows are the GPU's (agreeing with the CPU's\nto rounding)",
     0, KVT_CLI_PLAIN},
    {E_EMBEDDING, 0, "embedding", NULL, NULL, "llama-server's name: the same as --embeddings", 0, KVT_CLI_PLAIN},
    {E_POOLING, 0, "pooling", NULL, "mean|last|cls",
     "with --embeddings: how a prompt's hidden rows become one vector:\nmean of every token, the last token, or the "
     "first (cls). Default:\nthe model's <arch>.pooling_type, else mean. Last-token pooling\nreuses a cached prefix; "
     "mean and cls compute every token (the\ncache keeps KV, not hidden rows) and still store the prompt's KV",
     0, KVT_CLI_PLAIN},
    {E_RAG_RETRIEVE, 0, "rag-retrieve", NULL, "bm25|dense|hybrid",
     "with --rag-index: how a RAG request retrieves when it gives no\nkvtier.rag.retrieve: bm25 (terms; the default), "
     "dense (cosine\nbetween the question's embedding and the chunks') or hybrid (both\nrankings fused by reciprocal "
     "rank). Dense and hybrid need an index\nbuilt with `kvtier rag index --embed` by this model: the\n"
     "question is embedded as an engine request (CPU or GPU), pooled as\nthe index says. A request may ask for "
     "dense or hybrid whenever\nthe index and model allow it",
     0, KVT_CLI_PLAIN},
    {E_RAG_RRF_K, 0, "rag-rrf-k", NULL, "N",
     "hybrid retrieval's constant: a chunk scores the sum of\n1 / (N + rank) over the two rankings; larger N weighs the "
     "top ranks\nless (default " STR(KVT_RAG_RRF_K) "; a request's kvtier.rag.rrf_k overrides)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 1, 1000000)},
};

const kvt_cli_section kvt_cli_serve_embed_section = {"embeddings", embed_opts, KVT_ARRAY_LEN(embed_opts)};

int kvt_cli_serve_embed_opt(int id, const kvt_cli_arg *a, kvt_server_params *sp) {
    if (id == E_EMBEDDINGS || id == E_EMBEDDING) {
        sp->embeddings = 1;
        return 0;
    }
    if (id == E_RAG_RRF_K) {
        sp->rag_rrf_k = (int32_t)a->i;
        return 0;
    }
    const char *v = a->str;
    if (id == E_RAG_RETRIEVE) {
        sp->rag_retrieve = kvt_rag_retrieve_parse(v);
        if (sp->rag_retrieve >= 0) return 0;
        fprintf(stderr, "kvtier serve: --rag-retrieve must be bm25, dense or hybrid, not '%s'\n", v);
        return -1;
    }
    if (!strcmp(v, "mean")) sp->pooling = KVT_POOL_MEAN;
    else if (!strcmp(v, "last")) sp->pooling = KVT_POOL_LAST;
    else if (!strcmp(v, "cls")) sp->pooling = KVT_POOL_CLS;
    else {
        fprintf(stderr, "kvtier serve: --pooling must be mean, last or cls, not '%s'\n", v);
        return -1;
    }
    return 0;
}

/* Whether RAG questions can be embedded (sp->rag_dense): an index with
 * vectors of this model (either engine computes the question's). A default
 * --rag-retrieve of dense or hybrid that cannot run is refused here, naming
 * why. 0, or -1. */
static int rag_dense_finish(kvt_server_params *sp, const kvt_model *m) {
    const kvt_rag_index *x = sp->rag;
    kvt_rag_vec_info vi = x ? kvt_rag_vectors(x) : (kvt_rag_vec_info){0};
    int ok = vi.dim && !kvt_rag_check_embedder(x, m, vi.pooling);
    sp->rag_dense = ok;
    if (sp->rag_retrieve == KVT_RAG_RETRIEVE_BM25 || sp->rag_dense) return 0;
    if (!x) fprintf(stderr, "kvtier serve: --rag-retrieve needs --rag-index\n");
    else if (!vi.dim)
        fprintf(stderr, "kvtier serve: --rag-retrieve %s needs an index built with --embed\n",
                kvt_rag_retrieve_name((kvt_rag_retrieve)sp->rag_retrieve));
    else fprintf(stderr, "kvtier serve: --rag-retrieve: %s\n", kvt_errmsg());
    return -1;
}

int kvt_cli_serve_embed_finish(kvt_server_params *sp, const kvt_model *m) {
    if (rag_dense_finish(sp, m)) return -1;
    if (!sp->embeddings) return 0;
    if (sp->pooling) return 0;
    char key[128];
    snprintf(key, sizeof key, "%s.pooling_type", m->hp.arch_name);
    int32_t t = 0;
    int rc = kvt_hp_int(m->gguf, key, 0, GGUF_POOL_MAX, &t);
    if (rc && rc != KVT_ENOTFOUND) {
        fprintf(stderr, "kvtier serve: %s; give --pooling mean|last|cls\n", kvt_errmsg());
        return -1;
    }
    sp->pooling = t == GGUF_POOL_LAST ? KVT_POOL_LAST : t == GGUF_POOL_CLS ? KVT_POOL_CLS : KVT_POOL_MEAN;
    return 0;
}
