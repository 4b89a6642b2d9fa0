// SPDX-License-Identifier: MIT
/* One strict pass over a JSON text before any parser sees it: the grammar of
 * RFC 8259 and, beyond it, what makes parsers disagree or what kvtier's C
 * strings cannot carry. A body passes only when every parser reads the same
 * thing from it as kvtier (cJSON) does:
 *   - no object has the same key twice, at any depth (cJSON takes the first
 *     copy, Python, JS and Go the last; keys are compared decoded, so
 *     "a" and "\u0061" are the same key);
 *   - no string or key holds \u0000 (a C string ends there);
 *   - no string holds a raw control byte (U+0000..U+001F must be escaped),
 *     invalid UTF-8, an overlong encoding, an encoded surrogate, a code point
 *     above U+10FFFF, or an unpaired surrogate escape (\ud800 alone: no
 *     UTF-8 can carry it);
 *   - numbers follow the JSON grammar and are at most 63 characters (what
 *     cJSON reads of one).
 * Optionally, each top-level key is offered to a known-field test.
 *
 * One pass, linear in the body: duplicate keys are found with a hash table of
 * the keys of the objects still open (seeded per call, so colliding keys
 * cannot be prepared), popped as each object closes. Memory is the table
 * (bounded by max_keys) and the open containers; nothing for a body without
 * objects.
 *
 * Thread-safety: reentrant (no shared state). */
#ifndef KVT_JSON_STRICT_H
#define KVT_JSON_STRICT_H

#include <stddef.h>

#define KVT_JSON_PATH_MAX 160    /* bytes of the JSON pointer in a report */
#define KVT_JSON_KEY_MAX 128     /* bytes of a key the report and the known test see (longer keys are cut) */
#define KVT_JSON_NUMBER_MAX 63   /* characters of one number */
#define KVT_JSON_UNKNOWN_SHOWN 4 /* unknown fields a report names */

typedef enum {
    KVT_JSON_OK = 0,
    KVT_JSON_SYNTAX,    /* not JSON, empty, or text after the value */
    KVT_JSON_DUPLICATE, /* an object holds the same key twice */
    KVT_JSON_NUL,       /* \u0000 in a string or key, or a NUL byte */
    KVT_JSON_TEXT,      /* a raw control byte, invalid UTF-8, or an unpaired surrogate escape */
    KVT_JSON_DEPTH,     /* arrays and objects nested deeper than max_depth */
    KVT_JSON_LIMIT,     /* more than max_keys keys, or a body of 4 GiB or more */
    KVT_JSON_UNKNOWN,   /* top-level fields the known test refused (only when the body is otherwise fine) */
} kvt_json_fault;

typedef struct {
    size_t max_keys; /* object keys in the whole body at most; 0 = no limit */
    int max_depth;   /* open arrays and objects at most; 0 = no limit */
    /* When set, called with each key of the root object, decoded and NUL-terminated (cut to
     * KVT_JSON_KEY_MAX - 1 bytes; len is the whole decoded length): nonzero if it is known. */
    int (*known)(void *ctx, const char *key, size_t len);
    void *ctx;
} kvt_json_rules;

typedef struct {
    kvt_json_fault fault;
    size_t offset;                /* the byte of the body at fault */
    char path[KVT_JSON_PATH_MAX]; /* JSON pointer of the value or key at fault ("" = the root); keys
                                     shown as sent, bytes outside printable ASCII as '?' */
    char field[KVT_JSON_KEY_MAX]; /* the decoded key of the root object the fault is under, or "" */
    char message[400];            /* what is wrong and where, for an error reply */
} kvt_json_report;

/* Checks b[0..n) (need not be NUL-terminated) as exactly one JSON value with
 * only whitespace around it. Returns 0, or -1 with *rep filled. rules may be
 * NULL (no limits, no known test). */
int kvt_json_check(const char *b, size_t n, const kvt_json_rules *rules, kvt_json_report *rep);

#endif
