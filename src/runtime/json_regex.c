// SPDX-License-Identifier: MIT
/* Regular expressions for JSON Schema's 'pattern' and 'format', compiled to a
 * byte automaton (jdfa) over the UTF-8 text of a string, for the token mask.
 *
 * The subset: literal characters, '.', classes ([a-z], [^...], with \d \w \s
 * inside), the escapes \d \D \w \W \s \S \n \r \t \f \v \xHH \uHHHH and any
 * escaped punctuation, groups ((...), (?:...), (?<name>...)), alternation,
 * and the quantifiers ? * + {m} {m,} {m,n} (a lazy '?' after one changes
 * nothing for a whole-string match). '^' and '$' are accepted at the ends of
 * the pattern (or of a top-level alternative): the string always matches as
 * a whole, which also satisfies the pattern as a search. Anything else
 * (backreferences, lookaround, \b, \p{...}, anchors inside) is refused by name.
 *
 * The character sets stay inside what both ECMAScript and Python agree on:
 * '.' is any character but line terminators, and negated shorthands (\D \W
 * \S) and negated classes that hold one are taken within printable ASCII.
 * Characters a JSON string can only write as \u escapes (control characters
 * other than \b \f \n \r \t) are never produced.
 *
 * Pipeline: a syntax tree, a Thompson NFA over bytes (code point ranges
 * become UTF-8 byte sequences), then the subset construction, with the count
 * of code points folded into the state when minLength/maxLength bound it.
 * States from which no accepting state can be reached are cut, and every
 * state knows the fewest JSON-text bytes to an accepting one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "json_grammar_impl.h"

#define MAX_NFA 60000     /* NFA states of one pattern */
#define MAX_DFA 20000     /* DFA states of one pattern with its length bounds */
#define MAX_REPEAT 1000   /* m and n of {m,n} */
#define MAX_LEN_FOLD 4096 /* minLength/maxLength folded into the automaton */
#define MAX_CP 0x10FFFF

/* ---- syntax ------------------------------------------------------------------------ */

typedef struct {
    uint32_t lo, hi;
} cprange;

enum { X_SET, X_CAT, X_ALT, X_REP };

typedef struct rx {
    int kind;
    cprange *r; /* set: sorted, disjoint ranges */
    int32_t nr;
    struct rx **sub; /* cat/alt: parts; rep: sub[0] */
    int32_t nsub;
    int32_t min, max; /* rep: max -1 unbounded */
} rx;

typedef struct {
    const char *p, *start, *end;
    char *err;
    size_t cap;
    int failed;
    int depth;
} parser;

static void *perr(parser *ps, const char *fmt, const char *what) {
    if (!ps->failed) snprintf(ps->err, ps->cap, fmt, what, (int)(ps->p - ps->start));
    ps->failed = 1;
    return NULL;
}

static rx *rx_new(int kind) {
    rx *x = kvt_xcalloc(1, sizeof *x);
    x->kind = kind;
    return x;
}

static void rx_free(rx *x) {
    if (!x) return;
    for (int32_t i = 0; i < x->nsub; i++) rx_free(x->sub[i]);
    free(x->sub);
    free(x->r);
    free(x);
}

static void rx_add(rx *x, rx *part) {
    x->sub = kvt_xrealloc(x->sub, (size_t)(x->nsub + 1) * sizeof *x->sub);
    x->sub[x->nsub++] = part;
}

static int by_lo(const void *a, const void *b) {
    const cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges a set's ranges, and drops what a string cannot hold
 * unescaped-or-simply-escaped (other control characters) and surrogates. */
static void set_norm(rx *x) {
    cprange *out = kvt_xmalloc((size_t)(x->nr * 3 + 1) * sizeof *out);
    int32_t n = 0;
    qsort(x->r, (size_t)x->nr, sizeof *x->r, by_lo);
    static const cprange holes[] = {{0, 7}, {11, 11}, {14, 31}, {0xD800, 0xDFFF}};
    for (int32_t i = 0; i < x->nr; i++) {
        cprange r = x->r[i];
        if (n && r.lo <= out[n - 1].hi + 1) {
            if (r.hi > out[n - 1].hi) out[n - 1].hi = r.hi;
        } else {
            out[n++] = r;
        }
    }
    /* cut the holes */
    cprange *cut = kvt_xmalloc((size_t)(n * 5 + 1) * sizeof *cut);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        uint32_t lo = out[i].lo, hi = out[i].hi;
        for (size_t h = 0; h < KVT_ARRAY_LEN(holes) && lo <= hi; h++) {
            if (holes[h].hi < lo || holes[h].lo > hi) continue;
            if (holes[h].lo > lo) cut[m++] = (cprange){lo, holes[h].lo - 1};
            lo = holes[h].hi + 1;
        }
        if (lo <= hi) cut[m++] = (cprange){lo, hi};
    }
    free(out);
    free(x->r);
    x->r = cut;
    x->nr = m;
}

