// SPDX-License-Identifier: MIT
/* Jinja values: the render's arena (every value's memory, counted against
 * the memory limit and freed at once), lists and dicts, the conversion of the
 * JSON variables, truth and equality as Python has them, and the three ways a
 * value becomes text: str() as {{ }} prints it, repr() inside a printed list
 * or dict, and json.dumps with ensure_ascii off (tojson). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "jinja_impl.h"

void jx_fail(jctx *x, int code, const jnode *at, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at) snprintf(x->err, sizeof x->err, "template line %d, column %d: %s", at->line, at->col, msg);
    else snprintf(x->err, sizeof x->err, "template: %s", msg);
    x->err_code = code;
    longjmp(x->jb, 1);
}

void *jx_alloc(jctx *x, size_t n) {
    if (n > x->lim.max_memory - KVT_MIN(x->mem, x->lim.max_memory) || x->mem > x->lim.max_memory)
        jx_fail(x, KVT_ELIMIT, NULL, "rendering needs more than %zu bytes of values (a runaway template?)",
                x->lim.max_memory);
    if (x->n_blocks == x->cap_blocks) {
        x->cap_blocks = x->cap_blocks ? x->cap_blocks * 2 : 256;
        x->blocks = kvt_xrealloc(x->blocks, x->cap_blocks * sizeof *x->blocks);
    }
    void *b = kvt_xmalloc(n ? n : 1);
    x->blocks[x->n_blocks++] = b;
    x->mem += n + 16;
    return b;
}

jv jv_str_copy(jctx *x, const char *p, size_t n) {
    char *s = jx_alloc(x, n + 1);
    if (n) memcpy(s, p, n);
    s[n] = 0;
    jx_mark_copy(x, s, p, n);
    return jv_strn(s, n);
}

jv jv_new_list(jctx *x) {
    jv v = {.k = JV_LIST};
    v.u.l = jx_alloc(x, sizeof *v.u.l);
    *v.u.l = (jv_list){0};
    return v;
}

jv jv_new_dict(jctx *x, jv_kind k) {
    jv v = {.k = k};
    v.u.d = jx_alloc(x, sizeof *v.u.d);
    *v.u.d = (jv_dict){0};
    return v;
}

/* Grows an array of n items of size sz with capacity *cap to hold one more
 * (arena memory: the old copy stays until the render ends, counted). */
static void *grow(jctx *x, void *arr, size_t n, size_t *cap, size_t sz) {
    if (n < *cap) return arr;
    size_t nc = *cap ? *cap * 2 : 4;
    void *na = jx_alloc(x, nc * sz);
    if (n) memcpy(na, arr, n * sz);
    *cap = nc;
    return na;
}

void jv_list_push(jctx *x, jv_list *l, jv v) {
    l->v = grow(x, l->v, l->n, &l->cap, sizeof *l->v);
    l->v[l->n++] = v;
}

static int key_is(jv k, const char *s, size_t n) { return k.k == JV_STR && k.u.s.n == n && !memcmp(k.u.s.p, s, n); }

void jv_dict_set(jctx *x, jv_dict *d, jv key, jv val) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->key[i], key)) {
            d->val[i] = val;
            return;
        }
    size_t cap = d->cap;
    d->key = grow(x, d->key, d->n, &cap, sizeof *d->key);
    d->val = grow(x, d->val, d->n, &d->cap, sizeof *d->val);
    d->key[d->n] = key;
    d->val[d->n++] = val;
}

int jv_dict_get(const jv_dict *d, const char *k, size_t kn, jv *out) {
    for (size_t i = 0; i < d->n; i++)
        if (key_is(d->key[i], k, kn)) {
            *out = d->val[i];
            return 1;
        }
    return 0;
}

jv jv_from_json(jctx *x, const cJSON *j) {
    if (!j || cJSON_IsNull(j)) return jv_none();
    if (cJSON_IsBool(j)) return jv_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) < 9e15) return jv_int((long long)d);
        return jv_float(d);
    }
    if (cJSON_IsString(j)) {
        if (x->mark_json) jx_mark(x, j->valuestring, strlen(j->valuestring));
        return jv_strn(j->valuestring, strlen(j->valuestring));
    }
    if (cJSON_IsArray(j)) {
        jv l = jv_new_list(x);
        for (const cJSON *c = j->child; c; c = c->next) jv_list_push(x, l.u.l, jv_from_json(x, c));
        return l;
    }
    if (cJSON_IsObject(j)) {
        jv d = jv_new_dict(x, JV_DICT);
        for (const cJSON *c = j->child; c; c = c->next) {
            if (x->mark_json) jx_mark(x, c->string, strlen(c->string));
            jv_dict_set(x, d.u.d, jv_strn(c->string, strlen(c->string)), jv_from_json(x, c));
        }
        return d;
    }
    return jv_none();
}

