// SPDX-License-Identifier: MIT
/* The GBNF compiler (gbnf.h): a recursive-descent parser into rules of
 * alternatives, with groups and repetitions turned into rules of their own,
 * then checks (every rule defined, a root, no left recursion, a finite text
 * for every rule) and the shortest text of each position for the budget. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gbnf_impl.h"
#include "json_grammar_impl.h"

#define INF (INT32_MAX / 4)
#define NAME_MAX_LEN 128

typedef struct {
    gsym *s;
    int32_t n, cap;
} seq;

typedef struct {
    char name[NAME_MAX_LEN + 8];
    seq *alts;
    int32_t n_alts, cap_alts;
    int defined, ref_line, ref_col; /* where it was first used, for "undefined rule" */
    const char *rep_at;             /* a repetition's rule: the item and its suffix as written */
    int32_t rep_len;
} grule;

typedef struct {
    const char *p, *start, *end;
    grule *rules;
    int32_t n_rules, cap_rules, n_sym, n_anon;
    uint32_t *lo, *hi;
    int32_t n_rng, cap_rng;
    gclass *cls;
    int32_t n_cls, cap_cls;
    char *err;
    size_t cap;
    int failed;
} parser;

static void where(const parser *p, const char *at, int *line, int *col) {
    *line = 1, *col = 1;
    for (const char *q = p->start; q < at; q++) {
        if (*q == '\n') (*line)++, *col = 1;
        else (*col)++;
    }
}

static int fail_at(parser *p, const char *at, const char *fmt, ...) {
    if (p->failed) return -1;
    p->failed = 1;
    int line, col;
    where(p, at, &line, &col);
    int k = snprintf(p->err, p->cap, "line %d, column %d: ", line, col);
    if (k < 0 || (size_t)k >= p->cap) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + k, p->cap - (size_t)k, fmt, ap);
    va_end(ap);
    return -1;
}

#define fail(p, ...) fail_at(p, (p)->p, __VA_ARGS__)

static int is_name(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips blanks, comments and (where nl) line ends. */
static void skip(parser *p, int nl) {
    while (p->p < p->end) {
        char c = *p->p;
        if (c == ' ' || c == '\t' || c == '\r' || (nl && c == '\n')) p->p++;
        else if (c == '#')
            while (p->p < p->end && *p->p != '\n') p->p++;
        else break;
    }
}

/* 1 when the text at q is `name ::=`: the next rule starts there. */
static int rule_starts(const parser *p, const char *q) {
    if (q >= p->end || !is_name(*q)) return 0;
    while (q < p->end && is_name(*q)) q++;
    while (q < p->end && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n')) q++;
    return p->end - q >= 3 && !memcmp(q, "::=", 3);
}

static void seq_push(seq *s, uint8_t kind, int32_t arg) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->s = kvt_xrealloc(s->s, (size_t)s->cap * sizeof *s->s);
    }
    s->s[s->n++] = (gsym){kind, arg};
}

static int32_t rule_new(parser *p, const char *name, size_t len) {
    if (p->n_rules >= KVT_GBNF_MAX_RULES) return fail(p, "more than %d rules", KVT_GBNF_MAX_RULES);
    if (p->n_rules == p->cap_rules) {
        p->cap_rules = p->cap_rules ? 2 * p->cap_rules : 16;
        p->rules = kvt_xrealloc(p->rules, (size_t)p->cap_rules * sizeof *p->rules);
    }
    grule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    memcpy(r->name, name, KVT_MIN(len, sizeof r->name - 1));
    return p->n_rules++;
}

static int32_t rule_find(parser *p, const char *name, size_t len) {
    for (int32_t i = 0; i < p->n_rules; i++)
        if (strlen(p->rules[i].name) == len && !memcmp(p->rules[i].name, name, len)) return i;
    return -1;
}

/* A rule for a group or repetition inside rule `in`, named after it. */
static int32_t rule_anon(parser *p, int32_t in) {
    char name[NAME_MAX_LEN + 8];
    int k = snprintf(name, sizeof name, "%s/%d", p->rules[in].name, ++p->n_anon);
    int32_t r = rule_new(p, name, (size_t)KVT_MAX(k, 0));
    if (r >= 0) p->rules[r].defined = 1;
    return r;
}

