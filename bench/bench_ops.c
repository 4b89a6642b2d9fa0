// SPDX-License-Identifier: MIT
/* Matmul throughput for the benchmark model's shapes (llama, dim 1024, ff 2816,
 * vocab 32000, F16 weights): GFLOP/s at n = 1, 32, 512 tokens with 1 and 2
 * threads, per variant. Prints the best of repeated calls (GFLOP/s, and ms for 2 threads);
 * never passes or fails on time.
 * Usage: bench_ops [variant]
 *                  [type: f16|f32|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|q2_k|q3_k|q4_k|q5_k|q6_k]
 *                  [shape: a part of the shape names, e.g. "stream"]
 *
 * Decode steps: bench_ops step [variant] [type] [threads] [rounds] runs the
 * matmuls of one decode step of the whole benchmark model (16 layers' q, k, v
 * as one group, o, gate and up as one group, down, then the output head:
 * 226 MB of Q8_0 weights, streamed from memory as in decode) for n = 1..8
 * tokens, the counts interleaved round by round, and prints per n the median
 * wall ms of a step, its median CPU ms (all threads, the pool's short spins
 * included) and wall ms per token. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops.h"

/* Repeat each case until this much time has passed (after one warm-up call). */
#define BENCH_MIN_SECONDS 0.3
#define BENCH_MAX_THREADS 2

typedef struct {
    const char *name;
    int64_t rows, cols;
} shape;

static const shape shapes[] = {
    {"attn_q/o 1024x1024", 1024, 1024},
    {"attn_k/v 256x1024", 256, 1024},
    {"ffn_gate/up 2816x1024", 2816, 1024},
    {"ffn_down 1024x2816", 1024, 2816},
    {"output 32000x1024", 32000, 1024},
    /* decode from memory: 140 MB of Q8_0 rows, beyond any L3, as a model's weights are */
    {"stream 131072x1024", 131072, 1024},
};
#define STREAM_MAX_TOKENS 2 /* the streaming shape is decode's: 1 or 2 tokens */
static const int64_t token_counts[] = {1, 2, 32, 512};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint32_t type_by_name(const char *s) {
    if (!strcmp(s, "f32")) return KVT_TYPE_F32;
    if (!strcmp(s, "bf16")) return KVT_TYPE_BF16;
    if (!strcmp(s, "q8_0")) return KVT_TYPE_Q8_0;
    if (!strcmp(s, "q4_0")) return KVT_TYPE_Q4_0;
    if (!strcmp(s, "q4_1")) return KVT_TYPE_Q4_1;
    if (!strcmp(s, "q5_0")) return KVT_TYPE_Q5_0;
    if (!strcmp(s, "q5_1")) return KVT_TYPE_Q5_1;
    static const char *const k[] = {"q2_k", "q3_k", "q4_k", "q5_k", "q6_k"};
    for (uint32_t i = 0; i < 5; i++)
        if (!strcmp(s, k[i])) return KVT_TYPE_Q2_K + i;
    return KVT_TYPE_F16;
}

/* The benchmark model's matrices of one layer, in the engine's calls: {q, k, v}, {o}, {gate, up}, {down}. */
#define STEP_LAYERS 16
#define STEP_MATS 7
#define STEP_MAX_N 16
static const shape layer_shapes[STEP_MATS] = {{"q", 1024, 1024},   {"k", 256, 1024},     {"v", 256, 1024},
                                              {"o", 1024, 1024},   {"gate", 2816, 1024}, {"up", 2816, 1024},
                                              {"down", 1024, 2816}};
