// SPDX-License-Identifier: MIT
/* The ring of recent generations (dashboard_ring.h) and its JSON. */
#include "dashboard_ring.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "common.h"

struct kvt_req_ring {
    pthread_mutex_t mu;
    kvt_req_entry *e; /* cap entries; e[(head - 1 - i) mod cap] is the i-th newest */
    int32_t cap, head, n;
};

kvt_req_ring *kvt_req_ring_new(int32_t cap) {
    kvt_req_ring *r = kvt_xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    r->cap = KVT_MAX(cap, 1);
    r->e = kvt_xcalloc((size_t)r->cap, sizeof *r->e);
    return r;
}

void kvt_req_ring_free(kvt_req_ring *r) {
    if (!r) return;
    pthread_mutex_destroy(&r->mu);
    free(r->e);
    free(r);
}

void kvt_req_ring_put(kvt_req_ring *r, const kvt_req_entry *e) {
    pthread_mutex_lock(&r->mu);
    r->e[r->head] = *e;
    r->head = (r->head + 1) % r->cap;
    if (r->n < r->cap) r->n++;
    pthread_mutex_unlock(&r->mu);
}

int32_t kvt_req_ring_take(kvt_req_ring *r, kvt_req_entry *out, int32_t max) {
    pthread_mutex_lock(&r->mu);
    int32_t n = KVT_MIN(max, r->n);
    for (int32_t i = 0; i < n; i++) out[i] = r->e[(r->head - 1 - i + r->cap) % r->cap];
    pthread_mutex_unlock(&r->mu);
    return n;
}

void kvt_req_stop_text(const kvt_req_entry *e, char *out, size_t cap) {
    if (e->has_stop)
        snprintf(out, cap, "%s@%d/%d", kvt_reuse_reason_name(e->stop_reason), e->stop_block, e->stop_token);
    else snprintf(out, cap, "-");
}

char *kvt_req_ring_json(const kvt_req_entry *e, int32_t n) {
    static const char *const tiers[KVT_TIER_COUNT] = {"T0", "T1", "T2", "T3"};
    cJSON *root = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(root, "requests");
    for (int32_t i = 0; i < n; i++) {
        const kvt_req_entry *x = &e[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "t_end", x->t_end);
        cJSON_AddStringToObject(o, "request_id", x->request_id);
        cJSON_AddStringToObject(o, "endpoint", x->endpoint);
        cJSON_AddNumberToObject(o, "status", x->status);
        cJSON_AddStringToObject(o, "tenant", x->tenant);
        cJSON_AddNumberToObject(o, "prompt_tokens", x->prompt_tokens);
        cJSON *t = cJSON_AddObjectToObject(o, "cached_tokens_by_tier");
        for (int k = 0; k < KVT_TIER_COUNT; k++) cJSON_AddNumberToObject(t, tiers[k], x->tier_tokens[k]);
        cJSON_AddNumberToObject(o, "computed_tokens", x->computed_tokens);
        cJSON_AddNumberToObject(o, "generated_tokens", x->generated_tokens);
        cJSON_AddNumberToObject(o, "ttft_ms", x->ttft_ms);
        cJSON_AddNumberToObject(o, "total_ms", x->total_ms);
        if (x->has_stop) {
            cJSON *s = cJSON_AddObjectToObject(o, "reuse_stop");
            cJSON_AddStringToObject(s, "reason", kvt_reuse_reason_name(x->stop_reason));
            cJSON_AddNumberToObject(s, "block", x->stop_block);
            cJSON_AddNumberToObject(s, "token_offset", x->stop_token);
        } else {
            cJSON_AddNullToObject(o, "reuse_stop");
        }
        cJSON_AddItemToArray(a, o);
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s ? s : kvt_xstrdup("{\"requests\":[]}");
}
