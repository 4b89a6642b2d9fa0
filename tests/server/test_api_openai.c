// SPDX-License-Identifier: MIT
/* api_openai.c and chat.c without a server: request validation (types,
 * ranges, defaults), UTF-8 sanitizing and holding back split characters,
 * response shapes, ChatML rendering with reply-id splicing, the reply map. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "api_body.h"
#include "api_openai.h"
#include "api_response.h"
#include "api_utf8.h"
#include "chat.h"
#include "common.h"
#include "mkmodel.h"
#include "model.h"
#include "testutil.h"

#define TEST_CTX 16 /* context of the parser tests: prompts of token ids stay under it */

/* body[0..len) as the server reads it: the strict check every POST body gets (api_body.h), then the parser. */
static int parse_len(kvt_api_kind k, const char *body, size_t len, kvt_api_request *r, kvt_api_error *e) {
    if (kvt_api_check_body(k == KVT_API_CHAT ? KVT_BODY_CHAT : KVT_BODY_COMPLETION, body, len, 0, e)) {
        memset(r, 0, sizeof *r);
        return KVT_EARG;
    }
    return kvt_api_parse(k, body, len, 100, TEST_CTX, 64, r, e);
}

static int parse(kvt_api_kind k, const char *json, kvt_api_request *r, kvt_api_error *e) {
    return parse_len(k, json, strlen(json), r, e);
}

#define Q0 "{\"role\":\"user\",\"content\":\"q\"}"

/* The request fails with status 400 naming param (NULL: none). */
static void expect_error(kvt_api_kind k, const char *json, const char *param) {
    kvt_api_request r;
    kvt_api_error e;
    int rc = parse(k, json, &r, &e);
    CHECKF(rc == KVT_EARG && e.status == 400, "%s", json);
    if (rc == KVT_EARG) {
        CHECKF(param ? e.param && !strcmp(e.param, param) : !e.param, "%s: param %s", json, e.param ? e.param : "null");
    } else {
        kvt_api_request_free(&r);
    }
}

