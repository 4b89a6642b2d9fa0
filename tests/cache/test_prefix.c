// SPDX-License-Identifier: MIT
/* Prefix index: longest-prefix lookup across tiers (stops at the first absent
 * or mismatching block, mid-block changes, partial tails), per-tier presence
 * and handles, child counts and ghosts, and forced hash collisions that must
 * only ever cost misses, never another sequence's blocks. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "blockhash.h"
#include "common.h"
#include "prefix.h"
#include "testutil.h"

#define B 4
#define NBLK 8

static kvt_hash128 make_root(uint64_t salt) {
    kvt_root_params p = kvt_root_default_params();
    p.fingerprint.lo = 42;
    p.block_tokens = B;
    p.salt = &salt;
    p.salt_len = sizeof salt;
    kvt_hash128 r;
    CHECK(kvt_block_root(&p, &r) == 0);
    return r;
}

static kvt_prefix *new_index(void) {
    kvt_prefix *idx = NULL;
    CHECK(kvt_prefix_new(B, &idx) == 0 && idx);
    return idx;
}

/* Recomputes every live entry's child counts from scratch and compares them
 * with the index's; also checks the per-tier entry totals. */
typedef struct {
    kvt_prefix_info e[4096];
    int n;
} snapshot;

static int collect(void *ctx, const kvt_prefix_info *e) {
    snapshot *s = ctx;
    if (s->n < (int)KVT_ARRAY_LEN(s->e)) s->e[s->n++] = *e;
    return 0;
}

static int check_counts(kvt_prefix *idx) {
    static snapshot s;
    s.n = 0;
    kvt_prefix_foreach(idx, collect, &s);
    kvt_prefix_stats st;
    kvt_prefix_get_stats(idx, &st);
    int bad = 0;
    uint64_t per_tier[KVT_TIER_COUNT] = {0};
    for (int i = 0; i < s.n; i++) {
        if (!s.e[i].tiers) bad++;
        for (int t = 0; t < KVT_TIER_COUNT; t++) per_tier[t] += (s.e[i].tiers >> t) & 1;
        uint32_t kids[KVT_TIER_COUNT] = {0}, any = 0;
        for (int j = 0; j < s.n; j++) {
            if (!kvt_hash128_eq(s.e[j].parent, s.e[i].hash)) continue;
            any++;
            for (int t = 0; t < KVT_TIER_COUNT; t++) kids[t] += (s.e[j].tiers >> t) & 1;
        }
        if (any != s.e[i].children_any || memcmp(kids, s.e[i].children, sizeof kids)) bad++;
        /* the parent -> children list holds exactly the present children */
        kvt_hash128 listed[64];
        size_t nl = kvt_prefix_children(idx, s.e[i].hash, listed, KVT_ARRAY_LEN(listed));
        if (nl != any) bad++;
        for (size_t l = 0; l < nl && l < KVT_ARRAY_LEN(listed); l++) {
            kvt_prefix_info c;
            if (kvt_prefix_get(idx, listed[l], &c) || !kvt_hash128_eq(c.parent, s.e[i].hash)) bad++;
        }
    }
    if (st.entries != (uint64_t)s.n) bad++;
    for (int t = 0; t < KVT_TIER_COUNT; t++)
        if (per_tier[t] != st.tier_entries[t]) bad++;
    CHECKF(bad == 0, "%d inconsistencies in %d entries", bad, s.n);
    return bad;
}

