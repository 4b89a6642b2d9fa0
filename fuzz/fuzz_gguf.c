// SPDX-License-Identifier: MIT
/* Fuzz driver: the GGUF reader and the tokenizer built from its metadata must
 * reject any byte string cleanly. Built for libFuzzer with clang (-DKVT_FUZZ=ON) and, in every build,
 * as a replay test over fuzz/corpus/gguf plus deterministic mutations. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kvt_gguf *g;
    if (kvt_gguf_open_mem(data, size, &g)) return 0;
    /* touch everything the accessors expose, as a consumer would */
    volatile uint64_t sink = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const kvt_gguf_kv *kv = &g->kv[i];
        int64_t iv;
        double dv;
        kvt_gguf_get_int(g, kv->key, &iv);
        kvt_gguf_get_float(g, kv->key, &dv);
        if (kv->type == KVT_GGUF_ARRAY) {
            for (uint64_t j = 0; j < kv->arr_n && j < 64; j++) {
                if (kv->arr_type == KVT_GGUF_STRING) {
                    uint64_t len;
                    const char *s = kvt_gguf_arr_str(kv, j, &len);
                    if (len) sink += (uint8_t)s[len - 1];
                } else {
                    sink += (uint64_t)kvt_gguf_arr_int(kv, j);
                }
            }
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kvt_gguf_tensor *t = &g->tensors[i];
        if (t->nbytes) sink += ((const uint8_t *)t->data)[t->nbytes - 1];
    }
    (void)sink; /* only written: the reads above are what is fuzzed */
    /* the tokenizer reads the most metadata: load it and use it if it loads */
    kvt_tokenizer *tok;
    if (kvt_tokenizer_load(g, &tok) == 0) {
        static const char text[] = "Hello world <|im_start|> \xc3\xa9\xff 123";
        int32_t *ids = NULL;
        size_t n = 0;
        if (kvt_tokenize(tok, text, sizeof text - 1, 1, 1, &ids, &n) == 0) {
            char *back = NULL;
            size_t blen;
            if (kvt_detokenize(tok, ids, n, 1, &back, &blen) == 0) free(back);
            free(ids);
        }
        kvt_tokenizer_free(tok);
    }
    kvt_gguf_close(g);
    return 0;
}
