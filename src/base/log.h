// SPDX-License-Identifier: MIT
/* Logging: one line per event, each with an ISO-8601 UTC timestamp (ms) and
 * a level, as text or as JSON objects, to stderr or to a file.
 *
 *   text: 2026-12-01T02:19:13.123Z kvtier: info: serve: listening on http://127.0.0.1:8080
 *   json: {"ts":"2026-12-01T02:19:13.123Z","level":"info","msg":"serve: listening on ..."}
 *
 * Levels 0 error, 1 warn, 2 info, 3 debug; KVT_LOG in the environment sets
 * the threshold (default info), kvt_log_set_level overrides it.
 *
 * Thread-safety: kvt_log may be called from any thread; each line is one
 * write(2) (whole lines never interleave on an O_APPEND file or a pipe, up to
 * PIPE_BUF for pipes). The setters are meant for start-up, before other
 * threads log, but are atomic. */
#ifndef KVT_LOG_H
#define KVT_LOG_H

#include <stddef.h>

enum { KVT_LOG_ERROR = 0, KVT_LOG_WARN = 1, KVT_LOG_INFO = 2, KVT_LOG_DEBUG = 3 };
typedef enum { KVT_LOG_TEXT = 0, KVT_LOG_JSON = 1 } kvt_log_format;

/* Bytes of a timestamp, "YYYY-MM-DDTHH:MM:SS.mmmZ" plus its NUL. */
#define KVT_LOG_TS_BYTES 25

/* Logs one line at level if the threshold lets it through. */
void kvt_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 1 if a line at level would be written. */
int kvt_log_enabled(int level);

/* One field of a structured line (kvt_log_fields). */
typedef enum {
    KVT_LOG_STR = 0,
    KVT_LOG_INT = 1,
    KVT_LOG_NUM = 2, /* d with 3 decimals */
    KVT_LOG_BOOL = 3,
    KVT_LOG_UINT = 4, /* (unsigned long long)i */
    KVT_LOG_REAL = 5  /* d with up to 6 significant digits, always a JSON float (1.0, 2.5e-05) */
} kvt_log_type;
typedef struct {
    const char *key; /* a JSON key: [a-z_]; not escaped */
    kvt_log_type type;
    const char *s; /* KVT_LOG_STR: the value (escaped as JSON); NULL: null */
    long long i;   /* KVT_LOG_INT, and KVT_LOG_BOOL (0 false, else true) */
    double d;      /* KVT_LOG_NUM: written with 3 decimals; NaN or infinite: null */
} kvt_log_field;

/* Logs one event as fields, if the threshold lets it through. JSON: msg, then
 * every field as its own key after ts, level and msg, so a reader needs no
 * parsing of the message ({"ts":...,"level":"info","msg":"access","method":
 * "POST","status":200,...}). Text: text_msg as kvt_log writes it (the fields
 * are for JSON readers; the text line says the same in its own words). */
void kvt_log_fields(int level, const char *msg, const kvt_log_field *f, size_t n, const char *text_msg);

/* Logs one line as kvt_log does, and in JSON also gives each conversion of
 * fmt a key of its own, typed by the conversion: keys names them in order,
 * comma-separated ("" or a missing name: that one stays in the text only).
 * %d %i %u (any length) are JSON integers, %f %e %g JSON floats, %s strings
 * (NULL: null), %x %o %c %p strings as printf writes them. The text line and
 * the JSON msg are the same rendered message, so a reader of either sees the
 * prose, and a log pipeline reads the values without parsing it:
 *
 *   kvt_logk(KVT_LOG_INFO, "request_id,tokens", "serve: prefill %s: %d tokens", id, n);
 *   {"ts":...,"level":"info","msg":"serve: prefill req-1: 900 tokens","request_id":"req-1","tokens":900}
 *
 * At most KVT_LOG_MAX_KEYS keys; keys are [a-z0-9_] (not escaped) and never
 * ts, level or msg. */
#define KVT_LOG_MAX_KEYS 16
void kvt_logk(int level, const char *keys, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The format lines are written in now. */
kvt_log_format kvt_log_get_format(void);

/* The threshold (0..3; values outside are clamped). */
void kvt_log_set_level(int level);
int kvt_log_level(void);

/* "text" or "json": 0, or KVT_EARG (message names the value). */
int kvt_log_set_format_name(const char *name);
void kvt_log_set_format(kvt_log_format f);

/* Sends every later line to path (appended; created 0600), opened without
 * following a symbolic link and only if it is a regular file with no other
 * hard link (-EMLINK: it would be written under another name too). Returns 0, or a
 * negative errno with kvt_errmsg() saying why; the previous destination is
 * kept on failure. kvt_log_close_file goes back to stderr. */
int kvt_log_open_file(const char *path);
void kvt_log_close_file(void);

/* The current UTC time as "YYYY-MM-DDTHH:MM:SS.mmmZ" into out (>= KVT_LOG_TS_BYTES). */
void kvt_log_timestamp(char *out, size_t cap);

/* Level names as written: "error", "warn", "info", "debug". */
const char *kvt_log_level_name(int level);

#endif
