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
 *
 * Thread-safety: every function may be called from any thread (own mutex). */
#ifndef KVT_API_RESPONSES_STORE_H
#define KVT_API_RESPONSES_STORE_H

#include <stddef.h>

typedef struct kvt_resp_store kvt_resp_store;

kvt_resp_store *kvt_resp_store_new(size_t max_entries, size_t max_bytes, double ttl_s);
void kvt_resp_store_free(kvt_resp_store *st);
/* Keeps response_json and items_json (copied) as id under tenant (the API key, or NULL without keys;
 * only its hash is kept). A response larger than max_bytes alone is not kept (0 returned); 1 when kept. */
int kvt_resp_store_put(kvt_resp_store *st, const char *tenant, const char *id, const char *response_json,
                       const char *items_json);
/* Copies of the response and items of id under tenant (either out may be NULL), and marks it used.
 * Returns 1, or 0 when tenant holds no such response (another tenant's included). */
int kvt_resp_store_get(kvt_resp_store *st, const char *tenant, const char *id, char **response_json, char **items_json);
/* Forgets id under tenant. Returns 1, or 0 when there was none. */
int kvt_resp_store_delete(kvt_resp_store *st, const char *tenant, const char *id);
/* Responses held now. */
size_t kvt_resp_store_count(kvt_resp_store *st);

#endif
