// SPDX-License-Identifier: MIT
/* The continuous-batching step (engine thread): one batch of a decode token
 * per generating slot plus a prefill chunk of the oldest prompting one, then
 * each sampled token: grammar mask, end-of-generation, logprobs, stop
 * strings, limits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "scheduler.h"
#include "server_impl.h"

/* The tokens a prefilling slot's sequence is to hold: its prompt, or after
 * it was parked, all its tokens but the pending one. */
static int32_t feed_target(const slot *sl) { return sl->resume_to ? sl->resume_to : sl->r->n_prompt; }

/* Where a stop string starts in the unemitted text, or -1; *which gets that
 * string's index, and *hold how many trailing bytes could still begin a stop
 * string. */
static long find_stop(const slot *sl, int *which, size_t *hold) {
    const srv_req *r = sl->r;
    const char *t = sl->raw + sl->raw_emitted;
    size_t n = sl->raw_len - sl->raw_emitted;
    long best = -1;
    *hold = 0;
    for (int i = 0; i < r->n_stop; i++) {
        size_t sn = strlen(r->stop[i]);
        const char *hit = memmem(t, n, r->stop[i], sn);
        if (hit && (best < 0 || hit - t < best)) {
            best = hit - t;
            *which = i;
        }
        for (size_t k = KVT_MIN(sn - 1, n); k > *hold; k--)
            if (!memcmp(t + n - k, r->stop[i], k)) {
                *hold = k;
                break;
            }
    }
    return best;
}

/* The logits with every token the grammar refuses at -inf (s->jg_logits), or
 * NULL when none may come: the text is complete (a grammar that matches only
 * "", or one whose text can go no further), or it cannot go on within the
 * budget. */
static const float *grammar_logits(kvt_server *s, slot *sl, const float *logits) {
    int32_t budget = sl->r->max_tokens - sl->n_gen;
    if (!kvt_jg_mask(sl->jg, budget, s->jg_mask)) return NULL;
    for (int32_t i = 0; i < s->n_vocab; i++) s->jg_logits[i] = s->jg_mask[i] ? logits[i] : -INFINITY;
    return s->jg_logits;
}

/* The logits under a lazy grammar: before its trigger the model's own, but for
 * the few tokens that would complete the trigger with text the grammar
 * refuses (then a copy in s->jg_logits); once on, as grammar_logits. */
static const float *lazy_logits(kvt_server *s, slot *sl, const float *logits) {
    if (kvt_jg_lazy_on(sl->lz)) {
        if (!kvt_jg_lazy_mask(sl->lz, sl->r->max_tokens - sl->n_gen, s->jg_mask)) return NULL;
        for (int32_t i = 0; i < s->n_vocab; i++) s->jg_logits[i] = s->jg_mask[i] ? logits[i] : -INFINITY;
        return s->jg_logits;
    }
    int32_t n = kvt_jg_lazy_refused(sl->lz, s->jg_refused, s->n_vocab);
    if (!n) return logits;
    memcpy(s->jg_logits, logits, (size_t)s->n_vocab * sizeof *logits);
    for (int32_t i = 0; i < n; i++) s->jg_logits[s->jg_refused[i]] = -INFINITY;
    return s->jg_logits;
}

/* The text may end here under the slot's grammar (or it has none). */
static int grammar_can_end(const slot *sl) {
    return sl->jg ? kvt_jg_can_end(sl->jg) : sl->lz ? kvt_jg_lazy_can_end(sl->lz) : 1;
}

/* Advances the slot's grammar past tok: 0, or nonzero where it refuses it. */
static int grammar_accept(slot *sl, int32_t tok) {
    return sl->jg ? kvt_jg_accept(sl->jg, tok) : sl->lz ? kvt_jg_lazy_accept(sl->lz, tok) : 0;
}

/* Appends generated id tok to r->gen_ids (return_tokens), under s->mu for the handler that streams them. */
static void publish_id(kvt_server *s, srv_req *r, int32_t tok) {
    pthread_mutex_lock(&s->mu);
    if (r->n_gen_ids == r->cap_gen_ids) {
        r->cap_gen_ids = r->cap_gen_ids ? 2 * r->cap_gen_ids : LOGPROBS_INIT;
        r->gen_ids = kvt_xrealloc(r->gen_ids, r->cap_gen_ids * sizeof *r->gen_ids);
    }
    r->gen_ids[r->n_gen_ids++] = tok;
    pthread_mutex_unlock(&s->mu);
}

