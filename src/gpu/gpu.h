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
 *                           the device's own limit, to test the refusal
 *   KVT_VK_HOST_LIMIT=N     pinned host buffers past N bytes in all fail as
 *                           the driver's refusal does, to test the fallback
 *   KVT_VK_NO_INT_DOT=1     do not use integer dot products (OpSDot) even where
 *                           the device has them: the quantized matmuls take
 *                           their plain integer shaders (the same bits)
 *   KVT_VK_COOPMAT=1        F16 weight matmuls on the device's cooperative
 *                           matrices (VK_NV_cooperative_matrix) where it has
 *                           them (kvt_gpu_info.coopmat_on); other numerics, so
 *                           another numerics id. Off by default: not yet run
 *                           on a GPU. Any value but 0 or 1 fails the open. */
#ifndef KVT_GPU_H
#define KVT_GPU_H

#include <stddef.h>
#include <stdint.h>

#define KVT_GPU_MAX_HEAPS 16
#define KVT_GPU_MAX_BINDINGS 8 /* storage buffers of one pipeline */
#define KVT_GPU_MAX_PUSH 128   /* push-constant bytes of one pipeline (the guaranteed minimum) */

/* What `kvtier info --devices` prints about one device. */
typedef struct {
    int index; /* position in the list, what kvt_gpu_open takes */
    char name[256];
    const char *type; /* "discrete", "integrated", "virtual", "cpu" or "other" */
    uint32_t vendor_id, device_id;
    char driver[520];     /* driver name and version as text */
    uint32_t api_version; /* packed as the API packs it */
    char api[32];         /* the same as text, "1.3.230" */
    int n_heaps;
    uint64_t heap_bytes[KVT_GPU_MAX_HEAPS];
    int heap_device_local[KVT_GPU_MAX_HEAPS];
    uint32_t subgroup_size;
    int fp16;              /* 16-bit float arithmetic in shaders */
    int int8;              /* 8-bit integer arithmetic in shaders */
    int int_dot;           /* integer dot products in use (OpSDot): set when the device is opened */
    uint64_t max_binding;  /* the largest storage buffer one binding may cover */
    int timestamps;        /* the compute queue can write timestamps */
    uint32_t mm_toks;      /* tokens per workgroup of the weight matmuls for batches of more than 8 tokens
                             (32, or 16 or 8 where shared memory is small; KVT_VK_MM_TOKS picks one);
                             up to 8 tokens always run 8 to a workgroup */
    uint32_t mm_rows;      /* weight rows per workgroup of those matmuls for batches of up to 8 tokens (4) */
    uint32_t mm_rows_wide; /* and for longer batches (2, with mm_toks tokens); KVT_VK_MM_ROWS sets both */
    char numerics[80];     /* what decides this device's bits: driver version, pipeline-cache UUID and a
                              hash of the built-in shaders, as hex ("drv-uuid-spirv"), then "-nvcmMxNxK" when
                              the tensor-core matmul is on (coopmat_on) */
    /* The tensor-core matmul of F16 weights (VK_NV_cooperative_matrix, src/gpu/vk_coopmat.c), opt-in: */
    int coopmat;               /* the device can run it: the extension, fp16 arithmetic and a fp16 x fp16 -> fp32
                                 subgroup shape whose workgroup fits */
    uint32_t cm_m, cm_n, cm_k; /* the MMA shape it takes (16x16x16 where listed); 0 without */
    uint32_t cm_wn;            /* token tiles of cm_n per subgroup for batches wider than one tile (4, or what the
                                 shared memory holds) */
    uint32_t cm_subgroup;      /* the subgroup size its workgroups are made of (4 subgroups each) */
    char coopmat_shapes[160];  /* the fp16 x fp16 -> fp32 subgroup shapes the device lists ("16x16x16, 16x8x16"),
                                 or what it lacks ("no VK_NV_cooperative_matrix") */
    int coopmat_on;            /* set when the device is opened: KVT_VK_COOPMAT=1 and coopmat, so every F16 weight
                                 matmul (kvt_gpu_rec_matmul) runs on the MMA shader */
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
/* The largest pinned buffer the device allocates: its maxMemoryAllocationSize
 * and maxBufferSize, whichever is smaller. */
uint64_t kvt_gpu_max_pinned(const kvt_gpu_dev *d);
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
    KVT_GPU_PINNED,     /* host memory the device copies from and to, mapped and cached for the host: a
                           long-lived store (T1's arena), not a shader binding; over kvt_gpu_max_pinned it
                           is refused (KVT_ELIMIT), past KVT_VK_HOST_LIMIT it is -ENOMEM */
} kvt_gpu_buf_kind;

