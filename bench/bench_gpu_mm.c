// SPDX-License-Identifier: MIT
/* The GPU weight-matrix matmul alone (kvt_gpu_rec_matmul), per weight type, on
 * the matrices of one layer of a shape (q, k, v, o, gate, up, down) for a
 * decode step and a prefill batch: the median GPU time of --reps runs (device
 * timestamps, else the wall clock around each submission), the weight bytes
 * read per second, and the sum over the layer's seven matrices. For the
 * quantized types the time includes the activation quantize pass that the
 * matmul records. Which dot-product path ran (OpSDot or plain integers) and
 * the workgroups' shape (weight rows x tokens) are printed. Numbers only; never passes or fails on time. usage: bench_gpu_mm --help */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gguf.h"
#include "gpu.h"
#include "ops.h"
#include "quant_k.h"
#include "quant_legacy.h"
#include "types.h"

#define MAX_REPS 64
#define MAX_LIST 8

static void usage(FILE *f) {
    fprintf(f,
            "usage: bench_gpu_mm [options]\n"
            "  --device vulkan[:N]   the Vulkan device (`kvtier info --devices`; default vulkan:0)\n"
            "  --shape S             the layer's matrices: tiny (dim 256, ff 768, kv 128), 1b (dim 2048,\n"
            "                        ff 8192, kv 512) or 8b (dim 4096, ff 14336, kv 1024) (default tiny)\n"
            "  --types LIST          weight types, comma-separated: f32, f16, q8_0, q4_0, q5_0, q4_k, q5_k,\n"
            "                        q6_k (default f16,q8_0,q4_k,q6_k)\n"
            "  --tokens LIST         batch sizes, comma-separated (default 1,64; 1b and 8b: 1,512)\n"
            "  --reps N              timed runs per case after one warm-up, the median reported (default 5,\n"
            "                        at most 64)\n"
            "  --help                this text\n"
            "Every figure prints as a sentence and as a key=value line. KVT_VK_MM_TOKS (8, 16, 32) and\n"
            "KVT_VK_MM_ROWS (1..8) in the environment pick the matmul workgroups' tokens and rows.\n");
}

static const struct {
    const char *name;
    uint32_t type;
} TYPES[] = {{"f32", KVT_TYPE_F32},   {"f16", KVT_TYPE_F16},   {"q8_0", KVT_TYPE_Q8_0}, {"q4_0", KVT_TYPE_Q4_0},
             {"q5_0", KVT_TYPE_Q5_0}, {"q4_k", KVT_TYPE_Q4_K}, {"q5_k", KVT_TYPE_Q5_K}, {"q6_k", KVT_TYPE_Q6_K}};

/* Splits a comma list into at most MAX_LIST items, each checked by ok(); the count, or -1. */
static int split(char *s, char **item, int (*ok)(const char *)) {
    int n = 0;
    for (char *t = strtok(s, ","); t; t = strtok(NULL, ",")) {
        if (n == MAX_LIST || !ok(t)) return -1;
        item[n++] = t;
    }
    return n ? n : -1;
}

