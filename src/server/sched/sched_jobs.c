// SPDX-License-Identifier: MIT
/* The admin jobs (/v1/cache/pin, unpin, prefetch, flush, stats), run on the
 * engine thread, which alone touches the cache; handlers_admin.c queues them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "scheduler.h"
#include "server_impl.h"

static char *json_take(cJSON *o) {
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return t;
}

static char *job_error(admin_job *j, int status, const char *code, const char *msg) {
    kvt_api_error e;
    kvt_api_errorf(&e, status, status >= 500 ? "server_error" : "invalid_request_error", NULL, code, "%s", msg);
    j->status = status;
    return kvt_api_error_json(&e);
}

/* T3 on a Redis Cluster: each node's counters as the T3 object's "shards". */
static void add_t3_shards(cJSON *t3, const kvt_cache_stats *st) {
    cJSON *arr = cJSON_AddArrayToObject(t3, "shards");
    for (uint32_t i = 0; i < st->t3_n_shards && i < KVT_T3_SHARDS_MAX; i++) {
        const kvt_t3_shard_stats *n = &st->t3_shards[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "node", n->addr);
        cJSON_AddBoolToObject(o, "primary", n->primary);
        cJSON_AddNumberToObject(o, "hits", (double)n->hits);
        cJSON_AddNumberToObject(o, "misses", (double)n->misses);
        cJSON_AddNumberToObject(o, "writes", (double)n->puts);
        cJSON_AddNumberToObject(o, "redirects", (double)n->redirects);
        cJSON_AddNumberToObject(o, "errors", (double)n->errors);
        cJSON_AddItemToArray(arr, o);
    }
}

/* The pins the caller of job j sees: its own namespace's (root), or with the
 * admin key every one, each with its namespace. */
static void add_pins(kvt_server *s, const admin_job *j, kvt_hash128 root, cJSON *o) {
    cJSON *pins = cJSON_AddArrayToObject(o, "pins");
    for (int32_t i = 0; i < s->n_pins; i++) {
        if (!j->admin && !kvt_hash128_eq(s->pins[i].root, root)) continue;
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "pin_id", s->pins[i].id);
        cJSON_AddNumberToObject(p, "tokens", s->pins[i].tokens);
        if (j->admin) {
            char ns[17];
            snprintf(ns, sizeof ns, "%016llx", (unsigned long long)s->pins[i].root.lo);
            cJSON_AddStringToObject(p, "namespace", ns);
        }
        cJSON_AddItemToArray(pins, p);
    }
}

