// SPDX-License-Identifier: MIT
/* Tensor element types, by the ids GGUF files store (ggml's), shared by the
 * model reader and the kernels: the one vocabulary of "what a row of numbers
 * is made of" that every layer above base uses. */
#ifndef KVT_TYPES_H
#define KVT_TYPES_H

/* ggml tensor types (the ids GGUF stores). kvtier computes with F32, F16, BF16
 * and Q8_0; the others are recognised so files holding them validate and print. */
enum kvt_ggml_type {
    KVT_TYPE_F32 = 0,
    KVT_TYPE_F16 = 1,
    KVT_TYPE_Q4_0 = 2,
    KVT_TYPE_Q4_1 = 3,
    KVT_TYPE_Q5_0 = 6,
    KVT_TYPE_Q5_1 = 7,
    KVT_TYPE_Q8_0 = 8,
    KVT_TYPE_Q8_1 = 9,
    KVT_TYPE_Q2_K = 10,
    KVT_TYPE_Q3_K = 11,
    KVT_TYPE_Q4_K = 12,
    KVT_TYPE_Q5_K = 13,
    KVT_TYPE_Q6_K = 14,
    KVT_TYPE_Q8_K = 15,
    KVT_TYPE_IQ2_XXS = 16,
    KVT_TYPE_IQ2_XS = 17,
    KVT_TYPE_IQ3_XXS = 18,
    KVT_TYPE_IQ1_S = 19,
    KVT_TYPE_IQ4_NL = 20,
    KVT_TYPE_IQ3_S = 21,
    KVT_TYPE_IQ2_S = 22,
    KVT_TYPE_IQ4_XS = 23,
    KVT_TYPE_I8 = 24,
    KVT_TYPE_I16 = 25,
    KVT_TYPE_I32 = 26,
    KVT_TYPE_I64 = 27,
    KVT_TYPE_F64 = 28,
    KVT_TYPE_IQ1_M = 29,
    KVT_TYPE_BF16 = 30,
    KVT_TYPE_TQ1_0 = 34,
    KVT_TYPE_TQ2_0 = 35,
    KVT_TYPE_COUNT = 40
};

#define KVT_Q8_0_BLOCK 32 /* Q8_0: 32 weights = f16 scale + 32 x int8 */

#endif
