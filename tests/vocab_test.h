// SPDX-License-Identifier: MIT
/* The shared vocabularies (../shared/vocab) for tests that tokenize with them. */
#ifndef KVT_VOCAB_TEST_H
#define KVT_VOCAB_TEST_H

#include <stdio.h>

#include "gguf.h"
#include "mkmodel.h"
#include "model.h"
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

/* A vocab-only load of a tiny mkmodel model of arch (NULL: the default, llama) written to file in
 * the test's temporary directory: mkmodel's built-in vocabulary and the arch's chat template. NULL
 * (with a failed check) when it cannot be made or loaded. */
static inline kvt_model *kvt_test_vocab_model(const char *arch, const char *file) {
    const char *path = kvt_test_path(kvt_test_tmpdir(), file);
    kvt_mkmodel_params p = kvt_mkmodel_default_params();
    if (arch) p.arch = arch;
    p.dim = 64;
    p.layers = 1;
    p.heads = 2;
    p.kv_heads = 1;
    p.ff = 64;
    kvt_model *m = NULL;
    kvt_model_params mp = kvt_model_default_params();
    mp.vocab_only = 1;
    CHECKF(kvt_mkmodel(&p, path) == 0 && kvt_model_load(path, mp, &m) == 0, "%s: %s", arch ? arch : "llama",
           kvt_errmsg());
    return m;
}

#endif
