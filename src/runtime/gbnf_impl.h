// SPDX-License-Identifier: MIT
/* The compiled form of a GBNF grammar, shared by gbnf.c (which builds it)
 * and gbnf_match.c (which matches bytes against it). Not for use outside
 * src/runtime/. */
#ifndef KVT_GBNF_IMPL_H
#define KVT_GBNF_IMPL_H

#include "gbnf.h"

enum { GS_END, GS_CLASS, GS_REF }; /* the end of an alternative, a character, a rule */

typedef struct {
    uint8_t kind;
    int32_t arg; /* class or rule index */
} gsym;

typedef struct {
    int32_t off, n; /* ranges lo[off..off+n), hi[...]: sorted, disjoint, not adjacent */
    uint8_t negated;
} gclass;

struct kvt_gbnf {
    gsym *sym; /* every alternative, each ended by GS_END */
    int32_t n_sym;
    int32_t *alt;                /* start positions of alternatives, rule by rule */
    int32_t *rule_alt, *rule_na; /* rule r: alt[rule_alt[r] .. + rule_na[r]) */
    int32_t n_rules, root;
    gclass *cls;
    int32_t n_cls;
    uint32_t *lo, *hi;
    int32_t *suffix_min; /* (n_sym) fewest bytes from this position to the end of its alternative */
};

/* 1 when code point c is in class k; class_may: when some code point in
 * [a, b] is. */
int kvt_gbnf_class_has(const kvt_gbnf *g, int32_t k, uint32_t c);
int kvt_gbnf_class_may(const kvt_gbnf *g, int32_t k, uint32_t a, uint32_t b);

#endif
