// SPDX-License-Identifier: MIT
/* json_strict.c and api_body.c without a server: the strict JSON check's
 * edge cases (duplicate keys compared decoded and per object, \u0000, raw
 * control bytes, each kind of bad UTF-8, surrogate escapes, the grammar,
 * the limits), the JSON pointer and offset a fault reports, the known-field
 * test of --strict, and the numeric field messages of api_openai.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_body.h"
#include "api_openai.h"
#include "json_strict.h"
#include "testutil.h"

/* Checks b[0..n) and returns the fault (KVT_JSON_OK when it passes); the report in *rep. */
static kvt_json_fault check_n(const char *b, size_t n, const kvt_json_rules *rules, kvt_json_report *rep) {
    int rc = kvt_json_check(b, n, rules, rep);
    CHECKF((rc == 0) == (rep->fault == KVT_JSON_OK), "%.60s: rc %d with fault %d", b, rc, rep->fault);
    return rc ? rep->fault : KVT_JSON_OK;
}

static kvt_json_fault check(const char *b, kvt_json_report *rep) { return check_n(b, strlen(b), NULL, rep); }

/* b fails with fault f at JSON pointer path and byte offset off. */
static void expect_fault(const char *b, kvt_json_fault f, const char *path, size_t off) {
    kvt_json_report rep;
    kvt_json_fault got = check(b, &rep);
    CHECKF(got == f, "%s: fault %d, want %d (%s)", b, got, f, rep.message);
    if (got != f) return;
    CHECKF(!strcmp(rep.path, path), "%s: path '%s', want '%s'", b, rep.path, path);
    CHECKF(rep.offset == off, "%s: offset %zu, want %zu", b, rep.offset, off);
    CHECKF(strstr(rep.message, "byte") != NULL, "%s: message '%s' gives no byte", b, rep.message);
}

static void expect_ok(const char *b) {
    kvt_json_report rep;
    kvt_json_fault got = check(b, &rep);
    CHECKF(got == KVT_JSON_OK, "%s: fault %d: %s", b, got, rep.message);
}

static void test_duplicates(void) {
    expect_fault("{\"max_tokens\":5,\"max_tokens\":1}", KVT_JSON_DUPLICATE, "/max_tokens", 16);
    /* compared decoded: \u0074 is 't' */
    expect_fault("{\"max_tokens\":5,\"max_\\u0074okens\":1}", KVT_JSON_DUPLICATE, "/max_\\u0074okens", 16);
    expect_fault("{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"role\":\"system\"}]}", KVT_JSON_DUPLICATE,
                 "/messages/0/role", 42);
    expect_fault("{\"response_format\":{\"json_schema\":{\"schema\":{\"enum\":[1],\"enum\":[2]}}}}", KVT_JSON_DUPLICATE,
                 "/response_format/json_schema/schema/enum", 56);
    /* the same key in sibling and nested objects is fine; an emoji key equals its surrogate-pair escape */
    expect_ok("{\"a\":{\"a\":1},\"b\":{\"a\":2},\"c\":[{\"a\":1},{\"a\":1}]}");
    expect_fault("{\"\xF0\x9F\x98\x80\":1,\"\\ud83d\\ude00\":2}", KVT_JSON_DUPLICATE, "/\\ud83d\\ude00", 10);
    expect_fault("{\"\":1,\"\":2}", KVT_JSON_DUPLICATE, "/", 6);
    /* after an object with many keys closed, its keys no longer count */
    char big[20000];
    size_t o = (size_t)snprintf(big, sizeof big, "{\"x\":{");
    for (int i = 0; i < 1000; i++) o += (size_t)snprintf(big + o, sizeof big - o, "%s\"k%d\":%d", i ? "," : "", i, i);
    snprintf(big + o, sizeof big - o, "},\"k5\":1,\"y\":{\"k5\":1,\"k999\":2,\"k5\":3}}");
    kvt_json_report rep;
    CHECK(check(big, &rep) == KVT_JSON_DUPLICATE && !strcmp(rep.path, "/y/k5"));
}

