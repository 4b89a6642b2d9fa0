// SPDX-License-Identifier: MIT
/* Case changes as Python makes them, UTF-8 aware: str.lower, str.upper,
 * str.capitalize and str.title, and Jinja's title filter (each word's first
 * character upper case, the rest lower case, words split at whitespace and
 * "-", "(", "{", "[", "<"). The mappings cover every script (jinja_case_tab.h,
 * generated from Python's Unicode data: Latin, Greek with its polytonic
 * letters, Cyrillic, Armenian, Georgian, Cherokee, Glagolitic, Coptic, the
 * fullwidth and circled letters, Deseret, Adlam ...). Full mappings apply where one character becomes
 * several ("ß" upper case is "SS"), and a capital sigma lowers to the final
 * form "ς" at the end of a word, as Python's do. */
#include <stddef.h>

#include "common.h"
#include "jinja_impl.h"

typedef struct {
    unsigned lo, hi; /* code points lo..hi, every step-th one, map to themselves plus delta (or have a property) */
    int delta;
    unsigned step;
} jx_case_run;

typedef struct {
    unsigned cp, kind; /* 0 lower, 1 upper, 2 title */
    unsigned out[3];   /* the mapping, 0-terminated where shorter */
} jx_case_special;

#include "jinja_case_tab.h"

enum { TO_LOWER, TO_UPPER, TO_TITLE };

/* The run of runs[0..n) (sorted) that holds cp, or NULL. */
static const jx_case_run *find_run(const jx_case_run *runs, size_t n, unsigned cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) { /* the first run that ends at or after cp */
        size_t mid = lo + (hi - lo) / 2;
        if (runs[mid].hi < cp) lo = mid + 1;
        else hi = mid;
    }
    if (lo == n || runs[lo].lo > cp || (cp - runs[lo].lo) % runs[lo].step) return NULL;
    return &runs[lo];
}

/* Whether cp has the property whose code points are runs[0..n). */
static int has(const jx_case_run *runs, size_t n, unsigned cp) { return find_run(runs, n, cp) != NULL; }
#define HAS(table, cp) has(table, KVT_ARRAY_LEN(table), cp)

static int cased(unsigned cp) { return HAS(case_cased, cp); }
static int ignorable(unsigned cp) { return HAS(case_ignorable, cp); }

/* cp's mapping of kind with more than one code point, into out[]; how many (0: none). The table
 * is in code point order. */
static size_t special(unsigned cp, unsigned kind, unsigned out[3]) {
    size_t lo = 0, hi = KVT_ARRAY_LEN(case_special);
    while (lo < hi) { /* the first row of cp or past it */
        size_t mid = lo + (hi - lo) / 2;
        if (case_special[mid].cp < cp) lo = mid + 1;
        else hi = mid;
    }
    for (; lo < KVT_ARRAY_LEN(case_special) && case_special[lo].cp == cp; lo++)
        if (case_special[lo].kind == kind) {
            size_t n = 0;
            while (n < 3 && case_special[lo].out[n]) out[n] = case_special[lo].out[n], n++;
            return n;
        }
    return 0;
}

/* cp mapped to kind into out[]; returns how many code points (0: cp stays as it is). Title case
 * is upper case except where the title table says otherwise. */
static size_t map_cp(unsigned cp, int kind, unsigned out[3]) {
    for (int k = kind; k >= TO_UPPER; k = k == TO_TITLE ? TO_UPPER : -1) {
        size_t n = special(cp, (unsigned)k, out);
        if (n) return n;
        const jx_case_run *r = k == TO_UPPER ? find_run(case_upper, KVT_ARRAY_LEN(case_upper), cp)
                                             : find_run(case_title, KVT_ARRAY_LEN(case_title), cp);
        if (r) return out[0] = (unsigned)((int)cp + r->delta), 1;
    }
    if (kind == TO_LOWER) {
        size_t n = special(cp, TO_LOWER, out);
        if (n) return n;
        const jx_case_run *r = find_run(case_lower, KVT_ARRAY_LEN(case_lower), cp);
        if (r) return out[0] = (unsigned)((int)cp + r->delta), 1;
    }
    return 0;
}

/* Whether the capital sigma at p[i] of p[lo..n) ends a word: a cased letter before it and none
 * after it, skipping the case-ignorable characters (apostrophes, accents) between. */
static int final_sigma(const char *p, size_t lo, size_t i, size_t n) {
    size_t j = i, len;
    unsigned c = 0;
    int before = 0;
    while (j > lo) {
        do j--;
        while (j > lo && ((unsigned char)p[j] & 0xC0) == 0x80);
        c = jx_utf8_get(p + j, n - j, &len);
        if (!ignorable(c)) {
            before = cased(c);
            break;
        }
    }
    if (!before) return 0;
    for (j = i + 2; j < n; j += len) { /* U+03A3 is 2 bytes */
        c = jx_utf8_get(p + j, n - j, &len);
        if (!ignorable(c)) return !cased(c);
    }
    return 1;
}

/* A separator of the words of Jinja's title filter: "-", "(", "{", "[", "<" or whitespace
 * (Python's, Unicode's included). */
static int word_sep(unsigned c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || (c >= 9 && c <= 13) ||
        (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
        c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

jv jx_case(jctx *x, jv s, int mode) {
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, len;
    jbuf b = {.x = x};
    int prev_cased = 0, prev_sep = 1;
    size_t ctx = 0; /* where the text a lowering looks back into starts */
    for (size_t i = 0; i < n; i += len) {
        unsigned cp = jx_utf8_get(p + i, n - i, &len), out[3];
        int kind = mode == JX_UPPER ? TO_UPPER : TO_LOWER;
        if (mode == JX_CAPITALIZE && i == 0) kind = TO_TITLE;
        if (mode == JX_TITLE) kind = prev_cased ? TO_LOWER : TO_TITLE, prev_cased = cased(cp);
        if (mode == JX_TITLE_WORDS) { /* each word: its first character upper, the rest lower on their own */
            int sep = word_sep(cp);
            if (sep != prev_sep || i == 0) kind = TO_UPPER, ctx = i + len;
            prev_sep = sep;
        }
        size_t k = map_cp(cp, kind, out);
        if (cp == 0x3A3 && kind == TO_LOWER && final_sigma(p, ctx, i, n)) out[0] = 0x3C2, k = 1;
        int marked = jx_marked(x, p + i);
        if (!k) { /* unchanged: the bytes as they are (an invalid byte too) */
            jb_put_marked(&b, p + i, len, marked);
            continue;
        }
        char u[12];
        size_t un = 0;
        for (size_t m = 0; m < k; m++) un += jx_utf8_put(u + un, out[m]);
        jb_put_marked(&b, u, un, marked);
    }
    return jb_done(&b);
}

int jx_is_case(jv s, int upper) {
    size_t len;
    int seen = 0;
    for (size_t i = 0; i < s.u.s.n; i += len) {
        unsigned cp = jx_utf8_get(s.u.s.p + i, s.u.s.n - i, &len);
        if (HAS(case_titlecase, cp) || (upper ? HAS(case_lowercase, cp) : HAS(case_uppercase, cp))) return 0;
        seen |= upper ? HAS(case_uppercase, cp) : HAS(case_lowercase, cp);
    }
    return seen;
}
