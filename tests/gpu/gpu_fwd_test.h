// SPDX-License-Identifier: MIT
/* Shared by the tests of the forward pass's GPU kernels: the seeded generator
 * ($KVT_GPU_SEED replays a run), device buffers, and one recorded dispatch. */
#ifndef KVT_GPU_FWD_TEST_H
#define KVT_GPU_FWD_TEST_H

#include <stdint.h>
#include <time.h>

#include "common.h"
#include "gpu_test.h"

static uint64_t fwd_rng;

static inline uint32_t fwd_next(void) {
    fwd_rng ^= fwd_rng << 13;
    fwd_rng ^= fwd_rng >> 7;
    fwd_rng ^= fwd_rng << 17;
    return (uint32_t)(fwd_rng >> 32);
}
static inline float fwd_unit(void) { return (float)fwd_next() / 4294967296.0f * 2.0f - 1.0f; }
static inline uint32_t fwd_pick(uint32_t lo, uint32_t hi) { return lo + fwd_next() % (hi - lo + 1); }

/* Seeds the generator from $KVT_GPU_SEED or the clock and prints the seed. */
static inline void fwd_seed(const char *test) {
    const char *s = getenv("KVT_GPU_SEED");
    uint64_t seed = s ? strtoull(s, NULL, 10) : (uint64_t)time(NULL);
    printf("%s: seed %llu (KVT_GPU_SEED=%llu replays it)\n", test, (unsigned long long)seed, (unsigned long long)seed);
    fwd_rng = seed * 0x9E3779B97F4A7C15ull | 1;
}

/* A device buffer of bytes, filled from data when not NULL; NULL (a failed check) on error. */
static inline kvt_gpu_buf *fwd_buf(kvt_gpu_dev *d, uint64_t bytes, const void *data) {
    kvt_gpu_buf *b = NULL;
    int rc = kvt_gpu_buf_new(d, KVT_GPU_DEVICE, bytes, &b);
    CHECKF(rc == 0, "%s", kvt_errmsg());
    if (!rc && data) {
        rc = kvt_gpu_upload(d, b, 0, data, bytes);
        CHECKF(rc == 0, "%s", kvt_errmsg());
    }
    return b;
}

/* Downloads bytes of b into out; 0 or a failed check. */
static inline int fwd_get(kvt_gpu_dev *d, kvt_gpu_buf *b, void *out, uint64_t bytes) {
    int rc = kvt_gpu_download(d, b, 0, out, bytes);
    CHECKF(rc == 0, "%s", kvt_errmsg());
    return rc;
}

/* Ends a recording that rc (a recording call's result) may have failed: submits it, or closes it unrun. */
static inline int fwd_submit(kvt_gpu_dev *d, int rc, const char *what) {
    int src = kvt_gpu_submit(d);
    if (!rc) rc = src;
    CHECKF(rc == 0, "%s: %s", what, kvt_errmsg());
    return rc;
}

#endif
