// SPDX-License-Identifier: MIT
/* Attention kernel throughput (attn.h) per variant: one token's scores
 * (kvt_attn_qk) and value pass (kvt_attn_av) over T keys of one KV head, for
 * the benchmark model's heads (4 query heads per KV head, head_dim 64) and a
 * larger GQA shape. The value pass is timed whole (one call over all T keys)
 * and as the engine runs it (one call over runs of PAGE keys, one per page). Prints the best of
 * repeated calls in microseconds and GFLOP/s; never passes or fails on time.
 *
 * Then decode at depth as the engine runs it (attn_decode.h): one token's
 * attention over DEPTH_KEYS keys of every layer and KV head of the benchmark
 * model (16 layers, 4 KV heads of 4 query heads, head_dim 64), in pages of
 * PAGE tokens laid out as the engine's (all layers and heads of a page
 * together, so one head's blocks are a page apart), for f16 and q8_0 KV, on
 * one thread. Prints the KV bytes read per token over the best time as GB/s,
 * next to a plain 64-byte-load read of the same blocks (the bench_membw
 * kernel's way of reading, one thread): their ratio is how close attention
 * comes to streaming the KV at memory speed. "before" is the walk the engine
 * made until the decode walk (same bits), timed alternately with it. "2 thr"
 * is the wall time of the same token on DEPTH_THREADS threads split as the
 * engine splits it when there are at least as many KV heads as threads (head
 * h on thread h mod DEPTH_THREADS, every thread waiting for the others after
 * each layer); on a loaded machine it counts the waits for a core too, so
 * "2 thr cpu" is the CPU time of the busier thread. The KV is 2 MiB aligned
 * and advised as huge pages, as the engine's page pool is.
 * Usage: bench_attn [variant | depth]   (depth: only the decode-at-depth part) */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn.h"
#include "attn_decode.h"
#include "common.h"
#include "kv_quant.h"
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

/* This thread's CPU time: on a shared, loaded machine the time a token takes
 * while it has a core (stalls on memory included), not the time it waits. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
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

/* ---- decode at depth over engine-layout pages ---- */

#define DEPTH_KEYS 8192
#define DEPTH_LAYERS 16
#define DEPTH_KV 4
#define DEPTH_G 4
#define DEPTH_HD 64
#define DEPTH_REPS 5
#define DEPTH_THREADS 2

typedef struct {
    kvt_kv_dtype dt;
    size_t row, block, page; /* bytes: one K or V row, one head's K (or V) block, one page */
    int32_t n_pages;
    uint8_t *mem;
} depth_kv;

static size_t depth_off(const depth_kv *d, int32_t layer, int kv, int32_t head) {
    return (((size_t)layer * 2 + (size_t)kv) * DEPTH_KV + (size_t)head) * d->block;
}

static int depth_init(depth_kv *d, kvt_kv_dtype dt) {
    d->dt = dt;
    d->row = kvt_kv_row_bytes(dt, DEPTH_HD);
    d->block = (size_t)PAGE * d->row;
    d->page = d->block * 2 * DEPTH_LAYERS * DEPTH_KV;
    d->n_pages = DEPTH_KEYS / PAGE;
    /* 2 MiB aligned and advised as huge pages, as the engine's page pool is */
    void *mem = NULL;
    if (posix_memalign(&mem, 2u << 20, d->page * (size_t)d->n_pages)) return -1;
    d->mem = mem;
    kvt_hugepage_hint(d->mem, d->page * (size_t)d->n_pages);
    float x[DEPTH_HD];
    uint8_t *qrow = malloc(d->row);
    if (!qrow) return -1;
    for (size_t b = 0; b < d->page * (size_t)d->n_pages / d->block; b++) { /* blocks: K, V alternate by layer */
        uint8_t *blk = d->mem + b * d->block;
        const int is_k = (b / DEPTH_KV) % 2 == 0;
        for (int32_t t = 0; t < PAGE; t++) {
            for (int i = 0; i < DEPTH_HD; i++)
                x[i] = (float)(((b * PAGE + (size_t)t) * 7919 + (size_t)i * 104729) % 1000) / 1000.0f - 0.5f;
            if (d->dt != KVT_KV_Q8_0) {
                kvt_f32_to_f16_row(x, (uint16_t *)(void *)(blk + (size_t)t * d->row), DEPTH_HD);
            } else if (is_k) { /* K: a column block */
                kvt_kv_q8_quantize_row(x, DEPTH_HD, qrow);
                kvt_kv_q8_put_column(qrow, DEPTH_HD, PAGE, t, blk);
            } else {
                kvt_kv_q8_quantize_row(x, DEPTH_HD, blk + (size_t)t * d->row);
            }
        }
    }
    free(qrow);
    return 0;
}

