// SPDX-License-Identifier: MIT
/* The cache policy: ties the engine's page pool (T0), the prefix index and
 * the tiers below T0 together. The lower tiers (T1 RAM, T2 disk, T3 remote)
 * are reached only through the tier interface (tier.h): the policy has no
 * special case per tier, only per property (persistent, measured).
 *
 * T0. Every full page whose block is indexed holds one extra reference owned
 * by the cache, so a finished sequence's pages stay resident (refcount 1 =
 * "idle") and later sequences attach them zero-copy. When the engine needs
 * pages, kvt_cache_reserve() reclaims idle pages: least recently used leaf
 * first (a block is a T0 leaf when no T0 block names it as parent, so a parent
 * outlives its children and the longest suffix goes first); warm sessions
 * yield their pages when nothing else is idle.
 *
 * Demotion (write-back). A block leaving a tier goes into the next tier down
 * that takes it: T0 -> T1 -> T2 -> T3, a tier that refuses passed over, a
 * persistent tier behind the admission rule (kvt_admit_policy). A block
 * newly stored in a persistent tier is also put into every shared tier below
 * it (T3: tier.h "Sharing"), so what one node persists other nodes find; and
 * --write-through reaches T3 the same way. A block is
 * never in no tier while it moves (tier.h: put returns once it is findable),
 * and one that no tier takes is counted as discarded.
 *
 * Restore. A request's matched run is pinned from lookup through restore
 * (acquire_run): its T0 pages referenced, room for the rest reserved, then
 * each block read from the fastest tier that holds it now, one batch per
 * tier, into a fresh page that becomes T0-resident again. Where the local
 * index matches fewer of a prompt's full blocks than the request can use and
 * a shared tier is on, the next blocks' keys are probed there first (one
 * round trip) and the ones found join the match as T3 presence. Blocks in measured
 * (slow) tiers are read only where that is faster than recomputing them.
 *
 * Identity. A block hit requires the chained key, the parent key and the B
 * token ids to be equal (prefix.h), and the key chain is rooted in the model
 * fingerprint, KV layout/dtype, B, the kernels' numerics id and a tenant salt,
 * so a restored page holds exactly the bytes a cold run would compute.
 *
 * Thread-safety: none; the engine's owner serialises every call. */
#ifndef KVT_CACHE_H
#define KVT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "blockhash.h"
#include "engine.h"
#include "prefix.h"
#include "tier_ram.h"

/* kvt_cache, kvt_cache_params, kvt_cache_new/free, kvt_cache_match,
 * kvt_cache_lookup/pin/release, kvt_cache_stats and kvt_cache_get_stats are
 * declared in kvtier.h; below are the engine-facing parts. */

/* Releases the warm sessions whose keep-warm time is over, so their pages
 * become idle (reclaimable, and counted so by kvt_cache_get_stats) and their
 * pins stop counting against the pin limit. Returns the seconds until the
 * next warm session expires, or -1 when none is warm: an engine that is idle
 * wakes then to release it, so an idle server's stats show no stale pins.
 * Engine thread, as every call that changes the cache. */
double kvt_cache_expire_sessions(kvt_cache *c);

/* The key root for a tenant salt (NULL/0 = the shared default). */
int kvt_cache_root(const kvt_cache *c, const void *salt, size_t salt_len, kvt_hash128 *out);

/* Longest cached prefix of tokens[0..n) under root; changes nothing but stats. */
void kvt_cache_lookup_root(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, kvt_cache_match *out);

/* kvt_cache_lookup_root, block by block: the fastest tier holding each
 * matched leading block of tokens[0..n) goes to tiers[i] (at most cap of
 * them). Returns the number of matched blocks. Changes nothing. */
int32_t kvt_cache_block_tiers(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, uint8_t *tiers,
                              int32_t cap);

typedef enum { KVT_T2_NONE = 0, KVT_T2_RESTORE = 1, KVT_T2_RECOMPUTE = 2 } kvt_t2_decision;

