// SPDX-License-Identifier: MIT
/* Jinja's two ways of formatting values into a string: "'{}'.format(x)"
 * (Python's str.format, its fields and format specs) and "'%s' % x" (printf-
 * style conversions, Python's semantics, with the sign, "#" prefix and zero
 * padding of integers done here because C's printf differs for negative hex).
 * Widths and precisions are bounded by the output limit. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "jinja_impl.h"

/* ---- str.format ----------------------------------------------------------------- */

/* A number's text with sep put between each group of `every` digits of its integer part
 * (format's "," and "_"; every 4 is for hexadecimal, octal and binary digits). */
static void group_digits(jbuf *b, const char *s, size_t n, char sep, int every) {
    size_t int_end = 0;
    while (int_end < n &&
           ((s[int_end] >= '0' && s[int_end] <= '9') ||
            (every == 4 && ((s[int_end] >= 'a' && s[int_end] <= 'f') || (s[int_end] >= 'A' && s[int_end] <= 'F')))))
        int_end++;
    for (size_t i = 0; i < int_end; i++) {
        if (sep && i && (int_end - i) % (size_t)every == 0) jb_put(b, &sep, 1);
        jb_put(b, s + i, 1);
    }
    jb_put(b, s + int_end, n - int_end);
}

/* One value by a format spec, [[fill]align][sign][#][0][width][,|_][.precision][type], as
 * Python's format() does for strings, integers and floats.
 * Long: the spec's grammar read in its order, then one branch per presentation type; split, each
 * part would take the whole parsed spec back. */
