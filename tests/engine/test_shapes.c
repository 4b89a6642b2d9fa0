// SPDX-License-Identifier: MIT
/* Shape sweep: random-weight models of random shapes — odd head
 * counts and GQA groups, head_dim 32..256 with SIMD tails (in a third of the
 * cases the model is 32 wider or narrower than heads x head_dim), every weight type
 * (F32, F16, BF16, Q8_0, the legacy and the K quants),
 * every architecture (sliding windows from 1 token to past the prompt) — run at contexts from 1 token to large, with random
 * batch sizes, block sizes and thread counts. Meant for the sanitizer builds,
 * where a scratch buffer sized for the wrong maximum is caught at once.
 *
 * For every case:
 *   - a prompt longer than the context fails with KVT_ELIMIT and nothing else
 *     ever fails;
 *   - the logits of every prompt position and of a greedy continuation are
 *     memcmp-identical between the scalar kernels and every SIMD variant the
 *     CPU has, each run with its own batch size, block size and thread count
 *     (the batch invariance of engine.h);
 *   - through kvt_generate: a run with a cache miss, a T0 hit and (after
 *     another prompt pushed the pages out) a T1 hit all equal a cold run
 *     without a cache, bit for bit, as tests/test_cache.c's same().
 *
 * A fixed seed set keeps CI reproducible; KVT_SHAPES_LONG=1 runs many more
 * and larger cases for local runs, KVT_SHAPES_SEED=N starts the seeds at N. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "common.h"
#include "engine.h"
#include "generate.h"
#include "mkmodel.h"
#include "model.h"
#include "ops.h"
#include "testutil.h"

/* Quick mode (CI) and long mode (KVT_SHAPES_LONG=1) budgets. Sanitizer
 * builds run the scalar kernels some 20x slower, hence the smaller sizes. */
typedef struct {
    int cases;
    int32_t max_dim; /* n_head * head_dim */
    int32_t max_prompt;
    int32_t max_ff;
    int32_t max_vocab;
    int32_t max_layers;
} sweep_budget;

static const sweep_budget QUICK = {48, 768, 40, 256, 600, 2};
static const sweep_budget LONG = {400, 2048, 300, 1024, 2000, 3};

#define N_DECODE 4 /* greedy tokens after the prompt */
#define MAX_THREADS 3
#define LARGE_CTX 4096 /* "large" context: far above any prompt here */
#define CACHE_RAM (64ull << 20)
#define LONG_PROGRESS 25 /* long mode: a progress line every this many cases */

/* (heads, kv heads): MHA, GQA and MQA, with odd and prime counts. */
static const int32_t HEADS[][2] = {{1, 1}, {2, 1}, {3, 1}, {3, 3}, {4, 1}, {4, 2}, {5, 5}, {5, 1},
                                   {6, 2}, {6, 3}, {7, 7}, {7, 1}, {8, 1}, {8, 4}, {12, 4}};
/* head_dim: multiples of 32 (Q8_0-able) and widths that leave SIMD tails. */
static const int32_t HEAD_DIMS[] = {32, 40, 48, 64, 72, 96, 128, 136, 160, 200, 256};
static const int32_t BLOCK_SIZES[] = {1, 3, 5, 8, 16, 32, 48};
static const uint32_t TYPES[] = {KVT_TYPE_F32,  KVT_TYPE_F16,  KVT_TYPE_BF16, KVT_TYPE_Q8_0,   KVT_TYPE_Q4_0,
                                 KVT_TYPE_Q4_1, KVT_TYPE_Q5_0, KVT_TYPE_Q5_1, KVT_TYPE_IQ4_NL, KVT_TYPE_Q2_K,
                                 KVT_TYPE_Q3_K, KVT_TYPE_Q4_K, KVT_TYPE_Q5_K, KVT_TYPE_Q6_K,   KVT_TYPE_IQ4_XS};
/* Types in blocks of 32 need dim and ff to be multiples of 32; the K types fall
 * back per matrix (mkmodel, as llama-quantize) where a row is not a multiple of 256. */