/* How a sequence was started by kvt_cache_attach. */
typedef struct {
    int32_t n_reused;                         /* prompt tokens whose K/V came from the cache */
    int32_t tier_tokens[KVT_TIER_COUNT];      /* of those, by the tier they came from */
    double restore_ms;                        /* time spent copying T1/T2 blocks into pages */
    kvt_t2_decision t2_decision;              /* whether matched disk blocks were read or recomputed */
    double t2_est_read_ms, t2_est_compute_ms; /* the estimates behind it (0: not measured yet) */
    int32_t n_planned;                        /* tokens the lookup matched (capped by max_reuse) */
    kvt_shortfall shortfall;                  /* why n_reused < n_planned */
    kvt_reuse_stop stop;                      /* where reuse stopped and why */
} kvt_attach_info;

/* Explains where reuse of tokens[0..n) under root stops when n_reused tokens
 * were taken from the cache and the attach ended with shortfall (see
 * kvt_reuse_stop). Looks only at the index: O(blocks matched) hashes plus one
 * scan of the stopping parent's children (bounded), the recently-evicted ring
 * and one lookup under the shared root. Changes nothing. */
void kvt_cache_explain(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, int32_t n_reused,
                       kvt_shortfall shortfall, kvt_reuse_stop *out);

/* Feeds the restore-or-recompute model: a prefill of n_tokens took seconds. */
void kvt_cache_note_prefill(kvt_cache *c, int32_t n_tokens, double seconds);

/* Creates a sequence that already holds the longest cached prefix of
 * tokens[0..n), reusing at most max_reuse tokens (callers pass n - 1 so at
 * least one token is computed and yields logits). T0 blocks are attached
 * zero-copy; T1 blocks are copied into fresh pages (reclaiming idle pages if
 * needed) and become T0-resident. If the reusable run ends inside a block, the
 * sequence holds that block's page with fewer tokens (the engine copies it on
 * the first append). Returns 0 and *seq, or KVT_ELIMIT (no sequence slot). */
int kvt_cache_attach(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, int32_t max_reuse, int32_t *seq,
                     kvt_attach_info *info);

/* kvt_cache_attach for the cache's own users rather than a request (approximate
 * reuse fetching a stored document): the same restore, but the request
 * statistics (lookups, hits, shortfalls, reuse stops) stay as they were and
 * info->stop is not filled. */
int kvt_cache_attach_quiet(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, int32_t max_reuse,
                           int32_t *seq, kvt_attach_info *info);

/* kvt_cache_attach for a sequence whose reuse may still grow
 * (kvt_cache_attach_more): the same lookup, restore and statistics, and
 * info->stop explained, but that reuse stop is not counted yet (the
 * reuse_stops of kvt_cache_stats); the caller counts the final one with
 * kvt_cache_count_stop, once. */
int kvt_cache_attach_open(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, int32_t max_reuse,
                          int32_t *seq, kvt_attach_info *info);
void kvt_cache_count_stop(kvt_cache *c, kvt_reuse_reason reason);

/* Whether the local index holds the block of tokens[0..B) whose parent key is
 * parent (the last key of a kvt_chain): late reuse's cheap test before it
 * matches a whole prompt again. */
int kvt_cache_has_next(kvt_cache *c, kvt_hash128 parent, const int32_t *tokens);

/* Late reuse. seq holds the first kvt_seq_len(seq) tokens of tokens[0..n),
 * a whole number of blocks and fewer than max_reuse: where the cache now
 * holds more of tokens' leading blocks (other sequences committed them after
 * seq was attached), seq takes them as kvt_cache_attach would have had they
 * been there then, up to max_reuse tokens in all: T0 pages zero-copy (the
 * last one maybe partly, as attach does), T1 blocks restored into fresh
 * pages. The run stops at a block found first in a measured tier (disk,
 * remote), whose restore-or-recompute the attach decided already, and only
 * the local index is asked (no T3 probe). info describes the tokens added
 * (n_reused, n_planned, tier_tokens, restore_ms, shortfall), and info->stop
 * where reuse of the whole sequence stops now. The added tokens count as
 * hits of the request's lookup (no new lookup). Returns the tokens added
 * (0: none; seq is unchanged). A caller's key chain (kvt_chain) stays valid:
 * kvt_cache_commit finds the added blocks already cached. */