/* A buffer of bytes (> 0). A device buffer over kvt_gpu_max_binding is
 * refused (KVT_ELIMIT) naming both sizes; out of device memory is -ENOMEM. */
int kvt_gpu_buf_new(kvt_gpu_dev *d, kvt_gpu_buf_kind kind, uint64_t bytes, kvt_gpu_buf **out);
void kvt_gpu_buf_free(kvt_gpu_buf *b);
uint64_t kvt_gpu_buf_size(const kvt_gpu_buf *b);
/* The host address of a staging or pinned buffer; NULL for a device buffer. */
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
 * A device records one recording at a time: begin, any number of copies,
 * dispatches, barriers, timestamps and flushes, then submit, which waits for
 * all of it. Nothing runs before the first flush or the submit. */
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
/* Submits what was recorded and waits for it. A lost device fails this and
 * every later submission (KVT_VK_LOSE_AFTER=N makes submission N and those
 * after it fail so, to test the callers). */
int kvt_gpu_submit(kvt_gpu_dev *d);
/* Queues what was recorded so far and goes on recording without waiting for
 * it, so the device runs it while the host records the rest (at most two
 * command lists in flight; KVT_VK_INFLIGHT=1 waits here instead). What it
 * queued is visible to what is recorded after, as after a barrier; the host
 * sees results only after kvt_gpu_submit. Fails as kvt_gpu_submit does, with
 * no recording open then. */
int kvt_gpu_flush(kvt_gpu_dev *d);
/* 1 once a submission found the device lost (or KVT_VK_LOSE_AFTER said so):
 * it stays lost, every later submission fails, and only a new device (a
 * restart) works again. */
int kvt_gpu_lost(const kvt_gpu_dev *d);
/* Drops an open recording without running what was recorded since the last
 * flush, and waits for what was flushed (after a recording call failed);
 * nothing when none is open. */
void kvt_gpu_abort(kvt_gpu_dev *d);
/* Nanoseconds between two timestamps of the last submission. */
int kvt_gpu_elapsed_ns(kvt_gpu_dev *d, uint32_t from, uint32_t to, double *ns);

/* One copy of many regions as its own submission (begin, copy, submit). */
int kvt_gpu_copy(kvt_gpu_dev *d, kvt_gpu_buf *src, kvt_gpu_buf *dst, const kvt_gpu_region *r, size_t n);

/* ---- kernels (vk_kernels.c) ------------------------------------------------------- *
 * Each op is one shader for every batch size: a token's result does not depend
 * on how many tokens run with it, bit for bit (src/gpu/shaders/common.glsl). */
typedef struct kvt_gpu_kernels kvt_gpu_kernels;
/* KVT_EUNSUPPORTED naming the feature where the device lacks 16-bit storage
 * (storageBuffer16BitAccess), which the f16 KV store needs. */
int kvt_gpu_kernels_new(kvt_gpu_dev *d, kvt_gpu_kernels **out);
void kvt_gpu_kernels_free(kvt_gpu_kernels *k);
/* The bytes of the quantized-activation scratch (the quantize passes' output, read by the quantized-weight
 * matmuls) for n_tok rows of cols, at the larger of its layouts (src/gpu/shaders/quant_act.glsl): Q8_0 a
 * byte a value and an f32 scale and an f32 Q8_1 sum a block of 32; Q8_K a byte a value, an f32 scale and
 * 16 int16 sums a block of 256. */
