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

/* llama.cpp's "samplers" of root (an array of sampler names or a string of
 * their letters, as llama-server takes it) into r's has_samplers and
 * sampler_steps. Returns 0, or KVT_EARG with *err filled
 * (400, param "samplers") for another type, an unknown name or letter, more
 * than KVT_SAMPLER_MAX_STEPS, or infill (which kvtier lacks and which has no
 * off value). Absent or null: has_samplers 0. */
int kvt_api_parse_samplers(const struct cJSON *root, kvt_api_request *r, kvt_api_error *err);
/* llama.cpp's dry_sequence_breakers: a non-empty array of non-empty strings (at most
 * KVT_API_MAX_DRY_BREAKERS, each at most KVT_API_MAX_DRY_BREAKER bytes) into r's
 * dry_breakers; absent or null: none given. 0, or -1 with *err naming the field. */
#define KVT_API_MAX_DRY_BREAKERS 64
#define KVT_API_MAX_DRY_BREAKER 64
int kvt_api_parse_dry_breakers(const struct cJSON *root, kvt_api_request *r, kvt_api_error *err);

/* The command line's form of the same order (--samplers of run and serve):
 * names separated by ';' (llama.cpp's --samplers) or ',', or a string of
 * letters (llama.cpp's --sampling-seq); a text with no separator that is not
 * one name is read as letters, and "" is the empty order. The same results
 * and checks as kvt_api_parse_samplers, the messages naming `what` (the
 * flag); an empty name (";;", a trailing ';') is refused too. */
int kvt_api_parse_samplers_text(const char *text, const char *what, kvt_api_request *r, kvt_api_error *err);

/* Returns 0, or KVT_EARG with *err filled (400 "unsupported_parameter",
 * param naming it) for the first audited field of root (the request's JSON
 * object) present and not neutral. */
int kvt_api_audit_fields(const struct cJSON *root, kvt_api_error *err);

/* The audited field named key[0..len) (its static name), or NULL: these are
 * fields kvtier knows (api_body.c's known-field test counts them). */
const char *kvt_api_audit_name(const char *key, size_t len);

#endif
