// SPDX-License-Identifier: MIT
/* The JSON grammar: documents accepted and refused byte by byte, schema
 * keywords compiled or refused by name, the token mask equal to a brute-force
 * check of every token, and random walks over a real vocabulary (the GPT-2
 * one) that always end in a document that parses and validates, within a
 * token budget, also a tight one; only the end of generation on the last
 * token where the document may end but need not. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "jg_test.h"

static kvt_jg_schema *compile(const char *schema_json) {
    cJSON *sc = schema_json ? cJSON_Parse(schema_json) : NULL;
    char err[256];
    kvt_jg_schema *s = NULL;
    int rc = kvt_jg_schema_compile(sc, &s, err, sizeof err);
    CHECKF(rc == 0, "%s: %s", schema_json ? schema_json : "json_object", err);
    cJSON_Delete(sc);
    return s;
}

/* 1 if text is accepted whole and completes the document. */
static int accepts(const kvt_jg_schema *s, const char *text) {
    kvt_jg *g = kvt_jg_new(s, NULL);
    int ok = kvt_jg_feed(g, text, strlen(text)) == 0 && kvt_jg_can_end(g);
    kvt_jg_free(g);
    return ok;
}

/* 1 if some byte of text is refused (a prefix that cannot continue). */
static int refuses(const kvt_jg_schema *s, const char *text) {
    kvt_jg *g = kvt_jg_new(s, NULL);
    int bad = kvt_jg_feed(g, text, strlen(text)) != 0;
    kvt_jg_free(g);
    return bad;
}

/* 1 if the last byte of text is the first one refused: every shorter prefix
 * can still go on, so the refusal comes as soon as the bad byte arrives. */
static int refuses_at_end(const kvt_jg_schema *s, const char *text) {
    size_t n = strlen(text);
    kvt_jg *g = kvt_jg_new(s, NULL);
    int ok = n > 0 && kvt_jg_feed(g, text, n - 1) == 0 && kvt_jg_feed(g, text + n - 1, 1) != 0;
    kvt_jg_free(g);
    return ok;
}

static void test_json_object(void) {
    kvt_jg_schema *s = compile(NULL);
    if (!s) return;
    static const char *const good[] = {
        "{}",
        " {\"a\": 1}",
        "{\"a\":[1,-2.5e+3,0.25,\"x\\u00e9\\n\",true,false,null,{\"b\":{}}]}",
        "{\n  \"k\": \"caf\xc3\xa9 \xf0\x9f\x98\x80\"\n}",
        "{\"\":\"\"}",
        "{\"a\":0E5}",
    };
    for (size_t i = 0; i < KVT_ARRAY_LEN(good); i++) CHECKF(accepts(s, good[i]), "refused %s", good[i]);
    static const char *const bad[] = {
        "[1]",
        "\"x\"",
        "{\"a\":}",
        "{\"a\":01}",
        "{\"a\":1,}",
        "{} ",
        "{}x",
        "{\"a\":\"\\ud800\"}",
        "{\"a\":\"\\u0000\"}",
        "{\"a\":\"\x01\"}",
        "{\"a\":\"\xc0\xaf\"}",
        "{\"a\":\"\xed\xa0\x80\"}",
        "{\"a\":tru}x",
        "{\"a\":1.}",
        "{\"a\":-}",
        "{a:1}",
        "{\"a\" 1}",
        "{\"a\":\"\\x\"}",
        "{           \"a\":1}",
    };
    for (size_t i = 0; i < KVT_ARRAY_LEN(bad); i++) CHECKF(refuses(s, bad[i]), "did not refuse %s", bad[i]);
    /* incomplete but valid so far: not refused, not complete */
    CHECK(!refuses(s, "{\"a\": [1, {\"b\": \"x"));
    CHECK(!accepts(s, "{\"a\": [1, {\"b\": \"x"));
    kvt_jg_schema_free(s);
}

