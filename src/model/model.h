// SPDX-License-Identifier: MIT
/* A loaded model: hyperparameters from GGUF metadata, weights bound to the
 * mapped tensors (shape- and type-checked), its tokenizer and fingerprint.
 * Architectures: llama (1/2/3, Mistral, GQA, rope scaling), qwen2 (q/k/v
 * biases, NEOX rope), and the variations of src/model/arch.c: qwen3, phi3,
 * gemma2, gemma3. */
#ifndef KVT_MODEL_H
#define KVT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "kvtier.h"
#include "ops.h"

typedef enum {
    KVT_ARCH_LLAMA = 0,
    KVT_ARCH_QWEN2 = 1,
    KVT_ARCH_QWEN3 = 2,
    KVT_ARCH_PHI3 = 3,
    KVT_ARCH_GEMMA2 = 4,
    KVT_ARCH_GEMMA3 = 5,
} kvt_arch;

/* The feed-forward activation: silu(gate) * up, or gelu(gate) * up (gemma,
 * GELU's tanh form evaluated as llama.cpp's CPU backend does; see arch_ops.h). */
typedef enum { KVT_FFN_SILU = 0, KVT_FFN_GELU = 1 } kvt_ffn_act;

/* How rotary embeddings pair up dimensions: llama rotates (2i, 2i+1), NEOX
 * (qwen2) rotates (i, i + rope_dim/2). */
typedef enum { KVT_ROPE_NORM = 0, KVT_ROPE_NEOX = 1 } kvt_rope_style;

/* NONE and LINEAR rotate by pos * rope_freq_scale. YARN (YaRN) mixes per
 * rotated pair: the fast pairs (those that turn many times within the original
 * context) keep their unscaled angle, the slow ones take the linearly scaled
 * angle, a ramp blends the pairs between, and cos and sin grow by the
 * attention temperature (rope_yarn_mscale), as ggml's rope computes them. */
typedef enum { KVT_ROPE_SCALING_NONE = 0, KVT_ROPE_SCALING_LINEAR = 1, KVT_ROPE_SCALING_YARN = 2 } kvt_rope_scaling;
/* YaRN's ramp bounds in turns within the original context (llama.cpp's
 * defaults; GGUF has no keys for them) */
#define KVT_YARN_BETA_FAST 32.0f
#define KVT_YARN_BETA_SLOW 1.0f

typedef struct {
    kvt_arch arch;
    const char *arch_name; /* "llama" / "qwen2" */
    int32_t n_vocab;
    int32_t n_embd; /* model width */
    int32_t n_layer;
    int32_t n_head, n_head_kv;
    int32_t head_dim; /* per-head width of q and k (and v) */
    int32_t n_ff;
    int32_t n_ctx_train; /* context length the model was trained for */
    float rms_eps;
    float rope_base;  /* theta */
    int32_t rope_dim; /* leading dims of each head that rotate */
    kvt_rope_style rope_style;
    kvt_rope_scaling rope_scaling;
    float rope_freq_scale; /* positions are multiplied by this (1/factor for linear scaling) */
    int has_freq_factors;  /* llama3-style per-dimension factors from rope_freqs.weight */
    int tied_output;       /* output projection shares token_embd */
    /* architecture variations (src/model/arch.c); their neutral values are llama's */
    int qk_norm;    /* q and k RMS-normed per head (attn_q_norm/attn_k_norm) before rope: qwen3, gemma3 */
    int post_norms; /* each block's output RMS-normed before the residual add: gemma2/3 */
    kvt_ffn_act ffn_act;
    float embd_scale;       /* embeddings multiplied by this (gemma: sqrt(n_embd)), else 1 */
    float q_scale;          /* q multiplied by this after rope and scores left unscaled (phi3, gemma);
                              0: scores scaled by 1/sqrt(head_dim) (llama, qwen) */
    float attn_softcap;     /* scores s -> c * tanh(s / c) before the softmax (gemma2); 0 = off */
    float final_softcap;    /* the same on the output logits (gemma2); 0 = off */
    int32_t n_swa;          /* sliding window: a query sees its n_swa latest positions, itself included; 0 = none */
    int32_t swa_pattern;    /* which layers slide (n_swa > 0): 1 every layer, P > 1 the layers with il % P < P - 1 */
    float rope_base_swa;    /* rope base of sliding layers (gemma3: 10000, unscaled); 0: the same rope as the others */
    float rope_attn_factor; /* cos and sin multiplied by this (rope.scaling.attn_factor: phi3 LongRoPE), else 1 */
    /* YaRN (rope_scaling YARN; read in model.c). rope_orig_ctx is also the
     * LongRoPE switch's original context. */
    int32_t rope_orig_ctx;   /* rope.scaling.original_context_length; n_ctx_train when absent */
    float rope_yarn_log_mul; /* rope.scaling.yarn_log_multiplier; 0 when absent */
    float rope_yarn_corr[2]; /* pair indices where the ramp from extrapolated to interpolated starts and ends */
    float rope_yarn_mscale;  /* cos and sin multiplied by this (rope_attn_factor included); 1 without YaRN */
} kvt_hparams;

