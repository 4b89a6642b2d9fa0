// SPDX-License-Identifier: MIT
/* The schema compiler's state, shared by json_schema.c (keywords and types)
 * and json_schema_link.c ($ref, allOf, and the pass that measures the node
 * graph once it is whole). Not for use outside src/runtime/. */
#ifndef KVT_JSON_SCHEMA_IMPL_H
#define KVT_JSON_SCHEMA_IMPL_H

#include <cjson/cJSON.h>

#include "json_grammar_impl.h"

#define PATH_MAX_LEN 160 /* bytes of the schema path in error messages */

typedef struct {
    const cJSON *target;
    int32_t node;
} ref_memo;

typedef struct {
    int32_t node;
    char path[PATH_MAX_LEN];
} oneof_site;

typedef struct {
    kvt_jg_schema *s;
    char *err;
    size_t cap;
    int failed;
    char path[PATH_MAX_LEN];
    int32_t any;        /* the ANY union, built on first use (-1: not yet) */
    int32_t any_object; /* its object branch */
    const cJSON *root;  /* the document '#' in a $ref names */
    ref_memo *refs;
    int32_t n_refs;
    cJSON **owned; /* schemas made while compiling (merged allOf), freed at the end */
    int32_t n_owned;
    oneof_site *oneofs;
    int32_t n_oneofs;
} compiler;

int fail(compiler *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int32_t new_node(compiler *c, jnode_kind kind);
jnode *node(compiler *c, int32_t i);
void node_alloc(compiler *c, int32_t i, int32_t n, int tails);
int32_t compile(compiler *c, const cJSON *sc, int depth);
int32_t compile_at(compiler *c, const cJSON *sc, int depth, const char *seg);
int is_annotation(const char *k);

/* json_schema_link.c */
int32_t compile_ref(compiler *c, const cJSON *sc, int depth);
int32_t compile_allof(compiler *c, const cJSON *sc, int depth);
const char *format_pattern(const char *format);
/* Resolves references, flattens unions, measures every node (recursion
 * included) and checks oneOf; the root must have a finite value within the
 * nesting limit. */
int link_schema(compiler *c, int32_t *root);

#endif
