// SPDX-License-Identifier: MIT
/* The field audit of OpenAI request bodies (private to src/server/): every
 * field OpenAI's and llama.cpp's clients send that kvtier does not read
 * elsewhere is either one that never changes the output (accepted and
 * ignored) or one kvtier does not support yet, accepted only at its neutral
 * value (null, absent, or the value that changes nothing). The table is in
 * api_audit.c; docs/api.md "Request fields" lists the same. */
#ifndef KVT_API_AUDIT_H
#define KVT_API_AUDIT_H

#include "api_openai.h"

/* Returns 0, or KVT_EARG with *err filled (400 "unsupported_parameter",
 * param naming it) for the first audited field of root present and not
 * neutral. root is the request's JSON object. */
int kvt_api_audit_fields(const struct cJSON *root, kvt_api_error *err);

/* The audited field named key[0..len) (its static name), or NULL: these are
 * fields kvtier knows (api_body.c's known-field test counts them). */
const char *kvt_api_audit_name(const char *key, size_t len);

#endif
