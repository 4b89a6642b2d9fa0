// SPDX-License-Identifier: MIT
/* Model loading: reads hyperparameters from GGUF metadata, binds every weight
 * after checking its shape and type, loads the tokenizer and computes the
 * fingerprint that roots the cache keys. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common.h"
#include "log.h"
#include "progress.h"
#include "kv_quant.h"
#include "tokenizer.h"

#define DEFAULT_RMS_EPS 1e-5f
#define DEFAULT_ROPE_BASE 10000.0f
/* Ranges of the hyperparameters read here (the architectures' own in arch.c):
 * a file outside them is refused, naming the key, its value and the range,
 * before anything is sized or computed from it (a zero, negative, NaN,
 * infinite or denormal value would become a huge allocation, a division by
 * zero or NaN activations). Wide enough for every published model. */
#define HP_DIM_MAX (1 << 20)
#define HP_FF_MAX (1 << 22)
#define HP_LAYERS_MAX 4096
#define HP_HEADS_MAX 4096
#define HP_HEAD_DIM_MAX 4096
#define HP_CTX_MAX (1 << 26)
#define HP_EPS_MIN 1e-12
#define HP_EPS_MAX 0.5
#define HP_ROPE_FACTOR_MIN 0.01
#define HP_ROPE_FACTOR_MAX 1000.0
#define HP_YARN_LOG_MUL_MIN 1e-4
#define HP_YARN_LOG_MUL_MAX 10.0
#define FINGERPRINT_SAMPLE_BYTES 4096 /* hashed from the start, middle and end of every tensor */
#define FINGERPRINT_DOMAIN "kvtier-model-fingerprint-v1"

typedef struct {
    kvt_model *m;
} loader;

kvt_model_params kvt_model_default_params(void) {
    kvt_model_params p = {0};
    return p;
}

int kvt_hp_int(const kvt_gguf *g, const char *key, int64_t lo, int64_t hi, int32_t *out) {
    int64_t v;
    int rc = kvt_gguf_get_int(g, key, &v);
    if (rc) return rc;
    if (v < lo || v > hi)
        return kvt_fail(KVT_EFORMAT, "metadata '%s' = %lld is out of range: expected an integer from %lld to %lld", key,
                        (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return 0;
}

int kvt_hp_float(const kvt_gguf *g, const char *key, double lo, double hi, int zero_off, float *out) {
    double v;
    int rc = kvt_gguf_get_float(g, key, &v);
    if (rc) return rc;
    /* written so that NaN fails every comparison into the refusal */
    if (!(zero_off && v == 0) && !(isfinite(v) && v >= lo && v <= hi))
        return kvt_fail(KVT_EFORMAT, "metadata '%s' = %g is out of range: expected %sa finite number from %g to %g",
                        key, v, zero_off ? "0 (off) or " : "", lo, hi);
    *out = (float)v;
    return 0;
}

/* "<arch>.<suffix>" as an int32 in [lo, hi]; dflt when absent and not required. */
static int get_i32(const kvt_gguf *g, const char *arch, const char *suffix, int32_t *out, int required, int32_t dflt,
                   int64_t lo, int64_t hi) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!required && !kvt_gguf_find(g, key)) {
        *out = dflt;
        return 0;
    }
    return kvt_hp_int(g, key, lo, hi, out);
}

/* "<arch>.<suffix>" as a float in [lo, hi] (or 0 with zero_off); dflt when absent. */
static int get_f32(const kvt_gguf *g, const char *arch, const char *suffix, float *out, float dflt, double lo,
                   double hi, int zero_off) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!kvt_gguf_find(g, key)) {
        *out = dflt;
        return 0;
    }
    return kvt_hp_float(g, key, lo, hi, zero_off, out);
}

/* rope.scaling.*: the type ("none", "linear", "yarn"; "llama3" is carried by
 * rope_freqs.weight), the factor (rope_freq_scale = 1/factor) and YaRN's
 * original context and log multiplier, with llama.cpp's defaults: no type
 * but a factor means linear, a factor of 0 or none means 1, the original
 * context defaults to the trained one. */
