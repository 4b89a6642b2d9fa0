// SPDX-License-Identifier: MIT
/* Tokenizer core: loads the vocabulary from GGUF metadata, splits special
 * tokens out of the text, dispatches text fragments to SPM or BPE, renders
 * pieces and detokenizes. The algorithms themselves live in tokenizer_spm.c
 * and tokenizer_bpe.c.
 *
 * Deviations from llama.cpp, all on inputs its tests do not cover:
 *  - BPE: invalid UTF-8 bytes become byte-level tokens (lossless) instead of
 *    U+FFFD; an unknown `pre` falls back to llama.cpp's default regex list with a
 *    warning instead of failing; a missing BOS/EOS id is -1 instead of 11.
 *  - Duplicate token texts: the later id wins (llama.cpp aborts).
 *  - Detokenize never "cleans up" spaces before punctuation, so it stays lossless.
 *  - Control-looking tokens (<|im_end|>, FIM tokens, ...) are always typed
 *    CONTROL, not only while the matching *_token_id key is absent.
 *  - DeepSeek V3's pre-tokenizer counts '~' as a symbol (\p{S}), as its regex
 *    says; llama.cpp's ASCII stand-in for \p{S} leaves '~' out.
 */
#include "tokenizer.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common.h"
#include "tokenizer_impl.h"

/* Far more tokens than any real vocabulary; bounds every allocation. */
#define KVT_TOKENIZER_MAX_VOCAB (1 << 24)
/* Longest text kvt_tokenize accepts: symbol indices are int32. */
#define KVT_TOKENIZE_MAX_BYTES ((size_t)1 << 30)
/* Hash tables are kept at most half full. */
#define KVT_HASH_LOAD_FACTOR 2

/* Tokens llama.cpp recognises by their text and treats as CONTROL; those with
 * eog set also end generation. */
static const struct {
    const char *text;
    int eog;
} control_names[] = {
    {"<|eot_id|>", 1},
    {"<|im_end|>", 1},
    {"<|end|>", 1},
    {"<end_of_turn>", 1},
    {"<|endoftext|>", 1},
    {"<|eom_id|>", 1},
    {"<EOT>", 1},
    {"<|fim_pad|>", 1},
    {"<fim-pad>", 1},
    {"<PAD>", 1},
    {"<|fim_repo|>", 1},
    {"<|repo_name|>", 1},
    {"<fim-repo>", 1},
    {"<REPO>", 1},
    {"<|file_sep|>", 1},
    {"<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
     0}, /* DeepSeek; eog as eot */
    {"<|fim_prefix|>", 0},
    {"<fim-prefix>", 0},
    {"<\xef\xbd\x9c"
     "fim\xe2\x96\x81"
     "begin\xef\xbd\x9c>",
     0},
    {"<PRE>", 0},
    {"<|fim_suffix|>", 0},
    {"<fim-suffix>", 0},
    {"<\xef\xbd\x9c"
     "fim\xe2\x96\x81hole\xef\xbd\x9c>",
     0},
    {"<SUF>", 0},
    {"<|fim_middle|>", 0},
    {"<fim-middle>", 0},
    {"<\xef\xbd\x9c"
     "fim\xe2\x96\x81"
     "end\xef\xbd\x9c>",
     0},
    {"<MID>", 0},
};
#define DEEPSEEK_EOS_INDEX 15 /* control_names[] entry that is an eot candidate */

void kvt_tokvec_push(kvt_tokvec *tv, int32_t id) {
    if (tv->n == tv->cap) {
        tv->cap = tv->cap ? tv->cap * 2 : 64;
        tv->v = kvt_xrealloc(tv->v, tv->cap * sizeof *tv->v);
    }
    tv->v[tv->n++] = id;
}

/* ---- bigram heap (shared by SPM and BPE) ---- */

static int bigram_before(const kvt_bigram *a, const kvt_bigram *b) {
    return a->prio < b->prio || (a->prio == b->prio && a->left < b->left);
}

void kvt_heap_push(kvt_bigram_heap *h, kvt_bigram b) {
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 64;
        h->v = kvt_xrealloc(h->v, h->cap * sizeof *h->v);
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&b, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
}

