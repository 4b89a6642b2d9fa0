// SPDX-License-Identifier: MIT
/* JSON Schema keywords beyond the basics, byte by byte: pattern and format
 * (emails, UUIDs, dates...), numeric bounds at their edges, multipleOf,
 * $ref with recursion and its depth bound, oneOf/anyOf with branches that
 * start alike, allOf, records (additionalProperties/propertyNames), enum of
 * objects, prefixItems; what stays refused, by name and path; and random
 * walks over a real vocabulary through a zod-like schema that always end in
 * a complete document within the budget. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "jg_test.h"

static kvt_jg_schema *compile(const char *schema_json) {
    cJSON *sc = cJSON_Parse(schema_json);
    CHECKF(sc != NULL, "test schema does not parse: %s", schema_json);
    char err[256];
    kvt_jg_schema *s = NULL;
    int rc = kvt_jg_schema_compile(sc, &s, err, sizeof err);
    CHECKF(rc == 0, "%s: %s", schema_json, err);
    cJSON_Delete(sc);
    return s;
}

/* 1 if text is accepted whole and may end the document there. */
static int accepts(const kvt_jg_schema *s, const char *text) {
    kvt_jg *g = kvt_jg_new(s, NULL);
    int ok = kvt_jg_feed(g, text, strlen(text)) == 0 && kvt_jg_can_end(g);
    kvt_jg_free(g);
    return ok;
}

/* Each of good[] accepted, each of bad[] not (refused, or not complete). */
static void check_docs(const char *schema_json, const char *const *good, size_t n_good, const char *const *bad,
                       size_t n_bad) {
    kvt_jg_schema *s = compile(schema_json);
    if (!s) return;
    for (size_t i = 0; i < n_good; i++) CHECKF(accepts(s, good[i]), "%s: refused %s", schema_json, good[i]);
    for (size_t i = 0; i < n_bad; i++) CHECKF(!accepts(s, bad[i]), "%s: accepted %s", schema_json, bad[i]);
    kvt_jg_schema_free(s);
}

#define DOCS(schema, good, bad) check_docs(schema, good, KVT_ARRAY_LEN(good), bad, KVT_ARRAY_LEN(bad))

/* The schema is refused with a message holding word. */
static void refused(const char *schema_json, const char *word) {
    cJSON *sc = cJSON_Parse(schema_json);
    char err[256];
    kvt_jg_schema *s = NULL;
    int rc = kvt_jg_schema_compile(sc, &s, err, sizeof err);
    CHECKF(rc == KVT_EARG && !s && strstr(err, word), "%s: rc %d, '%s' (want '%s')", schema_json, rc, err, word);
    cJSON_Delete(sc);
    kvt_jg_schema_free(s);
}

