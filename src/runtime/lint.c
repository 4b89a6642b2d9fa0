// SPDX-License-Identifier: MIT
/* Prompt lint (see lint.h): shared prefixes, first divergences and their
 * likely causes, the reusable fraction now and after the suggested fixes. */
#include "lint.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define PIECE_CAP 128
#define MAX_RUN_LINES 256   /* lines compared when looking for a reordered run (padding lines included) */
#define MAX_VALUE_TOKENS 12 /* longest differing run taken for a timestamp or an id */

const char *kvt_lint_cause_name(kvt_lint_cause c) {
    static const char *const names[KVT_LINT_CAUSE_COUNT] = {"none",    "short_prefix", "timestamp",
                                                            "user_id", "reordered",    "content"};
    return (unsigned)c < KVT_LINT_CAUSE_COUNT ? names[c] : "?";
}

const char *kvt_lint_cause_label(kvt_lint_cause c) {
    static const char *const labels[KVT_LINT_CAUSE_COUNT] = {"no divergence",
                                                             "a prompt shorter than one block",
                                                             "a timestamp or counter near the top",
                                                             "a per-user or per-session id near the top",
                                                             "reordered tools/documents",
                                                             "different content"};
    return (unsigned)c < KVT_LINT_CAUSE_COUNT ? labels[c] : "?";
}

static int piece(const kvt_tokenizer *t, int32_t tok, char *buf) {
    int len = kvt_token_piece(t, tok, buf, PIECE_CAP - 1, 1);
    if (len < 0) len = 0;
    if (len > PIECE_CAP - 1) len = PIECE_CAP - 1;
    buf[len] = 0;
    return len;
}

char *kvt_lint_text(const kvt_tokenizer *t, const kvt_lint_prompt *p, int32_t from, int32_t to, char *buf, size_t cap) {
    size_t o = 0;
    if (!cap) return buf;
    from = KVT_MAX(from, 0);
    to = KVT_MIN(to, p->n);
    for (int32_t i = from; i < to && o + 1 < cap; i++) {
        char pc[PIECE_CAP];
        piece(t, p->tokens[i], pc);
        for (const char *s = pc; *s && o + 1 < cap; s++) {
            if (*s == '\n' && o + 2 < cap) {
                buf[o++] = '\\';
                buf[o++] = 'n';
            } else if (*s != '\n') {
                buf[o++] = *s;
            }
        }
    }
    buf[o] = 0;
    return buf;
}

/* ---- lines (segments) ---------------------------------------------------------------- */

static int is_control(const kvt_tokenizer *t, int32_t tok) {
    return kvt_tokenizer_token_type(t, tok) == KVT_TOKEN_CONTROL;
}

/* Tokens of a line without its trailing whitespace-only tokens (the newline). */
static int32_t trimmed_len(const kvt_tokenizer *t, const int32_t *toks, int32_t n) {
    while (n > 0) {
        char pc[PIECE_CAP];
        piece(t, toks[n - 1], pc);
        int blank = 1;
        for (const char *c = pc; *c; c++) blank &= isspace((unsigned char)*c) != 0;
        if (!blank || !*pc) break;
        n--;
    }
    return n;
}

typedef struct {
    int32_t start, end;
} seg;

/* Splits p into lines: each ends after a token whose text holds a newline. *n_out lines. */
static seg *split_lines(const kvt_tokenizer *t, const kvt_lint_prompt *p, int32_t *n_out) {
    seg *v = kvt_xmalloc(((size_t)p->n + 1) * sizeof *v);
    int32_t n = 0, start = 0;
    for (int32_t i = 0; i < p->n; i++) {
        char pc[PIECE_CAP];
        piece(t, p->tokens[i], pc);
        if (is_control(t, p->tokens[i])) { /* template markup stands alone, so a list's last line compares equal */
            if (start < i) v[n++] = (seg){start, i};
            v[n++] = (seg){i, i + 1};
            start = i + 1;
        } else if (strchr(pc, '\n')) {
            v[n++] = (seg){start, i + 1};
            start = i + 1;
        }
    }
    if (start < p->n) v[n++] = (seg){start, p->n};
    *n_out = n;
    return v;
}


