// SPDX-License-Identifier: MIT
/* OpenAI response JSON (cJSON, api_response.h): whole responses, stream
 * chunks, tool calls, the usage chunk and the model list, with kvtier's cache
 * report and OpenAI's two logprobs shapes. */
#include "api_response.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api_utf8.h"
#include "common.h"

/* ---- responses --------------------------------------------------------------- */

static char *print_free(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) s = kvt_xstrdup("{}"); /* cJSON fails only when out of memory */
    return s;
}

cJSON *kvt_api_head_obj(const kvt_api_head *h, int chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", h->id);
    cJSON_AddStringToObject(o, "object",
                            h->kind == KVT_API_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                    : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)h->created);
    cJSON_AddStringToObject(o, "model", h->model);
    cJSON_AddNullToObject(o, "system_fingerprint");
    if (chunk && h->usage_null) cJSON_AddNullToObject(o, "usage");
    return o;
}

static cJSON *usage_obj(const kvt_api_usage *u) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "prompt_tokens", u->prompt_tokens);
    cJSON_AddNumberToObject(o, "completion_tokens", u->completion_tokens);
    cJSON_AddNumberToObject(o, "total_tokens", u->prompt_tokens + u->completion_tokens);
    if (u->hide_report) return o; /* OpenAI's field is optional: absent, never a made-up 0 */
    cJSON *d = cJSON_AddObjectToObject(o, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", u->cached_tokens);
    return o;
}

cJSON *kvt_api_kvtier_obj(const kvt_api_usage *u) {
    static const char *const tiers[KVT_TIER_COUNT] = {"T0", "T1", "T2", "T3"};
    cJSON *o = cJSON_CreateObject();
    if (u->renderer) cJSON_AddStringToObject(o, "renderer", u->renderer); /* says how, not what was cached */
    if (u->hide_report) {
        cJSON_AddStringToObject(o, "cache_report", "hidden");
        return o;
    }
    cJSON_AddNumberToObject(o, "cached_tokens", u->cached_tokens);
    cJSON_AddNumberToObject(o, "planned_cached_tokens", u->planned_tokens);
    if (u->shortfall) cJSON_AddStringToObject(o, "shortfall", u->shortfall);
    if (u->has_reuse_stop) {
        const kvt_reuse_stop *rs = &u->reuse_stop;
        cJSON *w = cJSON_AddObjectToObject(o, "reuse_stop");
        cJSON_AddNumberToObject(w, "block", rs->block);
        cJSON_AddNumberToObject(w, "token_offset", rs->token_offset);
        cJSON_AddStringToObject(w, "reason", kvt_reuse_reason_name(rs->reason));
        if (rs->reason == KVT_REUSE_DIVERGED) {
            /* the prompt's side is the caller's own text; the cached side may be another client's */
            cJSON_AddStringToObject(w, "prompt_text", u->stop_prompt_text);
            cJSON *a = cJSON_AddArrayToObject(w, "prompt_tokens");
            for (int32_t i = 0; i < rs->n_prompt_ids; i++)
                cJSON_AddItemToArray(a, cJSON_CreateNumber(rs->prompt_ids[i]));
            if (u->show_cached_text) {
                cJSON_AddStringToObject(w, "cached_text", u->stop_cached_text);
                cJSON *b = cJSON_AddArrayToObject(w, "cached_tokens");
                for (int32_t i = 0; i < rs->n_cached_ids; i++)
                    cJSON_AddItemToArray(b, cJSON_CreateNumber(rs->cached_ids[i]));
            }
        }
    }
    if (u->rerendered_why) { /* where the template's rendering of history left the generated ids */
        cJSON *w = cJSON_AddObjectToObject(o, "rerendered_turn");
        cJSON_AddNumberToObject(w, "message", u->rerendered_msg);
        cJSON_AddStringToObject(w, "reason", u->rerendered_why);
    }
    if (u->has_history) { /* says how the prompt was made, as rerendered_turn does */
        cJSON_AddNumberToObject(o, "history_tokens_reused", u->history_tokens_reused);
        if (u->history_rerendered) cJSON_AddStringToObject(o, "history_rerendered", u->history_rerendered);
    }
    if (u->prefetched_tokens) cJSON_AddNumberToObject(o, "prefetched_tokens", u->prefetched_tokens);
    /* only when it happened: blocks other requests computed between its admission and its prefill */
    if (u->late_cached_tokens) cJSON_AddNumberToObject(o, "late_cached_tokens", u->late_cached_tokens);
    if (u->admission_seq) {
        cJSON_AddNumberToObject(o, "queued_ms", u->queued_ms);
        cJSON_AddNumberToObject(o, "admission_seq", (double)u->admission_seq);
    }
    cJSON *t = cJSON_AddObjectToObject(o, "cached_tokens_by_tier");
    for (int i = 0; i < KVT_TIER_COUNT; i++) cJSON_AddNumberToObject(t, tiers[i], u->tier_tokens[i]);
    cJSON_AddNumberToObject(o, "computed_tokens", u->computed_tokens);
    if (u->approximate) { /* only when asked for: without it the report is as it always was */
        cJSON_AddNumberToObject(o, "approximate_tokens", u->approximate_tokens);
        cJSON *a = cJSON_AddObjectToObject(o, "approximate");
        cJSON_AddNumberToObject(a, "documents", u->approximate_documents);
        cJSON_AddNumberToObject(a, "placed_tokens", u->approximate_tokens + u->recomputed_tokens);
        cJSON_AddNumberToObject(a, "recomputed_tokens", u->recomputed_tokens);
        cJSON_AddNumberToObject(a, "stored_tokens", u->stored_tokens);
        cJSON_AddNumberToObject(a, "steps", u->approximate_steps);
        cJSON_AddNumberToObject(a, "interleaved_decode_tokens", u->approximate_interleaved);
        /* the ratio is held as a float: printed to 6 decimals, 0.15 reads 0.15 */
        cJSON_AddNumberToObject(a, "recompute_ratio", round((double)u->recompute_ratio * 1e6) / 1e6);
    }
    if (u->preemptions) { /* only when it happened: the report is otherwise as it always was */
        cJSON *w = cJSON_AddObjectToObject(o, "preempted");
        cJSON_AddNumberToObject(w, "times", u->preemptions);
        cJSON_AddNumberToObject(w, "restored_tokens", u->resumed_cached_tokens);
        cJSON_AddNumberToObject(w, "recomputed_tokens", u->resumed_computed_tokens);
        cJSON_AddNumberToObject(w, "resume_ms", u->resume_ms);
    }
    cJSON_AddNumberToObject(o, "restore_ms", u->restore_ms);
    if (u->disk_decision) cJSON_AddStringToObject(o, "disk_blocks", u->disk_decision);
    cJSON_AddNumberToObject(o, "prefill_ms", u->prefill_ms);
    cJSON_AddNumberToObject(o, "ttft_ms", u->ttft_ms);
    return o;
}