static void test_pattern(void) {
    static const char *const good[] = {"\"ab-12\"", "\"abcd-0\""};
    static const char *const bad[] = {"\"a-1\"", "\"abcde-1\"", "\"ab-\"", "\"AB-1\"", "\"ab-1x\"", "\"ab\\u002d1\""};
    DOCS("{\"type\":\"string\",\"pattern\":\"^[a-z]{2,4}-\\\\d+$\"}", good, bad);
    /* groups, alternation, ., escapes written as JSON escapes */
    static const char *const good2[] = {"\"x\"", "\"(a)(b)\"", "\"q\\\"q\"", "\"\xc3\xa9\"", "\"\\n\\t\""};
    static const char *const bad2[] = {"\"\"", "\"(a\"", "\"q\\\"\"", "\"\\n\\n\\n\""};
    DOCS("{\"type\":\"string\",\"pattern\":\"^(x|(\\\\([ab]\\\\))+|q\\\"q|.|\\\\s{2})$\"}", good2, bad2);
    /* lengths fold into the automaton */
    static const char *const good3[] = {"\"ab\"", "\"abc\""};
    static const char *const bad3[] = {"\"a\"", "\"abcd\""};
    DOCS("{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"minLength\":2,\"maxLength\":3}", good3, bad3);
    /* unsupported regex features are named */
    refused("{\"type\":\"string\",\"pattern\":\"(?=a)b\"}", "lookaround");
    refused("{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "backreference");
    refused("{\"type\":\"string\",\"pattern\":\"\\\\bx\"}", "word boundary");
    refused("{\"type\":\"string\",\"pattern\":\"a^b\"}", "anchor");
    refused("{\"type\":\"string\",\"pattern\":\"\\\\p{L}\"}", "\\p");
    refused("{\"type\":\"string\",\"pattern\":\"[a-z\"}", "unclosed '['");
    refused("{\"type\":\"string\",\"pattern\":\"a{5000}\"}", "{m,n}");
    /* a brace that is no quantifier is a literal, as ECMAScript reads it */
    static const char *const good4[] = {"\"a{x}\"", "\"{}\""};
    static const char *const bad4[] = {"\"a\"", "\"ax\""};
    DOCS("{\"type\":\"string\",\"pattern\":\"^(a\\\\{x}|{})$\"}", good4, bad4);
    refused("{\"type\":\"string\",\"pattern\":\"^a{3}$\",\"maxLength\":2}", "no string matches");
    /* repetitions of what can be empty (which GBNF refuses) are plain automata here */
    static const char *const good5[] = {"\"\"", "\"a\"", "\"aaa\""};
    static const char *const bad5[] = {"\"b\"", "\"ab\""};
    DOCS("{\"type\":\"string\",\"pattern\":\"^(a?)*$\"}", good5, bad5);
    DOCS("{\"type\":\"string\",\"pattern\":\"^((a|)()){2,}$\"}", good5, bad5);
    static const char *const good6[] = {"\"\""};
    static const char *const bad6[] = {"\"a\""};
    DOCS("{\"type\":\"string\",\"pattern\":\"^()+(|)*$\"}", good6, bad6);
}

static void test_formats(void) {
    static const char *const email[] = {"\"a.b+c@example.co\"", "\"x_1@mail.example-host.org\""};
    static const char *const not_email[] = {"\"a..b@x.com\"", "\"@x.com\"",   "\"a@b\"",
                                            "\"a@b.c1\"",     "\".a@b.com\"", "\"a@-b.com\""};
    DOCS("{\"type\":\"string\",\"format\":\"email\"}", email, not_email);
    static const char *const uuid[] = {"\"123e4567-e89b-42d3-a456-426614174000\""};
    static const char *const not_uuid[] = {"\"123E4567-e89b-42d3-a456-426614174000\"",
                                           "\"123e4567-e89b-42d3-a456-42661417400\"",
                                           "\"123e4567e89b42d3a456426614174000\""};
    DOCS("{\"type\":\"string\",\"format\":\"uuid\"}", uuid, not_uuid);
    static const char *const date[] = {"\"2024-02-28\"", "\"1999-12-31\"", "\"2024-04-30\""};
    static const char *const not_date[] = {"\"2024-02-30\"", "\"2024-13-01\"", "\"2024-04-31\"", "\"24-01-01\""};
    DOCS("{\"type\":\"string\",\"format\":\"date\"}", date, not_date);
    static const char *const dt[] = {"\"2024-01-31T23:59:59Z\"", "\"2024-01-31T00:00:00.123+05:30\""};
    static const char *const not_dt[] = {"\"2024-01-31 23:59:59Z\"", "\"2024-01-31T24:00:00Z\"",
                                         "\"2024-01-31T23:59:59\""};
    DOCS("{\"type\":\"string\",\"format\":\"date-time\"}", dt, not_dt);
    static const char *const tm[] = {"\"12:00:00Z\"", "\"23:59:59.5-01:00\""};
    static const char *const not_tm[] = {"\"12:60:00Z\"", "\"1:00:00Z\""};
    DOCS("{\"type\":\"string\",\"format\":\"time\"}", tm, not_tm);
    static const char *const ip[] = {"\"192.168.0.1\"", "\"0.0.0.0\"", "\"255.255.255.255\""};
    static const char *const not_ip[] = {"\"256.1.1.1\"", "\"1.2.3\"", "\"01.2.3.4\""};
    DOCS("{\"type\":\"string\",\"format\":\"ipv4\"}", ip, not_ip);
    static const char *const uri[] = {"\"https://example.com/a/b?x=1\"", "\"ftp://h:21/%20\""};
    static const char *const not_uri[] = {"\"example.com\"", "\"https://\"", "\"https://a b\""};
    DOCS("{\"type\":\"string\",\"format\":\"uri\"}", uri, not_uri);
    refused("{\"type\":\"string\",\"format\":\"hostname\"}", "'format' \"hostname\"");
    /* email with a length bound, as zod writes .email().max(20) */
    static const char *const short_email[] = {"\"a@b.co\""};
    static const char *const long_email[] = {"\"abcdefghij@klmnopq.rs\""};
    DOCS("{\"type\":\"string\",\"format\":\"email\",\"maxLength\":20}", short_email, long_email);
    /* a pattern beside a format is followed, as zod writes z.uuid(): its pattern allows upper case, and
     * a format kvtier does not know is then only an annotation */
    static const char *const zuuid[] = {"\"123E4567-E89B-42D3-A456-426614174000\""};
    static const char *const not_zuuid[] = {"\"123e4567-e89b-02d3-a456-426614174000\"", "\"x\""};
    DOCS("{\"type\":\"string\",\"format\":\"uuid\",\"pattern\":\"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-"
         "[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12})$\"}",
         zuuid, not_zuuid);
    static const char *const host[] = {"\"ab.cd\""};
    static const char *const not_host[] = {"\"ab\"", "\"a.b.c\""};
    DOCS("{\"type\":\"string\",\"format\":\"hostname\",\"pattern\":\"^[a-z]+\\\\.[a-z]+$\"}", host, not_host);
}

static void test_bounds(void) {
    static const char *const i1[] = {"1", "10", "7"};
    static const char *const not_i1[] = {"0", "11", "-1", "100", "1.5"};
    DOCS("{\"type\":\"integer\",\"minimum\":1,\"maximum\":10}", i1, not_i1);
    static const char *const neg[] = {"-15", "-20", "-10"};
    static const char *const not_neg[] = {"-9", "-21", "0", "15", "-0"};
    DOCS("{\"type\":\"integer\",\"minimum\":-20,\"maximum\":-10}", neg, not_neg);
    static const char *const exc[] = {"1", "99"};
    static const char *const not_exc[] = {"0", "100", "-1"};
    DOCS("{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":100}", exc, not_exc);
    /* z.number().positive(): exclusiveMinimum 0 */
    static const char *const pos[] = {"0.5", "3", "0.0001", "12.25"};
    static const char *const not_pos[] = {"0", "0.0", "-1", "-0.5", "1e3"};
    DOCS("{\"type\":\"number\",\"exclusiveMinimum\":0}", pos, not_pos);
    static const char *const num[] = {"-5", "5.0", "-0.5", "0", "4.99"};
    static const char *const not_num[] = {"-5.5", "5.1", "6", "-6", "5.01"};
    DOCS("{\"type\":\"number\",\"minimum\":-5,\"maximum\":5}", num, not_num);
    static const char *const exn[] = {"-4.5", "4.999"};
    static const char *const not_exn[] = {"5", "5.0", "-5", "-5.0"};
    DOCS("{\"type\":\"number\",\"exclusiveMinimum\":-5,\"exclusiveMaximum\":5}", exn, not_exn);
    static const char *const mult[] = {"35", "0", "100", "-10"};
    static const char *const not_mult[] = {"36", "105", "-105", "3"};
    DOCS("{\"type\":\"integer\",\"multipleOf\":5,\"minimum\":-100,\"maximum\":100}", mult, not_mult);
    /* a number ended by what follows it */
    static const char *const obj[] = {"{\"n\":3}", "{\"n\":20,\"m\":-1}"};
    static const char *const not_obj[] = {"{\"n\":2}", "{\"n\":20,\"m\":1}"};
    DOCS("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":3},\"m\":{\"type\":"
         "\"integer\",\"maximum\":-1}}}",
         obj, not_obj);
    refused("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer");
    refused("{\"type\":\"number\",\"minimum\":0.5}", "'minimum' of 0.5");
    refused("{\"type\":\"number\",\"multipleOf\":2}", "'multipleOf'");
    refused("{\"type\":\"integer\",\"multipleOf\":0.5}", "'multipleOf' of 0.5");
}

