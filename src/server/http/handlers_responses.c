// SPDX-License-Identifier: MIT
/* The Responses API's routes: POST /v1/responses runs a request as the chat
 * completion it turns into (api_responses.c builds its body, the chat parser,
 * templates, tools and grammars do the rest) and answers with a response
 * object or its stream of events; GET and DELETE /v1/responses/{id} read and
 * forget a stored one.
 *
 * Server-side state: a stored response keeps its whole conversation as items,
 * and previous_response_id puts them before the new input. They render to
 * the same messages as before, and the reply map and the tool-call memo give
 * the assistant turns the exact token ids they were generated with, so the
 * new prompt begins with the previous prompt and reply token for token and
 * their KV is reused from the cache (usage.input_tokens_details.cached_tokens).
 * A stored response also keeps those ids (its prompt's, then its reply's),
 * and what a follow-up's rendering must hold for them to stand for its
 * history: the follow-up then tokenizes only what comes after the reply
 * (kvtier.history_tokens_reused), and where it cannot (the template writes
 * the history otherwise now) it renders it all as before and says why.
 * Stored responses are the tenant's (its API key's) alone. */
#include "http_send.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "api_tools_stream.h"
#include "common.h"

#define RESP_PATH "/v1/responses/"
#define STREAM_CALLS 16       /* calls whose arguments stream as fragments; more go whole at the end */
#define NOT_OPEN ((size_t)-1) /* close_item: the item was not announced (output_item.added) yet */

/* One POST /v1/responses from its parse to its answer. */
typedef struct {
    kvt_api_resp_request rq;
    cJSON *history;         /* the stored items of previous_response_id (owned), or NULL */
    kvt_resp_prefix prefix; /* ... and its prompt and reply ids (owned; jinja -1: none kept) */
    srv_req *r;
    const char *key; /* the tenant (borrowed from the server's key list), or NULL */
    char id[KVT_API_RESP_ID_MAX];
} resp_job;

static void job_free(resp_job *j) {
    kvt_api_resp_request_free(&j->rq);
    cJSON_Delete(j->history);
    kvt_resp_prefix_free(&j->prefix);
    free(j);
}

/* The Responses name of a field the chat parser named, so an error names what the client sent
 * (a message's field, "messages[2].content", is input's: the items merge into other indices). */
static void rename_param(kvt_api_error *err) {
    static const char *const map[][2] = {{"max_completion_tokens", "max_output_tokens"},
                                         {"response_format", "text"},
                                         {"messages", "input"}};
    if (err->param && !strncmp(err->param, "messages[", 9)) err->param = "messages";
    for (size_t i = 0; err->param && i < KVT_ARRAY_LEN(map); i++)
        if (!strcmp(err->param, map[i][0])) {
            char msg[sizeof err->message];
            snprintf(msg, sizeof msg, "'%s': %.480s", map[i][1], err->message);
            memcpy(err->message, msg, sizeof msg);
            err->param = map[i][1];
        }
}

/* Replaces each item_reference in j's input by the stored output item it names (clients that keep
 * their own history, such as the AI SDK with store, send these for items of earlier responses).
 * The item must be in a response of the same tenant. 0, or -1 with *err (a 404 naming input). */
static int resolve_refs(kvt_server *s, resp_job *j, kvt_api_error *err) {
    size_t i = 0;
    for (cJSON *it = j->rq.input->child; it; it = it->next, i++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "item_reference")) continue;
        const char *want = cJSON_GetObjectItemCaseSensitive(it, "id")->valuestring;
        char owner[KVT_API_RESP_ID_MAX], *json = NULL;
        cJSON *resp = NULL, *found = NULL;
        if (kvt_api_resp_item_owner(want, owner, sizeof owner) &&
            kvt_resp_store_get(s->responses, j->key, owner, &json, NULL, NULL, NULL))
            resp = cJSON_Parse(json);
        free(json);
        cJSON *out = cJSON_GetObjectItemCaseSensitive(resp, "output");
        for (cJSON *o = out ? out->child : NULL; o && !found; o = o->next) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
            if (cJSON_IsString(id) && !strcmp(id->valuestring, want)) found = cJSON_Duplicate(o, 1);
        }
        cJSON_Delete(resp);
        if (!found)
            return kvt_api_errorf(err, 404, "invalid_request_error", "input", "item_not_found",
                                  "input[%zu]: item '%.96s' not found among this API key's stored responses", i, want);
        cJSON_ReplaceItemViaPointer(j->rq.input, it, found);
        it = found;
    }
    return 0;
}

