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

typedef struct {
    jv_kind k;
    union {
        long long i; /* JV_BOOL, JV_INT */
        double f;
        struct {
            const char *p;
            size_t n;
        } s;
        jv_list *l;
        jv_dict *d;     /* JV_DICT, JV_NS (a namespace: a dict its attributes are set in) */
        const jnode *m; /* JV_MACRO: its definition */
    } u;
} jv;

struct jv_list {
    jv *v;
    size_t n, cap;
    int tuple; /* made by a tuple literal: "%" formatting takes its items as the arguments */
};

struct jv_dict {
    jv *key; /* strings (JSON objects) or any value (a template's dict literal) */
    jv *val;
    size_t n, cap;
    int loop; /* a for loop's "loop": it has the cycle() method */
};

/* ---- syntax tree ---- */

typedef enum {
    /* statements */
    JN_TEXT,  /* s */
    JN_OUT,   /* {{ a }} */
    JN_IF,    /* a: condition, body, alt (elif chains nest as an alt holding one JN_IF) */
    JN_FOR,   /* s: target (args: JN_NAME targets to unpack into), a: iterable, c: filter condition, body, alt: else */
    JN_SET,   /* s: name (args: JN_NAME targets to unpack into; s2: a namespace's attribute), a: value, or body */
    JN_MACRO, /* s: name, args: parameters (JN_NAME with a default in a), body */
    JN_BREAK,
    JN_CONTINUE,
    JN_BLOCK, /* body run in place ({% generation %}, {% filter %} without a filter is not parsed) */
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
    int line;
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

typedef struct jscope jscope;
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
/* How tojson writes: the indent (-1: none) and the separators between items and after a key
 * (json.dumps' separators: ", " and ": " by default, "," and ": " with an indent). */
typedef struct {
    int indent;
    jv item_sep, key_sep;
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
jv jx_call_macro(jctx *x, const jnode *call, jv macro, const jv *pos, size_t npos, const jnode *kw);

/* filters, tests, methods, globals (jinja_filters.c); *found = 0 when the name is not one */
jv jx_filter(jctx *x, const jnode *at, const char *name, size_t nlen, jv v, const jv *args, size_t nargs,
             const jnode *kwargs);
int jx_test(jctx *x, const jnode *at, const char *name, size_t nlen, jv v, const jv *args, size_t nargs);
/* needle in hay, as Jinja's "in" reads it: a substring, a list item or a dict key. */
int jx_contains(jctx *x, const jnode *at, jv needle, jv hay);
/* a < b: -1, a > b: 1, else 0, for two numbers or two strings (else an error), as the operators. */
int jx_compare(jctx *x, const jnode *at, jv a, jv b);
jv jx_method(jctx *x, const jnode *at, jv self, const char *name, size_t nlen, const jv *args, size_t nargs,
             const jnode *kw, int *found);
jv jx_global(jctx *x, const jnode *at, const char *name, size_t nlen, const jv *args, size_t nargs, const jnode *kwargs,
             int *found);

size_t jx_cp_len(const char *p, size_t n); /* code points of UTF-8 text */

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