static void test_strings(void) {
    expect_fault("{\"s\":{\"enum\":[\"yes\\u0000no\"]}}", KVT_JSON_NUL, "/s/enum/0", 18);
    expect_fault("{\"a\\u0000b\":1}", KVT_JSON_NUL, "/a", 3);
    const char raw_nul[] = "{\"a\":\"x\0\"}";
    kvt_json_report rep;
    CHECK(check_n(raw_nul, sizeof raw_nul - 1, NULL, &rep) == KVT_JSON_NUL && rep.offset == 7);
    expect_fault("{\"a\":\"x\ty\"}", KVT_JSON_TEXT, "/a", 7);
    expect_fault("[\"\x1f\"]", KVT_JSON_TEXT, "/0", 2);
    expect_fault("[\"\x80\"]", KVT_JSON_TEXT, "/0", 2);             /* a continuation byte alone */
    expect_fault("[\"\xC0\xAF\"]", KVT_JSON_TEXT, "/0", 2);         /* overlong '/' */
    expect_fault("[\"\xE0\x80\xAF\"]", KVT_JSON_TEXT, "/0", 2);     /* overlong, 3 bytes */
    expect_fault("[\"\xF0\x80\x80\xAF\"]", KVT_JSON_TEXT, "/0", 2); /* overlong, 4 bytes */
    expect_fault("[\"\xED\xA0\x80\"]", KVT_JSON_TEXT, "/0", 2);     /* U+D800 encoded */
    expect_fault("[\"\xF4\x90\x80\x80\"]", KVT_JSON_TEXT, "/0", 2); /* U+110000 */
    expect_fault("[\"\xF5\x80\x80\x80\"]", KVT_JSON_TEXT, "/0", 2);
    expect_fault("[\"\xFF\"]", KVT_JSON_TEXT, "/0", 2);
    expect_fault("[\"\xE2\x82\"]", KVT_JSON_TEXT, "/0", 2); /* cut short by the quote */
    expect_fault("[\"\xE2\x82", KVT_JSON_TEXT, "/0", 2);    /* cut short by the end */
    expect_fault("[\"\\ud800\"]", KVT_JSON_TEXT, "/0", 2);
    expect_fault("[\"\\ud800\\u0041\"]", KVT_JSON_TEXT, "/0", 2);
    expect_fault("[\"\\udc00\"]", KVT_JSON_TEXT, "/0", 2);
    CHECK(check("[\"\\udc00\"]", &rep) && strstr(rep.message, "unpaired surrogate"));
    CHECK(check("[\"\xC0\xAF\"]", &rep) && strstr(rep.message, "overlong"));
    CHECK(check("[\"\xED\xA0\x80\"]", &rep) && strstr(rep.message, "surrogate"));
    CHECK(check("[\"\xF4\x90\x80\x80\"]", &rep) && strstr(rep.message, "U+10FFFF"));
    /* the boundaries that are fine */
    expect_ok("[\"\xC2\x80\xDF\xBF\xE0\xA0\x80\xED\x9F\xBF\xEE\x80\x80\xEF\xBF\xBF\xF0\x90\x80\x80\xF4\x8F\xBF\xBF\"]");
    expect_ok("[\"\\u0001\\u001f\\ud7ff\\ue000\\uffff\\ud800\\udc00\\udbff\\udfff\\\"\\\\\\/\\b\\f\\n\\r\\t\x7f\"]");
    expect_ok(
        "{\"content\":\"caf\xC3\xA9 \xF0\x9F\x98\x80 \\u00e9\\ud83d\\ude00\",\"nested\":{\"a\":[1,{\"b\":null}]}}");
}

