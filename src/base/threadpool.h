// SPDX-License-Identifier: MIT
/* A fixed pool of worker threads for the compute kernels: one fork/join call
 * (kvt_pool_run) per operation, cheap enough to issue ~10 times per layer. */
#ifndef KVT_THREADPOOL_H
#define KVT_THREADPOOL_H

typedef struct kvt_pool kvt_pool;

/* Creates a pool of n_threads (clamped to >= 1); the calling thread counts as
 * worker 0, so n_threads - 1 threads are started. Returns NULL when memory or
 * threads cannot be had. Free with kvt_pool_free(). */
kvt_pool *kvt_pool_new(int n_threads);

/* Stops and joins the workers and frees the pool. NULL is a no-op. Must not be
 * called while a kvt_pool_run() is in progress. */
void kvt_pool_free(kvt_pool *p);

/* Number of threads, the caller included (>= 1). */
int kvt_pool_threads(const kvt_pool *p);

/* Runs fn(ctx, ith, nth) for every ith in [0, nth), nth = kvt_pool_threads(p);
 * ith 0 runs on the calling thread. Returns when all calls have returned; their
 * writes are visible to the caller then. Workers spin briefly, then sleep on a
 * futex. Not reentrant: one run at a time per pool, from one thread at a time,
 * and fn must not call kvt_pool_run() on the same pool. p may be NULL: then
 * fn(ctx, 0, 1) runs on the caller. */
void kvt_pool_run(kvt_pool *p, void (*fn)(void *ctx, int ith, int nth), void *ctx);

#endif