/* One KV head's attention in one layer. */
static void depth_head(const depth_kv *d, int32_t l, int32_t h, const float *q, const uint8_t **pages,
                       const kvt_attn_dec_buf *buf, float *out) {
    const size_t koff = depth_off(d, l, 0, h);
    for (int32_t p = 0; p < d->n_pages; p++) pages[p] = d->mem + (size_t)p * d->page + koff;
    const kvt_attn_dec a = {pages,
                            (ptrdiff_t)(depth_off(d, l, 1, h) - koff),
                            d->dt,
                            PAGE,
                            DEPTH_HD,
                            DEPTH_G,
                            0,
                            DEPTH_KEYS,
                            0.125f,
                            0,
                            d->dt == KVT_KV_F16};
    kvt_attn_decode(&a, q, out, buf);
}

/* One token's attention over every layer and head; returns seconds. */
static double depth_token(const depth_kv *d, const float *q, const uint8_t **pages, kvt_attn_dec_buf *buf, float *out) {
    double t0 = cpu_now();
    for (int32_t l = 0; l < DEPTH_LAYERS; l++)
        for (int32_t h = 0; h < DEPTH_KV; h++) depth_head(d, l, h, q, pages, buf, out);
    return cpu_now() - t0;
}

/* What one thread of the split token needs: its own pages and buffers. */
typedef struct {
    const depth_kv *d;
    const float *q;
    pthread_barrier_t *bar;
    int ith;
    const uint8_t **pages;
    kvt_attn_dec_buf buf;
    float *out;
    double cpu; /* this thread's CPU time for the token */
} depth_thr;

static void *depth_thread(void *arg) {
    depth_thr *t = arg;
    const double c0 = cpu_now();
    for (int32_t l = 0; l < DEPTH_LAYERS; l++) {
        for (int32_t h = t->ith; h < DEPTH_KV; h += DEPTH_THREADS)
            depth_head(t->d, l, h, t->q, t->pages, &t->buf, t->out);
        pthread_barrier_wait(t->bar);
    }
    t->cpu = cpu_now() - c0;
    return NULL;
}

/* The token on DEPTH_THREADS threads (this one and DEPTH_THREADS - 1 more);
 * returns wall seconds, the threads' start and end included, and the largest
 * thread CPU time at *cpu. */
static double depth_token_split(depth_thr *thr, double *cpu) {
    pthread_barrier_t bar;
    pthread_t tid[DEPTH_THREADS];
    pthread_barrier_init(&bar, NULL, DEPTH_THREADS);
    const double t0 = now();
    for (int i = 0; i < DEPTH_THREADS; i++) thr[i].bar = &bar;
    for (int i = 1; i < DEPTH_THREADS; i++)
        if (pthread_create(&tid[i], NULL, depth_thread, &thr[i])) exit(1);
    depth_thread(&thr[0]);
    for (int i = 1; i < DEPTH_THREADS; i++) pthread_join(tid[i], NULL);
    const double t = now() - t0;
    pthread_barrier_destroy(&bar);
    *cpu = 0;
    for (int i = 0; i < DEPTH_THREADS; i++) *cpu = thr[i].cpu > *cpu ? thr[i].cpu : *cpu;
    return t;
}

