// SPDX-License-Identifier: MIT
/* The last generations the server answered, each with its cache report
 * (tokens by tier, computed, where reuse stopped and why), for the
 * dashboard's "last requests" table and GET /dashboard/requests. A ring of
 * at most `cap` fixed-size entries, the oldest overwritten first: memory is
 * cap * sizeof(kvt_req_entry), whatever the prompts. No prompt text is kept
 * (the page is every tenant's; a diverged stop's token text stays in the
 * tenant's own response), tenants appear as the access log's key hash.
 *
 * Thread-safety: every function may be called from any thread (own mutex). */
#ifndef KVT_DASHBOARD_RING_H
#define KVT_DASHBOARD_RING_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

#define KVT_REQ_RING_DEFAULT 20 /* rows on the dashboard */
#define KVT_REQ_ID_MAX 65       /* bytes of a request id, with its NUL (REQUEST_ID_MAX) */
#define KVT_REQ_TENANT_MAX 9    /* 8 hex digits of the key's hash, or "-" */

typedef struct {
    double t_end; /* wall clock at the end, Unix seconds */
    char request_id[KVT_REQ_ID_MAX];
    const char *endpoint; /* the route's metrics label (static) */
    int status;
    char tenant[KVT_REQ_TENANT_MAX];
    int32_t prompt_tokens, computed_tokens, generated_tokens;
    int32_t tier_tokens[KVT_TIER_COUNT]; /* prompt tokens restored, by tier */
    double ttft_ms, total_ms;
    int has_stop; /* the request went through the cache: stop is filled */
    kvt_reuse_reason stop_reason;
    int32_t stop_block, stop_token; /* kvt_reuse_stop's block and token_offset */
} kvt_req_entry;

typedef struct kvt_req_ring kvt_req_ring;

kvt_req_ring *kvt_req_ring_new(int32_t cap);
void kvt_req_ring_free(kvt_req_ring *r);
/* Remembers one entry (copied). */
void kvt_req_ring_put(kvt_req_ring *r, const kvt_req_entry *e);
/* Copies the last at most max entries, newest first, into out[max]; returns their number. */
int32_t kvt_req_ring_take(kvt_req_ring *r, kvt_req_entry *out, int32_t max);

/* {"requests": [...]}, newest first, each entry's fields as keys
 * (reuse_stop {reason, block, token_offset}, null when the request did not go
 * through the cache):
 * malloc'd, the caller frees it. */
char *kvt_req_ring_json(const kvt_req_entry *e, int32_t n);

/* "reason@block/token" (kvt_reuse_reason_name), or "-" without a stop, into out. */
void kvt_req_stop_text(const kvt_req_entry *e, char *out, size_t cap);

#endif
