// SPDX-License-Identifier: MIT
/* Jinja templates to a syntax tree. The text between tags keeps the
 * whitespace rules chat templates are written for (Hugging Face's settings):
 * trim_blocks drops the newline right after a block or comment tag,
 * lstrip_blocks drops the spaces and tabs before one that starts its line,
 * and a "-" inside a tag's delimiter strips all whitespace on that side. Tags
 * hold expressions in Jinja's precedence: conditional, or, and, not,
 * comparisons, "~", + -, * / // %, **, unary, filters and tests, then
 * attribute, item, slice and call suffixes. Nesting is bounded, so a hostile
 * template cannot exhaust the stack. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "jinja_parse_impl.h"

void jp_perr(parser *p, const char *fmt, ...) {
    if (p->err[0]) return;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, sizeof p->err, "template line %d: %s", p->line, msg);
    p->cur.k = T_EOF; /* everything stops at the first error */
}

void *jp_palloc(parser *p, size_t n) {
    kvt_jinja *t = p->t;
    if (t->n_blocks == t->cap_blocks) {
        t->cap_blocks = t->cap_blocks ? t->cap_blocks * 2 : 64;
        t->blocks = kvt_xrealloc(t->blocks, t->cap_blocks * sizeof *t->blocks);
    }
    void *b = kvt_xcalloc(1, n ? n : 1);
    t->blocks[t->n_blocks++] = b;
    return b;
}

static jnode *node(parser *p, jn_type type) {
    jnode *n = jp_palloc(p, sizeof *n);
    n->t = type;
    n->line = p->line;
    return n;
}

/* ---- expressions ------------------------------------------------------------ */

static jnode *expr(parser *p);
static jnode *or_expr(parser *p);
static jnode *unary(parser *p);

static jnode *bin(parser *p, int op, jnode *a, jnode *b) {
    jnode *n = node(p, JN_BIN);
    n->op = op, n->a = a, n->b = b;
    return n;
}

/* Call arguments up to ')': positional, then name=value (JN_KWARG). */
static jnode *call_args(parser *p) {
    jnode *head = NULL, **tail = &head;
    while (!jp_is_op(p, ')') && !p->err[0]) {
        jnode *a;
        if (p->cur.k == T_NAME) {
            size_t save = p->pos;
            int line = p->line, braces = p->braces;
            tok name = p->cur;
            jp_lex(p);
            if (jp_is_op(p, '=')) {
                jp_lex(p);
                a = node(p, JN_KWARG);
                a->s = name.p, a->sn = name.n, a->a = expr(p);
            } else {
                p->pos = save, p->line = line, p->braces = braces, p->cur = name;
                a = expr(p);
            }
        } else {
            a = expr(p);
        }
        *tail = a, tail = &a->next;
        if (!jp_is_op(p, ',')) break;
        jp_lex(p);
    }
    jp_expect_op(p, ')');
    return head;
}

/* [b:c:d] after '[' (a slice) or [b] (an item). */
static jnode *subscript(parser *p, jnode *obj) {
    jnode *n = node(p, JN_INDEX);
    n->a = obj;
    if (!jp_is_op(p, ':')) n->b = expr(p);
    if (jp_is_op(p, ':')) {
        n->t = JN_SLICE;
        jp_lex(p);
        if (!jp_is_op(p, ':') && !jp_is_op(p, ']')) n->c = expr(p);
        if (jp_is_op(p, ':')) {
            jp_lex(p);
            if (!jp_is_op(p, ']')) n->d = expr(p);
        }
    }
    jp_expect_op(p, ']');
    return n;
}