static seq *alt_new(parser *p, int32_t r) {
    grule *g = &p->rules[r];
    if (g->n_alts == g->cap_alts) {
        g->cap_alts = g->cap_alts ? 2 * g->cap_alts : 4;
        g->alts = kvt_xrealloc(g->alts, (size_t)g->cap_alts * sizeof *g->alts);
    }
    g->alts[g->n_alts] = (seq){0};
    return &g->alts[g->n_alts++];
}

static int add_sym(parser *p, seq *s, uint8_t kind, int32_t arg) {
    if (++p->n_sym > KVT_GBNF_MAX_SYMBOLS)
        return fail(p, "the grammar expands to more than %d items", KVT_GBNF_MAX_SYMBOLS);
    seq_push(s, kind, arg);
    return 0;
}

/* ---- characters and classes ------------------------------------------------------------------- */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character (code point) of a literal or class, escapes decoded. */
static int read_char(parser *p, uint32_t *out) {
    const unsigned char *q = (const unsigned char *)p->p;
    if (p->p >= p->end) return fail(p, "%s", "unexpected end of the grammar inside a literal or class");
    if (*q == '\\') {
        if (p->end - p->p < 2) return fail(p, "%s", "unfinished escape");
        char e = p->p[1];
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            uint32_t v = 0;
            for (int i = 0; i < digits; i++) {
                int h = p->p + 2 + i < p->end ? hexval(p->p[2 + i]) : -1;
                if (h < 0) return fail(p, "'\\%s' needs hex digits", (char[]){e, 0});
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF) return fail(p, "%s", "escape beyond U+10FFFF");
            *out = v;
            p->p += 2 + digits;
            return 0;
        }
        const char *from = "nrt\"\\[]-^", *to = "\n\r\t\"\\[]-^";
        const char *k = strchr(from, e);
        if (!k || !e) return fail(p, "unknown escape '\\%s'", (char[]){e, 0});
        *out = (uint32_t)(unsigned char)to[k - from];
        p->p += 2;
        return 0;
    }
    int more = *q < 0x80 ? 0 : (*q & 0xE0) == 0xC0 ? 1 : (*q & 0xF0) == 0xE0 ? 2 : (*q & 0xF8) == 0xF0 ? 3 : -1;
    if (more < 0 || p->end - p->p < more + 1) return fail(p, "%s", "the grammar is not valid UTF-8");
    uint32_t v = more ? (uint32_t)(*q & (0x3F >> more)) : *q;
    for (int i = 1; i <= more; i++) {
        if ((q[i] & 0xC0) != 0x80) return fail(p, "%s", "the grammar is not valid UTF-8");
        v = v << 6 | (q[i] & 0x3F);
    }
    *out = v;
    p->p += more + 1;
    return 0;
}

static int by_lo(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* A class of the ranges r[0..2n) (lo, hi pairs; sorted and merged here). */
static int32_t class_add(parser *p, uint32_t *r, int32_t n, int negated) {
    if (n > 1) qsort(r, (size_t)n, 2 * sizeof *r, by_lo);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (m && r[2 * i] <= r[2 * (m - 1) + 1] + 1) {
            r[2 * (m - 1) + 1] = KVT_MAX(r[2 * (m - 1) + 1], r[2 * i + 1]);
            continue;
        }
        r[2 * m] = r[2 * i], r[2 * m + 1] = r[2 * i + 1];
        m++;
    }
    if (p->n_rng + m > p->cap_rng) {
        p->cap_rng = KVT_MAX(2 * p->cap_rng, p->n_rng + m + 16);
        p->lo = kvt_xrealloc(p->lo, (size_t)p->cap_rng * sizeof *p->lo);
        p->hi = kvt_xrealloc(p->hi, (size_t)p->cap_rng * sizeof *p->hi);
    }
    if (p->n_cls == p->cap_cls) {
        p->cap_cls = p->cap_cls ? 2 * p->cap_cls : 16;
        p->cls = kvt_xrealloc(p->cls, (size_t)p->cap_cls * sizeof *p->cls);
    }
    p->cls[p->n_cls] = (gclass){p->n_rng, m, (uint8_t)negated};
    for (int32_t i = 0; i < m; i++) p->lo[p->n_rng + i] = r[2 * i], p->hi[p->n_rng + i] = r[2 * i + 1];
    p->n_rng += m;
    return p->n_cls++;
}

