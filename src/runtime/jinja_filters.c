// SPDX-License-Identifier: MIT
/* The Jinja library chat templates call: filters ("x | trim"), tests
 * ("x is string"), the methods of strings and dicts ("s.split('</think>')",
 * "d.items()", "'{}'.format(x)", loop.cycle), "%" formatting of strings,
 * and the globals range, namespace, dict, raise_exception and strftime_now.
 * Lengths, indexes and slices count code points, as Python does; the string
 * methods and case changes are jinja_str.c's. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "jinja_impl.h"

static int name_is(const char *name, size_t n, const char *s) { return n == strlen(s) && !memcmp(name, s, n); }
static int ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static jv arg(jctx *x, const jv *a, size_t na, size_t i, const jnode *kw, const char *name);

static jv need_str(jctx *x, const jnode *at, jv v, const char *what) {
    if (v.k != JV_STR) jx_fail(x, KVT_EFORMAT, at, "%s needs a string, not %s", what, jv_type_name(v));
    return v;
}

static jv items_of(jctx *x, jv d) {
    jv l = jv_new_list(x);
    for (size_t i = 0; i < d.u.d->n; i++) {
        jv pair = jv_new_list(x);
        pair.u.l->tuple = 1; /* (key, value), as Python's items() */
        jv_list_push(x, pair.u.l, d.u.d->key[i]);
        jv_list_push(x, pair.u.l, d.u.d->val[i]);
        jv_list_push(x, l.u.l, pair);
    }
    return l;
}

jv jx_method(jctx *x, const jnode *at, jv self, const char *name, size_t nlen, const jv *a, size_t n, const jnode *kw,
             int *found) {
    *found = 0;
    if (self.k == JV_STR) return jx_str_method(x, at, self, name, nlen, a, n, kw, found);
    if (self.k != JV_DICT) return jv_undef();
    *found = 1;
    if (self.u.d->loop && name_is(name, nlen, "cycle")) { /* loop.cycle(a, b, ...): the values in turn */
        jv i = jv_int(0);
        if (!n) jx_fail(x, KVT_EFORMAT, at, "loop.cycle needs at least one value");
        jv_dict_get(self.u.d, "index0", 6, &i);
        return a[(size_t)i.u.i % n];
    }
    if (name_is(name, nlen, "items")) return items_of(x, self);
    if (name_is(name, nlen, "keys") || name_is(name, nlen, "values")) {
        jv l = jv_new_list(x);
        for (size_t i = 0; i < self.u.d->n; i++)
            jv_list_push(x, l.u.l, name[0] == 'k' ? self.u.d->key[i] : self.u.d->val[i]);
        return l;
    }
    if (name_is(name, nlen, "get") && n >= 1) {
        for (size_t i = 0; i < self.u.d->n; i++)
            if (jv_equal(self.u.d->key[i], a[0])) return self.u.d->val[i];
        return n > 1 ? a[1] : jv_none();
    }
    *found = 0;
    return jv_undef();
}

/* ---- tests ------------------------------------------------------------------- */

int jx_test(jctx *x, const jnode *at, const char *name, size_t n, jv v, const jv *a, size_t na) {
    int num = v.k == JV_INT || v.k == JV_FLOAT;
    if (name_is(name, n, "defined")) return v.k != JV_UNDEF;
    if (name_is(name, n, "undefined")) return v.k == JV_UNDEF;
    if (name_is(name, n, "none")) return v.k == JV_NONE;
    if (name_is(name, n, "string")) return v.k == JV_STR;
    if (name_is(name, n, "mapping")) return v.k == JV_DICT || v.k == JV_NS;
    if (name_is(name, n, "iterable")) return v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT;
    if (name_is(name, n, "sequence")) return v.k == JV_STR || (v.k == JV_LIST && !v.u.l->gen) || v.k == JV_DICT;
    if (name_is(name, n, "number")) return num;
    if (name_is(name, n, "integer")) return v.k == JV_INT;
    if (name_is(name, n, "float")) return v.k == JV_FLOAT;
    if (name_is(name, n, "boolean")) return v.k == JV_BOOL;
    if (name_is(name, n, "true")) return v.k == JV_BOOL && v.u.i;
    if (name_is(name, n, "false")) return v.k == JV_BOOL && !v.u.i;
    if (name_is(name, n, "callable")) return v.k == JV_MACRO;
    if (name_is(name, n, "lower") || name_is(name, n, "upper")) return v.k == JV_STR && jx_is_case(v, name[0] == 'u');
    if ((name_is(name, n, "odd") || name_is(name, n, "even")) && v.k == JV_INT)
        return (int)(v.u.i & 1) == (name[0] == 'o');
    if (na == 1) {
        if (name_is(name, n, "divisibleby") && v.k == JV_INT && a[0].k == JV_INT && a[0].u.i)
            return v.u.i % a[0].u.i == 0;
        if (name_is(name, n, "eq") || name_is(name, n, "equalto") || name_is(name, n, "==") ||
            name_is(name, n, "sameas"))
            return jv_equal(v, a[0]) && (!name_is(name, n, "sameas") || v.k == a[0].k);
        if (name_is(name, n, "ne")) return !jv_equal(v, a[0]);
        /* the comparison tests, under Jinja's names and its operator aliases */
        if (name_is(name, n, "lt") || name_is(name, n, "lessthan") || name_is(name, n, "<"))
            return jx_compare(x, at, v, a[0]) < 0;
        if (name_is(name, n, "le") || name_is(name, n, "<=")) return jx_compare(x, at, v, a[0]) <= 0;
        if (name_is(name, n, "gt") || name_is(name, n, "greaterthan") || name_is(name, n, ">"))
            return jx_compare(x, at, v, a[0]) > 0;
        if (name_is(name, n, "ge") || name_is(name, n, ">=")) return jx_compare(x, at, v, a[0]) >= 0;
        if (name_is(name, n, "in")) return jx_contains(x, at, v, a[0]); /* as the operator: 'a' is in 'abc' */
    }
    jx_fail(x, KVT_EFORMAT, at, "no test named '%.*s' (with %zu arguments)", (int)KVT_MIN(n, 64), name, na);
}

