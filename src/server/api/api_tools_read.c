// SPDX-License-Identifier: MIT
/* Tool calls read back out of generated text, whole or cut by the token
 * budget (api_tools.h), in the family's style (api_tools_impl.h). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_tools.h"
#include "api_tools_impl.h"
#include "common.h"

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
    return p;
}

static const char *trim_end(const char *p, const char *end) {
    while (end > p && (end[-1] == ' ' || end[-1] == '\n' || end[-1] == '\t' || end[-1] == '\r')) end--;
    return end;
}

/* One call's JSON in body[0..end): {"name": N, KEY: {...}} (KEY "arguments",
 * or "parameters" for Llama 3). The arguments are kept as the exact text
 * the model wrote when it is written in kvtier's own form (so the call
 * renders back to the same text), else as compact JSON. */
static int parse_one(const char *body, const char *end, kvt_api_call_style st, kvt_api_call *c) {
    body = skip_ws(body, end);
    end = trim_end(body, end);
    const char *pre = strchr(st.pre, '{'); /* the JSON part of the style's opening */
    size_t lp = strlen(pre), lm = strlen(st.mid);
    if ((size_t)(end - body) > lp && !memcmp(body, pre, lp)) {
        const char *name = body + lp, *q = name;
        while (q < end && *q != '"') q++;
        if (q < end && (size_t)(end - q) > lm + 1 && !memcmp(q, st.mid, lm) && end[-1] == '}') {
            cJSON *args = cJSON_ParseWithLength(q + lm, (size_t)(end - 1 - (q + lm)));
            int ok = cJSON_IsObject(args);
            cJSON_Delete(args);
            if (ok) {
                c->name = kvt_xstrndup(name, (size_t)(q - name));
                c->arguments = kvt_xstrndup(q + lm, (size_t)(end - 1 - (q + lm)));
                return 0;
            }
        }
    }
    cJSON *o = cJSON_ParseWithLength(body, (size_t)(end - body));
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, st.args_key);
    if (!args) args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    int rc = -1;
    if (cJSON_IsString(name) && kvt_api_tool_name_ok(name->valuestring) &&
        (cJSON_IsObject(args) || cJSON_IsString(args))) {
        c->name = kvt_xstrdup(name->valuestring);
        c->arguments = cJSON_IsString(args) ? kvt_xstrdup(args->valuestring) : cJSON_PrintUnformatted(args);
        rc = 0;
    }
    cJSON_Delete(o);
    return rc;
}

/* Mistral: [TOOL_CALLS] then a JSON array of calls, each parsed by parse_one
 * from its exact text. Returns the number of calls read into *c. */
static size_t parse_array(const char *text, const char *end, kvt_api_call_style st, kvt_api_call **c, size_t *cap,
                          const char **first, int *failed) {
    static const char open[] = "[TOOL_CALLS]";
    const char *p = strstr(text, open);
    size_t n = 0;
    *first = p;
    if (!p) return 0;
    p = skip_ws(p + strlen(open), end);
    *failed = p == end || *p != '[';
    for (p = p + 1; !*failed;) {
        p = skip_ws(p, end);
        const char *stop = NULL;
        cJSON *o = cJSON_ParseWithLengthOpts(p, (size_t)(end - p), &stop, 0);
        int ok = cJSON_IsObject(o);
        cJSON_Delete(o);
        if (!ok) {
            *failed = 1;
            break;
        }
        if (n == *cap) *c = kvt_xrealloc(*c, (*cap *= 2) * sizeof **c);
        memset(&(*c)[n], 0, sizeof(*c)[n]);
        *failed = parse_one(p, stop, st, &(*c)[n++]);
        p = skip_ws(stop, end);
        if (p < end && *p == ',') p++;
        else if (p < end && *p == ']') break;
        else *failed = 1;
    }
    return n;
}

/* Call i of a response's: "call_<the response id after its last '-'>_<i>" (malloc'd). */
static char *call_id(const char *response_id, size_t i) {
    const char *dash = strrchr(response_id, '-');
    char id[96];
    snprintf(id, sizeof id, "call_%s_%zu", dash ? dash + 1 : response_id, i);
    return kvt_xstrdup(id);
}

