// SPDX-License-Identifier: MIT
/* Tools and structured output on the OpenAI surface (see api_tools.h). */
#include "api_tools.h"
#include "api_tools_impl.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static const char *const INVALID = "invalid_request_error";

/* ---- a growing string ------------------------------------------------------------ */

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = KVT_MAX(b->cap * 2, b->n + n + 64);
        b->p = kvt_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static char *sb_take(sbuf *b) { return b->p ? b->p : kvt_xstrdup(""); }

/* ---- JSON as chat templates print it -------------------------------------------------------- */

/* Templates print JSON with Python's json.dumps (", " and ": ", or "," and
 * newlines with an indent; non-ASCII kept as is), keys in the given order. */
static void dump_string(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        switch (*p) {
        case '"': sb_str(b, "\\\""); break;
        case '\\': sb_str(b, "\\\\"); break;
        case '\n': sb_str(b, "\\n"); break;
        case '\r': sb_str(b, "\\r"); break;
        case '\t': sb_str(b, "\\t"); break;
        case '\b': sb_str(b, "\\b"); break;
        case '\f': sb_str(b, "\\f"); break;
        default:
            if (*p < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", *p);
                sb_str(b, esc);
            } else {
                sb_put(b, (const char *)p, 1);
            }
        }
    }
    sb_put(b, "\"", 1);
}

static void dump_indent(sbuf *b, int indent, int level) {
    sb_put(b, "\n", 1);
    for (int i = 0; i < indent * level; i++) sb_put(b, " ", 1);
}

static void dump(sbuf *b, const cJSON *v, int indent, int level) {
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        int obj = cJSON_IsObject(v);
        sb_str(b, obj ? "{" : "[");
        for (const cJSON *c = v->child; c; c = c->next) {
            if (indent) dump_indent(b, indent, level + 1);
            if (obj) {
                dump_string(b, c->string);
                sb_str(b, ": ");
            }
            dump(b, c, indent, level + 1);
            if (c->next) sb_str(b, indent ? "," : ", ");
        }
        if (indent && v->child) dump_indent(b, indent, level);
        sb_str(b, obj ? "}" : "]");
    } else if (cJSON_IsString(v)) {
        dump_string(b, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        cJSON *alone = cJSON_CreateNumber(v->valuedouble);
        char *t = cJSON_PrintUnformatted(alone);
        sb_str(b, t ? t : "0");
        cJSON_free(t);
        cJSON_Delete(alone);
    } else {
        sb_str(b, cJSON_IsTrue(v) ? "true" : cJSON_IsFalse(v) ? "false" : "null");
    }
}

/* ---- parsing ------------------------------------------------------------------------ */

int kvt_api_tool_name_ok(const char *s) {
    size_t n = strlen(s);
    if (!n || n > KVT_API_MAX_TOOL_NAME) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static const cJSON *tool_function(const cJSON *tool) { return cJSON_GetObjectItemCaseSensitive(tool, "function"); }

static const char *tool_name(const cJSON *tool) {
    return cJSON_GetObjectItemCaseSensitive(tool_function(tool), "name")->valuestring;
}

static int parse_tool_list(const cJSON *root, kvt_api_request *r, kvt_api_error *err) {
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (!tools || cJSON_IsNull(tools)) return 0;
    int n = cJSON_IsArray(tools) ? cJSON_GetArraySize(tools) : -1;
    if (n < 0 || n > KVT_API_MAX_TOOLS)
        return kvt_api_errorf(err, 400, INVALID, "tools", "invalid_type",
                              "'tools' must be an array of at most %d tools", KVT_API_MAX_TOOLS);
    int i = 0;
    for (const cJSON *t = tools->child; t; t = t->next, i++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type"), *fn = tool_function(t);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
        const cJSON *strict = cJSON_GetObjectItemCaseSensitive(fn, "strict");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsObject(fn))
            return kvt_api_errorf(err, 400, INVALID, "tools", "invalid_value",
                                  "tools[%d] must be {\"type\": \"function\", \"function\": {...}}", i);
        if (!cJSON_IsString(name) || !kvt_api_tool_name_ok(name->valuestring))
            return kvt_api_errorf(err, 400, INVALID, "tools", "invalid_value",
                                  "tools[%d].function.name must be 1 to %d of a-z, A-Z, 0-9, _ and -", i,
                                  KVT_API_MAX_TOOL_NAME);
        if ((params && !cJSON_IsNull(params) && !cJSON_IsObject(params)) ||
            (desc && !cJSON_IsNull(desc) && !cJSON_IsString(desc)))
            return kvt_api_errorf(err, 400, INVALID, "tools", "invalid_type",
                                  "tools[%d].function: 'parameters' must be an object and 'description' a string", i);
        if (strict && !cJSON_IsBool(strict) && !cJSON_IsNull(strict))
            return kvt_api_errorf(err, 400, INVALID, "tools", "invalid_type",
                                  "tools[%d].function.strict must be a boolean", i);
        for (const cJSON *u = tools->child; u != t; u = u->next)
            if (!strcmp(tool_name(u), name->valuestring))
                return kvt_api_errorf(err, 400, INVALID, "tools", "invalid_value", "two tools are named '%s'",
                                      name->valuestring);
    }
    if (n) r->tools = cJSON_Duplicate(tools, 1);
    return 0;
}