static jnode *postfix(parser *p, jnode *e) {
    for (;;) {
        if (jp_is_op(p, '.')) {
            jp_lex(p);
            if (p->cur.k != T_NAME) {
                jp_perr(p, "expected an attribute name after '.'");
                return e;
            }
            jnode *n = node(p, JN_ATTR);
            n->a = e, n->s = p->cur.p, n->sn = p->cur.n;
            jp_lex(p);
            e = n;
        } else if (jp_is_op(p, '[')) {
            jp_lex(p);
            e = subscript(p, e);
        } else if (jp_is_op(p, '(')) {
            jp_lex(p);
            jnode *n = node(p, JN_CALL);
            n->a = e;
            n->args = call_args(p);
            e = n;
        } else {
            return e;
        }
    }
}

/* Items up to close, for a list, a tuple (a list here) or a dict (pairs). */
static jnode *items(parser *p, int close, int pairs) {
    jnode *head = NULL, **tail = &head;
    while (!jp_is_op(p, close) && !p->err[0]) {
        jnode *it = expr(p);
        if (pairs) {
            jnode *pr = node(p, JN_PAIR);
            pr->a = it;
            jp_expect_op(p, ':');
            pr->b = expr(p);
            it = pr;
        }
        *tail = it, tail = &it->next;
        if (!jp_is_op(p, ',')) break;
        jp_lex(p);
    }
    jp_expect_op(p, close);
    return head;
}

static jnode *literal(parser *p, jv v) {
    jnode *n = node(p, JN_LIT);
    n->v = v;
    jp_lex(p);
    return n;
}

static jnode *primary(parser *p) {
    tok c = p->cur;
    if (c.k == T_NAME) {
        static const char *const lits[] = {"true", "True", "false", "False", "none", "None"};
        for (size_t i = 0; i < KVT_ARRAY_LEN(lits); i++)
            if (jp_is_name(p, lits[i])) return literal(p, i < 2 ? jv_bool(1) : i < 4 ? jv_bool(0) : jv_none());
        jnode *n = node(p, JN_NAME);
        n->s = c.p, n->sn = c.n;
        jp_lex(p);
        return n;
    }
    if (c.k == T_INT) return literal(p, jv_int(c.i));
    if (c.k == T_FLOAT) return literal(p, jv_float(c.f));
    if (c.k == T_STR) {
        jp_lex(p);
        while (p->cur.k == T_STR) { /* adjacent literals join, as in Python */
            char *s = jp_palloc(p, c.n + p->cur.n + 1);
            memcpy(s, c.p, c.n);
            memcpy(s + c.n, p->cur.p, p->cur.n);
            c.p = s, c.n += p->cur.n;
            jp_lex(p);
        }
        jnode *n = node(p, JN_LIT);
        n->v = jv_strn(c.p, c.n);
        return n;
    }
    if (jp_is_op(p, '(')) {
        jp_lex(p);
        if (jp_is_op(p, ')')) { /* () is the empty tuple */
            jp_lex(p);
            jnode *n = node(p, JN_LIST);
            n->op = 1;
            return n;
        }
        jnode *e = expr(p);
        if (!jp_is_op(p, ',')) {
            jp_expect_op(p, ')');
            return e;
        }
        jp_lex(p);
        jnode *n = node(p, JN_LIST); /* a tuple */
        n->op = 1;
        n->args = e;
        e->next = items(p, ')', 0);
        return n;
    }
    if (jp_is_op(p, '[') || jp_is_op(p, '{')) {
        int dict = jp_is_op(p, '{');
        jp_lex(p);
        jnode *n = node(p, dict ? JN_DICT : JN_LIST);
        n->args = items(p, dict ? '}' : ']', dict);
        return n;
    }
    jp_perr(p, "expected a value");
    return node(p, JN_LIT);
}

