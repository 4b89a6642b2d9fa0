// SPDX-License-Identifier: MIT
/* Memory read bandwidth with T threads (default 2): the ceiling for decode,
 * which streams every weight once per token. Prints GB/s and the decode
 * tok/s that bandwidth allows for a given weight size. Numbers only.
 * usage: bench_membw [THREADS] [WEIGHT_MB] */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define BUF_BYTES (1ull << 30) /* far beyond any cache */
#define PASSES 4
#define MAX_THREADS 64
#define DEFAULT_WEIGHT_MB 423.0 /* the 250M F16 model's matmul weights per token */

typedef struct {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} job;

#if defined(__x86_64__)
#include <immintrin.h>
/* 64-byte loads, as the matmul kernels do */
__attribute__((target("avx512f"))) static uint64_t sum_avx512(const uint64_t *p, size_t n) {
    __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
    for (size_t i = 0; i + 16 <= n; i += 16) {
        a = _mm512_add_epi64(a, _mm512_load_si512((const void *)(p + i)));
        b = _mm512_add_epi64(b, _mm512_load_si512((const void *)(p + i + 8)));
    }
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(a, b));
}
#endif

static uint64_t sum_scalar(const uint64_t *p, size_t n) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
    }
    return s0 + s1 + s2 + s3;
}

static void *reader(void *arg) {
    job *j = arg;
    uint64_t s = 0;
    for (int pass = 0; pass < PASSES; pass++) {
#if defined(__x86_64__)
        if (__builtin_cpu_supports("avx512f")) {
            s += sum_avx512(j->p, j->n);
            continue;
        }
#endif
        s += sum_scalar(j->p, j->n);
    }
    j->sum = s; /* consumed by main, so the loads cannot be dropped */
    return NULL;
}

int main(int argc, char **argv) {
    int t = argc > 1 ? atoi(argv[1]) : 2;
    double weight_mb = argc > 2 ? atof(argv[2]) : DEFAULT_WEIGHT_MB;
    if (t < 1 || t > MAX_THREADS) t = 2;
    uint64_t *buf = aligned_alloc(64, BUF_BYTES);
    if (!buf) return 1;
    memset(buf, 1, BUF_BYTES);
    size_t words = BUF_BYTES / sizeof(uint64_t), per = words / (size_t)t;
    pthread_t th[MAX_THREADS];
    job jobs[MAX_THREADS];
    double t0 = kvt_now();
    for (int i = 0; i < t; i++) {
        jobs[i] = (job){buf + (size_t)i * per, per, 0};
        pthread_create(&th[i], NULL, reader, &jobs[i]);
    }
    uint64_t sum = 0;
    for (int i = 0; i < t; i++) {
        pthread_join(th[i], NULL);
        sum += jobs[i].sum;
    }
    double dt = kvt_now() - t0;
    double gbs = (double)PASSES * (double)(per * (size_t)t * sizeof(uint64_t)) / dt / 1e9;
    printf("read bandwidth, %d threads: %.1f GB/s (checksum %llu)\n", t, gbs, (unsigned long long)(sum & 0xff));
    printf("decode ceiling for %.0f MB of weights per token: %.1f tok/s\n", weight_mb, gbs * 1e3 / weight_mb);
    free(buf);
    return 0;
}
