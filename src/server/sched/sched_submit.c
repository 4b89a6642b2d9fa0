// SPDX-License-Identifier: MIT
/* Building the engine-side request (srv_req) from a parsed API request: the
 * tenant salt, the prompt (chat rendering with remembered replies, documents),
 * limits and sampling; the extra choices of n > 1; the X-Session-Id header;
 * and a request's life on the handler's side: queueing, cancelling, waiting
 * for its choices, dropping references. The engine thread's side is in
 * scheduler.c. */
#include "server_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "common.h"
#include "generate.h" /* KVT_PREFILL_PROGRESS_TOKENS */

typedef struct {
    kvt_server *s;
    const void *salt;
    size_t salt_len;
    const kvt_api_request *a;
    srv_req *r;
    size_t next; /* where in a's messages the next assistant message looked up is searched from */
} lookup_ctx;

/* Why the built-in rendering of assistant message i of l->a, whose rendered
 * text is text, is not a reply this server generated, in the words the
 * --jinja path uses: "tool_calls" (its calls are not ones this server
 * generated, or the client changed them), "reasoning_dropped" (the reply had
 * reasoning, and the family renders its answer without it, or the client did
 * not send reasoning_content back), "rewritten" (the client sent the reply
 * back as generated, and the family renders it otherwise) or "unknown_reply". */
static const char *splice_miss(lookup_ctx *l, size_t i, const char *text) {
    const kvt_api_request *a = l->a;
    const kvt_api_msg_tools *mt = a->msg_tools ? &a->msg_tools[i] : NULL;
    if (mt && mt->tool_calls) return "tool_calls";
    kvt_reply_owner o = {l->salt, l->salt_len, l->r->session.session_id};
    char *full = NULL;
    int32_t *ids = NULL;
    size_t k = *text ? kvt_reply_map_get_split_by(l->s->replies, &o, NULL, text, &full, &ids) : 0;
    const char *c = a->msgs[i].content ? a->msgs[i].content : "";
    if (!k && mt && mt->reasoning && *c)
        k = kvt_reply_map_get_split_by(l->s->replies, &o, mt->reasoning, c, &full, &ids);
    const char *why = k ? "reasoning_dropped" : NULL;
    free(full);
    free(ids);
    ids = NULL;
    if (!why && *c && strcmp(c, text) && kvt_reply_map_get_by(l->s->replies, &o, c, &ids)) why = "rewritten";
    free(ids);
    return why ? why : "unknown_reply";
}

/* The built-in renderings look up each assistant message once, in order: the
 * first one that is not spliced goes to the request's report. */
static size_t reply_lookup(void *ctx, const char *text, int32_t **ids) {
    lookup_ctx *l = ctx;
    kvt_reply_owner o = {l->salt, l->salt_len, l->r->session.session_id};
    size_t k = kvt_reply_map_get_by(l->s->replies, &o, text, ids);
    size_t i = l->next;
    while (i < l->a->n_msgs && strcmp(l->a->msgs[i].role, "assistant")) i++;
    l->next = i + 1;
    if (!k && i < l->a->n_msgs && !l->r->usage.rerendered_why) {
        l->r->usage.rerendered_why = splice_miss(l, i, text);
        l->r->usage.rerendered_msg = (int32_t)i;
    }
    return k;
}

unsigned char *kvt_srv_tenant_salt(const char *key, const char *cache_salt, size_t *len) {
    size_t kl = key ? strlen(key) + 1 : 0, cl = cache_salt ? strlen(cache_salt) : 0;
    *len = kl + cl;
    if (!*len) return NULL;
    unsigned char *salt = kvt_xmalloc(kl + cl + 1);
    if (kl) memcpy(salt, key, kl);
    if (cl) memcpy(salt + kl, cache_salt, cl);
    return salt;
}

/* The 400 for a prompt of (more than) n tokens that leaves none to generate. */
static void too_long(const kvt_server *s, const char *param, const char *more, size_t n, kvt_api_error *err) {
    kvt_api_errorf(err, 400, "invalid_request_error", param, "context_length_exceeded",
                   "This model's maximum context length is %d tokens. However, your prompt has %s%zu tokens; "
                   "shorten it (at least one token must be left to generate).",
                   s->n_ctx, more, n);
}

