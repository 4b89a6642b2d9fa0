// SPDX-License-Identifier: MIT
/* The Vulkan loader, the instance (validation layer and its counting
 * messenger) and the description of each physical device. */
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "vk_impl.h"

#define LOADER_SONAME "libvulkan.so.1"
#define VALIDATION_LAYER "VK_LAYER_KHRONOS_validation"
#if defined(__SANITIZE_ADDRESS__)
#define SYNC_VALIDATION 0
#else
#define SYNC_VALIDATION 1
#endif

static atomic_uint_fast64_t validation_msgs;

uint64_t kvt_gpu_validation_count(void) { return (uint64_t)atomic_load(&validation_msgs); }

int kvt_gpu_built(void) { return 1; }

int kvt_gpu_validation_on(void) {
    const char *v = getenv("KVT_VK_VALIDATION");
    return v && !strcmp(v, "1");
}

static const char *vk_result_name(VkResult r) {
    switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    default: return "VK_ERROR (other)";
    }
}

int kvt_vk_fail(VkResult r, const char *what) {
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY)
        return kvt_fail(-ENOMEM, "%s: out of device memory (%s)", what, vk_result_name(r));
    if (r == VK_ERROR_OUT_OF_HOST_MEMORY)
        return kvt_fail(-ENOMEM, "%s: out of host memory (%s)", what, vk_result_name(r));
    return kvt_fail(-EIO, "%s: %s (%d)", what, vk_result_name(r), (int)r);
}

/* Every message of the validation layer is counted (tests fail on any) and logged. */
static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                                 VkDebugUtilsMessageTypeFlagsEXT type,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
    if (type & VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT) atomic_fetch_add(&validation_msgs, 1);
    kvt_log(sev >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? KVT_LOG_ERROR : KVT_LOG_WARN, "vulkan: %s",
            data && data->pMessage ? data->pMessage : "(no text)");
    return VK_FALSE;
}