static void test_parse(void) {
    kvt_api_request r;
    kvt_api_error e;
    CHECK(parse(KVT_API_COMPLETION,
                "{\"prompt\":\"hi\",\"max_tokens\":5,\"temperature\":0,\"top_p\":0.5,\"top_k\":3,"
                "\"seed\":-7,\"stop\":[\"a\",\"bc\"],\"stream\":true,"
                "\"stream_options\":{\"include_usage\":true},\"cache_salt\":\"s\",\"user\":\"x\"}",
                &r, &e) == 0);
    CHECK(!strcmp(r.prompt, "hi") && r.max_tokens == 5 && r.temperature == 0 && r.top_p == 0.5f && r.top_k == 3);
    CHECK(r.has_seed && r.seed == (uint64_t)(int64_t)-7 && r.n_stop == 2 && !strcmp(r.stop[1], "bc"));
    CHECK(r.stream && r.include_usage && !strcmp(r.cache_salt, "s"));
    kvt_api_request_free(&r);

    CHECK(parse(KVT_API_COMPLETION, "{\"prompt\":[1,2,3],\"max_completion_tokens\":7,\"max_tokens\":3}", &r, &e) == 0);
    CHECK(r.n_prompt_ids == 3 && r.prompt_ids[2] == 3 && r.max_tokens == 7);
    CHECK(r.temperature == 1 && r.top_p == 1 && !r.has_seed && !r.stream && !r.cache_salt && !r.ignore_eos);
    kvt_api_request_free(&r);

    /* max_tokens -1: llama-server's "no limit" (its web UI's default), the server's default as when absent */
    CHECK(parse(KVT_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":-1}", &r, &e) == 0 &&
          r.max_tokens == 0);
    kvt_api_request_free(&r);
    expect_error(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens");
    expect_error(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":-2}", "max_tokens");

    CHECK(parse(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"ignore_eos\":true}", &r, &e) == 0 && r.ignore_eos);
    kvt_api_request_free(&r);
    expect_error(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"ignore_eos\":\"yes\"}", "ignore_eos");

    CHECK(parse(KVT_API_CHAT,
                "{\"messages\":[{\"role\":\"developer\",\"content\":\"s\"},{\"role\":\"user\",\"content\":"
                "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],\"stop\":\"x\"}",
                &r, &e) == 0);
    /* text parts are joined with a newline, as llama-server and vLLM join them */
    CHECK(r.n_msgs == 2 && !strcmp(r.msgs[0].role, "system") && !strcmp(r.msgs[1].content, "a\nb") && r.n_stop == 1);
    kvt_api_request_free(&r);
    CHECK(
        parse(
            KVT_API_CHAT,
            "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"\"},"
            "{\"type\":\"text\",\"text\":\"b\"},{\"type\":\"text\",\"text\":\"\"},{\"type\":\"text\",\"text\":\"c\"}]}]}",
            &r, &e) == 0);
    CHECKF(r.n_msgs == 1 && !strcmp(r.msgs[0].content, "b\n\nc"), "no newline after an empty start: '%s'",
           r.n_msgs ? r.msgs[0].content : "");
    kvt_api_request_free(&r);

    expect_error(KVT_API_COMPLETION, "{\"prompt\":", NULL);
    expect_error(KVT_API_COMPLETION, "[]", NULL);
    expect_error(KVT_API_COMPLETION, "{}", "prompt");
    expect_error(KVT_API_COMPLETION, "{\"prompt\":true}", "prompt");
    expect_error(KVT_API_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", "prompt");
    expect_error(KVT_API_COMPLETION, "{\"prompt\":[1,100]}", "prompt"); /* outside the vocabulary */
    expect_error(KVT_API_COMPLETION, "{\"prompt\":[1,2.5]}", "prompt");
    /* llama-server's mixed prompt: strings and token ids in one array are one prompt, kept whole for the
     * server to tokenize; what is wrong in it is a 400 naming prompt */
    CHECK(parse(KVT_API_COMPLETION, "{\"prompt\":[\"a\",1,\"b\"]}", &r, &e) == 0);
    CHECK(r.prompt_mixed && cJSON_GetArraySize(r.prompt_mixed) == 3 && !r.prompt && !r.prompt_ids);
    kvt_api_request_free(&r);
    CHECK(parse(KVT_API_COMPLETION, "{\"prompt\":[1,\"a\"]}", &r, &e) == 0 && r.prompt_mixed);
    kvt_api_request_free(&r);
    expect_error(KVT_API_COMPLETION, "{\"prompt\":[\"a\",1,100]}", "prompt");
    expect_error(KVT_API_COMPLETION, "{\"prompt\":[\"a\",1.5]}", "prompt");
    expect_error(KVT_API_COMPLETION, "{\"prompt\":[\"a\",1,[2]]}", "prompt");
    expect_error(KVT_API_COMPLETION, "{\"prompt\":[\"a\",1,null]}", "prompt");
    expect_error(KVT_API_COMPLETION, "{\"prompt\":[\"\",1]}", "prompt");
    expect_error(KVT_API_COMPLETION, "{\"prompt\":[1,{}]}", "prompt");
    CHECK(parse(KVT_API_COMPLETION, "{\"prompt\":[\"a\",1,-1]}", &r, &e) == KVT_EARG &&
          strstr(e.message, "prompt[2] is a token id outside [0, 100)"));
    expect_error(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":65}", "max_tokens"); /* over the limit */
    expect_error(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":1.5}", "max_tokens");
    expect_error(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":\"3\"}", "max_tokens");
    expect_error(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"temperature\":3}", "temperature");
    expect_error(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"top_p\":0}", "top_p");
    expect_error(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"n\":17}", "n");
    kvt_api_request two;
    kvt_api_error e2;
    CHECK(parse(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"n\":2}", &two, &e2) == 0 && two.n == 2);
    kvt_api_request_free(&two);
    expect_error(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"stream\":1}", "stream");
    expect_error(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"stream_options\":[]}", "stream_options");
    /* options of a stream that was not asked for are refused, as OpenAI does; null stays fine */
    expect_error(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}", "stream_options");
    expect_error(KVT_API_CHAT,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":false,\"stream_options\":{}}",
                 "stream_options");
    CHECK(parse(KVT_API_CHAT,
                "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":false,\"stream_options\":null}", &r,
                &e) == 0);
    kvt_api_request_free(&r);
    expect_error(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":1}}",
                 "stream_options.include_usage");
    expect_error(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"stop\":[1]}", "stop[0]"); /* the item's place */
    expect_error(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"cache_salt\":1}", "cache_salt");
    expect_error(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"model\":1}", "model");
    /* logit_bias keys are token ids written one way only, so no two name one token (their biases would add) */
    CHECK(parse(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"0\":1,\"5\":-100,\"99\":100}}", &r, &e) == 0);
    CHECK(r.n_bias == 3 && r.bias_id[0] == 0 && r.bias_id[1] == 5 && r.bias[1] == -100 && r.bias_id[2] == 99);
    kvt_api_request_free(&r);
    static const char *const bad_keys[] = {"05", " 5", "+5", "5 ", "-0", "1e1", "", "100", "99999999999999999999"};
    for (size_t i = 0; i < KVT_ARRAY_LEN(bad_keys); i++) {
        char body[128];
        snprintf(body, sizeof body, "{\"prompt\":\"x\",\"logit_bias\":{\"5\":-100,\"%s\":-100}}", bad_keys[i]);
        expect_error(KVT_API_COMPLETION, body, "logit_bias");
    }
    expect_error(KVT_API_CHAT, "{\"messages\":[]}", "messages");
    /* the legacy function_call: "none" and "auto" change nothing, anything else is refused */
    static const char *const legacy[] = {"none", "auto"};
    for (size_t i = 0; i < KVT_ARRAY_LEN(legacy); i++) {
        char body[128];
        snprintf(body, sizeof body, "{\"messages\":[" Q0 "],\"function_call\":\"%s\"}", legacy[i]);
        CHECKF(parse(KVT_API_CHAT, body, &r, &e) == 0, "%s: %s", body, e.message);
        kvt_api_request_free(&r);
    }
    expect_error(KVT_API_CHAT, "{\"messages\":[" Q0 "],\"function_call\":\"required\"}", "function_call");
    expect_error(KVT_API_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role");
    expect_error(KVT_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages[0].content");
    expect_error(KVT_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
                 "messages[0].content");
    /* an assistant's reasoning_content sent back: kept beside its content; a non-string is a 400 */
    CHECK(parse(KVT_API_CHAT,
                "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"a\","
                "\"reasoning_content\":\"r\"},{\"role\":\"user\",\"content\":\"q2\",\"reasoning_content\":\"x\"}]}",
                &r, &e) == 0);
    CHECK(r.msg_tools[1].reasoning && !strcmp(r.msg_tools[1].reasoning, "r") && !strcmp(r.msgs[1].content, "a"));
    CHECK(!r.msg_tools[0].reasoning && !r.msg_tools[2].reasoning); /* only an assistant's is read */
    kvt_api_request_free(&r);
    expect_error(KVT_API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":1}]}",
                 "messages[0].reasoning_content");
    /* kvtier.documents: an id names one document, so an id given twice is a 400 naming the second */
    expect_error(KVT_API_CHAT,
                 "{\"messages\":[" Q0 "],\"kvtier\":{\"documents\":[{\"id\":\"a\",\"text\":\"x\"},"
                 "{\"id\":\"b\",\"text\":\"y\"},{\"id\":\"a\",\"text\":\"z\"}]}}",
                 "kvtier.documents[2].id");
    expect_error(KVT_API_COMPLETION,
                 "{\"prompt\":\"q\",\"kvtier\":{\"documents\":[{\"id\":\"\u00e9\",\"text\":\"x\"},"
                 "{\"id\":\"\u00e9\",\"text\":\"x\"}]}}",
                 "kvtier.documents[1].id");
    int ok = parse(KVT_API_CHAT,
                   "{\"messages\":[" Q0 "],\"kvtier\":{\"documents\":[{\"id\":\"a\",\"text\":\"x\"},"
                   "{\"id\":\"A\",\"text\":\"x\"}]}}",
                   &r, &e) == 0;
    CHECK(ok && r.n_docs == 2); /* ids are compared byte for byte */
    if (ok) kvt_api_request_free(&r);
}

/* The request fails with a 400 whose param is param and whose message holds words. */
static void expect_message(const char *json, const char *param, const char *code, const char *words) {
    kvt_api_request r;
    kvt_api_error e;
    int rc = parse(KVT_API_CHAT, json, &r, &e);
    CHECKF(rc == KVT_EARG && e.status == 400 && e.param && !strcmp(e.param, param) && e.code && !strcmp(e.code, code) &&
               strstr(e.message, words),
           "%s: rc %d param %s code %s message %s", json, rc, rc && e.param ? e.param : "-",
           rc && e.code ? e.code : "-", rc ? e.message : "-");
    if (!rc) kvt_api_request_free(&r);
}

/* Each message carries what its role needs, as OpenAI requires: content (an assistant's may be
 * left out when it carries tool calls), a tool result's tool_call_id, a known role; the 400 names
 * the field with its index. */
static void test_message_fields(void) {
#define Q "{\"role\":\"user\",\"content\":\"q\"}"
#define CALL "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]"
    expect_message("{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content", "missing_required_parameter",
                   "messages[0].content is required");
    expect_message("{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":null}]}",
                   "messages[1].content", "missing_required_parameter", "messages[1]");
    expect_message("{\"messages\":[{\"role\":\"user\",\"content\":[]}]}", "messages[0].content",
                   "missing_required_parameter", "messages[0]");
    expect_message("{\"messages\":[{\"role\":\"system\"}," Q "]}", "messages[0].content", "missing_required_parameter",
                   "role 'system'");
    expect_message("{\"messages\":[" Q ",{\"role\":\"assistant\"}]}", "messages[1].content",
                   "missing_required_parameter", "tool_calls");
    expect_message("{\"messages\":[" Q ",{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[]}]}",
                   "messages[1].content", "missing_required_parameter", "messages[1]");
    expect_message("{\"messages\":[" Q ",{\"role\":\"assistant\"," CALL "},{\"role\":\"tool\",\"content\":\"r\"}]}",
                   "messages[2].tool_call_id", "missing_required_parameter", "messages[2].tool_call_id");
    expect_message("{\"messages\":[" Q ",{\"role\":\"tool\",\"tool_call_id\":5,\"content\":\"r\"}]}",
                   "messages[1].tool_call_id", "invalid_type", "messages[1]");
    expect_message("{\"messages\":[" Q ",{\"role\":\"tool\",\"tool_call_id\":\"c1\"}]}", "messages[1].content",
                   "missing_required_parameter", "role 'tool'");
    /* a result must answer a call an earlier assistant message made: not another id, not a later call */
    expect_message("{\"messages\":[" Q ",{\"role\":\"assistant\"," CALL "},{\"role\":\"tool\",\"tool_call_id\":\"c9\","
                   "\"content\":\"r\"}]}",
                   "messages[2].tool_call_id", "invalid_value", "'c9' answers no call");
    expect_message("{\"messages\":[" Q ",{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"r\"},{\"role\":"
                   "\"assistant\"," CALL "}]}",
                   "messages[1].tool_call_id", "invalid_value", "messages[1].tool_call_id 'c1' answers no call");
    expect_message("{\"messages\":[" Q ",{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"r\"}]}",
                   "messages[1].tool_call_id", "invalid_value", "earlier assistant message");
    expect_message("{\"messages\":[" Q ",{\"role\":\"robot\",\"content\":\"x\"}]}", "messages[1].role", "invalid_value",
                   "'robot'");
    expect_message("{\"messages\":[" Q ",7]}", "messages[1]", "invalid_type",
                   "'messages[1]' must be an object, got a number");
    /* what OpenAI accepts: an assistant turn of tool calls alone, an empty string, a tool result */
    kvt_api_request r;
    kvt_api_error e;
    CHECK(parse(KVT_API_CHAT,
                "{\"messages\":[" Q ",{\"role\":\"assistant\"," CALL "},{\"role\":\"tool\",\"tool_call_id\":\"c1\","
                "\"content\":\"\"},{\"role\":\"assistant\",\"content\":null," CALL
                "},{\"role\":\"user\",\"content\":\"\"}]}",
                &r, &e) == 0);
    CHECK(r.n_msgs == 5 && !strcmp(r.msgs[1].content, "") && !strcmp(r.msgs[4].content, ""));
    kvt_api_request_free(&r);
#undef Q
#undef CALL
}

/* The body fails with status 400, naming param (NULL: none) and code. */
static void expect_code(kvt_api_kind k, const char *body, size_t len, const char *param, const char *code) {
    kvt_api_request r;
    kvt_api_error e;
    int rc = parse_len(k, body, len, &r, &e);
    CHECKF(rc == KVT_EARG && e.status == 400, "%.60s", body);
    if (rc) {
        CHECKF(param ? e.param && !strcmp(e.param, param) : !e.param, "%.60s: param %s", body,
               e.param ? e.param : "null");
        CHECKF(e.code && !strcmp(e.code, code), "%.60s: code %s, want %s", body, e.code ? e.code : "null", code);
    } else {
        kvt_api_request_free(&r);
    }
}

/* "[1,1,...]" of n ids inside a completion body; caller frees. */
static char *ids_body(size_t n, const char *before) {
    size_t cap = strlen(before) + 2 * n + 64, o = 0;
    char *b = malloc(cap);
    o += (size_t)snprintf(b, cap, "{%s\"prompt\":[", before);
    for (size_t i = 0; i < n; i++) o += (size_t)snprintf(b + o, cap - o, i ? ",1" : "1");
    snprintf(b + o, cap - o, "]}");
    return b;
}

/* Strict request bodies: exactly one JSON value; no NUL that a C string
 * would cut; prompt ids and JSON values bounded before parsing. */
static void test_strict_json(void) {
    kvt_api_request r;
    kvt_api_error e;
    const char *ok = "{\"prompt\":\"x\"} \r\n\t";
    CHECK(parse(KVT_API_COMPLETION, ok, &r, &e) == 0); /* whitespace after the object is fine */
    kvt_api_request_free(&r);
    const char *trailing = "{\"prompt\":\"x\"} garbage";
    expect_code(KVT_API_COMPLETION, trailing, strlen(trailing), NULL, "invalid_json");
    const char *two = "{\"prompt\":\"x\"}{\"prompt\":\"y\"}";
    expect_code(KVT_API_COMPLETION, two, strlen(two), NULL, "invalid_json");
    /* a raw NUL byte inside a string is a fault in that field's text, as the strict check reports it */
    const char raw_nul[] = "{\"prompt\":\"a\0b\"}";
    expect_code(KVT_API_COMPLETION, raw_nul, sizeof raw_nul - 1, "prompt", "invalid_value");

    const char *nul_prompt = "{\"prompt\":\"first\\u0000second\"}";
    expect_code(KVT_API_COMPLETION, nul_prompt, strlen(nul_prompt), "prompt", "invalid_value");
    const char *nul_msg = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}";
    expect_code(KVT_API_CHAT, nul_msg, strlen(nul_msg), "messages", "invalid_value");
    const char *nul_stop = "{\"prompt\":\"x\",\"stop\":[\"a\",\"\\u0000\"]}";
    expect_code(KVT_API_COMPLETION, nul_stop, strlen(nul_stop), "stop", "invalid_value");
    const char *nul_salt = "{\"prompt\":\"x\", \"cache_salt\" : \"s\\u0000\"}";
    expect_code(KVT_API_COMPLETION, nul_salt, strlen(nul_salt), "cache_salt", "invalid_value");
    /* a field kvtier ignores may not hold one either: another parser downstream might read it */
    const char *nul_user = "{\"user\":\"a\\u0000\",\"prompt\":\"b\"}";
    expect_code(KVT_API_COMPLETION, nul_user, strlen(nul_user), "user", "invalid_value");
    /* an escaped backslash before "u0000" is no NUL */
    CHECK(parse(KVT_API_COMPLETION, "{\"user\":\"a\",\"prompt\":\"b\\\\u0000\"}", &r, &e) == 0);
    CHECK(r.prompt && !strcmp(r.prompt, "b\\u0000"));
    kvt_api_request_free(&r);

    /* prompt ids: one token must be left to generate in TEST_CTX */
    char *b = ids_body(TEST_CTX - 1, "");
    CHECK(parse(KVT_API_COMPLETION, b, &r, &e) == 0 && r.n_prompt_ids == TEST_CTX - 1);
    kvt_api_request_free(&r);
    free(b);
    b = ids_body(TEST_CTX, "");
    expect_code(KVT_API_COMPLETION, b, strlen(b), "prompt", "context_length_exceeded");
    free(b);
    b = ids_body(1000000, ""); /* rejected on its length, before a million cJSON items exist */
    expect_code(KVT_API_COMPLETION, b, strlen(b), "prompt", "context_length_exceeded");
    free(b);
    /* a nested "prompt" is no prompt; its values count like any others */
    b = ids_body(TEST_CTX - 1, "\"x\":{\"prompt\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18]},");
    CHECK(parse(KVT_API_COMPLETION, b, &r, &e) == 0);
    kvt_api_request_free(&r);
    free(b);
    /* values besides the prompt: KVT_API_MAX_JSON_VALUES + TEST_CTX at most */
    size_t n = KVT_API_MAX_JSON_VALUES + TEST_CTX;
    char *big = malloc(2 * n + 64);
    size_t o = (size_t)sprintf(big, "{\"prompt\":\"x\",\"junk\":[");
    for (size_t i = 0; i < n; i++) o += (size_t)sprintf(big + o, i ? ",0" : "0");
    sprintf(big + o, "]}");
    expect_code(KVT_API_COMPLETION, big, strlen(big), NULL, "too_many_values");
    big[strlen("{\"prompt\":\"x\",\"junk\":[") + 2 * 100 - 1] = 0; /* 100 items: fine */
    strcat(big, "]}");
    CHECK(parse(KVT_API_COMPLETION, big, &r, &e) == 0);
    kvt_api_request_free(&r);
    free(big);
}