static int blocks_of_32(uint32_t t) {
    return t == KVT_TYPE_Q8_0 || t == KVT_TYPE_Q4_0 || t == KVT_TYPE_Q4_1 || t == KVT_TYPE_Q5_0 || t == KVT_TYPE_Q5_1 ||
        t == KVT_TYPE_IQ4_NL;
}
static const char *const SIMD_VARIANTS[] = {"amx", "avx512", "avx2"};
static const char *const ARCHS[] = {"llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3"};

static uint64_t rng_state;
static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int32_t rnd(int32_t lo, int32_t hi) { return lo + (int32_t)(rng_next() % (uint64_t)(hi - lo + 1)); }
#define PICK(arr) ((arr)[rng_next() % KVT_ARRAY_LEN(arr)])

typedef struct {
    kvt_mkmodel_params mp;
    kvt_kv_dtype kv;
    int32_t n_ctx;   /* engine context (0: the model's) */
    int32_t ctx_eff; /* what that resolves to */
    int32_t n_prompt;
    int32_t *prompt;
} shape_case;

typedef struct { /* one engine configuration: must not change any bit */
    int32_t n_batch, block, threads;
} run_cfg;

typedef struct {
    int32_t n_fed; /* prompt tokens that fitted the context */
    int32_t n_gen; /* greedy tokens produced */
    int32_t gen[N_DECODE];
    float *logits; /* (n_fed + number of decode steps fed, n_vocab) */
    int32_t n_rows;
} run_result;

static struct { int cases, elimit, t0_hits, t1_hits, variants_compared; } stats;

static void force_best_variant(void) {
    for (size_t v = 0; v < KVT_ARRAY_LEN(SIMD_VARIANTS); v++)
        if (kvt_ops_force_variant(SIMD_VARIANTS[v]) == 0) return;
    kvt_ops_force_variant("scalar");
}

static run_cfg random_cfg(const shape_case *c) {
    run_cfg r = {rnd(1, c->n_prompt + 3), PICK(BLOCK_SIZES), rnd(1, MAX_THREADS)};
    return r;
}

static int32_t pages_for(int32_t tokens, int32_t block) { return (tokens + block - 1) / block + 2; }

/* An engine for case c under cfg, with max_seqs sequences and pages for `tokens` tokens (within the context). */
static kvt_engine *case_engine(const kvt_model *m, const shape_case *c, run_cfg cfg, int32_t max_seqs, int32_t tokens) {
    kvt_engine_params ep = kvt_engine_default_params();
    ep.n_ctx = c->n_ctx;
    ep.kv_dtype = c->kv;
    ep.block_size = cfg.block;
    ep.n_batch = cfg.n_batch;
    ep.n_threads = cfg.threads;
    ep.max_seqs = max_seqs;
    ep.n_pages = pages_for(KVT_MIN(c->ctx_eff, tokens), cfg.block);
    return kvt_test_engine_new(m, ep);
}

/* Feeds the prompt (every position's logits) then up to N_DECODE greedy tokens. */
static int engine_run(const kvt_model *m, const shape_case *c, run_cfg cfg, run_result *out) {
    memset(out, 0, sizeof *out);
    const int32_t V = m->hp.n_vocab;
    kvt_engine *e = case_engine(m, c, cfg, 1, c->n_prompt + N_DECODE);
    if (!e) return -1;
    int rc;
    int32_t seq;
    CHECK(kvt_seq_new(e, NULL, 0, 0, &seq) == 0);
    out->logits = malloc((size_t)(c->n_prompt + N_DECODE) * (size_t)V * sizeof(float));

    out->n_fed = c->n_prompt;
    if (c->n_prompt > c->ctx_eff) { /* too long: a clean KVT_ELIMIT, nothing fed */
        rc = kvt_engine_feed(e, seq, c->prompt, c->n_prompt, 1, out->logits);
        CHECKF(rc == KVT_ELIMIT, "prompt %d > ctx %d gave %d (%s)", c->n_prompt, c->ctx_eff, rc, kvt_errmsg());
        CHECK(kvt_seq_len(e, seq) == 0);
        out->n_fed = c->ctx_eff;
    }
    rc = kvt_engine_feed(e, seq, c->prompt, out->n_fed, 1, out->logits);
    CHECKF(rc == 0, "feed %d tokens at ctx %d: %s", out->n_fed, c->ctx_eff, kvt_errmsg());
    out->n_rows = rc ? 0 : out->n_fed;
    while (!rc && out->n_gen < N_DECODE) {
        int32_t tok = kvt_argmax(out->logits + (size_t)(out->n_rows - 1) * (size_t)V, V);
        out->gen[out->n_gen++] = tok;
        if (kvt_seq_len(e, seq) >= c->ctx_eff) break;
        rc = kvt_engine_feed(e, seq, &tok, 1, 1, out->logits + (size_t)out->n_rows * (size_t)V);
        CHECKF(rc == 0, "decode at %d of ctx %d: %s", kvt_seq_len(e, seq), c->ctx_eff, kvt_errmsg());
        if (!rc) out->n_rows++;
    }
    kvt_engine_free(e);
    return rc;
}

