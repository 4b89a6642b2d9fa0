// SPDX-License-Identifier: MIT
/* The engine on Vulkan device 0 (lavapipe here) against the CPU engine and
 * against itself:
 *  - logits of every prompt position against the CPU engine, on mkmodel
 *    llamas with F32, F16, Q8_0 and Q4_1 weights and on the shared aidreams260K:
 *    top-1 agreement and the largest |logit difference| (printed, bounded);
 *  - a decode step's KV pages equal, byte for byte, what a prefill and a
 *    chunked prefill write for the same tokens, and so do their logits;
 *  - warm equals cold through the cache: greedy tokens and logits from T0,
 *    T1 and T2 (a fresh engine and cache on the same directory), each run
 *    restoring from the tier it names, each restored run one batched copy,
 *    T1's straight from its pinned arena; with f16 and with q8_0 pages (q8_0
 *    on a model with heads of 32, also against the CPU and in the
 *    decode-against-prefill check; the GPU variants leave out its
 *    warm-equals-cold); and on the Q4_1 model (Q8_1 activations), outside
 *    the GPU variants;
 *  - a lost device (injected) fails a step with a clear error and leaves the
 *    sequence as it was; what the GPU engine does not run is refused by name;
 *    blocks the CPU engine stored never serve the GPU engine, nor the reverse.
 * The GPU variants (KVT_GPU_VARIANT: staging, split bindings, other subgroup
 * widths) run what their settings change: the logits against the CPU, decode
 * against prefill and warm equals cold; the refusals, the lost device and the
 * devices kept apart are the same code under any setting and run once, here.
 * The GPU engine that gave a model's logits also runs its decode steps and its
 * cold run (one engine's pipelines compiled once; a fresh engine for T2).
 * No validation message may appear. Skips (77) without a device. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "gpu_engine_test.h"
#include "model.h"

#define B 16
/* greedy tokens generated after each prompt of the warm-equals-cold runs: the
 * first from the prefill over restored pages, the others from decode steps
 * that attend over them */
#define N_GEN 3
/* the bounds: GPU_LOGIT_TOL and GPU_LOGIT_TOL_Q8 (gpu_engine_test.h says why) */

static double max_dlogit;
static int32_t n_vocab;

static kvt_engine *engine_on(const kvt_model *m, int32_t device, int32_t n_pages, int32_t n_batch, kvt_kv_dtype dt) {
    return gpu_engine_on(m, device, -1, B, n_pages, n_batch, dt);
}

/* GPU logits against the CPU's at every position of a random prompt. The GPU
 * engine (16 pages, batches of 512) goes back through keep when that is not
 * NULL, for the model's next checks; else it is freed. */
static void check_against_cpu(const kvt_model *m, const char *name, kvt_kv_dtype dt, kvt_engine **keep) {
    const uint32_t wt = m->layers[0].wq.type;
    const double tol = (wt != KVT_TYPE_F32 && wt != KVT_TYPE_F16) || dt == KVT_KV_Q8_0 ? GPU_LOGIT_TOL_Q8
                                                                                       : GPU_LOGIT_TOL;
    int32_t p[48];
    unsigned seed = 7;
    n_vocab = m->hp.n_vocab;
    kvt_test_random_tokens(p, 48, n_vocab, &seed);
    kvt_engine *ec = engine_on(m, 0, 16, 512, dt), *eg = engine_on(m, 1, 16, 512, dt);
    float *lc = ec ? gpu_all_logits(ec, p, 48) : NULL, *lg = eg ? gpu_all_logits(eg, p, 48) : NULL;
    if (lc && lg) {
        gpu_logit_cmp r = gpu_compare_logits(lc, lg, 48, n_vocab, tol, name);
        printf("gpu engine: %s (%s KV): top-1 agrees at %d/48 positions, max |dlogit| %.3g (logits up to %.3g)\n", name,
               kvt_kv_dtype_name(dt), r.agree, r.dmax, r.lmax);
        if (r.dmax > max_dlogit) max_dlogit = r.dmax;
    }
    free(lc);
    free(lg);
    kvt_engine_free(ec);
    if (keep) *keep = eg;
    else kvt_engine_free(eg);
}

