// SPDX-License-Identifier: MIT
/* Fuzz driver: the JSON Schema compiler and the JSON matcher. The input's
 * first line is a schema (empty: json_object), the rest is text fed byte by
 * byte. The compiler must accept or refuse any schema without crashing; the
 * matcher must never accept a byte that leaves no completion (min_bytes stays
 * finite and non-negative), and a document it calls done must parse as JSON. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json_grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nl = memchr(data, '\n', size);
    size_t head = nl ? (size_t)(nl - data) : size;
    cJSON *sc = head ? cJSON_ParseWithLength((const char *)data, head) : NULL;
    if (head && !sc) return 0;
    char err[256];
    kvt_jg_schema *s = NULL;
    if (kvt_jg_schema_compile(sc, &s, err, sizeof err)) {
        if (s || !err[0]) abort(); /* a refusal says why and leaves nothing */
        cJSON_Delete(sc);
        return 0;
    }
    kvt_jg *g = kvt_jg_new(s, NULL);
    const char *text = nl ? (const char *)nl + 1 : "";
    size_t n = nl ? size - head - 1 : 0, fed = 0;
    while (fed < n && kvt_jg_feed(g, text + fed, 1) == 0) {
        fed++;
        int32_t need = kvt_jg_min_bytes(g);
        if (need < 0 || need > (1 << 30)) abort();
        if (kvt_jg_done(g)) break;
    }
    if (kvt_jg_done(g)) {
        cJSON *doc = cJSON_ParseWithLength(text, fed);
        if (!doc) abort();
        cJSON_Delete(doc);
    }
    kvt_jg_free(g);
    kvt_jg_schema_free(s);
    cJSON_Delete(sc);
    return 0;
}
