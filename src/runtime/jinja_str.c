// SPDX-License-Identifier: MIT
/* Strings for the Jinja interpreter: the methods templates call on them
 * ("s.split('</think>')", "s.strip()", "'{}'.format(x)", ...) and the pieces
 * the string filters share (strip, replace, join), each with Python's
 * semantics; case changes are jinja_case.c's. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "jinja_impl.h"

static int name_is(const char *name, size_t n, const char *s) { return n == strlen(s) && !memcmp(name, s, n); }
static int ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static jv need_str(jctx *x, const jnode *at, jv v, const char *what) {
    if (v.k != JV_STR) jx_fail(x, KVT_EFORMAT, at, "%s needs a string, not %s", what, jv_type_name(v));
    return v;
}

jv jx_strip(jv s, int which, const jv *chars) {
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    const int set = chars && chars->k == JV_STR;
#define STRIPPED(c) (set ? memchr(chars->u.s.p, (c), chars->u.s.n) != NULL : ws(c))
    if (which & 1)
        while (n && STRIPPED(*p)) p++, n--;
    if (which & 2)
        while (n && STRIPPED(p[n - 1])) n--;
#undef STRIPPED
    return jv_strn(p, n);
}

jv jx_replace(jctx *x, jv s, jv from, jv to, long long count) {
    jbuf b = {.x = x};
    size_t i = 0, done = 0;
    if (!from.u.s.n) return s; /* Python inserts between characters; no template relies on that */
    while (i < s.u.s.n) {
        if ((count < 0 || (long long)done < count) && i + from.u.s.n <= s.u.s.n &&
            !memcmp(s.u.s.p + i, from.u.s.p, from.u.s.n)) {
            jb_put(&b, to.u.s.p, to.u.s.n);
            i += from.u.s.n, done++;
        } else {
            jb_put(&b, s.u.s.p + i++, 1);
        }
    }
    return jb_done(&b);
}

/* The list l in reverse order, in place (rsplit collects its pieces from the right). */
static jv reverse_in_place(jv l) {
    for (size_t i = 0, n = l.u.l->n; i < n / 2; i++) {
        jv t = l.u.l->v[i];
        l.u.l->v[i] = l.u.l->v[n - 1 - i];
        l.u.l->v[n - 1 - i] = t;
    }
    return l;
}

/* str.split(None, maxsplit) and str.rsplit (right): runs of whitespace, no empty items. Once
 * maxsplit pieces are cut, the rest is one piece with only its whitespace on the cutting side
 * dropped, as Python keeps the other side's ('a b  '.split(None, 1) is ['a', 'b  ']). */
static jv split_ws(jctx *x, jv s, long long maxsplit, int right) {
    jv l = jv_new_list(x);
    const char *p = s.u.s.p, *end = p + s.u.s.n;
    while (p < end) {
        if (right)
            while (p < end && ws(end[-1])) end--;
        else
            while (p < end && ws(*p)) p++;
        if (p == end) break;
        if (maxsplit >= 0 && (long long)l.u.l->n >= maxsplit) {
            jv_list_push(x, l.u.l, jv_strn(p, (size_t)(end - p)));
            break;
        }
        const char *w = right ? end : p;
        if (right) {
            while (p < end && !ws(end[-1])) end--;
            jv_list_push(x, l.u.l, jv_strn(end, (size_t)(w - end)));
        } else {
            while (p < end && !ws(*p)) p++;
            jv_list_push(x, l.u.l, jv_strn(w, (size_t)(p - w)));
        }
    }
    return right ? reverse_in_place(l) : l;
}

/* str.split(sep=None, maxsplit=-1), and str.rsplit (right), which cuts from the end: the two
 * differ once maxsplit stops the cutting ('a.b.c'.rsplit('.', 1) is ['a.b', 'c']) and where
 * separators overlap ('aaa'.rsplit('aa') is ['a', '']). */
