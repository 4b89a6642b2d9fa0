/* Tokenizers from GGUF metadata: SentencePiece-style (llama) and byte-level BPE
 * (gpt2) with pre-tokenizer regexes chosen by tokenizer.ggml.pre. */
#ifndef KVT_TOKENIZER_H
#define KVT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

typedef struct kvt_tokenizer kvt_tokenizer;

int kvt_tokenizer_load(const kvt_gguf *g, kvt_tokenizer **out);
void kvt_tokenizer_free(kvt_tokenizer *t);
int32_t kvt_tokenizer_n_vocab(const kvt_tokenizer *t);
int32_t kvt_tokenizer_bos(const kvt_tokenizer *t);
int32_t kvt_tokenizer_eos(const kvt_tokenizer *t);
int kvt_tokenizer_is_eog(const kvt_tokenizer *t, int32_t tok);
int kvt_tokenizer_add_bos_default(const kvt_tokenizer *t);
const char *kvt_tokenizer_kind(const kvt_tokenizer *t);
const char *kvt_tokenizer_pre(const kvt_tokenizer *t);
int kvt_tokenize(const kvt_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special, int32_t **out,
                 size_t *n_out);
int kvt_token_piece(const kvt_tokenizer *t, int32_t tok, char *buf, size_t cap, int render_special);
int kvt_detokenize(const kvt_tokenizer *t, const int32_t *toks, size_t n, int render_special, char **out, size_t *len);

#endif
