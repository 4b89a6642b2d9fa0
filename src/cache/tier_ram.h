// SPDX-License-Identifier: MIT
/* T1, the host-RAM block store (docs/design.md "The tiers"): a byte budget of fixed-size
 * block payloads, evicted least-recently-used leaf first, each eviction handed
 * to a callback so the cache policy can write it back to the disk tier.
 *
 * Eviction policy. Every stored block has a last-use tick (set by put, get and
 * a repeated put). A block is a *leaf* of the store when no stored block names
 * it as parent. The victim is always the leaf with the oldest tick — exact LRU
 * over leaves, kept in a min-heap. A parent is therefore never evicted while
 * one of its children is stored, and a chain shrinks from its end, keeping the
 * prefix every lookup needs first. A parent becomes a leaf (and a candidate,
 * at its own tick) when its last stored child leaves. While a block is being
 * put, its parent counts as having that child and is never the victim, so a
 * chain written front to back into a full store keeps its head rather than
 * trading its last block for an unreachable new one; if no other leaf exists,
 * the put is refused (KVT_ELIMIT). (Blocks whose parent links form a cycle
 * can only arise from key collisions, i.e. the test hook; they are never
 * leaves, so only kvt_ram_flush, kvt_ram_remove and kvt_ram_free drop them.)
 *
 * Budget. Each block is charged kvt_ram_block_cost() bytes: its slot
 * (payload, then the B token ids, each rounded up to KVT_RAM_ALIGN) plus its
 * bookkeeping record. bytes_used never exceeds budget_bytes after any call.
 * Not charged: the store's lookup tables and heap, which are sized by the
 * peak block count (about 100 bytes per block) and never shrink.
 *
 * Arena. Slots come from a few large pieces of memory (up to
 * KVT_RAM_PIECE_BYTES each, never more slots in all than the budget pays
 * for), taken as the store fills and kept until it is freed. They come from
 * params.mem_alloc when given: the cache passes the engine's host memory, so
 * that a GPU engine copies pages to and from T1 by DMA (engine.h
 * kvt_engine_host_alloc). When mem_alloc refuses a piece, the store says so
 * once (a warning) and takes ordinary memory from then on; it works the
 * same, only page copies to the GPU go through a staging copy.
 *
 * Prefix index. If params.index is set, the store keeps the index's T1
 * presence exact itself: a block is added to the index (tier T1, handle = an
 * opaque slot number) when stored and removed when evicted, removed or freed.
 * Nobody else may add or remove T1 presence in that index. A put whose key
 * names a different block in the index (a collision) is refused.
 *
 * Thread-safety: none; the owner (the engine loop) serialises every call. */
#ifndef KVT_TIER_RAM_H
#define KVT_TIER_RAM_H

#include <stddef.h>
#include <stdint.h>

#include "blockhash.h"
#include "prefix.h"
#include "tier.h"

/* Payload and token arrays start on a cache line: restores are memcpys of
 * whole pages, and the engine may use aligned SIMD loads. */
#define KVT_RAM_ALIGN 64
/* The largest piece of the arena (see Arena). */
#define KVT_RAM_PIECE_BYTES (256ull << 20)

typedef struct kvt_ram kvt_ram;

/* Called once for every block the store evicts to make room (or on
 * kvt_ram_evict / kvt_ram_flush), after the block has left the store and the
 * index, and before its memory is freed. All pointers are valid only during
 * the call. The callback may call kvt_ram_contains, kvt_ram_foreach and
 * kvt_ram_get_stats, and may update other tiers and the index (e.g. record a
 * T2 copy); it must not call any other kvt_ram_ function on this store.
 * Explicit kvt_ram_remove and kvt_ram_free do not call it. last_use is the
 * block's last put or get, in kvt_now() seconds (admission policies use it). */
typedef void (*kvt_ram_evict_fn)(void *ctx, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens,
                                 const void *payload, size_t payload_bytes, double last_use);

typedef struct {
    uint64_t budget_bytes;     /* --kv-ram; 0 is valid (every put is refused) */
    size_t payload_bytes;      /* bytes of one block's K/V (a page); must be > 0 */
    uint32_t block_tokens;     /* B, 1..KVT_BLOCK_TOKENS_MAX */
    kvt_prefix *index;         /* optional; borrowed, must outlive the store */
    kvt_ram_evict_fn on_evict; /* optional */
    void *evict_ctx;
    /* Where the arena's pieces come from (optional, see Arena): mem_alloc
     * gives bytes (<= mem_max when that is not 0) aligned to KVT_RAM_ALIGN,
     * or NULL with kvt_errmsg() saying why; mem_free takes them back. */
    void *(*mem_alloc)(void *ctx, size_t bytes);
    void (*mem_free)(void *ctx, void *p);
    void *mem_ctx;
    size_t mem_max;
} kvt_ram_params;

