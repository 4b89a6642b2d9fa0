// SPDX-License-Identifier: MIT
/* Attention kernel throughput (attn.h) per variant: one token's scores
 * (kvt_attn_qk) and value pass (kvt_attn_av) over T keys of one KV head, for
 * the benchmark model's heads (4 query heads per KV head, head_dim 64) and a
 * larger GQA shape. The value pass is timed whole (one call over all T keys)
 * and as the engine runs it (one call over runs of PAGE keys, one per page). Prints the best of
 * repeated calls in microseconds and GFLOP/s; never passes or fails on time.
 * Usage: bench_attn [variant] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn.h"
#include "ops.h"

#define BENCH_MIN_SECONDS 0.2
#define MAX_T 4096
#define PAGE 32 /* KVT_DEFAULT_BLOCK_SIZE */

typedef struct {
    int32_t G, hd, T;
} shape;

static const shape shapes[] = {{1, 64, 512},  {4, 64, 512},  {8, 64, 512},  {4, 64, 4096},
                               {8, 64, 4096}, {8, 128, 512}, {8, 128, 4096}};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One token's value pass over T keys in runs of `page` keys, one call as the
 * engine makes it (f16/f32 pages). */
static void value_pass(const shape *s, int f16, const float *sc, const void *v, int32_t page, kvt_attn_run *runs,
                       float *out) {
    const size_t el = f16 ? sizeof(uint16_t) : sizeof(float);
    int32_t n = 0;
    for (int32_t t0 = 0; t0 < s->T; t0 += page)
        runs[n++] = (kvt_attn_run){(const char *)v + (size_t)t0 * (size_t)s->hd * el, sc + t0,
                                   s->T - t0 < page ? s->T - t0 : page, t0};
    kvt_attn_av(runs, n, s->T, s->G, f16, s->hd, NULL, NULL, out);
}

/* One token's scores over T keys as the engine reads them: one call per page
 * of PAGE keys, K stored as pages of [hd][PAGE]. */
static void score_pages(const shape *s, int f16, const float *q, const void *k, float *sc) {
    const size_t el = f16 ? sizeof(uint16_t) : sizeof(float);
    for (int32_t t0 = 0; t0 < s->T; t0 += PAGE)
        kvt_attn_qk(q, s->G, s->hd, (const char *)k + (size_t)t0 * (size_t)s->hd * el, PAGE, f16,
                    s->T - t0 < PAGE ? s->T - t0 : PAGE, 0.125f, sc + t0, s->T);
}

/* Best seconds of one call of kernel `which` (0: qk whole, 1: av whole, 2: av by page, 3: qk by page). */
static double best_of(int which, const shape *s, int f16, const float *q, const void *k, const void *v, float *sc,
                      kvt_attn_run *runs, float *out) {
    double t0 = now(), best = 1e30;
    do {
        double c0 = now();
        if (which == 0) kvt_attn_qk(q, s->G, s->hd, k, s->T, f16, s->T, 0.125f, sc, s->T);
        else if (which == 3) score_pages(s, f16, q, k, sc);
        else value_pass(s, f16, sc, v, which == 1 ? s->T : PAGE, runs, out);
        double c = now() - c0;
        best = c < best ? c : best;
    } while (now() - t0 < BENCH_MIN_SECONDS);
    return best;
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    static const char *const variants[] = {"avx512", "avx2", "scalar"};
    const size_t n = (size_t)MAX_T * 128;
    float *q = malloc(sizeof(float) * 8 * 128), *sc = malloc(sizeof(float) * 8 * MAX_T);
    float *out = calloc(8 * 128, sizeof(float));
    kvt_attn_run *runs = malloc(sizeof(kvt_attn_run) * (MAX_T / PAGE));
    float *kf = malloc(sizeof(float) * n), *vf = malloc(sizeof(float) * n);
    uint16_t *kh = malloc(sizeof(uint16_t) * n), *vh = malloc(sizeof(uint16_t) * n);
    if (!q || !sc || !out || !runs || !kf || !vf || !kh || !vh) return 1;
    for (size_t i = 0; i < 8 * 128; i++) q[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    for (size_t i = 0; i < n; i++) {
        kf[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        vf[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
        kh[i] = kvt_f32_to_f16(kf[i]);
        vh[i] = kvt_f32_to_f16(vf[i]);
    }
    printf("%-8s %-4s %-12s %8s %8s %8s %8s %8s %8s %8s %8s\n", "variant", "kv", "G x hd x T", "qk us", "GFLOP/s",
           "qk/pg us", "GFLOP/s", "av us", "GFLOP/s", "av/pg us", "GFLOP/s");
    for (size_t vi = 0; vi < sizeof variants / sizeof *variants; vi++) {
        if (only && strcmp(only, variants[vi])) continue;
        if (kvt_ops_force_variant(variants[vi]) != 0) {
            printf("%-8s not available on this CPU\n", variants[vi]);
            continue;
        }
        for (int f16 = 1; f16 >= 0; f16--)
            for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
                const shape *s = &shapes[si];
                const void *k = f16 ? (const void *)kh : (const void *)kf,
                           *v = f16 ? (const void *)vh : (const void *)vf;
                for (int32_t i = 0; i < s->G * s->T; i++) sc[i] = 1.0f / (float)s->T;
                double tq = best_of(0, s, f16, q, k, v, sc, runs, out), ta = best_of(1, s, f16, q, k, v, sc, runs, out);
                double tp = best_of(2, s, f16, q, k, v, sc, runs, out), tqp = best_of(3, s, f16, q, k, v, sc, runs, out);
                double flop = 2.0 * s->G * s->hd * s->T;
                char name[32];
                snprintf(name, sizeof name, "%dx%dx%d", s->G, s->hd, s->T);
                printf("%-8s %-4s %-12s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f\n", variants[vi],
                       f16 ? "f16" : "f32", name, tq * 1e6, flop / tq * 1e-9, tqp * 1e6, flop / tqp * 1e-9, ta * 1e6,
                       flop / ta * 1e-9, tp * 1e6, flop / tp * 1e-9);
                fflush(stdout);
            }
    }
    free(q), free(sc), free(out), free(runs), free(kf), free(vf), free(kh), free(vh);
    return 0;
}
