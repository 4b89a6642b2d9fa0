// SPDX-License-Identifier: MIT
/* KV expansion under pressure (docs/tiers.md "Expansion: more sessions than
 * fast memory holds"): an agent workload whose sessions outnumber the active
 * pool keeps every session's KV in RAM and on disk and gets it back.
 *
 * - 12 sessions x 3 rounds over a T0 that holds about 4 of them, a T1 that
 *   holds about 4 more, and a disk tier for the rest, against the same
 *   workload with an unlimited T0: greedy replies and logits are identical,
 *   and from round 1 on every request computes only its new tokens (within
 *   one block), exactly as many as with the unlimited T0. Nothing is dropped,
 *   discarded or planned-but-not-obtained.
 * - A long churn of distinct prompts with tiny T0 and T1 budgets and a disk
 *   queue of depth 1: afterwards every block ever registered is still found.
 * - The "seen twice" filter (--kv-disk-admit reused) never applies to blocks
 *   a live session touched recently.
 * - Session hints: a session kept warm stays in T0 through a flood (and not
 *   without the hint); the lower priority yields first; expiry lets go.
 * - Prefetch brings a session back into T0 before its request.
 * - Budgets hold under churn: T1's accounting, the cache directory's size on
 *   disk, and the process's resident memory.
 * With KVT_TEST_DEVICE=vulkan (test_expansion_gpu) the first two run on the
 * GPU engine, T0 in device memory, with 9 sessions (T0 holding 3) and a
 * shorter churn: the same checks, and each restored or
 * reclaimed run of pages is one batched copy (one submission). */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <time.h>

#include "cache.h"
#include "engine.h"
#include "generate.h"
#include "model.h"
#include "testutil.h"

#define B 8
#define N_GEN 10
#define SESSIONS 12
#define ROUNDS 3
#define SYS_TOKENS 48
#define DOC_TOKENS 80
#define STEP_TOKENS 20
#define CTX 512

static kvt_model *model;
static int32_t n_vocab;
/* Sessions in the agent workload, prompts in the churn and tokens generated
 * per request: fewer on a GPU
 * device, where lavapipe with validation costs several times the CPU engine;
 * T0 and T1 shrink with them, so the workload still spans every tier. */
static int n_sessions = SESSIONS, n_churn = 40, n_gen = N_GEN;

typedef kvt_test_gen run_out;
#define new_engine(n_pages) kvt_test_engine(model, B, (n_pages), CTX)
#define run(e, c, p, n) kvt_test_generate((e), (c), (p), (n), n_gen, NULL)


static kvt_cache *new_cache(kvt_engine *e, uint64_t ram_blocks, const char *dir, kvt_admit_policy admit, double live_s) {
    kvt_cache_params cp = kvt_cache_default_params();
    cp.ram_bytes = ram_blocks * (kvt_page_bytes(e) + 1024);
    cp.disk_dir = dir;
    cp.disk_bytes = 64 << 20;
    cp.restore = KVT_RESTORE_ALWAYS; /* the tiny model computes faster than any disk: measure reuse, not speed */
    cp.disk_admit = admit;
    cp.admit_live_s = live_s;
    kvt_cache *c = NULL;
    CHECKF(kvt_cache_new(e, cp, &c) == 0, "cache: %s", kvt_errmsg());
    return c;
}


static void fill(int32_t *t, int32_t n, unsigned *seed) {
    for (int32_t i = 0; i < n; i++) t[i] = 300 + (int32_t)(rand_r(seed) % (unsigned)(n_vocab - 300));
}

typedef struct {
    int32_t computed[ROUNDS][SESSIONS];
    int32_t tier_tokens[KVT_TIER_COUNT]; /* rounds >= 1 */
    int32_t *out[ROUNDS][SESSIONS];      /* prompt + reply of each request */
    int32_t n_out[ROUNDS][SESSIONS];
    float *logits[ROUNDS][SESSIONS];
    kvt_cache_stats st;
} workload;