static int seg_cmp_tokens(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    for (int32_t i = 0; i < na && i < nb; i++)
        if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return na < nb ? -1 : na > nb;
}

typedef struct {
    const int32_t *toks;
    int32_t n;
} seg_ref;

static int seg_ref_cmp(const void *x, const void *y) {
    const seg_ref *a = x, *b = y;
    return seg_cmp_tokens(a->toks, a->n, b->toks, b->n);
}

/* Lines [a, a+m) of p and [b, b+m) of q: the same multiset in another order? */
static int same_lines_reordered(const kvt_tokenizer *t, const kvt_lint_prompt *p, const seg *ls, int32_t a,
                                const kvt_lint_prompt *q, const seg *lq, int32_t b, int32_t m) {
    seg_ref x[MAX_RUN_LINES], y[MAX_RUN_LINES];
    int in_order = 1, blank = 0; /* blank lines (document padding) take part but are not the reordered items */
    for (int32_t k = 0; k < m; k++) {
        const int32_t *xp = p->tokens + ls[a + k].start, *yp = q->tokens + lq[b + k].start;
        x[k] = (seg_ref){xp, trimmed_len(t, xp, ls[a + k].end - ls[a + k].start)};
        y[k] = (seg_ref){yp, trimmed_len(t, yp, lq[b + k].end - lq[b + k].start)};
        blank += !x[k].n;
        if (seg_ref_cmp(&x[k], &y[k])) in_order = 0;
    }
    if (in_order || m - blank < 2) return 0;
    qsort(x, (size_t)m, sizeof *x, seg_ref_cmp);
    qsort(y, (size_t)m, sizeof *y, seg_ref_cmp);
    for (int32_t k = 0; k < m; k++)
        if (seg_ref_cmp(&x[k], &y[k])) return 0;
    return 1;
}

static int32_t line_of(const seg *ls, int32_t n, int32_t tok) {
    for (int32_t k = 0; k < n; k++)
        if (tok < ls[k].end) return k;
    return n;
}

/* ---- classification ----------------------------------------------------------------- */

/* Whether text looks like a date, a time or a counter: digits and separators only. */
static int stamp_like(const char *s) {
    int digits = 0, letters = 0;
    for (; *s; s++) {
        if (isdigit((unsigned char)*s)) digits++;
        else if (*s == 'T' || *s == 'Z') letters++; /* ISO 8601's date/time separator and UTC mark */
        else if (isalpha((unsigned char)*s)) return 0;
        else if (!strchr(" -:/.,+T", *s)) return 0;
    }
    return digits > 0 && letters <= 2;
}

static int has_digit(const char *s) {
    for (; *s; s++)
        if (isdigit((unsigned char)*s)) return 1;
    return 0;
}

/* First (a, b), smallest a + b, with p[d+a..] and q[d+b..] equal for
 * KVT_LINT_RESYNC tokens (or both at their ends). 0 if none within the shift. */
static int resync(const kvt_lint_prompt *p, const kvt_lint_prompt *q, int32_t d, int32_t *a, int32_t *b) {
    for (int32_t s = 1; s <= 2 * KVT_LINT_MAX_SHIFT; s++)
        for (int32_t x = KVT_MAX(0, s - KVT_LINT_MAX_SHIFT); x <= KVT_MIN(s, KVT_LINT_MAX_SHIFT); x++) {
            int32_t y = s - x, pi = d + x, qi = d + y, k = 0;
            if (pi > p->n || qi > q->n) continue;
            while (k < KVT_LINT_RESYNC && pi + k < p->n && qi + k < q->n && p->tokens[pi + k] == q->tokens[qi + k]) k++;
            if (k == KVT_LINT_RESYNC || (pi + k == p->n && qi + k == q->n)) {
                *a = x, *b = y;
                return 1;
            }
        }
    return 0;
}

