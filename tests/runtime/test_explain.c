// SPDX-License-Identifier: MIT
/* "Why did this miss?": kvt_cache_explain names the right block, token offset,
 * reason and differing texts for planted misses — a timestamp changed near
 * the top, a prompt shorter than a block, a different tenant salt, a block
 * evicted from every tier, disk blocks skipped as slower — and the cache
 * counts requests by reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "explain.h"
#include "generate.h"
#include "model.h"
#include "testutil.h"

#define B 32
#define N_VOCAB 2048

static kvt_model *model;

static int32_t *tokenize(const char *text, int32_t *n) {
    int32_t *ids = NULL;
    size_t len = 0;
    CHECKF(kvt_model_tokenize(model, text, strlen(text), 0, 0, &ids, &len) == 0, "%s", kvt_errmsg());
    *n = (int32_t)len;
    return ids;
}

/* One greedy request of one generated token; returns its explanation. */
static kvt_reuse_stop request(kvt_engine *e, kvt_cache *c, const int32_t *p, int32_t n, const char *salt) {
    kvt_test_gen g = kvt_test_generate(e, c, p, n, 1, salt);
    kvt_reuse_stop s = g.res.reuse_stop;
    kvt_test_gen_free(&g);
    return s;
}

/* A ~200-token system prompt whose timestamp sits at token ~40. */
static char *system_prompt(const char *stamp) {
    static const char head[] = "You are a billing assistant. Current time: ";
    static const char body[] =
        ". Policies: refunds within thirty days need a receipt; store credit after that. Exchanges of "
        "opened items only for defects. Orders above five hundred dollars need a manager. Never share a "
        "customer's address. Escalate legal threats to compliance. Question: can I return a blender?";
    size_t n = strlen(head) + strlen(stamp) + strlen(body) + 1;
    char *s = malloc(n);
    snprintf(s, n, "%s%s%s", head, stamp, body);
    return s;
}

static void test_timestamp(kvt_engine *e) {
    kvt_cache *c = kvt_test_cache(e, NULL, 0);
    if (!c) return;
    char *ta = system_prompt("2026-11-30 09:14:07"), *tb = system_prompt("2026-11-30 09:15:52");
    int32_t na, nb;
    int32_t *a = tokenize(ta, &na), *b = tokenize(tb, &nb);
    CHECKF(na >= 150 && na <= 260, "prompt of %d tokens", na);
    int32_t d = 0;
    while (d < na && d < nb && a[d] == b[d]) d++;
    CHECKF(d >= B && d < 2 * B, "the timestamp differs at token %d, not in block 1", d);

    kvt_reuse_stop s = request(e, c, a, na, NULL);
    CHECKF(s.reason == KVT_REUSE_NEVER_SEEN && s.block == 0, "cold: %s@%d", kvt_reuse_reason_name(s.reason), s.block);
    s = request(e, c, b, nb, NULL);
    CHECKF(s.reason == KVT_REUSE_DIVERGED, "got %s", kvt_reuse_reason_name(s.reason));
    CHECKF(s.block == 1 && s.token_offset == d, "block %d offset %d, want 1 and %d", s.block, s.token_offset, d);
    CHECK(s.n_prompt_ids > 0 && s.prompt_ids[0] == b[d]);
    CHECK(s.n_cached_ids > 0 && s.cached_ids[0] == a[d]);
    const kvt_tokenizer *tok = model->tok;
    char pt[64], ct[64], line[320];
    kvt_reuse_stop_text(tok, s.prompt_ids, s.n_prompt_ids, pt, sizeof pt);
    kvt_reuse_stop_text(tok, s.cached_ids, s.n_cached_ids, ct, sizeof ct);
    CHECKF(strstr(pt, "5") && strstr(ct, "4"), "prompt text '%s', cached text '%s'", pt, ct);
    kvt_reuse_stop_line(tok, &s, line, sizeof line);
    CHECKF(strstr(line, "diverged@block 1/token ") && strstr(line, " vs "), "line: %s", line);

    /* the same prompt again: everything reusable was reused */
    s = request(e, c, b, nb, NULL);
    CHECKF(s.reason == KVT_REUSE_END_OF_PROMPT && s.block == nb / B, "again: %s@%d", kvt_reuse_reason_name(s.reason),
           s.block);

    /* under a tenant salt, the shared namespace holds block 0: a different namespace */
    s = request(e, c, b, nb, "tenant-a");
    CHECKF(s.reason == KVT_REUSE_NAMESPACE && s.block == 0, "salted: %s@%d", kvt_reuse_reason_name(s.reason), s.block);
    /* another tenant's namespace is never named: only the shared one is consulted */
    int32_t nc;
    int32_t *other = tokenize("A prompt that only tenant b has sent, long enough to fill a whole block or two of "
                              "tokens so that it is cached under its salt.",
                              &nc);
    request(e, c, other, nc, "tenant-b");
    s = request(e, c, other, nc, "tenant-c");
    CHECKF(s.reason == KVT_REUSE_NEVER_SEEN, "cross-tenant: %s", kvt_reuse_reason_name(s.reason));

    kvt_cache_stats st;
    kvt_cache_get_stats(c, &st);
    CHECK(st.reuse_stops[KVT_REUSE_DIVERGED] == 1 && st.reuse_stops[KVT_REUSE_NAMESPACE] == 1);
    CHECK(st.reuse_stops[KVT_REUSE_END_OF_PROMPT] == 1 && st.reuse_stops[KVT_REUSE_NEVER_SEEN] == 3);
    free(a), free(b), free(ta), free(tb), free(other);
    kvt_cache_free(c);
}