static void set_add(rx *x, uint32_t lo, uint32_t hi) {
    x->r = kvt_xrealloc(x->r, (size_t)(x->nr + 1) * sizeof *x->r);
    x->r[x->nr++] = (cprange){lo, hi};
}

/* x's complement within [ulo, uhi]. */
static void set_negate(rx *x, uint32_t ulo, uint32_t uhi) {
    qsort(x->r, (size_t)x->nr, sizeof *x->r, by_lo);
    cprange *old = x->r;
    int32_t n = x->nr;
    x->r = NULL;
    x->nr = 0;
    uint32_t at = ulo;
    for (int32_t i = 0; i < n && at <= uhi; i++) {
        if (old[i].hi < at) continue;
        if (old[i].lo > at) set_add(x, at, KVT_MIN(old[i].lo - 1, uhi));
        at = old[i].hi + 1;
    }
    if (at <= uhi) set_add(x, at, uhi);
    free(old);
}

/* One UTF-8 character of the pattern. */
static uint32_t read_cp(parser *ps) {
    const unsigned char *u = (const unsigned char *)ps->p;
    uint32_t c = u[0];
    int n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (!n || ps->p + n > ps->end) return perr(ps, "'pattern' is not valid UTF-8 (at %.0s%d)", ""), 0;
    if (n > 1) c &= 0x3F >> (n - 1);
    for (int i = 1; i < n; i++) {
        if ((u[i] & 0xC0) != 0x80) return perr(ps, "'pattern' is not valid UTF-8 (at %.0s%d)", ""), 0;
        c = c << 6 | (u[i] & 0x3F);
    }
    ps->p += n;
    return c;
}

static int hex_digits(parser *ps, int n, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        char c = ps->p < ps->end ? *ps->p : 0;
        int h = c >= '0' && c <= '9' ? c - '0'
            : c >= 'a' && c <= 'f'   ? c - 'a' + 10
            : c >= 'A' && c <= 'F'   ? c - 'A' + 10
                                     : -1;
        if (h < 0) return perr(ps, "unsupported %s in 'pattern' (at offset %d)", "a short hex escape"), -1;
        v = v << 4 | (uint32_t)h;
        ps->p++;
    }
    *out = v;
    return 0;
}

/* The shorthand classes; negated ones within printable ASCII. */
static void add_shorthand(rx *x, char c) {
    rx t = {0};
    if (c == 'd' || c == 'D') set_add(&t, '0', '9');
    if (c == 'w' || c == 'W')
        set_add(&t, '0', '9'), set_add(&t, 'A', 'Z'), set_add(&t, 'a', 'z'), set_add(&t, '_', '_');
    if (c == 's' || c == 'S') set_add(&t, '\t', '\r'), set_add(&t, ' ', ' ');
    if (c >= 'A' && c <= 'Z') set_negate(&t, 0x20, 0x7E);
    for (int32_t i = 0; i < t.nr; i++) set_add(x, t.r[i].lo, t.r[i].hi);
    free(t.r);
}

/* After a backslash: a single character into *cp (returns 1), a shorthand
 * added to set (returns 2), or failure (returns 0). */