static void format_value(jctx *x, const jnode *at, jbuf *out, jv v, const char *sp, size_t sn) {
    const char *fill = " ";
    size_t fill_n = 1, i = 0;
    char align = 0, sign = '-', type = 0, group = 0;
    int alt = 0;
    long long width = -1, prec = -1;
    size_t k = 1;
    while (k < sn && ((unsigned char)sp[k] & 0xC0) == 0x80) k++;
    int fill_given = k < sn && strchr("<>=^", sp[k]) && sp[k];
    if (fill_given) fill = sp, fill_n = k, align = sp[k], i = k + 1;
    else if (sn && strchr("<>=^", sp[0]) && sp[0]) align = sp[0], i = 1;
    if (i < sn && (sp[i] == '+' || sp[i] == '-' || sp[i] == ' ')) sign = sp[i++];
    if (i < sn && sp[i] == '#') alt = 1, i++;
    if (i < sn && sp[i] == '0') { /* zeros fill where no fill is given, after the sign where no align is */
        if (!fill_given) fill = "0";
        if (!align) align = '=';
        i++;
    }
    for (; i < sn && sp[i] >= '0' && sp[i] <= '9'; i++)
        width = KVT_MIN(KVT_MAX(width, 0) * 10 + (sp[i] - '0'), 1LL << 40);
    if (i < sn && (sp[i] == ',' || sp[i] == '_')) group = sp[i++];
    if (i < sn && sp[i] == '.') {
        prec = 0;
        for (i++; i < sn && sp[i] >= '0' && sp[i] <= '9'; i++) prec = KVT_MIN(prec * 10 + (sp[i] - '0'), 1LL << 40);
    }
    if (i < sn) type = sp[i++];
    if (i < sn) jx_fail(x, KVT_EFORMAT, at, "format: invalid format specifier '%.*s'", (int)KVT_MIN(sn, 64), sp);
    if ((size_t)KVT_MAX(width, 0) > x->lim.max_output || (size_t)KVT_MAX(prec, 0) > x->lim.max_output)
        jx_fail(x, KVT_ELIMIT, at, "format: a width or precision past the output limit");
    if (v.k == JV_BOOL && sn) v = jv_int(v.u.i); /* a bool formats as an integer under a spec */
    jbuf body = {.x = x};
    const char *pre = "";
    int neg = 0, num = v.k == JV_INT || v.k == JV_FLOAT;
    if (v.k == JV_STR && (!type || type == 's')) {
        if (sign != '-' || align == '=' || alt || group)
            jx_fail(x, KVT_EFORMAT, at, "format: a sign, '=', '#' or grouping is not allowed for a string");
        size_t cut = v.u.s.n;
        if (prec >= 0) {
            cut = 0;
            for (long long c = 0; cut < v.u.s.n; cut++)
                if (((unsigned char)v.u.s.p[cut] & 0xC0) != 0x80 && c++ == prec) break;
        }
        jb_put(&body, v.u.s.p, cut);
        if (!align) align = '<';
    } else if (v.k == JV_STR) {
        jx_fail(x, KVT_EFORMAT, at, "format: unknown format code '%c' for a string", type);
    } else if (!num) {
        if (sn) jx_fail(x, KVT_EFORMAT, at, "format: a %s takes no format spec", jv_type_name(v));
        jv_write_str(&body, v);
    } else if (v.k == JV_INT && (!type || strchr("dnbxXoc", type))) {
        if (prec >= 0) jx_fail(x, KVT_EFORMAT, at, "format: precision is not allowed for an integer");
        unsigned long long mag = v.u.i < 0 ? 0ULL - (unsigned long long)v.u.i : (unsigned long long)v.u.i;
        neg = v.u.i < 0;
        char d[80];
        if (type == 'c') {
            if (v.u.i < 0 || v.u.i > 0x10FFFF) jx_fail(x, KVT_EFORMAT, at, "format: %%c arg not in range(0x110000)");
            jv one = jv_new_list(x);
            one.u.l->tuple = 1;
            jv_list_push(x, one.u.l, v);
            jv c = jx_percent_format(x, at, jv_strn("%c", 2), one);
            jb_put(&body, c.u.s.p, c.u.s.n);
            neg = 0;
        } else if (type == 'b') {
            size_t n = 0;
            do d[n++] = (char)('0' + (mag & 1)), mag >>= 1;
            while (mag);
            for (size_t l = 0; l < n / 2; l++) {
                char t = d[l];
                d[l] = d[n - 1 - l], d[n - 1 - l] = t;
            }
            group_digits(&body, d, n, group, 4);
        } else {
            snprintf(d, sizeof d, type == 'x' ? "%llx" : type == 'X' ? "%llX" : type == 'o' ? "%llo" : "%llu", mag);
            group_digits(&body, d, strlen(d), group, type && strchr("xXo", type) ? 4 : 3);
        }
        if (alt) pre = type == 'b' ? "0b" : type == 'o' ? "0o" : type == 'x' ? "0x" : type == 'X' ? "0X" : "";
    } else if (strchr("eEfFgG%n", type) || !type) {
        double f = v.k == JV_FLOAT ? v.u.f : (double)v.u.i;
        neg = signbit(f) != 0;
        double m = fabs(f) * (type == '%' ? 100 : 1);
        char cf[16];
        int p = (int)(prec < 0 ? 6 : prec);
        if (!type && prec < 0) { /* str() of the number */
            jbuf t = {.x = x};
            jv_write_str(&t, v.k == JV_FLOAT ? jv_float(m) : jv_int(v.u.i < 0 ? -v.u.i : v.u.i));
            jv sv = jb_done(&t);
            group_digits(&body, sv.u.s.p, sv.u.s.n, group, 3);
        } else {
            char ct = type == '%' ? 'f' : type == 'n' ? 'g' : type ? type : 'g';
            if (!type) { /* like 'g', scientific from an exponent of precision - 1, and a ".0" kept */
                p = p ? p : 1;
                char e[64];
                snprintf(e, sizeof e, "%.*e", p - 1, m);
                const char *ep = strchr(e, 'e');
                int ex = ep ? atoi(ep + 1) : 0;
                if (ep && (ex < -4 || ex >= p - 1) && isfinite(m)) ct = 'e', p = p - 1;
            }
            snprintf(cf, sizeof cf, "%%%s.*%c", alt ? "#" : "", ct);
            int len = snprintf(NULL, 0, cf, p, m);
            char *t = jx_alloc(x, (size_t)len + 3); /* room for a ".0" */
            snprintf(t, (size_t)len + 1, cf, p, m);
            if (!type) {
                if (ct == 'e') { /* the mantissa's trailing zeros go, as 'g' drops them */
                    char *ep = strchr(t, 'e'), *z = ep;
                    while (z > t && z[-1] == '0') z--;
                    if (z > t && z[-1] == '.') z--;
                    memmove(z, ep, strlen(ep) + 1);
                } else if (isfinite(m) && !strchr(t, '.')) {
                    strcat(t, ".0");
                }
            }
            group_digits(&body, t, strlen(t), group, 3);
            if (type == '%') jb_put(&body, "%", 1);
        }
    } else {
        jx_fail(x, KVT_EFORMAT, at, "format: unknown format code '%c' for a %s", type, jv_type_name(v));
    }
    jv bv = jb_done(&body);
    const char *sg = neg ? "-" : !num || sign == '-' ? "" : sign == '+' ? "+" : " ";
    long long len = (long long)(jx_cp_len(bv.u.s.p, bv.u.s.n) + strlen(sg) + strlen(pre));
    long long pad = width > len ? width - len : 0, left = 0;
    if (!align) align = num ? '>' : '<';
    if (align == '>' || align == '=') left = pad;
    else if (align == '^') left = pad / 2;
    if (align == '=') jb_puts(out, sg), jb_puts(out, pre);
    for (long long c = 0; c < left; c++) jb_put(out, fill, fill_n);
    if (align != '=') jb_puts(out, sg), jb_puts(out, pre);
    jb_put(out, bv.u.s.p, bv.u.s.n);
    for (long long c = left; c < pad; c++) jb_put(out, fill, fill_n);
}

