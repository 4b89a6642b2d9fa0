// SPDX-License-Identifier: MIT
/* The stored responses of POST /v1/responses (store, the default): for each
 * one its response object (GET /v1/responses/{id}) and its whole
 * conversation as items (the previous items, its input and its output),
 * which a later request names by previous_response_id. Each belongs to its
 * tenant (a hash of the API key it was made with): another tenant finds
 * nothing under its id, exactly as if it did not exist. The store holds at
 * most max_entries responses and max_bytes of their text; past either the
 * least recently used go first. A response older than ttl_s seconds (from
 * when it was kept, however often it was read since) is gone, exactly as if
 * it had been deleted; ttl_s 0 keeps them until they are pushed out.
 * Beside its items a response may keep a state (kvt_resp_prefix packed):
 * the ids of its prompt and reply, so that a follow-up skips its history;
 * it counts against max_bytes and is as private as the rest.
 *
 * Thread-safety: every function may be called from any thread (own mutex). */
#ifndef KVT_API_RESPONSES_STORE_H
#define KVT_API_RESPONSES_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct kvt_resp_store kvt_resp_store;

/* What a follow-up naming a stored response needs to take that response's
 * history as ids instead of rendering and tokenizing it again: the ids the
 * engine saw (its prompt, then its reply's generated ids) and what a new
 * rendering must hold for them to stand for its beginning. */
typedef struct kvt_resp_prefix {
    int jinja;        /* rendered by the model's Jinja template (1), the built-in family (0); -1: nothing kept */
    uint64_t n_msgs;  /* chat messages its prompt rendered: its reply is message n_msgs of a follow-up */
    uint64_t hash[2]; /* Jinja: of the template's variables but the messages; built-in: of messages[0..n_msgs) */
    char why[24];     /* its report's first assistant turn not spliced (rerendered_turn's reason), "" none */
    int32_t why_msg;  /* ... and that turn's message */
    char *text;       /* Jinja: its prompt's rendering, then its reply's text; built-in: the reply's text */
    size_t text_len;
    int32_t *ids; /* its prompt's ids, then its reply's */
    size_t n_ids;
} kvt_resp_prefix;

/* p as one malloc'd blob of *len bytes, for kvt_resp_store_put. */
void *kvt_resp_prefix_pack(const kvt_resp_prefix *p, size_t *len);
/* The prefix packed in blob[0..len) into *p (its text and ids malloc'd; kvt_resp_prefix_free). 1, or 0
 * (and p->jinja -1, nothing allocated) when blob is NULL or not one kvt_resp_prefix_pack made. */
int kvt_resp_prefix_unpack(const void *blob, size_t len, kvt_resp_prefix *p);
void kvt_resp_prefix_free(kvt_resp_prefix *p);

kvt_resp_store *kvt_resp_store_new(size_t max_entries, size_t max_bytes, double ttl_s);
void kvt_resp_store_free(kvt_resp_store *st);
/* Keeps response_json, items_json and state[0..state_len) (copied; state may be NULL) as id under
 * tenant (the API key, or NULL without keys; only its hash is kept). A response larger than max_bytes
 * alone is not kept (0 returned); 1 when kept. */
int kvt_resp_store_put(kvt_resp_store *st, const char *tenant, const char *id, const char *response_json,
                       const char *items_json, const void *state, size_t state_len);
/* Copies of the response, items and state of id under tenant (any out may be NULL; *state NULL and
 * *state_len 0 when it kept none), and marks it used. Returns 1, or 0 when tenant holds no such
 * response (another tenant's included). */
int kvt_resp_store_get(kvt_resp_store *st, const char *tenant, const char *id, char **response_json, char **items_json,
                       void **state, size_t *state_len);
/* Forgets id under tenant. Returns 1, or 0 when there was none. */
int kvt_resp_store_delete(kvt_resp_store *st, const char *tenant, const char *id);
/* Responses held now. */
size_t kvt_resp_store_count(kvt_resp_store *st);

#endif
