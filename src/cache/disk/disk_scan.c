// SPDX-License-Identifier: MIT
/* Segment scans (disk_internal.h "segment scans"): the walk over one segment
 * file's records, header by header, and the reader that feeds it from batched
 * reads. The open after a crash scans everything the index checkpoint does
 * not cover; with one synchronous read per header that is one disk round trip
 * per record (76 s per million 4 KiB records on the dev VM, O_DIRECT). The
 * reader keeps many reads in flight instead, yet hands the walk exactly the
 * bytes a pread at each offset would return, so both find the same records. */
#include "disk_internal.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

static_assert(KVT_DISK_HEADER_FIXED + 4 * KVT_BLOCK_TOKENS_MAX <= SCAN_READ_BYTES, "scan reads a whole header");

/* The reads ahead of the walk come in windows: one batch of reads over a
 * stretch of the segment, into a buffer of the window's own. Up to
 * SCAN_WINDOWS_MAX windows are in flight together (SCAN_WINDOWS by default),
 * so the disk reads the next ones while the walk parses the first: a window is
 * reused only once the walk has passed it.
 * Chunk windows (short records) read SCAN_WINDOW_BYTES of the segment whole,
 * in reads of CHUNK_READ_BYTES, plus CHUNK_OVERLAP beyond, so that a header,
 * or a record read in chunks, that starts in the window is read entire.
 * Header windows (long records) read one slot per predicted record, at most
 * WINDOW_REQS of them: the header, or with verify the whole record. After a
 * missed prediction the next window has HEADER_BATCH_MIN slots, doubling
 * with each window issued after it. */
#define CHUNK_READ_BYTES (1u << 20)
#define CHUNK_OVERLAP SCAN_CHUNK_STRIDE_MAX
#define WINDOW_REQS 64
#define HEADER_BATCH_MIN 2

static_assert(SCAN_WINDOW_BYTES % KVT_DISK_ALIGN == 0 && CHUNK_OVERLAP % KVT_DISK_ALIGN == 0, "aligned windows");
static_assert(CHUNK_READ_BYTES % KVT_DISK_ALIGN == 0 && CHUNK_OVERLAP >= SCAN_READ_BYTES, "aligned chunk reads");

typedef struct scan_window {
    uint8_t *buf; /* window_bytes + CHUNK_OVERLAP, aligned (made at first use) */
    kvt_dio_req req[WINDOW_REQS];
    size_t n_req, pending; /* reads issued; reads not completed yet */
    int chunk;             /* 1: contiguous reads from off; 0: slots at off + i * stride */
    int ready;             /* every read completed (and valid, eof set) */
    uint64_t off;
    uint64_t span;   /* chunk window: it answers for headers in [off, off + span) */
    uint64_t stride; /* header window: the distance between slots */
    uint64_t valid;  /* chunk window, ready: the bytes read contiguously from off */
    int eof;         /* ... and the file ends there */
} scan_window;

struct kvt_disk_scan_reader {
    kvt_dio *io; /* made at the first window */
    int use_uring;
    uint64_t hint;         /* the expected record length (0: unknown) */
    uint64_t window_bytes; /* the span of a chunk window, and the most a header window holds */
    unsigned depth;        /* windows in flight together */
    uint8_t *one;          /* SCAN_READ_BYTES, aligned: the read of one offset on its own (made at first use) */
    scan_window win[SCAN_WINDOWS_MAX];
    unsigned head, count; /* the windows in flight, in offset order, as a ring */
    /* the stream of windows of the segment being scanned */
    int fd;
    uint64_t size;
    int whole; /* header slots read whole records (the scan verifies) */
    int chunk; /* the stream issues chunk windows (else header windows of stride) */
    uint64_t stride, next_off;
    unsigned batch; /* slots of the next header window */
    uint64_t last_off, last_step;
    int have_last; /* last_off is the offset last asked for in this segment, last_step the one before */
    kvt_disk_scan_counts n;
};

