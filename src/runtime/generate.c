// SPDX-License-Identifier: MIT
/* kvt_generate: the request loop over the engine and the cache policy. */
#include "generate.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model.h"
#include "progress.h"

/* Prefills prompt[0..n) into seq, the last position's logits into logits.
 * With progress, in the engine's own n_batch chunks (the chunks
 * kvt_engine_decode would cut, so the same arithmetic) with a progress line. */
static int prefill(kvt_engine *e, int32_t seq, const int32_t *prompt, int32_t n, int progress, float *logits) {
    int32_t chunk = kvt_engine_params_of(e).n_batch;
    if (!progress || n < KVT_PREFILL_PROGRESS_TOKENS || chunk <= 0 || !kvt_progress_wanted())
        return kvt_engine_feed(e, seq, prompt, n, 0, logits);
    kvt_progress prog;
    kvt_progress_begin(&prog, "prefill", (uint64_t)n, "tokens");
    int rc = 0;
    int32_t done = 0;
    while (done < n && !rc) {
        int32_t m = KVT_MIN(chunk, n - done);
        rc = kvt_engine_feed(e, seq, prompt + done, m, 0, done + m == n ? logits : NULL);
        if (!rc) kvt_progress_update(&prog, (uint64_t)(done += m));
    }
    kvt_progress_end(&prog, (uint64_t)done);
    return rc;
}

/* The prompt's sequence: attached to the cache (its reused prefix restored,
 * the report in res) or, without a cache, empty. 0 or an error code. */
static int attach(kvt_engine *e, kvt_cache *cache, const int32_t *prompt, int32_t n_prompt, const kvt_gen_params *p,
                  kvt_gen_result *res, kvt_hash128 *root, int32_t *seq) {
    if (!cache) return kvt_seq_new(e, NULL, 0, 0, seq);
    kvt_attach_info ai;
    int rc = kvt_cache_root(cache, p->salt, p->salt_len, root);
    if (!rc) rc = kvt_cache_attach(cache, *root, prompt, n_prompt, n_prompt - 1, seq, &ai);
    if (rc) return rc;
    res->n_reused = ai.n_reused;
    memcpy(res->tier_tokens, ai.tier_tokens, sizeof res->tier_tokens);
    res->restore_ms = ai.restore_ms;
    res->t2_decision = ai.t2_decision;
    res->n_planned = ai.n_planned;
    res->shortfall = ai.shortfall;
    res->reuse_stop = ai.stop;
    return 0;
}

int kvt_generate(kvt_engine *e, kvt_cache *cache, const int32_t *prompt, int32_t n_prompt, const kvt_gen_params *p,
                 int32_t **tokens_out, kvt_gen_result *res) {
    memset(res, 0, sizeof *res);
    res->n_prompt = n_prompt;
    if (tokens_out) *tokens_out = NULL;
    kvt_engine_params ep = kvt_engine_params_of(e);
    const int32_t n_vocab = kvt_engine_n_vocab(e);
    if (n_prompt <= 0) return kvt_fail(KVT_EARG, "empty prompt");
    if (n_prompt >= ep.n_ctx)
        return kvt_fail(KVT_ELIMIT, "the prompt has %d tokens; the context holds %d", n_prompt, ep.n_ctx);
    double t_start = kvt_now();
    int32_t cap = KVT_MIN(ep.n_ctx, n_prompt + KVT_MAX(p->max_tokens, 0) + 1);
    int32_t *toks = kvt_xmalloc((size_t)cap * sizeof *toks);
    memcpy(toks, prompt, (size_t)n_prompt * sizeof *toks);
    int32_t n_toks = n_prompt;
    float *logits = kvt_xmalloc((size_t)n_vocab * sizeof *logits);
    kvt_hash128 root = {0, 0};
    int32_t seq = -1;
    kvt_chain chain;
    int rc = 0;

    if ((rc = attach(e, cache, prompt, n_prompt, p, res, &root, &seq))) goto out;
    kvt_chain_init(&chain, root);
    double t_blend = kvt_now();
    if (cache && p->blend &&
        (rc = kvt_blend(cache, root, seq, prompt, n_prompt, p->doc_starts, p->n_docs, &chain, p->blend, &res->blend)))
        goto out;
    double t_pre = kvt_now();
    int32_t start = kvt_seq_len(e, seq);
    res->n_computed = n_prompt - res->n_reused - (res->blend.n_placed - res->blend.n_recomputed);
    if (cache && (rc = kvt_cache_reserve(cache, kvt_seq_pages_needed(e, seq, n_prompt - start)))) goto out;
    if ((rc = prefill(e, seq, prompt + start, n_prompt - start, p->progress, logits))) goto out;
    res->prefill_ms = (kvt_now() - t_pre) * 1e3;
    if (cache) kvt_cache_note_prefill(cache, n_prompt - start, res->prefill_ms / 1e3);
    res->prefill_ms += (t_pre - t_blend) * 1e3;
    if (p->first_logits) memcpy(p->first_logits, logits, (size_t)n_vocab * sizeof *logits);
    if (cache) kvt_cache_commit(cache, seq, toks, &chain);

    double t_dec = kvt_now();
    res->stop = KVT_STOP_LENGTH;
    for (int32_t i = 0; i < p->max_tokens; i++) {
        int32_t tok = kvt_sampler_sample(p->sampler, logits);
        if (i == 0) res->ttft_ms = (kvt_now() - t_start) * 1e3;
        if (p->tok && (kvt_tokenizer_is_eog(p->tok, tok) || tok == kvt_tokenizer_eos(p->tok))) {
            res->stop = KVT_STOP_EOG;
            break;
        }
        toks[n_toks++] = tok;
        res->n_generated++;
        if (p->on_token && p->on_token(p->ctx, tok)) {
            res->stop = KVT_STOP_CALLER;
            break;
        }
        if (i + 1 == p->max_tokens) break;
        if (kvt_seq_len(e, seq) + 1 >= ep.n_ctx) {
            res->stop = KVT_STOP_CTX;
            break;
        }
        if (cache && (rc = kvt_cache_reserve(cache, kvt_seq_pages_needed(e, seq, 1)))) break;
        if ((rc = kvt_engine_feed(e, seq, &tok, 1, 0, logits))) break;
        if (cache) kvt_cache_commit(cache, seq, toks, &chain);
    }
    res->decode_ms = (kvt_now() - t_dec) * 1e3;
out:
    if (seq >= 0) kvt_seq_free(e, seq);
    free(logits);
    if (!rc && tokens_out) *tokens_out = toks;
    else free(toks);
    return rc;
}

