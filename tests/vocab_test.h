// SPDX-License-Identifier: MIT
/* The shared vocabularies (../shared/vocab) for tests that tokenize with them. */
#ifndef KVT_VOCAB_TEST_H
#define KVT_VOCAB_TEST_H

#include "gguf.h"
#include "testutil.h"
#include "tokenizer.h"

/* The tokenizer of ../shared/vocab/name, or NULL when it is not there. */
static inline kvt_tokenizer *kvt_test_vocab(const char *name) {
    kvt_gguf *g;
    if (kvt_gguf_open(kvt_test_path(kvt_test_path(kvt_test_shared(), "vocab"), name), &g)) return NULL;
    kvt_tokenizer *t = NULL;
    if (kvt_tokenizer_load(g, &t)) t = NULL;
    kvt_gguf_close(g);
    return t;
}

#endif