static int parse_escape(parser *ps, rx *set, uint32_t *cp, int in_class) {
    if (ps->p >= ps->end) return perr(ps, "'pattern' ends in %s (at offset %d)", "a backslash"), 0;
    char c = *ps->p++;
    if (strchr("dDwWsS", c)) return add_shorthand(set, c), 2;
    switch (c) {
    case 'n': *cp = '\n'; return 1;
    case 'r': *cp = '\r'; return 1;
    case 't': *cp = '\t'; return 1;
    case 'f': *cp = '\f'; return 1;
    case 'v': *cp = '\v'; return 1;
    case 'x': return hex_digits(ps, 2, cp) ? 0 : 1;
    case 'u': return hex_digits(ps, 4, cp) ? 0 : 1;
    case 'b':
        return perr(ps, "unsupported %s in 'pattern' (at offset %d)", in_class ? "[\\b]" : "\\b (a word boundary)"), 0;
    default: break;
    }
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        char what[48];
        snprintf(what, sizeof what, "escape \\%c (a backreference, \\p, \\k or the like)", c);
        return perr(ps, "unsupported %s in 'pattern' (at offset %d)", what), 0;
    }
    ps->p--;
    *cp = read_cp(ps);
    return ps->failed ? 0 : 1;
}

static rx *parse_class(parser *ps) {
    rx *x = rx_new(X_SET);
    int neg = ps->p < ps->end && *ps->p == '^', shorthand = 0;
    if (neg) ps->p++;
    int first = 1;
    while (ps->p < ps->end && (*ps->p != ']' || first)) {
        first = 0;
        uint32_t lo, hi;
        int k = 1;
        if (*ps->p == '\\') {
            ps->p++;
            k = parse_escape(ps, x, &lo, 1);
        } else {
            lo = read_cp(ps);
        }
        if (ps->failed || !k) return rx_free(x), NULL;
        if (k == 2) {
            shorthand = 1;
            continue;
        }
        hi = lo;
        if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
            ps->p++;
            int k2 = 1;
            if (*ps->p == '\\') {
                ps->p++;
                rx dummy = {0};
                k2 = parse_escape(ps, &dummy, &hi, 1);
                free(dummy.r);
                if (k2 == 2)
                    return rx_free(x), perr(ps, "unsupported %s in 'pattern' (at offset %d)", "a range to a class");
            } else {
                hi = read_cp(ps);
            }
            if (ps->failed || !k2) return rx_free(x), NULL;
            if (hi < lo) return rx_free(x), perr(ps, "'pattern' has %s (at offset %d)", "a range out of order");
        }
        set_add(x, lo, hi);
    }
    if (ps->p >= ps->end) return rx_free(x), perr(ps, "'pattern' has %s (at offset %d)", "an unclosed '['");
    ps->p++;
    if (neg) set_negate(x, shorthand ? 0x20 : 0, shorthand ? 0x7E : MAX_CP);
    set_norm(x);
    return x;
}

static rx *parse_alt(parser *ps);

static rx *parse_atom(parser *ps) {
    char c = *ps->p;
    if (c == '(') {
        ps->p++;
        if (ps->p < ps->end && *ps->p == '?') {
            if (ps->p + 1 < ps->end && ps->p[1] == ':') ps->p += 2;
            else if (ps->p + 2 < ps->end && ps->p[1] == '<' && ps->p[2] != '=' && ps->p[2] != '!') {
                const char *close = memchr(ps->p, '>', (size_t)(ps->end - ps->p));
                if (!close) return perr(ps, "'pattern' has %s (at offset %d)", "an unclosed group name");
                ps->p = close + 1;
            } else {
                return ps->p--,
                       perr(ps, "unsupported %s in 'pattern' (at offset %d)", "group '(?' (lookaround or flags)");
            }
        }
        if (++ps->depth > 64) return perr(ps, "'pattern' nests %s (at offset %d)", "groups too deeply");
        rx *x = parse_alt(ps);
        ps->depth--;
        if (!x) return NULL;
        if (ps->p >= ps->end || *ps->p != ')')
            return rx_free(x), perr(ps, "'pattern' has %s (at offset %d)", "an unclosed '('");
        ps->p++;
        return x;
    }
    if (c == '[') {
        ps->p++;
        return parse_class(ps);
    }
    rx *x = rx_new(X_SET);
    if (c == '.') {
        ps->p++;
        set_add(x, 0, '\n' - 1);
        set_add(x, '\n' + 1, '\r' - 1);
        set_add(x, '\r' + 1, 0x2027);
        set_add(x, 0x202A, MAX_CP);
    } else if (c == '\\') {
        ps->p++;
        uint32_t cp;
        int k = parse_escape(ps, x, &cp, 0);
        if (!k) return rx_free(x), NULL;
        if (k == 1) set_add(x, cp, cp);
    } else if (c == '^' || c == '$') {
        return rx_free(x), perr(ps, "unsupported %s in 'pattern' (at offset %d)", "anchor inside the pattern");
    } else if (c == '*' || c == '+' || c == '?') {
        return rx_free(x), perr(ps, "'pattern' has %s (at offset %d)", "a quantifier with nothing before it");
    } else {
        uint32_t cp = read_cp(ps);
        if (ps->failed) return rx_free(x), NULL;
        set_add(x, cp, cp);
    }
    set_norm(x);
    return x;
}

