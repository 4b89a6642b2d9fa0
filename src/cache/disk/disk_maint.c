// SPDX-License-Identifier: MIT
/* Directory maintenance behind `kvtier cache`: walk (list and verify every
 * record), compact (rewrite segments without corrupt, foreign or duplicate
 * records) and clear. Each opens the directory itself; compact and clear
 * take its lock, as the store does, and walk only reads. */
#include "tier_disk.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sodium.h>
#include <zstd.h>

#include "common.h"
#include "progress.h"
#include "disk_internal.h"
#include "hmap128.h"

typedef struct {
    int (*fn)(void *ctx, const kvt_disk_walk_info *w);
    void *ctx;
    const char *segment;
    ZSTD_DCtx *zd;
    uint8_t *dec;
    size_t dec_cap;
    const mac_key *key; /* verify checks MACs under it (the scan reports a bad one corrupt) */
} walk_ctx;

static int walk_scan_fn(void *ctx, uint64_t off, uint64_t bytes, int status, const kvt_disk_record *rec,
                        const uint8_t *raw) {
    walk_ctx *w = ctx;
    kvt_disk_walk_info info = {w->segment, off, bytes, status, *rec, KVT_DISK_MAC_NONE, w->key != NULL, NULL};
    if (status == 0 && raw) {
        kvt_disk_record full;
        kvt_disk_record_parse(raw, rec->record_bytes, 1, &full);
        if (w->dec_cap < full.payload_bytes) {
            free(w->dec);
            w->dec_cap = full.payload_bytes;
            w->dec = kvt_xmalloc(w->dec_cap);
        }
        if (kvt_disk_decode_with(w->zd, &full, w->dec, w->dec_cap)) info.status = KVT_EFORMAT;
    }
    info.mac = !(rec->flags & KVT_DISK_FLAG_MAC)     ? KVT_DISK_MAC_NONE
        : raw && kvt_disk_mac_checkable(w->key, rec) ? KVT_DISK_MAC_OK
                                                     : KVT_DISK_MAC_UNCHECKED;
    info.rec.tokens = NULL;
    info.rec.stored = NULL;
    info.rec.raw = NULL;
    if (info.status) info.why = kvt_errmsg(); /* the scan, parse, MAC or decode said what is wrong */
    return w->fn(w->ctx, &info);
}

/* A segment file shorter than the index checkpoint recorded it (recorded
 * bytes, size now): the records past its end are lost. One bad stretch, from
 * the end of the file to where the checkpoint says it reached. */
static int walk_cut_segment(walk_ctx *w, uint64_t size, uint64_t recorded) {
    kvt_disk_record none;
    memset(&none, 0, sizeof none);
    kvt_fail(KVT_EFORMAT,
             "the file is %" PRIu64 " bytes but the index checkpoint recorded %" PRIu64
             ": it was cut short and the records past its end are lost",
             size, recorded);
    return walk_scan_fn(w, size, recorded - size, KVT_EFORMAT, &none, NULL);
}

