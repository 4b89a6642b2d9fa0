/* Placeholder pool: runs every share on the calling thread (replaced by the real pool). */
#include "threadpool.h"

#include <stdlib.h>

struct kvt_pool {
    int n;
};

kvt_pool *kvt_pool_new(int n_threads) {
    kvt_pool *p = malloc(sizeof *p);
    if (p) p->n = n_threads < 1 ? 1 : n_threads;
    return p;
}
void kvt_pool_free(kvt_pool *p) { free(p); }
int kvt_pool_threads(const kvt_pool *p) { return p->n; }
void kvt_pool_run(kvt_pool *p, void (*fn)(void *ctx, int ith, int nth), void *ctx) {
    for (int i = 0; i < p->n; i++) fn(ctx, i, p->n);
}