static int load_rope_scaling(const kvt_gguf *g, const char *arch, kvt_hparams *hp) {
    int rc;
    hp->rope_scaling = KVT_ROPE_SCALING_NONE;
    hp->rope_freq_scale = 1.0f;
    hp->rope_yarn_log_mul = 0.0f;
    char key[256];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const char *stype = NULL;
    if (kvt_gguf_find(g, key) && (rc = kvt_gguf_get_str(g, key, &stype))) return rc;
    /* a factor of 0 means none, as llama.cpp reads it */
    float factor = 1.0f;
    if ((rc = get_f32(g, arch, "rope.scaling.factor", &factor, 0.0f, HP_ROPE_FACTOR_MIN, HP_ROPE_FACTOR_MAX, 1)))
        return rc;
    if (factor == 0.0f &&
        (rc = get_f32(g, arch, "rope.scale_linear", &factor, 1.0f, HP_ROPE_FACTOR_MIN, HP_ROPE_FACTOR_MAX, 1)))
        return rc;
    if (factor == 0.0f) factor = 1.0f;
    if ((rc = get_i32(g, arch, "rope.scaling.original_context_length", &hp->rope_orig_ctx, 0, hp->n_ctx_train, 1,
                      HP_CTX_MAX)) ||
        (rc = get_f32(g, arch, "rope.scaling.yarn_log_multiplier", &hp->rope_yarn_log_mul, 0.0f, HP_YARN_LOG_MUL_MIN,
                      HP_YARN_LOG_MUL_MAX, 1)))
        return rc;
    if (stype && !strcmp(stype, "yarn")) {
        hp->rope_scaling = KVT_ROPE_SCALING_YARN;
        hp->rope_freq_scale = 1.0f / factor;
    } else if (stype && !strcmp(stype, "linear")) {
        hp->rope_scaling = KVT_ROPE_SCALING_LINEAR;
        hp->rope_freq_scale = 1.0f / factor;
    } else if (stype && strcmp(stype, "none") && strcmp(stype, "llama3")) {
        /* llama3 scaling is carried by rope_freqs.weight */
        return kvt_fail(KVT_EUNSUPPORTED, "metadata '%s' = '%s' is not supported (none, linear, yarn, llama3 are)", key,
                        stype);
    } else if (!stype && factor != 1.0f) {
        hp->rope_scaling = KVT_ROPE_SCALING_LINEAR;
        hp->rope_freq_scale = 1.0f / factor;
    }
    return 0;
}

/* YaRN's ramp and magnitude, derived once from the scaling read above and
 * rope_attn_factor (ggml's rope_yarn_corr_dims and rope_yarn, in the same
 * float operations so that the angles match llama.cpp's bit for bit). The
 * ramp runs over pair indices: a pair i whose wavelength fits n_rot turns
 * within the original context, dim(n_rot) = rope_dim * ln(orig / (2 pi n_rot))
 * / (2 ln base); pairs below floor(dim(beta_fast)) extrapolate (keep their
 * angle), pairs above ceil(dim(beta_slow)) interpolate (angle * freq_scale).
 * The magnitude is attn_factor * (1 + 0.1 ln(1 / freq_scale)); a model with
 * rope.scaling.yarn_log_multiplier m takes 1 + m ln(1 / freq_scale) instead,
 * the temperature llama.cpp builds from that key (its DeepSeek-2 graph,
 * where 0.1 is m's usual value: 0.1 * mscale_all_dim). */
static void yarn_derive(kvt_hparams *hp) {
    hp->rope_yarn_mscale = hp->rope_attn_factor;
    hp->rope_yarn_corr[0] = hp->rope_yarn_corr[1] = 0.0f;
    if (hp->rope_scaling != KVT_ROPE_SCALING_YARN) return;
    const float n_dims = (float)hp->rope_dim, orig = (float)hp->rope_orig_ctx, two_pi = 2.0f * (float)M_PI;
    const float lb2 = 2.0f * logf(hp->rope_base);
    float lo = floorf(n_dims * logf(orig / (KVT_YARN_BETA_FAST * two_pi)) / lb2);
    float hi = ceilf(n_dims * logf(orig / (KVT_YARN_BETA_SLOW * two_pi)) / lb2);
    hp->rope_yarn_corr[0] = lo > 0.0f ? lo : 0.0f;
    hp->rope_yarn_corr[1] = hi < n_dims - 1.0f ? hi : n_dims - 1.0f;
    const float log_mul = hp->rope_yarn_log_mul != 0.0f ? hp->rope_yarn_log_mul : 0.1f;
    hp->rope_yarn_mscale *= fmaf(logf(1.0f / hp->rope_freq_scale), log_mul, 1.0f); /* one fma, as compiled there */
}

