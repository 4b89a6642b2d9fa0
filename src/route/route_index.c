// SPDX-License-Identifier: MIT
/* The router's choice of a node (route.h): sticky sessions, the prefix
 * match over each node's key index weighed against its load, and the load
 * bound; and the router's /metrics. Every function here runs under r->mu. */
#include "route_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

uint64_t kvt_route_name_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h ? h : 1;
}

void kvt_route_stick(kvt_router *r, uint64_t sid, int i) {
    if (!sid) return;
    kvt_route_session *e = &r->sessions[sid % KVT_ROUTE_SESSIONS];
    e->id = sid;
    e->node = i;
}

void kvt_route_set_up(kvt_router *r, int i, int up) {
    kvt_route_node *nd = &r->nodes[i];
    if (nd->up && !up) {
        /* its cache may be gone with it: rebuilt from its feed once it answers again */
        kvt_hmap128_free(&nd->keys);
        nd->next = 0;
        nd->epoch[0] = 0;
    }
    nd->up = up;
}

/* How many leading keys node nd holds. */
static size_t match_len(const kvt_route_node *nd, const kvt_hash128 *keys, size_t nk) {
    size_t k = 0;
    while (k < nk && kvt_hmap128_get(&nd->keys, keys[k], NULL)) k++;
    return k;
}

/* The most requests one node may run before the next takes its spill:
 * balance x its share of what runs (this one included), at least 1. */
static int load_bound(const kvt_router *r) {
    int total = 1, up = 0;
    for (int i = 0; i < r->n; i++) {
        total += r->nodes[i].inflight;
        up += r->nodes[i].up;
    }
    return up ? KVT_MAX(1, (int)ceil(r->p.balance * total / up)) : 1;
}

/* What sending the request to node i is worth, in prompt tokens: the cached
 * prefix it would not compute, less load_cost tokens for each request it
 * runs already (the wait they add is the cost of going there). */
static double score(const kvt_router *r, const size_t *m, int i) {
    return (double)m[i] * (double)r->block_tokens - r->p.load_cost * (double)r->nodes[i].inflight;
}

/* Node a ranks before b: higher score, then fewer running, then fewer served. */
static int better(const kvt_router *r, const size_t *m, int a, int b) {
    if (b < 0) return 1;
    double sa = score(r, m, a), sb = score(r, m, b);
    if (sa != sb) return sa > sb;
    if (r->nodes[a].inflight != r->nodes[b].inflight) return r->nodes[a].inflight < r->nodes[b].inflight;
    return r->nodes[a].requests < r->nodes[b].requests;
}

/* The best-ranked usable node (under the bound unless over is set), or -1. */
static int best_node(const kvt_router *r, const size_t *m, uint64_t tried, int bound, int over) {
    int best = -1;
    for (int i = 0; i < r->n; i++) {
        const kvt_route_node *nd = &r->nodes[i];
        if (!nd->up || (tried >> i & 1) || (!over && nd->inflight >= bound)) continue;
        if (better(r, m, i, best)) best = i;
    }
    return best;
}

static int pick_round_robin(kvt_router *r, uint64_t tried) {
    for (int k = 0; k < r->n; k++) {
        int i = (int)(r->rr++ % (uint64_t)r->n);
        if (r->nodes[i].up && !(tried >> i & 1)) return i;
    }
    return -1;
}

/* The node for a request by session, then prefix, within the load bound (see route.h). */
static int pick_affinity(kvt_router *r, uint64_t sid, const size_t *m, uint64_t tried, kvt_route_reason *why) {
    int bound = load_bound(r);
    const kvt_route_session *e = sid ? &r->sessions[sid % KVT_ROUTE_SESSIONS] : NULL;
    if (e && e->id == sid) {
        const kvt_route_node *nd = &r->nodes[e->node];
        if (nd->up && !(tried >> e->node & 1) && nd->inflight < bound) {
            *why = ROUTE_SESSION;
            return e->node;
        }
    }
    int top = best_node(r, m, tried, bound, 1), pick = best_node(r, m, tried, bound, 0);
    if (pick < 0) pick = top; /* every node is over the bound: the best scored of them */
    if (pick < 0) return -1;
    /* passed over for load: the affine node (the session's, or the longest match) counts a spill */
    int sess = e && e->id == sid && r->nodes[e->node].up ? e->node : -1, affine = sess >= 0 ? sess : top;
    if (affine != pick && (sess >= 0 || m[affine] > m[pick])) r->nodes[affine].spills++;
    *why = m[pick] ? ROUTE_PREFIX : ROUTE_LOAD;
    return pick;
}

