// SPDX-License-Identifier: MIT
/* A request's shared state between its handler and the engine thread
 * (srv_req, server_impl.h): references (the last one frees), waking the
 * waiting handler, ending a request and its other choices with an error; and
 * the monotonic condition variables both sides wait on. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common.h"
#include "scheduler.h"
#include "server_impl.h"

void kvt_srv_cond_init(pthread_cond_t *cv) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

void kvt_srv_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int ms) {
    struct timespec ts = kvt_deadline_after(ms / 1e3);
    pthread_cond_timedwait(cv, mu, &ts);
}

/* Drops a reference; the last one frees. Caller holds s->mu. */
void kvt_srv_req_unref_locked(srv_req *r) {
    if (--r->refs > 0) return;
    free(r->prompt);
    if (r->kept) kvt_resp_prefix_free(r->kept);
    free(r->kept);
    free(r->reply_ids);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->salt);
    free(r->text);
    free(r->lp);
    free(r->gen_ids);
    free(r->bias_id);
    free(r->bias);
    free(r->dry_breaker);
    free(r->doc_starts);
    free(r->block_tiers);
    free(r->doc_order);
    free(r->embed_sum);
    kvt_jg_schema_free(r->grammar);
    kvt_jg_lazy_spec_free(r->lazy);
    free(r->sib);
    pthread_cond_destroy(&r->cv);
    srv_req *first = r->first;
    free(r);
    if (first) kvt_srv_req_unref_locked(first);
}

/* Wakes the handler waiting on r: r's own, and for another choice its first's. */
void kvt_srv_req_wake_locked(srv_req *r) {
    pthread_cond_broadcast(&r->cv);
    if (r->first) pthread_cond_broadcast(&r->first->cv);
}

void kvt_srv_req_unref(kvt_server *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    kvt_srv_req_unref_locked(r);
    pthread_mutex_unlock(&s->mu);
}

/* Ends r with an error (engine thread or shutdown). Caller holds s->mu. */
void kvt_srv_req_fail_locked(srv_req *r, int status, const char *msg) {
    r->err_status = status;
    snprintf(r->err_msg, sizeof r->err_msg, "%s", msg);
    r->done = 1;
    kvt_srv_req_wake_locked(r);
}

/* Ends r's other choices with an error and drops the engine's references on
 * them (they were never admitted). Caller holds s->mu. */
void kvt_srv_fail_choices_locked(srv_req *r, int status, const char *msg) {
    for (int32_t i = 0; i < r->n_sib; i++) {
        kvt_srv_req_fail_locked(r->sib[i], status, msg);
        kvt_srv_req_unref_locked(r->sib[i]);
    }
    r->n_sib = 0;
}