float kvt_rope_yarn_mix(const kvt_hparams *hp, int32_t i, float interp, float extrap) {
    const float lo = hp->rope_yarn_corr[0], span = hp->rope_yarn_corr[1] - lo;
    float y = ((float)i - lo) / (span > 0.001f ? span : 0.001f);
    y = y < 0.0f ? 0.0f : y > 1.0f ? 1.0f : y;
    const float mix = 1.0f - y; /* share of the unscaled angle */
    /* llama.cpp's build contracts this sum into one fma, fusing interp's product */
    return fmaf(interp, 1.0f - mix, extrap * mix);
}

int64_t kvt_model_ctx_limit(const kvt_model *m) {
    const kvt_hparams *hp = &m->hp;
    int64_t lim = hp->n_ctx_train;
    if (hp->rope_scaling != KVT_ROPE_SCALING_NONE && hp->rope_freq_scale < 1.0f) {
        /* the original context stretched by the factor */
        int64_t ext = (int64_t)((double)hp->rope_orig_ctx / (double)hp->rope_freq_scale);
        if (ext > lim) lim = ext;
    }
    return lim;
}

int kvt_model_warn_ctx(const kvt_model *m, int64_t n_ctx) {
    const kvt_hparams *hp = &m->hp;
    int64_t lim = kvt_model_ctx_limit(m);
    if (n_ctx <= lim) return 0;
    if (hp->rope_scaling == KVT_ROPE_SCALING_NONE)
        kvt_logk(KVT_LOG_WARN, "ctx,ctx_train",
                 "context %lld tokens exceeds the %d this model was trained for (%s.context_length) and the model "
                 "has no rope scaling: positions past %d are ones it never saw and its output there may degrade",
                 (long long)n_ctx, hp->n_ctx_train, hp->arch_name, hp->n_ctx_train);
    else
        kvt_logk(KVT_LOG_WARN, "ctx,ctx_train",
                 "context %lld tokens exceeds the %lld this model covers (trained for %d, rope scaling %s by %g from "
                 "%d): positions past %lld are ones it never saw and its output there may degrade",
                 (long long)n_ctx, (long long)lim, hp->n_ctx_train,
                 hp->rope_scaling == KVT_ROPE_SCALING_YARN ? "yarn" : "linear", 1.0 / (double)hp->rope_freq_scale,
                 hp->rope_orig_ctx, (long long)lim);
    return 1;
}