static int parse_choice(const cJSON *root, kvt_api_request *r, kvt_api_error *err) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    r->tool_choice = KVT_TOOL_AUTO;
    if (!c || cJSON_IsNull(c)) return 0;
    if (cJSON_IsString(c)) {
        const char *v = c->valuestring;
        if (!strcmp(v, "none")) r->tool_choice = KVT_TOOL_NONE;
        else if (!strcmp(v, "required")) r->tool_choice = KVT_TOOL_REQUIRED;
        else if (strcmp(v, "auto"))
            return kvt_api_errorf(err, 400, INVALID, "tool_choice", "invalid_value",
                                  "'tool_choice' must be none, auto, required or {\"type\": \"function\", "
                                  "\"function\": {\"name\": ...}}");
    } else {
        /* a type other than OpenAI's "function" (allowed_tools, custom) asks for what kvtier does not do */
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
        if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "function")))
            return kvt_api_errorf(err, 400, INVALID, "tool_choice", "invalid_value",
                                  "'tool_choice.type' must be \"function\" (kvtier has no other tool types); or send "
                                  "'tool_choice' none, auto or required");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(name))
            return kvt_api_errorf(err, 400, INVALID, "tool_choice", "invalid_value",
                                  "'tool_choice' must be none, auto, required or {\"type\": \"function\", "
                                  "\"function\": {\"name\": ...}}");
        int found = 0;
        for (const cJSON *t = r->tools ? r->tools->child : NULL; t; t = t->next)
            found |= !strcmp(tool_name(t), name->valuestring);
        if (!found)
            return kvt_api_errorf(err, 400, INVALID, "tool_choice", "invalid_value",
                                  "'tool_choice' names '%.64s', which is not in 'tools'", name->valuestring);
        r->tool_choice = KVT_TOOL_NAMED;
        r->tool_name = kvt_xstrdup(name->valuestring);
    }
    if (!r->tools && r->tool_choice != KVT_TOOL_NONE && r->tool_choice != KVT_TOOL_AUTO)
        return kvt_api_errorf(err, 400, INVALID, "tool_choice", "invalid_value",
                              "'tool_choice' asks for a tool call, but there are no 'tools'");
    return 0;
}

/* llama.cpp's "grammar" (GBNF; "" or null: none). It is compiled with the
 * rest of the output's constraints (kvt_api_grammar); it cannot be combined
 * with another of them, as each would decide the output alone. */
static int parse_gbnf(const cJSON *root, kvt_api_request *r, kvt_api_error *err) {
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "grammar");
    if (!g || cJSON_IsNull(g) || (cJSON_IsString(g) && !g->valuestring[0])) return 0;
    if (!cJSON_IsString(g))
        return kvt_api_errorf(err, 400, INVALID, "grammar", "invalid_type", "'grammar' must be a string of GBNF");
    if (r->format != KVT_FORMAT_TEXT)
        return kvt_api_errorf(err, 400, INVALID, "grammar", "invalid_value",
                              "give either 'grammar' or a JSON 'response_format' / 'json_schema', not both");
    if (r->tools)
        return kvt_api_errorf(err, 400, INVALID, "grammar", "invalid_value",
                              "give either 'grammar' or 'tools', not both: a grammar leaves no room for tool calls");
    r->gbnf = kvt_xstrdup(g->valuestring);
    return 0;
}

