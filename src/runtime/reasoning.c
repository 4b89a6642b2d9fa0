// SPDX-License-Identifier: MIT
/* The reasoning splitter (reasoning.h): a small state machine over the text
 * as it grows, holding back only a possible tag's first bytes. */
#include "reasoning.h"

#include <string.h>

#define OPEN "<think>"
#define CLOSE "</think>"

kvt_reasoning kvt_reasoning_start(int opened) { return (kvt_reasoning){.mode = opened ? 1 : 0}; }

static int space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Length of the longest end of text[0..n) that starts tag (a tag cut short). */
static size_t partial_tail(const char *text, size_t n, const char *tag) {
    size_t tl = strlen(tag);
    for (size_t k = tl - 1 < n ? tl - 1 : n; k > 0; k--)
        if (!memcmp(text + n - k, tag, k)) return k;
    return 0;
}

static const char *find(const char *text, size_t n, const char *tag) {
    size_t tl = strlen(tag);
    for (size_t i = 0; i + tl <= n; i++)
        if (!memcmp(text + i, tag, tl)) return text + i;
    return NULL;
}

/* Whitespace at the start of text[pos..n) skipped while st->trim; trim ends at the first other byte. */
static size_t skip_lead(kvt_reasoning *st, const char *text, size_t pos, size_t n) {
    if (!st->trim) return pos;
    while (pos < n && space(text[pos])) pos++;
    if (pos < n) st->trim = 0;
    return pos;
}

size_t kvt_reasoning_feed(kvt_reasoning *st, const char *text, size_t n, int final, size_t *r_off, size_t *r_len,
                          size_t *c_off, size_t *c_len) {
    size_t pos = 0;
    *r_off = *r_len = *c_off = *c_len = 0;
    if (st->mode == 0) { /* the reply's start: "<think>" after whitespace, or the answer */
        size_t ws = 0;
        while (ws < n && space(text[ws])) ws++;
        size_t rest = n - ws, ol = strlen(OPEN);
        if (!final && rest < ol && !memcmp(text + ws, OPEN, rest)) return 0; /* maybe the tag: wait */
        if (rest >= ol && !memcmp(text + ws, OPEN, ol)) {
            st->mode = 1;
            st->trim = 1;
            pos = ws + ol;
        } else {
            st->mode = 2;
        }
    }
    if (st->mode == 1) { /* the reasoning, stripped of whitespace at both ends (held back until more comes) */
        pos = skip_lead(st, text, pos, n);
        const char *close = find(text + pos, n - pos, CLOSE);
        size_t end = close ? (size_t)(close - text) : n - (final ? 0 : partial_tail(text + pos, n - pos, CLOSE));
        size_t keep = end;
        while (keep > pos && space(text[keep - 1])) keep--;
        *r_off = pos;
        *r_len = keep - pos;
        if (!close) return final ? n : keep;
        pos = end + strlen(CLOSE);
        st->mode = 2;
        st->trim = 1;
    }
    pos = skip_lead(st, text, pos, n);
    *c_off = pos;
    *c_len = n - pos;
    return n;
}
