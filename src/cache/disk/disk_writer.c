// SPDX-License-Identifier: MIT
/* The disk store's writer thread (tier_disk.h "Threads"): it drains the
 * bounded write queue, encodes each block into a record and appends it to
 * the head segment, starting a new segment when the head is full, and
 * reclaims the oldest segments, rewriting their recently hit records. When a
 * write finds the disk full it stops writes, and looks for free space every
 * params.space_retry_s until records fit again, then resumes them. */
#include "disk_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

/* Records rewritten to the head per reclaim, as a fraction of a segment. */
#define REINSERT_DIVISOR 4
/* zstd level for new records: KV pages compress little, so favour speed. */
#define ZSTD_LEVEL 1
/* Writes resume when the filesystem has room for this many raw records, and
 * at least a quarter segment: less would be full again at once (a stop and a
 * resume logged per retry). */
#define SPACE_RESUME_RECORDS 4
#define SPACE_RESUME_SEGMENT_DIVISOR 4

/* A write failed (mu held). A full disk or quota stops writes until the
 * writer finds room again (with space_retry_s set); anything else disables
 * them for good. One warning either way. */
static void write_failed(kvt_disk *d, int err, const char *what) {
    if ((err != -ENOSPC && err != -EDQUOT) || d->p.space_retry_s <= 0 || d->write_err) {
        kvt_disk_disable_writes(d, err, what);
        return;
    }
    d->st.write_errors++;
    d->write_err = err;
    d->st.writes_disabled = 1;
    d->space_wait = 1;
    d->space_next = kvt_now() + d->p.space_retry_s;
    d->st.space_pauses++;
    kvt_logk(KVT_LOG_WARN, "dir,what,error,retry_s",
             "disk tier %s: %s failed (%s); writes disabled until space is free again (checked every %g s), "
             "reads continue",
             d->dir, what, strerror(-err), d->p.space_retry_s);
}

/* Bytes of free space that let writes resume. */
static uint64_t space_needed(const kvt_disk *d) {
    return KVT_MAX(SPACE_RESUME_RECORDS * d->rec_max, d->p.segment_bytes / SPACE_RESUME_SEGMENT_DIVISOR);
}

/* With writes stopped for lack of space: waits (mu held) until the next look
 * at the free space is due or work arrives; when due, looks, and resumes
 * writes if enough is free. Writer thread. */
