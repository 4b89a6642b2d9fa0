// SPDX-License-Identifier: MIT
/* The prefix index: a key -> entry table (hmap128) over a dense entry array
 * with a free list, token ids in a parallel array, and per-tier child counts
 * kept exact on every add/remove so tiers can find leaves in O(1). Each
 * parent also heads an intrusive doubly linked list of its present children
 * (ids, 12 bytes per entry), so "which cached blocks continue this parent"
 * costs O(children), never a scan of the index. A small ring remembers the
 * keys of blocks that recently left every tier, to tell "evicted" from
 * "never seen" when a miss is explained. */
#include "prefix.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "hmap128.h"

#define ENTRIES_MIN_CAP 64
#define NO_ID UINT32_MAX /* end of a child list */

typedef struct {
    kvt_hash128 hash, parent; /* parent is meaningful only while tiers != 0 */
    uint64_t handle[KVT_TIER_COUNT];
    uint32_t children[KVT_TIER_COUNT];
    uint32_t children_any;
    uint32_t tiers; /* presence mask; 0 = ghost (kept only for its counts) */
    /* children list: first_child heads this entry's list of present children;
     * prev/next link this entry into its parent's list while it is present */
    uint32_t first_child, prev_sib, next_sib;
} entry;

struct kvt_prefix {
    uint32_t B;
    kvt_hmap128 map; /* key -> entry id */
    entry *ents;     /* [cap] */
    int32_t *toks;   /* [cap * B]: entry id i owns toks[i*B .. (i+1)*B) */
    uint32_t *free_ids;
    uint32_t cap, n_free, n_used;           /* ids >= n_used were never handed out */
    kvt_prefix_stats st;                    /* counters; bytes/ghosts filled on read */
    kvt_hash128 gone[KVT_PREFIX_GONE_RING]; /* keys that recently left every tier */
    uint32_t gone_next, gone_count;
    kvt_prefix_observer obs; /* told of every mask change, or NULL */
    void *obs_ctx;
};

const char *kvt_tier_name(kvt_tier t) {
    static const char *names[KVT_TIER_COUNT] = {"T0", "T1", "T2", "T3"};
    return (unsigned)t < KVT_TIER_COUNT ? names[t] : "?";
}

int kvt_prefix_new(uint32_t block_tokens, kvt_prefix **out) {
    *out = NULL;
    if (block_tokens == 0 || block_tokens > KVT_BLOCK_TOKENS_MAX)
        return kvt_fail(KVT_EARG, "block size %u outside 1..%d", block_tokens, KVT_BLOCK_TOKENS_MAX);
    kvt_prefix *idx = kvt_xcalloc(1, sizeof *idx);
    idx->B = block_tokens;
    kvt_hmap128_init(&idx->map);
    *out = idx;
    return 0;
}

void kvt_prefix_free(kvt_prefix *idx) {
    if (!idx) return;
    kvt_hmap128_free(&idx->map);
    free(idx->ents);
    free(idx->toks);
    free(idx->free_ids);
    free(idx);
}

uint32_t kvt_prefix_block_tokens(const kvt_prefix *idx) { return idx->B; }

void kvt_prefix_set_observer(kvt_prefix *idx, kvt_prefix_observer fn, void *ctx) {
    idx->obs = fn;
    idx->obs_ctx = ctx;
}

static const int32_t *entry_tokens(const kvt_prefix *idx, uint32_t id) { return idx->toks + (size_t)id * idx->B; }

static void grow_entries(kvt_prefix *idx, uint32_t cap) {
    idx->ents = kvt_xrealloc(idx->ents, (size_t)cap * sizeof *idx->ents);
    idx->toks = kvt_xrealloc(idx->toks, (size_t)cap * idx->B * sizeof *idx->toks);
    idx->free_ids = kvt_xrealloc(idx->free_ids, (size_t)cap * sizeof *idx->free_ids);
    idx->cap = cap;
}

static uint32_t alloc_id(kvt_prefix *idx) {
    if (idx->n_free) return idx->free_ids[--idx->n_free];
    if (idx->n_used == idx->cap) grow_entries(idx, idx->cap ? idx->cap * 2 : ENTRIES_MIN_CAP);
    return idx->n_used++;
}

