// SPDX-License-Identifier: MIT
/* Internals shared by tokenizer.c (vocabulary, special tokens, pieces),
 * tokenizer_spm.c and tokenizer_bpe.c. Not part of any API. */
#ifndef KVT_TOKENIZER_IMPL_H
#define KVT_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer.h"

enum kvt_tok_kind { KVT_TOK_SPM = 1, KVT_TOK_BPE = 2 };

/* Per-token strip flags (llama.cpp's LSTRIP/RSTRIP attributes): when such a
 * token is split out of the text, the whitespace before / after it is dropped. */
enum { KVT_TOK_LSTRIP = 1, KVT_TOK_RSTRIP = 2 };

/* Most regexes one pre-tokenizer chains (llama.cpp's longest list has 6). */
#define KVT_BPE_MAX_REGEX 8
/* Number of byte values. */
#define KVT_N_BYTES 256

typedef struct {
    uint32_t off, len; /* text in kvt_tokenizer.pool */
    float score;       /* SPM merge priority */
    uint8_t type;      /* enum kvt_token_type */
    uint8_t strip;     /* KVT_TOK_LSTRIP | KVT_TOK_RSTRIP */
} kvt_tok_info;

typedef struct {
    uint64_t key;   /* (left id << 32) | right id; 0 = empty slot is impossible for a pair of ids >= 0 */
    int32_t rank;   /* -1 marks an empty slot */
    int32_t result; /* id of the merged text, or -1 if that text is not a token */
} kvt_merge_slot;

struct kvt_tokenizer {
    int kind;
    int32_t n_vocab;
    kvt_tok_info *tok;
    char *pool;

    int32_t *slots; /* open-addressing hash: token text -> id; -1 = empty */
    uint64_t slot_mask;

    int32_t bos, eos, unk, eot;
    int32_t fim[KVT_FIM_COUNT]; /* fill-in-the-middle tokens (kvt_tokenizer_fim), -1 where none */
    int add_bos, add_eos, add_space_prefix, ignore_merges;
    uint8_t *eog;     /* n_vocab flags */
    int32_t *special; /* ids split out of the text before tokenizing, longest text first */
    size_t n_special;
    const char *pre_name;

    /* SPM: the <0xNN> token of each byte (or -1). BPE: the token of each byte's
     * byte-level character (or -1). */
    int32_t byte_tok[KVT_N_BYTES];

    /* Raw text bytes one emitted token stands for at most, when every byte of
     * a text fragment is sure to end up in an emitted token; 0 when that is not
     * so (a BPE vocabulary lacking byte tokens, or with merges whose result is
     * no token, drops bytes). Gives kvt_tokenize_max its lower bound. */
    uint32_t max_cover;

    /* BPE */
    kvt_merge_slot *merges;
    uint64_t merge_mask;
    pcre2_code *re[KVT_BPE_MAX_REGEX];
    size_t n_re;
    struct kvt_bpe_matchers *matchers; /* idle regex match contexts with their JIT stacks (tokenizer_bpe.c) */
};

/* Growable token list. */
typedef struct {
    int32_t *v;
    size_t n, cap;
} kvt_tokvec;
void kvt_tokvec_push(kvt_tokvec *tv, int32_t id);

/* Id of the token with text s[0..n), or -1. */
int32_t kvt_tok_lookup(const kvt_tokenizer *t, const char *s, size_t n);

/* A candidate merge of adjacent symbols left and right (size = their joint
 * length): a min-heap on (prio, left), so ties go to the leftmost pair. */
typedef struct {
    double prio;
    int32_t left, right;
    uint32_t size;
    int32_t result; /* BPE: id of the merged token */
} kvt_bigram;
typedef struct {
    kvt_bigram *v;
    size_t n, cap;
} kvt_bigram_heap;
void kvt_heap_push(kvt_bigram_heap *h, kvt_bigram b);
kvt_bigram kvt_heap_pop(kvt_bigram_heap *h); /* requires h->n > 0 */

/* Bytes in the UTF-8 sequence a lead byte announces (1 for continuation and
 * invalid bytes), as llama.cpp counts them. */
static inline size_t kvt_utf8_len(uint8_t lead) {
    static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[lead >> 4];
}

/* SPM: tokenizes one text fragment (no special tokens inside), prefixing a
 * space when add_prefix. Appends to out. Returns 0 or a negative code. */
int kvt_spm_tokenize(const kvt_tokenizer *t, const char *text, size_t len, int add_prefix, kvt_tokvec *out);

/* BPE: reads merges, picks and compiles the pre-tokenizer regexes, maps
 * bytes. Called by kvt_tokenizer_load once the vocabulary is in place. */
int kvt_bpe_init(kvt_tokenizer *t, const kvt_gguf *g);
void kvt_bpe_free(kvt_tokenizer *t);
/* BPE: tokenizes one text fragment. Appends to out, stopping between words
 * once out holds more than max_n ids. Returns 0 or a negative code. */
int kvt_bpe_tokenize(const kvt_tokenizer *t, const char *text, size_t len, size_t max_n, kvt_tokvec *out);
/* BPE: decodes byte-level text s[0..n) into buf (up to cap bytes); returns the
 * full decoded length. */
size_t kvt_bpe_decode(const char *s, size_t n, char *buf, size_t cap);

#endif
