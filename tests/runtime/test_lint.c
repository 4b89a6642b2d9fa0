// SPDX-License-Identifier: MIT
/* Prompt lint finds planted divergences — a timestamp, a reordered tool list,
 * a per-user id at the top, prompts shorter than a block — names the right
 * token and cause, and its advice, applied by hand to the prompt texts, raises
 * the reusable fraction (as does its own "after fixes" estimate). Its count of
 * reusable tokens is what the cache reuses when the prompts run in order,
 * prompts whose last block is whole included. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lint.h"
#include "model.h"
#include "testutil.h"

#define B 32
#define N 4

static kvt_model *model;

static const char *SYS = "You are a support assistant for Acme. Follow the policy strictly and answer briefly.";
static const char *TOOLS[N] = {"tool escalate(reason): hands over to a human", "tool get_order(id): returns an order",
                               "tool refund(order, amount): refunds an order",
                               "tool search_docs(query): searches the help center"};
static const char *QS[N] = {"Where is my order 1234?", "Can I get a refund for order 99?",
                            "How do I reset my password?", "Is there a phone number?"};
static const int ORDER[N][N] = {{0, 1, 2, 3}, {2, 0, 3, 1}, {3, 2, 1, 0}, {1, 3, 0, 2}};

typedef struct {
    kvt_lint_prompt p[N];
    kvt_lint_report r;
} linted;

static void lint(char *texts[N], linted *out) {
    for (int i = 0; i < N; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        CHECKF(kvt_model_tokenize(model, texts[i], strlen(texts[i]), 1, 0, &ids, &n) == 0, "%s", kvt_errmsg());
        out->p[i] = (kvt_lint_prompt){ids, (int32_t)n};
    }
    CHECKF(kvt_lint_run(model->tok, out->p, N, B, &out->r) == 0, "%s", kvt_errmsg());
}

static void unlint(linted *l, char *texts[N]) {
    for (int i = 0; i < N; i++) {
        free((void *)l->p[i].tokens);
        free(texts[i]);
    }
    kvt_lint_free(&l->r);
}

static double fraction(const kvt_lint_report *r) { return (double)r->reusable_tokens / (double)r->total_tokens; }
static double fraction_after(const kvt_lint_report *r) { return (double)r->reusable_after / (double)r->total_after; }

static char *join(const char *head, const int order[N], const char *tail) {
    char *s = malloc(4096);
    size_t o = (size_t)snprintf(s, 4096, "%s\n", head);
    for (int k = 0; k < N; k++) o += (size_t)snprintf(s + o, 4096 - o, "%s\n", TOOLS[order[k]]);
    snprintf(s + o, 4096 - o, "%s", tail);
    return s;
}

/* The first divergence of every later prompt has cause c at about token at. */
static void expect(const linted *l, kvt_lint_cause c, const char *what) {
    CHECKF(l->r.cause_count[c] == N - 1, "%s: %d prompts with cause %s", what, l->r.cause_count[c],
           kvt_lint_cause_name(c));
    for (int i = 1; i < N; i++) {
        const kvt_lint_row *w = &l->r.rows[i];
        CHECKF(w->with >= 0 && w->shared < w->n_tokens && w->cause == c, "%s [%d]: cause %s", what, i,
               kvt_lint_cause_name(w->cause));
        CHECK(w->span_start <= w->shared && w->shared <= w->span_end);
        CHECK(l->p[i].tokens[w->shared] != l->p[w->with].tokens[w->shared]);
    }
}

static int advice_has(const linted *l, const char *needle) {
    int32_t n;
    char **a = kvt_lint_advice(model->tok, l->p, &l->r, &n);
    int found = 0;
    for (int32_t i = 0; i < n; i++) found |= strstr(a[i], needle) != NULL;
    kvt_lint_advice_free(a, n);
    return found;
}

static void test_timestamp(void) {
    char *t[N], *fixed[N], head[512], tail[512];
    for (int i = 0; i < N; i++) {
        snprintf(head, sizeof head, "%s Current time: 2026-11-30 09:%02d:%02d.", SYS, 10 + i, 7 * i + 3);
        snprintf(tail, sizeof tail, "Question: %s", QS[i]);
        t[i] = join(head, ORDER[0], tail);
        /* the advice applied: the timestamp after the tools, next to the question */
        snprintf(tail, sizeof tail, "Current time: 2026-11-30 09:%02d:%02d. Question: %s", 10 + i, 7 * i + 3, QS[i]);
        fixed[i] = join(SYS, ORDER[0], tail);
    }
    linted a, b;
    lint(t, &a);
    expect(&a, KVT_LINT_TIMESTAMP, "timestamp");
    char buf[128];
    kvt_lint_text(model->tok, &a.p[1], a.r.rows[1].span_start, a.r.rows[1].span_end, buf, sizeof buf);
    CHECKF(strstr(buf, "09:11:10") != NULL, "the differing run is '%s'", buf);
    CHECK(advice_has(&a, "move the timestamp"));
    lint(fixed, &b);
    CHECKF(fraction(&b.r) > fraction(&a.r) + 0.2, "applied advice: %.3f -> %.3f", fraction(&a.r), fraction(&b.r));
    CHECKF(fraction_after(&a.r) > fraction(&a.r) + 0.2, "estimate: %.3f -> %.3f", fraction(&a.r), fraction_after(&a.r));
    CHECK(b.r.rows[1].shared > a.r.rows[1].shared + 2 * B); /* it now diverges after the tools */
    unlint(&a, t);
    unlint(&b, fixed);
}

