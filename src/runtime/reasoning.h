// SPDX-License-Identifier: MIT
/* Splitting a reply's reasoning from its answer as text arrives: a reply that
 * opens with "<think>" (or whose prompt opened it) has its reasoning up to
 * "</think>", the answer after it; both lose the whitespace at their start,
 * the reasoning also at its end (llama-server's "deepseek" format). A tag cut
 * between two pieces of streamed text is held back until it is whole, so the
 * pieces a stream sends join to what the whole text splits into. */
#ifndef KVT_REASONING_H
#define KVT_REASONING_H

#include <stddef.h>

typedef struct {
    int mode; /* 0: before the reply's first text, 1: reasoning, 2: answer */
    int trim; /* drop whitespace at the start of the reasoning or the answer */
} kvt_reasoning;

/* A splitter for a reply whose prompt ended inside "<think>" (opened = 1) or not. */
kvt_reasoning kvt_reasoning_start(int opened);

/* Reads text[0..n), the reply's text not yet consumed. r_off, r_len and
 * c_off, c_len get the reasoning and answer parts of it (offsets into text;
 * lengths 0 when none). Returns the bytes consumed; the rest (a tag's start)
 * must be given again with what follows. final: the reply is complete, so
 * everything is consumed. */
size_t kvt_reasoning_feed(kvt_reasoning *st, const char *text, size_t n, int final, size_t *r_off, size_t *r_len,
                          size_t *c_off, size_t *c_len);

#endif