/* llama-server's code-completion limits, which apply once an earlier token's text held a newline: past
 * t_max_predict_ms since the first token the reply ends after this one; with n_indent, a line after a
 * newline whose first character other than a space or tab (a newline too) comes after fewer of them ends
 * the reply before that character. Returns where the reply is cut, or -1 to go on; then notes whether this
 * token (from raw offset from) held a newline. */
static long line_limits(slot *sl, size_t from) {
    const srv_req *r = sl->r;
    long cut = -1;
    if (sl->had_newline && r->t_max_predict_ms > 0 && (kvt_now() - sl->t_first_token) * 1e3 > r->t_max_predict_ms)
        cut = (long)sl->raw_len;
    for (size_t p = sl->line_scan; r->n_indent > 0 && cut < 0;) {
        if (sl->line_open) {
            size_t q = sl->line_start;
            while (q < sl->raw_len && (sl->raw[q] == ' ' || sl->raw[q] == '\t')) q++;
            if (q == sl->raw_len) break; /* only its indent so far */
            if (q - sl->line_start < (size_t)r->n_indent) cut = (long)q;
            sl->line_open = 0;
            p = q;
        }
        const char *nl = p < sl->raw_len ? memchr(sl->raw + p, '\n', sl->raw_len - p) : NULL;
        sl->line_scan = nl ? (size_t)(nl - sl->raw) + 1 : sl->raw_len;
        if (!nl) break;
        sl->line_open = 1;
        sl->line_start = p = sl->line_scan;
    }
    if (from < sl->raw_len && memchr(sl->raw + from, '\n', sl->raw_len - from)) sl->had_newline = 1;
    return cut;
}

/* A token was sampled: the time to the first one, or since the last one. */
static void token_times(kvt_server *s, slot *sl) {
    double now = kvt_now();
    if (sl->n_gen == 0) {
        double ttft = now - sl->r->t_arrival;
        sl->r->usage.ttft_ms = ttft * 1e3;
        sl->t_first_token = now;
        kvt_metrics_observe_ttft(s->metrics, ttft);
    } else {
        kvt_metrics_observe_inter_token(s->metrics, now - sl->t_last_token);
    }
    sl->t_last_token = now;
}

