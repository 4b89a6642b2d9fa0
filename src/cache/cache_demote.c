// SPDX-License-Identifier: MIT
/* Demotion and eviction in the cache policy (cache.h "Demotion"): a block
 * leaving a tier goes into the next one down that takes it, shared tiers get
 * what persistent tiers keep, T0 reclaims idle leaves first, and a flush
 * writes everything down at shutdown. */
#include "cache_internal.h"

#include <stdlib.h>
#include <string.h>


/* Puts a block into tier t. A persistent tier's writer may be behind: the
 * tier itself waits (bounded) for room; when flushing (shutdown) we keep
 * waiting. A block newly stored in a persistent, unshared tier is also put
 * into every shared tier below it (tier.h "Sharing": what this node keeps is
 * what other nodes will want). Returns >= 0 if the block is in tier t
 * afterwards. */
static int tier_put(kvt_cache *c, kvt_tier t, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens,
                    const void *payload) {
    const kvt_tier_ref *x = &c->tiers[t];
    int rc;
    if (!payload) return KVT_EARG; /* the page's bytes could not be copied out: nothing to store */
    while ((rc = x->ops->put(x->impl, hash, parent, tokens, payload)) == KVT_ELIMIT && c->flushing && x->ops->persistent)
        if (x->ops->flush(x->impl)) break;
    if (rc == 0) {
        c->demotions[t]++;
        if (x->ops->persistent && !x->ops->shared)
            for (int s = t + 1; s < KVT_TIER_COUNT; s++)
                if (c->tiers[s].ops && c->tiers[s].ops->shared) tier_put(c, (kvt_tier)s, hash, parent, tokens, payload);
    }
    return rc;
}

/* --write-through: a block goes into every persistent tier as soon as it is
 * computed (a shared tier below the first one gets it through tier_put too;
 * its second put is a cheap "already held"). */
void kvt_cache_write_through(kvt_cache *c, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens,
                             const void *payload) {
    for (int t = KVT_TIER_T1; t < KVT_TIER_COUNT; t++)
        if (c->tiers[t].ops && c->tiers[t].ops->persistent) tier_put(c, (kvt_tier)t, hash, parent, tokens, payload);
}

/* Whether a block goes into a persistent tier. By default all do (inactive
 * KV is kept, never discarded, while a tier has room). With KVT_ADMIT_REUSED,
 * a block used within the last admit_live_s seconds (a live session's
 * context, read once per step) still always goes down; only blocks idle
 * longer must have been seen twice, to keep one-shot prompts off the SSD. */
static int admitted(kvt_cache *c, kvt_hash128 hash, double last_use) {
    if (c->flushing || c->params.disk_admit == KVT_ADMIT_ALL) return 1;
    if (kvt_now() - last_use < c->params.admit_live_s) return 1;
    return kvt_admit_sight(c->admit, hash);
}

/* A block leaves tier `from` (T0 reclaim, or a T1 eviction): it goes into
 * the next tier down that takes it. Held is the mask of tiers that hold it
 * now; past the first lower tier, a tier at or above one that holds it is
 * skipped (a lower copy is findable already). Counted as discarded only when
 * no tier takes it. */
static void demote(kvt_cache *c, kvt_tier from, uint32_t held, kvt_hash128 hash, kvt_hash128 parent,
                   const int32_t *tokens, const void *payload, double last_use) {
    int first = 1;
    for (int t = from + 1; t < KVT_TIER_COUNT; t++) {
        if (!c->tiers[t].ops) continue;
        if (!first && (held >> t)) return; /* a copy at this tier or below: still findable */
        first = 0;
        if (c->tiers[t].ops->persistent && !admitted(c, hash, last_use)) {
            c->t2_not_admitted++;
            break;
        }
        if (tier_put(c, (kvt_tier)t, hash, parent, tokens, payload) >= 0) return;
    }
    if (!(held >> (from + 1))) c->discarded++;
}

/* T1's evict hook: the block has left T1 and its index presence. */
void kvt_cache_on_ram_evict(void *ctx, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void *payload,
                            size_t bytes, double last_use) {
    kvt_cache *c = ctx;
    (void)bytes;
    kvt_prefix_info info;
    uint32_t held = kvt_prefix_get(c->index, hash, &info) ? 0 : info.tiers;
    demote(c, KVT_TIER_T1, held, hash, parent, tokens, payload, last_use);
}

/* ---- T0 reclaim -------------------------------------------------------------- */

/* The idle T0 leaf used longest ago, or -1. */
static int32_t pick_victim(kvt_cache *c) {
    int32_t best = -1;
    for (int32_t p = 0; p < c->n_pages; p++) {
        page_rec *r = &c->pages[p];
        if (!r->cached || r->picked || kvt_page_refcount(c->e, p) != 1) continue;
        if (best >= 0 && r->tick >= c->pages[best].tick) continue;
        kvt_prefix_info info;
        if (kvt_prefix_get(c->index, r->hash, &info) || info.children[KVT_TIER_T0]) continue;
        best = p;
    }
    return best;
}

