// SPDX-License-Identifier: MIT
/* q8_0 KV (--kv-type q8_0): the row codec's exact arithmetic; a clear error
 * for a head_dim that is not a multiple of 32; logits and greedy tokens
 * bit-identical across thread counts, chunking, n_batch and page size; greedy
 * output and logits with a cache hit from T0, T1 and T2 bit-identical to a
 * cold q8_0 run; f16 and q8_0 blocks never serve each other, even in one disk
 * directory; every tier holds about twice the tokens of f16 in its budget.
 * The models are our own (kvt_test_tiny_model has head_dim 16, which q8_0
 * cannot store): head_dim 32 (GQA, 2 query heads per KV head) and 64. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "common.h"
#include "engine.h"
#include "generate.h"
#include "kv_quant.h"
#include "mkmodel.h"
#include "model.h"
#include "ops.h"
#include "sampler.h"
#include "testutil.h"

#define B 8
#define N_GEN 10
#define N_PROMPT 120 /* 15 full blocks of B */

/* ---- the codec ---------------------------------------------------------------- */

static float deq(const uint8_t *blk, int i) {
    float d = kvt_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
    return d * (float)(int8_t)blk[KVT_KV_Q8_SCALE_BYTES + i];
}

static void test_codec(void) {
    CHECK(kvt_kv_row_bytes(KVT_KV_F16, 64) == 128 && kvt_kv_row_bytes(KVT_KV_F32, 64) == 256);
    CHECK(kvt_kv_row_bytes(KVT_KV_Q8_0, 64) == 68 && kvt_kv_row_bytes(KVT_KV_Q8_0, 32) == 34);
    CHECK(kvt_kv_row_bytes(KVT_KV_Q8_0, 48) == 0 && kvt_kv_row_bytes(KVT_KV_Q8_0, 16) == 0);
    kvt_kv_dtype dt = KVT_KV_F16;
    CHECK(kvt_kv_dtype_parse("q8_0", &dt) == 0 && dt == KVT_KV_Q8_0);
    CHECK(kvt_kv_dtype_parse("f32", &dt) == 0 && dt == KVT_KV_F32);
    CHECK(kvt_kv_dtype_parse("q4_0", &dt) == KVT_EARG && dt == KVT_KV_F32);
    CHECK(!strcmp(kvt_kv_dtype_name(KVT_KV_Q8_0), "q8_0"));

    /* amax 127 gives d = 1 exactly, so q = roundf(x): halves go away from zero */
    float x[KVT_KV_Q8_BLOCK] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.49f, -126.6f, 3.0f};
    uint8_t blk[KVT_KV_Q8_BLOCK_BYTES];
    kvt_kv_q8_quantize_row(x, KVT_KV_Q8_BLOCK, blk);
    CHECKF(blk[0] == 0x00 && blk[1] == 0x3c, "scale bytes %02x %02x, want f16 1.0 little-endian", blk[0], blk[1]);
    static const int8_t want[] = {127, 3, -3, 1, -1, 1, -127, 3};
    for (size_t i = 0; i < KVT_ARRAY_LEN(want); i++)
        CHECKF((int8_t)blk[KVT_KV_Q8_SCALE_BYTES + i] == want[i], "q[%zu] = %d, want %d", i,
               (int8_t)blk[KVT_KV_Q8_SCALE_BYTES + i], want[i]);
    for (int i = (int)KVT_ARRAY_LEN(want); i < KVT_KV_Q8_BLOCK; i++) CHECK(blk[KVT_KV_Q8_SCALE_BYTES + i] == 0);

    /* an all-zero block: scale 0, every q 0 */
    float z[KVT_KV_Q8_BLOCK] = {0};
    memset(blk, 0xff, sizeof blk);
    kvt_kv_q8_quantize_row(z, KVT_KV_Q8_BLOCK, blk);
    int nonzero = 0;
    for (size_t i = 0; i < sizeof blk; i++) nonzero += blk[i] != 0;
    CHECK(nonzero == 0);

    /* a NaN or an infinity is defined behaviour (UBSan checks the conversions) */
    float bad[KVT_KV_Q8_BLOCK] = {1.0f, NAN, -2.0f};
    kvt_kv_q8_quantize_row(bad, KVT_KV_Q8_BLOCK, blk);
    CHECK((int8_t)blk[KVT_KV_Q8_SCALE_BYTES + 1] == 0 && (int8_t)blk[KVT_KV_Q8_SCALE_BYTES + 2] == -127);
    bad[1] = INFINITY;
    kvt_kv_q8_quantize_row(bad, KVT_KV_Q8_BLOCK, blk);

    /* random rows: the error bound of kv_quant.h; the column layout holds the
     * same values; the scalar and AVX-512 paths give the same bits */
    enum { T = 21, N = 64, COLS = 24 };
    static float rows[T * N], plain[T * N], trans[N * COLS], ref_rows[T * N], ref_trans[N * COLS];
    static uint8_t q[T * 68], cols[COLS * 68];
    unsigned seed = 11;
    for (int i = 0; i < T * N; i++) rows[i] = ((float)rand_r(&seed) / (float)RAND_MAX - 0.5f) * (float)(1 + i % 7);
    for (int t = 0; t < T; t++) {
        kvt_kv_q8_quantize_row(rows + t * N, N, q + t * 68);
        kvt_kv_q8_put_column(q + t * 68, N, COLS, t, cols);
    }
    const char *variant = kvt_ops_variant();
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && kvt_ops_force_variant("scalar")) break;
        kvt_kv_q8_dequant_rows(q, T, N, plain);
        for (int i = 0; i < N * COLS; i++) trans[i] = -1.0f;
        kvt_kv_q8_dequant_columns(cols, COLS, T, N, trans);
        int over = 0, mismatch = 0, touched = 0;
        for (int t = 0; t < T; t++)
            for (int i = 0; i < N; i++) {
                const uint8_t *b = q + t * 68 + (i / KVT_KV_Q8_BLOCK) * KVT_KV_Q8_BLOCK_BYTES;
                float amax = 0;
                for (int k = 0; k < KVT_KV_Q8_BLOCK; k++)
                    amax = fmaxf(amax, fabsf(rows[t * N + i / KVT_KV_Q8_BLOCK * KVT_KV_Q8_BLOCK + k]));
                float v = plain[t * N + i];
                over += fabsf(v - rows[t * N + i]) > 0.57f * amax / 127.0f;
                mismatch += v != deq(b, i % KVT_KV_Q8_BLOCK) || trans[i * COLS + t] != v;
            }
        for (int i = 0; i < N; i++)
            for (int t = T; t < COLS; t++) touched += trans[i * COLS + t] != -1.0f; /* columns past T */
        CHECKF(over == 0, "%s: %d values off by more than 0.57 d", kvt_ops_variant(), over);
        CHECKF(mismatch == 0, "%s: %d dequantized values differ between layouts", kvt_ops_variant(), mismatch);
        CHECKF(touched == 0, "%s: %d values written past column T", kvt_ops_variant(), touched);
        if (pass == 0) {
            memcpy(ref_rows, plain, sizeof plain);
            memcpy(ref_trans, trans, sizeof trans);
        } else {
            CHECK(!memcmp(ref_rows, plain, sizeof plain) && !memcmp(ref_trans, trans, sizeof trans));
        }
    }
    kvt_ops_force_variant(variant);
}