kvt_disk_scan_reader *kvt_disk_scan_reader_new(uint64_t hint, int use_uring) {
    kvt_disk_scan_reader *rd = kvt_xcalloc(1, sizeof *rd);
    rd->use_uring = use_uring;
    rd->hint = hint;
    rd->window_bytes = SCAN_WINDOW_BYTES;
    rd->depth = SCAN_WINDOWS;
    return rd;
}

void kvt_disk_scan_reader_shape(kvt_disk_scan_reader *rd, uint64_t window_bytes, unsigned depth) {
    assert(!rd->io); /* before the first scan */
    window_bytes = kvt_disk_align_up(KVT_MAX(window_bytes, SCAN_READ_BYTES));
    rd->window_bytes = KVT_MIN(window_bytes, (uint64_t)(WINDOW_REQS - 1) * CHUNK_READ_BYTES);
    rd->depth = KVT_MAX(1, KVT_MIN(depth, SCAN_WINDOWS_MAX));
}

/* A read of a window completed. */
static void on_read(void *ctx, kvt_dio_req *r) {
    kvt_disk_scan_reader *rd = ctx;
    scan_window *w = r->user;
    w->pending--;
    if (r->res > 0) rd->n.bytes += (uint64_t)r->res;
}

/* Waits until every read of w has completed; a chunk window then knows the
 * contiguous bytes it holds: up to the first short read (end of file) or
 * failed one. */
static void window_wait(kvt_disk_scan_reader *rd, scan_window *w) {
    while (w->pending) kvt_dio_reap(rd->io, 1, on_read, rd);
    if (w->ready) return;
    w->ready = 1;
    w->valid = 0;
    w->eof = 0;
    for (size_t i = 0; w->chunk && i < w->n_req; i++) {
        if (w->req[i].res < 0) break;
        w->valid += (uint64_t)w->req[i].res;
        if ((size_t)w->req[i].res < w->req[i].len) {
            w->eof = 1;
            break;
        }
    }
}

/* Waits for every window in flight and forgets them (a missed prediction, a
 * segment's end: their buffers are about to be reused, or the fd closed). */
static void stream_drain(kvt_disk_scan_reader *rd) {
    for (unsigned i = 0; i < rd->count; i++) window_wait(rd, &rd->win[(rd->head + i) % rd->depth]);
    rd->head = rd->count = 0;
}

/* Fills w's requests from rd->next_off on, as the stream says, and moves
 * next_off past them. Returns the number of reads. */
static size_t window_plan(kvt_disk_scan_reader *rd, scan_window *w) {
    uint64_t off = rd->next_off;
    size_t n = 0;
    w->off = off;
    w->chunk = rd->chunk;
    if (rd->chunk) {
        /* past size only as far as a pread at the last header could read */
        uint64_t end = KVT_MIN(off + rd->window_bytes + CHUNK_OVERLAP, kvt_disk_align_up(rd->size) + SCAN_READ_BYTES);
        for (uint64_t at = off; at < end; at += CHUNK_READ_BYTES, n++)
            w->req[n] = (kvt_dio_req){rd->fd, at, (size_t)KVT_MIN(CHUNK_READ_BYTES, end - at), w->buf + (at - off),
                                      0,      w};
        w->span = rd->window_bytes;
        rd->next_off = off + rd->window_bytes;
        return n;
    }
    w->stride = rd->stride;
    uint64_t slot = rd->whole && rd->stride <= rd->window_bytes ? KVT_MAX(rd->stride, SCAN_READ_BYTES) : SCAN_READ_BYTES;
    uint64_t cap = KVT_MIN(rd->batch, rd->window_bytes / slot);
    uint64_t at = off;
    for (; n < cap && at + KVT_DISK_HEADER_FIXED <= rd->size; at += rd->stride, n++)
        w->req[n] = (kvt_dio_req){rd->fd, at, (size_t)slot, w->buf + n * slot, 0, w};
    rd->next_off = at;
    rd->batch = KVT_MIN(2 * rd->batch, WINDOW_REQS);
    return n;
}