const void *kvt_cache_page_out(kvt_cache *c, int32_t p) {
    const void *host = kvt_page_host_const(c->e, p);
    if (host) return host;
    if (!c->scratch_page) c->scratch_page = kvt_xmalloc(c->page_bytes);
    kvt_page_out io = {.page = p, .host = c->scratch_page};
    return kvt_pages_copy_out(c->e, &io, 1) ? NULL : c->scratch_page;
}

/* Page p's block has left T0: out of the index, the page freed. */
static void reclaimed(kvt_cache *c, int32_t p) {
    kvt_prefix_remove(c->index, c->pages[p].hash, KVT_TIER_T0);
    c->pages[p].cached = 0;
    kvt_page_unref(c->e, p);
    c->evictions++;
}

/* Moves page p's block (its bytes at payload, NULL: copy them out now) down
 * a tier (see demote) and frees the page. */
static void reclaim(kvt_cache *c, int32_t p, const void *payload) {
    page_rec *r = &c->pages[p];
    kvt_prefix_info info;
    if (!kvt_prefix_get(c->index, r->hash, &info)) {
        kvt_hash128 parent = info.parent;
        uint32_t held = info.tiers & ~KVT_TIER_BIT(KVT_TIER_T0);
        memcpy(c->scratch_tokens, info.tokens, (size_t)c->B * sizeof(int32_t)); /* info dies on index change */
        demote(c, KVT_TIER_T0, held, r->hash, parent, c->scratch_tokens, payload ? payload : kvt_cache_page_out(c, p),
               r->t_use);
    }
    reclaimed(c, p);
}

void kvt_cache_free_reclaim_buf(kvt_cache *c) {
    if (c->reclaim_mapped) kvt_engine_host_free(c->e, c->reclaim_buf);
    else free(c->reclaim_buf);
    c->reclaim_buf = NULL;
    c->reclaim_mapped = 0;
}

/* Where T0's demotion puts page p's block first, T1 (when there is one: it
 * takes every block it has room for), the block gets its slot there now, and
 * the batch copies the page straight into it: *host becomes that slot, and 1
 * is returned (kvt_ram_put_end follows the copy). 2: T1 holds the block
 * already, nothing to store. 0: T1 refused it or is off; the page takes the
 * ordinary way down (reclaim). */
static int t1_slot(kvt_cache *c, int32_t p, void **host) {
    kvt_prefix_info info;
    if (!c->ram || kvt_prefix_get(c->index, c->pages[p].hash, &info)) return 0;
    memcpy(c->scratch_tokens, info.tokens, (size_t)c->B * sizeof(int32_t)); /* info dies on index change */
    void *slot;
    int rc = kvt_ram_put_begin(c->ram, c->pages[p].hash, info.parent, c->scratch_tokens, &slot);
    if (rc == 0) *host = slot;
    return rc == 0 ? 1 : rc == 1 ? 2 : 0;
}

/* The T0 page of p's parent block when it can leave in p's batch: idle, not
 * picked yet, and p's block its only child in T0 (it becomes a leaf as p
 * leaves); else -1. So an idle chain leaves as one run, not a block a batch. */
static int32_t parent_with(kvt_cache *c, int32_t p) {
    kvt_prefix_info info, up;
    if (kvt_prefix_get(c->index, c->pages[p].hash, &info) || kvt_prefix_get(c->index, info.parent, &up) ||
        !(up.tiers & KVT_TIER_BIT(KVT_TIER_T0)) || up.children[KVT_TIER_T0] != 1)
        return -1;
    uint64_t q = up.handle[KVT_TIER_T0];
    if (q >= (uint64_t)c->n_pages) return -1;
    const page_rec *r = &c->pages[q];
    return r->cached && !r->picked && kvt_page_refcount(c->e, (int32_t)q) == 1 ? (int32_t)q : -1;
}

/* When the engine's pages are not host memory (a GPU), every page copied out
 * is a transfer: the idle leaves that can go now (up to want), each with the
 * idle chain above it, are gathered first and copied out as one run, straight
 * into their T1 slots (t1_slot), then each moves down a tier. Returns how
 * many were reclaimed (0: none can go). */
