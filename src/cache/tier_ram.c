// SPDX-License-Identifier: MIT
/* T1 host-RAM store: a slot per block in an arena of a few large pieces
 * (tier_ram.h "Arena"), a key -> record map, a
 * parent key -> stored-children count map (counts outlive an absent parent,
 * so a block put after its children knows it is not a leaf), and a min-heap of
 * leaves by last-use tick that yields the eviction victim. */
#include "tier_ram.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "hmap128.h"
#include "log.h"

#define RAM_DEFAULT_BUDGET (1ull << 30)
#define RECS_MIN_CAP 64
#define NOT_IN_HEAP UINT32_MAX

typedef struct {
    kvt_hash128 hash, parent;
    uint64_t tick;     /* last use; larger is more recent */
    double t_use;      /* last use, kvt_now() seconds (handed to on_evict) */
    uint32_t heap_pos; /* index in r->heap, or NOT_IN_HEAP (not a leaf, pending, or free) */
    int pending;       /* between kvt_ram_put_begin and kvt_ram_put_end: unreadable, never evicted */
    uint8_t *mem;      /* payload at 0, tokens at r->tok_off; NULL when free */
} ram_rec;

/* A piece of the arena: slots of alloc_bytes each. */
typedef struct {
    uint8_t *base;
    int mapped; /* from params.mem_alloc (else ordinary memory) */
} ram_piece;

struct kvt_ram {
    kvt_ram_params p;
    ram_piece *pieces;
    uint32_t n_pieces;
    uint8_t **free_slots; /* slots of the pieces that no block holds */
    uint32_t n_free_slots;
    uint64_t n_slots, max_slots; /* slots in the pieces now, and the most the budget pays for */
    int mapped_refused;          /* mem_alloc refused a piece: ordinary memory from then on */
    size_t tok_off, alloc_bytes;
    uint64_t cost;
    kvt_hmap128 map;  /* key -> record id */
    kvt_hmap128 kids; /* parent key -> number of stored blocks naming it */
    ram_rec *recs;
    uint32_t *free_ids, *heap;
    uint32_t cap, n_used, n_free, heap_n;
    uint64_t clock;
    kvt_ram_stats st;
};

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

kvt_ram_params kvt_ram_default_params(void) {
    kvt_ram_params p;
    memset(&p, 0, sizeof p);
    p.budget_bytes = RAM_DEFAULT_BUDGET;
    p.block_tokens = KVT_BLOCK_TOKENS_DEFAULT;
    return p;
}

int kvt_ram_new(const kvt_ram_params *p, kvt_ram **out) {
    *out = NULL;
    if (!p->payload_bytes) return kvt_fail(KVT_EARG, "RAM tier: payload_bytes is 0");
    if (p->block_tokens == 0 || p->block_tokens > KVT_BLOCK_TOKENS_MAX)
        return kvt_fail(KVT_EARG, "RAM tier: block size %u outside 1..%d", p->block_tokens, KVT_BLOCK_TOKENS_MAX);
    if (p->index && kvt_prefix_block_tokens(p->index) != p->block_tokens)
        return kvt_fail(KVT_EARG, "RAM tier: block size %u but the index uses %u", p->block_tokens,
                        kvt_prefix_block_tokens(p->index));
    if (p->payload_bytes > SIZE_MAX / 2) return kvt_fail(KVT_EARG, "RAM tier: payload_bytes too large");
    kvt_ram *r = kvt_xcalloc(1, sizeof *r);
    r->p = *p;
    r->tok_off = round_up(p->payload_bytes, KVT_RAM_ALIGN);
    r->alloc_bytes = r->tok_off + round_up((size_t)p->block_tokens * sizeof(int32_t), KVT_RAM_ALIGN);
    r->cost = r->alloc_bytes + sizeof(ram_rec);
    r->max_slots = p->budget_bytes / r->cost;
    kvt_hmap128_init(&r->map);
    kvt_hmap128_init(&r->kids);
    r->st.budget_bytes = p->budget_bytes;
    *out = r;
    return 0;
}

uint64_t kvt_ram_block_cost(const kvt_ram *r) { return r->cost; }