static int type_of(const char *s) {
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (!strcmp(s, TYPES[i].name)) return (int)i;
    return -1;
}
static int ok_type(const char *s) { return type_of(s) >= 0; }
static int ok_tokens(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    return !*end && v >= 1 && v <= 65535;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* rows x cols of type: one random row quantized by the CPU, repeated. */
static void *make_weights(uint32_t type, uint32_t rows, uint32_t cols, size_t *row_bytes) {
    *row_bytes = kvt_wmat_row_bytes(type, cols);
    unsigned char *w = kvt_xmalloc((size_t)rows * *row_bytes);
    float *f = kvt_xmalloc((size_t)cols * 4);
    unsigned seed = 1;
    for (uint32_t c = 0; c < cols; c++) f[c] = (float)rand_r(&seed) / RAND_MAX - 0.5f;
    if (type == KVT_TYPE_F32) memcpy(w, f, (size_t)cols * 4);
    else if (type == KVT_TYPE_F16) kvt_f32_to_f16_row(f, (uint16_t *)(void *)w, cols);
    else if (kvt_qk_is_k(type)) kvt_qk_quantize_row(type, f, cols, w);
    else kvt_ql_quantize_row(type, f, w, cols);
    for (uint32_t r = 1; r < rows; r++) memcpy(w + (size_t)r * *row_bytes, w, *row_bytes);
    free(f);
    return w;
}

/* Median ms of reps matmuls of m over n tokens; < 0 on an error (said). */
static double time_mm(kvt_gpu_dev *d, kvt_gpu_kernels *k, kvt_gpu_wmat *m, uint32_t rows, uint32_t cols, uint32_t n,
                      int reps) {
    kvt_gpu_buf *bx = NULL, *by = NULL;
    double t[MAX_REPS + 1], med = -1;
    int rc = kvt_gpu_buf_new(d, KVT_GPU_DEVICE, (uint64_t)n * cols * 4, &bx);
    if (!rc) rc = kvt_gpu_buf_new(d, KVT_GPU_DEVICE, (uint64_t)n * rows * 4, &by);
    float *x = kvt_xcalloc((size_t)n * cols, 4);
    for (size_t i = 0; i < (size_t)n * cols; i++) x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    if (!rc) rc = kvt_gpu_upload(d, bx, 0, x, (uint64_t)n * cols * 4);
    int ts = kvt_gpu_dev_info(d)->timestamps;
    for (int r = 0; r <= reps && !rc; r++) { /* run 0 warms up */
        uint32_t a = 0, b = 0;
        double t0 = kvt_now();
        rc = kvt_gpu_begin(d);
        if (!rc && ts) rc = kvt_gpu_rec_timestamp(d, &a);
        if (!rc) rc = kvt_gpu_rec_matmul(k, m, by, rows, 0, bx, n);
        if (!rc && ts) rc = kvt_gpu_rec_timestamp(d, &b);
        if (rc) kvt_gpu_abort(d);
        else rc = kvt_gpu_submit(d);
        t[r] = (kvt_now() - t0) * 1e3;
        if (!rc && ts) rc = kvt_gpu_elapsed_ns(d, a, b, &t[r]), t[r] /= 1e6;
    }
    if (rc) fprintf(stderr, "bench_gpu_mm: %ux%u x %u: %s\n", rows, cols, n, kvt_errmsg());
    else qsort(t + 1, (size_t)reps, sizeof t[0], cmp_d), med = t[1 + reps / 2];
    free(x);
    kvt_gpu_buf_free(bx);
    kvt_gpu_buf_free(by);
    return med;
}

/* Long: every type, matrix and batch size, a figure each, and each layer's sum. */
static int run(kvt_gpu_dev *d, kvt_gpu_kernels *k, const char *shape, char **types, int nt, char **toks, int nn,
               int reps) {
    int big = !strcmp(shape, "8b"), mid = !strcmp(shape, "1b");
    uint32_t dim = big ? 4096
        : mid          ? 2048
                       : 256,
             ff = big ? 14336
        : mid         ? 8192
                      : 768,
             kv = big ? 1024
        : mid         ? 512
                      : 128;
    const struct {
        const char *name;
        uint32_t rows, cols;
    } mats[] = {{"q", dim, dim},   {"k", kv, dim},  {"v", kv, dim},   {"o", dim, dim},
                {"gate", ff, dim}, {"up", ff, dim}, {"down", dim, ff}};
    for (int ti = 0; ti < nt; ti++) {
        uint32_t type = TYPES[type_of(types[ti])].type;
        double layer[MAX_LIST] = {0};
        for (size_t mi = 0; mi < sizeof mats / sizeof mats[0]; mi++) {
            size_t rb;
            void *w = make_weights(type, mats[mi].rows, mats[mi].cols, &rb);
            kvt_gpu_wmat *m = NULL;
            int rc = kvt_gpu_wmat_new(d, type, mats[mi].rows, mats[mi].cols, w, rb, &m);
            free(w);
            if (rc) return fprintf(stderr, "bench_gpu_mm: %s %s: %s\n", types[ti], mats[mi].name, kvt_errmsg()), -1;
            for (int ni = 0; ni < nn; ni++) {
                uint32_t n = (uint32_t)atoi(toks[ni]);
                double ms = time_mm(d, k, m, mats[mi].rows, mats[mi].cols, n, reps);
                if (ms < 0) return kvt_gpu_wmat_free(m), -1;
                layer[ni] += ms;
                double gbs = (double)kvt_gpu_wmat_bytes(m) / (ms / 1e3) / 1e9;
                printf("%s %s %ux%u x %u tokens: %.3f ms (median of %d), weights %.1f GB/s\n", types[ti], mats[mi].name,
                       mats[mi].rows, mats[mi].cols, n, ms, reps, gbs);
                printf("mm_%s_%s_t%u_ms=%.6g\nmm_%s_%s_t%u_gb_s=%.6g\n", types[ti], mats[mi].name, n, ms, types[ti],
                       mats[mi].name, n, gbs);
            }
            kvt_gpu_wmat_free(m);
        }
        for (int ni = 0; ni < nn; ni++)
            printf("%s: one %s layer's seven matmuls x %s tokens: %.3f ms\nmm_%s_layer_t%s_ms=%.6g\n", types[ti], shape,
                   toks[ni], layer[ni], types[ti], toks[ni], layer[ni]);
        fflush(stdout);
    }
    return 0;
}

/* Long: one branch per flag, each naming the flag when its value is bad. */
int main(int argc, char **argv) {
    const char *dev = "vulkan:0", *shape = "tiny";
    char types_s[256] = "f16,q8_0,q4_k,q6_k", toks_s[256] = "", *types[MAX_LIST], *toks[MAX_LIST];
    int reps = 5, index = 0;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) return usage(stdout), 0;
        if (!v) return fprintf(stderr, "bench_gpu_mm: %s: unknown flag or missing value (see --help)\n", f), 2;
        i++;
        if (!strcmp(f, "--device")) dev = v;
        else if (!strcmp(f, "--shape")) shape = v;
        else if (!strcmp(f, "--types") && strlen(v) < sizeof types_s) strcpy(types_s, v);
        else if (!strcmp(f, "--tokens") && strlen(v) < sizeof toks_s) strcpy(toks_s, v);
        else if (!strcmp(f, "--reps")) reps = atoi(v);
        else return fprintf(stderr, "bench_gpu_mm: %s %s: unknown flag or value too long (see --help)\n", f, v), 2;
    }
    if (!strcmp(dev, "vulkan")) dev = "vulkan:0";
    char *end = NULL;
    if (strncmp(dev, "vulkan:", 7) || (index = (int)strtol(dev + 7, &end, 10)) < 0 || !dev[7] || *end)
        return fprintf(stderr, "bench_gpu_mm: --device %s: must be vulkan or vulkan:N\n", dev), 2;
    if (strcmp(shape, "tiny") && strcmp(shape, "1b") && strcmp(shape, "8b"))
        return fprintf(stderr, "bench_gpu_mm: --shape %s: must be tiny, 1b or 8b\n", shape), 2;
    if (reps < 1 || reps > MAX_REPS)
        return fprintf(stderr, "bench_gpu_mm: --reps %d: must be 1..%d\n", reps, MAX_REPS), 2;
    if (!*toks_s) strcpy(toks_s, strcmp(shape, "tiny") ? "1,512" : "1,64");
    int nt = split(types_s, types, ok_type), nn = nt < 0 ? 0 : split(toks_s, toks, ok_tokens);
    if (nt < 0)
        return fprintf(
                   stderr,
                   "bench_gpu_mm: --types: each must be f32, f16, q8_0, q4_0, q5_0, q4_k, q5_k or q6_k (at most %d)\n",
                   MAX_LIST),
               2;
    if (nn < 0) return fprintf(stderr, "bench_gpu_mm: --tokens: each must be 1..65535 (at most %d)\n", MAX_LIST), 2;
    kvt_gpu_dev *d = NULL;
    kvt_gpu_kernels *k = NULL;
    if (kvt_gpu_open(index, &d) || kvt_gpu_kernels_new(d, &k)) {
        fprintf(stderr, "bench_gpu_mm: %s\n", kvt_errmsg());
        kvt_gpu_close(d);
        return 1;
    }
    const kvt_gpu_info *in = kvt_gpu_dev_info(d);
    printf("device %s (%s), driver %s; quantized dots: %s; matmul workgroups: %u rows x 8 tokens for batches "
           "up to 8, %u rows x %u tokens beyond\ngpu=%s\nint_dot=%d\nmm_toks=%u\nmm_rows=%u\nmm_rows_wide=%u\n",
           in->name, in->type, in->driver, in->int_dot ? "integer dot products (OpSDot)" : "plain integer multiplies",
           in->mm_rows, in->mm_rows_wide, in->mm_toks, in->name, in->int_dot, in->mm_toks, in->mm_rows,
           in->mm_rows_wide);
    printf("F16 matmuls: %s\ncoopmat=%d\n",
           in->coopmat_on ? "tensor cores (KVT_VK_COOPMAT=1, VK_NV_cooperative_matrix)" : "subgroup-free kernel",
           in->coopmat_on);
    int rc = run(d, k, shape, types, nt, toks, nn, reps);
    kvt_gpu_kernels_free(k);
    kvt_gpu_close(d);
    return rc ? 1 : 0;
}