static void test_utf8(void) {
    size_t n;
    char *s = kvt_utf8_sanitize("a\xC3\xA9\xFF\x00z", 6, &n);
    CHECK(n == 1 + 2 + 3 + 3 + 1 && !strcmp(s, "a\xC3\xA9\xEF\xBF\xBD\xEF\xBF\xBDz"));
    free(s);
    s = kvt_utf8_sanitize("\xE2\x82", 2, &n); /* truncated: each byte replaced */
    CHECK(n == 6);
    free(s);
    s = kvt_utf8_sanitize("\xED\xA0\x80", 3, &n); /* a surrogate is not UTF-8 */
    CHECK(n == 9);
    free(s);
    CHECK(kvt_utf8_complete_prefix("ab\xE2\x82", 4) == 2);
    CHECK(kvt_utf8_complete_prefix("ab\xE2\x82\xAC", 5) == 5);
    CHECK(kvt_utf8_complete_prefix("ab\xC3", 3) == 2);
    CHECK(kvt_utf8_complete_prefix("abc", 3) == 3);
}

static void test_responses(void) {
    kvt_api_head h = {.kind = KVT_API_CHAT, .id = "chatcmpl-1", .created = 5, .model = "m"};
    kvt_api_usage u = {.prompt_tokens = 10,
                       .completion_tokens = 2,
                       .cached_tokens = 8,
                       .tier_tokens = {8, 0, 0, 0},
                       .computed_tokens = 2};
    char *j = kvt_api_response_json(&h, "hi", "stop", &u, NULL);
    cJSON *o = cJSON_Parse(j);
    CHECK(o);
    CHECK(!strcmp(cJSON_GetObjectItem(o, "object")->valuestring, "chat.completion"));
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "content")->valuestring, "hi"));
    cJSON *usage = cJSON_GetObjectItem(o, "usage");
    CHECK(cJSON_GetObjectItem(usage, "total_tokens")->valueint == 12);
    CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(usage, "prompt_tokens_details"), "cached_tokens")->valueint == 8);
    CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "kvtier"), "cached_tokens_by_tier"), "T0")
              ->valueint == 8);
    cJSON_Delete(o);
    free(j);
    j = kvt_api_chunk_json(&h, "x", 0, NULL, NULL, NULL);
    o = cJSON_Parse(j);
    CHECK(o && !cJSON_GetObjectItem(o, "kvtier") &&
          cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "finish_reason")));
    cJSON_Delete(o);
    free(j);
    kvt_api_error e;
    kvt_api_errorf(&e, 400, "invalid_request_error", "n", "bad", "only %d", 1);
    j = kvt_api_error_json(&e);
    CHECK(!strcmp(
        j, "{\"error\":{\"message\":\"only 1\",\"type\":\"invalid_request_error\",\"param\":\"n\",\"code\":\"bad\"}}"));
    free(j);
}

