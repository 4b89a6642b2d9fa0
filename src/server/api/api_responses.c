// SPDX-License-Identifier: MIT
/* The Responses API as data (api_responses.h): the request's fields and
 * items checked, the chat completions body built from them, and the
 * response object, output items and stream events. */
#include "api_responses.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_types.h"
#include "common.h"

static const char *const INVALID = "invalid_request_error";

/* ---- the fields ------------------------------------------------------------------------- */

typedef enum {
    F_READ,    /* read (turned into the chat body, or by the handler) */
    F_ACCEPT,  /* never changes the output: accepted and ignored */
    F_NULL,    /* not supported: null only */
    F_FALSE,   /* not supported: false only */
    F_ZERO,    /* not supported: 0 only */
    F_SPECIAL, /* checked by its own rule below (include, truncation, reasoning) */
} field_rule;

static const struct {
    const char *name;
    field_rule rule;
} FIELDS[] = {
    {"model", F_READ},
    {"input", F_READ},
    {"instructions", F_READ},
    {"tools", F_READ},
    {"tool_choice", F_READ},
    {"parallel_tool_calls", F_READ},
    {"text", F_READ},
    {"max_output_tokens", F_READ},
    {"temperature", F_READ},
    {"top_p", F_READ},
    {"store", F_READ},
    {"previous_response_id", F_READ},
    {"stream", F_READ},
    /* kvtier's and llama.cpp's own, as on /v1/chat/completions */
    {"kvtier", F_READ},
    {"seed", F_READ},
    {"top_k", F_READ},
    {"min_p", F_READ},
    {"cache_salt", F_READ},
    /* the output does not depend on these */
    {"metadata", F_ACCEPT},
    {"user", F_ACCEPT},
    {"service_tier", F_ACCEPT},
    {"safety_identifier", F_ACCEPT},
    {"prompt_cache_key", F_ACCEPT},
    {"stream_options", F_ACCEPT},
    /* not supported: only their neutral value */
    {"include", F_SPECIAL},
    {"truncation", F_SPECIAL},
    {"reasoning", F_SPECIAL},
    {"background", F_FALSE},
    {"top_logprobs", F_ZERO},
    {"max_tool_calls", F_NULL},
    {"conversation", F_NULL},
    {"prompt", F_NULL},
};

const char *kvt_api_resp_field(const char *key, size_t len) {
    for (size_t i = 0; i < KVT_ARRAY_LEN(FIELDS); i++)
        if (strlen(FIELDS[i].name) == len && !memcmp(FIELDS[i].name, key, len)) return FIELDS[i].name;
    return NULL;
}

/* include: [] or only "reasoning.encrypted_content" (there is no reasoning to include); truncation:
 * "disabled" (a prompt past the context is a 400, never cut); reasoning: {} or effort/summary null. */
static int special_neutral(const char *name, const cJSON *v) {
    if (!strcmp(name, "include")) {
        if (!cJSON_IsArray(v)) return 0;
        for (const cJSON *e = v->child; e; e = e->next)
            if (!cJSON_IsString(e) || strcmp(e->valuestring, "reasoning.encrypted_content")) return 0;
        return 1;
    }
    if (!strcmp(name, "truncation")) return cJSON_IsString(v) && !strcmp(v->valuestring, "disabled");
    if (!cJSON_IsObject(v)) return 0;
    for (const cJSON *e = v->child; e; e = e->next)
        if (!cJSON_IsNull(e)) return 0;
    return 1;
}

/* The name of the unknown field a refusal names as its param: the error outlives the body it came
 * from but not the thread's handling of the request, and param must not be freed by the caller. */
static _Thread_local char unknown_param[65];