static void add_reason(cJSON *o, const char *finish_reason) {
    if (finish_reason) cJSON_AddStringToObject(o, "finish_reason", finish_reason);
    else cJSON_AddNullToObject(o, "finish_reason");
}

/* A token's text for logprobs: its bytes (control tokens as their text),
 * malloc'd into *bytes (*n of them), and as a valid UTF-8 string (returned). */
static char *token_text(const kvt_tokenizer *t, int32_t id, char **bytes, size_t *n) {
    char small[64];
    int len = kvt_token_piece(t, id, small, sizeof small, 1);
    if (len < 0) len = 0;
    *bytes = kvt_xmalloc((size_t)len + 1);
    if ((size_t)len <= sizeof small) memcpy(*bytes, small, (size_t)len);
    else kvt_token_piece(t, id, *bytes, (size_t)len, 1);
    *n = (size_t)len;
    return kvt_utf8_sanitize(*bytes, *n, NULL);
}

/* Of b[0..n), the bytes that begin a UTF-8 character (every byte but 10xxxxxx). */
static size_t utf8_starts(const char *b, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)b[i] & 0xC0) != 0x80;
    return c;
}

size_t kvt_api_token_chars(const kvt_tokenizer *t, int32_t id) {
    char *bytes;
    size_t n;
    free(token_text(t, id, &bytes, &n));
    size_t c = utf8_starts(bytes, n);
    free(bytes);
    return c;
}

