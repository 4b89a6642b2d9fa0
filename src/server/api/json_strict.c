// SPDX-License-Identifier: MIT
/* The strict JSON check (json_strict.h): an iterative walk over the grammar
 * with a stack of the open containers, a key table for duplicates, and the
 * string rules kvtier's C strings need. */
#include "json_strict.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "common.h"

#define NONE UINT32_MAX
#define ESCAPED 0x80000000u /* key_ent.len: the raw key holds escapes, so it is compared decoded */
#define FRAMES_INIT 16
#define BUCKETS_INIT 64
#define SHOWN_KEY 48 /* bytes of a key quoted in a message */

typedef struct {
    uint32_t off, len;   /* the raw key in the body (between the quotes); len | ESCAPED */
    uint32_t hash, next; /* next: the older entry of the same bucket, or NONE */
} key_ent;

typedef struct {
    char kind;                 /* '{' or '[' */
    uint32_t key_off, key_len; /* object: its current key's raw text (key_off NONE: none yet) */
    uint32_t index;            /* array: the current element */
    uint32_t first;            /* object: its first entry in the key table */
} frame;

typedef struct {
    const char *b;
    size_t n, i;
    const kvt_json_rules *rules;
    kvt_json_report *rep;
    frame *fr;
    int depth, fr_cap;
    int in_key; /* a fault now is inside the key being read (the path ends with it, cut there) */
    /* keys of the open objects: entries in order, chained per bucket newest first */
    key_ent *ent;
    uint32_t n_ent, ent_cap, mask, *bucket;
    char *dec[2]; /* decoded keys: [0] the key being read, [1] the one it is compared with */
    size_t dec_cap[2];
    uint64_t seed;
    size_t keys, n_unknown, first_unknown;
    char unknown[KVT_JSON_UNKNOWN_SHOWN * (SHOWN_KEY + 8)];
} jstate;

/* Copies s[0..n) for a message: bytes outside printable ASCII become '?', cut at cap - 1 with "...". */
static void shown(char *dst, size_t cap, const char *s, size_t n) {
    size_t o = 0;
    for (size_t k = 0; k < n && o + 1 < cap; k++) {
        if (o + 4 >= cap && k + 1 < n) {
            memcpy(dst + o, "...", 3);
            o += 3;
            break;
        }
        dst[o++] = s[k] >= ' ' && s[k] < 0x7f ? s[k] : '?';
    }
    dst[o] = 0;
}

/* The JSON pointer of where the walk is (the current key or index of each open container). */
static void render_path(const jstate *st, size_t fault_off, char *out, size_t cap) {
    size_t o = 0;
    out[0] = 0;
    for (int d = 0; d < st->depth; d++) {
        const frame *f = &st->fr[d];
        char seg[KVT_JSON_PATH_MAX];
        if (f->kind == '[') {
            snprintf(seg, sizeof seg, "/%u", (unsigned)f->index);
        } else {
            if (f->key_off == NONE) break;
            size_t len = f->key_len;
            if (st->in_key && d == st->depth - 1) len = fault_off > f->key_off ? fault_off - f->key_off : 0;
            size_t s = 0;
            seg[s++] = '/';
            for (size_t k = 0; k < len && s + 3 < sizeof seg; k++) {
                char c = st->b[f->key_off + k];
                if (c == '~' || c == '/') { /* JSON pointer's escapes */
                    seg[s++] = '~';
                    seg[s++] = c == '~' ? '0' : '1';
                } else {
                    seg[s++] = c >= ' ' && c < 0x7f ? c : '?';
                }
            }
            seg[s] = 0;
        }
        size_t l = strlen(seg);
        if (o + l + 4 >= cap) {
            snprintf(out + o, cap - o, "/...");
            return;
        }
        memcpy(out + o, seg, l + 1);
        o += l;
    }
}

static int hex4(const char *p) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        int d = c >= '0' && c <= '9' ? c - '0'
            : c >= 'a' && c <= 'f'   ? c - 'a' + 10
            : c >= 'A' && c <= 'F'   ? c - 'A' + 10
                                     : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Decodes the raw text of a string the walk has checked already into out (room for n bytes:
 * the decoded text is never longer). Returns its length. */
