// SPDX-License-Identifier: MIT
/* The disk tier's index checkpoint (tier_disk.h "Checkpoint"): the record
 * index as of one moment, with the size, inode and mtime of every segment it
 * covers, so an open reads this one file and scans only what was appended
 * since, instead of every record header.
 *
 * File `index` (little-endian), replaced atomically (temp file, fsync,
 * rename, fsync of the directory):
 *     0 8B  magic "KVTIDX\0\1"         8 u32 version (CKPT_VERSION)
 *    12 u32 CRC32C of the whole file, this field read as zero
 *    16 u64 file bytes                24 16B namespace
 *    40 u32 B                         44 u32 flags (CKPT_F_*)
 *    48 u64 payload bytes             56 u32 MAC key id (0 without MAC)
 *    60 u32 zero                      64 u64 segments   72 u64 records
 *    80 u64 written at (Unix seconds) 88 u64 zero
 *    96 segments: u64 id, u64 bytes covered, u64 inode, i64 mtime s, i64 mtime ns
 *       records:  u64 segment id, u64 offset, u32 bytes, u32 zero,
 *                 16B hash, 16B parent, B x i32 token ids
 * A checkpoint only says where records were: every read still checks the
 * record's CRC, MAC, hash, parent and tokens, so a stale or forged entry can
 * cost a miss, never wrong KV. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "crc32c.h"
#include "disk_internal.h"
#include "prefix.h"

static const uint8_t ckpt_magic[8] = {'K', 'V', 'T', 'I', 'D', 'X', 0, 1};
#define CKPT_VERSION 1
#define CKPT_HDR 96
#define CKPT_SEG 40
#define CKPT_REC_FIXED 56
#define CKPT_CRC_OFF 12
#define CKPT_F_MAC 1u  /* records were indexed with the MAC on */
#define CKPT_F_GMAC 2u /* ... by a process that computes GMAC */
/* Larger is not a checkpoint we wrote (16 GiB: ~90M records of 32 tokens). */
#define CKPT_MAX_BYTES (16ull << 30)
/* Entries whose table slots are prefetched ahead of the one being applied. */
#define CKPT_AHEAD 8

static uint32_t ckpt_flags(const kvt_disk *d) { return d->p.mac ? CKPT_F_MAC | (d->key.gmac ? CKPT_F_GMAC : 0) : 0; }

static uint64_t rec_entry_bytes(const kvt_disk *d) { return CKPT_REC_FIXED + 4ull * d->p.block_tokens; }

uint8_t *kvt_disk_ckpt_build(kvt_disk *d, size_t *len) {
    *len = 0;
    if (!d->p.index) return NULL;
    pthread_mutex_lock(&d->mu);
    kvt_disk_apply_events_locked(d);
    uint64_t n = 0;
    for (uint32_t i = 0; i < d->n_recs; i++) n += d->recs[i].used && d->recs[i].seg;
    uint64_t re = rec_entry_bytes(d);
    size_t cap = CKPT_HDR + d->n_segs * CKPT_SEG + n * re;
    uint8_t *b = kvt_xcalloc(1, cap);
    uint8_t *p = b + CKPT_HDR;
    for (size_t i = 0; i < d->n_segs; i++, p += CKPT_SEG) {
        const disk_seg *s = d->segs[i];
        struct stat sb;
        if (fstat(s->fd, &sb)) memset(&sb, 0, sizeof sb); /* inode 0 never matches: that segment is rescanned */
        disk_wr64(p, s->id);
        disk_wr64(p + 8, s->bytes);
        disk_wr64(p + 16, (uint64_t)sb.st_ino);
        disk_wr64(p + 24, (uint64_t)sb.st_mtim.tv_sec);
        disk_wr64(p + 32, (uint64_t)sb.st_mtim.tv_nsec);
    }
    uint64_t written = 0;
    for (uint32_t i = 0; i < d->n_recs; i++) {
        const disk_rec *r = &d->recs[i];
        if (i + CKPT_AHEAD < d->n_recs) kvt_prefix_prefetch(d->p.index, r[CKPT_AHEAD].hash);
        kvt_prefix_info info;
        if (!r->used || !r->seg || kvt_prefix_get(d->p.index, r->hash, &info) ||
            !(info.tiers & KVT_TIER_BIT(KVT_TIER_T2)))
            continue;
        disk_wr64(p, r->seg->id);
        disk_wr64(p + 8, r->off);
        disk_wr32(p + 16, r->bytes);
        disk_wrh(p + 24, r->hash);
        disk_wrh(p + 40, info.parent);
        memcpy(p + CKPT_REC_FIXED, info.tokens, 4ull * d->p.block_tokens);
        p += re;
        written++;
    }
    uint64_t n_segs = d->n_segs;
    pthread_mutex_unlock(&d->mu);
    *len = (size_t)(p - b);
    memcpy(b, ckpt_magic, sizeof ckpt_magic);
    disk_wr32(b + 8, CKPT_VERSION);
    disk_wr64(b + 16, *len);
    disk_wrh(b + 24, d->p.ns);
    disk_wr32(b + 40, d->p.block_tokens);
    disk_wr32(b + 44, ckpt_flags(d));
    disk_wr64(b + 48, d->p.payload_bytes);
    disk_wr32(b + 56, d->p.mac ? d->key.id : 0);
    disk_wr64(b + 64, n_segs);
    disk_wr64(b + 72, written);
    disk_wr64(b + 80, (uint64_t)time(NULL));
    disk_wr32(b + CKPT_CRC_OFF, kvt_crc32c(0, b, *len));
    return b;
}

