// SPDX-License-Identifier: MIT
/* The compiled form of a schema, shared by json_schema.c (which builds it
 * from JSON Schema) and json_grammar.c (which matches bytes against it). Not
 * for use outside src/runtime/. */
#ifndef KVT_JSON_GRAMMAR_IMPL_H
#define KVT_JSON_GRAMMAR_IMPL_H

#include <stdint.h>

#include "json_grammar.h"

/* What a value must be. ANY is a UNION over the any-* nodes, so matching
 * never special-cases it. */
typedef enum {
    JN_OBJECT, /* declared properties (s = keys as JSON strings, quotes included; child = value nodes), or free keys */
    JN_ARRAY,  /* items = child[0] */
    JN_STRING, /* min_len..max_len characters (code points) */
    JN_NUMBER,
    JN_INTEGER,
    JN_LITS,   /* one of the literal texts s[0..n) (enum, const, true/false/null) */
    JN_UNION,  /* by the value's first byte: branch[class] */
    JN_TAGGED, /* alternative i: the text s[i], a value of child[i], the text t[i] */
} jnode_kind;

/* The first byte of a value decides its kind (jnode JN_UNION). */
enum { JC_OBJECT, JC_ARRAY, JC_STRING, JC_NUMBER, JC_TRUE, JC_FALSE, JC_NULL, JC_COUNT };

typedef struct {
    jnode_kind kind;
    int32_t min_bytes; /* bytes of the shortest value of this node */
    int32_t n;         /* entries of s/child/t */
    char **s;          /* owned texts: keys, literals, heads */
    int32_t *slen;
    int32_t *child; /* node indices */
    char **t;       /* tagged: tails */
    int32_t *tlen;
    uint64_t required; /* object: bit i = property i is required */
    int free_keys;     /* object: any keys, values of free_value */
    int32_t free_value;
    uint32_t min_items, max_items; /* array */
    uint32_t min_len, max_len;     /* string */
    uint8_t nonneg, positive;      /* number/integer: no minus sign; integer: no zero either */
    uint8_t no_exp;                /* number: no exponent (so a maximum of 10^15 - 1 holds) */
    int32_t branch[JC_COUNT];      /* union: node per first-byte class, -1: none */
} jnode;

struct kvt_jg_schema {
    jnode *nodes;
    int32_t n_nodes, cap_nodes;
    int32_t root;
    int32_t any_string; /* a string of any length: free object keys */
};

#endif