/* `[...]` at p->p, into class *out. */
static int parse_class(parser *p, int32_t *out) {
    const char *open = p->p++;
    int negated = p->p < p->end && *p->p == '^';
    if (negated) p->p++;
    uint32_t *r = NULL;
    int32_t n = 0, cap = 0;
    while (p->p < p->end && *p->p != ']') {
        uint32_t a, b;
        if (read_char(p, &a)) break;
        b = a;
        if (p->end - p->p >= 2 && *p->p == '-' && p->p[1] != ']') {
            p->p++;
            if (read_char(p, &b)) break;
            if (b < a) {
                fail(p, "%s", "a class range ends below its start");
                break;
            }
        }
        if (n == cap) cap = cap ? 2 * cap : 8, r = kvt_xrealloc(r, (size_t)cap * 2 * sizeof *r);
        r[2 * n] = a, r[2 * n + 1] = b;
        n++;
    }
    if (!p->failed && p->p >= p->end) fail_at(p, open, "%s", "'[' is never closed");
    if (!p->failed && !n && !negated) fail_at(p, open, "%s", "an empty class '[]' matches nothing");
    if (p->failed) {
        free(r);
        return -1;
    }
    p->p++;
    *out = class_add(p, r, n, negated);
    free(r);
    return 0;
}

/* ---- rules --------------------------------------------------------------------------------------- */

static int parse_alternatives(parser *p, int32_t r, int nested);

/* Applies the repetition {lo, hi} (hi -1: unbounded) to the item x[0..nx)
 * of rule `in`, appending to s. */
static int repeat(parser *p, int32_t in, seq *s, const gsym *x, int32_t nx, int32_t lo, int32_t hi) {
    gsym one = x[0];
    if (nx != 1) { /* a literal of several characters: a rule of its own */
        int32_t w = rule_anon(p, in);
        if (w < 0) return -1;
        seq *a = alt_new(p, w);
        for (int32_t i = 0; i < nx; i++)
            if (add_sym(p, a, x[i].kind, x[i].arg)) return -1;
        one = (gsym){GS_REF, w};
    }
    for (int32_t i = 0; i < lo; i++)
        if (add_sym(p, s, one.kind, one.arg)) return -1;
    if (hi == lo) return 0;
    /* the rest: R ::= X R | "" (unbounded), or a chain of hi-lo optional copies */
    int32_t chain = hi < 0 ? 1 : hi - lo, next = -1;
    for (int32_t i = 0; i < chain; i++) {
        int32_t q = rule_anon(p, in);
        if (q < 0) return -1;
        seq *a = alt_new(p, q);
        if (add_sym(p, a, one.kind, one.arg)) return -1;
        if (hi < 0 && add_sym(p, a, GS_REF, q)) return -1;
        if (next >= 0 && add_sym(p, a, GS_REF, next)) return -1;
        alt_new(p, q);
        next = q;
    }
    return add_sym(p, s, GS_REF, next);
}

static int read_int(parser *p, int32_t *v) {
    if (p->p >= p->end || *p->p < '0' || *p->p > '9') return fail(p, "%s", "expected a number in '{...}'");
    int64_t x = 0;
    while (p->p < p->end && *p->p >= '0' && *p->p <= '9') {
        x = KVT_MIN(x * 10 + (*p->p - '0'), INT32_MAX);
        p->p++;
    }
    if (x > KVT_GBNF_MAX_REPEAT) return fail(p, "a repetition count above %d", KVT_GBNF_MAX_REPEAT);
    *v = (int32_t)x;
    return 0;
}

/* A repetition suffix at p->p into lo/hi; 1 when there is none. */
static int parse_suffix(parser *p, int32_t *lo, int32_t *hi) {
    char c = p->p < p->end ? *p->p : 0;
    if (c == '*' || c == '+' || c == '?') {
        p->p++;
        *lo = c == '+', *hi = c == '?' ? 1 : -1;
        return 0;
    }
    if (c != '{') return 1;
    const char *open = p->p++;
    skip(p, 0);
    if (read_int(p, lo)) return -1;
    skip(p, 0);
    *hi = *lo;
    if (p->p < p->end && *p->p == ',') {
        p->p++;
        skip(p, 0);
        *hi = -1;
        if (p->p < p->end && *p->p != '}' && read_int(p, hi)) return -1;
        skip(p, 0);
    }
    if (p->p >= p->end || *p->p != '}') return fail_at(p, open, "%s", "'{' is not closed by '}'");
    p->p++;
    if (*hi >= 0 && *hi < *lo) return fail_at(p, open, "%s", "a repetition {m,n} with n below m");
    return 0;
}