/* A decode buffer and pages array big enough for any depth token. */
static void depth_buffers(const uint8_t ***pages, kvt_attn_dec_buf *buf, float **out) {
    const int32_t chunk = DEPTH_KEYS / PAGE; /* more than any chunk needs */
    *pages = malloc(sizeof **pages * (DEPTH_KEYS / PAGE));
    *out = malloc(sizeof(float) * DEPTH_G * DEPTH_HD);
    *buf = (kvt_attn_dec_buf){malloc(sizeof(float) * DEPTH_G * DEPTH_KEYS), DEPTH_KEYS,
                              malloc(sizeof(float) * DEPTH_G * KVT_ATTN_LANES * DEPTH_HD),
                              malloc(sizeof(kvt_attn_run) * (size_t)chunk)};
    if (!*pages || !*out || !buf->scores || !buf->acc || !buf->runs) exit(1);
}

static void depth_buffers_free(const uint8_t **pages, kvt_attn_dec_buf *buf, float *out) {
    free(pages), free(out), free(buf->scores), free(buf->acc), free(buf->runs);
}

/* The "before" walk's q8_0 staging: one page's K, 8 pages' V, as floats. */
static float flat_kdq[DEPTH_HD * PAGE], flat_vdq[8 * PAGE * DEPTH_HD];

/* The same token the way the engine walked it before the decode walk: scores
 * page by page, nothing prefetched, and one value-pass call over every page
 * (q8_0: 8 pages dequantized per call), each lane class stepping through
 * all of the head's V before the next. Same bits; here for comparison. */
static double depth_token_flat(const depth_kv *d, const float *q, const uint8_t **pages, kvt_attn_dec_buf *buf,
                               float *out) {
    double t0 = cpu_now();
    const int q8 = d->dt == KVT_KV_Q8_0, f16 = d->dt == KVT_KV_F16, per = q8 ? 8 : d->n_pages;
    for (int32_t l = 0; l < DEPTH_LAYERS; l++)
        for (int32_t h = 0; h < DEPTH_KV; h++) {
            const size_t koff = depth_off(d, l, 0, h), voff = depth_off(d, l, 1, h);
            for (int32_t p = 0; p < d->n_pages; p++) pages[p] = d->mem + (size_t)p * d->page + koff;
            const kvt_attn_dec a = {
                pages, (ptrdiff_t)(voff - koff), d->dt, PAGE, DEPTH_HD, DEPTH_G, 0, DEPTH_KEYS, 0.125f, 0, f16};
            for (int32_t p = 0; p < d->n_pages; p++) {
                float *sc = buf->scores + p * PAGE;
                if (q8) {
                    kvt_kv_q8_dequant_columns(pages[p], PAGE, PAGE, DEPTH_HD, flat_kdq);
                    kvt_attn_qk(q, DEPTH_G, DEPTH_HD, flat_kdq, PAGE, 0, PAGE, 0.125f, sc, buf->ld);
                } else {
                    kvt_attn_qk(q, DEPTH_G, DEPTH_HD, pages[p], PAGE, 1, PAGE, 0.125f, sc, buf->ld);
                }
            }
            for (int32_t g = 0; g < DEPTH_G; g++) kvt_attn_dec_softmax(&a, buf->scores + (size_t)g * buf->ld);
            for (int32_t p0 = 0; p0 < d->n_pages; p0 += per) {
                for (int32_t p = p0; p < p0 + per; p++) {
                    const uint8_t *v = pages[p] + (voff - koff);
                    const float *vd = flat_vdq + (size_t)(p - p0) * PAGE * DEPTH_HD;
                    if (q8) kvt_kv_q8_dequant_rows(v, PAGE, DEPTH_HD, flat_vdq + (size_t)(p - p0) * PAGE * DEPTH_HD);
                    buf->runs[p - p0] = (kvt_attn_run){q8 ? (const void *)vd : (const void *)v, buf->scores + p * PAGE,
                                                       PAGE, p * PAGE};
                }
                const int last = p0 + per >= d->n_pages;
                kvt_attn_av(buf->runs, per, buf->ld, DEPTH_G, f16, DEPTH_HD, p0 ? buf->acc : NULL,
                            last ? NULL : buf->acc, last ? out : NULL);
            }
        }
    return cpu_now() - t0;
}

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx512f"))) static uint64_t read_block(const uint8_t *p, size_t n) {
    __m512i a = _mm512_setzero_si512();
    for (size_t i = 0; i + 64 <= n; i += 64) a = _mm512_xor_si512(a, _mm512_loadu_si512((const void *)(p + i)));
    return (uint64_t)_mm512_reduce_add_epi64(a);
}
#else
static uint64_t read_block(const uint8_t *p, size_t n) {
    uint64_t a = 0, x;
    for (size_t i = 0; i + 8 <= n; i += 8) memcpy(&x, p + i, 8), a ^= x;
    return a;
}
#endif