#define PERSON \
    "{\"type\":\"object\",\"title\":\"p\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":2," \
    "\"maxLength\":5},\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\"," \
    "\"bc\",3,null]},\"minItems\":1,\"maxItems\":2},\"kind\":{\"const\":\"x\"},\"ok\":{\"type\":\"boolean\"}," \
    "\"opt\":{\"type\":[\"number\",\"null\"]},\"sub\":{\"type\":\"object\",\"properties\":{\"z\":{\"type\":" \
    "\"null\"}},\"required\":[\"z\"],\"additionalProperties\":false}},\"required\":[\"name\",\"age\",\"tags\"]," \
    "\"additionalProperties\":false}"

static void test_schema(void) {
    kvt_jg_schema *s = compile(PERSON);
    if (!s) return;
    static const char *const good[] = {
        "{\"name\":\"ab\",\"age\":-3,\"tags\":[\"a\"]}",
        "{\"tags\":[3,null],\"age\":0,\"name\":\"\xc3\xa9\xc3\xa9\xc3\xa9\",\"kind\":\"x\",\"ok\":false}",
        "{\"name\":\"abcde\",\"age\":7,\"tags\":[\"bc\"],\"opt\":1.5,\"sub\":{\"z\":null}}",
        "{\"name\":\"ab\",\"age\":1,\"tags\":[\"a\"],\"opt\":null}",
    };
    for (size_t i = 0; i < KVT_ARRAY_LEN(good); i++) CHECKF(accepts(s, good[i]), "refused %s", good[i]);
    /* each ends at its bad byte: the prefix before it can go on, that byte is refused */
    static const char *const bad[] = {
        "{\"name\":\"ab\",\"age\":1}", /* tags missing */
        "{\"name\":\"a\"",             /* too short */
        "{\"name\":\"abcdef",          /* too long */
        "{\"age\":1.",                 /* not an integer */
        "{\"tags\":[]",                /* minItems */
        "{\"tags\":[\"a\",\"a\",",     /* maxItems */
        "{\"tags\":[\"b\"",            /* not in the enum */
        "{\"ot",                       /* additionalProperties false */
        "{\"age\":1,\"a",              /* a property twice */
        "{\"kind\":\"y",               /* const */
        "{\"sub\":{}",                 /* sub.z required */
        "{\"opt\":\"",                 /* number or null */
    };
    for (size_t i = 0; i < KVT_ARRAY_LEN(bad); i++)
        CHECKF(refuses_at_end(s, bad[i]), "%s: not refused at its last byte", bad[i]);
    /* whole documents that break the schema: refused, never accepted */
    static const char *const bad_docs[] = {
        "{\"name\":\"ab\",\"age\":1,\"tags\":[\"a\"],\"kind\":\"y\"}",
        "{\"name\":\"ab\",\"age\":1,\"tags\":[\"a\",\"bc\",\"a\"]}",
        "{\"name\":\"ab\",\"age\":1,\"tags\":[\"a\"],\"sub\":{\"z\":null,\"w\":1}}",
        "{\"name\":\"ab\",\"age\":1,\"tags\":[\"a\"]}x",
        "{\"name\":\"ab\",\"age\":true,\"tags\":[\"a\"]}",
    };
    for (size_t i = 0; i < KVT_ARRAY_LEN(bad_docs); i++)
        CHECKF(refuses(s, bad_docs[i]) && !accepts(s, bad_docs[i]), "did not refuse %s", bad_docs[i]);
    /* valid so far but unfinished: neither refused nor complete */
    static const char *const open_docs[] = {
        "{\"name\":\"ab\",\"age\":1,\"tags\":[\"a\"]",
        "{\"tags\":[\"a\"],\"age\":12",
        "{\"name\":\"ab\",\"age\":1,\"tags\":[\"b",
    };
    for (size_t i = 0; i < KVT_ARRAY_LEN(open_docs); i++)
        CHECKF(!refuses(s, open_docs[i]) && !accepts(s, open_docs[i]), "%s: refused or complete", open_docs[i]);
    kvt_jg_schema_free(s);
}

