/* Scalar reference kernels (placeholder until the SIMD kernels land). */
#include "ops.h"

#include <math.h>
#include <string.h>

#include "gguf.h"

uint16_t kvt_f32_to_f16(float f) {
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}
float kvt_f16_to_f32(uint16_t u) {
    _Float16 h;
    memcpy(&h, &u, 2);
    return (float)h;
}
uint16_t kvt_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
float kvt_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
void kvt_f32_to_f16_row(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = kvt_f32_to_f16(x[i]);
}
void kvt_f16_to_f32_row(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = kvt_f16_to_f32(x[i]);
}

void kvt_wmat_row_f32(const kvt_wmat *w, int64_t r, float *out) {
    const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
    for (int64_t k = 0; k < w->cols; k++) {
        switch (w->type) {
        case KVT_TYPE_F32: memcpy(&out[k], row + 4 * k, 4); break;
        case KVT_TYPE_F16: {
            uint16_t h;
            memcpy(&h, row + 2 * k, 2);
            out[k] = kvt_f16_to_f32(h);
            break;
        }
        case KVT_TYPE_BF16: {
            uint16_t h;
            memcpy(&h, row + 2 * k, 2);
            out[k] = kvt_bf16_to_f32(h);
            break;
        }
        case KVT_TYPE_Q8_0: {
            const uint8_t *b = row + (k / 32) * 34;
            uint16_t d;
            memcpy(&d, b, 2);
            out[k] = kvt_f16_to_f32(d) * (float)(int8_t)b[2 + k % 32];
            break;
        }
        default: out[k] = 0; break;
        }
    }
}

typedef struct {
    const kvt_wmat *w;
    const float *x;
    int64_t ldx, n;
    float *y;
    int64_t ldy;
} mm_job;

static void mm_worker(void *ctx, int ith, int nth) {
    mm_job *j = ctx;
    float row[16384];
    for (int64_t r = ith; r < j->w->rows; r += nth) {
        kvt_wmat_row_f32(j->w, r, row);
        for (int64_t t = 0; t < j->n; t++) j->y[t * j->ldy + r] = kvt_dot_f32(row, j->x + t * j->ldx, j->w->cols);
    }
}

void kvt_matmul(kvt_pool *pool, const kvt_wmat *w, const float *x, int64_t ldx, int64_t n, float *y, int64_t ldy) {
    mm_job j = {w, x, ldx, n, y, ldy};
    kvt_pool_run(pool, mm_worker, &j);
}

void kvt_rmsnorm(float *out, const float *x, const float *weight, int64_t n, float eps) {
    float ss = 0;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * weight[i];
}
void kvt_silu_mul(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}
void kvt_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}
float kvt_dot_f32_f16(const float *a, const uint16_t *b, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * kvt_f16_to_f32(b[i]);
    return s;
}
void kvt_axpy_f16(float *y, float a, const uint16_t *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * kvt_f16_to_f32(x[i]);
}
float kvt_dot_f32(const float *a, const float *b, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
void kvt_axpy_f32(float *y, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}
void kvt_softmax(float *x, int64_t n) {
    float m = -INFINITY, s = 0;
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    for (int64_t i = 0; i < n; i++) s += (x[i] = expf(x[i] - m));
    for (int64_t i = 0; i < n; i++) x[i] /= s;
}

const char *kvt_ops_numerics_id(void) { return "scalar-ref-0"; }
int kvt_ops_force_variant(const char *name) { return -1; }
