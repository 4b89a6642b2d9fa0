// SPDX-License-Identifier: MIT
/* Running a Jinja syntax tree: scopes (a for loop's body has its own, as in
 * Jinja, so a "set" inside it does not leak out; namespaces are how templates
 * carry state across iterations), expressions with Python's semantics for
 * the operators templates use, strings measured and sliced in code points,
 * and the statements. Every limit of kvt_jinja_limits is checked where it
 * grows: output at each write, steps at each statement and iteration, depth
 * at each macro call, memory in the arena. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "jinja_impl.h"

kvt_jinja_limits kvt_jinja_default_limits(void) {
    return (kvt_jinja_limits){.max_output = 16u << 20, .max_steps = 10000000, .max_depth = 64, .max_memory = 256u << 20};
}

static void step(jctx *x, const jnode *at) {
    if (++x->steps > x->lim.max_steps)
        jx_fail(x, KVT_ELIMIT, at, "rendering took more than %zu steps (a runaway loop?)", x->lim.max_steps);
}

static void emit(jctx *x, const jnode *at, const char *s, size_t n) {
    if (n > x->lim.max_output - x->out_n)
        jx_fail(x, KVT_ELIMIT, at, "the rendered prompt is longer than %zu bytes", x->lim.max_output);
    if (x->out_n + n + 1 > x->out_cap) {
        x->out_cap = KVT_MAX(x->out_cap * 2, x->out_n + n + 256);
        x->out = kvt_xrealloc(x->out, x->out_cap);
        if (x->track) x->out_mark = kvt_xrealloc(x->out_mark, x->out_cap);
    }
    memcpy(x->out + x->out_n, s, n);
    jx_emit_marks(x, s, n, x->out_n);
    x->out_n += n;
}

/* ---- scopes ------------------------------------------------------------------ */

static jscope *push_scope(jctx *x, jscope *up) {
    jscope *s = jx_alloc(x, sizeof *s);
    *s = (jscope){.up = up};
    return s;
}

static void scope_set(jctx *x, jscope *s, const char *name, size_t n, jv v) {
    for (size_t i = 0; i < s->n; i++)
        if (s->nlen[i] == n && !memcmp(s->name[i], name, n)) {
            s->val[i] = v;
            return;
        }
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 8;
        const char **nn = jx_alloc(x, nc * sizeof *nn);
        size_t *nl = jx_alloc(x, nc * sizeof *nl);
        jv *nv = jx_alloc(x, nc * sizeof *nv);
        if (s->n) {
            memcpy(nn, s->name, s->n * sizeof *nn);
            memcpy(nl, s->nlen, s->n * sizeof *nl);
            memcpy(nv, s->val, s->n * sizeof *nv);
        }
        s->name = nn, s->nlen = nl, s->val = nv, s->cap = nc;
    }
    s->name[s->n] = name, s->nlen[s->n] = n, s->val[s->n++] = v;
}

static int lookup(const jctx *x, const char *name, size_t n, jv *out) {
    for (const jscope *s = x->scope; s; s = s->up)
        for (size_t i = 0; i < s->n; i++)
            if (s->nlen[i] == n && !memcmp(s->name[i], name, n)) {
                *out = s->val[i];
                return 1;
            }
    return 0;
}

/* ---- strings in code points ---------------------------------------------------- */

static int cont_byte(char c) { return ((unsigned char)c & 0xC0) == 0x80; }

size_t jx_cp_len(const char *p, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += !cont_byte(p[i]);
    return k;
}

/* Byte offsets of each code point of s, and its end: cps + 1 entries. */
static size_t *cp_offsets(jctx *x, jv s, size_t *cps) {
    *cps = jx_cp_len(s.u.s.p, s.u.s.n);
    size_t *off = jx_alloc(x, (*cps + 1) * sizeof *off), k = 0;
    for (size_t i = 0; i < s.u.s.n; i++)
        if (!cont_byte(s.u.s.p[i])) off[k++] = i;
    off[k] = s.u.s.n;
    return off;
}

/* ---- items and slices -------------------------------------------------------- */

static long long as_index(jctx *x, const jnode *at, jv v) {
    if (v.k != JV_INT && v.k != JV_BOOL)
        jx_fail(x, KVT_EFORMAT, at, "an index must be an integer, not %s", jv_type_name(v));
    return v.u.i;
}

static jv item(jctx *x, const jnode *at, jv obj, jv key) {
    if (obj.k == JV_DICT || obj.k == JV_NS) {
        for (size_t i = 0; i < obj.u.d->n; i++)
            if (jv_equal(obj.u.d->key[i], key)) return obj.u.d->val[i];
        return jv_undef();
    }
    if (obj.k == JV_LIST || obj.k == JV_STR) {
        if ((key.k != JV_INT && key.k != JV_BOOL) || (obj.k == JV_LIST && obj.u.l->gen)) return jv_undef();
        size_t n = 0, *off = NULL;
        if (obj.k == JV_LIST) n = obj.u.l->n;
        else off = cp_offsets(x, obj, &n);
        long long i = as_index(x, at, key);
        if (i < 0) i += (long long)n;
        if (i < 0 || (size_t)i >= n) return jv_undef();
        return obj.k == JV_LIST ? obj.u.l->v[i] : jv_strn(obj.u.s.p + off[i], off[i + 1] - off[i]);
    }
    if (obj.k == JV_UNDEF) jx_fail(x, KVT_EFORMAT, at, "an undefined value has no items");
    return jv_undef();
}