/* Bounds at zero (a positive integer, a number from 0) and zod's safe-integer bounds. */
static void test_number_bounds(void) {
    kvt_jg_schema *s = compile("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\",\"minimum\":0},"
                               "\"p\":{\"type\":\"integer\",\"exclusiveMinimum\":0},\"z\":{\"type\":\"integer\","
                               "\"minimum\":-9007199254740991,\"maximum\":9007199254740991}}}");
    if (!s) return;
    CHECK(accepts(s, "{\"n\":0.5,\"p\":7,\"z\":-123456789012345}"));
    CHECK(refuses(s, "{\"n\":-"));
    CHECK(refuses(s, "{\"n\":1e"));
    CHECK(refuses(s, "{\"p\":0"));
    CHECK(refuses(s, "{\"p\":-"));
    CHECK(refuses(s, "{\"z\":1234567890123456"));
    kvt_jg_schema_free(s);
}

static void test_refused_keywords(void) {
    static const struct {
        const char *schema, *word;
    } cases[] = {
        {"{\"type\":\"string\",\"pattern\":\"(?!a)\"}", "'pattern' (at offset"},
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\",\"minimum\":5.5}}}",
         "'minimum' of 5.5 for a number"},
        {"{\"type\":\"number\",\"multipleOf\":2}", "'multipleOf'"},
        {"{\"$ref\":\"#/defs/a\"}", "'$ref'"},
        {"{\"type\":\"string\",\"format\":\"hostname\"}", "'format'"},
        {"{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"maxLength\":3}]}", "'oneOf'"},
        {"{\"type\":\"string\",\"anyOf\":[{\"maxLength\":3}]}", "'anyOf' beside 'type'"},
        {"{\"type\":\"object\",\"required\":[\"x\"]}", "'required' names 'x'"},
        {"{\"type\":\"date\"}", "'type' \"date\""},
        {"{\"type\":\"string\",\"enum\":[1]}", "no value of 'enum'"},
    };
    for (size_t i = 0; i < KVT_ARRAY_LEN(cases); i++) {
        cJSON *sc = cJSON_Parse(cases[i].schema);
        char err[256];
        kvt_jg_schema *s = NULL;
        int rc = kvt_jg_schema_compile(sc, &s, err, sizeof err);
        CHECKF(rc == KVT_EARG && !s && strstr(err, cases[i].word), "%s: rc %d, '%s'", cases[i].schema, rc, err);
        cJSON_Delete(sc);
        kvt_jg_schema_free(s);
    }
}

/* ---- over a real vocabulary --------------------------------------------------------------- */

static void test_mask_exact(const kvt_tokenizer *t) {
    kvt_jg_vocab *v = kvt_jg_vocab_new(t);
    kvt_jg_schema *s = compile(PERSON);
    int32_t nv = kvt_tokenizer_n_vocab(t);
    uint8_t *mask = malloc((size_t)nv);
    static const char *const prefixes[] = {"",
                                           " {",
                                           "{\"na",
                                           "{\"name\":\"x",
                                           "{\"name\":\"abcd",
                                           "{\"name\":\"ab\",",
                                           "{\"name\":\"ab\",\"age\":1",
                                           "{\"tags\":[",
                                           "{\"tags\":[3",
                                           "{\"name\":\"ab\",\"age\":1,\"tags\":[\"a\"]"};
    for (size_t i = 0; s && i < KVT_ARRAY_LEN(prefixes); i++) {
        kvt_jg *g = kvt_jg_new(s, v);
        CHECK(kvt_jg_feed(g, prefixes[i], strlen(prefixes[i])) == 0);
        jg_check_mask(g, s, t, 1000, prefixes[i], mask);
        jg_check_mask(g, s, t, kvt_jg_min_bytes(g) + 1, prefixes[i], mask); /* tight: only the shortest way */
        kvt_jg_free(g);
    }
    free(mask);
    kvt_jg_schema_free(s);
    kvt_jg_vocab_free(v);
}

/* A top-level number may end after any digit but may also go on: on the
 * last token of the budget only the end of generation is offered (the same
 * rule as for a GBNF grammar, through the same mask), so the reply stops with
 * the number rather than running out in it. */
