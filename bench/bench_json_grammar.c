// SPDX-License-Identifier: MIT
/* The cost of constrained decoding per token: the time of kvt_jg_mask (and
 * kvt_jg_accept) along random walks over a real vocabulary, for json_object
 * and for an agent-style tool schema, split by where the walk was (inside a
 * string, where the plain-text fast path applies, or elsewhere). Compare it
 * with a decode step's time (bench_engine) for the ratio. Prints numbers only.
 * usage: bench_json_grammar [VOCAB.gguf] (default ../shared/vocab/ggml-vocab-gpt-2.gguf) */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gguf.h"
#include "json_grammar.h"

#define WALKS 30
#define BUDGET 400

static const char *const SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\",\"maxLength\":48},\"limit\":{\"type\":"
    "\"integer\",\"minimum\":0},\"status\":{\"enum\":[\"open\",\"pending\",\"closed\"]},\"note\":{\"type\":"
    "\"string\"}},\"required\":[\"query\",\"limit\",\"status\",\"note\"],\"additionalProperties\":false}";

static void run(const char *label, const kvt_jg_vocab *v, const char *schema_json) {
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
    double t_mask = 0, t_accept = 0;
    long steps = 0, allowed_sum = 0;
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
            allowed_sum += n;
            steps++;
        }
        kvt_jg_free(g);
    }
    printf("%-12s %6ld tokens: mask %7.1f us/token (avg %6ld allowed of %d), accept %.2f us/token\n", label, steps,
           1e6 * t_mask / (double)steps, allowed_sum / steps, nv, 1e6 * t_accept / (double)steps);
    free(mask);
    free(allowed);
    kvt_jg_schema_free(s);
    cJSON_Delete(sc);
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
    run("json_object", v, NULL);
    run("tool schema", v, SCHEMA);
    kvt_jg_vocab_free(v);
    kvt_tokenizer_free(t);
    kvt_gguf_close(g);
    return 0;
}