static void test_grammar(void) {
    expect_fault("", KVT_JSON_SYNTAX, "", 0);
    expect_fault("  \n", KVT_JSON_SYNTAX, "", 0);
    expect_fault("{\"a\":1} x", KVT_JSON_SYNTAX, "", 8);
    expect_fault("{\"a\":1}{}", KVT_JSON_SYNTAX, "", 7);
    expect_fault("{\"a\":1,}", KVT_JSON_SYNTAX, "", 7);
    expect_fault("[1,]", KVT_JSON_SYNTAX, "/1", 3);
    expect_fault("{\"a\" 1}", KVT_JSON_SYNTAX, "/a", 5);
    expect_fault("{a:1}", KVT_JSON_SYNTAX, "", 1);
    expect_fault("[01]", KVT_JSON_SYNTAX, "/0", 2);
    expect_fault("[+1]", KVT_JSON_SYNTAX, "/0", 1);
    expect_fault("[1.]", KVT_JSON_SYNTAX, "/0", 1);
    expect_fault("[.5]", KVT_JSON_SYNTAX, "/0", 1);
    expect_fault("[1e]", KVT_JSON_SYNTAX, "/0", 1);
    expect_fault("[tru]", KVT_JSON_SYNTAX, "/0", 1);
    expect_fault("[\"\\x\"]", KVT_JSON_SYNTAX, "/0", 2);
    expect_fault("[\"\\u12G4\"]", KVT_JSON_SYNTAX, "/0", 2);
    expect_fault("[\"abc", KVT_JSON_SYNTAX, "/0", 1);
    expect_fault("{\"a\":[", KVT_JSON_SYNTAX, "/a/0", 6);
    expect_fault("\xEF\xBB\xBF{}", KVT_JSON_SYNTAX, "", 0); /* a byte-order mark is no JSON */
    expect_ok(" {\"a\":[-0,0.5,1e309,-1.25E-3,true,false,null,\"\",{},[]]}\r\n\t");
    expect_ok("\"just a string\"");
    expect_ok("12");
    /* a number of more than 63 characters: cJSON reads no more of one */
    char num[80];
    memset(num, '1', 64);
    num[64] = 0;
    expect_fault(num, KVT_JSON_SYNTAX, "", 0);
    num[63] = 0;
    expect_ok(num);
    /* the JSON pointer escapes '/' and '~' and shows bytes outside printable ASCII as '?' */
    expect_fault("{\"a/b~c\":{\"\xC3\xA9\":[0,\"\\u0000\"]}}", KVT_JSON_NUL,
                 "/a~1b~0c/?"
                 "?/1",
                 19);
}

static void test_limits(void) {
    kvt_json_rules rules = {.max_keys = 3, .max_depth = 4};
    kvt_json_report rep;
    CHECK(check_n("{\"a\":1,\"b\":{\"c\":2}}", 19, &rules, &rep) == KVT_JSON_OK);
    const char *four = "{\"a\":1,\"b\":{\"c\":2,\"d\":3}}";
    CHECK(check_n(four, strlen(four), &rules, &rep) == KVT_JSON_LIMIT && strstr(rep.message, "more than 3"));
    CHECK(check_n("[[[[1]]]]", 9, &rules, &rep) == KVT_JSON_OK);
    CHECK(check_n("[[[[[1]]]]]", 11, &rules, &rep) == KVT_JSON_DEPTH && rep.offset == 4);
    /* deep nesting without a limit: the walk keeps its own stack, not the C one */
    size_t n = 200000;
    char *deep = malloc(2 * n + 1);
    memset(deep, '[', n);
    memset(deep + n, ']', n);
    deep[2 * n] = 0;
    CHECK(check_n(deep, 2 * n, NULL, &rep) == KVT_JSON_OK);
    free(deep);
    /* many keys in one object: linear, and a duplicate at the end is found */
    size_t keys = 60000, cap = keys * 16 + 64, o = 1;
    char *wide = malloc(cap);
    wide[0] = '{';
    for (size_t i = 0; i < keys; i++) o += (size_t)snprintf(wide + o, cap - o, "\"k%zu\":0,", i);
    snprintf(wide + o, cap - o, "\"k7\":1}");
    CHECK(check_n(wide, strlen(wide), NULL, &rep) == KVT_JSON_DUPLICATE && !strcmp(rep.path, "/k7"));
    free(wide);
}

static int known_ab(void *ctx, const char *key, size_t len) {
    (void)ctx;
    return len == strlen(key) && (!strcmp(key, "a") || !strcmp(key, "b"));
}

