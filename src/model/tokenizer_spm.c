// SPDX-License-Identifier: MIT
/* SentencePiece-style tokenization of one text fragment, as llama.cpp does it:
 * spaces become U+2581, the text is cut into UTF-8 characters, and adjacent
 * symbols whose concatenation is a token are merged, highest score first
 * (leftmost on ties), until no pair forms a token. Symbols that are not tokens
 * are emitted as <0xNN> byte tokens. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tokenizer_impl.h"

static const char spm_space[] = "\xe2\x96\x81";
#define SPM_SPACE_LEN 3

typedef struct {
    uint32_t start, n;  /* bytes in the escaped text; n == 0 once merged away */
    int32_t prev, next; /* neighbours in the live chain, -1 at the ends */
} spm_symbol;

static void try_bigram(const kvt_tokenizer *t, const char *text, const spm_symbol *sym, int32_t left, int32_t right,
                       kvt_bigram_heap *heap) {
    if (left < 0 || right < 0) return;
    uint32_t size = sym[left].n + sym[right].n;
    int32_t id = kvt_tok_lookup(t, text + sym[left].start, size);
    if (id < 0) return;
    /* min-heap: the highest score must come out first */
    kvt_heap_push(heap, (kvt_bigram){-(double)t->tok[id].score, left, right, size, id});
}

int kvt_spm_tokenize(const kvt_tokenizer *t, const char *raw, size_t len, int add_prefix, kvt_tokvec *out) {
    /* escaped text: optional prefix space, every ' ' as U+2581 */
    size_t cap = (len + 1) * SPM_SPACE_LEN;
    char *text = kvt_xmalloc(cap);
    size_t n = 0;
    if (add_prefix) {
        memcpy(text, spm_space, SPM_SPACE_LEN);
        n = SPM_SPACE_LEN;
    }
    for (size_t i = 0; i < len; i++) {
        if (raw[i] == ' ') {
            memcpy(text + n, spm_space, SPM_SPACE_LEN);
            n += SPM_SPACE_LEN;
        } else {
            text[n++] = raw[i];
        }
    }
    if (n == 0) {
        free(text);
        return 0;
    }

    spm_symbol *sym = kvt_xmalloc(n * sizeof *sym);
    int32_t n_sym = 0;
    for (size_t off = 0; off < n;) {
        size_t cl = KVT_MIN(kvt_utf8_len((uint8_t)text[off]), n - off);
        sym[n_sym] = (spm_symbol){(uint32_t)off, (uint32_t)cl, n_sym - 1, off + cl == n ? -1 : n_sym + 1};
        n_sym++;
        off += cl;
    }

    kvt_bigram_heap heap = {0};
    for (int32_t i = 1; i < n_sym; i++) try_bigram(t, text, sym, i - 1, i, &heap);
    while (heap.n) {
        kvt_bigram b = kvt_heap_pop(&heap);
        spm_symbol *l = &sym[b.left], *r = &sym[b.right];
        /* stale: one side was merged into something else since this was queued */
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        try_bigram(t, text, sym, l->prev, b.left, &heap);
        try_bigram(t, text, sym, b.left, l->next, &heap);
    }
    free(heap.v);

    int rc = 0;
    for (int32_t i = 0; i != -1 && !rc; i = sym[i].next) {
        int32_t id = kvt_tok_lookup(t, text + sym[i].start, sym[i].n);
        if (id >= 0) {
            kvt_tokvec_push(out, id);
            continue;
        }
        for (uint32_t j = 0; j < sym[i].n; j++) {
            uint8_t byte = (uint8_t)text[sym[i].start + j];
            int32_t bt = t->byte_tok[byte] >= 0 ? t->byte_tok[byte] : t->unk;
            if (bt < 0) {
                rc = kvt_fail(KVT_ENOTFOUND, "tokenize: byte 0x%02x has no token and the vocabulary has no <unk>", byte);
                break;
            }
            kvt_tokvec_push(out, bt);
        }
    }
    free(sym);
    free(text);
    return rc;
}