/* ---- models and runs ----------------------------------------------------------- */

static kvt_model *make_model(const char *name, int32_t dim, int32_t heads, int32_t kv_heads) {
    kvt_mkmodel_params mp = kvt_mkmodel_default_params();
    mp.dim = dim;
    mp.layers = 2;
    mp.heads = heads;
    mp.kv_heads = kv_heads;
    mp.ff = 2 * dim;
    mp.vocab = 600;
    mp.ctx = 512;
    const char *path = kvt_test_path(kvt_test_tmpdir(), name);
    kvt_model *m = NULL;
    if (kvt_mkmodel(&mp, path) || kvt_model_load(path, kvt_model_default_params(), &m)) {
        CHECKF(0, "model %s: %s", path, kvt_errmsg());
        return NULL;
    }
    return m;
}

static kvt_engine *new_engine(const kvt_model *m, kvt_kv_dtype dt, int threads, int n_batch, int block,
                              int32_t n_pages) {
    kvt_engine_params ep = kvt_engine_default_params();
    ep.kv_dtype = dt;
    ep.block_size = block;
    ep.n_pages = n_pages;
    ep.n_threads = threads;
    ep.n_batch = n_batch;
    ep.n_ctx = 512;
    return kvt_test_engine_new(m, ep);
}

/* Logits of every position of toks[0..n), fed in pieces of `chunk`. Caller frees. */
static float *all_logits(const kvt_model *m, kvt_kv_dtype dt, const int32_t *toks, int n, int chunk, int threads,
                         int n_batch, int block) {
    int V = m->hp.n_vocab;
    float *out = calloc((size_t)n * (size_t)V, sizeof(float));
    kvt_engine *e = new_engine(m, dt, threads, n_batch, block, 128);
    if (!e) return out;
    int32_t seq;
    CHECK(kvt_seq_new(e, NULL, 0, 0, &seq) == 0);
    for (int i = 0; i < n; i += chunk)
        CHECK(kvt_engine_feed(e, seq, toks + i, KVT_MIN(chunk, n - i), 1, out + (size_t)i * (size_t)V) == 0);
    kvt_engine_free(e);
    return out;
}

