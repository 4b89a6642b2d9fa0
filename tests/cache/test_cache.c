// SPDX-License-Identifier: MIT
/* Prefix reuse end to end: greedy output and logits with a cache hit are
 * bit-identical to a cold run — from T0, from T1, after a partial-block
 * match, after a mismatch in the middle of a block, with generated tokens
 * reused, under forced hash collisions, with and without host pointers to
 * the engine's pages, with blocks taken after the attach (late reuse) —
 * budgets hold under churn, and salts isolate tenants. */
#include <stdlib.h>
#include <string.h>

#include "blockhash.h"
#include "cache.h"
#include "generate.h"
#include "model.h"
#include "testutil.h"

#define B 8
#define N_GEN 12

static kvt_model *model;
static int32_t n_vocab;

typedef kvt_test_gen run_out;
#define new_engine(n_pages) kvt_test_engine(model, B, (n_pages), 512)
#define run(e, c, p, n, salt) kvt_test_generate((e), (c), (p), (n), N_GEN, (salt))
#define same kvt_test_same
#define free_out kvt_test_gen_free
#define random_tokens(t, n, seed) kvt_test_random_tokens((t), (n), n_vocab, (seed))


/* The cold reference: a fresh engine without a cache. */
static run_out cold(const int32_t *prompt, int32_t n) {
    kvt_engine *e = new_engine(128);
    run_out o = run(e, NULL, prompt, n, NULL);
    kvt_engine_free(e);
    return o;
}


/* Every cached page is indexed in T0 under its own page id. */
static void check_consistent(kvt_cache *c) {
    kvt_cache_stats st;
    kvt_cache_get_stats(c, &st);
    CHECKF((uint64_t)st.t0_pages_cached == st.index_entries[KVT_TIER_T0], "%d cached pages, %llu T0 entries",
           st.t0_pages_cached, (unsigned long long)st.index_entries[KVT_TIER_T0]);
    CHECK(st.t1_bytes_used <= st.t1_budget_bytes);
    CHECK(st.t0_pages_free + st.t0_pages_cached <= st.t0_pages_total);
}

/* host_pages 0: the engine exposes no host pointers to its pages (as a
 * device engine would), so demotion copies pages out and restores stage
 * reads in host buffers copied in as one run; the bits must not change. */
