// SPDX-License-Identifier: MIT
/* serve's embedding flags (cli_serve_embed.h). */
#include "cli_serve_embed.h"

#include <stdio.h>
#include <string.h>

#include "common.h"

enum { E_EMBEDDINGS = KVT_CLI_EMBED_ID_BASE, E_POOLING };

/* llama.cpp's pooling_type numbers in GGUF metadata: 0 none, 1 mean, 2 cls, 3 last, 4 rank. */
#define GGUF_POOL_MEAN 1
#define GGUF_POOL_CLS 2
#define GGUF_POOL_LAST 3
#define GGUF_POOL_MAX 4

static const kvt_cli_opt embed_opts[] = {
    {E_EMBEDDINGS, 0, "embeddings", NULL, NULL,
     "serve POST /v1/embeddings (OpenAI's) and /embedding (llama-server's):\none L2-normalised vector per input, pooled "
     "from the final hidden\nstate (after the output norm). Off by default: the routes are a 404.\nCPU engine only",
     0, KVT_CLI_PLAIN},
    {E_POOLING, 0, "pooling", NULL, "mean|last|cls",
     "with --embeddings: how a prompt's hidden rows become one vector:\nmean of every token, the last token, or the "
     "first (cls). Default:\nthe model's <arch>.pooling_type, else mean. Last-token pooling\nreuses a cached prefix; "
     "mean and cls compute every token (the\ncache keeps KV, not hidden rows) and still store the prompt's KV",
     0, KVT_CLI_PLAIN},
};

const kvt_cli_section kvt_cli_serve_embed_section = {"embeddings", embed_opts, KVT_ARRAY_LEN(embed_opts)};

int kvt_cli_serve_embed_opt(int id, const kvt_cli_arg *a, kvt_server_params *sp) {
    if (id == E_EMBEDDINGS) {
        sp->embeddings = 1;
        return 0;
    }
    const char *v = a->str;
    if (!strcmp(v, "mean")) sp->pooling = KVT_POOL_MEAN;
    else if (!strcmp(v, "last")) sp->pooling = KVT_POOL_LAST;
    else if (!strcmp(v, "cls")) sp->pooling = KVT_POOL_CLS;
    else {
        fprintf(stderr, "kvtier serve: --pooling must be mean, last or cls, not '%s'\n", v);
        return -1;
    }
    return 0;
}

int kvt_cli_serve_embed_finish(kvt_server_params *sp, const kvt_model *m, int vulkan) {
    if (!sp->embeddings) return 0;
    if (vulkan) {
        fprintf(stderr,
                "kvtier serve: --embeddings runs on the CPU engine only (it reads the final hidden rows); "
                "leave it out with --device vulkan, or use --device cpu\n");
        return -1;
    }
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
