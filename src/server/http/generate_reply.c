// SPDX-License-Identifier: MIT
/* The answers to a generation request: the JSON of a finished one and the
 * SSE stream of one in progress, for any number of choices (n), with tool
 * calls read back out of the text (api_tools.c) when the request has tools. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "api_llama.h"
#include "api_rag.h"
#include "api_tools_stream.h"
#include "common.h"
#include "http_send.h"
#include "reasoning.h"

static kvt_api_head head_of(kvt_server *s, const srv_req *r, int32_t index) {
    kvt_api_head h = {.kind = r->kind,
                      .id = r->id,
                      .created = r->created,
                      .model = s->p.model_id,
                      .index = index,
                      .usage_null = r->include_usage};
    return h;
}

/* Choice i of r: r itself, then its other choices. */
static srv_req *choice(srv_req *r, int32_t i) { return i ? r->sib[i - 1] : r; }

kvt_api_usage kvt_srv_total_usage(const srv_req *r) {
    kvt_api_usage u = r->usage;
    for (int32_t i = 0; i < r->n_sib; i++) {
        const kvt_api_usage *c = &r->sib[i]->usage;
        u.completion_tokens += c->completion_tokens;
        /* each choice generates, and so pauses, on its own: the report counts the pauses of all */
        u.preemptions += c->preemptions;
        u.resumed_cached_tokens += c->resumed_cached_tokens;
        u.resumed_computed_tokens += c->resumed_computed_tokens;
        u.resume_ms += c->resume_ms;
    }
    return u;
}

/* Whether choice c's reasoning goes apart from its content (reasoning_format, --reasoning-format). */
static int splits_reasoning(const srv_req *c) { return c->kind == KVT_API_CHAT && !c->native && c->split_reasoning; }

/* text[0..n) split into its reasoning and answer (malloc'd), consuming what *rs
 * allows (all when final); returns the bytes consumed. */
static size_t split_text(kvt_reasoning *rs, const char *text, size_t n, int final, char **reason, char **answer) {
    size_t ro, rl, co, cl, used = kvt_reasoning_feed(rs, text, n, final, &ro, &rl, &co, &cl);
    *reason = kvt_xstrndup(text + ro, rl);
    *answer = kvt_xstrndup(text + co, cl);
    return used;
}

/* The tool calls in a finished choice's text (remembered for the next turn, with the content
 * before them as the answer gives it: whole, or split into reasoning_content and content), or 0
 * when it is text. */
size_t kvt_srv_read_calls(kvt_server *s, srv_req *c, kvt_api_call **calls, char **content, int *cut) {
    *calls = NULL;
    *content = NULL;
    *cut = 0;
    if (!c->tools) return 0;
    size_t n = kvt_api_parse_calls(s->p.chat, c->text ? c->text : "", c->parallel_tool_calls, c->id, calls, content);
    if (!n && c->finish_reason && !strcmp(c->finish_reason, "length")) {
        int complete;
        n = kvt_api_parse_cut_calls(s->p.chat, c->text ? c->text : "", c->parallel_tool_calls, c->id, calls, content,
                                    &complete);
        /* parallel_tool_calls false with its one call complete: the cut lies past the answer, which is whole */
        *cut = !complete && (n > 0 || *content);
        if (*cut) return n; /* a cut call never renders back as generated: not remembered */
    }
    char *reason = NULL, *answer = NULL;
    if (n && *content && splits_reasoning(c)) {
        kvt_reasoning rs = kvt_reasoning_start(c->think_open);
        split_text(&rs, *content, strlen(*content), 1, &reason, &answer);
    }
    kvt_call_memo_put(s->calls, s->p.chat, c->salt, c->salt_len, *calls, n, *content, reason, answer, c->text);
    free(reason);
    free(answer);
    /* the answer's arguments are the JSON alone: the whitespace a grammar lets the model write around it
     * stays in the memo, from which the next turn renders the call exactly as it was generated */
    for (size_t k = 0; k < n; k++) {
        char *a = (*calls)[k].arguments;
        size_t lead = strspn(a, " \t\r\n"), len = strlen(a + lead);
        while (len && strchr(" \t\r\n", a[lead + len - 1])) len--;
        memmove(a, a + lead, len);
        a[len] = 0;
    }
    return n;
}

