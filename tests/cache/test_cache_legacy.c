// SPDX-License-Identifier: MIT
/* The cache invariant on quantized-weight models: for Q4_0 (and the other
 * legacy types and Q8_0), greedy output and logits after a cache hit from T0,
 * from T1 and from T2 (a new process on the same disk directory) are
 * bit-identical to a cold run. A new weight type is one more entry in types[]. */
#include <stdio.h>
#include <string.h>

#include "cache.h"
#include "generate.h"
#include "model.h"
#include "testutil.h"

#define B 8
#define N_GEN 12
#define N_PROMPT 100
#define FULL_BLOCK_TOKENS 96 /* the 12 whole blocks of a 100-token prompt */
#define VOCAB 600

static const struct {
    const char *name;
    uint32_t type;
} types[] = {{"q4_0", KVT_TYPE_Q4_0}, {"q4_1", KVT_TYPE_Q4_1},     {"q5_0", KVT_TYPE_Q5_0},
             {"q5_1", KVT_TYPE_Q5_1}, {"iq4_nl", KVT_TYPE_IQ4_NL}, {"q8_0", KVT_TYPE_Q8_0}};

static void test_type(const char *name, uint32_t type) {
    char file[64];
    snprintf(file, sizeof file, "m-%s.gguf", name);
    kvt_model *m = kvt_test_tiny_model_typed(file, VOCAB, type);
    CHECKF(m != NULL, "%s model", name);
    if (!m) return;
    const int32_t n_vocab = m->hp.n_vocab;
    unsigned seed = 11;
    int32_t p[N_PROMPT];
    kvt_test_random_tokens(p, N_PROMPT, n_vocab, &seed);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/kv-%s", kvt_test_tmpdir(), name);

    kvt_engine *e = kvt_test_engine(m, B, 128, 512);
    kvt_test_gen ref = kvt_test_generate(e, NULL, p, N_PROMPT, N_GEN, NULL);
    kvt_engine_free(e);
    CHECKF(ref.n == N_PROMPT + N_GEN, "%s: cold run made %d tokens", name, ref.n);

    /* a pool of 30 pages and a T1 big enough for everything */
    e = kvt_test_engine(m, B, 30, 512);
    kvt_cache *c = kvt_test_cache(e, dir, 64ull << 20);
    if (!e || !c) goto out;
    kvt_test_gen first = kvt_test_generate(e, c, p, N_PROMPT, N_GEN, NULL);
    CHECKF(kvt_test_same(&first, &ref), "%s: first cached run differs from the cold run", name);
    kvt_test_gen t0 = kvt_test_generate(e, c, p, N_PROMPT, N_GEN, NULL);
    CHECKF(t0.res.tier_tokens[KVT_TIER_T0] == FULL_BLOCK_TOKENS, "%s: %d tokens from T0", name,
           t0.res.tier_tokens[KVT_TIER_T0]);
    CHECKF(kvt_test_same(&t0, &ref), "%s: T0 hit differs from the cold run", name);
    /* other prompts churn the pool: p's pages are demoted to T1 */
    for (int k = 0; k < 4; k++) {
        int32_t q[N_PROMPT];
        kvt_test_random_tokens(q, N_PROMPT, n_vocab, &seed);
        kvt_test_gen o = kvt_test_generate(e, c, q, N_PROMPT, N_GEN, NULL);
        kvt_test_gen_free(&o);
    }
    kvt_test_gen t1 = kvt_test_generate(e, c, p, N_PROMPT, N_GEN, NULL);
    CHECKF(t1.res.tier_tokens[KVT_TIER_T1] > 0 && t1.res.n_reused == FULL_BLOCK_TOKENS, "%s: T1 %d, reused %d", name,
           t1.res.tier_tokens[KVT_TIER_T1], t1.res.n_reused);
    CHECKF(kvt_test_same(&t1, &ref), "%s: T1 hit differs from the cold run", name);
    CHECK(kvt_cache_flush(c) == 0);
    kvt_cache_free(c);
    kvt_engine_free(e);

    /* a new process on the same directory, with a T1 too small to matter: T2 */
    e = kvt_test_engine(m, B, 30, 512);
    c = kvt_test_cache(e, dir, 0);
    if (c) {
        kvt_test_gen t2 = kvt_test_generate(e, c, p, N_PROMPT, N_GEN, NULL);
        CHECKF(t2.res.tier_tokens[KVT_TIER_T2] > 0 && t2.res.n_reused == FULL_BLOCK_TOKENS, "%s: T2 %d, reused %d",
               name, t2.res.tier_tokens[KVT_TIER_T2], t2.res.n_reused);
        CHECKF(kvt_test_same(&t2, &ref), "%s: T2 hit differs from the cold run", name);
        kvt_test_gen_free(&t2);
        kvt_cache_free(c);
    }
    kvt_test_gen_free(&first);
    kvt_test_gen_free(&t0);
    kvt_test_gen_free(&t1);
out:
    kvt_engine_free(e);
    kvt_test_gen_free(&ref);
    kvt_model_free(m);
}

int main(void) {
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) test_type(types[i].name, types[i].type);
    return kvt_test_done("test_cache_legacy");
}