/* Round-robin agent loop: round r of session s is its previous request's
 * prompt and reply plus STEP_TOKENS new tokens (a tool result). */
static void agent_workload(kvt_engine *e, kvt_cache *c, workload *w) {
    unsigned seed = 11;
    int32_t sys[SYS_TOKENS];
    fill(sys, SYS_TOKENS, &seed);
    memset(w, 0, sizeof *w);
    for (int r = 0; r < ROUNDS; r++)
        for (int s = 0; s < n_sessions; s++) {
            unsigned step_seed = 1000u * (unsigned)s + (unsigned)r;
            int32_t n_prev = r ? w->n_out[r - 1][s] : 0;
            int32_t n = r ? n_prev + STEP_TOKENS : SYS_TOKENS + DOC_TOKENS;
            int32_t *p = malloc((size_t)n * sizeof *p);
            if (r) {
                memcpy(p, w->out[r - 1][s], (size_t)n_prev * sizeof *p);
                fill(p + n_prev, STEP_TOKENS, &step_seed);
            } else {
                memcpy(p, sys, sizeof sys);
                fill(p + SYS_TOKENS, DOC_TOKENS, &step_seed);
            }
            run_out o = run(e, c, p, n);
            w->computed[r][s] = o.res.n_computed;
            if (r)
                for (int t = 0; t < KVT_TIER_COUNT; t++) w->tier_tokens[t] += o.res.tier_tokens[t];
            CHECKF(o.res.n_reused == o.res.n_planned && o.res.shortfall == KVT_SHORTFALL_NONE,
                   "round %d session %d: planned %d cached tokens, got %d (%s)", r, s, o.res.n_planned, o.res.n_reused,
                   kvt_shortfall_name(o.res.shortfall));
            w->out[r][s] = o.tokens;
            w->n_out[r][s] = o.n;
            w->logits[r][s] = o.logits;
            free(p);
        }
    if (c) {
        kvt_cache_get_stats(c, &w->st);
        /* no page leaked: with every sequence done, a page is free or an idle cached block */
        CHECKF(w->st.t0_pages_idle == w->st.t0_pages_cached &&
                   w->st.t0_pages_free + w->st.t0_pages_cached == w->st.t0_pages_total,
               "pages: %d total, %d free, %d cached, %d idle", w->st.t0_pages_total, w->st.t0_pages_free,
               w->st.t0_pages_cached, w->st.t0_pages_idle);
    }
}

static void workload_free(workload *w) {
    for (int r = 0; r < ROUNDS; r++)
        for (int s = 0; s < n_sessions; s++) {
            free(w->out[r][s]);
            free(w->logits[r][s]);
        }
}

