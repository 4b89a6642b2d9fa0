// SPDX-License-Identifier: MIT
/* The lazy grammar (json_lazy.h) over mkmodel's built-in vocabulary: free
 * text before the trigger takes every token; a token that completes the
 * trigger and goes on past it is allowed only where the grammar takes that
 * text (the mask equals a brute-force check of every token); once on, only
 * what the call grammar allows, the arguments held to the schema; after a
 * call, another call or the end (or only the closing text, or nothing);
 * an anchored trigger counts only at the start; a control token standing for
 * the trigger switches the grammar on. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "json_lazy.h"
#include "model.h"
#include "testutil.h"
#include "vocab_test.h"

#define ARGS \
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]," \
    "\"additionalProperties\":false}"

static kvt_jg_schema *calls(const char *head, const char *tail) {
    cJSON *sc = cJSON_Parse(ARGS);
    const cJSON *schemas[1] = {sc};
    const char *heads[1] = {head}, *tails[1] = {tail};
    kvt_jg_schema *s = NULL;
    char err[256];
    CHECKF(kvt_jg_schema_tagged(1, heads, schemas, tails, &s, err, sizeof err) == 0, "%s", err);
    cJSON_Delete(sc);
    return s;
}

static kvt_jg_lazy_spec *spec(const char *trigger, int anchored, const char *head, const char *tail,
                              const char *next_head, const char *end) {
    kvt_jg_lazy_spec *sp = kvt_xcalloc(1, sizeof *sp);
    sp->trigger = kvt_xstrdup(trigger);
    sp->anchored = anchored;
    sp->first = calls(head, tail);
    sp->next = next_head ? calls(next_head, tail) : NULL;
    sp->end = kvt_xstrdup(end);
    return sp;
}

/* The one token of text (a failed check where it is more). */
static int32_t tok1(const kvt_tokenizer *t, const char *text) {
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(kvt_tokenize(t, text, strlen(text), 0, 0, &ids, &n) == 0);
    CHECKF(n == 1, "'%s' is %zu tokens", text, n);
    int32_t id = n ? ids[0] : 0;
    free(ids);
    return id;
}

/* Accepts every token of text; returns how many were refused. */
static int feed(const kvt_tokenizer *t, kvt_jg_lazy *l, const char *text) {
    int32_t *ids = NULL;
    size_t n = 0;
    int bad = 0;
    CHECK(kvt_tokenize(t, text, strlen(text), 0, 0, &ids, &n) == 0);
    for (size_t i = 0; i < n; i++) bad += kvt_jg_lazy_accept(l, ids[i]) != 0;
    free(ids);
    return bad;
}

static int is_eog(const kvt_tokenizer *t, int32_t id) {
    return kvt_tokenizer_is_eog(t, id) || id == kvt_tokenizer_eos(t);
}

/* Where the text so far ends with seen, the mask equals, for every token: it does not complete the
 * trigger in seen + its bytes, or the text after the trigger begins a document of first. */
static void check_free_mask(const kvt_tokenizer *t, kvt_jg_lazy *l, const kvt_jg_lazy_spec *sp, const char *seen,
                            uint8_t *mask) {
    int32_t nv = kvt_tokenizer_n_vocab(t), n = kvt_jg_lazy_mask(l, 1000, mask), want = 0, wrong = 0, refused = 0;
    size_t ls = strlen(seen), lt = strlen(sp->trigger);
    for (int32_t id = 0; id < nv; id++) {
        char buf[300];
        int len = kvt_token_piece(t, id, buf + ls, sizeof buf - ls, 0);
        if (len > (int)(sizeof buf - ls)) len = 0; /* longer than any token the mask considers */
        memcpy(buf, seen, ls);
        size_t all = ls + (size_t)(len > 0 ? len : 0);
        const char *hit = memmem(buf, all, sp->trigger, lt);
        int ok = 1;
        if (hit && (size_t)(hit - buf) + lt > ls) { /* completed inside this token */
            kvt_jg *g = kvt_jg_new(sp->first, NULL);
            size_t at = (size_t)(hit - buf) + lt;
            ok = kvt_jg_feed(g, buf + at, all - at) == 0;
            kvt_jg_free(g);
        }
        want += ok;
        refused += !ok;
        wrong += ok != mask[id];
    }
    CHECKF(!wrong && n == want, "after '%s': mask allows %d, brute force %d, %d differ", seen, n, want, wrong);
    int32_t *list = kvt_xmalloc((size_t)nv * sizeof *list);
    CHECKF(kvt_jg_lazy_refused(l, list, nv) == refused, "after '%s': %d refused", seen, refused);
    free(list);
}

