/* Segment scans (disk_internal.h "segment scans"): the walk over one segment
 * file's records, header by header, and the reader that feeds it from batched
 * reads. The open after a crash scans everything the index checkpoint does
 * not cover; with one synchronous read per header that is one disk round trip
 * per record (76 s per million 4 KiB records on the dev VM, O_DIRECT). The
 * reader keeps many reads in flight instead, yet hands the walk exactly the
 * bytes a pread at each offset would return, so both find the same records. */
#include "disk_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <unistd.h>

#include "common.h"
#include "disk_io.h"

static_assert(KVT_DISK_HEADER_FIXED + 4 * KVT_BLOCK_TOKENS_MAX <= SCAN_READ_BYTES, "scan reads a whole header");

/* Chunked batches: this much of the segment ahead of the walk, as reads of
 * CHUNK_READ_BYTES in flight together. */
#define CHUNK_BYTES (16u << 20)
#define CHUNK_READ_BYTES (1u << 20)
#define CHUNK_READS (CHUNK_BYTES / CHUNK_READ_BYTES)
/* Header batches: up to this many header reads in flight together (also the
 * ring's depth). A batch whose prediction missed is followed by one of
 * HEADER_BATCH_MIN, doubling with each batch used to its end. */
#define HEADER_BATCH_MAX 64
#define HEADER_BATCH_MIN 2

static_assert(CHUNK_BYTES % CHUNK_READ_BYTES == 0 && CHUNK_READ_BYTES % KVT_DISK_ALIGN == 0, "aligned chunk reads");
static_assert(CHUNK_READS <= HEADER_BATCH_MAX, "a chunk's reads fit the request array");
static_assert(HEADER_BATCH_MAX * SCAN_READ_BYTES <= CHUNK_BYTES, "header slots fit the chunk buffer");

/* What the reader's buffer holds. */
enum { WIN_NONE, WIN_CHUNK, WIN_HEADERS };

struct kvt_disk_scan_reader {
    kvt_dio *io;     /* made at the first batch */
    int use_uring;
    uint64_t hint;   /* the expected record length (0: unknown) */
    uint8_t *buf;    /* CHUNK_BYTES, aligned: one chunk, or header slots of SCAN_READ_BYTES (made at first use) */
    uint8_t *one;    /* SCAN_READ_BYTES, aligned: the read of one offset on its own (made at first use) */
    kvt_dio_req req[HEADER_BATCH_MAX];
    size_t n_req;    /* requests of the last batch */
    int win;         /* WIN_*: what buf holds, for the segment being scanned */
    /* WIN_CHUNK: [chunk_off, chunk_off + chunk_valid) was read; chunk_eof: the file ends there */
    uint64_t chunk_off, chunk_valid;
    int chunk_eof;
    /* WIN_HEADERS: slots before next_slot are passed; used_end is one past the last slot handed out */
    size_t next_slot, used_end;
    unsigned batch;  /* header reads in the next header batch */
    uint64_t last_off;
    int have_last;   /* last_off is the offset last asked for in this segment */
    kvt_disk_scan_counts n;
};

kvt_disk_scan_reader *kvt_disk_scan_reader_new(uint64_t hint, int use_uring) {
    kvt_disk_scan_reader *rd = kvt_xcalloc(1, sizeof *rd);
    rd->use_uring = use_uring;
    rd->hint = hint;
    return rd;
}

void kvt_disk_scan_reader_free(kvt_disk_scan_reader *rd) {
    if (!rd) return;
    kvt_dio_free(rd->io);
    free(rd->buf);
    free(rd->one);
    free(rd);
}

void kvt_disk_scan_reader_counts(const kvt_disk_scan_reader *rd, kvt_disk_scan_counts *out) { *out = rd->n; }

/* Forgets the last segment's bytes: a scan starts from nothing (fds are reused). */
static void reader_reset(kvt_disk_scan_reader *rd) {
    rd->win = WIN_NONE;
    rd->n_req = 0;
    rd->have_last = 0;
    rd->batch = HEADER_BATCH_MAX; /* the hint is the store's record length: trust it until it misses */
}

/* The bytes at off as a pread of SCAN_READ_BYTES would return them (*n is
 * that pread's result), if the last batch holds them; else NULL. */
static const uint8_t *window_find(kvt_disk_scan_reader *rd, uint64_t off, ssize_t *n) {
    if (rd->win == WIN_CHUNK) {
        uint64_t end = rd->chunk_off + rd->chunk_valid;
        if (off < rd->chunk_off || off >= end) return NULL;
        if (off + SCAN_READ_BYTES <= end) *n = SCAN_READ_BYTES;
        else if (rd->chunk_eof) *n = (ssize_t)(end - off); /* a pread there stops at end of file too */
        else return NULL;
        return rd->buf + (off - rd->chunk_off);
    }
    if (rd->win == WIN_HEADERS) {
        for (size_t i = rd->next_slot; i < rd->n_req && rd->req[i].off <= off; i++) {
            if (rd->req[i].off != off) continue;
            if (rd->req[i].res < 0) return NULL; /* read again on its own: exactly what a pread says now */
            rd->next_slot = rd->used_end = i + 1;
            *n = rd->req[i].res;
            return rd->req[i].buf;
        }
    }
    return NULL;
}

/* Issues one batch starting at off: the segment read whole from there when
 * records are short (or their length unknown), else one header read per
 * predicted record. The prediction is the distance between the last two
 * offsets asked for (the last record's length), or the hint at a segment's
 * start. */
