// SPDX-License-Identifier: MIT
/* KV row sizes per dtype and the q8_0 codec in its row and column layouts
 * (see kv_quant.h for the exact arithmetic, which the cache's bit-identity
 * rests on): a scalar path and an AVX-512 path that compute the same products;
 * the selected kernel variant's table (ops_impl.h) says which runs. */
#include "kv_quant.h"

#include <math.h>
#include <string.h>

#include "common.h"
#include "ops.h"
#include "ops_impl.h"

/* Largest |q|: values map to [-127, 127], as llama.cpp's q8_0. */
#define Q8_MAX 127
#define F16_BYTES 2
#define F32_BYTES 4

static const char *const dtype_names[] = {[KVT_KV_F16] = "f16", [KVT_KV_F32] = "f32", [KVT_KV_Q8_0] = "q8_0"};

size_t kvt_kv_row_bytes(kvt_kv_dtype dt, int32_t n) {
    if (n < 0) return 0;
    switch (dt) {
    case KVT_KV_F16: return (size_t)n * F16_BYTES;
    case KVT_KV_F32: return (size_t)n * F32_BYTES;
    case KVT_KV_Q8_0: return n % KVT_KV_Q8_BLOCK ? 0 : (size_t)(n / KVT_KV_Q8_BLOCK) * KVT_KV_Q8_BLOCK_BYTES;
    }
    return 0;
}

const char *kvt_kv_dtype_name(kvt_kv_dtype dt) {
    return (unsigned)dt < KVT_ARRAY_LEN(dtype_names) ? dtype_names[dt] : "?";
}

int kvt_kv_dtype_parse(const char *name, kvt_kv_dtype *out) {
    for (size_t i = 0; i < KVT_ARRAY_LEN(dtype_names); i++)
        if (!strcmp(name, dtype_names[i])) {
            *out = (kvt_kv_dtype)i;
            return 0;
        }
    return kvt_fail(KVT_EARG, "KV type '%s' is not f16, f32 or q8_0", name);
}

/* roundf(v) as an int8 in [-Q8_MAX, Q8_MAX]; a NaN gives 0. The comparisons
 * come before the conversion, so no input converts out of range. */
static int8_t q8_of(float v) {
    float r = roundf(v);
    if (!(r == r)) return 0;
    if (r > (float)Q8_MAX) return Q8_MAX;
    if (r < (float)-Q8_MAX) return -Q8_MAX;
    return (int8_t)r;
}

void kvt_kv_q8_quantize_row(const float *x, int32_t n, uint8_t *out) {
    for (int32_t b = 0; b < n / KVT_KV_Q8_BLOCK; b++) {
        const float *xb = x + (size_t)b * KVT_KV_Q8_BLOCK;
        uint8_t *blk = out + (size_t)b * KVT_KV_Q8_BLOCK_BYTES;
        float amax = 0.0f;
        for (int i = 0; i < KVT_KV_Q8_BLOCK; i++) amax = fmaxf(amax, fabsf(xb[i]));
        float d = amax / (float)Q8_MAX, id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t h = kvt_f32_to_f16(d);
        blk[0] = (uint8_t)(h & 0xff);
        blk[1] = (uint8_t)(h >> 8);
        for (int i = 0; i < KVT_KV_Q8_BLOCK; i++) blk[KVT_KV_Q8_SCALE_BYTES + i] = (uint8_t)q8_of(xb[i] * id);
    }
}

float kvt_kv_q8_scale(const uint8_t *p) { return kvt_f16_to_f32((uint16_t)(p[0] | (uint16_t)p[1] << 8)); }

/* ---- scalar ---------------------------------------------------------------------- */

/* Columns dequantized per pass of the scalar path: their scales are converted once. */
#define SCALAR_TILE 64

void kvt_kv_q8_dequant_rows_scalar(const uint8_t *rows, int32_t T, int32_t n, float *out) {
    const int32_t nb = n / KVT_KV_Q8_BLOCK;
    for (int32_t t = 0; t < T; t++)
        for (int32_t b = 0; b < nb; b++) {
            const uint8_t *blk = rows + ((size_t)t * (size_t)nb + (size_t)b) * KVT_KV_Q8_BLOCK_BYTES;
            const int8_t *q = (const int8_t *)(const void *)(blk + KVT_KV_Q8_SCALE_BYTES);
            float d = kvt_kv_q8_scale(blk), *o = out + (size_t)t * (size_t)n + (size_t)b * KVT_KV_Q8_BLOCK;
            for (int i = 0; i < KVT_KV_Q8_BLOCK; i++) o[i] = d * (float)q[i];
        }
}