static size_t fixed_lookup(void *ctx, const char *text, int32_t **ids) {
    (void)ctx;
    if (strcmp(text, "REPLY")) return 0;
    *ids = malloc(2 * sizeof **ids);
    (*ids)[0] = 7;
    (*ids)[1] = 9;
    return 2;
}

/* Two sessions whose replies share a text but not their ids (a model's
 * invalid bytes all print as U+FFFD): each session gets its own ids back
 * whichever was put last; a lookup without a session, or by a session that
 * put none, gets the newest; salts still never meet. */
static void test_reply_sessions(void) {
    kvt_reply_map *rm = kvt_reply_map_new(8, 8);
    int32_t x[] = {162, 200, 184}, y[] = {142, 200, 184}, *got = NULL;
    char *full = NULL;
    kvt_reply_owner s1 = {"s", 1, "one"}, s2 = {"s", 1, "two"}, none = {"s", 1, NULL}, s3 = {"s", 1, "three"},
                    other = {"t", 1, "one"};
    kvt_reply_map_put_by(rm, &s1, "h\xef\xbf\xbd", NULL, NULL, x, 3);
    kvt_reply_map_put_by(rm, &s2, "h\xef\xbf\xbd", NULL, NULL, y, 3);
    CHECK(kvt_reply_map_get_by(rm, &s1, "h\xef\xbf\xbd", &got) == 3 && got[0] == 162);
    free(got);
    CHECK(kvt_reply_map_get_by(rm, &s2, "h\xef\xbf\xbd", &got) == 3 && got[0] == 142);
    free(got);
    CHECK(kvt_reply_map_get_by(rm, &none, "h\xef\xbf\xbd", &got) == 3 && got[0] == 142);
    free(got);
    CHECK(kvt_reply_map_get_by(rm, &s3, "h\xef\xbf\xbd", &got) == 3 && got[0] == 142);
    free(got);
    CHECK(kvt_reply_map_get_by(rm, &other, "h\xef\xbf\xbd", &got) == 0 && !got);
    /* the same with a split reply: session one's reasoning and answer */
    kvt_reply_map_put_by(rm, &s1, "<think>r</think>a", "r", "a", x, 3);
    kvt_reply_map_put_by(rm, &s2, "<think>r</think>a", "r", "a", y, 2);
    CHECK(kvt_reply_map_get_split_by(rm, &s1, "r", "a", &full, &got) == 3 && got[0] == 162 &&
          !strcmp(full, "<think>r</think>a"));
    free(got);
    free(full);
    CHECK(kvt_reply_map_get_split_by(rm, &s1, NULL, "a", &full, &got) == 3 && got[0] == 162);
    free(got);
    free(full);
    CHECK(kvt_reply_map_get_split_by(rm, &none, "r", "a", &full, &got) == 2 && got[0] == 142);
    free(got);
    free(full);
    kvt_reply_map_free(rm);
}

