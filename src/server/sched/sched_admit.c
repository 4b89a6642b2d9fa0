// SPDX-License-Identifier: MIT
/* Admission of a request into sequence slots (engine thread): the cache
 * lookup and attach that restore its prefix, RAG's planning at admission,
 * its kvtier report, and for n > 1 the other choices forked from its prompt. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "explain.h"
#include "rag.h"
#include "scheduler.h"
#include "server_impl.h"

/* Text of a few differing token ids for the kvtier report, as valid UTF-8 (a
 * token cut mid-character becomes U+FFFD) in out[KVT_API_STOP_TEXT_MAX]. */
static void stop_text(kvt_server *s, const int32_t *ids, int32_t n, char *out) {
    char raw[KVT_API_STOP_TEXT_MAX / 3];
    kvt_reuse_stop_text(s->tok, ids, n, raw, sizeof raw);
    size_t len;
    char *clean = kvt_utf8_sanitize(raw, strlen(raw), &len);
    snprintf(out, KVT_API_STOP_TEXT_MAX, "%s", clean);
    free(clean);
}

/* Where reuse of r's prompt stopped, in its kvtier report. */
static void set_reuse_stop(kvt_server *s, srv_req *r, const kvt_reuse_stop *stop) {
    r->usage.has_reuse_stop = 1;
    r->usage.reuse_stop = *stop;
    r->usage.stop_prompt_text[0] = r->usage.stop_cached_text[0] = 0;
    if (stop->reason == KVT_REUSE_DIVERGED) {
        stop_text(s, stop->prompt_ids, stop->n_prompt_ids, r->usage.stop_prompt_text);
        /* the cached side is decoded only where the operator lets it be shown (--explain-text) */
        if (r->usage.show_cached_text) stop_text(s, stop->cached_ids, stop->n_cached_ids, r->usage.stop_cached_text);
    }
}

/* A free slot (admission reserved one). */
static slot *free_slot(kvt_server *s) {
    for (int32_t i = 0; i < s->p.parallel; i++)
        if (!s->slots[i].r) return &s->slots[i];
    return NULL;
}

/* Gives slot sl request r and sequence seq (holding the first n_fed tokens of
 * r's prompt), with its buffers, sampler and grammar. */
static void slot_setup(kvt_server *s, slot *sl, srv_req *r, int32_t seq) {
    sl->r = r;
    int32_t idx = (int32_t)(sl - s->slots);
    pthread_mutex_lock(&s->mu); /* GET /slots shows it until kvt_srv_slot_clear */
    r->id_slot = idx;
    r->refs++;
    s->slot_reqs[idx] = r;
    pthread_mutex_unlock(&s->mu);
    sl->seq = seq;
    sl->cap = r->n_prompt + r->max_tokens + 1;
    sl->toks = kvt_xmalloc((size_t)sl->cap * sizeof *sl->toks);
    memcpy(sl->toks, r->prompt, (size_t)r->n_prompt * sizeof *sl->toks);
    sl->n_toks = r->n_prompt;
    sl->n_fed = kvt_seq_len(s->e, seq);
    sl->admitted = s->n_admitted++;
    if (kvt_sampler_order_has(&r->sp, KVT_SAMPLE_INFILL)) { /* the vocabulary's pieces, once per server */
        if (!s->infill_vocab) s->infill_vocab = kvt_infill_vocab_new(s->tok, s->n_vocab);
        r->sp.infill = s->infill_vocab;
    }
    sl->smp = kvt_sampler_new(r->sp, s->n_vocab);
    kvt_sampler_prompt(sl->smp, r->prompt, r->n_prompt); /* DRY's history starts with the prompt */
    if ((r->grammar || r->lazy) && !s->jg_vocab) {       /* once per server, on the first request that needs it */
        s->jg_vocab = kvt_jg_vocab_new(s->tok);
        s->jg_mask = kvt_xmalloc((size_t)s->n_vocab);
        s->jg_logits = kvt_xmalloc((size_t)s->n_vocab * sizeof *s->jg_logits);
        s->jg_refused = kvt_xmalloc((size_t)s->n_vocab * sizeof *s->jg_refused);
    }
    if (r->grammar) sl->jg = kvt_jg_new(r->grammar, s->jg_vocab);
    sl->lazy_tok = -1;
    if (r->lazy) {
        /* a control token whose text is the trigger (Mistral's [TOOL_CALLS]) switches the grammar on too */
        int32_t t = kvt_tokenizer_find(s->tok, r->lazy->trigger, strlen(r->lazy->trigger));
        if (t >= 0 && kvt_tokenizer_token_type(s->tok, t) == KVT_TOKEN_CONTROL) sl->lazy_tok = t;
        sl->lz = kvt_jg_lazy_new(r->lazy, s->jg_vocab, sl->lazy_tok);
    }
    sl->raw_cap = PIECE_INIT;
    sl->raw = kvt_xmalloc(sl->raw_cap);
    sl->tok_end = kvt_xmalloc(((size_t)r->max_tokens + 1) * sizeof *sl->tok_end);
}