/* The hash of messages msgs[0..n) as the built-in rendering gets them: each
 * role and content with its length first, so no two can trade bytes. */
static void msgs_hash(const kvt_chat_msg *msgs, size_t n, uint64_t out[2]) {
    XXH3_state_t *st = XXH3_createState();
    XXH3_128bits_reset(st);
    for (size_t i = 0; i < n; i++) {
        const char *parts[2] = {msgs[i].role, msgs[i].content ? msgs[i].content : ""};
        for (size_t k = 0; k < 2; k++) {
            uint64_t l = strlen(parts[k]);
            XXH3_128bits_update(st, &l, sizeof l);
            XXH3_128bits_update(st, parts[k], l);
        }
    }
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    out[0] = h.low64;
    out[1] = h.high64;
}

/* The stored response a's history names, where its ids can stand for the
 * beginning of the built-in rendering of msgs[0..n): kept by the built-in
 * rendering, with the same messages before its reply, which is an assistant
 * message here. NULL otherwise, r->usage.history_rerendered saying why. */
static const kvt_resp_prefix *builtin_history(const kvt_api_request *a, const kvt_chat_msg *msgs, size_t n, srv_req *r) {
    const kvt_resp_prefix *h = a->history;
    uint64_t hash[2];
    const char *why = NULL;
    if (h->jinja < 0) why = "not_kept";
    else if (h->jinja) why = "renderer";
    else if (a->n_docs) why = "documents";
    else if (h->n_msgs >= n || strcmp(msgs[h->n_msgs].role, "assistant")) why = "messages";
    else {
        msgs_hash(msgs, (size_t)h->n_msgs, hash);
        if (hash[0] != h->hash[0] || hash[1] != h->hash[1]) why = "messages";
    }
    r->usage.history_rerendered = why;
    return why ? NULL : h;
}

/* A report's reason as its static string ("" or an unknown one: NULL). */
static const char *why_of(const char *why) {
    static const char *const all[] = {"rewritten", "reasoning_dropped", "tool_calls", "unknown_reply"};
    for (size_t i = 0; i < KVT_ARRAY_LEN(all); i++)
        if (!strcmp(why, all[i])) return all[i];
    return NULL;
}

/* r's state for a follow-up of a stored response, all but the ids (its prompt's, then its reply's,
 * which come once it is done): how it was rendered, how many messages, their hash or (Jinja) that of
 * the template's other variables, its report and (Jinja) its prompt's rendering text[0..len). */
void kvt_srv_keep_history(srv_req *r, int jinja, size_t n_msgs, const uint64_t hash[2], const char *text, size_t len) {
    kvt_resp_prefix *k = kvt_xcalloc(1, sizeof *k);
    k->jinja = jinja;
    k->n_msgs = n_msgs;
    k->hash[0] = hash[0];
    k->hash[1] = hash[1];
    if (r->usage.rerendered_why) {
        snprintf(k->why, sizeof k->why, "%s", r->usage.rerendered_why);
        k->why_msg = r->usage.rerendered_msg;
    }
    k->text = kvt_xstrndup(text ? text : "", text ? len : 0);
    k->text_len = text ? len : 0;
    r->kept = k;
}

/* A follow-up's report of its history's first turn not spliced: the stored response's, which comes first. */
void kvt_srv_history_report(srv_req *r, const kvt_resp_prefix *h) {
    const char *why = why_of(h->why);
    if (!why) return;
    r->usage.rerendered_why = why;
    r->usage.rerendered_msg = h->why_msg;
}

/* The built-in rendering of msgs[0..n) into r->prompt (*n_out ids), after the stored history h's ids
 * when h is not NULL and the family renders its reply as it was generated (else, or without h, whole). */