static void refill(kvt_disk_scan_reader *rd, int fd, uint64_t size, uint64_t off) {
    uint64_t stride = rd->have_last && off > rd->last_off ? off - rd->last_off : rd->hint;
    if (rd->win == WIN_HEADERS)
        rd->batch = rd->used_end == rd->n_req ? KVT_MIN(2 * rd->batch, HEADER_BATCH_MAX) : HEADER_BATCH_MIN;
    if (!rd->buf) { /* at the first batch: most opens after a clean stop scan nothing */
        rd->buf = kvt_disk_aligned_buf(CHUNK_BYTES);
        kvt_dio_new(HEADER_BATCH_MAX, rd->use_uring, &rd->io);
    }
    size_t n = 0;
    if (stride <= SCAN_CHUNK_STRIDE_MAX) {
        /* past size only as far as a pread at the last header could read */
        uint64_t end = KVT_MIN(off + CHUNK_BYTES, kvt_disk_align_up(size) + SCAN_READ_BYTES);
        for (uint64_t at = off; at < end && n < CHUNK_READS; at += CHUNK_READ_BYTES, n++)
            rd->req[n] = (kvt_dio_req){fd, at, (size_t)KVT_MIN(CHUNK_READ_BYTES, end - at), rd->buf + n * CHUNK_READ_BYTES,
                                       0, NULL};
        rd->win = WIN_CHUNK;
    } else {
        for (uint64_t at = off; n < rd->batch && at + KVT_DISK_HEADER_FIXED <= size; at += stride, n++)
            rd->req[n] = (kvt_dio_req){fd, at, SCAN_READ_BYTES, rd->buf + n * SCAN_READ_BYTES, 0, NULL};
        rd->win = WIN_HEADERS;
        rd->next_slot = rd->used_end = 0;
    }
    rd->n_req = n;
    kvt_dio_read_batch(rd->io, rd->req, n, NULL, NULL);
    rd->n.batches++;
    rd->n.reads += n;
    for (size_t i = 0; i < n; i++)
        if (rd->req[i].res > 0) rd->n.bytes += (uint64_t)rd->req[i].res;
    if (rd->win == WIN_CHUNK) {
        /* the contiguous bytes read from off: up to the first short read (end of file) or failed one */
        rd->chunk_off = off;
        rd->chunk_valid = 0;
        rd->chunk_eof = 0;
        for (size_t i = 0; i < n; i++) {
            if (rd->req[i].res < 0) break;
            rd->chunk_valid += (uint64_t)rd->req[i].res;
            if ((size_t)rd->req[i].res < rd->req[i].len) {
                rd->chunk_eof = 1;
                break;
            }
        }
    }
}

/* The bytes at off, as a pread of SCAN_READ_BYTES there returns them (*n). */
static const uint8_t *reader_get(kvt_disk_scan_reader *rd, int fd, uint64_t size, uint64_t off, ssize_t *n) {
    const uint8_t *p = window_find(rd, off, n);
    if (!p) {
        refill(rd, fd, size, off);
        p = window_find(rd, off, n);
    }
    if (!p) {
        if (!rd->one) rd->one = kvt_disk_aligned_buf(SCAN_READ_BYTES);
        *n = pread(fd, rd->one, SCAN_READ_BYTES, (off_t)off);
        rd->n.fallbacks++;
        rd->n.reads++;
        if (*n > 0) rd->n.bytes += (uint64_t)*n;
        p = rd->one;
    }
    rd->last_off = off;
    rd->have_last = 1;
    return p;
}

int kvt_disk_scan_segment(int fd, uint64_t size, int verify, const mac_key *key, uint8_t *buf, uint8_t **vbuf,
                          size_t *vcap, kvt_disk_scan_fn fn, void *ctx) {
    return kvt_disk_scan_segment_from(fd, 0, size, verify, key, NULL, buf, vbuf, vcap, fn, ctx);
}

int kvt_disk_scan_segment_from(int fd, uint64_t start, uint64_t size, int verify, const mac_key *key,
                               kvt_disk_scan_reader *rd, uint8_t *buf, uint8_t **vbuf, size_t *vcap,
                               kvt_disk_scan_fn fn, void *ctx) {
    if (rd) reader_reset(rd);
    uint64_t off = start;
    while (off + KVT_DISK_HEADER_FIXED <= size) {
        ssize_t n;
        const uint8_t *h = buf;
        if (rd) h = reader_get(rd, fd, size, off, &n);
        else n = pread(fd, buf, SCAN_READ_BYTES, (off_t)off);
        if (n <= 0) break;
        kvt_disk_record rec;
        int st = kvt_disk_record_parse(h, (size_t)n, 0, &rec);
        if (st == 0 && off + rec.header_bytes + rec.stored_bytes > size) {
            int r = fn(ctx, off, size - off, KVT_EFORMAT, &rec, NULL);
            return r;
        }
        if (st != 0) {
            int r = fn(ctx, off, KVT_DISK_ALIGN, st, &rec, NULL);
            if (r) return r;
            off += KVT_DISK_ALIGN;
            continue;
        }
        const uint8_t *raw = NULL;
        if (verify) {
            if (*vcap < rec.record_bytes) {
                free(*vbuf);
                *vcap = rec.record_bytes;
                *vbuf = kvt_disk_aligned_buf(*vcap);
            }
            ssize_t k = pread(fd, *vbuf, rec.record_bytes, (off_t)off);
            uint64_t want = rec.header_bytes + rec.stored_bytes;
            if (k < 0 || (uint64_t)k < want || kvt_disk_record_parse(*vbuf, (size_t)k, 1, &rec)) st = KVT_EFORMAT;
            else if (kvt_disk_mac_checkable(key, &rec) && kvt_disk_record_verify(&rec, key, *vbuf)) st = KVT_EFORMAT;
            else raw = *vbuf;
        }
        int r = fn(ctx, off, rec.record_bytes, st, &rec, raw);
        if (r) return r;
        off += rec.record_bytes;
    }
    return 0;
}
