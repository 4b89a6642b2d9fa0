// SPDX-License-Identifier: MIT
/* The finish reason and the calls of a chat answer whose text the token
 * budget cut, read by the server's own reply code (kvt_srv_read_calls, which
 * the chat answer, its stream and the Responses API share, and
 * kvt_srv_response_json): a server over a tiny random model builds each
 * request from its JSON as a handler does, and the reply's text is set to
 * what a model wrote when max_tokens cut it (a random-weight model writes no
 * calls without a grammar, and a forced call is one call only).
 *  - parallel_tool_calls false: a complete first call, then a second cut, is
 *    the first call with finish_reason "tool_calls" (the cut one lies beyond
 *    what was asked for); with parallel calls both come back, the cut one as
 *    far as it got, with "length".
 *  - Mistral's [TOOL_CALLS] array cut inside a call is that call as far as it
 *    got, with "length", not text. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "server_impl.h"
#include "server_rig.h"
#include "testutil.h"

#define B 16
#define N_CTX 1024
#define N_VOCAB 600

static struct kvt_model *model;

typedef kvt_test_rig rig;

/* A fresh engine, cache and server (127.0.0.1, any port) rendering chats in family f; 0 or -1. */
static int rig_up(rig *g, kvt_chat_family f) {
    kvt_server_params sp = kvt_server_default_params();
    sp.chat = f;
    return kvt_test_rig_up(g, model, &(kvt_test_rig_opts){B, 256, 1, N_CTX, 0}, sp);
}

#define TOOLS \
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"," \
    "\"properties\":{\"city\":{\"type\":\"string\"}}}}},{\"type\":\"function\",\"function\":{\"name\":\"add\"," \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\"}}}}}]"

/* The chat answer to a tools request (tool_choice auto; extra JSON fields) whose reply, cut by
 * max_tokens, is text: a parsed JSON object (the caller deletes it), or NULL (a failed check). */
static cJSON *answer(kvt_server *s, const char *extra, const char *text) {
    char json[2048];
    snprintf(json, sizeof json,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Oslo, and 2+3?\"}],\"tools\":" TOOLS
             ",\"tool_choice\":\"auto\",\"max_tokens\":40%s}",
             extra);
    kvt_api_request a;
    kvt_api_error err;
    if (kvt_api_parse(KVT_API_CHAT, json, strlen(json), s->n_vocab, s->n_ctx, s->p.max_tokens_limit, &a, &err)) {
        CHECKF(0, "%s: %s", json, err.message);
        return NULL;
    }
    srv_req *r = kvt_srv_make_request(s, &a, NULL, &err);
    kvt_api_request_free(&a);
    CHECKF(r != NULL, "%s: %s", json, err.message);
    if (!r) return NULL;
    CHECK(r->tools);
    /* what the engine publishes when the budget ends the reply */
    r->text = kvt_xstrdup(text);
    r->text_len = strlen(text);
    r->text_cap = r->text_len + 1;
    r->finish_reason = "length";
    r->done = 1;
    char *body = kvt_srv_response_json(s, r, NULL);
    kvt_srv_unref_choices(s, r);
    cJSON *o = cJSON_Parse(body);
    CHECKF(o != NULL, "not JSON: %s", body);
    free(body);
    return o;
}

/* Checks choice 0 of answer o: its finish reason, the names of its calls joined with ',', and the
 * last call's arguments. */
static void expect(const char *what, cJSON *o, const char *finish, const char *names, const char *last_args) {
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0);
    const cJSON *fr = cJSON_GetObjectItemCaseSensitive(ch, "finish_reason");
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ch, "message"), "tool_calls");
    char got[128] = "";
    const char *args = NULL;
    for (const cJSON *c = calls ? calls->child : NULL; c; c = c->next) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *ar = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", *got ? "," : "",
                 cJSON_IsString(nm) ? nm->valuestring : "?");
        args = cJSON_IsString(ar) ? ar->valuestring : NULL;
    }
    CHECKF(cJSON_IsString(fr) && !strcmp(fr->valuestring, finish), "%s: finish_reason %s, want %s", what,
           cJSON_IsString(fr) ? fr->valuestring : "?", finish);
    CHECKF(!strcmp(got, names), "%s: calls [%s], want [%s]", what, got, names);
    CHECKF(args && !strcmp(args, last_args), "%s: last arguments '%s', want '%s'", what, args ? args : "(none)",
           last_args);
    cJSON_Delete(o);
}

static void test_chatml(void) {
    rig g;
    if (rig_up(&g, KVT_CHAT_CHATML)) goto out;
    const char *two = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n"
                      "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": ";
    cJSON *o = answer(g.s, ",\"parallel_tool_calls\":false", two);
    if (o) expect("parallel false, the second call cut", o, "tool_calls", "get_weather", "{\"city\": \"Oslo\"}");
    o = answer(g.s, "", two);
    if (o) expect("parallel, the second call cut", o, "length", "get_weather,add", "{\"a\": ");
    /* a lone call cut stays cut, parallel or not */
    o = answer(g.s, ",\"parallel_tool_calls\":false", "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2");
    if (o) expect("parallel false, the only call cut", o, "length", "add", "{\"a\": 2");
out:
    kvt_test_rig_down(&g);
}

static void test_mistral(void) {
    rig g;
    if (rig_up(&g, KVT_CHAT_MISTRAL)) goto out;
    cJSON *o = answer(g.s, "", "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 2");
    if (o) expect("mistral, the call cut", o, "length", "add", "{\"a\": 2");
    const char *two = "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}, "
                      "{\"name\": \"add\", \"arguments\": {";
    o = answer(g.s, "", two);
    if (o) expect("mistral, the second call cut", o, "length", "get_weather,add", "{");
    o = answer(g.s, ",\"parallel_tool_calls\":false", two);
    if (o) expect("mistral, parallel false", o, "tool_calls", "get_weather", "{\"city\": \"Oslo\"}");
out:
    kvt_test_rig_down(&g);
}

int main(void) {
    model = kvt_test_tiny_model("reply_calls.gguf", N_VOCAB);
    if (!model) return 1;
    test_chatml();
    test_mistral();
    kvt_model_free(model);
    return kvt_test_done("test_reply_calls");
}
