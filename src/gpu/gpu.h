// SPDX-License-Identifier: MIT
/* The GPU device layer: devices, buffers, copies, compute pipelines and
 * command submission, behind names that say nothing of the API underneath
 * (Vulkan today; a CUDA backend could sit behind the same calls).
 *
 * The Vulkan backend loads the loader (libvulkan.so.1) at run time, so a
 * kvtier built with Vulkan still runs where there is none; a build without
 * Vulkan (no libvulkan-dev or glslc) has a stub with this same API whose
 * device list is empty and whose open fails saying so.
 *
 * Every call that can fail returns 0 or a negative kvt error with the detail
 * in kvt_errmsg(). A device and everything made on it is used by one thread at
 * a time. Environment (read when a device is opened):
 *   KVT_VK_VALIDATION=1     enable VK_LAYER_KHRONOS_validation (when installed)
 *                           and count its messages (kvt_gpu_validation_count)
 *   KVT_VK_FORCE_STAGING=1  never map device-local memory: every upload and
 *                           download goes through a staging buffer and a copy
 *                           on the queue, as on a discrete GPU
 *   KVT_VK_MAX_BINDING=N    lower the largest storage binding (bytes) below
 *                           the device's own limit, to test the refusal */
#ifndef KVT_GPU_H
#define KVT_GPU_H

#include <stddef.h>
#include <stdint.h>

#define KVT_GPU_MAX_HEAPS 16
#define KVT_GPU_MAX_BINDINGS 8 /* storage buffers of one pipeline */
#define KVT_GPU_MAX_PUSH 128   /* push-constant bytes of one pipeline (the guaranteed minimum) */

/* What `kvtier info --devices` prints about one device. */
typedef struct {
    int index;             /* position in the list, what kvt_gpu_open takes */
    char name[256];
    const char *type;      /* "discrete", "integrated", "virtual", "cpu" or "other" */
    uint32_t vendor_id, device_id;
    char driver[520];      /* driver name and version as text */
    uint32_t api_version;  /* packed as the API packs it */
    char api[32];          /* the same as text, "1.3.230" */
    int n_heaps;
    uint64_t heap_bytes[KVT_GPU_MAX_HEAPS];
    int heap_device_local[KVT_GPU_MAX_HEAPS];
    uint32_t subgroup_size;
    int fp16;              /* 16-bit float arithmetic in shaders */
    int int8;              /* 8-bit integer arithmetic in shaders */
    uint64_t max_binding;  /* the largest storage buffer one binding may cover */
    int timestamps;        /* the compute queue can write timestamps */
} kvt_gpu_info;

/* 1 when this build has a GPU backend, 0 for the stub. */
int kvt_gpu_built(void);

/* Lists the devices into *out (caller frees with free()) and their count into
 * *n. No device is 0 with *n = 0; no loader or no driver is an error saying
 * which. */
int kvt_gpu_list(kvt_gpu_info **out, int *n);

typedef struct kvt_gpu_dev kvt_gpu_dev;
typedef struct kvt_gpu_buf kvt_gpu_buf;
typedef struct kvt_gpu_pipe kvt_gpu_pipe;

/* Opens device index (from kvt_gpu_list) with one compute queue. */
int kvt_gpu_open(int index, kvt_gpu_dev **out);
void kvt_gpu_close(kvt_gpu_dev *d);
const kvt_gpu_info *kvt_gpu_dev_info(const kvt_gpu_dev *d);
/* The largest buffer a device buffer may be (its storage binding limit,
 * lowered by KVT_VK_MAX_BINDING). */
uint64_t kvt_gpu_max_binding(const kvt_gpu_dev *d);
/* 1 when uploads and downloads go through staging copies (KVT_VK_FORCE_STAGING
 * or device memory that the host cannot map), 0 when they map it. */
int kvt_gpu_staged(const kvt_gpu_dev *d);

/* Validation messages seen by every device of this process since it started
 * (0 unless KVT_VK_VALIDATION=1); each is also logged as a warning. */
uint64_t kvt_gpu_validation_count(void);
/* 1 when KVT_VK_VALIDATION=1 asks for the validation layer. */
int kvt_gpu_validation_on(void);
/* 1 when the validation layer is loaded on d (asked for and installed). */
int kvt_gpu_validating(const kvt_gpu_dev *d);

/* ---- buffers -------------------------------------------------------------------- */
typedef enum {
    KVT_GPU_DEVICE = 0, /* device-local storage buffer that shaders bind */
    KVT_GPU_STAGING,    /* host-visible transfer buffer, mapped */
} kvt_gpu_buf_kind;

/* A buffer of bytes (> 0). A device buffer over kvt_gpu_max_binding is
 * refused (KVT_ELIMIT) naming both sizes; out of device memory is -ENOMEM. */