static int same_run(const run_result *a, const run_result *b, int32_t V) {
    return a->n_rows == b->n_rows && a->n_gen == b->n_gen &&
        !memcmp(a->gen, b->gen, (size_t)a->n_gen * sizeof(int32_t)) &&
        !memcmp(a->logits, b->logits, (size_t)a->n_rows * (size_t)V * sizeof(float));
}

/* ---- the cache path ------------------------------------------------------- */

static kvt_engine *gen_engine(const kvt_model *m, const shape_case *c, run_cfg cfg) {
    /* room for one request only, so the next prompt pushes the last one's pages to T1 */
    return case_engine(m, c, cfg, 2, c->n_prompt + N_DECODE + 1);
}

/* Cold (no cache), then miss, T0 hit, another prompt, T1 hit: all identical. */
static void check_cache(const kvt_model *m, const shape_case *c, const run_result *ref) {
    const int32_t V = m->hp.n_vocab, P = c->n_prompt;
    run_cfg cfg = random_cfg(c);
    kvt_engine *e0 = gen_engine(m, c, cfg);
    if (!e0) return;
    kvt_test_gen cold = kvt_test_generate_rc(e0, NULL, c->prompt, P, N_DECODE, NULL);
    kvt_engine_free(e0);
    if (P >= c->ctx_eff) { /* kvt_generate needs room for one generated token */
        CHECKF(cold.rc == KVT_ELIMIT, "generate: prompt %d, ctx %d gave %d (%s)", P, c->ctx_eff, cold.rc, kvt_errmsg());
        kvt_test_gen_free(&cold);
        return;
    }
    CHECKF(cold.rc == 0, "generate: %s", kvt_errmsg());
    if (cold.rc) {
        kvt_test_gen_free(&cold);
        return;
    }
    /* the request loop agrees with the engine run: same last-prompt logits and greedy tokens */
    CHECK(!memcmp(cold.logits, ref->logits + (size_t)(P - 1) * (size_t)V, (size_t)V * sizeof(float)));
    int32_t common = KVT_MIN(cold.res.n_generated, ref->n_gen);
    CHECK(common > 0 && !memcmp(cold.tokens + P, ref->gen, (size_t)common * sizeof(int32_t)));

    run_cfg cfg2 = random_cfg(c);
    kvt_engine *e = gen_engine(m, c, cfg2);
    kvt_cache_params cp = kvt_cache_default_params();
    cp.ram_bytes = CACHE_RAM;
    kvt_cache *cache = NULL;
    CHECKF(e && kvt_cache_new(e, cp, &cache) == 0, "cache_new: %s", kvt_errmsg());
    if (!cache) {
        kvt_engine_free(e);
        kvt_test_gen_free(&cold);
        return;
    }
    const int32_t B = cfg2.block, full = KVT_MIN(P / B * B, P - 1);
    kvt_test_gen miss = kvt_test_generate_rc(e, cache, c->prompt, P, N_DECODE, NULL);
    CHECKF(kvt_test_same(&miss, &cold), "cache miss differs from the cold run (rc %d: %s)", miss.rc, kvt_errmsg());
    kvt_test_gen t0 = kvt_test_generate_rc(e, cache, c->prompt, P, N_DECODE, NULL);
    CHECKF(kvt_test_same(&t0, &cold), "T0 hit differs from the cold run (rc %d: %s)", t0.rc, kvt_errmsg());
    CHECKF(t0.res.n_reused == full, "T0 hit reused %d of %d tokens (B %d)", t0.res.n_reused, P, B);
    stats.t0_hits += t0.res.n_reused > 0;

    /* another prompt of the same length takes the pool; then the first comes back */
    int32_t *other = malloc((size_t)P * sizeof *other);
    for (int32_t i = 0; i < P; i++) other[i] = (c->prompt[i] + 1 + i) % V;
    kvt_test_gen o = kvt_test_generate_rc(e, cache, other, P, N_DECODE, NULL);
    CHECKF(o.rc == 0, "other prompt: %s", kvt_errmsg());
    kvt_test_gen t1 = kvt_test_generate_rc(e, cache, c->prompt, P, N_DECODE, NULL);
    CHECKF(kvt_test_same(&t1, &cold), "hit after eviction differs from the cold run (rc %d: %s)", t1.rc, kvt_errmsg());
    stats.t1_hits += t1.res.tier_tokens[KVT_TIER_T1] > 0;

    kvt_test_gen_free(&miss);
    kvt_test_gen_free(&t0);
    kvt_test_gen_free(&o);
    kvt_test_gen_free(&t1);
    free(other);
    kvt_cache_free(cache);
    kvt_engine_free(e);
    kvt_test_gen_free(&cold);
}

