// SPDX-License-Identifier: MIT
/* The Vulkan backend's internals: the entry points it loads from the loader
 * at run time (VK_NO_PROTOTYPES: the binary does not link libvulkan, so it
 * starts where there is none) and the objects behind gpu.h. */
#ifndef KVT_VK_IMPL_H
#define KVT_VK_IMPL_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "gpu.h"

/* Every entry point we call, as X(name). */
#define KVT_VK_INSTANCE_FNS(X) \
    X(vkDestroyInstance) \
    X(vkEnumeratePhysicalDevices) \
    X(vkGetPhysicalDeviceProperties) \
    X(vkGetPhysicalDeviceProperties2) \
    X(vkGetPhysicalDeviceFeatures2) \
    X(vkEnumerateDeviceExtensionProperties) \
    X(vkGetPhysicalDeviceMemoryProperties) \
    X(vkGetPhysicalDeviceQueueFamilyProperties) \
    X(vkCreateDevice) \
    X(vkGetDeviceProcAddr) \
    X(vkCreateDebugUtilsMessengerEXT) \
    X(vkDestroyDebugUtilsMessengerEXT)

#define KVT_VK_DEVICE_FNS(X) \
    X(vkDestroyDevice) \
    X(vkGetDeviceQueue) \
    X(vkCreateBuffer) \
    X(vkDestroyBuffer) \
    X(vkGetBufferMemoryRequirements) \
    X(vkAllocateMemory) \
    X(vkFreeMemory) \
    X(vkBindBufferMemory) \
    X(vkMapMemory) \
    X(vkUnmapMemory) \
    X(vkFlushMappedMemoryRanges) \
    X(vkInvalidateMappedMemoryRanges) \
    X(vkCreateCommandPool) \
    X(vkDestroyCommandPool) \
    X(vkAllocateCommandBuffers) \
    X(vkResetCommandPool) \
    X(vkBeginCommandBuffer) \
    X(vkEndCommandBuffer) \
    X(vkCmdCopyBuffer) \
    X(vkCmdPipelineBarrier) \
    X(vkCmdBindPipeline) \
    X(vkCmdBindDescriptorSets) \
    X(vkCmdPushConstants) \
    X(vkCmdDispatch) \
    X(vkCmdWriteTimestamp) \
    X(vkCmdResetQueryPool) \
    X(vkQueueSubmit) \
    X(vkCreateFence) \
    X(vkDestroyFence) \
    X(vkWaitForFences) \
    X(vkResetFences) \
    X(vkCreateQueryPool) \
    X(vkDestroyQueryPool) \
    X(vkGetQueryPoolResults) \
    X(vkCreateShaderModule) \
    X(vkDestroyShaderModule) \
    X(vkCreateDescriptorSetLayout) \
    X(vkDestroyDescriptorSetLayout) \
    X(vkCreatePipelineLayout) \
    X(vkDestroyPipelineLayout) \
    X(vkCreateComputePipelines) \
    X(vkDestroyPipeline) \
    X(vkCreateDescriptorPool) \
    X(vkDestroyDescriptorPool) \
    X(vkResetDescriptorPool) \
    X(vkAllocateDescriptorSets) \
    X(vkUpdateDescriptorSets)

#define KVT_VK_DECL(name) PFN_##name name;
typedef struct {
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
    PFN_vkEnumerateInstanceExtensionProperties vkEnumerateInstanceExtensionProperties;
    PFN_vkEnumerateInstanceLayerProperties vkEnumerateInstanceLayerProperties;
    PFN_vkCreateInstance vkCreateInstance;
    KVT_VK_INSTANCE_FNS(KVT_VK_DECL)
} kvt_vk_ifns;
typedef struct {
    KVT_VK_DEVICE_FNS(KVT_VK_DECL)
} kvt_vk_dfns;

/* One instance (loader, layers, messenger) and its physical devices. */
typedef struct {
    void *lib; /* dlopen handle of the loader */
    kvt_vk_ifns f;
    VkInstance inst;
    VkDebugUtilsMessengerEXT messenger; /* VK_NULL_HANDLE without validation */
    int validation;
    uint32_t n_phys;
    VkPhysicalDevice *phys;
} kvt_vk_inst;

/* Opens the loader and makes an instance (with the validation layer and a
 * counting messenger under KVT_VK_VALIDATION=1). 0 or an error. */
