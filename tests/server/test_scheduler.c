// SPDX-License-Identifier: MIT
/* The server's scheduler driven directly, without HTTP: requests are built
 * and queued through the handlers' own functions (kvt_srv_make_request,
 * kvt_srv_enqueue) on a server over a tiny random model, and each test waits
 * for the engine thread by polling the request's done flag under s->mu.
 * Several requests are queued in one critical section
 * (kvt_srv_enqueue_locked) so that the engine sees them together while one
 * long request holds the only slot; which one it admits next is then the
 * scheduler's choice alone, read back from admission_seq in their usage. */
#include <stdio.h>
#include <string.h>

#include "scheduler.h"
#include "server_impl.h"
#include "server_rig.h"
#include "testutil.h"

#define B 16 /* tokens per page */
#define N_CTX 2048
#define N_VOCAB 600
#define PROMPT 40 /* prompt tokens: two full blocks and a partial one */
#define LONG 1500 /* max_tokens of the request that holds the slot (it is cancelled long before) */

static struct kvt_model *model;

typedef kvt_test_rig rig;

/* A fresh engine of n_pages pages, cache and server (127.0.0.1, any port)
 * with `parallel` slots; 0 or -1 (a failed check). */
static int rig_up_pages(rig *g, int32_t parallel, int32_t n_pages) {
    kvt_server_params sp = kvt_server_default_params();
    sp.parallel = parallel;
    return kvt_test_rig_up(g, model, &(kvt_test_rig_opts){B, n_pages, 2, N_CTX, 16ull << 20}, sp);
}
static int rig_up(rig *g, int32_t parallel) { return rig_up_pages(g, parallel, 1024); }

/* A completion request for the prompt ids[0..n_prompt) with extra JSON
 * fields; greedy and past end-of-generation tokens unless extra says
 * otherwise. NULL (a failed check) if it is refused. */
static srv_req *request_ids(kvt_server *s, const int32_t *ids, int32_t n_prompt, int32_t max_tokens, const char *extra) {
    char json[2048];
    int at = snprintf(json, sizeof json, "{\"prompt\":[");
    for (int32_t i = 0; i < n_prompt; i++)
        at += snprintf(json + at, sizeof json - (size_t)at, "%s%d", i ? "," : "", ids[i]);
    snprintf(json + at, sizeof json - (size_t)at, "],\"max_tokens\":%d,\"ignore_eos\":true%s%s}", max_tokens,
             extra ? "," : "", extra ? extra : "");
    kvt_api_request a;
    kvt_api_error err;
    if (kvt_api_parse(KVT_API_COMPLETION, json, strlen(json), s->n_vocab, s->n_ctx, s->p.max_tokens_limit, &a, &err)) {
        CHECKF(0, "%s: %s", json, err.message);
        return NULL;
    }
    srv_req *r = kvt_srv_make_request(s, &a, NULL, &err);
    if (r && kvt_srv_add_choices(s, &a, NULL, r, &err)) {
        kvt_srv_unref_engine_choices(s, r);
        kvt_srv_unref_choices(s, r);
        r = NULL;
    }
    kvt_api_request_free(&a);
    CHECKF(r != NULL, "%s: %s", json, err.message);
    return r;
}
/* request_ids for the prompt base, base+1, ... (n_prompt ids). */
static srv_req *request_n(kvt_server *s, int32_t base, int32_t n_prompt, int32_t max_tokens, const char *extra) {
    int32_t ids[N_CTX];
    for (int32_t i = 0; i < n_prompt; i++) ids[i] = base + i;
    return request_ids(s, ids, n_prompt, max_tokens, extra);
}
static srv_req *request(kvt_server *s, int32_t base, int32_t max_tokens, const char *extra) {
    return request_n(s, base, PROMPT, max_tokens, extra);
}

/* Waits (polling under s->mu) until r and its other choices are done. */
static void wait_done(kvt_server *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    while (!kvt_srv_all_done(r)) kvt_srv_cond_wait_ms(&r->cv, &s->mu, 20);
    pthread_mutex_unlock(&s->mu);
}

/* Queues r and waits until it is generating (its first text is published) or
 * done; returns with s->mu held, so the caller sees it in that state. */