/* {m}, {m,}, {m,n} at p: 1 and the bounds, or 0 when it is not a quantifier. */
static int read_braces(parser *ps, int32_t *mn, int32_t *mx) {
    const char *q = ps->p + 1;
    long a = 0, b;
    if (q >= ps->end || *q < '0' || *q > '9') return 0;
    for (; q < ps->end && *q >= '0' && *q <= '9'; q++) a = KVT_MIN(a * 10 + (*q - '0'), 10L * MAX_REPEAT);
    b = a;
    if (q < ps->end && *q == ',') {
        q++;
        b = -1;
        if (q < ps->end && *q >= '0' && *q <= '9') {
            b = 0;
            for (; q < ps->end && *q >= '0' && *q <= '9'; q++) b = KVT_MIN(b * 10 + (*q - '0'), 10L * MAX_REPEAT);
        }
    }
    if (q >= ps->end || *q != '}') return 0;
    ps->p = q + 1;
    *mn = (int32_t)a;
    *mx = (int32_t)b;
    return 1;
}

static rx *parse_cat(parser *ps) {
    rx *cat = rx_new(X_CAT);
    while (ps->p < ps->end && *ps->p != '|' && *ps->p != ')') {
        if (*ps->p == '$' && ps->depth == 0 && (ps->p + 1 == ps->end || ps->p[1] == '|')) {
            ps->p++;
            continue;
        }
        rx *a = parse_atom(ps);
        if (!a) return rx_free(cat), NULL;
        for (;;) {
            int32_t mn, mx;
            char q = ps->p < ps->end ? *ps->p : 0;
            if (q == '*' || q == '+' || q == '?') {
                ps->p++;
                mn = q == '+';
                mx = q == '?' ? 1 : -1;
            } else if (q == '{' && read_braces(ps, &mn, &mx)) {
                if (mn > MAX_REPEAT || mx > MAX_REPEAT || (mx >= 0 && mx < mn))
                    return rx_free(a), rx_free(cat),
                           perr(ps, "'pattern' has %s (at offset %d)", "a bad {m,n} (at most 1000)");
            } else {
                break;
            }
            if (ps->p < ps->end && *ps->p == '?') ps->p++; /* lazy: the same strings */
            rx *r = rx_new(X_REP);
            rx_add(r, a);
            r->min = mn;
            r->max = mx;
            a = r;
        }
        rx_add(cat, a);
    }
    return cat;
}

static rx *parse_alt(parser *ps) {
    rx *alt = rx_new(X_ALT);
    for (;;) {
        if (ps->depth == 0 && ps->p < ps->end && *ps->p == '^') ps->p++;
        rx *c = parse_cat(ps);
        if (!c) return rx_free(alt), NULL;
        rx_add(alt, c);
        if (ps->p >= ps->end || *ps->p != '|') break;
        ps->p++;
    }
    return alt;
}

/* ---- NFA ---------------------------------------------------------------------------- */

typedef struct {
    uint8_t lo, hi, is_range;
    int32_t out1, out2; /* range: out1; epsilon: out1 and out2 (-1: none) */
} nstate;

typedef struct {
    nstate *s;
    int32_t n, cap;
    int over;
} nfa;

static int32_t nadd(nfa *a, int range, uint8_t lo, uint8_t hi) {
    if (a->n >= MAX_NFA) {
        a->over = 1;
        return 0;
    }
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 256;
        a->s = kvt_xrealloc(a->s, (size_t)a->cap * sizeof *a->s);
    }
    a->s[a->n] = (nstate){lo, hi, (uint8_t)range, -1, -1};
    return a->n++;
}

static void nlink(nfa *a, int32_t from, int32_t to) {
    if (a->over) return;
    if (a->s[from].out1 < 0) a->s[from].out1 = to;
    else a->s[from].out2 = to;
}