/* ---- filters ----------------------------------------------------------------- */

/* obj's attribute path "a.b" (selectattr, map, join, sort). */
static jv attr_path(jv obj, jv path) {
    const char *p = path.u.s.p, *end = p + path.u.s.n;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t n = dot ? (size_t)(dot - p) : (size_t)(end - p);
        jv v;
        size_t digits = 0;
        while (digits < n && digits < 18 && p[digits] >= '0' && p[digits] <= '9') digits++;
        if (obj.k == JV_LIST && n && digits == n) { /* "0" is an item of a list, as in Jinja */
            size_t i = (size_t)strtoull(p, NULL, 10);
            if (i >= obj.u.l->n) return jv_undef();
            obj = obj.u.l->v[i];
            if (!dot) break;
            p = dot + 1;
            continue;
        }
        if ((obj.k != JV_DICT && obj.k != JV_NS) || !jv_dict_get(obj.u.d, p, n, &v)) return jv_undef();
        obj = v;
        if (!dot) break;
        p = dot + 1;
    }
    return obj;
}

static jv as_list(jctx *x, const jnode *at, jv v, const char *filter) {
    if (v.k == JV_LIST) return v;
    jv l = jv_new_list(x);
    if (v.k == JV_UNDEF) return l;
    if (v.k == JV_DICT) {
        for (size_t i = 0; i < v.u.d->n; i++) jv_list_push(x, l.u.l, v.u.d->key[i]);
        return l;
    }
    if (v.k == JV_STR) {
        for (size_t i = 0; i < v.u.s.n;) {
            size_t k = 1;
            while (i + k < v.u.s.n && ((unsigned char)v.u.s.p[i + k] & 0xC0) == 0x80) k++;
            jv_list_push(x, l.u.l, jv_strn(v.u.s.p + i, k));
            i += k;
        }
        return l;
    }
    jx_fail(x, KVT_EFORMAT, at, "%s needs a list, not %s", filter, jv_type_name(v));
}

/* selectattr/rejectattr (by attribute) and select/reject (the item itself):
 * keep the items a test (default: truth) passes, or fails when reject. */
static jv select_items(jctx *x, const jnode *at, jv v, const jv *a, size_t na, int by_attr, int reject) {
    jv in = jv_truthy(v) ? as_list(x, at, v, "select") : jv_new_list(x), out = jv_new_list(x); /* none: nothing */
    out.u.l->gen = 1;
    if (by_attr && (na < 1 || a[0].k != JV_STR)) jx_fail(x, KVT_EFORMAT, at, "selectattr needs an attribute name");
    size_t skip = by_attr ? 1 : 0;
    for (size_t i = 0; i < in.u.l->n; i++) {
        jv it = by_attr ? attr_path(in.u.l->v[i], a[0]) : in.u.l->v[i];
        int ok;
        if (na > skip) {
            jv t = need_str(x, at, a[skip], "a test name");
            ok = jx_test(x, at, t.u.s.p, t.u.s.n, it, a + skip + 1, na - skip - 1);
        } else {
            ok = jv_truthy(it);
        }
        if (ok != reject) jv_list_push(x, out.u.l, in.u.l->v[i]);
    }
    return out;
}