static int parse_format(const cJSON *root, kvt_api_request *r, kvt_api_error *err) {
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(root, "json_schema"); /* llama.cpp's */
    if (rf && !cJSON_IsNull(rf)) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        const cJSON *osc = cJSON_GetObjectItemCaseSensitive(rf, "schema"); /* llama-server's json_object schema */
        if (!strcmp(t, "json_object") && osc && !cJSON_IsNull(osc) && !(cJSON_IsObject(osc) && !osc->child)) {
            if (!cJSON_IsObject(osc))
                return kvt_api_errorf(err, 400, INVALID, "response_format.schema", "invalid_type",
                                      "'response_format.schema' must be a JSON Schema object");
            r->format = KVT_FORMAT_JSON_SCHEMA; /* the reply follows the schema, as llama-server's does */
            r->schema = cJSON_Duplicate(osc, 1);
        } else if (!strcmp(t, "json_object")) {
            r->format = KVT_FORMAT_JSON_OBJECT;
        } else if (!strcmp(t, "json_schema")) {
            const cJSON *spec = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
            const cJSON *sc = cJSON_GetObjectItemCaseSensitive(spec, "schema");
            if (!cJSON_IsObject(sc))
                return kvt_api_errorf(err, 400, INVALID, "response_format", "invalid_value",
                                      "'response_format.json_schema.schema' must be a JSON Schema object");
            r->format = KVT_FORMAT_JSON_SCHEMA;
            r->schema = cJSON_Duplicate(sc, 1);
        } else if (strcmp(t, "text")) {
            return kvt_api_errorf(err, 400, INVALID, "response_format", "invalid_value",
                                  "'response_format.type' must be text, json_object or json_schema");
        }
    }
    if (js && !cJSON_IsNull(js) && !(cJSON_IsObject(js) && !js->child)) {
        if (!cJSON_IsObject(js))
            return kvt_api_errorf(err, 400, INVALID, "json_schema", "invalid_type", "'json_schema' must be an object");
        if (r->format != KVT_FORMAT_TEXT)
            return kvt_api_errorf(err, 400, INVALID, "json_schema", "invalid_value",
                                  "give either 'json_schema' or a JSON 'response_format', not both");
        r->format = KVT_FORMAT_JSON_SCHEMA;
        r->schema = cJSON_Duplicate(js, 1);
    }
    return parse_gbnf(root, r, err);
}

int kvt_api_parse_tools(const cJSON *root, kvt_api_request *r, kvt_api_error *err) {
    r->parallel_tool_calls = 1;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "parallel_tool_calls");
    if (p && !cJSON_IsNull(p)) {
        if (!cJSON_IsBool(p))
            return kvt_api_errorf(err, 400, INVALID, "parallel_tool_calls", "invalid_type",
                                  "'parallel_tool_calls' must be a boolean");
        r->parallel_tool_calls = cJSON_IsTrue(p);
    }
    if (parse_tool_list(root, r, err) || parse_choice(root, r, err) || parse_format(root, r, err)) return -1;
    if (r->tools && r->kind != KVT_API_CHAT)
        return kvt_api_errorf(err, 400, INVALID, "tools", "unsupported_parameter", "'tools' needs /v1/chat/completions");
    return 0;
}

