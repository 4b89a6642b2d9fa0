// SPDX-License-Identifier: MIT
/* Per-tensor weight types of the K-quant file types ("mixes": Q4_K_M, ...),
 * following llama.cpp build 4748's published recipe (llama_tensor_get_type),
 * and the fallback for tensors whose rows a K type cannot hold.
 *
 * Fallback rule (llama.cpp's): a K type needs rows (GGUF ne[0]) that are a
 * multiple of 256 (so does IQ4_XS). For a row that is not, llama.cpp takes
 * Q5_0 for Q4_K, Q5_1 for Q5_K, Q8_0 for Q6_K and IQ4_NL for Q2_K, Q3_K and
 * IQ4_XS, then F16 if the row is not
 * a multiple of 32 either; so does kvtier (a type kvt_quant_can_write refused
 * would become Q8_0; none is, today). */
#ifndef KVT_QUANT_MIX_H
#define KVT_QUANT_MIX_H

#include <stdint.h>

typedef enum {
    KVT_MIX_NONE = 0, /* every matrix in one type */
    KVT_MIX_Q2_K,
    KVT_MIX_Q2_K_S,
    KVT_MIX_Q3_K_S,
    KVT_MIX_Q3_K_M,
    KVT_MIX_Q3_K_L,
    KVT_MIX_Q4_K_S,
    KVT_MIX_Q4_K_M,
    KVT_MIX_Q5_K_S,
    KVT_MIX_Q5_K_M,
    KVT_MIX_Q6_K,
} kvt_quant_mix;

/* The mix named `name` (llama.cpp's file-type names, any case: "q4_k_m"),
 * or KVT_MIX_NONE. */
kvt_quant_mix kvt_quant_mix_by_name(const char *name);
/* Lowercase name of a mix ("q4_k_m"), "" for KVT_MIX_NONE. */
const char *kvt_quant_mix_name(kvt_quant_mix mix);
/* The type most matrices of a mix take (Q4_K for Q4_K_M). */
uint32_t kvt_quant_mix_base(kvt_quant_mix mix);

/* What the recipe needs to know about the model. */
typedef struct {
    int32_t n_layer;
    int32_t n_gqa;  /* attention heads per KV head */
    int has_output; /* output.weight exists (else token_embd is the output too) */
} kvt_quant_model_info;

/* Type of the 2-D weight `name` (GGUF names: "blk.3.ffn_down.weight") with
 * rows of `cols` elements under `mix`, the fallback applied. */
uint32_t kvt_quant_mix_type(kvt_quant_mix mix, const char *name, int64_t cols, const kvt_quant_model_info *info);

/* `type` if rows of `cols` can hold it, else the fallback described above. */
uint32_t kvt_quant_fallback(uint32_t type, int64_t cols);

/* 1 if kvtier can write weights of `type` (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K, IQ4_XS). */
int kvt_quant_can_write(uint32_t type);

#endif
