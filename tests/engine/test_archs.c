// SPDX-License-Identifier: MIT
/* The architectures of src/model/arch.c.
 *
 * 1. kvtier's logits against an independent, naive forward pass in double
 *    precision written here from the published definitions of each family
 *    (the Hugging Face reference models: Qwen3, Phi-3, Gemma 2, Gemma 3),
 *    reading the weights and metadata straight from the GGUF. qwen3 and gemma3
 *    are newer than the llama.cpp build the references come from, so this is
 *    their reference; phi3 and gemma2 run too, which checks this pass itself
 *    against what llama.cpp agrees with (tests/cli/test_eval_ref.sh). Every
 *    prompt is longer than the sliding windows, and the test also shows that
 *    the pass notices a missing window or a wrong local rope base, so it can
 *    fail where they matter. Besides the tiny models (head_dim 32, q as wide
 *    as the model), the released models' head layouts: heads of 128 and 256
 *    whose q is wider or narrower than the model, one KV head, heads of 96.
 * 2. Windows over pages: the block size, the batch and the KV dtype's layout
 *    (f16, f32, q8_0) change no bit of the logits.
 * 3. The cache invariant on sliding-window models (gemma2, gemma3) and on a
 *    qwen3 with heads of 128 over a model 96 wide: a miss, a T0 hit, a T1 hit
 *    and, after a restart, a T2 hit all equal a cold run bit for bit, with
 *    prompts several windows long.
 *
 * The GGUF stores norm weights as the multiplier itself (Gemma's converters
 * store 1 + w), so every RMS norm here is x / rms(x) * w. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "common.h"
#include "engine.h"
#include "gguf.h"
#include "kv_quant.h"
#include "mkmodel.h"
#include "model.h"
#include "testutil.h"

/* Largest |kvtier - naive| allowed, relative to the largest |logit| of the
 * position. With F32 weights and an F32 KV cache kvtier differs from double
 * by f32 rounding (measured 5.5e-7 for qwen3, 5.6e-7 for phi3); gemma's GELU
 * is evaluated through f16 as llama.cpp's CPU backend does (arch_ops.h), which
 * moves logits further (measured 4.4e-4 on gemma2, 6.3e-4 on gemma3). The
 * tolerances sit 2.4-5x above those. */
#define REL_TOL_F32 3e-6
#define REL_TOL_GELU 1.5e-3
/* A model with the window (or the local rope base) taken away must miss by
 * far more than the tolerance: the test can see them. */
#define MUST_DIFFER_FACTOR 10.0

#define WINDOW 8
#define PROMPT 40
#define CACHE_PROMPT 100
#define CACHE_BLOCK 16
#define N_GEN 6

/* ---- the naive forward pass ---------------------------------------------- */

typedef struct {
    const kvt_gguf *g;
    const char *arch;
    int gemma, gemma2, gemma3, phi3, qwen3;
    int64_t D, L, H, KVH, HD, F, V;
    double eps, base, base_local;
    int64_t window; /* 0: none */
    int pattern;    /* sliding layers: phi3 all, gemma2 even, gemma3 il % 6 < 5 */
    double attn_cap, final_cap, qscale, mscale;
    const float *factors;           /* phi3 LongRoPE factors in use, or NULL */
    int no_window, local_as_global; /* sabotage switches for the sensitivity checks */
} net;

static const float *tensor(const net *n, const char *name) {
    const kvt_gguf_tensor *t = kvt_gguf_tensor_find(n->g, name);
    if (!t || t->type != KVT_TYPE_F32) {
        CHECKF(0, "tensor %s missing or not F32", name);
        return NULL;
    }
    return t->data;
}

static const float *ltensor(const net *n, int64_t l, const char *suffix) {
    char name[128];
    snprintf(name, sizeof name, "blk.%lld.%s", (long long)l, suffix);
    return tensor(n, name);
}

static int64_t meta_int(const net *n, const char *suffix, int64_t dflt) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", n->arch, suffix);
    int64_t v;
    return kvt_gguf_get_int(n->g, key, &v) ? dflt : v;
}