int kvt_api_parse_msg_tools(const cJSON *msg, size_t index, const char *role, kvt_api_msg_tools *out,
                            kvt_api_error *err) {
    memset(out, 0, sizeof *out);
    /* the reasoning of a reply split from its content (reasoning_format): it lets the server find the reply */
    const cJSON *rc = cJSON_GetObjectItemCaseSensitive(msg, "reasoning_content");
    if (!strcmp(role, "assistant") && rc && !cJSON_IsNull(rc)) {
        if (!cJSON_IsString(rc))
            return kvt_api_error_item(err, "messages", index, ".reasoning_content", "invalid_type",
                                      "messages[%zu].reasoning_content must be a string", index);
    }
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
    if (!strcmp(role, "assistant") && calls && !cJSON_IsNull(calls)) {
        if (!cJSON_IsArray(calls))
            return kvt_api_error_item(err, "messages", index, ".tool_calls", "invalid_type",
                                      "messages[%zu].tool_calls must be an array", index);
        for (const cJSON *c = calls->child; c; c = c->next) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
            const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
            if (!cJSON_IsString(name) || !kvt_api_tool_name_ok(name->valuestring) || (args && !cJSON_IsString(args)))
                return kvt_api_error_item(err, "messages", index, ".tool_calls", "invalid_value",
                                          "messages[%zu].tool_calls[] must be {\"id\", \"type\": \"function\", "
                                          "\"function\": {\"name\", \"arguments\": a string}}",
                                          index);
        }
        if (cJSON_GetArraySize(calls)) out->tool_calls = cJSON_Duplicate(calls, 1);
    }
    if (cJSON_IsString(rc) && !strcmp(role, "assistant")) out->reasoning = kvt_xstrdup(rc->valuestring);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(msg, "name"); /* its type is checked (api_types.c) */
    if (cJSON_IsString(name)) out->name = kvt_xstrdup(name->valuestring);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "tool_call_id");
    if (!strcmp(role, "tool") && cJSON_IsString(id)) out->tool_call_id = kvt_xstrdup(id->valuestring);
    return 0;
}

void kvt_api_tools_free(kvt_api_request *r) {
    for (size_t i = 0; r->msg_tools && i < r->n_msgs; i++) {
        cJSON_Delete(r->msg_tools[i].tool_calls);
        free(r->msg_tools[i].tool_call_id);
        free(r->msg_tools[i].reasoning);
        free(r->msg_tools[i].name);
    }
    free(r->msg_tools);
    cJSON_Delete(r->tools);
    cJSON_Delete(r->schema);
    free(r->gbnf);
    free(r->tool_name);
    r->msg_tools = NULL;
    r->tools = r->schema = NULL;
    r->tool_name = r->gbnf = NULL;
}

int kvt_api_tools_active(const kvt_api_request *a) { return a->tools && a->tool_choice != KVT_TOOL_NONE; }

/* ---- rendering ------------------------------------------------------------------------------ */

kvt_api_call_style kvt_api_call_style_of(kvt_chat_family f) {
    if (f == KVT_CHAT_MISTRAL)
        return (kvt_api_call_style){"[TOOL_CALLS][{\"name\": \"", "\", \"arguments\": ", "}]", "arguments"};
    if (f == KVT_CHAT_LLAMA3) return (kvt_api_call_style){"{\"name\": \"", "\", \"parameters\": ", "}", "parameters"};
    return (kvt_api_call_style){"<tool_call>\n{\"name\": \"", "\", \"arguments\": ", "}\n</tool_call>", "arguments"};
}

#define HERMES_TOOLS_HEAD \
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with " \
    "function signatures within <tools></tools> XML tags:\n<tools>"
#define HERMES_TOOLS_TAIL \
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within " \
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": " \
    "<args-json-object>}\n</tool_call>"
#define LLAMA3_TOOLS_HEAD \
    "Given the following functions, please respond with a JSON for a function call with its proper arguments " \
    "that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": " \
    "dictionary of argument name and its value}. Do not use variables.\n\n"
#define LLAMA3_INDENT 4

/* The tool definitions as the family's template shows them. */
static char *tools_text(const cJSON *tools, kvt_chat_family f) {
    sbuf b = {0};
    if (f == KVT_CHAT_MISTRAL) { /* the JSON array alone: chat.c adds the markers */
        sb_str(&b, "[");
        for (const cJSON *t = tools->child; t; t = t->next) {
            dump(&b, t, 0, 0);
            sb_str(&b, t->next ? ", " : "");
        }
        sb_str(&b, "]");
        return sb_take(&b);
    }
    if (f == KVT_CHAT_LLAMA3) {
        sb_str(&b, LLAMA3_TOOLS_HEAD);
        for (const cJSON *t = tools->child; t; t = t->next) {
            dump(&b, t, LLAMA3_INDENT, 0);
            sb_str(&b, "\n\n");
        }
        return sb_take(&b);
    }
    sb_str(&b, HERMES_TOOLS_HEAD);
    for (const cJSON *t = tools->child; t; t = t->next) {
        sb_str(&b, "\n");
        dump(&b, t, 0, 0);
    }
    sb_str(&b, HERMES_TOOLS_TAIL);
    return sb_take(&b);
}

