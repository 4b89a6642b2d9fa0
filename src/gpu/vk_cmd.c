// SPDX-License-Identifier: MIT
/* Compute pipelines of the embedded shaders, and the one command list a device
 * records at a time: copies, dispatches, barriers, timestamps, flushes that
 * queue what is recorded so far and go on in a second command list, then a
 * submit that waits for all of it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "vk_impl.h"

static const kvt_vk_spirv *find_shader(const char *name) {
    for (size_t i = 0; i < kvt_vk_n_shaders; i++)
        if (!strcmp(kvt_vk_shaders[i].name, name)) return &kvt_vk_shaders[i];
    return NULL;
}

/* Destroys what pipe_build made of p (any of it), leaving p as kvt_vk_pipe_lazy made it. */
static void pipe_unbuild(kvt_gpu_pipe *p) {
    kvt_gpu_dev *d = p->d;
    if (p->pipe) d->f.vkDestroyPipeline(d->dev, p->pipe, NULL);
    if (p->layout) d->f.vkDestroyPipelineLayout(d->dev, p->layout, NULL);
    if (p->dsl) d->f.vkDestroyDescriptorSetLayout(d->dev, p->dsl, NULL);
    if (p->module) d->f.vkDestroyShaderModule(d->dev, p->module, NULL);
    p->pipe = VK_NULL_HANDLE;
    p->layout = VK_NULL_HANDLE;
    p->dsl = VK_NULL_HANDLE;
    p->module = VK_NULL_HANDLE;
}

/* Long: module, set layout, pipeline layout, pipeline; each checked, and on failure all of them undone, so that
 * a later use tries again. */
static int pipe_build(kvt_gpu_pipe *p) {
    kvt_gpu_dev *d = p->d;
    const int n_bufs = p->n_bufs;
    VkShaderModuleCreateInfo smi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                    .codeSize = p->spirv->bytes,
                                    .pCode = (const uint32_t *)(const void *)p->spirv->code};
    VkResult r = d->f.vkCreateShaderModule(d->dev, &smi, NULL, &p->module);
    VkDescriptorSetLayoutBinding b[KVT_GPU_MAX_BINDINGS];
    for (int i = 0; i < n_bufs; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dli = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                           .bindingCount = (uint32_t)n_bufs,
                                           .pBindings = b};
    if (r == VK_SUCCESS) r = d->f.vkCreateDescriptorSetLayout(d->dev, &dli, NULL, &p->dsl);
    VkPushConstantRange pr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, p->push_bytes};
    VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .setLayoutCount = 1,
                                      .pSetLayouts = &p->dsl,
                                      .pushConstantRangeCount = p->push_bytes ? 1 : 0,
                                      .pPushConstantRanges = &pr};
    if (r == VK_SUCCESS) r = d->f.vkCreatePipelineLayout(d->dev, &pli, NULL, &p->layout);
    VkSpecializationMapEntry me[KVT_VK_MAX_SPEC];
    for (uint32_t i = 0; i < p->n_spec; i++) me[i] = (VkSpecializationMapEntry){i, i * 4, 4};
    VkSpecializationInfo si = {p->n_spec, me, p->n_spec * 4, p->spec};
    VkComputePipelineCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                                       .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                                                 .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                                                 .module = p->module,
                                                 .pName = "main",
                                                 .pSpecializationInfo = p->n_spec ? &si : NULL},
                                       .layout = p->layout};
    if (r == VK_SUCCESS) r = d->f.vkCreateComputePipelines(d->dev, VK_NULL_HANDLE, 1, &cpi, NULL, &p->pipe);
    if (r == VK_SUCCESS) return 0;
    int rc = kvt_vk_fail(r, "gpu pipeline");
    kvt_fail_prefix(rc, "shader %s: ", p->spirv->name);
    pipe_unbuild(p);
    return rc;
}

int kvt_vk_pipe_lazy_spec(kvt_gpu_dev *d, const char *name, int n_bufs, uint32_t push_bytes, const uint32_t *spec,
                          uint32_t n_spec, kvt_gpu_pipe **out) {
    *out = NULL;
    const kvt_vk_spirv *s = find_shader(name);
    if (!s) return kvt_fail(KVT_ENOTFOUND, "gpu pipeline: no shader '%s' is built in", name);
    if (n_bufs < 0 || n_bufs > KVT_GPU_MAX_BINDINGS || push_bytes > KVT_GPU_MAX_PUSH || push_bytes % 4 ||
        n_spec > KVT_VK_MAX_SPEC)
        return kvt_fail(KVT_EARG,
                        "gpu pipeline '%s': %d buffers (at most %d), %u push bytes (a multiple of 4, at most "
                        "%d), %u specialization constants (at most %d)",
                        name, n_bufs, KVT_GPU_MAX_BINDINGS, push_bytes, KVT_GPU_MAX_PUSH, n_spec, KVT_VK_MAX_SPEC);
    kvt_gpu_pipe *p = kvt_xcalloc(1, sizeof *p);
    p->d = d;
    p->spirv = s;
    p->n_bufs = n_bufs;
    p->push_bytes = push_bytes;
    p->n_spec = n_spec;
    if (n_spec) memcpy(p->spec, spec, n_spec * sizeof *spec);
    *out = p;
    return 0;
}