void kvt_kv_q8_dequant_columns_scalar(const uint8_t *cols, int32_t B, int32_t T, int32_t n, float *out) {
    const int32_t nb = n / KVT_KV_Q8_BLOCK;
    const uint8_t *scales = cols; /* (nb, B) f16 */
    /* (n, B) int8, after the scales */
    const int8_t *q = (const int8_t *)(const void *)(cols + (size_t)nb * (size_t)B * KVT_KV_Q8_SCALE_BYTES);
    float d[SCALAR_TILE];
    for (int32_t t0 = 0; t0 < T; t0 += SCALAR_TILE) {
        const int32_t tn = KVT_MIN(SCALAR_TILE, T - t0);
        for (int32_t b = 0; b < nb; b++) {
            for (int32_t t = 0; t < tn; t++)
                d[t] = kvt_kv_q8_scale(scales + ((size_t)b * (size_t)B + (size_t)(t0 + t)) * KVT_KV_Q8_SCALE_BYTES);
            for (int32_t i = b * KVT_KV_Q8_BLOCK; i < (b + 1) * KVT_KV_Q8_BLOCK; i++) {
                const int8_t *qi = q + (size_t)i * (size_t)B + (size_t)t0;
                float *o = out + (size_t)i * (size_t)B + (size_t)t0;
                for (int32_t t = 0; t < tn; t++) o[t] = d[t] * (float)qi[t];
            }
        }
    }
}

/* ---- AVX-512: the same products, 16 at a time ---------------------------------- */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))
#define LANES 16

AVX512 void kvt_kv_q8_dequant_rows_avx512(const uint8_t *rows, int32_t T, int32_t n, float *out) {
    const int32_t nb = n / KVT_KV_Q8_BLOCK;
    for (int32_t t = 0; t < T; t++)
        for (int32_t b = 0; b < nb; b++) {
            const uint8_t *blk = rows + ((size_t)t * (size_t)nb + (size_t)b) * KVT_KV_Q8_BLOCK_BYTES;
            const uint8_t *q = blk + KVT_KV_Q8_SCALE_BYTES;
            float *o = out + (size_t)t * (size_t)n + (size_t)b * KVT_KV_Q8_BLOCK;
            __m512 d = _mm512_set1_ps(kvt_kv_q8_scale(blk));
            for (int h = 0; h < KVT_KV_Q8_BLOCK; h += LANES) {
                __m128i qb = _mm_loadu_si128((const __m128i *)(const void *)(q + h));
                _mm512_storeu_ps(o + h, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(qb))));
            }
        }
}

AVX512 void kvt_kv_q8_dequant_columns_avx512(const uint8_t *cols, int32_t B, int32_t T, int32_t n, float *out) {
    const int32_t nb = n / KVT_KV_Q8_BLOCK;
    const uint16_t *scales = (const uint16_t *)(const void *)cols; /* (nb, B) f16, little-endian like x86 */
    const int8_t *q = (const int8_t *)(const void *)(cols + (size_t)nb * (size_t)B * KVT_KV_Q8_SCALE_BYTES);
    for (int32_t t0 = 0; t0 < T; t0 += LANES) {
        const int32_t left = T - t0;
        const __mmask16 m = left >= LANES ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        for (int32_t b = 0; b < nb; b++) {
            __m512 d = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, scales + (size_t)b * (size_t)B + (size_t)t0));
            for (int32_t i = b * KVT_KV_Q8_BLOCK; i < (b + 1) * KVT_KV_Q8_BLOCK; i++) {
                __m128i qb = _mm_maskz_loadu_epi8(m, q + (size_t)i * (size_t)B + (size_t)t0);
                _mm512_mask_storeu_ps(out + (size_t)i * (size_t)B + (size_t)t0, m,
                                      _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(qb))));
            }
        }
    }
}

#endif

/* ---- public ---------------------------------------------------------------------- */

void kvt_kv_q8_dequant_rows(const uint8_t *rows, int32_t T, int32_t n, float *out) {
    kvt_ops_active()->kv_q8_dequant_rows(rows, T, n, out);
}

void kvt_kv_q8_dequant_columns(const uint8_t *cols, int32_t B, int32_t T, int32_t n, float *out) {
    kvt_ops_active()->kv_q8_dequant_columns(cols, B, T, n, out);
}

void kvt_kv_q8_put_column(const uint8_t *row, int32_t n, int32_t B, int32_t t, uint8_t *cols) {
    const int32_t nb = n / KVT_KV_Q8_BLOCK;
    uint8_t *scales = cols, *q = cols + (size_t)nb * (size_t)B * KVT_KV_Q8_SCALE_BYTES;
    for (int32_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + (size_t)b * KVT_KV_Q8_BLOCK_BYTES;
        memcpy(scales + ((size_t)b * (size_t)B + (size_t)t) * KVT_KV_Q8_SCALE_BYTES, blk, KVT_KV_Q8_SCALE_BYTES);
        for (int i = 0; i < KVT_KV_Q8_BLOCK; i++)
            q[((size_t)b * KVT_KV_Q8_BLOCK + (size_t)i) * (size_t)B + (size_t)t] = blk[KVT_KV_Q8_SCALE_BYTES + i];
    }
}