/* Handles one sampled token of a slot; may finish the slot. */
static void slot_on_logits(kvt_server *s, slot *sl, const float *logits) {
    srv_req *r = sl->r;
    const float *allowed = sl->jg ? grammar_logits(s, sl, logits) : sl->lz ? lazy_logits(s, sl, logits) : logits;
    if (!allowed) {
        /* where the grammar may end here, only the end of generation was left (as in llama-server, where
         * it is the one legal token): the reply is complete, so "stop", even before its first token */
        kvt_srv_slot_finish(s, sl, grammar_can_end(sl) ? "stop" : "length", sl->raw_len, 0, NULL);
        return;
    }
    int32_t tok = kvt_sampler_sample(sl->smp, allowed);
    int held = sl->jg || (sl->lz && kvt_jg_lazy_on(sl->lz)); /* a grammar decides where the text may end */
    if (grammar_accept(sl, tok)) {                           /* cannot happen: the sampler picks among the allowed */
        kvt_srv_slot_finish(s, sl, NULL, 0, 500, "constrained decoding picked a token the grammar refuses");
        return;
    }
    token_times(s, sl);
    if ((!r->ignore_eos || held) && (kvt_tokenizer_is_eog(s->tok, tok) || tok == kvt_tokenizer_eos(s->tok))) {
        kvt_srv_slot_finish(s, sl, "stop", sl->raw_len, 0, NULL);
        return;
    }
    if (r->logprobs) {
        /* from the logits the sampler just saw: the model's distribution, before temperature and filters */
        kvt_api_logprob e = {.id = tok, .n_top = r->top_logprobs};
        kvt_logprobs(logits, s->n_vocab, tok, KVT_MIN(r->top_logprobs, s->n_vocab), &e.logprob, e.top_id, e.top_logprob);
        pthread_mutex_lock(&s->mu);
        if (r->lp_ready == r->cap_lp) {
            r->cap_lp = r->cap_lp ? 2 * r->cap_lp : LOGPROBS_INIT;
            r->lp = kvt_xrealloc(r->lp, r->cap_lp * sizeof *r->lp);
        }
        r->lp[r->lp_ready++] = e; /* published with its text (kvt_srv_slot_emit) */
        pthread_mutex_unlock(&s->mu);
    }
    if (r->return_tokens) publish_id(s, r, tok);
    sl->toks[sl->n_toks++] = tok;
    char small[PIECE_INIT];
    int trigger = tok == sl->lazy_tok && sl->lz; /* the control token of the call opening is read as its text */
    int len = kvt_token_piece(s->tok, tok, small, sizeof small, trigger);
    if (len < 0) len = 0;
    if (sl->raw_len + (size_t)len > sl->raw_cap) {
        sl->raw_cap = KVT_MAX(sl->raw_cap * 2, sl->raw_len + (size_t)len);
        sl->raw = kvt_xrealloc(sl->raw, sl->raw_cap);
    }
    if ((size_t)len <= sizeof small) memcpy(sl->raw + sl->raw_len, small, (size_t)len);
    else kvt_token_piece(s->tok, tok, sl->raw + sl->raw_len, (size_t)len, trigger);
    sl->raw_len += (size_t)len;
    sl->tok_end[sl->n_gen++] = sl->raw_len;

    size_t hold;
    int which = 0;
    long stop = find_stop(sl, &which, &hold);
    if (stop >= 0) {
        r->stop_word = which + 1; /* read by the handler once done is published */
        kvt_srv_slot_finish(s, sl, "stop", sl->raw_emitted + (size_t)stop, 0, NULL);
        return;
    }
    long limit = r->n_indent > 0 || r->t_max_predict_ms > 0 ? line_limits(sl, sl->raw_len - (size_t)len) : -1;
    if (limit >= 0) { /* llama-server's "limit" stop */
        kvt_srv_slot_finish(s, sl, "length", KVT_MAX((size_t)limit, sl->raw_emitted), 0, NULL);
        return;
    }
    kvt_srv_slot_emit(s, sl, sl->raw_len - hold, 0);
    if ((sl->jg && kvt_jg_done(sl->jg)) || (sl->lz && kvt_jg_lazy_done(sl->lz))) {
        /* the document is complete: nothing may follow it */
        kvt_srv_slot_finish(s, sl, "stop", sl->raw_len, 0, NULL);
        return;
    }
    /* the next step feeds tok: the sequence would then hold n_toks tokens */
    if (sl->n_gen >= r->max_tokens || sl->n_toks >= s->n_ctx) {
        kvt_srv_slot_finish(s, sl, "length", sl->raw_len, 0, NULL);
        return;
    }
    sl->pending = tok;
}

/* After a step's batch was decoded (in ms): its completed blocks registered,
 * then each generating slot's logits handled, and the prefilling slot pf
 * (chunk more tokens fed, or NULL) finished (a prefill-only request) or
 * turned generating with its forked choices once its prompt is in. */
