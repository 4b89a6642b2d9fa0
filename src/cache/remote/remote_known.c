// SPDX-License-Identifier: MIT
/* The remote tier's known set (remote_internal.h): the blocks this node
 * knows to be in T3, a ring of at most ring_cap with a map from key to ring
 * entry, and their presence in the prefix index; the lookup of a key in the
 * write queue and the held ring (and the reads it can serve); the writer's lost
 * blocks leaving the index; the end both get_many paths share (the readers'
 * parts summed and counted, the blocks not read forgotten).
 * The owner side (tier_remote.c) and the readers (remote_read.c,
 * remote_cluster_io.c) call down into it, and it calls only the prefix index
 * and the log. */
#include "remote_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "common.h"

/* ---- the known set: T3 presence in the index ----------------------------------- */

void kvt_remote_known_del(kvt_remote *r, kvt_hash128 hash) {
    uint32_t at;
    if (!kvt_hmap128_get(&r->known, hash, &at)) return;
    kvt_hmap128_del(&r->known, hash);
    r->ring[at].live = 0;
    if (r->p.index) kvt_prefix_remove(r->p.index, hash, KVT_TIER_T3);
}

int kvt_remote_known_add(kvt_remote *r, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens) {
    if (kvt_hmap128_get(&r->known, hash, NULL)) return 0;
    if (r->p.index && kvt_prefix_add(r->p.index, hash, parent, tokens, KVT_TIER_T3, 0)) return -EEXIST;
    while (r->ring_count == r->ring_cap) {
        kvt_remote_known_ent *old = &r->ring[r->ring_head];
        if (old->live) {
            kvt_hmap128_del(&r->known, old->hash);
            if (r->p.index) kvt_prefix_remove(r->p.index, old->hash, KVT_TIER_T3);
            r->st.forgotten++;
        }
        r->ring_head = (r->ring_head + 1) % r->ring_cap;
        r->ring_count--;
    }
    uint32_t at = (r->ring_head + r->ring_count++) % r->ring_cap;
    r->ring[at] = (kvt_remote_known_ent){hash, 1};
    kvt_hmap128_put(&r->known, hash, at);
    return 0;
}

kvt_remote_qslot *kvt_remote_queued_slot(kvt_remote *r, kvt_hash128 hash) {
    for (uint32_t i = 0; i < r->q_count; i++) {
        kvt_remote_qslot *q = &r->q[(r->q_head + i) % r->p.queue_depth];
        if (!q->cancelled && kvt_hash128_eq(q->hash, hash)) return q;
    }
    uint32_t at;
    if (r->held_count && kvt_hmap128_get(&r->held_map, hash, &at) && !r->held[at].cancelled) return &r->held[at];
    return NULL;
}

size_t kvt_remote_read_queued(kvt_remote *r, kvt_tier_read *reqs, size_t n) {
    size_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        kvt_remote_qslot *q = kvt_remote_queued_slot(r, reqs[i].hash);
        if (!q || !kvt_hash128_eq(q->parent, reqs[i].parent) ||
            memcmp(q->buf + KVT_DISK_HEADER_FIXED, reqs[i].tokens, r->p.block_tokens * sizeof(int32_t)))
            continue;
        memcpy(reqs[i].out, q->buf + r->header_bytes, r->p.payload_bytes);
        reqs[i].result = 0;
        hits++;
    }
    r->st.queue_hits += hits;
    return hits;
}

/* Unless the same block was queued again meanwhile. */
void kvt_remote_apply_lost_locked(kvt_remote *r) {
    for (size_t i = 0; i < r->n_lost; i++)
        if (!kvt_remote_queued_slot(r, r->lost[i])) kvt_remote_known_del(r, r->lost[i]);
    r->n_lost = 0;
}

/* ---- the end of a get_many, single-server and cluster ---------------------------- */

double kvt_remote_read_credit_s(const kvt_remote *r, size_t len, int nth) {
    return (double)len * (double)nth / (r->p.read_floor_mbps * 1e6);
}

kvt_remote_read_part kvt_remote_read_sum(const kvt_remote_read_part part[KVT_REMOTE_READ_CONNS_MAX]) {
    kvt_remote_read_part sum = {0};
    for (int t = 0; t < KVT_REMOTE_READ_CONNS_MAX; t++) {
        sum.hits += part[t].hits;
        sum.bad += part[t].bad;
        sum.bytes += part[t].bytes;
        sum.reached |= part[t].reached;
        sum.failed |= part[t].failed;
    }
    return sum;
}

void kvt_remote_read_count_locked(kvt_remote *r, size_t n, size_t hits, const kvt_remote_read_part *sum) {
    r->st.bytes_read += sum->bytes;
    r->st.bad += sum->bad;
    r->st.hits += hits;
    r->st.misses += n - hits;
}

void kvt_remote_read_forget(kvt_remote *r, const kvt_tier_read *reqs, size_t n, uint64_t bad) {
    if (bad)
        kvt_logk(KVT_LOG_DEBUG, "refused", "remote tier: %" PRIu64 " values refused (CRC, MAC, codec or identity)", bad);
    for (size_t i = 0; i < n; i++)
        if (reqs[i].result) kvt_remote_known_del(r, reqs[i].hash);
}