/* "| name(args)" and "is [not] name [arg]" after a value. */
static jnode *filters(parser *p, jnode *e) {
    for (;;) {
        int test = jp_is_name(p, "is");
        if (!jp_is_op(p, '|') && !test) return e;
        jp_lex(p);
        jnode *n = node(p, test ? JN_TEST : JN_FILTER);
        n->a = e;
        if (test && jp_is_name(p, "not")) n->op = 1, jp_lex(p);
        if (p->cur.k != T_NAME) {
            jp_perr(p, "expected a %s name", test ? "test" : "filter");
            return e;
        }
        n->s = p->cur.p, n->sn = p->cur.n;
        jp_lex(p);
        if (jp_is_op(p, '(')) {
            jp_lex(p);
            n->args = call_args(p);
        } else if (test &&
                   (p->cur.k == T_STR || p->cur.k == T_INT || p->cur.k == T_FLOAT ||
                    (p->cur.k == T_NAME && !jp_is_name(p, "and") && !jp_is_name(p, "or") && !jp_is_name(p, "else") &&
                     !jp_is_name(p, "if") && !jp_is_name(p, "is") && !jp_is_name(p, "in") && !jp_is_name(p, "not")))) {
            n->args = postfix(p, primary(p)); /* "is sameas false", "is divisibleby 3" */
        }
        e = n;
    }
}

/* A sign binds tighter than a filter, as in Jinja: -3 | abs is (-3) | abs, so the operand of a
 * sign is read without its filters (with_filters 0) and the filters apply to the signed value. */
static jnode *unary_f(parser *p, int with_filters) {
    if (++p->depth > MAX_NEST) {
        jp_perr(p, "expressions nest more than %d deep", MAX_NEST);
        return node(p, JN_LIT);
    }
    jnode *e;
    if (jp_is_op(p, '-') || jp_is_op(p, '+')) {
        e = node(p, JN_UNARY);
        e->op = p->cur.op;
        jp_lex(p);
        e->a = unary_f(p, 0);
    } else {
        e = postfix(p, primary(p));
    }
    p->depth--;
    return with_filters ? filters(p, e) : e;
}

static jnode *unary(parser *p) { return unary_f(p, 1); }

static jnode *power(parser *p) {
    jnode *e = unary(p);
    while (jp_is_op(p, OP_POW)) jp_lex(p), e = bin(p, OP_POW, e, unary(p));
    return e;
}

static jnode *product(parser *p) {
    jnode *e = power(p);
    while (jp_is_op(p, '*') || jp_is_op(p, '/') || jp_is_op(p, '%') || jp_is_op(p, OP_FLOORDIV)) {
        int op = p->cur.op;
        jp_lex(p);
        e = bin(p, op, e, power(p));
    }
    return e;
}

static jnode *sum(parser *p) {
    jnode *e = product(p);
    while (jp_is_op(p, '+') || jp_is_op(p, '-')) {
        int op = p->cur.op;
        jp_lex(p);
        e = bin(p, op, e, product(p));
    }
    return e;
}

static jnode *concat(parser *p) {
    jnode *e = sum(p);
    while (jp_is_op(p, '~')) jp_lex(p), e = bin(p, '~', e, sum(p));
    return e;
}

static jnode *compare(parser *p) {
    jnode *e = concat(p);
    for (;;) {
        int op;
        if (jp_is_op(p, OP_EQ) || jp_is_op(p, OP_NE) || jp_is_op(p, OP_LE) || jp_is_op(p, OP_GE) || jp_is_op(p, '<') ||
            jp_is_op(p, '>')) {
            op = p->cur.op;
            jp_lex(p);
        } else if (jp_is_name(p, "in")) {
            op = OP_IN;
            jp_lex(p);
        } else if (jp_is_name(p, "not")) { /* "not in": a lone "not" here is an error */
            jp_lex(p);
            if (!jp_is_name(p, "in")) {
                jp_perr(p, "expected 'in' after 'not'");
                return e;
            }
            op = OP_NOTIN;
            jp_lex(p);
        } else {
            return e;
        }
        e = bin(p, op, e, concat(p));
    }
}