/* Prefill (one chunk) on e (batches of 512), chunked prefill (chunks of 5)
 * and decode (one token a step) on e write the same KV bytes and give the
 * same last logits; two pages, so the decode steps cross a page boundary. */
static void check_decode_equals_prefill(const kvt_model *m, kvt_kv_dtype dt, kvt_engine *e) {
    enum { N = 2 * B };
    int32_t p[N];
    unsigned seed = 11;
    kvt_test_random_tokens(p, N, n_vocab, &seed);
    kvt_engine *ec = e ? engine_on(m, 1, 16, 5, dt) : NULL;
    if (!e || !ec) goto out;
    int32_t s1 = -1, s2 = -1, s3 = -1;
    float *l1 = malloc((size_t)n_vocab * 4 * 3), *l2 = l1 + n_vocab, *l3 = l2 + n_vocab;
    CHECK(kvt_seq_new(e, NULL, 0, 0, &s1) == 0 && kvt_engine_feed(e, s1, p, N, 0, l1) == 0);
    CHECK(kvt_seq_new(ec, NULL, 0, 0, &s2) == 0 && kvt_engine_feed(ec, s2, p, N, 0, l2) == 0);
    CHECK(kvt_seq_new(e, NULL, 0, 0, &s3) == 0);
    for (int32_t i = 0; i < N; i++) CHECK(kvt_engine_feed(e, s3, p + i, 1, 0, l3) == 0);
    uint8_t *a = gpu_pages_of(e, s1, N / B), *b = gpu_pages_of(ec, s2, N / B), *c = gpu_pages_of(e, s3, N / B);
    size_t bytes = (size_t)(N / B) * kvt_page_bytes(e);
    const char *kv = kvt_kv_dtype_name(dt);
    CHECKF(memcmp(a, b, bytes) == 0, "%s KV: chunked prefill wrote other KV bytes than one prefill", kv);
    CHECKF(memcmp(a, c, bytes) == 0, "%s KV: decode steps wrote other KV bytes than a prefill of the same tokens", kv);
    CHECKF(memcmp(l1, l2, (size_t)n_vocab * 4) == 0 && memcmp(l1, l3, (size_t)n_vocab * 4) == 0,
           "%s KV: the last token's logits differ between prefill, chunked prefill and decode", kv);
    free(a), free(b), free(c), free(l1);
    /* e goes on to the cold run of warm-equals-cold */
    if (s1 >= 0) kvt_seq_free(e, s1);
    if (s3 >= 0) kvt_seq_free(e, s3);
out:
    kvt_engine_free(ec);
}

/* Pushes prompt p's blocks from T0 into T1 by running other prompts through a small pool. */
static void crowd_out(kvt_engine *e, kvt_cache *c, unsigned seed) {
    int32_t q[3 * B];
    for (int r = 0; r < 3; r++) {
        kvt_test_random_tokens(q, 3 * B, n_vocab, &seed);
        kvt_test_gen g = kvt_test_generate(e, c, q, 3 * B, N_GEN, NULL);
        kvt_test_gen_free(&g);
    }
}

