// SPDX-License-Identifier: MIT
/* The Jinja interpreter's insides, shared by its files: the syntax tree
 * (jinja_parse.c), values and their arena (jinja_value.c), the evaluator
 * (jinja_eval.c) and the filters, tests and methods (jinja_filters.c). */
#ifndef KVT_JINJA_IMPL_H
#define KVT_JINJA_IMPL_H

#include <setjmp.h>
#include <stddef.h>

#include "jinja.h"

/* ---- values: by value, their heap parts in the render's arena ---- */

typedef enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_MACRO } jv_kind;

typedef struct jv_list jv_list;
typedef struct jv_dict jv_dict;
typedef struct jnode jnode;
typedef struct jscope jscope;

typedef struct {
    jv_kind k;
    int markup; /* JV_STR: a Markup string (the safe filter's): "+" escapes the plain text added to it */
    union {
        long long i; /* JV_BOOL, JV_INT */
        double f;
        struct {
            const char *p;
            size_t n;
        } s;
        jv_list *l;
        jv_dict *d; /* JV_DICT, JV_NS (a namespace: a dict its attributes are set in) */
        struct {
            const jnode *node; /* JV_MACRO: its definition */
            jscope *env;       /* the scope its body runs in (a call block's caller), else NULL: the globals */
        } m;
    } u;
} jv;

struct jv_list {
    jv *v;
    size_t n, cap;
    int tuple; /* made by a tuple literal: "%" formatting takes its items as the arguments */
    int gen;   /* what Jinja's select, reject, selectattr, rejectattr and map give: a generator, which is
                  always true, has no length, items or JSON and prints as one */
};

struct jv_dict {
    jv *key; /* strings (JSON objects) or any value (a template's dict literal) */
    jv *val;
    size_t n, cap;
    int loop;         /* a for loop's "loop": it has the cycle() method */
    const jnode *rec; /* a recursive loop's for node: loop(items) runs it again, a level deeper */
    long long depth;  /* the loop's level, from 1 */
};

/* ---- syntax tree ---- */

typedef enum {
    /* statements */
    JN_TEXT,  /* s */
    JN_OUT,   /* {{ a }} */
    JN_IF,    /* a: condition, body, alt (elif chains nest as an alt holding one JN_IF) */
    JN_FOR,   /* s: target (args: JN_NAME targets to unpack into), a: iterable, c: filter condition, body, alt: else;
                 op = 1 when recursive */
    JN_SET,   /* s: name (args: JN_NAME targets to unpack into; s2: a namespace's attribute), a: value, or body
                 (through the filters c, whose innermost input, a NULL a, is the body's text) */
    JN_MACRO, /* s: name, args: parameters (JN_NAME with a default in a), body; op: 1 takes varargs, 2 kwargs */
    JN_BREAK,
    JN_CONTINUE,
    JN_BLOCK,    /* body run in place ({% generation %}) */
    JN_FILTERED, /* {% filter f %}: body's text through a, filters whose innermost input (a NULL a) is it */
    JN_CALLER,   /* {% call(params) m(args) %}: a (JN_CALL) run with caller, the JN_MACRO c of the body */
    /* expressions */
    JN_LIT,    /* v */
    JN_NAME,   /* s */
    JN_ATTR,   /* a.s */
    JN_INDEX,  /* a[b] */
    JN_SLICE,  /* a[b:c:d], each of b, c, d may be NULL */
    JN_CALL,   /* a(args) */
    JN_FILTER, /* a | s(args) */
    JN_TEST,   /* a is [not] s(args); op = 1 when negated */
    JN_UNARY,  /* op a: '!' (not), '-', '+' */
    JN_BIN,    /* a op b */
    JN_COND,   /* b if a else c */
    JN_LIST,   /* args; op = 1 for a tuple */
    JN_DICT,   /* args: JN_PAIR nodes (a: key, b: value) */
    JN_PAIR,
    JN_KWARG, /* s = a, in args */
} jn_type;

/* binary operators beyond single characters */
enum { OP_EQ = 256, OP_NE, OP_LE, OP_GE, OP_AND, OP_OR, OP_IN, OP_NOTIN, OP_FLOORDIV, OP_POW };

struct jnode {
    jn_type t;
    int line, col; /* where in the template (from 1; the column in characters), for errors */
    int op;
    const char *s, *s2;
    size_t sn, s2n;
    jnode *a, *b, *c, *d;
    jnode *args; /* arguments, list items, parameters: chained by next */
    jnode *body, *alt;
    jnode *next;
    jv v;
};

