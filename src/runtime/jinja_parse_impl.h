// SPDX-License-Identifier: MIT
/* The Jinja parser's state, shared by its three files: jinja_lex.c cuts a
 * tag's text into tokens, jinja_expr.c reads expressions from them and
 * jinja_parse.c the statements and the text between tags. Internal to the
 * runtime. */
#ifndef KVT_JINJA_PARSE_IMPL_H
#define KVT_JINJA_PARSE_IMPL_H

#include <stddef.h>

#include "jinja_impl.h"

#define MAX_NEST 200 /* nested tags and expressions */

typedef enum { T_END, T_NAME, T_INT, T_FLOAT, T_STR, T_OP, T_EOF } tok_kind;

typedef struct {
    tok_kind k;
    const char *p; /* T_NAME, T_OP: in the source; T_STR: decoded */
    size_t n;
    int op; /* T_OP: the character, or an OP_ code */
    long long i;
    double f;
} tok;

typedef struct {
    kvt_jinja *t;
    const char *src;
    size_t len, pos;
    size_t tok_at; /* where the current token starts: nodes and errors name its line and column */
    size_t w_pos;  /* jp_where's last answer: the line and column at w_pos */
    int w_line, w_col;
    int line_starting; /* the previous tag ended a line (lstrip_blocks applies at the template's start too) */
    char closer;       /* '}' in {{ }}, '%' in {% %} */
    int braces;        /* open { in the current tag */
    tok cur;
    int depth;
    size_t n_varargs, n_kwargs; /* the names varargs and kwargs read so far: a macro whose body has one takes them */
    char err[256];
} parser;

/* The first error stops everything: "template line L, column C: ..." into p->err, where the
 * current token starts (p->tok_at). */
void jp_perr(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The line and column (from 1, in characters) of src[at], counted on from the last position asked
 * (so a parse that asks in order scans the text once). */
void jp_where(parser *p, size_t at, int *line, int *col);
/* n zeroed bytes that live as long as the template. */
void *jp_palloc(parser *p, size_t n);

static inline int jp_is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
static inline int jp_is_ident(char c, int first) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9');
}

/* jinja_lex.c: spaces inside a tag; the next token into p->cur; whether it is
 * the name `name`; the operator op, or the tag's end, else an error. */
void jp_skip_space(parser *p);
static inline int jp_is_op(const parser *p, int op) { return p->cur.k == T_OP && p->cur.op == op; }
void jp_lex(parser *p);
int jp_is_name(const parser *p, const char *name);
void jp_expect_op(parser *p, int op);
void jp_expect_end(parser *p);

/* jinja_expr.c: a node of type at the current line; a full expression; one without its
 * conditional ("x if c else y"); an expression or a tuple without parentheses ("1, 2"), its
 * items read by item; the targets of set or for ("a" in n->s, or "a, b" as JN_NAME nodes in
 * n->args); the filters and tests after e (inline: the first filter without its "|"). */
jnode *jp_node(parser *p, jn_type type);
jnode *jp_expr(parser *p);
jnode *jp_or_expr(parser *p);
jnode *jp_tuple_or(parser *p, jnode *(*item)(parser *));
void jp_targets(parser *p, jnode *n, const char *what);
jnode *jp_filters(parser *p, jnode *e, int inline_first);

#endif