/* str.format: "{}" and "{0}" take positional arguments, "{name}" keyword ones, each
 * followed by ".attr" or "[key]", then "!r"/"!s" and ":spec"; "{{" and "}}" are braces. A spec
 * may hold fields itself, one level deep ("{:>{w}}"), formatted first with the same arguments
 * and numbering (*next: the automatic numbering's next index; *manual: numbered fields were
 * given, so automatic numbering is not allowed); nested: fmt is such a spec.
 * Long: one scan of the format string, each field's parts in Python's order. */
static jv str_format(jctx *x, const jnode *at, jv fmt, const jv *a, size_t na, const jnode *kw, size_t *next_,
                     int *manual_, int nested) {
    jbuf b = {.x = x};
    const char *p = fmt.u.s.p, *end = p + fmt.u.s.n;
    size_t next = *next_;
    int manual = *manual_;
    while (p < end) {
        if ((*p == '{' || *p == '}') && p + 1 < end && p[1] == *p) {
            jb_put(&b, p, 1);
            p += 2;
            continue;
        }
        if (*p == '}') jx_fail(x, KVT_EFORMAT, at, "format: a single '}' in the format string");
        if (*p != '{') {
            const char *q = p;
            while (q < end && *q != '{' && *q != '}') q++;
            jb_put(&b, p, (size_t)(q - p));
            p = q;
            continue;
        }
        const char *f = ++p, *colon = NULL;
        int open = 0; /* fields open in the spec */
        for (; p < end && (open || *p != '}'); p++) {
            if (*p == ':' && !colon) colon = p;
            if (*p == '{' && !colon) jx_fail(x, KVT_EFORMAT, at, "format: unexpected '{' in a field name");
            if (*p == '{' && (nested || open))
                jx_fail(x, KVT_EFORMAT, at, "format: fields nest more than one level in a format spec");
            open += *p == '{' ? 1 : *p == '}' ? -1 : 0;
        }
        if (p >= end) jx_fail(x, KVT_EFORMAT, at, "format: a '{' field is not closed");
        const char *fe = p++, *ne = colon ? colon : fe;
        const char *bang = memchr(f, '!', (size_t)(ne - f));
        const char *name_end = bang ? bang : ne, *q = f;
        while (q < name_end && *q != '.' && *q != '[') q++;
        jv v = jv_undef();
        if (q == f) {
            if (manual) jx_fail(x, KVT_EFORMAT, at, "format: cannot mix '{}' with numbered fields");
            if (next >= na) jx_fail(x, KVT_EFORMAT, at, "format: not enough positional arguments");
            v = a[next++];
        } else if (*f >= '0' && *f <= '9') {
            if (next) jx_fail(x, KVT_EFORMAT, at, "format: cannot mix '{}' with numbered fields");
            manual = 1;
            size_t idx = 0;
            for (const char *c = f; c < q; c++) {
                if (*c < '0' || *c > '9') jx_fail(x, KVT_EFORMAT, at, "format: a bad field name");
                idx = KVT_MIN(idx * 10 + (size_t)(*c - '0'), (size_t)1 << 30);
            }
            if (idx >= na) jx_fail(x, KVT_EFORMAT, at, "format: no positional argument %zu", idx);
            v = a[idx];
        } else {
            int found = 0;
            for (const jnode *k = kw; k; k = k->next)
                if (k->t == JN_KWARG && k->sn == (size_t)(q - f) && !memcmp(k->s, f, k->sn))
                    v = jx_eval(x, k->a), found = 1;
            if (!found) jx_fail(x, KVT_EFORMAT, at, "format: no argument named '%.*s'", (int)KVT_MIN(q - f, 64), f);
        }
        while (q < name_end) { /* .attr and [key] */
            const char *s = q + 1, *e = s;
            if (*q == '.') {
                while (e < name_end && *e != '.' && *e != '[') e++;
                if ((v.k != JV_DICT && v.k != JV_NS) || !jv_dict_get(v.u.d, s, (size_t)(e - s), &v))
                    jx_fail(x, KVT_EFORMAT, at, "format: no attribute '%.*s'", (int)KVT_MIN(e - s, 64), s);
                q = e;
            } else if (*q == '[') {
                while (e < name_end && *e != ']') e++;
                if (e >= name_end) jx_fail(x, KVT_EFORMAT, at, "format: a '[' is not closed");
                size_t digits = 0;
                while (s + digits < e && s[digits] >= '0' && s[digits] <= '9') digits++;
                jv r = jv_undef();
                if (digits && s + digits == e && v.k == JV_LIST) {
                    size_t idx = (size_t)strtoull(s, NULL, 10);
                    if (idx < v.u.l->n) r = v.u.l->v[idx];
                } else if (v.k == JV_DICT || v.k == JV_NS) {
                    jv_dict_get(v.u.d, s, (size_t)(e - s), &r);
                }
                if (r.k == JV_UNDEF) jx_fail(x, KVT_EFORMAT, at, "format: no item '%.*s'", (int)KVT_MIN(e - s, 64), s);
                v = r, q = e + 1;
            } else {
                jx_fail(x, KVT_EFORMAT, at, "format: a bad field name");
            }
        }
        if (bang) {
            if (ne - bang != 2 || !strchr("rsa", bang[1]) || !bang[1])
                jx_fail(x, KVT_EFORMAT, at, "format: the conversion must be !r, !s or !a");
            jbuf t = {.x = x};
            if (bang[1] == 's') jv_write_str(&t, v);
            else jv_write_repr(&t, v);
            v = jb_done(&t);
        }
        jv spec = jv_strn(colon ? colon + 1 : fe, colon ? (size_t)(fe - colon - 1) : 0);
        if (memchr(spec.u.s.p, '{', spec.u.s.n)) {
            *next_ = next, *manual_ = manual;
            spec = str_format(x, at, spec, a, na, kw, next_, manual_, 1);
            next = *next_, manual = *manual_;
        }
        format_value(x, at, &b, v, spec.u.s.p, spec.u.s.n);
    }
    *next_ = next, *manual_ = manual;
    return jb_done(&b);
}