int jv_truthy(jv v) {
    switch (v.k) {
    case JV_BOOL:
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.s.n != 0;
    case JV_LIST: return v.u.l->n != 0 || v.u.l->gen;
    case JV_DICT: return v.u.d->n != 0;
    case JV_NS:
    case JV_MACRO: return 1;
    default: return 0;
    }
}

static int is_num(jv v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }
static double num(jv v) { return v.k == JV_FLOAT ? v.u.f : (double)v.u.i; }

int jv_equal(jv a, jv b) {
    if (is_num(a) && is_num(b)) return a.k != JV_FLOAT && b.k != JV_FLOAT ? a.u.i == b.u.i : num(a) == num(b);
    if (a.k != b.k) return 0;
    switch (a.k) {
    case JV_UNDEF:
    case JV_NONE: return 1;
    case JV_STR: return a.u.s.n == b.u.s.n && !memcmp(a.u.s.p, b.u.s.p, a.u.s.n);
    case JV_LIST: /* a tuple is never equal to a list, as in Python: (1, 2) != [1, 2] */
        if (a.u.l->n != b.u.l->n || a.u.l->tuple != b.u.l->tuple) return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_equal(a.u.l->v[i], b.u.l->v[i])) return 0;
        return 1;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            size_t k = 0;
            while (k < b.u.d->n && !jv_equal(a.u.d->key[i], b.u.d->key[k])) k++;
            if (k == b.u.d->n || !jv_equal(a.u.d->val[i], b.u.d->val[k])) return 0;
        }
        return 1;
    default: return a.u.d == b.u.d;
    }
}

const char *jv_type_name(jv v) {
    static const char *const names[] = {"undefined", "none", "boolean", "integer",   "float",
                                        "string",    "list", "dict",    "namespace", "macro"};
    return v.k == JV_LIST && v.u.l->tuple ? "tuple" : v.k == JV_LIST && v.u.l->gen ? "generator" : names[v.k];
}

/* ---- text -------------------------------------------------------------------- */

void jb_put(jbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = KVT_MAX(b->cap * 2, b->n + n + 64);
        char *np = jx_alloc(b->x, nc);
        if (b->n) memcpy(np, b->p, b->n);
        b->p = np, b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, s, n);
    if (b->x->track) jb_mark_from(b, b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jb_put_marked(jbuf *b, const char *s, size_t n, int marked) {
    size_t at = b->n;
    jb_put(b, s, n);
    if (marked) jb_mark(b, at, n);
}

void jb_puts(jbuf *b, const char *s) { jb_put(b, s, strlen(s)); }

jv jb_done(jbuf *b) {
    if (!b->p) jb_put(b, "", 0);
    jb_register(b);
    return jv_strn(b->p, b->n);
}

/* A float as Python's repr: the shortest digits that read back the same,
 * positional from 1e-4 up to 1e16, with ".0" on whole numbers. */
static void write_float(jbuf *b, double f) {
    char s[64];
    if (isnan(f)) return jb_puts(b, "nan");
    if (isinf(f)) return jb_puts(b, f < 0 ? "-inf" : "inf");
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(s, sizeof s, "%.*e", prec - 1, f);
        if (strtod(s, NULL) == f) break;
    }
    snprintf(s, sizeof s, "%.*e", prec - 1, f);
    int exp = atoi(strchr(s, 'e') + 1);
    if (exp < -4 || exp >= 16) {
        char *e = strchr(s, 'e'); /* Python: 1e+16, 1.5e-07 */
        char mant[40];
        snprintf(mant, sizeof mant, "%.*s", (int)(e - s), s);
        char out[64];
        snprintf(out, sizeof out, "%se%c%02d", mant, exp < 0 ? '-' : '+', abs(exp));
        return jb_puts(b, out);
    }
    snprintf(s, sizeof s, "%.*f", KVT_MAX(prec - 1 - exp, 0), f);
    jb_puts(b, s);
    if (!strchr(s, '.')) jb_puts(b, ".0");
}

static void write_int(jbuf *b, long long i) {
    char s[32];
    snprintf(s, sizeof s, "%lld", i);
    jb_puts(b, s);
}