static size_t decode(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] != '\\') {
            out[o++] = s[i++];
            continue;
        }
        char e = s[i + 1];
        if (e != 'u') {
            out[o++] = e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e;
            i += 2;
            continue;
        }
        uint32_t cp = (uint32_t)hex4(s + i + 2);
        i += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* a checked high surrogate is followed by its low one */
            cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)hex4(s + i + 2) - 0xDC00);
            i += 6;
        }
        if (cp < 0x80) {
            out[o++] = (char)cp;
        } else if (cp < 0x800) {
            out[o++] = (char)(0xC0 | cp >> 6);
            out[o++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out[o++] = (char)(0xE0 | cp >> 12);
            out[o++] = (char)(0x80 | (cp >> 6 & 0x3F));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        } else {
            out[o++] = (char)(0xF0 | cp >> 18);
            out[o++] = (char)(0x80 | (cp >> 12 & 0x3F));
            out[o++] = (char)(0x80 | (cp >> 6 & 0x3F));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return o;
}

/* A checked key's decoded text in scratch slot (the body itself when it holds no escapes). */
static const char *key_text(jstate *st, int slot, uint32_t off, uint32_t len, size_t *out_len) {
    if (!(len & ESCAPED)) {
        *out_len = len;
        return st->b + off;
    }
    len &= ~ESCAPED;
    if (st->dec_cap[slot] < (size_t)len + 1) {
        st->dec_cap[slot] = KVT_MAX((size_t)len + 1, st->dec_cap[slot] * 2);
        st->dec[slot] = kvt_xrealloc(st->dec[slot], st->dec_cap[slot]);
    }
    *out_len = decode(st->b + off, len, st->dec[slot]);
    st->dec[slot][*out_len] = 0;
    return st->dec[slot];
}

static int fail(jstate *st, kvt_json_fault f, size_t off, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Fills the report; returns -1. */
static int fail(jstate *st, kvt_json_fault f, size_t off, const char *fmt, ...) {
    kvt_json_report *r = st->rep;
    r->fault = f;
    r->offset = off;
    render_path(st, off, r->path, sizeof r->path);
    const frame *root = st->depth ? &st->fr[0] : NULL;
    if (root && root->kind == '{' && root->key_off != NONE && !(st->in_key && st->depth == 1)) {
        size_t l;
        const char *k = key_text(st, 1, root->key_off,
                                 root->key_len | (memchr(st->b + root->key_off, '\\', root->key_len) ? ESCAPED : 0), &l);
        size_t c = KVT_MIN(l, sizeof r->field - 1);
        memcpy(r->field, k, c);
        r->field[c] = 0;
    }
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (r->path[0]) snprintf(r->message, sizeof r->message, "%s (at %s, byte %zu)", what, r->path, off);
    else snprintf(r->message, sizeof r->message, "%s (at byte %zu)", what, off);
    return -1;
}

/* The length of the UTF-8 character at p (left bytes in the body), or 0 with *why. */
static size_t utf8_char(const unsigned char *p, size_t left, const char **why) {
    unsigned c = p[0], lo = 0x80, hi = 0xBF;
    size_t len;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0; /* below: an overlong encoding */
        if (c == 0xED) hi = 0x9F; /* above: an encoded surrogate */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90; /* below: overlong */
        if (c == 0xF4) hi = 0x8F; /* above: past U+10FFFF */
    } else {
        *why = c == 0xC0 || c == 0xC1 ? "an overlong encoding"
            : c >= 0xF5 && c <= 0xF7  ? "a code point above U+10FFFF"
            : c >= 0xF8               ? "a byte UTF-8 never uses"
                                      : "a continuation byte with no character to continue";
        return 0;
    }
    for (size_t k = 1; k < len; k++) {
        unsigned x = k < left ? p[k] : 0;
        if (k == 1 ? x >= lo && x <= hi : (x & 0xC0) == 0x80) continue;
        *why = k > 1 || (x & 0xC0) != 0x80 ? "a character cut short"
            : c == 0xED                    ? "an encoded surrogate (U+D800..U+DFFF)"
            : c == 0xF4                    ? "a code point above U+10FFFF"
                                           : "an overlong encoding";
        return 0;
    }
    return len;
}

/* A \u escape at b[i] ('\\'): *len its length (6, or 12 for a surrogate pair). 0 or -1. */
static int unicode_escape(jstate *st, size_t i, const char *where, size_t *len) {
    const char *b = st->b;
    int cp = i + 6 <= st->n ? hex4(b + i + 2) : -1;
    if (cp < 0) return fail(st, KVT_JSON_SYNTAX, i, "not valid JSON: \\u needs 4 hex digits");
    if (cp == 0) return fail(st, KVT_JSON_NUL, i, "\\u0000 in %s: kvtier's text cannot hold a NUL character", where);
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return fail(st, KVT_JSON_TEXT, i,
                    "unpaired surrogate escape \\u%04x in %s: it is no character and has no UTF-8 form", cp, where);
    *len = 6;
    if (cp < 0xD800 || cp > 0xDBFF) return 0;
    int lo = i + 12 <= st->n && b[i + 6] == '\\' && b[i + 7] == 'u' ? hex4(b + i + 8) : -1;
    if (lo < 0xDC00 || lo > 0xDFFF)
        return fail(st, KVT_JSON_TEXT, i,
                    "unpaired surrogate escape \\u%04x in %s (no low surrogate follows): it is no character and has "
                    "no UTF-8 form",
                    cp, where);
    *len = 12;
    return 0;
}

/* The string at b[i] ('"'): moves past its closing quote. *escaped: it holds escapes. 0 or -1. */
static int scan_string(jstate *st, int is_key, int *escaped) {
    const char *b = st->b, *where = is_key ? "a key" : "a string";
    size_t i = st->i + 1, n = st->n;
    *escaped = 0;
    while (i < n) {
        unsigned char c = (unsigned char)b[i];
        if (c == '"') {
            st->i = i + 1;
            return 0;
        }
        if (c == '\\') {
            *escaped = 1;
            if (i + 1 >= n) break;
            char e = b[i + 1];
            size_t len = 2;
            if (e == 'u' && unicode_escape(st, i, where, &len)) return -1;
            if (e != 'u' && (!e || !strchr("\"\\/bfnrt", e)))
                return fail(st, KVT_JSON_SYNTAX, i, "not valid JSON: \\%c is no escape", e >= ' ' && e < 0x7f ? e : '?');
            i += len;
        } else if (c < 0x20) {
            if (!c) return fail(st, KVT_JSON_NUL, i, "a NUL byte in %s, which JSON does not allow", where);
            return fail(st, KVT_JSON_TEXT, i,
                        "raw control byte 0x%02x in %s: JSON needs it escaped (\\n, \\t, \\u00XX)", c, where);
        } else if (c < 0x80) {
            i++;
        } else {
            const char *why = NULL;
            size_t len = utf8_char((const unsigned char *)b + i, n - i, &why);
            if (!len) return fail(st, KVT_JSON_TEXT, i, "invalid UTF-8 in %s: %s (byte 0x%02x)", where, why, c);
            i += len;
        }
    }
    return fail(st, KVT_JSON_SYNTAX, st->i, "not valid JSON: %s that never ends", where);
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* A number at b[i]: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, at most KVT_JSON_NUMBER_MAX characters. */
static int scan_number(jstate *st) {
    const char *b = st->b;
    size_t i = st->i, n = st->n, start = i;
    if (b[i] == '-') i++;
    if (i < n && b[i] == '0') i++;
    else if (i < n && is_digit(b[i]))
        while (i < n && is_digit(b[i])) i++;
    else return fail(st, KVT_JSON_SYNTAX, start, "not valid JSON: a number needs a digit");
    if (i < n && b[i] == '.') {
        if (++i >= n || !is_digit(b[i]))
            return fail(st, KVT_JSON_SYNTAX, start, "not valid JSON: a digit must follow '.'");
        while (i < n && is_digit(b[i])) i++;
    }
    if (i < n && (b[i] == 'e' || b[i] == 'E')) {
        if (++i < n && (b[i] == '+' || b[i] == '-')) i++;
        if (i >= n || !is_digit(b[i]))
            return fail(st, KVT_JSON_SYNTAX, start, "not valid JSON: an exponent needs a digit");
        while (i < n && is_digit(b[i])) i++;
    }
    if (i - start > KVT_JSON_NUMBER_MAX)
        return fail(st, KVT_JSON_SYNTAX, start, "a number written with more than %d characters", KVT_JSON_NUMBER_MAX);
    st->i = i;
    return 0;
}

static int scan_literal(jstate *st) {
    static const char *const words[] = {"true", "false", "null"};
    for (size_t k = 0; k < KVT_ARRAY_LEN(words); k++) {
        size_t l = strlen(words[k]);
        if (st->n - st->i >= l && !memcmp(st->b + st->i, words[k], l)) {
            st->i += l;
            return 0;
        }
    }
    return fail(st, KVT_JSON_SYNTAX, st->i, "not valid JSON: expected a value");
}

static void skip_ws(jstate *st) {
    while (st->i < st->n) {
        char c = st->b[st->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
        st->i++;
    }
}

/* Chains entry e at the head of its bucket. */
static void chain(jstate *st, uint32_t e) {
    uint32_t *h = &st->bucket[st->ent[e].hash & st->mask];
    st->ent[e].next = *h;
    *h = e;
}

/* Adds a key of the innermost object, growing the table (rechained in order, so each
 * chain stays newest first). */
static void table_add(jstate *st, uint32_t off, uint32_t len, uint32_t hash) {
    if (st->n_ent == st->ent_cap) {
        st->ent_cap = st->ent_cap ? st->ent_cap * 2 : BUCKETS_INIT / 2;
        st->ent = kvt_xrealloc(st->ent, st->ent_cap * sizeof *st->ent);
    }
    if (!st->bucket || st->n_ent + 1 > (st->mask + 1) / 2) {
        uint32_t nb = st->bucket ? (st->mask + 1) * 2 : BUCKETS_INIT;
        free(st->bucket);
        st->bucket = kvt_xmalloc(nb * sizeof *st->bucket);
        memset(st->bucket, 0xFF, nb * sizeof *st->bucket); /* every bucket NONE */
        st->mask = nb - 1;
        for (uint32_t e = 0; e < st->n_ent; e++) chain(st, e);
    }
    st->ent[st->n_ent] = (key_ent){.off = off, .len = len, .hash = hash};
    chain(st, st->n_ent++);
}

/* Offers a key of the root object to the known test; unknown ones are listed for the report. */
static void note_known(jstate *st, const char *k, size_t len, uint32_t off) {
    char key[KVT_JSON_KEY_MAX];
    size_t c = KVT_MIN(len, sizeof key - 1);
    memcpy(key, k, c);
    key[c] = 0;
    if (st->rules->known(st->rules->ctx, key, len)) return;
    if (st->n_unknown++ == 0) st->first_unknown = off;
    if (st->n_unknown > KVT_JSON_UNKNOWN_SHOWN) return;
    char q[SHOWN_KEY];
    shown(q, sizeof q, k, len);
    size_t o = strlen(st->unknown);
    snprintf(st->unknown + o, sizeof st->unknown - o, "%s'%s'", o ? ", " : "", q);
}

/* The key at b[i] ('"') of the innermost object, and the ':' after it. */
static int read_key(jstate *st) {
    frame *f = &st->fr[st->depth - 1];
    if (st->i >= st->n || st->b[st->i] != '"')
        return fail(st, KVT_JSON_SYNTAX, st->i, "not valid JSON: expected a key (a string)");
    f->key_off = (uint32_t)st->i + 1;
    st->in_key = 1;
    int escaped;
    if (scan_string(st, 1, &escaped)) return -1;
    st->in_key = 0;
    f->key_len = (uint32_t)(st->i - 1 - f->key_off);
    if (st->rules->max_keys && ++st->keys > st->rules->max_keys)
        return fail(st, KVT_JSON_LIMIT, f->key_off - 1, "more than %zu object keys in the body", st->rules->max_keys);
    size_t len;
    uint32_t raw = f->key_len | (escaped ? ESCAPED : 0);
    const char *k = key_text(st, 0, f->key_off, raw, &len);
    uint32_t h = (uint32_t)XXH3_64bits_withSeed(k, len, st->seed);
    for (uint32_t e = st->bucket ? st->bucket[h & st->mask] : NONE; e != NONE && e >= f->first; e = st->ent[e].next) {
        size_t ol;
        if (st->ent[e].hash != h) continue;
        const char *o = key_text(st, 1, st->ent[e].off, st->ent[e].len, &ol);
        if (ol != len || memcmp(o, k, len)) continue;
        char q[SHOWN_KEY];
        shown(q, sizeof q, st->b + f->key_off, f->key_len);
        return fail(st, KVT_JSON_DUPLICATE, f->key_off - 1,
                    "duplicate key '%s' (first at byte %u): JSON parsers disagree on which copy counts, so kvtier "
                    "takes neither",
                    q, (unsigned)st->ent[e].off - 1);
    }
    if (st->depth == 1 && st->rules->known) note_known(st, k, len, f->key_off - 1);
    table_add(st, f->key_off, raw, h);
    skip_ws(st);
    if (st->i >= st->n || st->b[st->i] != ':')
        return fail(st, KVT_JSON_SYNTAX, st->i, "not valid JSON: expected ':' after a key");
    st->i++;
    return 0;
}

static int push(jstate *st, char kind) {
    if (st->rules->max_depth && st->depth >= st->rules->max_depth)
        return fail(st, KVT_JSON_DEPTH, st->i, "arrays and objects nested more than %d deep", st->rules->max_depth);
    if (st->depth == st->fr_cap) {
        st->fr_cap = st->fr_cap ? st->fr_cap * 2 : FRAMES_INIT;
        st->fr = kvt_xrealloc(st->fr, (size_t)st->fr_cap * sizeof *st->fr);
    }
    st->fr[st->depth++] = (frame){.kind = kind, .key_off = NONE, .first = st->n_ent};
    st->i++;
    return 0;
}

/* Closes the innermost container; an object's keys leave the table (each is its chain's head). */
static void pop(jstate *st) {
    frame *f = &st->fr[--st->depth];
    while (f->kind == '{' && st->n_ent > f->first) {
        const key_ent *e = &st->ent[--st->n_ent];
        st->bucket[e->hash & st->mask] = e->next;
    }
    st->i++;
}

/* A value at b[i]. Returns 0 when it is whole (a scalar, or an empty container), 1 when a
 * container opened and its first member's value comes next, -1 on a fault. */
static int begin_value(jstate *st) {
    if (st->i >= st->n)
        return fail(st, KVT_JSON_SYNTAX, st->i, "not valid JSON: the body ends where a value should be");
    char c = st->b[st->i];
    int escaped;
    if (c == '{' || c == '[') {
        if (push(st, c)) return -1;
        skip_ws(st);
        if (st->i < st->n && st->b[st->i] == (c == '{' ? '}' : ']')) {
            pop(st);
            return 0;
        }
        return c == '{' && read_key(st) ? -1 : 1;
    }
    if (c == '"') return scan_string(st, 0, &escaped);
    if (c == '-' || is_digit(c)) return scan_number(st);
    if (c == 't' || c == 'f' || c == 'n') return scan_literal(st);
    if (!c) return fail(st, KVT_JSON_NUL, st->i, "a NUL byte, which JSON does not allow");
    return fail(st, KVT_JSON_SYNTAX, st->i, "not valid JSON: expected a value");
}

/* After a member of the innermost container: ',' and the next (1: its value comes next), or the
 * close (0), or -1. */
static int after_value(jstate *st) {
    frame *f = &st->fr[st->depth - 1];
    char close = f->kind == '{' ? '}' : ']';
    if (st->i >= st->n)
        return fail(st, KVT_JSON_SYNTAX, st->i, "not valid JSON: the body ends inside an %s",
                    f->kind == '{' ? "object" : "array");
    char c = st->b[st->i];
    if (c == close) {
        pop(st);
        return 0;
    }
    if (c != ',') return fail(st, KVT_JSON_SYNTAX, st->i, "not valid JSON: expected ',' or '%c'", close);
    st->i++;
    skip_ws(st);
    if (f->kind == '[') {
        f->index++;
        return 1;
    }
    f->key_off = NONE; /* until the next key is read, a fault is at the object itself */
    return read_key(st) ? -1 : 1;
}

static int walk(jstate *st) {
    skip_ws(st);
    if (st->i == st->n) return fail(st, KVT_JSON_SYNTAX, 0, "the body is empty: a JSON value is needed");
    int want_value = 1;
    for (;;) {
        int r = want_value ? begin_value(st) : after_value(st);
        if (r < 0) return -1;
        want_value = r;
        skip_ws(st);
        if (!want_value && !st->depth)
            return st->i == st->n ? 0
                                  : fail(st, KVT_JSON_SYNTAX, st->i,
                                         "the body holds more than one JSON value (unexpected text after the first)");
    }
}

int kvt_json_check(const char *b, size_t n, const kvt_json_rules *rules, kvt_json_report *rep) {
    static const kvt_json_rules none = {0};
    memset(rep, 0, sizeof *rep);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    jstate st = {.b = b, .n = n, .rules = rules ? rules : &none, .rep = rep};
    /* a seed per call: keys that collide cannot be prepared in advance */
    uint64_t mix[3] = {(uint64_t)ts.tv_nsec, (uint64_t)ts.tv_sec, (uint64_t)(uintptr_t)&st};
    st.seed = XXH64(mix, sizeof mix, (uint64_t)(uintptr_t)b);
    int rc = n >= NONE ? fail(&st, KVT_JSON_LIMIT, 0, "the body is 4 GiB or larger") : walk(&st);
    if (!rc && st.n_unknown) {
        st.depth = 0;
        fail(&st, KVT_JSON_UNKNOWN, st.first_unknown, "unknown field%s %s%s", st.n_unknown > 1 ? "s" : "", st.unknown,
             st.n_unknown > KVT_JSON_UNKNOWN_SHOWN ? " and more" : "");
        rc = -1;
    }
    free(st.fr);
    free(st.ent);
    free(st.bucket);
    free(st.dec[0]);
    free(st.dec[1]);
    return rc;
}
