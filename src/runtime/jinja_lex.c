// SPDX-License-Identifier: MIT
/* The Jinja tokenizer (jinja_parse_impl.h): names (Python identifiers, so
 * letters past ASCII too), numbers, strings with Python's escapes, and
 * operators inside a {{ }} or {% %} tag, up to the tag's closing delimiter. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "jinja_parse_impl.h"

typedef struct {
    unsigned lo, hi, cls;
} jx_ident_run;

#include "jinja_ident_tab.h"

/* ---- names ----------------------------------------------------------------- */

enum { ID_NONE, ID_WORD, ID_CONTINUE, ID_START };

/* What the character at s[0..n) is to a name (ID_START: may start one ...), its length in *len. */
static unsigned ident_class(const char *s, size_t n, size_t *len) {
    *len = 1;
    if (!((unsigned char)s[0] & 0x80)) return jp_is_ident(s[0], 1) ? ID_START : jp_is_ident(s[0], 0) ? ID_CONTINUE : 0;
    unsigned cp = jx_utf8_get(s, n, len);
    size_t lo = 0, hi = KVT_ARRAY_LEN(ident_runs);
    while (lo < hi) { /* the first run that ends at or after cp */
        size_t mid = lo + (hi - lo) / 2;
        if (ident_runs[mid].hi < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < KVT_ARRAY_LEN(ident_runs) && ident_runs[lo].lo <= cp ? ident_runs[lo].cls : ID_NONE;
}

/* A name, as Jinja reads one: the longest run of letters, digits, "_" and the other characters
 * an identifier may continue with, which must then be a Python identifier (a first character
 * that may start one). Names compare as written: Python would also take names that normalize
 * alike (NFKC, the ligature "ﬁ" and "fi") for one. */
static void lex_name(parser *p) {
    const char *s = p->src + p->pos;
    size_t left = p->len - p->pos, n = 0, len;
    int ok = 1;
    for (unsigned c; n < left && (c = ident_class(s + n, left - n, &len)) != ID_NONE; n += len)
        ok &= c == ID_START || (n && c == ID_CONTINUE);
    if (!ok) return jp_perr(p, "invalid character in the name '%.*s'", (int)KVT_MIN(n, 60), s);
    p->pos += n;
    p->cur = (tok){.k = T_NAME, .p = s, .n = n};
    p->n_varargs += n == 7 && !memcmp(s, "varargs", 7);
    p->n_kwargs += n == 6 && !memcmp(s, "kwargs", 6);
}

/* ---- tokens inside a tag ---------------------------------------------------- */

void jp_where(parser *p, size_t at, int *line, int *col) {
    if (at < p->w_pos) { /* back (a parse that looked ahead): lines from w_pos, the column anew */
        for (size_t i = at; i < p->w_pos; i++) p->w_line -= p->src[i] == '\n';
        size_t start = at;
        while (start && p->src[start - 1] != '\n') start--;
        p->w_col = 1, p->w_pos = start;
    }
    for (; p->w_pos < at && p->w_pos < p->len; p->w_pos++) {
        unsigned char c = (unsigned char)p->src[p->w_pos];
        if (c == '\n') p->w_line++, p->w_col = 1;
        else if ((c & 0xC0) != 0x80) p->w_col++; /* a character's first byte */
    }
    *line = p->w_line, *col = p->w_col;
}

void jp_skip_space(parser *p) {
    while (p->pos < p->len && jp_is_space(p->src[p->pos])) p->pos++;
}

/* A quoted string with Python's escapes, decoded into the tree's memory. */
static void lex_string(parser *p) {
    char q = p->src[p->pos++];
    size_t e = p->pos; /* the closing quote bounds the decoded size */
    while (e < p->len && p->src[e] != q) e += p->src[e] == '\\' ? 2 : 1;
    char *out = jp_palloc(p, KVT_MIN(e, p->len) - p->pos + 1);
    size_t n = 0;
    while (p->pos < p->len && p->src[p->pos] != q) {
        char c = p->src[p->pos++];
        if (c != '\\' || p->pos >= p->len) {
            out[n++] = c;
            continue;
        }
        c = p->src[p->pos++];
        const char *esc = strchr("nrtbfav0", c);
        if (esc && c) {
            out[n++] = "\n\r\t\b\f\a\v\0"[esc - "nrtbfav0"];
        } else if (c == 'x' || c == 'u' || c == 'U') {
            int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            unsigned v = 0;
            for (int i = 0; i < digits; i++, p->pos++) {
                char h = p->pos < p->len ? p->src[p->pos] : 0;
                int d = h >= '0' && h <= '9' ? h - '0'
                    : h >= 'a' && h <= 'f'   ? h - 'a' + 10
                    : h >= 'A' && h <= 'F'   ? h - 'A' + 10
                                             : -1;
                if (d < 0) return jp_perr(p, "a \\%c escape needs %d hex digits", c, digits);
                v = v * 16 + (unsigned)d;
            }
            if (v > 0x10FFFF) return jp_perr(p, "escape past U+10FFFF");
            n += jx_utf8_put(out + n, v);
        } else if (c == '\n') { /* a line continuation */
        } else {
            if (c != '\\' && c != '\'' && c != '"') out[n++] = '\\';
            out[n++] = c;
        }
    }
    if (p->pos >= p->len) return jp_perr(p, "a string is not closed");
    p->pos++;
    p->cur = (tok){.k = T_STR, .p = out, .n = n};
}

static int digit_of(char c, int base) {
    int d = c >= '0' && c <= '9' ? c - '0'
        : c >= 'a' && c <= 'f'   ? c - 'a' + 10
        : c >= 'A' && c <= 'F'   ? c - 'A' + 10
                                 : 99;
    return d < base ? d : -1;
}

/* The length of the digits of base at s[i..n), a single '_' allowed between two of them (and
 * before the first where lead): Jinja's "(\d+_)*\d+" and "(_?[\da-f])+"; 0 for none. */
static size_t digit_run(const char *s, size_t n, size_t i, int base, int lead) {
    size_t k = i;
    for (;;) {
        size_t j = k + (k < n && s[k] == '_' && (k > i || lead));
        if (j >= n || digit_of(s[j], base) < 0) break;
        k = j + 1;
    }
    return k - i;
}

/* A number as Jinja reads one: a float (digits with a fraction, an exponent or both), else an
 * integer in decimal, or after 0x, 0o or 0b in hexadecimal, octal or binary (either case); a
 * single '_' may separate digits (1_000). */
static void lex_number(parser *p) {
    const char *s = p->src + p->pos;
    size_t left = p->len - p->pos, i = digit_run(s, left, 0, 10, 0), j = i;
    size_t fr = j < left && s[j] == '.' ? digit_run(s, left, j + 1, 10, 0) : 0;
    if (fr) j += 1 + fr;
    if (j < left && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1 + (j + 1 < left && (s[j + 1] == '+' || s[j + 1] == '-'));
        size_t ex = digit_run(s, left, k, 10, 0);
        if (ex) j = k + ex;
    }
    if (j > i) { /* a float: its text without the underscores */
        char *buf = jp_palloc(p, j + 1);
        size_t n = 0;
        for (size_t k = 0; k < j; k++)
            if (s[k] != '_') buf[n++] = s[k];
        p->pos += j;
        p->cur = (tok){.k = T_FLOAT, .f = strtod(buf, NULL)};
        return;
    }
    int base = 10;
    size_t at = 0;
    if (s[0] == '0' && left > 1 && strchr("xXoObB", s[1]) && s[1]) {
        base = s[1] == 'x' || s[1] == 'X' ? 16 : s[1] == 'o' || s[1] == 'O' ? 8 : 2;
        at = 2;
        i = digit_run(s, left, 2, base, 1);
        if (!i)
            return jp_perr(p, "'%.2s' needs %s digits after it", s,
                           base == 16      ? "hexadecimal"
                               : base == 8 ? "octal"
                                           : "binary");
    } else if (s[0] == '0') {
        for (size_t k = 0; k < i; k++)
            if (s[k] != '0' && s[k] != '_')
                return jp_perr(p, "an integer literal cannot start with 0 (write 0o for octal)");
    }
    unsigned long long v = 0;
    for (size_t k = at; k < at + i; k++) {
        if (s[k] == '_') continue;
        unsigned long long d = (unsigned long long)digit_of(s[k], base);
        if (v > (__LONG_LONG_MAX__ - d) / (unsigned long long)base)
            return jp_perr(p, "an integer literal is too large (past 64 bits)");
        v = v * (unsigned long long)base + d;
    }
    p->pos += at + i;
    p->cur = (tok){.k = T_INT, .i = (long long)v};
}

/* The next token in a tag; T_END at its closing delimiter (consumed, with the
 * whitespace control it asks for). */
void jp_lex(parser *p) {
    if (p->err[0]) { /* after an error every token is the end, so each loop stops */
        p->cur.k = T_EOF;
        return;
    }
    jp_skip_space(p);
    p->tok_at = p->pos;
    if (p->pos >= p->len) return jp_perr(p, "a tag is not closed");
    const char *s = p->src + p->pos;
    size_t left = p->len - p->pos;
    int minus = left >= 3 && s[0] == '-' && s[1] == p->closer && s[2] == '}';
    if ((minus || (left >= 2 && s[0] == p->closer && s[1] == '}')) && (p->closer == '%' || !p->braces)) {
        p->pos += minus ? 3 : 2;
        if (minus) jp_skip_space(p);
        else if (p->closer == '%' && p->pos < p->len && p->src[p->pos] == '\n') p->pos++;
        p->line_starting = p->src[p->pos - 1] == '\n';
        p->cur = (tok){.k = T_END};
        return;
    }
    if (s[0] >= '0' && s[0] <= '9') return lex_number(p);
    size_t clen;
    if (ident_class(s, left, &clen) != ID_NONE) return lex_name(p);
    if (s[0] == '\'' || s[0] == '"') return lex_string(p);
    static const struct {
        const char *s;
        int op;
    } two[] = {{"==", OP_EQ}, {"!=", OP_NE}, {"<=", OP_LE}, {">=", OP_GE}, {"//", OP_FLOORDIV}, {"**", OP_POW}};
    for (size_t i = 0; i < KVT_ARRAY_LEN(two); i++)
        if (left >= 2 && !memcmp(s, two[i].s, 2)) {
            p->pos += 2;
            p->cur = (tok){.k = T_OP, .p = s, .n = 2, .op = two[i].op};
            return;
        }
    if (!strchr("+-*/%~<>()[]{},:.|=", s[0]) || !s[0])
        return jp_perr(p, "unexpected character '%.*s' in a tag", (int)clen, s);
    p->braces += s[0] == '{' ? 1 : s[0] == '}' && p->braces ? -1 : 0;
    p->pos++;
    p->cur = (tok){.k = T_OP, .p = s, .n = 1, .op = s[0]};
}

int jp_is_name(const parser *p, const char *name) {
    return p->cur.k == T_NAME && p->cur.n == strlen(name) && !memcmp(p->cur.p, name, p->cur.n);
}
void jp_expect_op(parser *p, int op) {
    if (!jp_is_op(p, op)) jp_perr(p, "expected '%c'", op);
    else jp_lex(p);
}
void jp_expect_end(parser *p) {
    if (p->cur.k != T_END) jp_perr(p, "expected the end of the tag");
}
