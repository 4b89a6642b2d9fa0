// SPDX-License-Identifier: MIT
/* The compiled form of a schema, shared by json_schema.c (which builds it
 * from JSON Schema) and json_grammar.c (which matches bytes against it). Not
 * for use outside src/runtime/. */
#ifndef KVT_JSON_GRAMMAR_IMPL_H
#define KVT_JSON_GRAMMAR_IMPL_H

#include <stdint.h>

#include "json_grammar.h"

#define JG_NO_LIMIT UINT32_MAX
#define JG_INF (INT32_MAX / 4) /* no finite value (yet, while measuring recursive schemas) */

/* A byte automaton over the decoded text of a string (json_regex.c): the
 * pattern or format, with minLength/maxLength folded in. */
typedef struct jdfa {
    int32_t n_states, n_classes; /* state 0 is the start */
    uint8_t cls[256];            /* byte -> class */
    int32_t *next;               /* (n_states * n_classes) -1: refused (also every byte that leads nowhere) */
    uint8_t *accept;
    int32_t *dist; /* bytes of JSON string text (escapes counted) to an accepting state */
} jdfa;

/* Compiles a pattern matched against the whole string, over strings of
 * min_len..max_len code points. KVT_EARG with a message naming the feature
 * it cannot follow. */
int kvt_jrx_compile(const char *pattern, uint32_t min_len, uint32_t max_len, jdfa **out, char *err, size_t cap);
void kvt_jrx_free(jdfa *d);
static inline int32_t jdfa_next(const jdfa *d, int32_t q, uint8_t b) { return d->next[q * d->n_classes + d->cls[b]]; }

/* What a value must be. ANY is a UNION over the any-* nodes, so matching
 * never special-cases it. */
typedef enum {
    JN_OBJECT, /* declared properties (s = keys as JSON strings, quotes included; child = value nodes), or free keys */
    JN_ARRAY,  /* child[0] = items beyond the prefix (-1: none), child[1..n) = prefixItems */
    JN_STRING, /* min_len..max_len characters (code points), or the automaton rx */
    JN_NUMBER,
    JN_INTEGER,
    JN_LITS,   /* one of the literal texts s[0..n) (enum, const, true/false/null) */
    JN_UNION,  /* one of the branches child[0..n); after linking none is a union or a reference */
    JN_TAGGED, /* alternative i: the text s[i], a value of child[i], the text t[i] */
    JN_REF,    /* while compiling only: the node $ref names, child[0] */
} jnode_kind;

/* The first byte of a value decides its class. */
enum { JC_OBJECT, JC_ARRAY, JC_STRING, JC_NUMBER, JC_TRUE, JC_FALSE, JC_NULL, JC_COUNT };

/* The magnitudes a number of one sign may have: an integer part in
 * [za, zb] with no fraction (or zeros), or in [fa, fb] with a fraction that
 * is not zero. Integers: only [za, zb], multiples of mult. */
typedef struct {
    uint8_t ok;
    int64_t za, zb, fa, fb;
    int32_t min_bytes; /* the shortest such number, without its sign */
} jmag;

typedef struct {
    jnode_kind kind;
    int32_t min_bytes; /* bytes of the shortest value of this node */
    int32_t nest;      /* frames the shortest value takes (1 for a scalar) */
    uint8_t first;     /* bit JC_x: a value can start with class x */
    int32_t n;         /* entries of s/child/t */
    char **s;          /* owned texts: keys, literals, heads */
    int32_t *slen;
    int32_t *child; /* node indices */
    char **t;       /* tagged: tails */
    int32_t *tlen;
    uint64_t required; /* object: bit i = property i is required */
    int free_keys;     /* object: any keys (of key_node), values of free_value */
    int32_t free_value, key_node;
    uint32_t min_items, max_items; /* array */
    uint32_t min_len, max_len;     /* string */
    jdfa *rx;                      /* string: pattern/format automaton (lengths folded in), or NULL */
    uint8_t bounded;               /* number/integer: mag and mult apply, and no exponent */
    jmag mag[2];                   /* [0]: no sign, [1]: after '-' */
    int64_t mult;                  /* integer: multipleOf (1: none) */
} jnode;

struct kvt_jg_schema {
    jnode *nodes;
    int32_t n_nodes, cap_nodes;
    int32_t root;
    int32_t any_string;    /* a string of any length: free object keys */
    struct kvt_gbnf *gbnf; /* a GBNF grammar instead of nodes (gbnf.h), or NULL (owned) */
};

/* A preorder trie of token byte strings (json_vocab.c). */
typedef struct {
    int32_t n;
    uint8_t *byte;
    uint8_t *depth; /* 1-based */
    int32_t *skip;  /* the node after this one's subtree (preorder) */
    int32_t *tok;   /* first token ending here, -1: none; the rest via next */
    int32_t *next;  /* (n_vocab) */
} trie;

struct kvt_jg_vocab {
    int32_t n_vocab;
    uint32_t *off; /* (n_vocab) token bytes in blob */
    uint8_t *len;  /* (n_vocab) 0: never allowed */
    uint8_t *blob;
    trie all, special; /* every token; the tokens that are not plain string text */
    int32_t *plain;    /* tokens that are plain string text, and their characters */
    uint32_t *plain_chars;
    int32_t n_plain;
    uint8_t *plain_mask; /* (n_vocab) 1 for the plain ones, copied whole where no maxLength is near */
    uint32_t max_plain_chars;
    uint8_t *eog; /* (n_vocab) end-of-generation tokens */
};

#endif