static void test_tiers(int host_pages) {
    unsigned seed = 1;
    int32_t p[100];
    random_tokens(p, 100, &seed);
    run_out ref = cold(p, 100);

    /* a pool of 30 pages of 8 tokens with a T1 big enough for everything */
    kvt_engine *e = new_engine(30);
    kvt_engine_set_host_pages(e, host_pages);
    CHECK((kvt_page_host(e, 0) != NULL) == (host_pages != 0));
    kvt_cache *c = kvt_test_cache(e, NULL, 64ull << 20);
    if (!c) return;

    run_out first = run(e, c, p, 100, NULL);
    CHECK(first.res.n_reused == 0 && first.res.n_computed == 100);
    CHECK(same(&first, &ref));

    /* warm from T0: the 12 full blocks (96 tokens) are reused, the partial tail recomputed */
    run_out warm0 = run(e, c, p, 100, NULL);
    CHECKF(warm0.res.n_reused == 96 && warm0.res.tier_tokens[KVT_TIER_T0] == 96, "reused %d (T0 %d)",
           warm0.res.n_reused, warm0.res.tier_tokens[KVT_TIER_T0]);
    CHECK(warm0.res.n_computed == 4);
    CHECK(same(&warm0, &ref));

    /* a prompt that is exactly its cached blocks reuses all but its last token */
    run_out ref96 = cold(p, 96);
    run_out warm96 = run(e, c, p, 96, NULL);
    CHECKF(warm96.res.n_reused == 95 && warm96.res.n_computed == 1, "reused %d", warm96.res.n_reused);
    CHECK(same(&warm96, &ref96));
    CHECK(same(&warm0, &ref));
    check_consistent(c);

    /* churn the pool with other prompts: p's pages get demoted to T1 */
    for (int k = 0; k < 4; k++) {
        int32_t q[100];
        random_tokens(q, 100, &seed);
        run_out o = run(e, c, q, 100, NULL);
        free_out(&o);
        check_consistent(c);
    }
    kvt_cache_match m;
    kvt_hash128 root;
    kvt_cache_root(c, NULL, 0, &root);
    kvt_cache_lookup_root(c, root, p, 100, &m);
    CHECKF(m.n_blocks == 12 && m.tier_blocks[KVT_TIER_T1] > 0, "lookup %d blocks, T1 %d", m.n_blocks,
           m.tier_blocks[KVT_TIER_T1]);
    run_out warm1 = run(e, c, p, 100, NULL);
    CHECKF(warm1.res.tier_tokens[KVT_TIER_T1] > 0 && warm1.res.n_reused == 96, "T1 %d, reused %d",
           warm1.res.tier_tokens[KVT_TIER_T1], warm1.res.n_reused);
    CHECK(same(&warm1, &ref));
    kvt_cache_stats st;
    kvt_cache_get_stats(c, &st);
    CHECK(st.t1_demotions > 0 && st.t1_restores > 0 && st.t0_evictions > 0);
    check_consistent(c);

    /* partial-block match: 36 shared tokens = 4 full blocks + 4 tokens */
    int32_t p2[70];
    memcpy(p2, p, 36 * sizeof(int32_t));
    random_tokens(p2 + 36, 34, &seed);
    run_out ref2 = cold(p2, 70);
    run_out warm2 = run(e, c, p2, 70, NULL);
    CHECKF(warm2.res.n_reused == 32, "partial: reused %d", warm2.res.n_reused);
    CHECK(same(&warm2, &ref2));

    /* mismatch in the middle of block 5 */
    int32_t p3[100];
    memcpy(p3, p, sizeof p3);
    p3[44] = p3[44] == 300 ? 301 : 300;
    run_out ref3 = cold(p3, 100);
    run_out warm3 = run(e, c, p3, 100, NULL);
    CHECKF(warm3.res.n_reused == 40, "mid-block: reused %d", warm3.res.n_reused);
    CHECK(same(&warm3, &ref3));

    /* generated tokens become cacheable: next turn = previous prompt + reply + more */
    int32_t turn2[160];
    int32_t n1 = first.n;
    memcpy(turn2, first.tokens, (size_t)n1 * sizeof(int32_t));
    random_tokens(turn2 + n1, 20, &seed);
    run_out ref4 = cold(turn2, n1 + 20);
    run_out warm4 = run(e, c, turn2, n1 + 20, NULL);
    /* the last generated token was sampled but never fed, so its K/V does not exist */
    int32_t expect = (n1 - 1) / B * B;
    CHECKF(warm4.res.n_reused == expect && expect > 100, "turn 2: reused %d, expected %d", warm4.res.n_reused, expect);
    CHECK(same(&warm4, &ref4));

    /* salts isolate: the same prompt under another salt gets no hit, then hits its own */
    run_out s1 = run(e, c, p, 100, "tenant-a");
    CHECK(s1.res.n_reused == 0 && same(&s1, &ref));
    run_out s2 = run(e, c, p, 100, "tenant-a");
    CHECK(s2.res.n_reused == 96 && same(&s2, &ref));
    run_out s3 = run(e, c, p, 100, "tenant-b");
    CHECK(s3.res.n_reused == 0);

    /* pins keep a prefix resident */
    kvt_pin *pin = NULL;
    CHECK(kvt_cache_pin_root(c, root, p, 100, &pin) == 96 && pin);
    for (int k = 0; k < 4; k++) {
        int32_t q[100];
        random_tokens(q, 100, &seed);
        run_out o = run(e, c, q, 100, NULL);
        free_out(&o);
    }
    kvt_cache_lookup_root(c, root, p, 100, &m);
    CHECK(m.tier_blocks[KVT_TIER_T0] == 12);
    kvt_cache_release(c, pin);

    run_out *all[] = {&ref,  &first, &warm0, &ref96, &warm96, &warm1, &ref2, &warm2,
                      &ref3, &warm3, &ref4,  &warm4, &s1,     &s2,    &s3};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free_out(all[i]);
    kvt_cache_free(c);
    kvt_engine_free(e);
}