/* ---- one case --------------------------------------------------------------- */

static void make_case(shape_case *c, const sweep_budget *bud) {
    memset(c, 0, sizeof *c);
    kvt_mkmodel_params mp = kvt_mkmodel_default_params();
    const int32_t *hk;
    int32_t hd;
    do { /* a head layout and width that fit the budget */
        hk = HEADS[rng_next() % KVT_ARRAY_LEN(HEADS)];
        hd = PICK(HEAD_DIMS);
    } while (hk[0] * hd > bud->max_dim);
    mp.arch = PICK(ARCHS);
    mp.heads = hk[0];
    mp.kv_heads = hk[1];
    mp.dim = hk[0] * hd;
    mp.layers = rnd(1, bud->max_layers);
    mp.type = PICK(TYPES);
    if (blocks_of_32(mp.type) && mp.dim % KVT_Q8_0_BLOCK) mp.type = KVT_TYPE_F16;
    mp.ff = rnd(1, bud->max_ff);
    if (blocks_of_32(mp.type)) mp.ff = (mp.ff + KVT_Q8_0_BLOCK - 1) / KVT_Q8_0_BLOCK * KVT_Q8_0_BLOCK;
    mp.vocab = rnd(kvt_mkmodel_builtin_min_vocab(), bud->max_vocab);
    mp.ctx = rnd(1, 2 * bud->max_prompt);
    mp.tied = rng_next() % 2;
    mp.seed = rng_next();
    /* a third of the cases give heads their own width (--head-dim), as Qwen3
     * and Gemma do: the model 32 wider or narrower than heads x head_dim (a
     * multiple of 32 stays one); decided by the seed, so the draws that follow
     * are those of before */
    if (mp.seed % 3 == 0) {
        mp.head_dim = hd;
        mp.dim += (mp.seed & 8) || mp.dim <= 32 ? 32 : -32;
    }
    c->mp = mp;
    c->kv = rng_next() % 4 ? KVT_KV_F16 : KVT_KV_F32;

    c->n_prompt = rnd(1, bud->max_prompt);
    /* windows archs: a window from 1 token to past the prompt */
    c->mp.swa = rnd(1, c->n_prompt + 2);
    switch (rng_next() % 7) { /* the context: the edges around the prompt, tiny, large, the model's */
    case 0: c->n_ctx = 1; break;
    case 1: c->n_ctx = KVT_MAX(1, c->n_prompt - rnd(1, 3)); break; /* shorter than the prompt */
    case 2: c->n_ctx = c->n_prompt; break;
    case 3: c->n_ctx = c->n_prompt + 1; break;
    case 4: c->n_ctx = c->n_prompt + rnd(2, 2 * N_DECODE); break;
    case 5: c->n_ctx = LARGE_CTX; break;
    default: c->n_ctx = 0; break;
    }
    c->ctx_eff = c->n_ctx ? c->n_ctx : mp.ctx;
    c->prompt = malloc((size_t)c->n_prompt * sizeof *c->prompt);
    for (int32_t i = 0; i < c->n_prompt; i++) c->prompt[i] = rnd(0, mp.vocab - 1);
}