/* A cold run: a fresh engine without a cache. */
static kvt_test_gen cold(const kvt_model *m, kvt_kv_dtype dt, int threads, const int32_t *prompt, int32_t n) {
    kvt_engine *e = new_engine(m, dt, threads, KVT_DEFAULT_N_BATCH, B, 128);
    kvt_test_gen o = kvt_test_generate(e, NULL, prompt, n, N_GEN, NULL);
    kvt_engine_free(e);
    return o;
}

/* ---- tests ---------------------------------------------------------------------- */

/* q8_0 on head_dim 16: KVT_EARG naming the head_dim, nothing allocated. */
static void test_head_dim_error(void) {
    kvt_model *m = kvt_test_tiny_model("hd16.gguf", 600);
    if (!m) return;
    CHECK(m->hp.head_dim == 16);
    kvt_engine_params ep = kvt_engine_default_params();
    ep.kv_dtype = KVT_KV_Q8_0;
    ep.n_pages = 8;
    kvt_engine *e = NULL;
    CHECK(kvt_engine_new(m, ep, &e) == KVT_EARG && e == NULL);
    CHECKF(strstr(kvt_errmsg(), "head_dim is 16") && strstr(kvt_errmsg(), "q8_0"), "message: %s", kvt_errmsg());
    CHECK(kvt_model_kv_token_bytes(m, KVT_KV_Q8_0) == 0);
    ep.kv_dtype = KVT_KV_F16;
    CHECK(kvt_engine_new(m, ep, &e) == 0);
    kvt_engine_free(e);
    kvt_model_free(m);
}

