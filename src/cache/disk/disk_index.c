// SPDX-License-Identifier: MIT
/* The disk store's record index (disk_internal.h, "the store"): where each
 * record lies (the key map and the slots of d->recs), the live segments and
 * their references, the events that keep the prefix index in step, the
 * write-disable latch, and the lookup of a key in the write queue. The store's
 * other files (tier_disk.c, disk_writer.c, disk_read.c, disk_ckpt.c) call down
 * into it, and it calls only the prefix index, so no call runs back up to
 * them. Every function here runs with d->mu held, or before the writer
 * thread starts. */
#include "disk_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

/* The first capacity of the record slots and of the event list. */
#define RECS_MIN_CAP 64

/* Drops one reference; closes and frees a reclaimed segment with its last. mu held. */
void kvt_disk_seg_unref(disk_seg *s) {
    if (--s->refs == 0 && s->dead) {
        close(s->fd);
        free(s);
    }
}

static uint32_t rec_alloc(kvt_disk *d) {
    if (d->n_free) return d->free_slots[--d->n_free];
    if (d->n_recs == d->cap_recs) {
        d->cap_recs = d->cap_recs ? 2 * d->cap_recs : RECS_MIN_CAP;
        d->recs = kvt_xrealloc(d->recs, d->cap_recs * sizeof *d->recs);
        d->free_slots = kvt_xrealloc(d->free_slots, d->cap_recs * sizeof *d->free_slots);
    }
    return d->n_recs++;
}

void kvt_disk_push_event(kvt_disk *d, int add, kvt_hash128 hash, kvt_hash128 parent, uint32_t slot,
                         const int32_t *tokens) {
    if (!d->p.index) return;
    if (d->n_ev == d->cap_ev) {
        d->cap_ev = d->cap_ev ? 2 * d->cap_ev : RECS_MIN_CAP;
        d->ev = kvt_xrealloc(d->ev, d->cap_ev * sizeof *d->ev);
    }
    disk_event *e = &d->ev[d->n_ev++];
    e->add = add;
    e->hash = hash;
    e->parent = parent;
    e->slot = slot;
    e->tokens = NULL;
    if (add) {
        e->tokens = kvt_xmalloc(d->p.block_tokens * sizeof(int32_t));
        memcpy(e->tokens, tokens, d->p.block_tokens * sizeof(int32_t));
    }
}

/* Forgets the record at slot (mu held): map, slot, index (via an event). */
void kvt_disk_rec_drop(kvt_disk *d, uint32_t slot) {
    disk_rec *r = &d->recs[slot];
    kvt_hmap128_del(&d->map, r->hash);
    kvt_disk_push_event(d, 0, r->hash, r->hash, slot, NULL);
    d->st.live_bytes -= r->bytes;
    r->used = 0;
    r->seg = NULL;
    d->free_slots[d->n_free++] = slot;
}

/* Stores a record's location under hash (mu held), replacing any record
 * under the key (a copy of the same block or a collision the index sorts
 * out); returns its slot. The prefix index learns of it separately. */
uint32_t kvt_disk_rec_put(kvt_disk *d, kvt_hash128 hash, disk_seg *seg, uint64_t off, uint32_t bytes) {
    uint32_t slot;
    if (kvt_hmap128_get(&d->map, hash, &slot)) kvt_disk_rec_drop(d, slot);
    slot = rec_alloc(d);
    disk_rec *r = &d->recs[slot];
    memset(r, 0, sizeof *r);
    r->hash = hash;
    r->seg = seg;
    r->off = off;
    r->bytes = bytes;
    r->used = 1;
    kvt_hmap128_put(&d->map, hash, slot);
    d->st.live_bytes += bytes;
    return slot;
}

void kvt_disk_rec_insert(kvt_disk *d, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, disk_seg *seg,
                         uint64_t off, uint32_t bytes) {
    kvt_disk_push_event(d, 1, hash, parent, kvt_disk_rec_put(d, hash, seg, off, bytes), tokens);
}

/* Adds the record at slot to the prefix index now (owner's thread, mu held).
 * A refused add (the key names another block in the index) drops the record. */
void kvt_disk_index_add(kvt_disk *d, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, uint32_t slot) {
    if (!d->p.index || kvt_prefix_add(d->p.index, hash, parent, tokens, KVT_TIER_T2, slot) != -EEXIST) return;
    d->st.collisions++;
    uint32_t cur;
    if (kvt_hmap128_get(&d->map, hash, &cur) && cur == slot) {
        /* not in the index: drop without a remove event */
        kvt_prefix *idx = d->p.index;
        d->p.index = NULL;
        kvt_disk_rec_drop(d, slot);
        d->p.index = idx;
    }
}

/* Applies queued index updates on the owner's thread. */
void kvt_disk_apply_events_locked(kvt_disk *d) {
    for (size_t i = 0; i < d->n_ev; i++) {
        disk_event *e = &d->ev[i];
        if (e->add) {
            kvt_disk_index_add(d, e->hash, e->parent, e->tokens, e->slot);
            free(e->tokens);
        } else {
            kvt_prefix_remove(d->p.index, e->hash, KVT_TIER_T2); /* KVT_ENOTFOUND after a refused add */
        }
    }
    d->n_ev = 0;
}

uint64_t kvt_disk_segs_bytes(const kvt_disk *d) {
    uint64_t s = 0;
    for (size_t i = 0; i < d->n_segs; i++) s += d->segs[i]->bytes;
    return s;
}

void kvt_disk_segs_push(kvt_disk *d, disk_seg *s) {
    if (d->n_segs == d->cap_segs) {
        d->cap_segs = d->cap_segs ? 2 * d->cap_segs : 16;
        d->segs = kvt_xrealloc(d->segs, d->cap_segs * sizeof *d->segs);
    }
    d->segs[d->n_segs++] = s;
}

/* Disables writes after the first failure, with one warning (mu held). */
void kvt_disk_disable_writes(kvt_disk *d, int err, const char *what) {
    d->st.write_errors++;
    if (d->write_err) return;
    d->write_err = err ? err : -EIO;
    d->st.writes_disabled = 1;
    kvt_logk(KVT_LOG_WARN, "dir,what,error", "disk tier %s: %s failed (%s); writes disabled, reads continue", d->dir,
             what, strerror(-d->write_err));
}

/* The queue slot holding hash, or NULL (mu held). */
disk_qslot *kvt_disk_queued_slot(kvt_disk *d, kvt_hash128 hash) {
    for (uint32_t i = 0; i < d->q_count; i++) {
        disk_qslot *q = &d->q[(d->q_head + i) % d->p.queue_depth];
        if (!q->cancelled && kvt_hash128_eq(q->hash, hash)) return q;
    }
    return NULL;
}
