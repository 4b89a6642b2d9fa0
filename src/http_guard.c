/* The HTTP layer's defences (see http_guard.h): the in-flight body budget. */
#include "http_guard.h"

#include <pthread.h>
#include <stdlib.h>

#include "common.h"

struct kvt_http_guard {
    pthread_mutex_t mu;
    uint64_t budget; /* 0: none */
    uint64_t held;   /* under mu */
};

kvt_http_guard *kvt_http_guard_new(uint64_t max_inflight_bytes) {
    kvt_http_guard *g = kvt_xcalloc(1, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
    g->budget = max_inflight_bytes;
    return g;
}

void kvt_http_guard_free(kvt_http_guard *g) {
    if (!g) return;
    pthread_mutex_destroy(&g->mu);
    free(g);
}

int kvt_http_guard_reserve(kvt_http_guard *g, uint64_t n) {
    pthread_mutex_lock(&g->mu);
    int ok = !g->budget || (n <= g->budget && g->held <= g->budget - n);
    if (ok) g->held += n;
    pthread_mutex_unlock(&g->mu);
    return ok ? 0 : -1;
}

void kvt_http_guard_release(kvt_http_guard *g, uint64_t n) {
    pthread_mutex_lock(&g->mu);
    g->held -= KVT_MIN(n, g->held);
    pthread_mutex_unlock(&g->mu);
}

uint64_t kvt_http_guard_held(kvt_http_guard *g) {
    pthread_mutex_lock(&g->mu);
    uint64_t h = g->held;
    pthread_mutex_unlock(&g->mu);
    return h;
}