static jnode *not_expr(parser *p) {
    if (!jp_is_name(p, "not")) return compare(p);
    if (++p->depth > MAX_NEST) {
        jp_perr(p, "expressions nest more than %d deep", MAX_NEST);
        return node(p, JN_LIT);
    }
    jp_lex(p);
    jnode *n = node(p, JN_UNARY);
    n->op = '!';
    n->a = not_expr(p);
    p->depth--;
    return n;
}

static jnode *and_expr(parser *p) {
    jnode *e = not_expr(p);
    while (jp_is_name(p, "and")) jp_lex(p), e = bin(p, OP_AND, e, not_expr(p));
    return e;
}

static jnode *or_expr(parser *p) {
    jnode *e = and_expr(p);
    while (jp_is_name(p, "or")) jp_lex(p), e = bin(p, OP_OR, e, and_expr(p));
    return e;
}

/* A full expression: "x if c else y" (no else: undefined) over or_expr. */
static jnode *expr(parser *p) {
    if (++p->depth > MAX_NEST) {
        jp_perr(p, "expressions nest more than %d deep", MAX_NEST);
        return node(p, JN_LIT);
    }
    jnode *e = or_expr(p);
    while (jp_is_name(p, "if")) {
        jp_lex(p);
        jnode *n = node(p, JN_COND);
        n->b = e;
        n->a = or_expr(p);
        e = n;
        if (jp_is_name(p, "else")) { /* right-associative: x if a else y if b else z */
            jp_lex(p);
            n->c = expr(p);
            break;
        }
    }
    p->depth--;
    return e;
}

/* An expression, or a tuple without parentheses ("1, 2") where set and for take one. */
static jnode *tuple_or(parser *p, jnode *(*item)(parser *)) {
    jnode *e = item(p);
    if (!jp_is_op(p, ',')) return e;
    jnode *n = node(p, JN_LIST);
    n->op = 1;
    n->args = e;
    for (jnode **tail = &e->next; jp_is_op(p, ',') && !p->err[0];) {
        jp_lex(p);
        if (p->cur.k == T_END || jp_is_name(p, "if") || jp_is_name(p, "recursive")) break; /* "a, b," */
        jnode *it = item(p);
        *tail = it, tail = &it->next;
    }
    return n;
}

/* "a" or "a, b, ..." as the targets of set or for: the first name in n->s, and all of them as
 * JN_NAME nodes in n->args where there are several. */
static void targets(parser *p, jnode *n, const char *what) {
    if (p->cur.k != T_NAME) jp_perr(p, "expected a name after '%s'", what);
    n->s = p->cur.p, n->sn = p->cur.n;
    jp_lex(p);
    if (!jp_is_op(p, ',')) return;
    jnode **tail = &n->args;
    *tail = node(p, JN_NAME);
    (*tail)->s = n->s, (*tail)->sn = n->sn, tail = &(*tail)->next;
    while (jp_is_op(p, ',') && !p->err[0]) {
        jp_lex(p);
        if (p->cur.k != T_NAME) {
            if (jp_is_name(p, "in") || jp_is_op(p, '=')) break; /* a trailing comma */
            jp_perr(p, "expected a name after ',' in '%s'", what);
            return;
        }
        jnode *t = node(p, JN_NAME);
        t->s = p->cur.p, t->sn = p->cur.n;
        *tail = t, tail = &t->next;
        jp_lex(p);
    }
}

/* ---- statements ------------------------------------------------------------- */

static jnode *body(parser *p, const char *const *enders, const char **ended);
static jnode *text_before(parser *p, size_t at);

/* The keyword of the block tag at the cursor (the tag's first name). */
static int keyword(parser *p, const char *kw) { return jp_is_name(p, kw); }