int32_t kvt_cache_attach_more(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, int32_t max_reuse,
                              int32_t seq, kvt_attach_info *info);

/* Makes at least n_pages pages free, reclaiming idle T0 pages (demoted to T1).
 * Returns 0, or KVT_ELIMIT with a message when running sequences and pins
 * hold too much of the pool. */
int kvt_cache_reserve(kvt_cache *c, int32_t n_pages);

/* A sequence's key chain as far as it is registered: each block is hashed
 * once, when it completes (h[i] chains from h[i-1]). */
typedef struct {
    kvt_hash128 root; /* the key root (tenant salt) */
    kvt_hash128 last; /* key of block n_done - 1; root while n_done is 0 */
    int32_t n_done;   /* blocks registered; INT32_MAX after a collision (no more) */
} kvt_chain;

static inline void kvt_chain_init(kvt_chain *ch, kvt_hash128 root) {
    ch->root = root;
    ch->last = root;
    ch->n_done = 0;
}

/* Registers the full blocks of seq not registered yet (ch says how far it
 * got; start with kvt_chain_init). tokens holds the sequence's token ids (at
 * least kvt_seq_len(seq) of them). Blocks already cached keep their existing
 * page. A key collision stops registration of this sequence (its later
 * blocks could not be reached). */
void kvt_cache_commit(kvt_cache *c, int32_t seq, const int32_t *tokens, kvt_chain *ch);

/* Pins the cached prefix of tokens in T0 (restoring lower-tier blocks into
 * pages): pinned pages are never reclaimed until kvt_cache_release. Pins may
 * hold at most half of the active pages (KVT_ELIMIT beyond). Returns the
 * number of pinned tokens (>= 0) or a negative code. *pin receives a handle
 * (NULL if nothing was pinned) that the caller releases with kvt_cache_release. */
int kvt_cache_pin_root(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, kvt_pin **pin);

/* kvt_cache_keep_warm and kvt_cache_prefetch for a known root. Prefetch
 * restores at most max_new blocks from lower tiers (INT32_MAX: all). */
int kvt_cache_keep_warm_root(kvt_cache *c, kvt_hash128 root, const char *session, const int32_t *tokens, int32_t n,
                             int priority, double seconds);
/* A warm session is named within its namespace: the same name under two roots
 * is two sessions. Ends the session named session under *root (NULL: under
 * every root, as kvt_cache_end_session does). 0, or KVT_ENOTFOUND. */
int kvt_cache_end_session_root(kvt_cache *c, const kvt_hash128 *root, const char *session);
int32_t kvt_cache_prefetch_root(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, int32_t max_new);

/* Detailed statistics of the RAM tier and the index (kvt_cache_get_stats has the summary). */
void kvt_cache_get_tier_stats(const kvt_cache *c, kvt_ram_stats *t1, kvt_prefix_stats *index);

/* Tokens of KV each tier can hold at its budget (T0: the page pool; T1: RAM
 * blocks with their overhead; T2: disk records with their header and
 * padding; 0 where a tier is off). */
void kvt_cache_tier_capacity(const kvt_cache *c, uint64_t tokens[KVT_TIER_COUNT]);

/* 1 if a shared tier (T3) is on: a lookup that misses locally may still
 * find blocks there (kvt_cache_attach and kvt_cache_prefetch_root ask it). */
int kvt_cache_has_shared_tier(const kvt_cache *c);

/* The engine the cache was created over. */
kvt_engine *kvt_cache_engine(kvt_cache *c);

/* The T2 store (tier_disk.h), or NULL without one: for the side files its
 * owner keeps in its directory. Owned by the cache. */
struct kvt_disk *kvt_cache_disk(kvt_cache *c);

/* The index (for tests and the other tiers). Owned by the cache. */
kvt_prefix *kvt_cache_index(kvt_cache *c);

#endif