size_t kvt_api_parse_calls(kvt_chat_family f, const char *text, int parallel, const char *response_id,
                           kvt_api_call **calls, char **content) {
    kvt_api_call_style st = kvt_api_call_style_of(f);
    const char *end = text + strlen(text);
    size_t n = 0, cap = 4;
    kvt_api_call *c = kvt_xcalloc(cap, sizeof *c);
    const char *first = NULL;
    int failed = 0;
    if (f == KVT_CHAT_LLAMA3) {
        const char *p = skip_ws(text, end);
        first = p;
        failed = p == end || *p != '{' || parse_one(p, end, st, &c[n++]);
    } else if (f == KVT_CHAT_MISTRAL) {
        n = parse_array(text, end, st, &c, &cap, &first, &failed);
    } else {
        static const char open[] = "<tool_call>", close[] = "</tool_call>";
        const char *p = strstr(text, open);
        first = p;
        while (p && !failed) {
            const char *body = p + strlen(open), *stop = strstr(body, close);
            if (n == cap) c = kvt_xrealloc(c, (cap *= 2) * sizeof *c);
            memset(&c[n], 0, sizeof c[n]);
            failed = parse_one(body, stop ? stop : end, st, &c[n++]);
            p = stop ? skip_ws(stop + strlen(close), end) : end;
            p = strncmp(p, open, strlen(open)) ? NULL : p;
        }
    }
    if (!first || failed) {
        kvt_api_calls_free(c, n);
        *calls = NULL;
        *content = NULL;
        return 0;
    }
    if (!parallel) {
        for (size_t i = 1; i < n; i++) {
            free(c[i].name);
            free(c[i].arguments);
            free(c[i].id);
        }
        n = 1;
    }
    for (size_t i = 0; i < n; i++) c[i].id = call_id(response_id, i);
    *content = kvt_xstrndup(text, (size_t)(trim_end(text, first) - text));
    *calls = c;
    return n;
}

/* The arguments text of a cut call, args[0..): up to the end of its object where that closed (the
 * markup after it is not arguments), else all of it, as far as it got. malloc'd. */
static char *cut_args(const char *args) {
    int depth = 0, in_str = 0;
    for (const char *p = args; *p; p++) {
        if (in_str) {
            if (*p == '\\' && p[1]) p++;
            else if (*p == '"') in_str = 0;
        } else if (*p == '"') {
            in_str = 1;
        } else if (*p == '{' || *p == '[') {
            depth++;
        } else if ((*p == '}' || *p == ']') && --depth <= 0) {
            return kvt_xstrndup(args, (size_t)(p + 1 - args));
        }
    }
    return kvt_xstrdup(args);
}

/* The name of the call whose JSON begins at p (`{"name": "N", KEY: `), malloc'd, with *args where its
 * arguments begin; NULL where the cut came before that (or the name is not a tool name). */
static char *cut_name(const char *p, kvt_api_call_style st, const char **args) {
    const char *pre = strchr(st.pre, '{');
    size_t lp = strlen(pre), lm = strlen(st.mid);
    if (strncmp(p, pre, lp)) return NULL;
    const char *name = p + lp, *q = strchr(name, '"');
    if (!q || strncmp(q, st.mid, lm)) return NULL;
    char *nm = kvt_xstrndup(name, (size_t)(q - name));
    if (!kvt_api_tool_name_ok(nm)) {
        free(nm);
        return NULL;
    }
    *args = q + lm;
    return nm;
}

/* The answer of a cut text: c[0..n) (complete calls), and the cut call named nm with its arguments
 * so far (nm NULL: none). parallel 0 keeps the first call, and where that one is complete the cut
 * lies past it: *complete is then 1 and the calls are a whole answer. */
static size_t cut_answer(kvt_api_call *c, size_t n, char *nm, const char *args, int parallel, const char *response_id,
                         kvt_api_call **calls, int *complete) {
    if (n && !parallel) { /* c holds the first call alone */
        free(nm);
        *complete = 1;
        *calls = c;
        return 1;
    }
    if (nm) {
        c = kvt_xrealloc(c, (n + 1) * sizeof *c);
        c[n] = (kvt_api_call){.id = call_id(response_id, n), .name = nm, .arguments = cut_args(args)};
        n++;
    }
    if (!n) {
        free(c);
        c = NULL;
    }
    *calls = c;
    return n;
}

/* Mistral: [TOOL_CALLS][{call}, ..., {cut call: the calls before the cut one, each whole object
 * parsed as kvt_api_parse_calls does, and the cut one from its name on. */
