// SPDX-License-Identifier: MIT
/* The architectures other than llama on the GPU engine (Vulkan device 0,
 * lavapipe here): mkmodel's tiny qwen2, qwen3, phi3, gemma2 and gemma3, and a
 * llama with YaRN rope scaling; the sliding ones with a window of 20 keys (not
 * a multiple of the 16-token page) under prompts longer than it; and the
 * head layouts of released models, scaled down: a qwen3 with heads of 128 and
 * a gemma3 with heads of 256 and one KV head, both with q not as wide as the
 * model, and a llama with a GQA ratio of 3 and heads of 64. For each:
 *  - the logits of every position of a sampled prompt against the CPU
 *    engine's: top-1 agreement and the largest |logit difference| (printed
 *    with the seed; $KVT_GPU_SEED replays a run);
 *  - the prompt fed at once, and its first 32 tokens at once then the rest a
 *    token a step (each step's window of 20 keys reaching back over a page
 *    boundary into the prefill's pages), give the same last logits, bit for
 *    bit;
 *  - warm equals cold through the cache (greedy tokens and the logits),
 *    restoring from T0 and from a lower tier: T1 (pushed out by other
 *    prompts) or T2 (a fresh engine and cache on the same directory); not
 *    for the YaRN llama, whose warm runs would repeat llama's.
 * The shared tiny-qwen2-f16.gguf, when there, is compared with the CPU too.
 * No validation message may appear. Skips (77) without a device. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine.h"
#include "gpu_engine_test.h"
#include "gpu_fwd_test.h"
#include "model.h"

#define B 16
#define WINDOW 20
#define N_GEN 3
#define N_PROMPT 48
/* The CPU and GPU engines sum in other orders (SIMD lanes against fixed
 * trees), so logits move by rounding: with F16 weights by a few 1e-3
 * (observed up to 6e-3, gemma's f16-rounded GELU included), bounded at 0.02
 * as for llama. Q8_0 weights quantize activations, where a 1-ulp difference
 * can move a value a whole step (observed 0.065): 0.2, as for llama. Top-1
 * must agree wherever the CPU's best logit leads the next by more than twice
 * the bound. */
#define LOGIT_TOL 0.02
#define LOGIT_TOL_Q8 0.2

typedef struct {
    const char *arch;
    uint32_t type;
    int32_t layers; /* gemma3 needs 6 for a global layer after its five sliding ones; 0: a file's model */
    int32_t swa;    /* the sliding window, 0 for the architectures without one */
    int lower;      /* the lower tier warm runs restore from: 1 (T1) or 2 (T2) */
    /* soft-caps set on the loaded model (0: the file's): gemma2's own (50 on
     * the scores, 30 on the logits) hardly touch a tiny model's values, these
     * bend them enough that a cap left out shows */
    float attn_cap, final_cap;
    int yarn; /* YaRN rope scaling (factor 4 from an original context of 64, attn_factor 0.9) */
    /* a released model's head layout, scaled down (0: the tiny model's): heads of head_dim
     * whose q need not be dim wide, as in Qwen3 and Gemma */
    int32_t dim, heads, kv_heads, head_dim;
    const char *label; /* the case in messages (NULL: arch) */
} arch_case;

#define NAME(c) ((c)->label ? (c)->label : (c)->arch)