static int check_fields(const cJSON *root, kvt_api_error *err) {
    for (const cJSON *f = root->child; f; f = f->next) {
        const char *name = kvt_api_resp_field(f->string, strlen(f->string));
        if (!name) {
            snprintf(unknown_param, sizeof unknown_param, "%s", f->string);
            return kvt_api_errorf(err, 400, INVALID, unknown_param, "unknown_parameter",
                                  "'%.64s' is not a field of /v1/responses that kvtier knows; it would be ignored and "
                                  "the output could differ from what it asks, so it is refused",
                                  f->string);
        }
        size_t i = 0;
        while (strcmp(FIELDS[i].name, name)) i++;
        field_rule rule = FIELDS[i].rule;
        if (rule == F_READ || rule == F_ACCEPT || cJSON_IsNull(f)) continue;
        int ok = rule == F_FALSE ? cJSON_IsFalse(f)
            : rule == F_ZERO     ? cJSON_IsNumber(f) && f->valuedouble == 0
            : rule == F_SPECIAL  ? special_neutral(name, f)
                                 : 0;
        if (!ok)
            return kvt_api_errorf(err, 400, INVALID, name, "unsupported_parameter",
                                  "'%s' is not supported by kvtier's /v1/responses at this value: it would be ignored "
                                  "and the output would differ from what it asks; leave it out",
                                  name);
    }
    return 0;
}

/* ---- the items -------------------------------------------------------------------------- */

/* The text of a message's content: a string, or text parts (input_text, output_text, text). NULL
 * with *err for another part (images and files: kvtier serves text models). */
static char *content_text(const cJSON *c, size_t index, kvt_api_error *err) {
    if (cJSON_IsString(c)) return kvt_xstrdup(c->valuestring);
    if (!cJSON_IsArray(c)) {
        kvt_api_error_item(err, "input", index, ".content", c ? "invalid_type" : "missing_required_parameter",
                           "input[%zu].content must be a string or an array of text parts", index);
        return NULL;
    }
    size_t len = 0;
    int j = 0;
    for (const cJSON *p = c->child; p; p = p->next, j++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        if ((strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text")) || !cJSON_IsString(text)) {
            kvt_api_error_item(err, "input", index, ".content", "unsupported_content",
                               "input[%zu].content[%d] must be {\"type\": \"input_text\" or \"output_text\", \"text\": "
                               "...}; kvtier serves text models (got type '%.32s')",
                               index, j, t);
            return NULL;
        }
        len += strlen(text->valuestring) + 1;
    }
    char *s = kvt_xmalloc(len + 1);
    size_t o = 0;
    for (const cJSON *p = c->child; p; p = p->next) { /* a newline between parts, as chat messages' */
        const char *t = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        if (o) s[o++] = '\n';
        memcpy(s + o, t, strlen(t));
        o += strlen(t);
    }
    s[o] = 0;
    return s;
}

static const char *item_type(const cJSON *it) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(it, "type");
    if (cJSON_IsString(t)) return t->valuestring;
    return cJSON_GetObjectItemCaseSensitive(it, "role") ? "message" : "";
}

/* input[index].name is a non-empty string; else a 400 whose param names it ("input[3].call_id"). */
static int str_field(const cJSON *it, const char *name, size_t index, kvt_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(it, name);
    if (cJSON_IsString(v) && *v->valuestring) return 0;
    char field[32];
    snprintf(field, sizeof field, ".%s", name);
    return kvt_api_error_item(err, "input", index, field, v ? "invalid_value" : "missing_required_parameter",
                              "input[%zu].%s %s a non-empty string", index, name, v ? "must be" : "is required:");
}

/* Checks one item: a message (role user, assistant, system or developer; text content), a
 * function_call (call_id, name, arguments) or a function_call_output (call_id, output). */