static int builtin_render(kvt_server *s, const kvt_api_request *a, const kvt_chat_msg *msgs, size_t n,
                          const kvt_resp_prefix *h, size_t last_user, srv_req *r, size_t max_prompt, size_t *at,
                          size_t *n_out) {
    kvt_chat_reply_fn lookup = s->p.retokenize_replies ? NULL : reply_lookup;
    size_t mark = last_user == SIZE_MAX ? n : last_user;
    if (h) {
        /* the lookups start after h's reply, which is a's assistant message number k (the messages
         * turn each assistant message into one) */
        size_t k = 0, next = 0;
        for (size_t i = 0; i < h->n_msgs; i++) k += !strcmp(msgs[i].role, "assistant");
        while (next < a->n_msgs && (strcmp(a->msgs[next].role, "assistant") || k--)) next++;
        lookup_ctx lc = {s, r->salt, r->salt_len, a, r, next + 1};
        kvt_chat_prefix pre = {.ids = h->ids, .n = h->n_ids, .reply = (size_t)h->n_msgs, .reply_text = h->text};
        kvt_srv_history_report(r, h);
        int rc = kvt_chat_render_from(s->tok, s->p.chat, msgs, n, lookup, &lc, max_prompt, mark, at, &pre, &r->prompt,
                                      n_out);
        if (rc != KVT_ENOTFOUND) {
            if (!rc) r->usage.history_tokens_reused = (int32_t)h->n_ids;
            return rc;
        }
        r->usage.history_rerendered = "rewritten";
        r->usage.rerendered_why = NULL;
    }
    lookup_ctx lc = {s, r->salt, r->salt_len, a, r, 0};
    return kvt_chat_render_at(s->tok, s->p.chat, msgs, n, lookup, &lc, max_prompt, mark, at, &r->prompt, n_out);
}

/* The prompt's ids into r->prompt (*n of them): the chat rendered in the
 * template family's style (remembered replies and tool calls reused unless
 * --retokenize-replies), token ids verbatim, or text tokenized; tokenizing
 * stops past max_prompt tokens. *at gets where kvtier.documents go: before
 * the last user message's content (chat). The first assistant message not
 * spliced as its generated ids goes to r->usage's report (rerendered_turn).
 * Returns 0 or an error code
 * (KVT_ELIMIT: longer than max_prompt). */
static int request_prompt(kvt_server *s, const kvt_api_request *a, srv_req *r, size_t max_prompt, size_t *at,
                          size_t *n) {
    int rc = 0;
    if (a->kind == KVT_API_CHAT) {
        size_t n_msgs, last_user;
        char **arena;
        /* tools, tool calls and tool results in the template family's style */
        kvt_call_memo *memo = s->p.retokenize_replies ? NULL : s->calls;
        kvt_chat_msg *msgs = kvt_api_messages(a, s->p.chat, memo, r->salt, r->salt_len, &n_msgs, &last_user, &arena);
        /* a follow-up of a stored response: its ids stand for the history it rendered */
        const kvt_resp_prefix *h = a->history ? builtin_history(a, msgs, n_msgs, r) : NULL;
        rc = builtin_render(s, a, msgs, n_msgs, h, last_user, r, max_prompt, at, n);
        if (!rc && a->keep_history && !a->n_docs && !s->p.retokenize_replies) {
            uint64_t hash[2];
            msgs_hash(msgs, n_msgs, hash);
            kvt_srv_keep_history(r, 0, n_msgs, hash, NULL, 0);
        }
        kvt_api_messages_free(msgs, arena);
    } else if (a->prompt_mixed) {
        rc = kvt_api_tokenize_mixed(s->tok, a->prompt_mixed, kvt_tokenizer_add_special(s->tok), 1, max_prompt,
                                    &r->prompt, n);
    } else if (a->prompt_ids) {
        *n = a->n_prompt_ids;
        r->prompt = kvt_xmalloc(*n * sizeof *r->prompt);
        memcpy(r->prompt, a->prompt_ids, *n * sizeof *r->prompt);
    } else {
        rc = kvt_tokenize_max(s->tok, a->prompt, strlen(a->prompt), kvt_tokenizer_add_special(s->tok), 1, max_prompt,
                              &r->prompt, n);
    }
    return rc;
}

