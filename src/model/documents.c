// SPDX-License-Identifier: MIT
/* Fixed context blocks: documents rendered so each starts and ends on a
 * cache-block boundary (the rule is in kvtier.h, kvt_render_documents). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model.h"
#include "tokenizer.h"

#define DOC_HEADER "Document "

/* The single token of text, or -1. */
static int32_t single_token(const kvt_tokenizer *t, const char *text) {
    int32_t *ids = NULL;
    size_t n = 0;
    int32_t id = -1;
    if (!kvt_tokenize(t, text, strlen(text), 0, 0, &ids, &n) && n == 1) id = ids[0];
    free(ids);
    return id;
}

int32_t kvt_document_pad_token(const kvt_model *model) {
    /* a newline reads as a paragraph break to the model, unlike a pad token it may never have seen in context */
    int32_t id = single_token(model->tok, "\n");
    if (id < 0) id = single_token(model->tok, " ");
    return id >= 0 ? id : kvt_fail(KVT_EUNSUPPORTED, "the tokenizer has no single newline or space token to pad with");
}

typedef struct {
    int32_t *v;
    size_t n, cap;
} buf;

static void put(buf *b, const int32_t *ids, size_t n) {
    if (!n) return; /* memcpy with a NULL buffer is undefined even for 0 bytes */
    if (b->n + n > b->cap) {
        b->cap = KVT_MAX(b->n + n, 2 * b->cap);
        b->v = kvt_xrealloc(b->v, b->cap * sizeof *b->v);
    }
    memcpy(b->v + b->n, ids, n * sizeof *ids);
    b->n += n;
}

static void pad_to(buf *b, int32_t pad, int32_t B) {
    while (b->n % (size_t)B) put(b, &pad, 1);
}

int kvt_render_documents(const kvt_model *model, int32_t block_size, const int32_t *prompt, size_t n, size_t at,
                         const kvt_document *docs, size_t n_docs, int32_t **out, size_t *n_out) {
    return kvt_render_documents_spans(model, block_size, prompt, n, at, docs, n_docs, out, n_out, NULL);
}

int kvt_render_documents_spans(const kvt_model *model, int32_t block_size, const int32_t *prompt, size_t n, size_t at,
                               const kvt_document *docs, size_t n_docs, int32_t **out, size_t *n_out, size_t *starts) {
    *out = NULL;
    *n_out = 0;
    if (block_size < 1 || at > n || (n && !prompt) || (n_docs && !docs))
        return kvt_fail(KVT_EARG, "bad arguments to kvt_render_documents");
    for (size_t i = 0; i < n_docs; i++) {
        if (!docs[i].id || !docs[i].text) return kvt_fail(KVT_EARG, "document %zu has no id or text", i);
        for (size_t j = 0; j < i; j++) /* an id names one document: the same id twice is ambiguous */
            if (docs[j].id && !strcmp(docs[j].id, docs[i].id))
                return kvt_fail(KVT_EARG,
                                "document %zu's id '%.64s' repeats the id of document %zu: each document "
                                "needs its own id",
                                i, docs[i].id, j);
    }
    int32_t pad = kvt_document_pad_token(model);
    if (pad < 0) return pad;
    buf b = {0};
    put(&b, prompt, at);
    if (n_docs) pad_to(&b, pad, block_size);
    for (size_t i = 0; i < n_docs; i++) {
        if (starts) starts[i] = b.n;
        size_t len = strlen(DOC_HEADER) + strlen(docs[i].id) + strlen(docs[i].text) + 4;
        char *text = kvt_xmalloc(len);
        snprintf(text, len, DOC_HEADER "%s:\n%s\n", docs[i].id, docs[i].text);
        int32_t *ids = NULL;
        size_t k = 0;
        int rc = kvt_tokenize(model->tok, text, strlen(text), 0, 0, &ids, &k);
        free(text);
        if (rc) {
            free(b.v);
            return rc;
        }
        put(&b, ids, k);
        free(ids);
        pad_to(&b, pad, block_size);
    }
    if (starts && n_docs) starts[n_docs] = b.n;
    put(&b, prompt + at, n - at);
    if (!b.v) b.v = kvt_xmalloc(sizeof *b.v);
    *out = b.v;
    *n_out = b.n;
    return 0;
}