static size_t cut_array(const char *text, int parallel, const char *response_id, kvt_api_call **calls, char **content,
                        int *complete) {
    static const char open[] = "[TOOL_CALLS]";
    const kvt_api_call_style st = kvt_api_call_style_of(KVT_CHAT_MISTRAL);
    const char *end = text + strlen(text), *at = strstr(text, open);
    if (!at) return 0;
    const char *p = skip_ws(at + strlen(open), end);
    if (p < end && *p != '[') return 0; /* not the array: the text is the content */
    size_t n = 0, cap = 4;
    kvt_api_call *c = kvt_xcalloc(cap, sizeof *c);
    const char *cut = NULL; /* where the object the budget cut begins */
    for (p = p < end ? p + 1 : end;;) {
        p = skip_ws(p, end);
        if (p == end) break; /* cut between two calls */
        const char *stop = NULL;
        cJSON *o = cJSON_ParseWithLengthOpts(p, (size_t)(end - p), &stop, 0);
        int whole = cJSON_IsObject(o);
        cJSON_Delete(o);
        if (!whole) {
            cut = p;
            break;
        }
        if (n == cap) c = kvt_xrealloc(c, (cap *= 2) * sizeof *c);
        memset(&c[n], 0, sizeof c[n]);
        int bad = parse_one(p, stop, st, &c[n++]);
        p = skip_ws(stop, end);
        if (!bad && p < end && *p == ',') p++;
        else if (bad || p < end) { /* a call kvtier cannot read, or the array went on otherwise: text */
            kvt_api_calls_free(c, n);
            return 0;
        }
    }
    const char *args = NULL;
    char *nm = cut ? cut_name(cut, st, &args) : NULL;
    for (size_t i = 0; i < n; i++) c[i].id = call_id(response_id, i);
    for (; !parallel && n > 1; n--) { /* the first call is the answer */
        free(c[n - 1].id);
        free(c[n - 1].name);
        free(c[n - 1].arguments);
    }
    *content = kvt_xstrndup(text, (size_t)(trim_end(text, at) - text));
    return cut_answer(c, n, nm, args, parallel, response_id, calls, complete);
}

size_t kvt_api_parse_cut_calls(kvt_chat_family f, const char *text, int parallel, const char *response_id,
                               kvt_api_call **calls, char **content, int *complete) {
    *calls = NULL;
    *content = NULL;
    *complete = 0;
    if (f == KVT_CHAT_MISTRAL) return cut_array(text, parallel, response_id, calls, content, complete);
    const kvt_api_call_style st = kvt_api_call_style_of(f);
    const char *end = text + strlen(text), *args = NULL;
    if (f == KVT_CHAT_LLAMA3) { /* one call, the whole reply */
        const char *p = skip_ws(text, end);
        char *nm = cut_name(p, st, &args);
        if (!nm) return 0;
        *content = kvt_xstrdup("");
        return cut_answer(NULL, 0, nm, args, parallel, response_id, calls, complete);
    }
    /* <tool_call>...</tool_call>, one after another: the last opening not closed is the cut call */
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    const char *last = NULL;
    for (const char *p = strstr(text, open); p; p = strstr(p + 1, open)) last = p;
    if (!last || strstr(last, close)) return 0; /* no call was cut: the text is the content */
    char *before = kvt_xstrndup(text, (size_t)(last - text));
    kvt_api_call *c = NULL;
    size_t n = 0;
    if (strstr(before, open)) { /* the calls before the cut one, complete */
        n = kvt_api_parse_calls(f, before, parallel, response_id, &c, content);
        if (!n) { /* unreadable before the cut: the text is the content */
            free(before);
            return 0;
        }
    } else {
        *content = kvt_xstrndup(before, (size_t)(trim_end(before, before + strlen(before)) - before));
    }
    free(before);
    const char *body = skip_ws(last + strlen(open), end);
    char *nm = cut_name(body, st, &args);
    return cut_answer(c, n, nm, args, parallel, response_id, calls, complete);
}

void kvt_api_calls_free(kvt_api_call *c, size_t n) {
    if (!c) return;
    for (size_t i = 0; i < n; i++) {
        free(c[i].id);
        free(c[i].name);
        free(c[i].arguments);
    }
    free(c);
}