static void start_locked(kvt_server *s, srv_req *r) {
    CHECK(kvt_srv_enqueue(s, r) == 0);
    pthread_mutex_lock(&s->mu);
    while (!r->done && r->text_len == 0) kvt_srv_cond_wait_ms(&r->cv, &s->mu, 20);
}

/* Equal requests queued together behind a running one are admitted in
 * arrival order, and admission_seq numbers them so. */
static void test_arrival_order(void) {
    rig g;
    if (rig_up(&g, 1)) goto out;
    srv_req *hold = request(g.s, 1, LONG, "\"temperature\":0");
    srv_req *q[3];
    for (int i = 0; i < 3; i++) q[i] = request(g.s, 100 * (i + 1), 4, "\"temperature\":0");
    if (!hold || !q[0] || !q[1] || !q[2]) goto out;
    start_locked(g.s, hold);
    CHECKF(!hold->done, "the long request ended before the others queued (%s)", hold->finish_reason);
    for (int i = 0; i < 3; i++) CHECK(kvt_srv_enqueue_locked(g.s, q[i]) == 0);
    kvt_srv_cancel_locked(g.s, hold); /* frees the slot: the queued ones now go one at a time */
    pthread_mutex_unlock(&g.s->mu);
    wait_done(g.s, hold);
    CHECK(hold->usage.admission_seq == 1);
    for (int i = 0; i < 3; i++) {
        wait_done(g.s, q[i]);
        CHECKF(q[i]->usage.admission_seq == 2 + i, "arrival %d admitted as %lld", i,
               (long long)q[i]->usage.admission_seq);
        CHECK(q[i]->finish_reason && !strcmp(q[i]->finish_reason, "length") && q[i]->usage.completion_tokens == 4);
        kvt_srv_unref_choices(g.s, q[i]);
    }
    kvt_srv_unref_choices(g.s, hold);
out:
    kvt_test_rig_down(&g);
}

/* A higher kvtier.priority arriving later goes first; the low one passed over
 * SCHED_MAX_SKIPS times then goes next, ahead of a higher one still waiting. */
static void test_priority_and_starvation(void) {
    enum { N_HIGH = SCHED_MAX_SKIPS + 1 };
    rig g;
    if (rig_up(&g, 1)) goto out;
    srv_req *hold = request(g.s, 1, LONG, "\"temperature\":0");
    srv_req *low = request(g.s, 50, 2, "\"temperature\":0,\"kvtier\":{\"priority\":0}");
    srv_req *high[N_HIGH];
    int ok = hold && low;
    for (int i = 0; i < N_HIGH; i++)
        ok &= (high[i] = request(g.s, 100 + 10 * i, 2, "\"kvtier\":{\"priority\":5}")) != NULL;
    if (!ok) goto out;
    start_locked(g.s, hold);
    CHECK(!hold->done);
    CHECK(kvt_srv_enqueue_locked(g.s, low) == 0);
    for (int i = 0; i < N_HIGH; i++) CHECK(kvt_srv_enqueue_locked(g.s, high[i]) == 0);
    kvt_srv_cancel_locked(g.s, hold);
    pthread_mutex_unlock(&g.s->mu);
    wait_done(g.s, hold);
    wait_done(g.s, low);
    for (int i = 0; i < N_HIGH; i++) wait_done(g.s, high[i]);
    /* hold is 1; the first SCHED_MAX_SKIPS high ones 2.., then low, then the last high one */
    for (int i = 0; i < SCHED_MAX_SKIPS; i++)
        CHECKF(high[i]->usage.admission_seq == 2 + i, "high %d admitted as %lld", i,
               (long long)high[i]->usage.admission_seq);
    CHECKF(low->usage.admission_seq == 2 + SCHED_MAX_SKIPS, "low admitted as %lld (passed over at most %d times)",
           (long long)low->usage.admission_seq, SCHED_MAX_SKIPS);
    CHECKF(high[N_HIGH - 1]->usage.admission_seq == 3 + SCHED_MAX_SKIPS, "last high admitted as %lld",
           (long long)high[N_HIGH - 1]->usage.admission_seq);
    CHECK(low->finish_reason && !strcmp(low->finish_reason, "length"));
    for (int i = 0; i < N_HIGH; i++) kvt_srv_unref_choices(g.s, high[i]);
    kvt_srv_unref_choices(g.s, low);
    kvt_srv_unref_choices(g.s, hold);
out:
    kvt_test_rig_down(&g);
}