/* The response JSON with kvtier.rag added (docs/rag.md "The RAG route"): chunk positions,
 * tiers and order as the engine admitted r. Takes json. */
static char *with_rag(kvt_server *s, const srv_req *r, const kvt_api_rag *rag, char *json) {
    kvt_api_rag_layout lay = {r->doc_starts, r->doc_order, r->block_tiers, r->n_block_tiers, s->block, r->plan_ms};
    return kvt_api_rag_response(json, s->p.rag, rag, &lay, &r->usage);
}

char *kvt_srv_response_json(kvt_server *s, srv_req *r, const kvt_api_rag *rag) {
    int32_t n = 1 + r->n_sib;
    kvt_api_choice ch[KVT_API_MAX_N] = {0};
    kvt_api_logprobs lp[KVT_API_MAX_N];
    kvt_api_call *calls[KVT_API_MAX_N];
    char *content[KVT_API_MAX_N], *reason[KVT_API_MAX_N] = {0}, *answer[KVT_API_MAX_N] = {0};
    for (int32_t i = 0; i < n; i++) {
        srv_req *c = choice(r, i);
        int cut;
        size_t nc = kvt_srv_read_calls(s, c, &calls[i], &content[i], &cut);
        lp[i] = (kvt_api_logprobs){.items = c->lp, .n = c->n_lp, .tok = s->tok};
        ch[i] = (kvt_api_choice){.text = nc || cut ? content[i]
                                     : c->text     ? c->text
                                                   : "",
                                 .finish_reason = nc && !cut ? "tool_calls" : c->finish_reason,
                                 .lp = c->logprobs ? &lp[i] : NULL,
                                 .calls = calls[i],
                                 .n_calls = nc};
        if (splits_reasoning(c)) { /* <think>...</think> to message.reasoning_content */
            kvt_reasoning rs = kvt_reasoning_start(c->think_open);
            split_text(&rs, ch[i].text, strlen(ch[i].text), 1, &reason[i], &answer[i]);
            ch[i].text = answer[i];
            ch[i].reasoning = reason[i];
        }
    }
    kvt_api_head h = head_of(s, r, 0);
    kvt_api_usage u = kvt_srv_total_usage(r);
    char *json = kvt_api_response_json_n(&h, ch, (size_t)n, &u);
    if (rag) json = with_rag(s, r, rag, json);
    for (int32_t i = 0; i < n; i++) {
        kvt_api_calls_free(calls[i], ch[i].n_calls);
        free(content[i]);
        free(reason[i]);
        free(answer[i]);
    }
    return json;
}

/* ---- streaming (SSE) ----------------------------------------------------------------- */

#define STREAM_CALLS 16 /* tool calls of a choice whose arguments stream as fragments; more go whole */

typedef struct {
    size_t sent;                    /* bytes of the choice's text already turned into events */
    size_t scanned;                 /* tools: bytes of the text read for calls so far */
    size_t said;                    /* tools: bytes of the text sent as content before the first call */
    size_t n_open;                  /* tools: calls whose first chunk (id, type, name) went out */
    size_t args_sent[STREAM_CALLS]; /* ... and bytes of each one's arguments sent */
    size_t lp_sent;                 /* logprob entries already sent */
    size_t lp_offset;               /* completions: text characters those entries stand for */
    size_t ids_sent;                /* /completion with return_tokens: generated ids already sent */
    int closed;                     /* its finish chunk was sent */
    kvt_reasoning rs;               /* reasoning apart from content (splits_reasoning) ... */
    int rs_started;
    char *held; /* ... and the text it held back (a tag's first bytes), owned */
} choice_state;