static double meta_f(const net *n, const char *suffix, double dflt) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", n->arch, suffix);
    double v;
    return kvt_gguf_get_float(n->g, key, &v) ? dflt : v;
}

static void net_init(net *n, const kvt_gguf *g, const char *arch) {
    memset(n, 0, sizeof *n);
    n->g = g;
    n->arch = arch;
    n->qwen3 = !strcmp(arch, "qwen3");
    n->phi3 = !strcmp(arch, "phi3");
    n->gemma2 = !strcmp(arch, "gemma2");
    n->gemma3 = !strcmp(arch, "gemma3");
    n->gemma = n->gemma2 || n->gemma3;
    n->D = meta_int(n, "embedding_length", 0);
    n->L = meta_int(n, "block_count", 0);
    n->H = meta_int(n, "attention.head_count", 0);
    n->KVH = meta_int(n, "attention.head_count_kv", n->H);
    n->HD = meta_int(n, "attention.key_length", n->D / n->H);
    n->F = meta_int(n, "feed_forward_length", 0);
    n->V = (int64_t)kvt_gguf_tensor_find(g, "token_embd.weight")->ne[1];
    n->eps = meta_f(n, "attention.layer_norm_rms_epsilon", 1e-5);
    n->base = meta_f(n, "rope.freq_base", 10000.0);
    n->base_local = n->gemma3 ? 10000.0 : n->base; /* Gemma 3: rope_local_base_freq */
    n->window = n->qwen3 ? 0 : meta_int(n, "attention.sliding_window", 0);
    n->pattern = n->phi3 ? 1 : n->gemma2 ? 2 : 6;
    n->attn_cap = n->gemma2 ? meta_f(n, "attn_logit_softcapping", 50.0) : 0;
    n->final_cap = n->gemma2 ? meta_f(n, "final_logit_softcapping", 30.0) : 0;
    n->qscale = 1.0 / sqrt((double)n->HD); /* query_pre_attn_scalar = head_dim at these sizes */
    n->mscale = n->phi3 ? meta_f(n, "rope.scaling.attn_factor", 1.0) : 1.0;
    if (n->phi3) { /* long factors for a model trained past its original context (kvtier's rule) */
        int64_t orig = meta_int(n, "rope.scaling.original_context_length", meta_int(n, "context_length", 0));
        n->factors = tensor(
            n, meta_int(n, "context_length", 0) > orig ? "rope_factors_long.weight" : "rope_factors_short.weight");
    }
}

static int slides(const net *n, int64_t l) {
    if (!n->window || n->no_window) return 0;
    return n->pattern == 1 || l % n->pattern < n->pattern - 1;
}

static void rmsnorm(double *out, const double *x, const float *w, int64_t len, double eps) {
    double ss = 0;
    for (int64_t i = 0; i < len; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / (double)len + eps);
    for (int64_t i = 0; i < len; i++) out[i] = x[i] * r * w[i];
}

/* y[rows] = W[rows][cols] x */
static void matvec(double *y, const float *w, const double *x, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t c = 0; c < cols; c++) s += (double)w[r * cols + c] * x[c];
        y[r] = s;
    }
}

/* rotate_half rope (NEOX pairing, every family here) of one head at pos */
static void rope(const net *n, double *v, int64_t pos, double base) {
    int64_t half = n->HD / 2;
    for (int64_t i = 0; i < half; i++) {
        double inv = 1.0 / pow(base, (double)(2 * i) / (double)n->HD);
        if (n->factors && base == n->base) inv /= n->factors[i];
        double c = cos((double)pos * inv) * n->mscale, s = sin((double)pos * inv) * n->mscale;
        double a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = a * s + b * c;
    }
}