/* n = 3: the choices fork from one prefill of the prompt (one admission, one
 * prompt report) and each generates its own max_tokens. */
static void test_forks(void) {
    rig g;
    if (rig_up(&g, 3)) goto out;
    srv_req *r = request(g.s, 7, 6, "\"n\":3,\"temperature\":1,\"seed\":11");
    if (!r) goto out;
    CHECK(r->n_sib == 2);
    CHECK(kvt_srv_enqueue(g.s, r) == 0);
    wait_done(g.s, r);
    for (int32_t i = 0; i <= r->n_sib; i++) {
        const srv_req *c = i ? r->sib[i - 1] : r;
        CHECKF(c->err_status == 0, "choice %d: %s", i, c->err_msg);
        CHECKF(c->finish_reason && !strcmp(c->finish_reason, "length"), "choice %d", i);
        CHECKF(c->usage.completion_tokens == 6 && c->usage.prompt_tokens == PROMPT, "choice %d: %d + %d tokens", i,
               c->usage.prompt_tokens, c->usage.completion_tokens);
        /* the prompt report is the first choice's: the same admission and the same computed prompt */
        CHECKF(c->usage.admission_seq == 1, "choice %d admitted as %lld", i, (long long)c->usage.admission_seq);
        CHECK(c->usage.computed_tokens == r->usage.computed_tokens);
        CHECK(c->text_len > 0);
    }
    CHECK(r->usage.computed_tokens == PROMPT);
    kvt_api_usage total = kvt_srv_total_usage(r);
    CHECKF(total.completion_tokens == 18 && total.prompt_tokens == PROMPT, "total %d + %d", total.prompt_tokens,
           total.completion_tokens);
    kvt_srv_unref_choices(g.s, r);
out:
    kvt_test_rig_down(&g);
}

/* A request cancelled while queued never runs (no admission number); one
 * cancelled while generating ends "cancelled", its slot goes to the next, and
 * its prompt's full blocks stay cached for a later request. */
static void test_cancel(void) {
    rig g;
    if (rig_up(&g, 1)) goto out;
    srv_req *run = request(g.s, 1, LONG, "\"temperature\":0");
    srv_req *queued = request(g.s, 100, 4, "\"temperature\":0");
    srv_req *next = request(g.s, 200, 4, "\"temperature\":0");
    srv_req *again = request(g.s, 1, 1, "\"temperature\":0");
    if (!run || !queued || !next || !again) goto out;
    start_locked(g.s, run);
    CHECK(!run->done);
    CHECK(kvt_srv_enqueue_locked(g.s, queued) == 0);
    CHECK(kvt_srv_enqueue_locked(g.s, next) == 0);
    kvt_srv_cancel_locked(g.s, queued);
    kvt_srv_cancel_locked(g.s, run);
    pthread_mutex_unlock(&g.s->mu);
    wait_done(g.s, run);
    wait_done(g.s, queued);
    wait_done(g.s, next);
    CHECKF(run->finish_reason && !strcmp(run->finish_reason, "cancelled"), "%s",
           run->finish_reason ? run->finish_reason : "(none)");
    CHECK(run->err_status == 0 && run->usage.admission_seq == 1);
    CHECK(queued->cancelled && queued->usage.admission_seq == 0 && queued->usage.completion_tokens == 0);
    CHECK(queued->text_len == 0 && !queued->finish_reason);
    CHECKF(next->usage.admission_seq == 2, "next admitted as %lld", (long long)next->usage.admission_seq);
    CHECK(next->finish_reason && !strcmp(next->finish_reason, "length"));
    CHECK(kvt_srv_enqueue(g.s, again) == 0);
    wait_done(g.s, again);
    CHECKF(again->usage.cached_tokens == (PROMPT - 1) / B * B, "cached %d of the cancelled request's prompt",
           again->usage.cached_tokens);
    kvt_srv_unref_choices(g.s, run);
    kvt_srv_unref_choices(g.s, queued);
    kvt_srv_unref_choices(g.s, next);
    kvt_srv_unref_choices(g.s, again);
out:
    kvt_test_rig_down(&g);
}