/* Issues the stream's next window, if there is room for one in flight and the
 * segment has a header's worth left at next_off. Returns 1 if it did. */
static int window_issue(kvt_disk_scan_reader *rd) {
    if (rd->count == rd->depth || rd->next_off + KVT_DISK_HEADER_FIXED > rd->size) return 0;
    if (!rd->io) kvt_dio_new(SCAN_WINDOWS_MAX * WINDOW_REQS, rd->use_uring, &rd->io);
    scan_window *w = &rd->win[(rd->head + rd->count) % rd->depth];
    if (!w->buf) w->buf = kvt_disk_aligned_buf(rd->window_bytes + CHUNK_OVERLAP);
    size_t n = window_plan(rd, w);
    if (!n) return 0;
    w->n_req = w->pending = n;
    w->ready = 0;
    rd->count++;
    rd->n.peak_windows = KVT_MAX(rd->n.peak_windows, rd->count);
    rd->n.batches++;
    rd->n.reads += n;
    for (size_t k = kvt_dio_submit(rd->io, w->req, n, on_read, rd); k < n;) { /* the ring is full: wait for room */
        kvt_dio_reap(rd->io, 1, on_read, rd);
        k += kvt_dio_submit(rd->io, w->req + k, n - k, on_read, rd);
    }
    return 1;
}

/* Keeps the stream's windows in flight, unless the walk has moved on to
 * records too long for the chunk windows being issued. */
static void stream_top_up(kvt_disk_scan_reader *rd) {
    if (rd->chunk && rd->have_last && rd->last_step > SCAN_CHUNK_STRIDE_MAX) return;
    while (window_issue(rd)) {
    }
}

/* Starts the stream of windows afresh at off, with batch slots in its first
 * header window. The stride is the last record's length (the distance
 * between the last two offsets asked for), or the hint at a segment's start. */
static void stream_start(kvt_disk_scan_reader *rd, uint64_t off, unsigned batch) {
    stream_drain(rd);
    uint64_t stride = rd->have_last && off > rd->last_off ? off - rd->last_off : rd->hint;
    rd->chunk = stride <= SCAN_CHUNK_STRIDE_MAX;
    rd->stride = stride;
    rd->next_off = off;
    rd->batch = batch;
    rd->last_step = 0; /* the new stream fits the last step */
    stream_top_up(rd);
}

enum { FOUND, PAST, MISS };

/* Looks up off in w (ready): FOUND with *p, *n as a pread of len at off would
 * return them; PAST if the walk has passed w; MISS if w cannot answer (a
 * failed read, a record off the predicted grid, bytes beyond the window). */
static int window_lookup(const scan_window *w, uint64_t off, size_t len, uint8_t **p, ssize_t *n) {
    if (off < w->off || !w->n_req) return w->n_req ? MISS : PAST;
    if (w->chunk) {
        uint64_t end = w->off + w->valid;
        if (off >= w->off + w->span) return PAST;
        if (off < end && off + len <= end) *n = (ssize_t)len;
        else if (off < end && w->eof) *n = (ssize_t)(end - off); /* a pread there stops at end of file too */
        else return MISS;
        *p = w->buf + (off - w->off);
        return FOUND;
    }
    if (off > w->off + (w->n_req - 1) * w->stride) return PAST;
    if ((off - w->off) % w->stride) return MISS;
    const kvt_dio_req *r = &w->req[(off - w->off) / w->stride];
    if (r->res < 0 || len > r->len) return MISS; /* read again on its own: exactly what a pread says now */
    *n = (ssize_t)KVT_MIN((size_t)r->res, len);
    *p = r->buf;
    return FOUND;
}

/* Looks off up in the windows in flight, oldest first, retiring (and
 * replacing) those the walk has passed. MISS also when none is left. */
