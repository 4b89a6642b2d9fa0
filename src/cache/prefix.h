// SPDX-License-Identifier: MIT
/* The prefix index: which cached blocks exist, in which tiers, and the longest
 * run of a prompt's leading blocks that can be restored instead of recomputed
 * (docs/design.md "Blocks and keys", "The tiers").
 *
 * Identity. An entry is named by its block key but *is* the triple (key,
 * parent key, B token ids). A lookup hit needs all three to be equal, and an
 * add whose key is already taken by a different triple is refused (-EEXIST),
 * so a hash collision can only cost a miss, never serve another sequence's KV.
 *
 * Registration contract (the one thing the index cannot check itself): block i
 * of a sequence may be added only if blocks 0..i-1 of that same sequence were
 * matched by a lookup or added successfully; kvt_prefix_add_chain does this.
 * Otherwise, after a collision on block j, a later block with equal tokens
 * and an equal (colliding) parent key would pass for the other sequence's.
 *
 * Eviction rule ("longest suffix first"): each entry counts, per tier, how
 * many indexed entries present in that tier name it as their parent. A tier
 * must evict only blocks whose count for that tier is 0 (leaves of the tier),
 * picking the least recently used such leaf; so a parent is never evicted from
 * a tier while one of its children is present there, and a chain shrinks from
 * its end, keeping the prefix that every later lookup needs first.
 *
 * Counts by key survive the parent's own absence: when children are present
 * but the parent is not (a child demoted before its parent arrived, or the
 * parent removed first), the index keeps a key-only "ghost" entry holding the
 * counts. Ghosts never match a lookup and are not reported as entries.
 *
 * Thread-safety: none. The engine loop owns the index; every call, including
 * stats and lookups, must be serialised by the owner. */
#ifndef KVT_PREFIX_H
#define KVT_PREFIX_H

#include <stddef.h>
#include <stdint.h>

#include "blockhash.h"

/* Tiers from fastest to slowest; the order is the restore preference. */
/* kvt_tier (T0 active: handle = page id; T1 RAM: store slot; T2 disk: record
 * location; T3 remote) is declared in kvtier.h. */

/* Mask bit of a tier in kvt_prefix_info.tiers / kvt_prefix_hit.tiers. */
#define KVT_TIER_BIT(t) (1u << (t))

/* Short name ("T0".."T3"), or "?" for an invalid value. Static storage. */
const char *kvt_tier_name(kvt_tier t);

typedef struct kvt_prefix kvt_prefix;

/* One matched block of a lookup. */
typedef struct {
    kvt_hash128 hash;
    kvt_tier tier;   /* fastest tier holding the block: restore from here */
    uint32_t tiers;  /* mask of every tier holding it (KVT_TIER_BIT) */
    uint64_t handle; /* the handle registered for `tier` */
} kvt_prefix_hit;

/* A snapshot of one entry. `tokens` points into the index and stays valid
 * until the next call that mutates the index. */
typedef struct {
    kvt_hash128 hash, parent;
    const int32_t *tokens;             /* B token ids */
    uint32_t tiers;                    /* presence mask, never 0 */
    uint64_t handle[KVT_TIER_COUNT];   /* meaningful where present */
    uint32_t children[KVT_TIER_COUNT]; /* entries present in tier t naming this as parent */
    uint32_t children_any;             /* entries present in any tier naming this as parent */
} kvt_prefix_info;

typedef struct {
    uint64_t entries; /* present in at least one tier */
    uint64_t tier_entries[KVT_TIER_COUNT];
    uint64_t ghosts;                          /* key-only entries that hold child counts */
    uint64_t lookups;                         /* kvt_prefix_lookup / _match calls */
    uint64_t lookup_blocks;                   /* full blocks those calls asked about */
    uint64_t hit_blocks;                      /* blocks they matched */
    uint64_t tier_hit_blocks[KVT_TIER_COUNT]; /* by the fastest tier holding them */
    uint64_t mismatches;                      /* key found but parent or tokens differed */
    uint64_t collisions;                      /* adds refused with -EEXIST */
    size_t bytes;                             /* memory held by the index */
} kvt_prefix_stats;

/* Creates an empty index for blocks of B tokens (1..KVT_BLOCK_TOKENS_MAX).
 * Returns 0 and *out, or KVT_EARG. Free with kvt_prefix_free. */
int kvt_prefix_new(uint32_t block_tokens, kvt_prefix **out);
/* Frees the index. Tiers that hold a pointer to it must be freed first. */
void kvt_prefix_free(kvt_prefix *idx);
uint32_t kvt_prefix_block_tokens(const kvt_prefix *idx);

/* Longest run of leading full blocks of tokens[0..n) present in any tier,
 * under namespace root. Computes keys block by block and stops at the first
 * block that is absent, or whose stored parent or tokens differ, or after
 * max_hits blocks. A partial tail is never a block. Fills hits[0..k) and
 * returns k. hits may be NULL only if max_hits is 0 (then 0 is returned). */
size_t kvt_prefix_lookup(kvt_prefix *idx, kvt_hash128 root, const int32_t *tokens, size_t n, kvt_prefix_hit *hits,
                         size_t max_hits);

/* Whether the block of tokens[0..B) whose parent key is parent is present in
 * a tier: one key, no walk, and no lookup statistics (a caller asking again
 * and again whether a run grew). */
int kvt_prefix_has_next(const kvt_prefix *idx, kvt_hash128 parent, const int32_t *tokens);