void kvt_prefix_reserve(kvt_prefix *idx, size_t n) {
    /* ids are uint32 with NO_ID reserved: past that, let alloc_id grow as
     * before. Ghosts take ids too: room for one per 16 entries (a chain's
     * root whose parent is absent) keeps the last of them from doubling the
     * arrays; the map, whose slots are all touched, gets no such slack. */
    size_t want = (size_t)idx->n_used + n + n / 16 + 16;
    if (n > idx->n_free && want < NO_ID && want > idx->cap) grow_entries(idx, (uint32_t)want);
    kvt_hmap128_reserve(&idx->map, idx->map.count + n);
}

void kvt_prefix_prefetch(const kvt_prefix *idx, kvt_hash128 hash) { kvt_hmap128_prefetch(&idx->map, hash); }

/* Id of the entry for key, creating a ghost if there is none. May move
 * idx->ents, so callers re-derive entry pointers afterwards. */
static uint32_t get_or_ghost(kvt_prefix *idx, kvt_hash128 key) {
    uint32_t id;
    if (kvt_hmap128_get(&idx->map, key, &id)) return id;
    id = alloc_id(idx);
    entry *e = &idx->ents[id];
    memset(e, 0, sizeof *e);
    e->hash = key;
    e->first_child = e->prev_sib = e->next_sib = NO_ID;
    kvt_hmap128_put(&idx->map, key, id);
    return id;
}

/* Drops an entry that is neither present anywhere nor anybody's parent. */
static void release_if_unused(kvt_prefix *idx, uint32_t id) {
    entry *e = &idx->ents[id];
    if (e->tiers || e->children_any) return;
    for (int t = 0; t < KVT_TIER_COUNT; t++) assert(e->children[t] == 0);
    kvt_hmap128_del(&idx->map, e->hash);
    idx->free_ids[idx->n_free++] = id;
}

/* Puts present entry id at the head of parent pid's child list. */
static void link_child(kvt_prefix *idx, uint32_t pid, uint32_t id) {
    entry *p = &idx->ents[pid], *e = &idx->ents[id];
    e->prev_sib = NO_ID;
    e->next_sib = p->first_child;
    if (p->first_child != NO_ID) idx->ents[p->first_child].prev_sib = id;
    p->first_child = id;
}

/* Takes entry id (no longer present anywhere) out of parent pid's list. */
static void unlink_child(kvt_prefix *idx, uint32_t pid, uint32_t id) {
    entry *e = &idx->ents[id];
    if (e->prev_sib != NO_ID) idx->ents[e->prev_sib].next_sib = e->next_sib;
    else idx->ents[pid].first_child = e->next_sib;
    if (e->next_sib != NO_ID) idx->ents[e->next_sib].prev_sib = e->prev_sib;
    e->prev_sib = e->next_sib = NO_ID;
}

static int same_block(const kvt_prefix *idx, uint32_t id, kvt_hash128 parent, const int32_t *tokens) {
    const entry *e = &idx->ents[id];
    return kvt_hash128_eq(e->parent, parent) &&
        memcmp(entry_tokens(idx, id), tokens, (size_t)idx->B * sizeof *tokens) == 0;
}

int kvt_prefix_check(const kvt_prefix *idx, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens) {
    /* A block that is its own parent could only arise from a collision; it
     * would also make its entry count itself as a child and never be a leaf. */
    if (kvt_hash128_eq(hash, parent)) return -EEXIST;
    uint32_t id;
    if (!kvt_hmap128_get(&idx->map, hash, &id)) return 0;
    if (!idx->ents[id].tiers) return 0; /* ghost: the key has no identity yet */
    return same_block(idx, id, parent, tokens) ? 0 : -EEXIST;
}

static int bad_tier(kvt_tier tier) {
    return (unsigned)tier >= KVT_TIER_COUNT ? kvt_fail(KVT_EARG, "invalid tier %d", (int)tier) : 0;
}

int kvt_prefix_add(kvt_prefix *idx, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, kvt_tier tier,
                   uint64_t handle) {
    int rc = bad_tier(tier);
    if (rc) return rc;
    if (kvt_prefix_check(idx, hash, parent, tokens)) {
        idx->st.collisions++;
        return kvt_fail(-EEXIST, "block key %016llx%016llx names another block", (unsigned long long)hash.hi,
                        (unsigned long long)hash.lo);
    }
    uint32_t bit = KVT_TIER_BIT(tier);
    uint32_t id = get_or_ghost(idx, hash);
    entry *e = &idx->ents[id];
    if (e->tiers & bit) { /* already recorded in this tier: a handle update */
        e->handle[tier] = handle;
        return 0;
    }
    int was_live = e->tiers != 0;
    if (!was_live) {
        e->parent = parent;
        memcpy(idx->toks + (size_t)id * idx->B, tokens, (size_t)idx->B * sizeof *tokens);
        idx->st.entries++;
    }
    uint32_t old_tiers = e->tiers;
    e->tiers |= bit;
    e->handle[tier] = handle;
    idx->st.tier_entries[tier]++;
    if (idx->obs) idx->obs(idx->obs_ctx, hash, old_tiers, e->tiers);
    uint32_t pid = get_or_ghost(idx, parent); /* may move idx->ents */
    entry *p = &idx->ents[pid];
    p->children[tier]++;
    if (!was_live) {
        p->children_any++;
        link_child(idx, pid, id);
    }
    return 0;
}