/* 1 when every alternative of rule g is empty: a group such as ("") or
 * ("" | ("")), which matches only the empty string and so is the empty item,
 * repeated or not. */
static int only_empty(const grule *g) {
    for (int32_t a = 0; a < g->n_alts; a++)
        if (g->alts[a].n) return 0;
    return 1;
}

/* One item (and its repetition) of rule r into s. */
static int parse_item(parser *p, int32_t r, seq *s) {
    seq x = {0};
    const char *item = p->p;
    char c = *p->p;
    int rc = 0;
    if (c == '"') {
        const char *open = p->p++;
        while (!rc && p->p < p->end && *p->p != '"' && *p->p != '\n') {
            uint32_t ch;
            if ((rc = read_char(p, &ch))) break;
            uint32_t rg[2] = {ch, ch};
            seq_push(&x, GS_CLASS, class_add(p, rg, 1, 0));
        }
        if (!rc && (p->p >= p->end || *p->p != '"')) rc = fail_at(p, open, "%s", "a string literal is not closed");
        if (!rc) p->p++;
    } else if (c == '[') {
        int32_t k;
        if (!(rc = parse_class(p, &k))) seq_push(&x, GS_CLASS, k);
    } else if (c == '.') {
        p->p++;
        seq_push(&x, GS_CLASS, class_add(p, NULL, 0, 1));
    } else if (c == '(') {
        const char *open = p->p++;
        int32_t g = rule_anon(p, r);
        rc = g < 0 ? -1 : parse_alternatives(p, g, 1);
        if (!rc && (p->p >= p->end || *p->p != ')')) rc = fail_at(p, open, "%s", "'(' is not closed by ')'");
        if (!rc) p->p++;
        if (!rc && !only_empty(&p->rules[g])) seq_push(&x, GS_REF, g); /* ("") is the empty literal */
    } else if (is_name(c)) {
        const char *n0 = p->p;
        while (p->p < p->end && is_name(*p->p)) p->p++;
        size_t len = (size_t)(p->p - n0);
        if (len > NAME_MAX_LEN) return fail_at(p, n0, "a rule name longer than %d bytes", NAME_MAX_LEN);
        int32_t t = rule_find(p, n0, len);
        if (t < 0 && (t = rule_new(p, n0, len)) >= 0) where(p, n0, &p->rules[t].ref_line, &p->rules[t].ref_col);
        if (t < 0) rc = -1;
        else seq_push(&x, GS_REF, t);
    } else {
        rc = fail(p, "unexpected '%s'", (char[]){c, 0});
    }
    int32_t lo = 1, hi = 1;
    if (!rc && x.n == 0) { /* the empty literal "" */
        free(x.s);
        return parse_suffix(p, &lo, &hi) < 0 ? -1 : 0;
    }
    int sf = rc ? 0 : parse_suffix(p, &lo, &hi);
    if (rc || sf < 0) rc = -1;
    else if (sf == 1)
        for (int32_t i = 0; i < x.n && !rc; i++) rc = add_sym(p, s, x.s[i].kind, x.s[i].arg);
    else {
        int32_t r0 = p->n_rules;
        rc = repeat(p, r, s, x.s, x.n, lo, hi);
        for (int32_t i = r0; i < p->n_rules; i++)
            p->rules[i].rep_at = item, p->rules[i].rep_len = (int32_t)(p->p - item);
    }
    free(x.s);
    return rc;
}

