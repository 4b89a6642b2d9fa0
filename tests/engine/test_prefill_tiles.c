// SPDX-License-Identifier: MIT
/* Prefill attention tiles (engine_attn.c): a prompt fed in one call, whose
 * chunks attend as tiles of many tokens per K page and V block, gives the
 * logits of the same prompt decoded one token at a time (each row alone, in
 * the per-row order of attn.h), bit for bit. The prompt is long enough for
 * several V blocks and prefill chunks, on models whose tiles take 64 tokens
 * (MHA), 16 (4 query heads per KV head) and, on gemma2, a sliding window
 * that ends the tiles part way in; for every KV type, page sizes that do and
 * do not divide the V block, and several thread counts. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "engine.h"
#include "mkmodel.h"
#include "model.h"
#include "testutil.h"

#define N_TOKENS 1100 /* three V blocks of 512 keys, three prefill chunks of 512 */
#define VOCAB 320

static kvt_engine *engine(const kvt_model *m, int threads, int block, kvt_kv_dtype dt) {
    kvt_engine_params p = kvt_engine_default_params();
    p.n_threads = threads;
    p.block_size = block;
    p.n_ctx = N_TOKENS;
    p.n_pages = N_TOKENS / block + 2;
    p.max_seqs = 1;
    p.kv_dtype = dt;
    return kvt_test_engine_new(m, p);
}

/* Logits of every position, the tokens fed `chunk` at a time. Caller frees. */
static float *logits(const kvt_model *m, const int32_t *toks, int chunk, int threads, int block, kvt_kv_dtype dt) {
    const size_t V = (size_t)m->hp.n_vocab;
    kvt_engine *e = engine(m, threads, block, dt);
    float *out = calloc((size_t)N_TOKENS * V, sizeof(float));
    int32_t seq = -1;
    CHECK(e && out && kvt_seq_new(e, NULL, 0, 0, &seq) == 0);
    for (int i = 0; e && out && seq >= 0 && i < N_TOKENS; i += chunk)
        CHECK(kvt_engine_feed(e, seq, toks + i, KVT_MIN(chunk, N_TOKENS - i), 1, out + (size_t)i * V) == 0);
    kvt_engine_free(e);
    return out;
}

static kvt_model *model(const char *arch, int32_t heads, int32_t kv_heads, const char *file) {
    kvt_mkmodel_params mp = kvt_test_tiny_params();
    mp.arch = arch;
    mp.dim = 128; /* head_dim 32: q8_0 KV takes multiples of 32 */
    mp.heads = heads;
    mp.kv_heads = kv_heads;
    mp.vocab = VOCAB;
    mp.ctx = N_TOKENS;
    mp.swa = 300;
    const char *path = kvt_test_path(kvt_test_tmpdir(), file);
    kvt_model *m = NULL;
    CHECKF(kvt_mkmodel(&mp, path) == 0, "mkmodel %s: %s", file, kvt_errmsg());
    CHECKF(kvt_model_load(path, kvt_model_default_params(), &m) == 0, "load %s: %s", file, kvt_errmsg());
    return m;
}

int main(void) {
    static const struct {
        const char *arch, *file;
        int32_t heads, kv_heads;
    } models[] = {{"llama", "mha.gguf", 4, 4}, {"llama", "gqa4.gguf", 4, 1}, {"gemma2", "swa.gguf", 4, 2}};
    static const struct { int threads, block; } runs[] = {{1, 16}, {2, 48}, {3, 32}};
    const kvt_kv_dtype dts[] = {KVT_KV_F16, KVT_KV_Q8_0, KVT_KV_F32};
    int32_t toks[N_TOKENS];
    unsigned seed = 11;
    kvt_test_random_tokens(toks, N_TOKENS, VOCAB, &seed);
    for (size_t mi = 0; mi < KVT_ARRAY_LEN(models); mi++) {
        kvt_model *m = model(models[mi].arch, models[mi].heads, models[mi].kv_heads, models[mi].file);
        if (!m) continue;
        const size_t bytes = (size_t)N_TOKENS * (size_t)m->hp.n_vocab * sizeof(float);
        for (size_t d = 0; d < KVT_ARRAY_LEN(dts); d++) {
            float *ref = logits(m, toks, 1, 1, 32, dts[d]); /* each row alone */
            for (size_t r = 0; r < KVT_ARRAY_LEN(runs); r++) {
                float *got = logits(m, toks, N_TOKENS, runs[r].threads, runs[r].block, dts[d]);
                CHECKF(ref && got && !memcmp(ref, got, bytes),
                       "%s, %s KV, %d threads, pages of %d: the prefill differs from decoding row by row",
                       models[mi].file, kvt_kv_dtype_name(dts[d]), runs[r].threads, runs[r].block);
                free(got);
            }
            free(ref);
        }
        kvt_model_free(m);
    }
    return kvt_test_done("test_prefill_tiles");
}
