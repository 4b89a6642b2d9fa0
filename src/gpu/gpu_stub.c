// SPDX-License-Identifier: MIT
/* The device layer of a build without Vulkan (no libvulkan-dev or glslc at
 * build time): the same API, no devices, and every open says how to get one. */
#include <errno.h>
#include <stdlib.h>

#include "common.h"
#include "gpu.h"

#define NO_VULKAN "this build has no Vulkan: install libvulkan-dev and glslc (scripts/setup.sh) and rebuild"

int kvt_gpu_built(void) { return 0; }
uint64_t kvt_gpu_validation_count(void) { return 0; }
int kvt_gpu_validation_on(void) { return 0; }

int kvt_gpu_list(kvt_gpu_info **out, int *n) {
    *out = NULL;
    *n = 0;
    return 0;
}

int kvt_gpu_open(int index, kvt_gpu_dev **out) {
    *out = NULL;
    return kvt_fail(KVT_EUNSUPPORTED, "Vulkan device %d: %s", index, NO_VULKAN);
}

/* Nothing below can be reached without a device; each still answers cleanly. */
void kvt_gpu_close(kvt_gpu_dev *d) {}
const kvt_gpu_info *kvt_gpu_dev_info(const kvt_gpu_dev *d) { return NULL; }
uint64_t kvt_gpu_max_binding(const kvt_gpu_dev *d) { return 0; }
uint64_t kvt_gpu_max_pinned(const kvt_gpu_dev *d) { return 0; }
int kvt_gpu_staged(const kvt_gpu_dev *d) { return 0; }
int kvt_gpu_validating(const kvt_gpu_dev *d) { return 0; }
int kvt_gpu_buf_new(kvt_gpu_dev *d, kvt_gpu_buf_kind kind, uint64_t bytes, kvt_gpu_buf **out) {
    *out = NULL;
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
void kvt_gpu_buf_free(kvt_gpu_buf *b) {}
uint64_t kvt_gpu_buf_size(const kvt_gpu_buf *b) { return 0; }
void *kvt_gpu_buf_host(kvt_gpu_buf *b) { return NULL; }
int kvt_gpu_upload(kvt_gpu_dev *d, kvt_gpu_buf *b, uint64_t off, const void *src, uint64_t n) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
int kvt_gpu_download(kvt_gpu_dev *d, kvt_gpu_buf *b, uint64_t off, void *dst, uint64_t n) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
int kvt_gpu_pipe_new(kvt_gpu_dev *d, const char *name, int n_bufs, uint32_t push_bytes, kvt_gpu_pipe **out) {
    *out = NULL;
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
void kvt_gpu_pipe_free(kvt_gpu_pipe *p) {}
int kvt_gpu_begin(kvt_gpu_dev *d) { return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN); }
int kvt_gpu_rec_copy(kvt_gpu_dev *d, kvt_gpu_buf *src, kvt_gpu_buf *dst, const kvt_gpu_region *r, size_t n) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
int kvt_gpu_rec_dispatch(kvt_gpu_dev *d, kvt_gpu_pipe *p, kvt_gpu_buf *const *bufs, const void *push,
                         const uint32_t groups[3]) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
int kvt_gpu_rec_barrier(kvt_gpu_dev *d) { return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN); }
int kvt_gpu_rec_timestamp(kvt_gpu_dev *d, uint32_t *slot) { return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN); }
int kvt_gpu_submit(kvt_gpu_dev *d) { return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN); }
int kvt_gpu_flush(kvt_gpu_dev *d) { return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN); }
void kvt_gpu_abort(kvt_gpu_dev *d) { (void)d; }
int kvt_gpu_lost(const kvt_gpu_dev *d) { return (void)d, 0; }
int kvt_gpu_elapsed_ns(kvt_gpu_dev *d, uint32_t from, uint32_t to, double *ns) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
int kvt_gpu_copy(kvt_gpu_dev *d, kvt_gpu_buf *src, kvt_gpu_buf *dst, const kvt_gpu_region *r, size_t n) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
int kvt_gpu_kernels_new(kvt_gpu_dev *d, kvt_gpu_kernels **out) {
    *out = NULL;
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
void kvt_gpu_kernels_free(kvt_gpu_kernels *k) {}
int kvt_gpu_kernels_reserve_scratch(kvt_gpu_kernels *k, uint32_t n_tok, uint32_t cols) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
uint64_t kvt_gpu_kernels_scratch_bytes(const kvt_gpu_kernels *k) { return 0; }
kvt_gpu_buf *kvt_gpu_kernels_scratch(const kvt_gpu_kernels *k) { return NULL; }
int kvt_gpu_kernels_scratch_regrowths(const kvt_gpu_kernels *k) { return 0; }
int kvt_gpu_rec_matmul_f16(kvt_gpu_kernels *k, kvt_gpu_buf *y, kvt_gpu_buf *w, kvt_gpu_buf *x, uint32_t rows,
                           uint32_t cols, uint32_t n_tok) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
int kvt_gpu_rec_rmsnorm(kvt_gpu_kernels *k, kvt_gpu_buf *y, kvt_gpu_buf *x, kvt_gpu_buf *weight, uint32_t n,
                        uint32_t n_tok, float eps) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
int kvt_gpu_wmat_supported(uint32_t type) { return 0; }
int kvt_gpu_wmat_new(kvt_gpu_dev *d, uint32_t type, uint32_t rows, uint32_t cols, const void *data, size_t row_bytes,
                     kvt_gpu_wmat **out) {
    *out = NULL;
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
void kvt_gpu_wmat_free(kvt_gpu_wmat *w) {}
uint64_t kvt_gpu_wmat_bytes(const kvt_gpu_wmat *w) { return 0; }
int kvt_gpu_rec_matmul(kvt_gpu_kernels *k, const kvt_gpu_wmat *w, kvt_gpu_buf *y, uint32_t ldy, uint32_t y_off,
                       kvt_gpu_buf *x, uint32_t n_tok) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
int kvt_gpu_rec_rope(kvt_gpu_kernels *k, kvt_gpu_buf *x, kvt_gpu_buf *cs, kvt_gpu_buf *sn, uint32_t n_heads,
                     uint32_t head_dim, uint32_t rope_dim, int neox, uint32_t n_tok) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
int kvt_gpu_rec_add(kvt_gpu_kernels *k, kvt_gpu_buf *x, kvt_gpu_buf *y, uint32_t n) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
int kvt_gpu_rec_silu_mul(kvt_gpu_kernels *k, kvt_gpu_buf *g, kvt_gpu_buf *u, uint32_t n) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
int kvt_gpu_rec_kv_store(kvt_gpu_kernels *k, const kvt_gpu_kv *kv, uint32_t layer, kvt_gpu_buf *kx, kvt_gpu_buf *vx,
                         kvt_gpu_buf *meta, uint32_t n_tok) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
int kvt_gpu_rec_attention(kvt_gpu_kernels *k, const kvt_gpu_kv *kv, uint32_t layer, kvt_gpu_buf *out, kvt_gpu_buf *q,
                          kvt_gpu_buf *meta, uint32_t n_head, float scale, uint32_t n_tok) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
int kvt_gpu_rec_attention_arch(kvt_gpu_kernels *k, const kvt_gpu_kv *kv, uint32_t layer, kvt_gpu_buf *out,
                               kvt_gpu_buf *q, kvt_gpu_buf *meta, uint32_t n_head, float scale, uint32_t window,
                               float softcap, uint32_t n_tok) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
int kvt_gpu_rec_add_bias(kvt_gpu_kernels *k, kvt_gpu_buf *x, kvt_gpu_buf *b, uint32_t width, uint32_t n_rows) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
int kvt_gpu_rec_scale(kvt_gpu_kernels *k, kvt_gpu_buf *x, uint32_t n, float s) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
int kvt_gpu_rec_softcap(kvt_gpu_kernels *k, kvt_gpu_buf *x, uint32_t n, float cap) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
int kvt_gpu_rec_gelu_mul(kvt_gpu_kernels *k, kvt_gpu_buf *g, kvt_gpu_buf *u, uint32_t n) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s", NO_VULKAN);
}