static void test_lookup_across_tiers(void) {
    kvt_prefix *idx = new_index();
    kvt_hash128 root = make_root(0);
    int32_t tok[NBLK * B + 3];
    for (int i = 0; i < (int)KVT_ARRAY_LEN(tok); i++) tok[i] = 1000 + i;
    kvt_hash128 h[NBLK];
    kvt_block_hashes(root, tok, NBLK * B, B, h, NBLK);
    kvt_prefix_hit hits[NBLK + 1];

    CHECK(kvt_prefix_lookup(idx, root, tok, KVT_ARRAY_LEN(tok), hits, NBLK) == 0);
    /* Blocks 0-2 in T0, 3-5 in T1, 6-7 in T2; block 1 also in T2, block 4 also in T3. */
    uint64_t handles[NBLK];
    for (int i = 0; i < NBLK; i++) handles[i] = 100 + (uint64_t)i;
    CHECK(kvt_prefix_add_chain(idx, root, tok, h, 3, KVT_TIER_T0, handles) == 3);
    for (int i = 3; i < 6; i++) CHECK(kvt_prefix_add(idx, h[i], h[i - 1], tok + i * B, KVT_TIER_T1, 200 + i) == 0);
    for (int i = 6; i < 8; i++) CHECK(kvt_prefix_add(idx, h[i], h[i - 1], tok + i * B, KVT_TIER_T2, 300 + i) == 0);
    CHECK(kvt_prefix_add(idx, h[1], h[0], tok + B, KVT_TIER_T2, 301) == 0);
    CHECK(kvt_prefix_add(idx, h[4], h[3], tok + 4 * B, KVT_TIER_T3, 404) == 0);

    size_t k = kvt_prefix_lookup(idx, root, tok, KVT_ARRAY_LEN(tok), hits, NBLK + 1);
    CHECK(k == NBLK); /* the 3-token tail is not a block */
    const kvt_tier want_tier[NBLK] = {0, 0, 0, 1, 1, 1, 2, 2};
    const uint64_t want_handle[NBLK] = {100, 101, 102, 203, 204, 205, 306, 307};
    for (size_t i = 0; i < k; i++) {
        CHECK(hits[i].tier == want_tier[i] && hits[i].handle == want_handle[i]);
        CHECK(kvt_hash128_eq(hits[i].hash, h[i]));
    }
    CHECK(hits[1].tiers == (KVT_TIER_BIT(KVT_TIER_T0) | KVT_TIER_BIT(KVT_TIER_T2)));
    CHECK(hits[4].tiers == (KVT_TIER_BIT(KVT_TIER_T1) | KVT_TIER_BIT(KVT_TIER_T3)));
    /* match with precomputed keys agrees; max_hits caps. */
    CHECK(kvt_prefix_match(idx, root, tok, h, NBLK, hits, NBLK) == NBLK);
    CHECK(kvt_prefix_lookup(idx, root, tok, KVT_ARRAY_LEN(tok), hits, 2) == 2);
    /* Fewer tokens than the stored chain: only full blocks of the query. */
    CHECK(kvt_prefix_lookup(idx, root, tok, 3 * B + 1, hits, NBLK) == 3);

    /* A change in the middle of block 3 stops at 3; in block 0, nothing. */
    int32_t t2[KVT_ARRAY_LEN(tok)];
    memcpy(t2, tok, sizeof tok);
    t2[3 * B + B / 2] = -1;
    CHECK(kvt_prefix_lookup(idx, root, t2, KVT_ARRAY_LEN(t2), hits, NBLK) == 3);
    memcpy(t2, tok, sizeof tok);
    t2[1] = -1;
    CHECK(kvt_prefix_lookup(idx, root, t2, KVT_ARRAY_LEN(t2), hits, NBLK) == 0);
    /* Another namespace (salt) sees nothing. */
    CHECK(kvt_prefix_lookup(idx, make_root(1), tok, KVT_ARRAY_LEN(tok), hits, NBLK) == 0);

    /* Re-adding in the same tier updates the handle only. */
    CHECK(kvt_prefix_add(idx, h[0], root, tok, KVT_TIER_T0, 999) == 0);
    kvt_prefix_info info;
    CHECK(kvt_prefix_get(idx, h[0], &info) == 0 && info.handle[KVT_TIER_T0] == 999);
    CHECK(info.children[KVT_TIER_T0] == 1 && info.children[KVT_TIER_T2] == 1 && info.children_any == 1);
    CHECK(memcmp(info.tokens, tok, B * sizeof *tok) == 0 && kvt_hash128_eq(info.parent, root));

    /* Removing block 4 from T1 leaves it in T3: still a hit, now from T3. */
    CHECK(kvt_prefix_remove(idx, h[4], KVT_TIER_T1) == 0);
    CHECK(kvt_prefix_remove(idx, h[4], KVT_TIER_T1) == KVT_ENOTFOUND);
    k = kvt_prefix_lookup(idx, root, tok, KVT_ARRAY_LEN(tok), hits, NBLK);
    CHECK(k == NBLK && hits[4].tier == KVT_TIER_T3 && hits[4].handle == 404);
    /* ... and gone from T3 too: matching stops at block 4 although 5..7 remain. */
    CHECK(kvt_prefix_remove(idx, h[4], KVT_TIER_T3) == 0);
    CHECK(kvt_prefix_lookup(idx, root, tok, KVT_ARRAY_LEN(tok), hits, NBLK) == 4);
    CHECK(kvt_prefix_get(idx, h[4], &info) == KVT_ENOTFOUND); /* a ghost: its child 5 is present */
    kvt_prefix_stats st;
    kvt_prefix_get_stats(idx, &st);
    CHECK(st.entries == NBLK - 1 && st.ghosts >= 1);
    CHECK(st.tier_entries[0] == 3 && st.tier_entries[1] == 2 && st.tier_entries[2] == 3 && st.tier_entries[3] == 0);
    CHECK(st.mismatches == 0 && st.hit_blocks > 0 && st.tier_hit_blocks[KVT_TIER_T3] == 1);
    check_counts(idx);
    /* The ghost comes back to life with the child count it kept. */
    CHECK(kvt_prefix_add(idx, h[4], h[3], tok + 4 * B, KVT_TIER_T1, 7) == 0);
    CHECK(kvt_prefix_get(idx, h[4], &info) == 0 && info.children[KVT_TIER_T1] == 1 && info.children_any == 1);
    CHECK(kvt_prefix_lookup(idx, root, tok, KVT_ARRAY_LEN(tok), hits, NBLK) == NBLK);
    check_counts(idx);

    /* Invalid tiers. */
    CHECK(kvt_prefix_add(idx, h[0], root, tok, KVT_TIER_COUNT, 0) == KVT_EARG);
    CHECK(kvt_prefix_remove(idx, h[0], (kvt_tier)-1) == KVT_EARG);

    /* Removing everything, parents first, leaves no entries and no ghosts. */
    for (int i = 0; i < NBLK; i++)
        for (int t = 0; t < KVT_TIER_COUNT; t++) kvt_prefix_remove(idx, h[i], (kvt_tier)t);
    kvt_prefix_get_stats(idx, &st);
    CHECK(st.entries == 0 && st.ghosts == 0);
    for (int t = 0; t < KVT_TIER_COUNT; t++) CHECK(st.tier_entries[t] == 0);
    kvt_prefix_free(idx);
}

