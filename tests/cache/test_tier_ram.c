// SPDX-License-Identifier: MIT
/* RAM tier: payload round-trip, budget never exceeded under churn, exact LRU
 * over leaves (a parent never goes while a child stays), every eviction seen
 * once by the callback, and the prefix index's T1 presence equal to the store
 * after every operation. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "blockhash.h"
#include "common.h"
#include "prefix.h"
#include "testutil.h"
#include "tier_ram.h"

#define B 4
#define PAYLOAD 200 /* deliberately not a multiple of the alignment */

static void fill_payload(kvt_hash128 h, uint8_t *p) {
    uint64_t x = h.lo ^ (h.hi << 1) ^ 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < PAYLOAD; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

static int payload_ok(kvt_hash128 h, const void *p) {
    uint8_t want[PAYLOAD];
    fill_payload(h, want);
    return memcmp(want, p, PAYLOAD) == 0;
}

/* A forest of sequences sharing prefixes; blocks are identified by (seq, j). */
#define NS 60
#define NB 6
#define NBLOCKS (NS * NB)

typedef struct {
    kvt_hash128 hash, parent;
    int32_t tok[B];
    int canon; /* index of the first (seq, j) with this key: shared blocks collapse */
} blk;

static blk blocks[NBLOCKS];
static kvt_hash128 root;

static void make_forest(unsigned seed) {
    static int32_t seqs[NS][NB * B];
    srand(seed);
    kvt_root_params rp = kvt_root_default_params();
    rp.block_tokens = B;
    rp.fingerprint.lo = 9;
    CHECK(kvt_block_root(&rp, &root) == 0);
    for (int s = 0; s < NS; s++) {
        int share = s ? rand() % NB : 0, from = s ? rand() % s : 0;
        for (int i = 0; i < NB * B; i++) seqs[s][i] = i < share * B ? seqs[from][i] : rand() % 1000;
        kvt_hash128 h[NB];
        kvt_block_hashes(root, seqs[s], NB * B, B, h, NB);
        for (int j = 0; j < NB; j++) {
            blk *b = &blocks[s * NB + j];
            b->hash = h[j];
            b->parent = j ? h[j - 1] : root;
            memcpy(b->tok, seqs[s] + j * B, sizeof b->tok);
            b->canon = s * NB + j;
            for (int k = 0; k < s * NB + j; k++)
                if (kvt_hash128_eq(blocks[k].hash, h[j])) {
                    b->canon = blocks[k].canon;
                    break;
                }
        }
    }
}

/* The test's model of the store: which canonical blocks are held, and their
 * last-use ticks, to predict the exact victim of every eviction. */
static struct {
    int held[NBLOCKS];
    uint64_t tick[NBLOCKS];
    int evicted[NBLOCKS]; /* times on_evict saw the block */
    uint64_t clock;
    int pinned; /* canonical parent of the block being put, or -1 */
    int bad_victim, bad_payload, not_held, parent_with_child, still_indexed;
    kvt_ram *ram;
    kvt_prefix *idx;
    int demote; /* callback records a T2 copy in the index */
} m;

static int canon_of(kvt_hash128 h) {
    for (int i = 0; i < NBLOCKS; i++)
        if (kvt_hash128_eq(blocks[i].hash, h)) return blocks[i].canon;
    return -1;
}

static int is_leaf(int c) {
    for (int i = 0; i < NBLOCKS; i++)
        if (blocks[i].canon == i && m.held[i] && kvt_hash128_eq(blocks[i].parent, blocks[c].hash)) return 0;
    return 1;
}

static void on_evict(void *ctx, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void *payload,
                     size_t payload_bytes, double last_use) {
    (void)last_use;
    (void)ctx;
    int c = canon_of(hash);
    if (c < 0 || !m.held[c]) {
        m.not_held++;
        return;
    }
    m.evicted[c]++;
    if (payload_bytes != PAYLOAD || !payload_ok(hash, payload) || !kvt_hash128_eq(parent, blocks[c].parent) ||
        memcmp(tokens, blocks[c].tok, sizeof blocks[c].tok))
        m.bad_payload++;
    /* Predicted victim: the oldest held leaf, other than a pinned parent. */
    int want = -1;
    for (int i = 0; i < NBLOCKS; i++) {
        if (blocks[i].canon != i || !m.held[i] || i == m.pinned || !is_leaf(i)) continue;
        if (want < 0 || m.tick[i] < m.tick[want]) want = i;
    }
    if (want != c) m.bad_victim++;
    /* No block that names it as parent is still in the store. */
    for (int i = 0; i < NBLOCKS; i++)
        if (kvt_hash128_eq(blocks[i].parent, hash) && kvt_ram_contains(m.ram, blocks[i].hash)) m.parent_with_child++;
    kvt_prefix_info info;
    if (m.idx && kvt_prefix_get(m.idx, hash, &info) == 0 && (info.tiers & KVT_TIER_BIT(KVT_TIER_T1))) m.still_indexed++;
    m.held[c] = 0;
    if (m.idx && m.demote) kvt_prefix_add(m.idx, hash, parent, tokens, KVT_TIER_T2, 1);
}

typedef struct {
    int count, missing;
} t1_scan;

static int scan_index(void *ctx, const kvt_prefix_info *e) {
    t1_scan *s = ctx;
    if (!(e->tiers & KVT_TIER_BIT(KVT_TIER_T1))) return 0;
    s->count++;
    if (!kvt_ram_contains(m.ram, e->hash)) s->missing++;
    return 0;
}

/* Store == model, budget respected, index T1 presence == store. */
static int check_state(void) {
    kvt_ram_stats st;
    kvt_ram_get_stats(m.ram, &st);
    int bad = 0;
    if (st.bytes_used > st.budget_bytes) bad++;
    if (st.bytes_used != st.blocks * kvt_ram_block_cost(m.ram)) bad++;
    uint64_t held = 0;
    for (int i = 0; i < NBLOCKS; i++) {
        if (blocks[i].canon != i) continue;
        held += (uint64_t)m.held[i];
        if (kvt_ram_contains(m.ram, blocks[i].hash) != m.held[i]) bad++;
    }
    if (held != st.blocks) bad++;
    if (m.idx) {
        t1_scan s = {0, 0};
        kvt_prefix_foreach(m.idx, scan_index, &s);
        kvt_prefix_stats ps;
        kvt_prefix_get_stats(m.idx, &ps);
        if (s.count != (int)st.blocks || s.missing || ps.tier_entries[KVT_TIER_T1] != st.blocks) bad++;
    }
    CHECKF(bad == 0, "%d state mismatches (bytes %llu/%llu, %llu blocks)", bad, (unsigned long long)st.bytes_used,
           (unsigned long long)st.budget_bytes, (unsigned long long)st.blocks);
    return bad;
}

static int do_put(int i) {
    blk *b = &blocks[i];
    int c = b->canon;
    uint8_t pl[PAYLOAD];
    fill_payload(b->hash, pl);
    int parent = canon_of(b->parent);
    m.pinned = parent >= 0 && m.held[parent] ? parent : -1;
    int rc = kvt_ram_put(m.ram, b->hash, b->parent, b->tok, pl);
    m.pinned = -1;
    if (rc == 0 || rc == 1) {
        CHECK(rc == m.held[c]); /* 1 exactly when already held */
        m.held[c] = 1;
        m.tick[c] = ++m.clock;
    } else {
        CHECKF(rc == KVT_ELIMIT, "put: %d", rc);
    }
    return rc;
}

static kvt_ram *new_ram(uint64_t budget_blocks, kvt_prefix *idx) {
    kvt_ram_params p = kvt_ram_default_params();
    p.payload_bytes = PAYLOAD;
    p.block_tokens = B;
    p.index = idx;
    p.on_evict = on_evict;
    p.budget_bytes = 0;
    kvt_ram *r = NULL;
    CHECK(kvt_ram_new(&p, &r) == 0);
    kvt_ram_free(r);
    /* Budget in whole blocks plus a remainder that must never be usable. */
    p.budget_bytes = budget_blocks * (PAYLOAD + 64) * 2;
    CHECK(kvt_ram_new(&p, &r) == 0);
    uint64_t cost = kvt_ram_block_cost(r);
    kvt_ram_free(r);
    p.budget_bytes = budget_blocks * cost + cost - 1;
    CHECK(kvt_ram_new(&p, &r) == 0);
    memset(&m, 0, sizeof m);
    m.pinned = -1;
    m.ram = r;
    m.idx = idx;
    return r;
}

static void expect_no_callback_errors(void) {
    CHECK(m.bad_victim == 0);
    CHECK(m.bad_payload == 0);
    CHECK(m.not_held == 0);
    CHECK(m.parent_with_child == 0);
    CHECK(m.still_indexed == 0);
}

static void test_basics(void) {
    make_forest(1);
    kvt_prefix *idx;
    CHECK(kvt_prefix_new(B, &idx) == 0);
    kvt_ram *r = new_ram(4, idx);
    uint64_t cost = kvt_ram_block_cost(r);
    CHECK(cost >= PAYLOAD + B * sizeof(int32_t));
    blk *b = &blocks[0];
    uint8_t pl[PAYLOAD], out[PAYLOAD];
    fill_payload(b->hash, pl);
    CHECK(kvt_ram_put(r, b->hash, b->parent, b->tok, pl) == 0);
    CHECK(kvt_ram_put(r, b->hash, b->parent, b->tok, pl) == 1);
    memset(out, 0, sizeof out);
    CHECK(kvt_ram_get(r, b->hash, b->parent, b->tok, out) == 0 && memcmp(out, pl, PAYLOAD) == 0);
    /* Identity is checked on get and put: a different token is a miss / refusal. */
    int32_t other[B];
    memcpy(other, b->tok, sizeof other);
    other[B - 1]++;
    CHECK(kvt_ram_get(r, b->hash, b->parent, other, out) == KVT_ENOTFOUND);
    CHECK(kvt_ram_get(r, b->hash, blocks[1].hash, b->tok, out) == KVT_ENOTFOUND);
    CHECK(kvt_ram_put(r, b->hash, b->parent, other, pl) == -EEXIST);
    /* The index already names this key as another block: refused. */
    blk *c = &blocks[1];
    CHECK(kvt_prefix_add(idx, c->hash, c->parent, other, KVT_TIER_T0, 5) == 0);
    CHECK(kvt_ram_put(r, c->hash, c->parent, c->tok, pl) == -EEXIST);
    CHECK(kvt_prefix_remove(idx, c->hash, KVT_TIER_T0) == 0);
    kvt_prefix_hit hits[NB];
    CHECK(kvt_prefix_lookup(idx, root, b->tok, B, hits, NB) == 1 && hits[0].tier == KVT_TIER_T1);
    CHECK(kvt_ram_contains(r, b->hash) == 1 && kvt_ram_contains(r, c->hash) == 0);
    CHECK(kvt_ram_remove(r, b->hash) == 0 && kvt_ram_remove(r, b->hash) == KVT_ENOTFOUND);
    CHECK(kvt_ram_get(r, b->hash, b->parent, b->tok, out) == KVT_ENOTFOUND);
    CHECK(kvt_prefix_lookup(idx, root, b->tok, B, hits, NB) == 0);
    kvt_ram_stats st;
    kvt_ram_get_stats(r, &st);
    CHECK(st.puts == 1 && st.dup_puts == 1 && st.hits == 1 && st.misses == 3 && st.removes == 1);
    CHECK(st.collisions == 2 && st.blocks == 0 && st.bytes_used == 0 && st.evictions == 0);
    CHECK(st.budget_bytes == 5 * cost - 1);
    kvt_ram_free(r);
    /* Bad parameters. */
    kvt_ram_params p = kvt_ram_default_params();
    CHECK(kvt_ram_new(&p, &r) == KVT_EARG); /* payload_bytes 0 */
    p.payload_bytes = PAYLOAD;
    p.block_tokens = B + 1;
    p.index = idx;
    CHECK(kvt_ram_new(&p, &r) == KVT_EARG); /* B differs from the index's */
    /* A budget below one block refuses every put. */
    p.block_tokens = B;
    p.budget_bytes = PAYLOAD;
    CHECK(kvt_ram_new(&p, &r) == 0);
    CHECK(kvt_ram_put(r, b->hash, b->parent, b->tok, pl) == KVT_ELIMIT);
    kvt_ram_free(r);
    kvt_prefix_stats ps;
    kvt_prefix_get_stats(idx, &ps);
    CHECK(ps.entries == 0);
    kvt_prefix_free(idx);
}

/* Fixed scenarios for the order: plain LRU among leaves, then leaf-first. */
static void test_order(void) {
    make_forest(2);
    /* Independent roots: block 0 of sequences whose first block is their own. */
    int roots[5], nr = 0;
    for (int s = 0; s < NS && nr < 5; s++)
        if (blocks[s * NB].canon == s * NB) roots[nr++] = s * NB;
    CHECK(nr == 5);
    kvt_ram *r = new_ram(3, NULL);
    do_put(roots[0]), do_put(roots[1]), do_put(roots[2]);
    uint8_t out[PAYLOAD];
    blk *a = &blocks[roots[0]];
    CHECK(kvt_ram_get(r, a->hash, a->parent, a->tok, out) == 0);
    m.tick[roots[0]] = ++m.clock;
    do_put(roots[3]); /* evicts roots[1]: roots[0] was used since */
    CHECK(m.evicted[roots[1]] == 1 && !kvt_ram_contains(r, blocks[roots[1]].hash));
    CHECK(kvt_ram_contains(r, a->hash));
    expect_no_callback_errors();
    kvt_ram_free(r);

    /* Chain P -> C plus X: the oldest block P is not a leaf, C goes first. */
    int s = 0;
    while (blocks[s * NB].canon != s * NB || blocks[s * NB + 1].canon != s * NB + 1) s++;
    int P = s * NB, C = s * NB + 1, X = roots[4];
    r = new_ram(3, NULL);
    do_put(P), do_put(C), do_put(X);
    do_put(roots[3]);
    CHECK(m.evicted[C] == 1 && m.evicted[P] == 0);
    do_put(roots[2]); /* now P is a leaf and the oldest */
    CHECK(m.evicted[P] == 1 && m.evicted[X] == 0);
    expect_no_callback_errors();
    kvt_ram_free(r);

    /* A chain written front to back into a full store keeps its head. */
    r = new_ram(3, NULL);
    for (int j = 0; j < 3; j++) CHECK(do_put(s * NB + j) == 0);
    CHECK(do_put(s * NB + 3) == KVT_ELIMIT);
    for (int j = 0; j < 3; j++) CHECK(kvt_ram_contains(r, blocks[s * NB + j].hash));
    expect_no_callback_errors();
    kvt_ram_free(r);
    /* Written back to front (demotion order), the end goes first, the head stays. */
    r = new_ram(3, NULL);
    for (int j = NB - 1; j >= 0; j--) CHECK(do_put(s * NB + j) == 0);
    for (int j = 0; j < NB; j++) CHECK(kvt_ram_contains(r, blocks[s * NB + j].hash) == (j < 3));
    for (int j = 3; j < NB; j++) CHECK(m.evicted[s * NB + j] == 1);
    expect_no_callback_errors();
    /* Flush writes back everything, children before parents. */
    kvt_ram_flush(r);
    for (int j = 0; j < NB; j++) CHECK(m.evicted[s * NB + j] == 1);
    kvt_ram_stats st;
    kvt_ram_get_stats(r, &st);
    CHECK(st.blocks == 0 && st.bytes_used == 0 && st.evictions == NB);
    expect_no_callback_errors();
    kvt_ram_free(r);
}

static void test_churn(unsigned seed, int with_index) {
    make_forest(seed);
    kvt_prefix *idx = NULL;
    if (with_index) CHECK(kvt_prefix_new(B, &idx) == 0);
    kvt_ram *r = new_ram(12, idx);
    m.demote = with_index;
    uint8_t out[PAYLOAD];
    int puts_ok = 0, gets_hit = 0;
    for (int op = 0; op < 6000; op++) {
        int x = rand() % 100, i = rand() % NBLOCKS;
        blk *b = &blocks[i];
        if (x < 45) {
            puts_ok += do_put(i) == 0;
        } else if (x < 55) { /* a whole sequence, in order or in demotion order */
            int s = rand() % NS, rev = rand() % 2;
            for (int j = 0; j < NB; j++) do_put(s * NB + (rev ? NB - 1 - j : j));
        } else if (x < 90) {
            memset(out, 0, sizeof out);
            int rc = kvt_ram_get(r, b->hash, b->parent, b->tok, out);
            CHECK((rc == 0) == m.held[b->canon]);
            if (rc == 0) {
                gets_hit++;
                CHECK(payload_ok(b->hash, out));
                m.tick[b->canon] = ++m.clock;
            }
        } else if (x < 95) {
            int rc = kvt_ram_remove(r, b->hash);
            CHECK((rc == 0) == m.held[b->canon]);
            m.held[b->canon] = 0;
        } else {
            kvt_ram_evict(r, 1 + (size_t)(rand() % 3));
        }
        if (check_state()) break;
    }
    expect_no_callback_errors();
    kvt_ram_stats st;
    kvt_ram_get_stats(r, &st);
    uint64_t seen = 0;
    for (int i = 0; i < NBLOCKS; i++) seen += (uint64_t)m.evicted[i];
    CHECK(seen == st.evictions && st.evictions > 100);
    CHECK(puts_ok > 100 && gets_hit > 100);
    printf("churn seed %u: %llu puts, %llu evictions, %llu hits, %llu misses, %llu rejected\n", seed,
           (unsigned long long)st.puts, (unsigned long long)st.evictions, (unsigned long long)st.hits,
           (unsigned long long)st.misses, (unsigned long long)st.rejected);
    kvt_ram_free(r);
    if (idx) {
        kvt_prefix_stats ps;
        kvt_prefix_get_stats(idx, &ps);
        CHECK(ps.tier_entries[KVT_TIER_T1] == 0 && ps.tier_entries[KVT_TIER_T2] > 0);
        kvt_prefix_free(idx);
    }
}

int main(void) {
    test_basics();
    test_order();
    test_churn(3, 1);
    test_churn(4, 0);
    test_churn(5, 1);
    return kvt_test_done("test_tier_ram");
}
