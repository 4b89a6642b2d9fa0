// SPDX-License-Identifier: MIT
/* The GPU device layer on whatever Vulkan device 0 is (lavapipe here): the
 * listing, open errors, buffer round trips through a mapping and through
 * staging copies (KVT_VK_FORCE_STAGING=1), one submission of many copy
 * regions, timestamps, flushed command lists that run while the next is
 * recorded, a lowered storage binding limit refused, out of device memory,
 * and no validation message on the way but a deliberate one. Skips (77)
 * without a device. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "gpu_test.h"

static uint32_t rng = 12345;
static void fill(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)((rng = rng * 1103515245u + 12345u) >> 16);
}

static void test_list(void) {
    kvt_gpu_info *info;
    int n;
    CHECK(kvt_gpu_list(&info, &n) == 0);
    CHECK(n >= 1);
    for (int i = 0; i < n; i++) {
        CHECK(info[i].index == i);
        CHECK(info[i].name[0] != 0);
        CHECK(info[i].max_binding > 0);
        CHECK(info[i].n_heaps >= 1);
        CHECK(info[i].subgroup_size >= 1);
    }
    kvt_gpu_dev *d = (kvt_gpu_dev *)1;
    CHECK(kvt_gpu_open(n, &d) == KVT_EARG);
    CHECKF(strstr(kvt_errmsg(), "does not exist"), "%s", kvt_errmsg());
    CHECK(d == NULL);
    CHECK(kvt_gpu_open(-1, &d) == KVT_EARG);
    free(info);
}

/* Uploads a pattern into a device buffer at an odd offset, reads it back, and
 * does the same through a buffer larger than the device's staging chunk. */
static void round_trip(kvt_gpu_dev *d, uint64_t bytes) {
    kvt_gpu_buf *b;
    CHECK(kvt_gpu_buf_new(d, KVT_GPU_DEVICE, bytes, &b) == 0);
    if (!b) return;
    CHECK(kvt_gpu_buf_host(b) == NULL);
    uint8_t *src = malloc(bytes), *dst = calloc(1, bytes);
    fill(src, bytes);
    CHECK(kvt_gpu_upload(d, b, 0, src, bytes) == 0);
    CHECK(kvt_gpu_download(d, b, 0, dst, bytes) == 0);
    CHECKF(memcmp(src, dst, bytes) == 0, "%llu bytes", (unsigned long long)bytes);
    memset(dst, 0, bytes);
    CHECK(kvt_gpu_upload(d, b, 3, src, bytes - 7) == 0);
    CHECK(kvt_gpu_download(d, b, 3, dst, bytes - 7) == 0);
    CHECK(memcmp(src, dst, bytes - 7) == 0);
    CHECK(kvt_gpu_upload(d, b, bytes - 1, src, 2) == KVT_EARG);
    CHECKF(strstr(kvt_errmsg(), "outside the buffer"), "%s", kvt_errmsg());
    free(src);
    free(dst);
    kvt_gpu_buf_free(b);
}

