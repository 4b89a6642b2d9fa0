// SPDX-License-Identifier: MIT
/* Pins, prefetch and warm sessions in the cache policy: a pin holds a
 * prefix T0-resident until released; prefetch restores a prefix ahead of its
 * request; a warm session is a named pin with an expiry and a priority that
 * yields its pages under pressure. */
#include "cache_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Pins (kvt_cache_pin) may hold at most this share of the active pages, so
 * requests can always run; warm sessions yield under pressure instead. */
#define KVT_PIN_MAX_FRACTION 0.5

/* ---- pins ------------------------------------------------------------------------ */

/* Acquires the cached prefix of tokens (at most max_new pages restored from
 * lower tiers); returns a pin holding it, or NULL when nothing was acquired. */
static kvt_pin *pin_prefix(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, int32_t max_new) {
    kvt_prefix_hit *hits;
    /* a warm session keeps only what is resident (max_new 0): no need to ask T3 */
    size_t k = max_new ? kvt_cache_match_shared(c, root, tokens, n, (size_t)n / (size_t)c->B, &hits)
                       : kvt_cache_match_local(c, root, tokens, n, &hits);
    int32_t *pages = kvt_xmalloc((k ? k : 1) * sizeof *pages);
    kvt_tier *tier_of = kvt_xmalloc((k ? k : 1) * sizeof *tier_of);
    double restore_s = 0;
    kvt_shortfall why;
    int32_t got = kvt_cache_acquire_run(c, root, tokens, hits, (int32_t)k, max_new, pages, tier_of, &restore_s, NULL,
                                        &why);
    for (int32_t i = 0; i < got; i++) c->prefetched_blocks += tier_of[i] != KVT_TIER_T0;
    free(hits);
    free(tier_of);
    if (!got) {
        free(pages);
        return NULL;
    }
    kvt_pin *p = kvt_xmalloc(sizeof *p);
    p->n = got;
    p->pages = pages;
    c->pinned_pages += got;
    return p;
}

int kvt_cache_pin_root(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, kvt_pin **pin) {
    *pin = NULL;
    kvt_cache_expire_sessions(c); /* an expired session's pages no longer count against the limit */
    kvt_cache_match m;
    kvt_cache_lookup_root(c, root, tokens, n, &m);
    int32_t limit = (int32_t)(c->n_pages * KVT_PIN_MAX_FRACTION);
    if (c->pinned_pages + m.n_blocks > limit)
        return kvt_fail(KVT_ELIMIT, "pinning %d more blocks would hold more than %d of the %d active pages in pins",
                        m.n_blocks, limit, c->n_pages);
    *pin = pin_prefix(c, root, tokens, n, INT32_MAX);
    return *pin ? (*pin)->n * c->B : 0;
}

int32_t kvt_cache_prefetch_root(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, int32_t max_new) {
    kvt_pin *p = pin_prefix(c, root, tokens, n, max_new);
    int32_t got = p ? p->n * c->B : 0;
    kvt_cache_release(c, p);
    return got;
}

int kvt_cache_keep_warm_root(kvt_cache *c, kvt_hash128 root, const char *session, const int32_t *tokens, int32_t n,
                             int priority, double seconds) {
    if (!session || !*session || strlen(session) > KVT_SESSION_NAME_MAX)
        return kvt_fail(KVT_EARG, "a session name is 1..%d bytes", KVT_SESSION_NAME_MAX);
    kvt_cache_end_session_root(c, &root, session);
    if (!(seconds > 0)) return 0;
    kvt_cache_expire_sessions(c);
    kvt_pin *p = pin_prefix(c, root, tokens, n, 0); /* what is resident now; nothing is restored for it */
    if (!p) return 0;
    if (c->n_sessions == c->cap_sessions) {
        c->cap_sessions = c->cap_sessions ? 2 * c->cap_sessions : 16;
        c->sessions = kvt_xrealloc(c->sessions, (size_t)c->cap_sessions * sizeof *c->sessions);
    }
    warm_session *s = &c->sessions[c->n_sessions++];
    snprintf(s->name, sizeof s->name, "%s", session);
    s->root = root;
    s->pin = p;
    s->expires = kvt_now() + seconds;
    s->priority = priority;
    return p->n * c->B;
}

int kvt_cache_end_session_root(kvt_cache *c, const kvt_hash128 *root, const char *session) {
    int found = 0;
    for (int32_t i = c->n_sessions; i-- > 0;)
        if (!strcmp(c->sessions[i].name, session) && (!root || kvt_hash128_eq(c->sessions[i].root, *root))) {
            kvt_cache_session_drop(c, i);
            found = 1;
        }
    return found ? 0 : KVT_ENOTFOUND;
}

int kvt_cache_end_session(kvt_cache *c, const char *session) { return kvt_cache_end_session_root(c, NULL, session); }
