/* KV row sizes per dtype and the q8_0 row codec (see kv_quant.h for the exact
 * arithmetic, which the cache's bit-identity rests on). */
#include "kv_quant.h"

#include <math.h>
#include <string.h>

#include "common.h"
#include "ops.h"

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

static float block_scale(const uint8_t *blk) { return kvt_f16_to_f32((uint16_t)(blk[0] | (uint16_t)blk[1] << 8)); }

void kvt_kv_q8_dequant_rows(const uint8_t *rows, int32_t T, int32_t n, float *out) {
    const int32_t nb = n / KVT_KV_Q8_BLOCK;
    for (int32_t t = 0; t < T; t++)
        for (int32_t b = 0; b < nb; b++) {
            const uint8_t *blk = rows + ((size_t)t * (size_t)nb + (size_t)b) * KVT_KV_Q8_BLOCK_BYTES;
            const int8_t *q = (const int8_t *)(const void *)(blk + KVT_KV_Q8_SCALE_BYTES);
            float d = block_scale(blk), *o = out + (size_t)t * (size_t)n + (size_t)b * KVT_KV_Q8_BLOCK;
            for (int i = 0; i < KVT_KV_Q8_BLOCK; i++) o[i] = d * (float)q[i];
        }
}

void kvt_kv_q8_dequant_rows_t(const uint8_t *rows, int32_t T, int32_t n, float *out, int32_t ld) {
    const int32_t nb = n / KVT_KV_Q8_BLOCK;
    for (int32_t t = 0; t < T; t++)
        for (int32_t b = 0; b < nb; b++) {
            const uint8_t *blk = rows + ((size_t)t * (size_t)nb + (size_t)b) * KVT_KV_Q8_BLOCK_BYTES;
            const int8_t *q = (const int8_t *)(const void *)(blk + KVT_KV_Q8_SCALE_BYTES);
            float d = block_scale(blk), *o = out + (size_t)b * KVT_KV_Q8_BLOCK * (size_t)ld + (size_t)t;
            for (int i = 0; i < KVT_KV_Q8_BLOCK; i++) o[(size_t)i * (size_t)ld] = d * (float)q[i];
        }
}
