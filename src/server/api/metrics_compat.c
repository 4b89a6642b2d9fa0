// SPDX-License-Identifier: MIT
/* kvtier's figures under the names other servers give them (metrics.h), so
 * dashboards built for llama-server (llamacpp:) or vLLM (vllm:) show them:
 * the same counters as the kvtier_ series, never counted twice. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "metrics.h"


/* One metric without labels: HELP, TYPE and its value (%.6f for a gauge or seconds, %llu for a count). */
static void one(kvt_strbuf *b, const char *name, const char *type, const char *help, double v) {
    kvt_strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    if (v == (double)(unsigned long long)v && v >= 0) kvt_strbuf_printf(b, "%s %llu\n", name, (unsigned long long)v);
    else kvt_strbuf_printf(b, "%s %.6f\n", name, v);
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

/* llama-server's names: its throughput gauges are tokens over the seconds spent on them. */
static void llamacpp(kvt_strbuf *b, const kvt_metrics_totals *t, const kvt_metrics_gauges *g) {
    const kvt_cache_stats *c = &g->cache;
    int32_t used_pages = c->t0_pages_total - c->t0_pages_free;
    one(b, "llamacpp:prompt_tokens_total", "counter", "Prompt tokens computed (cached ones not counted).",
        (double)t->computed_tokens);
    one(b, "llamacpp:prompt_seconds_total", "counter", "Seconds spent on prompts (prefill and restores).",
        t->prompt_seconds);
    one(b, "llamacpp:tokens_predicted_total", "counter", "Tokens generated.", (double)t->generated_tokens);
    one(b, "llamacpp:tokens_predicted_seconds_total", "counter", "Seconds spent generating.", t->predicted_seconds);
    one(b, "llamacpp:n_decode_total", "counter", "Engine steps (decode calls).", (double)t->decodes);
    one(b, "llamacpp:n_busy_slots_per_decode", "gauge", "Sequences per engine step, on average.",
        ratio((double)t->decode_busy, (double)t->decodes));
    one(b, "llamacpp:prompt_tokens_seconds", "gauge", "Prompt tokens computed per second, on average.",
        ratio((double)t->computed_tokens, t->prompt_seconds));
    one(b, "llamacpp:predicted_tokens_seconds", "gauge", "Tokens generated per second, on average.",
        ratio((double)t->generated_tokens, t->predicted_seconds));
    one(b, "llamacpp:kv_cache_usage_ratio", "gauge", "Share of T0 KV pages in use (running or cached).",
        ratio(used_pages, c->t0_pages_total));
    one(b, "llamacpp:kv_cache_tokens", "gauge", "Tokens the T0 KV pages in use can hold.",
        (double)used_pages * g->block_tokens);
    one(b, "llamacpp:requests_processing", "gauge", "Requests being prefilled or decoded.", g->active);
    one(b, "llamacpp:requests_deferred", "gauge", "Requests waiting for a sequence slot.", g->queue_depth);
}

/* A histogram from non-cumulative buckets. */
static void histogram(kvt_strbuf *b, const char *name, const char *help, const double *bounds, int n,
                      const uint64_t *bucket, uint64_t count, double sum) {
    kvt_strbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < n; i++) {
        cum += bucket[i];
        kvt_strbuf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)cum);
    }
    kvt_strbuf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)count,
                      name, sum, name, (unsigned long long)count);
}

/* vLLM's names: prefix-cache queries and hits in tokens, KV usage, running and waiting requests, the
 * time to first token and between tokens. */
static void vllm(kvt_strbuf *b, const kvt_metrics_totals *t, const kvt_metrics_gauges *g) {
    const kvt_cache_stats *c = &g->cache;
    one(b, "vllm:num_requests_running", "gauge", "Requests being prefilled or decoded.", g->active);
    one(b, "vllm:num_requests_waiting", "gauge", "Requests waiting for a sequence slot.", g->queue_depth);
    one(b, "vllm:kv_cache_usage_perc", "gauge", "Share of T0 KV pages in use (1 = all).",
        ratio(c->t0_pages_total - c->t0_pages_free, c->t0_pages_total));
    one(b, "vllm:gpu_cache_usage_perc", "gauge", "The same share, under vLLM's older name.",
        ratio(c->t0_pages_total - c->t0_pages_free, c->t0_pages_total));
    one(b, "vllm:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the cache.",
        (double)t->prompt_tokens);
    one(b, "vllm:prefix_cache_hits_total", "counter", "Of those, tokens reused from any tier.",
        (double)t->cached_tokens);
    one(b, "vllm:gpu_prefix_cache_hit_rate", "gauge", "Reused over looked-up prompt tokens since start.",
        ratio((double)t->cached_tokens, (double)t->prompt_tokens));
    one(b, "vllm:prompt_tokens_total", "counter", "Prompt tokens of finished requests.", (double)t->prompt_tokens);
    one(b, "vllm:generation_tokens_total", "counter", "Tokens generated.", (double)t->generated_tokens);
    histogram(b, "vllm:time_to_first_token_seconds", "From arrival to the first generated token.", t->ttft_bounds,
              KVT_METRICS_TTFT_BUCKETS, t->ttft_bucket, t->ttft_count, t->ttft_sum);
    histogram(b, "vllm:time_per_output_token_seconds", "Between two tokens of one sequence.", t->itl_bounds,
              KVT_METRICS_ITL_BUCKETS, t->itl_bucket, t->itl_count, t->itl_sum);
    histogram(b, "vllm:inter_token_latency_seconds", "The same, under vLLM's newer name.", t->itl_bounds,
              KVT_METRICS_ITL_BUCKETS, t->itl_bucket, t->itl_count, t->itl_sum);
}

char *kvt_metrics_render_compat(char *text, int names, const kvt_metrics_totals *t, const kvt_metrics_gauges *g) {
    kvt_strbuf b = {.s = text, .len = strlen(text)};
    b.cap = b.len + 1;
    if (names & KVT_METRICS_LLAMACPP) llamacpp(&b, t, g);
    if (names & KVT_METRICS_VLLM) vllm(&b, t, g);
    return b.s;
}