/* Many regions, one submission, bracketed by timestamps. */
static void batched_copy(kvt_gpu_dev *d) {
    enum { N = 2000, SZ = 257 }; /* odd sizes and offsets */
    uint64_t bytes = (uint64_t)N * SZ * 2;
    kvt_gpu_buf *a = NULL, *b = NULL;
    CHECK(kvt_gpu_buf_new(d, KVT_GPU_DEVICE, bytes, &a) == 0);
    CHECK(kvt_gpu_buf_new(d, KVT_GPU_DEVICE, bytes, &b) == 0);
    if (!a || !b) goto out;
    uint8_t *src = malloc(bytes), *got = malloc(bytes), *zero = calloc(1, bytes);
    fill(src, bytes);
    CHECK(kvt_gpu_upload(d, a, 0, src, bytes) == 0);
    CHECK(kvt_gpu_upload(d, b, 0, zero, bytes) == 0);
    kvt_gpu_region *r = calloc(N, sizeof *r);
    for (int i = 0; i < N; i++) /* region i: from slot i of a to slot N-1-i of b, in the even slots */
        r[i] = (kvt_gpu_region){(uint64_t)i * 2 * SZ, (uint64_t)(N - 1 - i) * 2 * SZ, SZ};
    uint32_t t0 = 0, t1 = 0;
    int ts = kvt_gpu_dev_info(d)->timestamps;
    CHECK(kvt_gpu_begin(d) == 0);
    if (ts) CHECK(kvt_gpu_rec_timestamp(d, &t0) == 0);
    CHECK(kvt_gpu_rec_copy(d, a, b, r, N) == 0);
    if (ts) CHECK(kvt_gpu_rec_timestamp(d, &t1) == 0);
    CHECK(kvt_gpu_submit(d) == 0);
    if (ts) { /* before the download, whose staging copy is a submission of its own */
        double ns = -1;
        CHECK(kvt_gpu_elapsed_ns(d, t0, t1, &ns) == 0);
        CHECK(ns >= 0);
        printf("gpu: %d-region copy of %d KiB: %.0f us by the device's timestamps\n", N, N * SZ / 1024, ns / 1000);
    }
    CHECK(kvt_gpu_download(d, b, 0, got, bytes) == 0);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        bad += memcmp(got + (uint64_t)(N - 1 - i) * 2 * SZ, src + (uint64_t)i * 2 * SZ, SZ) != 0;
        bad += memcmp(got + (uint64_t)(N - 1 - i) * 2 * SZ + SZ, zero, SZ) != 0; /* the odd slots untouched */
    }
    CHECKF(bad == 0, "%d of %d regions wrong", bad, N);
    r[7].bytes = bytes; /* a region past the end is refused, naming it */
    CHECK(kvt_gpu_copy(d, a, b, r, N) == KVT_EARG);
    CHECKF(strstr(kvt_errmsg(), "region 7"), "%s", kvt_errmsg());
    free(r);
    free(src);
    free(got);
    free(zero);
out:
    kvt_gpu_buf_free(a);
    kvt_gpu_buf_free(b);
}

/* x[i] = 0 and y[i] = 1 in device buffers of n floats. */
static int zero_and_ones(kvt_gpu_dev *d, kvt_gpu_buf *x, kvt_gpu_buf *y, uint32_t n) {
    float *h = malloc(n * sizeof *h);
    for (uint32_t i = 0; i < n; i++) h[i] = 1.0f;
    int rc = kvt_gpu_upload(d, y, 0, h, n * sizeof *h);
    memset(h, 0, n * sizeof *h);
    if (!rc) rc = kvt_gpu_upload(d, x, 0, h, n * sizeof *h);
    free(h);
    return rc;
}

/* How many of x's n floats are not want. */
static uint32_t wrong_floats(kvt_gpu_dev *d, kvt_gpu_buf *x, uint32_t n, float want) {
    float *h = calloc(n, sizeof *h);
    uint32_t bad = n;
    if (!kvt_gpu_download(d, x, 0, h, n * sizeof *h)) {
        bad = 0;
        for (uint32_t i = 0; i < n; i++) bad += h[i] != want;
    }
    free(h);
    return bad;
}

/* Long: a chain of dependent adds (x += y) over many flushed command lists,
 * each reading what the one before wrote, with more dispatches in all than one
 * list holds; the same with KVT_VK_INFLIGHT=1; a recording aborted after a
 * flush (what was flushed ran, the rest did not); a flush that finds the device
 * lost; bad KVT_VK_INFLIGHT values refused. */
