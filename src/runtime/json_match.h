// SPDX-License-Identifier: MIT
/* The matcher's state (json_grammar.c steps it byte by byte, json_mask.c
 * measures it and builds the token mask). Not for use outside src/runtime/. */
#ifndef KVT_JSON_MATCH_H
#define KVT_JSON_MATCH_H

#include <string.h>

#include "json_grammar_impl.h"

#define MAX_FRAMES (KVT_JG_MAX_DEPTH + 8)
#define MAX_ALTS 8        /* parses kept at once (unions whose branches start alike); more are dropped */
#define MAX_INT_DIGITS 15 /* KVT_JG_NUMBER_LIMIT */
#define MAX_FRAC_DIGITS 16
#define MAX_EXP_DIGITS 3
#define HEX_DIGITS 4

enum { F_VALUE, F_OBJ, F_ARR, F_STR, F_NUM, F_LIT, F_KEY, F_TAG };
enum { O_OPEN, O_COMMA, O_IN_KEY, O_AFTER_KEY, O_IN_VALUE, O_AFTER_VALUE };
enum { A_OPEN, A_COMMA, A_IN_ITEM, A_AFTER_ITEM };
enum { S_NORMAL, S_ESC, S_HEX, S_UTF8 };
enum { N_BEGIN, N_SIGN, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
enum { T_HEAD, T_VALUE, T_TAIL };
#define AUX_KEY 1 /* F_STR: an object key (free keys) */
#define NUM_NEG 1 /* F_NUM (bounded): after '-' */
#define NUM_NZ 2  /* F_NUM (bounded): a fraction digit that is not 0 */

typedef struct {
    uint8_t kind, sub, ws, aux;
    int32_t node;
    uint32_t count; /* string: characters; array: items started; literal/key/tag: bytes matched; number: digits */
    int32_t idx;    /* object: property after its key (-1 free); tag: alternative; string: pending bytes or
                       automaton state */
    uint64_t set;   /* candidates (literal/key/tag head), used properties (object), \u value (string),
                       integer part (bounded number) */
} frame;

/* One parse: a stack of frames. It lives in a jstate's a[slot]. */
typedef struct {
    int32_t depth;
    int16_t done, slot;
    frame f[MAX_FRAMES];
} jstack;

/* The parses still possible: the text is a prefix of a valid document as
 * long as one is left. */
typedef struct {
    int32_t n;
    jstack a[MAX_ALTS];
} jstate;

struct kvt_jg {
    const kvt_jg_schema *s;
    const kvt_jg_vocab *v;
    jstate st;
    jstate *walk;          /* (KVT_JG_MAX_TOKEN + 1) states, one per trie depth; made by the first mask */
    struct kvt_gbnf_m *gm; /* the schema is a GBNF grammar: its matcher does all the work */
};

static inline void stack_copy(jstack *dst, const jstack *src) {
    dst->depth = src->depth;
    dst->done = src->done;
    memcpy(dst->f, src->f, (size_t)src->depth * sizeof *src->f);
}

static inline const jnode *N(const kvt_jg_schema *s, int32_t i) { return &s->nodes[i]; }

/* Steps every parse by c; the ones that refuse it go. 0 when none is left. */
int jg_step_all(jstate *st, const kvt_jg_schema *s, uint8_t c);
/* The node of item i of an array (prefixItems first; -1: none). */
int32_t jg_item_node(const jnode *n, uint32_t i);
int jg_num_terminal(uint8_t sub);
/* Bytes still needed after an integer-part prefix p (k digits) of a bounded number. */
int32_t jg_int_part_cost(const jnode *n, const jmag *m, int64_t p, uint32_t k);
/* A bounded number complete here. */
int jg_bnum_valid(const jnode *n, const frame *f);
/* Fewest bytes after a backslash in automaton state q. */
int32_t jg_esc_best(const jdfa *d, int32_t q);

#endif
