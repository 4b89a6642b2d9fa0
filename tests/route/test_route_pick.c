// SPDX-License-Identifier: MIT
/* The router's choice of a node (route_index.c) on a made-up fleet, no
 * sockets: a known session returns to its node; otherwise the node with the
 * longest leading run of the prompt's keys wins, a match past the first block
 * beating a shared first block; a node over its load bound spills to the next
 * best and counts it; the match is weighed against load (equal prefixes go
 * to the less loaded node, a much longer prefix beats a small load
 * difference, a small one does not) and the bound still caps a node whatever
 * its score; a node down is never picked and loses its index;
 * round-robin cycles; the event feed's keys parse back from their hex. Also
 * the upstream URL parser's accepted and refused forms. */
#include <stdlib.h>
#include <string.h>

#include "route_internal.h"
#include "testutil.h"

static kvt_hash128 key(uint64_t i) { return (kvt_hash128){i * 0x9e3779b97f4a7c15ULL, i}; }

/* A router of n nodes, all up, none indexed. */
static kvt_router *fleet(int n, kvt_route_policy policy) {
    kvt_router *r = calloc(1, sizeof *r);
    r->p = kvt_route_default_params();
    r->p.policy = policy;
    r->block_tokens = 32;
    r->n = n;
    pthread_mutex_init(&r->mu, NULL);
    r->sessions = calloc(KVT_ROUTE_SESSIONS, sizeof *r->sessions);
    for (int i = 0; i < n; i++) r->nodes[i].up = 1;
    return r;
}

/* Every node forgets its keys. */
static void forget_all(kvt_router *r) {
    for (int i = 0; i < r->n; i++) kvt_hmap128_free(&r->nodes[i].keys);
}

static void fleet_free(kvt_router *r) {
    for (int i = 0; i < r->n; i++) kvt_hmap128_free(&r->nodes[i].keys);
    free(r->sessions);
    free(r);
}

/* Node i holds keys[0..n). */
static void holds(kvt_router *r, int i, const kvt_hash128 *keys, size_t n) {
    for (size_t k = 0; k < n; k++) kvt_hmap128_put(&r->nodes[i].keys, keys[k], 1);
}

/* One request, finished at once (its inflight count given back). */
static int route_done(kvt_router *r, uint64_t sid, const kvt_hash128 *keys, size_t nk, kvt_route_reason *why) {
    int i = kvt_route_pick(r, sid, keys, nk, 0, why);
    if (i >= 0) r->nodes[i].inflight--;
    return i;
}

static void test_prefix_and_session(void) {
    kvt_router *r = fleet(3, KVT_ROUTE_AFFINITY);
    kvt_hash128 app[4] = {key(1), key(2), key(3), key(4)}, other[4] = {key(1), key(9), key(10), key(11)};
    holds(r, 0, app, 1); /* node 0 has the shared first block only */
    holds(r, 2, app, 3); /* node 2 has three blocks of the prompt */
    kvt_route_reason why;
    CHECK(route_done(r, 0, app, 4, &why) == 2 && why == ROUTE_PREFIX);
    /* a prompt sharing only the first block: nodes 0 and 2 tie; the one with fewer requests wins */
    CHECK(route_done(r, 0, other, 4, &why) == 0 && why == ROUTE_PREFIX);
    /* nothing cached anywhere: by load, to the node that served least */
    kvt_hash128 cold[2] = {key(50), key(51)};
    CHECK(route_done(r, 0, cold, 2, &why) == 1 && why == ROUTE_LOAD);
    /* the routed keys are remembered on their node at once */
    CHECK(route_done(r, 0, cold, 2, &why) == 1 && why == ROUTE_PREFIX);
    /* a session sticks where it went first, whatever its keys say */
    uint64_t sid = kvt_route_name_hash("s1", 2);
    int first = route_done(r, sid, cold, 2, &why);
    CHECK(first == 1);
    CHECK(route_done(r, sid, app, 4, &why) == first && why == ROUTE_SESSION);
    /* the session's node goes down: it is never picked, and its index is forgotten */
    kvt_route_set_up(r, first, 0);
    CHECK(r->nodes[first].keys.count == 0);
    int moved = route_done(r, sid, app, 4, &why);
    CHECK(moved == 2 && why == ROUTE_PREFIX);
    CHECK(route_done(r, sid, cold, 2, &why) == moved && why == ROUTE_SESSION);
    fleet_free(r);
}