/* ---- a turn of calls ----------------------------------------------------------------------- */

/* Appends call number `at` of a turn (last: the turn's last call) in family f's style. */
static void put_call(sbuf *b, kvt_chat_family f, const char *name, const char *args, int at, int last) {
    kvt_api_call_style st = kvt_api_call_style_of(f);
    int mistral = f == KVT_CHAT_MISTRAL; /* one [TOOL_CALLS][...] array for all the calls */
    sb_str(b, mistral && at ? strchr(st.pre, '{') : st.pre);
    sb_str(b, name);
    sb_str(b, st.mid);
    sb_str(b, args);
    sb_str(b, mistral && !last ? "}" : st.tail);
    if (!last) sb_str(b, mistral ? ", " : "\n");
}

static void put_content(sbuf *b, const char *content) {
    if (!*content) return;
    sb_str(b, content);
    sb_str(b, "\n");
}

char *kvt_api_calls_render(kvt_chat_family f, const char *content, const kvt_api_call *calls, size_t n) {
    sbuf b = {0};
    put_content(&b, content);
    for (size_t i = 0; i < n; i++) put_call(&b, f, calls[i].name, calls[i].arguments, i > 0, i + 1 == n);
    return sb_take(&b);
}

typedef struct {
    kvt_call_memo *memo;
    const void *salt;
    size_t salt_len;
} memo_ref;

/* An assistant turn with tool calls: the text of the reply this server generated for it, when the
 * client sent that reply back unchanged (kvt_call_memo_reply: its content whole, or, with reasoning
 * not NULL, split into that reasoning and content), and then *generated is 1; else its text, then
 * each call in the family's style, exactly as kvtier writes a call it generates (with the arguments
 * text kvtier generated, when the client sent the same JSON back). */
static char *calls_text(const char *content, const char *reasoning, const cJSON *calls, kvt_chat_family f,
                        const memo_ref *mr, int *generated) {
    char *text = kvt_call_memo_reply(mr->memo, mr->salt, mr->salt_len, content, reasoning, calls);
    *generated = text != NULL;
    if (text) return text;
    sbuf b = {0};
    put_content(&b, content);
    int at = 0;
    for (const cJSON *c = calls->child; c; c = c->next, at++) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        const char *sent = cJSON_IsString(args) && *args->valuestring ? args->valuestring : "{}";
        char *mine = kvt_call_memo_args(mr->memo, mr->salt, mr->salt_len, cJSON_IsString(id) ? id->valuestring : NULL,
                                        sent);
        put_call(&b, f, cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring, mine ? mine : sent, at, !c->next);
        free(mine);
    }
    return sb_take(&b);
}

/* The reasoning_content sent back with assistant message content, where it stands apart from it
 * (not empty, and the content holds no "</think>" of its own), else NULL. */
static const char *sent_reasoning(const char *content, const kvt_api_msg_tools *x) {
    return x->reasoning && *x->reasoning && !strstr(content, "</think>") ? x->reasoning : NULL;
}

char *kvt_api_calls_turn(const kvt_api_request *a, size_t i, kvt_chat_family f, kvt_call_memo *memo, const void *salt,
                         size_t salt_len) {
    memo_ref mr = {memo, salt, salt_len};
    const char *content = a->msgs[i].content ? a->msgs[i].content : "", *rs = sent_reasoning(content, &a->msg_tools[i]);
    int generated;
    char *t = calls_text(content, rs, a->msg_tools[i].tool_calls, f, &mr, &generated);
    if (generated && rs) { /* the template writes reasoning_content itself: the content is the text after it */
        const char *ans = t, *p = t;
        while ((p = strstr(p, "</think>"))) ans = p += strlen("</think>");
        ans += strspn(ans, " \t\r\n");
        memmove(t, ans, strlen(ans) + 1);
    }
    return t;
}

static char *keep(char ***arena, size_t *n, char *s) {
    *arena = kvt_xrealloc(*arena, (*n + 2) * sizeof **arena);
    (*arena)[(*n)++] = s;
    (*arena)[*n] = NULL;
    return s;
}

