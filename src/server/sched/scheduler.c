// SPDX-License-Identifier: MIT
/* kvtier serve's engine thread (see server_impl.h): its loop, and the queue:
 * which waiting request is admitted next (cache-aware scheduling) and the
 * prefetch of a waiting request's prefix. The rest of the engine thread is in
 * scheduler.h's files: admission (sched_admit.c), the batch step (sched_step.c),
 * the end of a request (sched_finish.c) and the admin jobs (sched_jobs.c). */
#include <stdint.h>

#include "common.h"
#include "scheduler.h"
#include "server_impl.h"

/* T0-resident leading blocks of r's prompt (engine thread). */
static int32_t resident_blocks(kvt_server *s, const srv_req *r) {
    kvt_hash128 root;
    if (kvt_cache_root(s->cache, r->salt, r->salt_len, &root)) return 0;
    kvt_cache_match m;
    kvt_cache_lookup_root(s->cache, root, r->prompt, r->n_prompt - 1, &m);
    return m.tier_blocks[KVT_TIER_T0];
}

/* Takes the next request to admit out of the queue (engine thread, mu held):
 * cache-aware, SGLang-style longest-resident-prefix first within a window,
 * priority before that, and no request passed over more than SCHED_MAX_SKIPS
 * times. */
static srv_req *queue_take_locked(kvt_server *s, int32_t avail) {
    int32_t w = KVT_MIN(s->q_len, SCHED_WINDOW), best = -1, best_res = -1;
    for (int32_t i = 0; i < w; i++) {
        srv_req *r = s->queue[(s->q_head + i) % s->p.queue];
        int fits = r->cancelled || 1 + r->n_sib <= avail; /* n choices take n slots */
        if (r->cancelled || r->skipped >= SCHED_MAX_SKIPS) {
            if (!fits) return NULL; /* it goes next: the others wait until its slots are free */
            best = i;
            break;
        }
        if (!fits) continue;
        const srv_req *b = best >= 0 ? s->queue[(s->q_head + best) % s->p.queue] : NULL;
        if (b && r->session.priority < b->session.priority) continue;
        int32_t res = resident_blocks(s, r);
        if (!b || r->session.priority > b->session.priority || res > best_res) {
            best = i;
            best_res = res;
        }
    }
    if (best < 0) return NULL;
    srv_req *r = s->queue[(s->q_head + best) % s->p.queue];
    for (int32_t k = best; k > 0; k--) { /* close the gap; the ones before it were passed over */
        srv_req *prev = s->queue[(s->q_head + k - 1) % s->p.queue];
        prev->skipped++;
        s->queue[(s->q_head + k) % s->p.queue] = prev;
    }
    s->q_head = (s->q_head + 1) % s->p.queue;
    s->q_len--;
    return r;
}

/* While r waits for a slot, restores its cached prefix into T0 pages that
 * are free or idle (idle blocks move down a tier, as for any request; pages
 * of running sequences and pins are never taken), leaving a margin for the
 * running sequences' next steps, so r is resident when its turn comes. With
 * a shared tier (T3) on, blocks the local index does not know are asked of
 * it too (kvt_cache_prefetch_root probes where the local match ends short),
 * so a prefix another node computed is fetched while r waits. */
static void prefetch_waiting(kvt_server *s, srv_req *r) {
    int32_t margin = s->p.parallel * PREFETCH_MARGIN_PER_SLOT + s->p.prefill_chunk / s->block + 1;
    kvt_cache_stats st;
    kvt_cache_get_stats(s->cache, &st);
    int32_t room = st.t0_pages_free + st.t0_pages_idle - margin;
    r->prefetched = 1;
    kvt_hash128 root;
    if (room <= 0 || kvt_cache_root(s->cache, r->salt, r->salt_len, &root)) return;
    kvt_cache_match m;
    kvt_cache_lookup_root(s->cache, root, r->prompt, r->n_prompt - 1, &m);
    int32_t full = (r->n_prompt - 1) / s->block;
    int ask_shared = m.n_blocks < full && kvt_cache_has_shared_tier(s->cache);
    if (m.n_blocks == m.tier_blocks[KVT_TIER_T0] && !ask_shared) return; /* nothing below T0 to bring up */
    int32_t before = m.tier_blocks[KVT_TIER_T0] * s->block;
    int32_t got = kvt_cache_prefetch_root(s->cache, root, r->prompt, r->n_prompt - 1, room);
    if (got > before) r->prefetched_tokens = got - before;
}

