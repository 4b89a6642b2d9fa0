// SPDX-License-Identifier: MIT
/* The disk store's batched reads (kvt_disk_get_many): blocks still queued are
 * served from the queue; the rest are planned, sorted by segment and offset,
 * coalesced into extents, read together and checked record by record (CRC,
 * MAC, key, parent, tokens) before they are decoded. Owner's thread, which
 * shares each completed read's records with one helper thread. */
#include "disk_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common.h"

/* Adjacent records are read as one extent up to this size: big enough to cut
 * per-read overhead, small enough that several reads stay in flight while the
 * CRC and copy of finished ones run. */
#define COALESCE_MAX (1u << 20)

/* Serves reqs that are still queued for writing from the queue (mu held);
 * the writer only reads the payload and tokens of a slot, so copying them
 * here is safe. Returns the hits. */
static size_t read_queued(kvt_disk *d, kvt_disk_read *reqs, size_t n) {
    size_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        if (reqs[i].result == 0 || kvt_hmap128_get(&d->map, reqs[i].hash, NULL)) continue;
        disk_qslot *q = kvt_disk_queued_slot(d, reqs[i].hash);
        if (!q || !kvt_hash128_eq(q->parent, reqs[i].parent) ||
            memcmp(q->buf + RH_TOKENS, reqs[i].tokens, d->p.block_tokens * sizeof(int32_t)))
            continue;
        memcpy(reqs[i].out, q->buf + d->header_bytes, d->p.payload_bytes);
        reqs[i].result = 0;
        hits++;
    }
    d->st.queue_hits += hits;
    return hits;
}

/* Arenas of at least this size are aligned to it and asked for transparent
 * huge pages (read_arena). */
#define ARENA_HUGE (2u << 20)

/* The read arena is a ring of extent slots, KVT_DISK_READ_RING_DEFAULT (8
 * MiB) in all unless the params say otherwise: reads land in a free slot,
 * and a slot is reused as soon as its records are checked and copied out. A
 * restore of any size thus touches only that much read memory, not a buffer
 * as large as itself. Each fresh page of a buffer costs a fault and a
 * zeroing when the kernel first pins it for a direct read; on a virtual
 * machine that was the largest part of a restore's CPU (more than the MAC),
 * paid again by every fresh process. 8 MiB keeps eight 1 MiB reads in
 * flight, enough to keep a disk busy. */

/* The read arena of a batch, allocated at the tier's first restore and
 * grown only when a larger record needs larger slots. Large arenas are 2 MiB
 * aligned and advised as huge pages, so they fault in a few pages at a time;
 * where the kernel gives no huge pages the advice is ignored and nothing
 * else changes. */
static uint8_t *read_arena(size_t n) {
    if (n < ARENA_HUGE) return kvt_disk_aligned_buf(n);
    size_t len = (n + ARENA_HUGE - 1) / ARENA_HUGE * ARENA_HUGE;
    void *p = NULL;
    if (posix_memalign(&p, ARENA_HUGE, len)) return kvt_disk_aligned_buf(n);
    (void)madvise(p, len, MADV_HUGEPAGE);
    return p;
}

/* One planned record read of a batch. */
typedef struct {
    kvt_disk_read *req;
    uint32_t slot;
    disk_seg *seg;
    uint64_t off;
    uint32_t bytes;
    uint8_t *buf; /* where the record lands in the read arena */
    int status;   /* 0 hit, 1 miss (mismatch), 2 corrupt, 3 read error */
} disk_plan;

typedef struct {
    disk_plan **plans; /* sorted by (segment, offset) */
    size_t first, count;
    uint32_t slot; /* the ring slot it is read into */
} disk_extent;

/* A batch's read ring: slots of slot_bytes in d->rbuf, the free ones on a stack. */
typedef struct {
    kvt_disk *d;
    size_t slot_bytes;
    uint32_t *free_slots, n_free;
    struct done_read *done; /* completed reads not yet checked (their slots still taken) */
    uint32_t n_done;
    uint64_t split; /* slots checked by two threads */
} read_ctx;

