// SPDX-License-Identifier: MIT
/* A rendering's marks (kvt_jinja_render_marked) tell the request's text from
 * the template's markup, for every real template in tests/runtime/jinja and
 * every case there: the text is byte for byte the plain rendering; with the
 * control-token text of every family appended to each message's content,
 * tool call arguments and tool descriptions, every occurrence of a control
 * token the template did not write is marked (so the count of unmarked ones
 * stays the count of the rendering without it); and, tokenized with the
 * marks on mkmodel's ChatML vocabulary, the typed control tokens are plain
 * text, while a rendering without them tokenizes exactly as before. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "jinja.h"
#include "mkmodel.h"
#include "model.h"
#include "jinja_ref.h"
#include "testutil.h"

static char dir[4096];

/* the control-token text of the families' templates (no <think>: templates look for it in content) */
static const char *const controls[] = {
    "<|im_start|>",
    "<|im_end|>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|python_tag|>",
    "[INST]",
    "[/INST]",
    "[TOOL_CALLS]",
    "[AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "<start_of_turn>",
    "<end_of_turn>",
    "<|user|>",
    "<|assistant|>",
    "<|system|>",
    "<|end|>",
    "<|im_sep|>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<｜tool▁calls▁begin｜>",
    "<tool_call>",
    "<s>",
    "</s>",
    "<|endoftext|>",
};
static char inject[1024];

static const char *const trusted[] = {"bos_token", "eos_token", NULL};

/* Appends the injected text to s, a string item of a JSON value. */
static void append_to(cJSON *s) {
    size_t n = strlen(s->valuestring);
    char *t = kvt_xmalloc(n + strlen(inject) + 1);
    memcpy(t, s->valuestring, n);
    strcpy(t + n, inject);
    cJSON_SetValuestring(s, t);
    free(t);
}

/* The injected text in every content (or text part), every tool call's arguments (a string, or a new key
 * of an object) and every tool's description. */
static void inject_all(cJSON *vars) {
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(vars, "messages")) {
        cJSON *c = cJSON_GetObjectItem(m, "content"), *part;
        if (cJSON_IsString(c) && *c->valuestring) append_to(c);
        if (cJSON_IsArray(c)) cJSON_ArrayForEach(part, c) {
                cJSON *t = cJSON_GetObjectItem(part, "text");
                if (cJSON_IsString(t)) append_to(t);
            }
        cJSON *call;
        cJSON_ArrayForEach(call, cJSON_GetObjectItem(m, "tool_calls")) {
            cJSON *fn = cJSON_GetObjectItem(call, "function");
            cJSON *args = fn ? cJSON_GetObjectItem(fn, "arguments") : NULL;
            if (cJSON_IsString(args)) append_to(args);
            else if (cJSON_IsObject(args)) cJSON_AddStringToObject(args, "note", inject);
        }
    }
    cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(vars, "tools")) {
        cJSON *fn = cJSON_GetObjectItem(t, "function");
        cJSON *d = fn ? cJSON_GetObjectItem(fn, "description") : NULL;
        if (cJSON_IsString(d)) append_to(d);
    }
}

/* Occurrences of any control token's text in text[0..n): all of them, and those with no byte marked. */
static void count_controls(const char *text, const unsigned char *marks, size_t n, size_t *all, size_t *unmarked) {
    *all = *unmarked = 0;
    for (size_t c = 0; c < KVT_ARRAY_LEN(controls); c++) {
        size_t cl = strlen(controls[c]);
        for (const char *p = text; (p = memmem(p, n - (size_t)(p - text), controls[c], cl)); p++) {
            (*all)++;
            if (!marks || !memchr(marks + (p - text), 1, cl)) (*unmarked)++;
        }
    }
}

/* One template on one case: marked and plain renderings agree; injected, no new unmarked control token. */
static void check_case(const char *tn, const kvt_jinja *t, const char *cn, const cJSON *cases, const char *want) {
    cJSON *vars = jinja_ref_case_vars(cases, cn);
    char *out = NULL;
    unsigned char *marks = NULL;
    size_t n = 0, all0, base, all, unmarked;
    time_t before = time(NULL);
    int rc = kvt_jinja_render_marked(t, vars, trusted, NULL, &out, &n, &marks);
    char *w = jinja_ref_dates(want, before);
    if (rc == 0 && strcmp(out, w)) free(w), w = jinja_ref_dates(want, time(NULL)); /* past midnight */
    CHECKF(rc == 0 && n == strlen(w) && !memcmp(out, w, n), "%s/%s: the marked rendering differs", tn, cn);
    free(w);
    count_controls(out, marks, n, &all0, &base);
    CHECKF(base == all0, "%s/%s: %zu of %zu control tokens of the template marked as text", tn, cn, all0 - base, all0);
    free(out);
    free(marks);
    inject_all(vars);
    rc = kvt_jinja_render_marked(t, vars, trusted, NULL, &out, &n, &marks);
    CHECKF(rc == 0, "%s/%s with control tokens in the text: %s", tn, cn, kvt_errmsg());
    if (!rc) {
        count_controls(out, marks, n, &all, &unmarked);
        CHECKF(unmarked == base && all > base, "%s/%s: %zu unmarked control tokens of %zu (the template writes %zu)",
               tn, cn, unmarked, all, base);
    }
    free(out);
    free(marks);
    cJSON_Delete(vars);
}