/* Python's slice bounds for a sequence of n, step st (not 0). */
static void slice_bounds(long long n, long long *a, long long *b, int has_a, int has_b, long long st) {
    long long lo = st < 0 ? -1 : 0, hi = st < 0 ? n - 1 : n;
    if (!has_a) *a = st < 0 ? hi : lo;
    else if (*a < 0) *a = KVT_MAX(*a + n, lo);
    else *a = KVT_MIN(*a, hi);
    if (!has_b) *b = st < 0 ? lo : hi;
    else if (*b < 0) *b = KVT_MAX(*b + n, lo);
    else *b = KVT_MIN(*b, hi);
}

static jv slice(jctx *x, const jnode *e, jv obj) {
    jv va = e->b ? jx_eval(x, e->b) : jv_none(), vb = e->c ? jx_eval(x, e->c) : jv_none();
    jv vs = e->d ? jx_eval(x, e->d) : jv_none();
    long long a = va.k == JV_NONE ? 0 : as_index(x, e, va), b = vb.k == JV_NONE ? 0 : as_index(x, e, vb);
    long long st = vs.k == JV_NONE ? 1 : as_index(x, e, vs);
    if (st == 0) jx_fail(x, KVT_EFORMAT, e, "a slice step cannot be zero");
    if (obj.k != JV_LIST && obj.k != JV_STR) jx_fail(x, KVT_EFORMAT, e, "cannot slice a %s", jv_type_name(obj));
    size_t n = 0, *off = NULL;
    if (obj.k == JV_LIST) n = obj.u.l->n;
    else off = cp_offsets(x, obj, &n);
    slice_bounds((long long)n, &a, &b, va.k != JV_NONE, vb.k != JV_NONE, st);
    jv out = obj.k == JV_LIST ? jv_new_list(x) : jv_none();
    if (obj.k == JV_LIST) out.u.l->tuple = obj.u.l->tuple; /* a tuple's slice is a tuple */
    jbuf sb = {.x = x};
    for (long long i = a; st > 0 ? i < b : i > b; i += st) {
        if (obj.k == JV_LIST) jv_list_push(x, out.u.l, obj.u.l->v[i]);
        else jb_put(&sb, obj.u.s.p + off[i], off[i + 1] - off[i]);
    }
    return obj.k == JV_LIST ? out : jb_done(&sb);
}

static jv attr(jctx *x, const jnode *e, jv obj) {
    if (obj.k == JV_UNDEF) jx_fail(x, KVT_EFORMAT, e, "'%.*s' of an undefined value", (int)KVT_MIN(e->sn, 64), e->s);
    if (obj.k == JV_DICT || obj.k == JV_NS) {
        jv v;
        if (jv_dict_get(obj.u.d, e->s, e->sn, &v)) return v;
    }
    return jv_undef();
}

/* ---- operators ------------------------------------------------------------------ */

static int is_num(jv v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }
static double num(jv v) { return v.k == JV_FLOAT ? v.u.f : (double)v.u.i; }

static jv concat(jctx *x, jv a, jv b) {
    jbuf sb = {.x = x};
    jv_write_str(&sb, a);
    jv_write_str(&sb, b);
    return jb_done(&sb);
}

int jx_contains(jctx *x, const jnode *e, jv needle, jv hay) {
    if (hay.k == JV_STR) {
        if (needle.k != JV_STR) jx_fail(x, KVT_EFORMAT, e, "'in <string>' needs a string on the left");
        if (!needle.u.s.n) return 1;
        for (size_t i = 0; i + needle.u.s.n <= hay.u.s.n; i++)
            if (!memcmp(hay.u.s.p + i, needle.u.s.p, needle.u.s.n)) return 1;
        return 0;
    }
    if (hay.k == JV_LIST) {
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (jv_equal(hay.u.l->v[i], needle)) return 1;
        return 0;
    }
    if (hay.k == JV_DICT || hay.k == JV_NS) {
        for (size_t i = 0; i < hay.u.d->n; i++)
            if (jv_equal(hay.u.d->key[i], needle)) return 1;
        return 0;
    }
    if (hay.k == JV_UNDEF) return 0;
    jx_fail(x, KVT_EFORMAT, e, "'in' needs a string, list or dict on the right, not %s", jv_type_name(hay));
}