/* Long: cold (on e0, without a cache), then warm from T0, T1 and T2, each compared bit for bit with the cold run. */
static void check_warm_equals_cold(const kvt_model *m, const char *dir, kvt_kv_dtype dt, kvt_engine *e0) {
    enum { N = 3 * B + 5 };
    int32_t p[N];
    unsigned seed = 23;
    kvt_test_random_tokens(p, N, n_vocab, &seed);
    if (!e0) return;
    kvt_test_gen cold = kvt_test_generate(e0, NULL, p, N, N_GEN, NULL);
    kvt_engine *e = engine_on(m, 1, 12, 512, dt);
    kvt_cache *c = e ? kvt_test_cache(e, dir, 64u << 20) : NULL;
    if (!c) goto out;
    kvt_test_gen g1 = kvt_test_generate(e, c, p, N, N_GEN, NULL);
    kvt_test_gen t0 = kvt_test_generate(e, c, p, N, N_GEN, NULL);
    CHECKF(kvt_test_same(&cold, &g1) && kvt_test_same(&cold, &t0), "a cached run differs from the cold run");
    CHECKF(t0.res.tier_tokens[KVT_TIER_T0] == 3 * B, "T0 restored %d tokens, not %d", t0.res.tier_tokens[KVT_TIER_T0],
           3 * B);
    crowd_out(e, c, 99);
    kvt_eng_gpu_stats s0 = kvt_engine_gpu_stats(e);
    kvt_test_gen t1 = kvt_test_generate(e, c, p, N, N_GEN, NULL);
    kvt_eng_gpu_stats s1 = kvt_engine_gpu_stats(e);
    CHECKF(t1.res.tier_tokens[KVT_TIER_T1] > 0, "nothing came from T1 (T0 %d, T1 %d)", t1.res.tier_tokens[KVT_TIER_T0],
           t1.res.tier_tokens[KVT_TIER_T1]);
    CHECKF(kvt_test_same(&cold, &t1), "the run warm from T1 differs from the cold run");
    CHECKF(s1.runs_in - s0.runs_in >= 1 &&
               s1.io_submits - s0.io_submits == s1.runs_in - s0.runs_in + (s1.runs_out - s0.runs_out),
           "restores took %llu submissions for %llu runs in and %llu out",
           (unsigned long long)(s1.io_submits - s0.io_submits), (unsigned long long)(s1.runs_in - s0.runs_in),
           (unsigned long long)(s1.runs_out - s0.runs_out));
    /* T1's arena is pinned host memory: its pages go to the pool straight, whatever chunk they land in */
    CHECKF(s1.pages_direct - s0.pages_direct == s1.pages_in - s0.pages_in + (s1.pages_out - s0.pages_out) &&
               s1.pages_bounced == s0.pages_bounced,
           "the T1 restore copied %llu pages straight and %llu through staging",
           (unsigned long long)(s1.pages_direct - s0.pages_direct),
           (unsigned long long)(s1.pages_bounced - s0.pages_bounced));
    CHECK(kvt_cache_flush(c) == 0);
    kvt_cache_free(c);
    kvt_engine_free(e);
    /* a new process's engine and cache on the same directory: T2 */
    e = engine_on(m, 1, 12, 512, dt);
    c = e ? kvt_test_cache(e, dir, 64u << 20) : NULL;
    if (c) {
        kvt_test_gen t2 = kvt_test_generate(e, c, p, N, N_GEN, NULL);
        CHECKF(t2.res.tier_tokens[KVT_TIER_T2] == 3 * B, "T2 restored %d tokens, not %d",
               t2.res.tier_tokens[KVT_TIER_T2], 3 * B);
        CHECKF(kvt_test_same(&cold, &t2), "the run warm from T2 differs from the cold run");
        kvt_test_gen_free(&t2);
    }
    kvt_test_gen_free(&g1), kvt_test_gen_free(&t0), kvt_test_gen_free(&t1);
out:
    kvt_test_gen_free(&cold);
    kvt_cache_free(c);
    kvt_engine_free(e);
}

/* Blocks the CPU engine wrote to T2 never serve the GPU engine, nor the
 * reverse: the numerics id in every key differs. */
static void check_devices_apart(const kvt_model *m, const char *dir) {
    enum { N = 2 * B + 3 };
    int32_t p[N];
    unsigned seed = 31;
    kvt_test_random_tokens(p, N, n_vocab, &seed);
    for (int first = 0; first < 2; first++) {
        char d[600];
        snprintf(d, sizeof d, "%s-%d", dir, first);
        kvt_engine *ew = engine_on(m, first, 16, 512, KVT_KV_F16), *er = engine_on(m, !first, 16, 512, KVT_KV_F16);
        kvt_cache *cw = ew ? kvt_test_cache(ew, d, 1u << 20) : NULL;
        if (cw) {
            kvt_test_gen g = kvt_test_generate(ew, cw, p, N, 2, NULL);
            kvt_test_gen_free(&g);
            CHECK(kvt_cache_flush(cw) == 0);
            kvt_cache_free(cw);
        }
        kvt_cache *cr = er ? kvt_test_cache(er, d, 1u << 20) : NULL;
        if (cr) {
            kvt_test_gen g = kvt_test_generate(er, cr, p, N, 2, NULL);
            CHECKF(g.res.tier_tokens[KVT_TIER_T2] == 0 && g.res.n_computed == N,
                   "the %s engine took %d tokens from the %s engine's T2", first ? "CPU" : "GPU",
                   g.res.tier_tokens[KVT_TIER_T2], first ? "GPU" : "CPU");
            kvt_test_gen_free(&g);
            kvt_cache_free(cr);
        }
        if (ew && er)
            printf("gpu engine: numerics ids: %s and %s\n", kvt_engine_numerics_id(ew), kvt_engine_numerics_id(er));
        kvt_engine_free(ew);
        kvt_engine_free(er);
    }
}