int kvt_vk_pipe_lazy(kvt_gpu_dev *d, const char *name, int n_bufs, uint32_t push_bytes, kvt_gpu_pipe **out) {
    return kvt_vk_pipe_lazy_spec(d, name, n_bufs, push_bytes, NULL, 0, out);
}

int kvt_vk_pipe_new_spec(kvt_gpu_dev *d, const char *name, int n_bufs, uint32_t push_bytes, const uint32_t *spec,
                         uint32_t n_spec, kvt_gpu_pipe **out) {
    int rc = kvt_vk_pipe_lazy_spec(d, name, n_bufs, push_bytes, spec, n_spec, out);
    if (!rc && (rc = pipe_build(*out)) != 0) {
        kvt_gpu_pipe_free(*out);
        *out = NULL;
    }
    return rc;
}

int kvt_gpu_pipe_new(kvt_gpu_dev *d, const char *name, int n_bufs, uint32_t push_bytes, kvt_gpu_pipe **out) {
    return kvt_vk_pipe_new_spec(d, name, n_bufs, push_bytes, NULL, 0, out);
}

void kvt_gpu_pipe_free(kvt_gpu_pipe *p) {
    if (!p) return;
    pipe_unbuild(p);
    free(p);
}

static int need_recording(kvt_gpu_dev *d, const char *what) {
    return d->recording ? 0 : kvt_fail(KVT_EARG, "gpu %s: not between kvt_gpu_begin and kvt_gpu_submit", what);
}

/* Makes slot i the one recorded into: waits for what it ran before, resets its pools, begins its list. */
static int slot_start(kvt_gpu_dev *d, int i) {
    struct kvt_vk_slot *s = &d->slot[i];
    VkResult r = VK_SUCCESS;
    if (s->busy) {
        r = d->f.vkWaitForFences(d->dev, 1, &s->fence, VK_TRUE, UINT64_MAX);
        s->busy = 0;
        if (r == VK_ERROR_DEVICE_LOST) d->lost = 1;
    }
    if (r == VK_SUCCESS) r = d->f.vkResetCommandPool(d->dev, s->cpool, 0);
    if (r == VK_SUCCESS) r = d->f.vkResetDescriptorPool(d->dev, s->dpool, 0);
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if (r == VK_SUCCESS) r = d->f.vkBeginCommandBuffer(s->cmd, &bi);
    if (r != VK_SUCCESS) return kvt_vk_fail(r, "gpu begin");
    d->cur = i;
    d->cmd = s->cmd;
    d->dpool = s->dpool;
    return 0;
}

int kvt_vk_wait_slots(kvt_gpu_dev *d, const char *what) {
    VkFence f[KVT_VK_SLOTS];
    uint32_t n = 0;
    for (int i = 0; i < KVT_VK_SLOTS; i++)
        if (d->slot[i].busy) f[n++] = d->slot[i].fence, d->slot[i].busy = 0;
    VkResult r = n ? d->f.vkWaitForFences(d->dev, n, f, VK_TRUE, UINT64_MAX) : VK_SUCCESS;
    if (r == VK_ERROR_DEVICE_LOST) d->lost = 1;
    return r == VK_SUCCESS ? 0 : kvt_vk_fail(r, what);
}

int kvt_gpu_begin(kvt_gpu_dev *d) {
    if (d->recording) return kvt_fail(KVT_EARG, "gpu begin: a recording is already open");
    int rc = kvt_vk_wait_slots(d, "gpu begin");
    if (!rc) rc = slot_start(d, d->cur);
    if (rc) return rc;
    if (d->qpool) d->f.vkCmdResetQueryPool(d->cmd, d->qpool, 0, KVT_VK_MAX_QUERIES);
    d->n_queries = 0;
    d->n_sync++;
    d->recording = 1;
    return 0;
}