int jx_compare(jctx *x, const jnode *e, jv a, jv b) {
    if (is_num(a) && is_num(b)) return num(a) < num(b) ? -1 : num(a) > num(b);
    if (a.k == JV_STR && b.k == JV_STR) {
        int c = memcmp(a.u.s.p, b.u.s.p, KVT_MIN(a.u.s.n, b.u.s.n));
        return c ? c : (a.u.s.n > b.u.s.n) - (a.u.s.n < b.u.s.n);
    }
    if (a.k == JV_LIST && b.k == JV_LIST && a.u.l->tuple == b.u.l->tuple) { /* item by item, as Python */
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++)
            if (!jv_equal(a.u.l->v[i], b.u.l->v[i])) return jx_compare(x, e, a.u.l->v[i], b.u.l->v[i]);
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    jx_fail(x, KVT_EFORMAT, e, "cannot order %s and %s", jv_type_name(a), jv_type_name(b));
}

/* a + b, a - b or a * b (op) for integers, or an error where the result does not fit in 64 bits
 * (Python's would grow; no template needs such numbers, and C's wrap-around must not happen). */
static jv int_arith(jctx *x, const jnode *e, int op, long long a, long long b) {
    long long r;
    int over = op == '+' ? __builtin_add_overflow(a, b, &r)
        : op == '-'      ? __builtin_sub_overflow(a, b, &r)
                         : __builtin_mul_overflow(a, b, &r);
    if (over) jx_fail(x, KVT_EFORMAT, e, "an integer result does not fit in 64 bits");
    return jv_int(r);
}

/* a ** b for integers with b >= 0, an integer as in Python. */
static jv int_pow(jctx *x, const jnode *e, long long a, long long b) {
    long long r = 1;
    for (; b > 0; b >>= 1) {
        if (b & 1) r = int_arith(x, e, '*', r, a).u.i;
        if (b > 1) a = int_arith(x, e, '*', a, a).u.i;
    }
    return jv_int(r);
}

/* Markup + str and str + Markup as markupsafe adds them: the plain string HTML-escaped ("&", "<",
 * ">", "'" and '"'), and the sum Markup. */
static jv markup_concat(jctx *x, jv a, jv b) {
    jbuf sb = {.x = x};
    for (int side = 0; side < 2; side++) {
        jv s = side ? b : a;
        for (size_t i = 0; i < s.u.s.n; i++) {
            const char *c = s.u.s.p + i, *esc = NULL;
            if (!s.markup) {
                switch (*c) {
                case '&': esc = "&amp;"; break;
                case '<': esc = "&lt;"; break;
                case '>': esc = "&gt;"; break;
                case '\'': esc = "&#39;"; break;
                case '"': esc = "&#34;"; break;
                default: break;
                }
            }
            if (esc) jb_put_marked(&sb, esc, strlen(esc), jx_marked(x, c));
            else jb_put(&sb, c, 1);
        }
    }
    jv v = jb_done(&sb);
    v.markup = 1;
    return v;
}

jv jx_add(jctx *x, const jnode *e, jv a, jv b) {
    if (a.k == JV_STR && b.k == JV_STR) return a.markup || b.markup ? markup_concat(x, a, b) : concat(x, a, b);
    if (a.k == JV_LIST && b.k == JV_LIST) { /* list + list, tuple + tuple; Python adds no list to a tuple */
        if (a.u.l->tuple != b.u.l->tuple || a.u.l->gen || b.u.l->gen)
            jx_fail(x, KVT_EFORMAT, e, "cannot add %s and %s", jv_type_name(a), jv_type_name(b));
        jv l = jv_new_list(x);
        l.u.l->tuple = a.u.l->tuple;
        for (size_t i = 0; i < a.u.l->n; i++) jv_list_push(x, l.u.l, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++) jv_list_push(x, l.u.l, b.u.l->v[i]);
        return l;
    }
    if (!is_num(a) || !is_num(b)) jx_fail(x, KVT_EFORMAT, e, "cannot add %s and %s", jv_type_name(a), jv_type_name(b));
    if (a.k != JV_FLOAT && b.k != JV_FLOAT) return int_arith(x, e, '+', a.u.i, b.u.i);
    return jv_float(num(a) + num(b));
}

static jv repeat(jctx *x, const jnode *e, jv s, long long n) {
    jbuf sb = {.x = x};
    if (n > 0 && s.u.s.n && (size_t)n > x->lim.max_memory / s.u.s.n)
        jx_fail(x, KVT_ELIMIT, e, "a repeated string would be longer than %zu bytes", x->lim.max_memory);
    for (long long i = 0; i < n; i++) jb_put(&sb, s.u.s.p, s.u.s.n);
    return jb_done(&sb);
}

/* A list n times over, as Python's list * int (none for n <= 0). */
static jv repeat_list(jctx *x, const jnode *e, jv l, long long n) {
    jv out = jv_new_list(x);
    out.u.l->tuple = l.u.l->tuple;
    if (n > 0 && l.u.l->n && (size_t)n > x->lim.max_memory / (l.u.l->n * sizeof(jv)))
        jx_fail(x, KVT_ELIMIT, e, "a repeated list would take more than %zu bytes", x->lim.max_memory);
    for (long long i = 0; i < n; i++)
        for (size_t k = 0; k < l.u.l->n; k++) jv_list_push(x, out.u.l, l.u.l->v[k]);
    return out;
}