static void test_flush(const char *inflight) {
    setenv("KVT_VK_INFLIGHT", inflight, 1);
    kvt_gpu_dev *d = NULL;
    int rc = kvt_gpu_open(0, &d);
    unsetenv("KVT_VK_INFLIGHT");
    CHECKF(rc == 0, "%s", kvt_errmsg());
    if (rc) return;
    enum { N = 4099, ADDS = 1500, PER_LIST = 250 }; /* 1500 dispatches: one list holds 1024 */
    kvt_gpu_kernels *k = NULL;
    kvt_gpu_buf *x = NULL, *y = NULL;
    CHECK(kvt_gpu_kernels_new(d, &k) == 0);
    CHECK(kvt_gpu_buf_new(d, KVT_GPU_DEVICE, N * 4, &x) == 0);
    CHECK(kvt_gpu_buf_new(d, KVT_GPU_DEVICE, N * 4, &y) == 0);
    if (!k || !x || !y || zero_and_ones(d, x, y, N)) goto out;
    rc = kvt_gpu_begin(d);
    for (int i = 1; !rc && i <= ADDS; i++) {
        rc = kvt_gpu_rec_add(k, x, y, N);
        if (!rc) rc = i % PER_LIST ? kvt_gpu_rec_barrier(d) : kvt_gpu_flush(d);
    }
    if (!rc) rc = kvt_gpu_submit(d);
    CHECKF(rc == 0, "%s", kvt_errmsg());
    uint32_t bad = wrong_floats(d, x, N, (float)ADDS);
    CHECKF(bad == 0, "KVT_VK_INFLIGHT=%s: %u of %d sums are not %d after %d flushed lists", inflight, bad, N, ADDS,
           ADDS / PER_LIST);
    /* aborted after a flush: the 3 flushed adds ran, the 2 after them did not */
    CHECK(zero_and_ones(d, x, y, N) == 0);
    CHECK(kvt_gpu_begin(d) == 0);
    for (int i = 0; i < 3; i++) CHECK(kvt_gpu_rec_add(k, x, y, N) == 0 && kvt_gpu_rec_barrier(d) == 0);
    CHECK(kvt_gpu_flush(d) == 0);
    for (int i = 0; i < 2; i++) CHECK(kvt_gpu_rec_add(k, x, y, N) == 0 && kvt_gpu_rec_barrier(d) == 0);
    kvt_gpu_abort(d);
    CHECK(kvt_gpu_submit(d) == KVT_EARG); /* nothing open after the abort */
    bad = wrong_floats(d, x, N, 3.0f);
    CHECKF(bad == 0, "%u of %d sums are not 3 after an abort that followed a flush", bad, N);
    /* the device lost on a flush: it fails naming the loss, leaves nothing open, and stays lost */
    setenv("KVT_VK_LOSE_AFTER", "1", 1);
    CHECK(kvt_gpu_begin(d) == 0);
    CHECK(kvt_gpu_rec_add(k, x, y, N) == 0);
    rc = kvt_gpu_flush(d);
    unsetenv("KVT_VK_LOSE_AFTER");
    CHECKF(rc == -EIO && strstr(kvt_errmsg(), "lost"), "%d %s", rc, kvt_errmsg());
    CHECK(kvt_gpu_lost(d) == 1);
    CHECK(kvt_gpu_submit(d) == KVT_EARG);
out:
    kvt_gpu_buf_free(x);
    kvt_gpu_buf_free(y);
    kvt_gpu_kernels_free(k);
    kvt_gpu_close(d);
}

static void test_inflight_refused(void) {
    const char *bad[] = {"0", "3", "two", "1x"};
    for (int i = 0; i < 4; i++) {
        setenv("KVT_VK_INFLIGHT", bad[i], 1);
        kvt_gpu_dev *d = NULL;
        CHECKF(kvt_gpu_open(0, &d) == KVT_EARG && d == NULL, "KVT_VK_INFLIGHT=%s", bad[i]);
        CHECKF(strstr(kvt_errmsg(), "KVT_VK_INFLIGHT must be 1") && strstr(kvt_errmsg(), bad[i]), "%s", kvt_errmsg());
    }
    unsetenv("KVT_VK_INFLIGHT");
}

static void test_device(int force_staging) {
    if (force_staging) setenv("KVT_VK_FORCE_STAGING", "1", 1);
    kvt_gpu_dev *d;
    int rc = kvt_gpu_open(0, &d);
    unsetenv("KVT_VK_FORCE_STAGING");
    CHECKF(rc == 0, "%s", kvt_errmsg());
    if (rc) return;
    if (force_staging) CHECK(kvt_gpu_staged(d) == 1);
    printf("gpu: device opened, transfers %s, validation layer %s\n",
           kvt_gpu_staged(d) ? "through staging copies" : "through a mapping", kvt_gpu_validating(d) ? "on" : "off");
    kvt_gpu_buf *s;
    CHECK(kvt_gpu_buf_new(d, KVT_GPU_STAGING, 4096, &s) == 0);
    CHECK(s && kvt_gpu_buf_host(s) != NULL);
    kvt_gpu_buf_free(s);
    round_trip(d, 1000003);
    round_trip(d, (20u << 20) + 5); /* over the 16 MiB staging chunk */
    batched_copy(d);
    kvt_gpu_pipe *p = (kvt_gpu_pipe *)1;
    CHECK(kvt_gpu_pipe_new(d, "no_such_shader", 1, 0, &p) == KVT_ENOTFOUND);
    CHECK(p == NULL);
    CHECK(kvt_gpu_submit(d) == KVT_EARG); /* nothing recorded */
    kvt_gpu_close(d);
}