static int load_hparams(kvt_model *m) {
    const kvt_gguf *g = m->gguf;
    kvt_hparams *hp = &m->hp;
    const char *arch;
    int rc = kvt_gguf_get_str(g, "general.architecture", &arch);
    if (rc) return rc;
    if (!kvt_arch_known(arch))
        return kvt_fail(KVT_EUNSUPPORTED, "architecture '%s' is not supported (%s are)", arch, kvt_arch_names());
    if ((rc = get_i32(g, arch, "embedding_length", &hp->n_embd, 1, 0, 1, HP_DIM_MAX)) ||
        (rc = get_i32(g, arch, "block_count", &hp->n_layer, 1, 0, 1, HP_LAYERS_MAX)) ||
        (rc = get_i32(g, arch, "feed_forward_length", &hp->n_ff, 1, 0, 1, HP_FF_MAX)) ||
        (rc = get_i32(g, arch, "attention.head_count", &hp->n_head, 1, 0, 1, HP_HEADS_MAX)) ||
        (rc = get_i32(g, arch, "attention.head_count_kv", &hp->n_head_kv, 0, hp->n_head, 1, hp->n_head)) ||
        (rc = get_i32(g, arch, "context_length", &hp->n_ctx_train, 0, 2048, 1, HP_CTX_MAX)))
        return rc;
    if (hp->n_head % hp->n_head_kv)
        return kvt_fail(KVT_EFORMAT, "head_count %d is not a multiple of head_count_kv %d", hp->n_head, hp->n_head_kv);
    /* a head is key_length wide, and q heads x that, which need not be the
     * embedding (Qwen3, Gemma); without the key a head is embedding / heads */
    if ((rc = get_i32(g, arch, "attention.key_length", &hp->head_dim, 0, 0, 1, HP_HEAD_DIM_MAX))) return rc;
    if (!hp->head_dim && hp->n_embd % hp->n_head)
        return kvt_fail(KVT_EFORMAT, "embedding_length %d is not a multiple of head_count %d (and no key_length)",
                        hp->n_embd, hp->n_head);
    if (!hp->head_dim) hp->head_dim = hp->n_embd / hp->n_head;
    int32_t vlen;
    if ((rc = get_i32(g, arch, "attention.value_length", &vlen, 0, hp->head_dim, 1, HP_HEAD_DIM_MAX))) return rc;
    if (vlen != hp->head_dim)
        return kvt_fail(KVT_EUNSUPPORTED, "key_length %d != value_length %d is not supported", hp->head_dim, vlen);
    if ((rc = get_i32(g, arch, "rope.dimension_count", &hp->rope_dim, 0, hp->head_dim, 1, HP_HEAD_DIM_MAX))) return rc;
    if (hp->rope_dim > hp->head_dim || hp->rope_dim % 2)
        return kvt_fail(KVT_EFORMAT, "rope.dimension_count %d must be even and <= head dim %d", hp->rope_dim,
                        hp->head_dim);
    if ((rc = get_f32(g, arch, "attention.layer_norm_rms_epsilon", &hp->rms_eps, DEFAULT_RMS_EPS, HP_EPS_MIN,
                      HP_EPS_MAX, 0)) ||
        (rc = get_f32(g, arch, "rope.freq_base", &hp->rope_base, DEFAULT_ROPE_BASE, KVT_HP_ROPE_BASE_MIN,
                      KVT_HP_ROPE_BASE_MAX, 0)))
        return rc;

    if ((rc = load_rope_scaling(g, arch, hp)) || (rc = kvt_arch_load_hparams(g, arch, hp))) return rc;
    yarn_derive(hp);
    return 0;
}

static int matmul_type_ok(uint32_t t, int64_t cols) {
    return kvt_wmat_row_bytes(t, cols) != 0 || t == KVT_TYPE_F32 || t == KVT_TYPE_F16 || t == KVT_TYPE_BF16;
}

static int bind_wmat(loader *L, const char *name, int64_t rows, int64_t cols, kvt_wmat *out) {
    const kvt_gguf_tensor *t = kvt_gguf_tensor_find(L->m->gguf, name);
    if (!t) return kvt_fail(KVT_ENOTFOUND, "tensor %s is missing", name);
    if (t->n_dims != 2 || (int64_t)t->ne[0] != cols || (int64_t)t->ne[1] != rows)
        return kvt_fail(KVT_EFORMAT, "tensor %s has shape [%llu, %llu], expected [%lld, %lld]", name,
                        (unsigned long long)t->ne[0], (unsigned long long)(t->n_dims > 1 ? t->ne[1] : 1),
                        (long long)cols, (long long)rows);
    if (!matmul_type_ok(t->type, cols))
        return kvt_fail(KVT_EUNSUPPORTED,
                        "tensor %s has type %s; supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, "
                        "Q2_K..Q6_K, IQ4_XS",
                        name, kvt_ggml_type_name(t->type));
    out->type = t->type;
    out->rows = rows;
    out->cols = cols;
    out->data = t->data;
    out->row_bytes = kvt_ggml_row_bytes(t->type, (uint64_t)cols);
    L->m->n_params += (uint64_t)(rows * cols);
    L->m->weight_bytes += t->nbytes;
    return 0;
}

/* A 1-D f32 vector; F16/BF16 files are converted into an owned copy. */
static int bind_vec(loader *L, const char *name, int64_t n, const float **out, int optional) {
    const kvt_gguf_tensor *t = kvt_gguf_tensor_find(L->m->gguf, name);
    *out = NULL;
    if (!t) return optional ? 0 : kvt_fail(KVT_ENOTFOUND, "tensor %s is missing", name);
    if (t->n_dims != 1 || (int64_t)t->ne[0] != n)
        return kvt_fail(KVT_EFORMAT, "tensor %s has %llu elements in %u dims, expected a vector of %lld", name,
                        (unsigned long long)t->ne[0], t->n_dims, (long long)n);
    L->m->n_params += (uint64_t)n;
    L->m->weight_bytes += t->nbytes;
    if (t->type == KVT_TYPE_F32 && ((uintptr_t)t->data % sizeof(float)) == 0) {
        *out = t->data;
        return 0;
    }
    if (t->type != KVT_TYPE_F32 && t->type != KVT_TYPE_F16 && t->type != KVT_TYPE_BF16)
        return kvt_fail(KVT_EUNSUPPORTED, "tensor %s has type %s; vectors must be F32, F16 or BF16", name,
                        kvt_ggml_type_name(t->type));
    float *copy = kvt_xmalloc((size_t)n * sizeof(float));
    kvt_wmat w = {t->type, 1, n, t->data, t->nbytes};
    kvt_wmat_row_f32(&w, 0, copy);
    kvt_model *m = L->m;
    m->owned = kvt_xrealloc(m->owned, (m->n_owned + 1) * sizeof *m->owned);
    m->owned[m->n_owned++] = copy;
    *out = copy;
    return 0;
}