static const int32_t *rec_tokens(const kvt_ram *r, const ram_rec *x) {
    return (const int32_t *)(const void *)(x->mem + r->tok_off);
}

/* ---- the arena ---- */

/* A new piece of up to KVT_RAM_PIECE_BYTES of slots (at least one, never past
 * max_slots) onto the free slots; 0, or -ENOMEM when there is no memory. */
static int add_piece(kvt_ram *r) {
    uint64_t slots = KVT_MAX((uint64_t)1, KVT_RAM_PIECE_BYTES / r->alloc_bytes);
    if (r->p.mem_max && !r->mapped_refused) slots = KVT_MIN(slots, KVT_MAX((uint64_t)1, r->p.mem_max / r->alloc_bytes));
    slots = KVT_MIN(slots, r->max_slots - r->n_slots);
    size_t bytes = (size_t)slots * r->alloc_bytes;
    uint8_t *base = NULL;
    int mapped = 0;
    if (r->p.mem_alloc && !r->mapped_refused) {
        base = r->p.mem_alloc(r->p.mem_ctx, bytes);
        mapped = base != NULL;
        if (!base) {
            r->mapped_refused = 1;
            kvt_log(KVT_LOG_WARN,
                    "RAM tier: no memory mapped for the device for %zu more bytes (%s); T1 takes ordinary memory "
                    "from now on, and its pages reach the device through a staging copy",
                    bytes, kvt_errmsg());
        }
    }
    if (!base && !(base = aligned_alloc(KVT_RAM_ALIGN, bytes))) return -ENOMEM;
    r->pieces = kvt_xrealloc(r->pieces, (size_t)(r->n_pieces + 1) * sizeof *r->pieces);
    r->pieces[r->n_pieces++] = (ram_piece){base, mapped};
    r->free_slots = kvt_xrealloc(r->free_slots, (size_t)(r->n_slots + slots) * sizeof *r->free_slots);
    for (uint64_t i = slots; i-- > 0;) r->free_slots[r->n_free_slots++] = base + (size_t)i * r->alloc_bytes;
    r->n_slots += slots;
    r->st.arena_bytes += bytes;
    if (mapped) r->st.arena_mapped += bytes;
    return 0;
}

/* A free slot, taking a new piece when none is left; NULL when out of memory. */
static uint8_t *take_slot(kvt_ram *r) {
    if (!r->n_free_slots && (r->n_slots >= r->max_slots || add_piece(r))) return NULL;
    return r->free_slots[--r->n_free_slots];
}

static void free_pieces(kvt_ram *r) {
    for (uint32_t i = 0; i < r->n_pieces; i++) {
        if (r->pieces[i].mapped) r->p.mem_free(r->p.mem_ctx, r->pieces[i].base);
        else free(r->pieces[i].base);
    }
    free(r->pieces);
    free(r->free_slots);
}

/* ---- leaf heap: min-heap of record ids by tick ---- */

static int older(const kvt_ram *r, uint32_t a, uint32_t b) { return r->recs[a].tick < r->recs[b].tick; }

static void heap_set(kvt_ram *r, uint32_t pos, uint32_t id) {
    r->heap[pos] = id;
    r->recs[id].heap_pos = pos;
}

static void sift_up(kvt_ram *r, uint32_t pos) {
    uint32_t id = r->heap[pos];
    while (pos > 0) {
        uint32_t up = (pos - 1) / 2;
        if (!older(r, id, r->heap[up])) break;
        heap_set(r, pos, r->heap[up]);
        pos = up;
    }
    heap_set(r, pos, id);
}

static void sift_down(kvt_ram *r, uint32_t pos) {
    uint32_t id = r->heap[pos];
    for (;;) {
        uint32_t c = 2 * pos + 1;
        if (c >= r->heap_n) break;
        if (c + 1 < r->heap_n && older(r, r->heap[c + 1], r->heap[c])) c++;
        if (!older(r, r->heap[c], id)) break;
        heap_set(r, pos, r->heap[c]);
        pos = c;
    }
    heap_set(r, pos, id);
}

