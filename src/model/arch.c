// SPDX-License-Identifier: MIT
/* The architecture table: what sets each supported family apart from llama,
 * as data the loader and the engine read. The metadata keys and defaults are
 * the ones llama.cpp reads (build 4748 for phi3 and gemma2; qwen3 and gemma3
 * as published with their GGUF conversions). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "model.h"

#define GEMMA2_DEFAULT_SWA 4096
#define GEMMA2_DEFAULT_ATTN_SOFTCAP 50.0f
#define GEMMA2_DEFAULT_FINAL_SOFTCAP 30.0f
#define GEMMA2_27B_LAYERS 46 /* the one size whose queries scale by n_embd / n_head */
#define GEMMA3_27B_LAYERS 62
#define GEMMA2_SWA_PATTERN 2 /* even layers slide */
#define GEMMA3_SWA_PATTERN 6 /* five sliding layers, then one global */
#define GEMMA3_SWA_ROPE_BASE 10000.0f
/* Ranges of the architectures' own numbers (see model.c's HP_ ranges): a
 * soft-cap is off (0) or a cap of sane size; phi3's rope attention factor
 * scales cos and sin, so 0 would erase positions. */
#define SOFTCAP_MIN 1.0
#define SOFTCAP_MAX 1e4
#define ATTN_FACTOR_MIN 0.01
#define ATTN_FACTOR_MAX 100.0

typedef struct {
    const char *name;
    kvt_arch arch;
    kvt_rope_style rope;
} arch_row;

static const arch_row ARCHS[] = {
    {"llama", KVT_ARCH_LLAMA, KVT_ROPE_NORM},   {"qwen2", KVT_ARCH_QWEN2, KVT_ROPE_NEOX},
    {"qwen3", KVT_ARCH_QWEN3, KVT_ROPE_NEOX},   {"phi3", KVT_ARCH_PHI3, KVT_ROPE_NEOX},
    {"gemma2", KVT_ARCH_GEMMA2, KVT_ROPE_NEOX}, {"gemma3", KVT_ARCH_GEMMA3, KVT_ROPE_NEOX},
};

static const arch_row *find(const char *name) {
    for (size_t i = 0; i < KVT_ARRAY_LEN(ARCHS); i++)
        if (name && !strcmp(name, ARCHS[i].name)) return &ARCHS[i];
    return NULL;
}

int kvt_arch_known(const char *name) { return find(name) != NULL; }

const char *kvt_arch_names(void) { return "llama, qwen2, qwen3, phi3, gemma2, gemma3"; }

int kvt_arch_layer_slides(const kvt_hparams *hp, int32_t il) {
    if (hp->n_swa <= 0) return 0;
    if (hp->swa_pattern <= 1) return 1;
    return il % hp->swa_pattern < hp->swa_pattern - 1;
}

static const char *arch_key(char *buf, size_t cap, const char *arch, const char *suffix) {
    snprintf(buf, cap, "%s.%s", arch, suffix);
    return buf;
}

/* An optional non-negative integer "<arch>.<suffix>"; *found says whether it was there. */
static int opt_u32(const kvt_gguf *g, const char *arch, const char *suffix, int32_t *out, int *found) {
    char key[128];
    int64_t v;
    int rc = kvt_gguf_get_int(g, arch_key(key, sizeof key, arch, suffix), &v);
    *found = rc == 0;
    if (rc == KVT_ENOTFOUND) return 0;
    if (rc) return rc;
    if (v < 0 || v > INT32_MAX) return kvt_fail(KVT_EFORMAT, "metadata '%s' = %lld is out of range", key, (long long)v);
    *out = (int32_t)v;
    return 0;
}

/* An optional float "<arch>.<suffix>" in [lo, hi] (or 0 with zero_off), left
 * unchanged when absent. */
static int opt_f32(const kvt_gguf *g, const char *arch, const char *suffix, double lo, double hi, int zero_off,
                   float *out) {
    char key[128];
    int rc = kvt_hp_float(g, arch_key(key, sizeof key, arch, suffix), lo, hi, zero_off, out);
    return rc == KVT_ENOTFOUND ? 0 : rc;
}

/* Phi-3: a window on every layer when sliding_window is set (Phi-4, also
 * "phi3", sets 0: none). Files from before the key existed get the values
 * llama.cpp assumes for the models of that time; others must have it. */
static int load_phi3(const kvt_gguf *g, kvt_hparams *hp) {
    int found, rc;
    if ((rc = opt_u32(g, "phi3", "attention.sliding_window", &hp->n_swa, &found))) return rc;
    if (!found) {
        if ((hp->n_layer == 32 || hp->n_layer == 40) && hp->n_ctx_train == 4096) hp->n_swa = 2047;
        else if (hp->n_layer == 32 && hp->n_head_kv == 32 && hp->n_ctx_train == 131072) hp->n_swa = 262144;
        else if (hp->n_layer == 40 && hp->n_ctx_train == 131072) hp->n_swa = 131072;
        else return kvt_fail(KVT_EFORMAT, "phi3.attention.sliding_window is missing");
    }
    hp->swa_pattern = 1;
    hp->q_scale = 1.0f / sqrtf((float)hp->head_dim);
    return 0;
}