static void test_known(void) {
    kvt_json_rules rules = {.known = known_ab};
    kvt_json_report rep;
    const char *ok = "{\"a\":{\"zzz\":1},\"b\":[{\"q\":2}]}"; /* only top-level keys are offered */
    CHECK(check_n(ok, strlen(ok), &rules, &rep) == KVT_JSON_OK);
    const char *bad = "{\"a\":1,\"max_token\":2,\"b\":3,\"x\\u0079\":4}";
    CHECK(check_n(bad, strlen(bad), &rules, &rep) == KVT_JSON_UNKNOWN);
    CHECK(strstr(rep.message, "'max_token'") && strstr(rep.message, "'xy'") && rep.offset == 7);
    /* a broken body reports the break, not its unknown fields */
    const char *broken = "{\"zz\":1,\"a\":\"\\u0000\"}";
    CHECK(check_n(broken, strlen(broken), &rules, &rep) == KVT_JSON_NUL && !strcmp(rep.field, "a"));
}

/* kvt_api_check_body: the 400s, their codes and params, and --strict per body kind. */
static void test_api_body(void) {
    kvt_api_error e;
    const char *dup = "{\"prompt\":\"x\",\"max_tokens\":5,\"max_tokens\":1}";
    CHECK(kvt_api_check_body(KVT_BODY_COMPLETION, dup, strlen(dup), 0, &e) == KVT_EARG && e.status == 400);
    CHECK(!strcmp(e.code, "duplicate_key") && e.param && !strcmp(e.param, "max_tokens"));
    CHECK(strstr(e.message, "'max_tokens'") && strstr(e.message, "/max_tokens") && strstr(e.message, "byte 29"));
    const char *tc = "{\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\\u0000zzz\"}}}";
    CHECK(kvt_api_check_body(KVT_BODY_CHAT, tc, strlen(tc), 0, &e) == KVT_EARG && !strcmp(e.code, "invalid_value"));
    CHECK(e.param && !strcmp(e.param, "tool_choice") && strstr(e.message, "/tool_choice/function/name"));
    const char *unpin = "{\"pin_id\":\"p\",\"pin_id\":\"q\"}";
    CHECK(kvt_api_check_body(KVT_BODY_UNPIN, unpin, strlen(unpin), 0, &e) == KVT_EARG && !strcmp(e.param, "pin_id"));
    const char *syntax = "{\"prompt\":";
    CHECK(kvt_api_check_body(KVT_BODY_COMPLETION, syntax, strlen(syntax), 0, &e) == KVT_EARG && !e.param &&
          !strcmp(e.code, "invalid_json"));

    const char *typo = "{\"prompt\":\"x\",\"max_token\":5}";
    CHECK(kvt_api_check_body(KVT_BODY_COMPLETION, typo, strlen(typo), 0, &e) == 0); /* OpenAI's default */
    CHECK(kvt_api_check_body(KVT_BODY_COMPLETION, typo, strlen(typo), 1, &e) == KVT_EARG);
    CHECK(!strcmp(e.code, "unknown_field") && strstr(e.message, "'max_token'") && strstr(e.message, "--strict"));
    /* every field a parser reads is known under --strict, the audited ones and llama.cpp's included */
    const char *all = "{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":1,\"max_completion_tokens\":1,\"n_predict\":1,"
                      "\"temperature\":0,\"top_p\":1,\"top_k\":0,\"seed\":1,\"logprobs\":0,\"presence_penalty\":0,"
                      "\"frequency_penalty\":0,\"repeat_penalty\":1,\"min_p\":0,\"penalty_last_n\":0,\"logit_bias\":{},"
                      "\"n\":1,\"stop\":[],\"stream\":false,\"ignore_eos\":false,\"stream_options\":null,"
                      "\"cache_salt\":\"\",\"kvtier\":{},\"user\":\"u\",\"cache_prompt\":true,\"mirostat\":0,"
                      "\"echo\":false,\"response_format\":null,\"json_schema\":null,\"tools\":null}";
    CHECK(kvt_api_check_body(KVT_BODY_COMPLETION, all, strlen(all), 1, &e) == 0);
    CHECK(kvt_api_check_body(KVT_BODY_PROMPT, all, strlen(all), 1, &e) == 0);
    CHECK(kvt_api_check_body(KVT_BODY_CHAT, all, strlen(all), 1, &e) == KVT_EARG && strstr(e.message, "'prompt'"));
    const char *chat = "{\"messages\":[],\"tool_choice\":\"auto\",\"parallel_tool_calls\":true,\"top_logprobs\":0}";
    CHECK(kvt_api_check_body(KVT_BODY_CHAT, chat, strlen(chat), 1, &e) == 0);
    CHECK(kvt_api_check_body(KVT_BODY_COMPLETION, chat, strlen(chat), 1, &e) == KVT_EARG);
    const char *tok = "{\"content\":\"x\",\"add_special\":true,\"parse_special\":true,\"with_pieces\":false}";
    CHECK(kvt_api_check_body(KVT_BODY_TOKENIZE, tok, strlen(tok), 1, &e) == 0);
    CHECK(kvt_api_check_body(KVT_BODY_DETOKENIZE, tok, strlen(tok), 1, &e) == KVT_EARG);
    CHECK(kvt_api_check_body(KVT_BODY_UNPIN, "{\"pin_id\":\"p\",\"session_id\":\"s\"}", 31, 1, &e) == 0);
    CHECK(kvt_api_check_body(KVT_BODY_NONE, "{\"x\":1}", 7, 1, &e) == KVT_EARG);
    CHECK(kvt_api_check_body(KVT_BODY_NONE, "{}", 2, 1, &e) == 0);
}

