// SPDX-License-Identifier: MIT
/* Prompt lint: how much of a set of prompts kvtier could reuse if they ran in
 * order through an unbounded cache, where each one stops sharing with the
 * prompts before it, why (by simple heuristics), and how much a fix would
 * gain (docs/api.md "Why did this miss?", `kvtier lint`, GET /v1/cache/lint).
 *
 * Causes, from the first differing token d between a prompt and the earlier
 * prompt it shares the longest prefix with:
 *  - short: the prompt has fewer than B tokens, so nothing of it is cached;
 *  - reordered: from the line (segment) holding d, the next m >= 2 lines of
 *    both prompts are the same lines in another order (tools, documents);
 *  - timestamp: the differing run (until both prompts agree again for
 *    KVT_LINT_RESYNC tokens) is digits and date/time separators;
 *  - user_id: the differing run holds a digit (an id, a ticket number);
 *  both are "values": at most 12 tokens on each side, else it is content;
 *  - content: anything else (the prompts simply say different things).
 * The "after fixes" figure reruns the count with every differing run of a
 * timestamp or id moved to the end of both prompts, and reordered lines
 * sorted, which is what the advice tells the user to do.
 *
 * Cost: O(n^2 * shared prefix) token compares for n prompts (each is compared
 * with every earlier one, stopping at the first difference), so callers cap n
 * (KVT_LINT_MAX_PROMPTS). Thread-safety: reentrant. */
#ifndef KVT_LINT_H
#define KVT_LINT_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

#define KVT_LINT_MAX_PROMPTS 2048
#define KVT_LINT_RESYNC 4     /* equal tokens that end a differing run */
#define KVT_LINT_MAX_SHIFT 24 /* tokens searched on each side for the end of a differing run */

typedef enum {
    KVT_LINT_NONE = 0, /* no divergence (first prompt, or a prefix of an earlier one) */
    KVT_LINT_SHORT,
    KVT_LINT_TIMESTAMP,
    KVT_LINT_USER_ID,
    KVT_LINT_REORDERED,
    KVT_LINT_CONTENT,
    KVT_LINT_CAUSE_COUNT
} kvt_lint_cause;

/* "none", "short_prefix", "timestamp", "user_id", "reordered", "content". */
const char *kvt_lint_cause_name(kvt_lint_cause c);
/* A phrase for people: "a timestamp or counter near the top", ... */
const char *kvt_lint_cause_label(kvt_lint_cause c);

typedef struct {
    const int32_t *tokens; /* borrowed */
    int32_t n;
} kvt_lint_prompt;

typedef struct {
    int32_t n_tokens;
    int32_t shared;   /* longest common prefix with any earlier prompt, in tokens */
    int32_t with;     /* that earlier prompt's index, -1 for none */
    int32_t reusable; /* whole-block tokens of it kvtier would reuse */
    kvt_lint_cause cause;
    int32_t span_start, span_end; /* the differing run (or reordered lines) in this prompt */
    int32_t with_start, with_end; /* ... and in the earlier prompt */
} kvt_lint_row;

typedef struct {
    int32_t n_prompts, block;
    int64_t total_tokens;
    int64_t reusable_tokens; /* now */
    int64_t reusable_after;  /* with the fixes applied */
    int64_t total_after;     /* tokens of the fixed prompts (the same but for rendering) */
    int32_t common_prefix;   /* tokens every prompt starts with */
    int32_t cause_count[KVT_LINT_CAUSE_COUNT];
    int32_t cause_example[KVT_LINT_CAUSE_COUNT]; /* first prompt with that cause, -1 */
    kvt_lint_row *rows;                          /* [n_prompts], owned */
} kvt_lint_report;

/* Lints p[0..n) for blocks of B tokens. t supplies token texts (segments end
 * at a token whose text holds a newline). Returns 0 and *out (free with
 * kvt_lint_free), or KVT_EARG (n outside 1..KVT_LINT_MAX_PROMPTS, B < 1). */
int kvt_lint_run(const kvt_tokenizer *t, const kvt_lint_prompt *p, int32_t n, int32_t B, kvt_lint_report *out);
void kvt_lint_free(kvt_lint_report *r);

/* Advice lines for a report, each a malloc'd string in a malloc'd array of
 * *n_out (free with kvt_lint_advice_free). p and t as given to kvt_lint_run. */
char **kvt_lint_advice(const kvt_tokenizer *t, const kvt_lint_prompt *p, const kvt_lint_report *r, int32_t *n_out);
void kvt_lint_advice_free(char **a, int32_t n);

/* Text of p's tokens [from, to) (clamped; special tokens rendered) into
 * buf[0..cap), newlines shown as "\n" so it fits on one line. Returns buf. */
char *kvt_lint_text(const kvt_tokenizer *t, const kvt_lint_prompt *p, int32_t from, int32_t to, char *buf, size_t cap);

#endif