static int utf8_enc(uint32_t c, uint8_t *b) {
    if (c < 0x80) return b[0] = (uint8_t)c, 1;
    if (c < 0x800) return b[0] = (uint8_t)(0xC0 | c >> 6), b[1] = (uint8_t)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000)
        return b[0] = (uint8_t)(0xE0 | c >> 12), b[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F)),
               b[2] = (uint8_t)(0x80 | (c & 0x3F)), 3;
    b[0] = (uint8_t)(0xF0 | c >> 18);
    b[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
    b[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
    b[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

/* Byte-range sequences for code points lo..hi (one encoded length), each a
 * path from s to e; *rest gets the state where further sequences start. */
static void cp_seq(nfa *a, uint32_t lo, uint32_t hi, int32_t s, int32_t e, int32_t *rest) {
    uint8_t bl[4], bh[4];
    int n = utf8_enc(lo, bl);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) == (hi & ~m)) continue;
        if (lo & m) {
            cp_seq(a, lo, lo | m, s, e, rest);
            cp_seq(a, (lo | m) + 1, hi, *rest, e, rest);
            return;
        }
        if ((hi & m) != m) {
            cp_seq(a, lo, (hi & ~m) - 1, s, e, rest);
            cp_seq(a, hi & ~m, hi, *rest, e, rest);
            return;
        }
    }
    utf8_enc(hi, bh);
    /* s splits into this sequence and *rest, where the next one starts */
    int32_t at = nadd(a, 0, 0, 0);
    *rest = nadd(a, 0, 0, 0);
    if (a->over) return;
    nlink(a, s, at);
    nlink(a, s, *rest);
    for (int i = 0; i < n && !a->over; i++) {
        int32_t r = nadd(a, 1, bl[i], bh[i]);
        nlink(a, at, r);
        if (i == n - 1) {
            nlink(a, r, e);
        } else {
            int32_t mid = nadd(a, 0, 0, 0);
            nlink(a, r, mid);
            at = mid;
        }
    }
}

/* Each byte sequence of the set leaves s through a chain of two-way splits
 * (a state has at most two epsilon edges). */
static void set_nfa(nfa *a, const rx *x, int32_t s, int32_t e) {
    static const uint32_t bounds[] = {0, 0x80, 0x800, 0x10000, MAX_CP + 1};
    int32_t at = s;
    for (int32_t i = 0; i < x->nr && !a->over; i++)
        for (int k = 0; k < 4; k++) {
            uint32_t lo = KVT_MAX(x->r[i].lo, bounds[k]), hi = KVT_MIN(x->r[i].hi, bounds[k + 1] - 1);
            if (lo <= hi) cp_seq(a, lo, hi, at, e, &at);
        }
}

/* An NFA fragment for x from a new start to a new end: returns start, *e end. */
static int32_t build(nfa *a, const rx *x, int32_t *e) {
    int32_t s = nadd(a, 0, 0, 0);
    *e = nadd(a, 0, 0, 0);
    if (a->over) return s;
    switch (x->kind) {
    case X_SET: set_nfa(a, x, s, *e); break;
    case X_CAT: {
        int32_t at = s;
        for (int32_t i = 0; i < x->nsub && !a->over; i++) {
            int32_t pe, ps = build(a, x->sub[i], &pe);
            nlink(a, at, ps);
            at = pe;
        }
        nlink(a, at, *e);
        break;
    }
    case X_ALT: {
        /* a chain of two-way splits */
        int32_t at = s;
        for (int32_t i = 0; i < x->nsub && !a->over; i++) {
            int32_t pe, ps = build(a, x->sub[i], &pe);
            nlink(a, pe, *e);
            if (i == x->nsub - 1) {
                nlink(a, at, ps);
            } else {
                int32_t next = nadd(a, 0, 0, 0);
                nlink(a, at, ps);
                nlink(a, at, next);
                at = next;
            }
        }
        break;
    }
    case X_REP: {
        int32_t at = s;
        for (int32_t i = 0; i < x->min && !a->over; i++) {
            int32_t pe, ps = build(a, x->sub[0], &pe);
            nlink(a, at, ps);
            at = pe;
        }
        if (x->max < 0) {
            int32_t pe, ps = build(a, x->sub[0], &pe);
            nlink(a, at, ps);
            nlink(a, at, *e);
            nlink(a, pe, ps);
            nlink(a, pe, *e);
        } else {
            for (int32_t i = x->min; i < x->max && !a->over; i++) {
                int32_t pe, ps = build(a, x->sub[0], &pe);
                nlink(a, at, ps);
                nlink(a, at, *e);
                at = pe;
            }
            nlink(a, at, *e);
        }
        break;
    }
    }
    return s;
}