uint64_t kvt_disk_change_count(const kvt_disk *d) {
    return d->st.puts + d->st.evicted + d->st.removes + d->st.reinserted + d->st.segments_reclaimed + d->st.corrupt;
}

void kvt_disk_ckpt_maybe(kvt_disk *d) {
    if (!d->p.index || d->p.checkpoint_s <= 0 || d->lock_fd < 0) return;
    double now = kvt_now();
    if (now - d->ckpt_last < d->p.checkpoint_s) return;
    d->ckpt_last = now;
    pthread_mutex_lock(&d->mu);
    uint64_t mark = kvt_disk_change_count(d);
    int due = mark != d->ckpt_mark && !d->ckpt_buf && !d->write_err;
    pthread_mutex_unlock(&d->mu);
    if (!due) return;
    size_t len;
    uint8_t *buf = kvt_disk_ckpt_build(d, &len);
    pthread_mutex_lock(&d->mu);
    d->ckpt_buf = buf;
    d->ckpt_len = len;
    d->ckpt_mark = mark;
    pthread_cond_broadcast(&d->cv_work);
    pthread_mutex_unlock(&d->mu);
}

void kvt_disk_ckpt_write_pending(kvt_disk *d) {
    uint8_t *buf = d->ckpt_buf;
    size_t len = d->ckpt_len;
    pthread_mutex_unlock(&d->mu);
    int rc = kvt_disk_ckpt_write(d->dir_fd, d->dir, buf, len);
    if (rc) kvt_log(KVT_LOG_WARN, "%s", kvt_errmsg());
    free(buf);
    pthread_mutex_lock(&d->mu);
    d->ckpt_buf = NULL;
    if (!rc) d->st.checkpoints_written++;
}

int kvt_disk_ckpt_write(int dfd, const char *dir, const uint8_t *buf, size_t len) {
    int fd = kvt_disk_tmp_create(dfd, dir, CKPT_TMP_NAME, 0);
    if (fd < 0) return fd;
    int rc = 0;
    for (size_t off = 0; off < len && !rc;) {
        ssize_t w = write(fd, buf + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) rc = w < 0 ? -errno : -EIO;
        else off += (size_t)w;
    }
    if (!rc && fsync(fd)) rc = -errno;
    close(fd);
    if (!rc && renameat(dfd, CKPT_TMP_NAME, dfd, CKPT_NAME)) rc = -errno;
    if (rc) {
        unlinkat(dfd, CKPT_TMP_NAME, 0);
        return kvt_fail(rc, "cache dir %s: writing the index checkpoint: %s", dir, strerror(-rc));
    }
    fsync(dfd);
    return 0;
}

void kvt_disk_ckpt_remove(int dfd) {
    unlinkat(dfd, CKPT_NAME, 0);
    unlinkat(dfd, CKPT_TMP_NAME, 0);
}

void kvt_disk_ckpt_free(disk_ckpt *c) {
    if (c->buf) munmap(c->buf, c->len);
    memset(c, 0, sizeof *c);
}

/* Room for n more records in the store's slots, its key map and the prefix
 * index, in one step each instead of a doubling every power of two (mu held). */
static void reserve_records(kvt_disk *d, uint64_t n) {
    uint64_t want = (uint64_t)d->n_recs + n;
    if (want > d->cap_recs && want < UINT32_MAX) {
        d->cap_recs = (uint32_t)want;
        d->recs = kvt_xrealloc(d->recs, d->cap_recs * sizeof *d->recs);
        d->free_slots = kvt_xrealloc(d->free_slots, d->cap_recs * sizeof *d->free_slots);
    }
    kvt_hmap128_reserve(&d->map, d->map.count + n);
    kvt_prefix_reserve(d->p.index, n);
}