/* A reply with reasoning is found by its full text, by its reasoning and
 * answer exactly (its full text and ids come back), or by its answer alone
 * (any reasoning); never by a part under another tenant or another part. */
static void test_reply_split(void) {
    kvt_reply_map *rm = kvt_reply_map_new(4, 8);
    int32_t a[] = {5, 6, 7}, *got;
    char *full;
    const char *g = "<think>\nplan\n</think>\n\ndone";
    kvt_reply_map_put_split(rm, "s", 1, g, "plan", "done", a, 3);
    kvt_reply_map_put(rm, "s", 1, "plain", a, 1);
    CHECK(kvt_reply_map_get(rm, "s", 1, g, &got) == 3 && got[0] == 5);
    free(got);
    CHECK(kvt_reply_map_get_split(rm, "s", 1, "plan", "done", &full, &got) == 3 && got[2] == 7 && !strcmp(full, g));
    free(got);
    free(full);
    CHECK(kvt_reply_map_get_split(rm, "s", 1, NULL, "done", &full, &got) == 3 && !strcmp(full, g));
    free(got);
    free(full);
    CHECK(kvt_reply_map_get_split(rm, "s", 1, "other", "done", &full, &got) == 0 && !got && !full);
    CHECK(kvt_reply_map_get_split(rm, "s", 1, "plan", "don", &full, &got) == 0);
    CHECK(kvt_reply_map_get_split(rm, "s", 1, "pla", "ndone", &full, &got) == 0); /* parts cannot trade bytes */
    CHECK(kvt_reply_map_get_split(rm, "t", 1, "plan", "done", &full, &got) == 0); /* another tenant */
    CHECK(kvt_reply_map_get(rm, "s", 1, "done", &got) == 0);                      /* the answer is not the reply */
    CHECK(kvt_reply_map_get_split(rm, "s", 1, "", "plain", &full, &got) == 0);    /* no split was put for it */
    CHECK(kvt_reply_map_get_split(rm, "s", 1, NULL, "plain", &full, &got) == 0);
    kvt_reply_map_free(rm);
}