static int check_item(const cJSON *it, size_t index, kvt_api_error *err) {
    if (!cJSON_IsObject(it))
        return kvt_api_error_item(err, "input", index, "", "invalid_type", "input[%zu] must be an object", index);
    const char *t = item_type(it);
    if (!strcmp(t, "message")) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        const char *r = cJSON_IsString(role) ? role->valuestring : "";
        if (strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "system") && strcmp(r, "developer"))
            return kvt_api_error_item(err, "input", index, ".role",
                                      role ? "invalid_value" : "missing_required_parameter",
                                      "input[%zu].role must be user, assistant, system or developer", index);
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (cJSON_IsArray(content) && !content->child) /* as chat's messages: no parts is no content */
            return kvt_api_error_item(err, "input", index, ".content", "missing_required_parameter",
                                      "input[%zu].content is required: a string or an array of at least one text "
                                      "part (got [])",
                                      index);
        char *text = content_text(content, index, err);
        free(text);
        return text ? 0 : -1;
    }
    if (!strcmp(t, "function_call")) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(it, "arguments");
        if (str_field(it, "call_id", index, err) || str_field(it, "name", index, err)) return -1;
        if (!cJSON_IsString(a))
            return kvt_api_error_item(err, "input", index, ".arguments",
                                      a ? "invalid_type" : "missing_required_parameter",
                                      "input[%zu].arguments must be a string (the call's JSON arguments)", index);
        return 0;
    }
    if (!strcmp(t, "item_reference")) return str_field(it, "id", index, err); /* the handler resolves it */
    if (!strcmp(t, "function_call_output")) {
        if (str_field(it, "call_id", index, err)) return -1;
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(it, "output");
        if (!cJSON_IsString(o) && !cJSON_IsArray(o))
            return kvt_api_error_item(err, "input", index, ".output", o ? "invalid_type" : "missing_required_parameter",
                                      "input[%zu].output is required: a string or an array of text parts", index);
        char *text = content_text(o, index, err);
        free(text);
        return text ? 0 : -1;
    }
    return kvt_api_error_item(err, "input", index, ".type", "unsupported_value",
                              "input[%zu].type '%.32s' is not supported: kvtier takes message, function_call, "
                              "function_call_output and item_reference items",
                              index, t);
}

/* The input as items: a string is one user message. */
static int parse_input(const cJSON *root, kvt_api_resp_request *r, kvt_api_error *err) {
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "input");
    if (!in || cJSON_IsNull(in)) {
        r->input = cJSON_CreateArray();
        return 0;
    }
    if (cJSON_IsString(in)) {
        r->input = cJSON_CreateArray();
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "type", "message");
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", in->valuestring);
        cJSON_AddItemToArray(r->input, m);
        return 0;
    }
    if (!cJSON_IsArray(in) || cJSON_GetArraySize(in) > KVT_API_MAX_MESSAGES)
        return kvt_api_errorf(err, 400, INVALID, "input", "invalid_type",
                              "'input' must be a string or an array of at most %d items", KVT_API_MAX_MESSAGES);
    size_t i = 0;
    for (const cJSON *it = in->child; it; it = it->next, i++)
        if (check_item(it, i, err)) return -1;
    r->input = cJSON_Duplicate(in, 1);
    return 0;
}

static int get_opt_bool(const cJSON *root, const char *name, int dflt, int *out, kvt_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    *out = dflt;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v))
        return kvt_api_errorf(err, 400, INVALID, name, "invalid_type", "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

int kvt_api_resp_parse(const char *body, size_t len, kvt_api_resp_request *out, kvt_api_error *err) {
    memset(out, 0, sizeof *out);
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return kvt_api_errorf(err, 400, INVALID, NULL, "invalid_json", "the request body must be a JSON object");
    }
    out->root = root;
    const cJSON *prev = cJSON_GetObjectItemCaseSensitive(root, "previous_response_id");
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(root, "instructions");
    /* the types before the values: a field of the wrong type is named as such, not as an unsupported value */
    int rc = kvt_api_check_types(KVT_BODY_RESPONSES, root, err) || check_fields(root, err) ||
        parse_input(root, out, err) || get_opt_bool(root, "store", 1, &out->store, err) ||
        get_opt_bool(root, "stream", 0, &out->stream, err);
    if (!rc && prev && !cJSON_IsNull(prev)) {
        if (!cJSON_IsString(prev) || !*prev->valuestring || strlen(prev->valuestring) >= KVT_API_RESP_ID_MAX)
            rc = kvt_api_errorf(err, 400, INVALID, "previous_response_id", "invalid_value",
                                "'previous_response_id' must be the id of a stored response");
        else out->previous_id = kvt_xstrdup(prev->valuestring);
    }
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (!rc && so && !cJSON_IsNull(so) && !out->stream) /* as OpenAI: stream options without a stream are a mistake */
        rc = kvt_api_errorf(err, 400, INVALID, "stream_options", "invalid_value",
                            "'stream_options' is only allowed with 'stream': true (send it null or leave it out)");
    if (!rc && ins && !cJSON_IsNull(ins) && !cJSON_IsString(ins))
        rc = kvt_api_errorf(err, 400, INVALID, "instructions", "invalid_type", "'instructions' must be a string");
    if (!rc && !out->previous_id && !cJSON_GetArraySize(out->input))
        rc = kvt_api_errorf(err, 400, INVALID, "input", "missing_required_parameter",
                            "'input' is required: a string or an array of items");
    if (rc) {
        kvt_api_resp_request_free(out);
        return KVT_EARG;
    }
    return 0;
}