/* Python's repr of a string: single quotes unless it holds ' and no ". */
static void write_str_repr(jbuf *b, const char *p, size_t n) {
    char q = memchr(p, '\'', n) && !memchr(p, '"', n) ? '"' : '\'';
    jb_put(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        char e[8];
        if (c == '\\' || c == (unsigned char)q) e[0] = '\\', e[1] = (char)c, e[2] = 0;
        else if (c == '\n') strcpy(e, "\\n");
        else if (c == '\r') strcpy(e, "\\r");
        else if (c == '\t') strcpy(e, "\\t");
        else if (c < 0x20 || c == 0x7f) snprintf(e, sizeof e, "\\x%02x", c);
        else e[0] = (char)c, e[1] = 0;
        jb_put_marked(b, e, strlen(e), jx_marked(b->x, p + i));
    }
    jb_put(b, &q, 1);
}

void jv_write_repr(jbuf *b, jv v) {
    switch (v.k) {
    case JV_UNDEF: return jb_puts(b, "Undefined"); /* as Jinja prints one inside a list or tuple */
    case JV_STR: return write_str_repr(b, v.u.s.p, v.u.s.n);
    case JV_LIST: /* a tuple in parentheses, one item with a comma after it: (1,) */
        jb_puts(b, v.u.l->tuple ? "(" : "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jb_puts(b, ", ");
            jv_write_repr(b, v.u.l->v[i]);
        }
        return jb_puts(b, !v.u.l->tuple ? "]" : v.u.l->n == 1 ? ",)" : ")");
    case JV_DICT:
        jb_puts(b, "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jb_puts(b, ", ");
            jv_write_repr(b, v.u.d->key[i]);
            jb_puts(b, ": ");
            jv_write_repr(b, v.u.d->val[i]);
        }
        return jb_puts(b, "}");
    default: return jv_write_str(b, v);
    }
}

void jv_write_str(jbuf *b, jv v) {
    switch (v.k) {
    case JV_UNDEF: return;
    case JV_NONE: return jb_puts(b, "None");
    case JV_BOOL: return jb_puts(b, v.u.i ? "True" : "False");
    case JV_INT: return write_int(b, v.u.i);
    case JV_FLOAT: return write_float(b, v.u.f);
    case JV_STR: return jb_put(b, v.u.s.p, v.u.s.n);
    case JV_NS: return jb_puts(b, "<Namespace>");
    case JV_MACRO: return jb_puts(b, "<Macro>");
    case JV_LIST:
        if (v.u.l->gen) return jb_puts(b, "<generator object>"); /* Python adds its address */
        return jv_write_repr(b, v);
    default: return jv_write_repr(b, v);
    }
}

jv jv_to_str(jctx *x, jv v) {
    if (v.k == JV_STR) return v;
    jbuf b = {.x = x};
    jv_write_str(&b, v);
    return jb_done(&b);
}

unsigned jx_utf8_get(const char *p, size_t n, size_t *len) {
    const unsigned char *u = (const unsigned char *)p;
    unsigned c = u[0];
    size_t k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    *len = 1;
    if (k == 1) return c;
    if (!k || k > n) return 0xFFFD;
    unsigned cp = c & (0x7Fu >> k);
    for (size_t i = 1; i < k; i++) {
        if ((u[i] & 0xC0) != 0x80) return 0xFFFD;
        cp = cp << 6 | (u[i] & 63u);
    }
    static const unsigned least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return 0xFFFD;
    *len = k;
    return cp;
}

size_t jx_utf8_put(char *s, unsigned c) {
    if (c < 0x80) return s[0] = (char)c, 1;
    if (c < 0x800) return s[0] = (char)(0xC0 | c >> 6), s[1] = (char)(0x80 | (c & 63)), 2;
    if (c < 0x10000) {
        s[0] = (char)(0xE0 | c >> 12), s[1] = (char)(0x80 | ((c >> 6) & 63)), s[2] = (char)(0x80 | (c & 63));
        return 3;
    }
    s[0] = (char)(0xF0 | c >> 18), s[1] = (char)(0x80 | ((c >> 12) & 63));
    s[2] = (char)(0x80 | ((c >> 6) & 63)), s[3] = (char)(0x80 | (c & 63));
    return 4;
}

/* A JSON string of p[0..n): quotes, backslashes and control characters escaped as json.dumps
 * does, and with ascii every code point past '~' too ("\u00e9", a surrogate pair past U+FFFF;
 * a byte that is not UTF-8 as U+FFFD, where Python would have refused the text). */
