// SPDX-License-Identifier: MIT
/* The cache invariant on a K-quant model (Q4_K_M: Q4_K and Q6_K weights, Q8_K
 * activations): greedy output and logits with a hit from T0, from T1 and,
 * after a restart, from T2 are bit-identical to a cold run; so is a prompt
 * that diverges mid-block. Batches of different sizes go through the K-quant
 * kernels on the warm and the cold paths, so this checks their batch
 * invariance end to end. */
#include <stdio.h>
#include <string.h>

#include "cache.h"
#include "generate.h"
#include "mkmodel.h"
#include "model.h"
#include "testutil.h"

#define B 8
#define N_GEN 10
#define N_PROMPT 100
#define N_VOCAB 600

static kvt_model *model;

typedef kvt_test_gen run_out;
#define new_engine(n_pages) kvt_test_engine(model, B, (n_pages), 512)
#define run(e, c, p, n) kvt_test_generate((e), (c), (p), (n), N_GEN, NULL)

static void test_tiers(const int32_t *p, const run_out *ref, unsigned *seed) {
    kvt_engine *e = new_engine(24);
    kvt_cache *c = kvt_test_cache(e, NULL, 64ull << 20);
    if (!c) return;
    run_out first = run(e, c, p, N_PROMPT);
    CHECK(kvt_test_same(&first, ref));
    run_out warm0 = run(e, c, p, N_PROMPT);
    CHECKF(warm0.res.tier_tokens[KVT_TIER_T0] == 96, "T0 reused %d", warm0.res.tier_tokens[KVT_TIER_T0]);
    CHECK(kvt_test_same(&warm0, ref));
    /* other prompts push p's pages down to T1 */
    for (int k = 0; k < 3; k++) {
        int32_t q[N_PROMPT];
        kvt_test_random_tokens(q, N_PROMPT, N_VOCAB, seed);
        run_out o = run(e, c, q, N_PROMPT);
        kvt_test_gen_free(&o);
    }
    run_out warm1 = run(e, c, p, N_PROMPT);
    CHECKF(warm1.res.tier_tokens[KVT_TIER_T1] > 0 && warm1.res.n_reused == 96, "T1 %d, reused %d",
           warm1.res.tier_tokens[KVT_TIER_T1], warm1.res.n_reused);
    CHECK(kvt_test_same(&warm1, ref));
    /* a mismatch in the middle of block 5: 40 tokens reused, the rest computed */
    int32_t p3[N_PROMPT];
    memcpy(p3, p, sizeof p3);
    p3[44] = p3[44] == 300 ? 301 : 300;
    kvt_engine *ce = new_engine(24);
    run_out ref3 = run(ce, NULL, p3, N_PROMPT);
    kvt_engine_free(ce);
    run_out warm3 = run(e, c, p3, N_PROMPT);
    CHECKF(warm3.res.n_reused == 40, "mid-block: reused %d", warm3.res.n_reused);
    CHECK(kvt_test_same(&warm3, &ref3));
    run_out *all[] = {&first, &warm0, &warm1, &ref3, &warm3};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) kvt_test_gen_free(all[i]);
    kvt_cache_free(c);
    kvt_engine_free(e);
}

static void test_disk(const int32_t *p, const run_out *ref) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/kvdisk-quant", kvt_test_tmpdir());
    kvt_engine *e = new_engine(40);
    kvt_cache *c = kvt_test_cache(e, dir, 4 * (kvt_page_bytes(e) + 2048)); /* a tiny T1: blocks go on to disk */
    if (!c) return;
    run_out first = run(e, c, p, N_PROMPT);
    CHECK(kvt_test_same(&first, ref));
    CHECK(kvt_cache_flush(c) == 0);
    kvt_cache_free(c);
    kvt_engine_free(e);
    /* a restart finds the prefix on disk */
    e = new_engine(40);
    c = kvt_test_cache(e, dir, 4 * (kvt_page_bytes(e) + 2048));
    if (!c) return;
    run_out warm = run(e, c, p, N_PROMPT);
    CHECKF(warm.res.tier_tokens[KVT_TIER_T2] == N_PROMPT - 1 - (N_PROMPT - 1) % B, "restored %d tokens from T2",
           warm.res.tier_tokens[KVT_TIER_T2]);
    CHECK(kvt_test_same(&warm, ref));
    kvt_test_gen_free(&first);
    kvt_test_gen_free(&warm);
    kvt_cache_free(c);
    kvt_engine_free(e);
}

int main(void) {
    /* rows of 256 (dim and ff) so every matrix can be a K type */
    kvt_mkmodel_params mp = kvt_mkmodel_default_params();
    mp.dim = 256;
    mp.layers = 2;
    mp.heads = 4;
    mp.kv_heads = 2;
    mp.ff = 256;
    mp.vocab = N_VOCAB;
    mp.mix = KVT_MIX_Q4_K_M;
    mp.type = kvt_quant_mix_base(mp.mix);
    const char *path = kvt_test_path(kvt_test_tmpdir(), "q4km.gguf");
    if (kvt_mkmodel(&mp, path) || kvt_model_load(path, kvt_model_default_params(), &model)) {
        CHECKF(0, "Q4_K_M model: %s", kvt_errmsg());
        return kvt_test_done("test_cache_quant");
    }
    CHECK(model->layers[0].wq.type == KVT_TYPE_Q4_K && model->output.type == KVT_TYPE_Q6_K);
    unsigned seed = 11;
    int32_t p[N_PROMPT];
    kvt_test_random_tokens(p, N_PROMPT, N_VOCAB, &seed);
    kvt_engine *e = new_engine(24);
    run_out ref = run(e, NULL, p, N_PROMPT);
    kvt_engine_free(e);
    test_tiers(p, &ref, &seed);
    test_disk(p, &ref);
    kvt_test_gen_free(&ref);
    kvt_model_free(model);
    return kvt_test_done("test_cache_quant");
}