/* Moves start back over tokens of the same word (no whitespace in their text). */
static int32_t word_start(const kvt_tokenizer *t, const kvt_lint_prompt *p, int32_t start) {
    char pc[PIECE_CAP];
    while (start > 0) {
        piece(t, p->tokens[start], pc);
        if (isspace((unsigned char)pc[0])) break; /* this token begins a word */
        piece(t, p->tokens[start - 1], pc);
        int ws = 0;
        for (const char *s = pc; *s; s++) ws |= isspace((unsigned char)*s) && s != pc;
        if (ws || !*pc || strchr(pc, '\n')) break;
        if (isspace((unsigned char)pc[0])) {
            start--; /* " 09" begins the word */
            break;
        }
        start--;
    }
    return start;
}

static void classify(const kvt_tokenizer *t, const kvt_lint_prompt *ps, int32_t i, int32_t B, kvt_lint_row *r) {
    const kvt_lint_prompt *p = &ps[i], *q = &ps[r->with];
    int32_t d = r->shared;
    r->span_start = r->span_end = r->with_start = r->with_end = d;
    if (p->n < B) {
        r->cause = KVT_LINT_SHORT;
        return;
    }
    if (d >= p->n || d >= q->n) {
        r->cause = KVT_LINT_NONE;
        return;
    }
    /* reordered lines: from the line holding d on, m >= 2 lines in another order */
    int32_t nlp, nlq;
    seg *lp = split_lines(t, p, &nlp), *lq = split_lines(t, q, &nlq);
    int32_t a = line_of(lp, nlp, d), b = line_of(lq, nlq, d);
    int found = 0;
    if (a < nlp && b < nlq && lp[a].start == lq[b].start)
        for (int32_t m = 2; m <= MAX_RUN_LINES && a + m <= nlp && b + m <= nlq && !found; m++)
            if (same_lines_reordered(t, p, lp, a, q, lq, b, m)) {
                r->cause = KVT_LINT_REORDERED;
                r->span_start = r->with_start = lp[a].start;
                r->span_end = lp[a + m - 1].end;
                r->with_end = lq[b + m - 1].end;
                found = 1;
            }
    free(lp);
    free(lq);
    if (found) return;
    int32_t x, y;
    if (!resync(p, q, d, &x, &y)) {
        r->cause = KVT_LINT_CONTENT;
        return;
    }
    int32_t s = word_start(t, p, d);
    r->span_start = r->with_start = s;
    r->span_end = d + x;
    r->with_end = d + y;
    char tp[256], tq[256];
    kvt_lint_text(t, p, s, d + x, tp, sizeof tp);
    kvt_lint_text(t, q, s, d + y, tq, sizeof tq);
    /* a value, not a passage: a timestamp or an id is a few tokens on both sides */
    int short_run = d + x - s <= MAX_VALUE_TOKENS && d + y - s <= MAX_VALUE_TOKENS;
    if (short_run && stamp_like(tp) && stamp_like(tq)) r->cause = KVT_LINT_TIMESTAMP;
    else if (short_run && (has_digit(tp) || has_digit(tq))) r->cause = KVT_LINT_USER_ID;
    else r->cause = KVT_LINT_CONTENT;
}

/* ---- counting ------------------------------------------------------------------------ */

static int32_t common_prefix(const kvt_lint_prompt *a, const kvt_lint_prompt *b) {
    int32_t n = KVT_MIN(a->n, b->n), k = 0;
    while (k < n && a->tokens[k] == b->tokens[k]) k++;
    return k;
}

/* Tokens of p[i] reused after p[0..i), as the cache attaches them: the whole
 * blocks of the longest shared prefix, cut where one token is left to
 * compute. A prompt whose last block is whole and cached so reuses n - 1
 * tokens (that block's page is shared and its last token computed again),
 * not n - B. */
static int32_t reusable_of(int32_t shared, int32_t n, int32_t B) {
    int32_t r = KVT_MIN(shared / B * B, n - 1);
    return r > 0 ? r : 0;
}

/* Fills rows' shared/with/reusable; returns the total reusable. */
static int64_t count(const kvt_lint_prompt *p, int32_t n, int32_t B, kvt_lint_row *rows) {
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        kvt_lint_row *r = &rows[i];
        r->n_tokens = p[i].n;
        r->shared = 0;
        r->with = -1;
        for (int32_t j = 0; j < i; j++) {
            int32_t c = common_prefix(&p[i], &p[j]);
            if (r->with < 0 || c > r->shared) r->shared = c, r->with = j;
        }
        r->reusable = reusable_of(r->shared, p[i].n, B);
        total += r->reusable;
    }
    return total;
}

