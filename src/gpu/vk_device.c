// SPDX-License-Identifier: MIT
/* Opening a Vulkan device with one compute queue, and its buffers: device-local
 * storage buffers, host-visible staging buffers, uploads and downloads through
 * a mapping or (discrete GPUs, KVT_VK_FORCE_STAGING=1) through staging copies. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "vk_impl.h"

static int env_flag(const char *name) {
    const char *v = getenv(name);
    return v && !strcmp(v, "1");
}

/* KVT_VK_MAX_BINDING lowers the device's storage binding limit (tests); it never raises it. */
/* KVT_VK_MEM_LIMIT=N: device buffers past N bytes in all fail as out of
 * device memory does, and the device-local heaps this device reports are N
 * bytes at most, so it looks like a device that small to the memory plan
 * (0 or unset: no limit). */
/* KVT_VK_HOST_LIMIT=N does the same for pinned host buffers. */
static void mem_limit_from_env(kvt_gpu_dev *d) {
    const char *v = getenv("KVT_VK_MEM_LIMIT");
    d->mem_limit = v && *v ? strtoull(v, NULL, 10) : 0;
    for (int h = 0; d->mem_limit && h < d->info.n_heaps; h++)
        if (d->info.heap_device_local[h] && d->info.heap_bytes[h] > d->mem_limit) d->info.heap_bytes[h] = d->mem_limit;
    v = getenv("KVT_VK_HOST_LIMIT");
    d->host_limit = v && *v ? strtoull(v, NULL, 10) : 0;
}

/* The largest single allocation (maxMemoryAllocationSize, Vulkan 1.1) and
 * buffer (maxBufferSize, 1.3) the device takes, for pinned buffers: T1's
 * arena is GBs, so it is made of several buffers no larger than this. A 1.0
 * device promises neither; 1 GiB is then assumed. */
static void max_pinned_of(kvt_gpu_dev *d) {
    d->max_pinned = 1ull << 30;
    if (d->info.api_version < VK_API_VERSION_1_1) return;
    VkPhysicalDeviceMaintenance4Properties m4 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    if (d->info.api_version >= VK_API_VERSION_1_3) m3.pNext = &m4;
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &m3};
    d->vi.f.vkGetPhysicalDeviceProperties2(d->pd, &p2);
    d->max_pinned = m3.maxMemoryAllocationSize;
    if (m4.maxBufferSize && m4.maxBufferSize < d->max_pinned) d->max_pinned = m4.maxBufferSize;
}

/* KVT_VK_INFLIGHT=1 makes every flush wait for its command list, as before
 * lists overlapped (to compare the two); 2, the default, lets the device run
 * one list while the next is recorded. */
static int inflight_from_env(kvt_gpu_dev *d) {
    const char *v = getenv("KVT_VK_INFLIGHT");
    d->inflight = KVT_VK_SLOTS;
    if (!v || !*v) return 0;
    if (strcmp(v, "1") && strcmp(v, "2"))
        return kvt_fail(KVT_EARG,
                        "KVT_VK_INFLIGHT must be 1 (wait for each command list) or 2 (record the next while one "
                        "runs), not '%s'",
                        v);
    d->inflight = v[0] - '0';
    return 0;
}

static int max_binding_from_env(kvt_gpu_dev *d) {
    mem_limit_from_env(d);
    d->max_binding = d->info.max_binding;
    const char *v = getenv("KVT_VK_MAX_BINDING");
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || x == 0)
        return kvt_fail(KVT_EARG, "KVT_VK_MAX_BINDING must be a positive number of bytes, not '%s'", v);
    if (x < d->max_binding) d->max_binding = x;
    return 0;
}

static int find_queue(kvt_gpu_dev *d) {
    uint32_t nq = 0;
    d->vi.f.vkGetPhysicalDeviceQueueFamilyProperties(d->pd, &nq, NULL);
    VkQueueFamilyProperties *q = kvt_xcalloc(nq ? nq : 1, sizeof *q);
    d->vi.f.vkGetPhysicalDeviceQueueFamilyProperties(d->pd, &nq, q);
    int found = -1;
    for (uint32_t k = 0; k < nq && found < 0; k++)
        if (q[k].queueFlags & VK_QUEUE_COMPUTE_BIT) found = (int)k;
    if (found >= 0) {
        d->qfam = (uint32_t)found;
        d->ts_mask = q[found].timestampValidBits >= 64 ? ~0ull : (1ull << q[found].timestampValidBits) - 1;
    }
    free(q);
    if (found < 0) return kvt_fail(KVT_EUNSUPPORTED, "Vulkan device '%s' has no compute queue", d->info.name);
    return 0;
}