/* kvtier.documents into r's prompt of *n tokens at `at` (completions: after
 * BOS) as fixed context blocks (kvt_render_documents), their offsets in
 * r->doc_starts. 0, or -1 with *err filled. */
static int request_documents(kvt_server *s, const kvt_api_request *a, srv_req *r, size_t at, size_t *n,
                             kvt_api_error *err) {
    if (a->kind != KVT_API_CHAT && *n && r->prompt[0] == kvt_tokenizer_bos(s->tok)) at = 1;
    int32_t *with = NULL;
    size_t nw = 0;
    r->doc_starts = kvt_xmalloc((a->n_docs + 1) * sizeof *r->doc_starts);
    r->n_docs = a->n_docs;
    if (kvt_render_documents_spans(s->model, s->block, r->prompt, *n, at, a->docs, a->n_docs, &with, &nw,
                                   r->doc_starts)) {
        kvt_api_errorf(err, 400, "invalid_request_error", "kvtier.documents", NULL, "cannot render the documents: %s",
                       kvt_errmsg());
        return -1;
    }
    free(r->prompt);
    r->prompt = with;
    *n = nw;
    return 0;
}

/* The 400 for a prompt that could not be made (rc from request_prompt), is
 * empty, or leaves no token to generate in the context. 0, or -1 with *err
 * filled. */
static int check_prompt(const kvt_server *s, const kvt_api_request *a, int rc, size_t n, size_t max_prompt,
                        kvt_api_error *err) {
    const char *param = a->kind == KVT_API_CHAT ? "messages" : "prompt";
    if (rc == KVT_ELIMIT) {
        too_long(s, param, "more than ", max_prompt, err);
        return -1;
    }
    if (rc) {
        kvt_api_errorf(err, 400, "invalid_request_error", param, NULL, "cannot tokenize the prompt: %s", kvt_errmsg());
        return -1;
    }
    if (n == 0) {
        kvt_api_errorf(err, 400, "invalid_request_error", "prompt", "invalid_value", "the prompt is empty");
        return -1;
    }
    if (n >= (size_t)s->n_ctx) {
        too_long(s, param, "", n, err);
        return -1;
    }
    return 0;
}

/* Typical, XTC, dynamic temperature, Mirostat, min_keep and DRY: each the request's, else the server's. */
static void request_llama_sampling(const kvt_server *s, const kvt_api_request *a, srv_req *r) {
    const kvt_sampler_params *d = &s->p.default_sampling;
    unsigned g = a->sampling_given;
    r->sp.typical_p = g & KVT_API_GIVEN_TYPICAL_P ? a->typical_p : d->typical_p;
    r->sp.xtc_probability = g & KVT_API_GIVEN_XTC_PROBABILITY ? a->xtc_probability : d->xtc_probability;
    r->sp.xtc_threshold = g & KVT_API_GIVEN_XTC_THRESHOLD ? a->xtc_threshold : d->xtc_threshold;
    r->sp.dynatemp_range = g & KVT_API_GIVEN_DYNATEMP_RANGE ? a->dynatemp_range : d->dynatemp_range;
    r->sp.dynatemp_exponent = g & KVT_API_GIVEN_DYNATEMP_EXPONENT ? a->dynatemp_exponent : d->dynatemp_exponent;
    r->sp.mirostat = g & KVT_API_GIVEN_MIROSTAT ? a->mirostat : d->mirostat;
    r->sp.mirostat_tau = g & KVT_API_GIVEN_MIROSTAT_TAU ? a->mirostat_tau : d->mirostat_tau;
    r->sp.mirostat_eta = g & KVT_API_GIVEN_MIROSTAT_ETA ? a->mirostat_eta : d->mirostat_eta;
    r->sp.min_keep = g & KVT_API_GIVEN_MIN_KEEP ? a->min_keep : d->min_keep;
    r->sp.dry_multiplier = g & KVT_API_GIVEN_DRY_MULTIPLIER ? a->dry_multiplier : d->dry_multiplier;
    r->sp.dry_base = g & KVT_API_GIVEN_DRY_BASE ? a->dry_base : d->dry_base;
    r->sp.dry_allowed_length = g & KVT_API_GIVEN_DRY_ALLOWED_LENGTH ? a->dry_allowed_length : d->dry_allowed_length;
    r->sp.dry_penalty_last_n = g & KVT_API_GIVEN_DRY_PENALTY_LAST_N ? a->dry_penalty_last_n : d->dry_penalty_last_n;
    if (r->sp.dry_multiplier == 0 || r->sp.dry_base < 1 || r->sp.dry_penalty_last_n == 0) return;
    const char *const *brk = kvt_dry_default_breakers;
    int32_t n = KVT_DRY_DEFAULT_BREAKERS;
    if (g & KVT_API_GIVEN_DRY_BREAKERS) brk = (const char *const *)a->dry_breakers, n = a->n_dry_breakers;
    else if (s->p.default_dry_breakers.given) brk = s->p.default_dry_breakers.s, n = s->p.default_dry_breakers.n;
    r->dry_breaker = kvt_tokens_containing(s->tok, s->n_vocab, brk, n); /* the sampler's n_vocab ids */
    r->sp.dry_breaker = r->dry_breaker;
}