/* A prompt with the fixes applied: sorted line runs, then the moved runs at the end. */
typedef struct {
    uint8_t *moved; /* [n] 1 = goes to the end */
    int32_t run_start[8], run_end[8], n_runs;
} fixes;

static void add_run(fixes *f, int32_t s, int32_t e) {
    for (int32_t k = 0; k < f->n_runs; k++)
        if (s < f->run_end[k] && f->run_start[k] < e) return; /* overlaps one already planned */
    if (f->n_runs < 8) {
        f->run_start[f->n_runs] = s;
        f->run_end[f->n_runs++] = e;
    }
}

static int32_t *apply_fixes(const kvt_tokenizer *t, const kvt_lint_prompt *p, const fixes *f, int32_t *n_out) {
    int32_t *out = kvt_xmalloc(((size_t)p->n + 1) * sizeof *out), o = 0;
    for (int32_t i = 0; i < p->n;) {
        int32_t k = 0;
        while (k < f->n_runs && f->run_start[k] != i) k++;
        if (k == f->n_runs) {
            if (!f->moved[i]) out[o++] = p->tokens[i];
            i++;
            continue;
        }
        /* the lines of this run in canonical (sorted) order */
        kvt_lint_prompt sub = {p->tokens + f->run_start[k], f->run_end[k] - f->run_start[k]};
        int32_t nl;
        seg *ls = split_lines(t, &sub, &nl);
        seg_ref *refs = kvt_xmalloc((size_t)(nl ? nl : 1) * sizeof *refs);
        for (int32_t l = 0; l < nl; l++)
            refs[l] = (seg_ref){sub.tokens + ls[l].start,
                                trimmed_len(t, sub.tokens + ls[l].start, ls[l].end - ls[l].start)};
        qsort(refs, (size_t)nl, sizeof *refs, seg_ref_cmp);
        /* position l gets the l-th line in sorted order, then position l's own line ending */
        for (int32_t l = 0; l < nl; l++) {
            for (int32_t m = 0; m < refs[l].n; m++) {
                int32_t at = (int32_t)(refs[l].toks - p->tokens) + m;
                if (!f->moved[at]) out[o++] = p->tokens[at];
            }
            int32_t keep = trimmed_len(t, sub.tokens + ls[l].start, ls[l].end - ls[l].start);
            for (int32_t at = f->run_start[k] + ls[l].start + keep; at < f->run_start[k] + ls[l].end; at++)
                if (!f->moved[at]) out[o++] = p->tokens[at];
        }
        free(refs);
        free(ls);
        i = f->run_end[k];
    }
    for (int32_t i = 0; i < p->n; i++)
        if (f->moved[i]) out[o++] = p->tokens[i];
    *n_out = o;
    return out;
}

