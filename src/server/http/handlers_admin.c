// SPDX-License-Identifier: MIT
/* The cache admin endpoints (/v1/cache/pin, unpin, prefetch, flush, stats),
 * which run as jobs on the engine thread (sched_jobs.c runs them), and
 * GET /v1/cache/lint, answered on the HTTP thread from the recent prompts. */
#include "http_send.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "api_lint.h"
#include "api_types.h"
#include "common.h"

/* An unpin body's string field name into *out (a copy): absent or null
 * leaves it NULL; another type is a 400 naming it, so a pin_id sent as a
 * number is not taken for no pin_id and the request does not release
 * something else. */
static int unpin_field(const cJSON *root, const char *name, char **out, kvt_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v))
        return kvt_api_errorf(err, 400, "invalid_request_error", name, "invalid_type", "'%s' must be a string", name);
    *out = kvt_xstrdup(v->valuestring);
    return 0;
}

/* /v1/cache/unpin's body into j: pin_id or session_id, and the namespace
 * (the key, then cache_salt) they were made in. */
static int unpin_body(const conn_state *cs, admin_job *j, kvt_api_error *err) {
    cJSON *root = cJSON_ParseWithLength(cs->body ? cs->body : "", cs->len);
    char *salt = NULL;
    int rc = kvt_api_check_types(KVT_BODY_UNPIN, root, err) || unpin_field(root, "pin_id", &j->pin_id, err) ||
        unpin_field(root, "session_id", &j->session, err) || unpin_field(root, "cache_salt", &salt, err);
    cJSON_Delete(root);
    if (!rc) j->salt = kvt_srv_tenant_salt(cs->key, salt, &j->salt_len);
    free(salt);
    if (!rc && !j->pin_id && !j->session)
        rc = kvt_api_errorf(err, 400, "invalid_request_error", "pin_id", "missing_required_parameter",
                            "give the \"pin_id\" that /v1/cache/pin returned, or a \"session_id\" kept warm");
    return rc;
}

/* The admin endpoints run on the engine thread (the cache is its alone):
 * the handler queues a job and waits for its answer. */
enum MHD_Result kvt_srv_handle_admin(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    admin_job *j = kvt_xcalloc(1, sizeof *j);
    kvt_api_error err;
    j->kind = cs->r == R_CACHE_PIN  ? JOB_PIN
        : cs->r == R_CACHE_UNPIN    ? JOB_UNPIN
        : cs->r == R_CACHE_PREFETCH ? JOB_PREFETCH
        : cs->r == R_CACHE_FLUSH    ? JOB_FLUSH
                                    : JOB_STATS;
    enum MHD_Result ret;
    if (j->kind == JOB_PIN || j->kind == JOB_PREFETCH) {
        /* the body names a prompt as the generation endpoints do: "messages" (chat) or "prompt" */
        kvt_api_request a;
        if (kvt_srv_parse(s, cs, &a, &err)) {
            ret = kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
            goto done;
        }
        j->r = kvt_srv_make_request(s, &a, cs->key, &err);
        kvt_api_request_free(&a);
        if (!j->r) {
            ret = kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
            goto done;
        }
    } else if (j->kind == JOB_UNPIN) {
        if (unpin_body(cs, j, &err)) {
            ret = kvt_srv_send_error(s, c, cs->label, &err, NULL, NULL);
            goto done;
        }
    } else if (j->kind == JOB_STATS) {
        /* ?cache_salt=S: the pins of that namespace of the caller's key */
        const char *cv = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "cache_salt");
        j->salt = kvt_srv_tenant_salt(cs->key, cv, &j->salt_len);
    }
    j->admin = cs->admin;
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        ret = kvt_srv_send_errorf(s, c, cs->label, 503, "server_error", "shutting_down", "the server is shutting down");
        goto done;
    }
    j->next = s->jobs;
    s->jobs = j;
    pthread_cond_signal(&s->engine_cv);
    while (!j->done) kvt_srv_cond_wait_ms(&s->job_cv, &s->mu, ADMIN_WAIT_MS);
    pthread_mutex_unlock(&s->mu);
    ret = kvt_srv_send_text(s, c, cs->label, j->status, "application/json", j->json, NULL, NULL);
    j->json = NULL;
done:
    if (j->r) kvt_srv_req_unref(s, j->r);
    free(j->json);
    free(j->pin_id);
    free(j->session);
    free(j->salt);
    free(j);
    return ret;
}

/* GET /v1/cache/lint[?n=N&cache_salt=S]: lints the last N prompts (default
 * all that are kept) of every tenant, or with cache_salt those sent without
 * an API key under that salt, as `kvtier lint --json` does. Its advice quotes
 * prompt text, so only the admin key opens it (http_router.c). Runs on the HTTP
 * thread over copies. */
enum MHD_Result kvt_srv_handle_lint(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    const char *nv = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "n");
    const char *cv = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "cache_salt");
    unsigned long long max = KVT_PROMPT_RING_DEFAULT;
    if (nv && (kvt_srv_query_count(nv, KVT_LINT_MAX_PROMPTS, &max) || max < 1)) {
        kvt_api_error e;
        kvt_api_errorf(&e, 400, "invalid_request_error", "n", "invalid_value", "n must be 1..%d", KVT_LINT_MAX_PROMPTS);
        return kvt_srv_send_error(s, c, cs->label, &e, NULL, NULL);
    }
    size_t salt_len = 0;
    unsigned char *salt = cv ? kvt_srv_tenant_salt(NULL, cv, &salt_len) : NULL;
    kvt_lint_prompt *ps = NULL;
    int32_t n = kvt_prompt_ring_take(s->recent, salt, salt_len, (int32_t)max, &ps);
    free(salt);
    kvt_lint_report rep;
    char *body;
    if (n && kvt_lint_run(s->tok, ps, n, s->block, &rep) == 0) {
        body = kvt_lint_json(s->tok, ps, &rep);
        kvt_lint_free(&rep);
    } else {
        body = kvt_xmalloc(64);
        snprintf(body, 64, "{\"prompts\":0,\"block_size\":%d,\"advice\":[]}", s->block);
    }
    kvt_prompt_ring_release(ps, n);
    return kvt_srv_send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", body, NULL, NULL);
}
