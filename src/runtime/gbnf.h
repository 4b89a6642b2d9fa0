// SPDX-License-Identifier: MIT
/* GBNF grammars (the `grammar` request field, as llama-server takes it) for
 * constrained decoding through the same token mask as JSON schemas.
 *
 * The grammar: rules `name ::= alternatives`, separated by `|`; a sequence
 * of items, each a string literal ("..." with \n \r \t \" \\ \xHH \uHHHH
 * \UHHHHHHHH escapes), a character class ([a-z], [^...], the same escapes),
 * `.` (any character), a rule name or a group `( ... )`, optionally followed
 * by `*`, `+`, `?`, `{m}`, `{m,}` or `{m,n}`. `#` starts a comment to the
 * end of the line. A rule may span lines; a new one starts where a name is
 * followed by `::=`. `root` is where the text starts.
 *
 * Matching: a set of parse stacks, each a list of positions in the rules'
 * alternatives whose top is the character class that comes next. Classes
 * match whole UTF-8 characters; a byte inside a character is allowed while
 * some character the class accepts can still begin with the bytes so far,
 * and only well-formed UTF-8 is taken (no surrogates, overlong forms or code
 * points past U+10FFFF, refused at the first byte that departs from a valid
 * sequence). A NUL byte is never taken: replies cannot carry it.
 * Left recursion is refused when the grammar is compiled (the stacks would
 * grow without end), as is a rule with no finite text. */
#ifndef KVT_GBNF_H
#define KVT_GBNF_H

#include <stddef.h>
#include <stdint.h>

#include "json_grammar.h"

#define KVT_GBNF_MAX_TEXT (256 * 1024) /* bytes of grammar text */
#define KVT_GBNF_MAX_RULES 1024        /* rules, the ones groups and repetitions make included */
#define KVT_GBNF_MAX_SYMBOLS 65536     /* items of all alternatives after expanding repetitions */
#define KVT_GBNF_MAX_REPEAT 256        /* the largest m or n of {m,n} */
#define KVT_GBNF_MAX_STACKS 1024       /* parse stacks alive at once */
#define KVT_GBNF_MAX_DEPTH 128         /* positions in one parse stack (nesting of rules) */

typedef struct kvt_gbnf kvt_gbnf;
typedef struct kvt_gbnf_m kvt_gbnf_m;

/* Compiles text[0..len). On failure returns KVT_EARG, *out NULL and in
 * err[0..cap) a message with the line and column ("line 3, column 7:
 * undefined rule 'value'"). */
int kvt_gbnf_parse(const char *text, size_t len, kvt_gbnf **out, char *err, size_t cap);
void kvt_gbnf_free(kvt_gbnf *g);

/* A matcher at the start of g's root over v's tokens (v may be NULL for
 * byte-level use: feed, can_end, done). Both must outlive it. */
kvt_gbnf_m *kvt_gbnf_m_new(const kvt_gbnf *g, const kvt_jg_vocab *v);
void kvt_gbnf_m_free(kvt_gbnf_m *m);
/* The contracts of kvt_jg_mask, kvt_jg_accept, kvt_jg_feed, kvt_jg_done,
 * kvt_jg_can_end and kvt_jg_min_bytes. A byte that would take the matcher
 * past KVT_GBNF_MAX_STACKS or KVT_GBNF_MAX_DEPTH is refused, and
 * kvt_gbnf_m_overflowed says so from then on. */
int32_t kvt_gbnf_m_mask(kvt_gbnf_m *m, int32_t budget, uint8_t *mask);
int kvt_gbnf_m_accept(kvt_gbnf_m *m, int32_t tok);
int kvt_gbnf_m_feed(kvt_gbnf_m *m, const char *bytes, size_t n);
int kvt_gbnf_m_done(const kvt_gbnf_m *m);
int kvt_gbnf_m_can_end(const kvt_gbnf_m *m);
int32_t kvt_gbnf_m_min_bytes(const kvt_gbnf_m *m);
int kvt_gbnf_m_overflowed(const kvt_gbnf_m *m);
/* The mask remembers up to max_sets of the parse sets it meets, with the
 * byte steps between them (2048 by default: the same mask, far fewer steps),
 * and forgets them all when full; 0 turns that off, so every parse is stepped
 * at every node of the vocabulary trie. For tests and benchmarks that
 * compare the two; it forgets what was remembered. */
void kvt_gbnf_m_set_memo(kvt_gbnf_m *m, int32_t max_sets);
/* Where whole characters of some set lead the parse set back to itself (free
 * text: a class repeated without bound), the mask takes every token made
 * only of such characters in one pass and walks the trie for the rest: the
 * same mask. On by default; 0 turns it off, for tests and benchmarks that
 * compare the two. */
void kvt_gbnf_m_set_loops(kvt_gbnf_m *m, int on);
/* How many tokens the last kvt_gbnf_m_mask took that way (for tests and benchmarks). */
int32_t kvt_gbnf_m_loop_taken(const kvt_gbnf_m *m);

#endif