static const arch_case cases[] = {
    {"qwen2", KVT_TYPE_F16, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, NULL},
    {"qwen3", KVT_TYPE_Q8_0, 2, 0, 2, 0, 0, 0, 0, 0, 0, 0, NULL},
    {"phi3", KVT_TYPE_F16, 2, WINDOW, 2, 0, 0, 0, 0, 0, 0, 0, NULL},
    {"gemma2", KVT_TYPE_F16, 2, WINDOW, 1, 1.5f, 3.0f, 0, 0, 0, 0, 0, NULL},
    {"gemma3", KVT_TYPE_F16, 6, WINDOW, 1, 0, 0, 0, 0, 0, 0, 0, NULL},
    {"llama", KVT_TYPE_F16, 1, 0, 1, 0, 0, 1, 0, 0, 0, 0, NULL},
    /* Qwen3-0.6B's heads (16 of 128, q twice the width of 1024), Gemma 3 1B's (4 of 256, the widest the
     * GPU takes, and one KV head), SmolLM2's GQA ratio 3 with heads of 64 */
    {"qwen3", KVT_TYPE_F16, 2, 0, 2, 0, 0, 0, 64, 2, 1, 128, "qwen3 2x128 over 64"},
    {"gemma3", KVT_TYPE_F16, 6, WINDOW, 1, 0, 0, 0, 192, 2, 1, 256, "gemma3 2x256 kv 1 over 192"},
    {"llama", KVT_TYPE_Q8_0, 2, 0, 1, 0, 0, 0, 192, 3, 1, 64, "llama 3x64 kv 1"},
};

static int32_t n_vocab;
static double worst;

static kvt_model *make_model(const arch_case *c) {
    kvt_mkmodel_params mp = kvt_test_tiny_params();
    mp.arch = c->arch;
    mp.type = c->type;
    mp.layers = c->layers;
    mp.vocab = 384;
    mp.swa = c->swa;
    if (c->dim) {
        mp.dim = c->dim;
        mp.heads = c->heads;
        mp.kv_heads = c->kv_heads;
        mp.head_dim = c->head_dim;
    }
    if (c->yarn) { /* the GPU rotates by the host's angles, YaRN's ramp and magnitude included */
        mp.rope_scaling = "yarn";
        mp.rope_factor = 4.0f;
        mp.rope_orig_ctx = 64;
        mp.rope_attn_factor = 0.9f;
    }
    char file[64];
    snprintf(file, sizeof file, "gpu_arch_%d.gguf", (int)(c - cases));
    const char *path = kvt_test_path(kvt_test_tmpdir(), file);
    kvt_model *m = NULL;
    int rc = kvt_mkmodel(&mp, path);
    if (!rc) rc = kvt_model_load(path, kvt_model_default_params(), &m);
    CHECKF(rc == 0, "%s model: %s", NAME(c), kvt_errmsg());
    if (m && c->attn_cap > 0) m->hp.attn_softcap = c->attn_cap;
    if (m && c->final_cap > 0) m->hp.final_softcap = c->final_cap;
    return m;
}

static kvt_engine *engine_on(const kvt_model *m, int32_t device, int32_t n_pages) {
    kvt_engine_params ep = kvt_engine_default_params();
    ep.block_size = B;
    ep.n_pages = n_pages;
    ep.n_ctx = 256;
    ep.n_threads = 2;
    ep.max_seqs = 4;
    ep.kv_dtype = KVT_KV_F16;
    ep.device = device;
    kvt_engine *e = NULL;
    int rc = kvt_engine_new(m, ep, &e);
    CHECKF(rc == 0, "engine on %s: %s", device ? "vulkan:0" : "cpu", kvt_errmsg());
    return e;
}

static void random_prompt(int32_t *p, int32_t n) {
    for (int32_t i = 0; i < n; i++) p[i] = (int32_t)(fwd_next() % (uint32_t)n_vocab);
}

/* Feeds p on a fresh sequence of e, at once (step_from 0: the logits of
 * every position into out) or its first step_from tokens at once and the
 * rest a token a step (the last logits into out). 0 or a failed check. */
static int feed(kvt_engine *e, const int32_t *p, int32_t n, int32_t step_from, float *out) {
    int32_t s;
    int rc = kvt_seq_new(e, NULL, 0, 0, &s);
    if (!rc && !step_from) rc = kvt_engine_feed(e, s, p, n, 1, out);
    if (!rc && step_from) rc = kvt_engine_feed(e, s, p, step_from, 0, NULL);
    for (int32_t i = step_from; !rc && step_from && i < n; i++) rc = kvt_engine_feed(e, s, p + i, 1, 0, out);
    CHECKF(rc == 0, "feed: %s", kvt_errmsg());
    kvt_seq_free(e, s);
    return rc;
}