int kvt_gpu_rec_copy(kvt_gpu_dev *d, kvt_gpu_buf *src, kvt_gpu_buf *dst, const kvt_gpu_region *r, size_t n) {
    int rc = need_recording(d, "copy");
    if (rc || n == 0) return rc;
    VkBufferCopy *c = kvt_xcalloc(n, sizeof *c);
    for (size_t i = 0; i < n && !rc; i++) {
        if (r[i].bytes == 0 || r[i].src_off > src->bytes || r[i].bytes > src->bytes - r[i].src_off ||
            r[i].dst_off > dst->bytes || r[i].bytes > dst->bytes - r[i].dst_off)
            rc = kvt_fail(KVT_EARG,
                          "gpu copy: region %zu (%llu bytes from %llu to %llu) is empty or outside a buffer "
                          "(source %llu, destination %llu bytes)",
                          i, (unsigned long long)r[i].bytes, (unsigned long long)r[i].src_off,
                          (unsigned long long)r[i].dst_off, (unsigned long long)src->bytes,
                          (unsigned long long)dst->bytes);
        c[i] = (VkBufferCopy){r[i].src_off, r[i].dst_off, r[i].bytes};
    }
    if (!rc) d->f.vkCmdCopyBuffer(d->cmd, src->buf, dst->buf, (uint32_t)n, c);
    free(c);
    return rc;
}

/* Long: checks, one descriptor set per dispatch, then bind, push and dispatch. */
int kvt_gpu_rec_dispatch(kvt_gpu_dev *d, kvt_gpu_pipe *p, kvt_gpu_buf *const *bufs, const void *push,
                         const uint32_t groups[3]) {
    int rc = need_recording(d, "dispatch");
    if (rc) return rc;
    for (int i = 0; i < p->n_bufs; i++)
        if (!bufs[i] || bufs[i]->kind != KVT_GPU_DEVICE)
            return kvt_fail(KVT_EARG, "gpu dispatch: binding %d is not a device buffer", i);
    /* a pipeline made by kvt_vk_pipe_lazy is compiled here, on its first dispatch */
    if (!p->pipe && (rc = pipe_build(p)) != 0) return rc;
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = d->dpool,
                                      .descriptorSetCount = 1,
                                      .pSetLayouts = &p->dsl};
    VkDescriptorSet set;
    VkResult r = d->f.vkAllocateDescriptorSets(d->dev, &ai, &set);
    if (r == VK_ERROR_OUT_OF_POOL_MEMORY || r == VK_ERROR_FRAGMENTED_POOL)
        return kvt_fail(KVT_ELIMIT, "gpu dispatch: more than %d dispatches in one recording", KVT_VK_MAX_SETS);
    if (r != VK_SUCCESS) return kvt_vk_fail(r, "vkAllocateDescriptorSets");
    VkDescriptorBufferInfo bi[KVT_GPU_MAX_BINDINGS];
    VkWriteDescriptorSet w[KVT_GPU_MAX_BINDINGS];
    for (int i = 0; i < p->n_bufs; i++) {
        bi[i] = (VkDescriptorBufferInfo){bufs[i]->buf, 0, VK_WHOLE_SIZE};
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstSet = set,
                                      .dstBinding = (uint32_t)i,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &bi[i]};
    }
    d->f.vkUpdateDescriptorSets(d->dev, (uint32_t)p->n_bufs, w, 0, NULL);
    d->f.vkCmdBindPipeline(d->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipe);
    d->f.vkCmdBindDescriptorSets(d->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->layout, 0, 1, &set, 0, NULL);
    if (p->push_bytes) d->f.vkCmdPushConstants(d->cmd, p->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, p->push_bytes, push);
    d->f.vkCmdDispatch(d->cmd, groups[0], groups[1], groups[2]);
    return 0;
}

static void barrier(kvt_gpu_dev *d, VkPipelineStageFlags dst_stage, VkAccessFlags dst_access) {
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = dst_access};
    d->f.vkCmdPipelineBarrier(d->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, dst_stage,
                              0, 1, &mb, 0, NULL, 0, NULL);
}

int kvt_gpu_rec_barrier(kvt_gpu_dev *d) {
    int rc = need_recording(d, "barrier");
    if (!rc) d->n_sync++;
    if (!rc)
        barrier(d, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                    VK_ACCESS_TRANSFER_WRITE_BIT);
    return rc;
}

int kvt_gpu_rec_timestamp(kvt_gpu_dev *d, uint32_t *slot) {
    int rc = need_recording(d, "timestamp");
    if (rc) return rc;
    if (!d->qpool) return kvt_fail(KVT_EUNSUPPORTED, "gpu timestamp: the compute queue of '%s' has none", d->info.name);
    if (d->n_queries >= KVT_VK_MAX_QUERIES)
        return kvt_fail(KVT_ELIMIT, "gpu timestamp: more than %d in one recording", KVT_VK_MAX_QUERIES);
    d->f.vkCmdWriteTimestamp(d->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, d->qpool, d->n_queries);
    *slot = d->n_queries++;
    return 0;
}