/* The other choices of the request prefilling in slot p start now, in the
 * slots held for them: each a new sequence on p's very pages (zero-copy; the
 * shared, partly filled last page is copied when a choice first writes to
 * it), with p's key chain and prompt report. Returns how many went into
 * out[] (a choice that cannot get a sequence ends with 503). */
int32_t kvt_srv_fork_choices(kvt_server *s, slot *p, slot **out) {
    int32_t n = 0, np = 0;
    const int32_t *pages = kvt_seq_pages(s->e, p->seq, &np);
    for (int32_t j = 0; j < s->p.parallel; j++) {
        slot *w = &s->slots[j];
        if (!w->r || !w->waiting || w->fork_of != (int32_t)(p - s->slots)) continue;
        int32_t seq = -1;
        if (kvt_seq_new(s->e, pages, np, kvt_seq_len(s->e, p->seq), &seq)) {
            kvt_srv_slot_finish(s, w, NULL, 0, 503, "no sequence slot is available for another choice; retry later");
            continue;
        }
        srv_req *r = w->r;
        w->waiting = 0;
        slot_setup(s, w, r, seq);
        w->chain = p->chain;
        r->usage = p->r->usage; /* the prompt's report; the engine is the only writer until done */
        out[n++] = w;
    }
    return n;
}

/* Whether r goes back to the head of the queue instead of starting now: the
 * blocks of its cached prefix that are not in T0 do not fit in the pages free
 * or idle, because running requests hold the rest. Started now, it would
 * restore only part of its prefix and compute the rest again, though it is
 * cached; once a running request ends (mem_hold) its prefix fits. Only a
 * plain prompt waits (one choice, no documents, no pooled embedding), only
 * while another request holds pages, and only where the queue takes it back
 * (not full, not stopping). */
static int wait_for_room(kvt_server *s, srv_req *r, kvt_hash128 root) {
    int running = 0;
    for (int32_t i = 0; i < s->p.parallel && !running; i++)
        running = s->slots[i].r && !s->slots[i].waiting && s->slots[i].seq >= 0;
    if (!running || r->n_sib || r->n_docs || r->approximate || r->embed) return 0;
    kvt_cache_match m;
    kvt_cache_lookup_root(s->cache, root, r->prompt, r->n_prompt - 1, &m);
    kvt_cache_stats st;
    kvt_cache_get_stats(s->cache, &st);
    int32_t below = m.n_blocks - m.tier_blocks[KVT_TIER_T0]; /* idle T0 blocks of the match are not room */
    if (below <= 0 || below <= st.t0_pages_free + st.t0_pages_idle - m.tier_blocks[KVT_TIER_T0]) return 0;
    int ok = !kvt_srv_queue_head(s, r);
    if (ok) r->prefetched = 0; /* it may be brought up into free pages while it waits */
    if (ok)
        kvt_logk(KVT_LOG_INFO, "request_id,completion_id,tokens",
                 "serve: %s (%s) waits for a running request to end: %d cached tokens of its prompt do not fit in "
                 "T0 now",
                 kvt_srv_log_id(r), r->id, below * s->block);
    return ok;
}

/* RAG's part of an admission, as the cache is now. */
static void rag_admit(kvt_server *s, srv_req *r, kvt_hash128 root) {
    if (r->plan_cached && r->n_docs > 1) {
        /* follow the cached path among the retrieved chunks */
        double t0 = kvt_now();
        r->doc_order = kvt_xmalloc(r->n_docs * sizeof *r->doc_order);
        kvt_rag_plan_cached(s->cache, root, r->prompt, r->n_prompt, r->doc_starts, r->n_docs, r->doc_order);
        r->plan_ms = (kvt_now() - t0) * 1e3;
    }
    if (r->want_block_tiers) {
        /* which tier each reusable block comes from, looked up just before attach restores them */
        r->block_tiers = kvt_xmalloc((size_t)r->n_prompt / (size_t)s->block + 1);
        r->n_block_tiers = kvt_cache_block_tiers(s->cache, root, r->prompt, r->n_prompt - 1, r->block_tiers,
                                                 r->n_prompt / s->block + 1);
    }
}

/* Starts a sequence for r in a free slot: attach restores its cached prefix.
 * r's other choices take a slot each and wait there for the fork. A prompt
 * whose cached prefix does not fit in T0 beside the running requests goes
 * back to the queue instead (wait_for_room). */