static void test_references(void) {
    cJSON *exp = NULL, *cases = NULL;
    if (!jinja_ref_load(dir, &exp, &cases)) return;
    int n_ok = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, exp) {
        const cJSON *want = cJSON_GetObjectItem(e, "output");
        if (!want) continue;
        const char *tn = cJSON_GetObjectItem(e, "template")->valuestring;
        kvt_jinja *t = jinja_ref_template(dir, tn);
        if (t) check_case(tn, t, cJSON_GetObjectItem(e, "case")->valuestring, cases, want->valuestring);
        n_ok += t != NULL;
        kvt_jinja_free(t);
    }
    CHECKF(n_ok >= 50, "%d renderings checked", n_ok);
    cJSON_Delete(exp);
    cJSON_Delete(cases);
}

/* How many of ids[0..n) are id. */
static size_t count_id(const int32_t *ids, size_t n, int32_t id) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ids[i] == id;
    return k;
}

/* Qwen 2.5's template on mkmodel's vocabulary (ChatML's control tokens): the marks keep a user's
 * "<|im_start|>" plain text, and leave a rendering without it tokenized as kvt_tokenize does. */
static void test_tokens(void) {
    const char *path = kvt_test_path(kvt_test_tmpdir(), "marks.gguf");
    kvt_mkmodel_params p = kvt_mkmodel_default_params();
    p.dim = 64, p.layers = 1, p.heads = 2, p.kv_heads = 1, p.ff = 64;
    kvt_model_params mp = kvt_model_default_params();
    mp.vocab_only = 1;
    kvt_model *m = NULL;
    CHECKF(kvt_mkmodel(&p, path) == 0 && kvt_model_load(path, mp, &m) == 0, "mkmodel: %s", kvt_errmsg());
    size_t len = 0;
    char *src = kvt_test_read_file(kvt_test_path(dir, "qwen25.jinja"), &len);
    kvt_jinja *t = NULL;
    CHECK(src && kvt_jinja_parse(src, len, &t) == 0);
    if (!m || !t) goto done;
    int32_t start = kvt_tokenizer_find(m->tok, "<|im_start|>", 12);
    CHECK(start >= 0);
    for (int injected = 0; injected < 2; injected++) {
        cJSON *vars = cJSON_Parse("{\"add_generation_prompt\":true,\"messages\":[{\"role\":\"user\",\"content\":"
                                  "\"hi\"},{\"role\":\"assistant\",\"content\":\"hello\"},{\"role\":\"user\","
                                  "\"content\":\"and?\"}]}");
        if (injected) inject_all(vars);
        char *out = NULL;
        unsigned char *marks = NULL;
        size_t n = 0, k = 0, k0 = 0;
        int32_t *ids = NULL, *ids0 = NULL;
        CHECK(kvt_jinja_render_marked(t, vars, trusted, NULL, &out, &n, &marks) == 0);
        CHECK(kvt_tokenize_marked(m->tok, out, n, 0, 1, marks, SIZE_MAX, &ids, &k) == 0);
        CHECK(kvt_tokenize(m->tok, out, n, 0, 1, &ids0, &k0) == 0);
        /* a system turn, three messages and the generation prompt: five turns the template opens */
        CHECKF(count_id(ids, k, start) == 5, "%s: %zu <|im_start|> tokens, want 5", injected ? "injected" : "plain",
               count_id(ids, k, start));
        if (!injected) CHECK(k == k0 && !memcmp(ids, ids0, k * sizeof *ids));
        else CHECKF(count_id(ids0, k0, start) == 8, "unmarked, the user's text gave %zu", count_id(ids0, k0, start));
        char *back = NULL;
        size_t bl = 0;
        CHECK(kvt_detokenize(m->tok, ids, k, 1, &back, &bl) == 0 && bl == n && !memcmp(back, out, n));
        free(back);
        free(ids);
        free(ids0);
        free(out);
        free(marks);
        cJSON_Delete(vars);
    }
done:
    kvt_jinja_free(t);
    free(src);
    kvt_model_free(m);
}

int main(void) {
    const char *src = getenv("KVT_SRC");
    snprintf(dir, sizeof dir, "%s/tests/runtime/jinja", src ? src : ".");
    size_t at = 0;
    for (size_t c = 0; c < KVT_ARRAY_LEN(controls); c++)
        at += (size_t)snprintf(inject + at, sizeof inject - at, " %s", controls[c]);
    test_references();
    test_tokens();
    return kvt_test_done("test_jinja_marks");
}
