// SPDX-License-Identifier: MIT
/* Tools on the OpenAI surface as data: tools rendered byte-stable in each
 * family's style (JSON as the templates print it), tool turns and calls in
 * history, calls read back out of generated text with their exact
 * arguments, a reply's calls sent back unchanged rendered as the text it
 * generated, the forced-call grammar accepting exactly the text a call
 * renders as, and the request fields' errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_body.h"
#include "api_tools.h"
#include "common.h"
#include "testutil.h"

#define TEST_CTX 4096

/* json as the server reads it: the strict check every POST body gets (api_body.h), then the parser. */
static int checked_parse(kvt_api_kind k, const char *json, kvt_api_request *r, kvt_api_error *e) {
    if (kvt_api_check_body(k == KVT_API_CHAT ? KVT_BODY_CHAT : KVT_BODY_COMPLETION, json, strlen(json), 0, e)) {
        memset(r, 0, sizeof *r);
        return KVT_EARG;
    }
    return kvt_api_parse(k, json, strlen(json), 1000, TEST_CTX, 512, r, e);
}

static int parse(const char *json, kvt_api_request *r) {
    kvt_api_error e;
    int rc = checked_parse(KVT_API_CHAT, json, r, &e);
    if (rc) fprintf(stderr, "parse: %s\n", e.message);
    return rc;
}

static void expect_error(const char *json, const char *param, const char *words) {
    kvt_api_request r;
    kvt_api_error e;
    int rc = checked_parse(KVT_API_CHAT, json, &r, &e);
    if (!rc) {
        kvt_jg_schema *g = NULL;
        rc = kvt_api_grammar(&r, KVT_CHAT_CHATML, &g, &e);
        kvt_jg_schema_free(g);
        kvt_api_request_free(&r);
    }
    CHECKF(rc && e.status == 400 && e.param && !strcmp(e.param, param) && (!words || strstr(e.message, words)),
           "%s: rc %d param %s message %s", json, rc, rc && e.param ? e.param : "-", rc ? e.message : "-");
}

#define TOOL \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"," \
    "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}"
#define TOOL_TEXT \
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": " \
    "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}"
#define HISTORY \
    "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Paris?\"}," \
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":" \
    "{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},{\"role\":\"tool\"," \
    "\"tool_call_id\":\"c1\",\"content\":\"sunny\"},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"21\"}]," \
    "\"tools\":[" TOOL "]}"

static void test_chatml_rendering(void) {
    kvt_api_request a, b;
    if (parse(HISTORY, &a) || parse(HISTORY, &b)) return;
    size_t n, nb, last, lb;
    char **arena, **arena_b;
    kvt_chat_msg *m = kvt_api_messages(&a, KVT_CHAT_CHATML, NULL, NULL, 0, &n, &last, &arena);
    kvt_chat_msg *mb = kvt_api_messages(&b, KVT_CHAT_CHATML, NULL, NULL, 0, &nb, &lb, &arena_b);
    CHECKF(n == 4, "%zu messages", n);
    if (n == 4) {
        CHECK(!strcmp(m[0].role, "system") && !strncmp(m[0].content, "Be brief.\n\n# Tools", 18));
        CHECKF(strstr(m[0].content, "<tools>\n" TOOL_TEXT "\n</tools>"), "%s", m[0].content);
        CHECK(!strcmp(m[1].role, "user") && last == 1);
        CHECKF(!strcmp(m[2].content,
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                       "</tool_call>"),
               "%s", m[2].content);
        CHECKF(!strcmp(m[3].role, "user") &&
                   !strcmp(m[3].content,
                           "<tool_response>\nsunny\n</tool_response>\n<tool_response>\n21\n</tool_response>"),
               "%s", m[3].content);
        /* byte-stable: the same request renders the same */
        int same = nb == n;
        for (size_t i = 0; same && i < n; i++)
            same = !strcmp(m[i].content, mb[i].content) && !strcmp(m[i].role, mb[i].role);
        CHECK(same);
        /* the call in history reads back as itself */
        kvt_api_call *calls;
        char *content;
        size_t k = kvt_api_parse_calls(KVT_CHAT_CHATML, m[2].content, 1, "chatcmpl-ab", &calls, &content);
        CHECK(k == 1 && !strcmp(calls[0].name, "get_weather") && !strcmp(calls[0].arguments, "{\"city\": \"Paris\"}") &&
              !strcmp(calls[0].id, "call_ab_0") && !strcmp(content, ""));
        kvt_api_calls_free(calls, k);
        free(content);
    }
    kvt_api_messages_free(m, arena);
    kvt_api_messages_free(mb, arena_b);
    kvt_api_request_free(&a);
    kvt_api_request_free(&b);
}