static void check_errors(const kvt_model *m) {
    kvt_engine_params ep = kvt_engine_default_params();
    ep.n_pages = 8;
    ep.n_ctx = 128;
    ep.kv_dtype = KVT_KV_F16;
    kvt_engine *e = NULL;
    ep.device = 1000;
    CHECK(kvt_engine_new(m, ep, &e) != 0 && !e && strstr(kvt_errmsg(), "does not exist"));
    /* a pool that needs more bindings than the engine binds is refused, naming what fits */
    const char *was = getenv("KVT_VK_MAX_BINDING");
    char keep[64];
    snprintf(keep, sizeof keep, "%s", was ? was : "");
    setenv("KVT_VK_MAX_BINDING", "16384", 1);
    ep.device = 1;
    ep.n_pages = 64;
    /* given in pages, not by --kv-active: the message names the pages that fit, not that flag */
    CHECKF(kvt_engine_new(m, ep, &e) == KVT_ELIMIT && !e && strstr(kvt_errmsg(), "they hold a pool of") &&
               !strstr(kvt_errmsg(), "--kv-active"),
           "a pool over 4 bindings: %s", kvt_errmsg());
    if (was) setenv("KVT_VK_MAX_BINDING", keep, 1);
    else unsetenv("KVT_VK_MAX_BINDING");
    /* a device too small for the model: refused before the weights go up, saying what the model needs
     * (test_gpu_plan.c checks the plan's figures) */
    setenv("KVT_VK_MEM_LIMIT", "65536", 1);
    ep.n_pages = 8;
    int orc = kvt_engine_new(m, ep, &e);
    CHECKF(orc == KVT_ELIMIT && !e && strstr(kvt_errmsg(), "does not fit") && strstr(kvt_errmsg(), "-ngl"),
           "a device too small: rc %d, %s", orc, kvt_errmsg());
    unsetenv("KVT_VK_MEM_LIMIT");
    /* a lost device: the step fails saying so, and the sequence keeps its length */
    e = engine_on(m, 1, 16, 512, KVT_KV_F16);
    if (!e) return;
    int32_t p[B + 3], s;
    unsigned seed = 5;
    kvt_test_random_tokens(p, B + 3, n_vocab, &seed);
    CHECK(kvt_seq_new(e, NULL, 0, 0, &s) == 0 && kvt_engine_feed(e, s, p, B + 1, 0, NULL) == 0);
    int32_t free0 = kvt_page_free_count(e);
    setenv("KVT_VK_LOSE_AFTER", "1", 1);
    int rc = kvt_engine_feed(e, s, p + B + 1, 2, 0, NULL);
    unsetenv("KVT_VK_LOSE_AFTER");
    CHECKF(rc != 0 && strstr(kvt_errmsg(), "lost"), "a lost device gave rc %d: %s", rc, kvt_errmsg());
    CHECKF(kvt_seq_len(e, s) == B + 1 && kvt_page_free_count(e) == free0,
           "after the failed step the sequence has %d tokens (not %d) and %d free pages (not %d)", kvt_seq_len(e, s),
           B + 1, kvt_page_free_count(e), free0);
    CHECK(kvt_engine_rerope_page(e, 0, 3) == KVT_EUNSUPPORTED);
    kvt_engine_free(e);
}

/* q8_0 KV needs head_dim a multiple of 32: the tiny model with 2 heads of 32 (1 kv head). */
static kvt_model *q8_kv_model(void) {
    kvt_mkmodel_params mp = kvt_test_tiny_params();
    mp.heads = 2;
    mp.kv_heads = 1;
    mp.type = KVT_TYPE_F16;
    mp.vocab = 512;
    const char *path = kvt_test_path(kvt_test_tmpdir(), "gpu_engine_q8kv.gguf");
    kvt_model *m = NULL;
    int rc = kvt_mkmodel(&mp, path);
    if (!rc) rc = kvt_model_load(path, kvt_model_default_params(), &m);
    CHECKF(rc == 0, "model with heads of 32: %s", kvt_errmsg());
    return m;
}