static void test_sessions_outnumber_t0(void) {
    /* one session at round 2 holds ~22 blocks; the shared system prompt 6 */
    kvt_engine *big = new_engine(2048);
    kvt_cache *cb = new_cache(big, 0, NULL, KVT_ADMIT_ALL, 0);
    workload ref;
    agent_workload(big, cb, &ref);

    int held = n_sessions / 3; /* sessions T0 holds (about as many again in T1, the rest on disk) */
    kvt_engine *small = new_engine(held * 16 + 30); /* their context plus the running one */
    kvt_cache *cs = new_cache(small, (uint64_t)held * 16, kvt_test_path(kvt_test_tmpdir(), "sessions"), KVT_ADMIT_ALL,
                              0);
    workload w;
    agent_workload(small, cs, &w);

    int same = 1;
    int32_t total_small = 0, total_big = 0;
    for (int r = 0; r < ROUNDS; r++)
        for (int s = 0; s < n_sessions; s++) {
            same &= w.n_out[r][s] == ref.n_out[r][s] &&
                !memcmp(w.out[r][s], ref.out[r][s], (size_t)w.n_out[r][s] * sizeof(int32_t)) &&
                !memcmp(w.logits[r][s], ref.logits[r][s], (size_t)n_vocab * sizeof(float));
            if (r == 0) continue;
            total_small += w.computed[r][s];
            total_big += ref.computed[r][s];
            CHECKF(w.computed[r][s] <= STEP_TOKENS + B, "round %d session %d computed %d tokens (new %d, block %d)", r,
                   s, w.computed[r][s], STEP_TOKENS, B);
            CHECKF(w.computed[r][s] == ref.computed[r][s], "round %d session %d computed %d, unlimited T0 %d", r, s,
                   w.computed[r][s], ref.computed[r][s]);
        }
    CHECKF(same, "replies differ from the unlimited-T0 run");
    printf("rounds 1-%d: computed %d tokens over a small T0, %d over an unlimited one; restored T0 %d, T1 %d, T2 %d\n",
           ROUNDS - 1, total_small, total_big, w.tier_tokens[KVT_TIER_T0], w.tier_tokens[KVT_TIER_T1],
           w.tier_tokens[KVT_TIER_T2]);
    /* the workload really went through every tier */
    CHECKF(w.st.t0_evictions > 0 && w.tier_tokens[KVT_TIER_T1] > 0 && w.tier_tokens[KVT_TIER_T2] > 0,
           "evictions %llu, from T1 %d, from T2 %d", (unsigned long long)w.st.t0_evictions, w.tier_tokens[KVT_TIER_T1],
           w.tier_tokens[KVT_TIER_T2]);
    CHECKF(w.st.t2_dropped == 0 && w.st.discarded == 0 && w.st.shortfall_tokens == 0,
           "dropped %llu, discarded %llu, shortfall %llu tokens", (unsigned long long)w.st.t2_dropped,
           (unsigned long long)w.st.discarded, (unsigned long long)w.st.shortfall_tokens);
    if (kvt_test_device()) {
        kvt_eng_gpu_stats g = kvt_engine_gpu_stats(small);
        printf("gpu: %llu runs in (%llu pages), %llu out (%llu pages), %llu copies, %llu submissions\n",
               (unsigned long long)g.runs_in, (unsigned long long)g.pages_in, (unsigned long long)g.runs_out,
               (unsigned long long)g.pages_out, (unsigned long long)g.runs_copy, (unsigned long long)g.io_submits);
        CHECKF(g.runs_in > 0 && g.runs_out > 0 && g.io_submits == g.runs_in + g.runs_out + g.runs_copy,
               "%llu submissions for %llu runs: not one batched copy per run", (unsigned long long)g.io_submits,
               (unsigned long long)(g.runs_in + g.runs_out + g.runs_copy));
        CHECKF(g.pages_out > g.runs_out, "reclaim copied %llu pages in %llu runs: never more than one at a time",
               (unsigned long long)g.pages_out, (unsigned long long)g.runs_out);
    }
    kvt_cache_free(cs);
    kvt_engine_free(small);
    kvt_cache_free(cb);
    kvt_engine_free(big);
    workload_free(&w);
    workload_free(&ref);
}

/* Churn with tiny budgets: every block registered is found afterwards. */
static void test_churn_keeps_everything(void) {
    kvt_engine *e = new_engine(24);
    kvt_cache *c = new_cache(e, 6, kvt_test_path(kvt_test_tmpdir(), "churn"), KVT_ADMIT_ALL, 0);
    enum { PROMPTS = 40, LEN = 64 };
    static int32_t prompts[PROMPTS][LEN + N_GEN];
    unsigned seed = 3;
    int32_t n_full[PROMPTS];
    for (int k = 0; k < n_churn; k++) {
        fill(prompts[k], LEN, &seed);
        run_out o = run(e, c, prompts[k], LEN);
        memcpy(prompts[k], o.tokens, (size_t)o.n * sizeof(int32_t));
        n_full[k] = (o.n - 1) / B; /* the last sampled token is never fed */
        free(o.tokens);
        free(o.logits);
    }
    int lost = 0;
    for (int k = 0; k < n_churn; k++) {
        kvt_cache_match m;
        CHECK(kvt_cache_lookup(c, prompts[k], n_full[k] * B, NULL, 0, &m) == 0);
        lost += m.n_blocks != n_full[k];
    }
    kvt_cache_stats st;
    kvt_cache_get_stats(c, &st);
    CHECKF(lost == 0, "%d of %d prompts lost blocks after churn", lost, n_churn);
    CHECKF(st.t2_dropped == 0 && st.discarded == 0, "dropped %llu, discarded %llu", (unsigned long long)st.t2_dropped,
           (unsigned long long)st.discarded);
    CHECKF(st.t1_bytes_used <= st.t1_budget_bytes, "T1 %llu bytes over its %llu budget",
           (unsigned long long)st.t1_bytes_used, (unsigned long long)st.t1_budget_bytes);
    kvt_cache_free(c);
    kvt_engine_free(e);
}

