// SPDX-License-Identifier: MIT
/* A lazy grammar: the text is free until it contains a trigger, and from the
 * trigger on it must be documents of compiled schemas (json_grammar.h). It is
 * how the tool calls a model writes of its own accord (tool_choice "auto")
 * are held to the functions' parameters: the family's call opening is the
 * trigger, the rest of each call a tagged schema.
 *
 * The shape after the trigger: a document of first; then, where next is set,
 * any number of documents of next (each head holds its separator); then the
 * text end, and nothing more. A token that completes the trigger may carry
 * text past it: that text is fed to first at once, and the mask refuses the
 * tokens whose text past the trigger first refuses, so a token is never
 * taken that the grammar would then refuse. A control token that stands for
 * the trigger (its piece is empty: Mistral's [TOOL_CALLS]) switches it on as
 * well; the caller renders that token as the trigger's text.
 *
 * Before the trigger the cost per token is the scan of that token's bytes
 * and a precomputed list of the few tokens that hold the whole trigger and
 * go on past it with text first refuses; only while the text ends with a
 * part of the trigger are the tokens holding the trigger's last byte tried.
 *
 * Thread-safety: a spec is immutable once built and may be shared; a
 * matcher is one sequence's, not thread-safe. */
#ifndef KVT_JSON_LAZY_H
#define KVT_JSON_LAZY_H

#include <stddef.h>
#include <stdint.h>

#include "json_grammar.h"

#define KVT_JG_LAZY_MAX_TRIGGER 32 /* bytes of a trigger */

typedef struct {
    char *trigger;        /* 1..KVT_JG_LAZY_MAX_TRIGGER bytes (owned) */
    int anchored;         /* 1: the trigger counts only where it opens the text (whitespace before it) */
    kvt_jg_schema *first; /* what follows the trigger (owned) */
    kvt_jg_schema *next;  /* after each document, another of next may follow; NULL: none (owned) */
    char *end;            /* text that closes the documents before the text may end; "" none (owned) */
} kvt_jg_lazy_spec;

/* Frees s, its texts and schemas (NULL: nothing); in kvt_runtime_json, with the schema compiler. */
void kvt_jg_lazy_spec_free(kvt_jg_lazy_spec *s);

typedef struct kvt_jg_lazy kvt_jg_lazy;

/* A matcher at the start of the text, over v's tokens; trigger_tok is a
 * control token standing for the trigger, or -1. s and v must outlive it.
 * NULL when the trigger is empty or too long. Free with kvt_jg_lazy_free. */
kvt_jg_lazy *kvt_jg_lazy_new(const kvt_jg_lazy_spec *s, const kvt_jg_vocab *v, int32_t trigger_tok);
void kvt_jg_lazy_free(kvt_jg_lazy *l);

/* 1 once the trigger was seen: every token must then come from
 * kvt_jg_lazy_mask. */
int kvt_jg_lazy_on(const kvt_jg_lazy *l);
/* Before the trigger: writes to out[0..cap) the tokens that may not come
 * next (they would complete the trigger with text first refuses) and returns
 * their number; every other token may. 0 once the grammar is on. */
int32_t kvt_jg_lazy_refused(kvt_jg_lazy *l, int32_t *out, int32_t cap);
/* mask[0..n_vocab) as kvt_jg_mask (budget: tokens left, this one included):
 * before the trigger every token but the refused ones; in a document its
 * matcher's mask; after one, the tokens that begin the next document (where
 * its shortest form fits the budget), those of end, and the end of
 * generation once end is written. Returns how many are allowed. */
int32_t kvt_jg_lazy_mask(kvt_jg_lazy *l, int32_t budget, uint8_t *mask);
/* Advances past tok. 0, or KVT_EARG (state unchanged) when tok is refused. */
int kvt_jg_lazy_accept(kvt_jg_lazy *l, int32_t tok);
/* 1 when nothing may follow (the last document and end are written). */
int kvt_jg_lazy_done(const kvt_jg_lazy *l);
/* 1 when the text may end here: before the trigger, or after a document
 * and end. */
int kvt_jg_lazy_can_end(const kvt_jg_lazy *l);

#endif
