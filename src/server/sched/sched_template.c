// SPDX-License-Identifier: MIT
/* A chat request's prompt by the model's own Jinja chat template (--jinja,
 * --chat-template-file): the variables the template sees (messages with
 * their tool calls, tools, add_generation_prompt, bos_token, eos_token and
 * the request's chat_template_kwargs), the rendering, and its tokens. Also
 * which chat_template_kwargs a server without a Jinja template can honour:
 * enable_thinking on the Qwen3 family, nothing else. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "jinja.h"
#include "server_impl.h"

#define NO_THINK "<think>\n\n</think>\n\n" /* Qwen3's empty thought: what enable_thinking false renders */

/* A special token's text ("<s>"), or "" when the vocabulary has none. */
static void add_token_text(cJSON *o, const char *name, const kvt_tokenizer *t, int32_t id) {
    size_t len = 0;
    const char *p = id >= 0 ? kvt_tokenizer_token_text(t, id, &len) : NULL;
    char *s = kvt_xstrndup(p ? p : "", p ? len : 0);
    cJSON_AddStringToObject(o, name, s);
    free(s);
}

/* The tool calls of an assistant message as the template gets them: OpenAI's
 * shape, the arguments an object when object_args and they parse as one. */
static cJSON *tool_calls(const cJSON *calls, int object_args) {
    cJSON *out = cJSON_Duplicate(calls, 1);
    cJSON *c;
    cJSON_ArrayForEach(c, out) {
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        cJSON *args = fn ? cJSON_GetObjectItemCaseSensitive(fn, "arguments") : NULL;
        if (!object_args || !cJSON_IsString(args)) continue;
        cJSON *obj = cJSON_Parse(args->valuestring);
        if (obj) cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", obj);
    }
    return out;
}

/* The template's variables for request a: a new object the caller deletes. */
static cJSON *template_vars(const kvt_server *s, const kvt_api_request *a) {
    cJSON *v = a->template_kwargs ? cJSON_Duplicate(a->template_kwargs, 1) : cJSON_CreateObject();
    static const char *const ours[] = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"};
    for (size_t i = 0; i < KVT_ARRAY_LEN(ours); i++) cJSON_DeleteItemFromObjectCaseSensitive(v, ours[i]);
    cJSON *msgs = cJSON_AddArrayToObject(v, "messages");
    for (size_t i = 0; i < a->n_msgs; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", a->msgs[i].role);
        cJSON_AddStringToObject(m, "content", a->msgs[i].content ? a->msgs[i].content : "");
        const kvt_api_msg_tools *mt = a->msg_tools ? &a->msg_tools[i] : NULL;
        if (mt && mt->tool_calls)
            cJSON_AddItemToObject(m, "tool_calls", tool_calls(mt->tool_calls, s->p.jinja_object_args));
        if (mt && mt->tool_call_id) cJSON_AddStringToObject(m, "tool_call_id", mt->tool_call_id);
        cJSON_AddItemToArray(msgs, m);
    }
    if (a->tools) cJSON_AddItemToObject(v, "tools", cJSON_Duplicate(a->tools, 1));
    cJSON_AddBoolToObject(v, "add_generation_prompt", 1);
    add_token_text(v, "bos_token", s->tok, kvt_tokenizer_bos(s->tok));
    add_token_text(v, "eos_token", s->tok, kvt_tokenizer_eos(s->tok));
    return v;
}

/* Whether text ends with "<think>" and whitespace: the template opened the reply's reasoning. */
static int ends_in_think(const char *text, size_t n) {
    while (n && strchr(" \t\r\n", text[n - 1])) n--;
    return n >= 7 && !memcmp(text + n - 7, "<think>", 7);
}

int kvt_srv_render_jinja(kvt_server *s, const kvt_api_request *a, size_t max_prompt, srv_req *r, size_t *n,
                         kvt_api_error *err) {
    cJSON *vars = template_vars(s, a);
    char *text = NULL;
    size_t len = 0;
    int rc = kvt_jinja_render(s->p.jinja, vars, NULL, &text, &len);
    cJSON_Delete(vars);
    if (rc) {
        kvt_api_errorf(err, 400, "invalid_request_error", "messages", "chat_template_error",
                       "the model's chat template cannot render these messages: %s", kvt_errmsg());
        return 1;
    }
    r->think_open = ends_in_think(text, len);
    /* the template writes BOS as text; where the tokenizer adds one itself, that text goes */
    size_t skip = 0, bl = 0;
    int32_t bos = kvt_tokenizer_bos(s->tok);
    const char *bt = bos >= 0 ? kvt_tokenizer_token_text(s->tok, bos, &bl) : NULL;
    int add = kvt_tokenizer_add_special(s->tok);
    if (add && bt && bl && len >= bl && !memcmp(text, bt, bl)) skip = bl;
    rc = kvt_tokenize_max(s->tok, text + skip, len - skip, add, 1, max_prompt, &r->prompt, n);
    free(text);
    return rc;
}

int kvt_srv_template_kwargs(const kvt_server *s, const kvt_api_request *a, int *no_think, kvt_api_error *err) {
    *no_think = 0;
    if (!a->template_kwargs || s->p.jinja) return 0;
    const cJSON *k;
    cJSON_ArrayForEach(k, a->template_kwargs) {
        if (s->p.chat == KVT_CHAT_QWEN3 && !strcmp(k->string, "enable_thinking") && cJSON_IsBool(k)) {
            *no_think = cJSON_IsFalse(k);
            continue;
        }
        kvt_api_errorf(err, 400, "invalid_request_error", "chat_template_kwargs", "unsupported_parameter",
                       "'chat_template_kwargs.%.64s' needs the model's own template: start the server with --jinja "
                       "(the built-in %s rendering honours only enable_thinking, on qwen3)",
                       k->string, kvt_chat_family_name(s->p.chat));
        return -1;
    }
    return 0;
}

int kvt_srv_append_no_think(kvt_server *s, srv_req *r, size_t *n, size_t max_prompt) {
    int32_t *ids = NULL;
    size_t k = 0;
    int rc = kvt_tokenize(s->tok, NO_THINK, strlen(NO_THINK), 0, 1, &ids, &k);
    if (!rc && *n + k > max_prompt) rc = KVT_ELIMIT;
    if (!rc) {
        r->prompt = kvt_xrealloc(r->prompt, (*n + k) * sizeof *r->prompt);
        memcpy(r->prompt + *n, ids, k * sizeof *ids);
        *n += k;
    }
    free(ids);
    return rc;
}