/* Page sizes, and the same logits however the work is split. */
static void test_invariance(const kvt_model *m, const char *name) {
    const int n = 40, V = m->hp.n_vocab;
    const kvt_hparams *hp = &m->hp;
    kvt_engine *e16 = new_engine(m, KVT_KV_F16, 1, KVT_DEFAULT_N_BATCH, B, 4);
    kvt_engine *e8 = new_engine(m, KVT_KV_Q8_0, 1, KVT_DEFAULT_N_BATCH, B, 4);
    if (!e16 || !e8) return;
    size_t want = 2 * (size_t)hp->n_layer * (size_t)hp->n_head_kv * B * (size_t)(hp->head_dim / 32) * 34;
    CHECKF(kvt_page_bytes(e8) == want, "%s: q8_0 page %zu bytes, want %zu", name, kvt_page_bytes(e8), want);
    CHECK(kvt_page_bytes(e8) * 64 == kvt_page_bytes(e16) * 34);
    CHECK(kvt_page_stride_head(e8) == B * (size_t)hp->head_dim / 32 * 34);
    kvt_engine_free(e16);
    kvt_engine_free(e8);

    int32_t toks[40];
    for (int i = 0; i < n; i++) toks[i] = (int32_t)((i * 7919 + 13) % V);
    float *ref = all_logits(m, KVT_KV_Q8_0, toks, n, n, 1, KVT_DEFAULT_N_BATCH, B);
    static const struct {
        int chunk, threads, n_batch, block;
    } v[] = {{1, 1, 512, B}, {7, 1, 512, B}, {n, 2, 512, B},  {n, 3, 512, B},
             {n, 3, 5, B},   {3, 2, 4, B},   {n, 1, 512, 32}, {n, 2, 512, 5}};
    for (size_t i = 0; i < KVT_ARRAY_LEN(v); i++) {
        float *got = all_logits(m, KVT_KV_Q8_0, toks, n, v[i].chunk, v[i].threads, v[i].n_batch, v[i].block);
        CHECKF(!memcmp(ref, got, (size_t)n * (size_t)V * sizeof(float)),
               "%s: q8_0 logits differ with chunk %d, %d threads, n_batch %d, block %d", name, v[i].chunk, v[i].threads,
               v[i].n_batch, v[i].block);
        free(got);
    }

    /* the dtype is really used: q8_0 logits are not f16's, but close to them */
    float *f16 = all_logits(m, KVT_KV_F16, toks, n, n, 1, KVT_DEFAULT_N_BATCH, B);
    double maxd = 0, maxabs = 0;
    int agree = 0;
    for (int p = 0; p < n; p++) {
        const float *a = ref + (size_t)p * V, *b = f16 + (size_t)p * V;
        for (int j = 0; j < V; j++) {
            maxd = fmax(maxd, fabs((double)a[j] - b[j]));
            maxabs = fmax(maxabs, fabs((double)b[j]));
        }
        agree += kvt_argmax(a, V) == kvt_argmax(b, V);
    }
    printf("%s: q8_0 vs f16 KV over %d positions: max |dlogit| %.3g (max |logit| %.3g), top-1 agreement %d/%d\n", name,
           n, maxd, maxabs, agree, n);
    CHECKF(maxd > 0, "%s: q8_0 logits equal f16's: the dtype is not used", name);
    CHECKF(maxd < 0.05 * maxabs, "%s: q8_0 logits off by %.3g (max |logit| %.3g)", name, maxd, maxabs);
    CHECKF(agree >= n * 9 / 10, "%s: top-1 agrees at %d of %d positions", name, agree, n);
    free(f16);
    free(ref);

    /* greedy generation: the same tokens and logits with 1, 2 and 3 threads */
    int32_t p[N_PROMPT];
    unsigned seed = 3;
    kvt_test_random_tokens(p, N_PROMPT, V, &seed);
    kvt_test_gen r1 = cold(m, KVT_KV_Q8_0, 1, p, 50);
    for (int t = 2; t <= 3; t++) {
        kvt_test_gen rt = cold(m, KVT_KV_Q8_0, t, p, 50);
        CHECKF(kvt_test_same(&r1, &rt), "%s: greedy q8_0 run with %d threads differs from 1 thread", name, t);
        kvt_test_gen_free(&rt);
    }
    kvt_test_gen_free(&r1);
}