/* {"token", "logprob", "bytes"} of one token (chat's shape). */
static cJSON *chat_token(const kvt_tokenizer *t, int32_t id, double logprob) {
    char *bytes;
    size_t n;
    char *text = token_text(t, id, &bytes, &n);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "token", text);
    cJSON_AddNumberToObject(o, "logprob", logprob);
    cJSON *b = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)bytes[i]));
    free(text);
    free(bytes);
    return o;
}

cJSON *kvt_api_token_logprob_obj(const kvt_tokenizer *t, int32_t id, double logprob) {
    return chat_token(t, id, logprob);
}

static cJSON *logprobs_obj(kvt_api_kind kind, const kvt_api_logprobs *lp) {
    if (!lp) return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    if (kind == KVT_API_CHAT) {
        cJSON *content = cJSON_AddArrayToObject(o, "content");
        for (size_t i = 0; i < lp->n; i++) {
            const kvt_api_logprob *it = &lp->items[i];
            cJSON *e = chat_token(lp->tok, it->id, it->logprob);
            cJSON_AddNumberToObject(e, "id", it->id); /* llama-server's addition: the token id */
            cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
            for (int32_t k = 0; k < it->n_top; k++) {
                cJSON *t = chat_token(lp->tok, it->top_id[k], it->top_logprob[k]);
                cJSON_AddNumberToObject(t, "id", it->top_id[k]);
                cJSON_AddItemToArray(top, t);
            }
            cJSON_AddItemToArray(content, e);
        }
        cJSON_AddNullToObject(o, "refusal");
        return o;
    }
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens");
    cJSON *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON *offs = cJSON_AddArrayToObject(o, "text_offset");
    size_t off = lp->text_offset;
    for (size_t i = 0; i < lp->n; i++) {
        const kvt_api_logprob *it = &lp->items[i];
        char *bytes;
        size_t n;
        char *text = token_text(lp->tok, it->id, &bytes, &n);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(text));
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(it->logprob));
        /* a token that begins inside a character (its later bytes) is at that character */
        int inside = n && ((unsigned char)bytes[0] & 0xC0) == 0x80 && off;
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off - (size_t)inside)));
        off += utf8_starts(bytes, n);
        free(text);
        free(bytes);
        cJSON *top = cJSON_CreateObject();
        for (int32_t k = 0; k < it->n_top; k++) {
            char *tb;
            size_t tn;
            char *tt = token_text(lp->tok, it->top_id[k], &tb, &tn);
            cJSON_AddNumberToObject(top, tt, it->top_logprob[k]);
            free(tt);
            free(tb);
        }
        cJSON_AddItemToArray(tops, top);
    }
    return o;
}

char *kvt_api_response_json(const kvt_api_head *h, const char *text, const char *finish_reason, const kvt_api_usage *u,
                            const kvt_api_logprobs *lp) {
    kvt_api_choice c = {text, finish_reason, lp, h->calls, h->n_calls, NULL};
    return kvt_api_response_json_n(h, &c, 1, u);
}

char *kvt_api_response_json_n(const kvt_api_head *h, const kvt_api_choice *ch, size_t n, const kvt_api_usage *u) {
    cJSON *o = kvt_api_head_obj(h, 0);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    for (size_t i = 0; i < n; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", (double)i);
        if (h->kind == KVT_API_CHAT) {
            cJSON *m = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            if (ch[i].n_calls && !*ch[i].text) cJSON_AddNullToObject(m, "content");
            else cJSON_AddStringToObject(m, "content", ch[i].text);
            cJSON_AddNullToObject(m, "refusal"); /* OpenAI's message always has it: kvtier never refuses */
            if (ch[i].reasoning && *ch[i].reasoning) cJSON_AddStringToObject(m, "reasoning_content", ch[i].reasoning);
            if (ch[i].n_calls) cJSON_AddItemToObject(m, "tool_calls", kvt_api_calls_obj(ch[i].calls, ch[i].n_calls, 0));
        } else {
            cJSON_AddStringToObject(c, "text", ch[i].text);
        }
        cJSON_AddItemToObject(c, "logprobs", logprobs_obj(h->kind, ch[i].lp));
        add_reason(c, ch[i].finish_reason);
        cJSON_AddItemToArray(choices, c);
    }
    cJSON_AddItemToObject(o, "usage", usage_obj(u));
    cJSON_AddItemToObject(o, "kvtier", kvt_api_kvtier_obj(u));
    return print_free(o);
}