static jv arith(jctx *x, const jnode *e, int op, jv a, jv b) {
    if (op == '*') { /* a string or list times an integer, either way round */
        int ai = a.k == JV_INT || a.k == JV_BOOL, bi = b.k == JV_INT || b.k == JV_BOOL;
        jv seq = bi ? a : b;
        long long times = bi ? b.u.i : a.u.i;
        if ((ai || bi) && seq.k == JV_STR) return repeat(x, e, seq, times);
        if ((ai || bi) && seq.k == JV_LIST) return repeat_list(x, e, seq, times);
    }
    if (op == '%' && a.k == JV_STR) return jx_percent_format(x, e, a, b);
    if (!is_num(a) || !is_num(b))
        jx_fail(x, KVT_EFORMAT, e, "'%s' needs numbers, not %s and %s",
                op == '-'          ? "-"
                    : op == '*'    ? "*"
                    : op == '/'    ? "/"
                    : op == '%'    ? "%"
                    : op == OP_POW ? "**"
                                   : "//",
                jv_type_name(a), jv_type_name(b));
    int ints = a.k != JV_FLOAT && b.k != JV_FLOAT;
    double fa = num(a), fb = num(b);
    if ((op == '/' || op == '%' || op == OP_FLOORDIV) && fb == 0) jx_fail(x, KVT_EFORMAT, e, "division by zero");
    long long m;
    switch (op) {
    case '-': return ints ? int_arith(x, e, '-', a.u.i, b.u.i) : jv_float(fa - fb);
    case '*': return ints ? int_arith(x, e, '*', a.u.i, b.u.i) : jv_float(fa * fb);
    case '/': return jv_float(fa / fb);
    case '%': /* the sign of the divisor, as Python's; x % -1 is 0 (C's INT64_MIN % -1 traps) */
        if (!ints) return jv_float(fa - fb * __builtin_floor(fa / fb));
        if (b.u.i == -1) return jv_int(0);
        m = a.u.i % b.u.i;
        return jv_int(m && (m < 0) != (b.u.i < 0) ? m + b.u.i : m);
    case OP_FLOORDIV: /* rounded down, as Python's; INT64_MIN // -1 does not fit */
        if (ints && b.u.i == -1) return int_arith(x, e, '-', 0, a.u.i);
        if (ints) return jv_int(a.u.i / b.u.i - ((a.u.i % b.u.i != 0) && ((a.u.i < 0) != (b.u.i < 0))));
        return jv_float(__builtin_floor(fa / fb));
    default:
        if (ints && b.u.i >= 0) return int_pow(x, e, a.u.i, b.u.i);
        return jv_float(__builtin_pow(fa, fb));
    }
}

static jv binary(jctx *x, const jnode *e) {
    jv a = jx_eval(x, e->a);
    if (e->op == OP_AND) return jv_truthy(a) ? jx_eval(x, e->b) : a;
    if (e->op == OP_OR) return jv_truthy(a) ? a : jx_eval(x, e->b);
    jv b = jx_eval(x, e->b);
    switch (e->op) {
    case OP_EQ: return jv_bool(jv_equal(a, b));
    case OP_NE: return jv_bool(!jv_equal(a, b));
    case '<': return jv_bool(jx_compare(x, e, a, b) < 0);
    case '>': return jv_bool(jx_compare(x, e, a, b) > 0);
    case OP_LE: return jv_bool(jx_compare(x, e, a, b) <= 0);
    case OP_GE: return jv_bool(jx_compare(x, e, a, b) >= 0);
    case OP_IN: return jv_bool(jx_contains(x, e, a, b));
    case OP_NOTIN: return jv_bool(!jx_contains(x, e, a, b));
    case '~': return concat(x, a, b);
    case '+': return jx_add(x, e, a, b);
    default: return arith(x, e, e->op, a, b);
    }
}

/* ---- calls ------------------------------------------------------------------------ */

jv jx_kwarg(jctx *x, const jnode *args, const char *name) {
    for (const jnode *a = args; a; a = a->next)
        if (a->t == JN_KWARG && a->sn == strlen(name) && !memcmp(a->s, name, a->sn)) return jx_eval(x, a->a);
    return jv_undef();
}

/* The positional arguments of args (JN_KWARG nodes are skipped), evaluated. */
static jv *pos_args(jctx *x, const jnode *args, size_t *n) {
    *n = 0;
    for (const jnode *a = args; a; a = a->next) *n += a->t != JN_KWARG;
    jv *v = jx_alloc(x, (*n ? *n : 1) * sizeof *v);
    size_t k = 0;
    for (const jnode *a = args; a; a = a->next)
        if (a->t != JN_KWARG) v[k++] = jx_eval(x, a);
    return v;
}