void kvt_api_resp_request_free(kvt_api_resp_request *r) {
    cJSON_Delete(r->root);
    cJSON_Delete(r->input);
    free(r->previous_id);
    memset(r, 0, sizeof *r);
}

/* ---- the chat body ---------------------------------------------------------------------- */

/* Appends the items to msgs as chat messages: a function_call joins the assistant message before
 * it (its tool_calls), or opens one with null content. */
static int add_messages(cJSON *msgs, const cJSON *items, kvt_api_error *err) {
    cJSON *last_assistant = NULL; /* the assistant message function calls join, until another message */
    size_t i = 0;
    for (const cJSON *it = items ? items->child : NULL; it; it = it->next, i++) {
        const char *t = item_type(it);
        cJSON *m = NULL;
        if (!strcmp(t, "function_call")) {
            if (!last_assistant) {
                last_assistant = cJSON_CreateObject();
                cJSON_AddStringToObject(last_assistant, "role", "assistant");
                cJSON_AddNullToObject(last_assistant, "content");
                cJSON_AddItemToArray(msgs, last_assistant);
            }
            cJSON *calls = cJSON_GetObjectItemCaseSensitive(last_assistant, "tool_calls");
            if (!calls) calls = cJSON_AddArrayToObject(last_assistant, "tool_calls");
            cJSON *c = cJSON_CreateObject(), *fn;
            cJSON_AddStringToObject(c, "id", cJSON_GetObjectItemCaseSensitive(it, "call_id")->valuestring);
            cJSON_AddStringToObject(c, "type", "function");
            fn = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(fn, "name", cJSON_GetObjectItemCaseSensitive(it, "name")->valuestring);
            cJSON_AddStringToObject(fn, "arguments", cJSON_GetObjectItemCaseSensitive(it, "arguments")->valuestring);
            cJSON_AddItemToArray(calls, c);
            continue;
        }
        int out = !strcmp(t, "function_call_output");
        char *text = content_text(cJSON_GetObjectItemCaseSensitive(it, out ? "output" : "content"), i, err);
        if (!text) return -1;
        m = cJSON_CreateObject();
        const char *role = out ? "tool" : cJSON_GetObjectItemCaseSensitive(it, "role")->valuestring;
        cJSON_AddStringToObject(m, "role", role);
        cJSON_AddStringToObject(m, "content", text);
        if (out)
            cJSON_AddStringToObject(m, "tool_call_id", cJSON_GetObjectItemCaseSensitive(it, "call_id")->valuestring);
        free(text);
        cJSON_AddItemToArray(msgs, m);
        last_assistant = !strcmp(role, "assistant") ? m : NULL;
    }
    return 0;
}

/* Whether a function_call item among items (up to stop, NULL: all) has this call_id. */
static int call_made(const cJSON *items, const cJSON *stop, const char *call_id) {
    for (const cJSON *it = items ? items->child : NULL; it && it != stop; it = it->next) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "call_id");
        if (!strcmp(item_type(it), "function_call") && cJSON_IsString(id) && !strcmp(id->valuestring, call_id))
            return 1;
    }
    return 0;
}

/* Each function_call_output of input answers a function_call of the history or of input before it, as
 * chat's tool messages must (a 400 naming input[i].call_id otherwise). */
static int check_outputs(const cJSON *history, const cJSON *input, kvt_api_error *err) {
    size_t i = 0;
    for (const cJSON *it = input ? input->child : NULL; it; it = it->next, i++) {
        if (strcmp(item_type(it), "function_call_output")) continue;
        const char *id = cJSON_GetObjectItemCaseSensitive(it, "call_id")->valuestring;
        if (!call_made(history, NULL, id) && !call_made(input, it, id))
            return kvt_api_error_item(err, "input", i, ".call_id", "invalid_value",
                                      "input[%zu].call_id '%.64s' answers no call: it must be the call_id of an "
                                      "earlier function_call item (of this input or of previous_response_id's)",
                                      i, id);
    }
    return 0;
}