static int has_layer(const kvt_vk_inst *vi, const char *name) {
    uint32_t n = 0;
    if (vi->f.vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0) return 0;
    VkLayerProperties *p = kvt_xcalloc(n, sizeof *p);
    int found = 0;
    if (vi->f.vkEnumerateInstanceLayerProperties(&n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(p[i].layerName, name);
    free(p);
    return found;
}

static int load_loader(kvt_vk_inst *vi) {
    vi->lib = dlopen(LOADER_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!vi->lib)
        return kvt_fail(-ENODEV, "no Vulkan loader (%s: %s): install libvulkan1 and a Vulkan driver", LOADER_SONAME,
                        dlerror());
    vi->f.vkGetInstanceProcAddr = (PFN_vkGetInstanceProcAddr)(uintptr_t)dlsym(vi->lib, "vkGetInstanceProcAddr");
    if (!vi->f.vkGetInstanceProcAddr) return kvt_fail(-ENODEV, "%s has no vkGetInstanceProcAddr", LOADER_SONAME);
#define GLOBAL(name) vi->f.name = (PFN_##name)(uintptr_t)vi->f.vkGetInstanceProcAddr(VK_NULL_HANDLE, #name);
    GLOBAL(vkEnumerateInstanceExtensionProperties)
    GLOBAL(vkEnumerateInstanceLayerProperties)
    GLOBAL(vkCreateInstance)
#undef GLOBAL
    if (!vi->f.vkCreateInstance || !vi->f.vkEnumerateInstanceLayerProperties)
        return kvt_fail(-ENODEV, "the Vulkan loader %s lacks vkCreateInstance", LOADER_SONAME);
    return 0;
}

static int create_instance(kvt_vk_inst *vi) {
    vi->validation = 0;
    if (kvt_gpu_validation_on()) {
        if (has_layer(vi, VALIDATION_LAYER)) vi->validation = 1;
        else
            kvt_log(KVT_LOG_WARN, "gpu: KVT_VK_VALIDATION=1 but %s is not installed (vulkan-validationlayers)",
                    VALIDATION_LAYER);
    }
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .pApplicationName = "kvtier",
                             .pEngineName = "kvtier",
                             .apiVersion = VK_API_VERSION_1_2};
    const char *layers[] = {VALIDATION_LAYER};
    const char *exts[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME};
    VkDebugUtilsMessengerCreateInfoEXT mci = {.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
                                              .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                                                  VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
                                              .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                                                  VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                                                  VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
                                              .pfnUserCallback = on_message};
    /* synchronization validation too: a missing barrier between a shader's
     * write and the next read is a hazard lavapipe would never show. Not in
     * an AddressSanitizer build: the layer keeps that state past the
     * instance, and LeakSanitizer reports it as leaked from an unloaded
     * library (the release build's tests run it). */
    VkValidationFeatureEnableEXT sync = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    VkValidationFeaturesEXT vf = {.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
                                  .pNext = &mci,
                                  .enabledValidationFeatureCount = 1,
                                  .pEnabledValidationFeatures = &sync};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    if (vi->validation) {
        ci.enabledLayerCount = 1;
        ci.ppEnabledLayerNames = layers;
        ci.enabledExtensionCount = SYNC_VALIDATION ? 2 : 1;
        ci.ppEnabledExtensionNames = exts;
        ci.pNext = SYNC_VALIDATION ? (const void *)&vf : (const void *)&mci; /* mci: creation and destruction too */
    }
    VkResult r = vi->f.vkCreateInstance(&ci, NULL, &vi->inst);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
        return kvt_fail(-ENODEV,
                        "no Vulkan driver, or none for Vulkan 1.2 (VK_ERROR_INCOMPATIBLE_DRIVER): install "
                        "mesa-vulkan-drivers for lavapipe, or the GPU vendor's Vulkan driver");
    if (r != VK_SUCCESS) return kvt_vk_fail(r, "vkCreateInstance");
#define INST(name) vi->f.name = (PFN_##name)(uintptr_t)vi->f.vkGetInstanceProcAddr(vi->inst, #name);
    KVT_VK_INSTANCE_FNS(INST)
#undef INST
    if (vi->validation) {
        r = vi->f.vkCreateDebugUtilsMessengerEXT(vi->inst, &mci, NULL, &vi->messenger);
        if (r != VK_SUCCESS) return kvt_vk_fail(r, "vkCreateDebugUtilsMessengerEXT");
        kvt_log(KVT_LOG_DEBUG, "gpu: %s on (with synchronization validation), its messages counted", VALIDATION_LAYER);
    }
    return 0;
}

int kvt_vk_inst_new(kvt_vk_inst *vi) {
    memset(vi, 0, sizeof *vi);
    int rc = load_loader(vi);
    if (!rc) rc = create_instance(vi);
    if (!rc) {
        VkResult r = vi->f.vkEnumeratePhysicalDevices(vi->inst, &vi->n_phys, NULL);
        if (r == VK_SUCCESS && vi->n_phys) {
            vi->phys = kvt_xcalloc(vi->n_phys, sizeof *vi->phys);
            r = vi->f.vkEnumeratePhysicalDevices(vi->inst, &vi->n_phys, vi->phys);
        }
        if (r != VK_SUCCESS && r != VK_INCOMPLETE) rc = kvt_vk_fail(r, "vkEnumeratePhysicalDevices");
    }
    if (rc) kvt_vk_inst_free(vi);
    return rc;
}

void kvt_vk_inst_free(kvt_vk_inst *vi) {
    if (vi->messenger) vi->f.vkDestroyDebugUtilsMessengerEXT(vi->inst, vi->messenger, NULL);
    if (vi->inst) vi->f.vkDestroyInstance(vi->inst, NULL);
    if (vi->lib) dlclose(vi->lib);
    free(vi->phys);
    memset(vi, 0, sizeof *vi);
}

static const char *type_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
    }
}

static void version_text(uint32_t v, char *out, size_t cap) {
    snprintf(out, cap, "%u.%u.%u", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v), VK_API_VERSION_PATCH(v));
}