/* A cache hit from T0, T1 and T2 gives what a cold q8_0 run gives, bit for bit. */
static void test_tiers(const kvt_model *m, const char *name) {
    const int32_t V = m->hp.n_vocab;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tiers-%s", kvt_test_tmpdir(), name);
    unsigned seed = 5;
    int32_t p[N_PROMPT];
    kvt_test_random_tokens(p, N_PROMPT, V, &seed);
    kvt_test_gen ref = cold(m, KVT_KV_Q8_0, 2, p, N_PROMPT);

    /* 30 pages of 8 tokens and a RAM tier big enough for everything */
    kvt_engine *e = new_engine(m, KVT_KV_Q8_0, 2, KVT_DEFAULT_N_BATCH, B, 30);
    kvt_cache *c = e ? kvt_test_cache(e, dir, 16 << 20) : NULL;
    if (!c) return;
    kvt_test_gen first = kvt_test_generate(e, c, p, N_PROMPT, N_GEN, NULL);
    CHECK(first.res.n_reused == 0);
    CHECKF(kvt_test_same(&first, &ref), "%s: first cached run differs from cold", name);

    kvt_test_gen w0 = kvt_test_generate(e, c, p, N_PROMPT, N_GEN, NULL);
    CHECKF(w0.res.tier_tokens[KVT_TIER_T0] == N_PROMPT - 1, "%s: T0 reused %d", name, w0.res.tier_tokens[KVT_TIER_T0]);
    CHECKF(kvt_test_same(&w0, &ref), "%s: warm from T0 differs from cold", name);

    for (int k = 0; k < 4; k++) { /* other prompts push p's pages down to T1 */
        int32_t q[100];
        kvt_test_random_tokens(q, 100, V, &seed);
        kvt_test_gen o = kvt_test_generate(e, c, q, 100, N_GEN, NULL);
        kvt_test_gen_free(&o);
    }
    kvt_test_gen w1 = kvt_test_generate(e, c, p, N_PROMPT, N_GEN, NULL);
    CHECKF(w1.res.tier_tokens[KVT_TIER_T1] > 0 && w1.res.n_reused == N_PROMPT - 1, "%s: T1 %d, reused %d", name,
           w1.res.tier_tokens[KVT_TIER_T1], w1.res.n_reused);
    CHECKF(kvt_test_same(&w1, &ref), "%s: warm from T1 differs from cold", name);
    CHECK(kvt_cache_flush(c) == 0);
    kvt_cache_free(c);
    kvt_engine_free(e);

    /* a restart: the prefix comes back from the disk */
    e = new_engine(m, KVT_KV_Q8_0, 3, KVT_DEFAULT_N_BATCH, B, 30);
    c = e ? kvt_test_cache(e, dir, 0) : NULL;
    if (!c) return;
    kvt_test_gen w2 = kvt_test_generate(e, c, p, N_PROMPT, N_GEN, NULL);
    CHECKF(w2.res.tier_tokens[KVT_TIER_T2] == N_PROMPT - 1, "%s: T2 restored %d tokens", name,
           w2.res.tier_tokens[KVT_TIER_T2]);
    CHECKF(kvt_test_same(&w2, &ref), "%s: warm from T2 differs from cold", name);
    kvt_cache_free(c);
    kvt_engine_free(e);
    kvt_test_gen *all[] = {&ref, &first, &w0, &w1, &w2};
    for (size_t i = 0; i < KVT_ARRAY_LEN(all); i++) kvt_test_gen_free(all[i]);
}

/* f16 and q8_0 blocks have different keys: one disk directory serves each
 * dtype only its own blocks, in both directions. */
static void test_namespaces(const kvt_model *m) {
    const int32_t V = m->hp.n_vocab;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/shared-dir", kvt_test_tmpdir());
    unsigned seed = 9;
    int32_t p[N_PROMPT];
    kvt_test_random_tokens(p, N_PROMPT, V, &seed);
    kvt_test_gen ref16 = cold(m, KVT_KV_F16, 2, p, N_PROMPT), ref8 = cold(m, KVT_KV_Q8_0, 2, p, N_PROMPT);
    CHECK(memcmp(ref16.logits, ref8.logits, (size_t)V * sizeof(float)) != 0);

    /* f16 fills the directory */
    kvt_engine *e16 = new_engine(m, KVT_KV_F16, 2, KVT_DEFAULT_N_BATCH, B, 40);
    kvt_cache *c = e16 ? kvt_test_cache(e16, dir, 0) : NULL;
    if (!c) return;
    kvt_hash128 root16, root8;
    CHECK(kvt_cache_root(c, NULL, 0, &root16) == 0);
    kvt_test_gen a = kvt_test_generate(e16, c, p, N_PROMPT, N_GEN, NULL);
    CHECK(kvt_test_same(&a, &ref16));
    CHECK(kvt_cache_flush(c) == 0);
    kvt_cache_stats st;
    kvt_cache_get_stats(c, &st);
    CHECKF(st.t2_records >= 15, "f16: %llu records", (unsigned long long)st.t2_records);
    kvt_cache_free(c);

    /* q8_0 on the same model and directory: a miss, then its own blocks */
    kvt_engine *e8 = new_engine(m, KVT_KV_Q8_0, 2, KVT_DEFAULT_N_BATCH, B, 40);
    c = e8 ? kvt_test_cache(e8, dir, 0) : NULL;
    if (!c) return;
    CHECK(kvt_cache_root(c, NULL, 0, &root8) == 0);
    CHECK(!kvt_hash128_eq(root16, root8));
    kvt_cache_match mt;
    CHECK(kvt_cache_lookup(c, p, N_PROMPT, NULL, 0, &mt) == 0);
    CHECKF(mt.n_blocks == 0, "q8_0 engine matched %d f16 blocks", mt.n_blocks);
    kvt_test_gen b = kvt_test_generate(e8, c, p, N_PROMPT, N_GEN, NULL);
    CHECKF(b.res.n_reused == 0, "q8_0 reused %d tokens of f16 KV", b.res.n_reused);
    CHECK(kvt_test_same(&b, &ref8));
    CHECK(kvt_cache_flush(c) == 0);
    kvt_cache_free(c);
    c = kvt_test_cache(e8, dir, 0);
    kvt_test_gen b2 = c ? kvt_test_generate(e8, c, p, N_PROMPT, N_GEN, NULL) : (kvt_test_gen){0};
    CHECKF(b2.res.tier_tokens[KVT_TIER_T2] == N_PROMPT - 1, "q8_0 from its own records: %d",
           b2.res.tier_tokens[KVT_TIER_T2]);
    CHECK(kvt_test_same(&b2, &ref8));
    kvt_cache_free(c);

    /* and f16 still finds only its own */
    c = kvt_test_cache(e16, dir, 0);
    kvt_test_gen a2 = c ? kvt_test_generate(e16, c, p, N_PROMPT, N_GEN, NULL) : (kvt_test_gen){0};
    CHECKF(a2.res.tier_tokens[KVT_TIER_T2] == N_PROMPT - 1, "f16 after q8_0: %d", a2.res.tier_tokens[KVT_TIER_T2]);
    CHECK(kvt_test_same(&a2, &ref16));
    kvt_cache_free(c);
    kvt_engine_free(e16);
    kvt_engine_free(e8);
    kvt_test_gen *all[] = {&ref16, &ref8, &a, &b, &b2, &a2};
    for (size_t i = 0; i < KVT_ARRAY_LEN(all); i++) kvt_test_gen_free(all[i]);
}