static jnode *stmt_if(parser *p) {
    jnode *n = node(p, JN_IF);
    n->a = expr(p);
    jp_expect_end(p);
    static const char *const enders[] = {"elif", "else", "endif", NULL};
    const char *ended = NULL;
    n->body = body(p, enders, &ended);
    if (ended && !strcmp(ended, "elif")) {
        n->alt = stmt_if(p); /* the chain's last link reads endif */
        return n;
    }
    if (ended && !strcmp(ended, "else")) {
        jp_expect_end(p);
        static const char *const end_only[] = {"endif", NULL};
        n->alt = body(p, end_only, &ended);
    }
    jp_expect_end(p);
    return n;
}

static jnode *stmt_for(parser *p) {
    jnode *n = node(p, JN_FOR);
    targets(p, n, "for");
    if (!jp_is_name(p, "in")) jp_perr(p, "expected 'in' in a for tag");
    jp_lex(p);
    n->a = tuple_or(p, or_expr);
    if (jp_is_name(p, "if")) {
        jp_lex(p);
        n->c = or_expr(p);
    }
    if (jp_is_name(p, "recursive")) jp_perr(p, "recursive loops are not supported");
    jp_expect_end(p);
    static const char *const enders[] = {"else", "endfor", NULL};
    const char *ended = NULL;
    n->body = body(p, enders, &ended);
    if (ended && !strcmp(ended, "else")) {
        jp_expect_end(p);
        static const char *const end_only[] = {"endfor", NULL};
        n->alt = body(p, end_only, &ended);
    }
    jp_expect_end(p);
    return n;
}

static jnode *stmt_set(parser *p) {
    jnode *n = node(p, JN_SET);
    targets(p, n, "set");
    if (jp_is_op(p, '.') && !n->args) { /* ns.attr = value */
        jp_lex(p);
        if (p->cur.k != T_NAME) jp_perr(p, "expected an attribute name after '.'");
        n->s2 = p->cur.p, n->s2n = p->cur.n;
        jp_lex(p);
    }
    if (p->cur.k == T_END && !n->s2 && !n->args) { /* {% set x %}...{% endset %} */
        static const char *const enders[] = {"endset", NULL};
        const char *ended;
        n->body = body(p, enders, &ended);
        jp_expect_end(p);
        return n;
    }
    jp_expect_op(p, '=');
    n->a = tuple_or(p, expr);
    jp_expect_end(p);
    return n;
}

static jnode *stmt_macro(parser *p) {
    jnode *n = node(p, JN_MACRO);
    if (p->cur.k != T_NAME) jp_perr(p, "expected a macro name");
    n->s = p->cur.p, n->sn = p->cur.n;
    jp_lex(p);
    jp_expect_op(p, '(');
    jnode **tail = &n->args;
    while (p->cur.k == T_NAME && !p->err[0]) {
        jnode *a = node(p, JN_NAME);
        a->s = p->cur.p, a->sn = p->cur.n;
        jp_lex(p);
        if (jp_is_op(p, '=')) jp_lex(p), a->a = expr(p);
        *tail = a, tail = &a->next;
        if (!jp_is_op(p, ',')) break;
        jp_lex(p);
    }
    jp_expect_op(p, ')');
    jp_expect_end(p);
    static const char *const enders[] = {"endmacro", NULL};
    const char *ended;
    n->body = body(p, enders, &ended);
    jp_expect_end(p);
    return n;
}

/* The end of a raw or endraw tag at p->pos: "%}" or "-%}" after spaces; 0 if it is not there. */
static size_t raw_tag_end(const parser *p, size_t at, int *minus) {
    while (at < p->len && jp_is_space(p->src[at])) at++;
    *minus = at < p->len && p->src[at] == '-';
    at += (size_t)*minus;
    return at + 1 < p->len && p->src[at] == '%' && p->src[at + 1] == '}' ? at + 2 : 0;
}

/* {% raw %}...{% endraw %} after the name "raw": the text between, as written. As in Jinja,
 * the newline after the raw tag stays (trim_blocks does not apply there), lstrip_blocks and a
 * "-" apply before the endraw tag, and after it the usual rules do. */