/* Children added before their parent; leaf status per tier. */
static void test_child_counts(void) {
    kvt_prefix *idx = new_index();
    kvt_hash128 root = make_root(0);
    int32_t a[3 * B], c[3 * B];
    for (int i = 0; i < 3 * B; i++) a[i] = c[i] = i;
    c[2 * B] = 77; /* a and c share blocks 0 and 1, differ in block 2 */
    kvt_hash128 ha[3], hc[3];
    kvt_block_hashes(root, a, 3 * B, B, ha, 3);
    kvt_block_hashes(root, c, 3 * B, B, hc, 3);
    CHECK(kvt_hash128_eq(ha[1], hc[1]) && !kvt_hash128_eq(ha[2], hc[2]));
    /* Demotion order: deepest first. */
    CHECK(kvt_prefix_add(idx, ha[2], ha[1], a + 2 * B, KVT_TIER_T1, 0) == 0);
    CHECK(kvt_prefix_add(idx, hc[2], hc[1], c + 2 * B, KVT_TIER_T2, 0) == 0);
    kvt_prefix_info info;
    CHECK(kvt_prefix_get(idx, ha[1], &info) == KVT_ENOTFOUND);
    CHECK(kvt_prefix_add(idx, ha[1], ha[0], a + B, KVT_TIER_T1, 0) == 0);
    CHECK(kvt_prefix_get(idx, ha[1], &info) == 0);
    CHECK(info.children[KVT_TIER_T1] == 1 && info.children[KVT_TIER_T2] == 1 && info.children_any == 2);
    CHECK(info.children[KVT_TIER_T0] == 0);
    CHECK(kvt_prefix_add(idx, ha[0], root, a, KVT_TIER_T1, 0) == 0);
    CHECK(kvt_prefix_get(idx, ha[0], &info) == 0 && info.children[KVT_TIER_T1] == 1);
    check_counts(idx);
    /* Leaf in T1 after its T1 child leaves. */
    CHECK(kvt_prefix_remove(idx, ha[2], KVT_TIER_T1) == 0);
    CHECK(kvt_prefix_get(idx, ha[1], &info) == 0);
    CHECK(info.children[KVT_TIER_T1] == 0 && info.children[KVT_TIER_T2] == 1 && info.children_any == 1);
    check_counts(idx);
    kvt_prefix_free(idx);
}