static inline uint64_t kvt_gpu_quant_scratch_bytes(uint32_t n_tok, uint32_t cols) {
    uint64_t n = n_tok, q8_0 = n * cols + n * (cols / 32) * 8, q8_k = n * cols + n * (cols / 256) * 36;
    return q8_0 > q8_k ? q8_0 : q8_k;
}
/* Makes that scratch hold n_tok rows of cols up front, so that matmuls of up to that size do not grow it
 * in a forward pass (it still grows on demand past that, keeping the outgrown one until the kernels are
 * freed). */
int kvt_gpu_kernels_reserve_scratch(kvt_gpu_kernels *k, uint32_t n_tok, uint32_t cols);
/* The scratch's bytes now (0: none made yet), and how many times it has grown past a reservation (the
 * outgrown buffers, held until the kernels are freed). */
uint64_t kvt_gpu_kernels_scratch_bytes(const kvt_gpu_kernels *k);
/* The scratch itself (NULL: none made yet): after a quantized matmul it holds that matmul's quantized
 * activations, which tests read back. */
kvt_gpu_buf *kvt_gpu_kernels_scratch(const kvt_gpu_kernels *k);
int kvt_gpu_kernels_scratch_regrowths(const kvt_gpu_kernels *k);
/* Records y[t][r] = sum_c w[r][c] * x[t][c] for t < n_tok, r < rows, c < cols:
 * w rows of f16 (uint16 IEEE half, as the CPU engine stores them), x and y f32,
 * f32 accumulation. */
int kvt_gpu_rec_matmul_f16(kvt_gpu_kernels *k, kvt_gpu_buf *y, kvt_gpu_buf *w, kvt_gpu_buf *x, uint32_t rows,
                           uint32_t cols, uint32_t n_tok);
/* Records y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight for t < n_tok rows of n f32. */
int kvt_gpu_rec_rmsnorm(kvt_gpu_kernels *k, kvt_gpu_buf *y, kvt_gpu_buf *x, kvt_gpu_buf *weight, uint32_t n,
                        uint32_t n_tok, float eps);

/* ---- the forward pass's kernels ------------------------------------------------------ *
 * Every kernel follows common.glsl's rules. Activation buffers are f32 rows,
 * token t's row at t * (its width). Conversions to f16 round to nearest even
 * in integer code, so they give kvt_f32_to_f16's bits on every device. */

/* A weight matrix in device memory: rows x cols of KVT_TYPE_F32, F16, BF16,
 * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K or IQ4_XS given in the CPU's layout (row_bytes per row,
 * GGUF blocks), uploaded once, the quantized types repacked so each block's
 * codes are whole words (src/gpu/shaders/matmul_q.glsl). It is stored as row slices that each
 * fit one binding (kvt_gpu_max_binding), so a matrix larger than one binding
 * still runs. Other types are KVT_EUNSUPPORTED naming the type. */
typedef struct kvt_gpu_wmat kvt_gpu_wmat;
int kvt_gpu_wmat_supported(uint32_t type);
int kvt_gpu_wmat_new(kvt_gpu_dev *d, uint32_t type, uint32_t rows, uint32_t cols, const void *data, size_t row_bytes,
                     kvt_gpu_wmat **out);
void kvt_gpu_wmat_free(kvt_gpu_wmat *w);
uint64_t kvt_gpu_wmat_bytes(const kvt_gpu_wmat *w); /* device memory it takes */

/* y[t * ldy + y_off + r] = sum_c w[r][c] * x[t * cols + c] for t < n_tok,
 * r < rows, c < cols, f32 accumulation in c order within each invocation's
 * share and the fixed tree across them. y_off + rows <= ldy (KVT_EARG).
 * For the quantized types it first records a pass that quantizes x as the CPU
 * engine does (Q8_0 blocks for Q8_0/Q4_0/Q5_0, Q8_K for the K types) into a
 * scratch buffer of the kernels, with barriers around it; matmuls of the same
 * x with no barrier recorded between them share that pass. */