static void wait_for_space(kvt_disk *d) {
    double left = d->space_next - kvt_now();
    if (left > 0) {
        struct timespec until = kvt_deadline_after(left);
        if (pthread_cond_timedwait(&d->cv_work, &d->mu, &until) != ETIMEDOUT) return;
    }
    d->space_next = kvt_now() + d->p.space_retry_s;
    uint64_t need = space_needed(d);
    pthread_mutex_unlock(&d->mu);
    struct statvfs sv;
    uint64_t avail = fstatvfs(d->dir_fd, &sv) ? 0 : (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
    pthread_mutex_lock(&d->mu);
    if (avail < need || !d->space_wait) return;
    d->space_wait = 0;
    d->write_err = 0;
    d->st.writes_disabled = 0;
    d->st.space_resumes++;
    kvt_logk(KVT_LOG_INFO, "dir,free_bytes", "disk tier %s: %.1f MiB free again; writes resumed", d->dir,
             (double)avail / 1048576.0);
}


/* Reclaims the oldest segments until the sealed ones fit in size_bytes (mu
 * held). Records that were hit are marked moving and listed in *moves (up to
 * move_cap bytes in total), with their segment referenced in *srcs so the
 * caller can copy them; the rest leave the store. */
size_t kvt_disk_reclaim_locked(kvt_disk *d, uint64_t move_cap, disk_move **moves, size_t *n_moves, disk_seg ***srcs,
                               uint64_t **src_offs) {
    size_t reclaimed = 0;
    uint64_t used = kvt_disk_segs_bytes(d), moved = 0;
    while (d->n_segs && used > d->p.size_bytes && d->segs[0] != d->head) {
        disk_seg *v = d->segs[0];
        memmove(d->segs, d->segs + 1, (d->n_segs - 1) * sizeof *d->segs);
        d->n_segs--;
        for (uint32_t i = 0; i < d->n_recs; i++) {
            disk_rec *r = &d->recs[i];
            if (!r->used || r->seg != v) continue;
            if (r->hit && moves && moved + r->bytes <= move_cap) {
                *moves = kvt_xrealloc(*moves, (*n_moves + 1) * sizeof **moves);
                *srcs = kvt_xrealloc(*srcs, (*n_moves + 1) * sizeof **srcs);
                *src_offs = kvt_xrealloc(*src_offs, (*n_moves + 1) * sizeof **src_offs);
                (*moves)[*n_moves] = (disk_move){i, moved, r->bytes};
                (*srcs)[*n_moves] = v;
                (*src_offs)[*n_moves] = r->off;
                (*n_moves)++;
                moved += r->bytes;
                v->refs++;
                r->seg = NULL;
                r->moving = 1;
            } else {
                kvt_disk_rec_drop(d, i);
                d->st.evicted++;
            }
        }
        char nm[SEG_NAME_MAX];
        kvt_disk_seg_name(nm, sizeof nm, v->id);
        if (unlinkat(d->dir_fd, nm, 0) && errno != ENOENT)
            kvt_logk(KVT_LOG_WARN, "dir,file,error", "disk tier %s: cannot remove %s: %s", d->dir, nm, strerror(errno));
        used -= v->bytes;
        v->dead = 1;
        v->refs++;
        kvt_disk_seg_unref(v);
        d->st.segments_reclaimed++;
        reclaimed++;
    }
    return reclaimed;
}

/* Rewrites the records rotate copied out (mbuf; ok[i]: read back intact)
 * at the end of the new head segment s (NULL: none could be made); a record
 * that cannot be rewritten, or no longer fits, leaves the tier (evicted).
 * Writer thread. */
static void write_moves(kvt_disk *d, disk_seg *s, const disk_move *moves, size_t n_moves, uint8_t *mbuf, const int *ok) {
    for (size_t i = 0; i < n_moves; i++) {
        int wrc = -1;
        if (s && ok[i] && s->bytes + moves[i].bytes <= d->p.segment_bytes) {
            double t0 = kvt_now();
            wrc = kvt_dio_write(d->wio, s->fd, mbuf + moves[i].at, moves[i].bytes, s->bytes);
            pthread_mutex_lock(&d->mu);
            d->st.write_seconds += kvt_now() - t0;
            if (wrc) write_failed(d, wrc, "rewriting a hit record");
            pthread_mutex_unlock(&d->mu);
        }
        pthread_mutex_lock(&d->mu);
        disk_rec *r = &d->recs[moves[i].slot];
        if (r->used && r->moving) { /* not removed meanwhile */
            r->moving = 0;
            if (wrc == 0) {
                r->seg = s;
                r->off = s->bytes;
                r->hit = 0;
                s->bytes += moves[i].bytes;
                d->st.reinserted++;
                d->st.bytes_written += moves[i].bytes;
            } else {
                kvt_disk_rec_drop(d, moves[i].slot);
                d->st.evicted++;
            }
        }
        pthread_mutex_unlock(&d->mu);
    }
}

/* Starts a new head segment: seals the current one, reclaims old segments,
 * creates the file, and rewrites the reclaimed records that were hit.
 * Writer thread. Returns 0 or -errno (writes then disabled). */
static int rotate(kvt_disk *d) {
    uint64_t move_cap = kvt_disk_align_up(d->p.segment_bytes / REINSERT_DIVISOR);
    disk_move *moves = NULL;
    disk_seg **srcs = NULL;
    uint64_t *src_offs = NULL;
    size_t n_moves = 0;
    if (d->head) fdatasync(d->head->fd); /* only this thread changes head */
    pthread_mutex_lock(&d->mu);
    d->head = NULL;
    kvt_disk_reclaim_locked(d, move_cap, &moves, &n_moves, &srcs, &src_offs);
    pthread_mutex_unlock(&d->mu);

    /* copy the moving records out before their files are closed */
    uint8_t *mbuf = n_moves ? kvt_disk_aligned_buf(move_cap) : NULL;
    int *ok = n_moves ? kvt_xcalloc(n_moves, sizeof *ok) : NULL;
    for (size_t i = 0; i < n_moves; i++) {
        kvt_dio_req rq = {srcs[i]->fd, src_offs[i], moves[i].bytes, mbuf + moves[i].at, 0, NULL};
        kvt_dio_read_batch(d->wio, &rq, 1, NULL, NULL);
        kvt_disk_record rec;
        ok[i] = rq.res == (ssize_t)moves[i].bytes && kvt_disk_record_parse(rq.buf, moves[i].bytes, 1, &rec) == 0;
    }

    int rc = 0;
    disk_seg *s = kvt_xcalloc(1, sizeof *s);
    s->id = d->next_seg_id++;
    char nm[SEG_NAME_MAX];
    kvt_disk_seg_name(nm, sizeof nm, s->id);
    /* O_EXCL: a new name, never an existing file or a link planted under it */
    s->fd = openat(d->dir_fd, nm, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | (d->o_direct ? O_DIRECT : 0),
                   FILE_MODE);
    if (s->fd < 0) {
        rc = -errno;
        free(s);
        s = NULL;
    }

    pthread_mutex_lock(&d->mu);
    for (size_t i = 0; i < n_moves; i++) kvt_disk_seg_unref(srcs[i]);
    if (s) {
        kvt_disk_segs_push(d, s);
        d->head = s;
    } else {
        write_failed(d, rc, "creating a segment");
    }
    pthread_mutex_unlock(&d->mu);

    write_moves(d, s, moves, n_moves, mbuf, ok);
    free(mbuf);
    free(ok);
    free(moves);
    free(srcs);
    free(src_offs);
    return rc;
}

/* A queued block that will not be written (writes disabled or failed): it
 * leaves the tier. Its index presence was added by kvt_disk_put, so it is
 * removed through an event like any record (mu held). */
static void queued_lost(kvt_disk *d, const disk_qslot *q) {
    d->st.dropped++;
    if (!kvt_hmap128_get(&d->map, q->hash, NULL)) kvt_disk_push_event(d, 0, q->hash, q->hash, 0, NULL);
    /* with writes disabled, kvt_disk_disable_writes has said so once already */
    if (!d->write_err && (d->st.dropped <= DROP_LOG_FIRST || d->st.dropped % DROP_LOG_EVERY == 0))
        kvt_logk(KVT_LOG_WARN, "dir,dropped", "disk tier %s: a block could not be written (%" PRIu64 " dropped so far)",
                 d->dir, d->st.dropped);
}

/* Encodes and appends one queued block. Writer thread. */
static void write_block(kvt_disk *d, disk_qslot *q) {
    pthread_mutex_lock(&d->mu);
    int skip = q->cancelled ? 3 : d->write_err ? 1 : kvt_hmap128_get(&d->map, q->hash, NULL) ? 2 : 0;
    if (skip == 1) queued_lost(d, q);
    if (skip == 2) d->st.dup_puts++;
    pthread_mutex_unlock(&d->mu);
    if (skip) return;

    uint32_t hb = d->header_bytes;
    uint8_t *rec = q->buf;
    uint64_t stored = d->p.payload_bytes;
    kvt_disk_codec codec = KVT_DISK_CODEC_RAW;
    if (d->p.codec == KVT_DISK_CODEC_ZSTD) {
        /* keep zstd only when it saves space; otherwise the raw record is smaller */
        size_t n = ZSTD_compressCCtx(d->zc, d->wbuf + hb, d->p.payload_bytes - 1, q->buf + hb, d->p.payload_bytes,
                                     ZSTD_LEVEL);
        if (!ZSTD_isError(n)) {
            memcpy(d->wbuf + RH_TOKENS, q->buf + RH_TOKENS, hb - RH_TOKENS);
            rec = d->wbuf;
            stored = n;
            codec = KVT_DISK_CODEC_ZSTD;
        }
    }
    uint64_t bytes = kvt_disk_encode_with(rec, d->p.block_tokens, codec, d->p.payload_bytes, stored, d->p.ns, q->hash,
                                          q->parent, d->p.mac ? &d->key : NULL);
    int rc = 0;
    if (!d->head || d->head->bytes + bytes > d->p.segment_bytes) rc = rotate(d);
    if (rc) {
        pthread_mutex_lock(&d->mu);
        queued_lost(d, q);
        pthread_mutex_unlock(&d->mu);
        return;
    }
    disk_seg *s = d->head;
    double t0 = kvt_now();
    rc = kvt_dio_write(d->wio, s->fd, rec, bytes, s->bytes);
    double dt = kvt_now() - t0;
    /* a failed append may have left part of the record past the end: give its space back */
    if (rc && ftruncate(s->fd, (off_t)s->bytes))
        kvt_logk(KVT_LOG_DEBUG, "dir,error", "disk tier %s: cannot trim a failed append: %s", d->dir, strerror(errno));
    pthread_mutex_lock(&d->mu);
    d->st.write_seconds += dt;
    if (rc) {
        write_failed(d, rc, "writing a record");
        queued_lost(d, q);
    } else {
        kvt_disk_rec_insert(d, q->hash, q->parent, (const int32_t *)(const void *)(rec + RH_TOKENS), s, s->bytes,
                            (uint32_t)bytes);
        s->bytes += bytes;
        d->st.puts++;
        d->st.bytes_written += bytes;
        d->st.payload_in += d->p.payload_bytes;
        d->st.stored_out += stored;
    }
    pthread_mutex_unlock(&d->mu);
}

void *kvt_disk_writer_main(void *arg) {
    kvt_disk *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while ((!d->q_count || d->paused) && !d->stop && !d->ckpt_buf) {
            if (d->space_wait) wait_for_space(d);
            else pthread_cond_wait(&d->cv_work, &d->mu);
        }
        if (d->ckpt_buf) {
            kvt_disk_ckpt_write_pending(d);
            continue;
        }
        if (!d->q_count) break;
        disk_qslot *q = &d->q[d->q_head];
        d->writer_busy = 1;
        pthread_mutex_unlock(&d->mu);
        write_block(d, q);
        pthread_mutex_lock(&d->mu);
        d->q_head = (d->q_head + 1) % d->p.queue_depth;
        d->q_count--;
        d->writer_busy = 0;
        pthread_cond_broadcast(&d->cv_room);
        if (!d->q_count) pthread_cond_broadcast(&d->cv_idle);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}