int kvt_disk_walk(const char *dir, int verify, int (*fn)(void *ctx, const kvt_disk_walk_info *w), void *ctx) {
    int dfd = kvt_disk_dir_open(dir, DIR_READ);
    if (dfd < 0) return dfd;
    uint64_t *ids;
    long n = kvt_disk_list_segments(dfd, dir, 0, &ids);
    if (n < 0) {
        close(dfd);
        return kvt_fail((int)n, "cache dir %s: cannot list: %s", dir, strerror((int)-n));
    }
    /* verify checks MACs with the directory's key: its owner's, as the store would */
    mac_key key;
    int have_key = 0;
    struct stat db;
    if (verify && fstat(dfd, &db) == 0) {
        int krc = kvt_disk_key_load(dfd, dir, db.st_uid, &key);
        if (krc && krc != KVT_ENOTFOUND) {
            free(ids);
            close(dfd);
            return krc;
        }
        have_key = krc == 0;
    }
    /* headers (and with verify whole records) read ahead in windows, as the open after a crash does */
    kvt_disk_scan_reader *rd = kvt_disk_scan_reader_new(0, 1);
    uint8_t *vbuf = NULL;
    size_t vcap = 0;
    walk_ctx w = {fn, ctx, NULL, ZSTD_createDCtx(), NULL, 0, have_key ? &key : NULL};
    /* the checkpoint's sizes tell a segment cut short, even to nothing, from one that ends cleanly */
    disk_ckpt ck;
    int have_ckpt = kvt_disk_ckpt_load_segments(dfd, dir, &ck) == 0;
    int rc = 0;
    for (long i = 0; i < n && !rc; i++) {
        char nm[SEG_NAME_MAX];
        kvt_disk_seg_name(nm, sizeof nm, ids[i]);
        int fd = kvt_disk_file_open(dfd, dir, nm, O_RDONLY, 0);
        struct stat sb;
        if (fd == -ENOENT) continue; /* reclaimed meanwhile */
        if (fd < 0) {                /* a link or a FIFO: skipped, never followed or waited on */
            kvt_log(KVT_LOG_WARN, "%s", kvt_errmsg());
            continue;
        }
        if (fstat(fd, &sb) == 0) {
            w.segment = nm;
            uint64_t size = (uint64_t)sb.st_size, recorded = have_ckpt ? kvt_disk_ckpt_recorded(&ck, ids[i], &sb) : 0;
            rc = kvt_disk_scan_segment_from(fd, 0, size, verify, w.key, rd, NULL, &vbuf, &vcap, walk_scan_fn, &w);
            if (!rc && recorded > size) rc = walk_cut_segment(&w, size, recorded);
        }
        close(fd);
    }
    if (have_ckpt) kvt_disk_ckpt_free(&ck);
    ZSTD_freeDCtx(w.zd);
    free(w.dec);
    kvt_disk_scan_reader_free(rd);
    free(vbuf);
    free(ids);
    close(dfd);
    sodium_memzero(&key, sizeof key);
    return rc;
}

int kvt_disk_segment_bytes(const char *dir, uint64_t *bytes, uint64_t *files) {
    *bytes = 0;
    if (files) *files = 0;
    int dfd = kvt_disk_dir_open(dir, DIR_READ);
    if (dfd < 0) return dfd;
    uint64_t *ids;
    long n = kvt_disk_list_segments(dfd, dir, 0, &ids);
    for (long i = 0; i < n; i++) {
        char nm[SEG_NAME_MAX];
        kvt_disk_seg_name(nm, sizeof nm, ids[i]);
        struct stat sb;
        if (fstatat(dfd, nm, &sb, AT_SYMLINK_NOFOLLOW) || !S_ISREG(sb.st_mode)) continue;
        *bytes += (uint64_t)sb.st_size;
        if (files) ++*files;
    }
    if (n >= 0) free(ids);
    close(dfd);
    return n < 0 ? kvt_fail((int)n, "cache dir %s: cannot list: %s", dir, strerror((int)-n)) : 0;
}

/* Opens dir as its owner and takes its lock, as the maintenance that writes
 * it (compact, clear) must. Returns the directory's fd and *lock_fd (close
 * both), or a negative error: the lock's holder, -EROFS for a read-only
 * directory that has no lock file, or a directory that is no cache (see
 * kvt_disk_dir_adopt; nothing is written in it). An empty directory has
 * nothing to maintain: its fd with *lock_fd -1, and no lock file made in it
 * (which would make it a directory the store refuses). */
static int open_locked(const char *dir, int *lock_fd) {
    *lock_fd = -1;
    int dfd = kvt_disk_dir_open(dir, DIR_OWNED);
    if (dfd < 0) return dfd;
    int fresh, arc = kvt_disk_dir_adopt(dfd, dir, 0, NULL, &fresh);
    if (arc || fresh) {
        if (arc) close(dfd);
        return arc ? arc : dfd;
    }
    int unlocked;
    *lock_fd = kvt_disk_lock_dir(dfd, dir, &unlocked);
    if (*lock_fd < 0) {
        close(dfd);
        return unlocked ? kvt_fail(-EROFS, "cache dir %s is read-only", dir) : *lock_fd;
    }
    kvt_disk_ckpt_remove(dfd); /* the segments are about to change under it */
    return dfd;
}