int kvt_gpu_rec_matmul(kvt_gpu_kernels *k, const kvt_gpu_wmat *w, kvt_gpu_buf *y, uint32_t ldy, uint32_t y_off,
                       kvt_gpu_buf *x, uint32_t n_tok);

/* In place, for each of n_tok rows of n_heads * head_dim floats: rotates the
 * leading rope_dim dims of each head by the row's angles, cs[t * rope_dim/2 + i]
 * and sn[...] (computed on the host), as the CPU's rope does: NORM pairs dims
 * (2i, 2i+1), NEOX (neox != 0) pairs (i, i + rope_dim/2); a pair (a, b) becomes
 * (fma(a, c, -(b * s)), fma(a, s, b * c)). */
int kvt_gpu_rec_rope(kvt_gpu_kernels *k, kvt_gpu_buf *x, kvt_gpu_buf *cs, kvt_gpu_buf *sn, uint32_t n_heads,
                     uint32_t head_dim, uint32_t rope_dim, int neox, uint32_t n_tok);
/* x[i] += y[i] for i < n. */
int kvt_gpu_rec_add(kvt_gpu_kernels *k, kvt_gpu_buf *x, kvt_gpu_buf *y, uint32_t n);
/* g[i] = g[i] / (1 + exp(-g[i])) * u[i] for i < n (SwiGLU's gate). */
int kvt_gpu_rec_silu_mul(kvt_gpu_kernels *k, kvt_gpu_buf *g, kvt_gpu_buf *u, uint32_t n);

/* The KV pages in device memory, in the engine's page layout (engine.h): a
 * page is n_layer * 2 * n_head_kv blocks, the block of (layer, kv = 0 for K /
 * 1 for V, kv head g) being block number (layer * 2 + kv) * n_head_kv + g,
 * each of block rows of head_dim values in dtype:
 *   F32, F16  a block is block * head_dim elements; a K block is
 *             [head_dim][block] (element d of slot s at d * block + s), a V
 *             block [block][head_dim].
 *   Q8_0      each token's row is quantized in groups of 32 (head_dim a
 *             multiple of 32) into an f16 scale and 32 int8, exactly as the
 *             CPU's kvt_kv_q8_quantize_row (kv_quant.h), so a block is
 *             block * head_dim / 32 * 34 bytes: a V block is [block] rows of
 *             head_dim / 32 such groups, a K block the same bytes in columns,
 *             the f16 scales [head_dim / 32][block] then the int8
 *             [head_dim][block] (kv_quant.h "columns").
 * Page p lives in chunk[p / pages_per_chunk] at byte (p % pages_per_chunk) *
 * page_stride, so no binding exceeds the limit. */
#define KVT_GPU_KV_CHUNKS 4
typedef enum { KVT_GPU_KV_F32 = 0, KVT_GPU_KV_F16 = 1, KVT_GPU_KV_Q8_0 = 2 } kvt_gpu_kv_dtype;
#define KVT_GPU_KV_DTYPES 3
typedef struct {
    uint32_t n_layer, n_head_kv, head_dim, block;
    kvt_gpu_kv_dtype dtype;
    uint64_t page_stride; /* bytes, a multiple of 4, >= the page's bytes */
    uint32_t pages_per_chunk;
    int n_chunks;
    kvt_gpu_buf *chunk[KVT_GPU_KV_CHUNKS];
} kvt_gpu_kv;

/* A chunk's token table (uint32), meta[4t .. 4t+3] for token t < n_tok:
 *   pos   its position; it attends keys 0..pos of its sequence
 *   page  the page that receives its K/V, and
 *   slot  its slot there
 *   tab   the index in meta where its sequence's page table starts: meta[tab + j]
 *         is the page holding positions j * block .. j * block + block - 1. */