int kvt_lint_run(const kvt_tokenizer *t, const kvt_lint_prompt *p, int32_t n, int32_t B, kvt_lint_report *out) {
    memset(out, 0, sizeof *out);
    if (n < 1 || n > KVT_LINT_MAX_PROMPTS || B < 1)
        return kvt_fail(KVT_EARG, "lint needs 1..%d prompts and a block size >= 1", KVT_LINT_MAX_PROMPTS);
    out->n_prompts = n;
    out->block = B;
    out->rows = kvt_xcalloc((size_t)n, sizeof *out->rows);
    out->reusable_tokens = count(p, n, B, out->rows);
    out->common_prefix = p[0].n;
    for (int32_t i = 0; i < n; i++) {
        out->total_tokens += p[i].n;
        if (i) out->common_prefix = KVT_MIN(out->common_prefix, common_prefix(&p[0], &p[i]));
    }
    for (int c = 0; c < KVT_LINT_CAUSE_COUNT; c++) out->cause_example[c] = -1;
    fixes *fx = kvt_xcalloc((size_t)n, sizeof *fx);
    for (int32_t i = 0; i < n; i++) fx[i].moved = kvt_xcalloc((size_t)p[i].n + 1, 1);
    for (int32_t i = 0; i < n; i++) {
        kvt_lint_row *r = &out->rows[i];
        r->cause = KVT_LINT_NONE;
        if (p[i].n < B) r->cause = KVT_LINT_SHORT;
        else if (r->with >= 0) classify(t, p, i, B, r);
        out->cause_count[r->cause]++;
        if (out->cause_example[r->cause] < 0) out->cause_example[r->cause] = i;
        if (r->cause == KVT_LINT_TIMESTAMP || r->cause == KVT_LINT_USER_ID) {
            memset(fx[i].moved + r->span_start, 1, (size_t)(r->span_end - r->span_start));
            memset(fx[r->with].moved + r->with_start, 1, (size_t)(r->with_end - r->with_start));
        } else if (r->cause == KVT_LINT_REORDERED) {
            add_run(&fx[i], r->span_start, r->span_end);
            add_run(&fx[r->with], r->with_start, r->with_end);
        }
    }
    /* the same count over the fixed prompts */
    kvt_lint_prompt *fixed = kvt_xmalloc((size_t)n * sizeof *fixed);
    for (int32_t i = 0; i < n; i++) {
        fixed[i].tokens = apply_fixes(t, &p[i], &fx[i], &fixed[i].n);
        out->total_after += fixed[i].n;
    }
    kvt_lint_row *rows2 = kvt_xcalloc((size_t)n, sizeof *rows2);
    out->reusable_after = count(fixed, n, B, rows2);
    for (int32_t i = 0; i < n; i++) {
        free((void *)fixed[i].tokens);
        free(fx[i].moved);
    }
    free(rows2);
    free(fixed);
    free(fx);
    return 0;
}

void kvt_lint_free(kvt_lint_report *r) {
    free(r->rows);
    r->rows = NULL;
}

/* ---- advice ---------------------------------------------------------------------------- */

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return kvt_xstrdup(buf);
}

char **kvt_lint_advice(const kvt_tokenizer *t, const kvt_lint_prompt *p, const kvt_lint_report *r, int32_t *n_out) {
    char **a = kvt_xcalloc(KVT_LINT_CAUSE_COUNT + 2, sizeof *a);
    int32_t n = 0;
    char ex[96];
    int32_t i;
    if ((i = r->cause_example[KVT_LINT_TIMESTAMP]) >= 0) {
        const kvt_lint_row *w = &r->rows[i];
        a[n++] = fmt("move the timestamp (\"%s\" at token %d) after the tool definitions and documents, next to the "
                     "question: %d prompt(s) stop sharing there",
                     kvt_lint_text(t, &p[i], w->span_start, w->span_end, ex, sizeof ex), w->span_start,
                     r->cause_count[KVT_LINT_TIMESTAMP]);
    }
    if ((i = r->cause_example[KVT_LINT_USER_ID]) >= 0) {
        const kvt_lint_row *w = &r->rows[i];
        a[n++] = fmt("move the per-user/session id (\"%s\" at token %d) out of the top: put it after the shared "
                     "instructions, in the last message",
                     kvt_lint_text(t, &p[i], w->span_start, w->span_end, ex, sizeof ex), w->span_start);
    }
    if ((i = r->cause_example[KVT_LINT_REORDERED]) >= 0)
        a[n++] = fmt("sort the tools/documents by name (a fixed order): %d prompt(s) list the same ones from token %d "
                     "in another order",
                     r->cause_count[KVT_LINT_REORDERED], r->rows[i].span_start);
    if (r->cause_count[KVT_LINT_SHORT])
        a[n++] = fmt("%d prompt(s) are shorter than one block (%d tokens) and are never cached: lengthen the shared "
                     "prefix or use a smaller --block-size",
                     r->cause_count[KVT_LINT_SHORT], r->block);
    if (r->n_prompts > 1 && r->common_prefix >= r->block)
        a[n++] = fmt("pin the system prompt: all %d prompts share their first %d tokens (%d blocks); "
                     "{\"action\":\"pin\"} in `kvtier run -f`, or keep it warm in the server",
                     r->n_prompts, r->common_prefix, r->common_prefix / r->block);
    *n_out = n;
    return a;
}

void kvt_lint_advice_free(char **a, int32_t n) {
    for (int32_t i = 0; i < n; i++) free(a[i]);
    free(a);
}
