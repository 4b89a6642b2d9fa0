// SPDX-License-Identifier: MIT
/* Fuzz driver: the tokenizers take raw user bytes (prompts, chat messages), so
 * any byte string must tokenize without a memory error, give only ids inside
 * the vocabulary, and detokenize again. Runs every tokenizer kind kvtier has:
 * the built-in byte-level BPE of `kvtier mkmodel` (always) and, when
 * ../shared/vocab is present ($KVT_SHARED), the SentencePiece llama vocabulary
 * and BPE vocabularies with several pre-tokenizer regexes. Built for libFuzzer
 * with clang (-DKVT_FUZZ=ON) and, in every build, as a replay test over
 * fuzz/corpus/tokenizer plus deterministic mutations. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "gguf.h"
#include "mkmodel.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_TOKENIZERS 8
/* vocabularies from ../shared/vocab: SPM, and BPE with differing pre-tokenizers */
static const char *const shared_vocabs[] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf",
                                            "ggml-vocab-deepseek-llm.gguf", "ggml-vocab-falcon.gguf"};

static kvt_tokenizer *toks[MAX_TOKENIZERS];
static kvt_gguf *files[MAX_TOKENIZERS];
static int n_toks = -1;

static void add(const char *path) {
    kvt_gguf *g;
    kvt_tokenizer *t;
    if (n_toks >= MAX_TOKENIZERS || kvt_gguf_open(path, &g)) return;
    if (kvt_tokenizer_load(g, &t)) {
        kvt_gguf_close(g);
        return;
    }
    files[n_toks] = g;
    toks[n_toks++] = t;
}

/* Loads the tokenizers once (the gguf files stay open: tokenizers borrow their strings). */
static void init(void) {
    n_toks = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/kvt-fuzz-tok-%ld.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (long)getpid());
    kvt_mkmodel_params p = kvt_mkmodel_default_params();
    p.dim = 32;
    p.layers = 1;
    p.heads = 2;
    p.kv_heads = 1;
    p.ff = 32;
    if (kvt_mkmodel(&p, path) == 0) {
        add(path);
        unlink(path); /* the mapping stays valid */
    }
    const char *shared = getenv("KVT_SHARED");
    for (size_t i = 0; shared && i < KVT_ARRAY_LEN(shared_vocabs); i++) {
        snprintf(path, sizeof path, "%s/vocab/%s", shared, shared_vocabs[i]);
        add(path);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (n_toks < 0) init();
    for (int k = 0; k < n_toks; k++) {
        int32_t nv = kvt_tokenizer_n_vocab(toks[k]);
        for (int special = 0; special < 2; special++) {
            int32_t *ids = NULL;
            size_t n = 0;
            if (kvt_tokenize(toks[k], (const char *)data, size, special, special, &ids, &n)) continue;
            for (size_t i = 0; i < n; i++)
                if (ids[i] < 0 || ids[i] >= nv) abort(); /* an id outside the vocabulary */
            char *back = NULL;
            size_t blen = 0;
            if (kvt_detokenize(toks[k], ids, n, special, &back, &blen) == 0) free(back);
            free(ids);
        }
    }
    return 0;
}