static void exec_body(jctx *x, const jnode *s);

/* Whether the parameters of m include one named n[0..len). */
static int is_param(const jnode *m, const char *n, size_t len) {
    for (const jnode *p = m->args; p; p = p->next)
        if (p->sn == len && !memcmp(p->s, n, len)) return 1;
    return 0;
}

/* The macro's parameters from the arguments, each one's default where none is given (evaluated
 * in the macro's scope, so it may use the parameters before it); the positional arguments past
 * them in varargs and the keyword arguments not among them in kwargs, where the macro uses these
 * names, else an error, as in Jinja. */
static void bind_args(jctx *x, const jnode *call, const jnode *m, jscope *s, const jv *pos, size_t npos,
                      const jnode *kw) {
    jscope *saved = x->scope;
    size_t i = 0;
    for (const jnode *p = m->args; p; p = p->next, i++) {
        jv v = i < npos ? pos[i] : jv_undef();
        for (const jnode *k = kw; k; k = k->next)
            if (k->t == JN_KWARG && k->sn == p->sn && !memcmp(k->s, p->s, p->sn)) v = jx_eval(x, k->a);
        if (v.k == JV_UNDEF && p->a) {
            x->scope = s;
            v = jx_eval(x, p->a);
            x->scope = saved;
        }
        scope_set(x, s, p->s, p->sn, v);
    }
    if (npos > i && !(m->op & 1))
        jx_fail(x, KVT_EFORMAT, call, "macro '%.*s' takes %zu arguments, not %zu", (int)m->sn, m->s, i, npos);
    jv va = jv_new_list(x), kwa = jv_new_dict(x, JV_DICT);
    va.u.l->tuple = 1;
    for (size_t k = i; k < npos; k++) jv_list_push(x, va.u.l, pos[k]);
    for (const jnode *k = kw; k; k = k->next) {
        if (k->t != JN_KWARG || is_param(m, k->s, k->sn)) continue;
        if (!(m->op & 2))
            jx_fail(x, KVT_EFORMAT, call, "macro '%.*s' takes no keyword argument '%.*s'", (int)m->sn, m->s,
                    (int)KVT_MIN(k->sn, 64), k->s);
        jv_dict_set(x, kwa.u.d, jv_strn(k->s, k->sn), jx_eval(x, k->a));
    }
    if (m->op & 1) scope_set(x, s, "varargs", 7, va);
    if (m->op & 2) scope_set(x, s, "kwargs", 6, kwa);
}

jv jx_call_macro(jctx *x, const jnode *call, jv macro, const jv *pos, size_t npos, const jnode *kw, const jv *caller) {
    const jnode *m = macro.u.m.node;
    if (x->depth >= x->lim.max_depth)
        jx_fail(x, KVT_ELIMIT, call, "macro calls nest more than %zu deep (runaway recursion?)", x->lim.max_depth);
    jscope *saved = x->scope;
    jscope *s = push_scope(x, macro.u.m.env ? macro.u.m.env : x->globals);
    bind_args(x, call, m, s, pos, npos, kw);
    if (caller) scope_set(x, s, "caller", 6, *caller);
    size_t start = x->out_n;
    x->depth++;
    x->scope = s;
    exec_body(x, m->body);
    x->scope = saved;
    x->depth--;
    jv r = jv_str_copy(x, x->out + start, x->out_n - start);
    x->out_n = start;
    return r;
}

static void run_for(jctx *x, const jnode *s, jv seq, long long depth);

/* loop(items) in a recursive loop's body: the loop's text for items, one level deeper. */
static jv loop_again(jctx *x, const jnode *e, jv loop) {
    size_t n;
    jv *args = pos_args(x, e->args, &n);
    if (n != 1) jx_fail(x, KVT_EFORMAT, e, "loop() takes one iterable, not %zu arguments", n);
    if (x->depth >= x->lim.max_depth)
        jx_fail(x, KVT_ELIMIT, e, "recursive loops nest more than %zu deep", x->lim.max_depth);
    size_t start = x->out_n;
    x->depth++;
    run_for(x, loop.u.d->rec, args[0], loop.u.d->depth + 1);
    x->depth--;
    jv r = jv_str_copy(x, x->out + start, x->out_n - start);
    x->out_n = start;
    return r;
}

