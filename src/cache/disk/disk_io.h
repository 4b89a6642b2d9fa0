// SPDX-License-Identifier: MIT
/* The disk tier's I/O backend: batches of positioned reads issued together
 * (io_uring when the kernel allows it, else one pread after another) and
 * whole positioned writes. Buffers, offsets and lengths are the caller's
 * business; with O_DIRECT file descriptors they must be suitably aligned. */
#ifndef KVT_DISK_IO_H
#define KVT_DISK_IO_H

#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <sys/types.h>

typedef struct kvt_dio kvt_dio;

/* One positioned read of a batch. `res` is filled in: the bytes read (less
 * than len only at end of file) or -errno. `user` is the caller's. */
typedef struct {
    int fd;
    uint64_t off;
    size_t len;
    void *buf;
    ssize_t res;
    void *user;
} kvt_dio_req;

/* Called once per request of a batch as it completes, in completion order,
 * on the thread that called kvt_dio_read_batch. */
typedef void (*kvt_dio_done_fn)(void *ctx, kvt_dio_req *req);

/* The res of a request submitted and not completed yet. */
#define KVT_DIO_PENDING (-EINPROGRESS)

/* Creates a backend with up to `depth` reads in flight (>= 1). If want_uring
 * is nonzero, tries io_uring and silently falls back to pread/pwrite when the
 * kernel refuses it (the caller logs kvt_dio_uses_uring()). Returns 0 and
 * *out. Owned by the caller; free with kvt_dio_free. Not thread-safe: one
 * backend per thread that does I/O. */
int kvt_dio_new(unsigned depth, int want_uring, kvt_dio **out);
void kvt_dio_free(kvt_dio *io); /* none of its reads may be in flight (kvt_dio_inflight) */
/* 1 if the backend submits through io_uring. */
int kvt_dio_uses_uring(const kvt_dio *io);

/* Reads every request of reqs[0..n), keeping up to depth in flight, and calls
 * done for each as it completes (done may be NULL). A short read is
 * continued synchronously, so res < len means end of file or an error. */
void kvt_dio_read_batch(kvt_dio *io, kvt_dio_req *reqs, size_t n, kvt_dio_done_fn done, void *ctx);

/* The same, without waiting: queues reqs[0..n) (as many as the depth leaves
 * room for) and hands them to the kernel, so that they are read while the
 * caller does other work; each res is KVT_DIO_PENDING until its request
 * completes. Returns how many were queued; submit the rest after a reap. The
 * pread fallback reads them all now and calls done for each before returning.
 * The requests and their buffers must stay valid until they complete. */
size_t kvt_dio_submit(kvt_dio *io, kvt_dio_req *reqs, size_t n, kvt_dio_done_fn done, void *ctx);
/* Completes every queued read that has finished (res filled in, a short read
 * continued synchronously as above, done called), first waiting for one if
 * wait is nonzero and any is in flight. Returns how many completed. */
size_t kvt_dio_reap(kvt_dio *io, int wait, kvt_dio_done_fn done, void *ctx);
/* Reads queued and not yet completed. */
unsigned kvt_dio_inflight(const kvt_dio *io);

/* Writes buf[0..len) at off in full. Returns 0 or -errno (-ENOSPC, -EIO,
 * -EFBIG ...; a write that makes no progress is -EIO). */
int kvt_dio_write(kvt_dio *io, int fd, const void *buf, size_t len, uint64_t off);

#endif