typedef struct {
    uint64_t budget_bytes, bytes_used;
    uint64_t blocks;
    uint64_t hits, misses; /* kvt_ram_get outcomes */
    uint64_t puts;         /* blocks stored */
    uint64_t dup_puts;     /* puts of a block already held (only its tick moves) */
    uint64_t evictions;    /* blocks evicted (each seen once by on_evict) */
    uint64_t removes;      /* kvt_ram_remove successes */
    uint64_t rejected;     /* puts refused for lack of room */
    uint64_t collisions;   /* puts refused because the key names another block */
    uint64_t lent;         /* hits served by kvt_ram_peek: the payload's address, no copy */
    uint64_t filled;       /* puts whose payload the caller wrote in place (kvt_ram_put_begin) */
    uint64_t arena_bytes;  /* the arena's pieces, */
    uint64_t arena_mapped; /* of which came from mem_alloc */
} kvt_ram_stats;

/* budget_bytes 1 GiB, block_tokens KVT_BLOCK_TOKENS_DEFAULT, the rest 0/NULL.
 * payload_bytes must be set by the caller. */
kvt_ram_params kvt_ram_default_params(void);

/* Creates an empty store. Returns 0 and *out, or KVT_EARG (payload_bytes 0,
 * block_tokens out of range or different from the index's). Free with
 * kvt_ram_free. */
int kvt_ram_new(const kvt_ram_params *p, kvt_ram **out);

/* Drops every block without calling on_evict, removing their T1 presence
 * from the index (which must still be alive), and frees the store. To write
 * blocks back first (graceful shutdown), call kvt_ram_flush before. */
void kvt_ram_free(kvt_ram *r);

/* Bytes charged against the budget per block (see "Budget" above). */
uint64_t kvt_ram_block_cost(const kvt_ram *r);

/* Stores a copy of a block: payload (payload_bytes) and tokens (B ids) are
 * copied; the caller keeps ownership of both. Evicts least-recently-used
 * leaves (through on_evict) until the block fits. Returns
 *   0            stored (and recorded in the index),
 *   1            the same block (key, parent, tokens) was already held: its
 *                tick moves, its payload is not rewritten,
 *   -EEXIST      the key names a different block here or in the index,
 *   KVT_ELIMIT   no room: the block is larger than the budget, or every
 *                evictable leaf is gone (blocks evicted on the way stay
 *                evicted),
 *   -ENOMEM.     */
int kvt_ram_put(kvt_ram *r, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void *payload);

/* kvt_ram_put in two steps, for a caller that writes the payload straight
 * into the store (a GPU copies a run of pages out into T1 by DMA):
 * kvt_ram_put_begin checks and makes room as kvt_ram_put does, with its
 * return codes; on 0, *slot is where the block's payload_bytes go. The block
 * is then held (contains, the index) but pending: reads miss it and it is
 * never evicted, until kvt_ram_put_end(ok) makes it an ordinary block, or
 * kvt_ram_put_end(0) (its bytes never arrived) drops it without on_evict.
 * Other calls may come between the two. */
int kvt_ram_put_begin(kvt_ram *r, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, void **slot);
void kvt_ram_put_end(kvt_ram *r, kvt_hash128 hash, int ok);

/* Copies the payload of block hash into out (payload_bytes) if it is held and
 * its stored parent and tokens equal parent and tokens (so a collision is a
 * miss). Moves its tick. Returns 0 (hit) or KVT_ENOTFOUND (miss). */
int kvt_ram_get(kvt_ram *r, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, void *out);

/* kvt_ram_get without the copy: *payload is the block's bytes in the store,
 * valid until the next call that puts, removes, evicts or frees here. For a
 * caller that copies them on at once (a GPU restore reads them by DMA). */
int kvt_ram_peek(kvt_ram *r, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void **payload);

/* 1 if a block with this key is held, else 0. No tick, no stats. */
int kvt_ram_contains(const kvt_ram *r, kvt_hash128 hash);

/* Drops a block without calling on_evict (e.g. it was found stale). Its
 * stored children stay. Returns 0 or KVT_ENOTFOUND. */
int kvt_ram_remove(kvt_ram *r, kvt_hash128 hash);

/* Evicts up to n blocks in policy order, each through on_evict. Returns the
 * number evicted. kvt_ram_flush evicts them all (graceful shutdown). */
size_t kvt_ram_evict(kvt_ram *r, size_t n);
void kvt_ram_flush(kvt_ram *r);

/* Calls fn for every held block, in no particular order; tokens are valid
 * during the call. fn must not mutate the store. Stops early and returns fn's
 * value if nonzero, else returns 0. */
int kvt_ram_foreach(const kvt_ram *r, int (*fn)(void *ctx, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens),
                    void *ctx);

void kvt_ram_get_stats(const kvt_ram *r, kvt_ram_stats *out);

/* The RAM tier behind the tier interface (tier.h); the instance is a kvt_ram.
 * Its flush evicts every block through on_evict. */
extern const kvt_tier_ops kvt_ram_tier_ops;

#endif