int kvt_prefix_add_chain(kvt_prefix *idx, kvt_hash128 root, const int32_t *tokens, const kvt_hash128 *hashes,
                         size_t n_blocks, kvt_tier tier, const uint64_t *handles) {
    int rc = bad_tier(tier);
    if (rc) return rc;
    size_t i = 0;
    for (; i < n_blocks; i++) {
        kvt_hash128 parent = i ? hashes[i - 1] : root;
        if (kvt_prefix_add(idx, hashes[i], parent, tokens + i * idx->B, tier, handles ? handles[i] : 0)) break;
    }
    return (int)KVT_MIN(i, (size_t)INT32_MAX);
}

int kvt_prefix_remove(kvt_prefix *idx, kvt_hash128 hash, kvt_tier tier) {
    int rc = bad_tier(tier);
    if (rc) return rc;
    uint32_t id, bit = KVT_TIER_BIT(tier);
    if (!kvt_hmap128_get(&idx->map, hash, &id) || !(idx->ents[id].tiers & bit))
        return kvt_fail(KVT_ENOTFOUND, "block not in tier %s", kvt_tier_name(tier));
    entry *e = &idx->ents[id];
    uint32_t old_tiers = e->tiers;
    e->tiers &= ~bit;
    e->handle[tier] = 0;
    if (idx->obs) idx->obs(idx->obs_ctx, hash, old_tiers, e->tiers);
    idx->st.tier_entries[tier]--;
    int now_gone = e->tiers == 0;
    if (now_gone) idx->st.entries--;
    uint32_t pid;
    int have_parent = kvt_hmap128_get(&idx->map, e->parent, &pid);
    assert(have_parent); /* every present entry keeps its parent's key alive */
    (void)have_parent;
    entry *p = &idx->ents[pid];
    assert(p->children[tier] > 0);
    p->children[tier]--;
    if (now_gone) {
        assert(p->children_any > 0);
        p->children_any--;
        unlink_child(idx, pid, id);
        idx->gone[idx->gone_next] = hash;
        idx->gone_next = (idx->gone_next + 1) % KVT_PREFIX_GONE_RING;
        if (idx->gone_count < KVT_PREFIX_GONE_RING) idx->gone_count++;
    }
    release_if_unused(idx, id);
    release_if_unused(idx, pid);
    return 0;
}

static void fill_info(const kvt_prefix *idx, uint32_t id, kvt_prefix_info *out) {
    const entry *e = &idx->ents[id];
    out->hash = e->hash;
    out->parent = e->parent;
    out->tokens = entry_tokens(idx, id);
    out->tiers = e->tiers;
    memcpy(out->handle, e->handle, sizeof out->handle);
    memcpy(out->children, e->children, sizeof out->children);
    out->children_any = e->children_any;
}

int kvt_prefix_get(const kvt_prefix *idx, kvt_hash128 hash, kvt_prefix_info *out) {
    uint32_t id;
    if (!kvt_hmap128_get(&idx->map, hash, &id) || !idx->ents[id].tiers)
        return kvt_fail(KVT_ENOTFOUND, "block not indexed");
    fill_info(idx, id, out);
    return 0;
}

/* Shared walk of lookup and match: hashes NULL means compute them here, one
 * block at a time, so a miss at block k costs k + 1 hashes, not n / B. */
