// SPDX-License-Identifier: MIT
/* Server metrics in the Prometheus text format: request counters by endpoint
 * and status, token counters (prompt, generated, cached by tier, computed),
 * a time-to-first-token histogram, a request-duration histogram per endpoint,
 * kvtier_build_info, the process's own figures (process_*: CPU, memory, fds,
 * start time, read from /proc at render time) and gauges the caller samples
 * (queue depth, running sequences, cache tiers).
 *
 * Thread-safety: every function may be called from any thread (one mutex). */
#ifndef KVT_METRICS_H
#define KVT_METRICS_H

#include <stdint.h>

#include "kvtier.h"

typedef struct kvt_metrics kvt_metrics;

kvt_metrics *kvt_metrics_new(void);
void kvt_metrics_free(kvt_metrics *m);

/* Counts one HTTP request answered with status on endpoint (a short static
 * label such as "completions"; unknown routes use "other"). */
void kvt_metrics_count_request(kvt_metrics *m, const char *endpoint, int status);

/* Counts one finished generation's tokens. */
void kvt_metrics_count_tokens(kvt_metrics *m, int32_t prompt, int32_t generated, const int32_t cached[KVT_TIER_COUNT],
                              int32_t computed);
/* A generation that asked for approximate reuse: its prompt tokens reused
 * approximately, recomputed of the placed ones, and computed to store documents. */
void kvt_metrics_count_approximate(kvt_metrics *m, int32_t approximate, int32_t recomputed, int32_t stored);

/* Records one time to first token, in seconds. */
void kvt_metrics_observe_ttft(kvt_metrics *m, double seconds);

/* Records one request's duration, from arrival to the end of its response,
 * under endpoint (a static label, as for kvt_metrics_count_request). */
void kvt_metrics_observe_duration(kvt_metrics *m, const char *endpoint, double seconds);

/* Values sampled by the caller at render time. */
typedef struct {
    kvt_cache_stats cache;
    uint64_t page_bytes;          /* bytes of one T0 page */
    int32_t queue_depth;          /* requests waiting for a sequence */
    int32_t active;               /* sequences running */
    int32_t parallel;             /* sequences that can run at once */
    uint64_t inflight_body_bytes; /* request body bytes held now (http_guard) */
    uint64_t deadline_closed;     /* connections the whole-request deadline closed so far */
} kvt_metrics_gauges;

/* The exposition text, malloc'd and NUL-terminated; the caller frees it. */
char *kvt_metrics_render(kvt_metrics *m, const kvt_metrics_gauges *g);

#endif