static void test_chat(void) {
    const char *path = kvt_test_path(kvt_test_tmpdir(), "chat.gguf");
    kvt_mkmodel_params p = kvt_test_tiny_params();
    p.layers = 1;
    CHECK(kvt_mkmodel(&p, path) == 0);
    kvt_model *m = NULL;
    kvt_model_params mp = kvt_model_default_params();
    mp.vocab_only = 1;
    CHECK(kvt_model_load(path, mp, &m) == 0);
    if (!m) return;
    CHECK(kvt_chat_detect(m->chat_template) == KVT_CHAT_CHATML);
    CHECK(kvt_chat_family_parse("llama3") == KVT_CHAT_LLAMA3 && kvt_chat_family_parse("x") == KVT_CHAT_UNKNOWN);
    int32_t im_start = kvt_tokenizer_find(m->tok, "<|im_start|>", 12),
            im_end = kvt_tokenizer_find(m->tok, "<|im_end|>", 10);
    kvt_chat_msg msgs[] = {{"user", "<|im_start|>"}, {"assistant", "REPLY"}, {"user", "ok"}};
    int32_t *ids;
    size_t n;
    CHECK(kvt_chat_render(m->tok, KVT_CHAT_CHATML, msgs, 3, fixed_lookup, NULL, SIZE_MAX, &ids, &n) == 0);
    int starts = 0, ends = 0, spliced = 0;
    for (size_t i = 0; i < n; i++) {
        starts += ids[i] == im_start;
        ends += ids[i] == im_end;
        if (i + 2 < n && ids[i] == 7 && ids[i + 1] == 9 && ids[i + 2] == im_end) spliced = 1;
    }
    CHECK(starts == 4 && ends == 3); /* user text "<|im_start|>" stays plain text */
    CHECK(spliced);
    char *text;
    /* the BOS this vocabulary adds to every prompt (ChatML does not write one), then the template's text */
    CHECK(n > 1 && ids[0] == kvt_tokenizer_bos(m->tok));
    CHECK(kvt_detokenize(m->tok, ids + 1, n - 1, 1, &text, NULL) == 0);
    CHECK(!strncmp(text, "<|im_start|>user\n<|im_start|><|im_end|>\n<|im_start|>assistant\n", 60));
    CHECK(strlen(text) > 22 && !strcmp(text + strlen(text) - 22, "<|im_start|>assistant\n"));
    free(text);
    /* a token limit: exactly n fits, one less is KVT_ELIMIT (spliced ids count too) */
    int32_t *ids2;
    size_t n2;
    CHECK(kvt_chat_render(m->tok, KVT_CHAT_CHATML, msgs, 3, fixed_lookup, NULL, n, &ids2, &n2) == 0 && n2 == n &&
          !memcmp(ids, ids2, n * sizeof *ids));
    free(ids2);
    CHECK(kvt_chat_render(m->tok, KVT_CHAT_CHATML, msgs, 3, fixed_lookup, NULL, n - 1, &ids2, &n2) == KVT_ELIMIT &&
          !ids2 && n2 == 0);
    free(ids);
    kvt_model_free(m);

    kvt_reply_map *rm = kvt_reply_map_new(2, 4);
    int32_t a[] = {1, 2, 3}, *got;
    kvt_reply_map_put(rm, "s", 1, "one", a, 3);
    CHECK(kvt_reply_map_get(rm, "s", 1, "one", &got) == 3 && got[2] == 3);
    free(got);
    CHECK(kvt_reply_map_get(rm, "t", 1, "one", &got) == 0 && !got); /* another salt sees nothing */
    CHECK(kvt_reply_map_get(rm, NULL, 0, "one", &got) == 0);
    kvt_reply_map_put(rm, NULL, 0, "two", a, 2);
    kvt_reply_map_put(rm, NULL, 0, "three", a, 1);
    CHECK(kvt_reply_map_get(rm, "s", 1, "one", &got) == 0); /* the oldest was dropped */
    CHECK(kvt_reply_map_get(rm, NULL, 0, "three", &got) == 1);
    free(got);
    int32_t big[5] = {0};
    kvt_reply_map_put(rm, NULL, 0, "big", big, 5); /* over max_ids: ignored */
    CHECK(kvt_reply_map_get(rm, NULL, 0, "big", &got) == 0);
    kvt_reply_map_free(rm);
    test_reply_split();
    test_reply_sessions();
}