static jv call(jctx *x, const jnode *e) {
    size_t n;
    if (e->a->t == JN_ATTR) { /* a method of a string, list or dict */
        jv self = jx_eval(x, e->a->a);
        jv *args = pos_args(x, e->args, &n);
        int found = 0;
        jv r = jx_method(x, e, self, e->a->s, e->a->sn, args, n, e->args, &found);
        if (found) return r;
        jv f = attr(x, e->a, self);
        if (f.k == JV_MACRO) return jx_call_macro(x, e, f, args, n, e->args, NULL);
        jx_fail(x, KVT_EFORMAT, e, "a %s has no method '%.*s'", jv_type_name(self), (int)KVT_MIN(e->a->sn, 64), e->a->s);
    }
    jv f = e->a->t == JN_NAME ? jv_undef() : jx_eval(x, e->a);
    if (e->a->t == JN_NAME && !lookup(x, e->a->s, e->a->sn, &f)) {
        jv *args = pos_args(x, e->args, &n);
        int found = 0;
        jv r = jx_global(x, e, e->a->s, e->a->sn, args, n, e->args, &found);
        if (found) return r;
        jx_fail(x, KVT_EFORMAT, e, "'%.*s' is undefined", (int)KVT_MIN(e->a->sn, 64), e->a->s);
    }
    if (f.k == JV_DICT && f.u.d->rec) return loop_again(x, e, f);
    if (f.k != JV_MACRO) jx_fail(x, KVT_EFORMAT, e, "a %s cannot be called", jv_type_name(f));
    jv *args = pos_args(x, e->args, &n);
    return jx_call_macro(x, e, f, args, n, e->args, NULL);
}

static jv collection(jctx *x, const jnode *e) {
    if (e->t == JN_LIST) {
        jv l = jv_new_list(x);
        l.u.l->tuple = e->op == 1;
        for (const jnode *a = e->args; a; a = a->next) jv_list_push(x, l.u.l, jx_eval(x, a));
        return l;
    }
    jv d = jv_new_dict(x, JV_DICT);
    for (const jnode *a = e->args; a; a = a->next) jv_dict_set(x, d.u.d, jx_eval(x, a->a), jx_eval(x, a->b));
    return d;
}

jv jx_eval(jctx *x, const jnode *e) {
    step(x, e);
    jv v;
    size_t n;
    switch (e->t) {
    case JN_LIT: return e->v;
    case JN_NAME: return lookup(x, e->s, e->sn, &v) ? v : jv_undef();
    case JN_ATTR: return attr(x, e, jx_eval(x, e->a));
    case JN_INDEX: {
        jv obj = jx_eval(x, e->a);
        return item(x, e, obj, jx_eval(x, e->b));
    }
    case JN_SLICE: return slice(x, e, jx_eval(x, e->a));
    case JN_CALL: return call(x, e);
    case JN_FILTER: {
        v = e->a ? jx_eval(x, e->a) : x->filtered;
        jv *args = pos_args(x, e->args, &n);
        return jx_filter(x, e, e->s, e->sn, v, args, n, e->args);
    }
    case JN_TEST: {
        v = jx_eval(x, e->a);
        if (v.k == JV_UNDEF && e->a->t == JN_NAME && jx_is_global(e->a->s, e->a->sn) &&
            ((e->sn == 7 && !memcmp(e->s, "defined", 7)) || (e->sn == 9 && !memcmp(e->s, "undefined", 9))))
            return jv_bool((e->sn == 7) != e->op);
        jv *args = pos_args(x, e->args, &n);
        return jv_bool(jx_test(x, e, e->s, e->sn, v, args, n) != e->op);
    }
    case JN_UNARY:
        v = jx_eval(x, e->a);
        if (e->op == '!') return jv_bool(!jv_truthy(v));
        if (!is_num(v)) jx_fail(x, KVT_EFORMAT, e, "unary '%c' needs a number, not %s", e->op, jv_type_name(v));
        if (e->op == '+') return v;
        if (v.k == JV_FLOAT) return jv_float(-v.u.f);
        return int_arith(x, e, '-', 0, v.u.i);
    case JN_BIN: return binary(x, e);
    case JN_COND: return jv_truthy(jx_eval(x, e->a)) ? jx_eval(x, e->b) : e->c ? jx_eval(x, e->c) : jv_undef();
    case JN_LIST:
    case JN_DICT: return collection(x, e);
    default: jx_fail(x, KVT_EFORMAT, e, "not an expression");
    }
}

/* ---- statements ------------------------------------------------------------------ */

/* The items a for loop walks: a list's, a dict's keys, a string's characters. */
static jv iterable(jctx *x, const jnode *at, jv v) {
    if (v.k == JV_LIST) return v;
    jv l = jv_new_list(x);
    if (v.k == JV_DICT || v.k == JV_NS) {
        for (size_t i = 0; i < v.u.d->n; i++) jv_list_push(x, l.u.l, v.u.d->key[i]);
    } else if (v.k == JV_STR) {
        size_t n, *off = cp_offsets(x, v, &n);
        for (size_t i = 0; i < n; i++) jv_list_push(x, l.u.l, jv_strn(v.u.s.p + off[i], off[i + 1] - off[i]));
    } else if (v.k != JV_UNDEF) {
        jx_fail(x, KVT_EFORMAT, at, "cannot loop over a %s", jv_type_name(v));
    }
    return l;
}

/* The value into the targets of a for or set tag: its one name, or unpacked into its names (the
 * items of a list, the characters of a string, the keys of a dict), as many as there are. */
