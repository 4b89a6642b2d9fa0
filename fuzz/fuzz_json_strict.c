// SPDX-License-Identifier: MIT
/* Fuzz driver: the strict JSON check (json_strict.h) and the 400 it becomes
 * (api_body.h). The first byte picks the body kind (and --strict); the rest
 * is the body. Any input is accepted or refused without crashing; a refusal
 * is a 400 whose message is printable ASCII. An accepted body must mean the
 * same to every parser: cJSON parses all of it, no object holds a key twice,
 * and every string and key is valid UTF-8 without NUL (checked here by
 * decoding each character, independently of the checker's own tables). */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api_body.h"
#include "json_strict.h"

#define DUP_CHECK_MAX 256 /* objects with more members are not compared pairwise */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts unless s is valid UTF-8: shortest forms, no surrogates, nothing above U+10FFFF. */
static void assert_strict_utf8(const unsigned char *s) {
    while (*s) {
        unsigned c = *s, len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len) abort();
        uint32_t cp = len == 1 ? c : c & (0x7F >> len);
        for (unsigned k = 1; k < len; k++) {
            if ((s[k] & 0xC0) != 0x80) abort();
            cp = cp << 6 | (s[k] & 0x3F);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[len] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) abort();
        s += len;
    }
}

static void assert_clean(const cJSON *v) {
    for (; v; v = v->next) {
        if (v->string) assert_strict_utf8((const unsigned char *)v->string);
        if (cJSON_IsString(v)) assert_strict_utf8((const unsigned char *)v->valuestring);
        if (cJSON_IsObject(v) && cJSON_GetArraySize(v) <= DUP_CHECK_MAX)
            for (const cJSON *a = v->child; a; a = a->next)
                for (const cJSON *b = a->next; b; b = b->next)
                    if (!strcmp(a->string, b->string)) abort();
        assert_clean(v->child);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    kvt_api_body kind = (kvt_api_body)((data[0] & 0x7F) % (KVT_BODY_NONE + 1));
    int strict = data[0] >> 7;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    kvt_api_error e;
    if (kvt_api_check_body(kind, body, len, strict, &e)) {
        if (e.status != 400 || !e.message[0]) abort();
        for (const char *m = e.message; *m; m++)
            if (*m < ' ' || *m > '~') abort();
        return 0;
    }
    kvt_json_report rep;
    if (kvt_json_check(body, len, NULL, &rep)) abort(); /* the rules only add refusals */
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!root) abort();
    while (end < body + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
    if (end != body + len) abort();
    assert_clean(root);
    cJSON_Delete(root);
    return 0;
}
