// SPDX-License-Identifier: MIT
/* The cost of constrained decoding per token: the time of kvt_jg_mask (and
 * kvt_jg_accept) along random walks over a real vocabulary, for json_object,
 * an agent-style tool schema, and the heaviest schema the mask supports
 * (zod-like: formats, a pattern, bounds, a discriminated union, a recursive
 * $ref). The schemas run alternately for ROUNDS rounds; each line is the
 * median round (and the slowest single step). Compare with a decode step's
 * time (bench_engine) for the ratio. Prints numbers only, and the load.
 * usage: bench_json_grammar [VOCAB.gguf] (default ../shared/vocab/ggml-vocab-gpt-2.gguf) */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gguf.h"
#include "json_grammar.h"

#define WALKS 10
#define BUDGET 400
#define ROUNDS 5

static const char *const SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\",\"maxLength\":48},\"limit\":{\"type\":"
    "\"integer\",\"minimum\":0},\"status\":{\"enum\":[\"open\",\"pending\",\"closed\"]},\"note\":{\"type\":"
    "\"string\"}},\"required\":[\"query\",\"limit\",\"status\",\"note\"],\"additionalProperties\":false}";

static const char *const WORST =
    "{\"type\":\"object\",\"properties\":{\"user\":{\"type\":\"object\",\"properties\":{\"email\":{\"type\":"
    "\"string\",\"format\":\"email\"},\"id\":{\"type\":\"string\",\"format\":\"uuid\"},\"role\":{\"enum\":["
    "\"admin\",\"user\"]}},\"required\":[\"email\",\"id\",\"role\"],\"additionalProperties\":false},\"price\":{"
    "\"type\":\"number\",\"exclusiveMinimum\":0},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\","
    "\"pattern\":\"^[a-z]{1,8}$\"},\"minItems\":1},\"when\":{\"type\":\"string\",\"format\":\"date-time\"},"
    "\"pay\":{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"card\"},\"last4\":{"
    "\"type\":\"string\",\"pattern\":\"^\\\\d{4}$\"}},\"required\":[\"kind\",\"last4\"]},{\"type\":\"object\","
    "\"properties\":{\"kind\":{\"const\":\"bank\"},\"iban\":{\"type\":\"string\",\"minLength\":15,"
    "\"maxLength\":34}},\"required\":[\"kind\",\"iban\"]}]},\"tree\":{\"$ref\":\"#/$defs/node\"}},\"required\":["
    "\"user\",\"price\",\"tags\",\"when\",\"pay\",\"tree\"],\"additionalProperties\":false,\"$defs\":{\"node\":{"
    "\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":5},\"kids\":{"
    "\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},\"required\":[\"n\",\"kids\"],"
    "\"additionalProperties\":false}}}";

typedef struct {
    double mask_us, accept_us, max_us;
    long steps, allowed;
} result;

static result run(const kvt_jg_vocab *v, const char *schema_json) {
    cJSON *sc = schema_json ? cJSON_Parse(schema_json) : NULL;
    char err[256];
    kvt_jg_schema *s = NULL;
    if (kvt_jg_schema_compile(sc, &s, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    int32_t nv = kvt_jg_vocab_size(v);
    uint8_t *mask = kvt_xmalloc((size_t)nv);
    int32_t *allowed = kvt_xmalloc((size_t)nv * sizeof *allowed);
    unsigned seed = 7;
    double t_mask = 0, t_accept = 0, t_max = 0;
    result r = {0};
    for (int w = 0; w < WALKS; w++) {
        kvt_jg *g = kvt_jg_new(s, v);
        for (int32_t b = BUDGET; b > 0 && !kvt_jg_done(g); b--) {
            double t0 = kvt_now();
            int32_t n = kvt_jg_mask(g, b, mask);
            double t1 = kvt_now();
            if (!n) break;
            int32_t k = 0;
            for (int32_t id = 0; id < nv; id++)
                if (mask[id]) allowed[k++] = id;
            seed = seed * 1103515245u + 12345u;
            double t2 = kvt_now();
            kvt_jg_accept(g, allowed[(seed >> 8) % (unsigned)k]);
            t_accept += kvt_now() - t2;
            t_mask += t1 - t0;
            t_max = t1 - t0 > t_max ? t1 - t0 : t_max;
            r.allowed += n;
            r.steps++;
        }
        kvt_jg_free(g);
    }
    r.mask_us = 1e6 * t_mask / (double)r.steps;
    r.accept_us = 1e6 * t_accept / (double)r.steps;
    r.max_us = 1e6 * t_max;
    free(mask);
    free(allowed);
    kvt_jg_schema_free(s);
    cJSON_Delete(sc);
    return r;
}

static int by_mask(const void *a, const void *b) {
    double x = ((const result *)a)->mask_us, y = ((const result *)b)->mask_us;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "../shared/vocab/ggml-vocab-gpt-2.gguf";
    kvt_gguf *g;
    kvt_tokenizer *t;
    if (kvt_gguf_open(path, &g) || kvt_tokenizer_load(g, &t)) {
        fprintf(stderr, "cannot load %s: %s\n", path, kvt_errmsg());
        return 1;
    }
    double t0 = kvt_now();
    kvt_jg_vocab *v = kvt_jg_vocab_new(t);
    printf("vocabulary %s: %d tokens, tries built in %.1f ms (once per model)\n", path, kvt_jg_vocab_size(v),
           1e3 * (kvt_now() - t0));
    double load[3] = {0};
    if (getloadavg(load, 3) < 0) load[0] = -1;
    printf("load average before: %.2f %.2f %.2f\n", load[0], load[1], load[2]);
    static const char *const labels[] = {"json_object", "tool schema", "worst schema"};
    const char *schemas[] = {NULL, SCHEMA, WORST};
    result res[3][ROUNDS];
    for (int round = 0; round < ROUNDS; round++) /* alternated, so load drifts hit each alike */
        for (int k = 0; k < 3; k++) res[k][round] = run(v, schemas[k]);
    for (int k = 0; k < 3; k++) {
        qsort(res[k], ROUNDS, sizeof res[k][0], by_mask);
        const result *m = &res[k][ROUNDS / 2];
        printf("%-12s %5ld tokens/round: mask %7.1f us/token median of %d rounds (%.1f..%.1f; slowest step %.0f us), "
               "avg %ld allowed of %d, accept %.2f us/token\n",
               labels[k], m->steps, m->mask_us, ROUNDS, res[k][0].mask_us, res[k][ROUNDS - 1].mask_us, m->max_us,
               m->allowed / m->steps, kvt_jg_vocab_size(v), m->accept_us);
    }
    if (getloadavg(load, 3) < 0) load[0] = -1;
    printf("load average after: %.2f %.2f %.2f\n", load[0], load[1], load[2]);
    kvt_jg_vocab_free(v);
    kvt_tokenizer_free(t);
    kvt_gguf_close(g);
    return 0;
}