/* A field of the wrong JSON type is a 400 invalid_type naming its place, also where the field
 * never changes the output; a message's name is kept for the template. */
static void test_types(void) {
    static const char *const bad[][2] = {
        {"{\"messages\":[" Q0 "],\"user\":5}", "user"},
        {"{\"messages\":[" Q0 "],\"store\":\"yes\"}", "store"},
        {"{\"messages\":[" Q0 "],\"metadata\":{\"team\":1}}", "metadata.team"},
        {"{\"messages\":[" Q0 "],\"logit_bias\":{\"5\":\"x\"}}", "logit_bias.5"},
        {"{\"messages\":[" Q0 "],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"v\","
         "\"schema\":{\"type\":\"object\"},\"strict\":\"yes\"}}}",
         "response_format.json_schema.strict"},
        {"{\"messages\":[" Q0 ",{\"role\":\"user\",\"content\":\"x\",\"name\":7}]}", "messages[1].name"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":1}]}]}",
         "messages[0].content[0].text"},
        {"{\"messages\":[" Q0 "],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":1}}]}",
         "tools[0].function.strict"},
    };
    for (size_t i = 0; i < KVT_ARRAY_LEN(bad); i++) {
        kvt_api_request r;
        kvt_api_error e;
        int rc = parse(KVT_API_CHAT, bad[i][0], &r, &e);
        CHECKF(rc == KVT_EARG && e.status == 400 && e.param && !strcmp(e.param, bad[i][1]) && e.code &&
                   !strcmp(e.code, "invalid_type"),
               "%s: param %s", bad[i][0], rc && e.param ? e.param : "-");
        if (!rc) kvt_api_request_free(&r);
    }
    kvt_api_request r;
    kvt_api_error e;
    CHECK(parse(KVT_API_CHAT,
                "{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"name\":\"alice\"},"
                "{\"role\":\"user\",\"content\":\"b\",\"name\":null}],\"user\":null,\"metadata\":{\"k\":\"v\"}}",
                &r, &e) == 0);
    CHECK(r.n_msgs == 2 && r.msg_tools[0].name && !strcmp(r.msg_tools[0].name, "alice") && !r.msg_tools[1].name);
    kvt_api_request_free(&r);
}

int main(void) {
    test_parse();
    test_types();
    test_message_fields();
    test_strict_json();
    test_utf8();
    test_responses();
    test_chat();
    return kvt_test_done("test_api_openai");
}