/* Resumes parked slots, the highest kvtier.priority first and the oldest of
 * those, once a request ended since the last
 * park (mem_hold is 0) and while the pages free or idle in T0, less a margin
 * for the running sequences' next steps (and a prefill chunk while a prompt
 * or a resumed reply is being fed), hold all of the next one's tokens;
 * with nothing else running the oldest resumes anyway (alone, it either fits
 * or ends as at n_ctx; one that cannot get a sequence at all ends with a
 * 503). A park always waits for a request to end before its resume, so a
 * misjudged room costs one failed step, never a loop. Returns how many stay
 * parked (engine thread). */
static int32_t resume_parked(kvt_server *s) {
    int32_t running = 0, parked = 0, prompting = 0;
    for (int32_t i = 0; i < s->p.parallel; i++) {
        const slot *sl = &s->slots[i];
        if (sl->r && !sl->waiting) sl->parked ? parked++ : running++;
        prompting |= sl->r && sl->prefilling;
    }
    if (!parked) return 0;
    pthread_mutex_lock(&s->mu);
    int hold = s->mem_hold;
    pthread_mutex_unlock(&s->mu);
    if (hold && running) return parked;
    while (parked) {
        slot *next = NULL;
        for (int32_t i = 0; i < s->p.parallel; i++) {
            slot *sl = &s->slots[i];
            if (!sl->r || !sl->parked) continue;
            int pr = (sl->r->is_sib ? sl->r->first : sl->r)->session.priority;
            int pn = next ? (next->r->is_sib ? next->r->first : next->r)->session.priority : 0;
            if (!next || pr > pn || (pr == pn && sl->admitted < next->admitted)) next = sl;
        }
        if (running) {
            kvt_cache_stats st;
            kvt_cache_get_stats(s->cache, &st);
            int32_t room = st.t0_pages_free + st.t0_pages_idle - running * PREFETCH_MARGIN_PER_SLOT -
                (prompting ? s->p.prefill_chunk / s->block + 1 : 0);
            if (room < (next->n_toks - 1) / s->block + 2) break;
        }
        if (kvt_srv_slot_resume(s, next) && running) break; /* a running request ends first: try again then */
        if (next->parked) {
            /* nothing else runs, so nothing will free what it lacks: it ends rather than wait forever */
            kvt_srv_slot_finish(s, next, NULL, 0, 503, "a paused reply could not get its KV memory back; retry later");
            parked--;
            continue;
        }
        running++;
        parked--;
    }
    return parked;
}

/* Refreshes the cache snapshot (s->snap) and, while there is nothing to do
 * (no request queued or running, no admin job, no stop), waits. Warm sessions
 * whose time runs out meanwhile are let go: an idle engine wakes when the
 * next one expires, so their pages become idle and the snapshot says so.
 * Caller holds s->mu (engine thread). */
static void wait_for_work_locked(kvt_server *s) {
    double warm_s = kvt_cache_expire_sessions(s->cache);
    kvt_cache_get_stats(s->cache, &s->snap);
    while (!s->stopping && s->q_len == 0 && s->n_active == 0 && !s->jobs) {
        if (warm_s < 0) {
            pthread_cond_wait(&s->engine_cv, &s->mu);
            continue;
        }
        kvt_srv_cond_wait_ms(&s->engine_cv, &s->mu, (int)(KVT_MIN(warm_s, 60.0) * 1e3) + 1);
        warm_s = kvt_cache_expire_sessions(s->cache);
        kvt_cache_get_stats(s->cache, &s->snap);
    }
}