static int stream_find(kvt_disk_scan_reader *rd, uint64_t off, size_t len, uint8_t **p, ssize_t *n) {
    while (rd->count) {
        scan_window *w = &rd->win[rd->head];
        window_wait(rd, w);
        int r = window_lookup(w, off, len, p, n);
        if (r != PAST) return r;
        rd->head = (rd->head + 1) % rd->depth;
        rd->count--;
        stream_top_up(rd);
    }
    return MISS;
}

/* The header bytes at off, as a pread of SCAN_READ_BYTES there returns them
 * (*n). Offsets asked for only grow within a segment. */
static const uint8_t *reader_get(kvt_disk_scan_reader *rd, uint64_t off, ssize_t *n) {
    if (rd->have_last) rd->last_step = off - rd->last_off;
    uint8_t *p = NULL;
    int r = stream_find(rd, off, SCAN_READ_BYTES, &p, n);
    if (r == MISS) { /* a missed prediction or a failed read: start again from here */
        stream_start(rd, off, rd->have_last ? HEADER_BATCH_MIN : WINDOW_REQS);
        r = stream_find(rd, off, SCAN_READ_BYTES, &p, n);
    }
    if (r != FOUND) {
        if (!rd->one) rd->one = kvt_disk_aligned_buf(SCAN_READ_BYTES);
        *n = pread(rd->fd, rd->one, SCAN_READ_BYTES, (off_t)off);
        rd->n.fallbacks++;
        rd->n.reads++;
        if (*n > 0) rd->n.bytes += (uint64_t)*n;
        p = rd->one;
    }
    rd->last_off = off;
    rd->have_last = 1;
    return p;
}

/* The whole record at off (len bytes, as a pread returns them) if the window
 * its header came from holds it; else NULL. */
static uint8_t *reader_record(kvt_disk_scan_reader *rd, uint64_t off, size_t len, ssize_t *n) {
    uint8_t *p;
    if (!rd->count || window_lookup(&rd->win[rd->head], off, len, &p, n) != FOUND) return NULL;
    rd->n.whole_records++;
    return p;
}

void kvt_disk_scan_reader_free(kvt_disk_scan_reader *rd) {
    if (!rd) return;
    stream_drain(rd);
    kvt_dio_free(rd->io);
    for (unsigned i = 0; i < SCAN_WINDOWS_MAX; i++) free(rd->win[i].buf);
    free(rd->one);
    free(rd);
}

void kvt_disk_scan_reader_counts(const kvt_disk_scan_reader *rd, kvt_disk_scan_counts *out) { *out = rd->n; }

/* Forgets the last segment's windows: a scan starts from nothing (fds are reused). */
static void reader_reset(kvt_disk_scan_reader *rd, int fd, uint64_t size, int verify) {
    stream_drain(rd);
    rd->fd = fd;
    rd->size = size;
    rd->whole = verify;
    rd->have_last = 0;
}

/* Reads the record at off whole (from rd's window if it holds it, else
 * into *vbuf) and checks it: its CRC, and its MAC where key can check it.
 * Returns 0 with *raw (valid until the next read) or KVT_EFORMAT. */
static int verify_record(int fd, uint64_t off, const mac_key *key, kvt_disk_scan_reader *rd, uint8_t **vbuf,
                         size_t *vcap, kvt_disk_record *rec, const uint8_t **raw) {
    ssize_t k;
    uint8_t *p = rd ? reader_record(rd, off, rec->record_bytes, &k) : NULL;
    if (!p) {
        if (*vcap < rec->record_bytes) {
            free(*vbuf);
            *vcap = rec->record_bytes;
            *vbuf = kvt_disk_aligned_buf(*vcap);
        }
        k = pread(fd, *vbuf, rec->record_bytes, (off_t)off);
        p = *vbuf;
    }
    uint64_t want = rec->header_bytes + rec->stored_bytes;
    if (k < 0) return kvt_fail(KVT_EFORMAT, "the record cannot be read: %s", strerror(errno));
    if ((uint64_t)k < want)
        return kvt_fail(KVT_EFORMAT, "a record of %" PRIu64 " bytes cut short: %zd bytes read", want, k);
    if (kvt_disk_record_parse(p, (size_t)k, 1, rec)) return KVT_EFORMAT;
    if (kvt_disk_mac_checkable(key, rec) && kvt_disk_record_verify(rec, key, p)) return KVT_EFORMAT;
    *raw = p;
    return 0;
}