kvt_bigram kvt_heap_pop(kvt_bigram_heap *h) {
    kvt_bigram top = h->v[0];
    kvt_bigram last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && bigram_before(&h->v[c + 1], &h->v[c])) c++;
        if (!bigram_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

/* ---- vocabulary hash ---- */

static uint64_t hash_bytes(const char *s, size_t n) { return XXH3_64bits(s, n); }

int32_t kvt_tok_lookup(const kvt_tokenizer *t, const char *s, size_t n) {
    for (uint64_t i = hash_bytes(s, n) & t->slot_mask;; i = (i + 1) & t->slot_mask) {
        int32_t id = t->slots[i];
        if (id < 0) return -1;
        const kvt_tok_info *ti = &t->tok[id];
        if (ti->len == n && !memcmp(t->pool + ti->off, s, n)) return id;
    }
}

/* Inserts id under its text; an existing entry with the same text is replaced
 * (the later id wins, like the std::unordered_map assignment in llama.cpp). */
static void hash_insert(kvt_tokenizer *t, int32_t id) {
    const kvt_tok_info *ti = &t->tok[id];
    const char *s = t->pool + ti->off;
    for (uint64_t i = hash_bytes(s, ti->len) & t->slot_mask;; i = (i + 1) & t->slot_mask) {
        int32_t cur = t->slots[i];
        if (cur < 0 || (t->tok[cur].len == ti->len && !memcmp(t->pool + t->tok[cur].off, s, ti->len))) {
            t->slots[i] = id;
            return;
        }
    }
}

static uint64_t pow2_at_least(uint64_t n) {
    uint64_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* ---- loading ---- */

/* Reads an optional token id key; out-of-range ids are ignored with a warning
 * (the default stays), as llama.cpp does. */
static void read_id(const kvt_gguf *g, const char *key, int32_t n_vocab, int32_t *id) {
    int64_t v;
    if (kvt_gguf_get_int(g, key, &v) != 0) return;
    if (v < 0 || v >= n_vocab) {
        if (v != UINT32_MAX)
            kvt_logk(KVT_LOG_WARN, "key,value", "tokenizer: %s = %lld is not a token id; ignored", key, (long long)v);
        return;
    }
    *id = (int32_t)v;
}

typedef struct {
    uint32_t len;
    int32_t id;
} len_id;

/* Longest text first; equal lengths by id so the order is deterministic. */
static int special_cmp(const void *a, const void *b) {
    const len_id *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int is_special_type(uint8_t type) {
    return type == KVT_TOKEN_CONTROL || type == KVT_TOKEN_USER_DEFINED || type == KVT_TOKEN_UNKNOWN;
}

static int contains_ci(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (!strncasecmp(hay, needle, n)) return 1;
    return 0;
}

/* Per-model strip attributes llama.cpp sets by name (they are not in GGUF). */
static void set_strip_attrs(kvt_tokenizer *t, const kvt_gguf *g, const char *pre) {
    const char *name = "";
    kvt_gguf_get_str(g, "general.name", &name);
    if (pre && (strstr(pre, "jina-v2-de") || strstr(pre, "jina-v2-es") || strstr(pre, "jina-v2-code"))) {
        int32_t id = kvt_tok_lookup(t, "<mask>", 6);
        if (id >= 0) t->tok[id].strip |= KVT_TOK_LSTRIP;
    } else if (contains_ci(name, "phi-3") || contains_ci(name, "phi3")) {
        for (size_t i = 0; i < t->n_special; i++) t->tok[t->special[i]].strip |= KVT_TOK_RSTRIP;
        int32_t id = kvt_tok_lookup(t, "</s>", 4);
        if (id >= 0) t->tok[id].strip |= KVT_TOK_RSTRIP;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (size_t i = 0; i < KVT_ARRAY_LEN(keep); i++) {
            id = kvt_tok_lookup(t, keep[i], strlen(keep[i]));
            if (id >= 0) t->tok[id].strip &= (uint8_t)~KVT_TOK_RSTRIP;
        }
    }
}

static int load_vocab(kvt_tokenizer *t, const kvt_gguf *g) {
    const kvt_gguf_kv *toks, *scores = NULL, *types = NULL;
    int rc = kvt_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks);
    if (rc == KVT_ENOTFOUND) return kvt_fail(KVT_ENOTFOUND, "no tokenizer.ggml.tokens array");
    if (rc || toks->arr_type != KVT_GGUF_STRING)
        return kvt_fail(KVT_EFORMAT, "tokenizer.ggml.tokens is not an array of strings");
    if (toks->arr_n == 0) return kvt_fail(KVT_EFORMAT, "tokenizer.ggml.tokens is empty");
    if (toks->arr_n > KVT_TOKENIZER_MAX_VOCAB)
        return kvt_fail(KVT_ELIMIT, "%llu tokens (at most %d)", (unsigned long long)toks->arr_n,
                        KVT_TOKENIZER_MAX_VOCAB);
    uint64_t n = toks->arr_n;

    rc = kvt_gguf_get_arr(g, "tokenizer.ggml.scores", &scores);
    if (rc == KVT_ENOTFOUND) scores = NULL;
    else if (rc || scores->arr_type == KVT_GGUF_STRING || scores->arr_type == KVT_GGUF_ARRAY || scores->arr_n != n)
        return kvt_fail(KVT_EFORMAT, "tokenizer.ggml.scores must be %llu numbers", (unsigned long long)n);
    rc = kvt_gguf_get_arr(g, "tokenizer.ggml.token_type", &types);
    if (rc == KVT_ENOTFOUND) types = NULL;
    else if (rc || types->arr_type == KVT_GGUF_STRING || types->arr_type == KVT_GGUF_ARRAY || types->arr_n != n)
        return kvt_fail(KVT_EFORMAT, "tokenizer.ggml.token_type must be %llu integers", (unsigned long long)n);

    /* Pool: every text, with "[EMPTY_<id>]" standing in for empty ones (as llama.cpp). */
    uint64_t pool_len = 0;
    char empty_name[32];
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len;
        kvt_gguf_arr_str(toks, i, &len);
        if (len == 0) len = (uint64_t)snprintf(empty_name, sizeof empty_name, "[EMPTY_%llu]", (unsigned long long)i);
        if (len > UINT32_MAX || kvt_add_ovf(pool_len, len, &pool_len) || pool_len > UINT32_MAX)
            return kvt_fail(KVT_ELIMIT, "token texts exceed 4 GiB");
    }
    t->n_vocab = (int32_t)n;
    t->tok = kvt_xcalloc(n, sizeof *t->tok);
    t->pool = kvt_xmalloc(pool_len);
    t->eog = kvt_xcalloc(n, 1);
    uint32_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len;
        const char *s = kvt_gguf_arr_str(toks, i, &len);
        if (len == 0) {
            kvt_logk(KVT_LOG_DEBUG, "token", "tokenizer: empty token at index %llu", (unsigned long long)i);
            len = (uint64_t)snprintf(empty_name, sizeof empty_name, "[EMPTY_%llu]", (unsigned long long)i);
            s = empty_name;
        }
        memcpy(t->pool + off, s, len);
        kvt_tok_info *ti = &t->tok[i];
        ti->off = off;
        ti->len = (uint32_t)len;
        off += (uint32_t)len;
        float sc = scores ? (float)kvt_gguf_arr_float(scores, i) : 0.0f;
        ti->score = isnan(sc) ? -INFINITY : sc; /* a NaN would make the merge order arbitrary */
        int64_t ty = types ? kvt_gguf_arr_int(types, i) : KVT_TOKEN_NORMAL;
        ti->type = (ty >= KVT_TOKEN_UNDEFINED && ty <= KVT_TOKEN_BYTE) ? (uint8_t)ty : KVT_TOKEN_UNDEFINED;
    }

    uint64_t cap = pow2_at_least(n * KVT_HASH_LOAD_FACTOR);
    t->slots = kvt_xmalloc(cap * sizeof *t->slots);
    memset(t->slots, 0xff, cap * sizeof *t->slots);
    t->slot_mask = cap - 1;
    for (int32_t i = 0; i < t->n_vocab; i++) hash_insert(t, i);
    return 0;
}

