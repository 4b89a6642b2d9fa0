// SPDX-License-Identifier: MIT
/* One poller thread per node: its /health every --health-ms (a node that
 * fails it is out of the rotation until it answers again), then its
 * store/evict feed (GET /v1/cache/events) into the node's key index, read
 * until caught up. */
#include "route_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "log.h"

typedef struct {
    kvt_router *r;
    int i;
} poll_arg;

/* A key from its 32 hex digits (high word first). 0, or -1. */
static int parse_key(const char *hex, kvt_hash128 *out) {
    if (strlen(hex) != 32 || strspn(hex, "0123456789abcdef") != 32) return -1;
    char hi[17], lo[17];
    memcpy(hi, hex, 16);
    memcpy(lo, hex + 16, 16);
    hi[16] = lo[16] = 0;
    out->hi = strtoull(hi, NULL, 16);
    out->lo = strtoull(lo, NULL, 16);
    return 0;
}

/* Applies one events answer to node i. 1 if more are waiting (a full batch), 0, or -1 on a bad answer. */
static int apply_events(kvt_router *r, int i, const char *body) {
    cJSON *o = cJSON_Parse(body);
    const cJSON *ep = cJSON_GetObjectItemCaseSensitive(o, "epoch"), *nx = cJSON_GetObjectItemCaseSensitive(o, "next"),
                *rs = cJSON_GetObjectItemCaseSensitive(o, "reset"),
                *evs = cJSON_GetObjectItemCaseSensitive(o, "events");
    if (!cJSON_IsString(ep) || !cJSON_IsNumber(nx) || !cJSON_IsArray(evs)) {
        cJSON_Delete(o);
        return -1;
    }
    pthread_mutex_lock(&r->mu);
    kvt_route_node *nd = &r->nodes[i];
    /* a restarted node (a new epoch) numbers its events anew: forget it and read from its oldest;
     * a reader that fell behind the ring (reset) forgets and rebuilds from what follows */
    int restarted = nd->epoch[0] && strcmp(nd->epoch, ep->valuestring);
    if (restarted || cJSON_IsTrue(rs)) kvt_hmap128_free(&nd->keys);
    snprintf(nd->epoch, sizeof nd->epoch, "%s", ep->valuestring);
    if (restarted) {
        nd->next = 0;
        pthread_mutex_unlock(&r->mu);
        cJSON_Delete(o);
        return 1;
    }
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, evs) {
        kvt_hash128 k;
        if (!cJSON_IsString(e) || parse_key(e->valuestring + 1, &k)) continue;
        if (e->valuestring[0] == '+') kvt_hmap128_put(&nd->keys, k, 1);
        else kvt_hmap128_del(&nd->keys, k);
        n++;
    }
    nd->next = (uint64_t)nx->valuedouble;
    pthread_mutex_unlock(&r->mu);
    cJSON_Delete(o);
    return n >= 4096;
}

/* Reads node i's feed until it is caught up (or fails). */
static void read_feed(kvt_router *r, int i, const char *headers) {
    for (int round = 0; round < 64 && !r->stopping; round++) {
        char path[96], *body = NULL;
        int status = 0;
        pthread_mutex_lock(&r->mu);
        snprintf(path, sizeof path, "/v1/cache/events?since=%llu&max=4096", (unsigned long long)r->nodes[i].next);
        pthread_mutex_unlock(&r->mu);
        kvt_route_node *nd = &r->nodes[i];
        int rc = kvt_up_fetch(nd->host, nd->port, 5000, "GET", path, headers, NULL, 0, &status, &body, 64u << 20);
        int more = !rc && status == 200 ? apply_events(r, i, body) : -1;
        if (rc == 0 && status != 200 && !nd->feed_warned++)
            kvt_log(KVT_LOG_WARN, "route: %s/v1/cache/events answered %d (does --node-key match its keys?)", nd->url,
                    status);
        free(body);
        if (more != 1) return;
    }
}

/* Sleeps ms, waking early when the router stops. */
static void nap(kvt_router *r, int ms) {
    for (int t = 0; t < ms && !r->stopping; t += 20) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void *poller(void *arg) {
    poll_arg pa = *(poll_arg *)arg;
    free(arg);
    kvt_router *r = pa.r;
    kvt_route_node *nd = &r->nodes[pa.i];
    char headers[512] = "";
    if (r->p.node_key) snprintf(headers, sizeof headers, "Authorization: Bearer %s\r\n", r->p.node_key);
    while (!r->stopping) {
        char *body = NULL;
        int status = 0;
        int ok = !kvt_up_fetch(nd->host, nd->port, KVT_MAX(r->p.health_ms * 4, 2000), "GET", "/health", NULL, NULL, 0,
                               &status, &body, 1 << 16) &&
            status == 200;
        free(body);
        pthread_mutex_lock(&r->mu);
        if (ok != nd->up) kvt_log(KVT_LOG_INFO, "route: node %s is %s", nd->url, ok ? "up" : "down");
        kvt_route_set_up(r, pa.i, ok);
        pthread_mutex_unlock(&r->mu);
        if (ok && r->p.policy == KVT_ROUTE_AFFINITY) read_feed(r, pa.i, headers);
        nap(r, r->p.health_ms);
    }
    return NULL;
}

int kvt_route_start_polls(kvt_router *r) {
    for (int i = 0; i < r->n; i++) {
        poll_arg *a = kvt_xmalloc(sizeof *a);
        *a = (poll_arg){r, i};
        if (pthread_create(&r->pollers[i], NULL, poller, a)) {
            free(a);
            r->stopping = 1;
            for (int k = 0; k < i; k++) pthread_join(r->pollers[k], NULL);
            return -1;
        }
    }
    return 0;
}

void kvt_route_stop_polls(kvt_router *r) {
    r->stopping = 1;
    for (int i = 0; i < r->n; i++) pthread_join(r->pollers[i], NULL);
}