jv jx_str_format(jctx *x, const jnode *at, jv fmt, const jv *a, size_t na, const jnode *kw) {
    size_t next = 0;
    int manual = 0;
    return str_format(x, at, fmt, a, na, kw, &next, &manual, 0);
}

/* ---- "fmt % args" ------------------------------------------------------------- */

/* An integer conversion (d i u x X o) of v: sign, "#" prefix, precision zeros, then the padding. */
static void fmt_int(jctx *x, const jnode *at, jbuf *b, char conv, jv v, const char *flags, long long width,
                    long long prec) {
    if (v.k == JV_FLOAT && strchr("xXo", conv))
        jx_fail(x, KVT_EFORMAT, at, "%%%c format: an integer is required, not float", conv);
    if (v.k == JV_FLOAT) v = jx_float_to_int(x, at, v.u.f, NULL);
    if (v.k != JV_INT && v.k != JV_BOOL)
        jx_fail(x, KVT_EFORMAT, at, "%%%c format: a number is required, not %s", conv, jv_type_name(v));
    unsigned long long mag = v.u.i < 0 ? 0ULL - (unsigned long long)v.u.i : (unsigned long long)v.u.i;
    char digits[80], body[200];
    snprintf(digits, sizeof digits, conv == 'x' ? "%llx" : conv == 'X' ? "%llX" : conv == 'o' ? "%llo" : "%llu", mag);
    size_t nd = strlen(digits), zeros = prec > (long long)nd ? (size_t)(prec - (long long)nd) : 0;
    const char *sign = v.u.i < 0 ? "-" : strchr(flags, '+') ? "+" : strchr(flags, ' ') ? " " : "";
    const char *prefix = !strchr(flags, '#') ? "" : conv == 'x' ? "0x" : conv == 'X' ? "0X" : conv == 'o' ? "0o" : "";
    size_t len = strlen(sign) + strlen(prefix) + zeros + nd;
    size_t pad = width > (long long)len ? (size_t)(width - (long long)len) : 0;
    int left = strchr(flags, '-') != NULL, zero = !left && strchr(flags, '0');
    snprintf(body, sizeof body, "%s%s", sign, prefix);
    if (!left && !zero)
        for (size_t i = 0; i < pad; i++) jb_put(b, " ", 1);
    jb_puts(b, body);
    for (size_t i = 0; i < zeros + (zero ? pad : 0); i++) jb_put(b, "0", 1);
    jb_put(b, digits, nd);
    if (left)
        for (size_t i = 0; i < pad; i++) jb_put(b, " ", 1);
}

