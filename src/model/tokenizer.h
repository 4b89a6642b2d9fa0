// SPDX-License-Identifier: MIT
/* Tokenizers built from GGUF metadata (tokenizer.ggml.*): SentencePiece-style
 * ("llama": score-ordered bigram merges over UTF-8 characters, byte fallback)
 * and byte-level BPE ("gpt2": pre-tokenizer regexes named by tokenizer.ggml.pre,
 * merge ranks). Behaviour follows llama.cpp's tokenizer, the reference our
 * tests compare against; the deviations are listed in tokenizer.c.
 *
 * A loaded tokenizer is immutable: every function below may be called from
 * several threads at once on one handle.
 */
#ifndef KVT_TOKENIZER_H
#define KVT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

typedef struct kvt_tokenizer kvt_tokenizer;

/* Token types as GGUF stores them in tokenizer.ggml.token_type. */
enum kvt_token_type {
    KVT_TOKEN_UNDEFINED = 0,
    KVT_TOKEN_NORMAL = 1,
    KVT_TOKEN_UNKNOWN = 2,
    KVT_TOKEN_CONTROL = 3,
    KVT_TOKEN_USER_DEFINED = 4,
    KVT_TOKEN_UNUSED = 5,
    KVT_TOKEN_BYTE = 6,
};

/* Builds a tokenizer from g's metadata; works on vocab-only files. Copies what
 * it needs, so g may be closed afterwards. Returns 0 and *out, or a negative
 * code (KVT_ENOTFOUND: no tokens array; KVT_EFORMAT: inconsistent arrays, ids
 * or merges; KVT_EUNSUPPORTED: another tokenizer model) with *out = NULL and
 * kvt_errmsg() saying why. */
int kvt_tokenizer_load(const kvt_gguf *g, kvt_tokenizer **out);
/* Frees t (NULL is fine). */
void kvt_tokenizer_free(kvt_tokenizer *t);

/* Number of tokens in the vocabulary. */
int32_t kvt_tokenizer_n_vocab(const kvt_tokenizer *t);
/* Beginning / end of sequence token, -1 if the vocabulary has none. */
int32_t kvt_tokenizer_bos(const kvt_tokenizer *t);
int32_t kvt_tokenizer_eos(const kvt_tokenizer *t);
/* The fill-in-the-middle tokens a code model is trained with: prefix, suffix,
 * middle, padding, repository name and file separator. */
enum { KVT_FIM_PRE, KVT_FIM_SUF, KVT_FIM_MID, KVT_FIM_PAD, KVT_FIM_REP, KVT_FIM_SEP, KVT_FIM_COUNT };
/* The id of FIM token `which`, -1 if the vocabulary has none: the file's
 * tokenizer.ggml.fim_*_token_id (or the older prefix/suffix/middle_token_id),
 * else the token with one of the texts llama.cpp recognises (<|fim_prefix|>,
 * <fim-prefix>, DeepSeek's and CodeLlama's <PRE>, ...). PAD, REP and SEP end
 * generation, as in llama.cpp. */
int32_t kvt_tokenizer_fim(const kvt_tokenizer *t, int which);
/* The end-of-turn token: tokenizer.ggml.eot_token_id, else the first of
 * <|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|>, <EOT> the
 * vocabulary has; -1 if none. */
int32_t kvt_tokenizer_eot(const kvt_tokenizer *t);
/* 1 if tok ends generation (eos, eot, eom, <|im_end|>, <|eot_id|>, <|end|>,
 * <|endoftext|>, ...), else 0 (also for an invalid id). */
int kvt_tokenizer_is_eog(const kvt_tokenizer *t, int32_t tok);
/* What kvt_tokenize adds around the text (flags). KVT_TOK_CONTINUES: the text
 * goes on from earlier text whose last token was not special, so SentencePiece
 * adds no prefix space at its start (it adds one at the start of a text and
 * after each special token, as llama.cpp does on the whole text). */
enum { KVT_TOK_ADD_BOS = 1, KVT_TOK_ADD_EOS = 2, KVT_TOK_CONTINUES = 4 };
/* The flag for text that follows token prev in one sequence (prev < 0: none):
 * KVT_TOK_CONTINUES unless prev is special (control, user-defined, unknown),
 * so that text tokenized in pieces gets the ids the whole text would. */
int kvt_tokenizer_continues(const kvt_tokenizer *t, int32_t prev);
/* How many leading bytes of text (len of them) a tokenization of the text
 * that precedes it with token prev would drop: the whitespace after a token
 * that strips to its right (llama.cpp's rstrip, which it gives Phi-3's special
 * tokens); 0 for other tokens and prev < 0. */
size_t kvt_tokenizer_stripped_after(const kvt_tokenizer *t, int32_t prev, const char *text, size_t len);
/* The special tokens a prompt gets, by llama.cpp's rule (its add_special):
 * tokenizer.ggml.add_bos_token / tokenizer.ggml.add_eos_token when the file has
 * them; otherwise the vocabulary type's default, as llama.cpp build 4748 has it:
 * SPM adds BOS; BPE adds BOS only for the llama3, llama-v3, llama-bpe,
 * falcon3, tekken and chameleon pre-tokenizers; neither adds EOS. Returns KVT_TOK_ADD_* flags. Every
 * prompt path (run, serve, eval, tokenize, kvt_model_tokenize) uses this. */