static void heap_push(kvt_ram *r, uint32_t id) {
    assert(r->recs[id].heap_pos == NOT_IN_HEAP);
    if (r->recs[id].pending) return; /* kvt_ram_put_end makes it a leaf */
    r->heap[r->heap_n] = id;
    sift_up(r, r->heap_n++);
}

static void heap_remove(kvt_ram *r, uint32_t id) {
    uint32_t pos = r->recs[id].heap_pos;
    if (pos == NOT_IN_HEAP) return;
    r->recs[id].heap_pos = NOT_IN_HEAP;
    uint32_t last = r->heap[--r->heap_n];
    if (pos == r->heap_n) return;
    heap_set(r, pos, last);
    sift_up(r, pos);
    sift_down(r, r->recs[last].heap_pos);
}

/* ---- child counts by parent key ---- */

static uint32_t kids_of(const kvt_ram *r, kvt_hash128 key) {
    uint32_t n = 0;
    kvt_hmap128_get(&r->kids, key, &n);
    return n;
}

/* One more stored (or being stored) child of key: if key is a held leaf, it
 * stops being one. */
static void kids_inc(kvt_ram *r, kvt_hash128 key) {
    uint32_t n = kids_of(r, key);
    kvt_hmap128_put(&r->kids, key, n + 1);
    uint32_t id;
    if (n == 0 && kvt_hmap128_get(&r->map, key, &id)) heap_remove(r, id);
}

/* One child fewer: a held parent whose last child left becomes a leaf again,
 * at the place its own tick gives it. */
static void kids_dec(kvt_ram *r, kvt_hash128 key) {
    uint32_t n = kids_of(r, key), id;
    assert(n > 0);
    if (n > 1) {
        kvt_hmap128_put(&r->kids, key, n - 1);
        return;
    }
    kvt_hmap128_del(&r->kids, key);
    if (kvt_hmap128_get(&r->map, key, &id)) heap_push(r, id);
}

/* ---- records ---- */

static uint32_t alloc_id(kvt_ram *r) {
    if (r->n_free) return r->free_ids[--r->n_free];
    if (r->n_used == r->cap) {
        uint32_t cap = r->cap ? r->cap * 2 : RECS_MIN_CAP;
        r->recs = kvt_xrealloc(r->recs, (size_t)cap * sizeof *r->recs);
        r->free_ids = kvt_xrealloc(r->free_ids, (size_t)cap * sizeof *r->free_ids);
        r->heap = kvt_xrealloc(r->heap, (size_t)cap * sizeof *r->heap);
        r->cap = cap;
    }
    return r->n_used++;
}

static void touch(kvt_ram *r, uint32_t id) {
    r->recs[id].tick = ++r->clock;
    r->recs[id].t_use = kvt_now();
    if (r->recs[id].heap_pos != NOT_IN_HEAP) sift_down(r, r->recs[id].heap_pos); /* its key only grew */
}

/* Takes record id out of every structure and, if unindex, out of the index;
 * evict says whether on_evict sees it. Frees its memory last, so the callback
 * can read it. */
static void drop(kvt_ram *r, uint32_t id, int evict, int unindex) {
    ram_rec *x = &r->recs[id];
    kvt_hash128 hash = x->hash, parent = x->parent;
    uint8_t *mem = x->mem;
    double t_use = x->t_use;
    heap_remove(r, id);
    kvt_hmap128_del(&r->map, hash);
    x->mem = NULL;
    r->free_ids[r->n_free++] = id;
    kids_dec(r, parent);
    r->st.bytes_used -= r->cost;
    r->st.blocks--;
    if (r->p.index && unindex) {
        int rc = kvt_prefix_remove(r->p.index, hash, KVT_TIER_T1);
        assert(rc == 0); /* the store alone manages T1 presence */
        (void)rc;
    }
    if (evict) {
        r->st.evictions++;
        if (r->p.on_evict)
            r->p.on_evict(r->p.evict_ctx, hash, parent, (const int32_t *)(const void *)(mem + r->tok_off), mem,
                          r->p.payload_bytes, t_use);
    }
    r->free_slots[r->n_free_slots++] = mem;
}