/* "fmt % args": each conversion's %(key), flags, width, precision (or *) and type, in printf's
 * order, the arguments a tuple's items (or a dict for %(key)).
 * Long: one scan of the format string, then one branch per conversion type. */
jv jx_percent_format(jctx *x, const jnode *at, jv fmt, jv args) {
    const jv *av = &args;
    size_t na = 1, used = 0;
    int mapping = args.k == JV_DICT || args.k == JV_NS || (args.k == JV_LIST && !args.u.l->tuple);
    if (args.k == JV_LIST && args.u.l->tuple) av = args.u.l->v, na = args.u.l->n;
    jbuf b = {.x = x};
    const char *p = fmt.u.s.p, *end = p + fmt.u.s.n;
    while (p < end) {
        const char *pc = memchr(p, '%', (size_t)(end - p));
        if (!pc) {
            jb_put(&b, p, (size_t)(end - p));
            break;
        }
        jb_put(&b, p, (size_t)(pc - p));
        p = pc + 1;
        jv v = jv_undef();
        int have = 0;
        if (p < end && *p == '(') { /* %(key)s: the value of a dict's key */
            const char *k = ++p;
            while (p < end && *p != ')') p++;
            if (p >= end) jx_fail(x, KVT_EFORMAT, at, "'%%' format: a '%%(' key is not closed");
            if (args.k != JV_DICT && args.k != JV_NS) jx_fail(x, KVT_EFORMAT, at, "'%%' format: %%(key) needs a dict");
            if (!jv_dict_get(args.u.d, k, (size_t)(p - k), &v))
                jx_fail(x, KVT_EFORMAT, at, "'%%' format: the dict has no key '%.*s'", (int)KVT_MIN(p - k, 64), k);
            p++, have = 1;
        }
        char flags[8] = "";
        size_t nf = 0;
        while (p < end && strchr("-+ #0", *p) && *p) {
            if (nf < sizeof flags - 1 && !memchr(flags, *p, nf)) flags[nf++] = *p;
            p++;
        }
        long long num[2] = {-1, -1}; /* width, precision */
        for (int part = 0; part < 2; part++) {
            if (part == 1) {
                if (p >= end || *p != '.') break;
                p++, num[1] = 0;
            }
            if (p < end && *p == '*') {
                if (have || used >= na) jx_fail(x, KVT_EFORMAT, at, "not enough arguments for format string");
                jv w = av[used++];
                if (w.k != JV_INT) jx_fail(x, KVT_EFORMAT, at, "'%%' format: * wants an integer");
                num[part] = KVT_MAX(KVT_MIN(w.u.i, 1000000000000LL), -1000000000000LL), p++;
                if (part == 0 && num[0] < 0) num[0] = -num[0], flags[nf++] = '-';
                continue;
            }
            if (p < end && *p >= '0' && *p <= '9') num[part] = 0;
            for (; p < end && *p >= '0' && *p <= '9'; p++)
                num[part] = KVT_MIN(num[part] * 10 + (*p - '0'), 1000000000000LL);
        }
        while (p < end && (*p == 'h' || *p == 'l' || *p == 'L')) p++;
        if (p >= end) jx_fail(x, KVT_EFORMAT, at, "'%%' format: incomplete format");
        char conv = *p++;
        if (conv == '%') {
            jb_put(&b, "%", 1);
            continue;
        }
        if (!conv || !strchr("sradiuxXoeEfFgGc", conv))
            jx_fail(x, KVT_EFORMAT, at, "'%%' format: unsupported format character '%c'", conv);
        if (!have) {
            if (used >= na) jx_fail(x, KVT_EFORMAT, at, "not enough arguments for format string");
            v = av[used++];
        }
        if ((size_t)KVT_MAX(num[0], 0) > x->lim.max_output || (size_t)KVT_MAX(num[1], 0) > x->lim.max_output)
            jx_fail(x, KVT_ELIMIT, at, "'%%' format: a width or precision past the output limit");
        int left = strchr(flags, '-') != NULL;
        if (strchr("diuxXo", conv)) {
            fmt_int(x, at, &b, conv, v, flags, num[0], num[1]);
            continue;
        }
        jbuf piece = {.x = x};
        if (strchr("eEfFgG", conv)) {
            if (v.k != JV_INT && v.k != JV_BOOL && v.k != JV_FLOAT)
                jx_fail(x, KVT_EFORMAT, at, "%%%c format: a number is required, not %s", conv, jv_type_name(v));
            /* C's printf has Python's flags, width and precision for these (zeros after the sign) */
            char cf[24];
            snprintf(cf, sizeof cf, "%%%s*.*%c", flags, conv);
            int w = (int)KVT_MAX(num[0], 0), pr = (int)(num[1] < 0 ? 6 : num[1]);
            double d = v.k == JV_FLOAT ? v.u.f : (double)v.u.i;
            int len = snprintf(NULL, 0, cf, w, pr, d);
            if (len < 0 || (size_t)len > x->lim.max_output)
                jx_fail(x, KVT_ELIMIT, at, "'%%' format: a number's text past the output limit");
            char *out = jx_alloc(x, (size_t)len + 1);
            snprintf(out, (size_t)len + 1, cf, w, pr, d);
            jb_put(&b, out, (size_t)len);
            continue;
        } else if (conv == 'c') {
            if (v.k == JV_STR && jx_cp_len(v.u.s.p, v.u.s.n) == 1) {
                jb_put(&piece, v.u.s.p, v.u.s.n);
            } else if (v.k == JV_INT && v.u.i >= 0 && v.u.i <= 0x10FFFF) {
                char u[4];
                unsigned c = (unsigned)v.u.i;
                size_t n = c < 0x80 ? (u[0] = (char)c, 1)
                    : c < 0x800     ? (u[0] = (char)(0xC0 | c >> 6), u[1] = (char)(0x80 | (c & 63)), 2)
                    : c < 0x10000   ? (u[0] = (char)(0xE0 | c >> 12), u[1] = (char)(0x80 | ((c >> 6) & 63)),
                                     u[2] = (char)(0x80 | (c & 63)), 3)
                                    : (u[0] = (char)(0xF0 | c >> 18), u[1] = (char)(0x80 | ((c >> 12) & 63)),
                                     u[2] = (char)(0x80 | ((c >> 6) & 63)), u[3] = (char)(0x80 | (c & 63)), 4);
                jb_put(&piece, u, n);
            } else {
                jx_fail(x, KVT_EFORMAT, at, "%%c format: needs an integer code point or one character");
            }
        } else { /* s, r, a: str() or repr(), cut to the precision in code points */
            if (conv == 's') jv_write_str(&piece, v);
            else jv_write_repr(&piece, v);
        }
        jv t = jb_done(&piece);
        if (num[1] >= 0 && strchr("sra", conv)) { /* the first code points only: a view of the text */
            size_t cut = 0;
            for (long long k = 0; cut < t.u.s.n; cut++)
                if (((unsigned char)t.u.s.p[cut] & 0xC0) != 0x80 && k++ == num[1]) break;
            t.u.s.n = cut;
        }
        long long len = (long long)jx_cp_len(t.u.s.p, t.u.s.n);
        long long pad = num[0] > len ? num[0] - len : 0;
        if (!left)
            for (long long i = 0; i < pad; i++) jb_put(&b, " ", 1);
        jb_put(&b, t.u.s.p, t.u.s.n);
        if (left)
            for (long long i = 0; i < pad; i++) jb_put(&b, " ", 1);
    }
    if (used < na && !mapping && !(args.k == JV_LIST && args.u.l->tuple && !na))
        jx_fail(x, KVT_EFORMAT, at, "not all arguments converted during string formatting");
    return jb_done(&b);
}