static void test_load_bound(void) {
    kvt_router *r = fleet(2, KVT_ROUTE_AFFINITY);
    r->p.balance = 1.0;
    r->p.load_cost = 0; /* the bound alone (test_load_cost weighs load) */
    kvt_hash128 k[3] = {key(1), key(2), key(3)};
    holds(r, 0, k, 3);
    kvt_route_reason why;
    /* held open: node 0 takes requests until it runs more than its share, then node 1 does */
    int a = kvt_route_pick(r, 0, k, 3, 0, &why), b = kvt_route_pick(r, 0, k, 3, 0, &why);
    CHECK(a == 0);
    CHECK(b == 1);
    CHECK(r->nodes[0].spills == 1);
    /* the tried mask skips a node that failed this request */
    CHECK(kvt_route_pick(r, 0, k, 3, 1ull << 0 | 1ull << 1, &why) == -1);
    for (int i = 0; i < 2; i++) r->nodes[i].inflight = 0;
    kvt_route_set_up(r, 0, 0);
    kvt_route_set_up(r, 1, 0);
    CHECK(kvt_route_pick(r, 0, k, 3, 0, &why) == -1); /* nothing up */
    fleet_free(r);
}

/* Node i runs `running` requests now. */
static void running(kvt_router *r, int i, int running) { r->nodes[i].inflight = running; }

static void test_load_cost(void) {
    kvt_router *r = fleet(3, KVT_ROUTE_AFFINITY);
    r->p.load_cost = 64; /* two blocks of 32 tokens per running request */
    r->p.balance = 10;   /* the bound out of the way */
    kvt_hash128 k[8];
    for (int i = 0; i < 8; i++) k[i] = key((uint64_t)i + 100);
    kvt_route_reason why;
    /* equal prefixes (256 tokens each): the less loaded node, though an idle node holds none */
    holds(r, 0, k, 8);
    holds(r, 1, k, 8);
    running(r, 0, 3);
    running(r, 1, 1);
    CHECK(kvt_route_pick(r, 0, k, 8, 0, &why) == 1 && why == ROUTE_PREFIX);
    for (int i = 0; i < 3; i++) running(r, i, 0);
    forget_all(r);
    /* 256 cached tokens with 2 running (score 128) beat 32 tokens with none (32) */
    holds(r, 0, k, 8);
    holds(r, 1, k, 1);
    running(r, 0, 2);
    CHECK(kvt_route_pick(r, 0, k, 8, 0, &why) == 0 && why == ROUTE_PREFIX);
    /* ... but 64 tokens with 3 running (-128) lose to 32 with none: load is a cost */
    forget_all(r);
    holds(r, 0, k, 2);
    holds(r, 1, k, 1);
    running(r, 0, 3);
    running(r, 1, 0);
    CHECK(kvt_route_pick(r, 0, k, 8, 0, &why) == 1);
    /* with no load cost the longest prefix wins however loaded, as long as the bound allows */
    forget_all(r); /* a pick remembers the prompt's keys on its node */
    holds(r, 0, k, 2);
    holds(r, 1, k, 1);
    r->p.load_cost = 0;
    running(r, 0, 3);
    running(r, 1, 0);
    CHECK(kvt_route_pick(r, 0, k, 8, 0, &why) == 0);
    /* the bound is a hard cap: the best score over it spills, and counts it */
    for (int i = 0; i < 3; i++) running(r, i, 0);
    forget_all(r);
    r->p.balance = 1.0;
    r->p.load_cost = 64;
    holds(r, 0, k, 8);
    running(r, 0, 2); /* score 256 - 128 = 128, best; bound ceil(1.0 x 3 / 3) = 1 */
    uint64_t spills = r->nodes[0].spills;
    int got = kvt_route_pick(r, 0, k, 8, 0, &why);
    CHECK(got == 1 || got == 2);
    CHECK(why == ROUTE_LOAD);
    CHECK(r->nodes[0].spills == spills + 1);
    fleet_free(r);
}

static void test_round_robin(void) {
    kvt_router *r = fleet(3, KVT_ROUTE_ROUND_ROBIN);
    kvt_route_reason why;
    int seen[3] = {0};
    for (int i = 0; i < 6; i++) seen[route_done(r, 0, NULL, 0, &why)]++;
    CHECK(seen[0] == 2 && seen[1] == 2 && seen[2] == 2 && why == ROUTE_ROUND_ROBIN);
    char *m = kvt_route_metrics(r);
    CHECK(strstr(m, "kvtier_route_routed_total{reason=\"round_robin\"} 6") != NULL);
    free(m);
    fleet_free(r);
}

static void test_urls(void) {
    char host[64];
    int port = 0;
    CHECK(kvt_up_parse_url("http://127.0.0.1:8081", host, sizeof host, &port) == 0 && port == 8081 &&
          !strcmp(host, "127.0.0.1"));
    CHECK(kvt_up_parse_url("http://[::1]:9/", host, sizeof host, &port) == 0 && port == 9 && !strcmp(host, "::1"));
    CHECK(kvt_up_parse_url("https://a:1", host, sizeof host, &port) == -1);
    CHECK(kvt_up_parse_url("http://a", host, sizeof host, &port) == -1);
    CHECK(kvt_up_parse_url("http://a:0", host, sizeof host, &port) == -1);
    CHECK(kvt_up_parse_url("http://a:80/v1", host, sizeof host, &port) == -1);
}

int main(void) {
    test_prefix_and_session();
    test_load_bound();
    test_load_cost();
    test_round_robin();
    test_urls();
    return kvt_test_done("test_route_pick");
}
