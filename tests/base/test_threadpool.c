// SPDX-License-Identifier: MIT
/* Thread pool: every ith runs exactly once per run, the caller sees all
 * writes, runs back to back (spin path) and after idle (futex path) work. */
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "threadpool.h"

#define MAX_T 8

typedef struct {
    int hits[MAX_T];
    int nth_seen[MAX_T];
    _Atomic int calls;
} job;

static void task(void *ctx, int ith, int nth) {
    job *j = ctx;
    j->hits[ith]++;
    j->nth_seen[ith] = nth;
    atomic_fetch_add(&j->calls, 1);
}

int main(void) {
    for (int nt = 1; nt <= 4; nt++) {
        kvt_pool *p = kvt_pool_new(nt);
        CHECK(p != NULL);
        CHECK(kvt_pool_threads(p) == nt);
        job j;
        memset(&j, 0, sizeof j);
        const int runs = 5000;
        for (int r = 0; r < runs; r++) {
            kvt_pool_run(p, task, &j);
            if (r % 1000 == 0) { /* let the workers fall asleep */
                struct timespec ts = {0, 5 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
        int bad = 0;
        for (int i = 0; i < nt; i++) bad += j.hits[i] != runs || j.nth_seen[i] != nt;
        CHECKF(bad == 0 && atomic_load(&j.calls) == runs * nt, "nt=%d: %d wrong counts", nt, bad);
        kvt_pool_free(p);
    }
    job j;
    memset(&j, 0, sizeof j);
    kvt_pool_run(NULL, task, &j);
    CHECK(j.hits[0] == 1 && j.nth_seen[0] == 1);
    kvt_pool_free(NULL);
    return kvt_test_done("test_threadpool");
}