/* The frequency filter chooses only among blocks no live session touched
 * recently: with a live window, nothing is kept off the disk; without one,
 * once-seen blocks are. */
static void test_admission_spares_live_sessions(void) {
    for (int live = 0; live < 2; live++) {
        kvt_engine *e = new_engine(24);
        kvt_cache *c = new_cache(e, 6, kvt_test_path(kvt_test_tmpdir(), live ? "admit-live" : "admit-old"),
                                 KVT_ADMIT_REUSED, live ? 600.0 : 0.0);
        unsigned seed = 9;
        for (int k = 0; k < 12; k++) {
            int32_t p[64];
            fill(p, 64, &seed);
            run_out o = run(e, c, p, 64);
            free(o.tokens);
            free(o.logits);
        }
        kvt_cache_stats st;
        kvt_cache_get_stats(c, &st);
        if (live)
            CHECKF(st.t2_not_admitted == 0 && st.discarded == 0 && st.t2_demotions > 0,
                   "live window: %llu kept off the disk, %llu written", (unsigned long long)st.t2_not_admitted,
                   (unsigned long long)st.t2_demotions);
        else CHECKF(st.t2_not_admitted > 0, "no live window: every once-seen block was written");
        kvt_cache_free(c);
        kvt_engine_free(e);
    }
}

/* Runs a prompt of n tokens drawn from seed; returns prompt + reply (malloc'd). */
static int32_t *run_fresh(kvt_engine *e, kvt_cache *c, int32_t n, unsigned seed, int32_t *n_out) {
    int32_t *p = malloc((size_t)n * sizeof *p);
    fill(p, n, &seed);
    run_out o = run(e, c, p, n);
    free(p);
    free(o.logits);
    *n_out = o.n;
    return o.tokens;
}

/* Sessions kept warm stay in T0 through a flood of other work; without the
 * hint they do not. Under pressure the lower priority yields first, and an
 * expired session lets go. */
