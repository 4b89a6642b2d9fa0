// SPDX-License-Identifier: MIT
/* Decode attention split across threads (attn_decode.h): a model decoding one
 * token at a time gives the logits of a single prefill on one thread, bit for
 * bit, for every thread count (fewer KV heads than threads cuts each head's
 * attention into parts by pages and by lane classes), page size and KV type;
 * and a sequence continued by decoding from another's pages (a cache hit)
 * gives the logits of the cold run. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "engine.h"
#include "model.h"
#include "testutil.h"

#define N_TOKENS 70 /* several pages of every size below, and a partial last one */

static kvt_engine *engine(const kvt_model *m, int threads, int block, kvt_kv_dtype dt) {
    kvt_engine_params p = kvt_engine_default_params();
    p.n_threads = threads;
    p.block_size = block;
    p.n_pages = 64;
    p.max_seqs = 2;
    p.kv_dtype = dt;
    kvt_engine *e = NULL;
    int rc = kvt_engine_new(m, p, &e);
    CHECKF(rc == 0, "engine: %s", kvt_errmsg());
    return e;
}

/* Logits of every position, the tokens fed `chunk` at a time. Caller frees. */
static float *logits(const kvt_model *m, const int32_t *toks, int chunk, int threads, int block, kvt_kv_dtype dt) {
    const size_t V = (size_t)m->hp.n_vocab;
    kvt_engine *e = engine(m, threads, block, dt);
    float *out = calloc((size_t)N_TOKENS * V, sizeof(float));
    int32_t seq;
    CHECK(e && out && kvt_seq_new(e, NULL, 0, 0, &seq) == 0);
    for (int i = 0; e && out && i < N_TOKENS; i += chunk)
        CHECK(kvt_engine_feed(e, seq, toks + i, KVT_MIN(chunk, N_TOKENS - i), 1, out + (size_t)i * V) == 0);
    kvt_engine_free(e);
    return out;
}

/* A cache hit: sequence A prefills everything; B starts from A's first k
 * pages and decodes the rest one token at a time on `threads` threads. */
static void cache_hit(const kvt_model *m, const int32_t *toks, const float *ref, int threads, kvt_kv_dtype dt) {
    const size_t V = (size_t)m->hp.n_vocab;
    const int B = 16, k = 3;
    kvt_engine *e = engine(m, threads, B, dt);
    float *out = calloc((size_t)N_TOKENS * V, sizeof(float));
    int32_t a, b, pages[8];
    CHECK(kvt_seq_new(e, NULL, 0, 0, &a) == 0);
    CHECK(kvt_engine_feed(e, a, toks, N_TOKENS, 0, NULL) == 0);
    memcpy(pages, kvt_seq_pages(e, a, NULL), sizeof(int32_t) * (size_t)k);
    CHECK(kvt_seq_new(e, pages, k, k * B, &b) == 0);
    for (int i = k * B; i < N_TOKENS; i++) CHECK(kvt_engine_feed(e, b, toks + i, 1, 1, out + (size_t)i * V) == 0);
    CHECKF(!memcmp(out + (size_t)k * B * V, ref + (size_t)k * B * V, (size_t)(N_TOKENS - k * B) * V * sizeof(float)),
           "%s KV, %d threads: decoding after a cache hit differs from the cold run", kvt_kv_dtype_name(dt), threads);
    free(out);
    kvt_engine_free(e);
}

int main(void) {
    const char *dir = kvt_test_path(kvt_test_shared(), "models");
    kvt_model *m = NULL;
    if (kvt_model_load(kvt_test_path(dir, "tiny-llama-f16.gguf"), kvt_model_default_params(), &m) != 0)
        kvt_test_skip("no ../shared/models/tiny-llama-f16.gguf (set KVT_SHARED): split decode not checked");
    const size_t V = (size_t)m->hp.n_vocab, bytes = (size_t)N_TOKENS * V * sizeof(float);
    int32_t toks[N_TOKENS];
    for (int i = 0; i < N_TOKENS; i++) toks[i] = (int32_t)((i * 7919 + 13) % (int)V);
    toks[0] = 1;
    const kvt_kv_dtype dts[] = {KVT_KV_F16, KVT_KV_Q8_0, KVT_KV_F32};
    static const int threads[] = {1, 2, 3, 4, 5, 7};
    static const int blocks[] = {8, 32};
    for (size_t d = 0; d < KVT_ARRAY_LEN(dts); d++) {
        float *ref = logits(m, toks, N_TOKENS, 1, 16, dts[d]); /* one prefill batch, one thread */
        for (size_t t = 0; t < KVT_ARRAY_LEN(threads); t++)
            for (size_t b = 0; b < KVT_ARRAY_LEN(blocks); b++) {
                float *got = logits(m, toks, 1, threads[t], blocks[b], dts[d]);
                CHECKF(!memcmp(ref, got, bytes), "%s KV, %d threads, pages of %d: decode differs from prefill",
                       kvt_kv_dtype_name(dts[d]), threads[t], blocks[b]);
                free(got);
            }
        cache_hit(m, toks, ref, 4, dts[d]);
        cache_hit(m, toks, ref, 1, dts[d]);
        free(ref);
    }
    kvt_model_free(m);
    return kvt_test_done("test_decode_split");
}
