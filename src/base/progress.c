// SPDX-License-Identifier: MIT
/* Rate-limited progress lines (progress.h). */
#include "progress.h"

#include <math.h>
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
    kvt_progress_begin_for(p, what, NULL, total, unit);
}

void kvt_progress_begin_for(kvt_progress *p, const char *what, const char *id, uint64_t total, const char *unit) {
    snprintf(p->what, sizeof p->what, "%s", what);
    snprintf(p->id, sizeof p->id, "%s", id ? id : "");
    p->unit = unit;
    p->total = total;
    p->start = p->last = kvt_now();
    p->eager = kvt_progress_wanted();
    p->shown = 0;
    if (kvt_progress_forced()) line(p, 0, p->start, "");
}

/* One line; in JSON logs the figures are keys of their own: what, done,
 * total (null if unknown), unit, percent, elapsed_s, finished, and
 * request_id for a request's work. */
static void line(kvt_progress *p, uint64_t done, double now, const char *tail) {
    char text[320];
    double pct = p->total ? 100.0 * (double)done / (double)p->total : NAN;
    const char *sep = p->id[0] ? " " : "";
    if (p->total)
        snprintf(text, sizeof text, "progress: %s%s%s: %llu/%llu %s (%.0f%%), %.1f s%s", p->what, sep, p->id,
                 (unsigned long long)done, (unsigned long long)p->total, p->unit, pct, now - p->start, tail);
    else
        snprintf(text, sizeof text, "progress: %s%s%s: %llu %s, %.1f s%s", p->what, sep, p->id,
                 (unsigned long long)done, p->unit, now - p->start, tail);
    const kvt_log_field f[] = {
        {"what", KVT_LOG_STR, p->what, 0, 0},
        {"done", KVT_LOG_UINT, NULL, (long long)done, 0},
        {"total", p->total ? KVT_LOG_UINT : KVT_LOG_STR, NULL, (long long)p->total, 0},
        {"unit", KVT_LOG_STR, p->unit, 0, 0},
        {"percent", KVT_LOG_REAL, NULL, 0, pct},
        {"elapsed_s", KVT_LOG_REAL, NULL, 0, now - p->start},
        {"finished", KVT_LOG_BOOL, NULL, *tail != 0, 0},
        {"request_id", KVT_LOG_STR, p->id, 0, 0},
    };
    kvt_log_fields(KVT_LOG_INFO, text, f, KVT_ARRAY_LEN(f) - !p->id[0], text);
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