static int same_block(const kvt_ram *r, const ram_rec *x, kvt_hash128 parent, const int32_t *tokens) {
    return kvt_hash128_eq(x->parent, parent) &&
        memcmp(rec_tokens(r, x), tokens, (size_t)r->p.block_tokens * sizeof *tokens) == 0;
}

int kvt_ram_put(kvt_ram *r, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void *payload) {
    void *slot;
    int rc = kvt_ram_put_begin(r, hash, parent, tokens, &slot);
    if (rc) return rc;
    memcpy(slot, payload, r->p.payload_bytes);
    r->st.filled--;
    kvt_ram_put_end(r, hash, 1);
    return 0;
}

void kvt_ram_put_end(kvt_ram *r, kvt_hash128 hash, int ok) {
    uint32_t id;
    if (!kvt_hmap128_get(&r->map, hash, &id) || !r->recs[id].pending) return;
    r->recs[id].pending = 0;
    if (!ok) {
        r->st.puts--, r->st.filled--;
        drop(r, id, 0, 1);
    } else if (!kids_of(r, hash)) {
        heap_push(r, id);
    }
}

/* Long: the checks, room by eviction, the slot, the records and the index, each undone on failure. */
int kvt_ram_put_begin(kvt_ram *r, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, void **slot) {
    uint32_t id;
    if (kvt_hmap128_get(&r->map, hash, &id)) {
        if (!same_block(r, &r->recs[id], parent, tokens)) {
            r->st.collisions++;
            return kvt_fail(-EEXIST, "RAM tier: key names another block");
        }
        touch(r, id);
        r->st.dup_puts++;
        return 1;
    }
    if (kvt_hash128_eq(hash, parent) || (r->p.index && kvt_prefix_check(r->p.index, hash, parent, tokens))) {
        r->st.collisions++;
        return kvt_fail(-EEXIST, "RAM tier: key names another block in the index");
    }
    if (r->cost > r->p.budget_bytes) {
        r->st.rejected++;
        return kvt_fail(KVT_ELIMIT, "RAM tier: a block (%llu bytes) exceeds the budget (%llu)",
                        (unsigned long long)r->cost, (unsigned long long)r->p.budget_bytes);
    }
    /* Count the child before evicting, so the parent cannot be the victim. */
    kids_inc(r, parent);
    while (r->st.bytes_used + r->cost > r->p.budget_bytes) {
        if (!r->heap_n) {
            kids_dec(r, parent);
            r->st.rejected++;
            return kvt_fail(KVT_ELIMIT, "RAM tier: full and no block can be evicted for this one");
        }
        drop(r, r->heap[0], 1, 1);
    }
    uint8_t *mem = take_slot(r);
    if (!mem) {
        kids_dec(r, parent);
        return kvt_fail(-ENOMEM, "RAM tier: out of memory for a block");
    }
    *slot = mem;
    memcpy(mem + r->tok_off, tokens, (size_t)r->p.block_tokens * sizeof *tokens);
    id = alloc_id(r);
    ram_rec *x = &r->recs[id];
    x->hash = hash;
    x->parent = parent;
    x->mem = mem;
    x->heap_pos = NOT_IN_HEAP;
    x->pending = 1;
    x->tick = ++r->clock;
    x->t_use = kvt_now();
    kvt_hmap128_put(&r->map, hash, id);
    r->st.bytes_used += r->cost;
    r->st.blocks++;
    r->st.puts++;
    r->st.filled++;
    if (r->p.index) {
        /* Cannot collide unless on_evict added a conflicting block meanwhile. */
        int rc = kvt_prefix_add(r->p.index, hash, parent, tokens, KVT_TIER_T1, id);
        if (rc) {
            r->st.puts--, r->st.filled--;
            r->st.collisions++;
            drop(r, id, 0, 0);
            return rc;
        }
    }
    return 0;
}

int kvt_ram_peek(kvt_ram *r, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void **payload) {
    uint32_t id;
    if (!kvt_hmap128_get(&r->map, hash, &id) || r->recs[id].pending || !same_block(r, &r->recs[id], parent, tokens)) {
        r->st.misses++;
        return KVT_ENOTFOUND;
    }
    *payload = r->recs[id].mem;
    touch(r, id);
    r->st.hits++;
    r->st.lent++;
    return 0;
}

