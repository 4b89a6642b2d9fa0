// SPDX-License-Identifier: MIT
/* Jinja templates to a syntax tree. The text between tags keeps the
 * whitespace rules chat templates are written for (Hugging Face's settings):
 * trim_blocks drops the newline right after a block or comment tag,
 * lstrip_blocks drops the spaces and tabs before one that starts its line,
 * and a "-" inside a tag's delimiter strips all whitespace on that side. The
 * expressions inside tags are jinja_expr.c's. Nesting is bounded, so a
 * hostile template cannot exhaust the stack. */
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
    int line, col;
    jp_where(p, p->tok_at, &line, &col);
    snprintf(p->err, sizeof p->err, "template line %d, column %d: %s", line, col, msg);
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

/* ---- statements ------------------------------------------------------------- */

static jnode *body(parser *p, const char *const *enders, const char **ended);
static jnode *text_before(parser *p, size_t at);

/* The keyword of the block tag at the cursor (the tag's first name). */
static int keyword(parser *p, const char *kw) { return jp_is_name(p, kw); }

static jnode *stmt_if(parser *p) {
    jnode *n = jp_node(p, JN_IF);
    n->a = jp_expr(p);
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
    jnode *n = jp_node(p, JN_FOR);
    jp_targets(p, n, "for");
    if (!jp_is_name(p, "in")) jp_perr(p, "expected 'in' in a for tag");
    jp_lex(p);
    n->a = jp_tuple_or(p, jp_or_expr);
    if (jp_is_name(p, "if")) {
        jp_lex(p);
        n->c = jp_or_expr(p);
    }
    if (jp_is_name(p, "recursive")) n->op = 1, jp_lex(p);
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
    jnode *n = jp_node(p, JN_SET);
    jp_targets(p, n, "set");
    if (jp_is_op(p, '.') && !n->args) { /* ns.attr = value */
        jp_lex(p);
        if (p->cur.k != T_NAME) jp_perr(p, "expected an attribute name after '.'");
        n->s2 = p->cur.p, n->s2n = p->cur.n;
        jp_lex(p);
    }
    if (p->cur.k == T_END || jp_is_op(p, '|')) { /* {% set x | f %}...{% endset %}: the text, through f */
        if (jp_is_op(p, '|')) n->c = jp_filters(p, NULL, 0);
        for (const jnode *f = n->c; f && !p->err[0]; f = f->a)
            if (f->t == JN_TEST) jp_perr(p, "a block set takes filters, not tests");
        jp_expect_end(p);
        static const char *const enders[] = {"endset", NULL};
        const char *ended;
        n->body = body(p, enders, &ended);
        jp_expect_end(p);
        return n;
    }
    jp_expect_op(p, '=');
    n->a = jp_tuple_or(p, jp_expr);
    jp_expect_end(p);
    return n;
}

/* A macro's parameters after its "(", to the ")": names, each with an optional "= default". */
static jnode *params(parser *p) {
    jnode *head = NULL, **tail = &head;
    while (p->cur.k == T_NAME && !p->err[0]) {
        jnode *a = jp_node(p, JN_NAME);
        a->s = p->cur.p, a->sn = p->cur.n;
        jp_lex(p);
        if (jp_is_op(p, '=')) jp_lex(p), a->a = jp_expr(p);
        *tail = a, tail = &a->next;
        if (!jp_is_op(p, ',')) break;
        jp_lex(p);
    }
    jp_expect_op(p, ')');
    return head;
}

/* The body of macro n up to {% ender %}; a body that names varargs or kwargs takes the extra
 * positional or keyword arguments there (n->op), as in Jinja. */
static void macro_body(parser *p, jnode *n, const char *ender) {
    size_t va = p->n_varargs, kw = p->n_kwargs;
    const char *const enders[] = {ender, NULL};
    const char *ended;
    n->body = body(p, enders, &ended);
    n->op = (p->n_varargs > va) | ((p->n_kwargs > kw) << 1);
    jp_expect_end(p);
}

static jnode *stmt_macro(parser *p) {
    jnode *n = jp_node(p, JN_MACRO);
    if (p->cur.k != T_NAME) jp_perr(p, "expected a macro name");
    n->s = p->cur.p, n->sn = p->cur.n;
    jp_lex(p);
    jp_expect_op(p, '(');
    n->args = params(p);
    jp_expect_end(p);
    macro_body(p, n, "endmacro");
    return n;
}

/* {% call m(args) %}...{% endcall %} or {% call(params) m(args) %}: the body is the macro
 * "caller" that m may call. */
static jnode *stmt_call(parser *p) {
    jnode *n = jp_node(p, JN_CALLER), *c = jp_node(p, JN_MACRO);
    c->s = "caller", c->sn = 6;
    if (jp_is_op(p, '(')) {
        jp_lex(p);
        c->args = params(p);
    }
    n->a = jp_expr(p);
    if (!p->err[0] && n->a->t != JN_CALL) jp_perr(p, "'call' needs a macro call, such as {%% call m() %%}");
    jp_expect_end(p);
    macro_body(p, c, "endcall");
    n->c = c;
    return n;
}