/* Free text, a straddling trigger, a call held to the schema, another call, the end. */
static void test_calls(const kvt_tokenizer *t, const kvt_jg_vocab *v) {
    /* the trigger "<t" is short so that tokens of this vocabulary ("to", "th", "too") straddle it */
    kvt_jg_lazy_spec *sp = spec("<t", 0, "ool>{\"name\": \"add\", \"arguments\": ", "}</tool>",
                                "\n<tool>{\"name\": \"add\", \"arguments\": ", "");
    kvt_jg_lazy *l = kvt_jg_lazy_new(sp, v, -1);
    int32_t nv = kvt_tokenizer_n_vocab(t);
    uint8_t *mask = kvt_xmalloc((size_t)nv);
    CHECK(l && !kvt_jg_lazy_on(l) && kvt_jg_lazy_can_end(l));
    check_free_mask(t, l, sp, "", mask);
    CHECK(feed(t, l, "Hi there, x < y and <b>bold</b> is fine") == 0);
    CHECK(!kvt_jg_lazy_on(l));
    CHECK(feed(t, l, " <") == 0);
    check_free_mask(t, l, sp, "<", mask);
    CHECK(!mask[tok1(t, "th")] && mask[tok1(t, "to")] && mask[tok1(t, "too")] && mask[tok1(t, "t")]);
    int32_t th = tok1(t, "th");
    CHECK(kvt_jg_lazy_accept(l, th) != 0 && !kvt_jg_lazy_on(l)); /* refused, and nothing changed */
    CHECK(kvt_jg_lazy_accept(l, tok1(t, "to")) == 0 && kvt_jg_lazy_on(l) && !kvt_jg_lazy_can_end(l));
    /* on: the mask is the call grammar's after "o" */
    kvt_jg *ref = kvt_jg_new(sp->first, v);
    uint8_t *want = kvt_xmalloc((size_t)nv);
    CHECK(kvt_jg_feed(ref, "o", 1) == 0);
    int32_t nw = kvt_jg_mask(ref, 200, want), nm = kvt_jg_lazy_mask(l, 200, mask);
    CHECK(nw == nm && !memcmp(want, mask, (size_t)nv));
    kvt_jg_free(ref);
    free(want);
    CHECK(feed(t, l, "ol>{\"name\": \"add\", \"arguments\": {\"a\": ") == 0);
    int32_t q = tok1(t, "\"");
    kvt_jg_lazy_mask(l, 200, mask);
    CHECK(!mask[q] && kvt_jg_lazy_accept(l, q) != 0); /* "a" is an integer: no string */
    CHECK(feed(t, l, "5}}</tool>") == 0);
    /* after the call: the next call (its head begins with a newline) or the end */
    CHECK(kvt_jg_lazy_on(l) && kvt_jg_lazy_can_end(l) && !kvt_jg_lazy_done(l));
    int32_t n = kvt_jg_lazy_mask(l, 200, mask), eog = 0, nl = tok1(t, "\n");
    for (int32_t id = 0; id < nv; id++) eog += is_eog(t, id);
    CHECKF(n == eog + 1 && mask[nl], "after a call: %d allowed, want the %d end tokens and a newline", n, eog);
    CHECK(kvt_jg_lazy_accept(l, tok1(t, "x")) != 0);
    CHECK(feed(t, l, "\n<tool>{\"name\": \"add\", \"arguments\": {\"a\": 7}}</tool>") == 0);
    CHECK(kvt_jg_lazy_can_end(l) && kvt_jg_lazy_accept(l, kvt_tokenizer_eos(t)) == 0);
    /* a budget too small for another call leaves only the end */
    CHECK(kvt_jg_lazy_mask(l, 5, mask) == eog && !mask[nl]);
    kvt_jg_lazy_free(l);
    free(mask);
    kvt_jg_lazy_spec_free(sp);
}

/* The trigger held whole by one token from the start: "tha" goes on past "th" with text the grammar
 * refuses, "the" with text it takes; and one call only: then nothing may follow. */
static void test_whole_token(const kvt_tokenizer *t, const kvt_jg_vocab *v) {
    kvt_jg_lazy_spec *sp = spec("th", 0, "e{\"name\": \"add\", \"arguments\": ", "}", NULL, "");
    kvt_jg_lazy *l = kvt_jg_lazy_new(sp, v, -1);
    int32_t nv = kvt_tokenizer_n_vocab(t);
    uint8_t *mask = kvt_xmalloc((size_t)nv);
    check_free_mask(t, l, sp, "", mask);
    CHECK(!mask[tok1(t, "tha")] && mask[tok1(t, "the")] && mask[tok1(t, "ab")]);
    CHECK(kvt_jg_lazy_accept(l, tok1(t, "tha")) != 0 && !kvt_jg_lazy_on(l));
    CHECK(feed(t, l, "the{\"name\": \"add\", \"arguments\": {\"a\": 1}}") == 0);
    CHECK(kvt_jg_lazy_done(l) && kvt_jg_lazy_can_end(l));
    kvt_jg_lazy_free(l);
    free(mask);
    kvt_jg_lazy_spec_free(sp);
}