/* The walk of kvt_disk_scan_segment_from; the reader is reset by the caller.
 * Bytes at the end too few for a record header are damage too (a segment cut
 * to a few bytes, or a record torn in its first bytes): reported as one bad
 * stretch, so that verify and gc see them, and so is a read that fails (the
 * rest of the file). A read that finds the file shorter than its size ends
 * the walk without a report: a live server may trim a failed append meanwhile. */
static int scan_walk(int fd, uint64_t start, uint64_t size, int verify, const mac_key *key, kvt_disk_scan_reader *rd,
                     uint8_t *buf, uint8_t **vbuf, size_t *vcap, kvt_disk_scan_fn fn, void *ctx) {
    uint64_t off = start;
    for (;;) {
        if (off + KVT_DISK_HEADER_FIXED > size) {
            if (off >= size) return 0;
            kvt_disk_record none;
            memset(&none, 0, sizeof none);
            return fn(ctx, off, size - off,
                      kvt_fail(KVT_EFORMAT, "%" PRIu64 " bytes at the end, too few for a record header (%d)",
                               size - off, KVT_DISK_HEADER_FIXED),
                      &none, NULL);
        }
        ssize_t n;
        const uint8_t *h = buf;
        if (rd) h = reader_get(rd, off, &n);
        else n = pread(fd, buf, SCAN_READ_BYTES, (off_t)off);
        if (n == 0) return 0;
        kvt_disk_record rec;
        if (n < 0) { /* a bad sector, say: the rest of this file cannot be walked */
            memset(&rec, 0, sizeof rec);
            return fn(ctx, off, size - off, kvt_fail(KVT_EFORMAT, "cannot be read here: %s", strerror(errno)), &rec,
                      NULL);
        }
        int st = kvt_disk_record_parse(h, (size_t)n, 0, &rec);
        if (st == 0 && off + rec.header_bytes + rec.stored_bytes > size) /* a torn tail */
            return fn(ctx, off, size - off,
                      kvt_fail(KVT_EFORMAT,
                               "a record of %" PRIu64 " bytes cut short: the file ends %" PRIu64 " bytes into it",
                               rec.header_bytes + rec.stored_bytes, size - off),
                      &rec, NULL);
        if (st != 0) {
            int r = fn(ctx, off, KVT_DISK_ALIGN, st, &rec, NULL);
            if (r) return r;
            off += KVT_DISK_ALIGN;
            continue;
        }
        const uint8_t *raw = NULL;
        if (verify) st = verify_record(fd, off, key, rd, vbuf, vcap, &rec, &raw);
        int r = fn(ctx, off, rec.record_bytes, st, &rec, raw);
        if (r) return r;
        off += rec.record_bytes;
    }
}

int kvt_disk_scan_segment_from(int fd, uint64_t start, uint64_t size, int verify, const mac_key *key,
                               kvt_disk_scan_reader *rd, uint8_t *buf, uint8_t **vbuf, size_t *vcap,
                               kvt_disk_scan_fn fn, void *ctx) {
    if (rd) reader_reset(rd, fd, size, verify);
    int rc = scan_walk(fd, start, size, verify, key, rd, buf, vbuf, vcap, fn, ctx);
    if (rd) stream_drain(rd); /* the reads ahead of where the walk stopped: the fd may be closed next */
    return rc;
}
