// SPDX-License-Identifier: MIT
/* The bottom of the cache policy: letting go of what pins and warm sessions
 * hold. Releasing a pin, expiring warm sessions, and picking and dropping the
 * session to give up under pressure are needed both by cache_session.c (which
 * makes pins and sessions) and by T0 reclaim in cache_demote.c (which gives
 * sessions up for room); kept here, below both, so the calls between the
 * policy's files run one way, down. */
#include "cache_internal.h"

#include <stdlib.h>

void kvt_cache_session_drop(kvt_cache *c, int32_t i) {
    kvt_cache_release(c, c->sessions[i].pin);
    c->sessions[i] = c->sessions[--c->n_sessions];
}

double kvt_cache_expire_sessions(kvt_cache *c) {
    double now = kvt_now(), next = -1;
    for (int32_t i = c->n_sessions; i-- > 0;)
        if (c->sessions[i].expires <= now) {
            kvt_cache_session_drop(c, i);
            c->sessions_expired++;
        }
    for (int32_t i = 0; i < c->n_sessions; i++)
        if (next < 0 || c->sessions[i].expires - now < next) next = c->sessions[i].expires - now;
    return next;
}

/* Lowest priority first, then the soonest to expire. */
int32_t kvt_cache_session_victim(const kvt_cache *c) {
    int32_t best = -1;
    for (int32_t i = 0; i < c->n_sessions; i++) {
        const warm_session *s = &c->sessions[i], *b = best >= 0 ? &c->sessions[best] : NULL;
        if (!b || s->priority < b->priority || (s->priority == b->priority && s->expires < b->expires)) best = i;
    }
    return best;
}

void kvt_cache_release(kvt_cache *c, kvt_pin *pin) {
    if (!pin) return;
    for (int32_t i = 0; i < pin->n; i++) kvt_page_unref(c->e, pin->pages[i]);
    c->pinned_pages -= pin->n;
    free(pin->pages);
    free(pin);
}