/* The messenger counts what the validation layer says: a pipeline layout
 * without the shader's bindings is invalid usage. Only on a CPU device
 * (lavapipe): the layer passes the call on, and what a GPU driver does with
 * it is undefined. Returns the messages drawn. */
static uint64_t test_messenger(void) {
    kvt_gpu_dev *d;
    if (kvt_gpu_open(0, &d)) return 0;
    uint64_t before = kvt_gpu_validation_count(), drawn = 0;
    if (kvt_gpu_validating(d) && !strcmp(kvt_gpu_dev_info(d)->type, "cpu")) {
        printf("gpu: the validation errors logged next are deliberate\n");
        fflush(stdout);
        kvt_gpu_pipe *p = NULL;
        kvt_gpu_pipe_new(d, "matmul_f16", 1, 12, &p); /* the shader binds 3 buffers */
        kvt_gpu_pipe_free(p);
        drawn = kvt_gpu_validation_count() - before;
        CHECKF(drawn > 0, "the validation layer said nothing about a layout that lacks bindings 1 and 2");
    }
    /* out of device memory is -ENOMEM saying so (lavapipe refuses 1 TiB at once; a GPU's
     * validation layer would first object to an allocation over the heap) */
    if (!strcmp(kvt_gpu_dev_info(d)->type, "cpu")) {
        kvt_gpu_buf *b = NULL;
        CHECK(kvt_gpu_buf_new(d, KVT_GPU_STAGING, 1ull << 40, &b) == -ENOMEM);
        CHECKF(strstr(kvt_errmsg(), "out of device memory"), "%s", kvt_errmsg());
        CHECK(b == NULL);
    }
    kvt_gpu_close(d);
    return drawn;
}

static void test_max_binding(void) {
    setenv("KVT_VK_MAX_BINDING", "4096", 1);
    kvt_gpu_dev *d;
    int rc = kvt_gpu_open(0, &d);
    CHECKF(rc == 0, "%s", kvt_errmsg());
    if (!rc) {
        CHECK(kvt_gpu_max_binding(d) == 4096);
        kvt_gpu_buf *b;
        CHECK(kvt_gpu_buf_new(d, KVT_GPU_DEVICE, 4096, &b) == 0);
        kvt_gpu_buf_free(b);
        CHECK(kvt_gpu_buf_new(d, KVT_GPU_DEVICE, 4097, &b) == KVT_ELIMIT);
        CHECKF(strstr(kvt_errmsg(), "4097 bytes") && strstr(kvt_errmsg(), "KVT_VK_MAX_BINDING"), "%s", kvt_errmsg());
        CHECK(b == NULL);
        CHECK(kvt_gpu_buf_new(d, KVT_GPU_STAGING, 8192, &b) == 0); /* staging buffers are not bound */
        kvt_gpu_buf_free(b);
        kvt_gpu_close(d);
    }
    setenv("KVT_VK_MAX_BINDING", "lots", 1);
    CHECK(kvt_gpu_open(0, &d) == KVT_EARG);
    CHECKF(strstr(kvt_errmsg(), "KVT_VK_MAX_BINDING"), "%s", kvt_errmsg());
    unsetenv("KVT_VK_MAX_BINDING");
}

int main(void) {
    gpu_test_start();
    test_list();
    test_device(0);
    test_device(1);
    test_max_binding();
    test_flush("2");
    test_flush("1");
    test_inflight_refused();
    uint64_t deliberate = test_messenger();
    gpu_test_no_validation_messages(deliberate);
    return kvt_test_done("test_gpu_device");
}