/* The same byte budgets hold about 64/34 times the tokens in every tier. */
static void test_capacity(const kvt_model *m) {
    char dir16[4096], dir8[4096];
    snprintf(dir16, sizeof dir16, "%s/cap16", kvt_test_tmpdir());
    snprintf(dir8, sizeof dir8, "%s/cap8", kvt_test_tmpdir());
    uint64_t tok[2][KVT_TIER_COUNT];
    for (int q = 0; q < 2; q++) {
        kvt_engine_params ep = kvt_engine_default_params();
        ep.kv_dtype = q ? KVT_KV_Q8_0 : KVT_KV_F16;
        ep.kv_active_bytes = 1 << 20;
        ep.n_ctx = 512;
        kvt_engine *e = NULL;
        CHECK(kvt_engine_new(m, ep, &e) == 0);
        kvt_cache *c = e ? kvt_test_cache(e, q ? dir8 : dir16, 1 << 20) : NULL;
        if (!c) return;
        kvt_cache_tier_capacity(c, tok[q]);
        kvt_cache_free(c);
        kvt_engine_free(e);
    }
    for (int t = KVT_TIER_T0; t <= KVT_TIER_T2; t++)
        CHECKF(tok[1][t] * 10 >= tok[0][t] * 17, "tier %d: q8_0 holds %llu tokens, f16 %llu", t,
               (unsigned long long)tok[1][t], (unsigned long long)tok[0][t]);
}

int main(void) {
    test_codec();
    test_head_dim_error();
    kvt_model *m32 = make_model("hd32.gguf", 128, 4, 2); /* head_dim 32, 2 query heads per KV head */
    kvt_model *m64 = make_model("hd64.gguf", 128, 2, 2); /* head_dim 64 */
    if (!m32 || !m64) return kvt_test_done("test_kv_q8");
    CHECK(m32->hp.head_dim == 32 && m64->hp.head_dim == 64);
    test_invariance(m32, "hd32");
    test_invariance(m64, "hd64");
    test_tiers(m32, "hd32");
    test_tiers(m64, "hd64");
    test_namespaces(m32);
    test_capacity(m64);
    kvt_model_free(m32);
    kvt_model_free(m64);
    return kvt_test_done("test_kv_q8");
}