static void test_last_token(const kvt_tokenizer *t) {
    kvt_jg_vocab *v = kvt_jg_vocab_new(t);
    kvt_jg_schema *s = compile("{\"type\":\"integer\"}");
    int32_t nv = kvt_tokenizer_n_vocab(t), eog = 0, only = 1;
    uint8_t *mask = malloc((size_t)nv);
    for (int32_t id = 0; id < nv; id++) eog += kvt_tokenizer_is_eog(t, id) || id == kvt_tokenizer_eos(t);
    kvt_jg *g = kvt_jg_new(s, v);
    CHECK(kvt_jg_feed(g, "12", 2) == 0 && kvt_jg_can_end(g) && !kvt_jg_done(g));
    int32_t n = kvt_jg_mask(g, 1, mask);
    for (int32_t id = 0; id < nv; id++)
        if (mask[id]) only &= kvt_tokenizer_is_eog(t, id) || id == kvt_tokenizer_eos(t);
    CHECKF(eog > 0 && n == eog && only, "integer, budget 1: %d allowed, %d end generation", n, eog);
    jg_check_mask(g, s, t, 1, "12", mask);
    CHECK(kvt_jg_mask(g, 2, mask) > eog); /* with two left, more digits may come */
    jg_check_mask(g, s, t, 2, "12", mask);
    kvt_jg_free(g);
    free(mask);
    kvt_jg_schema_free(s);
    kvt_jg_vocab_free(v);
}

/* A tiny validator for the subset, over the schema as JSON. */
static int validate(const cJSON *v, const cJSON *sc) {
    const cJSON *c = cJSON_GetObjectItem(sc, "const"), *en = cJSON_GetObjectItem(sc, "enum");
    if (c) return cJSON_Compare(v, c, 1);
    if (en) {
        for (const cJSON *e = en->child; e; e = e->next)
            if (cJSON_Compare(v, e, 1)) return 1;
        return 0;
    }
    const cJSON *type = cJSON_GetObjectItem(sc, "type");
    if (cJSON_IsArray(type)) {
        for (const cJSON *t = type->child; t; t = t->next) {
            cJSON *one = cJSON_Duplicate(sc, 1);
            cJSON_ReplaceItemInObject(one, "type", cJSON_CreateString(t->valuestring));
            int ok = validate(v, one);
            cJSON_Delete(one);
            if (ok) return 1;
        }
        return 0;
    }
    const char *ty = cJSON_IsString(type) ? type->valuestring : "";
    if (!strcmp(ty, "object")) {
        if (!cJSON_IsObject(v)) return 0;
        const cJSON *props = cJSON_GetObjectItem(sc, "properties"), *req = cJSON_GetObjectItem(sc, "required");
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
            if (!cJSON_GetObjectItemCaseSensitive(v, r->valuestring)) return 0;
        for (const cJSON *f = v->child; f; f = f->next) {
            const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, f->string) : NULL;
            if (!ps || !validate(f, ps)) return 0;
        }
        return 1;
    }
    if (!strcmp(ty, "array")) {
        if (!cJSON_IsArray(v)) return 0;
        int n = cJSON_GetArraySize(v);
        const cJSON *mi = cJSON_GetObjectItem(sc, "minItems"), *ma = cJSON_GetObjectItem(sc, "maxItems");
        if ((mi && n < mi->valueint) || (ma && n > ma->valueint)) return 0;
        for (const cJSON *e = v->child; e; e = e->next)
            if (!validate(e, cJSON_GetObjectItem(sc, "items"))) return 0;
        return 1;
    }
    if (!strcmp(ty, "string")) {
        if (!cJSON_IsString(v)) return 0;
        int chars = 0;
        for (const unsigned char *p = (const unsigned char *)v->valuestring; *p; p++) chars += (*p & 0xC0) != 0x80;
        const cJSON *mi = cJSON_GetObjectItem(sc, "minLength"), *ma = cJSON_GetObjectItem(sc, "maxLength");
        return !(mi && chars < mi->valueint) && !(ma && chars > ma->valueint);
    }
    if (!strcmp(ty, "integer")) return cJSON_IsNumber(v) && v->valuedouble == (double)(long long)v->valuedouble;
    if (!strcmp(ty, "number")) return cJSON_IsNumber(v);
    if (!strcmp(ty, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(ty, "null")) return cJSON_IsNull(v);
    return 0;
}

/* Random walks: each step picks a random allowed token. Every walk must end in
 * a complete document within the budget that parses and validates. */