static const int step_groups[][2] = {{0, 3}, {3, 1}, {4, 2}, {6, 1}}; /* first matrix, count */

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One decode step of n tokens over all the matrices (mats[layer * STEP_MATS + i], then the head). */
static void run_step(kvt_pool *pool, const kvt_wmat *mats, const float *x, float *y, int64_t n) {
    for (int l = 0; l < STEP_LAYERS; l++)
        for (size_t g = 0; g < sizeof step_groups / sizeof step_groups[0]; g++) {
            const kvt_wmat *ws[3];
            float *ys[3];
            int64_t ld[3];
            const int first = step_groups[g][0], count = step_groups[g][1];
            for (int i = 0; i < count; i++) {
                ws[i] = &mats[l * STEP_MATS + first + i];
                ys[i] = y + (int64_t)i * STEP_MAX_N * 2816;
                ld[i] = ws[i]->rows;
            }
            kvt_matmul_multi(pool, ws, count, x, ws[0]->cols, n, ys, ld);
        }
    kvt_matmul(pool, &mats[STEP_LAYERS * STEP_MATS], x, 1024, n, y, 32000);
}

static int bench_steps(const char *variant, uint32_t type, int threads, int rounds) {
    enum { NMATS = STEP_LAYERS * STEP_MATS + 1, NCOUNTS = 10 };
    static const int64_t ns[NCOUNTS] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16};
    if (variant && kvt_ops_force_variant(variant) != 0) {
        fprintf(stderr, "bench_ops: variant %s not available\n", variant);
        return 1;
    }
    if (threads < 1 || rounds < 1) {
        fprintf(stderr, "bench_ops step: threads and rounds must be >= 1\n");
        return 1;
    }
    kvt_wmat mats[NMATS];
    size_t total = 0;
    for (int m = 0; m < NMATS; m++) {
        const shape *sh = m < NMATS - 1 ? &layer_shapes[m % STEP_MATS] : &shapes[4];
        const size_t rb = kvt_wmat_row_bytes(type, sh->cols);
        uint8_t *wd = malloc(rb * (size_t)sh->rows);
        if (!wd) return 1;
        for (size_t i = 0; i < rb * (size_t)sh->rows; i++) wd[i] = (uint8_t)((i + (size_t)m) * 131 % 61);
        mats[m] = (kvt_wmat){.type = type, .rows = sh->rows, .cols = sh->cols, .data = wd, .row_bytes = rb};
        total += rb * (size_t)sh->rows;
    }
    float *x = malloc(sizeof(float) * STEP_MAX_N * 2816), *y = malloc(sizeof(float) * 3 * STEP_MAX_N * 32000);
    double *wall = malloc(sizeof(double) * (size_t)(NCOUNTS * rounds)),
           *cpu = malloc(sizeof(double) * (size_t)(NCOUNTS * rounds));
    kvt_pool *pool = kvt_pool_new(threads);
    if (!x || !y || !wall || !cpu || !pool) return 1;
    for (int64_t i = 0; i < STEP_MAX_N * 2816; i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    run_step(pool, mats, x, y, 1); /* warm-up: page in the weights */
    for (int r = 0; r < rounds; r++)
        for (int c = 0; c < NCOUNTS; c++) {
            const double w0 = now(), c0 = cpu_now();
            run_step(pool, mats, x, y, ns[c]);
            cpu[c * rounds + r] = cpu_now() - c0;
            wall[c * rounds + r] = now() - w0;
        }
    printf("numerics %s, variant %s, weights type %u (%.0f MB), %d threads, %d rounds\n", kvt_ops_numerics_id(),
           kvt_ops_variant(), type, (double)total / 1e6, threads, rounds);
    printf("%4s %10s %10s %12s\n", "n", "wall ms", "cpu ms", "wall ms/tok");
    for (int c = 0; c < NCOUNTS; c++) {
        qsort(wall + c * rounds, (size_t)rounds, sizeof(double), cmp_double);
        qsort(cpu + c * rounds, (size_t)rounds, sizeof(double), cmp_double);
        const double wm = wall[c * rounds + rounds / 2] * 1e3, cm = cpu[c * rounds + rounds / 2] * 1e3;
        printf("%4lld %10.2f %10.2f %12.2f\n", (long long)ns[c], wm, cm, wm / (double)ns[c]);
    }
    kvt_pool_free(pool);
    for (int m = 0; m < NMATS; m++) free((void *)mats[m].data);
    free(x), free(y), free(wall), free(cpu);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "step"))
        return bench_steps(argc > 2 ? argv[2] : NULL, type_by_name(argc > 3 ? argv[3] : "q8_0"),
                           argc > 4 ? atoi(argv[4]) : 2, argc > 5 ? atoi(argv[5]) : 9);
    const char *only = argc > 1 ? argv[1] : NULL;
    const uint32_t type = type_by_name(argc > 2 ? argv[2] : "f16");
    const char *shape_filter = argc > 3 ? argv[3] : NULL; /* a part of the shape names to run */
    static const char *const variants[] = {"amx", "avx512", "avx2", "scalar"};
    int64_t max_tok = token_counts[sizeof token_counts / sizeof token_counts[0] - 1];
    int64_t max_rows = 32000, max_cols = 2816;
    float *x = malloc(sizeof(float) * (size_t)(max_tok * max_cols));
    float *y = malloc(sizeof(float) * (size_t)(max_tok * max_rows));
    if (!x || !y) return 1;
    for (int64_t i = 0; i < max_tok * max_cols; i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    kvt_pool *pools[BENCH_MAX_THREADS];
    for (int t = 0; t < BENCH_MAX_THREADS; t++) pools[t] = kvt_pool_new(t + 1);

    printf("numerics %s, weights type %u\n", kvt_ops_numerics_id(), type);
    printf("%-8s %-24s %6s %8s %8s %9s\n", "variant", "shape", "n", "1 thr", "2 thr", "ms (2t)");
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        if (only && strcmp(only, variants[v])) continue;
        if (kvt_ops_force_variant(variants[v]) != 0) continue;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const shape *sh = &shapes[s];
            if (shape_filter && !strstr(sh->name, shape_filter)) continue;
            size_t rb = kvt_wmat_row_bytes(type, sh->cols);
            uint8_t *wd = malloc(rb * (size_t)sh->rows);
            if (!wd) return 1;
            for (size_t i = 0; i < rb * (size_t)sh->rows; i++)
                wd[i] = (uint8_t)(i * 131 % 61); /* small finite values */
            kvt_wmat w = {.type = type, .rows = sh->rows, .cols = sh->cols, .data = wd, .row_bytes = rb};
            for (size_t ni = 0; ni < sizeof token_counts / sizeof token_counts[0]; ni++) {
                int64_t n = token_counts[ni];
                if (!strcmp(variants[v], "scalar") && n > 1) continue; /* minutes per case */
                if (sh->rows > max_rows && n > STREAM_MAX_TOKENS) continue;
                double gf[BENCH_MAX_THREADS], ms = 0;
                for (int t = 0; t < BENCH_MAX_THREADS; t++) {
                    kvt_matmul(pools[t], &w, x, sh->cols, n, y, sh->rows); /* warm-up */
                    /* best of the repetitions: the machine may be shared, and
                     * the fastest call is the least disturbed one */
                    double t0 = now(), best = 1e30;
                    do {
                        double c0 = now();
                        kvt_matmul(pools[t], &w, x, sh->cols, n, y, sh->rows);
                        double c = now() - c0;
                        best = c < best ? c : best;
                    } while (now() - t0 < BENCH_MIN_SECONDS);
                    gf[t] = 2.0 * (double)sh->rows * (double)sh->cols * (double)n / best * 1e-9;
                    ms = best * 1e3;
                }
                printf("%-8s %-24s %6lld %8.1f %8.1f %9.3f\n", variants[v], sh->name, (long long)n, gf[0], gf[1], ms);
                fflush(stdout);
            }
            free(wd);
        }
    }
    for (int t = 0; t < BENCH_MAX_THREADS; t++) kvt_pool_free(pools[t]);
    free(x);
    free(y);
    return 0;
}