void kvt_gpu_abort(kvt_gpu_dev *d) {
    if (!d || !d->recording) return;
    d->f.vkEndCommandBuffer(d->cmd);
    d->recording = 0;
    /* lists flushed before still run: the caller may free or reuse what they use once this returns */
    kvt_vk_wait_slots(d, "gpu abort");
}

/* KVT_VK_LOSE_AFTER=N: submission N and every one after it fail as a lost
 * device does, to test what the engine does then. */
static int lose_injected(kvt_gpu_dev *d) {
    const char *v = getenv("KVT_VK_LOSE_AFTER");
    d->n_submits++;
    if (v && *v && d->n_submits >= strtoull(v, NULL, 10)) d->lost = 1;
    return d->lost;
}

/* Ends the open list and queues it on its slot's fence; on failure nothing is open and nothing of ours runs. */
static int end_and_queue(kvt_gpu_dev *d, const char *what) {
    if (lose_injected(d)) {
        kvt_gpu_abort(d);
        return kvt_fail(-EIO, "%s: the device '%s' was lost (VK_ERROR_DEVICE_LOST, injected by KVT_VK_LOSE_AFTER)",
                        what, d->info.name);
    }
    struct kvt_vk_slot *s = &d->slot[d->cur];
    VkResult r = d->f.vkEndCommandBuffer(d->cmd);
    d->recording = 0;
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &d->cmd};
    if (r == VK_SUCCESS) r = d->f.vkResetFences(d->dev, 1, &s->fence);
    if (r == VK_SUCCESS) r = d->f.vkQueueSubmit(d->queue, 1, &si, s->fence);
    if (r == VK_SUCCESS) s->busy = 1;
    if (r == VK_ERROR_DEVICE_LOST) d->lost = 1;
    if (r == VK_SUCCESS) return 0;
    kvt_vk_wait_slots(d, what);
    return kvt_vk_fail(r, what);
}

int kvt_gpu_flush(kvt_gpu_dev *d) {
    int rc = need_recording(d, "flush");
    if (rc) return rc;
    /* what this list wrote is visible to the next one, as after kvt_gpu_rec_barrier */
    kvt_gpu_rec_barrier(d);
    rc = end_and_queue(d, "gpu flush");
    /* with KVT_VK_INFLIGHT=1 the list is waited for here, as kvt_gpu_submit waits */
    if (!rc && d->inflight < 2) rc = kvt_vk_wait_slots(d, "gpu flush");
    /* the next list goes to the other slot, once the list that slot ran last is done */
    if (!rc) rc = slot_start(d, (d->cur + 1) % KVT_VK_SLOTS);
    if (rc) {
        kvt_vk_wait_slots(d, "gpu flush");
        return rc;
    }
    d->n_sync++;
    d->recording = 1;
    return 0;
}

int kvt_gpu_submit(kvt_gpu_dev *d) {
    int rc = need_recording(d, "submit");
    if (rc) return rc;
    /* what the device wrote is visible to the host once the fence is signalled */
    barrier(d, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    rc = end_and_queue(d, "gpu submit");
    return rc ? rc : kvt_vk_wait_slots(d, "gpu submit");
}

int kvt_gpu_lost(const kvt_gpu_dev *d) { return d && d->lost; }

int kvt_gpu_elapsed_ns(kvt_gpu_dev *d, uint32_t from, uint32_t to, double *ns) {
    if (!d->qpool || from >= d->n_queries || to >= d->n_queries || d->recording)
        return kvt_fail(KVT_EARG, "gpu timestamps %u and %u: not both written by the last submission", from, to);
    uint64_t t[2];
    VkResult r = d->f.vkGetQueryPoolResults(d->dev, d->qpool, from, 1, sizeof t[0], &t[0], sizeof t[0],
                                            VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    if (r == VK_SUCCESS)
        r = d->f.vkGetQueryPoolResults(d->dev, d->qpool, to, 1, sizeof t[1], &t[1], sizeof t[1],
                                       VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    if (r != VK_SUCCESS) return kvt_vk_fail(r, "vkGetQueryPoolResults");
    *ns = (double)((t[1] - t[0]) & d->ts_mask) * d->ts_period;
    return 0;
}

int kvt_gpu_copy(kvt_gpu_dev *d, kvt_gpu_buf *src, kvt_gpu_buf *dst, const kvt_gpu_region *r, size_t n) {
    int rc = kvt_gpu_begin(d);
    if (rc) return rc;
    rc = kvt_gpu_rec_copy(d, src, dst, r, n);
    if (rc) {
        kvt_gpu_abort(d);
        return rc;
    }
    return kvt_gpu_submit(d);
}