/* /v1/cache/prefill's request: done once its prompt is in, nothing
 * generated, and the prompt's full blocks are cached for the next. */
static void test_prefill_only(void) {
    rig g;
    if (rig_up(&g, 1)) goto out;
    srv_req *p = request(g.s, 300, 8, NULL);
    srv_req *gen = request(g.s, 300, 1, "\"temperature\":0");
    if (!p || !gen) goto out;
    p->prefill_only = 1;
    CHECK(kvt_srv_enqueue(g.s, p) == 0);
    wait_done(g.s, p);
    CHECK(p->err_status == 0 && p->finish_reason && !strcmp(p->finish_reason, "prefill"));
    CHECK(p->usage.completion_tokens == 0 && p->text_len == 0);
    CHECK(p->usage.computed_tokens == PROMPT && p->usage.cached_tokens == 0);
    CHECK(kvt_srv_enqueue(g.s, gen) == 0);
    wait_done(g.s, gen);
    CHECKF(gen->usage.cached_tokens == (PROMPT - 1) / B * B, "cached %d after the prefill", gen->usage.cached_tokens);
    kvt_srv_unref_choices(g.s, p);
    kvt_srv_unref_choices(g.s, gen);
out:
    kvt_test_rig_down(&g);
}

/* The pool has no pages left for the oldest prompt while a younger one holds
 * the cached prefix its admission restored: the younger, not generating yet,
 * gives way by going back to the queue, and nothing else is admitted until
 * the older, which fits the pool alone, has run to its end; then the younger
 * runs. Neither fails (the older is never told with a 400 that its prompt is
 * too long for the pool, the younger gets no 503), and each reply is the one
 * it gets alone. Six pages of 16 tokens: `big` needs all six (80 prompt
 * tokens and 4 more), `late` holds two cached ones from its admission on. */
static void test_pool_youngest_gives_way(void) {
    rig g;
    if (rig_up_pages(&g, 2, 6)) goto out;
    srv_req *warm = request(g.s, 500, 1, "\"temperature\":0");
    /* big is admitted first for its priority (late has the longer resident prefix) */
    srv_req *big = request_n(g.s, 1, 80, 4, "\"temperature\":0,\"kvtier\":{\"priority\":5}");
    srv_req *late = request(g.s, 500, 4, "\"temperature\":0");
    srv_req *big1 = request_n(g.s, 1, 80, 4, "\"temperature\":0");
    srv_req *late1 = request(g.s, 500, 4, "\"temperature\":0");
    if (!warm || !big || !late || !big1 || !late1) goto out;
    CHECK(kvt_srv_enqueue(g.s, warm) == 0);
    wait_done(g.s, warm);
    CHECKF(warm->err_status == 0, "warm-up: %s", warm->err_msg);
    pthread_mutex_lock(&g.s->mu); /* both queued before the engine looks: it admits them in one go */
    CHECK(kvt_srv_enqueue_locked(g.s, big) == 0);
    CHECK(kvt_srv_enqueue_locked(g.s, late) == 0);
    pthread_mutex_unlock(&g.s->mu);
    wait_done(g.s, big);
    wait_done(g.s, late);
    CHECKF(big->err_status == 0 && big->finish_reason && !strcmp(big->finish_reason, "length"),
           "the older prompt, which fits alone, ended with %d: %s", big->err_status, big->err_msg);
    CHECKF(late->err_status == 0 && late->finish_reason && !strcmp(late->finish_reason, "length"),
           "the younger one ended with %d: %s", late->err_status, late->err_msg);
    CHECK(big->usage.completion_tokens == 4 && late->usage.completion_tokens == 4);
    /* after the warm-up's 1: big 2 and late 3, then late again as 4, once big had ended */
    CHECKF(big->usage.admission_seq == 2 && late->usage.admission_seq == 4, "big admitted as %lld, late as %lld",
           (long long)big->usage.admission_seq, (long long)late->usage.admission_seq);
    srv_req *const pair[2][2] = {{big, big1}, {late, late1}};
    for (int i = 0; i < 2; i++) {
        srv_req *r = pair[i][0], *solo = pair[i][1];
        CHECK(kvt_srv_enqueue(g.s, solo) == 0);
        wait_done(g.s, solo);
        CHECKF(solo->err_status == 0 && solo->text_len == r->text_len && !memcmp(solo->text, r->text, r->text_len),
               "%s: the reply alone differs (%d %s)", i ? "late" : "big", solo->err_status, solo->err_msg);
    }
    kvt_srv_unref_choices(g.s, warm);
    kvt_srv_unref_choices(g.s, big);
    kvt_srv_unref_choices(g.s, late);
    kvt_srv_unref_choices(g.s, big1);
    kvt_srv_unref_choices(g.s, late1);
out:
    kvt_test_rig_down(&g);
}

