// SPDX-License-Identifier: MIT
/* A model's vocabulary arranged for the JSON token mask (json_grammar.h):
 * every token's bytes, a preorder trie of all of them, a second trie of the
 * tokens that are not plain string text, and the list of those that are. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "json_grammar_impl.h"

/* Characters of b[0..n) if it is plain string text: whole valid UTF-8
 * characters (no overlongs, no surrogates), none of them a control
 * character, '"' or '\\'; else -1. */
static int32_t plain_chars(const uint8_t *b, size_t n) {
    int32_t chars = 0;
    for (size_t i = 0; i < n; chars++) {
        uint8_t c = b[i];
        int more;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            if (c < 0x20 || c == '"' || c == '\\') return -1;
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) more = 1;
        else if (c == 0xE0) more = 2, lo = 0xA0;
        else if (c == 0xED) more = 2, hi = 0x9F;
        else if (c >= 0xE1 && c <= 0xEF) more = 2;
        else if (c == 0xF0) more = 3, lo = 0x90;
        else if (c >= 0xF1 && c <= 0xF3) more = 3;
        else if (c == 0xF4) more = 3, hi = 0x8F;
        else return -1;
        for (int k = 1; k <= more; k++) {
            if (i + (size_t)k >= n || b[i + k] < lo || b[i + k] > hi) return -1;
            lo = 0x80, hi = 0xBF;
        }
        i += (size_t)more + 1;
    }
    return chars;
}

static const kvt_jg_vocab *sort_vocab; /* qsort has no context argument; building is single-threaded per call */

static int by_bytes(const void *a, const void *b) {
    const kvt_jg_vocab *v = sort_vocab;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx = v->len[x], ly = v->len[y];
    int c = memcmp(v->blob + v->off[x], v->blob + v->off[y], KVT_MIN(lx, ly));
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* A preorder trie of ids[0..n), sorted by their bytes. */
static void trie_build(trie *t, const kvt_jg_vocab *v, const int32_t *ids, int32_t n) {
    size_t cap = 0;
    for (int32_t i = 0; i < n; i++) cap += v->len[ids[i]];
    cap = KVT_MAX(cap, 1);
    t->byte = kvt_xmalloc(cap);
    t->depth = kvt_xmalloc(cap);
    t->skip = kvt_xmalloc(cap * sizeof *t->skip);
    t->tok = kvt_xmalloc(cap * sizeof *t->tok);
    t->next = kvt_xmalloc((size_t)v->n_vocab * sizeof *t->next);
    t->n = 0;
    int32_t path[KVT_JG_MAX_TOKEN + 1];
    int32_t open = 0, prev = -1; /* path[0..open) are the nodes of the previous token */
    for (int32_t i = 0; i < n; i++) {
        int32_t id = ids[i], len = v->len[id];
        const uint8_t *b = v->blob + v->off[id];
        int32_t common = 0;
        if (prev >= 0) {
            const uint8_t *pb = v->blob + v->off[prev];
            int32_t pl = v->len[prev];
            while (common < len && common < pl && pb[common] == b[common]) common++;
        }
        for (int32_t d = common; d < open; d++) t->skip[path[d]] = t->n; /* close the previous path below the fork */
        for (int32_t d = common; d < len; d++) {
            int32_t k = t->n++;
            t->byte[k] = b[d];
            t->depth[k] = (uint8_t)(d + 1);
            t->tok[k] = -1;
            path[d] = k;
        }
        open = len;
        int32_t end = path[len - 1];
        t->next[id] = t->tok[end];
        t->tok[end] = id;
        prev = id;
    }
    for (int32_t d = 0; d < open; d++) t->skip[path[d]] = t->n;
}

static void trie_free(trie *t) {
    free(t->byte);
    free(t->depth);
    free(t->skip);
    free(t->tok);
    free(t->next);
}

kvt_jg_vocab *kvt_jg_vocab_new(const kvt_tokenizer *tk) {
    int32_t nv = kvt_tokenizer_n_vocab(tk);
    if (nv < 1) return NULL;
    kvt_jg_vocab *v = kvt_xcalloc(1, sizeof *v);
    v->n_vocab = nv;
    v->off = kvt_xmalloc((size_t)nv * sizeof *v->off);
    v->len = kvt_xcalloc((size_t)nv, 1);
    v->eog = kvt_xcalloc((size_t)nv, 1);
    size_t cap = 1024, used = 0;
    v->blob = kvt_xmalloc(cap);
    char buf[KVT_JG_MAX_TOKEN + 1];
    for (int32_t id = 0; id < nv; id++) {
        v->eog[id] = kvt_tokenizer_is_eog(tk, id) || id == kvt_tokenizer_eos(tk);
        int len = kvt_token_piece(tk, id, buf, sizeof buf, 0);
        v->off[id] = (uint32_t)used;
        if (len <= 0 || len > KVT_JG_MAX_TOKEN) continue; /* control tokens, and the few very long ones */
        if (used + (size_t)len > cap) {
            cap = KVT_MAX(cap * 2, used + (size_t)len);
            v->blob = kvt_xrealloc(v->blob, cap);
        }
        memcpy(v->blob + used, buf, (size_t)len);
        v->len[id] = (uint8_t)len;
        used += (size_t)len;
    }
    int32_t *ids = kvt_xmalloc((size_t)nv * sizeof *ids), n = 0;
    for (int32_t id = 0; id < nv; id++)
        if (v->len[id]) ids[n++] = id;
    sort_vocab = v;
    qsort(ids, (size_t)n, sizeof *ids, by_bytes);
    trie_build(&v->all, v, ids, n);
    /* split: plain string text apart, the rest in the second trie (still in byte order) */
    v->plain = kvt_xmalloc((size_t)(n ? n : 1) * sizeof *v->plain);
    v->plain_chars = kvt_xmalloc((size_t)(n ? n : 1) * sizeof *v->plain_chars);
    int32_t *other = kvt_xmalloc((size_t)(n ? n : 1) * sizeof *other), n_other = 0;
    v->plain_mask = kvt_xcalloc((size_t)nv, 1);
    for (int32_t i = 0; i < n; i++) {
        int32_t ch = plain_chars(v->blob + v->off[ids[i]], v->len[ids[i]]);
        if (ch > 0) {
            v->plain[v->n_plain] = ids[i];
            v->plain_chars[v->n_plain++] = (uint32_t)ch;
            v->plain_mask[ids[i]] = 1;
            v->max_plain_chars = KVT_MAX(v->max_plain_chars, (uint32_t)ch);
        } else {
            other[n_other++] = ids[i];
        }
    }
    trie_build(&v->special, v, other, n_other);
    free(other);
    free(ids);
    return v;
}

void kvt_jg_vocab_free(kvt_jg_vocab *v) {
    if (!v) return;
    trie_free(&v->all);
    trie_free(&v->special);
    free(v->off);
    free(v->len);
    free(v->blob);
    free(v->plain);
    free(v->plain_chars);
    free(v->plain_mask);
    free(v->eog);
    free(v);
}

int32_t kvt_jg_vocab_size(const kvt_jg_vocab *v) { return v->n_vocab; }