/* Many prompts over a few shared prefixes with tiny budgets: every output
 * equals its cold run and the budgets hold after every request. */
static void test_churn(int collision_bits) {
    kvt_blockhash_test_bits = (unsigned)collision_bits;
    kvt_engine *e = new_engine(20);
    kvt_cache_params cp = kvt_cache_default_params();
    kvt_cache *c = NULL;
    CHECK(kvt_cache_new(e, cp, &c) == 0);
    kvt_cache_free(c);
    /* T1 holds about 6 blocks */
    cp.ram_bytes = 6 * (kvt_page_bytes(e) + 1024);
    CHECK(kvt_cache_new(e, cp, &c) == 0);
    unsigned seed = 7 + (unsigned)collision_bits;
    int32_t prefixes[4][48];
    for (int i = 0; i < 4; i++) random_tokens(prefixes[i], 48, &seed);
    int mismatches = 0, reused_any = 0;
    for (int it = 0; it < 30; it++) {
        int32_t p[80];
        int32_t plen = 8 + (int32_t)(rand_r(&seed) % 41);
        memcpy(p, prefixes[rand_r(&seed) % 4], (size_t)plen * sizeof(int32_t));
        int32_t n = plen + 1 + (int32_t)(rand_r(&seed) % 30);
        random_tokens(p + plen, n - plen, &seed);
        run_out ref = cold(p, n);
        run_out o = run(e, c, p, n, NULL);
        if (!same(&o, &ref)) mismatches++;
        reused_any += o.res.n_reused > 0;
        check_consistent(c);
        free_out(&o);
        free_out(&ref);
    }
    CHECKF(mismatches == 0, "%d outputs differ from their cold run (collision bits %d)", mismatches, collision_bits);
    if (!collision_bits) CHECKF(reused_any > 5, "only %d requests reused anything", reused_any);
    kvt_cache_stats st;
    kvt_cache_get_stats(c, &st);
    if (collision_bits) CHECKF(st.collisions > 0, "no collision was provoked");
    kvt_cache_free(c);
    kvt_engine_free(e);
    kvt_blockhash_test_bits = 0;
}

/* A pool too small for the request fails cleanly and leaves the cache usable. */
static void test_exhaustion(void) {
    kvt_engine *e = new_engine(4);
    kvt_cache *c = kvt_test_cache(e, NULL, 0);
    unsigned seed = 3;
    int32_t p[60];
    random_tokens(p, 60, &seed);
    kvt_sampler *s = kvt_sampler_new(kvt_sampler_default_params(), n_vocab);
    kvt_gen_params gp = {.max_tokens = 4, .sampler = s};
    kvt_gen_result r;
    CHECK(kvt_generate(e, c, p, 60, &gp, NULL, &r) == KVT_ELIMIT);
    CHECK(strstr(kvt_errmsg(), "kv-active") != NULL);
    CHECK(kvt_generate(e, c, p, 20, &gp, NULL, &r) == 0);
    check_consistent(c);
    kvt_sampler_free(s);
    kvt_cache_free(c);
    kvt_engine_free(e);
}

/* A request repeated alone in a pool that holds it with one page to spare
 * runs to its end every time: its reply's blocks, computed again, match the
 * idle pages the first run left, and those go back to the pool as it
 * registers its own (kept, each would be the idle parent of the next block
 * it registers, which reclaim never takes while it runs). Without a lower
 * tier, and with one. */