/* Long: every position's logits against the CPU's, then the GPU's prefill against its own decode steps; gives
 * back the GPU engine (NULL if it could not be made), so the cold run reuses it. */
static kvt_engine *check_against_cpu(const kvt_model *m, const arch_case *c) {
    const double tol = c->type == KVT_TYPE_Q8_0 ? LOGIT_TOL_Q8 : LOGIT_TOL;
    /* a file's model has a real vocabulary: fewer positions keep the output matmul short on lavapipe */
    const int32_t np = c->layers ? N_PROMPT : 8;
    int32_t p[N_PROMPT];
    random_prompt(p, np);
    const size_t V = (size_t)n_vocab;
    float *lc = malloc((size_t)np * V * sizeof(float)), *lg = malloc((size_t)np * V * sizeof(float));
    float *ls = malloc(V * sizeof(float));
    kvt_engine *ec = engine_on(m, 0, 8), *eg = engine_on(m, 1, 8);
    if (ec && eg && !feed(ec, p, np, 0, lc) && !feed(eg, p, np, 0, lg)) {
        gpu_logit_cmp r = gpu_compare_logits(lc, lg, np, n_vocab, tol, NAME(c));
        printf("gpu arch: %s (%s weights%s%s%s): top-1 agrees at %d/%d positions, max |dlogit| %.3g (logits up "
               "to %.3g)\n",
               NAME(c), kvt_ggml_type_name(c->type), c->swa ? ", window 20" : "",
               c->attn_cap > 0 ? ", caps 1.5 and 3" : "", c->yarn ? ", yarn" : "", r.agree, np, r.dmax, r.lmax);
        worst = fmax(worst, r.dmax);
        /* a token a step past the first 32: each decode step attends through the window as the prefill did
         * (mkmodel's models only: on lavapipe a step over a 50k vocabulary takes long) */
        if (c->layers && !feed(eg, p, N_PROMPT, 2 * B, ls))
            CHECKF(memcmp(ls, lg + (N_PROMPT - 1) * V, V * sizeof(float)) == 0,
                   "%s: the last logits of decode steps differ from the prefill's", NAME(c));
    }
    free(lc), free(lg), free(ls);
    kvt_engine_free(ec);
    return eg;
}

/* Pushes a prompt's blocks from T0 into T1 by running other prompts through a small pool. */
static void crowd_out(kvt_engine *e, kvt_cache *c) {
    int32_t q[3 * B];
    for (int r = 0; r < 2; r++) {
        random_prompt(q, 3 * B);
        kvt_test_gen g = kvt_test_generate(e, c, q, 3 * B, N_GEN, NULL);
        kvt_test_gen_free(&g);
    }
}

