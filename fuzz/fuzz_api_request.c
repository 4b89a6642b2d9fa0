// SPDX-License-Identifier: MIT
/* Fuzz driver: a body read as the server reads it, the strict check
 * (api_body.h) and then the OpenAI request-body parser, must be rejected with
 * a 400-style error or accepted as a valid request, never crash; accepted
 * requests round-trip through the response builders; the UTF-8 sanitizer
 * always yields valid UTF-8 without NULs. The first byte picks the endpoint. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api_body.h"
#include "api_openai.h"
#include "api_response.h"
#include "api_utf8.h"

#define FUZZ_VOCAB 1000
#define FUZZ_MAX_TOKENS 4096
#define FUZZ_CTX 8192

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts (a finding) if s[0..n) is not valid UTF-8 or holds a NUL. */
static void assert_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!c || !len || i + len > n) abort();
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) abort();
        i += len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    kvt_api_kind kind = data[0] & 1 ? KVT_API_CHAT : KVT_API_COMPLETION;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    kvt_api_request r;
    kvt_api_error err;
    /* as the server reads a body: the strict check every POST body gets (api_body.h), then the parser */
    int rc = kvt_api_check_body(kind == KVT_API_CHAT ? KVT_BODY_CHAT : KVT_BODY_COMPLETION, body, len, 0, &err);
    if (!rc) rc = kvt_api_parse(kind, body, len, FUZZ_VOCAB, FUZZ_CTX, FUZZ_MAX_TOKENS, &r, &err);
    if (rc == 0) {
        if (r.max_tokens < 0 || r.max_tokens > FUZZ_MAX_TOKENS) abort();
        if (r.n_prompt_ids >= FUZZ_CTX) abort();
        for (size_t i = 0; i < r.n_prompt_ids; i++)
            if (r.prompt_ids[i] < 0 || r.prompt_ids[i] >= FUZZ_VOCAB) abort();
        kvt_api_request_free(&r);
    } else {
        if (err.status < 400 || err.status > 499) abort();
        char *j = kvt_api_error_json(&err);
        free(j);
    }
    size_t n;
    char *clean = kvt_utf8_sanitize(body, len, &n);
    assert_utf8((const unsigned char *)clean, n);
    kvt_api_head h = {.kind = kind, .id = "cmpl-fuzz", .created = 0, .model = "m"};
    kvt_api_usage u = {.prompt_tokens = (int32_t)len, .completion_tokens = (int32_t)n};
    char *resp = kvt_api_response_json(&h, clean, "stop", &u, NULL);
    free(resp);
    free(clean);
    return 0;
}
