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

/* A generation paused for want of KV memory (its KV stays cached). */
void kvt_metrics_count_preemption(kvt_metrics *m);
/* A paused generation resumed: cached of its tokens restored, computed recomputed. */
void kvt_metrics_count_resume(kvt_metrics *m, int32_t cached, int32_t computed);

/* Records one time to first token, in seconds. */
void kvt_metrics_observe_ttft(kvt_metrics *m, double seconds);

/* Records one request's duration, from arrival to the end of its response,
 * under endpoint (a static label, as for kvt_metrics_count_request). */
void kvt_metrics_observe_duration(kvt_metrics *m, const char *endpoint, double seconds);

/* One engine step (a decode call) that ran busy sequences (generating or prefilling). */
void kvt_metrics_count_decode(kvt_metrics *m, int32_t busy);
/* A finished generation's prompt time (prefill, restores included) and generation time (first token to
 * last), in seconds: llama-server's throughput figures. */
void kvt_metrics_count_times(kvt_metrics *m, double prompt_s, double predicted_s);
/* The time between two consecutive tokens of one sequence, in seconds. */
void kvt_metrics_observe_inter_token(kvt_metrics *m, double seconds);

#define KVT_METRICS_TTFT_BUCKETS 12
#define KVT_METRICS_ITL_BUCKETS 12
/* The counters as they are now, for the other names /metrics gives them (metrics_compat.c). */
typedef struct {
    uint64_t prompt_tokens, generated_tokens, computed_tokens, cached_tokens, finished;
    uint64_t decodes, decode_busy; /* engine steps, and the busy sequences they ran in all */
    double prompt_seconds, predicted_seconds;
    const double *ttft_bounds, *itl_bounds;                     /* static */
    uint64_t ttft_bucket[KVT_METRICS_TTFT_BUCKETS], ttft_count; /* non-cumulative buckets */
    double ttft_sum;
    uint64_t itl_bucket[KVT_METRICS_ITL_BUCKETS], itl_count;
    double itl_sum;
} kvt_metrics_totals;
void kvt_metrics_get_totals(kvt_metrics *m, kvt_metrics_totals *t);

/* Values sampled by the caller at render time. */
typedef struct {
    kvt_cache_stats cache;
    uint64_t page_bytes;          /* bytes of one T0 page */
    int32_t queue_depth;          /* requests waiting for a sequence */
    int32_t active;               /* sequences running */
    int32_t parallel;             /* sequences that can run at once */
    uint64_t inflight_body_bytes; /* request body bytes held now (http_guard) */
    uint64_t deadline_closed;     /* connections the whole-request deadline closed so far */
    int32_t block_tokens;         /* tokens one T0 page holds */
    const char *device;           /* where the engine runs: "cpu" or "vulkan:N" */
    const char *device_name;      /* "cpu" or the GPU's name */
    const char *numerics;         /* the engine's numerics id (the GPU's on a GPU) */
    int device_lost;              /* the GPU was lost: every step fails until a restart */
} kvt_metrics_gauges;

/* The exposition text, malloc'd and NUL-terminated; the caller frees it. */
char *kvt_metrics_render(kvt_metrics *m, const kvt_metrics_gauges *g);

/* Which other names /metrics gives the same figures besides kvtier's (metrics_compat.c). */
enum { KVT_METRICS_LLAMACPP = 1, KVT_METRICS_VLLM = 2 };
/* The figures under llama-server's llamacpp: names (names & KVT_METRICS_LLAMACPP) and vLLM's vllm:
 * names (& KVT_METRICS_VLLM), appended to text (malloc'd; realloc'd and returned). */
char *kvt_metrics_render_compat(char *text, int names, const kvt_metrics_totals *t, const kvt_metrics_gauges *g);

#endif