/* Forced collisions: keys truncated to a few bits, a tiny alphabet so real
 * shared prefixes also occur. Every hit must belong to a registered sequence
 * whose tokens equal the query's up to and including the hit block. */
#define CSEQ 300
#define CBLK 6
#define CALPHA 3
#define CBITS 6

static void test_collisions(void) {
    kvt_blockhash_test_bits = CBITS;
    kvt_prefix *idx = new_index();
    kvt_hash128 root = make_root(0);
    static int32_t seqs[CSEQ][CBLK * B];
    srand(7);
    int added_blocks = 0;
    for (int s = 0; s < CSEQ; s++) {
        for (int i = 0; i < CBLK * B; i++) seqs[s][i] = rand() % CALPHA;
        kvt_hash128 h[CBLK];
        kvt_block_hashes(root, seqs[s], CBLK * B, B, h, CBLK);
        uint64_t handles[CBLK];
        for (int j = 0; j < CBLK; j++) handles[j] = ((uint64_t)s << 8) | (uint64_t)j;
        int n = kvt_prefix_add_chain(idx, root, seqs[s], h, CBLK, (kvt_tier)(s % KVT_TIER_COUNT), handles);
        CHECK(n >= 0 && n <= CBLK);
        /* a chain stops only where its key names another block (a real collision) */
        if (n >= 0 && n < CBLK) CHECK(kvt_prefix_check(idx, h[n], n ? h[n - 1] : root, seqs[s] + n * B) == -EEXIST);
        added_blocks += n;
    }
    kvt_prefix_stats st;
    kvt_prefix_get_stats(idx, &st);
    CHECKF(st.collisions > 0, "the hook produced no collision");
    CHECK(added_blocks > 0);
    int hits_total = 0, wrong = 0;
    int32_t q[CBLK * B];
    kvt_prefix_hit hits[CBLK];
    for (int r = 0; r < 3000; r++) {
        if (r % 2) {
            memcpy(q, seqs[rand() % CSEQ], sizeof q);
            q[rand() % (CBLK * B)] = rand() % CALPHA; /* maybe a change */
        } else {
            for (int i = 0; i < CBLK * B; i++) q[i] = rand() % CALPHA;
        }
        size_t k = kvt_prefix_lookup(idx, root, q, CBLK * B, hits, CBLK);
        hits_total += (int)k;
        for (size_t j = 0; j < k; j++) {
            uint64_t hd = hits[j].handle;
            int s = (int)(hd >> 8), blk = (int)(hd & 0xff);
            /* Whichever tier the hit came from, its registrant must be the
             * same sequence as the query up to this block. */
            if (blk != (int)j || memcmp(seqs[s], q, (j + 1) * B * sizeof *q)) wrong++;
        }
    }
    kvt_prefix_get_stats(idx, &st);
    CHECKF(wrong == 0, "%d hits served another sequence's block", wrong);
    CHECK(hits_total > 0);
    CHECKF(st.mismatches > 0, "no lookup met a colliding key");
    check_counts(idx);
    kvt_prefix_free(idx);
    kvt_blockhash_test_bits = 0;
}