int kvt_vk_inst_new(kvt_vk_inst *vi);
void kvt_vk_inst_free(kvt_vk_inst *vi);
/* The weight matmuls' tokens per workgroup for batches over 8 (kvt_gpu_info.mm_toks) on a device with
 * max_shared bytes of compute shared memory: KVT_VK_MM_TOKS (8, 16 or 32) where set, else the widest that
 * fits. An unknown or too wide KVT_VK_MM_TOKS is KVT_EARG naming it (*toks keeps the widest). */
int kvt_vk_mm_toks(uint32_t max_shared, uint32_t *toks);
/* The weight matmuls' rows per workgroup (kvt_gpu_info.mm_rows, mm_rows_wide): KVT_VK_MM_ROWS_DECODE for
 * batches of up to 8 tokens, KVT_VK_MM_ROWS_WIDE for longer ones (toks tokens to a workgroup), each halved
 * until the device's max_shared bytes hold its trees; KVT_VK_MM_ROWS (1..KVT_VK_MM_ROWS_MAX) sets both where
 * set. An unknown value, or one whose trees do not fit, is KVT_EARG naming it (the defaults kept). */
int kvt_vk_mm_rows(uint32_t max_shared, uint32_t toks, uint32_t *rows, uint32_t *rows_wide);
#define KVT_VK_MM_ROWS_DECODE 4
#define KVT_VK_MM_ROWS_WIDE 2
#define KVT_VK_MM_ROWS_MAX 8
/* Fills info for physical device i. */
void kvt_vk_describe(const kvt_vk_inst *vi, uint32_t i, kvt_gpu_info *info);
/* A VkResult as a kvt error with "what: VK_ERROR_..." as the detail. */
int kvt_vk_fail(VkResult r, const char *what);

#define KVT_VK_MAX_SETS 1024           /* dispatches in one command list */
#define KVT_VK_SLOTS 2                 /* command lists in flight at once (kvt_gpu_flush) */
#define KVT_VK_MAX_QUERIES 256         /* timestamps in one recording */
#define KVT_VK_STAGE_BYTES (16u << 20) /* the device's staging buffer for uploads/downloads */

struct kvt_gpu_dev {
    kvt_vk_inst vi;
    kvt_vk_dfns f;
    kvt_gpu_info info;
    VkPhysicalDevice pd;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfam;
    VkPhysicalDeviceMemoryProperties mem;
    /* Command lists in flight at once: a recording flushed by kvt_gpu_flush runs
     * on the device while the next one is recorded into the other slot. */
    struct kvt_vk_slot {
        VkCommandPool cpool;
        VkCommandBuffer cmd;
        VkFence fence;
        VkDescriptorPool dpool;
        int busy; /* submitted, its fence not yet waited on */
    } slot[KVT_VK_SLOTS];
    int cur;                /* the slot being recorded */
    int inflight;           /* KVT_VK_INFLIGHT: 2 (default) or 1 (every flush waits, as a submit does) */
    VkCommandBuffer cmd;    /* slot[cur]'s */
    VkDescriptorPool dpool; /* slot[cur]'s */
    VkQueryPool qpool;      /* VK_NULL_HANDLE without timestamps */
    double ts_period;       /* ns per tick */
    uint64_t ts_mask;       /* the valid bits of a timestamp */
    uint32_t n_queries;     /* written in this recording */
    int recording;
    uint64_t n_submits; /* since open, for KVT_VK_LOSE_AFTER */
    uint64_t dev_bytes; /* device buffers' bytes now, and KVT_VK_MEM_LIMIT's cap on them (0: none) */
    uint64_t mem_limit;
    uint64_t host_bytes, host_limit; /* pinned buffers' bytes now, and KVT_VK_HOST_LIMIT's cap (0: none) */
    uint64_t max_pinned;             /* the largest pinned buffer (kvt_gpu_max_pinned) */
    int lost;                        /* the device was lost: every later submission fails */
    int force_staging;
    uint64_t max_binding;
    uint64_t nonatomic; /* nonCoherentAtomSize */
    int storage16;      /* storageBuffer16BitAccess enabled: shaders load and store 16-bit elements */
    int int_dot;        /* shaderIntegerDotProduct enabled (VK_KHR_shader_integer_dot_product): OpSDot */
    uint64_t n_sync;    /* begins and barriers recorded since open: what was written before is visible */
    kvt_gpu_buf *stage; /* created on the first staged transfer */
};

