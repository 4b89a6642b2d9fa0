// SPDX-License-Identifier: MIT
/* The routing surface of a node: GET|POST /v1/cache/lookup (where a prompt's
 * prefix is cached on this node, by tier, and its block keys) and GET
 * /v1/cache/events (the store/evict feed a router indexes, cache_events.h). */
#include "http_send.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_body.h"
#include "common.h"

/* Runs a lookup job on the engine thread and waits for its answer (as the admin jobs do). */
static enum MHD_Result lookup_on_engine(kvt_server *s, struct MHD_Connection *c, conn_state *cs, srv_req *r) {
    admin_job *j = kvt_xcalloc(1, sizeof *j);
    j->kind = JOB_LOOKUP;
    j->r = r;
    j->admin = cs->admin;
    enum MHD_Result ret;
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        ret = kvt_srv_send_errorf(s, c, cs->label, 503, "server_error", "shutting_down", "the server is shutting down");
    } else {
        j->next = s->jobs;
        s->jobs = j;
        pthread_cond_signal(&s->engine_cv);
        while (!j->done) kvt_srv_cond_wait_ms(&s->job_cv, &s->mu, ADMIN_WAIT_MS);
        pthread_mutex_unlock(&s->mu);
        ret = kvt_srv_send_text(s, c, cs->label, j->status, "application/json", j->json, NULL, NULL);
        j->json = NULL;
    }
    free(j->json);
    free(j);
    return ret;
}

/* The body names a prompt as the generation routes do ("messages" or "prompt"),
 * tokenized as they would (chat template, remembered replies, documents) under
 * the caller's namespace (API key, then cache_salt). ?tiers=0 answers the keys
 * alone, on this thread, without waiting for the engine (what a router asks). */
enum MHD_Result kvt_srv_handle_lookup(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    kvt_api_error err;
    /* a GET body skipped the POST check in the router */
    if (!strcmp(cs->method, "GET") &&
        kvt_api_check_body(KVT_BODY_PROMPT, cs->body ? cs->body : "", cs->len, s->p.strict, &err))
        return kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
    const char *tv = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "tiers");
    if (tv && strcmp(tv, "0") && strcmp(tv, "1"))
        return kvt_srv_send_errorf(s, c, cs->label, 400, "invalid_request_error", "invalid_value",
                                   "'tiers' must be 0 (block keys only) or 1 (the default: keys and cached tokens)");
    kvt_api_request a;
    if (kvt_srv_parse(s, cs, &a, &err)) return kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
    srv_req *r = kvt_srv_make_request(s, &a, cs->key, &err);
    kvt_api_request_free(&a);
    if (!r) return kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
    enum MHD_Result ret;
    if (tv && !strcmp(tv, "0"))
        ret = kvt_srv_send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", kvt_srv_lookup_json(s, r, 0, 0), NULL,
                                NULL);
    else ret = lookup_on_engine(s, c, cs, r);
    kvt_srv_req_unref(s, r);
    return ret;
}

int kvt_srv_query_count(const char *v, unsigned long long max, unsigned long long *out) {
    unsigned long long x = 0;
    if (!*v) return -1;
    for (; *v; v++) { /* strtoull would take a sign and blanks, and saturate past 2^64 */
        if (*v < '0' || *v > '9' || x > (max - (unsigned long long)(*v - '0')) / 10) return -1;
        x = x * 10 + (unsigned long long)(*v - '0');
    }
    *out = x;
    return 0;
}

/* GET /v1/cache/events[?since=N&max=M]: the store/evict feed from event N on. */
enum MHD_Result kvt_srv_handle_events(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    const char *sv = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "since");
    const char *mv = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "max");
    unsigned long long since = 0, max = KVT_CACHE_EVENTS_READ_MAX;
    if (sv && kvt_srv_query_count(sv, UINT64_MAX, &since))
        return kvt_srv_send_errorf(s, c, cs->label, 400, "invalid_request_error", "invalid_value",
                                   "'since' must be an event number (the 'next' of the last answer), or 0");
    if (mv && (kvt_srv_query_count(mv, KVT_CACHE_EVENTS_READ_MAX, &max) || max < 1)) {
        kvt_api_error e;
        kvt_api_errorf(&e, 400, "invalid_request_error", "max", "invalid_value", "'max' must be 1..%d",
                       KVT_CACHE_EVENTS_READ_MAX);
        return kvt_srv_send_error(s, c, cs->label, &e, NULL, NULL);
    }
    return kvt_srv_send_text(s, c, cs->label, MHD_HTTP_OK, "application/json",
                             kvt_cache_events_json(s->events, since, (uint32_t)max), NULL, NULL);
}