static jv split(jctx *x, jv s, const jv *sep, long long maxsplit, int right) {
    if (!sep || sep->k != JV_STR) return split_ws(x, s, maxsplit, right);
    jv l = jv_new_list(x);
    const char *p = s.u.s.p, *end = p + s.u.s.n;
    size_t sn = sep->u.s.n;
    if (!sn) jx_fail(x, KVT_EFORMAT, NULL, "split: empty separator");
    for (;;) {
        const char *hit = NULL;
        if ((maxsplit < 0 || (long long)l.u.l->n < maxsplit) && (size_t)(end - p) >= sn) {
            if (right) {
                for (const char *q = end - sn; !hit; q--) {
                    if (!memcmp(q, sep->u.s.p, sn)) hit = q;
                    if (q == p) break;
                }
            } else {
                for (const char *q = p; q + sn <= end && !hit; q++)
                    if (!memcmp(q, sep->u.s.p, sn)) hit = q;
            }
        }
        if (!hit) break;
        if (right) {
            jv_list_push(x, l.u.l, jv_strn(hit + sn, (size_t)(end - hit - sn)));
            end = hit;
        } else {
            jv_list_push(x, l.u.l, jv_strn(p, (size_t)(hit - p)));
            p = hit + sn;
        }
    }
    jv_list_push(x, l.u.l, jv_strn(p, (size_t)(end - p)));
    return right ? reverse_in_place(l) : l;
}

static int affix(jv s, jv a, int end) {
    if (a.k == JV_LIST) { /* a tuple of choices */
        for (size_t i = 0; i < a.u.l->n; i++)
            if (affix(s, a.u.l->v[i], end)) return 1;
        return 0;
    }
    if (a.k != JV_STR || a.u.s.n > s.u.s.n) return 0;
    return !memcmp(s.u.s.p + (end ? s.u.s.n - a.u.s.n : 0), a.u.s.p, a.u.s.n);
}

jv jx_join(jctx *x, jv list, jv sep) {
    jbuf b = {.x = x};
    for (size_t i = 0; i < list.u.l->n; i++) {
        if (i && sep.k == JV_STR) jb_put(&b, sep.u.s.p, sep.u.s.n);
        jv_write_str(&b, list.u.l->v[i]);
    }
    return jb_done(&b);
}

jv jx_str_method(jctx *x, const jnode *at, jv s, const char *name, size_t nlen, const jv *a, size_t n, const jnode *kw,
                 int *found) {
    *found = 1;
    const jv *a0 = n > 0 ? &a[0] : NULL;
    if (name_is(name, nlen, "strip")) return jx_strip(s, 3, a0);
    if (name_is(name, nlen, "lstrip")) return jx_strip(s, 1, a0);
    if (name_is(name, nlen, "rstrip")) return jx_strip(s, 2, a0);
    if (name_is(name, nlen, "lower")) return jx_case(x, s, JX_LOWER);
    if (name_is(name, nlen, "upper")) return jx_case(x, s, JX_UPPER);
    if (name_is(name, nlen, "capitalize")) return jx_case(x, s, JX_CAPITALIZE);
    if (name_is(name, nlen, "title")) return jx_case(x, s, JX_TITLE);
    if (name_is(name, nlen, "startswith") && n == 1) return jv_bool(affix(s, a[0], 0));
    if (name_is(name, nlen, "endswith") && n == 1) return jv_bool(affix(s, a[0], 1));
    if (name_is(name, nlen, "split") || name_is(name, nlen, "rsplit")) { /* sep= and maxsplit= by name too */
        jv sep = a0 ? *a0 : jx_kwarg(x, kw, "sep"), max = n > 1 ? a[1] : jx_kwarg(x, kw, "maxsplit");
        return split(x, s, &sep, max.k == JV_INT ? max.u.i : -1, name[0] == 'r');
    }
    if (name_is(name, nlen, "replace") && n >= 2)
        return jx_replace(x, s, need_str(x, at, a[0], "replace"), need_str(x, at, a[1], "replace"),
                          n > 2 && a[2].k == JV_INT ? a[2].u.i : -1);
    if (name_is(name, nlen, "find") && n == 1) {
        jv f = need_str(x, at, a[0], "find");
        for (size_t i = 0; i + f.u.s.n <= s.u.s.n; i++)
            if (!memcmp(s.u.s.p + i, f.u.s.p, f.u.s.n)) return jv_int((long long)jx_cp_len(s.u.s.p, i));
        return jv_int(-1);
    }
    if (name_is(name, nlen, "join") && n == 1 && a[0].k == JV_LIST) return jx_join(x, a[0], s);
    if (name_is(name, nlen, "format")) return jx_str_format(x, at, s, a, n, kw);
    *found = 0;
    return jv_undef();
}