struct kvt_gpu_buf {
    kvt_gpu_dev *d;
    VkBuffer buf;
    VkDeviceMemory mem;
    uint64_t bytes;
    kvt_gpu_buf_kind kind;
    void *host;   /* mapped address, or NULL */
    int coherent; /* host-coherent memory: no flush or invalidate */
    int counted;  /* in d->dev_bytes (a device buffer) or d->host_bytes (a pinned one) */
};

#define KVT_VK_MAX_SPEC 6 /* specialization constants a pipeline may set */
struct kvt_gpu_pipe {
    kvt_gpu_dev *d;
    const struct kvt_vk_spirv *spirv; /* its shader */
    VkShaderModule module;
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    VkPipeline pipe;
    int n_bufs;
    uint32_t push_bytes;
    uint32_t n_spec, spec[KVT_VK_MAX_SPEC]; /* specialization constants 0 .. n_spec - 1 */
};

/* kvt_gpu_pipe_new, its Vulkan objects made on the pipeline's first dispatch
 * (kvt_gpu_rec_dispatch, which fails as kvt_gpu_pipe_new would where they
 * cannot be made): the kernels make every pipeline of every weight type, KV
 * type and architecture, and an engine dispatches a few of them, so only
 * those cost a shader compile. The name and sizes are checked here. */
/* Waits for every submitted command list (vk_cmd.c); marks the device lost if one found it so. */
int kvt_vk_wait_slots(kvt_gpu_dev *d, const char *what);

int kvt_vk_pipe_lazy(kvt_gpu_dev *d, const char *name, int n_bufs, uint32_t push_bytes, kvt_gpu_pipe **out);

/* kvt_vk_pipe_lazy with specialization constants (as kvt_vk_pipe_new_spec takes them). */
int kvt_vk_pipe_lazy_spec(kvt_gpu_dev *d, const char *name, int n_bufs, uint32_t push_bytes, const uint32_t *spec,
                          uint32_t n_spec, kvt_gpu_pipe **out);
/* kvt_gpu_pipe_new with specialization constants: constant_id i of the shader
 * takes spec[i] for i < n_spec (at most KVT_VK_MAX_SPEC). */
int kvt_vk_pipe_new_spec(kvt_gpu_dev *d, const char *name, int n_bufs, uint32_t push_bytes, const uint32_t *spec,
                         uint32_t n_spec, kvt_gpu_pipe **out);

/* The embedded SPIR-V of src/gpu/shaders/NAME.comp (generated at build time). */
typedef struct kvt_vk_spirv {
    const char *name;
    const unsigned char *code;
    size_t bytes;
} kvt_vk_spirv;
extern const kvt_vk_spirv kvt_vk_shaders[];
extern const size_t kvt_vk_n_shaders;

#define KVT_VK_ARCH_PIPES 4 /* add_bias, scale, softcap, gelu_mul */

/* The kernels' pipelines (vk_kernels.c makes them; vk_fwd.c records the forward pass's). */
/* quantized weight types: Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K, Q4_1, Q5_1, IQ4_NL, Q2_K, Q3_K, IQ4_XS
 * (vk_fwd.c's table) */
