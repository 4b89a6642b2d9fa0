// SPDX-License-Identifier: MIT
/* Times one token's sampling over a large vocabulary for each of the
 * sampler's configurations: greedy, temperature 1 with no filter (OpenAI's
 * defaults, which rank the whole vocabulary), top-k 40, typical, XTC,
 * Mirostat 2, a dynamic temperature and DRY over a 4,096-token history.
 * Usage: bench_sampler [VOCAB [TOKENS]] (default 151936, Qwen 2.5's, and
 * 50). Prints the median ms a token of 5 runs of TOKENS draws each. */
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "sampler.h"

#define RUNS 5
#define HISTORY 4096

static int by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int32_t vocab = argc > 1 ? atoi(argv[1]) : 151936, tokens = argc > 2 ? atoi(argv[2]) : 50;
    if (vocab < 2 || tokens < 1) {
        fprintf(stderr, "usage: bench_sampler [VOCAB >= 2 [TOKENS >= 1]]\n");
        return 2;
    }
    float *logits = kvt_xmalloc((size_t)vocab * sizeof *logits);
    int32_t *hist = kvt_xmalloc(HISTORY * sizeof *hist);
    srand(1);
    for (int32_t i = 0; i < vocab; i++) logits[i] = (float)(rand() % 20000) / 1000.0f - 10.0f; /* a flat spread */
    for (int32_t i = 0; i < HISTORY; i++) hist[i] = rand() % 200;
    static const char *const names[] = {"greedy",     "temperature 1", "top_k 40", "typical_p 0.9", "xtc 0.5",
                                        "mirostat 2", "dynatemp 0.5",  "dry 0.8",  "greedy + dry"};
    printf("vocabulary %d, %d tokens a run, median of %d runs\n", vocab, tokens, RUNS);
    for (int c = 0; c < (int)KVT_ARRAY_LEN(names); c++) {
        kvt_sampler_params p = kvt_sampler_default_params();
        p.temp = 1.0f, p.top_k = 0, p.top_p = 1.0f, p.seed = 1;
        if (c == 0 || c == 8) p.temp = 0;
        if (c == 2) p.top_k = 40;
        if (c == 3) p.typical_p = 0.9f;
        if (c == 4) p.xtc_probability = 0.5f;
        if (c == 5) p.mirostat = 2;
        if (c == 6) p.dynatemp_range = 0.5f;
        if (c == 7 || c == 8) p.dry_multiplier = 0.8f;
        double ms[RUNS];
        for (int r = 0; r < RUNS; r++) {
            kvt_sampler *s = kvt_sampler_new(p, vocab);
            kvt_sampler_prompt(s, hist, HISTORY);
            double t0 = kvt_now();
            for (int32_t i = 0; i < tokens; i++) kvt_sampler_sample(s, logits);
            ms[r] = (kvt_now() - t0) * 1e3 / tokens;
            kvt_sampler_free(s);
        }
        qsort(ms, RUNS, sizeof *ms, by_double);
        printf("%-14s %8.3f ms a token\n", names[c], ms[RUNS / 2]);
    }
    free(logits);
    free(hist);
    return 0;
}
