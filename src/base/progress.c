/* Rate-limited progress lines (progress.h). */
#include "progress.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common.h"

static atomic_int g_forced;

void kvt_progress_set_forced(int on) { atomic_store(&g_forced, on != 0); }

int kvt_progress_forced(void) { return atomic_load_explicit(&g_forced, memory_order_relaxed); }

int kvt_progress_wanted(void) {
    return kvt_progress_forced() || isatty(STDERR_FILENO) || getenv("KVT_PROGRESS") != NULL;
}

static void line(kvt_progress *p, uint64_t done, double now, const char *tail);

void kvt_progress_begin(kvt_progress *p, const char *what, uint64_t total, const char *unit) {
    snprintf(p->what, sizeof p->what, "%s", what);
    p->unit = unit;
    p->total = total;
    p->start = p->last = kvt_now();
    p->eager = kvt_progress_wanted();
    p->shown = 0;
    if (kvt_progress_forced()) line(p, 0, p->start, "");
}

static void line(kvt_progress *p, uint64_t done, double now, const char *tail) {
    if (p->total)
        kvt_log(KVT_LOG_INFO, "progress: %s: %llu/%llu %s (%.0f%%), %.1f s%s", p->what, (unsigned long long)done,
                (unsigned long long)p->total, p->unit, 100.0 * (double)done / (double)p->total, now - p->start, tail);
    else
        kvt_log(KVT_LOG_INFO, "progress: %s: %llu %s, %.1f s%s", p->what, (unsigned long long)done, p->unit,
                now - p->start, tail);
    p->last = now;
    p->shown++;
}

void kvt_progress_update(kvt_progress *p, uint64_t done) {
    double now = kvt_now();
    if (now - p->last < KVT_PROGRESS_INTERVAL_S) return;
    if (!p->eager && now - p->start < KVT_PROGRESS_QUIET_S) return;
    line(p, done, now, "");
}

void kvt_progress_end(kvt_progress *p, uint64_t done) {
    if (p->shown) line(p, done, kvt_now(), ", done");
}
