// SPDX-License-Identifier: MIT
/* The disk tier's I/O backend, with io_uring and with the pread fallback:
 * a batch of reads lands every byte where it was asked (more requests than
 * the queue depth, in any order), reports each request once through the
 * callback, stops short at end of file and reports errors as -errno; writes
 * land in full and a write to a read-only descriptor is an error, not a
 * crash. Reads submitted without waiting and reaped later do the same. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disk_internal.h"
#include "testutil.h"

#define FILE_BYTES (1 << 20)
#define N_REQ 40
#define REQ_MAX 20000

static uint8_t expect_at(uint64_t off) { return (uint8_t)(off * 2654435761u >> 13); }

typedef struct {
    int calls[N_REQ];
} seen;

static void on_done(void *ctx, kvt_dio_req *r) {
    seen *s = ctx;
    int i = (int)(intptr_t)r->user;
    if (i >= 0 && i < N_REQ) s->calls[i]++;
}

static void run_backend(const char *path, int want_uring) {
    kvt_dio *io = NULL;
    CHECK(kvt_dio_new(8, want_uring, &io) == 0 && io);
    if (!io) return;
    if (want_uring && !kvt_dio_uses_uring(io))
        kvt_test_skip_part("io_uring is not available here: only the pread fallback was tested");
    /* write the file through the backend */
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    uint8_t *data = malloc(FILE_BYTES);
    for (uint64_t i = 0; i < FILE_BYTES; i++) data[i] = expect_at(i);
    CHECK(kvt_dio_write(io, fd, data, FILE_BYTES / 2, 0) == 0);
    CHECK(kvt_dio_write(io, fd, data + FILE_BYTES / 2, FILE_BYTES / 2, FILE_BYTES / 2) == 0);
    free(data);

    /* a batch of N_REQ reads (five times the depth) at scattered offsets, the last one past EOF */
    kvt_dio_req reqs[N_REQ];
    uint8_t *bufs[N_REQ];
    unsigned seed = 3;
    for (int i = 0; i < N_REQ; i++) {
        size_t len = 1 + (size_t)(rand_r(&seed) % REQ_MAX);
        uint64_t off = (uint64_t)(rand_r(&seed) % (FILE_BYTES - REQ_MAX));
        if (i == N_REQ - 1) off = FILE_BYTES - 100, len = 4096; /* 100 bytes, then end of file */
        bufs[i] = malloc(len);
        reqs[i] = (kvt_dio_req){fd, off, len, bufs[i], 0, (void *)(intptr_t)i};
    }
    seen s = {{0}};
    kvt_dio_read_batch(io, reqs, N_REQ, on_done, &s);
    int bad_bytes = 0, once = 1;
    for (int i = 0; i < N_REQ; i++) {
        once &= s.calls[i] == 1;
        ssize_t want = i == N_REQ - 1 ? 100 : (ssize_t)reqs[i].len;
        CHECKF(reqs[i].res == want, "request %d: %zd bytes, want %zd", i, reqs[i].res, want);
        for (ssize_t b = 0; b < reqs[i].res; b++) bad_bytes += bufs[i][b] != expect_at(reqs[i].off + (uint64_t)b);
        free(bufs[i]);
    }
    CHECKF(once, "a request was reported other than once");
    CHECKF(bad_bytes == 0, "%d bytes read wrong", bad_bytes);

    /* without waiting: two rounds submitted while earlier ones are still in
     * flight (more than the depth: the rest queued after a reap), each
     * completing exactly once, with the bytes asked for */
    seen a = {{0}};
    size_t queued = 0;
    for (int round = 0; round < 2; round++) {
        for (int i = round * N_REQ / 2; i < (round + 1) * N_REQ / 2; i++) {
            bufs[i] = malloc(REQ_MAX);
            reqs[i] = (kvt_dio_req){fd, (uint64_t)i * 7919, REQ_MAX, bufs[i], 0, (void *)(intptr_t)i};
        }
        queued += kvt_dio_submit(io, reqs + queued, (size_t)(round + 1) * N_REQ / 2 - queued, on_done, &a);
    }
    CHECKF(kvt_dio_inflight(io) <= 8, "%u reads in flight, depth 8", kvt_dio_inflight(io));
    while (queued < N_REQ || kvt_dio_inflight(io)) {
        kvt_dio_reap(io, 1, on_done, &a);
        queued += kvt_dio_submit(io, reqs + queued, N_REQ - queued, on_done, &a);
    }
    once = 1, bad_bytes = 0;
    for (int i = 0; i < N_REQ; i++) {
        once &= a.calls[i] == 1 && reqs[i].res == REQ_MAX;
        for (ssize_t b = 0; b < reqs[i].res; b++) bad_bytes += bufs[i][b] != expect_at(reqs[i].off + (uint64_t)b);
        free(bufs[i]);
    }
    CHECKF(once, "submitted reads: one not reported once, in full");
    CHECKF(bad_bytes == 0, "submitted reads: %d bytes read wrong", bad_bytes);
    CHECK(kvt_dio_reap(io, 1, on_done, &a) == 0); /* nothing in flight: returns at once */

    /* errors are -errno: a closed descriptor, and a write to a read-only one */
    int ro = open(path, O_RDONLY);
    uint8_t b[16];
    kvt_dio_req bad = {ro, 0, sizeof b, b, 0, NULL};
    close(ro);
    kvt_dio_read_batch(io, &bad, 1, NULL, NULL);
    CHECKF(bad.res == -EBADF, "read from a closed fd: %zd", bad.res);
    ro = open(path, O_RDONLY);
    CHECKF(kvt_dio_write(io, ro, b, sizeof b, 0) == -EBADF, "write to a read-only fd");
    close(ro);
    close(fd);
    kvt_dio_free(io);
}

int main(void) {
    const char *path = kvt_test_path(kvt_test_tmpdir(), "dio.bin");
    run_backend(path, 0);
    run_backend(path, 1);
    return kvt_test_done("test_disk_io");
}