#define KVT_VK_NQ 12
struct kvt_gpu_kernels {
    kvt_gpu_dev *d;
    kvt_gpu_pipe *matmul_f16, *rmsnorm;
    /* The weight matmuls, 8 tokens and d->info.mm_rows rows to a workgroup: f32, f16, bf16, then the quantized
     * types (the OpSDot shaders where the device has integer dot products, else plain). */
    kvt_gpu_pipe *mm[3 + KVT_VK_NQ];
    /* The same matmuls with d->info.mm_toks tokens and mm_rows_wide rows per workgroup for longer batches,
     * each made on its first use (kvt_vk_mm_pipe), so a decode-only run never compiles them. */
    kvt_gpu_pipe *mm_wide[3 + KVT_VK_NQ];
    /* The tensor-core F16 matmul (kvt_vk_cm_pipe) when d->info.coopmat_on: one subgroup of one token tile a
     * workgroup, and 4 subgroups of cm_wn tiles for wider batches, each made on first use. */
    kvt_gpu_pipe *cm[2];
    kvt_gpu_pipe *quant[2]; /* activations to Q8_0 / Q8_K (quant_q8_0, quant_q8_k) */
    /* The quantized activations of the last quantize pass, shared by the
     * matmuls that read the same x until the next barrier (vk_fwd.c). */
    kvt_gpu_buf *xq;
    kvt_gpu_buf **retired; /* outgrown scratch that a recording may still use, freed with the kernels */
    int n_retired;
    const kvt_gpu_buf *xq_x;
    uint32_t xq_n, xq_cols;
    int xq_k;         /* Q8_K (1) or Q8_0 with its Q8_1 sums (0) */
    uint64_t xq_sync; /* d->n_sync right after it was written */
    kvt_gpu_pipe *rope, *add, *silu_mul;
    kvt_gpu_pipe *kv_store[KVT_GPU_KV_DTYPES], *attention[KVT_GPU_KV_DTYPES]; /* [kvt_gpu_kv_dtype] */
    kvt_gpu_pipe *arch[KVT_VK_ARCH_PIPES]; /* the architecture variations' (vk_fwd_arch.c) */
};

/* Makes (and frees) k->arch; kvt_gpu_kernels_new and _free call these. */
int kvt_vk_arch_pipes_new(kvt_gpu_kernels *k);
void kvt_vk_arch_pipes_free(kvt_gpu_kernels *k);

#define KVT_VK_MAX_GROUPS_X 32768u /* below the guaranteed maxComputeWorkGroupCount of 65535 */
/* n workgroups along x, spilling into z past KVT_VK_MAX_GROUPS_X (the shaders index x + z * gx). */
/* The weight matmul pipeline for n_tok tokens of weights `which` (0 f32, 1 f16, 2 bf16, 3 + i mm_q[i]) and
 * its tokens and rows per workgroup: 8 tokens and d->info.mm_rows up to 8 tokens, else d->info.mm_toks and
 * mm_rows_wide, that pipeline made on first use. */
int kvt_vk_mm_pipe(kvt_gpu_kernels *k, int which, uint32_t n_tok, kvt_gpu_pipe **p, uint32_t *toks, uint32_t *rows);
void kvt_vk_spread(uint32_t n, uint32_t *gx, uint32_t *gz);

/* ---- the tensor-core F16 matmul (vk_coopmat.c) ---- */
/* Fills info's coopmat fields for physical device pd (p its properties): the extension, the features and limits
 * it needs, the shapes listed and the one taken. */
void kvt_vk_cm_describe(const kvt_vk_inst *vi, VkPhysicalDevice pd, const VkPhysicalDeviceProperties *p,
                        kvt_gpu_info *info);
/* Reads KVT_VK_COOPMAT when d opens: sets d->info.coopmat_on (and its numerics suffix) where the device can run
 * it, logs one line either way; KVT_EARG naming a value other than 0 or 1. */
int kvt_vk_cm_select(kvt_gpu_dev *d);
/* The features vkCreateDevice needs for it, chained in front of dci->pNext while they live in f. */
typedef struct {
    VkPhysicalDeviceCooperativeMatrixFeaturesNV cm;
    VkPhysicalDeviceVulkanMemoryModelFeatures mm; /* glslc writes the NV shader in the Vulkan memory model */
    VkPhysicalDeviceShaderFloat16Int8Features f16;
} kvt_vk_cm_feats;
/* When d->info.coopmat_on: chains f's features into dci and appends the extension's name to ext[*n_ext]. */
void kvt_vk_cm_features(const kvt_gpu_dev *d, kvt_vk_cm_feats *f, VkDeviceCreateInfo *dci, const char **ext,
                        uint32_t *n_ext);
/* kvt_vk_mm_pipe for F16 weights when d->info.coopmat_on: the MMA pipeline for n_tok tokens and the tokens and
 * rows each of its workgroups covers. */
int kvt_vk_cm_pipe(kvt_gpu_kernels *k, uint32_t n_tok, kvt_gpu_pipe **p, uint32_t *toks, uint32_t *rows);
/* bytes of the buffer b must hold; KVT_ELIMIT naming op and what if not. */
int kvt_vk_need(const kvt_gpu_buf *b, uint64_t bytes, const char *op, const char *what);

#endif