int kvt_gpu_buf_new(kvt_gpu_dev *d, kvt_gpu_buf_kind kind, uint64_t bytes, kvt_gpu_buf **out);
void kvt_gpu_buf_free(kvt_gpu_buf *b);
uint64_t kvt_gpu_buf_size(const kvt_gpu_buf *b);
/* The host address of a staging buffer; NULL for a device buffer. */
void *kvt_gpu_buf_host(kvt_gpu_buf *b);

/* Copies n bytes from the host into b at off, or from b at off to the host;
 * waits until done. Device buffers go through a staging copy when the device
 * is staged (kvt_gpu_staged), else through a mapping. */
int kvt_gpu_upload(kvt_gpu_dev *d, kvt_gpu_buf *b, uint64_t off, const void *src, uint64_t n);
int kvt_gpu_download(kvt_gpu_dev *d, kvt_gpu_buf *b, uint64_t off, void *dst, uint64_t n);

/* One region of a buffer-to-buffer copy. */
typedef struct {
    uint64_t src_off, dst_off, bytes;
} kvt_gpu_region;

/* ---- pipelines -------------------------------------------------------------------- */
/* A compute pipeline of the embedded shader `name` (src/gpu/shaders/NAME.comp)
 * binding n_bufs storage buffers (0..n-1 in set 0) and push_bytes of push
 * constants. An unknown name is KVT_ENOTFOUND. */
int kvt_gpu_pipe_new(kvt_gpu_dev *d, const char *name, int n_bufs, uint32_t push_bytes, kvt_gpu_pipe **out);
void kvt_gpu_pipe_free(kvt_gpu_pipe *p);

/* ---- recording and submission ----------------------------------------------------- *
 * A device records into one command list at a time: begin, any number of
 * copies, dispatches, barriers and timestamps, then submit, which waits on a
 * fence. Between begin and submit nothing runs. */
int kvt_gpu_begin(kvt_gpu_dev *d);
/* Many regions from src to dst in one copy command. */
int kvt_gpu_rec_copy(kvt_gpu_dev *d, kvt_gpu_buf *src, kvt_gpu_buf *dst, const kvt_gpu_region *r, size_t n);
/* A dispatch of groups[0..2] workgroups of p, with bufs[0..n_bufs) bound and
 * push (push_bytes of the pipeline) as its push constants. */
int kvt_gpu_rec_dispatch(kvt_gpu_dev *d, kvt_gpu_pipe *p, kvt_gpu_buf *const *bufs, const void *push,
                         const uint32_t groups[3]);
/* Everything recorded before (shader writes, copies) is visible to what is
 * recorded after. */
int kvt_gpu_rec_barrier(kvt_gpu_dev *d);
/* Writes a timestamp once the work before it is done; *slot names it for
 * kvt_gpu_elapsed_ns. KVT_EUNSUPPORTED where the queue has no timestamps. */
int kvt_gpu_rec_timestamp(kvt_gpu_dev *d, uint32_t *slot);
/* Submits what was recorded and waits for it. */
int kvt_gpu_submit(kvt_gpu_dev *d);
/* Nanoseconds between two timestamps of the last submission. */
int kvt_gpu_elapsed_ns(kvt_gpu_dev *d, uint32_t from, uint32_t to, double *ns);

/* One copy of many regions as its own submission (begin, copy, submit). */
int kvt_gpu_copy(kvt_gpu_dev *d, kvt_gpu_buf *src, kvt_gpu_buf *dst, const kvt_gpu_region *r, size_t n);

/* ---- kernels (vk_kernels.c) ------------------------------------------------------- *
 * Each op is one shader for every batch size: a token's result does not depend
 * on how many tokens run with it, bit for bit (src/gpu/shaders/common.glsl). */
typedef struct kvt_gpu_kernels kvt_gpu_kernels;
int kvt_gpu_kernels_new(kvt_gpu_dev *d, kvt_gpu_kernels **out);
void kvt_gpu_kernels_free(kvt_gpu_kernels *k);
/* Records y[t][r] = sum_c w[r][c] * x[t][c] for t < n_tok, r < rows, c < cols:
 * w rows of f16 (uint16 IEEE half, as the CPU engine stores them), x and y f32,
 * f32 accumulation. */
int kvt_gpu_rec_matmul_f16(kvt_gpu_kernels *k, kvt_gpu_buf *y, kvt_gpu_buf *w, kvt_gpu_buf *x, uint32_t rows,
                           uint32_t cols, uint32_t n_tok);
/* Records y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight for t < n_tok rows of n f32. */
int kvt_gpu_rec_rmsnorm(kvt_gpu_kernels *k, kvt_gpu_buf *y, kvt_gpu_buf *x, kvt_gpu_buf *weight, uint32_t n,
                        uint32_t n_tok, float eps);

#endif