static jv map_items(jctx *x, const jnode *at, jv v, const jv *a, size_t na, const jnode *kw) {
    jv in = jv_truthy(v) ? as_list(x, at, v, "map") : jv_new_list(x), out = jv_new_list(x); /* none: nothing */
    out.u.l->gen = 1;
    jv path = jx_kwarg(x, kw, "attribute"), dflt = jx_kwarg(x, kw, "default");
    for (size_t i = 0; i < in.u.l->n; i++) {
        jv it;
        if (path.k == JV_STR) {
            it = attr_path(in.u.l->v[i], path);
            if (it.k == JV_UNDEF && dflt.k != JV_UNDEF) it = dflt;
        } else if (na >= 1 && a[0].k == JV_STR) {
            it = jx_filter(x, at, a[0].u.s.p, a[0].u.s.n, in.u.l->v[i], a + 1, na - 1, NULL);
        } else {
            jx_fail(x, KVT_EFORMAT, at, "map needs attribute= or a filter name");
        }
        jv_list_push(x, out.u.l, it);
    }
    return out;
}

static jv indent(jctx *x, jv s, long long width, int first, int blank) {
    jbuf b = {.x = x};
    const char *p = s.u.s.p, *end = p + s.u.s.n;
    for (int line = 0; p <= end; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        int is_blank = 1;
        for (size_t i = 0; i < n; i++) is_blank &= ws(p[i]);
        if ((line || first) && (blank || !is_blank))
            for (long long i = 0; i < width && i < 256; i++) jb_put(&b, " ", 1);
        jb_put(&b, p, n);
        if (!nl) break;
        jb_put(&b, "\n", 1);
        p = nl + 1;
    }
    return jb_done(&b);
}

static jv first_last(jctx *x, const jnode *at, jv v, int last) {
    jv l = as_list(x, at, v, last ? "last" : "first");
    if (last && l.u.l->gen) jx_fail(x, KVT_EFORMAT, at, "last: 'generator' object is not reversible");
    return l.u.l->n ? l.u.l->v[last ? l.u.l->n - 1 : 0] : jv_undef();
}

static jv length(jctx *x, const jnode *at, jv v) {
    switch (v.k) {
    case JV_STR: return jv_int((long long)jx_cp_len(v.u.s.p, v.u.s.n));
    case JV_LIST:
        if (v.u.l->gen) jx_fail(x, KVT_EFORMAT, at, "object of type 'generator' has no len()");
        return jv_int((long long)v.u.l->n);
    case JV_DICT:
    case JV_NS: return jv_int((long long)v.u.d->n);
    case JV_UNDEF: return jv_int(0);
    default: jx_fail(x, KVT_EFORMAT, at, "a %s has no length", jv_type_name(v));
    }
}

/* The tojson filter as Hugging Face defines it for chat templates: json.dumps(x, ensure_ascii=False,
 * indent=None, separators=None, sort_keys=False), by position or by name. No HTML escaping (Jinja's
 * own tojson would write "<" as "\u003c"): only what JSON itself needs. An indent is a number of
 * spaces or a string; separators a pair of strings, as Kimi's template gives (',', ':'). */
static jv to_json(jctx *x, const jnode *at, jv v, const jv *a, size_t na, const jnode *kw) {
    jv asc = arg(x, a, na, 0, kw, "ensure_ascii"), ind = arg(x, a, na, 1, kw, "indent");
    jv seps = arg(x, a, na, 2, kw, "separators"), sk = arg(x, a, na, 3, kw, "sort_keys");
    if (na > 4) jx_fail(x, KVT_EFORMAT, at, "tojson takes at most 4 arguments, not %zu", na);
    jv_json_style st = {.indent = ind.k != JV_UNDEF && ind.k != JV_NONE,
                        .ascii = jv_truthy(asc),
                        .sort_keys = jv_truthy(sk)};
    if (ind.k == JV_INT || ind.k == JV_BOOL) { /* json.dumps: indent * ' ', none for 0 or less */
        long long w = KVT_MIN(KVT_MAX(ind.u.i, 0), 256);
        char *sp = jx_alloc(x, (size_t)w + 1);
        memset(sp, ' ', (size_t)w);
        st.ind = jv_strn(sp, (size_t)w);
    } else if (ind.k == JV_STR) {
        st.ind = ind;
    } else if (st.indent) {
        jx_fail(x, KVT_EFORMAT, at, "tojson: indent must be an integer or a string, not %s", jv_type_name(ind));
    }
    st.item_sep = jv_strn(st.indent ? "," : ", ", st.indent ? 1 : 2);
    st.key_sep = jv_strn(": ", 2);
    if (seps.k != JV_UNDEF && seps.k != JV_NONE) {
        if (seps.k != JV_LIST || seps.u.l->n != 2 || seps.u.l->v[0].k != JV_STR || seps.u.l->v[1].k != JV_STR)
            jx_fail(x, KVT_EFORMAT, at, "tojson: separators must be a pair of strings, not %s", jv_type_name(seps));
        st.item_sep = seps.u.l->v[0];
        st.key_sep = seps.u.l->v[1];
    }
    jbuf b = {.x = x};
    jv_write_json(&b, v, &st, 0, at);
    return jb_done(&b);
}