static char *concat(const char *a, const char *sep, const char *b) {
    size_t la = strlen(a), ls = strlen(sep), lb = strlen(b);
    char *s = kvt_xmalloc(la + ls + lb + 1);
    memcpy(s, a, la);
    memcpy(s + la, sep, ls);
    memcpy(s + la + ls, b, lb + 1);
    return s;
}

/* A reply's reasoning and answer as Qwen3 writes them in one text. */
static char *with_think(const char *reasoning, const char *answer) {
    char *r = concat("<think>\n", reasoning, "\n</think>\n\n"), *t = concat(r, "", answer);
    free(r);
    return t;
}

/* The built-in rendering's text of an assistant turn with tool calls. Qwen3 writes the turn's
 * reasoning_content before its text and calls, as its template does: a reply this server generated,
 * sent back unchanged with the reasoning it was split into, is its generated text, which holds both;
 * else the reasoning goes before the calls' text. The other families render no reasoning. */
static char *calls_turn(const char *content, const kvt_api_msg_tools *x, kvt_chat_family f, const memo_ref *mr) {
    const char *rs = f == KVT_CHAT_QWEN3 ? sent_reasoning(content, x) : NULL;
    int generated;
    char *t = calls_text(content, rs, x->tool_calls, f, mr, &generated);
    if (!rs || generated) return t;
    char *w = with_think(rs, t);
    free(t);
    return w;
}

kvt_chat_msg *kvt_api_messages(const kvt_api_request *a, kvt_chat_family f, kvt_call_memo *memo, const void *salt,
                               size_t salt_len, size_t *n_out, size_t *last_user, char ***arena) {
    memo_ref mr = {memo, salt, salt_len};
    size_t n = 0, kept = 0;
    *arena = NULL;
    *last_user = SIZE_MAX;
    kvt_chat_msg *out = kvt_xcalloc(a->n_msgs + 1, sizeof *out);
    char *tools = a->tools ? keep(arena, &kept, tools_text(a->tools, f)) : NULL;
    int llama3 = f == KVT_CHAT_LLAMA3, mistral = f == KVT_CHAT_MISTRAL, user_seen = 0;
    if (tools && mistral) { /* before the first user turn (see api_tools.h) */
        out[n].role = "tools";
        out[n++].content = tools;
        tools = NULL;
    }
    for (size_t u = 0; llama3 && tools && u < a->n_msgs; u++) user_seen |= !strcmp(a->msgs[u].role, "user");
    /* the tools go first: the system turn (or the first user turn for Llama 3, as its template does) */
    if (tools && (!llama3 || !user_seen)) {
        int has_system = a->n_msgs && !strcmp(a->msgs[0].role, "system");
        out[n].role = "system";
        out[n++].content = has_system ? keep(arena, &kept, concat(a->msgs[0].content, "\n\n", tools)) : tools;
        tools = NULL;
    }
    for (size_t i = 0; i < a->n_msgs; i++) {
        const kvt_chat_msg *m = &a->msgs[i];
        const kvt_api_msg_tools *x = &a->msg_tools[i];
        if (i == 0 && n && !mistral && !strcmp(m->role, "system")) continue; /* merged with the tools above */
        if (!strcmp(m->role, "tool") && mistral) {
            sbuf b = {0};
            sb_str(&b, "{\"content\": ");
            sb_str(&b, m->content);
            if (x->tool_call_id) {
                sb_str(&b, ", \"call_id\": ");
                dump_string(&b, x->tool_call_id);
            }
            sb_str(&b, "}");
            out[n].role = "tool";
            out[n++].content = keep(arena, &kept, sb_take(&b));
            continue;
        }
        if (!strcmp(m->role, "tool")) {
            if (llama3) {
                out[n].role = "ipython";
                out[n++].content = m->content;
                continue;
            }
            /* consecutive results share one user turn */
            sbuf b = {0};
            for (; i < a->n_msgs && !strcmp(a->msgs[i].role, "tool"); i++) {
                if (b.n) sb_str(&b, "\n");
                sb_str(&b, "<tool_response>\n");
                sb_str(&b, a->msgs[i].content);
                sb_str(&b, "\n</tool_response>");
            }
            i--;
            out[n].role = "user";
            out[n++].content = keep(arena, &kept, sb_take(&b));
            continue;
        }
        out[n].role = m->role;
        out[n].content = m->content;
        if (!strcmp(m->role, "assistant") && x->tool_calls)
            out[n].content = keep(arena, &kept, calls_turn(m->content, x, f, &mr));
        else if (!strcmp(m->role, "assistant") && x->reasoning && f == KVT_CHAT_QWEN3 && !strstr(m->content, "</think>"))
            /* as Qwen3's template reads reasoning_content: kept where the family keeps reasoning */
            out[n].content = keep(arena, &kept, with_think(x->reasoning, m->content));
        if (!strcmp(m->role, "user")) {
            *last_user = n;
            if (tools) {
                out[n].content = keep(arena, &kept, concat(tools, "", m->content));
                tools = NULL;
            }
        }
        n++;
    }
    *n_out = n;
    return out;
}