/* Rows [r0, r0 + rows) of w as a matrix of their own: the same bytes, so a
 * product with the view equals those rows of a product with w, bit for bit. */
static kvt_wmat row_view(const kvt_wmat *w, int64_t r0, int64_t rows) {
    kvt_wmat v = *w;
    v.rows = rows;
    v.data = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
    return v;
}

/* Per-dimension rope frequency factors: llama3's rope_freqs, or phi3's
 * LongRoPE pair. Of the pair, llama.cpp takes the long factors when the
 * context it runs at exceeds rope.scaling.original_context_length; kvtier
 * decides once per model, from the trained context, so K/V (and the cache
 * keys) never depend on the context a server is started with: a model
 * trained past its original context (Phi-3-*-128k) uses the long factors. */
static int bind_rope_factors(loader *L) {
    kvt_model *m = L->m;
    kvt_hparams *hp = &m->hp;
    int rc;
    if ((rc = bind_vec(L, "rope_freqs.weight", hp->rope_dim / 2, &m->rope_freq_factors, 1))) return rc;
    if (!m->rope_freq_factors && hp->arch == KVT_ARCH_PHI3) {
        const float *lng = NULL, *shrt = NULL;
        if ((rc = bind_vec(L, "rope_factors_long.weight", hp->rope_dim / 2, &lng, 1)) ||
            (rc = bind_vec(L, "rope_factors_short.weight", hp->rope_dim / 2, &shrt, 1)))
            return rc;
        m->rope_freq_factors = hp->n_ctx_train > hp->rope_orig_ctx ? lng : shrt;
    }
    hp->has_freq_factors = m->rope_freq_factors != NULL;
    return 0;
}

/* Attention projections: separate q/k/v, or phi3's fused attn_qkv split into
 * three row views (q rows, then k, then v). */
static int bind_qkv(loader *L, int32_t i, int64_t q_dim, int64_t kv_dim, kvt_layer *l) {
    const kvt_hparams *hp = &L->m->hp;
    char name[128];
    snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", i);
    if (kvt_gguf_tensor_find(L->m->gguf, name)) {
        kvt_wmat qkv;
        int rc = bind_wmat(L, name, q_dim + 2 * kv_dim, hp->n_embd, &qkv);
        if (rc) return rc;
        l->wq = row_view(&qkv, 0, q_dim);
        l->wk = row_view(&qkv, q_dim, kv_dim);
        l->wv = row_view(&qkv, q_dim + kv_dim, kv_dim);
        return 0;
    }
    int rc;
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, i), name)
    if ((rc = bind_wmat(L, NAME("attn_q.weight"), q_dim, hp->n_embd, &l->wq)) ||
        (rc = bind_wmat(L, NAME("attn_k.weight"), kv_dim, hp->n_embd, &l->wk)) ||
        (rc = bind_wmat(L, NAME("attn_v.weight"), kv_dim, hp->n_embd, &l->wv)))
        return rc;
#undef NAME
    return 0;
}

/* Feed-forward: gate and up, or phi3's fused ffn_up of 2*n_ff rows, gate
 * first (its silu half), split into two views. */