typedef struct {
    kvt_server *s;
    srv_req *r;
    struct MHD_Connection *conn;
    kvt_api_usage *usage; /* for the access log (the caller's) */
    int *has_usage;
    char *buf; /* SSE bytes not yet handed to MHD */
    size_t len, off, cap;
    int opened, finished;
    int held; /* the connection's idle timeout is off while the stream waits (kvt_srv_stream_waiting) */
    int32_t n;
    choice_state ch[KVT_API_MAX_N];
    kvt_api_rag *rag; /* /v1/rag/chat/completions: what was retrieved (owned), for the finish chunk */
} stream_state;

/* One event of a /completion stream (llama-server's shape): text, its ids (return_tokens) and its
 * probabilities with the count generated so far, or with stop the last one with the figures
 * (kvt_api_llama_completion_obj). */
static char *native_event(stream_state *st, int32_t i, const char *text, int stop, const kvt_api_logprobs *lp,
                          const int32_t *ids, size_t n_ids, int32_t n_decoded) {
    kvt_api_llama_completion a;
    kvt_srv_llama_answer(st->s, choice(st->r, i), text, stop, lp, &a);
    a.index = i;
    if (!stop) {
        a.tokens = ids;
        a.n_tokens = n_ids;
        a.n_decoded = n_decoded;
    }
    char *prompt = stop ? kvt_srv_prompt_text(st->s, choice(st->r, i)) : NULL;
    a.prompt = prompt;
    cJSON *o = kvt_api_llama_completion_obj(&a);
    free(prompt);
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return json;
}

static void sse_event(stream_state *st, char *json) {
    size_t n = strlen(json), need = st->len + n + sizeof "data: \n\n"; /* sizeof counts the NUL sprintf writes */
    if (need > st->cap) {
        st->cap = KVT_MAX(st->cap * 2, need);
        st->buf = kvt_xrealloc(st->buf, st->cap);
    }
    st->len += (size_t)sprintf(st->buf + st->len, "data: %s\n\n", json);
    free(json);
}

/* Whether choice i has something to send (s->mu held). A choice read for
 * tool calls has news when its text grew: its calls are read as they come. */
static int has_news(const stream_state *st, int32_t i) {
    const srv_req *c = choice(st->r, i);
    const choice_state *cs = &st->ch[i];
    if (cs->closed) return 0;
    if (c->done) return 1;
    if (c->tools) return c->text_len > cs->scanned;
    return c->text_len > cs->sent || (c->logprobs && c->n_lp > cs->lp_sent);
}

/* A piece of choice i's content text split as it streams (splits_reasoning):
 * its reasoning goes out as a reasoning_content chunk, and the answer part
 * is returned (malloc'd in *answer) to go out as content; the first bytes of
 * a tag are held back until the next piece, or final. Without the split, text. */
static const char *split_piece(stream_state *st, int32_t i, const char *text, int final, char **answer) {
    srv_req *c = choice(st->r, i);
    choice_state *cs = &st->ch[i];
    *answer = NULL;
    if (!splits_reasoning(c) || (!text && !(final && cs->held))) return text;
    if (!cs->rs_started) cs->rs = kvt_reasoning_start(c->think_open), cs->rs_started = 1;
    size_t hl = cs->held ? strlen(cs->held) : 0, tl = text ? strlen(text) : 0;
    char *joined = kvt_xmalloc(hl + tl + 1), *reason = NULL;
    memcpy(joined, cs->held ? cs->held : "", hl);
    memcpy(joined + hl, text ? text : "", tl + 1);
    size_t used = split_text(&cs->rs, joined, hl + tl, final, &reason, answer);
    free(cs->held);
    cs->held = used < hl + tl ? kvt_xstrdup(joined + used) : NULL;
    free(joined);
    kvt_api_head h = head_of(st->s, st->r, i);
    if (*reason) sse_event(st, kvt_api_reasoning_chunk_json(&h, reason));
    free(reason);
    return *answer;
}

