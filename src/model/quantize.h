// SPDX-License-Identifier: MIT
/* `kvtier quantize`: rewrites an F32/F16/BF16 GGUF with its weight matrices in
 * another type, every metadata key and tensor kept.
 *
 * Which tensor gets which type follows llama.cpp's llama-quantize (build 4748):
 *   - quantized: 2-D (and 3-D) tensors whose name ends in "weight", except
 *     norms ("_norm.weight"), MoE gates, position/token-type embeddings and a
 *     few small architecture tensors llama.cpp leaves alone;
 *   - output.weight (or token_embd.weight when there is no output.weight) takes
 *     the file type's output type, higher precision than the rest: Q6_K for
 *     every quantized type but Q8_0 (Q8_0 when its rows are not a multiple of
 *     256, as in llama.cpp);
 *   - the K-quant file types (q2_k, q3_k_s/m/l, q4_k_s/m, q5_k_s/m, q6_k; q3_k,
 *     q4_k, q5_k name the _m ones) follow llama.cpp's per-layer recipe and its
 *     fallback for rows that are not a multiple of 256 (quant_mix.h); q2_k_s is
 *     refused, as llama-quantize refuses it without an importance matrix;
 *   - everything else (1-D tensors: norms, biases) is copied unchanged;
 *   - a matrix whose row length is not a multiple of the type's block keeps
 *     its type (llama-quantize refuses such a file for the legacy types).
 * Tensors are written in llama.cpp's order (those outside "blk.N." first, then
 * by layer number, by name within each), metadata in the input's order with
 * general.quantization_version (2) and general.file_type (llama_ftype) moved
 * to the end, so that for the same input the file has llama-quantize's bytes.
 *
 * The output is written to a temporary file beside OUT (created exclusively,
 * not through a link), synced, then renamed over OUT: a failure (bad input,
 * disk full) leaves OUT as it was. */
#ifndef KVT_QUANTIZE_H
#define KVT_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

/* Quantizes n floats (a multiple of the type's block) into a row of a tensor
 * type; returns 0. */
typedef int (*kvt_quant_row_fn)(uint32_t type, const float *x, uint8_t *out, int64_t n);

/* What a per-tensor rule may ask about the model. */
typedef struct {
    int32_t n_layer; /* blk.N layers */
    int32_t n_gqa;   /* attention heads per KV head (1 if the metadata lacks them) */
    int has_output;  /* output.weight exists (else token_embd.weight is the output too) */
} kvt_quant_model_facts;

typedef struct kvt_quant_ftype kvt_quant_ftype;
/* A file type's per-tensor recipe (the K-quant mixes give attn_v, ffn_down, ...
 * more bits in some layers): the type of quantizable tensor `name`, whose rows
 * have `cols` elements, output.weight included, a fallback for rows the type
 * cannot hold included. */
typedef uint32_t (*kvt_quant_rule_fn)(const kvt_quant_ftype *ft, const char *name, int64_t cols,
                                      const kvt_quant_model_facts *m);

/* One row per file type `kvtier quantize` takes (llama.cpp's "ftype"). */
struct kvt_quant_ftype {
    const char *name;       /* "q4_0" (case-insensitive on the command line) */
    uint32_t type;          /* the weight matrices' type */
    uint32_t ftype;         /* general.file_type: llama.cpp's llama_ftype */
    uint32_t output_type;   /* output.weight, or token_embd.weight when tied (no rule) */
    kvt_quant_rule_fn rule; /* NULL: output_type for the output, `type` for the rest */
};

/* The file type called name, or NULL. */
const kvt_quant_ftype *kvt_quant_ftype_find(const char *name);
/* The supported names, ", "-separated, into buf. */
void kvt_quant_ftype_names(char *buf, size_t cap);

typedef struct {
    uint64_t index, count; /* this tensor is index (1-based) of count */
    const char *name;
    uint32_t from, to; /* types */
    uint64_t in_bytes, out_bytes;
    double elapsed; /* seconds since the start */
} kvt_quant_progress;

typedef struct {
    int threads; /* rows are quantized on this many threads (>= 1) */
    /* called after each tensor is written (may be NULL) */
    void (*progress)(void *ctx, const kvt_quant_progress *p);
    void *progress_ctx;
} kvt_quantize_params;

kvt_quantize_params kvt_quantize_default_params(void);

/* Writes in_path's model to out_path with its matrices in file type `type_name`.
 * Returns 0, or a negative code with kvt_errmsg() saying why: KVT_EARG for an
 * unknown type name, the same file as input and output, or a matrix that must
 * be converted from a type other than F32/F16/BF16 (no requantizing);
 * KVT_EUNSUPPORTED for q2_k_s (it needs an importance matrix) or a tensor
 * type without a row quantizer; the reader's codes for a bad input; -errno for a
 * failed write (nothing is left at out_path then). */
int kvt_quantize_file(const char *in_path, const char *out_path, const char *type_name, kvt_quantize_params p);

#endif