/* The message of a request that fails to parse contains want. */
static void expect_message(kvt_api_kind k, const char *json, const char *want) {
    kvt_api_request r;
    kvt_api_error e;
    /* as the server reads a body: the strict check (api_body.h), then the parser */
    int rc = kvt_api_check_body(k == KVT_API_CHAT ? KVT_BODY_CHAT : KVT_BODY_COMPLETION, json, strlen(json), 0, &e);
    if (!rc) rc = kvt_api_parse(k, json, strlen(json), 100, 16, 64, &r, &e);
    CHECKF(rc == KVT_EARG && strstr(e.message, want), "%s: message '%s', want '%s'", json, rc ? e.message : "(parsed)",
           want);
    if (!rc) kvt_api_request_free(&r);
}

static void test_number_messages(void) {
    expect_message(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"temperature\":1e309}",
                   "'temperature' must be a finite number from 0 to 2");
    expect_message(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"temperature\":3}", "from 0 to 2, got 3");
    expect_message(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"temperature\":\"hot\"}", "got a string");
    expect_message(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"top_k\":2147483648}",
                   "'top_k' must be an integer from -1 to 2147483647, got 2147483648");
    expect_message(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"top_k\":1e309}", "from -1 to 2147483647");
    expect_message(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"top_k\":1.5}", "an integer from -1 to 2147483647, got 1.5");
    expect_message(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"top_p\":0}",
                   "'top_p' must be a finite number above 0 and at most 1");
    expect_message(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"repeat_penalty\":0}", "above 0 and at most 10");
    expect_message(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":65}",
                   "'max_tokens' must be an integer from 1 to 64");
    expect_message(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"seed\":1e16}", "from -9007199254740991 to 9007199254740991");
    expect_message(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"penalty_last_n\":-2}", "from -1 to 2147483647, got -2");
    expect_message(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"kvtier\":{\"priority\":1e309}}",
                   "'kvtier.priority' must be an integer from -1000 to 1000");
    expect_message(KVT_API_COMPLETION, "{\"prompt\":\"x\",\"kvtier\":{\"keep_warm_s\":-1,\"session_id\":\"s\"}}",
                   "'kvtier.keep_warm_s' must be a finite number from 0 to 86400, got -1");
}

int main(void) {
    test_duplicates();
    test_strings();
    test_grammar();
    test_limits();
    test_known();
    test_api_body();
    test_number_messages();
    return kvt_test_done("test_json_strict");
}