static size_t walk(kvt_prefix *idx, kvt_hash128 root, const int32_t *tokens, const kvt_hash128 *hashes, size_t n_blocks,
                   kvt_prefix_hit *hits, size_t max_hits) {
    idx->st.lookups++;
    idx->st.lookup_blocks += n_blocks;
    size_t limit = KVT_MIN(n_blocks, max_hits), k = 0;
    kvt_hash128 prev = root;
    for (; k < limit; k++) {
        const int32_t *bt = tokens + k * idx->B;
        kvt_hash128 h = hashes ? hashes[k] : kvt_block_hash(prev, bt, idx->B);
        uint32_t id;
        if (!kvt_hmap128_get(&idx->map, h, &id) || !idx->ents[id].tiers) break;
        if (!same_block(idx, id, prev, bt)) {
            idx->st.mismatches++;
            break;
        }
        const entry *e = &idx->ents[id];
        kvt_tier fastest = (kvt_tier)__builtin_ctz(e->tiers);
        hits[k].hash = h;
        hits[k].tier = fastest;
        hits[k].tiers = e->tiers;
        hits[k].handle = e->handle[fastest];
        idx->st.tier_hit_blocks[fastest]++;
        prev = h;
    }
    idx->st.hit_blocks += k;
    return k;
}

int kvt_prefix_has_next(const kvt_prefix *idx, kvt_hash128 parent, const int32_t *tokens) {
    uint32_t id;
    kvt_hash128 h = kvt_block_hash(parent, tokens, idx->B);
    return kvt_hmap128_get(&idx->map, h, &id) && idx->ents[id].tiers && same_block(idx, id, parent, tokens);
}

size_t kvt_prefix_lookup(kvt_prefix *idx, kvt_hash128 root, const int32_t *tokens, size_t n, kvt_prefix_hit *hits,
                         size_t max_hits) {
    return walk(idx, root, tokens, NULL, n / idx->B, hits, max_hits);
}

size_t kvt_prefix_match(kvt_prefix *idx, kvt_hash128 root, const int32_t *tokens, const kvt_hash128 *hashes,
                        size_t n_blocks, kvt_prefix_hit *hits, size_t max_hits) {
    return walk(idx, root, tokens, hashes, n_blocks, hits, max_hits);
}

int kvt_prefix_foreach(const kvt_prefix *idx, int (*fn)(void *ctx, const kvt_prefix_info *e), void *ctx) {
    const kvt_hmap128 *m = &idx->map;
    for (size_t i = 0; i < m->cap; i++) {
        uint32_t id = m->slots[i].val;
        if (id == KVT_HMAP128_EMPTY || !idx->ents[id].tiers) continue;
        kvt_prefix_info info;
        fill_info(idx, id, &info);
        int rc = fn(ctx, &info);
        if (rc) return rc;
    }
    return 0;
}

void kvt_prefix_get_stats(const kvt_prefix *idx, kvt_prefix_stats *out) {
    *out = idx->st;
    out->ghosts = idx->map.count - idx->st.entries;
    out->bytes = sizeof *idx + kvt_hmap128_bytes(&idx->map) +
        (size_t)idx->cap * (sizeof *idx->ents + sizeof *idx->free_ids + (size_t)idx->B * sizeof *idx->toks);
}

int kvt_prefix_nearest_child(const kvt_prefix *idx, kvt_hash128 parent, const int32_t *tokens, kvt_prefix_info *out,
                             uint32_t *common) {
    uint32_t pid;
    if (!kvt_hmap128_get(&idx->map, parent, &pid)) return 0;
    uint32_t best = NO_ID, best_len = 0, seen = 0;
    for (uint32_t id = idx->ents[pid].first_child; id != NO_ID && seen < KVT_PREFIX_SCAN_CHILDREN_MAX;
         id = idx->ents[id].next_sib, seen++) {
        const int32_t *t = entry_tokens(idx, id);
        uint32_t l = 0;
        while (l < idx->B && t[l] == tokens[l]) l++;
        if (best == NO_ID || l > best_len) best = id, best_len = l;
    }
    if (best == NO_ID) return 0;
    fill_info(idx, best, out);
    *common = best_len;
    return 1;
}

size_t kvt_prefix_children(const kvt_prefix *idx, kvt_hash128 parent, kvt_hash128 *out, size_t max) {
    uint32_t pid;
    size_t n = 0;
    if (!kvt_hmap128_get(&idx->map, parent, &pid)) return 0;
    for (uint32_t id = idx->ents[pid].first_child; id != NO_ID; id = idx->ents[id].next_sib, n++)
        if (n < max) out[n] = idx->ents[id].hash;
    return n;
}

int kvt_prefix_recently_gone(const kvt_prefix *idx, kvt_hash128 hash) {
    for (uint32_t i = 0; i < idx->gone_count; i++)
        if (kvt_hash128_eq(idx->gone[i], hash)) return 1;
    return 0;
}