static jv reversed(jctx *x, const jnode *at, jv v) {
    jv l = as_list(x, at, v, "reverse"), out = jv_new_list(x);
    for (size_t i = l.u.l->n; i-- > 0;) jv_list_push(x, out.u.l, l.u.l->v[i]);
    if (v.k != JV_STR) return out;
    return jx_join(x, out, jv_strn("", 0));
}

static jv escape_html(jctx *x, jv s) {
    jbuf b = {.x = x};
    for (size_t i = 0; i < s.u.s.n; i++) {
        char c = s.u.s.p[i];
        const char *e = c == '&' ? "&amp;"
            : c == '<'           ? "&lt;"
            : c == '>'           ? "&gt;"
            : c == '"'           ? "&#34;"
            : c == '\''          ? "&#39;"
                                 : NULL;
        if (e) jb_put_marked(&b, e, strlen(e), jx_marked(x, s.u.s.p + i));
        else jb_put(&b, s.u.s.p + i, 1);
    }
    return jb_done(&b);
}

/* A float as an integer, toward zero as Python's int(): NaN and infinities are not numbers there
 * (the default), and a value past 64 bits is an error rather than C's undefined conversion. */
jv jx_float_to_int(jctx *x, const jnode *at, double d, const jv *dflt) {
    if (isnan(d) || isinf(d)) return dflt ? *dflt : jv_int(0);
    if (!(d >= -0x1p63 && d < 0x1p63)) jx_fail(x, KVT_EFORMAT, at, "int: %g does not fit in 64 bits", d);
    return jv_int((long long)d);
}

static jv to_number(jctx *x, const jnode *at, jv v, int as_float, const jv *dflt) {
    if (v.k == JV_INT || v.k == JV_BOOL) return as_float ? jv_float((double)v.u.i) : jv_int(v.u.i);
    if (v.k == JV_FLOAT) return as_float ? v : jx_float_to_int(x, at, v.u.f, dflt);
    if (v.k == JV_STR) {
        jv s = jv_str_copy(x, v.u.s.p, v.u.s.n);
        char *end;
        double d = strtod(s.u.s.p, &end);
        if (end != s.u.s.p && !*end) return as_float ? jv_float(d) : jx_float_to_int(x, at, d, dflt);
    }
    return dflt ? *dflt : as_float ? jv_float(0) : jv_int(0);
}

/* ---- sorting and aggregates --------------------------------------------------- */

/* Counts n steps of work against the render's limit, as the evaluator counts statements: a
 * filter whose work grows faster than its input (sort, unique) cannot run unbounded. */
static void charge(jctx *x, const jnode *at, size_t n) {
    x->steps += n;
    if (x->steps > x->lim.max_steps)
        jx_fail(x, KVT_ELIMIT, at, "rendering took more than %zu steps (a runaway loop?)", x->lim.max_steps);
}

/* Positional argument i, else the keyword argument name, else undefined. */
static jv arg(jctx *x, const jv *a, size_t na, size_t i, const jnode *kw, const char *name) {
    return i < na ? a[i] : jx_kwarg(x, kw, name);
}

/* The value sort, unique, min and max compare for v: the attribute(s) named in attr (a path, or
 * several joined by commas, compared in turn), with strings lowercased unless case-sensitive. */
static jv sort_key(jctx *x, jv v, jv attr, int cs) {
    if (attr.k == JV_STR && memchr(attr.u.s.p, ',', attr.u.s.n)) {
        jv l = jv_new_list(x);
        const char *p = attr.u.s.p, *end = p + attr.u.s.n;
        for (;;) {
            const char *c = memchr(p, ',', (size_t)(end - p));
            jv_list_push(x, l.u.l, sort_key(x, v, jv_strn(p, c ? (size_t)(c - p) : (size_t)(end - p)), cs));
            if (!c) break;
            p = c + 1;
        }
        return l;
    }
    if (attr.k == JV_STR) v = attr_path(v, attr);
    else if (attr.k == JV_INT && v.k == JV_LIST)
        v = attr.u.i >= 0 && (size_t)attr.u.i < v.u.l->n ? v.u.l->v[attr.u.i] : jv_undef();
    return v.k == JV_STR && !cs ? jx_case(x, v, JX_LOWER) : v;
}

/* a < b: -1, a > b: 1, else 0, as Python orders them: numbers, strings, and lists item by item. */
static int order(jctx *x, const jnode *at, jv a, jv b) {
    if (a.k == JV_LIST && b.k == JV_LIST) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            if (jv_equal(a.u.l->v[i], b.u.l->v[i])) continue;
            return order(x, at, a.u.l->v[i], b.u.l->v[i]);
        }
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    return jx_compare(x, at, a, b);
}