/* Two replies that cannot both fit the pool: when it runs out, the younger,
 * generating, pauses (parks) with its KV cached, the older runs to its end,
 * and the younger resumes from its cached blocks and ends too. Neither
 * fails, and each reply, with its logprobs, is the one it gets alone: the
 * greedy one and a sampled one (temperature and seed), whose sampler goes on
 * where it was. Eight pages of 16 tokens; each reply needs five (20 prompt
 * tokens and 60 generated). */
static void test_pool_generating_parks(void) {
    rig g;
    if (rig_up_pages(&g, 2, 8)) goto out;
    const char *greedy = "\"temperature\":0,\"logprobs\":2";
    const char *sampled = "\"temperature\":0.9,\"seed\":7,\"logprobs\":2";
    srv_req *old = request_n(g.s, 1, 20, 60, greedy), *young = request_n(g.s, 300, 20, 60, sampled);
    srv_req *old1 = request_n(g.s, 1, 20, 60, greedy), *young1 = request_n(g.s, 300, 20, 60, sampled);
    if (!old || !young || !old1 || !young1) goto out;
    pthread_mutex_lock(&g.s->mu); /* both queued before the engine looks: it admits them in one go */
    CHECK(kvt_srv_enqueue_locked(g.s, old) == 0);
    CHECK(kvt_srv_enqueue_locked(g.s, young) == 0);
    pthread_mutex_unlock(&g.s->mu);
    wait_done(g.s, old);
    wait_done(g.s, young);
    srv_req *const pair[2][2] = {{old, old1}, {young, young1}};
    for (int i = 0; i < 2; i++) {
        srv_req *r = pair[i][0];
        CHECKF(r->err_status == 0 && r->finish_reason && !strcmp(r->finish_reason, "length") &&
                   r->usage.completion_tokens == 60 && r->n_lp == 60,
               "%s ended with %d (%s), %d tokens", i ? "young" : "old", r->err_status, r->err_msg,
               r->usage.completion_tokens);
    }
    CHECKF(old->usage.preemptions == 0, "the older reply paused %d times", old->usage.preemptions);
    CHECKF(young->usage.preemptions >= 1, "the younger reply never paused: the pool fitted both");
    CHECKF(young->usage.resumed_cached_tokens + young->usage.resumed_computed_tokens >= 20,
           "resumed with %d cached and %d computed tokens", young->usage.resumed_cached_tokens,
           young->usage.resumed_computed_tokens);
    printf("# the younger reply paused %d time(s); resumed %d tokens from the cache, recomputed %d\n",
           young->usage.preemptions, young->usage.resumed_cached_tokens, young->usage.resumed_computed_tokens);
    for (int i = 0; i < 2; i++) {
        srv_req *r = pair[i][0], *solo = pair[i][1];
        CHECK(kvt_srv_enqueue(g.s, solo) == 0);
        wait_done(g.s, solo);
        CHECKF(solo->err_status == 0 && solo->text_len == r->text_len && !memcmp(solo->text, r->text, r->text_len),
               "%s: the reply alone differs (%d %s)", i ? "young" : "old", solo->err_status, solo->err_msg);
        int same = solo->n_lp == r->n_lp;
        for (size_t k = 0; same && k < r->n_lp; k++)
            same = solo->lp[k].id == r->lp[k].id && solo->lp[k].logprob == r->lp[k].logprob;
        CHECKF(same, "%s: the logprobs alone differ", i ? "young" : "old");
    }
    kvt_srv_unref_choices(g.s, old);
    kvt_srv_unref_choices(g.s, young);
    kvt_srv_unref_choices(g.s, old1);
    kvt_srv_unref_choices(g.s, young1);
out:
    kvt_test_rig_down(&g);
}

