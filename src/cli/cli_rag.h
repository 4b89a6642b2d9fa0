// SPDX-License-Identifier: MIT
/* What `kvtier rag`'s two files share (cli_rag.c: index, query; cli_rag_prewarm.c:
 * prewarm). Private to src/cli/cli_rag*.c. */
#ifndef KVT_CLI_RAG_H
#define KVT_CLI_RAG_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

/* The prompt /v1/rag/chat/completions builds: the model's chat template
 * (detected, ChatML when unknown, as `kvtier serve` does) over
 * [system (if not NULL)][user: user], with docs[0..n_docs) rendered as fixed
 * context blocks of block tokens before the user content. *out is malloc'd.
 * 0 or a negative code (kvt_errmsg() says why). */
int kvt_cli_rag_prompt(const kvt_model *m, int32_t block, const char *system, const char *user,
                       const kvt_document *docs, size_t n_docs, int32_t **out, size_t *n_out);

/* Reads a whole regular file (at most 256 MB, NUL-terminated) opened relative
 * to dfd (AT_FDCWD: the working directory) without following links. Returns
 * the malloc'd bytes or NULL (errno set; EINVAL: not a regular file or too big). */
char *kvt_cli_rag_slurp(int dfd, const char *name, size_t *len);

/* `kvtier rag prewarm` (cli_rag_prewarm.c). */
int kvt_cmd_rag_prewarm(int argc, char **argv);

#endif
