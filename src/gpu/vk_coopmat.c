// SPDX-License-Identifier: MIT
/* The tensor-core matmul of F16 weights (VK_NV_cooperative_matrix,
 * src/gpu/shaders/matmul_cm_f16.comp): what a device offers of it, the
 * KVT_VK_COOPMAT switch, the device features it needs, and its pipelines.
 *
 * It is opt-in, off unless KVT_VK_COOPMAT=1, until a real GPU has run
 * test_gpu_coopmat: lavapipe, where CI runs, has no cooperative matrices, so
 * here the shader is only compiled and validated. With the switch on and a
 * device that offers a fp16 x fp16 -> fp32 subgroup shape, every F16 weight
 * matmul runs on it (one shader for every batch size); its numerics differ
 * from the subgroup-free kernel's (activations rounded to f16, the MMA's sums),
 * so the device's numerics id says so and stored blocks of the two never mix. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "vk_impl.h"

#define CM_SUBS 4     /* subgroups a workgroup for batches wider than one tile (CM_SUBS; 1 for the others) */
#define CM_KSTEPS 4   /* MMAs per staged column step (CM_KC = 4 * CM_K) */
#define CM_WN_MAX 4   /* token tiles per subgroup for batches wider than one tile */
#define CM_MAX_DIM 64 /* a listed shape with a side over this is not used */

/* Shared memory of the shader for shape m x n x k and wn token tiles (with CM_SUBS subgroups when wn > 1, else
 * 1): staged weights and activations (f16), and the results (f32). */
static uint64_t cm_shared_bytes(uint32_t m, uint32_t n, uint32_t k, uint32_t wn) {
    uint64_t bm = (uint64_t)(wn > 1 ? CM_SUBS : 1) * m, bn = (uint64_t)wn * n, kc = (uint64_t)CM_KSTEPS * k;
    return (bm * kc + bn * kc) * 2 + bn * bm * 4;
}

static int has_dev_ext(const kvt_vk_inst *vi, VkPhysicalDevice pd, const char *name) {
    uint32_t n = 0;
    if (vi->f.vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL) != VK_SUCCESS || n == 0) return 0;
    VkExtensionProperties *e = kvt_xcalloc(n, sizeof *e);
    int found = 0;
    if (vi->f.vkEnumerateDeviceExtensionProperties(pd, NULL, &n, e) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(e[i].extensionName, name);
    free(e);
    return found;
}

/* A fp16 x fp16 + fp32 -> fp32 shape at subgroup scope, the one the shader takes. */
static int usable_shape(const VkCooperativeMatrixPropertiesNV *c) {
    return c->AType == VK_COMPONENT_TYPE_FLOAT16_NV && c->BType == VK_COMPONENT_TYPE_FLOAT16_NV &&
        c->CType == VK_COMPONENT_TYPE_FLOAT32_NV && c->DType == VK_COMPONENT_TYPE_FLOAT32_NV &&
        c->scope == VK_SCOPE_SUBGROUP_NV && c->MSize && c->NSize && c->KSize && c->MSize <= CM_MAX_DIM &&
        c->NSize <= CM_MAX_DIM && c->KSize <= CM_MAX_DIM;
}

/* Lists the device's shapes into info->coopmat_shapes and picks one: 16x16x16 where listed, else the first
 * usable one whose decode workgroup fits the shared memory. */
static void pick_shape(kvt_gpu_info *info, const VkCooperativeMatrixPropertiesNV *c, uint32_t n, uint32_t max_shared) {
    size_t len = 0;
    uint32_t others = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!usable_shape(&c[i])) {
            others++;
            continue;
        }
        if (len + 16 < sizeof info->coopmat_shapes)
            len += (size_t)snprintf(info->coopmat_shapes + len, sizeof info->coopmat_shapes - len, "%s%ux%ux%u",
                                    len ? ", " : "", c[i].MSize, c[i].NSize, c[i].KSize);
        int fits = cm_shared_bytes(c[i].MSize, c[i].NSize, c[i].KSize, 1) <= max_shared;
        int best = c[i].MSize == 16 && c[i].NSize == 16 && c[i].KSize == 16;
        if (fits && (!info->cm_m || best)) info->cm_m = c[i].MSize, info->cm_n = c[i].NSize, info->cm_k = c[i].KSize;
    }
    if (!len) snprintf(info->coopmat_shapes, sizeof info->coopmat_shapes, "no fp16 x fp16 -> fp32 subgroup shape");
    len = strlen(info->coopmat_shapes);
    if (others)
        snprintf(info->coopmat_shapes + len, sizeof info->coopmat_shapes - len, " (and %u of other types or scope)",
                 others);
}

/* What the device lacks of what the shader needs (NULL: nothing) besides a shape; *sg gets its subgroup size. */
static const char *lacks(const kvt_vk_inst *vi, VkPhysicalDevice pd, const VkPhysicalDeviceProperties *p, uint32_t *sg) {
    VkPhysicalDeviceCooperativeMatrixFeaturesNV cf = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    VkPhysicalDeviceVulkanMemoryModelFeatures mm = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES,
        .pNext = &cf};
    VkPhysicalDeviceShaderFloat16Int8Features f16 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES,
        .pNext = &mm};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f16};
    vi->f.vkGetPhysicalDeviceFeatures2(pd, &f2);
    VkPhysicalDeviceCooperativeMatrixPropertiesNV cp = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_NV};
    VkPhysicalDeviceSubgroupProperties sub = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
                                              .pNext = &cp};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sub};
    vi->f.vkGetPhysicalDeviceProperties2(pd, &p2);
    *sg = sub.subgroupSize;
    if (!cf.cooperativeMatrix) return "the cooperativeMatrix feature";
    if (!(cp.cooperativeMatrixSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT)) return "compute shaders";
    if (!f16.shaderFloat16) return "shaderFloat16";
    /* glslc writes GL_NV_cooperative_matrix shaders in the Vulkan memory model */
    if (!mm.vulkanMemoryModel) return "the Vulkan memory model";
    if (!(sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) ||
        !(sub.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT))
        return "basic subgroup operations in compute shaders";
    if (!*sg || CM_SUBS * *sg > p->limits.maxComputeWorkGroupSize[0] ||
        CM_SUBS * *sg > p->limits.maxComputeWorkGroupInvocations)
        return "a workgroup of 4 subgroups";
    return NULL;
}