struct kvt_jinja {
    jnode *root;
    void **blocks; /* the nodes' and strings' allocations */
    size_t n_blocks, cap_blocks;
};

/* ---- rendering state ---- */

struct jscope {
    jscope *up;
    const char **name;
    size_t *nlen;
    jv *val;
    size_t n, cap;
    int barrier; /* a macro's scope: lookups past it go to the globals */
};

typedef struct {
    kvt_jinja_limits lim;
    void **blocks; /* arena */
    size_t n_blocks, cap_blocks, mem;
    char *out;
    size_t out_n, out_cap;
    size_t steps, depth;
    jscope *globals, *scope;
    int loop_ctl; /* 1 break, 2 continue pending */
    jv filtered;  /* the text a {% filter %} block's filters take */
    /* marking the output bytes that are the variables' text (kvt_jinja_render_marked, jinja_marks.c) */
    int track;
    int mark_json;           /* jv_from_json registers the strings it converts */
    unsigned char *out_mark; /* parallel to out */
    struct jx_range *marked; /* memory holding the variables' text or copies of it: sorted, disjoint */
    size_t n_marked, cap_marked;
    int err_code;
    char err[512];
    jmp_buf jb;
} jctx;

/* errors: fill the message and unwind to kvt_jinja_render */
_Noreturn void jx_fail(jctx *x, int code, const jnode *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* arena */
void *jx_alloc(jctx *x, size_t n);

/* values (jinja_value.c) */
static inline jv jv_undef(void) { return (jv){.k = JV_UNDEF}; }
static inline jv jv_none(void) { return (jv){.k = JV_NONE}; }
static inline jv jv_bool(int b) { return (jv){.k = JV_BOOL, .u.i = !!b}; }
static inline jv jv_int(long long i) { return (jv){.k = JV_INT, .u.i = i}; }
static inline jv jv_float(double f) { return (jv){.k = JV_FLOAT, .u.f = f}; }
static inline jv jv_strn(const char *p, size_t n) { return (jv){.k = JV_STR, .u.s = {p, n}}; }
jv jv_str_copy(jctx *x, const char *p, size_t n);
jv jv_new_list(jctx *x);
jv jv_new_dict(jctx *x, jv_kind k);
void jv_list_push(jctx *x, jv_list *l, jv v);
void jv_dict_set(jctx *x, jv_dict *d, jv key, jv val);
int jv_dict_get(const jv_dict *d, const char *k, size_t kn, jv *out);
jv jv_from_json(jctx *x, const struct cJSON *j);
int jv_truthy(jv v);
int jv_equal(jv a, jv b);
const char *jv_type_name(jv v);
/* text builders: str() as Python prints it, repr() and json.dumps (indent < 0: none) */
typedef struct {
    jctx *x;
    char *p;
    size_t n, cap;
    size_t *marks; /* (offset, length) pairs of the variables' text in p, in order (arena) */
    size_t n_marks, cap_marks;
} jbuf;
void jb_put(jbuf *b, const char *s, size_t n);
/* jb_put of bytes the template made, counted as the variables' text when marked */
void jb_put_marked(jbuf *b, const char *s, size_t n, int marked);
void jb_puts(jbuf *b, const char *s);
jv jb_done(jbuf *b);
void jv_write_str(jbuf *b, jv v);
void jv_write_repr(jbuf *b, jv v);
/* How tojson writes, as json.dumps: with an indent (indent set), a new line after "[", "{" and
 * each item separator, and ind once per level; the separators between items and after a key
 * (", " and ": " by default, "," and ": " with an indent); ascii: text past ASCII (and DEL) as
 * \u escapes (surrogate pairs past U+FFFF); sort_keys: a dict's items in the order of their keys. */
typedef struct {
    int indent, ascii, sort_keys;
    jv ind, item_sep, key_sep;
} jv_json_style;
void jv_write_json(jbuf *b, jv v, const jv_json_style *st, int level, const jnode *at);
jv jv_to_str(jctx *x, jv v);

/* marks (jinja_marks.c): which bytes are the variables' text, where x->track */
void jx_mark(jctx *x, const char *p, size_t n);                         /* p[0..n) is */
void jx_mark_copy(jctx *x, const char *dst, const char *src, size_t n); /* dst[i] is where src[i] is */
int jx_marked(jctx *x, const char *p);                                  /* whether byte *p is */
/* calls fn for each run of the variables' text in p[0..n) (p may lie in x->out), as offsets from p */
void jx_marks_in(jctx *x, const char *p, size_t n, void (*fn)(void *ctx, size_t off, size_t len), void *ctx);
void jb_mark(jbuf *b, size_t off, size_t len);                    /* b->p[off..off+len) is */
void jb_mark_from(jbuf *b, size_t at, const char *src, size_t n); /* b->p[at..at+n) is where src is */
void jb_register(jbuf *b);                                        /* b's marks into x's memory marks (jb_done) */
void jx_emit_marks(jctx *x, const char *s, size_t n, size_t at);  /* x->out_mark[at..at+n) from s */
void jx_marks_free(jctx *x);

/* evaluation (jinja_eval.c) */
jv jx_eval(jctx *x, const jnode *e);
/* macro's text for the arguments pos[0..npos) and the JN_KWARG nodes of kw, with caller (NULL:
 * none) as its "caller" */
jv jx_call_macro(jctx *x, const jnode *call, jv macro, const jv *pos, size_t npos, const jnode *kw, const jv *caller);

/* filters, tests, methods, globals (jinja_filters.c); *found = 0 when the name is not one */
jv jx_filter(jctx *x, const jnode *at, const char *name, size_t nlen, jv v, const jv *args, size_t nargs,
             const jnode *kwargs);
int jx_test(jctx *x, const jnode *at, const char *name, size_t nlen, jv v, const jv *args, size_t nargs);
/* needle in hay, as Jinja's "in" reads it: a substring, a list item or a dict key. */
int jx_contains(jctx *x, const jnode *at, jv needle, jv hay);
/* a < b: -1, a > b: 1, else 0, for two numbers, two strings, or two lists or tuples item by item
 * (else an error), as the operators. */
int jx_compare(jctx *x, const jnode *at, jv a, jv b);
jv jx_method(jctx *x, const jnode *at, jv self, const char *name, size_t nlen, const jv *args, size_t nargs,
             const jnode *kw, int *found);
jv jx_global(jctx *x, const jnode *at, const char *name, size_t nlen, const jv *args, size_t nargs, const jnode *kwargs,
             int *found);
/* whether name is one of jx_global's functions: they are defined, as Hugging Face's globals are
 * ("strftime_now is defined" is true) */
int jx_is_global(const char *name, size_t nlen);

size_t jx_cp_len(const char *p, size_t n); /* code points of UTF-8 text */
/* The code point at p[0..n) (n > 0) and its length in *len; U+FFFD and 1 for a byte that does not
 * start valid UTF-8 there (jinja_value.c). */
unsigned jx_utf8_get(const char *p, size_t n, size_t *len);
size_t jx_utf8_put(char *s, unsigned c); /* c's UTF-8 (1 to 4 bytes) at s */

/* strings (jinja_str.c, jinja_case.c): s stripped at which ends (1 left, 2 right) of the characters of chars
 * (NULL: whitespace); s with its case changed (JX_LOWER ...); s with from replaced by to, the
 * first count times (< 0: all); the items of list as text with sep between; a string's method
 * (*found = 0 when name is not one) */
enum { JX_LOWER, JX_UPPER, JX_CAPITALIZE, JX_TITLE, JX_TITLE_WORDS };
jv jx_strip(jv s, int which, const jv *chars);
jv jx_case(jctx *x, jv s, int mode); /* jinja_case.c */
/* Python's str.isupper (upper) or str.islower: s has a cased letter and none of the other case
 * (jinja_case.c) */
int jx_is_case(jv s, int upper);
jv jx_replace(jctx *x, jv s, jv from, jv to, long long count);
jv jx_join(jctx *x, jv list, jv sep);
jv jx_str_method(jctx *x, const jnode *at, jv s, const char *name, size_t nlen, const jv *a, size_t n, const jnode *kw,
                 int *found);

/* a + b as the operator computes it (numbers, strings, lists) */
jv jx_add(jctx *x, const jnode *at, jv a, jv b);
/* Python's "fmt % args" for a string fmt (printf-style conversions; jinja_format.c) */
jv jx_percent_format(jctx *x, const jnode *at, jv fmt, jv args);
/* Python's fmt.format(*a, **kw) (jinja_format.c) */
jv jx_str_format(jctx *x, const jnode *at, jv fmt, const jv *a, size_t na, const jnode *kw);
/* A float as the int filter makes it: its integer part, dflt (or 0) for NaN and infinities,
 * an error past 64 bits (jinja_filters.c) */
jv jx_float_to_int(jctx *x, const jnode *at, double d, const jv *dflt);

/* a keyword argument named name among the JN_KWARG nodes of a call, evaluated, or undefined */
jv jx_kwarg(jctx *x, const jnode *args, const char *name);

#endif