static int bind_ffn(loader *L, int32_t i, kvt_layer *l) {
    const kvt_hparams *hp = &L->m->hp;
    char name[128];
    int rc;
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, i), name)
    if (hp->arch == KVT_ARCH_PHI3 && !kvt_gguf_tensor_find(L->m->gguf, NAME("ffn_gate.weight"))) {
        kvt_wmat up;
        if ((rc = bind_wmat(L, NAME("ffn_up.weight"), 2 * (int64_t)hp->n_ff, hp->n_embd, &up))) return rc;
        l->w_gate = row_view(&up, 0, hp->n_ff);
        l->w_up = row_view(&up, hp->n_ff, hp->n_ff);
    } else if ((rc = bind_wmat(L, NAME("ffn_gate.weight"), hp->n_ff, hp->n_embd, &l->w_gate)) ||
               (rc = bind_wmat(L, NAME("ffn_up.weight"), hp->n_ff, hp->n_embd, &l->w_up))) {
        return rc;
    }
    return bind_wmat(L, NAME("ffn_down.weight"), hp->n_embd, hp->n_ff, &l->w_down);
#undef NAME
}

static int bind_layer(loader *L, int32_t i, int64_t q_dim, int64_t kv_dim) {
    const kvt_hparams *hp = &L->m->hp;
    kvt_layer *l = &L->m->layers[i];
    int opt_bias = hp->arch != KVT_ARCH_QWEN2;
    char name[128];
    int rc;
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, i), name)
    if ((rc = bind_vec(L, NAME("attn_norm.weight"), hp->n_embd, &l->attn_norm, 0)) ||
        (rc = bind_qkv(L, i, q_dim, kv_dim, l)) ||
        (rc = bind_wmat(L, NAME("attn_output.weight"), hp->n_embd, q_dim, &l->wo)) ||
        (rc = bind_vec(L, NAME("attn_q.bias"), q_dim, &l->bq, opt_bias)) ||
        (rc = bind_vec(L, NAME("attn_k.bias"), kv_dim, &l->bk, opt_bias)) ||
        (rc = bind_vec(L, NAME("attn_v.bias"), kv_dim, &l->bv, opt_bias)) ||
        (rc = bind_vec(L, NAME("ffn_norm.weight"), hp->n_embd, &l->ffn_norm, 0)) || (rc = bind_ffn(L, i, l)))
        return rc;
    if (hp->qk_norm &&
        ((rc = bind_vec(L, NAME("attn_q_norm.weight"), hp->head_dim, &l->q_norm, 0)) ||
         (rc = bind_vec(L, NAME("attn_k_norm.weight"), hp->head_dim, &l->k_norm, 0))))
        return rc;
    if (hp->post_norms &&
        ((rc = bind_vec(L, NAME("post_attention_norm.weight"), hp->n_embd, &l->post_attn_norm, 0)) ||
         (rc = bind_vec(L, NAME("post_ffw_norm.weight"), hp->n_embd, &l->post_ffn_norm, 0))))
        return rc;
#undef NAME
    l->window = kvt_arch_layer_slides(hp, i) ? hp->n_swa : 0;
    l->alt_rope = l->window && hp->rope_base_swa > 0;
    return 0;
}

static int bind_weights(loader *L) {
    kvt_model *m = L->m;
    kvt_hparams *hp = &m->hp;
    const kvt_gguf_tensor *te = kvt_gguf_tensor_find(m->gguf, "token_embd.weight");
    if (!te) return kvt_fail(KVT_ENOTFOUND, "tensor token_embd.weight is missing");
    if (te->n_dims != 2 || te->ne[1] > INT32_MAX)
        return kvt_fail(KVT_EFORMAT, "tensor token_embd.weight must be 2-D [n_embd, n_vocab]");
    hp->n_vocab = (int32_t)te->ne[1];
    int64_t q_dim = (int64_t)hp->n_head * hp->head_dim, kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    int rc;
    if ((rc = bind_wmat(L, "token_embd.weight", hp->n_vocab, hp->n_embd, &m->tok_embd)) ||
        (rc = bind_vec(L, "output_norm.weight", hp->n_embd, &m->output_norm, 0)))
        return rc;
    /* gemma always projects with token_embd, whatever else the file holds */
    int tied_arch = hp->arch == KVT_ARCH_GEMMA2 || hp->arch == KVT_ARCH_GEMMA3;
    if (!tied_arch && kvt_gguf_tensor_find(m->gguf, "output.weight")) {
        if ((rc = bind_wmat(L, "output.weight", hp->n_vocab, hp->n_embd, &m->output))) return rc;
    } else {
        m->output = m->tok_embd;
        hp->tied_output = 1;
    }
    if ((rc = bind_rope_factors(L))) return rc;
    /* the tensor directory (itself bounded by the file's size) bounds the layer
     * count before anything per layer is allocated: a crafted block_count of
     * 2^31 would ask for 687 GB. A count just past the layers present is left
     * to the more telling "tensor blk.N... is missing" below. */
    if ((uint64_t)hp->n_layer > m->gguf->n_tensors)
        return kvt_fail(KVT_EFORMAT, "block_count %d is more than the file's %llu tensors (each layer has several)",
                        hp->n_layer, (unsigned long long)m->gguf->n_tensors);
    m->layers = kvt_xcalloc((size_t)hp->n_layer, sizeof *m->layers);
    kvt_progress prog; /* binding converts some weight types into owned copies: large files take a while */
    char what[sizeof prog.what];
    snprintf(what, sizeof what, "loading %s", m->path);
    kvt_progress_begin(&prog, what, (uint64_t)hp->n_layer, "layers");
    for (int32_t i = 0; i < hp->n_layer; i++) {
        kvt_progress_update(&prog, (uint64_t)i);
        if ((rc = bind_layer(L, i, q_dim, kv_dim))) return rc;
    }
    kvt_progress_end(&prog, (uint64_t)hp->n_layer);
    return 0;
}