/* Long: one query per property the listing shows, each a few lines. */
/* FNV-1a over every built-in shader's SPIR-V: a new shader build is new numerics. */
static uint64_t shaders_hash(void) {
    uint64_t h = 1469598103934665603ull;
    for (size_t s = 0; s < kvt_vk_n_shaders; s++)
        for (size_t b = 0; b < kvt_vk_shaders[s].bytes; b++) h = (h ^ kvt_vk_shaders[s].code[b]) * 1099511628211ull;
    return h;
}

static void numerics_text(const VkPhysicalDeviceProperties *p, kvt_gpu_info *info) {
    char uuid[2 * VK_UUID_SIZE + 1];
    for (unsigned b = 0; b < VK_UUID_SIZE; b++) snprintf(uuid + 2 * b, 3, "%02x", p->pipelineCacheUUID[b]);
    snprintf(info->numerics, sizeof info->numerics, "%08x-%s-%016llx", p->driverVersion, uuid,
             (unsigned long long)shaders_hash());
}

/* Shared memory of the widest matmul shader, the K types' with mins (matmul_q.glsl), for rt = MM_ROWS x
 * MM_TOKS: the trees' rt x KVT_WG words (which first hold the integer shares of S) and the shares of M as
 * much again (common.glsl's kvt_part is unused there, and glslc -O drops it). */
static uint64_t mm_shared_bytes(uint32_t rt) { return (uint64_t)rt * 64 * 4 * 2; }

int kvt_vk_mm_toks(uint32_t max_shared, uint32_t *toks) {
    *toks = 8;
    for (uint32_t t = 32; t > 8 && *toks == 8; t /= 2)
        if (mm_shared_bytes(t) <= max_shared) *toks = t;
    const char *v = getenv("KVT_VK_MM_TOKS");
    if (!v || !*v) return 0;
    uint32_t want = !strcmp(v, "8") ? 8 : !strcmp(v, "16") ? 16 : !strcmp(v, "32") ? 32 : 0;
    if (!want)
        return kvt_fail(KVT_EARG, "KVT_VK_MM_TOKS must be 8, 16 or 32 (tokens per matmul workgroup), not '%s'", v);
    if (want > *toks)
        return kvt_fail(KVT_EARG,
                        "KVT_VK_MM_TOKS=%u needs %llu bytes of compute shared memory; this device has %u (at "
                        "most %u)",
                        want, (unsigned long long)mm_shared_bytes(want), max_shared, *toks);
    *toks = want;
    return 0;
}

/* The most rows, up to want, whose trees for toks tokens fit max_shared (at least 1). */
static uint32_t rows_that_fit(uint32_t max_shared, uint32_t toks, uint32_t want) {
    while (want > 1 && mm_shared_bytes(want * toks) > max_shared) want /= 2;
    return want;
}

int kvt_vk_mm_rows(uint32_t max_shared, uint32_t toks, uint32_t *rows, uint32_t *rows_wide) {
    *rows = rows_that_fit(max_shared, 8, KVT_VK_MM_ROWS_DECODE);
    *rows_wide = toks > 8 ? rows_that_fit(max_shared, toks, KVT_VK_MM_ROWS_WIDE) : *rows;
    const char *v = getenv("KVT_VK_MM_ROWS");
    if (!v || !*v) return 0;
    char *end;
    long want = strtol(v, &end, 10);
    if (*end || want < 1 || want > KVT_VK_MM_ROWS_MAX)
        return kvt_fail(KVT_EARG, "KVT_VK_MM_ROWS must be 1..%d (rows per matmul workgroup), not '%s'",
                        KVT_VK_MM_ROWS_MAX, v);
    uint64_t need = mm_shared_bytes((uint32_t)want * KVT_MAX(toks, 8u));
    if (need > max_shared)
        return kvt_fail(KVT_EARG,
                        "KVT_VK_MM_ROWS=%ld with %u tokens per workgroup needs %llu bytes of compute shared memory; "
                        "this device has %u (KVT_VK_MM_TOKS=8 leaves more rows room)",
                        want, KVT_MAX(toks, 8u), (unsigned long long)need, max_shared);
    *rows = *rows_wide = (uint32_t)want;
    return 0;
}

