// SPDX-License-Identifier: MIT
/* What the RAG index's two files share (rag_build.c builds, rag_index.c
 * saves, loads and queries): the index's layout and the term splitter.
 * Private to src/runtime/rag_*.c. */
#ifndef KVT_RAG_INTERNAL_H
#define KVT_RAG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "rag.h"

#define KVT_RAG_TERM_MAX 64 /* bytes of a term; longer runs are cut */

struct kvt_rag_index {
    int32_t B, chunk_tokens, n_chunks, n_terms;
    kvt_rag_chunk *chunks; /* n_chunks; strings owned */
    char **terms;          /* n_terms, sorted by strcmp; owned */
    uint32_t *post_off;    /* n_terms + 1: term t's postings are [post_off[t], post_off[t+1]) */
    uint32_t *post_chunk;  /* n_post chunk numbers, ascending within a term */
    uint32_t *post_tf;     /* n_post term frequencies */
    size_t n_post;
    double avg_len; /* mean n_terms over the chunks (kvt_rag_index_finish) */
    /* dense vectors (version 3), or dim 0 */
    int32_t dim;
    kvt_rag_pooling pooling;
    kvt_fingerprint fingerprint;
    char *model_name; /* owned */
    float *vecs;      /* n_chunks x dim; owned */
};

/* The BM25 terms of text[0..len) in order (rag.h), malloc'd strings in a
 * malloc'd *out (NULL when none). Returns how many. */
size_t kvt_rag_terms(const char *text, size_t len, char ***out);
int kvt_rag_strcmp(const void *a, const void *b); /* qsort over char * */
char *kvt_rag_strndup(const char *s, size_t n);
/* "<doc>#<hex>": the document's name and the first KVT_RAG_ID_HEX hex digits
 * of XXH3-64 (with seed) over the chunk's text, malloc'd (rag.h, "Ids"). */
char *kvt_rag_chunk_id(const char *doc, const char *text, size_t len, uint64_t seed);
void kvt_rag_chunk_free(kvt_rag_chunk *c);
/* Every chunk with a positive BM25 score for question, best first (ties by
 * id), into *all (malloc'd, NULL when none; rank set). Returns how many. */
int32_t kvt_rag_rank_bm25(const kvt_rag_index *x, const char *question, kvt_rag_hit **all);
/* Sorts hits by score, best first, ties by id (then chunk number). */
void kvt_rag_sort_by_score(const kvt_rag_index *x, kvt_rag_hit *hits, int32_t n);
/* Computes the derived fields (avg_len) of a built or loaded index. */
void kvt_rag_index_finish(kvt_rag_index *x);

#endif