/* The cache-wide figures of /v1/cache/stats. */
static cJSON *stats_json(kvt_server *s) {
    kvt_cache_stats st;
    kvt_cache_get_stats(s->cache, &st);
    size_t page = kvt_page_bytes(s->e);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "block_tokens", s->block);
    cJSON *t0 = cJSON_AddObjectToObject(o, "T0");
    cJSON_AddNumberToObject(t0, "pages_total", st.t0_pages_total);
    cJSON_AddNumberToObject(t0, "pages_free", st.t0_pages_free);
    cJSON_AddNumberToObject(t0, "pages_cached", st.t0_pages_cached);
    cJSON_AddNumberToObject(t0, "pages_idle", st.t0_pages_idle);
    cJSON_AddNumberToObject(t0, "pages_pinned", st.t0_pages_pinned);
    cJSON_AddNumberToObject(t0, "budget_bytes", (double)st.t0_pages_total * (double)page);
    cJSON_AddNumberToObject(t0, "evictions", (double)st.t0_evictions);
    cJSON *t1 = cJSON_AddObjectToObject(o, "T1");
    cJSON_AddNumberToObject(t1, "blocks", (double)st.t1_blocks);
    cJSON_AddNumberToObject(t1, "bytes_used", (double)st.t1_bytes_used);
    cJSON_AddNumberToObject(t1, "budget_bytes", (double)st.t1_budget_bytes);
    cJSON_AddNumberToObject(t1, "restores", (double)st.t1_restores);
    cJSON *t2 = cJSON_AddObjectToObject(o, "T2");
    cJSON_AddNumberToObject(t2, "records", (double)st.t2_records);
    cJSON_AddNumberToObject(t2, "bytes_used", (double)st.t2_bytes_used);
    cJSON_AddNumberToObject(t2, "budget_bytes", (double)st.t2_budget_bytes);
    cJSON_AddNumberToObject(t2, "restores", (double)st.t2_restores);
    cJSON_AddNumberToObject(t2, "writes", (double)st.t2_writes);
    cJSON_AddNumberToObject(t2, "writes_dropped", (double)st.t2_dropped);
    cJSON_AddNumberToObject(t2, "writes_waited", (double)st.t2_put_waits);
    cJSON_AddBoolToObject(t2, "writes_disabled", st.t2_writes_disabled);
    cJSON_AddBoolToObject(t2, "out_of_space", st.t2_out_of_space);
    cJSON_AddNumberToObject(t2, "space_pauses", (double)st.t2_space_pauses);
    if (st.t3_connected >= 0) {
        cJSON *t3 = cJSON_AddObjectToObject(o, "T3");
        cJSON_AddBoolToObject(t3, "connected", st.t3_connected == 1);
        cJSON_AddNumberToObject(t3, "known_blocks", (double)st.t3_known);
        cJSON_AddNumberToObject(t3, "budget_bytes", (double)st.t3_budget_bytes);
        cJSON_AddNumberToObject(t3, "value_bytes", (double)st.t3_value_bytes);
        cJSON_AddNumberToObject(t3, "restores", (double)st.t3_restores);
        cJSON_AddNumberToObject(t3, "hits", (double)st.t3_hits);
        cJSON_AddNumberToObject(t3, "misses", (double)st.t3_misses);
        cJSON_AddNumberToObject(t3, "bad_values", (double)st.t3_bad);
        cJSON_AddNumberToObject(t3, "writes", (double)st.t3_writes);
        cJSON_AddNumberToObject(t3, "writes_dropped", (double)st.t3_dropped);
        cJSON_AddNumberToObject(t3, "retry_held_blocks", (double)st.t3_retry_held);
        cJSON_AddNumberToObject(t3, "retry_sent_blocks", (double)st.t3_retry_sent);
        cJSON_AddNumberToObject(t3, "retry_dropped_blocks", (double)st.t3_retry_dropped);
        cJSON_AddNumberToObject(t3, "errors", (double)st.t3_errors);
        cJSON_AddNumberToObject(t3, "timeouts", (double)st.t3_timeouts);
        cJSON_AddNumberToObject(t3, "probes", (double)st.t3_probes);
        cJSON_AddNumberToObject(t3, "probe_found_blocks", (double)st.t3_probe_found);
        cJSON_AddNumberToObject(t3, "bytes_read", (double)st.t3_bytes_read);
        cJSON_AddNumberToObject(t3, "bytes_written", (double)st.t3_bytes_written);
        cJSON_AddNumberToObject(t3, "compressed_values", (double)st.t3_compressed);
        cJSON_AddNumberToObject(t3, "incompressible_values", (double)st.t3_incompressible);
        /* payload over stored bytes of what this node wrote (1: raw; the header counts as stored) */
        cJSON_AddNumberToObject(t3, "compression_ratio",
                                st.t3_bytes_written ? (double)st.t3_payload_written / (double)st.t3_bytes_written : 1.0);
        cJSON_AddNumberToObject(t3, "latency_ms_avg",
                                st.t3_round_trips ? 1e3 * st.t3_latency_sum_s / (double)st.t3_round_trips : 0.0);
        if (st.t3_n_shards) add_t3_shards(t3, &st);
    }
    cJSON_AddNumberToObject(o, "discarded_blocks", (double)st.discarded);
    cJSON_AddNumberToObject(o, "lookup_tokens", (double)st.lookup_tokens);
    cJSON_AddNumberToObject(o, "hit_tokens", (double)st.hit_tokens);
    cJSON *sf = cJSON_AddObjectToObject(o, "shortfalls");
    for (int k = 1; k < KVT_SHORTFALL_COUNT; k++)
        cJSON_AddNumberToObject(sf, kvt_shortfall_name((kvt_shortfall)k), (double)st.shortfalls[k]);
    cJSON_AddNumberToObject(o, "warm_sessions", st.warm_sessions);
    cJSON_AddNumberToObject(o, "sessions_released_early", (double)st.sessions_released);
    cJSON_AddNumberToObject(o, "sessions_expired", (double)st.sessions_expired);
    cJSON_AddNumberToObject(o, "prefetched_blocks", (double)st.prefetched_blocks);
    return o;
}

/* A new pin id: "pin-" and PIN_ID_BYTES random bytes in hex, so ids can be
 * neither guessed nor counted. 0, or -1 when the kernel gave no randomness. */
static int new_pin_id(char out[ID_LEN]) {
    unsigned char r[PIN_ID_BYTES];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) return -1;
    int k = snprintf(out, ID_LEN, "pin-");
    for (size_t i = 0; i < sizeof r; i++) k += snprintf(out + k, (size_t)(ID_LEN - k), "%02x", r[i]);
    return 0;
}

/* Ends the pin pin_id and/or the warm session named session of job j's
 * caller (any namespace's with the admin key). 1 if one was found. */
static int unpin(kvt_server *s, const admin_job *j, kvt_hash128 root) {
    int found = 0;
    for (int32_t i = 0; j->pin_id && i < s->n_pins && !found; i++)
        if (!strcmp(s->pins[i].id, j->pin_id) && (j->admin || kvt_hash128_eq(s->pins[i].root, root))) {
            kvt_cache_release(s->cache, s->pins[i].pin);
            s->pins[i] = s->pins[--s->n_pins];
            found = 1;
        }
    if (j->session) found |= kvt_cache_end_session_root(s->cache, j->admin ? NULL : &root, j->session) == 0;
    return found;
}