static void bind_targets(jctx *x, const jnode *s, jscope *sc, jv it) {
    if (!s->args) return scope_set(x, sc, s->s, s->sn, it);
    size_t want = 0;
    for (const jnode *t = s->args; t; t = t->next) want++;
    if (it.k != JV_LIST && it.k != JV_STR && it.k != JV_DICT && it.k != JV_NS)
        jx_fail(x, KVT_EFORMAT, s, "cannot unpack a %s into %zu names", jv_type_name(it), want);
    jv l = iterable(x, s, it);
    if (l.u.l->n != want)
        jx_fail(x, KVT_EFORMAT, s, "%s values to unpack (%zu names, %zu values)",
                l.u.l->n < want ? "not enough" : "too many", want, l.u.l->n);
    size_t i = 0;
    for (const jnode *t = s->args; t; t = t->next) scope_set(x, sc, t->s, t->sn, l.u.l->v[i++]);
}

static void set_loop(jctx *x, jv loop, jv items, size_t i) {
    size_t n = items.u.l->n;
    static const char *const keys[] = {"index",  "index0",   "revindex", "revindex0", "first", "last",
                                       "length", "previtem", "nextitem", "depth",     "depth0"};
    jv vals[] = {jv_int((long long)i + 1),
                 jv_int((long long)i),
                 jv_int((long long)(n - i)),
                 jv_int((long long)(n - i - 1)),
                 jv_bool(i == 0),
                 jv_bool(i + 1 == n),
                 jv_int((long long)n),
                 i ? items.u.l->v[i - 1] : jv_undef(),
                 i + 1 < n ? items.u.l->v[i + 1] : jv_undef(),
                 jv_int(loop.u.d->depth),
                 jv_int(loop.u.d->depth - 1)};
    if (loop.u.d->n == KVT_ARRAY_LEN(keys)) { /* set before: only the values change */
        memcpy(loop.u.d->val, vals, sizeof vals);
        return;
    }
    for (size_t k = 0; k < KVT_ARRAY_LEN(keys); k++)
        jv_dict_set(x, loop.u.d, jv_strn(keys[k], strlen(keys[k])), vals[k]);
}

/* The for loop s over seq, at depth (from 1; a recursive loop's loop(items) goes one deeper). */
static void run_for(jctx *x, const jnode *s, jv seq, long long depth) {
    jv items = iterable(x, s, seq);
    jscope *saved = x->scope, *sc = push_scope(x, saved);
    x->scope = sc;
    if (s->c) { /* "for x in y if cond": the loop (and loop.length) sees the kept items only */
        jv kept = jv_new_list(x);
        for (size_t i = 0; i < items.u.l->n; i++) {
            step(x, s);
            bind_targets(x, s, sc, items.u.l->v[i]);
            if (jv_truthy(jx_eval(x, s->c))) jv_list_push(x, kept.u.l, items.u.l->v[i]);
        }
        items = kept;
    }
    jv loop = jv_new_dict(x, JV_DICT);
    loop.u.d->loop = 1;
    loop.u.d->rec = s->op ? s : NULL;
    loop.u.d->depth = depth;
    scope_set(x, sc, "loop", 4, loop);
    for (size_t i = 0; i < items.u.l->n; i++) {
        step(x, s);
        bind_targets(x, s, sc, items.u.l->v[i]);
        set_loop(x, loop, items, i);
        exec_body(x, s->body);
        if (x->loop_ctl == 1) {
            x->loop_ctl = 0;
            break;
        }
        x->loop_ctl = 0;
    }
    x->scope = saved;
    if (!items.u.l->n && s->alt) exec_body(x, s->alt);
}

/* Runs body and returns its text instead of writing it ({% set %} and {% filter %} blocks). */
static jv capture(jctx *x, const jnode *body) {
    size_t start = x->out_n;
    exec_body(x, body);
    jv v = jv_str_copy(x, x->out + start, x->out_n - start);
    x->out_n = start;
    return v;
}

/* {% filter f %}...{% endfilter %}: the body's text through the filters; a break or continue in
 * the body leaves the loop before the block writes anything, as in Jinja. The filters must give
 * a string: Jinja joins the block's result with the text around it, and fails on anything else
 * (length's number, list's list), so this fails the same way, with the type named as Python
 * names it. */
static void exec_filtered(jctx *x, const jnode *s) {
    jv saved = x->filtered, text = capture(x, s->body);
    if (x->loop_ctl) return;
    x->filtered = text;
    jv v = jx_eval(x, s->a);
    x->filtered = saved;
    if (v.k != JV_STR) {
        static const char *const py[] = {"Undefined", "NoneType", "bool", "int",       "float",
                                         "str",       "list",     "dict", "Namespace", "Macro"};
        jx_fail(x, KVT_EFORMAT, s, "a filter block's filters must give a string: expected str instance, %s found",
                v.k == JV_LIST && v.u.l->tuple ? "tuple" : py[v.k]);
    }
    emit(x, s, v.u.s.p, v.u.s.n);
}