static void test_reordered_tools(void) {
    char *t[N], *fixed[N], tail[512];
    for (int i = 0; i < N; i++) {
        snprintf(tail, sizeof tail, "Question: %s", QS[i]);
        t[i] = join(SYS, ORDER[i], tail);
        fixed[i] = join(SYS, ORDER[0], tail); /* sorted by name */
    }
    linted a, b;
    lint(t, &a);
    expect(&a, KVT_LINT_REORDERED, "reordered");
    CHECK(advice_has(&a, "sort the tools"));
    lint(fixed, &b);
    CHECKF(fraction(&b.r) > fraction(&a.r) + 0.2, "applied advice: %.3f -> %.3f", fraction(&a.r), fraction(&b.r));
    CHECKF(fraction_after(&a.r) > fraction(&a.r) + 0.2, "estimate: %.3f -> %.3f", fraction(&a.r), fraction_after(&a.r));
    unlint(&a, t);
    unlint(&b, fixed);
}

static void test_user_id(void) {
    char *t[N], *fixed[N], head[512], tail[512];
    for (int i = 0; i < N; i++) {
        snprintf(head, sizeof head, "Session for user u-%d%d. %s", 7 * i + 1, i + 3, SYS);
        snprintf(tail, sizeof tail, "Question: %s", QS[i]);
        t[i] = join(head, ORDER[0], tail);
        snprintf(tail, sizeof tail, "Session for user u-%d%d. Question: %s", 7 * i + 1, i + 3, QS[i]);
        fixed[i] = join(SYS, ORDER[0], tail);
    }
    linted a, b;
    lint(t, &a);
    expect(&a, KVT_LINT_USER_ID, "user id");
    CHECK(a.r.rows[1].shared < B); /* at the very top: nothing reusable */
    CHECK(advice_has(&a, "per-user/session id"));
    lint(fixed, &b);
    CHECKF(fraction(&b.r) > fraction(&a.r) + 0.2, "applied advice: %.3f -> %.3f", fraction(&a.r), fraction(&b.r));
    CHECKF(fraction_after(&a.r) > fraction(&a.r) + 0.2, "estimate: %.3f -> %.3f", fraction(&a.r), fraction_after(&a.r));
    CHECK(advice_has(&b, "pin the system prompt"));
    unlint(&a, t);
    unlint(&b, fixed);
}

static void test_short(void) {
    char *t[N];
    for (int i = 0; i < N; i++) {
        t[i] = malloc(64);
        snprintf(t[i], 64, "Hi, how are you?");
    }
    linted a;
    lint(t, &a);
    CHECK(a.r.cause_count[KVT_LINT_SHORT] == N && a.r.reusable_tokens == 0);
    CHECK(advice_has(&a, "shorter than one block"));
    unlint(&a, t);
}

/* Prompts run through a cache in order reuse what lint says they would: a
 * repeat and a prefix whose last block is whole reuse all but their last
 * token (that block's page shared), others their shared whole blocks. */
static void test_reusable_matches_cache(void) {
    enum { NP = 6, LEN = 3 * B };
    int32_t base[LEN], other[LEN], p[NP][LEN];
    unsigned seed = 11;
    kvt_test_random_tokens(base, LEN, 2048, &seed);
    kvt_test_random_tokens(other, LEN, 2048, &seed);
    const int32_t n[NP] = {LEN, LEN, 2 * B, 2 * B + 5, 2 * B + 7, B};
    for (int i = 0; i < NP; i++) memcpy(p[i], base, sizeof base);
    memcpy(p[4] + B + 3, other, (size_t)(n[4] - B - 3) * sizeof *other); /* diverges inside block 1 */
    kvt_engine *e = kvt_test_engine(model, B, 64, 4 * B);
    kvt_cache *c = e ? kvt_test_cache(e, NULL, 0) : NULL;
    if (!c) {
        kvt_engine_free(e);
        return;
    }
    kvt_lint_prompt lp[NP];
    int32_t reused[NP];
    for (int i = 0; i < NP; i++) {
        kvt_test_gen g = kvt_test_generate(e, c, p[i], n[i], 1, NULL); /* one token: no KV of a reply */
        reused[i] = g.res.n_reused;
        kvt_test_gen_free(&g);
        lp[i] = (kvt_lint_prompt){p[i], n[i]};
    }
    kvt_lint_report r;
    CHECKF(kvt_lint_run(model->tok, lp, NP, B, &r) == 0, "%s", kvt_errmsg());
    const int32_t want[NP] = {0, LEN - 1, 2 * B - 1, 2 * B, B, B - 1};
    int64_t total = 0;
    for (int i = 0; i < NP; i++) {
        CHECKF(reused[i] == want[i], "prompt %d of %d tokens: the cache reused %d, not %d", i, n[i], reused[i], want[i]);
        CHECKF(r.rows[i].reusable == reused[i], "prompt %d of %d tokens: lint says %d reusable, the cache reused %d", i,
               n[i], r.rows[i].reusable, reused[i]);
        total += reused[i];
    }
    CHECKF(r.reusable_tokens == total, "lint's total %lld, the cache's %lld", (long long)r.reusable_tokens,
           (long long)total);
    kvt_lint_free(&r);
    kvt_cache_free(c);
    kvt_engine_free(e);
}

int main(void) {
    model = kvt_test_tiny_model("lint.gguf", 2048);
    if (!model) return 1;
    test_timestamp();
    test_reordered_tools();
    test_user_id();
    test_short();
    test_reusable_matches_cache();
    kvt_model_free(model);
    return kvt_test_done("test_lint");
}