static char *job_run(kvt_server *s, admin_job *j) {
    j->status = MHD_HTTP_OK;
    cJSON *o = NULL;
    kvt_hash128 root;
    switch (j->kind) {
    case JOB_PIN: {
        if (kvt_cache_root(s->cache, j->r->salt, j->r->salt_len, &root)) return job_error(j, 500, NULL, kvt_errmsg());
        char id[ID_LEN];
        if (new_pin_id(id)) return job_error(j, 500, NULL, "no random bytes for a pin id");
        kvt_pin *pin = NULL;
        int n = kvt_cache_pin_root(s->cache, root, j->r->prompt, j->r->n_prompt, &pin);
        if (n < 0) return job_error(j, 409, "pin_limit", kvt_errmsg());
        o = cJSON_CreateObject();
        if (pin) {
            if (s->n_pins == s->cap_pins) {
                s->cap_pins = s->cap_pins ? 2 * s->cap_pins : 8;
                s->pins = kvt_xrealloc(s->pins, (size_t)s->cap_pins * sizeof *s->pins);
            }
            server_pin *sp = &s->pins[s->n_pins++];
            memcpy(sp->id, id, sizeof id);
            sp->root = root;
            sp->pin = pin;
            sp->tokens = n;
            cJSON_AddStringToObject(o, "pin_id", sp->id);
        } else {
            cJSON_AddNullToObject(o, "pin_id");
        }
        /* the count tells what was cached before: under --hide-cached-tokens it stays with the operator */
        if (!s->p.hide_cached_tokens || j->admin) cJSON_AddNumberToObject(o, "pinned_tokens", n);
        cJSON_AddNumberToObject(o, "prompt_tokens", j->r->n_prompt);
        break;
    }
    case JOB_UNPIN: {
        if (kvt_cache_root(s->cache, j->salt, j->salt_len, &root)) return job_error(j, 500, NULL, kvt_errmsg());
        /* another namespace's pin or session is "not found", exactly as one that does not exist */
        if (!unpin(s, j, root)) return job_error(j, 404, "not_found", "no such pin or warm session");
        o = cJSON_CreateObject();
        cJSON_AddTrueToObject(o, "released");
        break;
    }
    case JOB_PREFETCH: {
        if (kvt_cache_root(s->cache, j->r->salt, j->r->salt_len, &root)) return job_error(j, 500, NULL, kvt_errmsg());
        int32_t n = kvt_cache_prefetch_root(s->cache, root, j->r->prompt, j->r->n_prompt, INT32_MAX);
        o = cJSON_CreateObject();
        if (!s->p.hide_cached_tokens || j->admin) cJSON_AddNumberToObject(o, "resident_tokens", n);
        cJSON_AddNumberToObject(o, "prompt_tokens", j->r->n_prompt);
        break;
    }
    case JOB_FLUSH: {
        double t0 = kvt_now();
        int rc = kvt_cache_flush(s->cache);
        if (rc) return job_error(j, 500, "flush_failed", kvt_errmsg());
        o = cJSON_CreateObject();
        cJSON_AddTrueToObject(o, "flushed");
        cJSON_AddNumberToObject(o, "seconds", kvt_now() - t0);
        break;
    }
    case JOB_STATS:
        if (kvt_cache_root(s->cache, j->salt, j->salt_len, &root)) return job_error(j, 500, NULL, kvt_errmsg());
        /* the cache-wide counters move with every tenant's hits: hidden from clients with the cache report */
        if (!s->p.hide_cached_tokens || j->admin) o = stats_json(s);
        else {
            o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "block_tokens", s->block);
        }
        add_pins(s, j, root, o);
        break;
    case JOB_LOOKUP: return kvt_srv_lookup_json(s, j->r, 1, !s->p.hide_cached_tokens || j->admin);
    }
    return json_take(o);
}

void kvt_srv_run_jobs(kvt_server *s, admin_job *jobs) {
    for (admin_job *j = jobs; j; j = j->next) j->json = job_run(s, j);
    pthread_mutex_lock(&s->mu);
    for (admin_job *j = jobs; j; j = j->next) j->done = 1;
    pthread_cond_broadcast(&s->job_cv);
    pthread_mutex_unlock(&s->mu);
}

void kvt_srv_fail_jobs_locked(kvt_server *s) {
    for (admin_job *j = s->jobs; j; j = j->next) {
        j->json = job_error(j, 503, "shutting_down", "the server is shutting down");
        j->done = 1;
    }
    s->jobs = NULL;
    pthread_cond_broadcast(&s->job_cv);
}