/* r's limits and sampling from a (r->n_prompt set): max_tokens within what
 * the context leaves, the sampler's parameters with logit_bias (copied, owned
 * by r), logprobs and ignore_eos. The seed is the caller's. */
static void request_sampling(const kvt_server *s, const kvt_api_request *a, srv_req *r) {
    int32_t room = s->n_ctx - r->n_prompt;
    /* OpenAI's defaults: 16 tokens for completions, as many as fit for chat; -n -1: as many as fit */
    int32_t want = a->max_tokens      ? a->max_tokens
        : s->p.default_max_tokens > 0 ? KVT_MIN(s->p.default_max_tokens, s->p.max_tokens_limit)
        : s->p.default_max_tokens < 0 ? s->p.max_tokens_limit
        : a->kind == KVT_API_CHAT     ? s->p.max_tokens_limit
                                      : KVT_MIN(16, s->p.max_tokens_limit);
    r->max_tokens = KVT_MIN(want, room);
    r->sp = kvt_sampler_default_params();
    r->ignore_eos = a->ignore_eos;
    r->n_indent = a->n_indent;
    r->t_max_predict_ms = a->t_max_predict_ms;
    r->logprobs = a->logprobs;
    r->top_logprobs = a->top_logprobs;
    r->sp.temp = a->has_temperature ? a->temperature : s->p.default_temperature;
    r->sp.top_p = a->has_top_p ? a->top_p : s->p.default_top_p;
    r->sp.top_k = a->has_top_k ? a->top_k : s->p.default_top_k;
    /* each penalty and min_p the request's, else the server's (--min-p, --repeat-penalty, ...) */
    r->sp.min_p = a->has_min_p ? a->min_p : s->p.default_min_p;
    r->sp.presence_penalty = a->has_presence_penalty ? a->presence_penalty : s->p.default_presence_penalty;
    r->sp.frequency_penalty = a->has_frequency_penalty ? a->frequency_penalty : s->p.default_frequency_penalty;
    r->sp.repeat_penalty = a->has_repeat_penalty ? a->repeat_penalty : s->p.default_repeat_penalty;
    int32_t window = a->has_penalty_last_n ? a->penalty_last_n : s->p.default_penalty_last_n;
    if (!window) { /* llama.cpp: a window of 0 tokens turns the penalties off */
        r->sp.presence_penalty = r->sp.frequency_penalty = 0;
        r->sp.repeat_penalty = 1;
    }
    r->sp.penalty_last_n = window > 0 ? window : 0;
    r->sp.repetition_penalty = a->repetition_penalty; /* vLLM's: no window */
    request_llama_sampling(s, a, r);
    r->sp.has_steps = a->has_samplers || s->p.has_default_steps; /* the request's order, else --samplers */
    r->sp.n_steps = a->has_samplers ? a->n_sampler_steps : s->p.n_default_steps;
    memcpy(r->sp.steps, a->has_samplers ? a->sampler_steps : s->p.default_steps, sizeof r->sp.steps);
    if (a->n_bias) {
        r->bias_id = kvt_xmalloc((size_t)a->n_bias * sizeof *r->bias_id);
        r->bias = kvt_xmalloc((size_t)a->n_bias * sizeof *r->bias);
        memcpy(r->bias_id, a->bias_id, (size_t)a->n_bias * sizeof *r->bias_id);
        memcpy(r->bias, a->bias, (size_t)a->n_bias * sizeof *r->bias);
        r->sp.bias_id = r->bias_id;
        r->sp.bias = r->bias;
        r->sp.n_bias = a->n_bias;
    }
}