static void test_repeat_fits(uint64_t ram_bytes) {
    kvt_engine *e = new_engine(6); /* 48 tokens: the prompt's 10 and 30 more take 5 pages */
    kvt_cache *c = kvt_test_cache(e, NULL, ram_bytes);
    unsigned seed = 5;
    int32_t p[10];
    random_tokens(p, 10, &seed);
    run_out first = kvt_test_generate(e, c, p, 10, 30, NULL);
    for (int k = 0; k < 3 && first.n; k++) {
        run_out again = kvt_test_generate_rc(e, c, p, 10, 30, NULL);
        CHECKF(again.rc == 0, "ram %llu: repeat %d failed: %s", (unsigned long long)ram_bytes, k + 1, kvt_errmsg());
        CHECKF(same(&first, &again), "ram %llu: repeat %d differs", (unsigned long long)ram_bytes, k + 1);
        kvt_cache_stats st;
        kvt_cache_get_stats(c, &st);
        CHECKF(st.t0_pages_free + st.t0_pages_idle == st.t0_pages_total, "ram %llu: %d pages free, %d idle of %d",
               (unsigned long long)ram_bytes, st.t0_pages_free, st.t0_pages_idle, st.t0_pages_total);
        check_consistent(c);
        free_out(&again);
    }
    free_out(&first);
    kvt_cache_free(c);
    kvt_engine_free(e);
}

/* Feeds tokens[from..n) to seq and says whether the last logits are those of
 * ref (a cold run of tokens[0..n)), bit for bit. */
static int rest_is_cold(kvt_engine *e, int32_t seq, const int32_t *tokens, int32_t n, const run_out *ref) {
    float *lg = malloc((size_t)n_vocab * sizeof *lg);
    int32_t from = kvt_seq_len(e, seq);
    int ok = kvt_engine_feed(e, seq, tokens + from, n - from, 0, lg) == 0 && ref->logits &&
        !memcmp(lg, ref->logits, (size_t)n_vocab * sizeof *lg);
    free(lg);
    return ok;
}

/* Late reuse (kvt_cache_attach_more): a sequence attached while none of its
 * prompt was cached takes the blocks another sequence committed since, from
 * T0 (zero-copy; the last one partly where the prompt is whole blocks) and
 * from T1, and its logits after the rest of its prompt are a cold run's bits.
 * An open attach's reuse stop is counted only by kvt_cache_count_stop. */