static void hash_u64(XXH3_state_t *s, uint64_t v) { XXH3_128bits_update(s, &v, sizeof v); }
static void hash_f32(XXH3_state_t *s, float f) { XXH3_128bits_update(s, &f, sizeof f); }

/* Covers everything that changes K/V for a given token sequence: architecture,
 * shapes, rope parameters, the tensor directory, and samples of every tensor's
 * bytes (so two fine-tunes of one base differ). */
static void compute_fingerprint(kvt_model *m) {
    XXH3_state_t *s = XXH3_createState();
    XXH3_128bits_reset(s);
    XXH3_128bits_update(s, FINGERPRINT_DOMAIN, sizeof FINGERPRINT_DOMAIN);
    const kvt_hparams *hp = &m->hp;
    if (hp->arch_name) XXH3_128bits_update(s, hp->arch_name, strlen(hp->arch_name) + 1);
    hash_u64(s, (uint64_t)hp->n_vocab);
    hash_u64(s, (uint64_t)hp->n_embd);
    hash_u64(s, (uint64_t)hp->n_layer);
    hash_u64(s, (uint64_t)hp->n_head);
    hash_u64(s, (uint64_t)hp->n_head_kv);
    hash_u64(s, (uint64_t)hp->head_dim);
    hash_u64(s, (uint64_t)hp->n_ff);
    hash_f32(s, hp->rms_eps);
    hash_f32(s, hp->rope_base);
    hash_u64(s, (uint64_t)hp->rope_dim);
    hash_u64(s, (uint64_t)hp->rope_style);
    hash_u64(s, (uint64_t)hp->rope_scaling);
    hash_f32(s, hp->rope_freq_scale);
    if (hp->arch != KVT_ARCH_LLAMA && hp->arch != KVT_ARCH_QWEN2) {
        /* the variations (src/model/arch.c); llama and qwen2 keep their fingerprints */
        hash_u64(s, (uint64_t)hp->qk_norm);
        hash_u64(s, (uint64_t)hp->post_norms);
        hash_u64(s, (uint64_t)hp->ffn_act);
        hash_f32(s, hp->embd_scale);
        hash_f32(s, hp->q_scale);
        hash_f32(s, hp->attn_softcap);
        hash_f32(s, hp->final_softcap);
        hash_u64(s, (uint64_t)hp->n_swa);
        hash_u64(s, (uint64_t)hp->swa_pattern);
        hash_f32(s, hp->rope_base_swa);
        hash_f32(s, hp->rope_attn_factor);
        hash_u64(s, (uint64_t)(m->rope_freq_factors ? 1 : 0));
        if (m->rope_freq_factors)
            XXH3_128bits_update(s, m->rope_freq_factors, (size_t)(hp->rope_dim / 2) * sizeof(float));
    }
    if (hp->rope_scaling == KVT_ROPE_SCALING_YARN ||
        ((hp->arch == KVT_ARCH_LLAMA || hp->arch == KVT_ARCH_QWEN2) && hp->rope_attn_factor != 1.0f)) {
        /* YaRN's ramp and magnitude (models without them keep their fingerprints) */
        hash_f32(s, hp->rope_attn_factor);
        hash_f32(s, hp->rope_yarn_mscale);
        hash_f32(s, hp->rope_yarn_corr[0]);
        hash_f32(s, hp->rope_yarn_corr[1]);
    }
    const kvt_gguf *g = m->gguf;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kvt_gguf_tensor *t = &g->tensors[i];
        XXH3_128bits_update(s, t->name, strlen(t->name) + 1);
        hash_u64(s, t->type);
        for (int d = 0; d < KVT_GGUF_MAX_DIMS; d++) hash_u64(s, t->ne[d]);
        if (!t->data) continue;
        uint64_t n = KVT_MIN(t->nbytes, (uint64_t)FINGERPRINT_SAMPLE_BYTES);
        const uint8_t *p = t->data;
        XXH3_128bits_update(s, p, n);
        XXH3_128bits_update(s, p + (t->nbytes - n) / 2, n);
        XXH3_128bits_update(s, p + t->nbytes - n, n);
    }
    XXH128_hash_t h = XXH3_128bits_digest(s);
    XXH3_freeState(s);
    m->fingerprint.lo = h.low64;
    m->fingerprint.hi = h.high64;
}

