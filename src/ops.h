/* Compute kernels: conversions, batch-invariant matmul, per-token elementwise ops.
 * (Reference scalar version; the SIMD kernels replace ops.c behind this API.) */
#ifndef KVT_OPS_H
#define KVT_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "threadpool.h"

uint16_t kvt_f32_to_f16(float f);
float kvt_f16_to_f32(uint16_t h);
uint16_t kvt_f32_to_bf16(float f);
float kvt_bf16_to_f32(uint16_t h);
void kvt_f32_to_f16_row(const float *x, uint16_t *y, int64_t n);
void kvt_f16_to_f32_row(const uint16_t *x, float *y, int64_t n);

/* A weight matrix in GGUF layout: `rows` rows of `cols` elements, row-major. */
typedef struct {
    uint32_t type;        /* KVT_TYPE_F32, F16, BF16 or Q8_0 */
    int64_t rows, cols;   /* rows = output features (GGUF ne[1]), cols = input features (ne[0]) */
    const void *data;
    size_t row_bytes;
} kvt_wmat;

/* Y[t][r] = sum_k W[r][k] * X[t][k], t < n, r < rows. X: n x cols (stride ldx),
 * Y: n x rows (stride ldy). Batch invariant: Y[t][r]'s bits depend only on X[t],
 * row r and the kernel variant. */
void kvt_matmul(kvt_pool *pool, const kvt_wmat *w, const float *x, int64_t ldx, int64_t n, float *y, int64_t ldy);
/* Row r of w converted to cols floats. */
void kvt_wmat_row_f32(const kvt_wmat *w, int64_t r, float *out);

void kvt_rmsnorm(float *out, const float *x, const float *weight, int64_t n, float eps);
void kvt_silu_mul(float *gate, const float *up, int64_t n);
void kvt_add(float *y, const float *x, int64_t n);
float kvt_dot_f32_f16(const float *a, const uint16_t *b, int64_t n);
void kvt_axpy_f16(float *y, float a, const uint16_t *x, int64_t n);
float kvt_dot_f32(const float *a, const float *b, int64_t n);
void kvt_axpy_f32(float *y, float a, const float *x, int64_t n);
void kvt_softmax(float *x, int64_t n);

const char *kvt_ops_numerics_id(void);
int kvt_ops_force_variant(const char *name);

#endif