/* {% filter f(args) | g %}...{% endfilter %}: the body's text through the filters. */
static jnode *stmt_filter(parser *p) {
    jnode *n = jp_node(p, JN_FILTERED);
    if (p->cur.k != T_NAME) {
        jp_perr(p, "expected a filter name after 'filter'");
        return n;
    }
    n->a = jp_filters(p, NULL, 1);
    jp_expect_end(p);
    static const char *const enders[] = {"endfilter", NULL};
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
    p->pos = start;
    for (size_t i = start; i + 1 < p->len; i++) {
        if (p->src[i] != '{' || p->src[i + 1] != '%') continue;
        size_t k = i + 2 + (i + 2 < p->len && (p->src[i + 2] == '-' || p->src[i + 2] == '+'));
        while (k < p->len && jp_is_space(p->src[k])) k++;
        if (k + 6 > p->len || memcmp(p->src + k, "endraw", 6) || (k + 6 < p->len && jp_is_ident(p->src[k + 6], 0)))
            continue;
        size_t end = raw_tag_end(p, k + 6, &minus);
        if (!end) {
            p->tok_at = k;
            jp_perr(p, "expected '%%}' after 'endraw'");
            return NULL;
        }
        p->line_starting = 0;
        jnode *n = text_before(p, i); /* the raw text, with the whitespace rules before a tag */
        if (!n) n = jp_node(p, JN_TEXT);
        p->pos = k + 6; /* the tag's end through the lexer: "-" or trim_blocks after it */
        p->closer = '%';
        jp_lex(p);
        jp_expect_end(p);
        return n;
    }
    p->tok_at = p->len;
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
    size_t kw_at = p->tok_at;
    if (kw.n == 3 && !memcmp(kw.p, "raw", 3)) return raw(p);
    jp_lex(p);
    if (kw.n == 2 && !memcmp(kw.p, "if", 2)) return stmt_if(p);
    if (kw.n == 3 && !memcmp(kw.p, "for", 3)) return stmt_for(p);
    if (kw.n == 3 && !memcmp(kw.p, "set", 3)) return stmt_set(p);
    if (kw.n == 5 && !memcmp(kw.p, "macro", 5)) return stmt_macro(p);
    if (kw.n == 4 && !memcmp(kw.p, "call", 4)) return stmt_call(p);
    if (kw.n == 6 && !memcmp(kw.p, "filter", 6)) return stmt_filter(p);
    if ((kw.n == 5 && !memcmp(kw.p, "break", 5)) || (kw.n == 8 && !memcmp(kw.p, "continue", 8))) {
        jnode *n = jp_node(p, kw.n == 5 ? JN_BREAK : JN_CONTINUE);
        jp_expect_end(p);
        return n;
    }
    if (kw.n == 10 && !memcmp(kw.p, "generation", 10)) { /* Hugging Face's marker of assistant text */
        jp_expect_end(p);
        jnode *n = jp_node(p, JN_BLOCK);
        static const char *const end_gen[] = {"endgeneration", NULL};
        const char *e;
        n->body = body(p, end_gen, &e);
        jp_expect_end(p);
        return n;
    }
    p->tok_at = kw_at;
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
    p->pos = at;
    if (end == start) return NULL;
    p->tok_at = start;
    jnode *n = jp_node(p, JN_TEXT);
    n->s = p->src + start, n->sn = end - start;
    return n;
}

static void comment(parser *p) {
    const char *e = NULL;
    for (size_t i = p->pos; i + 1 < p->len && !e; i++)
        if (p->src[i] == '#' && p->src[i + 1] == '}') e = p->src + i;
    if (!e) return jp_perr(p, "a comment is not closed");
    int minus = e > p->src + p->pos && e[-1] == '-';
    p->pos = (size_t)(e - p->src) + 2;
    if (minus) jp_skip_space(p);
    else if (p->pos < p->len && p->src[p->pos] == '\n') p->pos++;
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
            p->tok_at = apos;
            comment(p);
            continue;
        }
        p->closer = kind == '{' ? '}' : '%';
        p->braces = 0;
        if (kind == '{') {
            jp_lex(p);
            n = jp_node(p, JN_OUT);
            n->a = jp_expr(p);
            jp_expect_end(p);
        } else {
            n = block_tag(p, enders, ended);
        }
        if (n) *tail = n, tail = &n->next;
    }
    if (!p->err[0] && enders && !*ended) {
        size_t last = 0;
        while (enders[last + 1]) last++;
        p->tok_at = p->len;
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
    parser p = {.t = t, .w_line = 1, .w_col = 1, .line_starting = 1};
    /* The tree points into its own copy of the text, read as Jinja reads a template: "\r\n" and
     * "\r" as "\n", and without one newline at its end (keep_trailing_newline is off). */
    char *copy = jp_palloc(&p, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        copy[n++] = src[i] == '\r' ? '\n' : src[i];
        i += src[i] == '\r' && i + 1 < len && src[i + 1] == '\n';
    }
    if (n && copy[n - 1] == '\n') n--;
    p.src = copy, p.len = n;
    const char *ended;
    t->root = body(&p, NULL, &ended);
    if (p.err[0]) {
        kvt_jinja_free(t);
        return kvt_fail(KVT_EFORMAT, "%s", p.err);
    }
    *out = t;
    return 0;
}