/* The request j runs: the chat body of its items after the stored history, parsed and made into
 * an engine request. 0, or -1 with *err filled. */
static int job_request(kvt_server *s, const conn_state *cs, resp_job *j, kvt_api_error *err) {
    if (j->rq.previous_id) {
        char *items = NULL;
        void *state = NULL;
        size_t state_len = 0;
        if (!kvt_resp_store_get(s->responses, j->key, j->rq.previous_id, NULL, &items, &state, &state_len))
            return kvt_api_errorf(err, 404, "invalid_request_error", "previous_response_id",
                                  "previous_response_not_found",
                                  "Previous response with id '%.96s' not found (it belongs to another API key, was "
                                  "deleted, was not stored, expired (--responses-ttl) or was dropped (--responses-max))",
                                  j->rq.previous_id);
        j->history = cJSON_Parse(items);
        free(items);
        kvt_resp_prefix_unpack(state, state_len, &j->prefix);
        free(state);
    }
    if (resolve_refs(s, j, err)) return -1;
    char *chat = kvt_api_resp_chat_body(&j->rq, j->history, err);
    kvt_api_request a;
    int rc = !chat || kvt_srv_parse_body(s, R_CHAT, chat, strlen(chat), &a, err);
    free(chat);
    if (rc) {
        rename_param(err);
        return -1;
    }
    a.history = j->rq.previous_id ? &j->prefix : NULL;
    a.keep_history = j->rq.store;
    kvt_srv_session_default(s, cs, &a.session);
    j->r = kvt_srv_make_request(s, &a, j->key, err);
    a.history = NULL;
    kvt_api_request_free(&a);
    if (!j->r) {
        rename_param(err);
        return -1;
    }
    j->r->stream = j->rq.stream; /* a stream the server's stop cuts while generating ends as a reply cut short */
    const char *dash = strrchr(j->r->id, '-');
    snprintf(j->id, sizeof j->id, "resp_%s", dash ? dash + 1 : j->r->id);
    snprintf(j->r->request_id, sizeof j->r->request_id, "%s", cs->request_id);
    return 0;
}

/* What a follow-up of r needs to skip its history (kvt_resp_prefix packed): r's prompt's ids and its
 * reply's, after (Jinja) its prompt's rendering the reply's text; NULL when r kept none (its reply's
 * text does not end on a token, or its prompt cannot be rendered again as it was). */
static void *kept_state(const srv_req *r, size_t *len) {
    if (!r->kept || !r->reply_ids) return NULL;
    kvt_resp_prefix p = *r->kept;
    size_t tl = r->kept->text_len;
    p.text_len = tl + r->text_len;
    p.text = kvt_xmalloc(p.text_len + 1);
    memcpy(p.text, r->kept->text, tl);
    memcpy(p.text + tl, r->text, r->text_len);
    p.n_ids = (size_t)r->n_prompt + r->n_reply_ids;
    p.ids = kvt_xmalloc(p.n_ids * sizeof *p.ids);
    memcpy(p.ids, r->prompt, (size_t)r->n_prompt * sizeof *p.ids);
    memcpy(p.ids + r->n_prompt, r->reply_ids, r->n_reply_ids * sizeof *p.ids);
    void *blob = kvt_resp_prefix_pack(&p, len);
    kvt_resp_prefix_free(&p);
    return blob;
}

/* Gives item k of a response's items an id where the client sent none (the response's, numbered),
 * as OpenAI's items all have one: the input_items list names them, on every later listing too. */
static void item_id(cJSON *it, const char *resp_id, size_t k) {
    if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(it, "id"))) return;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
    int msg = !cJSON_IsString(type) || !strcmp(type->valuestring, "message");
    char id[ID_LEN + 32];
    snprintf(id, sizeof id, "%s_%s_%zu", msg ? "msg" : "item", resp_id + (strncmp(resp_id, "resp_", 5) ? 0 : 5), k);
    cJSON_DeleteItemFromObjectCaseSensitive(it, "id");
    cJSON_AddStringToObject(it, "id", id);
}