static void test_keep_warm(void) {
    for (int warm = 0; warm < 2; warm++) {
        kvt_engine *e = new_engine(48);
        kvt_cache *c = new_cache(e, 256, NULL, KVT_ADMIT_ALL, 0);
        int32_t n_s;
        int32_t *s = run_fresh(e, c, 100, 1, &n_s);
        if (warm) CHECK(kvt_cache_keep_warm(c, "agent-1", s, n_s - 1, NULL, 0, 0, 600) > 0);
        for (unsigned k = 0; k < 8; k++) { /* other sessions churn T0 */
            int32_t n_f;
            free(run_fresh(e, c, 100, 100 + k, &n_f));
        }
        run_out o = run(e, c, s, n_s);
        int all_t0 = o.res.tier_tokens[KVT_TIER_T0] == o.res.n_reused && o.res.n_reused >= (n_s - 1) / B * B;
        if (warm)
            CHECKF(all_t0, "warm session: %d of %d tokens from T0", o.res.tier_tokens[KVT_TIER_T0], o.res.n_reused);
        else CHECKF(!all_t0, "without keep-warm the flood should have moved the session out of T0");
        CHECKF(o.res.n_reused == o.res.n_planned, "planned %d, got %d", o.res.n_planned, o.res.n_reused);
        free(o.tokens);
        free(o.logits);
        free(s);
        kvt_cache_free(c);
        kvt_engine_free(e);
    }

    /* priority: a request that needs more than the free and idle pages takes
     * them from the lower-priority session only */
    kvt_engine *e = new_engine(48);
    kvt_cache *c = new_cache(e, 256, NULL, KVT_ADMIT_ALL, 0);
    int32_t n_a, n_b, n_big;
    int32_t *a = run_fresh(e, c, 110, 2, &n_a);
    CHECK(kvt_cache_keep_warm(c, "high", a, n_a - 1, NULL, 0, 5, 600) > 0);
    int32_t *b = run_fresh(e, c, 110, 3, &n_b);
    CHECK(kvt_cache_keep_warm(c, "low", b, n_b - 1, NULL, 0, 1, 600) > 0);
    free(run_fresh(e, c, 200, 4, &n_big)); /* needs 26 pages; 48 - 2 x 14 pinned leaves 20 */
    kvt_cache_stats st;
    kvt_cache_get_stats(c, &st);
    CHECKF(st.sessions_released == 1 && st.warm_sessions == 1, "released %llu, warm %d",
           (unsigned long long)st.sessions_released, st.warm_sessions);
    kvt_cache_match m;
    CHECK(kvt_cache_lookup(c, a, (n_a - 1) / B * B, NULL, 0, &m) == 0);
    CHECKF(m.tier_blocks[KVT_TIER_T0] == (n_a - 1) / B, "high-priority session: %d of %d blocks in T0",
           m.tier_blocks[KVT_TIER_T0], (n_a - 1) / B);
    CHECK(kvt_cache_lookup(c, b, (n_b - 1) / B * B, NULL, 0, &m) == 0);
    CHECKF(m.n_blocks == (n_b - 1) / B && m.tier_blocks[KVT_TIER_T0] < m.n_blocks,
           "the low-priority session moved down (T0 %d of %d), and is still found", m.tier_blocks[KVT_TIER_T0],
           m.n_blocks);
    /* ending and expiring */
    CHECK(kvt_cache_end_session(c, "high") == 0 && kvt_cache_end_session(c, "high") == KVT_ENOTFOUND);
    CHECK(kvt_cache_keep_warm(c, "brief", a, n_a - 1, NULL, 0, 0, 0.01) > 0);
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    CHECK(kvt_cache_reserve(c, 1) == 0);
    kvt_cache_get_stats(c, &st);
    CHECKF(st.sessions_expired == 1 && st.warm_sessions == 0 && st.t0_pages_pinned == 0,
           "expired %llu, warm %d, pinned %d", (unsigned long long)st.sessions_expired, st.warm_sessions,
           st.t0_pages_pinned);
    CHECK(kvt_cache_keep_warm(c, "", a, n_a, NULL, 0, 0, 10) == KVT_EARG);
    free(a);
    free(b);
    kvt_cache_free(c);
    kvt_engine_free(e);
}

/* Prefetch brings a session's blocks back into T0 before its request. */
static void test_prefetch(void) {
    kvt_engine *e = new_engine(48);
    kvt_cache *c = new_cache(e, 256, kvt_test_path(kvt_test_tmpdir(), "prefetch"), KVT_ADMIT_ALL, 0);
    int32_t n_s, n_f;
    int32_t *s = run_fresh(e, c, 100, 5, &n_s);
    for (unsigned k = 0; k < 8; k++) free(run_fresh(e, c, 100, 200 + k, &n_f));
    int32_t full = (n_s - 1) / B * B;
    kvt_cache_match m;
    CHECK(kvt_cache_lookup(c, s, full, NULL, 0, &m) == 0);
    CHECKF(m.n_blocks == full / B && m.tier_blocks[KVT_TIER_T0] < m.n_blocks, "before: T0 %d of %d",
           m.tier_blocks[KVT_TIER_T0], m.n_blocks);
    CHECK(kvt_cache_prefetch(c, s, full, NULL, 0) == full);
    CHECK(kvt_cache_lookup(c, s, full, NULL, 0, &m) == 0);
    CHECKF(m.tier_blocks[KVT_TIER_T0] == full / B, "after prefetch: T0 %d of %d", m.tier_blocks[KVT_TIER_T0], full / B);
    run_out o = run(e, c, s, n_s);
    CHECK(o.res.tier_tokens[KVT_TIER_T0] == o.res.n_reused && o.res.n_reused >= full);
    kvt_cache_stats st;
    kvt_cache_get_stats(c, &st);
    CHECK(st.prefetched_blocks > 0 && st.t0_pages_pinned == 0);
    free(o.tokens);
    free(o.logits);
    free(s);
    kvt_cache_free(c);
    kvt_engine_free(e);
}

