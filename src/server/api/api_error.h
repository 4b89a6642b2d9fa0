// SPDX-License-Identifier: MIT
/* An error of the OpenAI-compatible surface: the struct every parser,
 * handler and sender fills, and its JSON. The bottom of src/server/'s API
 * files: everything above calls into it, it calls nothing of theirs (only
 * api_utf8.c, to make a message safe for JSON).
 *
 * Thread-safety: reentrant (no shared state). */
#ifndef KVT_API_ERROR_H
#define KVT_API_ERROR_H

#include <stddef.h>

/* An error as OpenAI reports it: {"error": {message, type, param, code}}. */
typedef struct {
    int status; /* HTTP status */
    char message[512];
    const char *type;     /* "invalid_request_error", ... (static) */
    const char *param;    /* offending field or NULL (static, or param_text) */
    const char *code;     /* machine-readable code or NULL (static) */
    char param_text[128]; /* the param kvt_api_error_item and the type check make ("messages[2].content") */
} kvt_api_error;

/* Fills e and returns KVT_EARG (so callers can `return kvt_api_errorf(...)`). */
int kvt_api_errorf(kvt_api_error *e, int status, const char *type, const char *param, const char *code, const char *fmt,
                   ...) __attribute__((format(printf, 6, 7)));
/* Fills e with a 400 invalid_request_error about a field of an array's element, whose param
 * names it with its place as OpenAI does: array "messages", i 2, field ".content" (or "" for
 * the element itself) give "messages[2].content". The param is kept in e->param_text, so an
 * error filled so is not copied by value. Returns KVT_EARG. */
int kvt_api_error_item(kvt_api_error *e, const char *array, size_t i, const char *field, const char *code,
                       const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* e as OpenAI's error body (type "invalid_request_error" when e has none; the
 * message made valid UTF-8), a malloc'd NUL-terminated string the caller frees. */
char *kvt_api_error_json(const kvt_api_error *e);

#endif
