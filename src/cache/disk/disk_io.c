// SPDX-License-Identifier: MIT
/* io_uring and pread/pwrite behind one small interface (disk_internal.h, "the
 * I/O backend"). The ring is private to the backend, so each I/O thread owns
 * its own. */
#include "disk_internal.h"

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

struct kvt_dio {
    unsigned depth;
    unsigned inflight; /* reads submitted and not yet reaped */
    int uring;         /* 1 when ring is initialised and used */
    struct io_uring ring;
};

int kvt_dio_new(unsigned depth, int want_uring, kvt_dio **out) {
    kvt_dio *io = kvt_xcalloc(1, sizeof *io);
    io->depth = depth ? depth : 1;
    if (want_uring && io_uring_queue_init(io->depth, &io->ring, 0) == 0) io->uring = 1;
    *out = io;
    return 0;
}

void kvt_dio_free(kvt_dio *io) {
    if (!io) return;
    if (io->uring) io_uring_queue_exit(&io->ring);
    free(io);
}

int kvt_dio_uses_uring(const kvt_dio *io) { return io->uring; }

/* Finishes a read synchronously from `done` bytes on; returns the total or -errno. */
static ssize_t pread_rest(kvt_dio_req *r, size_t done) {
    while (done < r->len) {
        ssize_t k = pread(r->fd, (uint8_t *)r->buf + done, r->len - done, (off_t)(r->off + done));
        if (k < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (k == 0) break; /* end of file */
        done += (size_t)k;
    }
    return (ssize_t)done;
}

/* Finishes one completion: a short or interrupted read is continued synchronously. */
static void complete(kvt_dio *io, int res, kvt_dio_req *r, kvt_dio_done_fn done, void *ctx) {
    io->inflight--;
    if (res == -EINTR || res == -EAGAIN) r->res = pread_rest(r, 0);
    else if (res >= 0 && (size_t)res < r->len) r->res = pread_rest(r, (size_t)res);
    else r->res = res;
    if (done) done(ctx, r);
}

size_t kvt_dio_submit(kvt_dio *io, kvt_dio_req *reqs, size_t n, kvt_dio_done_fn done, void *ctx) {
    if (!io->uring) {
        for (size_t i = 0; i < n; i++) {
            reqs[i].res = pread_rest(&reqs[i], 0);
            if (done) done(ctx, &reqs[i]);
        }
        return n;
    }
    size_t k = 0;
    while (k < n && io->inflight < io->depth) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
        if (!sqe) break;
        kvt_dio_req *r = &reqs[k++];
        r->res = KVT_DIO_PENDING;
        io_uring_prep_read(sqe, r->fd, r->buf, (unsigned)r->len, r->off);
        io_uring_sqe_set_data(sqe, r);
        io->inflight++;
    }
    /* to the kernel now, so that the reads proceed while the caller works; a
     * failure here is seen again (and handled) by the next kvt_dio_reap */
    if (k) io_uring_submit(&io->ring);
    return k;
}

size_t kvt_dio_reap(kvt_dio *io, int wait, kvt_dio_done_fn done, void *ctx) {
    if (!io->uring || !io->inflight) return 0;
    int rc = io_uring_submit_and_wait(&io->ring, wait ? 1 : 0);
    size_t got = 0;
    struct io_uring_cqe *cqe;
    if (rc < 0 && rc != -EINTR) {
        /* The ring failed as a whole: finish what it holds synchronously so
         * every request still completes exactly once. */
        while (io->inflight && io_uring_peek_cqe(&io->ring, &cqe) == 0) {
            kvt_dio_req *r = io_uring_cqe_get_data(cqe);
            io_uring_cqe_seen(&io->ring, cqe);
            complete(io, -EINTR, r, done, ctx); /* read again, synchronously */
            got++;
        }
        if (io->inflight) { /* should not happen: requests lost in a broken ring */
            kvt_logk(KVT_LOG_ERROR, "error,reads_in_flight", "disk I/O: io_uring failed (%s) with %u reads in flight",
                     strerror(-rc), io->inflight);
            abort();
        }
        return got;
    }
    /* Each completion is marked seen before its callback runs, which may take
     * time (CRC, copy, decompression) while the other reads proceed. */
    while (io->inflight && io_uring_peek_cqe(&io->ring, &cqe) == 0) {
        kvt_dio_req *r = io_uring_cqe_get_data(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&io->ring, cqe);
        complete(io, res, r, done, ctx);
        got++;
    }
    return got;
}

unsigned kvt_dio_inflight(const kvt_dio *io) { return io->inflight; }

void kvt_dio_read_batch(kvt_dio *io, kvt_dio_req *reqs, size_t n, kvt_dio_done_fn done, void *ctx) {
    size_t next = kvt_dio_submit(io, reqs, n, done, ctx);
    while (next < n || io->inflight) {
        kvt_dio_reap(io, 1, done, ctx);
        next += kvt_dio_submit(io, reqs + next, n - next, done, ctx);
    }
}

int kvt_dio_write(kvt_dio *io, int fd, const void *buf, size_t len, uint64_t off) {
    size_t done = 0;
    if (io->uring && len) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
        if (sqe) {
            io_uring_prep_write(sqe, fd, buf, (unsigned)len, off);
            struct io_uring_cqe *cqe;
            if (io_uring_submit(&io->ring) == 1) {
                int rc;
                while ((rc = io_uring_wait_cqe(&io->ring, &cqe)) == -EINTR) {
                }
                if (rc == 0) {
                    int res = cqe->res;
                    io_uring_cqe_seen(&io->ring, cqe);
                    if (res < 0 && res != -EINTR && res != -EAGAIN) return res;
                    if (res > 0) done = (size_t)res;
                }
            }
        }
    }
    /* pwrite for the fallback and for whatever the ring left unwritten */
    while (done < len) {
        ssize_t k = pwrite(fd, (const uint8_t *)buf + done, len - done, (off_t)(off + done));
        if (k < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (k == 0) return -EIO;
        done += (size_t)k;
    }
    return 0;
}