/* As above, but the younger reply has the higher kvtier.priority: it keeps
 * going and the older, priority 0, pauses; both still equal their solo runs.
 * One try on a fresh server: 1 when a reply paused, 0 when the two did not
 * run together (the younger was admitted only once the older had ended). */
static int priority_parks_once(void) {
    rig g;
    int paused = 0;
    if (rig_up_pages(&g, 2, 8)) goto out;
    const char *low = "\"temperature\":0,\"logprobs\":2";
    const char *high = "\"temperature\":0,\"logprobs\":2,\"kvtier\":{\"priority\":5}";
    /* the older needs every page at its end (120 tokens), so it cannot finish beside the younger */
    srv_req *old = request_n(g.s, 1, 20, 100, low), *young = request_n(g.s, 300, 20, 60, high);
    srv_req *old1 = request_n(g.s, 1, 20, 100, low), *young1 = request_n(g.s, 300, 20, 60, high);
    if (!old || !young || !old1 || !young1) goto out;
    /* admitted before the younger arrives (its first text may come late: a random model's bytes are
     * held until they make whole characters), so the younger is admitted next and they run together */
    CHECK(kvt_srv_enqueue(g.s, old) == 0);
    pthread_mutex_lock(&g.s->mu);
    while (!old->done && old->id_slot < 0) kvt_srv_cond_wait_ms(&old->cv, &g.s->mu, 5);
    CHECK(kvt_srv_enqueue_locked(g.s, young) == 0);
    pthread_mutex_unlock(&g.s->mu);
    wait_done(g.s, old);
    wait_done(g.s, young);
    CHECKF(old->err_status == 0 && young->err_status == 0 && old->usage.completion_tokens == 100 &&
               young->usage.completion_tokens == 60,
           "ended with %d (%s) and %d (%s)", old->err_status, old->err_msg, young->err_status, young->err_msg);
    paused = old->usage.preemptions + young->usage.preemptions > 0;
    CHECKF(!paused || (old->usage.preemptions >= 1 && young->usage.preemptions == 0),
           "the priority-0 reply paused %d times, the priority-5 one %d (admitted %lld and %lld)",
           old->usage.preemptions, young->usage.preemptions, (long long)old->usage.admission_seq,
           (long long)young->usage.admission_seq);
    srv_req *const pair[2][2] = {{old, old1}, {young, young1}};
    for (int i = 0; i < 2; i++) {
        srv_req *r = pair[i][0], *solo = pair[i][1];
        CHECK(kvt_srv_enqueue(g.s, solo) == 0);
        wait_done(g.s, solo);
        CHECKF(solo->err_status == 0 && solo->text_len == r->text_len && !memcmp(solo->text, r->text, r->text_len),
               "%s: the reply alone differs", i ? "young" : "old");
    }
    kvt_srv_unref_choices(g.s, old);
    kvt_srv_unref_choices(g.s, young);
    kvt_srv_unref_choices(g.s, old1);
    kvt_srv_unref_choices(g.s, young1);
out:
    kvt_test_rig_down(&g);
    return paused;
}

/* priority_parks_once until the two replies ran together and one paused (at
 * most five tries: their overlap depends on when the engine admits the
 * younger). */
static void test_pool_priority_parks(void) {
    int paused = 0;
    for (int k = 0; k < 5 && !paused; k++) paused = priority_parks_once();
    CHECKF(paused, "in five tries the two replies never ran together");
}

/* The same text and logprobs, bit for bit. */
static int same_reply(const srv_req *a, const srv_req *b) {
    return a->text_len == b->text_len && !memcmp(a->text, b->text, a->text_len) && a->n_lp == b->n_lp &&
        !memcmp(a->lp, b->lp, a->n_lp * sizeof *a->lp);
}