static void after_decode(kvt_server *s, slot **dec, int32_t n_dec, slot *pf, int32_t chunk, double ms) {
    /* register completed blocks before any slot is finished and its sequence freed */
    for (int32_t i = 0; i < n_dec; i++) kvt_cache_commit(s->cache, dec[i]->seq, dec[i]->toks, &dec[i]->chain);
    int resumed = pf && pf->resume_to;
    if (pf) {
        pf->n_fed += chunk;
        if (resumed) pf->r->usage.resume_ms += ms;
        else pf->r->usage.prefill_ms += ms;
        if (!n_dec) kvt_cache_note_prefill(s->cache, chunk, ms / 1e3); /* a pure prefill step: a clean sample */
        kvt_cache_commit(s->cache, pf->seq, pf->toks, &pf->chain);
        if (!resumed) kvt_srv_prefill_progress(pf, 0);
        if (!resumed && pf->n_fed == pf->r->n_prompt) {
            kvt_srv_log_prefill(pf->r, pf->r->usage.computed_tokens, 0, 1);
            kvt_srv_count_stop(s, pf); /* its reuse is final */
        }
    }
    for (int32_t i = 0; i < n_dec; i++) slot_on_logits(s, dec[i], s->logits + (size_t)i * (size_t)s->n_vocab);
    if (resumed && pf->n_fed == pf->resume_to) {
        /* its tokens are back: it generates on from its pending token, sampler and grammar as they were */
        pf->prefilling = 0;
        pf->resume_to = 0;
    } else if (resumed) {
        /* more of its tokens to put back */
    } else if (pf && pf->n_fed == pf->r->n_prompt && pf->r->prefill_only) {
        /* /v1/cache/prefill: the prompt's blocks are committed; nothing to generate */
        pf->r->usage.ttft_ms = (kvt_now() - pf->r->t_arrival) * 1e3;
        kvt_srv_slot_finish(s, pf, "prefill", 0, 0, NULL);
    } else if (pf && pf->n_fed == pf->r->n_prompt) {
        /* n > 1: the other choices share this prompt's pages and its last logits, each with its own sampler */
        slot **forks = s->step_forks;
        int32_t n_forks = kvt_srv_fork_choices(s, pf, forks);
        const float *row = s->logits + (size_t)n_dec * (size_t)s->n_vocab;
        pf->prefilling = 0;
        slot_on_logits(s, pf, row);
        for (int32_t i = 0; i < n_forks; i++) slot_on_logits(s, forks[i], row);
    }
}

/* One chunk of the documents slot bl places (approximate reuse: kvt_blend_job)
 * after n_dec decode tokens of the others; when the last is placed, its
 * report is filled and its prefill goes on from the end of the last placed
 * document in the next steps. */
static void blend_step(kvt_server *s, slot *bl, int32_t n_dec) {
    srv_req *r = bl->r;
    bl->blend_decoded += n_dec;
    int rc = kvt_blend_step(bl->blend, &bl->chain, s->p.prefill_chunk);
    if (rc < 0) {
        kvt_logk(KVT_LOG_WARN, "request_id,completion_id,error", "serve: cannot place the documents of %s (%s): %s",
                 kvt_srv_log_id(r), r->id, kvt_errmsg());
        kvt_srv_slot_finish(s, bl, NULL, 0, 503, "no KV memory is available to place the documents; retry later");
        return;
    }
    if (rc > 0) return;
    const kvt_blend_result *br = kvt_blend_job_result(bl->blend);
    /* the engine thread is the only writer of usage until done is set */
    r->usage.computed_tokens -= br->n_placed - br->n_recomputed;
    r->usage.approximate_tokens = br->n_placed - br->n_recomputed;
    r->usage.recomputed_tokens = br->n_recomputed;
    r->usage.stored_tokens = br->n_stored;
    r->usage.approximate_documents = br->n_docs;
    r->usage.approximate_steps = br->steps;
    r->usage.approximate_interleaved = bl->blend_decoded;
    r->usage.prefill_ms += br->ms;
    kvt_blend_job_free(bl->blend);
    bl->blend = NULL;
    bl->n_fed = kvt_seq_len(s->e, bl->seq);
}

/* Marks in s->b_hid the rows from..from+chunk of the prompting slot pf that
 * its embedding pools (every one, the last or the first); returns how many. */
static int32_t embed_rows(kvt_server *s, const slot *pf, int32_t from, int32_t chunk) {
    int32_t n = 0;
    memset(s->b_hid, 0, (size_t)from); /* the decode rows before it */
    for (int32_t k = 0; k < chunk; k++) {
        int32_t pos = pf->n_fed + k;
        int want = pf->r->embed == KVT_POOL_MEAN || (pf->r->embed == KVT_POOL_LAST && pos == pf->r->n_prompt - 1) ||
            (pf->r->embed == KVT_POOL_CLS && pos == 0);
        s->b_hid[from + k] = (int8_t)want;
        n += want;
    }
    return n;
}

/* Adds the n pooled hidden rows of the step to the embedding's sum, in token order. */
static void embed_add(kvt_server *s, srv_req *r, int32_t n) {
    const int64_t D = s->model->hp.n_embd;
    if (!r->embed_sum) r->embed_sum = kvt_xcalloc((size_t)D, sizeof *r->embed_sum);
    for (int32_t i = 0; i < n; i++)
        for (int64_t d = 0; d < D; d++) r->embed_sum[d] += s->hidden[i * D + d];
}

