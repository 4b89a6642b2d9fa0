// SPDX-License-Identifier: MIT
/* The example grammars llama.cpp ships (tests/reference/gbnf, see its README),
 * as data: every one compiles; a few texts each is known to accept or refuse
 * come out so here; the token mask over a real vocabulary equals the
 * brute-force check of every token halfway through each accepted text (deep
 * in C statements, JSON strings, multi-byte characters), tight budget
 * included, and at steps of seeded random walks, and every walk ends in a
 * text the grammar accepts where it may end. Walks are short (tens of tokens)
 * so that all of it takes a few seconds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "jg_test.h"

#define WALKS 2      /* random walks per grammar */
#define DEEP_STEP 16 /* the mask is held to brute force at steps 0, 4 and DEEP_STEP */
#define BUDGET 48    /* tokens a walk may take */
#define MAX_TEXT 4096

static kvt_jg_schema *load(const char *name) {
    const char *src = getenv("KVT_SRC");
    char path[1024], err[256] = "";
    snprintf(path, sizeof path, "%s/tests/reference/gbnf/%s.gbnf", src ? src : ".", name);
    size_t len = 0;
    char *text = kvt_test_read_file(path, &len);
    CHECKF(text, "cannot read %s", path);
    if (!text) return NULL;
    kvt_jg_schema *s = NULL;
    int rc = kvt_jg_schema_gbnf(text, len, &s, err, sizeof err);
    CHECKF(rc == 0 && s, "%s.gbnf is refused: %s", name, err);
    free(text);
    return rc == 0 ? s : NULL;
}

/* 1 if text[0..len) is accepted whole and the grammar may end there. */
static int accepts(const kvt_jg_schema *s, const char *text, size_t len) {
    kvt_jg *g = kvt_jg_new(s, NULL);
    int ok = kvt_jg_feed(g, text, len) == 0 && kvt_jg_can_end(g);
    kvt_jg_free(g);
    return ok;
}

/* Texts each grammar must accept (good) and refuse (bad), NULL-terminated. */
static const struct {
    const char *name, *good[4], *bad[4];
} CASES[] = {
    {"arithmetic", {"1+2= 3\n", "x*(y-1)= z\n10/2=5\n", "a_1 +b =  c\n"}, {"1+2\n", "= 3\n", "1+2=3", "X=1\n"}},
    {"c",
     {"", "int main(){return 0;}", "float f(int x){x = x*2;while(x<10){x = x+1;}// done\n}",
      "char g(){/* a*b */if(a==b){return -1;}else{}}"},
     {"int main() {return 0;}", "main(){}", "int f(){return 0}", "int f(){/* open }"}},
    {"chess",
     {"1. e4 e5\n2. Nf3 Nc6\n", "1. d4 d5\n2. c4 dxc4\n3. O-O-O Qxd8#\n"},
     {"1. e4 e5\n", "1. e9 e5\n2. a3 a4\n"}},
    {"english", {"Hello, world!", "a\tb\nc [x] {y} ~`|\\"}, {"", "Hello  world", " lead", "caf\xc3\xa9"}},
    {"japanese",
     {"\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf\xe3\x80\x81\xe4\xb8\x96\xe7\x95\x8c\xe3\x80\x82",
      "\xe3\x82\xab\xe3\x82\xbf \xe6\x97\xa5"},
     {"", "hello", "\xe3\x81\x93  \xe3\x81\x93"}},
    {"json",
     {"{}", "{\"a\": [1, -2.5, true, null, \"x\\n\\u00e9\"]}", "{\"k\":{\"n\":1e5} }\n"},
     {"[1]", "{\"a\": 01}", "{\"a\":1,}", "{\"\\q\":1}"}},
    {"json_arr", {"[\n]", "[\n1,\n\"x\"]", "[\n{\"a\": [1, 2]},\n null]"}, {"[1]", "[\n1,2]", "[\n]\n", "{}"}},
    {"list",
     {"- one\n", "- one\n- two, three\n"},
     {"", "- \n",
      "- a\xe2\x80\xa8"
      "b\n",
      "-a\n"}},
};