int kvt_tokenizer_add_special(const kvt_tokenizer *t);
/* "llama (SentencePiece)" or "gpt2 (byte-level BPE)". Static storage. */
const char *kvt_tokenizer_kind(const kvt_tokenizer *t);
/* Name of the pre-tokenizer actually used ("gpt-2", "llama3", "default", ...;
 * "spm" for SentencePiece). Static storage. */
const char *kvt_tokenizer_pre(const kvt_tokenizer *t);

/* Type of token tok (enum kvt_token_type, after llama.cpp's fix-ups: tokens
 * such as <|im_end|> count as CONTROL), or a negative code for an invalid id. */
int kvt_tokenizer_token_type(const kvt_tokenizer *t, int32_t tok);
/* Raw vocabulary text of tok (not NUL-terminated; *len = its length), valid
 * until kvt_tokenizer_free; NULL for an invalid id. */
const char *kvt_tokenizer_token_text(const kvt_tokenizer *t, int32_t tok, size_t *len);
/* Id of the token whose vocabulary text is exactly text[0..len), or -1. Meant
 * for special tokens ("<|im_start|>"); normal BPE tokens are stored byte-encoded. */
int32_t kvt_tokenizer_find(const kvt_tokenizer *t, const char *text, size_t len);

/* Tokenizes len bytes of text (need not be NUL-terminated or valid UTF-8).
 * add is a set of KVT_TOK_ADD_* flags: ADD_BOS prepends BOS, ADD_EOS appends
 * EOS (KVT_ENOTFOUND if the vocabulary lacks that token); pass
 * kvt_tokenizer_add_special(t) for what the model wants. parse_special makes
 * the text of control tokens (e.g. "<|im_start|>") map to those tokens;
 * otherwise it is plain text. User-defined tokens are always matched, as in
 * llama.cpp. Invalid UTF-8 is not an error: such bytes become byte tokens.
 * On success returns 0, *out is malloc'd (caller frees; NULL when *n_out == 0).
 * On failure returns a negative code, *out = NULL, *n_out = 0. */
int kvt_tokenize(const kvt_tokenizer *t, const char *text, size_t len, int add, int parse_special, int32_t **out,
                 size_t *n_out);

/* kvt_tokenize for a text that must fit in max_tokens tokens (a context):
 * the same result when it does, else KVT_ELIMIT with *out = NULL, *n_out = 0.
 * The work stays proportional to max_tokens, not to len: a lower bound from
 * the fragments' lengths (each token stands for a bounded number of bytes)
 * rejects most oversized texts before tokenizing, and tokenizing stops once
 * more than max_tokens tokens exist. The answer is exact either way. */
int kvt_tokenize_max(const kvt_tokenizer *t, const char *text, size_t len, int add, int parse_special,
                     size_t max_tokens, int32_t **out, size_t *n_out);
/* kvt_tokenize_max where the bytes marked in plain (plain[i] != 0; NULL:
 * none) are plain text whatever parse_special says: a control token whose
 * text overlaps one of them is not matched there (the text of a message
 * inside a chat template's markup). User-defined tokens match as always. */
int kvt_tokenize_marked(const kvt_tokenizer *t, const char *text, size_t len, int add, int parse_special,
                        const unsigned char *plain, size_t max_tokens, int32_t **out, size_t *n_out);

/* The bytes of one token: SPM maps U+2581 to a space and <0xNN> to the byte;
 * BPE maps its byte-level characters back to bytes. Control and unknown tokens
 * render as their text when render_special, else as nothing; user-defined
 * tokens always render as their text. Writes up to cap bytes (no NUL) and
 * returns the full length (call again with a larger buffer if it is > cap),
 * or KVT_EARG for an invalid id. */
int kvt_token_piece(const kvt_tokenizer *t, int32_t tok, char *buf, size_t cap, int render_special);

/* A map of ids 0..n_ids-1 (malloc'd, one byte an id): 1 where the id is a
 * token whose piece (special tokens rendered as written) holds one of
 * strs[0..n); 0 past the tokenizer's vocabulary (a model's output may have
 * more rows than it has tokens, or fewer). */
uint8_t *kvt_tokens_containing(const kvt_tokenizer *t, int32_t n_ids, const char *const *strs, int32_t n);

/* Concatenates the pieces of toks[0..n) into a malloc'd NUL-terminated string
 * (*out, caller frees; *len = its length without the NUL; len may be NULL).
 * SPM: drops the one leading space that tokenization adds at the start of the
 * text and after each token split out as special. No other clean-up, so for
 * the text a tokenizer can represent, detokenize(tokenize(s)) == s. Returns 0
 * or a negative code (KVT_EARG for an invalid id; *out = NULL then). */
int kvt_detokenize(const kvt_tokenizer *t, const int32_t *toks, size_t n, int render_special, char **out, size_t *len);

#endif
