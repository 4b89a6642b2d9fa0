// SPDX-License-Identifier: MIT
/* One small interface for the KV tiers below T0 (docs/design.md "The tiers"): T1 host
 * RAM (tier_ram.h), T2 local disk (tier_disk.h) and T3 remote (tier_remote.h).
 * The cache policy (cache.c) moves blocks through it without knowing which
 * tier it talks to: demotion puts a block into the next tier down, restores
 * read batches from whichever tier holds a block, shutdown flushes each tier
 * downward.
 *
 * A block is always the same triple: key, parent key and B token ids, plus a
 * payload of the cache's page size. A tier serves a block only when all three
 * match (a key collision is a miss, never another block's KV).
 *
 * Evictions. A tier that evicts (RAM) hands each evicted block to the evict
 * hook it was created with; the cache passes it on to the next tier down.
 *
 * Sharing. A shared tier (T3) is one that other nodes read too. The cache
 * writes a block into it not only when nothing above takes the block, but
 * also whenever the block is newly stored in a persistent tier above it: a
 * block worth keeping on this node's disk is what other nodes will want, so
 * it is shared as it is persisted (write-back to T3 from the first persistent
 * write; see cache.h "Demotion").
 *
 * Index. Every tier keeps its own presence in the prefix index exact
 * (prefix.h); the cache never adds or removes another tier's presence. A
 * shared tier's presence is what it last knew (others write and its server
 * evicts): a miss on read removes it, and kvt_remote_probe adds what other
 * nodes wrote (the cache asks where its local match ends short).
 *
 * Thread-safety: like the tiers themselves, every call comes from the cache
 * owner's thread. */
#ifndef KVT_TIER_H
#define KVT_TIER_H

#include <stddef.h>
#include <stdint.h>

#include "blockhash.h"

/* One block of a get_many batch. The caller fills the first four fields;
 * result is set to 0 (hit: out holds the payload) or KVT_ENOTFOUND. */
typedef struct {
    kvt_hash128 hash, parent;
    const int32_t *tokens; /* B ids, borrowed for the call */
    void *out;             /* payload bytes; contents undefined on a miss */
    int result;
} kvt_tier_read;

/* What every tier can say about itself. */
typedef struct {
    uint64_t blocks, bytes_used, budget_bytes;
    uint64_t block_cost;   /* bytes one block takes against the budget (payload, tokens, overhead) */
    uint64_t hits, misses; /* get_many outcomes per block */
    uint64_t puts;         /* blocks stored */
    uint64_t evictions;    /* blocks that left to make room */
    uint64_t dropped;      /* puts accepted but lost before they were stored (writer errors) */
} kvt_tier_stats;

typedef struct {
    const char *name;
    int persistent; /* survives a restart (admission filters apply to such tiers) */
    int measured;   /* slow enough that restore-or-recompute weighs its measured bandwidth */
    int shared;     /* other nodes read it: blocks persisted above it are copied into it (see Sharing);
                        the index learns of blocks others wrote by probing it (tier_remote.h) */
    /* Stores a copy of the block (tokens and payload are copied). Returns 0
     * (stored, or accepted for writing: findable from now on), 1 (already
     * held) or a negative code (refused: not in this tier). */
    int (*put)(void *tier, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void *payload);
    /* Reads a batch; sets each result; returns the number of hits. */
    size_t (*get_many)(void *tier, kvt_tier_read *reqs, size_t n);
    /* 1 if a block with this key is held. */
    int (*contains)(void *tier, kvt_hash128 hash);
    /* Drops a block. 0 or KVT_ENOTFOUND. */
    int (*remove)(void *tier, kvt_hash128 hash);
    /* Graceful shutdown: a tier with a lower one empties itself through its
     * evict hook; a persistent tier waits until everything accepted is
     * stored. Returns 0 or the error that keeps it from storing. */
    int (*flush)(void *tier);
    void (*stats)(void *tier, kvt_tier_stats *out);
} kvt_tier_ops;

/* A tier as the cache holds it: its operations and its instance. */
typedef struct {
    const kvt_tier_ops *ops; /* NULL: the tier is off */
    void *impl;
} kvt_tier_ref;

#endif