void kvt_api_messages_free(kvt_chat_msg *m, char **arena) {
    free(m);
    for (size_t i = 0; arena && arena[i]; i++) free(arena[i]);
    free(arena);
}

/* ---- the grammar ------------------------------------------------------------------------------ */

int kvt_api_grammar(const kvt_api_request *a, kvt_chat_family f, kvt_jg_schema **out, kvt_api_error *err) {
    *out = NULL;
    char msg[256];
    int forced = a->tools && (a->tool_choice == KVT_TOOL_REQUIRED || a->tool_choice == KVT_TOOL_NAMED);
    if (a->format != KVT_FORMAT_TEXT && kvt_api_tools_active(a))
        return kvt_api_errorf(err, 400, INVALID, "response_format", "unsupported_value",
                              "a JSON 'response_format' leaves no room for tool calls: send it with tool_choice "
                              "none, or without tools");
    if (forced) {
        kvt_api_call_style st = kvt_api_call_style_of(f);
        const char *heads[KVT_API_MAX_TOOLS] = {0}, *tails[KVT_API_MAX_TOOLS] = {0};
        const cJSON *schemas[KVT_API_MAX_TOOLS] = {0};
        char *owned[KVT_API_MAX_TOOLS] = {0};
        int n = 0;
        for (const cJSON *t = a->tools->child; t; t = t->next) {
            const char *name = tool_name(t);
            if (a->tool_choice == KVT_TOOL_NAMED && strcmp(name, a->tool_name)) continue;
            sbuf b = {0};
            sb_str(&b, st.pre);
            sb_str(&b, name);
            sb_str(&b, st.mid);
            owned[n] = sb_take(&b);
            heads[n] = owned[n];
            tails[n] = st.tail;
            const cJSON *p = cJSON_GetObjectItemCaseSensitive(tool_function(t), "parameters");
            schemas[n] = cJSON_IsObject(p) ? p : NULL;
            n++;
        }
        int rc = kvt_jg_schema_tagged(n, heads, schemas, tails, out, msg, sizeof msg);
        for (int i = 0; i < n; i++) free(owned[i]);
        if (rc)
            return kvt_api_errorf(err, 400, INVALID, "tools", "unsupported_schema",
                                  "a forced tool call follows the function's parameters, and kvtier cannot: %s", msg);
        return 0;
    }
    if (a->gbnf) {
        if (kvt_jg_schema_gbnf(a->gbnf, strlen(a->gbnf), out, msg, sizeof msg))
            return kvt_api_errorf(err, 400, INVALID, "grammar", "invalid_grammar", "invalid GBNF grammar: %s", msg);
        return 0;
    }
    if (a->format == KVT_FORMAT_TEXT) return 0;
    if (kvt_jg_schema_compile(a->format == KVT_FORMAT_JSON_SCHEMA ? a->schema : NULL, out, msg, sizeof msg))
        return kvt_api_errorf(err, 400, INVALID, "response_format", "unsupported_schema",
                              "kvtier cannot follow this JSON schema: %s", msg);
    return 0;
}

/* ---- the lazy grammar under tool_choice auto ---------------------------------------------------- */

/* The schema a tool's call's arguments follow under auto: its parameters where kvtier can compile
 * them, else (NULL) any JSON object; *bad is set where the tool is strict and they cannot be compiled. */