/* {% call(params) m(args) %}body{% endcall %}: m's text, with caller() running the body (with
 * its parameters) in the scope around the call block. */
static void exec_caller(jctx *x, const jnode *s) {
    const jnode *c = s->a;
    jv f = jx_eval(x, c->a);
    if (f.k != JV_MACRO) jx_fail(x, KVT_EFORMAT, s, "'call' needs a macro, not %s", jv_type_name(f));
    size_t n;
    jv *args = pos_args(x, c->args, &n);
    jv caller = {.k = JV_MACRO, .u.m = {s->c, x->scope}};
    jv v = jx_call_macro(x, c, f, args, n, c->args, &caller);
    emit(x, s, v.u.s.p, v.u.s.n);
}

/* {% set %}: a value, or a block's text (through its filters); a break or continue in the block
 * leaves the loop before anything is set, as in Jinja. */
static void exec_set(jctx *x, const jnode *s) {
    jv v = s->body ? capture(x, s->body) : jx_eval(x, s->a);
    if (x->loop_ctl) return;
    if (s->c) {
        jv saved = x->filtered;
        x->filtered = v;
        v = jx_eval(x, s->c);
        x->filtered = saved;
    }
    if (!s->s2) return bind_targets(x, s, x->scope, v);
    jv ns;
    if (!lookup(x, s->s, s->sn, &ns) || ns.k != JV_NS)
        jx_fail(x, KVT_EFORMAT, s, "'set %.*s.%.*s': '%.*s' is not a namespace", (int)s->sn, s->s, (int)s->s2n, s->s2,
                (int)s->sn, s->s);
    jv_dict_set(x, ns.u.d, jv_strn(s->s2, s->s2n), v);
}

static void exec_body(jctx *x, const jnode *s) {
    for (; s && !x->loop_ctl; s = s->next) {
        step(x, s);
        switch (s->t) {
        case JN_TEXT: emit(x, s, s->s, s->sn); break;
        case JN_OUT: {
            jv v = jv_to_str(x, jx_eval(x, s->a));
            emit(x, s, v.u.s.p, v.u.s.n);
            break;
        }
        case JN_IF: exec_body(x, jv_truthy(jx_eval(x, s->a)) ? s->body : s->alt); break;
        case JN_FOR: run_for(x, s, jx_eval(x, s->a), 1); break;
        case JN_SET: exec_set(x, s); break;
        case JN_MACRO: scope_set(x, x->scope, s->s, s->sn, (jv){.k = JV_MACRO, .u.m = {s, NULL}}); break;
        case JN_BREAK: x->loop_ctl = 1; break;
        case JN_CONTINUE: x->loop_ctl = 2; break;
        case JN_BLOCK: exec_body(x, s->body); break;
        case JN_FILTERED: exec_filtered(x, s); break;
        case JN_CALLER: exec_caller(x, s); break;
        default: jx_fail(x, KVT_EFORMAT, s, "not a statement");
        }
    }
}

static void release(jctx *x) {
    for (size_t i = 0; i < x->n_blocks; i++) free(x->blocks[i]);
    free(x->blocks);
}

int kvt_jinja_render(const kvt_jinja *t, const cJSON *vars, const kvt_jinja_limits *lim, char **out, size_t *len) {
    return kvt_jinja_render_marked(t, vars, NULL, lim, out, len, NULL);
}

/* Whether name is among the NULL-terminated names. */
static int listed(const char *const *names, const char *name) {
    for (; names && *names; names++)
        if (!strcmp(*names, name)) return 1;
    return 0;
}

int kvt_jinja_render_marked(const kvt_jinja *t, const cJSON *vars, const char *const *trusted,
                            const kvt_jinja_limits *lim, char **out, size_t *len, unsigned char **marks) {
    *out = NULL;
    *len = 0;
    if (marks) *marks = NULL;
    jctx *x = kvt_xcalloc(1, sizeof *x);
    x->lim = lim ? *lim : kvt_jinja_default_limits();
    x->track = marks != NULL;
    if (setjmp(x->jb)) {
        int code = x->err_code;
        kvt_fail(code, "%s", x->err);
        free(x->out);
        free(x->out_mark);
        jx_marks_free(x);
        release(x);
        free(x);
        return code;
    }
    jscope *top = push_scope(x, NULL);
    for (const cJSON *c = vars ? vars->child : NULL; c; c = c->next) {
        if (!c->string) continue;
        x->mark_json = x->track && !listed(trusted, c->string);
        scope_set(x, top, c->string, strlen(c->string), jv_from_json(x, c));
    }
    x->mark_json = 0;
    x->globals = push_scope(x, top);
    x->scope = x->globals;
    exec_body(x, t->root);
    emit(x, NULL, "", 0);
    x->out[x->out_n] = 0;
    *out = x->out;
    *len = x->out_n;
    if (marks) *marks = x->out_mark;
    jx_marks_free(x);
    release(x);
    free(x);
    return 0;
}