void *kvt_srv_engine_main(void *arg) {
    kvt_server *s = arg;
    const int32_t P = s->p.parallel;
    srv_req **admit = s->step_admit;
    for (;;) {
        int32_t n_admit = 0, free_slots = 0;
        srv_req *waiting = NULL;
        int32_t parked = resume_parked(s); /* paused replies go on before the queue's requests start */
        pthread_mutex_lock(&s->mu);
        wait_for_work_locked(s);
        int stopping = s->stopping;
        struct admin_job *jobs = stopping ? NULL : s->jobs;
        if (jobs) s->jobs = NULL;
        for (int32_t i = 0; i < P; i++) free_slots += !s->slots[i].r;
        if (free_slots == P) s->mem_hold = 0; /* see server_impl.h: nothing runs now to free pages for it */
        while (!stopping && !s->mem_hold && !parked && s->q_len > 0 && free_slots > 0) {
            srv_req *r = queue_take_locked(s, free_slots);
            if (!r) break;
            if (r->cancelled) {
                r->done = 1;
                kvt_srv_fail_choices_locked(r, 499, "cancelled");
                kvt_srv_req_unref_locked(r);
                continue;
            }
            admit[n_admit++] = r;
            s->n_active += 1 + r->n_sib;
            free_slots -= 1 + r->n_sib;
        }
        for (int32_t i = 0; !stopping && !waiting && i < KVT_MIN(s->q_len, SCHED_WINDOW); i++) {
            srv_req *q = s->queue[(s->q_head + i) % s->p.queue];
            if (q->prefetched || q->cancelled) continue;
            waiting = q; /* one prefetch per engine step: the running sequences go on meanwhile */
            waiting->refs++;
        }
        int8_t *cancelled = s->step_cancelled;
        for (int32_t i = 0; i < P; i++) cancelled[i] = s->slots[i].r && s->slots[i].r->cancelled;
        pthread_mutex_unlock(&s->mu);

        if (stopping) {
            /* a stream generating (its 200 and part of its text sent) ends as a reply cut short: the rest of
             * its text, its final chunk with finish_reason "length", [DONE]; a whole answer, or a stream
             * still on its prompt, is a 503 */
            for (int32_t i = 0; i < P; i++) {
                slot *sl = &s->slots[i];
                if (sl->r && sl->r->stream && !sl->waiting && (!sl->prefilling || sl->resume_to)) {
                    sl->r->cut_by_stop = 1; /* published with done, under s->mu */
                    kvt_srv_slot_finish(s, sl, "length", sl->raw_len, 0, NULL);
                } else if (sl->r) kvt_srv_slot_finish(s, sl, NULL, 0, 503, "the server is shutting down");
            }
            pthread_mutex_lock(&s->mu);
            while (s->q_len > 0) {
                srv_req *r = s->queue[s->q_head];
                s->q_head = (s->q_head + 1) % s->p.queue;
                s->q_len--;
                kvt_srv_req_fail_locked(r, 503, "the server is shutting down");
                kvt_srv_fail_choices_locked(r, 503, "the server is shutting down");
                kvt_srv_req_unref_locked(r);
            }
            kvt_srv_fail_jobs_locked(s);
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        if (jobs) kvt_srv_run_jobs(s, jobs);
        for (int32_t i = 0; i < P; i++)
            if (cancelled[i] && s->slots[i].r) {
                kvt_logk(KVT_LOG_INFO, "request_id,completion_id", "serve: %s (%s) cancelled by its client",
                         kvt_srv_log_id(s->slots[i].r), s->slots[i].r->id);
                kvt_srv_slot_finish(s, &s->slots[i], "cancelled", 0, 0, NULL);
            }
        for (int32_t i = 0; i < n_admit; i++) kvt_srv_slot_admit(s, admit[i]);
        if (waiting) {
            prefetch_waiting(s, waiting);
            kvt_srv_req_unref(s, waiting);
        }
        int any = 0;
        for (int32_t i = 0; i < P; i++) any |= s->slots[i].r != NULL;
        if (any) kvt_srv_engine_step(s);
    }
}