/* A collision on block 0 must also stop registration of later blocks whose
 * keys coincide with the other sequence's (equal tokens after a colliding
 * parent), or a later lookup would serve them after a genuine block 0 hit. */
static void test_chain_stops_at_collision(void) {
    kvt_blockhash_test_bits = 2;
    kvt_prefix *idx = new_index();
    kvt_hash128 root = make_root(0);
    int32_t p[2 * B], q[2 * B];
    /* Find two different first blocks that collide under 2 bits. */
    for (int i = 0; i < 2 * B; i++) p[i] = q[i] = 5;
    kvt_hash128 hp0 = kvt_block_hash(root, p, B);
    for (int32_t v = 6;; v++) {
        q[0] = v;
        if (kvt_hash128_eq(kvt_block_hash(root, q, B), hp0)) break;
    }
    kvt_hash128 hp[2], hq[2];
    kvt_block_hashes(root, p, 2 * B, B, hp, 2);
    kvt_block_hashes(root, q, 2 * B, B, hq, 2);
    CHECK(kvt_hash128_eq(hp[1], hq[1])); /* same second-block tokens after a colliding parent */
    const uint64_t hnd_p[2] = {10, 11}, hnd_q[2] = {20, 21};
    CHECK(kvt_prefix_add_chain(idx, root, p, hp, 2, KVT_TIER_T1, hnd_p) == 2);
    CHECK(kvt_prefix_add_chain(idx, root, q, hq, 2, KVT_TIER_T0, hnd_q) == 0);
    kvt_prefix_hit hits[2];
    CHECK(kvt_prefix_lookup(idx, root, q, 2 * B, hits, 2) == 0);
    CHECK(kvt_prefix_lookup(idx, root, p, 2 * B, hits, 2) == 2);
    CHECK(hits[1].tier == KVT_TIER_T1 && hits[1].handle == 11 && hits[1].tiers == KVT_TIER_BIT(KVT_TIER_T1));
    kvt_prefix_free(idx);
    kvt_blockhash_test_bits = 0;
}

/* Random adds and removes over a small forest; counts stay exact. */
static void test_churn(void) {
    kvt_prefix *idx = new_index();
    kvt_hash128 root = make_root(3);
    enum { NS = 40, NB = 5 };
    static int32_t seqs[NS][NB * B];
    static kvt_hash128 hs[NS][NB];
    srand(11);
    for (int s = 0; s < NS; s++) {
        int share = s ? rand() % NB : 0, from = s ? rand() % s : 0;
        for (int i = 0; i < NB * B; i++) seqs[s][i] = i < share * B ? seqs[from][i] : rand();
        kvt_block_hashes(root, seqs[s], NB * B, B, hs[s], NB);
    }
    /* a model of the presence masks, by block key (shared prefixes share keys) */
    static kvt_hash128 keys[NS * NB];
    static uint32_t mask[NS * NB];
    int n_keys = 0;
    for (int op = 0; op < 4000; op++) {
        int s = rand() % NS, j = rand() % NB;
        kvt_tier t = (kvt_tier)(rand() % KVT_TIER_COUNT);
        int k = 0;
        while (k < n_keys && !kvt_hash128_eq(keys[k], hs[s][j])) k++;
        if (k == n_keys) keys[n_keys++] = hs[s][j];
        if (rand() % 3) {
            kvt_hash128 parent = j ? hs[s][j - 1] : root;
            CHECK(kvt_prefix_add(idx, hs[s][j], parent, seqs[s] + j * B, t, (uint64_t)op) == 0);
            mask[k] |= KVT_TIER_BIT(t);
        } else {
            int rc = kvt_prefix_remove(idx, hs[s][j], t);
            CHECKF(rc == ((mask[k] & KVT_TIER_BIT(t)) ? 0 : KVT_ENOTFOUND), "remove returned %d", rc);
            mask[k] &= ~KVT_TIER_BIT(t);
        }
        kvt_prefix_info info;
        int got = kvt_prefix_get(idx, hs[s][j], &info);
        CHECKF(mask[k] ? got == 0 && info.tiers == mask[k] : got == KVT_ENOTFOUND, "op %d: tiers %x, model %x", op,
               got ? 0u : info.tiers, mask[k]);
        if (op % 50 == 0 && check_counts(idx)) break;
    }
    check_counts(idx);
    for (int s = 0; s < NS; s++)
        for (int j = 0; j < NB; j++)
            for (int t = 0; t < KVT_TIER_COUNT; t++) kvt_prefix_remove(idx, hs[s][j], (kvt_tier)t);
    kvt_prefix_stats st;
    kvt_prefix_get_stats(idx, &st);
    CHECK(st.entries == 0 && st.ghosts == 0);
    kvt_prefix_free(idx);
}

