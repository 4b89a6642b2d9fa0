// SPDX-License-Identifier: MIT
/* The cache policy's private parts (cache.h is the contract), shared by its
 * files:
 *   cache.c          create/free, key roots, registration, the public entry
 *                    points and statistics
 *   cache_restore.c  lookup (with the shared-tier probe), restore-or-recompute,
 *                    acquiring a matched run, attach
 *   cache_demote.c   demotion through the tiers, T0 reclaim, flush
 *   cache_session.c  pins, prefetch and warm sessions
 *   cache_pins.c     releasing pins, expiring and giving up warm sessions
 *   cache_explain.c  why reuse stopped where it did
 * Thread-safety: none, as for the cache itself. */
#ifndef KVT_CACHE_INTERNAL_H
#define KVT_CACHE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "admit.h"
#include "cache.h"
#include "common.h"
#include "tier.h"
#include "tier_disk.h"
#include "tier_remote.h"

#define NUMERICS_MAX 128 /* the numerics id in a key root: engine version / kernels */

typedef struct {
    int cached; /* the cache holds a reference and the index has T0 presence */
    kvt_hash128 hash;
    uint64_t tick; /* last use, for LRU */
    double t_use;  /* last use in kvt_now() seconds, for disk admission */
    int picked;    /* chosen for the reclaim batch being gathered (cache_demote.c) */
} page_rec;

struct kvt_pin {
    int32_t n;
    int32_t *pages;
};

/* A session kept warm: its context pinned in T0 until it expires, or until
 * the pool needs the pages (lowest priority first, then the soonest to
 * expire); released pages become idle and are demoted like any other. */
typedef struct {
    char name[KVT_SESSION_NAME_MAX + 1];
    kvt_hash128 root; /* the namespace it was kept warm in: a session is (root, name) */
    kvt_pin *pin;
    double expires; /* kvt_now() seconds */
    int priority;
} warm_session;

struct kvt_cache {
    kvt_engine *e;
    kvt_prefix *index;
    /* The tiers below T0, by tier id (tiers[T0] unused; ops NULL where off).
     * The policy below talks to them only through tier.h; ram and disk are
     * the same instances, kept typed for their configuration and detailed
     * statistics. */
    kvt_tier_ref tiers[KVT_TIER_COUNT];
    kvt_ram *ram;
    kvt_disk *disk;
    kvt_remote *remote;
    kvt_admit *admit; /* KVT_ADMIT_REUSED: the seen-twice sketch for persistent tiers */
    kvt_cache_params params;
    int flushing; /* shutdown: every block goes down, waiting for room */
    /* restore-or-recompute: measured read bandwidth of the measured tiers and prefill cost */
    double tier_bytes_per_s[KVT_TIER_COUNT]; /* EWMA of get_many throughput; 0 = not measured yet */
    double prefill_s_per_token;              /* EWMA; 0 = not measured yet */
    int32_t B;
    size_t page_bytes;
    page_rec *pages; /* by page id */
    int32_t n_pages;
    uint64_t tick;
    kvt_fingerprint fp;
    uint32_t kv_type;
    char numerics[NUMERICS_MAX];
    int32_t *scratch_tokens; /* B ids */
    void *scratch_page;      /* page_bytes, allocated when the engine has no host pages (kvt_cache_page_out) */
    uint8_t *reclaim_buf;    /* reclaim_cap pages: a reclaim batch copied out of the engine at once */
    int reclaim_mapped;      /* reclaim_buf is the engine's host memory (kvt_engine_host_alloc), not malloc's */
    int32_t reclaim_cap;
    uint64_t evictions, discarded;
    uint64_t demotions[KVT_TIER_COUNT], restores[KVT_TIER_COUNT];
    uint64_t t2_recompute, t2_not_admitted;
    uint64_t shortfalls[KVT_SHORTFALL_COUNT], shortfall_tokens;
    int32_t pinned_pages;
    warm_session *sessions;
    int32_t n_sessions, cap_sessions;
    uint64_t sessions_released, sessions_expired, prefetched_blocks;
    uint64_t lookups, hit_tokens, lookup_tokens;
    uint64_t reuse_stops[KVT_REUSE_REASON_COUNT];
    kvt_hash128 shared_root; /* the unsalted root, to recognise a different_namespace miss */
};

static inline void kvt_cache_touch_page(kvt_cache *c, int32_t p) {
    c->pages[p].tick = ++c->tick;
    c->pages[p].t_use = kvt_now();
}

/* ---- cache_restore.c ---- */

/* Matched blocks of tokens in the local index; *hits is malloc'd (caller frees). */
size_t kvt_cache_match_local(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, kvt_prefix_hit **hits);

/* kvt_cache_match_local, then the shared tier where the local match ends
 * short of the first `want` full blocks (see cache_restore.c). */
size_t kvt_cache_match_shared(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, size_t want,
                              kvt_prefix_hit **hits);

/* Makes the first n_blocks hits T0-resident for the caller (at most max_new
 * restored from lower tiers); see cache_restore.c. Returns how many. */
int32_t kvt_cache_acquire_run(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, const kvt_prefix_hit *hits,
                              int32_t n_blocks, int32_t max_new, int32_t *pages, kvt_tier *tier_of, double *restore_s,
                              kvt_attach_info *info, kvt_shortfall *why);

/* ---- cache_demote.c ---- */

/* T1's evict hook: the block has left T1 and its index presence. */
void kvt_cache_on_ram_evict(void *ctx, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void *payload,
                            size_t bytes, double last_use);

/* Page p's bytes at a host address for a tier to write from: the page itself
 * where the engine exposes its pages to the host (kvt_page_host_const), else
 * a copy out of the engine into c->scratch_page, valid until the next call.
 * NULL if the copy failed. */
/* Frees reclaim_buf however it was taken (cache_demote.c). */
void kvt_cache_free_reclaim_buf(kvt_cache *c);
const void *kvt_cache_page_out(kvt_cache *c, int32_t p);
/* --write-through: a block goes into every persistent tier as soon as it is computed. */
void kvt_cache_write_through(kvt_cache *c, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens,
                             const void *payload);

/* ---- cache_pins.c ---- */

/* Under pressure, the warm session to give up first, or -1. */
int32_t kvt_cache_session_victim(const kvt_cache *c);
/* Releases warm session i's pin and forgets it. */
void kvt_cache_session_drop(kvt_cache *c, int32_t i);

#endif