int main(void) {
    kvt_test_gpu_variant();
    gpu_test_start();
    const int variant = getenv("KVT_GPU_VARIANT") != NULL;
    const char *names[] = {"F32", "F16", "Q8_0", "Q4_1"};
    const uint32_t types[] = {KVT_TYPE_F32, KVT_TYPE_F16, KVT_TYPE_Q8_0, KVT_TYPE_Q4_1};
    kvt_model *f16 = NULL, *q41 = NULL;
    kvt_engine *f16_e = NULL, *q41_e = NULL; /* their GPU engines, for the checks below */
    for (int i = 0; i < 4; i++) {
        char file[64];
        snprintf(file, sizeof file, "gpu_engine_%s.gguf", names[i]);
        kvt_model *m = kvt_test_tiny_model_typed(file, 512, types[i]);
        CHECKF(m != NULL, "model %s", names[i]);
        if (!m) continue;
        kvt_engine **keep = types[i] == KVT_TYPE_F16 ? &f16_e : types[i] == KVT_TYPE_Q4_1 && !variant ? &q41_e : NULL;
        check_against_cpu(m, names[i], KVT_KV_F16, keep);
        if (types[i] == KVT_TYPE_F32) check_against_cpu(m, names[i], KVT_KV_F32, NULL);
        if (types[i] == KVT_TYPE_F16) f16 = m;
        else if (types[i] == KVT_TYPE_Q4_1) q41 = m;
        else kvt_model_free(m);
    }
    const char *shared = kvt_test_shared();
    kvt_model *aid = NULL;
    if (shared &&
        kvt_model_load(kvt_test_path(shared, "models/aidreams260K.gguf"), kvt_model_default_params(), &aid) == 0) {
        check_against_cpu(aid, "aidreams260K", KVT_KV_F16, NULL);
        kvt_model_free(aid);
    } else {
        kvt_test_skip_part("../shared/models/aidreams260K.gguf is not there: its GPU logits were not compared");
    }
    kvt_model *q8 = q8_kv_model();
    if (q8) {
        n_vocab = q8->hp.n_vocab;
        kvt_engine *e = NULL;
        check_against_cpu(q8, "F16, heads of 32", KVT_KV_Q8_0, &e);
        check_decode_equals_prefill(q8, KVT_KV_Q8_0, e);
        char dir[512];
        snprintf(dir, sizeof dir, "%s/gpu_engine_t2_q8", kvt_test_tmpdir());
        /* the variants (staging, split pool) move q8_0 pages as the same opaque bytes as f16's */
        if (!variant) check_warm_equals_cold(q8, dir, KVT_KV_Q8_0, e);
        kvt_engine_free(e);
        kvt_model_free(q8);
    }
    if (q41) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/gpu_engine_t2_q41", kvt_test_tmpdir());
        /* a weight type changes no byte the tiers move: the variants leave it out */
        n_vocab = q41->hp.n_vocab;
        if (!variant) check_warm_equals_cold(q41, dir, KVT_KV_F16, q41_e);
        kvt_engine_free(q41_e);
        kvt_model_free(q41);
    }
    if (f16) {
        n_vocab = f16->hp.n_vocab;
        check_decode_equals_prefill(f16, KVT_KV_F16, f16_e);
        char dir[512];
        snprintf(dir, sizeof dir, "%s/gpu_engine_t2", kvt_test_tmpdir());
        check_warm_equals_cold(f16, dir, KVT_KV_F16, f16_e);
        kvt_engine_free(f16_e);
        /* no setting of the variants changes the numerics ids or the refusals */
        snprintf(dir, sizeof dir, "%s/gpu_engine_apart", kvt_test_tmpdir());
        if (!variant) check_devices_apart(f16, dir);
        if (!variant) check_errors(f16);
        kvt_model_free(f16);
    }
    printf("gpu engine: largest |dlogit| against the CPU %.3g (bounds %g, Q8_0 %g)\n", max_dlogit, GPU_LOGIT_TOL,
           GPU_LOGIT_TOL_Q8);
    gpu_test_no_validation_messages(0);
    return kvt_test_done("test_gpu_engine");
}