/* A stored input item in the shape of OpenAI's input_items list: for a message its type, status
 * and content as parts. */
static void input_item_shape(cJSON *it) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "message")) return;
    if (!type) cJSON_AddStringToObject(it, "type", "message");
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
    if (cJSON_IsString(content)) {
        cJSON *parts = cJSON_CreateArray(), *part = cJSON_CreateObject();
        int out = cJSON_IsString(role) && !strcmp(role->valuestring, "assistant");
        cJSON_AddStringToObject(part, "type", out ? "output_text" : "input_text");
        cJSON_AddStringToObject(part, "text", content->valuestring);
        cJSON_AddItemToArray(parts, part);
        cJSON_ReplaceItemInObjectCaseSensitive(it, "content", parts);
    }
    if (!cJSON_GetObjectItemCaseSensitive(it, "status")) cJSON_AddStringToObject(it, "status", "completed");
}

/* The finished response of j: its object (a new cJSON, the caller's), stored with its conversation
 * when the request asked (store). */
static cJSON *job_finish(kvt_server *s, resp_job *j, const char *status) {
    srv_req *r = j->r;
    kvt_api_call *calls = NULL;
    char *content = NULL;
    int cut = 0;
    size_t nc = r->err_status ? 0 : kvt_srv_read_calls(s, r, &calls, &content, &cut);
    /* a complete call is the answer, however many tokens the grammar let the model write after it;
     * a call the budget cut is returned as far as it got, in an incomplete response */
    int length = (!nc || cut) && r->finish_reason && !strcmp(r->finish_reason, "length");
    kvt_api_resp_result res = {.id = j->id,
                               .created = r->created,
                               .model = s->p.model_id,
                               .status = status ? status
                                   : length     ? "incomplete"
                                                : "completed",
                               /* a stream the server's stop cut short did not reach the client's budget */
                               .incomplete = !length ? NULL
                                   : r->cut_by_stop  ? "server_shutting_down"
                                                     : "max_output_tokens",
                               .text = nc || cut ? content
                                   : r->text     ? r->text
                                                 : "",
                               .calls = calls,
                               .n_calls = nc,
                               .u = &r->usage,
                               .req = &j->rq};
    cJSON *output = kvt_api_resp_output(&res);
    cJSON *obj = kvt_api_resp_obj(&res, output);
    if (j->rq.store && !status) {
        cJSON *items = j->history ? cJSON_Duplicate(j->history, 1) : cJSON_CreateArray();
        for (const cJSON *it = j->rq.input->child; it; it = it->next) {
            cJSON *copy = cJSON_Duplicate(it, 1);
            item_id(copy, j->id, (size_t)cJSON_GetArraySize(items));
            cJSON_AddItemToArray(items, copy);
        }
        for (const cJSON *it = output->child; it; it = it->next) cJSON_AddItemToArray(items, cJSON_Duplicate(it, 1));
        char *json = cJSON_PrintUnformatted(obj), *items_json = cJSON_PrintUnformatted(items);
        size_t state_len = 0;
        void *state = kept_state(r, &state_len);
        kvt_resp_store_put(s->responses, j->key, j->id, json, items_json, state, state_len);
        free(state);
        free(json);
        free(items_json);
        cJSON_Delete(items);
    }
    cJSON_Delete(output);
    kvt_api_calls_free(calls, nc);
    free(content);
    return obj;
}