void kvt_srv_slot_admit(kvt_server *s, srv_req *r) {
    kvt_attach_info ai;
    int32_t seq = -1;
    kvt_hash128 root;
    int rc = kvt_cache_root(s->cache, r->salt, r->salt_len, &root);
    if (!rc && wait_for_room(s, r, root)) return;
    slot *sl = free_slot(s);
    if (!rc) rag_admit(s, r, root);
    /* an embedding pooled over the first or every token computes them all: only KV is cached, not hidden rows */
    int32_t max_reuse = r->embed == KVT_POOL_MEAN || r->embed == KVT_POOL_CLS ? 0 : r->n_prompt - 1;
    /* its reuse may grow when its prefill starts (kvt_srv_slot_attach_more): the stop is counted then */
    if (!rc) rc = kvt_cache_attach_open(s->cache, root, r->prompt, r->n_prompt, max_reuse, &seq, &ai);
    kvt_chain chain;
    kvt_chain_init(&chain, root);
    kvt_blend_job *bj = NULL;
    if (!rc && r->approximate && r->n_docs > 1 &&
        (rc = kvt_blend_begin(s->cache, root, seq, r->prompt, r->n_prompt, r->doc_starts, r->n_docs, &r->blend, &bj))) {
        kvt_seq_free(s->e, seq);
        seq = -1;
        kvt_cache_count_stop(s->cache, ai.stop.reason); /* its reuse is final: it ends here */
    }
    if (rc) {
        kvt_logk(KVT_LOG_WARN, "request_id,completion_id,error", "serve: cannot start %s (%s): %s", kvt_srv_log_id(r),
                 r->id, kvt_errmsg());
        pthread_mutex_lock(&s->mu);
        kvt_srv_req_fail_locked(r, 503, "no KV memory or sequence slot is available; retry later");
        s->n_active -= 1 + r->n_sib;
        kvt_srv_fail_choices_locked(r, 503, "no KV memory or sequence slot is available; retry later");
        kvt_srv_req_unref_locked(r);
        pthread_mutex_unlock(&s->mu);
        return;
    }
    slot_setup(s, sl, r, seq);
    sl->chain = chain;
    sl->prefilling = 1;
    sl->stop_open = 1;
    sl->blend = bj; /* the engine steps place the documents, then prefill the rest */
    kvt_srv_log_prefill(r, r->n_prompt - sl->n_fed, sl->n_fed, 0);
    kvt_srv_prefill_progress(sl, 1);
    for (int32_t i = 0; i < r->n_sib; i++) {
        slot *w = free_slot(s); /* admission counted them */
        w->r = r->sib[i];
        w->seq = -1;
        w->waiting = 1;
        w->fork_of = (int32_t)(sl - s->slots);
    }
    /* the engine thread is the only writer of usage until done is set */
    r->usage.cached_tokens = ai.n_reused;
    memcpy(r->usage.tier_tokens, ai.tier_tokens, sizeof ai.tier_tokens);
    r->usage.computed_tokens = r->n_prompt - ai.n_reused; /* less the approximate tokens once placed */
    if (r->approximate) {
        r->usage.approximate = 1;
        r->usage.recompute_ratio = r->blend.ratio;
    }
    r->usage.restore_ms = ai.restore_ms;
    r->usage.disk_decision = ai.t2_decision == KVT_T2_RESTORE ? "restore"
        : ai.t2_decision == KVT_T2_RECOMPUTE                  ? "recompute"
                                                              : NULL;
    r->usage.planned_tokens = ai.n_planned;
    r->usage.prefetched_tokens = r->prefetched_tokens;
    r->usage.late_cached_tokens = 0; /* an admission after a requeue starts the report again */
    r->usage.queued_ms = (kvt_now() - r->t_arrival) * 1e3;
    r->usage.admission_seq = (int64_t)sl->admitted + 1;
    r->usage.shortfall = ai.shortfall ? kvt_shortfall_name(ai.shortfall) : NULL;
    set_reuse_stop(s, r, &ai.stop);
}

/* The exclusions, then every field of the report that the tokens taken
 * change, as the admission fills them. */