/* ---- DFA ------------------------------------------------------------------------------ */

/* Bytes of JSON string text that write the byte b (0: cannot be written). */
static int esc_cost(uint8_t b) {
    if (b == '"' || b == '\\' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t') return 2;
    return b < 0x20 ? 0 : 1;
}

typedef struct {
    const nfa *a;
    int32_t *stack, *mark, gen;
    /* sets: the sorted NFA states of DFA state i are pool[off[i]..off[i+1]), its count cnt[i] */
    int32_t *pool, *off, *cnt;
    int32_t n, cap, pool_n, pool_cap;
    int32_t *hash, hcap;
    int32_t final; /* the NFA's accepting state */
} builder;

static int by_int(const void *x, const void *y) {
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return a < b ? -1 : a > b;
}

/* The epsilon closure of seeds[0..n), as the sorted range states (and the
 * final state) it reaches; returns its length. */
static int32_t closure(builder *b, const int32_t *seeds, int32_t n, int32_t *out) {
    b->gen++;
    int32_t sp = 0, m = 0;
    for (int32_t i = 0; i < n; i++)
        if (b->mark[seeds[i]] != b->gen) b->mark[seeds[i]] = b->gen, b->stack[sp++] = seeds[i];
    while (sp) {
        int32_t q = b->stack[--sp];
        const nstate *st = &b->a->s[q];
        if (st->is_range || q == b->final) out[m++] = q;
        if (st->is_range) continue;
        int32_t o[2] = {st->out1, st->out2};
        for (int k = 0; k < 2; k++)
            if (o[k] >= 0 && b->mark[o[k]] != b->gen) b->mark[o[k]] = b->gen, b->stack[sp++] = o[k];
    }
    qsort(out, (size_t)m, sizeof *out, by_int);
    return m;
}

static uint32_t set_hash(const int32_t *x, int32_t n, int32_t cnt) {
    uint32_t h = 2166136261u ^ (uint32_t)cnt;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)x[i]) * 16777619u;
    return h;
}

static void rehash(builder *b) {
    free(b->hash);
    b->hcap = b->hcap ? 2 * b->hcap : 1024;
    b->hash = kvt_xmalloc((size_t)b->hcap * sizeof *b->hash);
    for (int32_t i = 0; i < b->hcap; i++) b->hash[i] = -1;
    for (int32_t i = 0; i < b->n; i++) {
        uint32_t h = set_hash(b->pool + b->off[i], b->off[i + 1] - b->off[i], b->cnt[i]) & (uint32_t)(b->hcap - 1);
        while (b->hash[h] >= 0) h = (h + 1) & (uint32_t)(b->hcap - 1);
        b->hash[h] = i;
    }
}

/* The DFA state of (set, cnt), added if new; -1 past MAX_DFA. */
static int32_t intern(builder *b, const int32_t *x, int32_t n, int32_t cnt) {
    if (2 * (b->n + 1) > b->hcap) rehash(b);
    uint32_t h = set_hash(x, n, cnt) & (uint32_t)(b->hcap - 1);
    for (; b->hash[h] >= 0; h = (h + 1) & (uint32_t)(b->hcap - 1)) {
        int32_t i = b->hash[h];
        if (b->cnt[i] == cnt && b->off[i + 1] - b->off[i] == n &&
            (n == 0 || !memcmp(b->pool + b->off[i], x, (size_t)n * sizeof *x)))
            return i;
    }
    if (b->n >= MAX_DFA) return -1;
    if (b->n + 2 > b->cap) {
        b->cap = b->cap ? 2 * b->cap : 256;
        b->off = kvt_xrealloc(b->off, (size_t)(b->cap + 1) * sizeof *b->off);
        b->cnt = kvt_xrealloc(b->cnt, (size_t)b->cap * sizeof *b->cnt);
        if (!b->n) b->off[0] = 0;
    }
    if (b->pool_n + n > b->pool_cap) {
        b->pool_cap = KVT_MAX(2 * b->pool_cap, b->pool_n + n + 1024);
        b->pool = kvt_xrealloc(b->pool, (size_t)b->pool_cap * sizeof *b->pool);
    }
    if (n) memcpy(b->pool + b->pool_n, x, (size_t)n * sizeof *x); /* an empty set may come as NULL */
    b->pool_n += n;
    b->cnt[b->n] = cnt;
    b->off[b->n + 1] = b->pool_n;
    b->hash[h] = b->n;
    return b->n++;
}