/* The fill-in-the-middle tokens: the file's ids (the older prefix/suffix/middle keys after the newer ones, as
 * llama.cpp reads them), else the first of the texts llama.cpp knows (each one is in control_names, so typed
 * CONTROL already). PAD, REP and SEP end generation. */
static void load_fim(kvt_tokenizer *t, const kvt_gguf *g) {
    static const char *const keys[KVT_FIM_COUNT][2] = {
        {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"},
        {"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"},
        {"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"},
        {"tokenizer.ggml.fim_pad_token_id", NULL},
        {"tokenizer.ggml.fim_rep_token_id", NULL},
        {"tokenizer.ggml.fim_sep_token_id", NULL}};
    static const char *const texts[KVT_FIM_COUNT][4] = {{"<|fim_prefix|>", "<fim-prefix>",
                                                         "<\xef\xbd\x9c"
                                                         "fim\xe2\x96\x81"
                                                         "begin\xef\xbd\x9c>",
                                                         "<PRE>"},
                                                        {"<|fim_suffix|>", "<fim-suffix>",
                                                         "<\xef\xbd\x9c"
                                                         "fim\xe2\x96\x81"
                                                         "hole\xef\xbd\x9c>",
                                                         "<SUF>"},
                                                        {"<|fim_middle|>", "<fim-middle>",
                                                         "<\xef\xbd\x9c"
                                                         "fim\xe2\x96\x81"
                                                         "end\xef\xbd\x9c>",
                                                         "<MID>"},
                                                        {"<|fim_pad|>", "<fim-pad>", "<PAD>", NULL},
                                                        {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"},
                                                        {"<|file_sep|>", NULL, NULL, NULL}};
    for (int k = 0; k < KVT_FIM_COUNT; k++) {
        t->fim[k] = -1;
        for (int j = 0; j < 2; j++)
            if (keys[k][j]) read_id(g, keys[k][j], t->n_vocab, &t->fim[k]);
        for (int j = 0; j < 4 && t->fim[k] < 0 && texts[k][j]; j++)
            t->fim[k] = kvt_tok_lookup(t, texts[k][j], strlen(texts[k][j]));
        if (t->fim[k] >= 0 && (k == KVT_FIM_PAD || k == KVT_FIM_REP || k == KVT_FIM_SEP)) t->eog[t->fim[k]] = 1;
    }
}

/* Special ids, fix-ups by text, EOG set, and the list of splittable tokens. */
static void load_specials(kvt_tokenizer *t, const kvt_gguf *g) {
    int spm = t->kind == KVT_TOK_SPM;
    /* llama.cpp's defaults: SPM <unk>=0 <s>=1 </s>=2; BPE none (llama.cpp says 11). */
    t->unk = spm && t->n_vocab > 0 ? 0 : -1;
    t->bos = spm && t->n_vocab > 1 ? 1 : -1;
    t->eos = spm && t->n_vocab > 2 ? 2 : -1;
    int32_t eot = -1, eom = -1;
    read_id(g, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos);
    read_id(g, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos);
    read_id(g, "tokenizer.ggml.unknown_token_id", t->n_vocab, &t->unk);
    read_id(g, "tokenizer.ggml.eot_token_id", t->n_vocab, &eot);
    read_id(g, "tokenizer.ggml.eom_token_id", t->n_vocab, &eom);

    int64_t v;
    /* the file's word over the vocabulary type's default (set before this) */
    if (kvt_gguf_get_int(g, "tokenizer.ggml.add_bos_token", &v) == 0) t->add_bos = v != 0;
    if (kvt_gguf_get_int(g, "tokenizer.ggml.add_eos_token", &v) == 0) t->add_eos = v != 0;
    if (kvt_gguf_get_int(g, "tokenizer.ggml.add_space_prefix", &v) == 0) t->add_space_prefix = v != 0;

    for (size_t i = 0; i < KVT_ARRAY_LEN(control_names); i++) {
        int32_t id = kvt_tok_lookup(t, control_names[i].text, strlen(control_names[i].text));
        if (id < 0) continue;
        if (t->tok[id].type != KVT_TOKEN_CONTROL) {
            kvt_logk(KVT_LOG_DEBUG, "token,text", "tokenizer: token %d '%s' looks like a control token; typed CONTROL",
                     id, control_names[i].text);
            t->tok[id].type = KVT_TOKEN_CONTROL;
        }
        if (control_names[i].eog || (i == DEEPSEEK_EOS_INDEX && eot < 0)) t->eog[id] = 1;
    }
    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (eot >= 0) t->eog[eot] = 1;
    if (eom >= 0) t->eog[eom] = 1;
    static const char *const eot_texts[] = {"<|eot_id|>",    "<|im_end|>",    "<|end|>",
                                            "<end_of_turn>", "<|endoftext|>", "<EOT>"};
    t->eot = eot;
    for (size_t i = 0; i < KVT_ARRAY_LEN(eot_texts) && t->eot < 0; i++)
        t->eot = kvt_tok_lookup(t, eot_texts[i], strlen(eot_texts[i]));
    load_fim(t, g);

    len_id *order = kvt_xmalloc((size_t)t->n_vocab * sizeof *order);
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (is_special_type(t->tok[i].type)) order[t->n_special++] = (len_id){t->tok[i].len, i};
    qsort(order, t->n_special, sizeof *order, special_cmp);
    t->special = kvt_xmalloc((t->n_special ? t->n_special : 1) * sizeof *t->special);
    for (size_t i = 0; i < t->n_special; i++) t->special[i] = order[i].id;
    free(order);
}

/* See tokenizer_impl.h: why every byte of a fragment is covered, and by how much. */
static uint32_t cover_bound(const kvt_tokenizer *t) {
    /* SPM: merges only ever form tokens, and a symbol that is no token becomes
     * one byte (or <unk>) token per byte, or the call fails. BPE: the same
     * holds when every byte has a token and every merge forms a token. */
    if (t->kind == KVT_TOK_BPE) {
        for (int b = 0; b < KVT_N_BYTES; b++)
            if (t->byte_tok[b] < 0) return 0;
        for (uint64_t i = 0; t->merges && i <= t->merge_mask; i++)
            if (t->merges[i].rank >= 0 && t->merges[i].result < 0) return 0;
    }
    /* a token's text is at least as long as the raw bytes it stands for: SPM
     * writes a space as 3 bytes, byte-level BPE each byte as 1 or 2 */
    uint32_t m = 1;
    for (int32_t i = 0; i < t->n_vocab; i++) m = KVT_MAX(m, t->tok[i].len);
    return m;
}

int kvt_tokenizer_load(const kvt_gguf *g, kvt_tokenizer **out) {
    *out = NULL;
    const char *model;
    int rc = kvt_gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (rc == KVT_ENOTFOUND) return kvt_fail(KVT_ENOTFOUND, "no tokenizer.ggml.model");
    if (rc) return kvt_fail(rc, "tokenizer.ggml.model is not a string");
    kvt_tokenizer *t = kvt_xcalloc(1, sizeof *t);
    if (!strcmp(model, "llama")) {
        t->kind = KVT_TOK_SPM;
        t->add_bos = 1;
        t->add_space_prefix = 1;
        t->pre_name = "spm";
    } else if (!strcmp(model, "gpt2")) {
        t->kind = KVT_TOK_BPE;
    } else {
        kvt_tokenizer_free(t);
        return kvt_fail(KVT_EUNSUPPORTED, "tokenizer model '%s' (supported: llama, gpt2)", model);
    }
    rc = load_vocab(t, g);
    if (!rc && t->kind == KVT_TOK_BPE) rc = kvt_bpe_init(t, g); /* sets pre_name, add_bos, byte_tok */
    if (rc) {
        kvt_tokenizer_free(t);
        return rc;
    }
    if (t->kind == KVT_TOK_SPM) {
        for (int b = 0; b < KVT_N_BYTES; b++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            t->byte_tok[b] = kvt_tok_lookup(t, name, strlen(name));
            if (t->byte_tok[b] < 0) { /* llama.cpp falls back to the byte as a one-character token */
                char c = (char)b;
                t->byte_tok[b] = kvt_tok_lookup(t, &c, 1);
            }
        }
    }
    load_specials(t, g);
    const char *pre = NULL;
    kvt_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    set_strip_attrs(t, g, pre);
    t->max_cover = cover_bound(t);
    *out = t;
    return 0;
}

void kvt_tokenizer_free(kvt_tokenizer *t) {
    if (!t) return;
    kvt_bpe_free(t);
    free(t->tok);
    free(t->pool);
    free(t->slots);
    free(t->eog);
    free(t->special);
    free(t);
}

/* ---- accessors ---- */

int32_t kvt_tokenizer_n_vocab(const kvt_tokenizer *t) { return t->n_vocab; }
int32_t kvt_tokenizer_bos(const kvt_tokenizer *t) { return t->bos; }
int32_t kvt_tokenizer_eos(const kvt_tokenizer *t) { return t->eos; }
int32_t kvt_tokenizer_eot(const kvt_tokenizer *t) { return t->eot; }
int32_t kvt_tokenizer_fim(const kvt_tokenizer *t, int which) {
    return which >= 0 && which < KVT_FIM_COUNT ? t->fim[which] : -1;
}
int kvt_tokenizer_is_eog(const kvt_tokenizer *t, int32_t tok) { return tok >= 0 && tok < t->n_vocab && t->eog[tok]; }
int kvt_tokenizer_add_special(const kvt_tokenizer *t) {
    return (t->add_bos ? KVT_TOK_ADD_BOS : 0) | (t->add_eos ? KVT_TOK_ADD_EOS : 0);
}
const char *kvt_tokenizer_kind(const kvt_tokenizer *t) {
    return t->kind == KVT_TOK_SPM ? "llama (SentencePiece)" : "gpt2 (byte-level BPE)";
}
const char *kvt_tokenizer_pre(const kvt_tokenizer *t) { return t->pre_name; }

int kvt_tokenizer_continues(const kvt_tokenizer *t, int32_t prev) {
    return prev >= 0 && prev < t->n_vocab && !is_special_type(t->tok[prev].type) ? KVT_TOK_CONTINUES : 0;
}

size_t kvt_tokenizer_stripped_after(const kvt_tokenizer *t, int32_t prev, const char *text, size_t len) {
    size_t k = 0;
    if (prev >= 0 && prev < t->n_vocab && (t->tok[prev].strip & KVT_TOK_RSTRIP))
        while (k < len && isspace((unsigned char)text[k])) k++;
    return k;
}

int kvt_tokenizer_token_type(const kvt_tokenizer *t, int32_t tok) {
    if (tok < 0 || tok >= t->n_vocab) return kvt_fail(KVT_EARG, "token id %d not in [0, %d)", tok, t->n_vocab);
    return t->tok[tok].type;
}

const char *kvt_tokenizer_token_text(const kvt_tokenizer *t, int32_t tok, size_t *len) {
    if (tok < 0 || tok >= t->n_vocab) return NULL;
    *len = t->tok[tok].len;
    return t->pool + t->tok[tok].off;
}

int32_t kvt_tokenizer_find(const kvt_tokenizer *t, const char *text, size_t len) {
    return kvt_tok_lookup(t, text, len);
}

/* ---- tokenize ---- */

/* A piece of the input: raw text [off, off+len) when id < 0, else a special token. */
typedef struct {
    size_t off, len;
    int32_t id;
} fragment;

typedef struct {
    fragment *v;
    size_t n, cap;
} fragvec;

static void frag_push(fragvec *fv, size_t off, size_t len, int32_t id) {
    if (fv->n == fv->cap) {
        fv->cap = fv->cap ? fv->cap * 2 : 16;
        fv->v = kvt_xrealloc(fv->v, fv->cap * sizeof *fv->v);
    }
    fv->v[fv->n++] = (fragment){off, len, id};
}

static int any_set(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 1;
    return 0;
}

/* llama.cpp's order: each special token in turn (longest first) splits every
 * remaining text fragment at each of its occurrences. Gives up, returning -1,
 * once more than max_special special tokens are found (each is a token of the
 * result, so a text with that many cannot fit); else 0. */
static int split_specials(const kvt_tokenizer *t, const char *text, size_t len, int parse_special,
                          const unsigned char *plain, size_t max_special, fragvec *fv) {
    frag_push(fv, 0, len, -1);
    fragvec next = {0};
    size_t n_special = 0; /* special fragments in fv */
    for (size_t s = 0; s < t->n_special; s++) {
        int32_t id = t->special[s];
        const kvt_tok_info *ti = &t->tok[id];
        if (!parse_special && ti->type != KVT_TOKEN_USER_DEFINED) continue;
        const char *needle = t->pool + ti->off;
        int found = 0;
        next.n = 0;
        for (size_t f = 0; f < fv->n; f++) {
            fragment fr = fv->v[f];
            if (fr.id >= 0 || fr.len < ti->len) {
                frag_push(&next, fr.off, fr.len, fr.id);
                continue;
            }
            size_t off = fr.off, end = fr.off + fr.len, from = off;
            for (;;) {
                const char *m = memmem(text + from, end - from, needle, ti->len);
                if (!m) break;
                if (plain && ti->type != KVT_TOKEN_USER_DEFINED && any_set(plain + (m - text), ti->len)) {
                    from = (size_t)(m - text) + 1; /* the text of a message: not the control token */
                    continue;
                }
                found = 1;
                if (++n_special > max_special) {
                    free(next.v);
                    return -1;
                }
                size_t mpos = (size_t)(m - text);
                size_t left_end = mpos;
                if (ti->strip & KVT_TOK_LSTRIP)
                    while (left_end > off && isspace((unsigned char)text[left_end - 1])) left_end--;
                if (left_end > off) frag_push(&next, off, left_end - off, -1);
                frag_push(&next, mpos, ti->len, id);
                off = mpos + ti->len;
                if (ti->strip & KVT_TOK_RSTRIP)
                    while (off < end && isspace((unsigned char)text[off])) off++;
                from = off;
            }
            if (off < end) frag_push(&next, off, end - off, -1);
        }
        if (found) {
            fragvec tmp = *fv;
            *fv = next;
            next = tmp;
        }
    }
    free(next.v);
    return 0;
}

int kvt_tokenize(const kvt_tokenizer *t, const char *text, size_t len, int add, int parse_special, int32_t **out,
                 size_t *n_out) {
    return kvt_tokenize_max(t, text, len, add, parse_special, SIZE_MAX, out, n_out);
}

int kvt_tokenize_max(const kvt_tokenizer *t, const char *text, size_t len, int add, int parse_special,
                     size_t max_tokens, int32_t **out, size_t *n_out) {
    return kvt_tokenize_marked(t, text, len, add, parse_special, NULL, max_tokens, out, n_out);
}

int kvt_tokenize_marked(const kvt_tokenizer *t, const char *text, size_t len, int add, int parse_special,
                        const unsigned char *plain, size_t max_tokens, int32_t **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    if (!text && len) return kvt_fail(KVT_EARG, "tokenize: NULL text");
    if (len > KVT_TOKENIZE_MAX_BYTES)
        return kvt_fail(KVT_ELIMIT, "tokenize: %zu bytes of text (at most %zu)", len, KVT_TOKENIZE_MAX_BYTES);
    if ((add & KVT_TOK_ADD_BOS) && t->bos < 0)
        return kvt_fail(KVT_ENOTFOUND, "tokenize: the vocabulary has no BOS token");
    if ((add & KVT_TOK_ADD_EOS) && t->eos < 0)
        return kvt_fail(KVT_ENOTFOUND, "tokenize: the vocabulary has no EOS token");
    kvt_tokvec tv = {0};
    if (add & KVT_TOK_ADD_BOS) kvt_tokvec_push(&tv, t->bos);
    fragvec fv = {0};
    int rc = 0;
    if (len && split_specials(t, text, len, parse_special, plain, max_tokens - KVT_MIN(tv.n, max_tokens), &fv)) {
        rc = KVT_ELIMIT;
        fv.n = 0;
    }
    if (!rc && max_tokens != SIZE_MAX) {
        /* at least one token per special fragment and per max_cover bytes of text */
        size_t lower = tv.n;
        for (size_t f = 0; f < fv.n && t->max_cover; f++)
            lower += fv.v[f].id >= 0 ? 1 : (fv.v[f].len + t->max_cover - 1) / t->max_cover;
        if (lower > max_tokens) rc = KVT_ELIMIT;
    }
    /* SPM prefixes a space at the start (unless the text continues other text) and after each special token */
    int prev_special = !(add & KVT_TOK_CONTINUES);
    for (size_t f = 0; f < fv.n && !rc; f++) {
        const fragment *fr = &fv.v[f];
        if (fr->id >= 0) {
            kvt_tokvec_push(&tv, fr->id);
            prev_special = 1;
        } else {
            if (t->kind == KVT_TOK_SPM)
                rc = kvt_spm_tokenize(t, text + fr->off, fr->len, t->add_space_prefix && prev_special, &tv);
            else rc = kvt_bpe_tokenize(t, text + fr->off, fr->len, max_tokens, &tv);
            prev_special = 0;
        }
        if (!rc && tv.n > max_tokens) rc = KVT_ELIMIT;
    }
    free(fv.v);
    if (rc == KVT_ELIMIT) kvt_fail(rc, "tokenize: the text has more than %zu tokens", max_tokens);
    if (rc) {
        free(tv.v);
        return rc;
    }
    if (add & KVT_TOK_ADD_EOS) kvt_tokvec_push(&tv, t->eos);
    /* as llama.cpp: legal, but almost always a prompt that already had its BOS */
    if ((add & KVT_TOK_ADD_BOS) && tv.n >= 2 && tv.v[1] == t->bos)
        kvt_log(KVT_LOG_WARN, "tokenize: the text starts with BOS and another was added: two BOS tokens");
    *out = tv.v;
    *n_out = tv.n;
    return 0;
}

/* ---- pieces ---- */

static const char spm_space[] = "\xe2\x96\x81"; /* U+2581, SentencePiece's visible space */
#define SPM_SPACE_LEN 3

/* Parses "<0xNN>"; returns the byte or -1. */
static int parse_byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>' || !isxdigit((unsigned char)s[3]) || !isxdigit((unsigned char)s[4]))
        return -1;
    char hex[3] = {s[3], s[4], 0};
    return (int)strtol(hex, NULL, 16);
}

static size_t copy_out(char *buf, size_t cap, size_t at, const char *s, size_t n) {
    if (at < cap) memcpy(buf + at, s, KVT_MIN(n, cap - at));
    return at + n;
}

int kvt_token_piece(const kvt_tokenizer *t, int32_t tok, char *buf, size_t cap, int render_special) {
    if (tok < 0 || tok >= t->n_vocab) return kvt_fail(KVT_EARG, "token id %d not in [0, %d)", tok, t->n_vocab);
    const kvt_tok_info *ti = &t->tok[tok];
    const char *s = t->pool + ti->off;
    switch (ti->type) {
    case KVT_TOKEN_CONTROL:
    case KVT_TOKEN_UNKNOWN:
        if (!render_special) return 0;
        /* fall through */
    case KVT_TOKEN_USER_DEFINED: copy_out(buf, cap, 0, s, ti->len); return (int)ti->len;
    case KVT_TOKEN_NORMAL: break;
    case KVT_TOKEN_BYTE:
        if (t->kind == KVT_TOK_SPM) {
            int b = parse_byte_token(s, ti->len);
            if (b < 0) return (int)copy_out(buf, cap, 0, s, ti->len); /* malformed: show the text */
            char c = (char)b;
            copy_out(buf, cap, 0, &c, 1);
            return 1;
        }
        return 0;      /* llama.cpp renders BPE byte-typed tokens as nothing */
    default: return 0; /* unused / undefined */
    }
    if (t->kind == KVT_TOK_BPE) return (int)kvt_bpe_decode(s, ti->len, buf, cap);
    size_t at = 0;
    for (size_t i = 0; i < ti->len;) {
        if (ti->len - i >= SPM_SPACE_LEN && !memcmp(s + i, spm_space, SPM_SPACE_LEN)) {
            at = copy_out(buf, cap, at, " ", 1);
            i += SPM_SPACE_LEN;
        } else {
            at = copy_out(buf, cap, at, s + i, 1);
            i++;
        }
    }
    return (int)at;
}

uint8_t *kvt_tokens_containing(const kvt_tokenizer *t, int32_t n_ids, const char *const *strs, int32_t n) {
    int32_t n_tok = KVT_MIN(n_ids, kvt_tokenizer_n_vocab(t));
    uint8_t *map = kvt_xcalloc((size_t)KVT_MAX(n_ids, 1), 1);
    char buf[256];
    for (int32_t id = 0; id < n_tok && n > 0; id++) {
        int len = kvt_token_piece(t, id, buf, sizeof buf, 1);
        size_t have = len < 0 ? 0 : KVT_MIN((size_t)len, sizeof buf); /* a longer piece is judged on its start */
        for (int32_t i = 0; i < n && !map[id]; i++) {
            size_t sl = strlen(strs[i]);
            for (size_t at = 0; at + sl <= have && !map[id]; at++) map[id] = !memcmp(buf + at, strs[i], sl);
        }
    }
    return map;
}

int kvt_detokenize(const kvt_tokenizer *t, const int32_t *toks, size_t n, int render_special, char **out, size_t *len) {
    *out = NULL;
    if (len) *len = 0;
    size_t cap = 64, used = 0;
    char *s = kvt_xmalloc(cap);
    int strip = t->kind == KVT_TOK_SPM && t->add_space_prefix;
    int at_fragment_start = 1;
    for (size_t i = 0; i < n; i++) {
        int k = kvt_token_piece(t, toks[i], s + used, cap - used - 1, render_special);
        if (k < 0) {
            free(s);
            return k;
        }
        if ((size_t)k > cap - used - 1) {
            while ((size_t)k > cap - used - 1) cap *= 2;
            s = kvt_xrealloc(s, cap);
            kvt_token_piece(t, toks[i], s + used, cap - used - 1, render_special);
        }
        uint8_t type = t->tok[toks[i]].type;
        if (is_special_type(type)) {
            /* text after a split-out token got its own space prefix */
            at_fragment_start = 1;
        } else {
            if (strip && at_fragment_start && k > 0 && s[used] == ' ') {
                memmove(s + used, s + used + 1, (size_t)k - 1);
                k--;
            }
            at_fragment_start = 0;
        }
        used += (size_t)k;
    }
    s[used] = 0;
    *out = s;
    if (len) *len = used;
    return 0;
}