/* Gemma 2 and 3 share: embeddings scaled by sqrt(n_embd), post-norms, GELU,
 * tied output, queries scaled before attention (by 1/sqrt(n_embd / n_head)
 * for the 27B sizes, 1/sqrt(head_dim) for the others). */
static void gemma_common(kvt_hparams *hp, int32_t layers_27b) {
    hp->post_norms = 1;
    hp->ffn_act = KVT_FFN_GELU;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->q_scale = 1.0f / sqrtf((float)(hp->n_layer == layers_27b ? hp->n_embd / hp->n_head : hp->head_dim));
}

static int load_gemma2(const kvt_gguf *g, kvt_hparams *hp) {
    gemma_common(hp, GEMMA2_27B_LAYERS);
    int found, rc;
    hp->n_swa = GEMMA2_DEFAULT_SWA;
    hp->swa_pattern = GEMMA2_SWA_PATTERN;
    hp->attn_softcap = GEMMA2_DEFAULT_ATTN_SOFTCAP;
    hp->final_softcap = GEMMA2_DEFAULT_FINAL_SOFTCAP;
    if ((rc = opt_u32(g, "gemma2", "attention.sliding_window", &hp->n_swa, &found)) ||
        (rc = opt_f32(g, "gemma2", "attn_logit_softcapping", SOFTCAP_MIN, SOFTCAP_MAX, 1, &hp->attn_softcap)) ||
        (rc = opt_f32(g, "gemma2", "final_logit_softcapping", SOFTCAP_MIN, SOFTCAP_MAX, 1, &hp->final_softcap)))
        return rc;
    return 0;
}

static int load_gemma3(const kvt_gguf *g, kvt_hparams *hp) {
    gemma_common(hp, GEMMA3_27B_LAYERS);
    hp->qk_norm = 1;
    hp->swa_pattern = GEMMA3_SWA_PATTERN;
    hp->rope_base_swa = GEMMA3_SWA_ROPE_BASE;
    int found, rc;
    if ((rc = opt_u32(g, "gemma3", "attention.sliding_window", &hp->n_swa, &found))) return rc;
    if (!found) return kvt_fail(KVT_EFORMAT, "gemma3.attention.sliding_window is missing");
    return 0;
}

int kvt_arch_load_hparams(const kvt_gguf *g, const char *name, kvt_hparams *hp) {
    const arch_row *a = find(name);
    if (!a) return kvt_fail(KVT_EUNSUPPORTED, "architecture '%s' is not supported (%s are)", name, kvt_arch_names());
    hp->arch = a->arch;
    hp->arch_name = a->name;
    hp->rope_style = a->rope;
    hp->ffn_act = KVT_FFN_SILU;
    hp->embd_scale = 1.0f;
    hp->rope_attn_factor = 1.0f;
    /* llama.cpp reads the rope magnitude factor for every architecture */
    int rc = opt_f32(g, a->name, "rope.scaling.attn_factor", ATTN_FACTOR_MIN, ATTN_FACTOR_MAX, 0, &hp->rope_attn_factor);
    if (rc) return rc;
    switch (a->arch) {
    case KVT_ARCH_QWEN3: hp->qk_norm = 1; return 0;
    case KVT_ARCH_PHI3: return load_phi3(g, hp);
    case KVT_ARCH_GEMMA2: return load_gemma2(g, hp);
    case KVT_ARCH_GEMMA3: return load_gemma3(g, hp);
    default: return 0;
    }
}

void kvt_arch_describe(const kvt_hparams *hp, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
#define ADD(...) (n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, __VA_ARGS__), n = n < cap ? n : cap)
    if (hp->qk_norm) ADD("%sq/k norms", n ? ", " : "");
    if (hp->post_norms) ADD("%spost-norms", n ? ", " : "");
    if (hp->ffn_act == KVT_FFN_GELU) ADD("%sgelu", n ? ", " : "");
    if (hp->embd_scale != 1.0f) ADD("%sembeddings x %g", n ? ", " : "", (double)hp->embd_scale);
    if (hp->q_scale > 0) ADD("%sq x %g", n ? ", " : "", (double)hp->q_scale);
    if (hp->attn_softcap > 0) ADD("%sattention soft-cap %g", n ? ", " : "", (double)hp->attn_softcap);
    if (hp->final_softcap > 0) ADD("%sfinal soft-cap %g", n ? ", " : "", (double)hp->final_softcap);
    if (hp->n_swa > 0) {
        if (hp->swa_pattern <= 1) ADD("%swindow %d on every layer", n ? ", " : "", hp->n_swa);
        else
            ADD("%swindow %d on %d of every %d layers", n ? ", " : "", hp->n_swa, hp->swa_pattern - 1, hp->swa_pattern);
    }
    if (hp->n_swa > 0 && hp->rope_base_swa > 0) ADD(" (their rope theta %g)", (double)hp->rope_base_swa);
    if (hp->rope_attn_factor != 1.0f) ADD("%srope attn factor %g", n ? ", " : "", (double)hp->rope_attn_factor);
    if (!n) ADD("none");
#undef ADD
}
