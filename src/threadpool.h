/* A fixed pool of worker threads that run one parallel-for at a time. */
#ifndef KVT_THREADPOOL_H
#define KVT_THREADPOOL_H

typedef struct kvt_pool kvt_pool;

kvt_pool *kvt_pool_new(int n_threads);
void kvt_pool_free(kvt_pool *p);
int kvt_pool_threads(const kvt_pool *p);
void kvt_pool_run(kvt_pool *p, void (*fn)(void *ctx, int ith, int nth), void *ctx);

#endif