static void test_llama3_rendering(void) {
    kvt_api_request a;
    if (parse(HISTORY, &a)) return;
    size_t n, last;
    char **arena;
    kvt_chat_msg *m = kvt_api_messages(&a, KVT_CHAT_LLAMA3, NULL, NULL, 0, &n, &last, &arena);
    CHECKF(n == 5, "%zu messages", n);
    if (n == 5) {
        CHECK(!strcmp(m[0].content, "Be brief."));
        CHECKF(strstr(m[1].content,
                      "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",") &&
                   strstr(m[1].content, "\n\nParis?"),
               "%s", m[1].content);
        CHECKF(!strcmp(m[2].content, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"), "%s",
               m[2].content);
        CHECK(!strcmp(m[3].role, "ipython") && !strcmp(m[3].content, "sunny") && !strcmp(m[4].role, "ipython"));
        kvt_api_call *calls;
        char *content;
        size_t k = kvt_api_parse_calls(KVT_CHAT_LLAMA3, m[2].content, 1, "x", &calls, &content);
        CHECK(k == 1 && !strcmp(calls[0].arguments, "{\"city\": \"Paris\"}"));
        kvt_api_calls_free(calls, k);
        free(content);
    }
    kvt_api_messages_free(m, arena);
    kvt_api_request_free(&a);
}

/* Mistral: the tools as a JSON array before the first user turn (not the
 * last, so the tool block stays a cached prefix), calls as one
 * [TOOL_CALLS][...] array, results as {"content", "call_id"}. */
static void test_mistral_rendering(void) {
    kvt_api_request a;
    if (parse(HISTORY, &a)) return;
    size_t n, last;
    char **arena;
    kvt_chat_msg *m = kvt_api_messages(&a, KVT_CHAT_MISTRAL, NULL, NULL, 0, &n, &last, &arena);
    CHECKF(n == 6, "%zu messages", n);
    if (n == 6) {
        CHECKF(!strcmp(m[0].role, "tools") && !strcmp(m[0].content, "[" TOOL_TEXT "]"), "%s", m[0].content);
        CHECK(!strcmp(m[1].role, "system") && !strcmp(m[1].content, "Be brief."));
        CHECK(!strcmp(m[2].role, "user") && last == 2);
        CHECKF(!strcmp(m[3].content, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]"),
               "%s", m[3].content);
        CHECKF(!strcmp(m[4].role, "tool") && !strcmp(m[4].content, "{\"content\": sunny, \"call_id\": \"c1\"}"), "%s",
               m[4].content);
        CHECK(!strcmp(m[5].role, "tool") && !strcmp(m[5].content, "{\"content\": 21, \"call_id\": \"c1\"}"));
        kvt_api_call *calls;
        char *content;
        size_t k = kvt_api_parse_calls(KVT_CHAT_MISTRAL, m[3].content, 1, "chatcmpl-ab", &calls, &content);
        CHECK(k == 1 && !strcmp(calls[0].name, "get_weather") && !strcmp(calls[0].arguments, "{\"city\": \"Paris\"}") &&
              !strcmp(calls[0].id, "call_ab_0") && !strcmp(content, ""));
        kvt_api_calls_free(calls, k);
        free(content);
    }
    kvt_api_messages_free(m, arena);
    kvt_api_request_free(&a);
    /* two calls in history render as one array, and read back as both */
    const char *two = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":"
                      "\"\",\"tool_calls\":[{\"id\":\"a\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
                      "\"{}\"}},{\"id\":\"b\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":"
                      "\"{\\\"y\\\": 1}\"}}]}],\"tools\":[" TOOL "]}";
    if (parse(two, &a)) return;
    m = kvt_api_messages(&a, KVT_CHAT_MISTRAL, NULL, NULL, 0, &n, &last, &arena);
    const char *want = "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"arguments\": {\"y\": 1}}]";
    CHECKF(n == 3 && !strcmp(m[2].content, want), "%s", n == 3 ? m[2].content : "-");
    kvt_api_call *calls;
    char *content;
    size_t k = kvt_api_parse_calls(KVT_CHAT_MISTRAL, want, 1, "r-9", &calls, &content);
    CHECK(k == 2 && !strcmp(calls[0].name, "f") && !strcmp(calls[0].arguments, "{}") && !strcmp(calls[1].name, "g") &&
          !strcmp(calls[1].arguments, "{\"y\": 1}") && !strcmp(calls[1].id, "call_9_1"));
    kvt_api_calls_free(calls, k);
    free(content);
    kvt_api_messages_free(m, arena);
    kvt_api_request_free(&a);
    static const char *const none[] = {"plain", "[TOOL_CALLS]{\"name\": \"f\"}", "[TOOL_CALLS][{\"name\": 5}]",
                                       "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}"};
    for (size_t i = 0; i < KVT_ARRAY_LEN(none); i++) {
        k = kvt_api_parse_calls(KVT_CHAT_MISTRAL, none[i], 1, "r", &calls, &content);
        CHECKF(k == 0 && !calls, "%s", none[i]);
    }
    /* the forced grammar accepts exactly a rendered call */
    if (parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[" TOOL "],\"tool_choice\":\"required\"}",
              &a))
        return;
    kvt_api_error e;
    kvt_jg_schema *g = NULL;
    CHECK(kvt_api_grammar(&a, KVT_CHAT_MISTRAL, &g, &e) == 0 && g);
    if (g) {
        const char *call = "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]";
        kvt_jg *j = kvt_jg_new(g, NULL);
        CHECK(kvt_jg_feed(j, call, strlen(call)) == 0 && kvt_jg_done(j));
        kvt_jg_free(j);
    }
    kvt_jg_schema_free(g);
    kvt_api_request_free(&a);
}

static void test_parse_calls(void) {
    kvt_api_call *calls;
    char *content;
    const char *two = "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
                      "{\"arguments\":{\"x\":[1,2]},\"name\":\"b\"}\n</tool_call>";
    size_t k = kvt_api_parse_calls(KVT_CHAT_CHATML, two, 1, "r-1", &calls, &content);
    CHECK(k == 2 && !strcmp(content, "Let me check.") && !strcmp(calls[1].name, "b") &&
          !strcmp(calls[1].arguments, "{\"x\":[1,2]}") && !strcmp(calls[1].id, "call_1_1"));
    kvt_api_calls_free(calls, k);
    free(content);
    k = kvt_api_parse_calls(KVT_CHAT_CHATML, two, 0, "r-1", &calls, &content);
    CHECK(k == 1 && !strcmp(calls[0].name, "a"));
    kvt_api_calls_free(calls, k);
    free(content);
    static const char *const none[] = {"plain text", "<tool_call>\nnot json\n</tool_call>", "<tool_call>{\"name\": 5}"};
    for (size_t i = 0; i < KVT_ARRAY_LEN(none); i++) {
        k = kvt_api_parse_calls(KVT_CHAT_CHATML, none[i], 1, "r", &calls, &content);
        CHECKF(k == 0 && !calls, "%s", none[i]);
    }
    k = kvt_api_parse_calls(KVT_CHAT_LLAMA3, "plain", 1, "r", &calls, &content);
    CHECK(k == 0);
}

/* Text the token budget cut, read back (kvt_api_parse_cut_calls) in each family's style: the calls
 * before the cut one, complete, and the cut one as far as it got; parallel_tool_calls false keeps a
 * first call that closed before the cut as the whole answer (complete). */
typedef struct {
    kvt_chat_family f;
    int parallel;
    const char *text;
    size_t n;            /* calls returned */
    int complete;        /* the answer is whole: the cut lies past what parallel 0 keeps */
    const char *content; /* NULL: none (the text is the content) */
    const char *names;   /* the calls' names, joined with ',' */
    const char *last;    /* the last call's arguments */
} cut_case;

#define CALL_A "{\"name\": \"a\", \"arguments\": {\"x\": 1}}"
#define CHATML_A "<tool_call>\n" CALL_A "\n</tool_call>\n"

static void test_cut_calls(void) {
    static const cut_case cases[] = {
        /* a complete call, then a second one cut: parallel keeps both, parallel false the first, whole */
        {KVT_CHAT_CHATML, 1, "Hi\n" CHATML_A "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"y\": ", 2, 0, "Hi",
         "a,b", "{\"y\": "},
        {KVT_CHAT_CHATML, 0, "Hi\n" CHATML_A "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"y\": ", 1, 1, "Hi", "a",
         "{\"x\": 1}"},
        /* the second cut before its name was whole */
        {KVT_CHAT_CHATML, 1, CHATML_A "<tool_call>\n{\"na", 1, 0, "", "a", "{\"x\": 1}"},
        {KVT_CHAT_CHATML, 0, CHATML_A "<tool_call>\n{\"na", 1, 1, "", "a", "{\"x\": 1}"},
        /* the first call cut after its arguments closed: they end there, the markup after them is not theirs */
        {KVT_CHAT_CHATML, 0, "<tool_call>\n" CALL_A "\n</tool_", 1, 0, "", "a", "{\"x\": 1}"},
        {KVT_CHAT_CHATML, 1, "Sure <tool_call>\n{\"na", 0, 0, "Sure", "", NULL},
        {KVT_CHAT_CHATML, 1, "plain text", 0, 0, NULL, "", NULL},
        /* Mistral's one array: its whole objects are the complete calls, the open one the cut call */
        {KVT_CHAT_MISTRAL, 1, "[TOOL_CALLS][" CALL_A ", {\"name\": \"b\", \"arguments\": {\"y\": [1, ", 2, 0, "", "a,b",
         "{\"y\": [1, "},
        {KVT_CHAT_MISTRAL, 0, "[TOOL_CALLS][" CALL_A ", {\"name\": \"b\", \"arguments\": {\"y\": [1, ", 1, 1, "", "a",
         "{\"x\": 1}"},
        {KVT_CHAT_MISTRAL, 1, "Ok [TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": \"}", 1, 0, "Ok", "a",
         "{\"x\": \"}"},
        {KVT_CHAT_MISTRAL, 0, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}", 1, 0, "", "a", "{\"x\": 1}"},
        {KVT_CHAT_MISTRAL, 1, "[TOOL_CALLS][" CALL_A ", ", 1, 0, "", "a", "{\"x\": 1}"},
        {KVT_CHAT_MISTRAL, 0, "[TOOL_CALLS][" CALL_A ", ", 1, 1, "", "a", "{\"x\": 1}"},
        {KVT_CHAT_MISTRAL, 1, "Text [TOOL_CALLS][{\"name\": \"a", 0, 0, "Text", "", NULL},
        {KVT_CHAT_MISTRAL, 1, "[TOOL_CALLS]{\"name\": \"a\", \"arguments\": {", 0, 0, NULL, "", NULL},
        {KVT_CHAT_MISTRAL, 1, "[TOOL_CALLS][{\"name\": 5}, {\"name\": \"a\", \"arguments\": {", 0, 0, NULL, "", NULL},
        /* Llama 3: the reply is the call */
        {KVT_CHAT_LLAMA3, 1, "{\"name\": \"a\", \"parameters\": {\"x\": 1", 1, 0, "", "a", "{\"x\": 1"},
        {KVT_CHAT_LLAMA3, 1, "{\"na", 0, 0, NULL, "", NULL},
    };
    for (size_t i = 0; i < KVT_ARRAY_LEN(cases); i++) {
        const cut_case *t = &cases[i];
        kvt_api_call *calls;
        char *content, names[64] = "";
        int complete = -1;
        size_t n = kvt_api_parse_cut_calls(t->f, t->text, t->parallel, "chatcmpl-r7", &calls, &content, &complete);
        for (size_t k = 0; k < n; k++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? "," : "", calls[k].name);
        CHECKF(n == t->n && complete == t->complete && !strcmp(names, t->names),
               "case %zu: %zu calls (%s), complete %d; want %zu (%s), %d", i, n, names, complete, t->n, t->names,
               t->complete);
        CHECKF(t->content ? content && !strcmp(content, t->content) : !content, "case %zu: content '%s'", i,
               content ? content : "(null)");
        if (n == t->n && n) {
            CHECKF(!strcmp(calls[n - 1].arguments, t->last), "case %zu: arguments '%s', want '%s'", i,
                   calls[n - 1].arguments, t->last);
            char id[32];
            snprintf(id, sizeof id, "call_r7_%zu", n - 1);
            CHECKF(!strcmp(calls[n - 1].id, id), "case %zu: id %s", i, calls[n - 1].id);
        }
        kvt_api_calls_free(calls, n);
        free(content);
    }
}

/* Remembers, as the server does for a reply it generated (response id rid, tenant salt), the calls read
 * out of generated text in family f's style. */
static void generate_split(kvt_call_memo *memo, kvt_chat_family f, const char *salt, const char *rid,
                           const char *generated, int parallel, const char *reasoning, const char *answer) {
    kvt_api_call *calls;
    char *content;
    size_t k = kvt_api_parse_calls(f, generated, parallel, rid, &calls, &content);
    CHECKF(k > 0, "%s", generated);
    kvt_call_memo_put(memo, f, salt, strlen(salt), calls, k, content, reasoning, answer, generated);
    kvt_api_calls_free(calls, k);
    free(content);
}

static void generate(kvt_call_memo *memo, kvt_chat_family f, const char *salt, const char *rid, const char *generated,
                     int parallel) {
    generate_split(memo, f, salt, rid, generated, parallel, NULL, NULL);
}

/* The text family f renders the assistant message of {"messages":[user, assistant]} with, under salt
 * (malloc'd). */
static char *turn_text(kvt_call_memo *memo, kvt_chat_family f, const char *salt, const char *assistant) {
    char body[2048];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"Paris?\"},%s]}", assistant);
    kvt_api_request a;
    if (parse(body, &a)) return kvt_xstrdup("(does not parse)");
    size_t n, last;
    char **arena;
    kvt_chat_msg *m = kvt_api_messages(&a, f, memo, salt, strlen(salt), &n, &last, &arena);
    char *out = kvt_xstrdup(n == 2 ? m[1].content : "(not two messages)");
    kvt_api_messages_free(m, arena);
    kvt_api_request_free(&a);
    return out;
}