static void test_short(kvt_engine *e) {
    kvt_cache *c = kvt_test_cache(e, NULL, 0);
    if (!c) return;
    int32_t n;
    int32_t *p = tokenize("Hi there, what is the capital of France?", &n);
    CHECK(n > 1 && n < B);
    for (int i = 0; i < 2; i++) {
        kvt_reuse_stop s = request(e, c, p, n, NULL);
        CHECKF(s.reason == KVT_REUSE_SHORT_PROMPT && s.block == 0 && s.token_offset == 0, "run %d: %s", i,
               kvt_reuse_reason_name(s.reason));
    }
    free(p);
    kvt_cache_free(c);
}

/* A block that left every tier (no tier below T0 here) is "evicted". */
static void test_evicted(void) {
    kvt_engine *e = kvt_test_engine(model, B, 12, 512);
    kvt_cache *c = kvt_test_cache(e, NULL, 0);
    if (!c) goto out;
    unsigned seed = 7;
    int32_t p[4 * B], q[8 * B];
    kvt_test_random_tokens(p, 4 * B, N_VOCAB, &seed);
    request(e, c, p, 4 * B, NULL);
    for (int i = 0; i < 3; i++) { /* unrelated prompts push p's blocks out of the 12-page pool */
        kvt_test_random_tokens(q, 8 * B, N_VOCAB, &seed);
        request(e, c, q, 8 * B, NULL);
    }
    kvt_reuse_stop s = request(e, c, p, 4 * B, NULL);
    CHECKF(s.reason == KVT_REUSE_EVICTED, "got %s@%d", kvt_reuse_reason_name(s.reason), s.block);
out:
    kvt_cache_free(c);
    kvt_engine_free(e);
}

/* Disk blocks recomputed by policy: restore_skipped_slower at block 0. */
static void test_restore_skipped(void) {
    kvt_engine *e = kvt_test_engine(model, B, 12, 512);
    kvt_cache_params cp = kvt_cache_default_params();
    cp.disk_dir = kvt_test_path(kvt_test_tmpdir(), "kv");
    cp.disk_bytes = 64ull << 20;
    cp.restore = KVT_RESTORE_NEVER;
    kvt_cache *c = NULL;
    CHECKF(kvt_cache_new(e, cp, &c) == 0, "%s", kvt_errmsg());
    if (!c) goto out;
    unsigned seed = 9;
    int32_t p[4 * B], q[8 * B];
    kvt_test_random_tokens(p, 4 * B, N_VOCAB, &seed);
    request(e, c, p, 4 * B, NULL);
    kvt_cache_flush(c); /* p's blocks are on disk now, whatever T0 does */
    for (int i = 0; i < 3; i++) {
        kvt_test_random_tokens(q, 8 * B, N_VOCAB, &seed);
        request(e, c, q, 8 * B, NULL);
    }
    kvt_cache_flush(c);
    kvt_reuse_stop s = request(e, c, p, 4 * B, NULL);
    CHECKF(s.reason == KVT_REUSE_RESTORE_SLOWER && s.block == 0, "got %s@%d", kvt_reuse_reason_name(s.reason), s.block);
out:
    kvt_cache_free(c);
    kvt_engine_free(e);
}

int main(void) {
    model = kvt_test_tiny_model("explain.gguf", N_VOCAB);
    if (!model) return 1;
    kvt_engine *e = kvt_test_engine(model, B, 256, 1024);
    if (e) {
        test_timestamp(e);
        test_short(e);
        kvt_engine_free(e);
    }
    test_evicted();
    test_restore_skipped();
    kvt_model_free(model);
    return kvt_test_done("test_explain");
}
