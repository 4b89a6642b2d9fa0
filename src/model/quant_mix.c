// SPDX-License-Identifier: MIT
/* The K-quant file types' per-tensor recipe (see quant_mix.h): which weights
 * get more bits, by tensor role and layer, as llama.cpp decides them. */
#include "quant_mix.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common.h"
#include "quant_legacy.h"
#include "types.h"

#define K_ROW 256 /* a K-type row must be a multiple of this */

static const struct {
    const char *name;
    kvt_quant_mix mix;
    uint32_t base;
} mixes[] = {
    {"q2_k", KVT_MIX_Q2_K, KVT_TYPE_Q2_K},     {"q2_k_s", KVT_MIX_Q2_K_S, KVT_TYPE_Q2_K},
    {"q3_k_s", KVT_MIX_Q3_K_S, KVT_TYPE_Q3_K}, {"q3_k_m", KVT_MIX_Q3_K_M, KVT_TYPE_Q3_K},
    {"q3_k_l", KVT_MIX_Q3_K_L, KVT_TYPE_Q3_K}, {"q4_k_s", KVT_MIX_Q4_K_S, KVT_TYPE_Q4_K},
    {"q4_k_m", KVT_MIX_Q4_K_M, KVT_TYPE_Q4_K}, {"q5_k_s", KVT_MIX_Q5_K_S, KVT_TYPE_Q5_K},
    {"q5_k_m", KVT_MIX_Q5_K_M, KVT_TYPE_Q5_K}, {"q6_k", KVT_MIX_Q6_K, KVT_TYPE_Q6_K},
};

kvt_quant_mix kvt_quant_mix_by_name(const char *name) {
    for (size_t i = 0; i < KVT_ARRAY_LEN(mixes); i++)
        if (!strcasecmp(name, mixes[i].name)) return mixes[i].mix;
    return KVT_MIX_NONE;
}

const char *kvt_quant_mix_name(kvt_quant_mix mix) {
    for (size_t i = 0; i < KVT_ARRAY_LEN(mixes); i++)
        if (mixes[i].mix == mix) return mixes[i].name;
    return "";
}

uint32_t kvt_quant_mix_base(kvt_quant_mix mix) {
    for (size_t i = 0; i < KVT_ARRAY_LEN(mixes); i++)
        if (mixes[i].mix == mix) return mixes[i].base;
    return KVT_TYPE_F16;
}

int kvt_quant_can_write(uint32_t type) {
    return type == KVT_TYPE_F32 || type == KVT_TYPE_F16 || type == KVT_TYPE_BF16 || type == KVT_TYPE_Q8_0 ||
        kvt_ql_is_legacy(type) || (type >= KVT_TYPE_Q2_K && type <= KVT_TYPE_Q6_K) || type == KVT_TYPE_IQ4_XS;
}

uint32_t kvt_quant_fallback(uint32_t type, int64_t cols) {
    if ((type < KVT_TYPE_Q2_K || type > KVT_TYPE_Q6_K) && type != KVT_TYPE_IQ4_XS) return type;
    if (cols % K_ROW == 0) return type;
    uint32_t fb = type == KVT_TYPE_Q4_K ? KVT_TYPE_Q5_0
        : type == KVT_TYPE_Q5_K         ? KVT_TYPE_Q5_1
        : type == KVT_TYPE_Q6_K         ? KVT_TYPE_Q8_0
                                        : KVT_TYPE_IQ4_NL;
    if (!kvt_quant_can_write(fb)) fb = KVT_TYPE_Q8_0;
    return cols % KVT_Q8_0_BLOCK ? KVT_TYPE_F16 : fb;
}

/* Layers that get more bits in the _M mixes: the first and last eighth and
 * every third layer between. */
static int more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static int has(const char *name, const char *role) { return strstr(name, role) != NULL; }

uint32_t kvt_quant_mix_type(kvt_quant_mix mix, const char *name, int64_t cols, const kvt_quant_model_info *info) {
    uint32_t t = kvt_quant_mix_base(mix);
    const int n = info->n_layer;
    int i = 0;
    if (sscanf(name, "blk.%d.", &i) != 1) i = 0;
    if (!strcmp(name, "output.weight") || (!info->has_output && !strcmp(name, "token_embd.weight"))) {
        t = cols % K_ROW ? (cols % KVT_Q8_0_BLOCK ? KVT_TYPE_F16 : KVT_TYPE_Q8_0) : KVT_TYPE_Q6_K;
    } else if (has(name, "attn_v.weight")) {
        if (mix == KVT_MIX_Q2_K) t = info->n_gqa >= 4 ? KVT_TYPE_Q4_K : KVT_TYPE_Q3_K;
        else if (mix == KVT_MIX_Q2_K_S && info->n_gqa >= 4) t = KVT_TYPE_Q4_K;
        else if (mix == KVT_MIX_Q3_K_M) t = i < 2 ? KVT_TYPE_Q5_K : KVT_TYPE_Q4_K;
        else if (mix == KVT_MIX_Q3_K_L) t = KVT_TYPE_Q5_K;
        else if ((mix == KVT_MIX_Q4_K_M || mix == KVT_MIX_Q5_K_M) && more_bits(i, n)) t = KVT_TYPE_Q6_K;
        else if (mix == KVT_MIX_Q4_K_S && i < 4) t = KVT_TYPE_Q5_K;
    } else if (has(name, "ffn_down")) {
        if (mix == KVT_MIX_Q2_K) t = KVT_TYPE_Q3_K;
        else if (mix == KVT_MIX_Q2_K_S && i < n / 8) t = KVT_TYPE_Q4_K;
        else if (mix == KVT_MIX_Q3_K_M) t = i < n / 16 ? KVT_TYPE_Q5_K : KVT_TYPE_Q4_K;
        else if (mix == KVT_MIX_Q3_K_L) t = KVT_TYPE_Q5_K;
        else if ((mix == KVT_MIX_Q4_K_M || mix == KVT_MIX_Q5_K_M) && more_bits(i, n)) t = KVT_TYPE_Q6_K;
        else if (mix == KVT_MIX_Q4_K_S && i < n / 8) t = KVT_TYPE_Q5_K;
    } else if (has(name, "attn_output.weight")) {
        if (mix == KVT_MIX_Q2_K) t = KVT_TYPE_Q3_K;
        else if (mix == KVT_MIX_Q3_K_M) t = KVT_TYPE_Q4_K;
        else if (mix == KVT_MIX_Q3_K_L) t = KVT_TYPE_Q5_K;
    } else if (has(name, "attn_qkv.weight")) {
        if (mix == KVT_MIX_Q3_K_M || mix == KVT_MIX_Q3_K_L) t = KVT_TYPE_Q4_K;
        else if (mix == KVT_MIX_Q4_K_M) t = KVT_TYPE_Q5_K;
        else if (mix == KVT_MIX_Q5_K_M) t = KVT_TYPE_Q6_K;
    }
    return kvt_quant_fallback(t, cols);
}