/* Four prompts with a 3-block prefix in common and suffixes of their own,
 * queued together, are admitted together while nothing is cached: the first
 * computes its whole prompt, and each later one, when its prefill begins,
 * takes the 48 tokens the first committed meanwhile (late reuse, from T0)
 * and computes only its suffix; the last has n = 2, whose choices fork from
 * that prompt. Each reply (text and logprobs) is the one its prompt gets
 * alone and cold (under a cache_salt of its own). */
static void test_late_reuse(void) {
    enum { N = 4, PREFIX = 3 * B };
    rig g;
    if (rig_up(&g, N + 1)) goto out;
    int32_t ids[N][PREFIX + 32], n[N];
    srv_req *q[N], *solo[N];
    int ok = 1;
    for (int i = 0; i < N; i++) {
        n[i] = PREFIX + B + 3 * i; /* the suffix fills a block: the first's is cached before the others look */
        for (int32_t k = 0; k < n[i]; k++) ids[i][k] = k < PREFIX ? 10 + k : 100 + 50 * i + k;
        char extra[128], salted[160];
        snprintf(extra, sizeof extra, "\"temperature\":0,\"logprobs\":2%s", i == N - 1 ? ",\"n\":2" : "");
        snprintf(salted, sizeof salted, "%s,\"cache_salt\":\"solo%d\"", extra, i);
        ok &= (q[i] = request_ids(g.s, ids[i], n[i], 6, extra)) != NULL;
        ok &= (solo[i] = request_ids(g.s, ids[i], n[i], 6, salted)) != NULL;
    }
    if (!ok) goto out;
    pthread_mutex_lock(&g.s->mu); /* one critical section: the engine sees the four together */
    for (int i = 0; i < N; i++) CHECK(kvt_srv_enqueue_locked(g.s, q[i]) == 0);
    pthread_mutex_unlock(&g.s->mu);
    for (int i = 0; i < N; i++) wait_done(g.s, q[i]);
    for (int i = 0; i < N; i++) { /* one at a time, each cold */
        CHECK(kvt_srv_enqueue(g.s, solo[i]) == 0);
        wait_done(g.s, solo[i]);
        CHECK(solo[i]->usage.cached_tokens == 0);
    }
    for (int i = 0; i < N; i++) {
        const kvt_api_usage *u = &q[i]->usage;
        int32_t late = i ? PREFIX : 0;
        CHECKF(u->admission_seq == 1 + i && u->late_cached_tokens == late && u->cached_tokens == late &&
                   u->tier_tokens[KVT_TIER_T0] == late && u->computed_tokens == n[i] - late,
               "request %d (admitted %lld): cached %d (late %d, T0 %d), computed %d of %d", i,
               (long long)u->admission_seq, u->cached_tokens, u->late_cached_tokens, u->tier_tokens[KVT_TIER_T0],
               u->computed_tokens, n[i]);
        kvt_reuse_reason want = i ? KVT_REUSE_DIVERGED : KVT_REUSE_NEVER_SEEN;
        CHECKF(u->reuse_stop.reason == want && u->reuse_stop.token_offset == late, "request %d: stop %d at %d", i,
               u->reuse_stop.reason, u->reuse_stop.token_offset);
        CHECKF(same_reply(q[i], solo[i]), "request %d: the reply differs from its cold one", i);
        for (int32_t c = 0; c < q[i]->n_sib; c++)
            CHECKF(same_reply(q[i]->sib[c], solo[i]->sib[c]) && q[i]->sib[c]->usage.late_cached_tokens == late,
                   "request %d, choice %d", i, c + 1);
    }
    for (int i = 0; i < N; i++) {
        kvt_srv_unref_choices(g.s, q[i]);
        kvt_srv_unref_choices(g.s, solo[i]);
    }
out:
    kvt_test_rig_down(&g);
}

int main(void) {
    if (!(model = kvt_test_tiny_model("sched.gguf", N_VOCAB))) return 1;
    test_arrival_order();
    test_priority_and_starvation();
    test_forks();
    test_cancel();
    test_prefill_only();
    test_pool_youngest_gives_way();
    test_pool_generating_parks();
    test_pool_priority_parks();
    test_late_reuse();
    kvt_model_free(model);
    return kvt_test_done("test_scheduler");
}