/* Copies the keepers of one segment to a temp file and renames it over the
 * segment (or removes the segment when nothing is kept). */
typedef struct {
    const kvt_hash128 *keep_ns;
    const mac_key *key; /* NULL without a key file: MAC'd records are kept unchecked */
    kvt_hmap128 *seen;
    kvt_disk_gc_report *rep;
    int out_fd;
    uint64_t out_bytes;
    int dropped, err;
} gc_ctx;

static int gc_scan_fn(void *ctx, uint64_t off, uint64_t bytes, int status, const kvt_disk_record *rec,
                      const uint8_t *raw) {
    gc_ctx *g = ctx;
    if (status == KVT_EUNSUPPORTED) {
        g->rep->dropped_foreign++;
        g->dropped = 1;
        return 0;
    }
    if (status) {
        g->rep->dropped_corrupt++;
        g->dropped = 1;
        return 0;
    }
    /* signed under a lost key: never usable again, like another namespace */
    if ((g->keep_ns && !kvt_hash128_eq(rec->ns, *g->keep_ns)) ||
        (g->key && (rec->flags & KVT_DISK_FLAG_MAC) && rec->key_id != g->key->id)) {
        g->rep->dropped_foreign++;
        g->dropped = 1;
        return 0;
    }
    if (kvt_hmap128_get(g->seen, rec->hash, NULL)) {
        g->rep->dropped_dup++;
        g->dropped = 1;
        return 0;
    }
    kvt_hmap128_put(g->seen, rec->hash, 1);
    g->rep->kept++;
    ssize_t w = pwrite(g->out_fd, raw, bytes, (off_t)g->out_bytes);
    if (w != (ssize_t)bytes) {
        g->err = w < 0 ? -errno : -EIO;
        return 1;
    }
    g->out_bytes += bytes;
    return 0;
}

/* gc of one segment (id): its records that are valid, of keep_ns (NULL:
 * any) and not already seen in a newer segment are copied to a temporary
 * file that replaces it (fsync'd first); a segment that keeps everything is
 * left as it is, one that keeps nothing is removed. buf/vbuf are the scan's
 * buffers. Returns 0 (also for a file that is not a segment we wrote, left
 * alone) or a negative error. */
static int compact_segment(int dfd, const char *dir, uint64_t id, const kvt_hash128 *keep_ns, const mac_key *key,
                           kvt_hmap128 *seen, kvt_disk_gc_report *rep, kvt_disk_scan_reader *rd, uint8_t **vbuf,
                           size_t *vcap) {
    char nm[SEG_NAME_MAX], tmp[TMP_NAME_MAX];
    kvt_disk_seg_name(nm, sizeof nm, id);
    snprintf(tmp, sizeof tmp, "%s%s", nm, TMP_SUFFIX);
    int fd = kvt_disk_file_open(dfd, dir, nm, O_RDONLY, 0);
    if (fd == -ELOOP || fd == -EINVAL) { /* not a segment we wrote: leave it alone */
        kvt_log(KVT_LOG_WARN, "%s", kvt_errmsg());
        return 0;
    }
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb)) {
        int rc = fd < 0 ? fd : -errno;
        if (fd >= 0) close(fd);
        return rc;
    }
    rep->bytes_before += (uint64_t)sb.st_size;
    int out = kvt_disk_tmp_create(dfd, dir, tmp, 0);
    if (out < 0) {
        close(fd);
        return out;
    }
    gc_ctx g = {keep_ns, key, seen, rep, out, 0, 0, 0};
    kvt_disk_scan_segment_from(fd, 0, (uint64_t)sb.st_size, 1, g.key, rd, NULL, vbuf, vcap, gc_scan_fn, &g);
    close(fd);
    if (!g.err && g.out_bytes && g.out_bytes != (uint64_t)sb.st_size) g.dropped = 1;
    if (!g.err && g.dropped && g.out_bytes && fsync(out)) g.err = -errno;
    close(out);
    int rc = 0;
    if (g.err) {
        unlinkat(dfd, tmp, 0);
        rc = kvt_fail(g.err, "cache dir %s: rewriting %s: %s", dir, nm, strerror(-g.err));
    } else if (!g.dropped) {
        unlinkat(dfd, tmp, 0);
        rep->bytes_after += (uint64_t)sb.st_size;
    } else if (!g.out_bytes) {
        unlinkat(dfd, tmp, 0);
        unlinkat(dfd, nm, 0);
    } else if (renameat(dfd, tmp, dfd, nm)) {
        rc = -errno;
        unlinkat(dfd, tmp, 0);
    } else {
        rep->bytes_after += g.out_bytes;
    }
    return rc;
}