#define TREE \
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":" \
    "\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\",\"kids\"],\"additionalProperties\":" \
    "false}},\"$ref\":\"#/$defs/node\"}"
#define LIST \
    "{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"next\":{\"anyOf\":[{\"$ref\":\"#\"}," \
    "{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"]}"

static void test_refs(void) {
    static const char *const tree[] = {"{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[]},{\"v\":3,\"kids\":[{\"v\":4,"
                                       "\"kids\":[]}]}]}"};
    static const char *const not_tree[] = {"{\"v\":1,\"kids\":[1]}", "{\"v\":1,\"kids\":[{\"v\":2}]}"};
    DOCS(TREE, tree, not_tree);
    static const char *const list[] = {"{\"v\":1,\"next\":{\"v\":2,\"next\":null}}", "{\"next\":null,\"v\":0}"};
    static const char *const not_list[] = {"{\"v\":1,\"next\":{\"v\":2}}", "{\"v\":1,\"next\":3}"};
    DOCS(LIST, list, not_list);
    static const char *const defs[] = {"{\"a\":\"x\",\"b\":\"y\"}"};
    static const char *const not_defs[] = {"{\"a\":1}"};
    DOCS("{\"definitions\":{\"s\":{\"type\":\"string\"}},\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":"
         "\"#/definitions/s\"},\"b\":{\"$ref\":\"#/definitions/s\",\"description\":\"d\"}}}",
         defs, not_defs);
    /* the depth bound: a list nests until KVT_JG_MAX_DEPTH, then only null goes */
    kvt_jg_schema *s = compile(LIST);
    kvt_jg *g = kvt_jg_new(s, NULL);
    int levels = 0;
    for (; levels < 2 * KVT_JG_MAX_DEPTH; levels++)
        if (kvt_jg_feed(g, "{\"v\":1,\"next\":", 14)) break;
    CHECKF(levels >= KVT_JG_MAX_DEPTH - 2 && levels <= KVT_JG_MAX_DEPTH, "a recursive list nested %d levels", levels);
    CHECK(kvt_jg_feed(g, "{", 1) != 0 && kvt_jg_feed(g, "null", 4) == 0);
    for (int i = 0; i < levels; i++) CHECK(kvt_jg_feed(g, "}", 1) == 0);
    CHECK(kvt_jg_done(g) || kvt_jg_can_end(g));
    kvt_jg_free(g);
    kvt_jg_schema_free(s);
    refused("{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\"}},\"required\":[\"a\"]}", "no finite value");
    refused("{\"$ref\":\"#/$defs/missing\"}", "names nothing");
    refused("{\"$ref\":\"other.json#/a\"}", "'$ref' \"other.json#/a\"");
}