/* Byte classes: bytes no NFA range, code point start or escape cost tells apart. */
static int32_t byte_classes(const nfa *a, uint8_t *cls, uint8_t *rep) {
    uint8_t brk[257] = {0};
    for (int32_t i = 0; i < a->n; i++)
        if (a->s[i].is_range) brk[a->s[i].lo] = brk[a->s[i].hi + 1] = 1;
    static const uint8_t extra[] = {0x80, 0xC0, 0x20, '"', '"' + 1, '\\', '\\' + 1, 8, 9, 10, 11, 12, 13, 14};
    for (size_t i = 0; i < sizeof extra; i++) brk[extra[i]] = 1;
    int32_t n = 0;
    for (int c = 0; c < 256; c++) {
        if (c && brk[c]) n++;
        if (c == 0 || brk[c]) rep[n] = (uint8_t)c;
        cls[c] = (uint8_t)n;
    }
    return n + 1;
}

/* States that can reach an accepting one keep their edges; the rest are cut,
 * and dist[] gets the fewest text bytes to accept (a queue-driven relaxation
 * over the reversed edges). */
static void trim(jdfa *d, const uint8_t *rep) {
    int32_t n = d->n_states, k = d->n_classes;
    int32_t *deg = kvt_xcalloc((size_t)n + 1, sizeof *deg), *radj, *rcls, *queue, *inq;
    for (int32_t i = 0; i < n * k; i++)
        if (d->next[i] >= 0) deg[d->next[i] + 1]++;
    for (int32_t i = 0; i < n; i++) deg[i + 1] += deg[i];
    radj = kvt_xmalloc((size_t)(deg[n] + 1) * sizeof *radj);
    rcls = kvt_xmalloc((size_t)(deg[n] + 1) * sizeof *rcls);
    int32_t *fill = kvt_xmalloc((size_t)n * sizeof *fill);
    memcpy(fill, deg, (size_t)n * sizeof *fill);
    for (int32_t q = 0; q < n; q++)
        for (int32_t c = 0; c < k; c++) {
            int32_t t = d->next[q * k + c];
            if (t >= 0) radj[fill[t]] = q, rcls[fill[t]++] = c;
        }
    queue = kvt_xmalloc((size_t)n * sizeof *queue);
    inq = kvt_xcalloc((size_t)n, sizeof *inq);
    int32_t head = 0, size = 0;
    for (int32_t q = 0; q < n; q++) {
        d->dist[q] = d->accept[q] ? 0 : INT32_MAX;
        if (d->accept[q]) queue[(head + size++) % n] = q, inq[q] = 1;
    }
    while (size) {
        int32_t q = queue[head];
        head = (head + 1) % n;
        size--;
        inq[q] = 0;
        for (int32_t e = deg[q]; e < deg[q + 1]; e++) {
            int32_t p = radj[e], cand = d->dist[q] + esc_cost(rep[rcls[e]]);
            if (cand < d->dist[p]) {
                d->dist[p] = cand;
                if (!inq[p]) queue[(head + size++) % n] = p, inq[p] = 1;
            }
        }
    }
    for (int32_t i = 0; i < n * k; i++)
        if (d->next[i] >= 0 && d->dist[d->next[i]] == INT32_MAX) d->next[i] = -1;
    free(deg);
    free(radj);
    free(rcls);
    free(fill);
    free(queue);
    free(inq);
}