/* Choice i's content piece with tools (split_piece), as a content chunk when anything is left. */
static void tool_content(stream_state *st, int32_t i, const kvt_api_head *h, const char *text, int final) {
    char *answer;
    const char *t = split_piece(st, i, text, final, &answer);
    if (t && *t) sse_event(st, kvt_api_chunk_json(h, t, 0, NULL, NULL, NULL));
    free(answer);
}

/* The calls of a choice with tools as its text grows (text[0..len), copied): once a call's name is
 * written, a chunk with its index, id, type and name, then its arguments' text in fragments as they
 * come (kvt_api_calls_partial); the text before the first call goes out as content when that call
 * begins. The calls of the finished text stay the answer (choice_events): it sends what the
 * fragments have not carried, so they reassemble to the same arguments. */
static void call_fragments(stream_state *st, int32_t i, const char *text, size_t len) {
    srv_req *c = choice(st->r, i);
    choice_state *cs = &st->ch[i];
    kvt_api_head h = head_of(st->s, st->r, i);
    kvt_api_call_part parts[STREAM_CALLS];
    size_t first,
        n = kvt_api_calls_partial(st->s->p.chat, text, len, parts, c->parallel_tool_calls ? STREAM_CALLS : 1, &first);
    for (size_t k = 0; k < n; k++) {
        if (k == cs->n_open) {
            size_t end = first;
            while (end && strchr(" \t\r\n", text[end - 1])) end--;
            char *content = kvt_xstrndup(text, end);
            if (!k) tool_content(st, i, &h, content, 0);
            if (!k) cs->said = end;
            free(content);
            char id[96], *name = kvt_xstrndup(text + parts[k].name_at, parts[k].name_len);
            kvt_api_call_id(c->id, k, id, sizeof id);
            sse_event(st, kvt_api_call_delta_json(&h, k, id, name, NULL));
            free(name);
            cs->n_open++;
        }
        if (parts[k].args_len > cs->args_sent[k]) {
            char *frag = kvt_xstrndup(text + parts[k].args_at + cs->args_sent[k], parts[k].args_len - cs->args_sent[k]);
            sse_event(st, kvt_api_call_delta_json(&h, k, NULL, NULL, frag));
            free(frag);
            cs->args_sent[k] = parts[k].args_len;
        }
    }
}

/* The last tool-call events of done choice i (nc calls read from its whole text, content the text
 * outside them): the content not yet said, then for each call what its fragments did not carry, or
 * the whole call when none went out. Without calls the text not yet sent is content. */
static void calls_done(stream_state *st, int32_t i, const kvt_api_call *calls, size_t nc, const char *content, int cut) {
    srv_req *c = choice(st->r, i);
    choice_state *cs = &st->ch[i];
    kvt_api_head h = head_of(st->s, st->r, i);
    const char *rest = nc ? (cs->n_open ? "" : content)
        : cut && content  ? content + KVT_MIN(cs->said, strlen(content))
                          : (c->text ? c->text : "") + KVT_MIN(cs->said, c->text_len);
    tool_content(st, i, &h, rest, 1);
    for (size_t k = 0; k < nc; k++) {
        size_t sent = k < cs->n_open ? cs->args_sent[k] : 0, al = strlen(calls[k].arguments);
        if (k >= cs->n_open) sse_event(st, kvt_api_call_chunk_json(&h, &calls[k], k));
        else if (al > sent) sse_event(st, kvt_api_call_delta_json(&h, k, NULL, NULL, calls[k].arguments + sent));
    }
}

/* The events of choice i since the last ones: its text and logprobs, and when
 * it is done its tool calls and finish chunk. Called without s->mu; reads what
 * the engine published, copied under the lock. */