/* 1 when the device offers VK_KHR_shader_integer_dot_product (the instance asks for Vulkan 1.2, so
 * the extension is how the quantized matmuls get OpSDot, even on a 1.3 device). */
static int has_int_dot_ext(kvt_gpu_dev *d) {
    uint32_t n = 0;
    if (d->vi.f.vkEnumerateDeviceExtensionProperties(d->pd, NULL, &n, NULL) != VK_SUCCESS || n == 0) return 0;
    VkExtensionProperties *e = kvt_xcalloc(n, sizeof *e);
    int found = 0;
    if (d->vi.f.vkEnumerateDeviceExtensionProperties(d->pd, NULL, &n, e) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++)
            found = !strcmp(e[i].extensionName, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
    free(e);
    return found;
}

/* Long: the device, then each object the recordings use, each checked. */
static int create_device(kvt_gpu_dev *d) {
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                   .queueFamilyIndex = d->qfam,
                                   .queueCount = 1,
                                   .pQueuePriorities = &prio};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci};
    /* 16-bit storage (core from 1.1) lets the KV kernels write one f16 element without touching its neighbour */
    VkPhysicalDevice16BitStorageFeatures s16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR idot = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR};
    const char *ext[2] = {VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME};
    kvt_vk_cm_feats cm;
    if (d->info.api_version >= VK_API_VERSION_1_1) {
        int has_idot = has_int_dot_ext(d);
        if (has_idot) s16.pNext = &idot;
        VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &s16};
        d->vi.f.vkGetPhysicalDeviceFeatures2(d->pd, &f2);
        d->storage16 = s16.storageBuffer16BitAccess != 0;
        d->int_dot = has_idot && idot.shaderIntegerDotProduct && !env_flag("KVT_VK_NO_INT_DOT");
        d->info.int_dot = d->int_dot;
        s16 = (VkPhysicalDevice16BitStorageFeatures){.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES,
                                                     .storageBuffer16BitAccess = (VkBool32)d->storage16};
        dci.pNext = &s16;
        if (d->int_dot) { /* the quantized matmuls' OpSDot */
            idot = (VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR){
                .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR,
                .shaderIntegerDotProduct = VK_TRUE};
            s16.pNext = &idot;
            dci.enabledExtensionCount = 1;
        }
        kvt_vk_cm_features(d, &cm, &dci, ext, &dci.enabledExtensionCount);
        dci.ppEnabledExtensionNames = dci.enabledExtensionCount ? ext : NULL;
    }
    VkResult r = d->vi.f.vkCreateDevice(d->pd, &dci, NULL, &d->dev);
    if (r != VK_SUCCESS) return kvt_vk_fail(r, "vkCreateDevice");
#define DEV(name) d->f.name = (PFN_##name)(uintptr_t)d->vi.f.vkGetDeviceProcAddr(d->dev, #name);
    KVT_VK_DEVICE_FNS(DEV)
#undef DEV
    d->f.vkGetDeviceQueue(d->dev, d->qfam, 0, &d->queue);
    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = d->qfam};
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, KVT_VK_MAX_SETS * KVT_GPU_MAX_BINDINGS};
    VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                      .maxSets = KVT_VK_MAX_SETS,
                                      .poolSizeCount = 1,
                                      .pPoolSizes = &ps};
    for (int i = 0; i < KVT_VK_SLOTS; i++) {
        struct kvt_vk_slot *s = &d->slot[i];
        if ((r = d->f.vkCreateCommandPool(d->dev, &pci, NULL, &s->cpool))) return kvt_vk_fail(r, "vkCreateCommandPool");
        VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                           .commandPool = s->cpool,
                                           .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                           .commandBufferCount = 1};
        if ((r = d->f.vkAllocateCommandBuffers(d->dev, &cai, &s->cmd)))
            return kvt_vk_fail(r, "vkAllocateCommandBuffers");
        if ((r = d->f.vkCreateFence(d->dev, &fci, NULL, &s->fence))) return kvt_vk_fail(r, "vkCreateFence");
        if ((r = d->f.vkCreateDescriptorPool(d->dev, &dpi, NULL, &s->dpool)))
            return kvt_vk_fail(r, "vkCreateDescriptorPool");
    }
    d->cmd = d->slot[0].cmd;
    d->dpool = d->slot[0].dpool;
    if (d->info.timestamps) {
        VkQueryPoolCreateInfo qpi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                     .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                     .queryCount = KVT_VK_MAX_QUERIES};
        if ((r = d->f.vkCreateQueryPool(d->dev, &qpi, NULL, &d->qpool))) return kvt_vk_fail(r, "vkCreateQueryPool");
    }
    return 0;
}