int kvt_disk_compact(const char *dir, const kvt_hash128 *keep_ns, kvt_disk_gc_report *rep) {
    memset(rep, 0, sizeof *rep);
    int lock_fd;
    int dfd = open_locked(dir, &lock_fd);
    if (dfd < 0) return dfd;
    if (lock_fd < 0) { /* empty: nothing to rewrite */
        close(dfd);
        return 0;
    }
    uint64_t *ids;
    long n = kvt_disk_list_segments(dfd, dir, 0, &ids);
    if (n < 0) {
        close(lock_fd);
        close(dfd);
        return kvt_fail((int)n, "cache dir %s: cannot list: %s", dir, strerror((int)-n));
    }
    /* with the key, a record whose MAC fails is dropped as corrupt; without
     * one, MAC'd records are kept (the key may come back from a backup) */
    mac_key key;
    int krc = kvt_disk_key_load(dfd, dir, geteuid(), &key);
    if (krc && krc != KVT_ENOTFOUND) {
        free(ids);
        close(lock_fd);
        close(dfd);
        return krc;
    }
    kvt_hmap128 seen;
    kvt_hmap128_init(&seen);
    kvt_disk_scan_reader *rd = kvt_disk_scan_reader_new(0, 1);
    uint8_t *vbuf = NULL;
    size_t vcap = 0;
    int rc = 0;
    kvt_progress prog;
    char what[sizeof prog.what];
    snprintf(what, sizeof what, "cache gc %s", dir);
    kvt_progress_begin(&prog, what, (uint64_t)n, "segments");
    /* newest first, so the copy a reinsertion wrote last is the one kept */
    for (long i = n - 1; i >= 0 && !rc; i--) {
        kvt_progress_update(&prog, (uint64_t)(n - 1 - i));
        rc = compact_segment(dfd, dir, ids[i], keep_ns, krc ? NULL : &key, &seen, rep, rd, &vbuf, &vcap);
    }
    kvt_progress_end(&prog, (uint64_t)n);
    fsync(dfd);
    kvt_hmap128_free(&seen);
    kvt_disk_scan_reader_free(rd);
    free(vbuf);
    free(ids);
    close(lock_fd);
    close(dfd);
    sodium_memzero(&key, sizeof key);
    return rc;
}

int kvt_disk_clear(const char *dir, uint64_t *removed) {
    if (removed) *removed = 0;
    int lock_fd;
    int dfd = open_locked(dir, &lock_fd);
    if (dfd < 0) return dfd;
    if (lock_fd < 0) { /* empty: nothing to remove */
        close(dfd);
        return 0;
    }
    DIR *dh = kvt_disk_dir_list(dfd);
    if (!dh) {
        int e = errno;
        close(lock_fd);
        close(dfd);
        return kvt_fail(-e, "cache dir %s: cannot list: %s", dir, strerror(e));
    }
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(dh))) {
        uint64_t id;
        if (!kvt_disk_parse_seg_name(e->d_name, &id) && !kvt_disk_is_seg_tmp_name(e->d_name)) continue;
        /* unlinkat removes a link planted under a segment's name, not its target */
        struct stat sb;
        uint64_t sz = fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode)
            ? (uint64_t)sb.st_size
            : 0;
        if (unlinkat(dfd, e->d_name, 0))
            rc = kvt_fail(-errno, "cannot remove %s/%s: %s", dir, e->d_name, strerror(errno));
        else if (removed) *removed += sz;
    }
    closedir(dh);
    fsync(dfd);
    close(lock_fd);
    close(dfd);
    return rc;
}