static double gelu_tanh(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static double silu(double x) { return x / (1.0 + exp(-x)); }

/* Logits (T, V) of tokens[0..T), causal, in double. */
static double *naive_forward(const net *n, const int32_t *tokens, int64_t T) {
    const int64_t D = n->D, HD = n->HD, QD = n->H * HD, KD = n->KVH * HD, F = n->F, G = n->H / n->KVH;
    double *x = calloc((size_t)(T * D), sizeof(double)), *h = malloc((size_t)D * sizeof(double));
    double *q = malloc((size_t)(T * QD) * sizeof(double)), *k = malloc((size_t)(T * KD) * sizeof(double));
    double *v = malloc((size_t)(T * KD) * sizeof(double)), *att = malloc((size_t)QD * sizeof(double));
    double *o = malloc((size_t)D * sizeof(double)), *sc = malloc((size_t)T * sizeof(double));
    double *gate = malloc((size_t)F * sizeof(double)), *up = malloc((size_t)F * sizeof(double));
    double *qkv = malloc((size_t)(QD + 2 * KD) * sizeof(double)), *gu = malloc((size_t)(2 * F) * sizeof(double));
    double *logits = malloc((size_t)(T * n->V) * sizeof(double));
    const float *emb = tensor(n, "token_embd.weight");
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < D; i++)
            x[t * D + i] = (double)emb[(int64_t)tokens[t] * D + i] * (n->gemma ? sqrt((double)D) : 1.0);
    for (int64_t l = 0; l < n->L; l++) {
        const int sl = slides(n, l);
        const double base = sl && !n->local_as_global ? n->base_local : n->base;
        for (int64_t t = 0; t < T; t++) { /* projections, norms, rope */
            rmsnorm(h, x + t * D, ltensor(n, l, "attn_norm.weight"), D, n->eps);
            if (n->phi3) {
                matvec(qkv, ltensor(n, l, "attn_qkv.weight"), h, QD + 2 * KD, D);
                memcpy(q + t * QD, qkv, (size_t)QD * sizeof(double));
                memcpy(k + t * KD, qkv + QD, (size_t)KD * sizeof(double));
                memcpy(v + t * KD, qkv + QD + KD, (size_t)KD * sizeof(double));
            } else {
                matvec(q + t * QD, ltensor(n, l, "attn_q.weight"), h, QD, D);
                matvec(k + t * KD, ltensor(n, l, "attn_k.weight"), h, KD, D);
                matvec(v + t * KD, ltensor(n, l, "attn_v.weight"), h, KD, D);
            }
            for (int64_t hh = 0; hh < n->H; hh++) {
                double *qh = q + t * QD + hh * HD;
                if (n->qwen3 || n->gemma3) rmsnorm(qh, qh, ltensor(n, l, "attn_q_norm.weight"), HD, n->eps);
                rope(n, qh, t, base);
            }
            for (int64_t hh = 0; hh < n->KVH; hh++) {
                double *kh = k + t * KD + hh * HD;
                if (n->qwen3 || n->gemma3) rmsnorm(kh, kh, ltensor(n, l, "attn_k_norm.weight"), HD, n->eps);
                rope(n, kh, t, base);
            }
        }
        double *xn = malloc((size_t)(T * D) * sizeof(double));
        memcpy(xn, x, (size_t)(T * D) * sizeof(double));
        for (int64_t t = 0; t < T; t++) { /* attention, then the feed-forward block */
            const int64_t lo = sl && t >= n->window ? t - n->window + 1 : 0;
            for (int64_t hh = 0; hh < n->H; hh++) {
                const double *qh = q + t * QD + hh * HD;
                double mx = -INFINITY, sum = 0;
                for (int64_t s = lo; s <= t; s++) {
                    const double *kh = k + s * KD + (hh / G) * HD;
                    double d = 0;
                    for (int64_t i = 0; i < HD; i++) d += qh[i] * kh[i];
                    d *= n->qscale;
                    if (n->attn_cap > 0) d = n->attn_cap * tanh(d / n->attn_cap);
                    sc[s] = d;
                    mx = fmax(mx, d);
                }
                for (int64_t s = lo; s <= t; s++) sum += (sc[s] = exp(sc[s] - mx));
                for (int64_t i = 0; i < HD; i++) {
                    double a = 0;
                    for (int64_t s = lo; s <= t; s++) a += sc[s] / sum * v[s * KD + (hh / G) * HD + i];
                    att[hh * HD + i] = a;
                }
            }
            matvec(o, ltensor(n, l, "attn_output.weight"), att, D, QD);
            if (n->gemma) rmsnorm(o, o, ltensor(n, l, "post_attention_norm.weight"), D, n->eps);
            for (int64_t i = 0; i < D; i++) xn[t * D + i] += o[i];
            rmsnorm(h, xn + t * D, ltensor(n, l, "ffn_norm.weight"), D, n->eps);
            if (n->phi3) { /* gate_up_proj: gate rows, then up rows */
                matvec(gu, ltensor(n, l, "ffn_up.weight"), h, 2 * F, D);
                memcpy(gate, gu, (size_t)F * sizeof(double));
                memcpy(up, gu + F, (size_t)F * sizeof(double));
            } else {
                matvec(gate, ltensor(n, l, "ffn_gate.weight"), h, F, D);
                matvec(up, ltensor(n, l, "ffn_up.weight"), h, F, D);
            }
            for (int64_t i = 0; i < F; i++) gate[i] = (n->gemma ? gelu_tanh(gate[i]) : silu(gate[i])) * up[i];
            matvec(o, ltensor(n, l, "ffn_down.weight"), gate, D, F);
            if (n->gemma) rmsnorm(o, o, ltensor(n, l, "post_ffw_norm.weight"), D, n->eps);
            for (int64_t i = 0; i < D; i++) xn[t * D + i] += o[i];
        }
        memcpy(x, xn, (size_t)(T * D) * sizeof(double));
        free(xn);
    }
    const float *out = kvt_gguf_tensor_find(n->g, "output.weight") && !n->gemma ? tensor(n, "output.weight") : emb;
    for (int64_t t = 0; t < T; t++) {
        rmsnorm(h, x + t * D, tensor(n, "output_norm.weight"), D, n->eps);
        matvec(logits + t * n->V, out, h, n->V, D);
        if (n->final_cap > 0)
            for (int64_t i = 0; i < n->V; i++)
                logits[t * n->V + i] = n->final_cap * tanh(logits[t * n->V + i] / n->final_cap);
    }
    free(x), free(h), free(q), free(k), free(v), free(att), free(o), free(sc), free(gate), free(up), free(qkv), free(gu);
    return logits;
}