static int refuse(disk_ckpt *c, const char *dir, const char *why) {
    kvt_disk_ckpt_free(c);
    return kvt_fail(KVT_EFORMAT, "cache dir %s: index checkpoint %s", dir, why);
}

/* Maps dir's checkpoint and checks what needs no store: magic, version, the
 * length it claims, and room for its segment table. 0 with c->buf, c->len,
 * c->n_segs, c->n_recs; KVT_ENOTFOUND; or KVT_EFORMAT (c freed). */
static int ckpt_map(int dfd, const char *dir, disk_ckpt *c) {
    memset(c, 0, sizeof *c);
    int fd = kvt_disk_file_open(dfd, dir, CKPT_NAME, O_RDONLY, 0);
    if (fd == -ENOENT) return kvt_fail(KVT_ENOTFOUND, "cache dir %s: no index checkpoint", dir);
    if (fd < 0) return fd;
    struct stat sb;
    if (fstat(fd, &sb) || sb.st_size < CKPT_HDR || (uint64_t)sb.st_size > CKPT_MAX_BYTES) {
        close(fd);
        return refuse(c, dir, "is truncated or too large");
    }
    /* Mapped, not read: no copy and no fresh memory to fault in and zero.
     * The kernel reads it ahead while the tables are sized for its records;
     * the CRC then waits for the rest. Nothing truncates it meanwhile: every
     * writer replaces it by rename. */
    c->len = (size_t)sb.st_size;
    void *m = mmap(NULL, c->len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return refuse(c, dir, "cannot be read");
    c->buf = m;
    (void)madvise(m, c->len, MADV_WILLNEED);
    const uint8_t *b = c->buf;
    if (memcmp(b, ckpt_magic, sizeof ckpt_magic) || disk_rd32(b + 8) != CKPT_VERSION)
        return refuse(c, dir, "has another format");
    if (disk_rd64(b + 16) != c->len) return refuse(c, dir, "is truncated");
    c->n_segs = disk_rd64(b + 64);
    c->n_recs = disk_rd64(b + 72);
    if (c->n_segs > (c->len - CKPT_HDR) / CKPT_SEG) return refuse(c, dir, "has inconsistent lengths");
    return 0;
}

/* Whether c's record table, of entries of re bytes, fills the rest of the file exactly. */
static int ckpt_lengths_ok(const disk_ckpt *c, uint64_t re) {
    return c->n_recs <= (c->len - CKPT_HDR - c->n_segs * CKPT_SEG) / re &&
        CKPT_HDR + c->n_segs * CKPT_SEG + c->n_recs * re == c->len;
}

/* Whether the CRC over the whole file, its own field read as zero, matches. */
static int ckpt_crc_ok(const disk_ckpt *c) {
    static const uint8_t zero[4];
    const uint8_t *b = c->buf;
    uint32_t crc = kvt_crc32c(0, b, CKPT_CRC_OFF);
    crc = kvt_crc32c(crc, zero, sizeof zero);
    crc = kvt_crc32c(crc, b + CKPT_CRC_OFF + 4, c->len - CKPT_CRC_OFF - 4);
    return crc == disk_rd32(b + CKPT_CRC_OFF);
}

static void ckpt_tables(disk_ckpt *c) {
    c->segs = c->buf + CKPT_HDR;
    c->recs = c->segs + c->n_segs * CKPT_SEG;
}

int kvt_disk_ckpt_load(kvt_disk *d, disk_ckpt *c) {
    /* the lock is held: no other writer replaces the file meanwhile */
    int rc = ckpt_map(d->dir_fd, d->dir, c);
    if (rc) return rc;
    const uint8_t *b = c->buf;
    if (disk_rd32(b + 40) != d->p.block_tokens || !ckpt_lengths_ok(c, rec_entry_bytes(d)))
        return refuse(c, d->dir, "has inconsistent lengths");
    /* records it lists were taken under these rules; under others, rescan */
    if (!kvt_hash128_eq(disk_rdh(b + 24), d->p.ns) || disk_rd64(b + 48) != d->p.payload_bytes ||
        disk_rd32(b + 44) != ckpt_flags(d) || disk_rd32(b + 56) != (d->p.mac ? d->key.id : 0) ||
        (d->p.mac && d->key_state != KEY_READ))
        return refuse(c, d->dir, "was written for another namespace, block size or MAC key");
    /* bounded by the file's length above; a full scan would need as much */
    reserve_records(d, c->n_recs);
    if (!ckpt_crc_ok(c)) return refuse(c, d->dir, "fails its CRC");
    ckpt_tables(c);
    return 0;
}

int kvt_disk_ckpt_load_segments(int dfd, const char *dir, disk_ckpt *c) {
    int rc = ckpt_map(dfd, dir, c);
    if (rc) return rc;
    uint32_t B = disk_rd32(c->buf + 40);
    if (B == 0 || B > KVT_BLOCK_TOKENS_MAX || !ckpt_lengths_ok(c, CKPT_REC_FIXED + 4ull * B))
        return refuse(c, dir, "has inconsistent lengths");
    if (!ckpt_crc_ok(c)) return refuse(c, dir, "fails its CRC");
    ckpt_tables(c);
    return 0;
}

uint64_t kvt_disk_ckpt_recorded(const disk_ckpt *c, uint64_t id, const struct stat *sb) {
    for (uint64_t i = 0; i < c->n_segs; i++) {
        const uint8_t *s = c->segs + i * CKPT_SEG;
        if (disk_rd64(s) == id) return disk_rd64(s + 16) == (uint64_t)sb->st_ino ? disk_rd64(s + 8) : 0;
    }
    return 0;
}

uint64_t kvt_disk_ckpt_covers(const disk_ckpt *c, uint64_t id, const struct stat *sb) {
    for (uint64_t i = 0; i < c->n_segs; i++) {
        const uint8_t *s = c->segs + i * CKPT_SEG;
        if (disk_rd64(s) != id) continue;
        uint64_t bytes = disk_rd64(s + 8);
        /* the same file, unchanged since (appends after the checkpoint changed
         * its mtime too: then it is scanned whole, once) */
        if (disk_rd64(s + 16) != (uint64_t)sb->st_ino || (uint64_t)sb->st_size < bytes ||
            disk_rd64(s + 24) != (uint64_t)sb->st_mtim.tv_sec || disk_rd64(s + 32) != (uint64_t)sb->st_mtim.tv_nsec)
            return UINT64_MAX;
        return bytes;
    }
    return UINT64_MAX;
}

/* Starts loading the table slots entry p will touch, CKPT_AHEAD entries before
 * it is applied: the key maps are far larger than the caches, and these
 * misses, one after another, were most of an open's time. */
static void prefetch_entry(const kvt_disk *d, const uint8_t *p) {
    kvt_hash128 h = disk_rdh(p + 24);
    kvt_hmap128_prefetch(&d->map, h);
    kvt_prefix_prefetch(d->p.index, h);
    kvt_prefix_prefetch(d->p.index, disk_rdh(p + 40));
}

/* The index of segs whose id is id (ids ascending), starting the search at k
 * (records come in slot order: usually the same as the last); n_segs if none. */
static size_t find_seg(disk_seg *const *segs, size_t n_segs, size_t k, uint64_t id) {
    if (k < n_segs && segs[k]->id == id) return k;
    size_t lo = 0, hi = n_segs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (segs[mid]->id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < n_segs && segs[lo]->id == id ? lo : n_segs;
}

/* Open runs on the owner's thread before the tier is handed to anyone and
 * before the writer starts, so records go into the prefix index at once,
 * with no event (and no copy of their tokens) queued for later. */
uint64_t kvt_disk_ckpt_apply(kvt_disk *d, const disk_ckpt *c, disk_seg *const *segs, const uint64_t *covered,
                             size_t n_segs) {
    uint64_t re = rec_entry_bytes(d), added = 0;
    size_t k = 0;
    kvt_disk_apply_events_locked(d); /* none at open; applied in order if there were */
    for (uint64_t i = 0; i < KVT_MIN(c->n_recs, (uint64_t)CKPT_AHEAD); i++) prefetch_entry(d, c->recs + i * re);
    for (uint64_t i = 0; i < c->n_recs; i++) {
        const uint8_t *p = c->recs + i * re;
        if (i + CKPT_AHEAD < c->n_recs) prefetch_entry(d, p + CKPT_AHEAD * re);
        uint64_t id = disk_rd64(p), off = disk_rd64(p + 8);
        uint32_t bytes = disk_rd32(p + 16);
        k = find_seg(segs, n_segs, k, id);
        if (k >= n_segs || covered[k] == UINT64_MAX) continue;
        if (off % KVT_DISK_ALIGN || bytes % KVT_DISK_ALIGN || !bytes || bytes > d->rec_max || off + bytes > covered[k])
            continue;
        /* entries sit at multiples of 8 bytes in a mapping: the ids are aligned */
        const int32_t *tokens = (const int32_t *)(const void *)(p + CKPT_REC_FIXED);
        kvt_hash128 hash = disk_rdh(p + 24);
        uint32_t slot = kvt_disk_rec_put(d, hash, segs[k], off, bytes);
        if (d->n_ev) kvt_disk_apply_events_locked(d); /* a second entry under a key replaced the first */
        kvt_disk_index_add(d, hash, disk_rdh(p + 40), tokens, slot);
        added++;
    }
    return added;
}