/* Alternatives of rule r up to ')' (nested), or the next rule or the end. */
static int parse_alternatives(parser *p, int32_t r, int nested) {
    for (;;) {
        seq *s = alt_new(p, r);
        seq cur = {0};
        for (;;) {
            skip(p, 1);
            if (p->p >= p->end || *p->p == '|' || *p->p == ')' || (!nested && rule_starts(p, p->p))) break;
            if (parse_item(p, r, &cur)) {
                free(cur.s);
                return -1;
            }
        }
        s = &p->rules[r].alts[p->rules[r].n_alts - 1]; /* parse_item may have moved the rules */
        *s = cur;
        if (p->p < p->end && *p->p == ')' && !nested) return fail(p, "%s", "')' without a matching '('");
        if (p->p >= p->end || *p->p != '|') return 0;
        p->p++;
    }
}

static int parse_rules(parser *p) {
    skip(p, 1);
    while (p->p < p->end) {
        const char *n0 = p->p;
        while (p->p < p->end && is_name(*p->p)) p->p++;
        size_t len = (size_t)(p->p - n0);
        if (!len) return fail(p, "%s", "expected a rule name");
        if (len > NAME_MAX_LEN) return fail_at(p, n0, "a rule name longer than %d bytes", NAME_MAX_LEN);
        skip(p, 1);
        if (p->end - p->p < 3 || memcmp(p->p, "::=", 3)) return fail(p, "%s", "expected '::=' after the rule name");
        p->p += 3;
        int32_t r = rule_find(p, n0, len);
        if (r >= 0 && p->rules[r].defined) return fail_at(p, n0, "rule '%.*s' is defined twice", (int)len, n0);
        if (r < 0 && (r = rule_new(p, n0, len)) < 0) return -1;
        p->rules[r].defined = 1;
        if (parse_alternatives(p, r, 0)) return -1;
        skip(p, 1);
    }
    return 0;
}

/* ---- checks and the compiled form ---------------------------------------------------------------- */

static int32_t utf8_len(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

/* c moved past NUL and the surrogates, which the matcher never takes. */
static uint64_t takeable(uint64_t c) { return c == 0 ? 1 : c >= 0xD800 && c <= 0xDFFF ? 0xE000 : c; }

/* Bytes of the shortest character of class c the matcher takes (not NUL, not
 * a surrogate, at most U+10FFFF); INF when it takes none, so a rule that
 * needs such a class has no finite text and the grammar is refused, rather
 * than accepted and never finished. */
static int32_t class_min(const kvt_gbnf *g, const gclass *c) {
    uint64_t x = 1;
    for (int32_t i = 0; i < c->n; i++) {
        uint64_t lo = g->lo[c->off + i], hi = g->hi[c->off + i];
        if (!c->negated) {
            uint64_t y = takeable(lo);
            if (y <= hi && y <= 0x10FFFF) return utf8_len((uint32_t)y); /* ranges are sorted: the first is shortest */
        } else if (lo <= x) {
            x = takeable(KVT_MAX(x, hi + 1));
        }
    }
    return c->negated && x <= 0x10FFFF ? utf8_len((uint32_t)x) : INF;
}

/* Each position's shortest text to the end of its alternative, rules' by
 * fixed point. Returns a rule with no finite text, or -1. */
static int32_t shortest(kvt_gbnf *g) {
    int32_t *rmin = kvt_xmalloc((size_t)g->n_rules * sizeof *rmin);
    for (int32_t r = 0; r < g->n_rules; r++) rmin[r] = INF;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int32_t r = 0; r < g->n_rules; r++)
            for (int32_t a = 0; a < g->rule_na[r]; a++) {
                int64_t sum = 0;
                for (int32_t i = g->alt[g->rule_alt[r] + a]; g->sym[i].kind != GS_END; i++)
                    sum += g->sym[i].kind == GS_CLASS ? class_min(g, &g->cls[g->sym[i].arg]) : rmin[g->sym[i].arg];
                if (sum < rmin[r]) rmin[r] = (int32_t)sum, changed = 1;
            }
    }
    for (int32_t i = g->n_sym - 1; i >= 0; i--) {
        const gsym *s = &g->sym[i];
        int64_t here = s->kind == GS_END ? 0 : s->kind == GS_CLASS ? class_min(g, &g->cls[s->arg]) : rmin[s->arg];
        g->suffix_min[i] = (int32_t)KVT_MIN(INF, here + (s->kind == GS_END ? 0 : g->suffix_min[i + 1]));
    }
    int32_t bad = -1;
    for (int32_t r = 0; r < g->n_rules && bad < 0; r++)
        if (rmin[r] >= INF) bad = r;
    free(rmin);
    return bad;
}

