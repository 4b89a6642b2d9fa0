// SPDX-License-Identifier: MIT
/* kvt_reuse_stop in words: token texts via the detokenizer, and the short
 * stats-line form. */
#include "explain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *kvt_reuse_stop_text(const kvt_tokenizer *t, const int32_t *ids, int32_t n, char *buf, size_t cap) {
    char *txt = NULL;
    size_t len = 0;
    if (!cap) return buf;
    buf[0] = 0;
    if (n <= 0 || kvt_detokenize(t, ids, (size_t)n, 1, &txt, &len)) return buf;
    if (len >= cap) len = cap - 1;
    memcpy(buf, txt, len);
    buf[len] = 0;
    free(txt);
    return buf;
}

/* Appends s to out quoted, with newlines, tabs and other control bytes
 * escaped so the stats line stays one line. */
static size_t put_quoted(char *out, size_t o, size_t cap, const char *s) {
    if (o + 1 < cap) out[o++] = '"';
    for (; *s && o + 5 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '\n') o += (size_t)snprintf(out + o, cap - o, "\\n");
        else if (ch == '\t') o += (size_t)snprintf(out + o, cap - o, "\\t");
        else if (ch < 0x20 || ch == '"' || ch == '\\') o += (size_t)snprintf(out + o, cap - o, "\\x%02x", ch);
        else out[o++] = (char)ch;
    }
    if (o + 1 < cap) out[o++] = '"';
    out[o < cap ? o : cap - 1] = 0;
    return o;
}

char *kvt_reuse_stop_line(const kvt_tokenizer *t, const kvt_reuse_stop *s, char *buf, size_t cap) {
    if (!cap) return buf;
    int w = snprintf(buf, cap, "%s@block %d/token %d", kvt_reuse_reason_name(s->reason), s->block, s->token_offset);
    size_t o = w < 0 ? 0 : (size_t)w < cap ? (size_t)w : cap - 1;
    if (t && s->reason == KVT_REUSE_DIVERGED) {
        char a[96], b[96];
        kvt_reuse_stop_text(t, s->prompt_ids, s->n_prompt_ids, a, sizeof a);
        kvt_reuse_stop_text(t, s->cached_ids, s->n_cached_ids, b, sizeof b);
        if (o + 1 < cap) buf[o++] = ' ';
        o = put_quoted(buf, o, cap, a);
        if (o + 4 < cap) o += (size_t)snprintf(buf + o, cap - o, " vs ");
        o = put_quoted(buf, o, cap, b);
    }
    buf[o < cap ? o : cap - 1] = 0;
    return buf;
}