static char *print_free(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* ---- streaming ------------------------------------------------------------------------------ */

typedef struct {
    kvt_server *s;
    resp_job *j;
    struct MHD_Connection *conn;
    kvt_api_usage *usage; /* for the access log (the caller's) */
    int *has_usage;
    char *buf; /* event bytes not yet handed to MHD */
    size_t len, off, cap;
    int64_t seq;
    int opened, finished, msg_open;
    int held;    /* the connection's idle timeout is off while the stream waits (kvt_srv_stream_waiting) */
    size_t sent; /* bytes of the text sent as output_text deltas */
    /* with tools: calls stream as they are written (kvt_api_calls_partial) */
    size_t scanned;                 /* bytes of the text read for calls */
    int msg_closed;                 /* the text before the first call went out as the message item */
    size_t n_open;                  /* calls announced (output_item.added) */
    size_t args_sent[STREAM_CALLS]; /* ... and bytes of each one's arguments sent */
} rstream;

static void emit(rstream *st, const char *type, cJSON *fields) {
    char *ev = kvt_api_resp_event(type, st->seq++, fields);
    size_t n = strlen(ev);
    if (st->len + n > st->cap) st->buf = kvt_xrealloc(st->buf, st->cap = KVT_MAX(st->cap * 2, st->len + n));
    memcpy(st->buf + st->len, ev, n);
    st->len += n;
    free(ev);
}

/* Fields of an event about output item index (and its id). */
static cJSON *at_item(int index, const char *item_id) {
    cJSON *f = cJSON_CreateObject();
    if (item_id) cJSON_AddStringToObject(f, "item_id", item_id);
    cJSON_AddNumberToObject(f, "output_index", index);
    return f;
}

static void emit_response(rstream *st, const char *type, cJSON *obj) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddItemToObject(f, "response", obj);
    emit(st, type, f);
}

/* The message item opens: output_item.added, then its output_text part. */
static void open_message(rstream *st) {
    char id[KVT_API_RESP_ID_MAX + 16];
    kvt_api_resp_item_id(st->j->id, 0, 0, id, sizeof id);
    cJSON *f = at_item(0, NULL), *item = cJSON_AddObjectToObject(f, "item");
    cJSON_AddStringToObject(item, "id", id);
    cJSON_AddStringToObject(item, "type", "message");
    cJSON_AddStringToObject(item, "status", "in_progress");
    cJSON_AddStringToObject(item, "role", "assistant");
    cJSON_AddArrayToObject(item, "content");
    emit(st, "response.output_item.added", f);
    f = at_item(0, id);
    cJSON_AddNumberToObject(f, "content_index", 0);
    cJSON *part = cJSON_AddObjectToObject(f, "part");
    cJSON_AddStringToObject(part, "type", "output_text");
    cJSON_AddStringToObject(part, "text", "");
    cJSON_AddArrayToObject(part, "annotations");
    emit(st, "response.content_part.added", f);
    st->msg_open = 1;
}

static void text_delta(rstream *st, const char *text) {
    char id[KVT_API_RESP_ID_MAX + 16];
    kvt_api_resp_item_id(st->j->id, 0, 0, id, sizeof id);
    cJSON *f = at_item(0, id);
    cJSON_AddNumberToObject(f, "content_index", 0);
    cJSON_AddStringToObject(f, "delta", text);
    cJSON_AddArrayToObject(f, "logprobs");
    emit(st, "response.output_text.delta", f);
}

/* The events that close output item k: the message's text and part done, or a call's arguments
 * (announced first unless sent is a count of argument bytes already sent: the rest as one delta,
 * then done), then output_item.done. */
static void close_item(rstream *st, const cJSON *item, int k, size_t sent) {
    const char *id = cJSON_GetObjectItemCaseSensitive(item, "id")->valuestring;
    const char *type = cJSON_GetObjectItemCaseSensitive(item, "type")->valuestring;
    cJSON *f;
    if (!strcmp(type, "message")) {
        const cJSON *part = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(item, "content"), 0);
        f = at_item(k, id);
        cJSON_AddNumberToObject(f, "content_index", 0);
        cJSON_AddStringToObject(f, "text", cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring);
        cJSON_AddArrayToObject(f, "logprobs");
        emit(st, "response.output_text.done", f);
        f = at_item(k, id);
        cJSON_AddNumberToObject(f, "content_index", 0);
        cJSON_AddItemToObject(f, "part", cJSON_Duplicate(part, 1));
        emit(st, "response.content_part.done", f);
    } else {
        const char *args = cJSON_GetObjectItemCaseSensitive(item, "arguments")->valuestring;
        if (sent == NOT_OPEN) {
            f = at_item(k, NULL);
            cJSON *added = cJSON_Duplicate(item, 1);
            cJSON_ReplaceItemInObject(added, "arguments", cJSON_CreateString(""));
            cJSON_ReplaceItemInObject(added, "status", cJSON_CreateString("in_progress"));
            cJSON_AddItemToObject(f, "item", added);
            emit(st, "response.output_item.added", f);
            sent = 0;
        }
        if (strlen(args) > sent) {
            f = at_item(k, id);
            cJSON_AddStringToObject(f, "delta", args + sent);
            emit(st, "response.function_call_arguments.delta", f);
        }
        f = at_item(k, id);
        cJSON_AddStringToObject(f, "arguments", args);
        emit(st, "response.function_call_arguments.done", f);
    }
    f = at_item(k, NULL);
    cJSON_AddItemToObject(f, "item", cJSON_Duplicate(item, 1));
    emit(st, "response.output_item.done", f);
}