/* Whether slot sl's request can give way by going back to the queue: a
 * prompt not yet generating, with none of the state that its admission made
 * and a second admission would make again (RAG's document order and tiers,
 * documents being placed). */
static int can_requeue(const slot *sl) {
    const srv_req *r = sl->r;
    return sl->prefilling && !sl->resume_to && !sl->blend && !r->doc_order && !r->block_tiers && !r->approximate;
}

/* Whether slot sl generates: past its prompt, or putting its tokens back
 * after it was parked. */
static int generating(const slot *sl) { return !sl->prefilling || sl->resume_to; }

/* Whether slot sl's request can give way by parking: it is generating, so
 * all it holds is its tokens, sampler and grammar, and a sequence made again
 * from its cached blocks holds the same KV. Not with approximate reuse: the
 * KV of its placed documents is in no cache (it is not what a cold run
 * computes), so a resume would recompute it exactly and the rest of the reply
 * would change. Nor a test's held reply: it generates no more. */
static int can_park(const slot *sl) { return generating(sl) && !sl->r->approximate && !sl->held; }

/* The kvtier.priority of slot sl's request (a choice other than the first:
 * its first's, which holds the session). */
static int priority_of(const slot *sl) {
    const srv_req *r = sl->r->is_sib ? sl->r->first : sl->r;
    return r->session.priority;
}

/* Whether generating slot a pauses before b: the lower priority, then the
 * younger. */
static int pauses_first(const slot *a, const slot *b) {
    int pa = priority_of(a), pb = priority_of(b);
    return pa != pb ? pa < pb : a->admitted > b->admitted;
}

/* When a step finds no pages: the slots that hold pages or that the step
 * needed pages for (in), how many (*holders), and the one that gives way:
 * the youngest prompt not yet generating that can go back to the queue
 * (can_requeue), else a generating one (can_park: the lowest priority, the
 * youngest of those), else the youngest of them all. Every slot with pages
 * counts, not only those in the step: a prompt admitted after the one being
 * prefilled holds the cached prefix its admission restored, so an older
 * prompt never ends for the pages a younger one took. A choice waiting for
 * its fork holds none. */
static slot *pool_victim(kvt_server *s, slot *const *in, int32_t n_in, int32_t *holders) {
    slot *victim = NULL, *prompt = NULL, *gen = NULL;
    *holders = 0;
    for (int32_t i = 0; i < s->p.parallel; i++) {
        slot *sl = &s->slots[i];
        if (!sl->r || sl->waiting || sl->seq < 0) continue;
        int32_t np = 0;
        int stepped = 0;
        for (int32_t k = 0; k < n_in && !stepped; k++) stepped = in[k] == sl;
        if (!stepped) kvt_seq_pages(s->e, sl->seq, &np);
        if (!stepped && np == 0) continue;
        (*holders)++;
        if (!victim || sl->admitted > victim->admitted) victim = sl;
        if (can_requeue(sl) && (!prompt || sl->admitted > prompt->admitted)) prompt = sl;
        if (can_park(sl) && (!gen || pauses_first(sl, gen))) gen = sl;
    }
    if (*holders > 1 && prompt) return prompt;
    return *holders > 1 && gen ? gen : victim;
}

/* Puts the request of slot sl, a prompt that gives way for want of pages,
 * back at the head of the queue: its sequence is freed, so the blocks it
 * computed stay cached as idle pages (they move down a tier, not out, when
 * pages are needed, and its next admission restores them), its other
 * choices' slots are freed too, and nothing is admitted until a running
 * request ends. 0, or -1 with nothing changed when the queue cannot take it
 * (full, or the server stopping) or the client went away. */