static jnode *raw(parser *p) {
    int minus;
    size_t start = raw_tag_end(p, p->pos, &minus);
    if (!start) {
        jp_perr(p, "expected '%%}' after 'raw'");
        return NULL;
    }
    if (minus)
        while (start < p->len && jp_is_space(p->src[start])) start++;
    for (size_t i = p->pos; i < start; i++) p->line += p->src[i] == '\n';
    p->pos = start;
    for (size_t i = start; i + 1 < p->len; i++) {
        if (p->src[i] != '{' || p->src[i + 1] != '%') continue;
        size_t k = i + 2 + (i + 2 < p->len && (p->src[i + 2] == '-' || p->src[i + 2] == '+'));
        while (k < p->len && jp_is_space(p->src[k])) k++;
        if (k + 6 > p->len || memcmp(p->src + k, "endraw", 6) || (k + 6 < p->len && jp_is_ident(p->src[k + 6], 0)))
            continue;
        size_t end = raw_tag_end(p, k + 6, &minus);
        if (!end) {
            jp_perr(p, "expected '%%}' after 'endraw'");
            return NULL;
        }
        p->line_starting = 0;
        jnode *n = text_before(p, i); /* the raw text, with the whitespace rules before a tag */
        if (!n) n = node(p, JN_TEXT);
        p->pos = k + 6; /* the tag's end through the lexer: "-" or trim_blocks after it */
        p->closer = '%';
        jp_lex(p);
        jp_expect_end(p);
        return n;
    }
    jp_perr(p, "the template ends before {%% endraw %%}");
    return NULL;
}

/* A block tag after its "{%": a statement, or (*ended) one of enders. */
static jnode *block_tag(parser *p, const char *const *enders, const char **ended) {
    jp_lex(p);
    for (size_t i = 0; enders && enders[i]; i++)
        if (keyword(p, enders[i])) {
            *ended = enders[i];
            jp_lex(p);
            return NULL;
        }
    if (p->cur.k != T_NAME) {
        jp_perr(p, "expected a statement name after '{%%'");
        return NULL;
    }
    tok kw = p->cur;
    if (kw.n == 3 && !memcmp(kw.p, "raw", 3)) return raw(p);
    jp_lex(p);
    if (kw.n == 2 && !memcmp(kw.p, "if", 2)) return stmt_if(p);
    if (kw.n == 3 && !memcmp(kw.p, "for", 3)) return stmt_for(p);
    if (kw.n == 3 && !memcmp(kw.p, "set", 3)) return stmt_set(p);
    if (kw.n == 5 && !memcmp(kw.p, "macro", 5)) return stmt_macro(p);
    if ((kw.n == 5 && !memcmp(kw.p, "break", 5)) || (kw.n == 8 && !memcmp(kw.p, "continue", 8))) {
        jnode *n = node(p, kw.n == 5 ? JN_BREAK : JN_CONTINUE);
        jp_expect_end(p);
        return n;
    }
    if (kw.n == 10 && !memcmp(kw.p, "generation", 10)) { /* Hugging Face's marker of assistant text */
        jp_expect_end(p);
        jnode *n = node(p, JN_BLOCK);
        static const char *const end_gen[] = {"endgeneration", NULL};
        const char *e;
        n->body = body(p, end_gen, &e);
        jp_expect_end(p);
        return n;
    }
    jp_perr(p, "'%.*s' is not a statement kvtier's templates support", (int)KVT_MIN(kw.n, 40), kw.p);
    return NULL;
}

/* Text before a tag at `at`: "-" in the tag strips all whitespace before it;
 * else lstrip_blocks strips spaces and tabs back to the line start before a
 * block or comment tag, when only they stand there. */