void kvt_vk_cm_describe(const kvt_vk_inst *vi, VkPhysicalDevice pd, const VkPhysicalDeviceProperties *p,
                        kvt_gpu_info *info) {
    info->coopmat = 0;
    info->cm_m = info->cm_n = info->cm_k = info->cm_wn = info->cm_subgroup = 0;
    snprintf(info->coopmat_shapes, sizeof info->coopmat_shapes, "no VK_NV_cooperative_matrix");
    if (p->apiVersion < VK_API_VERSION_1_2 || !has_dev_ext(vi, pd, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME)) return;
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV list =
        (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)(uintptr_t)vi->f.vkGetInstanceProcAddr(
            vi->inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
    uint32_t sg = 0;
    const char *no = list ? lacks(vi, pd, p, &sg) : "its properties call";
    if (no) {
        snprintf(info->coopmat_shapes, sizeof info->coopmat_shapes, "VK_NV_cooperative_matrix without %s", no);
        return;
    }
    uint32_t n = 0;
    VkCooperativeMatrixPropertiesNV *c = NULL;
    if (list(pd, &n, NULL) == VK_SUCCESS && n) {
        c = kvt_xcalloc(n, sizeof *c);
        for (uint32_t i = 0; i < n; i++) c[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
        if (list(pd, &n, c) != VK_SUCCESS) n = 0;
    }
    pick_shape(info, c, n, p->limits.maxComputeSharedMemorySize);
    free(c);
    if (!info->cm_m) return;
    info->coopmat = 1;
    info->cm_subgroup = sg;
    info->cm_wn = CM_WN_MAX;
    while (info->cm_wn > 1 &&
           cm_shared_bytes(info->cm_m, info->cm_n, info->cm_k, info->cm_wn) > p->limits.maxComputeSharedMemorySize)
        info->cm_wn /= 2;
}

int kvt_vk_cm_select(kvt_gpu_dev *d) {
    kvt_gpu_info *in = &d->info;
    in->coopmat_on = 0;
    const char *v = getenv("KVT_VK_COOPMAT");
    if (!v || !*v || !strcmp(v, "0")) return 0;
    if (strcmp(v, "1"))
        return kvt_fail(KVT_EARG, "KVT_VK_COOPMAT must be 0 or 1 (the tensor-core F16 matmul), not '%s'", v);
    if (!in->coopmat) {
        kvt_log(KVT_LOG_INFO, "gpu: KVT_VK_COOPMAT=1, but '%s' has %s: F16 matmuls take the subgroup-free kernel",
                in->name, in->coopmat_shapes);
        return 0;
    }
    in->coopmat_on = 1;
    size_t len = strlen(in->numerics);
    snprintf(in->numerics + len, sizeof in->numerics - len, "-nvcm%ux%ux%u", in->cm_m, in->cm_n, in->cm_k);
    kvt_log(KVT_LOG_INFO, "gpu: KVT_VK_COOPMAT=1: F16 matmuls on '%s' run on its cooperative matrices (%ux%ux%u)",
            in->name, in->cm_m, in->cm_n, in->cm_k);
    return 0;
}

void kvt_vk_cm_features(const kvt_gpu_dev *d, kvt_vk_cm_feats *f, VkDeviceCreateInfo *dci, const char **ext,
                        uint32_t *n_ext) {
    if (!d->info.coopmat_on) return;
    f->cm = (VkPhysicalDeviceCooperativeMatrixFeaturesNV){
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV,
        .pNext = (void *)(uintptr_t)dci->pNext,
        .cooperativeMatrix = VK_TRUE};
    f->mm = (VkPhysicalDeviceVulkanMemoryModelFeatures){
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES,
        .pNext = &f->cm,
        .vulkanMemoryModel = VK_TRUE};
    f->f16 = (VkPhysicalDeviceShaderFloat16Int8Features){
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES,
        .pNext = &f->mm,
        .shaderFloat16 = VK_TRUE};
    dci->pNext = &f->f16;
    ext[(*n_ext)++] = VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME;
}

int kvt_vk_cm_pipe(kvt_gpu_kernels *k, uint32_t n_tok, kvt_gpu_pipe **p, uint32_t *toks, uint32_t *rows) {
    const kvt_gpu_info *in = &k->d->info;
    int wide = n_tok > in->cm_n && in->cm_wn > 1;
    uint32_t wn = wide ? in->cm_wn : 1;
    if (!k->cm[wide]) {
        uint32_t subs = wide ? CM_SUBS : 1, spec[6] = {in->cm_m, in->cm_n, in->cm_k, wn, subs * in->cm_subgroup, subs};
        int rc = kvt_vk_pipe_new_spec(k->d, "matmul_cm_f16", 3, 7 * 4, spec, 6, &k->cm[wide]);
        if (rc) return rc;
    }
    *p = k->cm[wide];
    *toks = wn * in->cm_n;
    *rows = (wide ? CM_SUBS : 1) * in->cm_m;
    return 0;
}