typedef struct {
    const float *attn_norm;  /* (n_embd) */
    kvt_wmat wq, wk, wv, wo; /* (n_head*head_dim, n_embd), (n_head_kv*head_dim, n_embd) x2, (n_embd, n_head*head_dim) */
    const float *bq, *bk, *bv;     /* qwen2 biases, NULL for llama */
    const float *q_norm, *k_norm;  /* (head_dim) qk_norm archs, else NULL */
    const float *post_attn_norm;   /* (n_embd) post_norms archs, else NULL */
    const float *post_ffn_norm;    /* (n_embd) post_norms archs, else NULL */
    int32_t window;                /* sliding window of this layer (n_swa), 0 = full attention */
    int alt_rope;                  /* uses rope_base_swa instead of rope_base and no scaling */
    const float *ffn_norm;         /* (n_embd) */
    kvt_wmat w_gate, w_up, w_down; /* (n_ff, n_embd) x2, (n_embd, n_ff); phi3: views of one fused
                                        attn_qkv and one fused ffn_up (gate rows first) */
} kvt_layer;

struct kvt_model {
    char *path;
    kvt_gguf *gguf;
    kvt_hparams hp;
    int vocab_only;
    kvt_wmat tok_embd;              /* (n_vocab, n_embd) */
    const float *output_norm;       /* (n_embd) */
    kvt_wmat output;                /* (n_vocab, n_embd); == tok_embd when tied */
    const float *rope_freq_factors; /* (rope_dim/2) or NULL */
    kvt_layer *layers;              /* n_layer */
    struct kvt_tokenizer *tok;
    kvt_fingerprint fingerprint;
    const char *chat_template; /* tokenizer.chat_template or NULL */
    float **owned;             /* norms/biases not stored as F32 in the file, converted at load */
    size_t n_owned;
    uint64_t n_params;
    uint64_t weight_bytes;
};

/* YaRN's angle of rotated pair i from its linearly scaled angle (interp) and
 * its unscaled one (extrap): extrap below the ramp, interp above it, a linear
 * blend across it (hp->rope_yarn_corr), in ggml's float operations. */
float kvt_rope_yarn_mix(const kvt_hparams *hp, int32_t i, float interp, float extrap);
/* The longest context the model covers: its trained context_length, or
 * where rope scaling stretches the original context further, that. */
int64_t kvt_model_ctx_limit(const kvt_model *m);
/* Logs a warning (as llama.cpp warns of a "training context overflow", it
 * runs anyway) when a context of n_ctx tokens per sequence exceeds
 * kvt_model_ctx_limit; returns 1 when it warned. */
int kvt_model_warn_ctx(const kvt_model *m, int64_t n_ctx);
/* Bytes of K+V for one token across all layers when stored as dt; 0 when dt
 * cannot hold this model's rows (q8_0 with a head_dim that is not a multiple
 * of 32). */
uint64_t kvt_model_kv_token_bytes(const kvt_model *m, kvt_kv_dtype dt);

/* Fingerprint as 32 lowercase hex digits + NUL (hi then lo). */
void kvt_fingerprint_hex(kvt_fingerprint fp, char out[33]);

/* A hyperparameter at key (model.c): an integer in [lo, hi] into *out, or a
 * number that is finite and in [lo, hi] (or exactly 0 with zero_off: the
 * feature is off) into *out as a float. 0; KVT_ENOTFOUND when the key is
 * absent (*out unchanged); KVT_ETYPE when it is not a number; KVT_EFORMAT,
 * naming the key, the value and the range, when it is outside (NaN, infinite
 * and denormal values included). */
int kvt_hp_int(const kvt_gguf *g, const char *key, int64_t lo, int64_t hi, int32_t *out);
/* The range of rope.freq_base (theta) a model may have. */
#define KVT_HP_ROPE_BASE_MIN 1.0
#define KVT_HP_ROPE_BASE_MAX 1e12
int kvt_hp_float(const kvt_gguf *g, const char *key, double lo, double hi, int zero_off, float *out);

/* ---- architecture table (src/model/arch.c) ---- */

/* Sets hp->arch, arch_name, rope_style and the variation fields for the
 * architecture named name, reading its own metadata keys; the common keys
 * (shapes, rope base, eps) are already in hp. KVT_EUNSUPPORTED for an unknown name. */
int kvt_arch_load_hparams(const kvt_gguf *g, const char *name, kvt_hparams *hp);
/* Whether the architecture named name exists ("llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3"). */
int kvt_arch_known(const char *name);
/* The names, comma-separated, for messages and --help. */
const char *kvt_arch_names(void);
/* The variations of hp in words ("q/k norms, post-norms, gelu, ...", or
 * "none") into buf (always NUL-terminated, truncated to cap). */
void kvt_arch_describe(const kvt_hparams *hp, char *buf, size_t cap);
/* Whether layer il of hp slides (see swa_pattern). */
int kvt_arch_layer_slides(const kvt_hparams *hp, int32_t il);

#endif
