// SPDX-License-Identifier: MIT
/* The disk store's batched reads (kvt_disk_get_many): blocks still queued are
 * served from the queue; the rest are planned, sorted by segment and offset,
 * coalesced into extents, read together and checked record by record (CRC,
 * MAC, key, parent, tokens) before they are decoded. Owner's thread. */
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

/* The read arena of a batch. It is allocated at a process's first restore
 * and grows with the largest one, and each of its 4 KiB pages faults in as
 * the kernel pins it for the direct read: thousands of faults for a restore
 * of tens of MiB, each costly on a virtual machine. Large arenas are 2 MiB
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
} disk_extent;

typedef struct {
    kvt_disk *d;
} read_ctx;

static int plan_cmp(const void *a, const void *b) {
    const disk_plan *x = *(disk_plan *const *)a, *y = *(disk_plan *const *)b;
    if (x->seg->id != y->seg->id) return x->seg->id < y->seg->id ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Checks and decodes one record read into its arena slot. */
static void finish_plan(kvt_disk *d, disk_plan *pl, ssize_t got) {
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
    pl->status = kvt_disk_decode_with(d->zd, &rec, r->out, d->p.payload_bytes) ? 2 : 0;
}

static void extent_done(void *ctx, kvt_dio_req *rq) {
    kvt_disk *d = ((read_ctx *)ctx)->d;
    disk_extent *e = rq->user;
    for (size_t i = 0; i < e->count; i++) {
        disk_plan *pl = e->plans[e->first + i];
        ssize_t rel = (ssize_t)(pl->off - e->plans[e->first]->off);
        ssize_t got = rq->res < 0 ? rq->res : rq->res > rel ? KVT_MIN(rq->res - rel, (ssize_t)pl->bytes) : 0;
        finish_plan(d, pl, got);
    }
}

/* Coalesces the sorted plans order[0..np) into reads of adjacent records of
 * one segment (at most COALESCE_MAX bytes each): ext[] and rq[] get the
 * extents (returned: how many), their buffers placed in d->rbuf (grown to
 * hold them all) and each plan's buf set inside its extent's. */
static size_t plan_extents(kvt_disk *d, disk_plan **order, size_t np, disk_extent *ext, kvt_dio_req *rq) {
    size_t ne = 0, total = 0;
    for (size_t i = 0; i < np; i++) {
        disk_plan *pl = order[i];
        disk_extent *last = ne ? &ext[ne - 1] : NULL;
        disk_plan *prev = i ? order[i - 1] : NULL;
        if (last && prev->seg == pl->seg && prev->off + prev->bytes == pl->off &&
            rq[ne - 1].len + pl->bytes <= COALESCE_MAX) {
            last->count++;
            rq[ne - 1].len += pl->bytes;
        } else {
            ext[ne] = (disk_extent){order, i, 1};
            rq[ne] = (kvt_dio_req){pl->seg->fd, pl->off, pl->bytes, (void *)(uintptr_t)total, 0, &ext[ne]};
            ne++;
        }
        total += pl->bytes;
    }
    if (total > d->rbuf_cap) {
        free(d->rbuf);
        d->rbuf_cap = total;
        d->rbuf = read_arena(total);
    }
    for (size_t i = 0; i < ne; i++) {
        size_t at = (size_t)(uintptr_t)rq[i].buf;
        rq[i].buf = d->rbuf + at;
        for (size_t k = 0; k < ext[i].count; k++) {
            disk_plan *pl = order[ext[i].first + k];
            pl->buf = d->rbuf + at + (pl->off - rq[i].off);
        }
    }
    return ne;
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
    size_t ne = plan_extents(d, order, np, ext, rq);
    double t0 = kvt_now();
    read_ctx rc = {d};
    kvt_dio_read_batch(d->rio, rq, ne, extent_done, &rc);
    double dt = kvt_now() - t0;

    size_t hits = queue_hits;
    pthread_mutex_lock(&d->mu);
    d->st.read_seconds += dt;
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