#define KVT_GPU_META_WORDS 4

/* Writes each token's K row (kx[t * kv_dim + g * head_dim ...], kv_dim =
 * n_head_kv * head_dim) and V row of layer, for every kv head g, into its page
 * slot, rounded to f16 for F16 pages, quantized for Q8_0 pages (the CPU's
 * bytes, bit for bit: the same scale and the same rounding of every value). A
 * token whose page is past the pool or whose slot is past the block is skipped
 * (the table is only on the device). */
int kvt_gpu_rec_kv_store(kvt_gpu_kernels *k, const kvt_gpu_kv *kv, uint32_t layer, kvt_gpu_buf *kx, kvt_gpu_buf *vx,
                         kvt_gpu_buf *meta, uint32_t n_tok);
/* out[t * n_head * head_dim + h * head_dim + d]: query head h of token t
 * (q laid out the same) over keys 0..pos of its sequence, reading kv head
 * h / (n_head / n_head_kv): softmax of scale * q.k, times V. With f16 pages
 * q is rounded to f16 first and each softmax weight before it multiplies V;
 * Q8_0 pages are read as the CPU reads them, each value the f32 product of its
 * group's f16 scale and its int8 (exact), and q and the weights stay f32.
 * One workgroup per (token, head) goes through the keys in order, a block at
 * a time, with an online softmax; nothing depends on n_tok or on the other
 * tokens, so a token decoded alone gets the bits it gets in a prefill.
 * head_dim <= 256; n_head a multiple of n_head_kv. A table entry past the
 * pool is a key of weight 0. */
int kvt_gpu_rec_attention(kvt_gpu_kernels *k, const kvt_gpu_kv *kv, uint32_t layer, kvt_gpu_buf *out, kvt_gpu_buf *q,
                          kvt_gpu_buf *meta, uint32_t n_head, float scale, uint32_t n_tok);
/* The same for the architectures' attention variants: a sliding window of
 * window keys (token at pos attends pos - window + 1 .. pos once pos >=
 * window; 0: every key from 0) and a score soft-cap (each score s, after the
 * scale, becomes softcap * tanh(s * (1 / softcap)); 0: none). With both 0 it
 * is kvt_gpu_rec_attention, bit for bit. */
int kvt_gpu_rec_attention_arch(kvt_gpu_kernels *k, const kvt_gpu_kv *kv, uint32_t layer, kvt_gpu_buf *out,
                               kvt_gpu_buf *q, kvt_gpu_buf *meta, uint32_t n_head, float scale, uint32_t window,
                               float softcap, uint32_t n_tok);

/* ---- the architecture variations' kernels (vk_fwd_arch.c) ----------------------------- *
 * Elementwise, each result depending only on its own element, so they keep
 * the batch invariance; each mirrors the CPU engine's arithmetic (arch_ops.c). */

/* x[t * width + i] += b[i] for t < n_rows, i < width (q/k/v biases). */
int kvt_gpu_rec_add_bias(kvt_gpu_kernels *k, kvt_gpu_buf *x, kvt_gpu_buf *b, uint32_t width, uint32_t n_rows);
/* x[i] *= s for i < n. */
int kvt_gpu_rec_scale(kvt_gpu_kernels *k, kvt_gpu_buf *x, uint32_t n, float s);
/* x[i] = cap * tanh(x[i] * (1 / cap)) for i < n; cap > 0 and finite. */
int kvt_gpu_rec_softcap(kvt_gpu_kernels *k, kvt_gpu_buf *x, uint32_t n, float cap);
/* g[i] = gelu(g[i]) * u[i] for i < n, GELU's tanh form through f16 as the
 * CPU's kvt_gelu_mul. */
int kvt_gpu_rec_gelu_mul(kvt_gpu_kernels *k, kvt_gpu_buf *g, kvt_gpu_buf *u, uint32_t n);

#endif