static int requeue(kvt_server *s, slot *sl) {
    srv_req *r = sl->r;
    const int32_t idx = (int32_t)(sl - s->slots);
    if (kvt_srv_queue_head(s, r)) return -1;
    kvt_logk(KVT_LOG_INFO, "request_id,completion_id",
             "serve: no KV pages left: %s (%s) goes back to the queue "
             "until a running request ends",
             kvt_srv_log_id(r), r->id);
    for (int32_t j = 0; j < s->p.parallel; j++) {
        slot *w = &s->slots[j];
        if (w->r && w->waiting && w->fork_of == idx) kvt_srv_slot_clear(s, w);
    }
    sl->stop_open = 0; /* its next admission explains and counts its reuse again */
    kvt_srv_slot_clear(s, sl);
    /* an embedding starts its sum again: the next admission feeds the rows it pools once more (the
     * engine thread owns the sum until done) */
    free(r->embed_sum);
    r->embed_sum = NULL;
    return 0;
}

/* Parks generating slot sl, which gives way for want of pages: its sequence
 * is freed, so the blocks it completed stay cached as idle pages (moving down
 * a tier, not out, when pages are needed), and the rest of its state stays
 * in the slot; kvt_srv_resume_parked puts its tokens back when pages free
 * up, and its reply goes on as if nothing happened. Nothing is admitted from
 * the queue meanwhile. */
static void park(kvt_server *s, slot *sl) {
    srv_req *r = sl->r;
    kvt_logk(KVT_LOG_INFO, "request_id,completion_id,tokens",
             "serve: no KV pages left: %s (%s) pauses after %d generated tokens until pages free up", kvt_srv_log_id(r),
             r->id, sl->n_gen);
    kvt_seq_free(s->e, sl->seq);
    sl->seq = -1;
    sl->parked = 1;
    sl->prefilling = 0;
    sl->resume_to = 0;
    r->usage.preemptions++; /* the engine thread is the only writer of usage until done is set */
    kvt_metrics_count_preemption(s->metrics);
    pthread_mutex_lock(&s->mu);
    s->mem_hold = 1;
    pthread_mutex_unlock(&s->mu);
}

/* Makes room when the pool had no pages left for a step, through victim
 * (pool_victim): a prompt not yet generating goes back to the queue to run
 * when a running request ends; a generating one pauses (park) until pages
 * free up; any other (a RAG prompt placing its documents, an approximate
 * reuse reply) ends with a 503 to retry. Alone, it never fits: its prompt is a 400 naming --kv-active, and a
 * reply that filled the pool ends as at n_ctx. */
static void pool_exhausted(kvt_server *s, slot *victim, int32_t holders) {
    if (holders > 1 && can_requeue(victim) && !requeue(s, victim)) return;
    if (holders > 1 && can_park(victim)) {
        park(s, victim);
        return;
    }
    kvt_logk(KVT_LOG_WARN, "request_id,completion_id,error", "serve: KV memory exhausted, ending %s (%s): %s",
             kvt_srv_log_id(victim->r), victim->r->id, kvt_errmsg());
    if (holders == 1 && generating(victim)) {
        kvt_srv_slot_finish(s, victim, "length", victim->raw_len, 0, NULL);
    } else if (holders == 1) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "this prompt of %d tokens needs more KV memory than --kv-active leaves it (%d tokens in "
                 "all, pinned prefixes included); shorten it or start the server with a larger --kv-active",
                 victim->r->n_prompt, kvt_engine_params_of(s->e).n_pages * s->block);
        kvt_srv_slot_finish(s, victim, NULL, 0, 400, msg);
    } else {
        kvt_srv_slot_finish(s, victim, NULL, 0, 503, "the KV cache memory (--kv-active) is exhausted; retry later");
    }
}

/* Ends every request of a step the engine failed (its sequences are back at
 * their lengths before it) with a 500 that names the engine's reason. A lost
 * GPU fails every later step too: the server says so once in its log and
 * from then on in /health (503), so a router or load balancer stops sending
 * it requests until it is restarted. */
static void decode_failed(kvt_server *s, slot **dec, int32_t n_dec, slot *pf) {
    char msg[256];
    snprintf(msg, sizeof msg, "the engine failed: %s", kvt_errmsg());
    kvt_logk(KVT_LOG_ERROR, "error", "serve: decode failed: %s", kvt_errmsg());
    if (kvt_engine_device_lost(s->e)) {
        pthread_mutex_lock(&s->mu);
        int first = !s->device_lost;
        s->device_lost = 1;
        pthread_mutex_unlock(&s->mu);
        if (first)
            kvt_logk(KVT_LOG_ERROR, "device",
                     "serve: the GPU (%s) was lost: every request fails until the server "
                     "is restarted, and /health answers 503",
                     kvt_engine_device_name(s->e));
    }
    for (int32_t i = 0; i < n_dec; i++) kvt_srv_slot_finish(s, dec[i], NULL, 0, 500, msg);
    if (pf) kvt_srv_slot_finish(s, pf, NULL, 0, 500, msg);
}