static void run_case(int idx, const sweep_budget *bud) {
    shape_case c;
    make_case(&c, bud);
    char name[64], desc[256];
    snprintf(name, sizeof name, "shape-%d.gguf", idx);
    const char *path = kvt_test_path(kvt_test_tmpdir(), name);
    snprintf(desc, sizeof desc,
             "case %d: %s (window %d) %s dim %d heads %d/%d hd %d ff %d layers %d vocab %d, kv %s, prompt %d, ctx %d",
             idx, c.mp.arch, c.mp.swa, kvt_ggml_type_name(c.mp.type), c.mp.dim, c.mp.heads, c.mp.kv_heads,
             c.mp.head_dim ? c.mp.head_dim : c.mp.dim / c.mp.heads, c.mp.ff, c.mp.layers, c.mp.vocab,
             c.kv == KVT_KV_F16 ? "f16" : "f32", c.n_prompt, c.ctx_eff);
    int failures_before = kvt_test_failures;
    kvt_model *m = NULL;
    if (kvt_mkmodel(&c.mp, path) || kvt_model_load(path, kvt_model_default_params(), &m)) {
        CHECKF(0, "%s: model: %s", desc, kvt_errmsg());
        free(c.prompt);
        return;
    }
    const int32_t V = m->hp.n_vocab;
    stats.cases++;
    stats.elimit += c.n_prompt > c.ctx_eff;

    /* the scalar kernels are the reference; every SIMD variant must give the same bits */
    kvt_ops_force_variant("scalar");
    run_result ref;
    engine_run(m, &c, random_cfg(&c), &ref);
    for (size_t v = 0; v < KVT_ARRAY_LEN(SIMD_VARIANTS); v++) {
        if (kvt_ops_force_variant(SIMD_VARIANTS[v]) != 0) continue;
        run_cfg cfg = random_cfg(&c);
        run_result got;
        engine_run(m, &c, cfg, &got);
        CHECKF(same_run(&got, &ref, V), "%s: %s (batch %d, block %d, %d threads) differs from scalar", desc,
               SIMD_VARIANTS[v], cfg.n_batch, cfg.block, cfg.threads);
        stats.variants_compared++;
        free(got.logits);
    }
    force_best_variant(); /* the cache path runs on what the CPU would pick */
    check_cache(m, &c, &ref);
    if (kvt_test_failures != failures_before) fprintf(stderr, "  in %s\n", desc);

    free(ref.logits);
    free(c.prompt);
    kvt_model_free(m);
    unlink(path);
}

int main(void) {
    const char *long_env = getenv("KVT_SHAPES_LONG");
    const sweep_budget *bud = long_env && atoi(long_env) > 0 ? &LONG : &QUICK;
    const char *seed_env = getenv("KVT_SHAPES_SEED");
    uint64_t seed0 = seed_env ? strtoull(seed_env, NULL, 10) : 1;
    int simd = 0;
    for (size_t v = 0; v < KVT_ARRAY_LEN(SIMD_VARIANTS); v++) simd += kvt_ops_force_variant(SIMD_VARIANTS[v]) == 0;
    if (!simd) printf("note: this CPU has no SIMD variant; only the scalar kernels and the cache path are checked\n");

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < bud->cases; i++) {
        rng_state = seed0 + (uint64_t)i; /* each case reproducible alone */
        run_case(i, bud);
        if (bud == &LONG && (i + 1) % LONG_PROGRESS == 0) {
            printf("%d/%d cases, %d failed checks\n", i + 1, bud->cases, kvt_test_failures);
            fflush(stdout);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("%d cases (%s, seeds %llu..%llu) in %.1f s: %d prompts over their context, %d SIMD-vs-scalar "
           "comparisons, %d T0 hits, %d T1 hits\n",
           stats.cases, bud == &LONG ? "long" : "quick", (unsigned long long)seed0,
           (unsigned long long)seed0 + (unsigned long long)bud->cases - 1, secs, stats.elimit, stats.variants_compared,
           stats.t0_hits, stats.t1_hits);
    /* the sweep must have reached the paths it is for */
    CHECK(stats.cases == bud->cases);
    CHECK(stats.elimit > 0);
    CHECK(stats.t0_hits > 0 && stats.t1_hits > 0);
    if (simd) CHECK(stats.variants_compared >= bud->cases);
    return kvt_test_done("test_shapes");
}