char *kvt_api_chunk_json(const kvt_api_head *h, const char *text, int role_only, const char *finish_reason,
                         const kvt_api_usage *u, const kvt_api_logprobs *lp) {
    cJSON *o = kvt_api_head_obj(h, 1);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", h->index);
    if (h->kind == KVT_API_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (role_only) {
            cJSON_AddStringToObject(d, "role", "assistant");
            cJSON_AddStringToObject(d, "content", "");
        } else if (text && *text) {
            cJSON_AddStringToObject(d, "content", text);
        }
    } else {
        cJSON_AddStringToObject(c, "text", text ? text : "");
    }
    cJSON_AddItemToObject(c, "logprobs", logprobs_obj(h->kind, lp));
    add_reason(c, finish_reason);
    cJSON_AddItemToArray(choices, c);
    if (finish_reason && u) cJSON_AddItemToObject(o, "kvtier", kvt_api_kvtier_obj(u));
    return print_free(o);
}

char *kvt_api_reasoning_chunk_json(const kvt_api_head *h, const char *reasoning) {
    cJSON *o = kvt_api_head_obj(h, 1);
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", h->index);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "delta"), "reasoning_content", reasoning);
    cJSON_AddItemToObject(c, "logprobs", logprobs_obj(h->kind, NULL));
    add_reason(c, NULL);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
    return print_free(o);
}

char *kvt_api_usage_chunk_json(const kvt_api_head *h, const kvt_api_usage *u) {
    kvt_api_head own = *h;
    own.usage_null = 0; /* this chunk has the usage */
    cJSON *o = kvt_api_head_obj(&own, 1);
    cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToObject(o, "usage", usage_obj(u));
    cJSON_AddItemToObject(o, "kvtier", kvt_api_kvtier_obj(u));
    return print_free(o);
}

/* ---- tool calls ------------------------------------------------------------ */

cJSON *kvt_api_calls_obj(const kvt_api_call *c, size_t n, int index_field) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        if (index_field) cJSON_AddNumberToObject(o, "index", (double)i);
        cJSON_AddStringToObject(o, "id", c[i].id);
        cJSON_AddStringToObject(o, "type", "function");
        cJSON *fn = cJSON_AddObjectToObject(o, "function");
        cJSON_AddStringToObject(fn, "name", c[i].name);
        cJSON_AddStringToObject(fn, "arguments", c[i].arguments);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

char *kvt_api_call_chunk_json(const kvt_api_head *h, const kvt_api_call *c, size_t i) {
    cJSON *o = kvt_api_head_obj(h, 1);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", h->index);
    cJSON *d = cJSON_AddObjectToObject(ch, "delta");
    cJSON *calls = kvt_api_calls_obj(c, 1, 1);
    cJSON_ReplaceItemInObject(calls->child, "index", cJSON_CreateNumber((double)i));
    cJSON_AddItemToObject(d, "tool_calls", calls);
    cJSON_AddNullToObject(ch, "logprobs");
    cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(choices, ch);
    return print_free(o);
}

/* One model's object, as /v1/models lists it and /v1/models/{id} answers it. */
static cJSON *model_object(const kvt_api_model_info *mi) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", mi->id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)mi->created);
    cJSON_AddStringToObject(m, "owned_by", "kvtier");
    cJSON_AddNumberToObject(m, "context_length", mi->n_ctx);
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddNumberToObject(meta, "n_ctx", mi->n_ctx);
    cJSON_AddNumberToObject(meta, "n_ctx_train", mi->n_ctx_train);
    cJSON_AddNumberToObject(meta, "n_vocab", mi->n_vocab);
    cJSON_AddNumberToObject(meta, "n_embd", mi->n_embd);
    cJSON_AddNumberToObject(meta, "n_params", (double)mi->n_params);
    return m;
}

char *kvt_api_models_json(const kvt_api_model_info *mi) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    cJSON_AddItemToArray(data, model_object(mi));
    return print_free(o);
}

char *kvt_api_model_json(const kvt_api_model_info *mi) { return print_free(model_object(mi)); }