int kvt_ram_get(kvt_ram *r, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, void *out) {
    const void *mem;
    int rc = kvt_ram_peek(r, hash, parent, tokens, &mem);
    if (rc) return rc;
    r->st.lent--;
    memcpy(out, mem, r->p.payload_bytes);
    return 0;
}

int kvt_ram_contains(const kvt_ram *r, kvt_hash128 hash) { return kvt_hmap128_get(&r->map, hash, NULL); }

int kvt_ram_remove(kvt_ram *r, kvt_hash128 hash) {
    uint32_t id;
    if (!kvt_hmap128_get(&r->map, hash, &id)) return kvt_fail(KVT_ENOTFOUND, "RAM tier: block not held");
    drop(r, id, 0, 1);
    r->st.removes++;
    return 0;
}

size_t kvt_ram_evict(kvt_ram *r, size_t n) {
    size_t done = 0;
    for (; done < n && r->heap_n; done++) drop(r, r->heap[0], 1, 1);
    return done;
}

void kvt_ram_flush(kvt_ram *r) {
    kvt_ram_evict(r, SIZE_MAX);
    /* Only blocks whose parent links form a cycle can remain: that needs key
     * collisions (test hook), but a flush must still write back everything. */
    for (uint32_t id = 0; id < r->n_used; id++)
        if (r->recs[id].mem) drop(r, id, 1, 1);
}

void kvt_ram_free(kvt_ram *r) {
    if (!r) return;
    for (uint32_t id = 0; id < r->n_used; id++)
        if (r->recs[id].mem) drop(r, id, 0, 1);
    kvt_hmap128_free(&r->map);
    kvt_hmap128_free(&r->kids);
    free_pieces(r);
    free(r->recs);
    free(r->free_ids);
    free(r->heap);
    free(r);
}

int kvt_ram_foreach(const kvt_ram *r, int (*fn)(void *ctx, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens),
                    void *ctx) {
    for (uint32_t id = 0; id < r->n_used; id++) {
        const ram_rec *x = &r->recs[id];
        if (!x->mem) continue;
        int rc = fn(ctx, x->hash, x->parent, rec_tokens(r, x));
        if (rc) return rc;
    }
    return 0;
}

void kvt_ram_get_stats(const kvt_ram *r, kvt_ram_stats *out) { *out = r->st; }

/* ---- the tier interface (tier.h) ---- */

static int ops_put(void *t, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void *payload) {
    return kvt_ram_put(t, hash, parent, tokens, payload);
}

static size_t ops_get_many(void *t, kvt_tier_read *reqs, size_t n) {
    size_t hits = 0;
    for (size_t i = 0; i < n; i++)
        hits += (reqs[i].result = kvt_ram_get(t, reqs[i].hash, reqs[i].parent, reqs[i].tokens, reqs[i].out)) == 0;
    return hits;
}

static int ops_contains(void *t, kvt_hash128 hash) { return kvt_ram_contains(t, hash); }
static int ops_remove(void *t, kvt_hash128 hash) { return kvt_ram_remove(t, hash); }

static int ops_flush(void *t) {
    kvt_ram_flush(t);
    return 0;
}

static void ops_stats(void *t, kvt_tier_stats *out) {
    const kvt_ram *r = t;
    *out = (kvt_tier_stats){.blocks = r->st.blocks,
                            .bytes_used = r->st.bytes_used,
                            .budget_bytes = r->st.budget_bytes,
                            .block_cost = r->cost,
                            .hits = r->st.hits,
                            .misses = r->st.misses,
                            .puts = r->st.puts,
                            .evictions = r->st.evictions};
}

const kvt_tier_ops kvt_ram_tier_ops = {
    .name = "T1 RAM",
    .persistent = 0,
    .measured = 0,
    .put = ops_put,
    .get_many = ops_get_many,
    .contains = ops_contains,
    .remove = ops_remove,
    .flush = ops_flush,
    .stats = ops_stats,
};