/* A closing text (Mistral's "]"): after the call only it, then nothing. */
static void test_end_text(const kvt_tokenizer *t, const kvt_jg_vocab *v) {
    kvt_jg_lazy_spec *sp = spec("[C]", 0, "[{\"name\": \"add\", \"arguments\": ", "}",
                                ", {\"name\": \"add\", \"arguments\": ", "]");
    kvt_jg_lazy *l = kvt_jg_lazy_new(sp, v, -1);
    int32_t nv = kvt_tokenizer_n_vocab(t);
    uint8_t *mask = kvt_xmalloc((size_t)nv);
    CHECK(feed(t, l, "ok [C][{\"name\": \"add\", \"arguments\": {\"a\": 1}}") == 0);
    CHECK(!kvt_jg_lazy_can_end(l) && !kvt_jg_lazy_done(l));
    int32_t n = kvt_jg_lazy_mask(l, 200, mask);
    CHECK(n == 2 && mask[tok1(t, "]")] && mask[tok1(t, ",")] && !mask[kvt_tokenizer_eos(t)]);
    CHECK(feed(t, l, ", {\"name\": \"add\", \"arguments\": {\"a\": 2}}]") == 0);
    CHECK(kvt_jg_lazy_done(l));
    kvt_jg_lazy_free(l);
    free(mask);
    kvt_jg_lazy_spec_free(sp);
}

/* An anchored trigger counts only where it opens the text; a control token stands for the trigger. */
static void test_anchored_and_token(const kvt_tokenizer *t, const kvt_jg_vocab *v) {
    kvt_jg_lazy_spec *sp = spec("{", 1, "\"name\": \"add\", \"parameters\": ", "}", NULL, "");
    kvt_jg_lazy *l = kvt_jg_lazy_new(sp, v, -1);
    CHECK(feed(t, l, "a {\"b\": 1}") == 0 && !kvt_jg_lazy_on(l));
    int32_t nv = kvt_tokenizer_n_vocab(t);
    uint8_t *mask = kvt_xmalloc((size_t)nv);
    CHECK(kvt_jg_lazy_mask(l, 200, mask) == nv); /* past the start: free for good */
    kvt_jg_lazy_free(l);
    l = kvt_jg_lazy_new(sp, v, -1);
    CHECK(feed(t, l, " \n{") == 0 && kvt_jg_lazy_on(l));
    CHECK(feed(t, l, "\"name\": \"add\", \"parameters\": {\"a\": -3}}") == 0 && kvt_jg_lazy_done(l));
    kvt_jg_lazy_free(l);
    kvt_jg_lazy_spec_free(sp);
    /* <|im_start|> is a control token of this vocabulary (no bytes): as the trigger it switches the grammar on */
    int32_t ctl = kvt_tokenizer_find(t, "<|im_start|>", strlen("<|im_start|>"));
    CHECK(ctl >= 0);
    sp = spec("<|im_start|>", 0, "{\"name\": \"add\", \"arguments\": ", "}", NULL, "");
    l = kvt_jg_lazy_new(sp, v, ctl);
    CHECK(feed(t, l, "text ") == 0 && !kvt_jg_lazy_on(l));
    CHECK(kvt_jg_lazy_accept(l, ctl) == 0 && kvt_jg_lazy_on(l));
    CHECK(kvt_jg_lazy_mask(l, 200, mask) == 1 && mask[tok1(t, "{")]);
    kvt_jg_lazy_free(l);
    kvt_jg_lazy_spec_free(sp);
    free(mask);
}

int main(void) {
    kvt_mkmodel_params p = kvt_mkmodel_default_params();
    p.dim = 64;
    p.layers = 1;
    p.heads = 2;
    p.kv_heads = 1;
    p.ff = 64;
    p.vocab = 20000; /* the letter pairs and triples: tokens that straddle a trigger */
    const char *path = kvt_test_path(kvt_test_tmpdir(), "lazy.gguf");
    kvt_model *m = NULL;
    kvt_model_params mp = kvt_model_default_params();
    mp.vocab_only = 1;
    CHECKF(kvt_mkmodel(&p, path) == 0 && kvt_model_load(path, mp, &m) == 0, "%s", kvt_errmsg());
    if (!m) return kvt_test_done("test_json_lazy");
    kvt_jg_vocab *v = kvt_jg_vocab_new(m->tok);
    test_calls(m->tok, v);
    test_whole_token(m->tok, v);
    test_end_text(m->tok, v);
    test_anchored_and_token(m->tok, v);
    kvt_jg_vocab_free(v);
    kvt_model_free(m);
    return kvt_test_done("test_json_lazy");
}