static void test_unions(void) {
    /* a discriminated union: two objects, told apart by 'kind' */
    static const char *const du[] = {"{\"kind\":\"a\",\"x\":1}", "{\"kind\":\"b\",\"y\":\"s\"}",
                                     "{\"x\":1,\"kind\":"
                                     "\"a\"}"};
    static const char *const not_du[] = {"{\"kind\":\"a\",\"y\":\"s\"}", "{\"x\":1,\"kind\":\"b\"}", "{\"kind\":\"c\""};
    DOCS("{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},\"x\":{\"type\":\"integer\"}},"
         "\"required\":[\"kind\",\"x\"]},{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"b\"},\"y\":{"
         "\"type\":\"string\"}},\"required\":[\"kind\",\"y\"]}]}",
         du, not_du);
    static const char *const strs[] = {"\"ab\"", "\"xxxx\"", "\"\""};
    static const char *const not_strs[] = {"\"abc\"", "\"xxxy\""};
    DOCS("{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"string\",\"pattern\":\"^x+$\"}]}", strs,
         not_strs);
    refused("{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", "may both match");
    static const char *const all[] = {"{\"a\":1,\"b\":\"x\"}", "{\"b\":\"\",\"a\":-2}"};
    static const char *const not_all[] = {"{\"a\":1}", "{\"a\":\"x\",\"b\":\"x\"}"};
    DOCS("{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},{"
         "\"properties\":{\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}]}",
         all, not_all);
    refused("{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "set 'type' differently");
    refused("{\"allOf\":[{\"properties\":{\"a\":{}},\"additionalProperties\":false},{\"properties\":{\"b\":{}}}]}",
            "does not declare 'b'");
}

static void test_objects_arrays(void) {
    static const char *const rec[] = {"{\"x\":1,\"y\":2}", "{}"};
    static const char *const not_rec[] = {"{\"x\":\"s\"}", "{\"x\":1.5}"};
    DOCS("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", rec, not_rec);
    static const char *const names[] = {"{\"ab\":true}", "{\"a\":false,\"z\":true}"};
    static const char *const not_names[] = {"{\"A\":true}", "{\"a1\":true}", "{\"\":true}"};
    DOCS("{\"type\":\"object\",\"propertyNames\":{\"pattern\":\"^[a-z]+$\"},\"additionalProperties\":{\"type\":"
         "\"boolean\"}}",
         names, not_names);
    static const char *const en_names[] = {"{\"red\":1,\"blue\":2}"};
    static const char *const not_en_names[] = {"{\"green\":1}"};
    DOCS("{\"type\":\"object\",\"propertyNames\":{\"enum\":[\"red\",\"blue\"]}}", en_names, not_en_names);
    static const char *const lits[] = {"{\"a\":1}", "[1,2]", "\"x\"", "null"};
    static const char *const not_lits[] = {"{\"a\":2}", "[1]", "\"y\"", "{ \"a\":1}"};
    DOCS("{\"enum\":[{\"a\":1},[1,2],\"x\",null]}", lits, not_lits);
    static const char *const tup[] = {"[\"a\",1]", "[\"\",-3]"};
    static const char *const not_tup[] = {"[\"a\",\"b\"]", "[\"a\",1,2]", "[\"a\"]"};
    DOCS("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false,"
         "\"minItems\":2}",
         tup, not_tup);
    static const char *const arr[] = {"[1]", "[1,2,3]"};
    static const char *const not_arr[] = {"[]", "[1,2,3,4]"};
    DOCS("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}", arr, not_arr);
    /* a keyword without 'type' implies it, rather than being dropped */
    static const char *const implied[] = {"\"abc\""};
    static const char *const not_implied[] = {"\"ab\"", "5"};
    DOCS("{\"minLength\":3}", implied, not_implied);
    refused("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"contentMediaType\":\"x\"}}}",
            "unsupported schema keyword 'contentMediaType' at /properties/a");
    refused("{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":{\"type\":\"string\"}}",
            "'additionalProperties' as a schema beside 'properties'");
}

/* A forced tool call gets the same keywords in its parameters. */
static void test_tagged(void) {
    cJSON *p = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"to\":{\"$ref\":\"#/$defs/mail\"},\"n\":{\"type\":"
                           "\"integer\",\"minimum\":1}},\"required\":[\"to\",\"n\"],\"$defs\":{\"mail\":{\"type\":"
                           "\"string\",\"format\":\"email\"}}}");
    const char *heads[] = {"{\"name\":\"send\",\"arguments\":"};
    const char *tails[] = {"}"};
    const cJSON *schemas[] = {p};
    char err[256];
    kvt_jg_schema *s = NULL;
    CHECKF(kvt_jg_schema_tagged(1, heads, schemas, tails, &s, err, sizeof err) == 0, "tagged: %s", err);
    if (s) {
        CHECK(accepts(s, "{\"name\":\"send\",\"arguments\":{\"to\":\"a@b.io\",\"n\":2}}"));
        CHECK(!accepts(s, "{\"name\":\"send\",\"arguments\":{\"to\":\"ab.io\",\"n\":2}}"));
        CHECK(!accepts(s, "{\"name\":\"send\",\"arguments\":{\"to\":\"a@b.io\",\"n\":0}}"));
    }
    kvt_jg_schema_free(s);
    cJSON_Delete(p);
}

/* zod-like: nested object, email, enum, positive number, array with
 * minItems, a recursive $ref. */
#define ZOD \
    "{\"type\":\"object\",\"properties\":{\"user\":{\"type\":\"object\",\"properties\":{\"email\":{\"type\":" \
    "\"string\",\"format\":\"email\"},\"id\":{\"type\":\"string\",\"format\":\"uuid\"},\"role\":{\"enum\":[" \
    "\"admin\",\"user\"]}},\"required\":[\"email\",\"id\",\"role\"],\"additionalProperties\":false},\"price\":{" \
    "\"type\":\"number\",\"exclusiveMinimum\":0},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"," \
    "\"pattern\":\"^[a-z]{1,8}$\"},\"minItems\":1},\"when\":{\"type\":\"string\",\"format\":\"date-time\"}," \
    "\"tree\":{\"$ref\":\"#/$defs/node\"}},\"required\":[\"user\",\"price\",\"tags\",\"when\",\"tree\"]," \
    "\"additionalProperties\":false,\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":" \
    "\"integer\",\"minimum\":-5,\"maximum\":5},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}," \
    "\"maxItems\":2}},\"required\":[\"n\",\"kids\"],\"additionalProperties\":false}}}"

static int tree_ok(const cJSON *t) {
    const cJSON *n = cJSON_GetObjectItem(t, "n"), *k = cJSON_GetObjectItem(t, "kids");
    if (!cJSON_IsNumber(n) || n->valuedouble < -5 || n->valuedouble > 5 || !cJSON_IsArray(k)) return 0;
    if (cJSON_GetArraySize(k) > 2) return 0;
    for (const cJSON *e = k->child; e; e = e->next)
        if (!tree_ok(e)) return 0;
    return 1;
}

/* A few facts of the ZOD schema checked apart from the matcher. */
static int zod_ok(const cJSON *d) {
    const cJSON *u = cJSON_GetObjectItem(d, "user"), *price = cJSON_GetObjectItem(d, "price");
    const cJSON *tags = cJSON_GetObjectItem(d, "tags"), *when = cJSON_GetObjectItem(d, "when");
    const cJSON *email = cJSON_GetObjectItem(u, "email"), *id = cJSON_GetObjectItem(u, "id");
    const cJSON *role = cJSON_GetObjectItem(u, "role");
    return cJSON_IsString(email) && strchr(email->valuestring, '@') && cJSON_IsString(id) &&
        strlen(id->valuestring) == 36 && cJSON_IsString(role) && cJSON_IsNumber(price) && price->valuedouble > 0 &&
        cJSON_IsArray(tags) && cJSON_GetArraySize(tags) >= 1 && cJSON_IsString(when) &&
        strlen(when->valuestring) >= 20 && tree_ok(cJSON_GetObjectItem(d, "tree"));
}

static void test_random_walks(const kvt_tokenizer *t, int walks, int32_t budget) {
    kvt_jg_vocab *v = kvt_jg_vocab_new(t);
    kvt_jg_schema *s = compile(ZOD);
    int32_t nv = kvt_tokenizer_n_vocab(t);
    uint8_t *mask = malloc((size_t)nv);
    int32_t *allowed = malloc((size_t)nv * sizeof *allowed);
    unsigned seed = 99;
    int good = 0;
    for (int w = 0; s && w < walks; w++) {
        kvt_jg *g = kvt_jg_new(s, v);
        char text[16384];
        size_t len = 0;
        for (int32_t b = budget; !kvt_jg_done(g) && b > 0; b--) {
            int32_t n = kvt_jg_mask(g, b, mask), k = 0;
            if (!n) break;
            for (int32_t id = 0; id < nv; id++)
                if (mask[id]) allowed[k++] = id;
            seed = seed * 1103515245u + 12345u;
            int32_t tok = allowed[(seed >> 8) % (unsigned)k];
            if (kvt_jg_accept(g, tok)) break;
            char buf[KVT_JG_MAX_TOKEN + 1];
            int l = kvt_token_piece(t, tok, buf, sizeof buf, 0);
            if (l > 0 && len + (size_t)l < sizeof text) memcpy(text + len, buf, (size_t)l), len += (size_t)l;
        }
        text[len] = 0;
        cJSON *doc = cJSON_ParseWithLength(text, len);
        int ok = kvt_jg_can_end(g) && doc && zod_ok(doc);
        good += ok;
        if (!ok) fprintf(stderr, "walk %d (budget %d): %s\n", w, budget, text);
        cJSON_Delete(doc);
        kvt_jg_free(g);
    }
    CHECKF(good == walks, "zod schema, budget %d: %d of %d walks ended valid", budget, good, walks);
    free(mask);
    free(allowed);
    kvt_jg_schema_free(s);
    kvt_jg_vocab_free(v);
}

/* The mask equals stepping each token's bytes from the prefix (and the
 * budget rule), inside patterned strings, unions and bounded numbers. */
static void test_mask_exact(const kvt_tokenizer *t) {
    kvt_jg_vocab *v = kvt_jg_vocab_new(t);
    kvt_jg_schema *s = compile(ZOD);
    int32_t nv = kvt_tokenizer_n_vocab(t);
    uint8_t *mask = malloc((size_t)nv);
    static const char *const prefixes[] = {
        "{\"user\":{\"email\":\"ab",
        "{\"user\":{\"email\":\"a.b@c",
        "{\"user\":{\"id\":\"123e4567-e89b-4",
        "{\"when\":\"2024-02-2",
        "{\"price\":0",
        "{\"tree\":{\"n\":-",
        "{\"tags\":[\"ab",
    };
    for (size_t i = 0; s && i < KVT_ARRAY_LEN(prefixes); i++) {
        kvt_jg *g = kvt_jg_new(s, v);
        CHECKF(kvt_jg_feed(g, prefixes[i], strlen(prefixes[i])) == 0, "prefix refused: %s", prefixes[i]);
        for (int tight = 0; tight < 2; tight++) {
            int32_t budget = tight ? kvt_jg_min_bytes(g) + 1 : 2000;
            int32_t n = kvt_jg_mask(g, budget, mask), want = 0, wrong = 0;
            for (int32_t id = 0; id < nv; id++) {
                char buf[KVT_JG_MAX_TOKEN + 1];
                int len = kvt_token_piece(t, id, buf, sizeof buf, 0), ok = 0;
                if (len > 0 && len <= KVT_JG_MAX_TOKEN) {
                    kvt_jg *h = kvt_jg_new(s, NULL);
                    ok = kvt_jg_feed(h, prefixes[i], strlen(prefixes[i])) == 0 &&
                        kvt_jg_feed(h, buf, (size_t)len) == 0 && kvt_jg_min_bytes(h) <= budget - 1;
                    kvt_jg_free(h);
                }
                want += ok;
                wrong += ok != mask[id];
            }
            CHECKF(!wrong && n == want, "after '%s' (budget %d): mask allows %d, brute force %d, %d differ",
                   prefixes[i], budget, n, want, wrong);
        }
        kvt_jg_free(g);
    }
    free(mask);
    kvt_jg_schema_free(s);
    kvt_jg_vocab_free(v);
}

int main(void) {
    test_pattern();
    test_formats();
    test_bounds();
    test_refs();
    test_unions();
    test_objects_arrays();
    test_tagged();
    kvt_tokenizer *t = kvt_test_vocab("ggml-vocab-gpt-2.gguf");
    if (!t) {
        kvt_test_skip_part("../shared/vocab/ggml-vocab-gpt-2.gguf is missing: no vocabulary tests");
        return kvt_test_done("test_json_schema");
    }
    test_mask_exact(t);
    test_random_walks(t, 12, 600);
    test_random_walks(t, 8, 260); /* near the shortest document: the mask must steer it closed */
    kvt_tokenizer_free(t);
    return kvt_test_done("test_json_schema");
}