/* Sorts idx[0..n) by keys[idx[]] (descending when rev), stably: a merge sort, as Python's sort
 * keeps equal items in their order, also reversed. */
static void merge_sort(jctx *x, const jnode *at, const jv *keys, size_t *idx, size_t *tmp, size_t n, int rev) {
    if (n < 2) return;
    charge(x, at, n);
    size_t h = n / 2;
    merge_sort(x, at, keys, idx, tmp, h, rev);
    merge_sort(x, at, keys, idx + h, tmp, n - h, rev);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c = order(x, at, keys[idx[j]], keys[idx[i]]);
        tmp[k++] = (rev ? c > 0 : c < 0) ? idx[j++] : idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

static jv sorted(jctx *x, const jnode *at, jv l, jv attr, int cs, int rev) {
    size_t n = l.u.l->n;
    jv *keys = jx_alloc(x, (n ? n : 1) * sizeof *keys);
    size_t *idx = jx_alloc(x, (n ? n : 1) * sizeof *idx), *tmp = jx_alloc(x, (n ? n : 1) * sizeof *tmp);
    for (size_t i = 0; i < n; i++) keys[i] = sort_key(x, l.u.l->v[i], attr, cs), idx[i] = i;
    merge_sort(x, at, keys, idx, tmp, n, rev);
    jv out = jv_new_list(x);
    for (size_t i = 0; i < n; i++) jv_list_push(x, out.u.l, l.u.l->v[idx[i]]);
    return out;
}

/* dictsort(case_sensitive=false, by='key', reverse=false): a dict's (key, value) pairs, sorted. */
static jv dictsort(jctx *x, const jnode *at, jv v, const jv *a, size_t na, const jnode *kw) {
    if (v.k != JV_DICT && v.k != JV_NS) jx_fail(x, KVT_EFORMAT, at, "dictsort needs a dict, not %s", jv_type_name(v));
    jv by = arg(x, a, na, 1, kw, "by");
    int by_value = 0;
    if (by.k == JV_STR && by.u.s.n == 5 && !memcmp(by.u.s.p, "value", 5)) by_value = 1;
    else if (by.k != JV_UNDEF && !(by.k == JV_STR && by.u.s.n == 3 && !memcmp(by.u.s.p, "key", 3)))
        jx_fail(x, KVT_EFORMAT, at, "dictsort: by must be 'key' or 'value'");
    return sorted(x, at, items_of(x, v), jv_int(by_value), jv_truthy(arg(x, a, na, 0, kw, "case_sensitive")),
                  jv_truthy(arg(x, a, na, 2, kw, "reverse")));
}

/* unique(case_sensitive=false, attribute=none): the items whose key was not seen before. */
static jv unique(jctx *x, const jnode *at, jv v, const jv *a, size_t na, const jnode *kw) {
    jv l = as_list(x, at, v, "unique"), out = jv_new_list(x), seen = jv_new_list(x);
    jv attr = arg(x, a, na, 1, kw, "attribute");
    int cs = jv_truthy(arg(x, a, na, 0, kw, "case_sensitive"));
    for (size_t i = 0; i < l.u.l->n; i++) {
        jv k = sort_key(x, l.u.l->v[i], attr, cs);
        charge(x, at, seen.u.l->n + 1);
        if (jx_contains(x, at, k, seen)) continue;
        jv_list_push(x, seen.u.l, k);
        jv_list_push(x, out.u.l, l.u.l->v[i]);
    }
    return out;
}

/* min or max (case_sensitive=false, attribute=none): the first smallest or largest item;
 * undefined for no items. */
static jv extreme(jctx *x, const jnode *at, jv v, const jv *a, size_t na, const jnode *kw, int max) {
    jv l = as_list(x, at, v, max ? "max" : "min"), attr = arg(x, a, na, 1, kw, "attribute");
    int cs = jv_truthy(arg(x, a, na, 0, kw, "case_sensitive"));
    if (!l.u.l->n) return jv_undef();
    size_t best = 0;
    jv bk = sort_key(x, l.u.l->v[0], attr, cs);
    for (size_t i = 1; i < l.u.l->n; i++) {
        jv k = sort_key(x, l.u.l->v[i], attr, cs);
        int c = order(x, at, k, bk);
        if (max ? c > 0 : c < 0) best = i, bk = k;
    }
    return l.u.l->v[best];
}

/* sum(attribute=none, start=0): start + each item (or its attribute), as the + operator adds. */
static jv sum(jctx *x, const jnode *at, jv v, const jv *a, size_t na, const jnode *kw) {
    jv l = as_list(x, at, v, "sum"), attr = arg(x, a, na, 0, kw, "attribute"), acc = arg(x, a, na, 1, kw, "start");
    if (acc.k == JV_UNDEF) acc = jv_int(0);
    for (size_t i = 0; i < l.u.l->n; i++)
        acc = jx_add(x, at, acc, attr.k == JV_STR ? attr_path(l.u.l->v[i], attr) : l.u.l->v[i]);
    return acc;
}

/* round(precision=0, method='common'): 'common' is Python's round() (halves to even, on the
 * decimal the float reads as; an integer stays one), 'ceil' and 'floor' scale by 10**precision,
 * round that way and scale back, giving a float. */
static jv round_num(jctx *x, const jnode *at, jv v, const jv *a, size_t na, const jnode *kw) {
    jv pv = arg(x, a, na, 0, kw, "precision"), mv = arg(x, a, na, 1, kw, "method");
    if (v.k != JV_INT && v.k != JV_BOOL && v.k != JV_FLOAT)
        jx_fail(x, KVT_EFORMAT, at, "round needs a number, not %s", jv_type_name(v));
    if (pv.k != JV_UNDEF && pv.k != JV_INT && pv.k != JV_BOOL)
        jx_fail(x, KVT_EFORMAT, at, "round: precision must be an integer, not %s", jv_type_name(pv));
    long long prec = pv.k == JV_UNDEF ? 0 : pv.u.i;
    int method = 0; /* common, ceil, floor */
    if (mv.k == JV_STR && mv.u.s.n == 4 && !memcmp(mv.u.s.p, "ceil", 4)) method = 1;
    else if (mv.k == JV_STR && mv.u.s.n == 5 && !memcmp(mv.u.s.p, "floor", 5)) method = 2;
    else if (mv.k != JV_UNDEF && !(mv.k == JV_STR && mv.u.s.n == 6 && !memcmp(mv.u.s.p, "common", 6)))
        jx_fail(x, KVT_EFORMAT, at, "round: method must be 'common', 'ceil' or 'floor'");
    double f = v.k == JV_FLOAT ? v.u.f : (double)v.u.i;
    if (method) {
        double scale = pow(10.0, (double)KVT_MAX(KVT_MIN(prec, 400), -400));
        double r = (method == 1 ? ceil(f * scale) : floor(f * scale)) / scale;
        return jv_float(r);
    }
    if (v.k != JV_FLOAT) { /* an integer: unchanged, or to a multiple of 10**-prec, halves to even */
        if (prec >= 0) return jv_int(v.u.i);
        if (prec < -18) return jv_int(0);
        long long m = 1;
        for (long long i = 0; i < -prec; i++) m *= 10;
        long long q = v.u.i / m, r = v.u.i % m;
        if (r < 0) q--, r += m; /* floor division */
        if (2 * r > m || (2 * r == m && (q & 1))) q++;
        return jv_int(q * m);
    }
    if (isnan(f) || isinf(f) || prec > 330) return jv_float(f);
    if (prec < 0) {
        if (prec < -308) return jv_float(copysign(0.0, f));
        double scale = pow(10.0, (double)-prec);
        return jv_float(nearbyint(f / scale) * scale);
    }
    char buf[720];                                   /* 309 integer digits, the point and up to 330 decimals */
    snprintf(buf, sizeof buf, "%.*f", (int)prec, f); /* the exact value, rounded half to even */
    return jv_float(strtod(buf, NULL));
}

/* wordcount: runs of word characters (letters, digits, "_"; any non-ASCII character counts as
 * a letter, where Python's \w would ask Unicode). */
static jv wordcount(jv s) {
    long long n = 0;
    int in = 0;
    for (size_t i = 0; i < s.u.s.n; i++) {
        unsigned char c = (unsigned char)s.u.s.p[i];
        int w = c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        n += w && !in;
        in = w;
    }
    return jv_int(n);
}

/* center(width=80): s in spaces up to width code points, the odd space where Python puts it. */
static jv center(jctx *x, const jnode *at, jv s, jv wv) {
    if (wv.k != JV_UNDEF && wv.k != JV_INT) jx_fail(x, KVT_EFORMAT, at, "center: width must be an integer");
    long long width = wv.k == JV_INT ? wv.u.i : 80, len = (long long)jx_cp_len(s.u.s.p, s.u.s.n);
    if (width <= len) return s;
    if ((size_t)width > x->lim.max_output) jx_fail(x, KVT_ELIMIT, at, "center: width past the output limit");
    long long marg = width - len, left = marg / 2 + (marg & width & 1);
    jbuf b = {.x = x};
    for (long long i = 0; i < left; i++) jb_put(&b, " ", 1);
    jb_put(&b, s.u.s.p, s.u.s.n);
    for (long long i = left; i < marg; i++) jb_put(&b, " ", 1);
    return jb_done(&b);
}

jv jx_filter(jctx *x, const jnode *at, const char *name, size_t n, jv v, const jv *a, size_t na, const jnode *kw) {
    const jv *a0 = na ? &a[0] : NULL;
    if (name_is(name, n, "default") || name_is(name, n, "d")) {
        int boolean = na > 1 ? jv_truthy(a[1]) : jv_truthy(jx_kwarg(x, kw, "boolean"));
        if (v.k == JV_UNDEF || (boolean && !jv_truthy(v))) return a0 ? *a0 : jv_strn("", 0);
        return v;
    }
    if (name_is(name, n, "length") || name_is(name, n, "count")) return length(x, at, v);
    if (name_is(name, n, "tojson")) return to_json(x, at, v, a, na, kw);
    if (name_is(name, n, "string")) return jv_to_str(x, v);
    if (name_is(name, n, "items")) {
        if (v.k == JV_UNDEF) return jv_new_list(x);
        if (v.k != JV_DICT && v.k != JV_NS) jx_fail(x, KVT_EFORMAT, at, "items needs a dict, not %s", jv_type_name(v));
        return items_of(x, v);
    }
    if (name_is(name, n, "list")) { /* a new list: of a tuple's items too */
        jv l = as_list(x, at, v, "list"), out = jv_new_list(x);
        for (size_t i = 0; i < l.u.l->n; i++) jv_list_push(x, out.u.l, l.u.l->v[i]);
        return out;
    }
    if (name_is(name, n, "first") || name_is(name, n, "last")) return first_last(x, at, v, name[0] == 'l');
    if (name_is(name, n, "selectattr") || name_is(name, n, "rejectattr"))
        return select_items(x, at, v, a, na, 1, name[0] == 'r');
    if (name_is(name, n, "select") || name_is(name, n, "reject"))
        return select_items(x, at, v, a, na, 0, name[0] == 'r');
    if (name_is(name, n, "map")) return map_items(x, at, v, a, na, kw);
    if (name_is(name, n, "join")) {
        jv l = as_list(x, at, v, "join"), path = jx_kwarg(x, kw, "attribute");
        if (path.k == JV_STR) {
            jv m = jv_new_list(x);
            for (size_t i = 0; i < l.u.l->n; i++) jv_list_push(x, m.u.l, attr_path(l.u.l->v[i], path));
            l = m;
        }
        return jx_join(x, l, a0 ? *a0 : jv_strn("", 0));
    }
    if (name_is(name, n, "reverse")) return reversed(x, at, v);
    if (name_is(name, n, "int") || name_is(name, n, "float")) return to_number(x, at, v, name[0] == 'f', a0);
    if (name_is(name, n, "abs")) { /* of a number only: another kind's union bits are no integer */
        if (v.k == JV_FLOAT) return jv_float(v.u.f < 0 ? -v.u.f : v.u.f);
        if (v.k != JV_INT && v.k != JV_BOOL) jx_fail(x, KVT_EFORMAT, at, "abs needs a number, not %s", jv_type_name(v));
        if (v.u.i == LLONG_MIN) jx_fail(x, KVT_EFORMAT, at, "an integer result does not fit in 64 bits");
        return jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    }
    if (name_is(name, n, "safe")) { /* a Markup string: "+" escapes what is added to it */
        jv s = jv_to_str(x, v);
        s.markup = 1;
        return s;
    }
    if (name_is(name, n, "sort")) {
        jv l = as_list(x, at, v, "sort");
        return sorted(x, at, l, arg(x, a, na, 2, kw, "attribute"), jv_truthy(arg(x, a, na, 1, kw, "case_sensitive")),
                      jv_truthy(arg(x, a, na, 0, kw, "reverse")));
    }
    if (name_is(name, n, "dictsort")) return dictsort(x, at, v, a, na, kw);
    if (name_is(name, n, "unique")) return unique(x, at, v, a, na, kw);
    if (name_is(name, n, "min") || name_is(name, n, "max")) return extreme(x, at, v, a, na, kw, name[1] == 'a');
    if (name_is(name, n, "sum")) return sum(x, at, v, a, na, kw);
    if (name_is(name, n, "round")) return round_num(x, at, v, a, na, kw);
    if (v.k == JV_UNDEF) v = jv_strn("", 0); /* the string filters print an undefined value as "" */
    jv s = jv_to_str(x, v);
    if (name_is(name, n, "trim")) return jx_strip(s, 3, a0);
    if (name_is(name, n, "upper")) return jx_case(x, s, JX_UPPER);
    if (name_is(name, n, "lower")) return jx_case(x, s, JX_LOWER);
    if (name_is(name, n, "capitalize")) return jx_case(x, s, JX_CAPITALIZE);
    if (name_is(name, n, "title")) return jx_case(x, s, JX_TITLE_WORDS);
    if (name_is(name, n, "e") || name_is(name, n, "escape")) return escape_html(x, s);
    if (name_is(name, n, "replace") && na >= 2)
        return jx_replace(x, s, jv_to_str(x, a[0]), jv_to_str(x, a[1]), na > 2 && a[2].k == JV_INT ? a[2].u.i : -1);
    if (name_is(name, n, "wordcount")) return wordcount(s);
    if (name_is(name, n, "center")) return center(x, at, s, arg(x, a, na, 0, kw, "width"));
    if (name_is(name, n, "indent")) {
        jv w = na ? a[0] : jx_kwarg(x, kw, "width"), f = na > 1 ? a[1] : jx_kwarg(x, kw, "first");
        jv bl = na > 2 ? a[2] : jx_kwarg(x, kw, "blank");
        return indent(x, s, w.k == JV_INT ? w.u.i : 4, jv_truthy(f), jv_truthy(bl));
    }
    jx_fail(x, KVT_EFORMAT, at, "no filter named '%.*s'", (int)KVT_MIN(n, 64), name);
}

/* ---- globals ----------------------------------------------------------------- */

static jv range(jctx *x, const jnode *at, const jv *a, size_t na) {
    long long v[3] = {0, 0, 1};
    if (na < 1 || na > 3) jx_fail(x, KVT_EFORMAT, at, "range takes 1 to 3 integers");
    for (size_t i = 0; i < na; i++) {
        if (a[i].k != JV_INT) jx_fail(x, KVT_EFORMAT, at, "range takes integers, not %s", jv_type_name(a[i]));
        v[na == 1 ? 1 : i] = a[i].u.i;
    }
    if (!v[2]) jx_fail(x, KVT_EFORMAT, at, "range step cannot be zero");
    /* in unsigned arithmetic: the span of range(-2**62 * 2, 2**62) does not fit a long long */
    typedef unsigned long long u64;
    u64 span = v[2] > 0 ? (v[1] > v[0] ? (u64)v[1] - (u64)v[0] : 0) : (v[0] > v[1] ? (u64)v[0] - (u64)v[1] : 0);
    u64 step = v[2] > 0 ? (u64)v[2] : -(u64)v[2], steps = span ? (span - 1) / step + 1 : 0;
    if (steps > x->lim.max_steps) jx_fail(x, KVT_ELIMIT, at, "range is longer than %zu", x->lim.max_steps);
    size_t count = (size_t)steps;
    jv l = jv_new_list(x);
    l.u.l->v = jx_alloc(x, (count ? count : 1) * sizeof *l.u.l->v); /* once: no copies as it grows */
    l.u.l->cap = count;
    for (size_t i = 0; i < count; i++) l.u.l->v[l.u.l->n++] = jv_int((long long)((u64)v[0] + (u64)i * (u64)v[2]));
    return l;
}

int jx_is_global(const char *name, size_t n) {
    static const char *const names[] = {"raise_exception", "range", "namespace", "dict", "strftime_now"};
    for (size_t i = 0; i < KVT_ARRAY_LEN(names); i++)
        if (name_is(name, n, names[i])) return 1;
    return 0;
}

jv jx_global(jctx *x, const jnode *at, const char *name, size_t n, const jv *a, size_t na, const jnode *kw, int *found) {
    *found = 1;
    if (name_is(name, n, "raise_exception"))
        jx_fail(x, KVT_EFORMAT, at, "the template raised an error: %.*s",
                na && a[0].k == JV_STR ? (int)KVT_MIN(a[0].u.s.n, 300) : 0, na && a[0].k == JV_STR ? a[0].u.s.p : "");
    if (name_is(name, n, "range")) return range(x, at, a, na);
    if (name_is(name, n, "namespace") || name_is(name, n, "dict")) {
        jv d = jv_new_dict(x, name[0] == 'n' ? JV_NS : JV_DICT);
        if (na && (a[0].k == JV_DICT || a[0].k == JV_NS))
            for (size_t i = 0; i < a[0].u.d->n; i++) jv_dict_set(x, d.u.d, a[0].u.d->key[i], a[0].u.d->val[i]);
        for (const jnode *k = kw; k; k = k->next)
            if (k->t == JN_KWARG) jv_dict_set(x, d.u.d, jv_strn(k->s, k->sn), jx_eval(x, k->a));
        return d;
    }
    if (name_is(name, n, "strftime_now")) {
        if (!na || a[0].k != JV_STR) jx_fail(x, KVT_EFORMAT, at, "strftime_now needs a format string");
        jv f = jv_str_copy(x, a[0].u.s.p, a[0].u.s.n);
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char buf[256];
        size_t len = strftime(buf, sizeof buf, f.u.s.p, &tm);
        return jv_str_copy(x, buf, len);
    }
    *found = 0;
    return jv_undef();
}
