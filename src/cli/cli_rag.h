// SPDX-License-Identifier: MIT
/* What `kvtier rag`'s two files share (cli_rag.c: index, query; cli_rag_prewarm.c:
 * prewarm). Private to src/cli/cli_rag*.c. */
#ifndef KVT_CLI_RAG_H
#define KVT_CLI_RAG_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"
#include "rag.h"

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

/* Embeds questions for dense or hybrid retrieval over one index, with the
 * index's embedding model (loaded whole) pooled as its vectors are. */
typedef struct {
    kvt_model *m;
    kvt_rag_embedder *e;
    int32_t dim;
    double ms; /* time spent embedding so far (not loading) */
} kvt_cli_rag_qembed;

/* Opens q for idx (read from path) with model, pooled as pool (0: the
 * index's); refuses an index without vectors, another model or another
 * pooling. what names the command in messages. 0, or -1 after printing why. */
int kvt_cli_rag_qembed_open(kvt_cli_rag_qembed *q, const char *what, const char *path, const kvt_rag_index *idx,
                            const char *model, int pool, long threads);
/* text's vector into out (q->dim floats); adds the time to q->ms. 0, or -1 after printing why. */
int kvt_cli_rag_qembed_run(kvt_cli_rag_qembed *q, const char *what, const char *text, float *out);
void kvt_cli_rag_qembed_close(kvt_cli_rag_qembed *q);

/* `kvtier rag prewarm` (cli_rag_prewarm.c). */
int kvt_cmd_rag_prewarm(int argc, char **argv);

#endif