int kvt_gpu_open(int index, kvt_gpu_dev **out) {
    *out = NULL;
    kvt_gpu_dev *d = kvt_xcalloc(1, sizeof *d);
    int rc = kvt_vk_inst_new(&d->vi);
    if (rc) {
        free(d);
        return rc;
    }
    if (d->vi.n_phys == 0)
        rc = kvt_fail(-ENODEV,
                      "no Vulkan device found: the loader has no driver (install mesa-vulkan-drivers for "
                      "lavapipe, or the GPU vendor's Vulkan driver)");
    else if (index < 0 || (uint32_t)index >= d->vi.n_phys)
        rc = kvt_fail(KVT_EARG,
                      "Vulkan device %d does not exist: this machine has %u (0..%u; kvtier info --devices "
                      "lists them)",
                      index, d->vi.n_phys, d->vi.n_phys - 1);
    if (!rc) {
        d->pd = d->vi.phys[index];
        kvt_vk_describe(&d->vi, (uint32_t)index, &d->info);
        VkPhysicalDeviceProperties p;
        d->vi.f.vkGetPhysicalDeviceProperties(d->pd, &p);
        d->ts_period = p.limits.timestampPeriod;
        d->nonatomic = p.limits.nonCoherentAtomSize ? p.limits.nonCoherentAtomSize : 1;
        rc = kvt_vk_mm_toks(p.limits.maxComputeSharedMemorySize, &d->info.mm_toks);
        if (!rc)
            rc = kvt_vk_mm_rows(p.limits.maxComputeSharedMemorySize, d->info.mm_toks, &d->info.mm_rows,
                                &d->info.mm_rows_wide);
        d->vi.f.vkGetPhysicalDeviceMemoryProperties(d->pd, &d->mem);
        d->force_staging = env_flag("KVT_VK_FORCE_STAGING");
        if (!rc) rc = inflight_from_env(d);
        max_pinned_of(d);
        if (!rc) rc = max_binding_from_env(d);
        if (!rc) rc = kvt_vk_cm_select(d);
    }
    if (!rc) rc = find_queue(d);
    if (!rc) rc = create_device(d);
    if (rc) {
        kvt_fail_prefix(rc, "Vulkan device %d: ", index);
        kvt_gpu_close(d);
        return rc;
    }
    *out = d;
    return 0;
}

void kvt_gpu_close(kvt_gpu_dev *d) {
    if (!d) return;
    kvt_gpu_buf_free(d->stage);
    if (d->dev) {
        if (d->qpool) d->f.vkDestroyQueryPool(d->dev, d->qpool, NULL);
        /* nothing of ours may still run when its objects go */
        kvt_vk_wait_slots(d, "gpu close");
        for (int i = 0; i < KVT_VK_SLOTS; i++) {
            struct kvt_vk_slot *s = &d->slot[i];
            if (s->dpool) d->f.vkDestroyDescriptorPool(d->dev, s->dpool, NULL);
            if (s->fence) d->f.vkDestroyFence(d->dev, s->fence, NULL);
            if (s->cpool) d->f.vkDestroyCommandPool(d->dev, s->cpool, NULL);
        }
        d->f.vkDestroyDevice(d->dev, NULL);
    }
    kvt_vk_inst_free(&d->vi);
    free(d);
}

const kvt_gpu_info *kvt_gpu_dev_info(const kvt_gpu_dev *d) { return &d->info; }
uint64_t kvt_gpu_max_binding(const kvt_gpu_dev *d) { return d->max_binding; }
uint64_t kvt_gpu_max_pinned(const kvt_gpu_dev *d) { return d->max_pinned; }
int kvt_gpu_validating(const kvt_gpu_dev *d) { return d->vi.validation; }

/* A memory type among bits with all of want, preferring one that also has prefer; -1 if none. */
static int mem_type(const kvt_gpu_dev *d, uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags prefer) {
    int any = -1;
    for (uint32_t i = 0; i < d->mem.memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = d->mem.memoryTypes[i].propertyFlags;
        if (!(bits & (1u << i)) || (f & want) != want) continue;
        if ((f & prefer) == prefer) return (int)i;
        if (any < 0) any = (int)i;
    }
    return any;
}

int kvt_gpu_staged(const kvt_gpu_dev *d) {
    if (d->force_staging) return 1;
    const VkMemoryPropertyFlags both = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
    return mem_type(d, ~0u, both, 0) < 0;
}

/* Whether a pinned buffer of bytes may be made: within one allocation, and
 * within KVT_VK_HOST_LIMIT. */