/* ---- kvtier against it ----------------------------------------------------- */

static kvt_mkmodel_params arch_params(const char *arch) {
    kvt_mkmodel_params mp = kvt_mkmodel_default_params();
    mp.arch = arch;
    mp.dim = 96;
    mp.heads = 3; /* head_dim 32 */
    mp.kv_heads = 1;
    mp.ff = 160;
    mp.layers = !strcmp(arch, "gemma3") ? 7 : 3; /* gemma3: six sliding layers around a global one */
    mp.swa = WINDOW;
    mp.type = KVT_TYPE_F32;
    mp.seed = 7;
    mp.vocab = 600; /* kvt_test_random_tokens draws from [300, vocab) */
    return mp;
}

static kvt_model *make_model(const kvt_mkmodel_params *mp, const char *file) {
    const char *path = kvt_test_path(kvt_test_tmpdir(), file);
    kvt_model *m = NULL;
    int rc = kvt_mkmodel(mp, path);
    if (!rc) rc = kvt_model_load(path, kvt_model_default_params(), &m);
    CHECKF(rc == 0, "%s: %s", file, kvt_errmsg());
    return m;
}

static int64_t argmax_f64(const double *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Largest |a - b| over a position's logits, relative to its largest |b|. */
static double rel_dev(const float *a, const double *b, int64_t V) {
    double d = 0, mx = 1e-30;
    for (int64_t i = 0; i < V; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        mx = fmax(mx, fabs(b[i]));
    }
    return d / mx;
}

static double max_rel_dev(const float *got, const double *ref, int64_t T, int64_t V) {
    double d = 0;
    for (int64_t t = 0; t < T; t++) d = fmax(d, rel_dev(got + t * V, ref + t * V, V));
    return d;
}

/* Logits of every position of p[0..n) through an engine with this KV dtype, page size and batch. */
static float *run_logits(const kvt_model *m, kvt_kv_dtype dt, int32_t block, int32_t n_batch, const int32_t *p,
                         int32_t n) {
    kvt_engine_params ep = kvt_engine_default_params();
    ep.kv_dtype = dt;
    ep.n_ctx = n;
    ep.block_size = block;
    ep.n_batch = n_batch;
    ep.n_threads = 2;
    ep.max_seqs = 1;
    kvt_engine *e = NULL;
    int32_t seq;
    float *out = malloc((size_t)n * (size_t)m->hp.n_vocab * sizeof(float));
    int rc = kvt_engine_new(m, ep, &e);
    if (!rc) rc = kvt_seq_new(e, NULL, 0, 0, &seq);
    if (!rc) rc = kvt_engine_feed(e, seq, p, n, 1, out);
    CHECKF(rc == 0, "engine run: %s", kvt_errmsg());
    kvt_engine_free(e);
    return out;
}

/* label names the case (and its file); arch is mp's */
static void check_against_naive(const kvt_mkmodel_params *mp, const char *label) {
    const char *arch = mp->arch;
    char file[96];
    snprintf(file, sizeof file, "naive-%s.gguf", label);
    kvt_model *m = make_model(mp, file);
    if (!m) return;
    const int64_t V = m->hp.n_vocab;
    int32_t tokens[PROMPT];
    unsigned seed = 11;
    kvt_test_random_tokens(tokens, PROMPT, (int32_t)V, &seed);

    /* several chunks of 7: later tokens read earlier ones from the pages */
    float *got = run_logits(m, KVT_KV_F32, CACHE_BLOCK, 7, tokens, PROMPT);

    net n;
    net_init(&n, m->gguf, arch);
    double *ref = naive_forward(&n, tokens, PROMPT);
    const double tol = n.gemma ? REL_TOL_GELU : REL_TOL_F32, dev = max_rel_dev(got, ref, PROMPT, V);
    int agree = 0;
    for (int64_t t = 0; t < PROMPT; t++) agree += kvt_argmax(got + t * V, (int32_t)V) == argmax_f64(ref + t * V, V);
    printf("%s: %d positions (window %lld), max |kvtier - naive f64| / max |logit| = %.2e (tol %.1e), top-1 %d/%d\n",
           label, PROMPT, (long long)n.window, dev, tol, agree, PROMPT);
    CHECKF(dev <= tol, "%s: relative deviation %.3e > %.1e", label, dev, tol);

    /* the comparison sees the window and the local rope: without them the naive pass misses by far */
    if (n.window) {
        n.no_window = 1;
        double *nowin = naive_forward(&n, tokens, PROMPT);
        double d = max_rel_dev(got, nowin, PROMPT, V);
        CHECKF(d > MUST_DIFFER_FACTOR * tol, "%s: without the window the naive pass differs by only %.2e", label, d);
        free(nowin);
        n.no_window = 0;
    }
    if (n.gemma3) {
        n.local_as_global = 1;
        double *glob = naive_forward(&n, tokens, PROMPT);
        double d = max_rel_dev(got, glob, PROMPT, V);
        CHECKF(d > MUST_DIFFER_FACTOR * tol,
               "gemma3: with the global rope base everywhere the pass differs by only %.2e", d);
        free(glob);
    }
    free(ref);
    free(got);
    kvt_model_free(m);
}

/* ---- windows across pages: block size and batch do not change a bit --------- */

/* A window that starts mid-page, over pages of 3 and of 16 tokens, in chunks
 * of 5 and of the whole prompt, for every KV dtype: the same bits. */
static void check_window_invariance(const char *arch) {
    kvt_mkmodel_params mp = arch_params(arch);
    mp.type = KVT_TYPE_F16;
    char file[64];
    snprintf(file, sizeof file, "window-%s.gguf", arch);
    kvt_model *m = make_model(&mp, file);
    if (!m) return;
    int32_t p[PROMPT];
    unsigned seed = 3;
    kvt_test_random_tokens(p, PROMPT, m->hp.n_vocab, &seed);
    const kvt_kv_dtype dts[] = {KVT_KV_F16, KVT_KV_F32, KVT_KV_Q8_0};
    for (size_t d = 0; d < KVT_ARRAY_LEN(dts); d++) {
        float *a = run_logits(m, dts[d], 3, 5, p, PROMPT), *b = run_logits(m, dts[d], 16, PROMPT, p, PROMPT);
        CHECKF(!memcmp(a, b, (size_t)PROMPT * (size_t)m->hp.n_vocab * sizeof(float)),
               "%s, KV %s: pages of 3 and 16 tokens give different logits", arch, kvt_kv_dtype_name(dts[d]));
        free(a);
        free(b);
    }
    kvt_model_free(m);
}

/* ---- the cache invariant on sliding-window models -------------------------- */

static kvt_cache *open_cache(kvt_engine *e, const char *dir) {
    kvt_cache_params cp = kvt_cache_default_params();
    cp.ram_bytes = 64ull << 20;
    cp.disk_dir = dir;
    cp.disk_bytes = 64 << 20;
    kvt_cache *c = NULL;
    CHECKF(kvt_cache_new(e, cp, &c) == 0, "cache: %s", kvt_errmsg());
    return c;
}

/* pages for one request of CACHE_PROMPT + N_GEN tokens, so a second prompt pushes the first to T1 */
#define CACHE_PAGES ((CACHE_PROMPT + N_GEN + CACHE_BLOCK - 1) / CACHE_BLOCK + 1)

/* label names the case, its file and its cache directory */
static void check_cache_tiers(kvt_mkmodel_params mp, const char *label) {
    const char *arch = label;
    mp.type = KVT_TYPE_F16;
    char file[96], dir[4096];
    snprintf(file, sizeof file, "cache-%s.gguf", label);
    snprintf(dir, sizeof dir, "%s/kv-%s", kvt_test_tmpdir(), label);
    kvt_model *m = make_model(&mp, file);
    if (!m) return;
    const int32_t V = m->hp.n_vocab, full = CACHE_PROMPT / CACHE_BLOCK * CACHE_BLOCK;
    int32_t p[CACHE_PROMPT], other[CACHE_PROMPT];
    unsigned seed = 5;
    kvt_test_random_tokens(p, CACHE_PROMPT, V, &seed);
    kvt_test_random_tokens(other, CACHE_PROMPT, V, &seed);

    kvt_engine *e = kvt_test_engine(m, CACHE_BLOCK, CACHE_PAGES, CACHE_PROMPT + N_GEN);
    kvt_test_gen cold = kvt_test_generate(e, NULL, p, CACHE_PROMPT, N_GEN, NULL);
    kvt_engine_free(e);

    e = kvt_test_engine(m, CACHE_BLOCK, CACHE_PAGES, CACHE_PROMPT + N_GEN);
    kvt_cache *c = e ? open_cache(e, dir) : NULL;
    if (!c) {
        kvt_engine_free(e);
        kvt_test_gen_free(&cold);
        kvt_model_free(m);
        return;
    }
    kvt_test_gen miss = kvt_test_generate(e, c, p, CACHE_PROMPT, N_GEN, NULL);
    kvt_test_gen t0 = kvt_test_generate(e, c, p, CACHE_PROMPT, N_GEN, NULL);
    kvt_test_gen o = kvt_test_generate(e, c, other, CACHE_PROMPT, N_GEN, NULL);
    kvt_test_gen t1 = kvt_test_generate(e, c, p, CACHE_PROMPT, N_GEN, NULL);
    CHECKF(kvt_test_same(&miss, &cold), "%s: a cache miss differs from the cold run", arch);
    CHECKF(kvt_test_same(&t0, &cold) && t0.res.tier_tokens[KVT_TIER_T0] == full,
           "%s: T0 hit (%d tokens) differs from the cold run", arch, t0.res.tier_tokens[KVT_TIER_T0]);
    CHECKF(kvt_test_same(&t1, &cold) && t1.res.tier_tokens[KVT_TIER_T1] > 0,
           "%s: T1 hit (%d tokens) differs from the cold run", arch, t1.res.tier_tokens[KVT_TIER_T1]);
    CHECK(kvt_cache_flush(c) == 0);
    kvt_cache_free(c);
    kvt_engine_free(e);

    /* a restart: the blocks come back from disk */
    e = kvt_test_engine(m, CACHE_BLOCK, CACHE_PAGES, CACHE_PROMPT + N_GEN);
    c = e ? open_cache(e, dir) : NULL;
    kvt_test_gen t2 = c ? kvt_test_generate(e, c, p, CACHE_PROMPT, N_GEN, NULL) : (kvt_test_gen){0};
    CHECKF(kvt_test_same(&t2, &cold) && t2.res.tier_tokens[KVT_TIER_T2] == full,
           "%s: T2 hit (%d tokens) differs from the cold run", arch, t2.res.tier_tokens[KVT_TIER_T2]);
    printf("%s: window %d, prompt %d: T0 %d, T1 %d, T2 %d cached tokens, all equal to the cold run\n", arch,
           m->layers[0].window, CACHE_PROMPT, t0.res.tier_tokens[KVT_TIER_T0], t1.res.tier_tokens[KVT_TIER_T1],
           t2.res.tier_tokens[KVT_TIER_T2]);
    kvt_test_gen *all[] = {&cold, &miss, &t0, &o, &t1, &t2};
    for (size_t i = 0; i < KVT_ARRAY_LEN(all); i++) kvt_test_gen_free(all[i]);
    kvt_cache_free(c);
    kvt_engine_free(e);
    kvt_model_free(m);
}

/* The released models' head layouts, scaled down: heads wider than dim /
 * heads, so q is not dim wide (Qwen3-0.6B: 16 heads of 128 over a width of
 * 1024; Gemma 3 1B: 4 heads of 256 and one KV head over 1152), and Phi-3's
 * heads of 96. */
static void check_real_shapes(void) {
    static const struct {
        const char *arch, *label;
        int32_t dim, heads, kv_heads, head_dim;
    } shapes[] = {
        {"qwen3", "qwen3-4x128-over-96", 96, 4, 2, 128},
        {"gemma3", "gemma3-2x256-kv1-over-576", 576, 2, 1, 256},
        {"phi3", "phi3-2x96", 192, 2, 2, 0},
    };
    for (size_t i = 0; i < KVT_ARRAY_LEN(shapes); i++) {
        kvt_mkmodel_params mp = arch_params(shapes[i].arch);
        mp.dim = shapes[i].dim;
        mp.heads = shapes[i].heads;
        mp.kv_heads = shapes[i].kv_heads;
        mp.head_dim = shapes[i].head_dim;
        check_against_naive(&mp, shapes[i].label);
    }
}

int main(void) {
    const char *archs[] = {"qwen3", "gemma3", "phi3", "gemma2"};
    for (size_t i = 0; i < KVT_ARRAY_LEN(archs); i++) {
        kvt_mkmodel_params mp = arch_params(archs[i]);
        check_against_naive(&mp, archs[i]);
    }
    check_real_shapes();
    check_window_invariance("gemma2");
    check_window_invariance("phi3");
    check_cache_tiers(arch_params("gemma2"), "gemma2");
    check_cache_tiers(arch_params("gemma3"), "gemma3");
    /* Qwen3's heads of 128 over a narrower model: the pages hold kv heads x 128 per token */
    kvt_mkmodel_params wide = arch_params("qwen3");
    wide.heads = 4;
    wide.kv_heads = 2;
    wide.head_dim = 128;
    check_cache_tiers(wide, "qwen3-4x128-over-96");
    return kvt_test_done("test_archs");
}
