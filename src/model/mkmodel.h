// SPDX-License-Identifier: MIT
/* Random-weight GGUF models for tests, demos and benchmarks (`kvtier mkmodel`).
 * Weights are deterministic for a seed; the tokenizer is copied from a vocab
 * GGUF or is a small built-in byte-level BPE vocabulary. */
#ifndef KVT_MKMODEL_H
#define KVT_MKMODEL_H

#include <stdint.h>

#include "quant_mix.h"

typedef struct {
    const char *arch; /* "llama", "qwen2", "qwen3", "phi3", "gemma2" or "gemma3" */
    int32_t dim, layers, heads, kv_heads, ff;
    int32_t head_dim;       /* one head's width (attention.key_length); 0: dim / heads.
                             * q is heads x head_dim wide, which need not be dim */
    int32_t vocab;          /* 0: the tokenizer's size */
    int32_t ctx;            /* context_length metadata */
    uint32_t type;          /* weight type: KVT_TYPE_F32, F16, BF16, Q8_0, Q4_0, Q4_1,
                             * Q5_0, Q5_1, Q2_K..Q6_K */
    kvt_quant_mix mix;      /* KVT_MIX_NONE: every matrix `type` (K types with the
                             * fallback of quant_mix.h); else that mix's recipe */
    const char *vocab_from; /* GGUF whose tokenizer.* metadata is copied; NULL: built-in */
    uint64_t seed;
    int tied;        /* share token_embd as the output projection */
    float rope_base; /* 0: the architecture's usual (1e6 for qwen3 and gemma3, else 1e4) */
    int32_t swa;     /* sliding window of phi3/gemma2/gemma3; 0: the architecture's usual
                               (phi3 2047, gemma2 4096, gemma3 512) */
    /* rope.scaling.* keys, each written only when set (0 / NULL: absent) */
    const char *rope_scaling; /* rope.scaling.type: "none", "linear" or "yarn" */
    float rope_factor;        /* rope.scaling.factor */
    int32_t rope_orig_ctx;    /* rope.scaling.original_context_length (phi3 writes its own) */
    float rope_attn_factor;   /* rope.scaling.attn_factor (phi3 writes its own) */
    float rope_yarn_log_mul;  /* rope.scaling.yarn_log_multiplier */
    const char *name;         /* general.name */
    int outliers;             /* plant massive activations (kvt_mkmodel_outlier_channels) */
    int fim;                  /* the built-in vocabulary gets Qwen2.5-Coder's six fill-in-the-middle tokens */
} kvt_mkmodel_params;

/* The residual-stream channels that carry massive activations in a model
 * made with outliers, as trained LLMs have a few (values of 1e3 to 1e4 where
 * the others are about 1): KVT_MKMODEL_OUTLIERS channels picked from the
 * seed, into ch. The first layer's ffn_down rows of those channels are
 * scaled by KVT_MKMODEL_OUTLIER_GAIN, so that every token carries them from
 * the second layer on (the post-FFN norm's weights too, where the
 * architecture has one and would normalise them away). */
#define KVT_MKMODEL_OUTLIERS 2
#define KVT_MKMODEL_OUTLIER_GAIN 5000.0f
void kvt_mkmodel_outlier_channels(const kvt_mkmodel_params *p, int32_t ch[KVT_MKMODEL_OUTLIERS]);

kvt_mkmodel_params kvt_mkmodel_default_params(void);

/* Writes the model to path (atomically). Returns 0 or a negative code with
 * kvt_errmsg() set. Shapes are checked first (dim % heads unless head_dim is
 * given, heads % kv_heads, an even head_dim; Q8_0 and the legacy types need
 * dim, ff and heads x head_dim to be multiples of 32). K types and
 * mixes quantize with kvt_qk_quantize_row, the legacy types with
 * kvt_ql_quantize_row. */
int kvt_mkmodel(const kvt_mkmodel_params *p, const char *path);

/* Size in tokens of the built-in vocabulary for a requested size (>= the
 * 256 byte tokens + specials). */
int32_t kvt_mkmodel_builtin_min_vocab(void);

#endif