kvt_request kvt_request_default_params(void) {
    kvt_sampler_params sp = kvt_sampler_default_params();
    kvt_request r = {.max_tokens = 128,
                     .temp = sp.temp,
                     .top_k = sp.top_k,
                     .top_p = sp.top_p,
                     .seed = sp.seed,
                     .reuse = KVT_REUSE_MODE_EXACT,
                     .recompute_ratio = KVT_DEFAULT_RECOMPUTE_RATIO};
    return r;
}

/* kvt_complete's checks of a request's reuse fields (kvtier.h), each error naming its field. */
static int check_reuse(const kvt_request *req, int32_t n_prompt) {
    if (req->reuse != KVT_REUSE_MODE_EXACT && req->reuse != KVT_REUSE_MODE_APPROXIMATE)
        return kvt_fail(KVT_EARG,
                        "kvt_request.reuse: %d is not a kvt_reuse_mode (KVT_REUSE_MODE_EXACT or "
                        "KVT_REUSE_MODE_APPROXIMATE)",
                        (int)req->reuse);
    if (req->reuse == KVT_REUSE_MODE_EXACT) return 0;
    if (!(req->recompute_ratio >= 0.0f && req->recompute_ratio <= 1.0f))
        return kvt_fail(KVT_EARG, "kvt_request.recompute_ratio: %g is outside [0, 1]", (double)req->recompute_ratio);
    if (!req->doc_starts || req->n_docs == 0)
        return kvt_fail(KVT_EARG,
                        "kvt_request.doc_starts: approximate reuse needs the documents' spans "
                        "(kvt_render_documents_spans)");
    for (size_t i = 0; i <= req->n_docs; i++)
        if ((i && req->doc_starts[i] < req->doc_starts[i - 1]) || req->doc_starts[i] > (size_t)KVT_MAX(n_prompt, 0))
            return kvt_fail(KVT_EARG,
                            "kvt_request.doc_starts: entry %zu (%zu) is not ascending within the prompt's "
                            "%d tokens",
                            i, req->doc_starts[i], n_prompt);
    return 0;
}

int kvt_complete(kvt_cache *c, const int32_t *prompt, int32_t n_prompt, const kvt_request *req, int32_t **tokens_out,
                 kvt_request_stats *stats) {
    kvt_engine *e = kvt_cache_engine(c);
    int rc = check_reuse(req, n_prompt);
    if (rc) return rc;
    kvt_sampler_params sp = {.temp = req->temp, .top_k = req->top_k, .top_p = req->top_p, .seed = req->seed};
    kvt_sampler *s = kvt_sampler_new(sp, kvt_engine_n_vocab(e));
    if (!s) return kvt_fail(KVT_EARG, "bad sampling parameters");
    kvt_gen_params gp = {.max_tokens = req->max_tokens,
                         .sampler = s,
                         .tok = kvt_engine_model(e)->tok,
                         .on_token = req->on_token,
                         .ctx = req->ctx,
                         .salt = req->salt,
                         .salt_len = req->salt_len};
    kvt_blend_params bp = kvt_blend_default_params();
    if (req->reuse == KVT_REUSE_MODE_APPROXIMATE) {
        bp.ratio = req->recompute_ratio;
        gp.blend = &bp;
        gp.doc_starts = req->doc_starts;
        gp.n_docs = req->n_docs;
    }
    kvt_gen_result r;
    rc = kvt_generate(e, c, prompt, n_prompt, &gp, tokens_out, &r);
    kvt_sampler_free(s);
    if (stats) {
        memset(stats, 0, sizeof *stats);
        stats->n_prompt = r.n_prompt;
        stats->n_cached = r.n_reused;
        memcpy(stats->tier_tokens, r.tier_tokens, sizeof stats->tier_tokens);
        stats->n_computed = r.n_computed;
        stats->n_generated = r.n_generated;
        stats->restore_ms = r.restore_ms;
        stats->prefill_ms = r.prefill_ms;
        stats->ttft_ms = r.ttft_ms;
        stats->decode_ms = r.decode_ms;
        stats->t2_recomputed = r.t2_decision == KVT_T2_RECOMPUTE;
        stats->n_planned = r.n_planned;
        stats->shortfall = r.shortfall;
        stats->reuse_stop = r.reuse_stop;
        stats->n_docs_placed = r.blend.n_docs;
        stats->n_approximate = r.blend.n_placed - r.blend.n_recomputed;
        stats->n_recomputed = r.blend.n_recomputed;
        stats->n_stored = r.blend.n_stored;
    }
    return rc;
}