int kvt_route_pick(kvt_router *r, uint64_t sid, const kvt_hash128 *keys, size_t nk, uint64_t tried,
                   kvt_route_reason *why) {
    size_t m[KVT_ROUTE_MAX_NODES] = {0};
    int pick;
    if (r->p.policy == KVT_ROUTE_ROUND_ROBIN) {
        pick = pick_round_robin(r, tried);
        *why = ROUTE_ROUND_ROBIN;
    } else {
        for (int i = 0; i < r->n; i++) m[i] = r->nodes[i].up ? match_len(&r->nodes[i], keys, nk) : 0;
        pick = pick_affinity(r, sid, m, tried, why);
    }
    if (pick < 0) return -1;
    kvt_route_node *nd = &r->nodes[pick];
    nd->inflight++;
    nd->requests++;
    r->routed[*why]++;
    kvt_route_stick(r, sid, pick);
    /* the node will hold these blocks once it has run the prompt: later requests may follow
     * before its feed says so (an evict in the feed takes them out again) */
    for (size_t k = 0; k < nk; k++) kvt_hmap128_put(&nd->keys, keys[k], 1);
    return pick;
}

/* Appends printf-style text to *b (length *n, capacity *cap). */
static void put(char **b, size_t *n, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put(char **b, size_t *n, size_t *cap, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(*b + *n, *cap - *n, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < *cap - *n) {
            *n += (size_t)k;
            return;
        }
        *cap *= 2;
        *b = kvt_xrealloc(*b, *cap);
    }
}

/* One labelled line per node of a metric: name{node="URL"} value. */
#define PER_NODE(name, help, type, expr) \
    do { \
        put(&b, &n, &cap, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type); \
        for (int i = 0; i < r->n; i++) { \
            const kvt_route_node *nd = &r->nodes[i]; \
            put(&b, &n, &cap, "%s{node=\"%s\"} %.6g\n", name, nd->url, (double)(expr)); \
        } \
    } while (0)

char *kvt_route_metrics(kvt_router *r) {
    static const char *reasons[ROUTE_REASONS] = {"session", "prefix", "load", "round_robin"};
    size_t n = 0, cap = 4096;
    char *b = kvt_xmalloc(cap);
    pthread_mutex_lock(&r->mu);
    PER_NODE("kvtier_route_node_up", "1 while the node answers its health checks", "gauge", nd->up);
    PER_NODE("kvtier_route_requests_total", "requests sent to the node", "counter", nd->requests);
    PER_NODE("kvtier_route_inflight", "requests open on the node now", "gauge", nd->inflight);
    PER_NODE("kvtier_route_spills_total", "requests that went elsewhere while the node was over its load bound",
             "counter", nd->spills);
    PER_NODE("kvtier_route_failovers_total", "requests the node failed to answer, sent on to another node", "counter",
             nd->failovers);
    PER_NODE("kvtier_route_prompt_tokens_total", "prompt tokens of the node's answers (their usage)", "counter",
             nd->prompt_tokens);
    PER_NODE("kvtier_route_cached_tokens_total", "of those, served from the node's cache", "counter", nd->cached_tokens);
    PER_NODE("kvtier_route_cached_fraction", "cached over prompt tokens of the node's answers", "gauge",
             nd->prompt_tokens ? (double)nd->cached_tokens / (double)nd->prompt_tokens : 0.0);
    PER_NODE("kvtier_route_indexed_blocks", "block keys the router knows the node holds", "gauge", nd->keys.count);
    put(&b, &n, &cap,
        "# HELP kvtier_route_routed_total requests by why their node was chosen\n"
        "# TYPE kvtier_route_routed_total counter\n");
    for (int k = 0; k < ROUTE_REASONS; k++)
        put(&b, &n, &cap, "kvtier_route_routed_total{reason=\"%s\"} %llu\n", reasons[k],
            (unsigned long long)r->routed[k]);
    put(&b, &n, &cap,
        "# HELP kvtier_route_lost_total requests no node answered (502)\n# TYPE kvtier_route_lost_total counter\n"
        "kvtier_route_lost_total %llu\n",
        (unsigned long long)r->lost);
    pthread_mutex_unlock(&r->mu);
    return b;
}
