// SPDX-License-Identifier: MIT
/* The K-quant mixes' per-tensor types against llama.cpp: the expected strings
 * are the types llama-quantize (build 4748) wrote for two mkmodel models,
 * per tensor role and layer; and the fallback for rows that are not
 * multiples of 256. */
#include <stdio.h>
#include <string.h>

#include "quant_mix.h"
#include "testutil.h"
#include "types.h"

/* one character per type: 2..6 = Q2_K..Q6_K, 8 = Q8_0, F = F16 */
static char type_char(uint32_t t) {
    return t >= KVT_TYPE_Q2_K && t <= KVT_TYPE_Q6_K ? (char)('2' + (t - KVT_TYPE_Q2_K))
        : t == KVT_TYPE_Q8_0                        ? '8'
        : t == KVT_TYPE_F16                         ? 'F'
                                                    : '?';
}

static const char *const roles[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};

/* "token_embd output role role ..." as dumped from llama-quantize's files;
 * output 'f' = absent (tied) */
static void render(kvt_quant_mix mix, const kvt_quant_model_info *info, int64_t cols, char *out) {
    char *p = out;
    *p++ = type_char(kvt_quant_mix_type(mix, "token_embd.weight", cols, info));
    *p++ = info->has_output ? type_char(kvt_quant_mix_type(mix, "output.weight", cols, info)) : 'f';
    for (size_t r = 0; r < sizeof roles / sizeof roles[0]; r++) {
        *p++ = ' ';
        for (int i = 0; i < info->n_layer; i++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", i, roles[r]);
            *p++ = type_char(kvt_quant_mix_type(mix, name, cols, info));
        }
    }
    *p = 0;
}

static const struct {
    const char *mix;
    const char *a; /* 16 layers, 8 heads / 2 kv heads, tied, dim 256, ff 256 */
    const char *b; /* 8 layers, 4 heads / 4 kv heads, own output, dim 256, ff 256 */
} expect[] = {
    {"q2_k",
     "6f 2222222222222222 2222222222222222 4444444444444444 3333333333333333 2222222222222222 2222222222222222 3333333333333333",
     "26 22222222 22222222 33333333 33333333 22222222 22222222 33333333"},
    {"q3_k_s",
     "6f 3333333333333333 3333333333333333 3333333333333333 3333333333333333 3333333333333333 3333333333333333 3333333333333333",
     "36 33333333 33333333 33333333 33333333 33333333 33333333 33333333"},
    {"q3_k_m",
     "6f 3333333333333333 3333333333333333 5544444444444444 4444444444444444 3333333333333333 3333333333333333 5444444444444444",
     "36 33333333 33333333 55444444 44444444 33333333 33333333 44444444"},
    {"q3_k_l",
     "6f 3333333333333333 3333333333333333 5555555555555555 5555555555555555 3333333333333333 3333333333333333 5555555555555555",
     "36 33333333 33333333 55555555 55555555 33333333 33333333 55555555"},
    {"q4_k_s",
     "6f 4444444444444444 4444444444444444 5555444444444444 4444444444444444 4444444444444444 4444444444444444 5544444444444444",
     "46 44444444 44444444 55554444 44444444 44444444 44444444 54444444"},
    {"q4_k_m",
     "6f 4444444444444444 4444444444444444 6644644644644666 4444444444444444 4444444444444444 4444444444444444 6644644644644666",
     "46 44444444 44444444 64464466 44444444 44444444 44444444 64464466"},
    {"q5_k_s",
     "6f 5555555555555555 5555555555555555 5555555555555555 5555555555555555 5555555555555555 5555555555555555 5555555555555555",
     "56 55555555 55555555 55555555 55555555 55555555 55555555 55555555"},
    {"q5_k_m",
     "6f 5555555555555555 5555555555555555 6655655655655666 5555555555555555 5555555555555555 5555555555555555 6655655655655666",
     "56 55555555 55555555 65565566 55555555 55555555 55555555 65565566"},
    {"q6_k",
     "6f 6666666666666666 6666666666666666 6666666666666666 6666666666666666 6666666666666666 6666666666666666 6666666666666666",
     "66 66666666 66666666 66666666 66666666 66666666 66666666 66666666"},
};

int main(void) {
    char got[256];
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        kvt_quant_mix mix = kvt_quant_mix_by_name(expect[i].mix);
        CHECKF(mix != KVT_MIX_NONE && !strcmp(kvt_quant_mix_name(mix), expect[i].mix), "%s", expect[i].mix);
        kvt_quant_model_info a = {.n_layer = 16, .n_gqa = 4, .has_output = 0};
        render(mix, &a, 256, got);
        CHECKF(!strcmp(got, expect[i].a), "%s (16 layers, gqa 4, tied):\n got  %s\n want %s", expect[i].mix, got,
               expect[i].a);
        kvt_quant_model_info b = {.n_layer = 8, .n_gqa = 1, .has_output = 1};
        render(mix, &b, 256, got);
        CHECKF(!strcmp(got, expect[i].b), "%s (8 layers, gqa 1):\n got  %s\n want %s", expect[i].mix, got, expect[i].b);
    }
    CHECK(kvt_quant_mix_by_name("Q4_K_M") == KVT_MIX_Q4_K_M);
    CHECK(kvt_quant_mix_by_name("q4_k") == KVT_MIX_NONE && kvt_quant_mix_by_name("q8_0") == KVT_MIX_NONE);
    /* fallback: rows of 288 (not of 256, of 32) and 100 (neither) */
    CHECK(kvt_quant_fallback(KVT_TYPE_Q4_K, 512) == KVT_TYPE_Q4_K);
    CHECK(kvt_quant_fallback(KVT_TYPE_Q6_K, 288) == KVT_TYPE_Q8_0);
    for (uint32_t t = KVT_TYPE_Q2_K; t <= KVT_TYPE_Q6_K; t++) {
        uint32_t fb = kvt_quant_fallback(t, 288);
        CHECKF(kvt_quant_can_write(fb) && fb != t &&
                   (fb == KVT_TYPE_Q8_0 || fb == KVT_TYPE_Q5_0 || fb == KVT_TYPE_Q5_1 || fb == KVT_TYPE_IQ4_NL),
               "type %u falls back to %u", t, fb);
        CHECK(kvt_quant_fallback(t, 100) == KVT_TYPE_F16);
    }
    /* IQ4_XS: as llama-quantize, IQ4_NL for rows that are not a multiple of 256 */
    CHECK(kvt_quant_can_write(KVT_TYPE_IQ4_XS) && kvt_quant_fallback(KVT_TYPE_IQ4_XS, 512) == KVT_TYPE_IQ4_XS);
    CHECK(kvt_quant_fallback(KVT_TYPE_IQ4_XS, 288) == KVT_TYPE_IQ4_NL);
    CHECK(kvt_quant_fallback(KVT_TYPE_IQ4_XS, 100) == KVT_TYPE_F16);
    kvt_quant_model_info c = {.n_layer = 2, .n_gqa = 2, .has_output = 1};
    CHECK(kvt_quant_mix_type(KVT_MIX_Q4_K_M, "output.weight", 288, &c) == KVT_TYPE_Q8_0);
    CHECK(kvt_quant_mix_type(KVT_MIX_Q4_K_M, "output.weight", 100, &c) == KVT_TYPE_F16);
    CHECK(kvt_quant_fallback(KVT_TYPE_F16, 100) == KVT_TYPE_F16);
    return kvt_test_done("test_quant_mix");
}
