// SPDX-License-Identifier: MIT
/* serve's embedding flags (cli_serve_embed.c): --embeddings turns on
 * POST /v1/embeddings and /embedding, --pooling chooses how a prompt's final
 * hidden rows become one vector (default: the model's own pooling_type). */
#ifndef KVT_CLI_SERVE_EMBED_H
#define KVT_CLI_SERVE_EMBED_H

#include "cli.h"
#include "model.h"
#include "server.h"

#define KVT_CLI_EMBED_ID_BASE 1400
#define KVT_CLI_IS_EMBED_ID(id) ((id) >= KVT_CLI_EMBED_ID_BASE && (id) < KVT_CLI_EMBED_ID_BASE + 100)
extern const kvt_cli_section kvt_cli_serve_embed_section;
/* The section's handler: stores the flag in sp. 0, or -1 after printing why. */
int kvt_cli_serve_embed_opt(int id, const kvt_cli_arg *a, kvt_server_params *sp);
/* After the model (and the RAG index) are loaded: with --embeddings, the
 * pooling --pooling left open comes from the GGUF's <arch>.pooling_type
 * (mean when absent); p.rag_dense is set when the index has vectors of
 * this model, and a --rag-retrieve of dense or hybrid without them is
 * refused. Either engine embeds. 0, or -1 after printing why. */
int kvt_cli_serve_embed_finish(kvt_server_params *sp, const kvt_model *m);

#endif
