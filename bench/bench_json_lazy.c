// SPDX-License-Identifier: MIT
/* The cost of a lazy grammar (json_lazy.h) on free text, what every token
 * of a reply under tool_choice auto pays before a call: the scheduler's
 * kvt_jg_lazy_refused and kvt_jg_lazy_accept per token, along the tokens of
 * a prose text in which "<" and "<tool" come up (so the slower path, where
 * the text ends with part of the trigger, runs too), with ChatML's trigger
 * "<tool_call>" and an agent-style tool; also the setup per request
 * (kvt_jg_lazy_new scans the vocabulary once). ROUNDS rounds; each line is
 * the median round. Compare with a decode step's time (bench_engine).
 * Prints numbers only, and the load.
 * usage: bench_json_lazy [VOCAB.gguf] (default ../shared/vocab/ggml-vocab-gpt-2.gguf) */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gguf.h"
#include "json_lazy.h"

#define ROUNDS 7
#define REPEAT 40

static const char *const SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\",\"maxLength\":48},\"limit\":{\"type\":"
    "\"integer\",\"minimum\":0}},\"required\":[\"query\",\"limit\"],\"additionalProperties\":false}";

static const char *const TEXT =
    "The cache keeps every block of a prompt it has seen, so the next request that shares a prefix starts "
    "from there. Tags such as <b> or <tool> and comparisons like a < b appear in answers too; a model that "
    "writes HTML, x<y, or a <tool_ name without the rest keeps writing free text, and only the whole "
    "opening switches the grammar on. ";

static int by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static kvt_jg_lazy_spec *chatml_spec(void) {
    cJSON *sc = cJSON_Parse(SCHEMA);
    const cJSON *schemas[1] = {sc};
    const char *heads[1] = {"\n{\"name\": \"search\", \"arguments\": "}, *tails[1] = {"}\n</tool_call>"};
    const char *next[1] = {"\n<tool_call>\n{\"name\": \"search\", \"arguments\": "};
    char err[256];
    kvt_jg_lazy_spec *sp = kvt_xcalloc(1, sizeof *sp);
    sp->trigger = kvt_xstrdup("<tool_call>");
    sp->end = kvt_xstrdup("");
    if (kvt_jg_schema_tagged(1, heads, schemas, tails, &sp->first, err, sizeof err) ||
        kvt_jg_schema_tagged(1, next, schemas, tails, &sp->next, err, sizeof err)) {
        fprintf(stderr, "schema: %s\n", err);
        exit(1);
    }
    cJSON_Delete(sc);
    return sp;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "../shared/vocab/ggml-vocab-gpt-2.gguf";
    kvt_gguf *g;
    kvt_tokenizer *t;
    if (kvt_gguf_open(path, &g) || kvt_tokenizer_load(g, &t)) {
        fprintf(stderr, "cannot load %s: %s\n", path, kvt_errmsg());
        return 1;
    }
    kvt_jg_vocab *v = kvt_jg_vocab_new(t);
    kvt_jg_lazy_spec *sp = chatml_spec();
    int32_t *ids = NULL, nv = kvt_jg_vocab_size(v);
    size_t n = 0;
    if (kvt_tokenize(t, TEXT, strlen(TEXT), 0, 0, &ids, &n)) return 1;
    int32_t *refused = kvt_xmalloc((size_t)nv * sizeof *refused);
    double load[3] = {0};
    if (getloadavg(load, 3) < 0) load[0] = -1;
    printf("vocabulary %s: %d tokens; text of %zu tokens, %d times a round\n", path, nv, n, REPEAT);
    printf("load average before: %.2f %.2f %.2f\n", load[0], load[1], load[2]);
    double setup[ROUNDS], per_tok[ROUNDS];
    long refused_sum = 0;
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = kvt_now();
        kvt_jg_lazy *l = kvt_jg_lazy_new(sp, v, -1);
        double t1 = kvt_now();
        for (int k = 0; k < REPEAT; k++)
            for (size_t i = 0; i < n; i++) {
                refused_sum += kvt_jg_lazy_refused(l, refused, nv);
                if (kvt_jg_lazy_accept(l, ids[i]) || kvt_jg_lazy_on(l)) {
                    fprintf(stderr, "the text switched the grammar on at token %zu\n", i);
                    return 1;
                }
            }
        double t2 = kvt_now();
        setup[r] = 1e3 * (t1 - t0);
        per_tok[r] = 1e9 * (t2 - t1) / (double)(n * REPEAT);
        kvt_jg_lazy_free(l);
    }
    qsort(setup, ROUNDS, sizeof *setup, by_double);
    qsort(per_tok, ROUNDS, sizeof *per_tok, by_double);
    printf("free text: refused + accept %.0f ns/token median of %d rounds (%.0f..%.0f), %.2f tokens refused a "
           "step on average\n",
           per_tok[ROUNDS / 2], ROUNDS, per_tok[0], per_tok[ROUNDS - 1],
           (double)refused_sum / (double)(ROUNDS * REPEAT * (long)n));
    printf("setup (kvt_jg_lazy_new, once per request): %.2f ms median (%.2f..%.2f)\n", setup[ROUNDS / 2], setup[0],
           setup[ROUNDS - 1]);
    if (getloadavg(load, 3) < 0) load[0] = -1;
    printf("load average after: %.2f %.2f %.2f\n", load[0], load[1], load[2]);
    free(refused);
    free(ids);
    kvt_jg_lazy_spec_free(sp);
    kvt_jg_vocab_free(v);
    kvt_tokenizer_free(t);
    kvt_gguf_close(g);
    return 0;
}
