// SPDX-License-Identifier: MIT
/* Constrained decoding for JSON: a byte-level pushdown automaton driven by a
 * compiled JSON Schema (a stated subset), and the per-step token mask that
 * keeps a model's output a valid, schema-conforming document.
 *
 * Three objects:
 *  - kvt_jg_vocab: every token's bytes, once per model, arranged for fast
 *    masking (a preorder trie of all tokens, a second one of the tokens that
 *    are not plain string text, and the list of those that are). Immutable
 *    after kvt_jg_vocab_new; may be shared by any number of matchers.
 *  - kvt_jg_schema: a compiled schema. Immutable; shareable.
 *  - kvt_jg: one generation's matcher state. Not thread-safe; one per sequence.
 *
 * The schema subset (anything else is refused naming the keyword and its
 * path; docs/api.md lists it for users):
 *   type (one or a list; absent, a type-specific keyword implies it);
 *   object: properties, required, additionalProperties (false/true/absent,
 *   or a schema for a record without properties), propertyNames (records);
 *   array: items, prefixItems, minItems, maxItems; string: minLength,
 *   maxLength, pattern (json_regex.c's subset, the whole string matching),
 *   format (date-time, date, time, email, uuid, uri, ipv4); integer: any
 *   minimum/maximum/exclusive bounds and multipleOf; number: whole-number
 *   bounds (no exponent then); enum/const of any JSON values; anyOf/oneOf
 *   with any branches (oneOf only where they cannot both match); allOf
 *   merged where branches agree; $ref (JSON pointers into the same document,
 *   recursion included). Annotations ($defs, title, description, ...) are
 *   accepted and ignored.
 *   An object with declared properties produces only those (each at most
 *   once, any order, every required one): the output validates whether or
 *   not additionalProperties allows others.
 *   Nesting: a container opens only when the shortest value it needs still
 *   fits in KVT_JG_MAX_DEPTH levels, so recursive schemas stop there; a
 *   schema whose shortest value nests deeper (or that has none) is refused.
 *   Branches that start alike (two objects of a union) are followed as
 *   separate parses, up to 8 at once.
 *
 * What the matcher guarantees: every byte the mask lets through keeps the
 * text a prefix of a valid document; strings are valid UTF-8 with no control
 * characters or lone surrogate escapes; whitespace runs are at most
 * KVT_JG_MAX_WS bytes; nothing may follow the document. Given a budget of
 * tokens, the mask also keeps the shortest completion within it, so a
 * document whose shortest form fits the budget is always finished. */
#ifndef KVT_JSON_GRAMMAR_H
#define KVT_JSON_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

#define KVT_JG_MAX_DEPTH 24                   /* nesting of objects and arrays (recursive $ref included) */
#define KVT_JG_MAX_WS 8                       /* consecutive whitespace bytes between tokens of JSON */
#define KVT_JG_MAX_SET 64                     /* enum values, properties of one object, union branches, tools */
#define KVT_JG_MAX_TOKEN 255                  /* bytes of a token the mask considers (longer ones are never allowed) */
#define KVT_JG_NUMBER_LIMIT 999999999999999.0 /* integer parts have at most 15 digits */

typedef struct kvt_jg_vocab kvt_jg_vocab;
typedef struct kvt_jg_schema kvt_jg_schema;
typedef struct kvt_jg kvt_jg;
struct cJSON;

/* The token bytes of t's vocabulary (kvt_token_piece without special
 * rendering: control tokens have none and are never allowed, except the
 * end-of-generation ones where a document may end). Returns NULL only for an
 * empty vocabulary. Free with kvt_jg_vocab_free. */
kvt_jg_vocab *kvt_jg_vocab_new(const kvt_tokenizer *t);
void kvt_jg_vocab_free(kvt_jg_vocab *v);
int32_t kvt_jg_vocab_size(const kvt_jg_vocab *v);

/* Compiles schema (NULL: any JSON object, OpenAI's json_object mode). On
 * failure returns KVT_EARG, *out NULL and in err[0..cap) a message naming
 * the offending keyword and where it is ("unsupported schema keyword
 * 'contentMediaType' at /properties/zip"). Free with kvt_jg_schema_free. */
int kvt_jg_schema_compile(const struct cJSON *schema, kvt_jg_schema **out, char *err, size_t cap);

/* A choice of n (1..KVT_JG_MAX_SET) alternatives, each the literal text
 * heads[i], then a value of schemas[i] (NULL: any object), then tails[i]:
 * the shape of a forced tool call. The heads must be distinct and none a
 * prefix of another. Same failure contract as kvt_jg_schema_compile. */
int kvt_jg_schema_tagged(int n, const char *const *heads, const struct cJSON *const *schemas, const char *const *tails,
                         kvt_jg_schema **out, char *err, size_t cap);
/* Compiles a GBNF grammar (gbnf.h) into a schema the same matcher and mask
 * follow. Same failure contract; the message names the line and column. */
int kvt_jg_schema_gbnf(const char *text, size_t len, kvt_jg_schema **out, char *err, size_t cap);
void kvt_jg_schema_free(kvt_jg_schema *s);

/* A matcher at the start of a document of schema s over v's tokens. Both
 * must outlive it. Free with kvt_jg_free. */
kvt_jg *kvt_jg_new(const kvt_jg_schema *s, const kvt_jg_vocab *v);
void kvt_jg_free(kvt_jg *g);

/* mask[0..n_vocab) gets 1 for each token that may come next, 0 otherwise,
 * where budget is the number of tokens still allowed, this one included: a
 * token is allowed only if the document can still be finished in the rest,
 * counting one token per byte. When even that is past the budget (a long
 * forced head, tokens longer than a byte), only the tokens that shorten the
 * shortest completion are allowed. With one token left (budget 1) where the
 * document may end but need not, only the end-of-generation tokens are
 * allowed, so it ends complete rather than cut. Returns how many are allowed
 * (0: none; the document cannot continue). */
int32_t kvt_jg_mask(kvt_jg *g, int32_t budget, uint8_t *mask);
/* Advances past token tok. Returns 0, or KVT_EARG (state unchanged) when tok
 * is not allowed here. */
int kvt_jg_accept(kvt_jg *g, int32_t tok);
/* Advances past bytes (the byte-level form of kvt_jg_accept, for tests and
 * for text that is not tokens). Returns 0, or KVT_EARG with the state as it
 * was before the first byte refused. */
int kvt_jg_feed(kvt_jg *g, const char *bytes, size_t n);
/* 1 when the document is complete and nothing may follow it. */
int kvt_jg_done(const kvt_jg *g);
/* 1 when the document may end here (done, or a top-level number). */
int kvt_jg_can_end(const kvt_jg *g);
/* Bytes in the shortest text that completes the document from here. */
int32_t kvt_jg_min_bytes(const kvt_jg *g);

#endif