/* With tools, the calls as the text grows (text[0..len), copied): the text before the first call
 * as the message item, whole, when that call begins; each call announced (output_item.added) once
 * its name is written; its arguments in fragments as they come. stream_end sends the rest. */
static void stream_calls(rstream *st, const char *text, size_t len) {
    srv_req *r = st->j->r;
    kvt_api_call_part parts[STREAM_CALLS];
    size_t first,
        n = kvt_api_calls_partial(st->s->p.chat, text, len, parts, r->parallel_tool_calls ? STREAM_CALLS : 1, &first);
    for (size_t k = 0; k < n; k++) {
        char id[KVT_API_RESP_ID_MAX + 16], call_id[96];
        if (!k && !st->n_open) { /* the content before the calls, as the final answer trims it */
            size_t end = first;
            while (end && strchr(" \t\r\n", text[end - 1])) end--;
            char *content = kvt_xstrndup(text, end);
            if (*content) {
                kvt_api_resp_result res = {.id = st->j->id, .status = "completed", .text = content};
                cJSON *items = kvt_api_resp_output(&res);
                open_message(st);
                text_delta(st, content);
                close_item(st, items->child, 0, NOT_OPEN);
                cJSON_Delete(items);
                st->msg_closed = 1;
            }
            free(content);
        }
        int index = (int)k + st->msg_closed;
        kvt_api_resp_item_id(st->j->id, 1, k, id, sizeof id);
        if (k == st->n_open) {
            kvt_api_call_id(r->id, k, call_id, sizeof call_id);
            cJSON *f = at_item(index, NULL), *item = cJSON_AddObjectToObject(f, "item");
            cJSON_AddStringToObject(item, "id", id);
            cJSON_AddStringToObject(item, "type", "function_call");
            cJSON_AddStringToObject(item, "status", "in_progress");
            cJSON_AddStringToObject(item, "call_id", call_id);
            char *name = kvt_xstrndup(text + parts[k].name_at, parts[k].name_len);
            cJSON_AddStringToObject(item, "name", name);
            free(name);
            cJSON_AddStringToObject(item, "arguments", "");
            emit(st, "response.output_item.added", f);
            st->n_open++;
        }
        if (parts[k].args_len > st->args_sent[k]) {
            cJSON *f = at_item(index, id);
            char *frag = kvt_xstrndup(text + parts[k].args_at + st->args_sent[k], parts[k].args_len - st->args_sent[k]);
            cJSON_AddStringToObject(f, "delta", frag);
            free(frag);
            emit(st, "response.function_call_arguments.delta", f);
            st->args_sent[k] = parts[k].args_len;
        }
    }
}

/* The end of a stream whose request failed after its 200 went out (the server shut down before
 * its turn, or the engine failed it): an error event, then response.failed with the response as
 * failed, its error set and no output, so a client waiting for the response's last event gets
 * one. A failed response is not stored. */
static void stream_fail(rstream *st) {
    srv_req *r = st->j->r;
    const char *code = r->err_status >= 500 ? "server_error" : "invalid_request_error";
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "code", code);
    cJSON_AddStringToObject(f, "message", r->err_msg);
    cJSON_AddNullToObject(f, "param");
    emit(st, "error", f);
    kvt_api_resp_result res = {.id = st->j->id,
                               .created = r->created,
                               .model = st->s->p.model_id,
                               .status = "failed",
                               .text = "",
                               .u = &r->usage,
                               .req = &st->j->rq};
    cJSON *obj = kvt_api_resp_obj(&res, NULL), *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", r->err_msg);
    cJSON_ReplaceItemInObjectCaseSensitive(obj, "error", e);
    emit_response(st, "response.failed", obj);
}