static uint64_t dir_bytes(const char *dir) {
    DIR *d = opendir(dir);
    uint64_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
            n += (uint64_t)st.st_size;
    }
    if (d) closedir(d);
    return n;
}

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    return kb;
}

/* Budgets hold under churn: T1 by its own accounting, T2 by the directory's
 * size on disk, and the process by its resident memory. */
static void test_budgets_hold(void) {
    const char *dir = kvt_test_path(kvt_test_tmpdir(), "budgets");
    kvt_engine *e = new_engine(24);
    kvt_cache_params cp = kvt_cache_default_params();
    cp.ram_bytes = 12 * (kvt_page_bytes(e) + 1024);
    cp.disk_dir = dir;
    cp.disk_bytes = 1 << 20;
    cp.restore = KVT_RESTORE_ALWAYS;
    kvt_cache *c = NULL;
    CHECKF(kvt_cache_new(e, cp, &c) == 0, "cache: %s", kvt_errmsg());
    if (!c) return;
    long rss0 = rss_kib();
    uint64_t worst_dir = 0, seg = 0;
    int over_t1 = 0;
    for (unsigned k = 0; k < 150; k++) {
        int32_t n;
        free(run_fresh(e, c, 64 + (int32_t)(k % 5) * 16, 500 + k, &n));
        kvt_cache_stats st;
        kvt_cache_get_stats(c, &st);
        over_t1 += st.t1_bytes_used > st.t1_budget_bytes;
        uint64_t db = dir_bytes(dir);
        if (db > worst_dir) worst_dir = db;
        seg = st.t2_budget_bytes;
    }
    long rss1 = rss_kib();
    CHECKF(over_t1 == 0, "T1 over its budget after %d requests", over_t1);
    /* the directory holds the segments (at most the budget plus one segment,
     * a quarter of this small budget) and a few small files */
    CHECKF(worst_dir <= seg + seg / 4 + 64 * 1024, "cache dir reached %llu bytes for a %llu budget",
           (unsigned long long)worst_dir, (unsigned long long)seg);
    /* 150 requests through T0, T1 and a small disk: the process does not grow past its budgets.
     * Not under ASan (KVT_SANITIZED, set by scripts/test.sh): its quarantine keeps freed memory
     * resident (up to 256 MB), so RSS measures the sanitizer there, not the cache. */
    if (!getenv("KVT_SANITIZED"))
        CHECKF(rss0 < 0 || rss1 - rss0 < 8 * 1024, "resident memory grew by %ld KiB", rss1 - rss0);
    kvt_cache_free(c);
    kvt_engine_free(e);
}

int main(void) {
    if (!(model = kvt_test_tiny_model("m.gguf", 600))) {
        CHECK(model != NULL);
        return kvt_test_done("test_expansion");
    }
    n_vocab = model->hp.n_vocab;
    if (kvt_test_device()) {
        n_sessions = 9;
        n_churn = 24;
        n_gen = 4;
    }
    test_sessions_outnumber_t0();
    test_churn_keeps_everything();
    if (kvt_test_device()) { /* the rest is cache policy, the same on any device */
        kvt_model_free(model);
        return kvt_test_done("test_expansion_gpu");
    }
    test_admission_spares_live_sessions();
    test_keep_warm();
    test_prefetch();
    test_budgets_hold();
    kvt_model_free(model);
    return kvt_test_done("test_expansion");
}
