// SPDX-License-Identifier: MIT
/* K-quant weights: pack/unpack round trips, the Q8_K activation rounding,
 * and the quantizers' error on fixed data against bounds taken from
 * llama.cpp's own reference quantizers on the same data. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "quant_k.h"
#include "testutil.h"

#define N_K 6
static const uint32_t ktypes[N_K] = {KVT_TYPE_Q2_K, KVT_TYPE_Q3_K, KVT_TYPE_Q4_K,
                                     KVT_TYPE_Q5_K, KVT_TYPE_Q6_K, KVT_TYPE_IQ4_XS};
static const char *const knames[N_K] = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS"};
/* Relative RMS error (rms(dequant - x) / rms(x)) of llama.cpp build 4748's
 * reference quantizers (ggml_quantize_chunk without an importance matrix,
 * what llama-quantize uses; measured by a small program outside the repo that
 * builds make_data's two sets the same way), for the cosine-like and the
 * Gaussian set. Ours must be within QUALITY_SLACK of them. */
static const double llama_rel_rmse[2][N_K] = {
    {0.2105, 0.1136, 0.0440, 0.0241, 0.0117, 0.0568},
    {0.2991, 0.1525, 0.0715, 0.0359, 0.0178, 0.0772},
};
#define QUALITY_SLACK 1.05
#define N_DATA 8192

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double unif(void) { /* (0, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((double)(rng >> 11) + 0.5) * 0x1.0p-53;
}

/* set 0: llama.cpp's test-quantize-fns data, 0.1 + 2 cos(i + 0.5);
 * set 1: Gaussian (Box-Muller) from a fixed LCG */
static void make_data(int set, float *x, int n) {
    for (int i = 0; i < n; i++)
        x[i] = set == 0 ? 0.1f + 2.0f * cosf((float)i + 0.5f)
                        : (float)(sqrt(-2.0 * log(unif())) * cos(2.0 * M_PI * unif()));
}

static void test_roundtrip(void) {
    for (int t = 0; t < N_K; t++) {
        uint32_t type = ktypes[t];
        int bad = 0;
        for (int rep = 0; rep < 50; rep++) {
            /* random bytes unpack and pack back to themselves (d, dmin kept as bits) */
            uint8_t blk[256], again[256];
            size_t bb = kvt_qk_block_bytes(type);
            for (size_t i = 0; i < bb; i++) blk[i] = (uint8_t)(unif() * 256);
            kvt_qk_block b;
            kvt_qk_unpack(type, blk, &b);
            uint16_t d, dmin = 0;
            size_t dpos = type == KVT_TYPE_Q2_K ? 80 : type == KVT_TYPE_Q3_K ? 108 : type == KVT_TYPE_Q6_K ? 208 : 0;
            memcpy(&d, blk + dpos, 2);
            if (kvt_qk_has_min(type)) memcpy(&dmin, blk + dpos + 2, 2);
            kvt_qk_pack(type, &b, d, dmin, again);
            bad += memcmp(blk, again, bb) != 0;
        }
        CHECKF(bad == 0, "%s: %d blocks do not survive unpack + pack", knames[t], bad);
    }
}

static void test_q8k(void) {
    float x[512];
    int8_t q[512];
    float d[2];
    int16_t bs[32];
    make_data(1, x, 512);
    x[7] = 5.0f;    /* block 0's largest is positive */
    x[300] = -6.0f; /* block 1's negative */
    kvt_qk_quantize_acts(x, 512, q, d, bs);
    CHECK(d[0] == 1.0f / (-127.0f / 5.0f) && q[7] == -127);
    CHECK(d[1] == 1.0f / (-127.0f / -6.0f) && q[300] == -127);
    int bad = 0;
    for (int g = 0; g < 32; g++) {
        int s = 0;
        for (int i = 0; i < 16; i++) s += q[16 * g + i];
        bad += s != bs[g];
    }
    for (int i = 0; i < 512; i++) bad += fabsf(d[i / 256] * q[i] - x[i]) > fabsf(d[i / 256]) * 0.5f * 1.0001f;
    CHECKF(bad == 0, "Q8_K: %d sums or values off", bad);
    /* an all-zero block: d = 0, q = 0, sums 0 */
    memset(x, 0, 256 * sizeof(float));
    kvt_qk_quantize_acts(x, 256, q, d, bs);
    int nz = 0;
    for (int i = 0; i < 256; i++) nz += q[i] != 0;
    for (int g = 0; g < 16; g++) nz += bs[g] != 0;
    CHECK(d[0] == 0.0f && nz == 0);
}

static void test_quality(void) {
    static float x[N_DATA], y[N_DATA];
    static uint8_t buf[N_DATA];
    for (int set = 0; set < 2; set++) {
        make_data(set, x, N_DATA);
        double sx = 0;
        for (int i = 0; i < N_DATA; i++) sx += (double)x[i] * x[i];
        for (int t = 0; t < N_K; t++) {
            CHECK(kvt_qk_quantize_row(ktypes[t], x, N_DATA, buf) == 0);
            kvt_qk_dequant_row(ktypes[t], buf, N_DATA, y);
            double se = 0;
            for (int i = 0; i < N_DATA; i++) se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
            double rel = sqrt(se / sx);
            printf("set %d %s: relative rmse %.4f (llama.cpp %.4f)\n", set, knames[t], rel, llama_rel_rmse[set][t]);
            CHECKF(rel <= llama_rel_rmse[set][t] * QUALITY_SLACK, "set %d %s: relative rmse %.4f > %.4f * %.2f", set,
                   knames[t], rel, llama_rel_rmse[set][t], QUALITY_SLACK);
        }
    }
    CHECK(kvt_qk_quantize_row(KVT_TYPE_Q8_0, x, 256, buf) == -1);
}

int main(void) {
    test_roundtrip();
    test_q8k();
    test_quality();
    return kvt_test_done("test_quant_k");
}