/* The last events, once the request is done: the output items' closing events, then
 * response.completed (or .incomplete), or stream_fail's when it failed. */
static void stream_end(rstream *st) {
    srv_req *r = st->j->r;
    *st->usage = r->usage;
    *st->has_usage = 1;
    st->finished = 1;
    if (r->err_status) {
        stream_fail(st);
        return;
    }
    cJSON *obj = job_finish(st->s, st->j, NULL);
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(obj, "output");
    int k = 0, msg = 0;
    for (const cJSON *item = out->child; item; item = item->next, k++) {
        const char *type = cJSON_GetObjectItemCaseSensitive(item, "type")->valuestring;
        size_t call = (size_t)(k - msg); /* the call's index among the calls */
        if (!strcmp(type, "message")) {
            msg = 1;
            if (st->msg_closed) continue; /* it went out before the first call */
            if (!st->msg_open) {
                open_message(st);
                const cJSON *part = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(item, "content"), 0);
                const char *text = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
                if (*text) text_delta(st, text);
            }
        }
        int is_call = strcmp(type, "message") != 0;
        close_item(st, item, k, !is_call || call >= st->n_open ? NOT_OPEN : st->args_sent[call]);
    }
    const char *status = cJSON_GetObjectItemCaseSensitive(obj, "status")->valuestring;
    emit_response(st, strcmp(status, "incomplete") ? "response.completed" : "response.incomplete", obj);
}

/* Whether r has news for the stream (s->mu held): done, or more text to send or read for calls. */
static int has_news(const rstream *st, const srv_req *r) {
    return r->done || r->text_len > (r->tools ? st->scanned : st->sent);
}

