// SPDX-License-Identifier: MIT
/* The engine's page I/O (engine.h): runs of whole pages copied between the
 * pool and host buffers, and the host memory the cache keeps pages in. On the
 * CPU a run is a loop of memcpy; on a device the device's share of each page
 * is one batched copy (engine_gpu_run.c), and with partial offload the share
 * of the layers the CPU runs follows by memcpy. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "engine_impl.h"

static int page_valid(const kvt_engine *e, int32_t id) { return id >= 0 && id < e->p.n_pages; }

/* 0 if entry i of a run names a page of the pool, else KVT_EARG naming it. */
static int run_page_ok(const kvt_engine *e, int32_t id, size_t i) {
    if (page_valid(e, id)) return 0;
    return kvt_fail(KVT_EARG, "page I/O: page id %d (entry %zu of the run) outside the pool of %d pages", id, i,
                    e->p.n_pages);
}

/* The share of page id that page_mem holds (a whole page on the CPU, the
 * layers the CPU runs with partial offload), and its bytes. */
static uint8_t *host_share(const kvt_engine *e, int32_t id) { return e->page_mem + (size_t)id * e->page_stride; }
static size_t host_share_bytes(const kvt_engine *e) { return e->page_mem ? e->page_bytes - e->dev_page_bytes : 0; }

/* On the CPU each run is a loop of memcpy. On a device the device's share of
 * the run is one batched copy, and with partial offload the host's share of
 * each page (the layers the CPU runs) goes by memcpy after it. */
int kvt_pages_copy_out(const kvt_engine *e, const kvt_page_out *io, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (run_page_ok(e, io[i].page, i)) return KVT_EARG;
    int rc = e->gpu && n ? kvt_eng_gpu_pages_out(e->gpu, io, n, e->dev_page_bytes) : 0;
    const size_t hb = host_share_bytes(e);
    for (size_t i = 0; i < n && hb && !rc; i++)
        memcpy((uint8_t *)io[i].host + e->dev_page_bytes, host_share(e, io[i].page), hb);
    return rc;
}

int kvt_pages_copy_in(kvt_engine *e, const kvt_page_in *io, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (run_page_ok(e, io[i].page, i)) return KVT_EARG;
    int rc = e->gpu && n ? kvt_eng_gpu_pages_in(e->gpu, io, n, e->dev_page_bytes) : 0;
    const size_t hb = host_share_bytes(e);
    for (size_t i = 0; i < n && hb && !rc; i++)
        memcpy(host_share(e, io[i].page), (const uint8_t *)io[i].host + e->dev_page_bytes, hb);
    return rc;
}

int kvt_pages_copy(kvt_engine *e, const int32_t *dst, const int32_t *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (run_page_ok(e, dst[i], i) || run_page_ok(e, src[i], i)) return KVT_EARG;
    int rc = e->gpu && n ? kvt_eng_gpu_pages_copy(e->gpu, dst, src, n, e->dev_page_bytes) : 0;
    const size_t hb = host_share_bytes(e);
    for (size_t i = 0; i < n && hb && !rc; i++)
        if (dst[i] != src[i]) memcpy(host_share(e, dst[i]), host_share(e, src[i]), hb);
    return rc;
}

void *kvt_pages_stage(kvt_engine *e, size_t n) {
    return e->gpu && n ? kvt_eng_gpu_stage(e->gpu, n, e->page_bytes) : NULL;
}

void *kvt_engine_host_alloc(kvt_engine *e, size_t bytes) {
    if (e->gpu) return kvt_eng_gpu_host_alloc(e->gpu, bytes);
    void *p = bytes && bytes <= SIZE_MAX - 63 ? aligned_alloc(64, (bytes + 63) / 64 * 64) : NULL;
    if (!p) kvt_fail(-ENOMEM, "out of host memory for %zu bytes", bytes);
    return p;
}

void kvt_engine_host_free(kvt_engine *e, void *p) {
    if (e->gpu) kvt_eng_gpu_host_free(e->gpu, p);
    else free(p);
}

size_t kvt_engine_host_max(const kvt_engine *e) { return e->gpu ? kvt_eng_gpu_host_max(e->gpu) : SIZE_MAX; }

void *kvt_page_host(kvt_engine *e, int32_t id) {
    return e->no_host_pages || !page_valid(e, id) ? NULL : kvt_page_data(e, id);
}
const void *kvt_page_host_const(const kvt_engine *e, int32_t id) {
    return e->no_host_pages || !page_valid(e, id) ? NULL : kvt_page_data_const(e, id);
}
void kvt_engine_set_host_pages(kvt_engine *e, int on) { e->no_host_pages = !on || e->page_mem == NULL || e->gpu; }