/* llama-server's [TEXT, bias] pairs of logit_bias: each token of TEXT (tokenized as plain text, as
 * llama-server does) joins r's bias list, KVT_API_MAX_LOGIT_BIAS entries in all. 0, or -1 with *err. */
static int request_bias_text(const kvt_server *s, const kvt_api_request *a, srv_req *r, kvt_api_error *err) {
    for (int32_t i = 0; i < a->n_bias_text; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        const char *t = a->bias_text[i];
        if (kvt_tokenize_max(s->tok, t, strlen(t), 0, 0, KVT_API_MAX_LOGIT_BIAS, &ids, &n) ||
            r->sp.n_bias + (int64_t)n > KVT_API_MAX_LOGIT_BIAS) {
            free(ids);
            return kvt_api_errorf(err, 400, "invalid_request_error", "logit_bias", "invalid_value",
                                  "'logit_bias' has more than %d tokens with its texts tokenized",
                                  KVT_API_MAX_LOGIT_BIAS);
        }
        r->bias_id = kvt_xrealloc(r->bias_id, ((size_t)r->sp.n_bias + n) * sizeof *r->bias_id);
        r->bias = kvt_xrealloc(r->bias, ((size_t)r->sp.n_bias + n) * sizeof *r->bias);
        for (size_t k = 0; k < n; k++) {
            r->bias_id[r->sp.n_bias] = ids[k];
            r->bias[r->sp.n_bias++] = a->bias_text_bias[i];
        }
        free(ids);
        r->sp.bias_id = r->bias_id;
        r->sp.bias = r->bias;
    }
    return 0;
}

/* Builds the engine-side request from a validated API request: salt, prompt
 * ids, limits, sampling. Returns NULL with *err filled when it cannot run. */