void kvt_srv_slot_attach_more(kvt_server *s, slot *sl) {
    srv_req *r = sl->r;
    /* not for: a resumed reply (its tokens are put back quietly, not a prompt's report), documents
     * placed approximately (the sequence holds KV no cold run computes, so exact blocks after it would
     * not be what the request asked for), an embedding pooled over the first or every token (it
     * computes them all) */
    if (sl->resume_to || sl->blend || r->approximate || r->embed == KVT_POOL_MEAN || r->embed == KVT_POOL_CLS) return;
    int32_t n_fed = sl->n_fed;
    if (n_fed % s->block || r->n_prompt / s->block <= n_fed / s->block) return; /* no whole block to take */
    /* where the chain has registered every block the sequence holds, its last key is the next block's
     * parent: one key says whether the cache gained it (a prompt alone, the common case, then costs no
     * walk over its whole prompt before each chunk) */
    const kvt_chain *ch = &sl->chain;
    if (ch->n_done != INT32_MAX && (int64_t)ch->n_done * s->block == n_fed &&
        !kvt_cache_has_next(s->cache, ch->last, r->prompt + n_fed))
        return;
    kvt_attach_info ai;
    uint8_t *tiers = NULL;
    int32_t n_tiers = 0;
    if (r->block_tiers) { /* RAG's per-block tiers: looked up just before the blocks are taken, as at admission */
        tiers = kvt_xmalloc((size_t)r->n_prompt / (size_t)s->block + 1);
        n_tiers = kvt_cache_block_tiers(s->cache, sl->chain.root, r->prompt, r->n_prompt - 1, tiers,
                                        r->n_prompt / s->block + 1);
    }
    int32_t add = kvt_cache_attach_more(s->cache, sl->chain.root, r->prompt, r->n_prompt, r->n_prompt - 1, sl->seq, &ai);
    if (add > 0 && tiers) {
        int32_t from = n_fed / s->block, to = KVT_MIN((n_fed + add + s->block - 1) / s->block, n_tiers);
        if (to > from) memcpy(r->block_tiers + from, tiers + from, (size_t)(to - from));
        r->n_block_tiers = KVT_MAX(r->n_block_tiers, to);
    }
    free(tiers);
    if (add <= 0) return;
    sl->n_fed = kvt_seq_len(s->e, sl->seq);
    sl->progress_from += add; /* the progress lines count computed tokens */
    /* the engine thread is the only writer of usage until done is set */
    kvt_api_usage *u = &r->usage;
    u->cached_tokens += add;
    for (int t = 0; t < KVT_TIER_COUNT; t++) u->tier_tokens[t] += ai.tier_tokens[t];
    u->computed_tokens -= add;
    u->late_cached_tokens += add;
    u->restore_ms += ai.restore_ms;
    u->planned_tokens += ai.n_planned;
    if (ai.shortfall && !u->shortfall) u->shortfall = kvt_shortfall_name(ai.shortfall);
    set_reuse_stop(s, r, &ai.stop);
    kvt_logk(KVT_LOG_INFO, "request_id,completion_id,cached_tokens,computed_tokens",
             "serve: %s (%s) takes %d more prompt tokens from the cache, computed since its admission: %d cached "
             "in all, %d to compute",
             kvt_srv_log_id(r), r->id, add, u->cached_tokens, r->n_prompt - sl->n_fed);
}

void kvt_srv_count_stop(kvt_server *s, slot *sl) {
    if (!sl->stop_open) return;
    sl->stop_open = 0;
    kvt_cache_count_stop(s->cache, sl->r->usage.reuse_stop.reason);
}

int kvt_srv_slot_resume(kvt_server *s, slot *sl) {
    srv_req *r = sl->r;
    int32_t n = sl->n_toks - 1, seq = -1;
    kvt_attach_info ai;
    if (kvt_cache_attach_quiet(s->cache, sl->chain.root, sl->toks, n, n, &seq, &ai)) return -1;
    sl->seq = seq;
    sl->parked = 0;
    /* registered again from its first block, as at admission: a block evicted while it was parked is
     * recomputed onto new pages, and those are the ones to index */
    kvt_chain_init(&sl->chain, sl->chain.root);
    sl->n_fed = kvt_seq_len(s->e, seq);
    sl->prefilling = sl->n_fed < n;
    sl->resume_to = sl->prefilling ? n : 0;
    /* the engine thread is the only writer of usage until done is set */
    r->usage.resumed_cached_tokens += sl->n_fed;
    r->usage.resumed_computed_tokens += n - sl->n_fed;
    r->usage.resume_ms += ai.restore_ms;
    kvt_metrics_count_resume(s->metrics, sl->n_fed, n - sl->n_fed);
    kvt_logk(KVT_LOG_INFO, "request_id,completion_id,cached_tokens,computed_tokens",
             "serve: %s (%s) resumes: %d of its %d tokens restored from the cache, %d to recompute", kvt_srv_log_id(r),
             r->id, sl->n_fed, n, n - sl->n_fed);
    return 0;
}

int kvt_srv_queue_head(kvt_server *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    /* not s->draining: r was taken before the drain, which lets it finish, and the engine admits from the
     * queue until the server stops */
    int ok = !s->stopping && !r->cancelled && s->q_len < s->p.queue;
    if (ok) { /* the admission's reference is the queue's again; only this thread admits, so it waits there */
        s->q_head = (s->q_head + s->p.queue - 1) % s->p.queue;
        s->queue[s->q_head] = r;
        s->q_len++;
        s->n_active -= 1 + r->n_sib;
        s->mem_hold = 1;
    }
    pthread_mutex_unlock(&s->mu);
    return ok ? 0 : -1;
}