static int pinned_fits(const kvt_gpu_dev *d, uint64_t bytes) {
    if (bytes > d->max_pinned)
        return kvt_fail(KVT_ELIMIT,
                        "pinned host buffer of %llu bytes is over the device's largest allocation of %llu bytes "
                        "(maxMemoryAllocationSize, maxBufferSize)",
                        (unsigned long long)bytes, (unsigned long long)d->max_pinned);
    if (d->host_limit && d->host_bytes + bytes > d->host_limit)
        return kvt_fail(-ENOMEM,
                        "pinned host buffer of %llu bytes: the device cannot map more host memory (%llu of the %llu "
                        "bytes KVT_VK_HOST_LIMIT allows are in use)",
                        (unsigned long long)bytes, (unsigned long long)d->host_bytes, (unsigned long long)d->host_limit);
    return 0;
}

/* Long: create, pick the memory type, allocate, bind, map; each step undone on failure. */
int kvt_gpu_buf_new(kvt_gpu_dev *d, kvt_gpu_buf_kind kind, uint64_t bytes, kvt_gpu_buf **out) {
    *out = NULL;
    if (bytes == 0) return kvt_fail(KVT_EARG, "gpu buffer: size 0");
    if (kind == KVT_GPU_DEVICE && bytes > d->max_binding)
        return kvt_fail(KVT_ELIMIT,
                        "gpu buffer of %llu bytes is over the device's largest storage binding of %llu "
                        "bytes (maxStorageBufferRange%s): split the tensor",
                        (unsigned long long)bytes, (unsigned long long)d->max_binding,
                        d->max_binding < d->info.max_binding ? ", lowered by KVT_VK_MAX_BINDING" : "");
    if (kind == KVT_GPU_DEVICE && d->mem_limit && d->dev_bytes + bytes > d->mem_limit)
        return kvt_fail(-ENOMEM,
                        "gpu buffer of %llu bytes: out of device memory (%llu of the %llu bytes "
                        "KVT_VK_MEM_LIMIT allows are in use)",
                        (unsigned long long)bytes, (unsigned long long)d->dev_bytes, (unsigned long long)d->mem_limit);
    int rc = kind == KVT_GPU_PINNED ? pinned_fits(d, bytes) : 0;
    if (rc) return rc;
    kvt_gpu_buf *b = kvt_xcalloc(1, sizeof *b);
    b->d = d;
    b->bytes = bytes;
    b->kind = kind;
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                              .size = bytes,
                              .usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    if (kind == KVT_GPU_DEVICE) bci.usage |= VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
    VkResult r = d->f.vkCreateBuffer(d->dev, &bci, NULL, &b->buf);
    if (r != VK_SUCCESS) rc = kvt_vk_fail(r, "vkCreateBuffer");
    VkMemoryRequirements req = {0};
    int t = -1;
    if (!rc) {
        d->f.vkGetBufferMemoryRequirements(d->dev, b->buf, &req);
        if (kind == KVT_GPU_DEVICE)
            t = mem_type(d, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT,
                         d->force_staging ? 0 : VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
        else if (kind == KVT_GPU_PINNED) /* the host reads it too (demotion to disk): cached if there is such */
            t = mem_type(d, req.memoryTypeBits,
                         VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                         VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
        else
            t = mem_type(d, req.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
                         VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
        if (t < 0)
            rc = kvt_fail(KVT_EUNSUPPORTED, "gpu buffer: the device has no %s memory type",
                          kind == KVT_GPU_DEVICE       ? "device-local"
                              : kind == KVT_GPU_PINNED ? "host-visible, host-coherent"
                                                       : "host-visible");
    }
    if (!rc) {
        VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                    .allocationSize = req.size,
                                    .memoryTypeIndex = (uint32_t)t};
        r = d->f.vkAllocateMemory(d->dev, &mai, NULL, &b->mem);
        if (r != VK_SUCCESS) rc = kvt_vk_fail(r, "vkAllocateMemory");
        else if ((r = d->f.vkBindBufferMemory(d->dev, b->buf, b->mem, 0))) rc = kvt_vk_fail(r, "vkBindBufferMemory");
    }
    VkMemoryPropertyFlags mf = t >= 0 ? d->mem.memoryTypes[t].propertyFlags : 0;
    int map = kind != KVT_GPU_DEVICE || (!d->force_staging && (mf & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT));
    if (!rc && map) {
        if ((r = d->f.vkMapMemory(d->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->host))) rc = kvt_vk_fail(r, "vkMapMemory");
        b->coherent = (mf & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) != 0;
    }
    if (rc) {
        kvt_fail_prefix(rc, "gpu buffer of %llu bytes: ", (unsigned long long)bytes);
        kvt_gpu_buf_free(b);
        return rc;
    }
    if (kind == KVT_GPU_DEVICE) d->dev_bytes += bytes, b->counted = 1;
    if (kind == KVT_GPU_PINNED) d->host_bytes += bytes, b->counted = 1;
    *out = b;
    return 0;
}

void kvt_gpu_buf_free(kvt_gpu_buf *b) {
    if (!b) return;
    kvt_gpu_dev *d = b->d;
    if (b->counted) *(b->kind == KVT_GPU_PINNED ? &d->host_bytes : &d->dev_bytes) -= b->bytes;
    if (b->host) d->f.vkUnmapMemory(d->dev, b->mem);
    if (b->buf) d->f.vkDestroyBuffer(d->dev, b->buf, NULL);
    if (b->mem) d->f.vkFreeMemory(d->dev, b->mem, NULL);
    free(b);
}

uint64_t kvt_gpu_buf_size(const kvt_gpu_buf *b) { return b->bytes; }
void *kvt_gpu_buf_host(kvt_gpu_buf *b) { return b->kind != KVT_GPU_DEVICE ? b->host : NULL; }

/* Flushes (to the device) or invalidates (for the host) a mapped range that is not coherent. */
static int sync_range(kvt_gpu_buf *b, uint64_t off, uint64_t n, int to_device) {
    if (b->coherent) return 0;
    kvt_gpu_dev *d = b->d;
    uint64_t a = d->nonatomic, lo = off / a * a, hi = (off + n + a - 1) / a * a;
    VkMappedMemoryRange mr = {.sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE,
                              .memory = b->mem,
                              .offset = lo,
                              .size = hi - lo};
    if (hi >= b->bytes) mr.size = VK_WHOLE_SIZE;
    VkResult r = to_device ? d->f.vkFlushMappedMemoryRanges(d->dev, 1, &mr)
                           : d->f.vkInvalidateMappedMemoryRanges(d->dev, 1, &mr);
    return r == VK_SUCCESS ? 0
                           : kvt_vk_fail(r, to_device ? "vkFlushMappedMemoryRanges" : "vkInvalidateMappedMemoryRanges");
}

static int check_transfer(kvt_gpu_dev *d, kvt_gpu_buf *b, uint64_t off, uint64_t n, const char *what) {
    if (d->recording) return kvt_fail(KVT_EARG, "gpu %s: called between kvt_gpu_begin and kvt_gpu_submit", what);
    if (off > b->bytes || n > b->bytes - off)
        return kvt_fail(KVT_EARG, "gpu %s: bytes [%llu, +%llu) are outside the buffer of %llu", what,
                        (unsigned long long)off, (unsigned long long)n, (unsigned long long)b->bytes);
    if (!b->host && !d->stage) return kvt_gpu_buf_new(d, KVT_GPU_STAGING, KVT_VK_STAGE_BYTES, &d->stage);
    return 0;
}

int kvt_gpu_upload(kvt_gpu_dev *d, kvt_gpu_buf *b, uint64_t off, const void *src, uint64_t n) {
    int rc = check_transfer(d, b, off, n, "upload");
    if (rc || n == 0) return rc;
    if (b->host) {
        memcpy((char *)b->host + off, src, n);
        return sync_range(b, off, n, 1);
    }
    for (uint64_t done = 0; done < n && !rc;) {
        uint64_t k = KVT_MIN(n - done, d->stage->bytes);
        memcpy(d->stage->host, (const char *)src + done, k);
        rc = sync_range(d->stage, 0, k, 1);
        kvt_gpu_region reg = {0, off + done, k};
        if (!rc) rc = kvt_gpu_copy(d, d->stage, b, &reg, 1);
        done += k;
    }
    return rc;
}

int kvt_gpu_download(kvt_gpu_dev *d, kvt_gpu_buf *b, uint64_t off, void *dst, uint64_t n) {
    int rc = check_transfer(d, b, off, n, "download");
    if (rc || n == 0) return rc;
    if (b->host) {
        rc = sync_range(b, off, n, 0);
        if (!rc) memcpy(dst, (const char *)b->host + off, n);
        return rc;
    }
    for (uint64_t done = 0; done < n && !rc;) {
        uint64_t k = KVT_MIN(n - done, d->stage->bytes);
        kvt_gpu_region reg = {off + done, 0, k};
        rc = kvt_gpu_copy(d, b, d->stage, &reg, 1);
        if (!rc) rc = sync_range(d->stage, 0, k, 0);
        if (!rc) memcpy((char *)dst + done, d->stage->host, k);
        done += k;
    }
    return rc;
}