static void json_string(jbuf *b, const char *p, size_t n, int ascii) {
    jb_puts(b, "\"");
    size_t run = 0; /* bytes copied as they are */
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)p[i];
        size_t len = 1;
        if (c >= 0x20 && c != '"' && c != '\\' && (c < 0x7f || !ascii)) {
            i++;
            continue;
        }
        unsigned cp = c < 0x80 ? c : jx_utf8_get(p + i, n - i, &len);
        jb_put(b, p + run, i - run);
        char e[24];
        if (c == '"' || c == '\\') e[0] = '\\', e[1] = (char)c, e[2] = 0;
        else if (c == '\n') strcpy(e, "\\n");
        else if (c == '\r') strcpy(e, "\\r");
        else if (c == '\t') strcpy(e, "\\t");
        else if (c == '\b') strcpy(e, "\\b");
        else if (c == '\f') strcpy(e, "\\f");
        else if (cp < 0x10000) snprintf(e, sizeof e, "\\u%04x", cp);
        else
            snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF));
        jb_put_marked(b, e, strlen(e), jx_marked(b->x, p + i));
        i += len;
        run = i;
    }
    jb_put(b, p + run, n - run);
    jb_puts(b, "\"");
}

static void json_newline(jbuf *b, const jv_json_style *st, int level) {
    jb_puts(b, "\n");
    for (int i = 0; i < level; i++) jb_put(b, st->ind.u.s.p, st->ind.u.s.n);
}

/* The order json.dumps writes a dict's items in: as they are, or by key (sort_keys; keys of
 * different kinds cannot be ordered, as in Python). */
static size_t *json_order(jbuf *b, jv d, const jv_json_style *st, const jnode *at) {
    size_t n = d.u.d->n, *idx = jx_alloc(b->x, (n ? n : 1) * sizeof *idx);
    for (size_t i = 0; i < n; i++) {
        size_t k = i;
        if (st->sort_keys) /* insertion: a dict is built one compare per key already */
            for (; k > 0 && jx_compare(b->x, at, d.u.d->key[i], d.u.d->key[idx[k - 1]]) < 0; k--) idx[k] = idx[k - 1];
        idx[k] = i;
    }
    return idx;
}

/* json.dumps: st's separators between items and after keys, and with an indent a new line after
 * each item separator. */
void jv_write_json(jbuf *b, jv v, const jv_json_style *st, int level, const jnode *at) {
    const size_t *order;
    if (level > 512) jx_fail(b->x, KVT_ELIMIT, at, "tojson: a value nests more than 512 deep");
    int is_dict = v.k == JV_DICT || v.k == JV_NS;
    size_t n = v.k == JV_LIST ? v.u.l->n : is_dict ? v.u.d->n : 0;
    if (v.k == JV_LIST && v.u.l->gen)
        jx_fail(b->x, KVT_EFORMAT, at, "tojson: Object of type generator is not JSON serializable");
    switch (v.k) {
    case JV_UNDEF:
    case JV_NONE: return jb_puts(b, "null");
    case JV_BOOL: return jb_puts(b, v.u.i ? "true" : "false");
    case JV_INT: return write_int(b, v.u.i);
    case JV_FLOAT:
        if (isnan(v.u.f)) return jb_puts(b, "NaN");
        if (isinf(v.u.f)) return jb_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        return write_float(b, v.u.f);
    case JV_STR: return json_string(b, v.u.s.p, v.u.s.n, st->ascii);
    case JV_LIST:
    case JV_DICT:
    case JV_NS:
        order = is_dict ? json_order(b, v, st, at) : NULL;
        jb_puts(b, is_dict ? "{" : "[");
        for (size_t i = 0; i < n; i++) {
            if (i) jb_put(b, st->item_sep.u.s.p, st->item_sep.u.s.n);
            if (st->indent) json_newline(b, st, level + 1);
            if (is_dict) {
                jv k = v.u.d->key[order[i]];
                if (k.k == JV_STR) json_string(b, k.u.s.p, k.u.s.n, st->ascii);
                else { /* json.dumps turns a number or boolean key into its string */ jbuf t = {.x = b->x};
                    jv_write_json(&t, k, st, level + 1, at);
                    jv s = jb_done(&t);
                    json_string(b, s.u.s.p, s.u.s.n, st->ascii);
                }
                jb_put(b, st->key_sep.u.s.p, st->key_sep.u.s.n);
            }
            jv_write_json(b, is_dict ? v.u.d->val[order[i]] : v.u.l->v[i], st, level + 1, at);
        }
        if (st->indent && n) json_newline(b, st, level);
        return jb_puts(b, is_dict ? "}" : "]");
    default: jx_fail(b->x, KVT_EFORMAT, at, "tojson: a %s is not JSON", jv_type_name(v));
    }
}