/* Long: the subset construction in one loop (worklist, moves, count, table growth). */
static jdfa *determinize(const nfa *a, int32_t start, int32_t final, uint32_t min_len, uint32_t max_len) {
    builder b = {.a = a, .final = final};
    b.stack = kvt_xmalloc((size_t)a->n * sizeof *b.stack);
    b.mark = kvt_xcalloc((size_t)a->n, sizeof *b.mark);
    int32_t *set = kvt_xmalloc((size_t)a->n * sizeof *set), *moves = kvt_xmalloc((size_t)a->n * sizeof *moves);
    jdfa *d = kvt_xcalloc(1, sizeof *d);
    uint8_t rep[256];
    d->n_classes = byte_classes(a, d->cls, rep);
    int32_t tcap = 0, ok = 1;
    int32_t n0 = closure(&b, &start, 1, set);
    intern(&b, set, n0, 0);
    for (int32_t i = 0; i < b.n && ok; i++) {
        if (b.n * d->n_classes > tcap) {
            tcap = 2 * b.n * d->n_classes;
            d->next = kvt_xrealloc(d->next, (size_t)tcap * sizeof *d->next);
        }
        for (int32_t c = 0; c < d->n_classes; c++) {
            uint8_t r = rep[c];
            int32_t nm = 0, cnt = b.cnt[i], t = -1;
            int lead = r < 0x80 || r >= 0xC0;
            if (esc_cost(r) && (!lead || max_len == JG_NO_LIMIT || (uint32_t)cnt < max_len)) {
                for (int32_t j = b.off[i]; j < b.off[i + 1]; j++) {
                    const nstate *st = &a->s[b.pool[j]];
                    if (st->is_range && r >= st->lo && r <= st->hi) moves[nm++] = st->out1;
                }
            }
            if (nm) {
                if (lead) cnt = max_len == JG_NO_LIMIT ? (int32_t)KVT_MIN((uint32_t)cnt + 1, min_len) : cnt + 1;
                int32_t ns = closure(&b, moves, nm, set);
                t = intern(&b, set, ns, cnt);
                if (t < 0) ok = 0;
            }
            d->next[i * d->n_classes + c] = t;
        }
    }
    d->n_states = b.n;
    d->accept = kvt_xcalloc((size_t)b.n + 1, 1);
    d->dist = kvt_xmalloc(((size_t)b.n + 1) * sizeof *d->dist);
    for (int32_t i = 0; i < b.n; i++) {
        int has_final = 0;
        for (int32_t j = b.off[i]; j < b.off[i + 1]; j++) has_final |= b.pool[j] == final;
        d->accept[i] = has_final && (uint32_t)b.cnt[i] >= min_len;
    }
    void *owned[] = {b.stack, b.mark, b.pool, b.off, b.cnt, b.hash, set, moves};
    for (size_t i = 0; i < KVT_ARRAY_LEN(owned); i++) free(owned[i]);
    if (!ok) {
        kvt_jrx_free(d);
        return NULL;
    }
    trim(d, rep);
    return d;
}

int kvt_jrx_compile(const char *pattern, uint32_t min_len, uint32_t max_len, jdfa **out, char *err, size_t cap) {
    *out = NULL;
    if ((min_len > MAX_LEN_FOLD) || (max_len != JG_NO_LIMIT && max_len > MAX_LEN_FOLD)) {
        snprintf(err, cap, "'minLength'/'maxLength' beside a 'pattern' or 'format' must be at most %d", MAX_LEN_FOLD);
        return KVT_EARG;
    }
    parser ps = {.p = pattern, .start = pattern, .end = pattern + strlen(pattern), .err = err, .cap = cap};
    rx *x = parse_alt(&ps);
    if (x && ps.p < ps.end) {
        perr(&ps, "'pattern' has %s (at offset %d)", "an unmatched ')'");
        rx_free(x);
        x = NULL;
    }
    if (!x) return KVT_EARG;
    nfa a = {0};
    int32_t e, s = build(&a, x, &e);
    rx_free(x);
    jdfa *d = a.over ? NULL : determinize(&a, s, e, min_len, max_len);
    free(a.s);
    if (!d) {
        snprintf(err, cap, "'pattern' is too large for the token mask (more than %d automaton states)",
                 a.over ? MAX_NFA : MAX_DFA);
        return KVT_EARG;
    }
    if (d->dist[0] == INT32_MAX) {
        kvt_jrx_free(d);
        snprintf(err, cap, "no string matches the 'pattern' or 'format' within 'minLength'/'maxLength'");
        return KVT_EARG;
    }
    *out = d;
    return 0;
}

void kvt_jrx_free(jdfa *d) {
    if (!d) return;
    free(d->next);
    free(d->accept);
    free(d->dist);
    free(d);
}