int kvt_model_load(const char *path, kvt_model_params params, kvt_model **out) {
    *out = NULL;
    kvt_model *m = kvt_xcalloc(1, sizeof *m);
    m->path = kvt_xstrdup(path);
    m->vocab_only = params.vocab_only;
    loader L = {m};
    int rc = kvt_gguf_open(path, &m->gguf);
    if (rc) {
        kvt_model_free(m);
        return rc;
    }
    /* a vocab-only GGUF (llama.cpp's tokenizer files) has no tensors at all: say so rather than
     * name the first tensor or metadata key a model would have */
    if (!params.vocab_only && m->gguf->n_tensors == 0) {
        rc = kvt_fail(KVT_EFORMAT,
                      "holds a tokenizer only (no tensors): a vocab-only GGUF cannot be run; use it with "
                      "`kvtier tokenize`, or give a model with its weights");
        goto fail;
    }
    if ((rc = kvt_tokenizer_load(m->gguf, &m->tok))) goto fail;
    const char *tmpl;
    if (!kvt_gguf_get_str(m->gguf, "tokenizer.chat_template", &tmpl)) m->chat_template = tmpl;
    if (!params.vocab_only) {
        if ((rc = load_hparams(m)) || (rc = bind_weights(&L))) goto fail;
        /* a token id the embedding cannot look up would read past the tensor */
        if (kvt_tokenizer_n_vocab(m->tok) > m->hp.n_vocab) {
            rc = kvt_fail(KVT_EFORMAT, "tokenizer has %d tokens but token_embd.weight has %d rows",
                          kvt_tokenizer_n_vocab(m->tok), m->hp.n_vocab);
            goto fail;
        }
    }
    compute_fingerprint(m);
    *out = m;
    return 0;
fail:
    kvt_model_free(m);
    return kvt_fail_prefix(rc, "%s: ", path);
}

void kvt_model_free(kvt_model *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    kvt_tokenizer_free(m->tok);
    kvt_gguf_close(m->gguf);
    free(m->path);
    free(m);
}

kvt_fingerprint kvt_model_fingerprint(const kvt_model *m) { return m->fingerprint; }

uint64_t kvt_model_kv_token_bytes(const kvt_model *m, kvt_kv_dtype dt) {
    const kvt_hparams *hp = &m->hp;
    return 2ull * (uint64_t)hp->n_layer * (uint64_t)hp->n_head_kv * (uint64_t)kvt_kv_row_bytes(dt, hp->head_dim);
}

void kvt_fingerprint_hex(kvt_fingerprint fp, char out[33]) {
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)fp.hi, (unsigned long long)fp.lo);
}

int kvt_model_tokenize(const kvt_model *m, const char *text, size_t len, int add_special, int parse_special,
                       int32_t **out, size_t *n_out) {
    int add = add_special ? kvt_tokenizer_add_special(m->tok) : 0;
    if (add_special & KVT_TOKENIZE_NO_BOS) add &= ~KVT_TOK_ADD_BOS;
    return kvt_tokenize(m->tok, text, len, add, parse_special, out, n_out);
}