static void expect_turn(kvt_call_memo *memo, kvt_chat_family f, const char *salt, const char *assistant,
                        const char *want, const char *what) {
    char *got = turn_text(memo, f, salt, assistant);
    CHECKF(!strcmp(got, want), "%s: %s", what, got);
    free(got);
}

#define WEATHER_CALL(id, args) \
    "\"tool_calls\":[{\"id\":\"" id \
    "\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"" args "\"}}]}"

/* A reply whose calls come back unchanged (the same ids and names in the same order, arguments
 * that are the same JSON however re-serialized, the same content) renders as the text the model
 * generated, whatever whitespace it wrote around and inside its calls, so its ids splice back; a
 * changed call, content, id or tenant renders from the calls, and so does a reply whose text holds
 * more than the answer gave (a call parallel_tool_calls false dropped, text after the calls) or
 * whose text the reply map no longer holds. */
static void test_generated_turns(void) {
    kvt_call_memo *memo = kvt_call_memo_new(64, NULL);
    const char *g1 = "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                     "</tool_call>\n";
    const char *family1 = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                          "\"Paris\"}}\n</tool_call>";
    generate(memo, KVT_CHAT_CHATML, "t1", "chatcmpl-ab", g1, 1);
    const char *back = "{\"role\":\"assistant\",\"content\":\"Let me check.\"," WEATHER_CALL(
        "call_ab_0", "{\\\"city\\\":\\\"Paris\\\"}");
    expect_turn(memo, KVT_CHAT_CHATML, "t1", back, g1, "sent back re-serialized: the generated text");
    expect_turn(memo, KVT_CHAT_CHATML, "t2", back,
                "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n"
                "</tool_call>",
                "another tenant: the calls as sent");
    expect_turn(memo, KVT_CHAT_CHATML, "t1",
                "{\"role\":\"assistant\",\"content\":\"Let me check.\"," WEATHER_CALL("call_ab_0",
                                                                                      "{\\\"city\\\":\\\"Oslo\\\"}"),
                "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\"}}\n"
                "</tool_call>",
                "changed arguments: the calls as sent");
    expect_turn(memo, KVT_CHAT_CHATML, "t1",
                "{\"role\":\"assistant\",\"content\":\"I will check.\"," WEATHER_CALL("call_ab_0",
                                                                                      "{\\\"city\\\":\\\"Paris\\\"}"),
                "I will check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                "</tool_call>",
                "changed content: the family's rendering, with the generated arguments");
    expect_turn(memo, KVT_CHAT_CHATML, "t1",
                "{\"role\":\"assistant\",\"content\":\"Let me check.\"," WEATHER_CALL("call_zz_0",
                                                                                      "{\\\"city\\\": \\\"Paris\\\"}"),
                family1, "another call id: the family's rendering");
    /* parallel_tool_calls false kept the first of two calls: the text holds one the client never got */
    const char *two = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
                      "{\"name\": \"add\", \"arguments\": {}}\n</tool_call>";
    generate(memo, KVT_CHAT_CHATML, "t1", "chatcmpl-cd", two, 0);
    expect_turn(memo, KVT_CHAT_CHATML, "t1", "{\"role\":\"assistant\",\"content\":null," WEATHER_CALL("call_cd_0", "{}"),
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>", "a dropped call");
    generate(memo, KVT_CHAT_CHATML, "t1", "chatcmpl-ef",
             "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>\nDone.", 1);
    expect_turn(memo, KVT_CHAT_CHATML, "t1", "{\"role\":\"assistant\",\"content\":null," WEATHER_CALL("call_ef_0", "{}"),
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>", "text after the call");
    /* Llama 3: compact JSON, which the family writes with spaces */
    const char *g3 = "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Paris\"}}";
    generate(memo, KVT_CHAT_LLAMA3, "t1", "chatcmpl-gh", g3, 1);
    expect_turn(memo, KVT_CHAT_LLAMA3, "t1",
                "{\"role\":\"assistant\",\"content\":null," WEATHER_CALL("call_gh_0", "{\\\"city\\\": \\\"Paris\\\"}"),
                g3, "llama3, sent back re-serialized: the generated text");
    kvt_call_memo_free(memo);
    /* with a reply map, only while it holds the reply's text (and so its ids) */
    kvt_reply_map *replies = kvt_reply_map_new(16, 1024);
    memo = kvt_call_memo_new(64, replies);
    generate(memo, KVT_CHAT_CHATML, "t1", "chatcmpl-ab", g1, 1);
    expect_turn(memo, KVT_CHAT_CHATML, "t1", back, family1,
                "a reply the reply map does not hold: the family's rendering");
    static const int32_t ids[] = {5, 6, 7};
    kvt_reply_map_put(replies, "t1", 2, g1, ids, 3);
    expect_turn(memo, KVT_CHAT_CHATML, "t1", back, g1, "once it holds it: the generated text");
    kvt_call_memo_free(memo);
    kvt_reply_map_free(replies);
}

/* Qwen3: a reply whose reasoning comes before its calls, answered split into reasoning_content and
 * content. Sent back so (or whole, with reasoning_format none), the built-in rendering writes the
 * turn as its generated text, and a template gets the text after the reasoning as its content (it
 * writes reasoning_content in front itself); without its reasoning, or with other reasoning, the
 * turn renders from its calls, with the reasoning sent in front as Qwen3's template writes it. */
static void test_reasoning_turns(void) {
    kvt_call_memo *memo = kvt_call_memo_new(64, NULL);
    const char *g = "<think>\nplan the call\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                    "{\"city\":\"Paris\"}}\n</tool_call>\n";
    const char *calls = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>";
    generate_split(memo, KVT_CHAT_QWEN3, "t1", "chatcmpl-q3", g, 1, "plan the call", "");
#define Q3_CALL WEATHER_CALL("call_q3_0", "{\\\"city\\\": \\\"Paris\\\"}")
    const char *split = "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"plan the call\"," Q3_CALL;
    expect_turn(memo, KVT_CHAT_QWEN3, "t1", split, g, "sent back split: the generated text");
    expect_turn(memo, KVT_CHAT_QWEN3, "t1",
                "{\"role\":\"assistant\",\"content\":\"<think>\\nplan the call\\n</think>\"," Q3_CALL, g,
                "sent back whole (reasoning_format none): the generated text");
    expect_turn(memo, KVT_CHAT_QWEN3, "t1", "{\"role\":\"assistant\",\"content\":null," Q3_CALL, calls,
                "without its reasoning: the calls");
    char want[512];
    snprintf(want, sizeof want, "<think>\nanother plan\n</think>\n\n%s", calls);
    expect_turn(memo, KVT_CHAT_QWEN3, "t1",
                "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"another plan\"," Q3_CALL, want,
                "other reasoning: that reasoning, then the calls");
    expect_turn(memo, KVT_CHAT_QWEN3, "t2", split,
                "<think>\nplan the call\n</think>\n\n<tool_call>\n{\"name\": "
                "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                "another tenant: from the calls");
    /* a template: the content is the generated text after its reasoning */
    char body[1024];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"Paris?\"},%s]}", split);
    kvt_api_request a;
    if (!parse(body, &a)) {
        char *t = kvt_api_calls_turn(&a, 1, KVT_CHAT_QWEN3, memo, "t1", 2);
        CHECKF(!strncmp(t, calls, strlen(calls)) && !strcmp(t + strlen(calls), "\n"), "template content: %s", t);
        free(t);
        kvt_api_request_free(&a);
    }
#undef Q3_CALL
    kvt_call_memo_free(memo);
}

/* The forced grammar accepts exactly the text a call renders as. */
static void test_forced_grammar(void) {
    kvt_api_request a;
    if (parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[" TOOL "],\"tool_choice\":\"required\"}",
              &a))
        return;
    kvt_api_error e;
    kvt_jg_schema *g = NULL;
    CHECK(kvt_api_grammar(&a, KVT_CHAT_CHATML, &g, &e) == 0 && g);
    if (g) {
        const char *call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
        kvt_jg *m = kvt_jg_new(g, NULL);
        CHECK(kvt_jg_feed(m, call, strlen(call)) == 0 && kvt_jg_done(m));
        kvt_jg_free(m);
        m = kvt_jg_new(g, NULL);
        CHECK(kvt_jg_feed(m, " <tool_call>", 12) != 0); /* nothing before the head */
        kvt_jg_free(m);
        m = kvt_jg_new(g, NULL);
        const char *bad = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}";
        CHECK(kvt_jg_feed(m, bad, strlen(bad)) != 0); /* city is required */
        kvt_jg_free(m);
    }
    kvt_jg_schema_free(g);
    kvt_api_request_free(&a);
}

/* 1 when text, from the spec's trigger on, is a document of first, then any of next, then end. */
static int lazy_follows(const kvt_jg_lazy_spec *sp, const char *text) {
    const char *p = strstr(text, sp->trigger);
    if (!p) return 0;
    p += strlen(sp->trigger);
    for (const kvt_jg_schema *s = sp->first; s; s = sp->next) {
        kvt_jg *m = kvt_jg_new(s, NULL);
        while (*p && !kvt_jg_done(m) && kvt_jg_feed(m, p, 1) == 0) p++;
        int done = kvt_jg_done(m);
        kvt_jg_free(m);
        if (!done) return 0;
        if (!strcmp(p, sp->end)) return 1;
        if (!sp->next) return 0;
    }
    return 0;
}

/* Under auto, the lazy grammar of each family takes the calls as kvtier renders them, from the
 * family's opening on; strict decides what a schema kvtier cannot compile does. */
static void test_lazy_grammar(void) {
    static const kvt_chat_family fams[] = {KVT_CHAT_CHATML, KVT_CHAT_MISTRAL, KVT_CHAT_LLAMA3};
    static const char *const triggers[] = {"<tool_call>", "[TOOL_CALLS]", "{"};
    kvt_api_call two[2] = {{.name = "get_weather", .arguments = "{\"city\": \"Oslo\"}"},
                           {.name = "get_weather", .arguments = "{\"city\": \"Rome\"}"}};
    for (int par = 0; par < 2; par++)
        for (int i = 0; i < 3; i++) {
            char body[512];
            snprintf(body, sizeof body,
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[" TOOL
                     "],\"parallel_tool_calls\":%s}",
                     par ? "true" : "false");
            kvt_api_request a;
            if (parse(body, &a)) continue;
            kvt_api_error e;
            kvt_jg_lazy_spec *sp = NULL;
            CHECK(kvt_api_lazy_grammar(&a, fams[i], &sp, &e) == 0 && sp);
            if (sp) {
                int many = par && fams[i] != KVT_CHAT_LLAMA3; /* Llama 3 writes one call a reply */
                char *one = kvt_api_calls_render(fams[i], "Let me look.", two, 1);
                char *both = kvt_api_calls_render(fams[i], "", two, 2);
                CHECKF(!strcmp(sp->trigger, triggers[i]) && sp->anchored == (fams[i] == KVT_CHAT_LLAMA3),
                       "family %d: trigger %s", i, sp->trigger);
                CHECKF(lazy_follows(sp, fams[i] == KVT_CHAT_LLAMA3 ? strchr(one, '{') : one), "family %d: %s", i, one);
                CHECKF(lazy_follows(sp, both) == many, "family %d, parallel %d: %s", i, par, both);
                char bad[256];
                snprintf(bad, sizeof bad, "%s{\"name\": \"nope\"", triggers[i]);
                CHECK(!lazy_follows(sp, bad));
                free(one);
                free(both);
            }
            kvt_jg_lazy_spec_free(sp);
            kvt_api_request_free(&a);
        }
    /* a schema kvtier cannot compile: strict is refused naming tools, else any JSON object */
    for (int strict = 0; strict < 2; strict++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
                 "\"function\":{\"name\":\"f\",\"strict\":%s,\"parameters\":{\"type\":\"object\",\"properties\":"
                 "{\"h\":{\"type\":\"string\",\"format\":\"hostname\"}}}}}]}",
                 strict ? "true" : "false");
        kvt_api_request a;
        if (parse(body, &a)) continue;
        kvt_api_error e;
        kvt_jg_lazy_spec *sp = NULL;
        int rc = kvt_api_lazy_grammar(&a, KVT_CHAT_CHATML, &sp, &e);
        if (strict) {
            CHECKF(rc && e.status == 400 && !strcmp(e.param, "tools") && strstr(e.message, "hostname"), "rc %d", rc);
        } else {
            CHECK(rc == 0 && sp);
            CHECK(sp && lazy_follows(sp, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"any\": [1]}}\n</tool_call>"));
        }
        kvt_jg_lazy_spec_free(sp);
        kvt_api_request_free(&a);
    }
}

static void test_errors(void) {
    const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char body[1024];
    snprintf(body, sizeof body, "{%s,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}", m);
    expect_error(body, "tools", "name");
    snprintf(body, sizeof body, "{%s,\"tools\":[" TOOL "," TOOL "]}", m);
    expect_error(body, "tools", "two tools");
    snprintf(body, sizeof body, "{%s,\"tool_choice\":\"required\"}", m);
    expect_error(body, "tool_choice", "no 'tools'");
    snprintf(body, sizeof body, "{%s,\"tool_choice\":\"sometimes\"}", m);
    expect_error(body, "tool_choice", NULL);
    /* a tool_choice object of another type than "function" is not taken as a named function */
    snprintf(body, sizeof body,
             "{%s,\"tools\":[" TOOL "],\"tool_choice\":{\"type\":\"custom\",\"function\":{\"name\":"
             "\"get_weather\"}}}",
             m);
    expect_error(body, "tool_choice", "'tool_choice.type' must be \"function\"");
    snprintf(body, sizeof body, "{%s,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":1}}]}",
             m);
    expect_error(body, "tools[0].function.strict", "must be a boolean or null");
    snprintf(body, sizeof body, "{%s,\"parallel_tool_calls\":1}", m);
    expect_error(body, "parallel_tool_calls", NULL);
    snprintf(body, sizeof body, "{%s,\"response_format\":{\"type\":\"xml\"}}", m);
    expect_error(body, "response_format", NULL);
    snprintf(body, sizeof body,
             "{%s,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"oneOf\":[]}}}}", m);
    expect_error(body, "response_format", "'oneOf'");
    snprintf(body, sizeof body,
             "{%s,\"response_format\":{\"type\":\"json_object\"},\"json_schema\":{\"type\":\"object\"}}", m);
    expect_error(body, "json_schema", NULL);
    snprintf(body, sizeof body, "{%s,\"functions\":[{\"name\":\"f\"}]}", m);
    expect_error(body, "functions", NULL);
    snprintf(
        body, sizeof body,
        "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":{}}}]}]}");
    expect_error(body, "messages[0].tool_calls[0].function.arguments", "must be a string");
    /* a message whose content is bad after its tool calls and reasoning were read: nothing of it is kept */
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"assistant\",\"reasoning_content\":\"r\",\"content\":[{\"type\":"
             "\"image_url\"}],\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\","
             "\"arguments\":\"{}\"}}]}]}");
    expect_error(body, "messages[0].content", "only text parts");
    kvt_api_request r;
    kvt_api_error e;
    const char *p = "{\"prompt\":\"x\",\"tools\":[" TOOL "]}";
    CHECK(checked_parse(KVT_API_COMPLETION, p, &r, &e) == KVT_EARG && !strcmp(e.param, "tools"));
}

int main(void) {
    test_chatml_rendering();
    test_llama3_rendering();
    test_mistral_rendering();
    test_parse_calls();
    test_cut_calls();
    test_generated_turns();
    test_reasoning_turns();
    test_forced_grammar();
    test_lazy_grammar();
    test_errors();
    return kvt_test_done("test_api_tools");
}
