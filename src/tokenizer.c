/* Placeholder until the tokenizer lands: an empty tokenizer. */
#include "tokenizer.h"

#include <stdlib.h>

#include "common.h"

struct kvt_tokenizer {
    int unused;
};

int kvt_tokenizer_load(const kvt_gguf *g, kvt_tokenizer **out) {
    *out = kvt_xcalloc(1, sizeof **out);
    return 0;
}
void kvt_tokenizer_free(kvt_tokenizer *t) { free(t); }
int32_t kvt_tokenizer_n_vocab(const kvt_tokenizer *t) { return 0; }
int32_t kvt_tokenizer_bos(const kvt_tokenizer *t) { return -1; }
int32_t kvt_tokenizer_eos(const kvt_tokenizer *t) { return -1; }
int kvt_tokenizer_is_eog(const kvt_tokenizer *t, int32_t tok) { return 0; }
int kvt_tokenizer_add_bos_default(const kvt_tokenizer *t) { return 1; }
const char *kvt_tokenizer_kind(const kvt_tokenizer *t) { return "none"; }
const char *kvt_tokenizer_pre(const kvt_tokenizer *t) { return "none"; }
int kvt_tokenize(const kvt_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special, int32_t **out,
                 size_t *n_out) {
    return KVT_EUNSUPPORTED;
}
int kvt_token_piece(const kvt_tokenizer *t, int32_t tok, char *buf, size_t cap, int render_special) {
    return KVT_EUNSUPPORTED;
}
int kvt_detokenize(const kvt_tokenizer *t, const int32_t *toks, size_t n, int render_special, char **out, size_t *len) {
    return KVT_EUNSUPPORTED;
}