static int32_t reclaim_batch(kvt_cache *c, int32_t want) {
    if (want > c->reclaim_cap) {
        kvt_cache_free_reclaim_buf(c);
        c->reclaim_cap = KVT_MAX(want, 16);
        /* memory mapped for the device where the engine has it: the run is copied out by DMA, no staging copy */
        size_t bytes = (size_t)c->reclaim_cap * c->page_bytes;
        c->reclaim_mapped = bytes <= kvt_engine_host_max(c->e) && (c->reclaim_buf = kvt_engine_host_alloc(c->e, bytes));
        if (!c->reclaim_mapped) c->reclaim_buf = kvt_xmalloc(bytes);
    }
    kvt_page_out *io = kvt_xmalloc((size_t)want * sizeof *io);
    int8_t *into_t1 = kvt_xmalloc((size_t)want);
    int32_t n = 0;
    for (int32_t p; n < want && (p = pick_victim(c)) >= 0;)
        for (; p >= 0 && n < want; p = parent_with(c, p), n++) {
            c->pages[p].picked = 1;
            io[n] = (kvt_page_out){.page = p, .host = c->reclaim_buf + (size_t)n * c->page_bytes};
            into_t1[n] = (int8_t)t1_slot(c, p, &io[n].host);
        }
    int ok = n && kvt_pages_copy_out(c->e, io, (size_t)n) == 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t p = io[i].page;
        c->pages[p].picked = 0;
        if (into_t1[i] == 1) kvt_ram_put_end(c->ram, c->pages[p].hash, ok);
        if (into_t1[i] == 2 || (into_t1[i] == 1 && ok)) {
            c->demotions[KVT_TIER_T1] += into_t1[i] == 1;
            reclaimed(c, p);
        } else {
            reclaim(c, p, ok ? io[i].host : NULL);
        }
    }
    free(io);
    free(into_t1);
    return n;
}

int kvt_cache_reserve(kvt_cache *c, int32_t n_pages) {
    if (c->n_sessions) kvt_cache_expire_sessions(c);
    const int batched = kvt_page_host_const(c->e, 0) == NULL;
    while (kvt_page_free_count(c->e) < n_pages) {
        if (batched && reclaim_batch(c, n_pages - kvt_page_free_count(c->e)) > 0) continue;
        int32_t v = pick_victim(c);
        int32_t w = v < 0 ? kvt_cache_session_victim(c) : -1;
        if (w >= 0) { /* a warm session's context yields to running work; it moves down, not out */
            kvt_logk(KVT_LOG_DEBUG, "session", "cache: releasing warm session '%s' early for room", c->sessions[w].name);
            kvt_cache_session_drop(c, w);
            c->sessions_released++;
            continue;
        }
        if (v < 0)
            return kvt_fail(KVT_ELIMIT,
                            "KV active memory exhausted: %d pages needed, %d free of %d and none reclaimable "
                            "(running sequences and pins hold the rest); raise --kv-active",
                            n_pages, kvt_page_free_count(c->e), c->n_pages);
        reclaim(c, v, NULL);
    }
    return 0;
}

/* The first persistent tier, or KVT_TIER_T0 if none is configured. */
static kvt_tier persistent_tier(const kvt_cache *c) {
    for (int t = KVT_TIER_T1; t < KVT_TIER_COUNT; t++)
        if (c->tiers[t].ops && c->tiers[t].ops->persistent) return (kvt_tier)t;
    return KVT_TIER_T0;
}

/* Cached T0 blocks that no persistent tier holds yet, written to the first one. */
static void flush_t0(kvt_cache *c, kvt_tier dst) {
    uint32_t persistent = 0;
    for (int t = KVT_TIER_T1; t < KVT_TIER_COUNT; t++)
        if (c->tiers[t].ops && c->tiers[t].ops->persistent) persistent |= KVT_TIER_BIT(t);
    for (int32_t p = 0; p < c->n_pages; p++) {
        if (!c->pages[p].cached) continue;
        kvt_prefix_info info;
        if (kvt_prefix_get(c->index, c->pages[p].hash, &info) || (info.tiers & persistent)) continue;
        kvt_hash128 parent = info.parent;
        memcpy(c->scratch_tokens, info.tokens, (size_t)c->B * sizeof(int32_t));
        tier_put(c, dst, c->pages[p].hash, parent, c->scratch_tokens, kvt_cache_page_out(c, p));
    }
}

int kvt_cache_flush(kvt_cache *c) {
    kvt_tier dst = persistent_tier(c);
    if (dst == KVT_TIER_T0) return 0;
    c->flushing = 1;
    flush_t0(c, dst);
    /* upper tiers first: RAM empties itself through its evict hook, down into the persistent tiers */
    int rc = 0;
    for (int t = KVT_TIER_T1; t < KVT_TIER_COUNT; t++) {
        const kvt_tier_ref *x = &c->tiers[t];
        if (!x->ops) continue;
        int r = x->ops->flush(x->impl);
        if (r && x->ops->persistent && !rc) rc = r;
    }
    c->flushing = 0;
    return rc;
}