/* tools [{type: function, name, description, parameters, strict}] in chat's nested shape. */
static int add_tools(cJSON *chat, const cJSON *root, kvt_api_error *err) {
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (!tools || cJSON_IsNull(tools)) return 0;
    if (!cJSON_IsArray(tools))
        return kvt_api_errorf(err, 400, INVALID, "tools", "invalid_type", "'tools' must be an array");
    cJSON *out = cJSON_AddArrayToObject(chat, "tools");
    int i = 0;
    for (const cJSON *t = tools->child; t; t = t->next, i++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return kvt_api_errorf(err, 400, INVALID, "tools", "unsupported_value",
                                  "tools[%d].type must be \"function\": kvtier runs no hosted tools (got '%.32s')", i,
                                  cJSON_IsString(type) ? type->valuestring : "");
        cJSON *o = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "function");
        for (const cJSON *f = t->child; f; f = f->next)
            if (strcmp(f->string, "type")) cJSON_AddItemToObject(fn, f->string, cJSON_Duplicate(f, 1));
        cJSON_AddItemToObject(o, "function", fn);
        cJSON_AddItemToArray(out, o);
    }
    return 0;
}

/* tool_choice: the strings as they are; {type: function, name} in chat's shape. */
static int add_tool_choice(cJSON *chat, const cJSON *root, kvt_api_error *err) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    if (!c || cJSON_IsNull(c) || cJSON_IsString(c)) {
        if (c && !cJSON_IsNull(c)) cJSON_AddItemToObject(chat, "tool_choice", cJSON_Duplicate(c, 1));
        return 0;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type"), *name = cJSON_GetObjectItemCaseSensitive(c, "name");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
        return kvt_api_errorf(err, 400, INVALID, "tool_choice", "invalid_value",
                              "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\": ...}");
    cJSON *o = cJSON_AddObjectToObject(chat, "tool_choice");
    cJSON_AddStringToObject(o, "type", "function");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "function"), "name", name->valuestring);
    return 0;
}

/* text: {format: {type: text | json_object | json_schema (name, schema, strict)}, verbosity: null}. */
static int add_format(cJSON *chat, const cJSON *root, kvt_api_error *err) {
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text");
    if (!text || cJSON_IsNull(text)) return 0;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(text, "format");
    for (const cJSON *f = cJSON_IsObject(text) ? text->child : NULL; f; f = f->next)
        if (strcmp(f->string, "format") && !cJSON_IsNull(f))
            return kvt_api_errorf(err, 400, INVALID, "text", "unsupported_parameter",
                                  "'text.%.32s' is not supported: only 'text.format' is read", f->string);
    if (!cJSON_IsObject(text) || (fmt && !cJSON_IsNull(fmt) && !cJSON_IsObject(fmt)))
        return kvt_api_errorf(err, 400, INVALID, "text", "invalid_type", "'text' must be {\"format\": {...}}");
    if (!fmt || cJSON_IsNull(fmt)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(fmt, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    cJSON *rf = cJSON_CreateObject();
    cJSON_AddItemToObject(chat, "response_format", rf);
    if (!strcmp(t, "json_schema")) {
        cJSON_AddStringToObject(rf, "type", "json_schema");
        cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
        for (const cJSON *f = fmt->child; f; f = f->next)
            if (strcmp(f->string, "type")) cJSON_AddItemToObject(js, f->string, cJSON_Duplicate(f, 1));
        if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(fmt, "schema")))
            return kvt_api_errorf(err, 400, INVALID, "text", "invalid_value",
                                  "'text.format.schema' must be a JSON Schema object");
        return 0;
    }
    if (strcmp(t, "text") && strcmp(t, "json_object"))
        return kvt_api_errorf(err, 400, INVALID, "text", "invalid_value",
                              "'text.format.type' must be text, json_object or json_schema");
    cJSON_AddStringToObject(rf, "type", t);
    return 0;
}