static void choice_events(stream_state *st, int32_t i) {
    kvt_server *s = st->s;
    srv_req *c = choice(st->r, i);
    choice_state *cs = &st->ch[i];
    kvt_api_head h = head_of(s, st->r, i);
    pthread_mutex_lock(&s->mu);
    int done = c->done;
    char *delta = NULL, *all = NULL; /* the new text; with tools, all of it (read for calls) */
    size_t all_len = c->text_len;
    if (!c->tools && c->text_len > cs->sent) {
        delta = kvt_xmalloc(c->text_len - cs->sent + 1);
        memcpy(delta, c->text + cs->sent, c->text_len - cs->sent + 1);
        cs->sent = c->text_len;
    } else if (c->tools && !done && c->text_len > cs->scanned) {
        all = kvt_xstrndup(c->text, c->text_len);
        cs->scanned = c->text_len;
    }
    /* the logprobs published since the last event ride with this one (the engine appends only) */
    kvt_api_logprob *lps = NULL;
    size_t n_lps = 0;
    if (c->logprobs && c->n_lp > cs->lp_sent && (!c->tools || done)) {
        n_lps = c->n_lp - cs->lp_sent;
        lps = kvt_xmalloc(n_lps * sizeof *lps);
        memcpy(lps, c->lp + cs->lp_sent, n_lps * sizeof *lps);
        cs->lp_sent = c->n_lp;
    }
    int32_t *ids = NULL, n_decoded = c->n_decoded; /* /completion: the ids of this piece, and the count */
    size_t n_ids = 0;
    if (c->native && c->n_gen_ids > cs->ids_sent) {
        n_ids = c->n_gen_ids - cs->ids_sent;
        ids = kvt_xmalloc(n_ids * sizeof *ids);
        memcpy(ids, c->gen_ids + cs->ids_sent, n_ids * sizeof *ids);
        cs->ids_sent = c->n_gen_ids;
    }
    pthread_mutex_unlock(&s->mu);
    kvt_api_logprobs lpv = {.items = lps, .n = n_lps, .tok = s->tok, .text_offset = cs->lp_offset};
    for (size_t k = 0; k < n_lps; k++) cs->lp_offset += kvt_api_token_chars(s->tok, lps[k].id);
    kvt_api_call *calls = NULL;
    char *content = NULL;
    size_t nc = 0;
    int cut = 0;
    if (done && !c->err_status)
        nc = kvt_srv_read_calls(s, c, &calls, &content, &cut); /* done is final: c->text stays */
    char *answer = NULL;                                       /* with tools the text goes with the calls */
    const char *text = c->tools ? NULL : split_piece(st, i, delta, done, &answer);
    if (((text && *text) || n_lps || n_ids) && c->native) /* ids of held-back text go with the next piece */
        sse_event(st, native_event(st, i, text ? text : "", 0, n_lps ? &lpv : NULL, ids, n_ids, n_decoded));
    else if ((text && *text) || n_lps)
        sse_event(st, kvt_api_chunk_json(&h, text ? text : "", 0, NULL, NULL, n_lps ? &lpv : NULL));
    if (all) call_fragments(st, i, all, all_len);
    if (c->tools && done && !c->err_status) calls_done(st, i, calls, nc, content, cut);
    if (done && !c->err_status && c->native) {
        sse_event(st, native_event(st, i, "", 1, NULL, NULL, 0, 0));
    } else if (done && !c->err_status) { /* the kvtier report (the prompt's) rides on the first choice's finish chunk */
        char *last = kvt_api_chunk_json(&h, NULL, 0, nc && !cut ? "tool_calls" : c->finish_reason, i ? NULL : &c->usage,
                                        NULL);
        sse_event(st, st->rag && !i ? with_rag(s, c, st->rag, last) : last);
    }
    if (done && !c->err_status) cs->closed = 1; /* a failure is sent by stream_read, as the whole response's */
    kvt_api_calls_free(calls, nc);
    free(content);
    free(answer);
    free(delta);
    free(all);
    free(lps);
    free(ids);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max) {
    stream_state *st = cls;
    kvt_server *s = st->s;
    srv_req *r = st->r;
    (void)pos;
    while (st->off == st->len) {
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        st->off = st->len = 0;
        if (!st->opened && r->kind == KVT_API_CHAT)
            for (int32_t i = 0; i < st->n; i++) {
                kvt_api_head h = head_of(s, r, i);
                sse_event(st, kvt_api_chunk_json(&h, NULL, 1, NULL, NULL, NULL));
            }
        st->opened = 1;
        pthread_mutex_lock(&s->mu);
        for (;;) {
            int news = 0;
            for (int32_t i = 0; i < st->n && !news; i++) news = has_news(st, i);
            if (news || st->len) break;
            kvt_srv_cond_wait_ms(&r->cv, &s->mu, WAIT_SLICE_MS);
            for (int32_t i = 0; i < st->n && !news; i++) news = has_news(st, i);
            if (news) break;
            pthread_mutex_unlock(&s->mu);
            int gone = kvt_srv_stream_waiting(st->conn, &st->held);
            pthread_mutex_lock(&s->mu);
            if (gone) {
                pthread_mutex_unlock(&s->mu);
                kvt_srv_cancel(s, r);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
        }
        int32_t err = -1, all_done = 0;
        for (int32_t i = 0; i < st->n; i++) {
            srv_req *c = choice(r, i);
            if (c->done && c->err_status && err < 0) err = i;
        }
        pthread_mutex_unlock(&s->mu);
        kvt_srv_stream_resume(s, st->conn, &st->held);
        if (err >= 0) {
            /* a failed choice fails the response; done is final, so err_msg stays */
            srv_req *c = choice(r, err);
            kvt_api_error e;
            kvt_api_errorf(&e, c->err_status, c->err_status >= 500 ? "server_error" : "invalid_request_error", NULL,
                           NULL, "%s", c->err_msg);
            kvt_srv_cancel(s, r);
            sse_event(st, kvt_api_error_json(&e));
        } else {
            /* done when every choice's finish chunk went out (a choice may finish while the others' events are made) */
            all_done = 1;
            for (int32_t i = 0; i < st->n; i++) {
                if (!st->ch[i].closed) choice_events(st, i);
                all_done &= st->ch[i].closed;
            }
        }
        if (err >= 0 || all_done) {
            kvt_api_head h = head_of(s, r, 0);
            kvt_api_usage u = kvt_srv_total_usage(r);
            if (err < 0 && r->include_usage && !r->native) sse_event(st, kvt_api_usage_chunk_json(&h, &u));
            *st->usage = u;
            *st->has_usage = 1;
            st->finished = 1;
            if (r->native) continue; /* llama-server's stream ends with its stop event, no [DONE] */
            size_t need = st->len + sizeof "data: [DONE]\n\n";
            if (need > st->cap) st->buf = kvt_xrealloc(st->buf, st->cap = need);
            st->len += (size_t)sprintf(st->buf + st->len, "data: [DONE]\n\n");
            st->finished = 1;
        }
    }
    size_t n = KVT_MIN(max, st->len - st->off);
    memcpy(out, st->buf + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream_state *st = cls;
    kvt_srv_cancel(st->s, st->r); /* a no-op when it finished; otherwise the client went away */
    pthread_mutex_lock(&st->s->mu);
    for (int32_t i = st->n - 1; i >= 0; i--) kvt_srv_req_unref_locked(choice(st->r, i));
    pthread_mutex_unlock(&st->s->mu);
    for (int32_t i = 0; i < st->n; i++) free(st->ch[i].held);
    free(st->buf);
    free(st->rag);
    free(st);
}

struct MHD_Response *kvt_srv_stream_response(kvt_server *s, srv_req *r, struct MHD_Connection *conn,
                                             kvt_api_usage *usage, int *has_usage, const kvt_api_rag *rag) {
    stream_state *st = kvt_xcalloc(1, sizeof *st);
    if (rag) {
        st->rag = kvt_xmalloc(sizeof *st->rag);
        *st->rag = *rag;
    }
    st->s = s;
    st->r = r;
    st->conn = conn;
    st->usage = usage;
    st->has_usage = has_usage;
    st->n = 1 + r->n_sib;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, st,
                                                                  stream_free);
    if (!resp) {
        stream_free(st);
        return NULL;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    return resp;
}