/* Same as kvt_prefix_lookup, with the keys already computed by
 * kvt_block_hashes: hashes[i] is block i's key; tokens holds n_blocks * B ids.
 * Use it when the keys are needed again to register new blocks. */
size_t kvt_prefix_match(kvt_prefix *idx, kvt_hash128 root, const int32_t *tokens, const kvt_hash128 *hashes,
                        size_t n_blocks, kvt_prefix_hit *hits, size_t max_hits);

/* Records that block (hash, parent, tokens[0..B)) is present in tier with
 * handle. If it is already there, only the handle changes. Returns 0, KVT_EARG
 * for an invalid tier, or -EEXIST if hash names a different (parent, tokens)
 * (a collision: nothing changes; the caller must not cache the block or its
 * descendants). tokens are copied. See the registration contract above. */
int kvt_prefix_add(kvt_prefix *idx, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, kvt_tier tier,
                   uint64_t handle);

/* Makes room for n more entries (their tokens and keys) in one step, for a
 * bulk load of a known size (a disk tier's open); adds work without it. */
void kvt_prefix_reserve(kvt_prefix *idx, size_t n);

/* A hint that hash is about to be added or looked up (kvt_hmap128_prefetch):
 * lets a bulk loop overlap the cache misses of several keys. */
void kvt_prefix_prefetch(const kvt_prefix *idx, kvt_hash128 hash);

/* Adds blocks 0..n_blocks-1 of one sequence (keys from kvt_block_hashes, the
 * parent of block 0 is root) in order, to tier; handles[i] is block i's handle
 * (NULL: all 0). Stops at the first refused block. Returns the number added
 * (== n_blocks on full success), or KVT_EARG. */
int kvt_prefix_add_chain(kvt_prefix *idx, kvt_hash128 root, const int32_t *tokens, const kvt_hash128 *hashes,
                         size_t n_blocks, kvt_tier tier, const uint64_t *handles);

/* 0 if (hash, parent, tokens) could be added (the key is free, a ghost, or
 * already names this same block), else -EEXIST. Changes nothing. */
int kvt_prefix_check(const kvt_prefix *idx, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens);

/* Records that the block left tier. Returns 0, KVT_EARG, or KVT_ENOTFOUND if
 * it was not present in tier. The entry disappears with its last tier (it
 * lingers as a ghost while it still has children). */
int kvt_prefix_remove(kvt_prefix *idx, kvt_hash128 hash, kvt_tier tier);

/* Snapshot of the entry for hash: 0 and *out, or KVT_ENOTFOUND (also for a
 * ghost). Does not count as a lookup. */
int kvt_prefix_get(const kvt_prefix *idx, kvt_hash128 hash, kvt_prefix_info *out);

/* Calls fn for every entry (ghosts excluded), in no particular order. fn must
 * not mutate the index. Stops early and returns fn's value if it returns
 * nonzero; else returns 0. */
int kvt_prefix_foreach(const kvt_prefix *idx, int (*fn)(void *ctx, const kvt_prefix_info *e), void *ctx);

void kvt_prefix_get_stats(const kvt_prefix *idx, kvt_prefix_stats *out);

/* Watching presence. fn is called after every add or remove that changes an
 * entry's tier mask, with the mask before and after (0: absent), on the
 * caller's thread inside the call; it must not call back into the index. A
 * server feeds its store/evict event log from it. NULL fn stops watching. */
typedef void (*kvt_prefix_observer)(void *ctx, kvt_hash128 hash, uint32_t old_tiers, uint32_t new_tiers);
void kvt_prefix_set_observer(kvt_prefix *idx, kvt_prefix_observer fn, void *ctx);

/* Parent -> children. Every parent key (a present entry or a ghost) heads a
 * list of the entries present in some tier that name it as parent, kept exact
 * by add/remove in O(1) (three ids per entry). Used to explain a miss: the
 * cached blocks that continue the prompt's last matched block. */

/* At most this many children are compared by kvt_prefix_nearest_child: a
 * parent with more (the root of a busy server) is sampled, newest first,
 * so explaining a miss stays bounded (B token compares per child). */
#define KVT_PREFIX_SCAN_CHILDREN_MAX 1024

/* Among the present children of parent, the one whose B tokens share the
 * longest common prefix with tokens[0..B) (ties: the most recently added).
 * Returns 1 with *out (valid until the next mutation) and *common = that
 * prefix length in tokens (0..B), or 0 when parent has no present child.
 * Costs O(min(children, KVT_PREFIX_SCAN_CHILDREN_MAX) * B). */
int kvt_prefix_nearest_child(const kvt_prefix *idx, kvt_hash128 parent, const int32_t *tokens, kvt_prefix_info *out,
                             uint32_t *common);

/* Keys of the present children of parent: fills out[0..min(n, max)) and
 * returns n, the number of children (which may exceed max). */
size_t kvt_prefix_children(const kvt_prefix *idx, kvt_hash128 parent, kvt_hash128 *out, size_t max);

/* Keys of the last KVT_PREFIX_GONE_RING blocks that left their last tier are
 * remembered (16 bytes each), so a miss can say "evicted" rather than "never
 * seen". Older evictions are forgotten: then the answer is 0. O(ring). */
#define KVT_PREFIX_GONE_RING 4096
int kvt_prefix_recently_gone(const kvt_prefix *idx, kvt_hash128 hash);

#endif