void kvt_vk_describe(const kvt_vk_inst *vi, uint32_t i, kvt_gpu_info *info) {
    memset(info, 0, sizeof *info);
    VkPhysicalDevice pd = vi->phys[i];
    VkPhysicalDeviceSubgroupProperties sub = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceDriverProperties drv = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES, .pNext = &sub};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sub};
    VkPhysicalDeviceProperties p;
    vi->f.vkGetPhysicalDeviceProperties(pd, &p);
    int v12 = p.apiVersion >= VK_API_VERSION_1_2;
    if (v12) p2.pNext = &drv; /* driver properties are core from 1.2 */
    vi->f.vkGetPhysicalDeviceProperties2(pd, &p2);
    info->index = (int)i;
    snprintf(info->name, sizeof info->name, "%s", p.deviceName);
    info->type = type_name(p.deviceType);
    info->vendor_id = p.vendorID;
    info->device_id = p.deviceID;
    info->api_version = p.apiVersion;
    version_text(p.apiVersion, info->api, sizeof info->api);
    if (v12 && drv.driverInfo[0]) snprintf(info->driver, sizeof info->driver, "%s %s", drv.driverName, drv.driverInfo);
    else snprintf(info->driver, sizeof info->driver, "version 0x%08x", p.driverVersion);
    info->subgroup_size = sub.subgroupSize;
    info->max_binding = p.limits.maxStorageBufferRange;
    /* kvt_gpu_open reports a bad KVT_VK_MM_TOKS or KVT_VK_MM_ROWS */
    (void)kvt_vk_mm_toks(p.limits.maxComputeSharedMemorySize, &info->mm_toks);
    (void)kvt_vk_mm_rows(p.limits.maxComputeSharedMemorySize, info->mm_toks, &info->mm_rows, &info->mm_rows_wide);
    numerics_text(&p, info);
    kvt_vk_cm_describe(vi, pd, &p, info);
    if (v12) {
        VkPhysicalDeviceShaderFloat16Int8Features f16 = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
        VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f16};
        vi->f.vkGetPhysicalDeviceFeatures2(pd, &f2);
        info->fp16 = f16.shaderFloat16 != 0;
        info->int8 = f16.shaderInt8 != 0;
    }
    VkPhysicalDeviceMemoryProperties mem;
    vi->f.vkGetPhysicalDeviceMemoryProperties(pd, &mem);
    info->n_heaps = (int)KVT_MIN(mem.memoryHeapCount, (uint32_t)KVT_GPU_MAX_HEAPS);
    for (int h = 0; h < info->n_heaps; h++) {
        info->heap_bytes[h] = mem.memoryHeaps[h].size;
        info->heap_device_local[h] = (mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0;
    }
    uint32_t nq = 0;
    vi->f.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, NULL);
    VkQueueFamilyProperties *q = kvt_xcalloc(nq ? nq : 1, sizeof *q);
    vi->f.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, q);
    for (uint32_t k = 0; k < nq; k++)
        if (q[k].queueFlags & VK_QUEUE_COMPUTE_BIT) {
            info->timestamps = q[k].timestampValidBits > 0 && p.limits.timestampPeriod > 0;
            break;
        }
    free(q);
}

int kvt_gpu_list(kvt_gpu_info **out, int *n) {
    *out = NULL;
    *n = 0;
    kvt_vk_inst vi;
    int rc = kvt_vk_inst_new(&vi);
    if (rc) return rc;
    if (vi.n_phys) {
        *out = kvt_xcalloc(vi.n_phys, sizeof **out);
        for (uint32_t i = 0; i < vi.n_phys; i++) kvt_vk_describe(&vi, i, &(*out)[i]);
        *n = (int)vi.n_phys;
    }
    kvt_vk_inst_free(&vi);
    return 0;
}