static void test_late_reuse(void) {
    unsigned seed = 11;
    int32_t p[60], q[52];
    random_tokens(p, 60, &seed);
    memcpy(q, p, 44 * sizeof *q); /* 5 full blocks and 4 tokens shared */
    random_tokens(q + 44, 8, &seed);
    q[44] = p[44] == 300 ? 301 : 300;
    run_out ref_q = cold(q, 52), ref_p48 = cold(p, 48), ref_p = cold(p, 60);
    kvt_engine *e = new_engine(40);
    kvt_cache *c = kvt_test_cache(e, NULL, 64ull << 20);
    if (!c) return;
    kvt_hash128 root;
    kvt_cache_root(c, NULL, 0, &root);
    kvt_attach_info ai;
    kvt_cache_stats st0, st;
    kvt_cache_get_stats(c, &st0);

    /* q is attached with nothing cached; then p is computed and committed by another sequence */
    int32_t sq = -1, sp = -1;
    CHECK(kvt_cache_attach_open(c, root, q, 52, 51, &sq, &ai) == 0 && ai.n_reused == 0);
    CHECK(ai.stop.reason == KVT_REUSE_NEVER_SEEN);
    CHECK(kvt_cache_attach(c, root, p, 60, 59, &sp, &ai) == 0);
    CHECK(kvt_engine_feed(e, sp, p, 60, 0, NULL) == 0);
    kvt_chain ch;
    kvt_chain_init(&ch, root);
    kvt_cache_commit(c, sp, p, &ch);
    kvt_seq_free(e, sp);
    int32_t add = kvt_cache_attach_more(c, root, q, 52, 51, sq, &ai);
    CHECKF(add == 40 && ai.tier_tokens[KVT_TIER_T0] == 40 && kvt_seq_len(e, sq) == 40, "late from T0: %d", add);
    CHECKF(ai.stop.reason == KVT_REUSE_DIVERGED && ai.stop.token_offset == 44, "stop %d at %d", ai.stop.reason,
           ai.stop.token_offset);
    CHECK(kvt_cache_attach_more(c, root, q, 52, 51, sq, &ai) == 0); /* nothing more to take */
    CHECK(rest_is_cold(e, sq, q, 52, &ref_q));
    kvt_chain_init(&ch, root); /* its chain registers the blocks it took as cached already, then its own */
    kvt_cache_commit(c, sq, q, &ch);
    CHECK(ch.n_done == 6);
    kvt_seq_free(e, sq);
    kvt_cache_get_stats(c, &st);
    CHECK(st.reuse_stops[KVT_REUSE_NEVER_SEEN] == st0.reuse_stops[KVT_REUSE_NEVER_SEEN] + 1); /* p's, counted */
    CHECK(st.reuse_stops[KVT_REUSE_DIVERGED] == st0.reuse_stops[KVT_REUSE_DIVERGED]);         /* q's is open */
    CHECK(st.hit_tokens == st0.hit_tokens + 40);
    kvt_cache_count_stop(c, KVT_REUSE_DIVERGED);
    kvt_cache_get_stats(c, &st);
    CHECK(st.reuse_stops[KVT_REUSE_DIVERGED] == st0.reuse_stops[KVT_REUSE_DIVERGED] + 1);
    check_consistent(c);

    /* a prompt of whole cached blocks: all but its last token, the last page partly */
    int32_t sr = -1;
    CHECK(kvt_cache_attach_quiet(c, root, p, 48, 0, &sr, &ai) == 0 && kvt_seq_len(e, sr) == 0);
    CHECKF((add = kvt_cache_attach_more(c, root, p, 48, 47, sr, &ai)) == 47, "partial: %d", add);
    CHECK(rest_is_cold(e, sr, p, 48, &ref_p48));
    kvt_seq_free(e, sr);
    run_out warm_p = run(e, c, p, 60, NULL); /* the shared page was copied, not written */
    CHECK(warm_p.res.n_reused == 56 && same(&warm_p, &ref_p));
    check_consistent(c);

    /* from T1: every idle page is reclaimed (demoted), then q's 6 blocks come back from there */
    CHECK(kvt_cache_reserve(c, kvt_page_count(e)) == 0);
    CHECK(kvt_cache_attach_quiet(c, root, q, 52, 0, &sq, &ai) == 0);
    add = kvt_cache_attach_more(c, root, q, 52, 51, sq, &ai);
    CHECKF(add == 48 && ai.tier_tokens[KVT_TIER_T1] == 48, "late from T1: %d (T1 %d)", add, ai.tier_tokens[KVT_TIER_T1]);
    CHECK(rest_is_cold(e, sq, q, 52, &ref_q));
    kvt_seq_free(e, sq);
    check_consistent(c);
    free_out(&ref_q);
    free_out(&ref_p48);
    free_out(&ref_p);
    free_out(&warm_p);
    kvt_cache_free(c);
    kvt_engine_free(e);
}

int main(void) {
    if (!(model = kvt_test_tiny_model("m.gguf", 600))) {
        CHECK(model != NULL);
        return kvt_test_done("test_cache");
    }
    n_vocab = model->hp.n_vocab;
    test_tiers(1);
    test_tiers(0);
    test_churn(0);
    test_churn(3);
    test_exhaustion();
    test_repeat_fits(0);
    test_repeat_fits(1 << 20);
    test_late_reuse();
    kvt_model_free(model);
    return kvt_test_done("test_cache");
}