static int plan_cmp(const void *a, const void *b) {
    const disk_plan *x = *(disk_plan *const *)a, *y = *(disk_plan *const *)b;
    if (x->seg->id != y->seg->id) return x->seg->id < y->seg->id ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Checks and decodes one record read into its arena slot, decoding with zd
 * (the decoder of the thread it runs on). */
static void finish_plan(kvt_disk *d, disk_plan *pl, ssize_t got, ZSTD_DCtx *zd) {
    if (got < 0) {
        pl->status = 3;
        return;
    }
    kvt_disk_record rec;
    if (kvt_disk_record_parse(pl->buf, (size_t)got, 1, &rec) || rec.record_bytes != pl->bytes ||
        (d->p.mac && kvt_disk_record_verify(&rec, &d->key, pl->buf))) {
        pl->status = 2;
        return;
    }
    kvt_disk_read *r = pl->req;
    if (!kvt_hash128_eq(rec.ns, d->p.ns) || !kvt_hash128_eq(rec.hash, r->hash) ||
        !kvt_hash128_eq(rec.parent, r->parent) || rec.block_tokens != d->p.block_tokens ||
        rec.payload_bytes != d->p.payload_bytes || memcmp(rec.tokens, r->tokens, d->p.block_tokens * sizeof(int32_t))) {
        pl->status = 1;
        return;
    }
    pl->status = kvt_disk_decode_with(zd, &rec, r->out, d->p.payload_bytes) ? 2 : 0;
}

/* A completed read: its extent and the read's result. */
typedef struct done_read {
    disk_extent *e;
    ssize_t res;
} done_read;

/* Checks and copies out the ith of nth equal runs of the records of the
 * completed reads rc->done[0..n_done) (kvt_pool_run), in order within each
 * run. Each record is touched by exactly one thread: its bytes in the slot
 * (GMAC zeroes and restores fields in place), its plan and its request's
 * output; the rest (params, key, the done list) is only read meanwhile, so
 * the threads share nothing they write. */
static void check_part(void *ctx, int ith, int nth) {
    read_ctx *rc = ctx;
    ZSTD_DCtx *zd = ith ? rc->d->zd2 : rc->d->zd;
    size_t total = 0;
    for (uint32_t k = 0; k < rc->n_done; k++) total += rc->done[k].e->count;
    size_t lo = total * (size_t)ith / (size_t)nth, hi = total * (size_t)(ith + 1) / (size_t)nth, base = 0;
    for (uint32_t k = 0; k < rc->n_done && base < hi; k++) {
        disk_extent *e = rc->done[k].e;
        ssize_t res = rc->done[k].res;
        for (size_t i = lo > base ? lo - base : 0; i < e->count && base + i < hi; i++) {
            disk_plan *pl = e->plans[e->first + i];
            ssize_t rel = (ssize_t)(pl->off - e->plans[e->first]->off);
            ssize_t got = res < 0 ? res : res > rel ? KVT_MIN(res - rel, (ssize_t)pl->bytes) : 0;
            finish_plan(rc->d, pl, got, zd);
        }
        base += e->count;
    }
}

/* An extent's read finished: it waits on the done list for check_done. */
static void extent_done(void *ctx, kvt_dio_req *rq) {
    read_ctx *rc = ctx;
    rc->done[rc->n_done++] = (done_read){rq->user, rq->res};
}

/* Checks and copies out the records of the completed reads, and frees their
 * slots. Two or more records are split over this thread and the disk tier's
 * second one (d->rpool), which run the same checks in the same order per
 * record while the other reads stay in flight; the slots go back on the free
 * stack only after kvt_pool_run has returned, that is after every record in
 * them is checked and copied. */
static void check_done(read_ctx *rc) {
    size_t total = 0;
    for (uint32_t k = 0; k < rc->n_done; k++) total += rc->done[k].e->count;
    if (total >= 2 && rc->d->rpool) {
        kvt_pool_run(rc->d->rpool, check_part, rc);
        rc->split += rc->n_done;
    } else {
        check_part(rc, 0, 1);
    }
    for (uint32_t k = 0; k < rc->n_done; k++) rc->free_slots[rc->n_free++] = rc->done[k].e->slot;
    rc->n_done = 0;
}

/* Starts the tier's second checking thread and its decoder at the first batch
 * with several records to a read; without them (no memory or threads), or
 * with KVT_DISK_READ_SPLIT=0 in the environment (one core to spare, or a
 * before/after measurement), every slot is checked on the calling thread,
 * with the same outcome. */
static void read_helpers(kvt_disk *d) {
    const char *env = getenv("KVT_DISK_READ_SPLIT");
    if (d->rpool || (env && !strcmp(env, "0"))) return;
    if (!d->zd2) d->zd2 = ZSTD_createDCtx();
    if (d->zd2) d->rpool = kvt_pool_new(2);
    if (d->rpool && kvt_pool_threads(d->rpool) < 2) {
        kvt_pool_free(d->rpool);
        d->rpool = NULL;
    }
}

/* Coalesces the sorted plans order[0..np) into reads of adjacent records of
 * one segment (at most COALESCE_MAX bytes each, or one larger record): ext[]
 * and rq[] get the extents (returned: how many; buffers are given at
 * submission, read_ring) and *longest the longest read. */
static size_t plan_extents(disk_plan **order, size_t np, disk_extent *ext, kvt_dio_req *rq, size_t *longest) {
    size_t ne = 0;
    *longest = 0;
    for (size_t i = 0; i < np; i++) {
        disk_plan *pl = order[i];
        disk_extent *last = ne ? &ext[ne - 1] : NULL;
        disk_plan *prev = i ? order[i - 1] : NULL;
        if (last && prev->seg == pl->seg && prev->off + prev->bytes == pl->off &&
            rq[ne - 1].len + pl->bytes <= COALESCE_MAX) {
            last->count++;
            rq[ne - 1].len += pl->bytes;
        } else {
            ext[ne] = (disk_extent){order, i, 1, 0};
            rq[ne] = (kvt_dio_req){pl->seg->fd, pl->off, pl->bytes, NULL, 0, &ext[ne]};
            ne++;
        }
        *longest = KVT_MAX(*longest, rq[ne - 1].len);
    }
    return ne;
}

/* Reads the extents rq[0..ne) through a ring of slots in d->rbuf (grown to
 * hold them): each read is submitted when a slot is free, and the records of
 * the reads that have completed are checked and copied out (check_done) on
 * two threads while the other reads proceed. */
static uint64_t read_ring(kvt_disk *d, disk_extent *ext, kvt_dio_req *rq, size_t ne, size_t longest) {
    if (!ne) return 0;
    size_t slot_bytes = kvt_disk_align_up(longest);
    size_t ring = d->p.read_ring_bytes ? d->p.read_ring_bytes : KVT_DISK_READ_RING_DEFAULT;
    size_t n_slots = KVT_MIN(KVT_MAX(ring / slot_bytes, (size_t)2), ne);
    if (n_slots * slot_bytes > d->rbuf_cap) {
        free(d->rbuf);
        d->rbuf_cap = n_slots * slot_bytes;
        d->rbuf = read_arena(d->rbuf_cap);
    }
    if (ne >= 2 || ext[0].count >= 2) read_helpers(d);
    read_ctx rc = {
        d, slot_bytes, kvt_xmalloc(n_slots * sizeof *rc.free_slots), 0, kvt_xmalloc(n_slots * sizeof *rc.done), 0, 0};
    for (size_t i = n_slots; i-- > 0;) rc.free_slots[rc.n_free++] = (uint32_t)i;
    size_t next = 0;
    while (next < ne || kvt_dio_inflight(d->rio) || rc.n_done) {
        size_t k = KVT_MIN((size_t)rc.n_free, ne - next);
        for (size_t i = next; i < next + k; i++) {
            ext[i].slot = rc.free_slots[--rc.n_free];
            rq[i].buf = d->rbuf + (size_t)ext[i].slot * slot_bytes;
            for (size_t j = 0; j < ext[i].count; j++) {
                disk_plan *pl = ext[i].plans[ext[i].first + j];
                pl->buf = (uint8_t *)rq[i].buf + (pl->off - rq[i].off);
            }
        }
        size_t sent = k ? kvt_dio_submit(d->rio, rq + next, k, extent_done, &rc) : 0;
        for (size_t i = next + k; i-- > next + sent;) rc.free_slots[rc.n_free++] = ext[i].slot; /* not taken */
        next += sent;
        kvt_dio_reap(d->rio, 1, extent_done, &rc);
        /* a lone completed slot of one record waits for a second while more
         * reads are in flight, so that both threads have a record to check */
        if (d->rpool && rc.n_done == 1 && rc.done[0].e->count == 1 && kvt_dio_inflight(d->rio))
            kvt_dio_reap(d->rio, 1, extent_done, &rc);
        check_done(&rc);
    }
    free(rc.done);
    free(rc.free_slots);
    return rc.split;
}

size_t kvt_disk_get_many(kvt_disk *d, kvt_disk_read *reqs, size_t n) {
    if (!n) return 0;
    disk_plan *plans = kvt_xcalloc(n, sizeof *plans);
    disk_plan **order = kvt_xcalloc(n, sizeof *order);
    size_t np = 0;
    pthread_mutex_lock(&d->mu);
    kvt_disk_apply_events_locked(d);
    for (size_t i = 0; i < n; i++) reqs[i].result = KVT_ENOTFOUND;
    size_t queue_hits = read_queued(d, reqs, n);
    for (size_t i = 0; i < n; i++) {
        if (reqs[i].result == 0) continue;
        uint32_t slot;
        if (!kvt_hmap128_get(&d->map, reqs[i].hash, &slot) || !d->recs[slot].seg) continue;
        disk_rec *r = &d->recs[slot];
        disk_plan *pl = &plans[np];
        *pl = (disk_plan){&reqs[i], slot, r->seg, r->off, r->bytes, NULL, 2};
        r->seg->refs++; /* the file stays open until this read is done */
        order[np++] = pl;
    }
    pthread_mutex_unlock(&d->mu);

    qsort(order, np, sizeof *order, plan_cmp);
    disk_extent *ext = kvt_xcalloc(np ? np : 1, sizeof *ext);
    kvt_dio_req *rq = kvt_xcalloc(np ? np : 1, sizeof *rq);
    size_t longest;
    size_t ne = plan_extents(order, np, ext, rq, &longest);
    double t0 = kvt_now();
    uint64_t split = read_ring(d, ext, rq, ne, longest);
    double dt = kvt_now() - t0;

    size_t hits = queue_hits;
    pthread_mutex_lock(&d->mu);
    d->st.read_seconds += dt;
    d->st.read_slots_split += split;
    for (size_t i = 0; i < ne; i++)
        if (rq[i].res > 0) d->st.bytes_read += (uint64_t)rq[i].res;
    for (size_t i = 0; i < np; i++) {
        disk_plan *pl = &plans[i];
        disk_rec *r = &d->recs[pl->slot];
        int same = r->used && r->seg == pl->seg && r->off == pl->off;
        if (pl->status == 0) {
            pl->req->result = 0;
            hits++;
            if (same) r->hit = 1;
        } else if (pl->status >= 2) {
            if (pl->status == 2) d->st.corrupt++;
            else d->st.read_errors++;
            kvt_logk(KVT_LOG_WARN, "dir,segment_hex,offset,state",
                     "disk tier %s: record at segment %016" PRIx64 " offset %" PRIu64 " is %s; dropped", d->dir,
                     pl->seg->id, pl->off, pl->status == 2 ? "corrupt" : "unreadable");
            if (same) kvt_disk_rec_drop(d, pl->slot);
        }
        kvt_disk_seg_unref(pl->seg);
    }
    d->st.hits += hits;
    d->st.misses += n - hits;
    kvt_disk_apply_events_locked(d);
    pthread_mutex_unlock(&d->mu);
    free(ext);
    free(rq);
    free(order);
    free(plans);
    return hits;
}

int kvt_disk_get(kvt_disk *d, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, void *out) {
    kvt_disk_read r = {hash, parent, tokens, out, 0};
    kvt_disk_get_many(d, &r, 1);
    return r.result;
}