static void test_random_walks(const kvt_tokenizer *t, const char *schema_json, int walks, int32_t budget) {
    kvt_jg_vocab *v = kvt_jg_vocab_new(t);
    kvt_jg_schema *s = compile(schema_json);
    cJSON *sc = schema_json ? cJSON_Parse(schema_json) : NULL;
    int32_t nv = kvt_tokenizer_n_vocab(t);
    uint8_t *mask = malloc((size_t)nv);
    int32_t *allowed = malloc((size_t)nv * sizeof *allowed);
    unsigned seed = 12345;
    int finished = 0, valid = 0;
    for (int w = 0; s && w < walks; w++) {
        kvt_jg *g = kvt_jg_new(s, v);
        char text[8192];
        size_t len = 0;
        int32_t b = budget;
        while (!kvt_jg_done(g) && b > 0) {
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
            b--;
        }
        text[len] = 0;
        finished += kvt_jg_can_end(g);
        cJSON *doc = cJSON_ParseWithLength(text, len);
        int ok = doc && (sc ? validate(doc, sc) : cJSON_IsObject(doc));
        valid += ok;
        if (!ok) fprintf(stderr, "walk %d (budget %d) made an invalid document: %s\n", w, budget, text);
        cJSON_Delete(doc);
        kvt_jg_free(g);
    }
    CHECKF(finished == walks && valid == walks, "%s budget %d: %d/%d finished, %d valid",
           schema_json ? "schema" : "json_object", budget, finished, walks, valid);
    free(mask);
    free(allowed);
    cJSON_Delete(sc);
    kvt_jg_schema_free(s);
    kvt_jg_vocab_free(v);
}

/* A budget below the shortest completion (a long forced head, say): only
 * tokens that shorten it are allowed, so the document still ends, in at most
 * as many tokens as it had bytes to go. */
static void test_over_budget(const kvt_tokenizer *t) {
    kvt_jg_vocab *v = kvt_jg_vocab_new(t);
    kvt_jg_schema *s = compile(PERSON);
    int32_t nv = kvt_tokenizer_n_vocab(t);
    uint8_t *mask = malloc((size_t)nv);
    kvt_jg *g = kvt_jg_new(s, v);
    int32_t start = kvt_jg_min_bytes(g), steps = 0, shrinking = 1;
    unsigned seed = 3;
    while (!kvt_jg_done(g) && steps < start) {
        int32_t before = kvt_jg_min_bytes(g), n = kvt_jg_mask(g, 1, mask), pick = -1;
        if (!n) break;
        seed = seed * 1103515245u + 12345u;
        for (int32_t k = 0, want = (int32_t)((seed >> 8) % (unsigned)n); k < nv && pick < 0; k++)
            if (mask[k] && want-- == 0) pick = k;
        kvt_jg_accept(g, pick);
        shrinking &= kvt_jg_min_bytes(g) < before;
        steps++;
    }
    CHECKF(kvt_jg_done(g) && shrinking, "over budget: done %d after %d tokens (%d bytes to go at the start)",
           kvt_jg_done(g), steps, start);
    kvt_jg_free(g);
    free(mask);
    kvt_jg_schema_free(s);
    kvt_jg_vocab_free(v);
}

int main(void) {
    test_json_object();
    test_schema();
    test_refused_keywords();
    test_number_bounds();
    kvt_tokenizer *t = kvt_test_vocab("ggml-vocab-gpt-2.gguf");
    if (!t) {
        kvt_test_skip_part("../shared/vocab/ggml-vocab-gpt-2.gguf is missing: no vocabulary tests");
        return kvt_test_done("test_json_grammar");
    }
    test_mask_exact(t);
    test_last_token(t);
    test_random_walks(t, NULL, 40, 400);
    test_random_walks(t, PERSON, 40, 400);
    test_random_walks(t, PERSON, 20, 60); /* tight: the shortest PERSON is 37 bytes */
    test_over_budget(t);
    kvt_tokenizer_free(t);
    kvt_tokenizer *spm = kvt_test_vocab("ggml-vocab-llama-spm.gguf");
    if (spm) {
        test_random_walks(spm, PERSON, 20, 200);
        kvt_tokenizer_free(spm);
    }
    return kvt_test_done("test_json_grammar");
}
