/* Attention kernels: the AVX-512 and scalar paths give the same bits; splitting
 * a key range across calls (pages) or heads across groups changes nothing;
 * results match a double-precision reference. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "ops.h"
#include "testutil.h"

static float frand(unsigned *s) { return (float)rand_r(s) / (float)RAND_MAX * 2.0f - 1.0f; }

static void run_case(int32_t G, int32_t hd, int32_t T, int f16, unsigned seed) {
    size_t el = f16 ? 2 : 4;
    float *q = malloc(sizeof(float) * (size_t)(G * hd));
    void *k = malloc(el * (size_t)(T * hd)), *v = malloc(el * (size_t)(T * hd));
    float *w = malloc(sizeof(float) * (size_t)(G * T));
    for (int32_t i = 0; i < G * hd; i++) q[i] = frand(&seed);
    for (int32_t i = 0; i < T * hd; i++) {
        float a = frand(&seed), b = frand(&seed);
        if (f16) {
            ((uint16_t *)k)[i] = kvt_f32_to_f16(a);
            ((uint16_t *)v)[i] = kvt_f32_to_f16(b);
        } else {
            ((float *)k)[i] = a;
            ((float *)v)[i] = b;
        }
    }
    for (int32_t i = 0; i < G * T; i++) w[i] = fabsf(frand(&seed)) / (float)T;
    /* K transposed as in a page: kt[d][t] */
    void *kt = malloc(el * (size_t)(T * hd));
    for (int32_t t = 0; t < T; t++)
        for (int32_t d = 0; d < hd; d++) memcpy((char *)kt + el * (size_t)(d * T + t), (char *)k + el * (size_t)(t * hd + d), el);
    const char *variants[] = {"scalar", "avx2", "avx512"};
    float *sc[3], *out[3];
    int nv = 0;
    for (int vi = 0; vi < 3; vi++) {
        if (kvt_ops_force_variant(variants[vi])) continue;
        sc[nv] = calloc((size_t)(G * T), sizeof(float));
        out[nv] = calloc((size_t)(G * hd), sizeof(float));
        kvt_attn_qk(q, G, hd, kt, T, f16, T, 0.125f, sc[nv], T);
        kvt_attn_av(w, T, G, v, f16, T, hd, out[nv]);
        /* split keys across two calls (two pages) and heads one at a time: same bits */
        float *sc2 = calloc((size_t)(G * T), sizeof(float)), *out2 = calloc((size_t)(G * hd), sizeof(float));
        int32_t cut = T / 3;
        for (int32_t g = 0; g < G; g++) {
            kvt_attn_qk(q + g * hd, 1, hd, kt, T, f16, cut, 0.125f, sc2 + g * T, T);
            kvt_attn_qk(q + g * hd, 1, hd, (const char *)kt + el * (size_t)cut, T, f16, T - cut, 0.125f,
                        sc2 + g * T + cut, T);
        }
        kvt_attn_av(w, T, G, v, f16, cut, hd, out2);
        kvt_attn_av(w + cut, T, G, (const char *)v + el * (size_t)(cut * hd), f16, T - cut, hd, out2);
        CHECKF(!memcmp(sc2, sc[nv], sizeof(float) * (size_t)(G * T)), "qk split differs (%s G%d hd%d)", variants[vi], G, hd);
        CHECKF(!memcmp(out2, out[nv], sizeof(float) * (size_t)(G * hd)), "av split differs (%s G%d hd%d)", variants[vi], G, hd);
        free(sc2);
        free(out2);
        nv++;
    }
    kvt_ops_force_variant(NULL);
    for (int i = 1; i < nv; i++) {
        CHECKF(!memcmp(sc[0], sc[i], sizeof(float) * (size_t)(G * T)), "qk variants differ G%d hd%d T%d", G, hd, T);
        CHECKF(!memcmp(out[0], out[i], sizeof(float) * (size_t)(G * hd)), "av variants differ G%d hd%d T%d", G, hd, T);
    }
    /* against double precision */
    double maxe = 0;
    for (int32_t g = 0; g < G; g++)
        for (int32_t t = 0; t < T; t++) {
            double ref = 0, mag = 0;
            for (int32_t d = 0; d < hd; d++) {
                double kv = f16 ? kvt_f16_to_f32(((uint16_t *)k)[t * hd + d]) : ((float *)k)[t * hd + d];
                ref += (double)q[g * hd + d] * kv;
                mag += fabs((double)q[g * hd + d] * kv);
            }
            maxe = fmax(maxe, fabs(ref * 0.125 - sc[0][g * T + t]) / (mag * 0.125 + 1e-30));
        }
    CHECKF(maxe < 1e-5, "qk relative error %g", maxe);
    /* the value pass against double precision too: out[g][d] = sum_t w[g][t] * v[t][d] */
    maxe = 0;
    for (int32_t g = 0; g < G; g++)
        for (int32_t d = 0; d < hd; d++) {
            double ref = 0, mag = 0;
            for (int32_t t = 0; t < T; t++) {
                double vv = f16 ? kvt_f16_to_f32(((uint16_t *)v)[t * hd + d]) : ((float *)v)[t * hd + d];
                ref += (double)w[g * T + t] * vv;
                mag += fabs((double)w[g * T + t] * vv);
            }
            maxe = fmax(maxe, fabs(ref - out[0][g * hd + d]) / (mag + 1e-30));
        }
    CHECKF(maxe < 1e-5, "av relative error %g", maxe);
    for (int i = 0; i < nv; i++) {
        free(sc[i]);
        free(out[i]);
    }
    free(q);
    free(kt);
    free(k);
    free(v);
    free(w);
}

int main(void) {
    if (kvt_ops_force_variant("avx512")) /* the scalar path is still checked against double precision */
        kvt_test_skip_part("this CPU has no AVX-512: the AVX-512 attention path was not compared with the scalar one");
    kvt_ops_force_variant(NULL);
    const int32_t shapes[][3] = {{1, 64, 1}, {4, 64, 32}, {4, 64, 77}, {2, 24, 40}, {8, 128, 33},
                                 {7, 80, 50}, {1, 16, 5}, {12, 40, 19}, {3, 96, 64}};
    unsigned seed = 11;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int f16 = 0; f16 < 2; f16++) run_case(shapes[i][0], shapes[i][1], shapes[i][2], f16, seed++);
    return kvt_test_done("test_attn");
}