/* Long: a cold run (on e0, no cache), then warm runs from T0 and the case's lower tier, each the same bits. */
static void check_warm_equals_cold(const kvt_model *m, const arch_case *c, kvt_engine *e0) {
    enum { N = 3 * B + 5 };
    int32_t p[N];
    random_prompt(p, N);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/gpu_arch_%d", kvt_test_tmpdir(), (int)(c - cases));
    kvt_test_gen cold = kvt_test_generate(e0, NULL, p, N, N_GEN, NULL);
    kvt_engine *e = engine_on(m, 1, 9);
    kvt_cache *cache = e ? kvt_test_cache(e, dir, 16u << 20) : NULL;
    if (!cache) goto out;
    kvt_test_gen g1 = kvt_test_generate(e, cache, p, N, N_GEN, NULL);
    kvt_test_gen t0 = kvt_test_generate(e, cache, p, N, N_GEN, NULL);
    CHECKF(kvt_test_same(&cold, &g1) && kvt_test_same(&cold, &t0), "%s: a cached run differs from the cold run",
           NAME(c));
    CHECKF(t0.res.tier_tokens[KVT_TIER_T0] == 3 * B, "%s: T0 restored %d tokens, not %d", NAME(c),
           t0.res.tier_tokens[KVT_TIER_T0], 3 * B);
    kvt_test_gen_free(&g1), kvt_test_gen_free(&t0);
    if (c->lower == 1) {
        crowd_out(e, cache);
        kvt_test_gen t1 = kvt_test_generate(e, cache, p, N, N_GEN, NULL);
        CHECKF(t1.res.tier_tokens[KVT_TIER_T1] > 0, "%s: nothing came from T1 (T0 %d)", NAME(c),
               t1.res.tier_tokens[KVT_TIER_T0]);
        CHECKF(kvt_test_same(&cold, &t1), "%s: the run warm from T1 differs from the cold run", NAME(c));
        printf("gpu arch: %s warm from T0 and T1 (%d tokens) equals cold\n", NAME(c), t1.res.tier_tokens[KVT_TIER_T1]);
        kvt_test_gen_free(&t1);
    } else {
        /* a new process's engine and cache on the same directory: T2 */
        CHECK(kvt_cache_flush(cache) == 0);
        kvt_cache_free(cache);
        kvt_engine_free(e);
        e = engine_on(m, 1, 12);
        cache = e ? kvt_test_cache(e, dir, 16u << 20) : NULL;
        if (!cache) goto out;
        kvt_test_gen t2 = kvt_test_generate(e, cache, p, N, N_GEN, NULL);
        CHECKF(t2.res.tier_tokens[KVT_TIER_T2] == 3 * B, "%s: T2 restored %d tokens, not %d", NAME(c),
               t2.res.tier_tokens[KVT_TIER_T2], 3 * B);
        CHECKF(kvt_test_same(&cold, &t2), "%s: the run warm from T2 differs from the cold run", NAME(c));
        printf("gpu arch: %s warm from T0 and T2 equals cold\n", NAME(c));
        kvt_test_gen_free(&t2);
    }
out:
    kvt_test_gen_free(&cold);
    kvt_cache_free(cache);
    kvt_engine_free(e);
}

int main(void) {
    gpu_test_start();
    fwd_seed("test_gpu_arch");
    for (size_t i = 0; i < KVT_ARRAY_LEN(cases); i++) {
        kvt_model *m = make_model(&cases[i]);
        if (!m) continue;
        n_vocab = m->hp.n_vocab;
        CHECKF(!cases[i].swa || m->layers[0].window == WINDOW, "%s: layer 0 has window %d, not %d", NAME(&cases[i]),
               m->layers[0].window, WINDOW);
        kvt_engine *eg = check_against_cpu(m, &cases[i]);
        /* YaRN changes only the host's angles */
        if (eg && !cases[i].yarn) check_warm_equals_cold(m, &cases[i], eg);
        kvt_engine_free(eg);
        kvt_model_free(m);
    }
    /* a qwen2 GGUF from outside mkmodel, when ../shared has it */
    const char *shared = kvt_test_shared();
    kvt_model *q = NULL;
    if (kvt_model_load(kvt_test_path(shared, "models/tiny-qwen2-f16.gguf"), kvt_model_default_params(), &q) == 0) {
        const arch_case file = {"qwen2 (shared tiny-qwen2-f16.gguf)", KVT_TYPE_F16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL};
        n_vocab = q->hp.n_vocab;
        kvt_engine_free(check_against_cpu(q, &file));
        kvt_model_free(q);
    } else {
        kvt_test_skip_part("../shared/models/tiny-qwen2-f16.gguf is not there: its GPU logits were not compared");
    }
    printf("gpu arch: largest |dlogit| against the CPU %.3g (bounds %g, Q8_0 %g)\n", worst, LOGIT_TOL, LOGIT_TOL_Q8);
    gpu_test_no_validation_messages(0);
    return kvt_test_done("test_gpu_arch");
}