/* One engine step: a decode token of every generating slot plus one prefill
 * chunk of the oldest prompting slot, in one batch (or, while that slot
 * places documents, a chunk of that after the batch). */
void kvt_srv_engine_step(kvt_server *s) {
    const int32_t P = s->p.parallel;
    int32_t n = 0, pages = 0;
    slot **dec = s->step_dec;
    int32_t n_dec = 0;
    slot *pf = NULL;
    for (int32_t i = 0; i < P; i++) {
        slot *sl = &s->slots[i];
        if (!sl->r || sl->waiting || sl->parked || sl->held) continue;
        if (!sl->prefilling) {
            dec[n_dec++] = sl;
            s->b_tok[n] = sl->pending;
            s->b_seq[n] = sl->seq;
            s->b_want[n] = 1;
            n++;
            pages += kvt_seq_pages_needed(s->e, sl->seq, 1);
        } else if (!pf || sl->admitted < pf->admitted) {
            pf = sl;
        }
    }
    if (!n_dec && !pf) {
        /* every busy slot is a test's held reply (or parked behind one): nothing to compute until a
         * client leaves or a request comes, which signal engine_cv; bounded, for a signal sent before
         * the wait began */
        pthread_mutex_lock(&s->mu);
        kvt_srv_cond_wait_ms(&s->engine_cv, &s->mu, HELD_WAIT_MS);
        pthread_mutex_unlock(&s->mu);
        return;
    }
    slot *bl = pf && pf->blend ? pf : NULL;
    if (bl) pf = NULL;
    int32_t chunk = 0, pf_pages = 0;
    if (pf) {
        kvt_srv_slot_attach_more(s, pf); /* what the cache gained since its admission, it need not compute */
        chunk = KVT_MIN(feed_target(pf) - pf->n_fed, s->p.prefill_chunk);
        pf_pages = kvt_seq_pages_needed(s->e, pf->seq, chunk);
    }
    int rc = kvt_cache_reserve(s->cache, pages + pf_pages);
    if (rc && pf && n_dec) {
        /* no room for the prompt chunk: let the generating sequences go on, they free pages when done */
        pf = NULL;
        rc = kvt_cache_reserve(s->cache, pages);
    }
    if (rc) {
        /* not even one step fits: one sequence holding pages gives way so the others can go on */
        int32_t holders, n_in = n_dec;
        if (pf) dec[n_in++] = pf; /* the slots the step needed pages for (dec has one entry per slot) */
        slot *victim = pool_victim(s, dec, n_in, &holders);
        pool_exhausted(s, victim, holders);
        return;
    }
    if (pf) {
        for (int32_t k = 0; k < chunk; k++) {
            s->b_tok[n] = pf->toks[pf->n_fed + k];
            s->b_seq[n] = pf->seq;
            s->b_want[n] = 0;
            n++;
        }
        if (!pf->resume_to && pf->n_fed + chunk == pf->r->n_prompt) s->b_want[n - 1] = !pf->r->embed;
    }
    int32_t n_hid = pf && pf->r->embed ? embed_rows(s, pf, n - chunk, chunk) : 0;
    kvt_batch batch = {.n = n,
                       .token = s->b_tok,
                       .seq = s->b_seq,
                       .want_logits = s->b_want,
                       .want_hidden = n_hid ? s->b_hid : NULL,
                       .hidden = s->hidden};
    double t0 = kvt_now();
    rc = n ? kvt_engine_decode(s->e, &batch, s->logits) : 0;
    double ms = (kvt_now() - t0) * 1e3;
    if (rc) {
        decode_failed(s, dec, n_dec, pf);
        return;
    }
    if (n_hid) embed_add(s, pf->r, n_hid);
    kvt_metrics_count_decode(s->metrics, n_dec + (pf ? 1 : 0));
    after_decode(s, dec, n_dec, pf, chunk, ms);
    if (bl) blend_step(s, bl, n_dec);
}