char *kvt_api_resp_chat_body(const kvt_api_resp_request *r, const cJSON *history, kvt_api_error *err) {
    static const char *const same[] = {"model", "temperature", "top_p", "parallel_tool_calls", "kvtier",
                                       "seed",  "top_k",       "min_p", "cache_salt"};
    cJSON *chat = cJSON_CreateObject();
    for (size_t i = 0; i < KVT_ARRAY_LEN(same); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, same[i]);
        if (v) cJSON_AddItemToObject(chat, same[i], cJSON_Duplicate(v, 1));
    }
    const cJSON *mot = cJSON_GetObjectItemCaseSensitive(r->root, "max_output_tokens");
    if (mot) cJSON_AddItemToObject(chat, "max_completion_tokens", cJSON_Duplicate(mot, 1));
    cJSON *msgs = cJSON_AddArrayToObject(chat, "messages");
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(r->root, "instructions");
    if (cJSON_IsString(ins)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", ins->valuestring);
        cJSON_AddItemToArray(msgs, m);
    }
    char *out = NULL;
    if (!check_outputs(history, r->input, err) && !add_messages(msgs, history, err) &&
        !add_messages(msgs, r->input, err) && !add_tools(chat, r->root, err) && !add_tool_choice(chat, r->root, err) &&
        !add_format(chat, r->root, err))
        out = cJSON_PrintUnformatted(chat);
    cJSON_Delete(chat);
    return out;
}

/* ---- the response ----------------------------------------------------------------------- */

void kvt_api_resp_item_id(const char *response_id, int call, size_t i, char *out, size_t cap) {
    const char *tail = strncmp(response_id, "resp_", 5) ? response_id : response_id + 5;
    if (call) snprintf(out, cap, "fc_%s_%zu", tail, i);
    else snprintf(out, cap, "msg_%s", tail);
}

int kvt_api_resp_item_owner(const char *item_id, char *out, size_t cap) {
    const char *tail = !strncmp(item_id, "msg_", 4) ? item_id + 4 : !strncmp(item_id, "fc_", 3) ? item_id + 3 : NULL;
    if (!tail || !*tail) return 0;
    size_t n = strlen(tail);
    if (item_id[0] == 'f') { /* fc_<tail>_<i> */
        const char *us = strrchr(tail, '_');
        if (!us || us == tail) return 0;
        n = (size_t)(us - tail);
    }
    return snprintf(out, cap, "resp_%.*s", (int)n, tail) < (int)cap;
}

cJSON *kvt_api_resp_output(const kvt_api_resp_result *res) {
    cJSON *out = cJSON_CreateArray();
    char id[KVT_API_RESP_ID_MAX + 16];
    int done = strcmp(res->status, "in_progress") != 0;
    if (*res->text || !res->n_calls) {
        cJSON *m = cJSON_CreateObject(), *part = cJSON_CreateObject();
        kvt_api_resp_item_id(res->id, 0, 0, id, sizeof id);
        cJSON_AddStringToObject(m, "id", id);
        cJSON_AddStringToObject(m, "type", "message");
        /* a reply cut short (its budget, the server's stop) is an incomplete message */
        cJSON_AddStringToObject(m, "status", !done ? "in_progress" : res->incomplete ? "incomplete" : "completed");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(part, "type", "output_text");
        cJSON_AddStringToObject(part, "text", res->text);
        cJSON_AddArrayToObject(part, "annotations");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(m, "content"), part);
        cJSON_AddItemToArray(out, m);
    }
    for (size_t i = 0; i < res->n_calls; i++) {
        cJSON *c = cJSON_CreateObject();
        kvt_api_resp_item_id(res->id, 1, i, id, sizeof id);
        cJSON_AddStringToObject(c, "id", id);
        cJSON_AddStringToObject(c, "type", "function_call");
        cJSON_AddStringToObject(c, "status", done ? "completed" : "in_progress");
        cJSON_AddStringToObject(c, "call_id", res->calls[i].id);
        cJSON_AddStringToObject(c, "name", res->calls[i].name);
        cJSON_AddStringToObject(c, "arguments", res->calls[i].arguments);
        cJSON_AddItemToArray(out, c);
    }
    return out;
}