srv_req *kvt_srv_make_request(kvt_server *s, const kvt_api_request *a, const char *key, kvt_api_error *err) {
    srv_req *r = kvt_xcalloc(1, sizeof *r);
    r->refs = 1;
    r->id_slot = -1;
    r->kind = a->kind;
    r->stream = a->stream;
    r->include_usage = a->include_usage;
    r->t_arrival = kvt_now();
    r->created = (int64_t)time(NULL);
    kvt_srv_cond_init(&r->cv);
    r->usage.show_cached_text = s->p.explain_text;
    r->usage.hide_report = s->p.hide_cached_tokens;
    /* tenant salt: the API key (each key its own cache namespace), then cache_salt */
    r->salt = kvt_srv_tenant_salt(key, a->cache_salt, &r->salt_len);
    r->usage.has_history = a->history && a->kind == KVT_API_CHAT;
    r->session = a->session; /* before the prompt: its history takes this session's replies first */
    int rc = 0;
    size_t n = 0;
    if (a->approximate && !s->p.approximate_reuse) {
        kvt_api_errorf(err, 400, "invalid_request_error", "kvtier.reuse", "unsupported_parameter",
                       "approximate reuse is off on this server (start it with --approximate-reuse); "
                       "omit 'kvtier.reuse' or send \"exact\"");
        goto fail;
    }
    r->approximate = a->approximate;
    r->blend = kvt_blend_default_params();
    r->blend.ratio = a->recompute_ratio >= 0 ? a->recompute_ratio : s->p.recompute_ratio;
    /* a prompt must leave one token to generate; tokenizing stops past that */
    size_t max_prompt = (size_t)s->n_ctx - 1;
    kvt_fail(0, "%s", "");
    size_t at = 0; /* where kvtier.documents go: before the last user message's content, or the prompt */
    if (kvt_api_grammar(a, s->p.chat, &r->grammar, err)) goto fail;
    /* under tool_choice auto the calls the model writes follow the tools (no other grammar is set then) */
    if (!r->grammar && a->kind == KVT_API_CHAT && kvt_api_lazy_grammar(a, s->p.chat, &r->lazy, err)) goto fail;
    r->tools = a->kind == KVT_API_CHAT && kvt_api_tools_active(a);
    r->parallel_tool_calls = a->parallel_tool_calls;
    r->split_reasoning = a->reasoning_format ? a->reasoning_format == KVT_API_REASONING_SPLIT
                                             : s->p.reasoning_format == KVT_REASONING_DEEPSEEK;
    int no_think = 0;
    if (kvt_srv_template_kwargs(s, a, &no_think, err)) goto fail;
    if (kvt_srv_uses_jinja(s, a)) { /* the model's own template (--jinja) */
        if ((rc = kvt_srv_render_jinja(s, a, max_prompt, r, &at, &n, err)) == 1) goto fail;
    } else {
        /* a chat with tools under a template that renders none: said in the answer */
        if (a->kind == KVT_API_CHAT && s->p.jinja) r->usage.renderer = "builtin";
        rc = request_prompt(s, a, r, max_prompt, &at, &n);
    }
    if (!rc && no_think) rc = kvt_srv_append_no_think(s, r, &n, max_prompt);
    if (r->kept && no_think) { /* the next turn renders no empty thought before this reply: nothing to keep */
        kvt_resp_prefix_free(r->kept);
        free(r->kept);
        r->kept = NULL;
    }
    if (!rc && a->n_docs && request_documents(s, a, r, at, &n, err)) goto fail;
    if (check_prompt(s, a, rc, n, max_prompt, err)) goto fail;
    r->n_prompt = (int32_t)n;
    request_sampling(s, a, r);
    if (request_bias_text(s, a, r, err)) goto fail;
    pthread_mutex_lock(&s->mu);
    uint64_t id = s->next_id++;
    pthread_mutex_unlock(&s->mu);
    r->sp.seed = a->has_seed    ? a->seed
        : s->p.has_default_seed ? s->p.default_seed
                                : (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull + id;
    snprintf(r->id, sizeof r->id, "%s-%llx%06llx", a->kind == KVT_API_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)r->created, (unsigned long long)id);
    for (int i = 0; i < a->n_stop; i++) r->stop[r->n_stop++] = kvt_xstrdup(a->stop[i]);
    return r;
fail:
    pthread_mutex_lock(&s->mu);
    kvt_srv_req_unref_locked(r);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Queues r for the engine (taking a reference for it). 0, or -1 when full. */
int kvt_srv_enqueue(kvt_server *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    int rc = kvt_srv_enqueue_locked(s, r);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int kvt_srv_enqueue_locked(kvt_server *s, srv_req *r) {
    if (s->stopping || s->draining || s->q_len >= s->p.queue) return -1;
    r->refs++;
    s->queue[(s->q_head + s->q_len) % s->p.queue] = r;
    s->q_len++;
    pthread_cond_signal(&s->engine_cv);
    return 0;
}

void kvt_srv_cancel_locked(kvt_server *s, srv_req *r) {
    for (int32_t i = 0; i <= r->n_sib; i++) {
        srv_req *c = i ? r->sib[i - 1] : r;
        if (!c->done) c->cancelled = 1;
    }
    pthread_cond_signal(&s->engine_cv);
}

void kvt_srv_cancel(kvt_server *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    kvt_srv_cancel_locked(s, r);
    pthread_mutex_unlock(&s->mu);
}

/* Whether r and all its other choices are done (s->mu held). */
int kvt_srv_all_done(const srv_req *r) {
    for (int32_t i = 0; i < r->n_sib; i++)
        if (!r->sib[i]->done) return 0;
    return r->done;
}

/* Drops the engine's references on r's other choices, before r was queued. */
void kvt_srv_unref_engine_choices(kvt_server *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    for (int32_t i = 0; i < r->n_sib; i++) kvt_srv_req_unref_locked(r->sib[i]);
    pthread_mutex_unlock(&s->mu);
}

/* Drops the handler's references on r and its other choices. */
void kvt_srv_unref_choices(kvt_server *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    for (int32_t i = r->n_sib; i > 0; i--) kvt_srv_req_unref_locked(r->sib[i - 1]);
    kvt_srv_req_unref_locked(r);
    pthread_mutex_unlock(&s->mu);
}

/* n > 1: n - 1 more choices of a's request r, each its own request on the same
 * prompt (seed + i when a seed is given), forked from r's sequence once its
 * prompt is in (sched_admit.c). 0, or -1 with *err filled. */
int kvt_srv_add_choices(kvt_server *s, const kvt_api_request *a, const char *key, srv_req *r, kvt_api_error *err) {
    if (a->n <= 1) return 0;
    if (a->n > s->p.parallel)
        return kvt_api_errorf(err, 400, "invalid_request_error", "n", "unsupported_value",
                              "'n' is at most the server's --parallel (%d): the choices decode side by side",
                              s->p.parallel);
    r->sib = kvt_xcalloc((size_t)a->n - 1, sizeof *r->sib);
    for (int32_t i = 1; i < a->n; i++) {
        srv_req *c = kvt_srv_make_request(s, a, key, err);
        if (!c) return -1;
        c->is_sib = 1;
        memset(&c->session, 0, sizeof c->session); /* the session's context is the first choice's */
        c->session.keep_warm_s = -1;
        if (a->has_seed || s->p.has_default_seed)
            c->sp.seed = (a->has_seed ? a->seed : s->p.default_seed) + (uint64_t)i;
        c->first = r;
        pthread_mutex_lock(&s->mu);
        r->refs++; /* c's, on its first choice (whose cv it wakes) */
        c->refs++; /* the engine's */
        r->sib[r->n_sib++] = c;
        pthread_mutex_unlock(&s->mu);
    }
    return 0;
}

void kvt_srv_prefill_progress(slot *sl, int begin) {
    const srv_req *r = sl->r;
    if (begin) {
        int32_t n = r->n_prompt - sl->n_fed;
        sl->progress = n >= KVT_PREFILL_PROGRESS_TOKENS && !r->is_sib && kvt_progress_wanted();
        sl->progress_from = sl->n_fed;
        if (sl->progress) kvt_progress_begin_for(&sl->prog, "prefill", kvt_srv_log_id(r), (uint64_t)n, "tokens");
        return;
    }
    if (!sl->progress) return;
    uint64_t done = (uint64_t)(sl->n_fed - sl->progress_from);
    if (sl->n_fed < r->n_prompt) {
        kvt_progress_update(&sl->prog, done);
        return;
    }
    kvt_progress_end(&sl->prog, done);
    sl->progress = 0;
}

void kvt_srv_log_prefill(const srv_req *r, int32_t computed, int32_t cached, int done) {
    if (computed < KVT_PREFILL_PROGRESS_TOKENS || r->is_sib) return;
    const char *id = kvt_srv_log_id(r);
    double s = r->usage.prefill_ms / 1e3;
    if (!done)
        kvt_logk(KVT_LOG_INFO, "request_id,computed_tokens,cached_tokens",
                 "serve: prefill %s: %d tokens to compute, %d restored from the cache", id, computed, cached);
    else
        kvt_logk(KVT_LOG_INFO, "request_id,computed_tokens,seconds,tokens_per_s",
                 "serve: prefill %s: %d tokens computed in %.2f s (%.0f tok/s)", id, computed, s,
                 computed / (s > 0 ? s : 1e-9));
}

void kvt_srv_session_default(const kvt_server *s, const conn_state *cs, kvt_api_session *ss) {
    if (!ss->session_id[0] && cs->session[0]) snprintf(ss->session_id, sizeof ss->session_id, "%s", cs->session);
    if (ss->session_id[0] && ss->keep_warm_s < 0) ss->keep_warm_s = s->p.session_keep_warm_s;
}