/* Waits for news of r (s->mu held). -1: the client left. */
static int wait_news(rstream *st) {
    kvt_server *s = st->s;
    srv_req *r = st->j->r;
    for (;;) {
        if (has_news(st, r)) return 0;
        kvt_srv_cond_wait_ms(&r->cv, &s->mu, WAIT_SLICE_MS);
        if (has_news(st, r)) return 0;
        pthread_mutex_unlock(&s->mu);
        int gone = kvt_srv_stream_waiting(st->conn, &st->held);
        pthread_mutex_lock(&s->mu);
        if (gone) return -1;
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max) {
    rstream *st = cls;
    kvt_server *s = st->s;
    srv_req *r = st->j->r;
    (void)pos;
    while (st->off == st->len) {
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        st->off = st->len = 0;
        if (!st->opened) {
            kvt_api_resp_result res = {.id = st->j->id,
                                       .created = r->created,
                                       .model = s->p.model_id,
                                       .status = "in_progress",
                                       .text = "",
                                       .req = &st->j->rq};
            emit_response(st, "response.created", kvt_api_resp_obj(&res, NULL));
            emit_response(st, "response.in_progress", kvt_api_resp_obj(&res, NULL));
            st->opened = 1;
            continue;
        }
        pthread_mutex_lock(&s->mu);
        if (wait_news(st)) {
            pthread_mutex_unlock(&s->mu);
            kvt_srv_cancel(s, r);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        int done = r->done;
        char *delta = NULL, *all = NULL;
        size_t all_len = r->text_len;
        if (!r->tools && r->text_len > st->sent) {
            delta = kvt_xstrndup(r->text + st->sent, r->text_len - st->sent);
            st->sent = r->text_len;
        } else if (r->tools && !done && r->text_len > st->scanned) {
            all = kvt_xstrndup(r->text, r->text_len);
            st->scanned = r->text_len;
        }
        pthread_mutex_unlock(&s->mu);
        kvt_srv_stream_resume(s, st->conn, &st->held);
        if (delta && !st->msg_open) open_message(st);
        if (delta) text_delta(st, delta);
        if (all) stream_calls(st, all, all_len);
        free(delta);
        free(all);
        if (done) stream_end(st); /* done is final: the engine no longer writes r */
    }
    size_t n = KVT_MIN(max, st->len - st->off);
    memcpy(out, st->buf + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    rstream *st = cls;
    kvt_srv_cancel(st->s, st->j->r); /* a no-op when it finished; otherwise the client went away */
    kvt_srv_req_unref(st->s, st->j->r);
    job_free(st->j);
    free(st->buf);
    free(st);
}

static enum MHD_Result send_stream(kvt_server *s, struct MHD_Connection *c, conn_state *cs, resp_job *j) {
    rstream *st = kvt_xcalloc(1, sizeof *st);
    st->s = s;
    st->j = j;
    st->conn = c;
    st->usage = &cs->usage;
    st->has_usage = &cs->has_usage;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, st,
                                                                  stream_free);
    if (!resp) {
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    return kvt_srv_send_response(s, c, cs->label, MHD_HTTP_OK, resp);
}

/* ---- the routes ----------------------------------------------------------------------------- */

static enum MHD_Result handle_create(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    kvt_api_error err;
    resp_job *j = kvt_xcalloc(1, sizeof *j);
    j->key = cs->key;
    if (kvt_api_resp_parse(cs->body ? cs->body : "", cs->len, &j->rq, &err) || job_request(s, cs, j, &err)) {
        job_free(j);
        return kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
    }
    srv_req *r = j->r;
    kvt_prompt_ring_put(s->recent, r->salt, r->salt_len, r->prompt, r->n_prompt);
    if (kvt_srv_enqueue(s, r)) {
        kvt_srv_req_unref(s, r);
        job_free(j);
        kvt_api_errorf(&err, 503, "server_error", NULL, "overloaded",
                       "the server is busy (%d requests queued) or shutting down; retry later", s->p.queue);
        return kvt_srv_send_error(s, c, cs->label, &err, MHD_HTTP_HEADER_RETRY_AFTER, RETRY_AFTER_S);
    }
    if (j->rq.stream) return send_stream(s, c, cs, j);
    if (kvt_srv_wait_done(s, c, &r, 1, &r, 1)) { /* one choice (no n here): all done is r->done */
        kvt_srv_req_unref(s, r);
        job_free(j);
        cs->status = STATUS_CLIENT_GONE;
        kvt_metrics_count_request(s->metrics, cs->label, STATUS_CLIENT_GONE);
        return MHD_NO;
    }
    cs->usage = r->usage; /* done is final: the engine no longer writes r */
    cs->has_usage = 1;
    enum MHD_Result ret;
    if (r->err_status) {
        kvt_api_errorf(&err, r->err_status, r->err_status >= 500 ? "server_error" : "invalid_request_error", NULL, NULL,
                       "%s", r->err_msg);
        ret = kvt_srv_send_error(s, c, cs->label, &err, r->err_status == 503 ? MHD_HTTP_HEADER_RETRY_AFTER : NULL,
                                 RETRY_AFTER_S);
    } else {
        char *json = print_free(job_finish(s, j, NULL));
        ret = kvt_srv_send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", json, NULL, NULL);
    }
    kvt_srv_req_unref(s, r);
    job_free(j);
    return ret;
}

/* GET /v1/responses/{id}: the stored response; DELETE: forgets it. Another tenant's is a 404. */
static enum MHD_Result handle_item(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    const char *id = cs->path + strlen(RESP_PATH);
    char *json = NULL;
    int found = !strcmp(cs->method, "DELETE") ? kvt_resp_store_delete(s->responses, cs->key, id)
                                              : kvt_resp_store_get(s->responses, cs->key, id, &json, NULL, NULL, NULL);
    if (!found) {
        kvt_api_error err;
        kvt_api_errorf(&err, 404, "invalid_request_error", NULL, "not_found", "Response with id '%.96s' not found", id);
        return kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
    }
    if (!json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", id);
        cJSON_AddStringToObject(o, "object", "response");
        cJSON_AddBoolToObject(o, "deleted", 1);
        json = print_free(o);
    }
    return kvt_srv_send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", json, NULL, NULL);
}

/* The page of input_items: of the n items in[], newest first unless asc, at most limit of them
 * after the one whose id is after (NULL: from the first). NULL (and *err) when no item is after. */
static cJSON *input_page(cJSON *const *in, size_t n, int asc, long limit, const char *after, kvt_api_error *err) {
    size_t k = 0;
    if (after) {
        while (k < n && strcmp(cJSON_GetObjectItemCaseSensitive(in[asc ? k : n - 1 - k], "id")->valuestring, after))
            k++;
        if (k == n) {
            kvt_api_errorf(err, 400, "invalid_request_error", "after", "invalid_value",
                           "'after' names no input item of this response: '%.96s'", after);
            return NULL;
        }
        k++;
    }
    cJSON *o = cJSON_CreateObject(), *data = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToObject(o, "data", data);
    const char *first = NULL, *last = NULL;
    for (long taken = 0; k < n && taken < limit; k++, taken++) {
        cJSON *it = in[asc ? k : n - 1 - k];
        last = cJSON_GetObjectItemCaseSensitive(it, "id")->valuestring;
        if (!first) first = last;
        cJSON_AddItemReferenceToArray(data, it);
    }
    cJSON_AddItemToObject(o, "first_id", first ? cJSON_CreateString(first) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "last_id", last ? cJSON_CreateString(last) : cJSON_CreateNull());
    cJSON_AddBoolToObject(o, "has_more", k < n);
    return o;
}

/* GET /v1/responses/{id}/input_items: the items the response was made from (the history its
 * previous_response_id named, then its input), with order (desc, the default, or asc), limit (1 to
 * 100, default 20) and after, as OpenAI's list takes them. Another tenant's response is a 404. */
static enum MHD_Result handle_input_items(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    char id[ID_LEN];
    const char *seg = cs->path + strlen(RESP_PATH);
    snprintf(id, sizeof id, "%.*s", (int)strcspn(seg, "/"), seg);
    const char *order = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "order");
    const char *lim = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
    const char *after = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "after");
    kvt_api_error err;
    char *end = NULL;
    long limit = lim ? strtol(lim, &end, 10) : 20;
    if (order && strcmp(order, "asc") && strcmp(order, "desc"))
        kvt_api_errorf(&err, 400, "invalid_request_error", "order", "invalid_value", "'order' must be asc or desc");
    else if (lim && (!*lim || *end || limit < 1 || limit > 100))
        kvt_api_errorf(&err, 400, "invalid_request_error", "limit", "invalid_value",
                       "'limit' must be an integer from 1 to 100");
    else err.status = 0;
    if (err.status) return kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
    char *json = NULL, *items_json = NULL;
    if (!kvt_resp_store_get(s->responses, cs->key, id, &json, &items_json, NULL, NULL)) {
        kvt_api_errorf(&err, 404, "invalid_request_error", NULL, "not_found", "Response with id '%.96s' not found", id);
        return kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
    }
    cJSON *resp = cJSON_Parse(json), *items = cJSON_Parse(items_json);
    free(json);
    free(items_json);
    size_t n_all = (size_t)cJSON_GetArraySize(items);
    size_t n_out = (size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(resp, "output"));
    size_t n = n_all > n_out ? n_all - n_out : 0; /* the items after them are its output */
    cJSON **in = kvt_xcalloc(n + 1, sizeof *in);
    size_t k = 0;
    for (cJSON *it = items ? items->child : NULL; it && k < n; it = it->next, k++) {
        item_id(it, id, k); /* job_finish stored them with ids: this changes nothing then */
        input_item_shape(it);
        in[k] = it;
    }
    cJSON *page = input_page(in, n, order && !strcmp(order, "asc"), limit, after, &err);
    enum MHD_Result ret = page
        ? kvt_srv_send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", print_free(page), NULL, NULL)
        : kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
    free(in);
    cJSON_Delete(items);
    cJSON_Delete(resp);
    return ret;
}

enum MHD_Result kvt_srv_handle_responses(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    if (cs->r == R_RESPONSE_INPUT) return handle_input_items(s, c, cs);
    return cs->r == R_RESPONSES ? handle_create(s, c, cs) : handle_item(s, c, cs);
}