/* The same K and V blocks read in the same order, nothing computed. */
static double depth_read(const depth_kv *d, uint64_t *sink) {
    double t0 = cpu_now();
    for (int32_t l = 0; l < DEPTH_LAYERS; l++)
        for (int32_t h = 0; h < DEPTH_KV; h++)
            for (int kv = 0; kv < 2; kv++)
                for (int32_t p = 0; p < d->n_pages; p++)
                    *sink += read_block(d->mem + (size_t)p * d->page + depth_off(d, l, kv, h), d->block);
    return cpu_now() - t0;
}

static void depth_bench(void) {
    const kvt_kv_dtype dts[] = {KVT_KV_F16, KVT_KV_Q8_0};
    float *q = malloc(sizeof(float) * DEPTH_G * DEPTH_HD);
    if (!q) exit(1);
    for (int i = 0; i < DEPTH_G * DEPTH_HD; i++) q[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    depth_thr thr[DEPTH_THREADS];
    for (int i = 0; i < DEPTH_THREADS; i++) {
        thr[i] = (depth_thr){.q = q, .ith = i};
        depth_buffers(&thr[i].pages, &thr[i].buf, &thr[i].out);
    }
    printf(
        "\ndecode at depth: %d keys x %d layers x %d KV heads (G %d, hd %d), pages of %d, one thread, best of %d, thread CPU time\n",
        DEPTH_KEYS, DEPTH_LAYERS, DEPTH_KV, DEPTH_G, DEPTH_HD, PAGE, DEPTH_REPS);
    printf("%-4s %10s %10s %10s %10s %8s %12s %10s %10s %10s\n", "kv", "MB/token", "attn ms", "attn GB/s", "read GB/s",
           "ratio", "before ms", "before GB/s", "2 thr ms", "2 thr cpu");
    for (size_t i = 0; i < sizeof dts / sizeof *dts; i++) {
        depth_kv d;
        if (depth_init(&d, dts[i])) exit(1);
        const double bytes = 2.0 * DEPTH_LAYERS * DEPTH_KV * (double)d.block * d.n_pages;
        double ta = 1e30, tr = 1e30, tf = 1e30, ts = 1e30, tc = 1e30;
        uint64_t sink = 0;
        for (int j = 0; j < DEPTH_THREADS; j++) thr[j].d = &d;
        for (int r = 0; r < DEPTH_REPS; r++) { /* alternated, so all of them see the same machine */
            double x = depth_token(&d, q, thr[0].pages, &thr[0].buf, thr[0].out), y = depth_read(&d, &sink);
            double c, z = depth_token_flat(&d, q, thr[0].pages, &thr[0].buf, thr[0].out), w = depth_token_split(thr, &c);
            ta = x < ta ? x : ta, tr = y < tr ? y : tr, tf = z < tf ? z : tf, ts = w < ts ? w : ts, tc = c < tc ? c : tc;
        }
        printf("%-4s %10.1f %10.2f %10.2f %10.2f %8.2f %12.2f %10.2f %10.2f %10.2f%s\n", kvt_kv_dtype_name(dts[i]),
               bytes / 1e6, ta * 1e3, bytes / ta / 1e9, bytes / tr / 1e9, tr / ta, tf * 1e3, bytes / tf / 1e9, ts * 1e3,
               tc * 1e3, sink == 42 ? " " : "");
        fflush(stdout);
        free(d.mem);
    }
    for (int i = 0; i < DEPTH_THREADS; i++) depth_buffers_free(thr[i].pages, &thr[i].buf, thr[i].out);
    free(q);
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
    if (!only || !strcmp(only, "depth")) depth_bench();
    return 0;
}