/* Depth-first over "rule r can begin with rule t" (after nullable items);
 * mark: 0 new, 1 on the path, 2 done. The rule a cycle returns to, or -1. */
static int32_t left_cycle(const kvt_gbnf *g, int32_t r, uint8_t *mark) {
    if (mark[r] == 1) return r;
    if (mark[r] == 2) return -1;
    mark[r] = 1;
    for (int32_t a = 0; a < g->rule_na[r]; a++)
        for (int32_t i = g->alt[g->rule_alt[r] + a]; g->sym[i].kind == GS_REF; i++) {
            int32_t c = left_cycle(g, g->sym[i].arg, mark);
            if (c >= 0) return c;
            if (g->suffix_min[i] - g->suffix_min[i + 1] > 0) break; /* not nullable: nothing further is leftmost */
        }
    mark[r] = 2;
    return -1;
}

static kvt_gbnf *flatten(parser *p) {
    kvt_gbnf *g = kvt_xcalloc(1, sizeof *g);
    int32_t n_alt = 0, n_sym = 0;
    for (int32_t r = 0; r < p->n_rules; r++) {
        n_alt += p->rules[r].n_alts;
        for (int32_t a = 0; a < p->rules[r].n_alts; a++) n_sym += p->rules[r].alts[a].n + 1;
    }
    g->sym = kvt_xmalloc((size_t)KVT_MAX(n_sym, 1) * sizeof *g->sym);
    g->suffix_min = kvt_xmalloc((size_t)KVT_MAX(n_sym, 1) * sizeof *g->suffix_min);
    g->alt = kvt_xmalloc((size_t)KVT_MAX(n_alt, 1) * sizeof *g->alt);
    g->rule_alt = kvt_xmalloc((size_t)p->n_rules * sizeof *g->rule_alt);
    g->rule_na = kvt_xmalloc((size_t)p->n_rules * sizeof *g->rule_na);
    g->n_rules = p->n_rules;
    for (int32_t r = 0, k = 0; r < p->n_rules; r++) {
        g->rule_alt[r] = k;
        g->rule_na[r] = p->rules[r].n_alts;
        for (int32_t a = 0; a < p->rules[r].n_alts; a++) {
            const seq *s = &p->rules[r].alts[a];
            g->alt[k++] = g->n_sym;
            if (s->n) memcpy(g->sym + g->n_sym, s->s, (size_t)s->n * sizeof *s->s);
            g->n_sym += s->n;
            g->sym[g->n_sym++] = (gsym){GS_END, 0};
        }
    }
    g->cls = p->cls, g->n_cls = p->n_cls, g->lo = p->lo, g->hi = p->hi;
    p->cls = NULL, p->lo = p->hi = NULL;
    return g;
}

/* The error for a left cycle through rule r. A cycle through a repetition's
 * own rule is a repetition of an item that can match the empty string
 * (x ::= ("a"?)*: R ::= X R | "" reaches R again before any character);
 * that is named as written, with the user's rule, not the generated name. */
static int left_error(parser *p, int32_t r) {
    const grule *g = &p->rules[r];
    int own = (int)strcspn(g->name, "/");
    if (g->rep_at) {
        int line, col;
        where(p, g->rep_at, &line, &col);
        snprintf(p->err, p->cap,
                 "line %d, column %d: rule '%.*s': '%.*s' repeats an item that can match the empty string, which "
                 "kvtier does not support: make the repeated item non-empty, e.g. (\"a\")* rather than (\"a\"?)*",
                 line, col, own, g->name, (int)KVT_MIN(g->rep_len, 80), g->rep_at);
        return -1;
    }
    snprintf(p->err, p->cap,
             "rule '%.*s' is left-recursive (it can reach itself before any character), which kvtier does not "
             "support: rewrite it with repetition, e.g. x ::= y (\"+\" y)*",
             own, g->name);
    return -1;
}