static const cJSON *auto_params(const cJSON *tool, char *msg, size_t cap, int *bad) {
    const cJSON *fn = tool_function(tool), *p = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    *bad = 0;
    if (!cJSON_IsObject(p)) return NULL;
    kvt_jg_schema *probe = NULL;
    int rc = kvt_jg_schema_compile(p, &probe, msg, cap);
    kvt_jg_schema_free(probe);
    if (!rc) return p;
    *bad = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(fn, "strict"));
    return NULL;
}

/* A tagged choice of the tools, each head pre + name + st.mid, each tail tail. */
static int tagged_calls(const kvt_api_request *a, const char *pre, kvt_api_call_style st, const char *tail,
                        const cJSON *const *schemas, kvt_jg_schema **out, char *msg, size_t cap) {
    const char *heads[KVT_API_MAX_TOOLS] = {0}, *tails[KVT_API_MAX_TOOLS] = {0};
    char *owned[KVT_API_MAX_TOOLS] = {0};
    int n = 0;
    for (const cJSON *t = a->tools->child; t && n < KVT_API_MAX_TOOLS; t = t->next, n++) {
        sbuf b = {0};
        sb_str(&b, pre);
        sb_str(&b, tool_name(t));
        sb_str(&b, st.mid);
        heads[n] = owned[n] = sb_take(&b);
        tails[n] = tail;
    }
    int rc = kvt_jg_schema_tagged(n, heads, schemas, tails, out, msg, cap);
    for (int i = 0; i < n; i++) free(owned[i]);
    return rc;
}

int kvt_api_lazy_grammar(const kvt_api_request *a, kvt_chat_family f, kvt_jg_lazy_spec **out, kvt_api_error *err) {
    *out = NULL;
    if (!a->tools || a->tool_choice != KVT_TOOL_AUTO) return 0;
    char msg[256];
    const cJSON *schemas[KVT_API_MAX_TOOLS] = {0};
    int n = 0, strict = 0;
    for (const cJSON *t = a->tools->child; t && n < KVT_API_MAX_TOOLS; t = t->next, n++) {
        int bad;
        schemas[n] = auto_params(t, msg, sizeof msg, &bad);
        strict |= cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tool_function(t), "strict"));
        if (bad)
            return kvt_api_errorf(err, 400, INVALID, "tools", "unsupported_schema",
                                  "tools[%d] ('%s') is strict, and kvtier cannot hold its arguments to its "
                                  "parameters: %s",
                                  n, tool_name(t), msg);
    }
    /* the trigger is the family's call opening; the documents are the rest of each call */
    kvt_api_call_style st = kvt_api_call_style_of(f);
    int mistral = f == KVT_CHAT_MISTRAL, llama3 = f == KVT_CHAT_LLAMA3;
    const char *trigger = mistral ? "[TOOL_CALLS]" : llama3 ? "{" : "<tool_call>";
    int more = a->parallel_tool_calls && !llama3; /* Llama 3's reply is one call */
    kvt_jg_lazy_spec *sp = kvt_xcalloc(1, sizeof *sp);
    sp->trigger = kvt_xstrdup(trigger);
    sp->anchored = llama3; /* its calls are read only where the reply is the call */
    sp->end = kvt_xstrdup(mistral && more ? "]" : "");
    int rc = tagged_calls(a, st.pre + strlen(trigger), st, mistral && more ? "}" : st.tail, schemas, &sp->first, msg,
                          sizeof msg);
    if (!rc && more) { /* the next call: ChatML's on a line of its own, Mistral's in the same array */
        char *pre = concat(mistral ? ", " : "\n", "", mistral ? strchr(st.pre, '{') : st.pre);
        rc = tagged_calls(a, pre, st, mistral ? "}" : st.tail, schemas, &sp->next, msg, sizeof msg);
        free(pre);
    }
    if (rc) {
        kvt_jg_lazy_spec_free(sp);
        if (strict)
            return kvt_api_errorf(err, 400, INVALID, "tools", "unsupported_schema",
                                  "strict tools' calls follow their parameters, and kvtier cannot: %s", msg);
        return 0; /* nothing strict asked for it: the calls are read as written */
    }
    *out = sp;
    return 0;
}
