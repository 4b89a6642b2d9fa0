// SPDX-License-Identifier: MIT
/* Jinja expressions to syntax tree nodes (jinja_parse_impl.h), in Jinja's
 * precedence: conditional, or, and, not, comparisons, "~", + -, * / // %, **,
 * unary, filters and tests, then attribute, item, slice and call suffixes.
 * Nesting is bounded, so a hostile template cannot exhaust the stack. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "jinja_parse_impl.h"

jnode *jp_node(parser *p, jn_type type) {
    jnode *n = jp_palloc(p, sizeof *n);
    n->t = type;
    jp_where(p, p->tok_at, &n->line, &n->col);
    return n;
}

/* ---- expressions ------------------------------------------------------------ */

static jnode *unary(parser *p);

/* a op (the right operand, read by rhs), at the operator: the current token, which it reads. */
static jnode *bin(parser *p, int op, jnode *a, jnode *(*rhs)(parser *)) {
    jnode *n = jp_node(p, JN_BIN);
    jp_lex(p);
    n->op = op, n->a = a, n->b = rhs(p);
    return n;
}

/* Call arguments up to ')': positional, then name=value (JN_KWARG). */
static jnode *call_args(parser *p) {
    jnode *head = NULL, **tail = &head;
    while (!jp_is_op(p, ')') && !p->err[0]) {
        jnode *a;
        if (p->cur.k == T_NAME) {
            size_t save = p->pos;
            size_t tok_at = p->tok_at;
            int braces = p->braces;
            tok name = p->cur;
            jp_lex(p);
            if (jp_is_op(p, '=')) {
                jp_lex(p);
                a = jp_node(p, JN_KWARG);
                a->s = name.p, a->sn = name.n, a->a = jp_expr(p);
            } else {
                p->pos = save, p->tok_at = tok_at, p->braces = braces, p->cur = name;
                a = jp_expr(p);
            }
        } else {
            a = jp_expr(p);
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
    jnode *n = jp_node(p, JN_INDEX);
    n->a = obj;
    if (!jp_is_op(p, ':')) n->b = jp_expr(p);
    if (jp_is_op(p, ':')) {
        n->t = JN_SLICE;
        jp_lex(p);
        if (!jp_is_op(p, ':') && !jp_is_op(p, ']')) n->c = jp_expr(p);
        if (jp_is_op(p, ':')) {
            jp_lex(p);
            if (!jp_is_op(p, ']')) n->d = jp_expr(p);
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
            jnode *n = jp_node(p, JN_ATTR);
            n->a = e, n->s = p->cur.p, n->sn = p->cur.n;
            jp_lex(p);
            e = n;
        } else if (jp_is_op(p, '[')) {
            jp_lex(p);
            e = subscript(p, e);
        } else if (jp_is_op(p, '(')) {
            jp_lex(p);
            jnode *n = jp_node(p, JN_CALL);
            n->a = e, n->line = e->line, n->col = e->col; /* a call is where its callee is */
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
        jnode *it = jp_expr(p);
        if (pairs) {
            jnode *pr = jp_node(p, JN_PAIR);
            pr->a = it;
            jp_expect_op(p, ':');
            pr->b = jp_expr(p);
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
    jnode *n = jp_node(p, JN_LIT);
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
        jnode *n = jp_node(p, JN_NAME);
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
        jnode *n = jp_node(p, JN_LIT);
        n->v = jv_strn(c.p, c.n);
        return n;
    }
    if (jp_is_op(p, '(')) {
        jp_lex(p);
        if (jp_is_op(p, ')')) { /* () is the empty tuple */
            jp_lex(p);
            jnode *n = jp_node(p, JN_LIST);
            n->op = 1;
            return n;
        }
        jnode *e = jp_expr(p);
        if (!jp_is_op(p, ',')) {
            jp_expect_op(p, ')');
            return e;
        }
        jp_lex(p);
        jnode *n = jp_node(p, JN_LIST); /* a tuple */
        n->op = 1;
        n->args = e;
        e->next = items(p, ')', 0);
        return n;
    }
    if (jp_is_op(p, '[') || jp_is_op(p, '{')) {
        int dict = jp_is_op(p, '{');
        jp_lex(p);
        jnode *n = jp_node(p, dict ? JN_DICT : JN_LIST);
        n->args = items(p, dict ? '}' : ']', dict);
        return n;
    }
    jp_perr(p, "expected a value");
    return jp_node(p, JN_LIT);
}

/* "| name(args)" and "is [not] name [arg]" after a value; with inline, the first filter's name
 * comes without its "|" ({% filter upper | trim %}). */
jnode *jp_filters(parser *p, jnode *e, int inline_first) {
    for (;; inline_first = 0) {
        int test = !inline_first && jp_is_name(p, "is");
        if (!inline_first && !jp_is_op(p, '|') && !test) return e;
        if (!inline_first) jp_lex(p);
        jnode *n = jp_node(p, test ? JN_TEST : JN_FILTER);
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
        return jp_node(p, JN_LIT);
    }
    jnode *e;
    if (jp_is_op(p, '-') || jp_is_op(p, '+')) {
        e = jp_node(p, JN_UNARY);
        e->op = p->cur.op;
        jp_lex(p);
        e->a = unary_f(p, 0);
    } else {
        e = postfix(p, primary(p));
    }
    p->depth--;
    return with_filters ? jp_filters(p, e, 0) : e;
}

static jnode *unary(parser *p) { return unary_f(p, 1); }

static jnode *power(parser *p) {
    jnode *e = unary(p);
    while (jp_is_op(p, OP_POW)) e = bin(p, OP_POW, e, unary);
    return e;
}

static jnode *product(parser *p) {
    jnode *e = power(p);
    while (jp_is_op(p, '*') || jp_is_op(p, '/') || jp_is_op(p, '%') || jp_is_op(p, OP_FLOORDIV)) {
        e = bin(p, p->cur.op, e, power);
    }
    return e;
}

static jnode *sum(parser *p) {
    jnode *e = product(p);
    while (jp_is_op(p, '+') || jp_is_op(p, '-')) {
        e = bin(p, p->cur.op, e, product);
    }
    return e;
}

static jnode *concat(parser *p) {
    jnode *e = sum(p);
    while (jp_is_op(p, '~')) e = bin(p, '~', e, sum);
    return e;
}

static jnode *compare(parser *p) {
    jnode *e = concat(p);
    for (;;) {
        int op;
        if (jp_is_op(p, OP_EQ) || jp_is_op(p, OP_NE) || jp_is_op(p, OP_LE) || jp_is_op(p, OP_GE) || jp_is_op(p, '<') ||
            jp_is_op(p, '>')) {
            op = p->cur.op;
        } else if (jp_is_name(p, "in")) {
            op = OP_IN;
        } else if (jp_is_name(p, "not")) { /* "not in": a lone "not" here is an error */
            jp_lex(p);
            if (!jp_is_name(p, "in")) {
                jp_perr(p, "expected 'in' after 'not'");
                return e;
            }
            op = OP_NOTIN;
        } else {
            return e;
        }
        e = bin(p, op, e, concat);
    }
}

static jnode *not_expr(parser *p) {
    if (!jp_is_name(p, "not")) return compare(p);
    if (++p->depth > MAX_NEST) {
        jp_perr(p, "expressions nest more than %d deep", MAX_NEST);
        return jp_node(p, JN_LIT);
    }
    jp_lex(p);
    jnode *n = jp_node(p, JN_UNARY);
    n->op = '!';
    n->a = not_expr(p);
    p->depth--;
    return n;
}

static jnode *and_expr(parser *p) {
    jnode *e = not_expr(p);
    while (jp_is_name(p, "and")) e = bin(p, OP_AND, e, not_expr);
    return e;
}

jnode *jp_or_expr(parser *p) {
    jnode *e = and_expr(p);
    while (jp_is_name(p, "or")) e = bin(p, OP_OR, e, and_expr);
    return e;
}

/* A full expression: "x if c else y" (no else: undefined) over or_expr. */
jnode *jp_expr(parser *p) {
    if (++p->depth > MAX_NEST) {
        jp_perr(p, "expressions nest more than %d deep", MAX_NEST);
        return jp_node(p, JN_LIT);
    }
    jnode *e = jp_or_expr(p);
    while (jp_is_name(p, "if")) {
        jp_lex(p);
        jnode *n = jp_node(p, JN_COND);
        n->b = e;
        n->a = jp_or_expr(p);
        e = n;
        if (jp_is_name(p, "else")) { /* right-associative: x if a else y if b else z */
            jp_lex(p);
            n->c = jp_expr(p);
            break;
        }
    }
    p->depth--;
    return e;
}

/* An expression, or a tuple without parentheses ("1, 2") where set and for take one. */
jnode *jp_tuple_or(parser *p, jnode *(*item)(parser *)) {
    jnode *e = item(p);
    if (!jp_is_op(p, ',')) return e;
    jnode *n = jp_node(p, JN_LIST);
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
void jp_targets(parser *p, jnode *n, const char *what) {
    if (p->cur.k != T_NAME) jp_perr(p, "expected a name after '%s'", what);
    n->s = p->cur.p, n->sn = p->cur.n;
    jp_lex(p);
    if (!jp_is_op(p, ',')) return;
    jnode **tail = &n->args;
    *tail = jp_node(p, JN_NAME);
    (*tail)->s = n->s, (*tail)->sn = n->sn, tail = &(*tail)->next;
    while (jp_is_op(p, ',') && !p->err[0]) {
        jp_lex(p);
        if (p->cur.k != T_NAME) {
            if (jp_is_name(p, "in") || jp_is_op(p, '=')) break; /* a trailing comma */
            jp_perr(p, "expected a name after ',' in '%s'", what);
            return;
        }
        jnode *t = jp_node(p, JN_NAME);
        t->s = p->cur.p, t->sn = p->cur.n;
        *tail = t, tail = &t->next;
        jp_lex(p);
    }
}
