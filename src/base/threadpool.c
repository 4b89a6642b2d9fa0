// SPDX-License-Identifier: MIT
/* Fork/join thread pool. A run publishes (fn, ctx) and bumps a generation
 * counter; workers that see the new generation run their share and count down
 * `pending`. Both sides spin for a short while before sleeping on a futex,
 * because decode issues runs back to back and a sleep/wake costs microseconds. */
#include "threadpool.h"

#include <linux/futex.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Spin iterations before sleeping: ~20-100 us (pause is 10-140 cycles), longer than the gap between
 * two runs of one decode step, much shorter than a scheduler time slice. */
#define POOL_SPIN_ITERS 2000

typedef void (*pool_fn)(void *ctx, int ith, int nth);

typedef struct {
    struct kvt_pool *pool;
    int ith;
    pthread_t tid;
} pool_worker;

struct kvt_pool {
    int n_threads;
    pool_worker *workers; /* n_threads - 1 entries (ith 1..n_threads-1) */
    pool_fn fn;           /* published before `gen` is bumped */
    void *ctx;
    _Atomic int gen;            /* incremented per run; workers wait for a change */
    _Atomic int pending;        /* workers still running the current generation */
    _Atomic int sleepers;       /* workers blocked in futex_wait on gen */
    _Atomic int caller_waiting; /* the caller is (about to be) blocked on pending */
    _Atomic int stop;
};

static void futex_wait(_Atomic int *addr, int expected) {
    syscall(SYS_futex, (int *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(_Atomic int *addr, int n) {
    syscall(SYS_futex, (int *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Waits until *addr != seen; returns the new value. */
static int wait_for_change(struct kvt_pool *p, _Atomic int *addr, int seen) {
    for (int i = 0; i < POOL_SPIN_ITERS; i++) {
        int v = atomic_load_explicit(addr, memory_order_acquire);
        if (v != seen) return v;
        cpu_relax();
    }
    atomic_fetch_add(&p->sleepers, 1);
    int v;
    while ((v = atomic_load(addr)) == seen) futex_wait(addr, seen);
    atomic_fetch_sub(&p->sleepers, 1);
    return v;
}

static void *worker_main(void *arg) {
    pool_worker *w = arg;
    struct kvt_pool *p = w->pool;
    /* gen starts at 0; reading it here instead could miss a run that began
     * before this thread was scheduled */
    int seen = 0;
    for (;;) {
        seen = wait_for_change(p, &p->gen, seen);
        if (atomic_load(&p->stop)) break;
        p->fn(p->ctx, w->ith, p->n_threads);
        /* seq_cst pairs with the caller's store of caller_waiting then load of
         * pending: one of the two sides sees the other, so no lost wake-up. */
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_waiting)) futex_wake(&p->pending, 1);
    }
    return NULL;
}

kvt_pool *kvt_pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    struct kvt_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) {
            free(p);
            return NULL;
        }
    }
    for (int i = 1; i < n_threads; i++) {
        pool_worker *w = &p->workers[i - 1];
        w->pool = p;
        w->ith = i;
        if (pthread_create(&w->tid, NULL, worker_main, w) != 0) {
            p->n_threads = i; /* join only the ones that started */
            kvt_pool_free(p);
            return NULL;
        }
    }
    return p;
}

void kvt_pool_free(kvt_pool *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->gen, 1);
    futex_wake(&p->gen, INT_MAX);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->workers[i - 1].tid, NULL);
    free(p->workers);
    free(p);
}

int kvt_pool_threads(const kvt_pool *p) { return p ? p->n_threads : 1; }

void kvt_pool_run(kvt_pool *p, void (*fn)(void *ctx, int ith, int nth), void *ctx) {
    if (!p || p->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->pending, p->n_threads - 1);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: publishes fn, ctx and pending */
    if (atomic_load(&p->sleepers) > 0) futex_wake(&p->gen, INT_MAX);

    fn(ctx, 0, p->n_threads);

    int left = atomic_load_explicit(&p->pending, memory_order_acquire);
    for (int i = 0; left != 0 && i < POOL_SPIN_ITERS; i++) {
        cpu_relax();
        left = atomic_load_explicit(&p->pending, memory_order_acquire);
    }
    if (left != 0) {
        atomic_store(&p->caller_waiting, 1);
        while ((left = atomic_load(&p->pending)) != 0) futex_wait(&p->pending, left);
        atomic_store(&p->caller_waiting, 0);
    }
}