/* Every rule defined, a root, each rule finite, no left recursion. */
static int check(parser *p, kvt_gbnf *g) {
    for (int32_t r = 0; r < p->n_rules; r++)
        if (!p->rules[r].defined) {
            snprintf(p->err, p->cap, "line %d, column %d: undefined rule '%s'", p->rules[r].ref_line,
                     p->rules[r].ref_col, p->rules[r].name);
            return -1;
        }
    g->root = rule_find(p, "root", 4);
    if (g->root < 0) {
        snprintf(p->err, p->cap, "line 1, column 1: the grammar has no 'root' rule");
        return -1;
    }
    int32_t bad = shortest(g);
    if (bad >= 0) {
        const char *nm = p->rules[bad].name;
        int own = (int)strcspn(nm, "/"); /* a group's or repetition's rule is named after the user's rule */
        snprintf(
            p->err, p->cap,
            "%s '%.*s' never finishes (every alternative recurses forever, or needs a character no reply holds: NUL or a UTF-16 surrogate)",
            nm[own] ? "a group or repetition in rule" : "rule", own, nm);
        return -1;
    }
    uint8_t *mark = kvt_xcalloc((size_t)g->n_rules, 1);
    for (int32_t r = 0; r < g->n_rules && bad < 0; r++) bad = left_cycle(g, r, mark);
    free(mark);
    if (bad >= 0) return left_error(p, bad);
    return 0;
}

int kvt_gbnf_parse(const char *text, size_t len, kvt_gbnf **out, char *err, size_t cap) {
    *out = NULL;
    if (cap) err[0] = 0;
    if (len > KVT_GBNF_MAX_TEXT) {
        snprintf(err, cap, "the grammar is %zu bytes, above the limit of %d", len, KVT_GBNF_MAX_TEXT);
        return KVT_EARG;
    }
    parser p = {.p = text, .start = text, .end = text + len, .err = err, .cap = cap};
    kvt_gbnf *g = NULL;
    int rc = parse_rules(&p);
    if (!rc) {
        g = flatten(&p);
        rc = check(&p, g);
    }
    for (int32_t r = 0; r < p.n_rules; r++) {
        for (int32_t a = 0; a < p.rules[r].n_alts; a++) free(p.rules[r].alts[a].s);
        free(p.rules[r].alts);
    }
    free(p.rules);
    free(p.cls), free(p.lo), free(p.hi);
    if (rc) {
        kvt_gbnf_free(g);
        return KVT_EARG;
    }
    *out = g;
    return 0;
}

void kvt_gbnf_free(kvt_gbnf *g) {
    if (!g) return;
    free(g->sym), free(g->suffix_min), free(g->alt), free(g->rule_alt), free(g->rule_na);
    free(g->cls), free(g->lo), free(g->hi);
    free(g);
}

int kvt_gbnf_class_has(const kvt_gbnf *g, int32_t k, uint32_t c) {
    const gclass *cl = &g->cls[k];
    int in = 0;
    for (int32_t i = 0; i < cl->n && !in; i++) in = g->lo[cl->off + i] <= c && c <= g->hi[cl->off + i];
    return in != cl->negated;
}

int kvt_gbnf_class_may(const kvt_gbnf *g, int32_t k, uint32_t a, uint32_t b) {
    const gclass *cl = &g->cls[k];
    for (int32_t i = 0; i < cl->n; i++) {
        uint32_t lo = g->lo[cl->off + i], hi = g->hi[cl->off + i];
        if (cl->negated && lo <= a && b <= hi) return 0; /* ranges are merged: one covers all or none does */
        if (!cl->negated && lo <= b && a <= hi) return 1;
    }
    return cl->negated;
}

int kvt_jg_schema_gbnf(const char *text, size_t len, kvt_jg_schema **out, char *err, size_t cap) {
    kvt_gbnf *g;
    *out = NULL;
    if (kvt_gbnf_parse(text, len, &g, err, cap)) return KVT_EARG;
    kvt_gbnf_m *m = kvt_gbnf_m_new(g, NULL); /* the start alone may already be past the limits */
    int over = kvt_gbnf_m_overflowed(m);
    kvt_gbnf_m_free(m);
    if (over) {
        snprintf(err, cap,
                 "the grammar's start needs more than %d parse stacks or %d nested rules, kvtier's limits: make "
                 "root less ambiguous",
                 KVT_GBNF_MAX_STACKS, KVT_GBNF_MAX_DEPTH);
        kvt_gbnf_free(g);
        return KVT_EARG;
    }
    kvt_jg_schema *s = kvt_xcalloc(1, sizeof *s);
    s->gbnf = g;
    *out = s;
    return 0;
}
