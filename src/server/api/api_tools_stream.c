// SPDX-License-Identifier: MIT
/* Tool calls read while a reply is generated (api_tools_stream.h). */
#include "api_tools_stream.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static size_t skip_ws(const char *t, size_t i, size_t len) {
    while (i < len && is_ws(t[i])) i++;
    return i;
}

/* Whether text[*i..len) begins with s (*i then moved past it). */
static int take(const char *t, size_t *i, size_t len, const char *s) {
    size_t n = strlen(s);
    if (len - *i < n || memcmp(t + *i, s, n)) return 0;
    *i += n;
    return 1;
}

/* The bytes of the JSON object at text[i..len) so far (*done 1 once it closed), strings and escapes
 * followed so that braces inside them do not count. */
static size_t object_len(const char *t, size_t i, size_t len, int *done) {
    int depth = 0, in_str = 0;
    *done = 0;
    for (size_t j = i; j < len; j++) {
        char c = t[j];
        if (in_str) {
            if (c == '\\') j++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if ((c == '}' || c == ']') && --depth == 0) {
            *done = 1;
            return j + 1 - i;
        }
    }
    return len > i ? len - i : 0;
}

/* One call at text[*i..len): {"name": "N", "KEY": {... into *p. 1 when its name is whole and its
 * arguments have begun (*i then past what was read: the arguments so far), 0 otherwise. */
static int one_call(const char *t, size_t *i, size_t len, const char *key, kvt_api_call_part *p) {
    char mid[32];
    snprintf(mid, sizeof mid, "\", \"%s\": ", key);
    size_t j = skip_ws(t, *i, len);
    if (!take(t, &j, len, "{\"name\": \"")) return 0;
    p->name_at = j;
    while (j < len && t[j] != '"' && t[j] != '\\') j++;
    p->name_len = j - p->name_at;
    if (!p->name_len || !take(t, &j, len, mid)) return 0;
    j = skip_ws(t, j, len);
    if (j >= len || t[j] != '{') return 0;
    p->args_at = j;
    p->args_len = object_len(t, j, len, &p->args_done);
    *i = j + p->args_len;
    return 1;
}

size_t kvt_api_calls_partial(kvt_chat_family f, const char *text, size_t len, kvt_api_call_part *parts, size_t max,
                             size_t *first) {
    size_t n = 0, i = 0;
    *first = len;
    if (f == KVT_CHAT_LLAMA3) { /* one call, the whole reply */
        i = skip_ws(text, 0, len);
        *first = i;
        return max && one_call(text, &i, len, "parameters", &parts[0]) ? 1 : 0;
    }
    if (f == KVT_CHAT_MISTRAL) { /* [TOOL_CALLS][{call}, {call}] */
        const char *open = memmem(text, len, "[TOOL_CALLS]", strlen("[TOOL_CALLS]"));
        if (!open) return 0;
        *first = (size_t)(open - text);
        i = skip_ws(text, *first + strlen("[TOOL_CALLS]"), len);
        if (!take(text, &i, len, "[")) return 0;
        while (n < max && one_call(text, &i, len, "arguments", &parts[n])) {
            if (!parts[n++].args_done) break;
            i = skip_ws(text, i, len);
            if (!take(text, &i, len, "}")) break;
            i = skip_ws(text, i, len);
            if (!take(text, &i, len, ",")) break;
        }
        return n;
    }
    /* ChatML and the generic style: <tool_call>{call}</tool_call>, one after another */
    static const char open[] = "<tool_call>";
    const char *p = memmem(text, len, open, strlen(open));
    if (p) *first = (size_t)(p - text);
    while (p && n < max) {
        i = (size_t)(p - text) + strlen(open);
        if (!one_call(text, &i, len, "arguments", &parts[n])) break;
        if (!parts[n++].args_done) break;
        p = memmem(text + i, len - i, open, strlen(open));
    }
    return n;
}

void kvt_api_call_id(const char *response_id, size_t i, char *out, size_t cap) {
    const char *dash = strrchr(response_id, '-');
    snprintf(out, cap, "call_%s_%zu", dash ? dash + 1 : response_id, i);
}

char *kvt_api_call_delta_json(const kvt_api_head *h, size_t index, const char *id, const char *name, const char *args) {
    cJSON *o = kvt_api_head_obj(h, 1);
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", h->index);
    cJSON *call = cJSON_CreateObject();
    cJSON_AddNumberToObject(call, "index", (double)index);
    if (id) {
        cJSON_AddStringToObject(call, "id", id);
        cJSON_AddStringToObject(call, "type", "function");
    }
    cJSON *fn = cJSON_AddObjectToObject(call, "function");
    if (id) cJSON_AddStringToObject(fn, "name", name);
    cJSON_AddStringToObject(fn, "arguments", id ? "" : args);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(cJSON_AddObjectToObject(ch, "delta"), "tool_calls"), call);
    cJSON_AddNullToObject(ch, "logprobs");
    cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), ch);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