/* The request's field name as the response echoes it, or null. */
static void echo(cJSON *o, const kvt_api_resp_request *req, const char *name) {
    const cJSON *v = req ? cJSON_GetObjectItemCaseSensitive(req->root, name) : NULL;
    cJSON_AddItemToObject(o, name, v && !cJSON_IsNull(v) ? cJSON_Duplicate(v, 1) : cJSON_CreateNull());
}

static cJSON *usage_obj(const kvt_api_usage *u) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "input_tokens", u->prompt_tokens);
    if (!u->hide_report) /* as chat's usage: absent under --hide-cached-tokens, never a made-up 0 */
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "input_tokens_details"), "cached_tokens", u->cached_tokens);
    cJSON_AddNumberToObject(o, "output_tokens", u->completion_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "output_tokens_details"), "reasoning_tokens", 0);
    cJSON_AddNumberToObject(o, "total_tokens", u->prompt_tokens + u->completion_tokens);
    return o;
}

cJSON *kvt_api_resp_obj(const kvt_api_resp_result *res, const cJSON *output) {
    const kvt_api_resp_request *req = res->req;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", res->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)res->created);
    cJSON_AddStringToObject(o, "status", res->status);
    cJSON_AddNullToObject(o, "error");
    if (res->incomplete)
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason", res->incomplete);
    else cJSON_AddNullToObject(o, "incomplete_details");
    echo(o, req, "instructions");
    echo(o, req, "max_output_tokens");
    cJSON_AddStringToObject(o, "model", res->model);
    cJSON_AddItemToObject(o, "output", output ? cJSON_Duplicate(output, 1) : cJSON_CreateArray());
    const cJSON *ptc = req ? cJSON_GetObjectItemCaseSensitive(req->root, "parallel_tool_calls") : NULL;
    cJSON_AddBoolToObject(o, "parallel_tool_calls", !cJSON_IsFalse(ptc));
    echo(o, req, "previous_response_id");
    echo(o, req, "temperature");
    echo(o, req, "top_p");
    const cJSON *text = req ? cJSON_GetObjectItemCaseSensitive(req->root, "text") : NULL;
    if (cJSON_IsObject(text) && cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(text, "format"))) {
        cJSON_AddItemToObject(o, "text", cJSON_Duplicate(text, 1));
    } else {
        cJSON *f = cJSON_AddObjectToObject(cJSON_AddObjectToObject(o, "text"), "format");
        cJSON_AddStringToObject(f, "type", "text");
    }
    const cJSON *tc = req ? cJSON_GetObjectItemCaseSensitive(req->root, "tool_choice") : NULL;
    cJSON_AddItemToObject(o, "tool_choice",
                          tc && !cJSON_IsNull(tc) ? cJSON_Duplicate(tc, 1) : cJSON_CreateString("auto"));
    const cJSON *tools = req ? cJSON_GetObjectItemCaseSensitive(req->root, "tools") : NULL;
    cJSON_AddItemToObject(o, "tools", cJSON_IsArray(tools) ? cJSON_Duplicate(tools, 1) : cJSON_CreateArray());
    cJSON_AddBoolToObject(o, "store", req ? req->store : 1);
    const cJSON *md = req ? cJSON_GetObjectItemCaseSensitive(req->root, "metadata") : NULL;
    cJSON_AddItemToObject(o, "metadata", cJSON_IsObject(md) ? cJSON_Duplicate(md, 1) : cJSON_CreateObject());
    if (res->u) {
        cJSON_AddItemToObject(o, "usage", usage_obj(res->u));
        cJSON_AddItemToObject(o, "kvtier", kvt_api_kvtier_obj(res->u));
    } else {
        cJSON_AddNullToObject(o, "usage");
    }
    return o;
}

char *kvt_api_resp_event(const char *type, int64_t seq, cJSON *fields) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddNumberToObject(o, "sequence_number", (double)seq);
    while (fields && fields->child) {
        cJSON *f = cJSON_DetachItemViaPointer(fields, fields->child);
        cJSON_AddItemToObject(o, f->string, f);
    }
    cJSON_Delete(fields);
    char *data = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    size_t n = strlen(type) + strlen(data) + sizeof "event: \ndata: \n\n";
    char *ev = kvt_xmalloc(n);
    snprintf(ev, n, "event: %s\ndata: %s\n\n", type, data);
    free(data);
    return ev;
}
