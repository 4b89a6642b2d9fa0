// SPDX-License-Identifier: MIT
/* A template's rendering tokenized with the replies kvtier generated spliced
 * in as their exact ids (chat.h, kvt_chat_tokenize_spliced). */
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "common.h"

/* Appends ids[0..n) to *out (*n_out of them, room for *cap); KVT_ELIMIT past max. */
static int append(int32_t **out, size_t *n_out, size_t *cap, const int32_t *ids, size_t n, size_t max) {
    if (n > max - *n_out) return kvt_fail(KVT_ELIMIT, "the conversation has more than %zu tokens", max);
    if (*n_out + n > *cap) {
        *cap = KVT_MAX(*cap * 2, *n_out + n + 64);
        *out = kvt_xrealloc(*out, *cap * sizeof **out);
    }
    if (n) memcpy(*out + *n_out, ids, n * sizeof *ids);
    *n_out += n;
    return 0;
}

int kvt_chat_tokenize_spliced(const kvt_tokenizer *t, const char *text, size_t len, int add, kvt_chat_splice *spans,
                              size_t n_spans, size_t max_tokens, int32_t **out, size_t *n_out) {
    return kvt_chat_tokenize_marked(t, text, NULL, len, add, spans, n_spans, max_tokens, out, n_out);
}

int kvt_chat_tokenize_marked(const kvt_tokenizer *t, const char *text, const unsigned char *plain, size_t len, int add,
                             kvt_chat_splice *spans, size_t n_spans, size_t max_tokens, int32_t **out, size_t *n_out) {
    return kvt_chat_tokenize_after(t, NULL, 0, text, plain, len, add, spans, n_spans, max_tokens, out, n_out);
}

int kvt_chat_tokenize_after(const kvt_tokenizer *t, const int32_t *prefix, size_t n_prefix, const char *text,
                            const unsigned char *plain, size_t len, int add, kvt_chat_splice *spans, size_t n_spans,
                            size_t max_tokens, int32_t **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    size_t cap = 0, pos = 0;
    int rc = n_prefix ? append(out, n_out, &cap, prefix, n_prefix, max_tokens) : 0;
    for (size_t i = 0; i <= n_spans && !rc; i++) {
        size_t end = i < n_spans ? spans[i].at : len;
        if (end < pos || end > len || (i < n_spans && spans[i].len > len - end)) {
            rc = kvt_fail(KVT_EARG, "a spliced reply lies outside the rendering or before the one ahead of it");
            break;
        }
        /* BOS goes before the first piece, EOS after the last, whatever lies between */
        int flags = (i == 0 && !n_prefix ? add & KVT_TOK_ADD_BOS : 0) | (i == n_spans ? add & KVT_TOK_ADD_EOS : 0);
        /* text after a spliced reply goes on from it, as in the text whole: SentencePiece's prefix space only
         * after a special token, whitespace dropped after one that strips it */
        if (*n_out) {
            flags |= kvt_tokenizer_continues(t, (*out)[*n_out - 1]);
            pos += kvt_tokenizer_stripped_after(t, (*out)[*n_out - 1], text + pos, end - pos);
        }
        int32_t *ids = NULL;
        size_t k = 0;
        if (end > pos || flags) {
            rc = kvt_tokenize_marked(t, text + pos, end - pos, flags, 1, plain ? plain + pos : NULL,
                                     max_tokens - *n_out, &ids, &k);
            if (rc == KVT_ELIMIT) kvt_fail(KVT_ELIMIT, "the conversation has more than %zu tokens", max_tokens);
            if (!rc) rc = append(out, n_out, &cap, ids, k, max_tokens);
            free(ids);
        }
        if (!rc && i < n_spans) {
            spans[i].tok_at = *n_out;
            rc = append(out, n_out, &cap, spans[i].ids, spans[i].n, max_tokens);
            pos = end + spans[i].len;
        }
    }
    if (rc) {
        free(*out);
        *out = NULL;
        *n_out = 0;
    }
    return rc;
}