static jnode *text_before(parser *p, size_t at) {
    size_t start = p->pos, end = at;
    if (at < p->len) {
        char mod = at + 2 < p->len ? p->src[at + 2] : 0, kind = p->src[at + 1];
        if (mod == '-') {
            while (end > start && jp_is_space(p->src[end - 1])) end--;
        } else if (mod != '+' && kind != '{') {
            size_t l = end;
            while (l > start && p->src[l - 1] != '\n') l--;
            int blank = 1;
            for (size_t i = l; i < end; i++) blank &= jp_is_space(p->src[i]);
            if (blank && (l > start || p->line_starting)) end = l;
        }
    }
    for (size_t i = start; i < at; i++) p->line += p->src[i] == '\n';
    p->pos = at;
    if (end == start) return NULL;
    jnode *n = node(p, JN_TEXT);
    n->s = p->src + start, n->sn = end - start;
    return n;
}

static void comment(parser *p) {
    const char *e = NULL;
    for (size_t i = p->pos; i + 1 < p->len && !e; i++)
        if (p->src[i] == '#' && p->src[i + 1] == '}') e = p->src + i;
    if (!e) return jp_perr(p, "a comment is not closed");
    int minus = e > p->src + p->pos && e[-1] == '-';
    for (const char *c = p->src + p->pos; c < e; c++) p->line += *c == '\n';
    p->pos = (size_t)(e - p->src) + 2;
    if (minus) jp_skip_space(p);
    else if (p->pos < p->len && p->src[p->pos] == '\n') p->pos++, p->line++;
    p->line_starting = p->src[p->pos - 1] == '\n';
}

/* Statements up to the end of the template or one of the block tags enders
 * (*ended names it; the cursor is then inside that tag, after its name). */
static jnode *body(parser *p, const char *const *enders, const char **ended) {
    jnode *head = NULL, **tail = &head;
    *ended = NULL;
    if (++p->depth > MAX_NEST) {
        jp_perr(p, "blocks nest more than %d deep", MAX_NEST);
        return NULL;
    }
    while (!p->err[0] && !*ended) {
        const char *at = NULL;
        for (size_t i = p->pos; i + 1 < p->len && !at; i++)
            if (p->src[i] == '{' && strchr("{%#", p->src[i + 1])) at = p->src + i;
        size_t apos = at ? (size_t)(at - p->src) : p->len;
        jnode *n = text_before(p, apos);
        if (n) *tail = n, tail = &n->next;
        if (!at) break;
        char kind = at[1];
        p->pos = apos + 2 + (apos + 2 < p->len && (p->src[apos + 2] == '-' || p->src[apos + 2] == '+'));
        p->line_starting = 0;
        if (kind == '#') {
            comment(p);
            continue;
        }
        p->closer = kind == '{' ? '}' : '%';
        p->braces = 0;
        if (kind == '{') {
            jp_lex(p);
            n = node(p, JN_OUT);
            n->a = expr(p);
            jp_expect_end(p);
        } else {
            n = block_tag(p, enders, ended);
        }
        if (n) *tail = n, tail = &n->next;
    }
    if (!p->err[0] && enders && !*ended) {
        size_t last = 0;
        while (enders[last + 1]) last++;
        jp_perr(p, "the template ends before {%% %s %%}", enders[last]);
    }
    p->depth--;
    return head;
}

void kvt_jinja_free(kvt_jinja *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n_blocks; i++) free(t->blocks[i]);
    free(t->blocks);
    free(t);
}

int kvt_jinja_parse(const char *src, size_t len, kvt_jinja **out) {
    *out = NULL;
    kvt_jinja *t = kvt_xcalloc(1, sizeof *t);
    parser p = {.t = t, .len = len, .line = 1, .line_starting = 1};
    char *copy = jp_palloc(&p, len + 1); /* the tree points into its own copy of the text */
    memcpy(copy, src, len);
    p.src = copy;
    const char *ended;
    t->root = body(&p, NULL, &ended);
    if (p.err[0]) {
        kvt_jinja_free(t);
        return kvt_fail(KVT_EFORMAT, "%s", p.err);
    }
    *out = t;
    return 0;
}