/* nearest_child picks the child sharing the longest token prefix; a removed
 * block is remembered as recently gone. */
static void test_nearest_child(void) {
    kvt_prefix *idx = new_index();
    kvt_hash128 root = make_root(5);
    int32_t a[B] = {1, 2, 3, 4}, b[B] = {1, 2, 9, 9}, c[B] = {7, 7, 7, 7}, q[B] = {1, 2, 3, 8};
    kvt_hash128 ha = kvt_block_hash(root, a, B), hb = kvt_block_hash(root, b, B), hc = kvt_block_hash(ha, c, B);
    kvt_prefix_info near;
    uint32_t common = 99;
    CHECK(kvt_prefix_nearest_child(idx, root, q, &near, &common) == 0);
    CHECK(kvt_prefix_add(idx, ha, root, a, KVT_TIER_T1, 0) == 0);
    CHECK(kvt_prefix_add(idx, hb, root, b, KVT_TIER_T0, 0) == 0);
    CHECK(kvt_prefix_add(idx, hc, ha, c, KVT_TIER_T0, 0) == 0);
    CHECK(kvt_prefix_nearest_child(idx, root, q, &near, &common) == 1);
    CHECK(kvt_hash128_eq(near.hash, ha) && common == 3);
    CHECK(kvt_prefix_nearest_child(idx, ha, q, &near, &common) == 1 && kvt_hash128_eq(near.hash, hc) && common == 0);
    CHECK(kvt_prefix_children(idx, root, NULL, 0) == 2);
    CHECK(!kvt_prefix_recently_gone(idx, ha));
    CHECK(kvt_prefix_remove(idx, ha, KVT_TIER_T1) == 0); /* ha leaves its only tier; hc keeps its key as a ghost */
    CHECK(kvt_prefix_recently_gone(idx, ha) && !kvt_prefix_recently_gone(idx, hb));
    CHECK(kvt_prefix_nearest_child(idx, root, q, &near, &common) == 1 && kvt_hash128_eq(near.hash, hb) && common == 2);
    CHECK(kvt_prefix_children(idx, ha, NULL, 0) == 1);            /* the ghost still heads hc */
    CHECK(kvt_prefix_add(idx, ha, root, a, KVT_TIER_T2, 0) == 0); /* back: the ghost's list survives */
    CHECK(kvt_prefix_children(idx, root, NULL, 0) == 2 && kvt_prefix_children(idx, ha, NULL, 0) == 1);
    check_counts(idx);
    kvt_prefix_free(idx);
}

int main(void) {
    test_nearest_child();
    test_lookup_across_tiers();
    test_child_counts();
    test_collisions();
    test_chain_stops_at_collision();
    test_churn();
    return kvt_test_done("test_prefix");
}