static void test_texts(void) {
    for (size_t i = 0; i < KVT_ARRAY_LEN(CASES); i++) {
        kvt_jg_schema *s = load(CASES[i].name);
        if (!s) continue;
        for (int k = 0; k < 4 && CASES[i].good[k]; k++)
            CHECKF(accepts(s, CASES[i].good[k], strlen(CASES[i].good[k])), "%s.gbnf should accept '%s'", CASES[i].name,
                   CASES[i].good[k]);
        for (int k = 0; k < 4 && CASES[i].bad[k]; k++)
            CHECKF(!accepts(s, CASES[i].bad[k], strlen(CASES[i].bad[k])), "%s.gbnf should refuse '%s'", CASES[i].name,
                   CASES[i].bad[k]);
        kvt_jg_schema_free(s);
    }
}

/* Seeded random walks of at most BUDGET tokens through name's mask over t:
 * the mask equals brute force at three steps, never allows
 * nothing before the end, and the text made is accepted afresh. */
static void walks(const char *name, const kvt_jg_vocab *v, const kvt_tokenizer *t, uint64_t seed) {
    kvt_jg_schema *s = load(name);
    if (!s) return;
    int32_t nv = kvt_tokenizer_n_vocab(t);
    uint8_t *mask = malloc((size_t)nv);
    char *text = malloc(MAX_TEXT);
    uint64_t rng = seed;
    for (int w = 0; w < WALKS; w++) {
        kvt_jg *g = kvt_jg_new(s, v);
        size_t len = 0;
        int ended = 0;
        for (int step = 0; step < BUDGET && !ended; step++) {
            int32_t n = 0;
            if (step == 0 || step == 4 || step == DEEP_STEP) {
                jg_check_mask_n(g, s, t, BUDGET - step, text, len, mask);
                for (int32_t id = 0; id < nv; id++) n += mask[id];
            } else {
                n = kvt_jg_mask(g, BUDGET - step, mask);
            }
            CHECKF(n > 0, "%s.gbnf walk %d step %d: the mask allows nothing", name, w, step);
            if (n <= 0) break;
            int32_t pick = jg_pick(mask, nv, n, &rng);
            CHECK(kvt_jg_accept(g, pick) == 0);
            int pl = kvt_token_piece(t, pick, text + len, MAX_TEXT - len, 0);
            if (pl > 0) len += (size_t)pl;
            ended = kvt_jg_done(g);
        }
        CHECKF(ended || kvt_jg_can_end(g), "%s.gbnf walk %d stopped where the grammar cannot end: '%.*s'", name, w,
               (int)len, text);
        CHECKF(accepts(s, text, len), "%s.gbnf walk %d made '%.*s', which the grammar refuses", name, w, (int)len, text);
        kvt_jg_free(g);
    }
    free(text);
    free(mask);
    kvt_jg_schema_free(s);
}

/* The mask after the first half of each text CASES says name accepts
 * equals brute force, with room to spare (budget 100, even texts) or just
 * room for the shortest completion (odd ones; a tighter budget allows what
 * shortens it most, which brute force does not model). */
static void half_masks(size_t i, const kvt_jg_vocab *v, const kvt_tokenizer *t) {
    kvt_jg_schema *s = load(CASES[i].name);
    if (!s) return;
    uint8_t *mask = malloc((size_t)kvt_tokenizer_n_vocab(t));
    for (int k = 0; k < 4 && CASES[i].good[k]; k++) {
        size_t half = strlen(CASES[i].good[k]) / 2;
        kvt_jg *g = kvt_jg_new(s, v);
        CHECK(kvt_jg_feed(g, CASES[i].good[k], half) == 0);
        int32_t budget = k % 2 ? KVT_MAX(kvt_jg_min_bytes(g), 1) : 100;
        jg_check_mask_n(g, s, t, budget, CASES[i].good[k], half, mask);
        kvt_jg_free(g);
    }
    free(mask);
    kvt_jg_schema_free(s);
}

int main(void) {
    test_texts();
    kvt_tokenizer *t = kvt_test_vocab("ggml-vocab-gpt-2.gguf");
    if (!t) {
        kvt_test_skip_part("../shared/vocab/ggml-vocab-gpt-2.gguf is missing: no vocabulary tests");
        return kvt_test_done("test_gbnf_llama");
    }
    kvt_jg_vocab *v = kvt_jg_vocab_new(t);
    for (size_t i = 0; i < KVT_ARRAY_LEN(CASES); i++) {
        half_masks(i, v, t);
        walks(CASES[i].name, v, t, 1000 + i);
    }
    kvt_jg_vocab_free(v);
    kvt_tokenizer_free(t);
    return kvt_test_done("test_gbnf_llama");
}
