// SPDX-License-Identifier: MIT
/* Prometheus metrics: counters kept under one mutex, rendered on demand into
 * a growable buffer. Metric names carry the kvtier_ prefix and unit suffixes
 * (_total, _seconds, _bytes) as Prometheus naming asks. */
#include "metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common.h"
#include "ops.h"

#ifndef KVT_GIT_COMMIT
#define KVT_GIT_COMMIT "unknown" /* CMake sets it from `git describe` at configure time */
#endif

#define MAX_REQUEST_SERIES 64  /* distinct (endpoint, status) pairs kept; more fold into the last */
#define MAX_DURATION_SERIES 32 /* endpoints with a duration histogram; more fold into the last */
static const double ttft_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
#define N_TTFT_BUCKETS ((int)KVT_ARRAY_LEN(ttft_buckets))
_Static_assert(N_TTFT_BUCKETS == KVT_METRICS_TTFT_BUCKETS, "kvt_metrics_totals");
/* between two tokens of one sequence: sub-millisecond on a small model, seconds when starved */
static const double itl_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5};
_Static_assert(KVT_ARRAY_LEN(itl_buckets) == KVT_METRICS_ITL_BUCKETS, "kvt_metrics_totals");
/* request durations run from a /health probe (~0.1 ms) to a long generation (minutes) */
static const double duration_buckets[] = {0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                          0.5,    1,     2.5,   5,    10,    30,   60,  300};
#define N_DURATION_BUCKETS ((int)KVT_ARRAY_LEN(duration_buckets))
static const char *const tier_names[KVT_TIER_COUNT] = {"T0", "T1", "T2", "T3"};

typedef struct {
    const char *endpoint;
    int status;
    uint64_t count;
} request_series;

typedef struct {
    const char *endpoint;
    uint64_t bucket[N_DURATION_BUCKETS]; /* non-cumulative; summed when rendered */
    uint64_t count;
    double sum;
} duration_series;

struct kvt_metrics {
    pthread_mutex_t mu;
    request_series req[MAX_REQUEST_SERIES];
    int n_req;
    uint64_t prompt_tokens, generated_tokens, computed_tokens, finished;
    uint64_t approx_requests, approx_tokens, approx_recomputed, approx_stored;
    uint64_t preemptions, resumed_cached, resumed_computed;
    uint64_t cached_tokens[KVT_TIER_COUNT];
    uint64_t ttft_bucket[N_TTFT_BUCKETS]; /* non-cumulative; summed when rendered */
    uint64_t ttft_count;
    double ttft_sum;
    duration_series dur[MAX_DURATION_SERIES];
    int n_dur;
    uint64_t decodes, decode_busy;
    double prompt_seconds, predicted_seconds;
    uint64_t itl_bucket[KVT_METRICS_ITL_BUCKETS], itl_count;
    double itl_sum;
};

kvt_metrics *kvt_metrics_new(void) {
    kvt_metrics *m = kvt_xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

void kvt_metrics_free(kvt_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void kvt_metrics_count_request(kvt_metrics *m, const char *endpoint, int status) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_req && !(m->req[i].status == status && !strcmp(m->req[i].endpoint, endpoint))) i++;
    if (i == m->n_req) {
        if (m->n_req < MAX_REQUEST_SERIES) m->req[m->n_req++] = (request_series){endpoint, status, 0};
        else i = MAX_REQUEST_SERIES - 1;
    }
    m->req[i].count++;
    pthread_mutex_unlock(&m->mu);
}

void kvt_metrics_count_tokens(kvt_metrics *m, int32_t prompt, int32_t generated, const int32_t cached[KVT_TIER_COUNT],
                              int32_t computed) {
    pthread_mutex_lock(&m->mu);
    m->finished++;
    m->prompt_tokens += (uint64_t)KVT_MAX(prompt, 0);
    m->generated_tokens += (uint64_t)KVT_MAX(generated, 0);
    m->computed_tokens += (uint64_t)KVT_MAX(computed, 0);
    for (int t = 0; t < KVT_TIER_COUNT; t++) m->cached_tokens[t] += (uint64_t)KVT_MAX(cached[t], 0);
    pthread_mutex_unlock(&m->mu);
}

void kvt_metrics_count_approximate(kvt_metrics *m, int32_t approximate, int32_t recomputed, int32_t stored) {
    pthread_mutex_lock(&m->mu);
    m->approx_requests++;
    m->approx_tokens += (uint64_t)KVT_MAX(approximate, 0);
    m->approx_recomputed += (uint64_t)KVT_MAX(recomputed, 0);
    m->approx_stored += (uint64_t)KVT_MAX(stored, 0);
    pthread_mutex_unlock(&m->mu);
}

void kvt_metrics_count_preemption(kvt_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->preemptions++;
    pthread_mutex_unlock(&m->mu);
}

void kvt_metrics_count_resume(kvt_metrics *m, int32_t cached, int32_t computed) {
    pthread_mutex_lock(&m->mu);
    m->resumed_cached += (uint64_t)KVT_MAX(cached, 0);
    m->resumed_computed += (uint64_t)KVT_MAX(computed, 0);
    pthread_mutex_unlock(&m->mu);
}

void kvt_metrics_count_decode(kvt_metrics *m, int32_t busy) {
    pthread_mutex_lock(&m->mu);
    m->decodes++;
    m->decode_busy += (uint64_t)KVT_MAX(busy, 0);
    pthread_mutex_unlock(&m->mu);
}

void kvt_metrics_count_times(kvt_metrics *m, double prompt_s, double predicted_s) {
    pthread_mutex_lock(&m->mu);
    m->prompt_seconds += KVT_MAX(prompt_s, 0.0);
    m->predicted_seconds += KVT_MAX(predicted_s, 0.0);
    pthread_mutex_unlock(&m->mu);
}

void kvt_metrics_get_totals(kvt_metrics *m, kvt_metrics_totals *t) {
    pthread_mutex_lock(&m->mu);
    *t = (kvt_metrics_totals){.prompt_tokens = m->prompt_tokens,
                              .generated_tokens = m->generated_tokens,
                              .computed_tokens = m->computed_tokens,
                              .finished = m->finished,
                              .decodes = m->decodes,
                              .decode_busy = m->decode_busy,
                              .prompt_seconds = m->prompt_seconds,
                              .predicted_seconds = m->predicted_seconds,
                              .ttft_bounds = ttft_buckets,
                              .itl_bounds = itl_buckets,
                              .ttft_count = m->ttft_count,
                              .ttft_sum = m->ttft_sum,
                              .itl_count = m->itl_count,
                              .itl_sum = m->itl_sum};
    for (int k = 0; k < KVT_TIER_COUNT; k++) t->cached_tokens += m->cached_tokens[k];
    memcpy(t->ttft_bucket, m->ttft_bucket, sizeof t->ttft_bucket);
    memcpy(t->itl_bucket, m->itl_bucket, sizeof t->itl_bucket);
    pthread_mutex_unlock(&m->mu);
}

/* The bucket an observation falls in (n: above every bound, counted only in +Inf). */
static int bucket_of(const double *bounds, int n, double v) {
    int b = 0;
    while (b < n && v > bounds[b]) b++;
    return b;
}

void kvt_metrics_observe_ttft(kvt_metrics *m, double seconds) {
    pthread_mutex_lock(&m->mu);
    int b = bucket_of(ttft_buckets, N_TTFT_BUCKETS, seconds);
    if (b < N_TTFT_BUCKETS) m->ttft_bucket[b]++;
    m->ttft_count++;
    m->ttft_sum += seconds;
    pthread_mutex_unlock(&m->mu);
}

void kvt_metrics_observe_inter_token(kvt_metrics *m, double seconds) {
    pthread_mutex_lock(&m->mu);
    int b = bucket_of(itl_buckets, KVT_METRICS_ITL_BUCKETS, seconds);
    if (b < KVT_METRICS_ITL_BUCKETS) m->itl_bucket[b]++;
    m->itl_count++;
    m->itl_sum += seconds;
    pthread_mutex_unlock(&m->mu);
}

void kvt_metrics_observe_duration(kvt_metrics *m, const char *endpoint, double seconds) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_dur && strcmp(m->dur[i].endpoint, endpoint)) i++;
    if (i == m->n_dur) {
        if (m->n_dur < MAX_DURATION_SERIES) m->dur[m->n_dur++].endpoint = endpoint;
        else i = MAX_DURATION_SERIES - 1;
    }
    duration_series *d = &m->dur[i];
    int b = bucket_of(duration_buckets, N_DURATION_BUCKETS, seconds);
    if (b < N_DURATION_BUCKETS) d->bucket[b]++;
    d->count++;
    d->sum += seconds;
    pthread_mutex_unlock(&m->mu);
}

static void header(kvt_strbuf *b, const char *name, const char *type, const char *help) {
    kvt_strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One histogram's series: cumulative buckets, +Inf, sum and count. labels is
 * "" or `key="value",` (with its trailing comma). */
static void histogram(kvt_strbuf *b, const char *name, const char *labels, const double *bounds, int n,
                      const uint64_t *bucket, uint64_t count, double sum) {
    uint64_t cum = 0;
    for (int i = 0; i < n; i++) {
        cum += bucket[i];
        kvt_strbuf_printf(b, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels, bounds[i], (unsigned long long)cum);
    }
    kvt_strbuf_printf(b, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels, (unsigned long long)count);
    size_t l = strlen(labels);
    /* the same labels without the trailing comma, for _sum and _count */
    kvt_strbuf_printf(b, "%s_sum%s%.*s%s %.6f\n", name, l ? "{" : "", (int)(l ? l - 1 : 0), labels, l ? "}" : "", sum);
    kvt_strbuf_printf(b, "%s_count%s%.*s%s %llu\n", name, l ? "{" : "", (int)(l ? l - 1 : 0), labels, l ? "}" : "",
                      (unsigned long long)count);
}

/* The process's own figures, as Prometheus client libraries name them, from
 * /proc (Linux): CPU time, memory, file descriptors, start time. A figure
 * that cannot be read is left out rather than reported as 0. */
static void render_process(kvt_strbuf *b) {
    long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    char stat[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n = f ? fread(stat, 1, sizeof stat - 1, f) : 0;
    if (f) fclose(f);
    stat[n] = 0;
    /* fields after the command name (which may hold spaces): state is field 3 */
    const char *p = strrchr(stat, ')');
    unsigned long long utime = 0, stime = 0, start = 0, vsize = 0;
    long long rss = 0;
    int ok = p &&
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d %llu %llu %lld",
               &utime, &stime, &start, &vsize, &rss) == 5 &&
        tick > 0;
    if (ok) {
        header(b, "process_cpu_seconds_total", "counter", "User and system CPU time spent, in seconds.");
        kvt_strbuf_printf(b, "process_cpu_seconds_total %.2f\n", (double)(utime + stime) / (double)tick);
        header(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
        kvt_strbuf_printf(b, "process_resident_memory_bytes %lld\n", rss * page);
        header(b, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
        kvt_strbuf_printf(b, "process_virtual_memory_bytes %llu\n", vsize);
        /* start: clock ticks after boot; boot: btime in /proc/stat */
        unsigned long long btime = 0;
        char line[256];
        FILE *s = fopen("/proc/stat", "r");
        while (s && fgets(line, sizeof line, s))
            if (sscanf(line, "btime %llu", &btime) == 1) break;
        if (s) fclose(s);
        if (btime) {
            header(b, "process_start_time_seconds", "gauge",
                   "Start time of the process since the Unix epoch, in seconds.");
            kvt_strbuf_printf(b, "process_start_time_seconds %.2f\n", (double)btime + (double)start / (double)tick);
        }
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        long fds = 0;
        struct dirent *e;
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') fds++;
        closedir(d);
        header(b, "process_open_fds", "gauge", "Open file descriptors.");
        kvt_strbuf_printf(b, "process_open_fds %ld\n", fds - 1); /* not counting the one reading the directory */
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        header(b, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
        kvt_strbuf_printf(b, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
    }
}

/* The per-node series of T3 on a Redis Cluster, in exposition order: a value
 * line per node, or two (result="hit" and "miss") for a series with a miss
 * field. A field is a uint64_t of kvt_t3_shard_stats, or its int primary. */
#define SHARD(f) offsetof(kvt_t3_shard_stats, f)
static const struct {
    const char *name, *type, *help;
    size_t field, miss; /* where the values are in kvt_t3_shard_stats; miss 0: none (addr is never a value) */
} t3_shard_series[] = {
    {"kvtier_remote_shard_reads_total", "counter",
     "T3 block reads by Redis Cluster node and result (miss: absent, refused, redirected twice or unreachable).",
     SHARD(hits), SHARD(misses)},
    {"kvtier_remote_shard_writes_total", "counter", "Blocks stored in T3, by Redis Cluster node.", SHARD(puts), 0},
    {"kvtier_remote_shard_redirects_total", "counter", "MOVED and ASK replies, by Redis Cluster node.",
     SHARD(redirects), 0},
    {"kvtier_remote_shard_errors_total", "counter", "Connection failures and timeouts, by Redis Cluster node.",
     SHARD(errors), 0},
    {"kvtier_remote_shard_primary", "gauge", "1 for a Redis Cluster node that owns slots in the map now.",
     SHARD(primary), 0},
};

/* One value line of the per-node series name: node's field, with its result label when result is set. */
static void shard_line(kvt_strbuf *b, const char *name, const char *node, const char *result,
                       const kvt_t3_shard_stats *st, size_t field) {
    kvt_strbuf_printf(b, "%s{node=\"%s\"", name, node);
    if (result) kvt_strbuf_printf(b, ",result=\"%s\"", result);
    if (field == SHARD(primary)) {
        kvt_strbuf_printf(b, "} %d\n", st->primary);
        return;
    }
    uint64_t v;
    memcpy(&v, (const char *)st + field, sizeof v);
    kvt_strbuf_printf(b, "} %llu\n", (unsigned long long)v);
}

/* s as a label value (no quote, backslash or newline) into out of cap bytes. */
static const char *label_value(const char *s, char *out, size_t cap) {
    size_t k = 0;
    for (; s && *s && k + 1 < cap; s++)
        if (*s != '"' && *s != '\\' && *s != '\n') out[k++] = *s;
    out[k] = 0;
    return out;
}

/* Where the engine runs (a GPU's name and numerics id name its kernels, not the CPU's of
 * kvtier_build_info), and whether that GPU was lost. */
static void render_device(kvt_strbuf *b, const kvt_metrics_gauges *g) {
    char dev[32], name[256], num[256];
    header(b, "kvtier_device_info", "gauge",
           "1, labelled with where the engine runs: cpu or vulkan:N, the device's name and the numerics id its "
           "kernels key the cache with.");
    kvt_strbuf_printf(b, "kvtier_device_info{device=\"%s\",name=\"%s\",numerics=\"%s\"} 1\n",
                      label_value(g->device ? g->device : "cpu", dev, sizeof dev),
                      label_value(g->device_name ? g->device_name : "cpu", name, sizeof name),
                      label_value(g->numerics, num, sizeof num));
    header(b, "kvtier_device_lost", "gauge", "1 once the engine's GPU was lost: every request fails until a restart.");
    kvt_strbuf_printf(b, "kvtier_device_lost %d\n", g->device_lost);
}

/* T3 on a Redis Cluster: reads and writes by node. */
static void render_t3_shards(kvt_strbuf *b, const kvt_cache_stats *c) {
    uint32_t n = KVT_MIN(c->t3_n_shards, (uint32_t)KVT_T3_SHARDS_MAX);
    char node[KVT_T3_SHARDS_MAX][KVT_T3_ADDR_MAX];
    for (uint32_t i = 0; i < n; i++) { /* a label value: no quote, backslash or newline */
        size_t k = 0;
        for (const char *a = c->t3_shards[i].addr; *a && k + 1 < KVT_T3_ADDR_MAX; a++)
            if (*a != '"' && *a != '\\' && *a != '\n') node[i][k++] = *a;
        node[i][k] = 0;
    }
    for (size_t s = 0; s < KVT_ARRAY_LEN(t3_shard_series); s++) {
        const char *name = t3_shard_series[s].name;
        size_t miss = t3_shard_series[s].miss;
        header(b, name, t3_shard_series[s].type, t3_shard_series[s].help);
        for (uint32_t i = 0; i < n; i++) {
            shard_line(b, name, node[i], miss ? "hit" : NULL, &c->t3_shards[i], t3_shard_series[s].field);
            if (miss) shard_line(b, name, node[i], "miss", &c->t3_shards[i], miss);
        }
    }
}

/* Long: one header and one value line per series, in exposition order: a list, not logic. */
char *kvt_metrics_render(kvt_metrics *m, const kvt_metrics_gauges *g) {
    kvt_strbuf b = {.cap = 4096};
    b.s = kvt_xmalloc(b.cap);
    b.s[0] = 0;
    pthread_mutex_lock(&m->mu);
    header(&b, "kvtier_requests_total", "counter", "HTTP requests answered, by endpoint and status code.");
    for (int i = 0; i < m->n_req; i++)
        kvt_strbuf_printf(&b, "kvtier_requests_total{endpoint=\"%s\",code=\"%d\"} %llu\n", m->req[i].endpoint,
                          m->req[i].status, (unsigned long long)m->req[i].count);
    header(&b, "kvtier_generations_total", "counter", "Generations that ran to an end.");
    kvt_strbuf_printf(&b, "kvtier_generations_total %llu\n", (unsigned long long)m->finished);
    header(&b, "kvtier_prompt_tokens_total", "counter", "Prompt tokens of finished generations.");
    kvt_strbuf_printf(&b, "kvtier_prompt_tokens_total %llu\n", (unsigned long long)m->prompt_tokens);
    header(&b, "kvtier_generated_tokens_total", "counter", "Tokens generated.");
    kvt_strbuf_printf(&b, "kvtier_generated_tokens_total %llu\n", (unsigned long long)m->generated_tokens);
    header(&b, "kvtier_cached_tokens_total", "counter", "Prompt tokens restored from the cache, by tier.");
    for (int t = 0; t < KVT_TIER_COUNT; t++)
        kvt_strbuf_printf(&b, "kvtier_cached_tokens_total{tier=\"%s\"} %llu\n", tier_names[t],
                          (unsigned long long)m->cached_tokens[t]);
    header(&b, "kvtier_computed_tokens_total", "counter", "Prompt tokens prefilled (not restored).");
    kvt_strbuf_printf(&b, "kvtier_computed_tokens_total %llu\n", (unsigned long long)m->computed_tokens);
    header(&b, "kvtier_approximate_requests_total", "counter",
           "Generations that asked for approximate reuse (kvtier.reuse \"approximate\").");
    kvt_strbuf_printf(&b, "kvtier_approximate_requests_total %llu\n", (unsigned long long)m->approx_requests);
    header(
        &b, "kvtier_approximate_tokens_total", "counter",
        "Prompt tokens reused approximately: placed from a document's stored KV at another position, not recomputed.");
    kvt_strbuf_printf(&b, "kvtier_approximate_tokens_total %llu\n", (unsigned long long)m->approx_tokens);
    header(&b, "kvtier_approximate_recomputed_tokens_total", "counter",
           "Placed document tokens recomputed because their KV deviated most (counted in computed tokens).");
    kvt_strbuf_printf(&b, "kvtier_approximate_recomputed_tokens_total %llu\n", (unsigned long long)m->approx_recomputed);
    header(&b, "kvtier_approximate_stored_tokens_total", "counter",
           "Document tokens computed to store a document's KV for placing (not part of any prompt's count).");
    kvt_strbuf_printf(&b, "kvtier_approximate_stored_tokens_total %llu\n", (unsigned long long)m->approx_stored);
    header(&b, "kvtier_preemptions_total", "counter",
           "Generations paused because the KV memory (--kv-active) was full; their KV stayed cached and they resumed.");
    kvt_strbuf_printf(&b, "kvtier_preemptions_total %llu\n", (unsigned long long)m->preemptions);
    header(&b, "kvtier_resumed_tokens_total", "counter",
           "Tokens of paused generations put back on resuming, by where they came from: the cache or recomputed.");
    kvt_strbuf_printf(&b, "kvtier_resumed_tokens_total{source=\"cache\"} %llu\n", (unsigned long long)m->resumed_cached);
    kvt_strbuf_printf(&b, "kvtier_resumed_tokens_total{source=\"computed\"} %llu\n",
                      (unsigned long long)m->resumed_computed);
    header(&b, "kvtier_time_to_first_token_seconds", "histogram", "From arrival to the first generated token.");
    histogram(&b, "kvtier_time_to_first_token_seconds", "", ttft_buckets, N_TTFT_BUCKETS, m->ttft_bucket, m->ttft_count,
              m->ttft_sum);
    header(&b, "kvtier_request_duration_seconds", "histogram",
           "From a request's arrival to the end of its response (a stream's last event), by endpoint.");
    for (int i = 0; i < m->n_dur; i++) {
        char labels[96];
        snprintf(labels, sizeof labels, "endpoint=\"%s\",", m->dur[i].endpoint);
        histogram(&b, "kvtier_request_duration_seconds", labels, duration_buckets, N_DURATION_BUCKETS, m->dur[i].bucket,
                  m->dur[i].count, m->dur[i].sum);
    }
    pthread_mutex_unlock(&m->mu);
    header(&b, "kvtier_build_info", "gauge",
           "1, labelled with the build: version, git commit, kernel variant in use and numerics id.");
    kvt_strbuf_printf(&b, "kvtier_build_info{version=\"%s\",commit=\"%s\",ops_variant=\"%s\",numerics=\"%s\"} 1\n",
                      KVT_VERSION, KVT_GIT_COMMIT, kvt_ops_variant(), kvt_ops_numerics_id());
    render_device(&b, g);
    render_process(&b);

    const kvt_cache_stats *c = &g->cache;
    uint64_t t0_used = (uint64_t)(c->t0_pages_total - c->t0_pages_free) * g->page_bytes;
    /* T3: what this node believes the shared store holds of its blocks */
    uint64_t used[KVT_TIER_COUNT] = {t0_used, c->t1_bytes_used, c->t2_bytes_used, c->t3_known * c->t3_value_bytes};
    uint64_t budget[KVT_TIER_COUNT] = {(uint64_t)c->t0_pages_total * g->page_bytes, c->t1_budget_bytes,
                                       c->t2_budget_bytes, c->t3_budget_bytes};
    uint64_t evictions[KVT_TIER_COUNT] = {c->t0_evictions, c->t1_evictions, 0, 0};
    header(&b, "kvtier_tier_used_bytes", "gauge", "Bytes of KV held per tier (T0: pages in use, cached or running).");
    for (int t = 0; t < KVT_TIER_COUNT; t++)
        kvt_strbuf_printf(&b, "kvtier_tier_used_bytes{tier=\"%s\"} %llu\n", tier_names[t], (unsigned long long)used[t]);
    header(&b, "kvtier_tier_budget_bytes", "gauge", "Byte budget per tier (0: tier not configured).");
    for (int t = 0; t < KVT_TIER_COUNT; t++)
        kvt_strbuf_printf(&b, "kvtier_tier_budget_bytes{tier=\"%s\"} %llu\n", tier_names[t],
                          (unsigned long long)budget[t]);
    header(&b, "kvtier_tier_evictions_total", "counter", "Blocks evicted from each tier.");
    for (int t = 0; t < KVT_TIER_COUNT; t++)
        kvt_strbuf_printf(&b, "kvtier_tier_evictions_total{tier=\"%s\"} %llu\n", tier_names[t],
                          (unsigned long long)evictions[t]);
    header(&b, "kvtier_cache_blocks", "gauge", "Blocks indexed per tier.");
    for (int t = 0; t < KVT_TIER_COUNT; t++)
        kvt_strbuf_printf(&b, "kvtier_cache_blocks{tier=\"%s\"} %llu\n", tier_names[t],
                          (unsigned long long)c->index_entries[t]);
    header(&b, "kvtier_disk_bytes_total", "counter", "Disk tier (T2) I/O in bytes, by direction.");
    kvt_strbuf_printf(&b, "kvtier_disk_bytes_total{direction=\"read\"} %llu\n", (unsigned long long)c->t2_bytes_read);
    kvt_strbuf_printf(&b, "kvtier_disk_bytes_total{direction=\"write\"} %llu\n",
                      (unsigned long long)c->t2_bytes_written);
    header(&b, "kvtier_disk_records_written_total", "counter", "Blocks written to the disk tier.");
    kvt_strbuf_printf(&b, "kvtier_disk_records_written_total %llu\n", (unsigned long long)c->t2_writes);
    header(&b, "kvtier_disk_writes_dropped_total", "counter", "Disk writes dropped (queue full, disk full, errors).");
    kvt_strbuf_printf(&b, "kvtier_disk_writes_dropped_total %llu\n", (unsigned long long)c->t2_dropped);
    header(&b, "kvtier_disk_writes_disabled", "gauge",
           "1 while disk writes are off (2: for lack of space, resuming when space is back), else 0.");
    kvt_strbuf_printf(&b, "kvtier_disk_writes_disabled %d\n", c->t2_out_of_space ? 2 : c->t2_writes_disabled ? 1 : 0);
    header(&b, "kvtier_disk_space_pauses_total", "counter", "Times disk writes stopped because the disk was full.");
    kvt_strbuf_printf(&b, "kvtier_disk_space_pauses_total %llu\n", (unsigned long long)c->t2_space_pauses);
    header(&b, "kvtier_disk_restores_total", "counter", "Blocks read back from disk into pages.");
    kvt_strbuf_printf(&b, "kvtier_disk_restores_total %llu\n", (unsigned long long)c->t2_restores);
    header(&b, "kvtier_disk_recompute_decisions_total", "counter",
           "Requests that recomputed disk blocks because reading them was measured slower.");
    kvt_strbuf_printf(&b, "kvtier_disk_recompute_decisions_total %llu\n", (unsigned long long)c->t2_recompute_decisions);
    header(&b, "kvtier_remote_connected", "gauge",
           "1 while the T3 (Redis) read connection is up, 0 while down, -1 when T3 is off.");
    kvt_strbuf_printf(&b, "kvtier_remote_connected %d\n", c->t3_connected);
    header(&b, "kvtier_remote_reads_total", "counter",
           "T3 block reads, by result (miss: absent, evicted, refused or unreachable).");
    kvt_strbuf_printf(&b, "kvtier_remote_reads_total{result=\"hit\"} %llu\n", (unsigned long long)c->t3_hits);
    kvt_strbuf_printf(&b, "kvtier_remote_reads_total{result=\"miss\"} %llu\n", (unsigned long long)c->t3_misses);
    header(&b, "kvtier_remote_bad_values_total", "counter",
           "T3 values refused: CRC, MAC, namespace, parent or tokens did not match.");
    kvt_strbuf_printf(&b, "kvtier_remote_bad_values_total %llu\n", (unsigned long long)c->t3_bad);
    header(&b, "kvtier_remote_bytes_total", "counter", "T3 value bytes, by direction.");
    kvt_strbuf_printf(&b, "kvtier_remote_bytes_total{direction=\"read\"} %llu\n", (unsigned long long)c->t3_bytes_read);
    kvt_strbuf_printf(&b, "kvtier_remote_bytes_total{direction=\"write\"} %llu\n",
                      (unsigned long long)c->t3_bytes_written);
    header(&b, "kvtier_remote_retry_held_blocks", "gauge",
           "T3 writes held in memory while Redis is unreachable, to be sent when it is back.");
    kvt_strbuf_printf(&b, "kvtier_remote_retry_held_blocks %llu\n", (unsigned long long)c->t3_retry_held);
    header(&b, "kvtier_remote_retry_total", "counter",
           "Held T3 writes, by outcome (sent: stored late; dropped: the holding was full).");
    kvt_strbuf_printf(&b, "kvtier_remote_retry_total{result=\"sent\"} %llu\n", (unsigned long long)c->t3_retry_sent);
    kvt_strbuf_printf(&b, "kvtier_remote_retry_total{result=\"dropped\"} %llu\n",
                      (unsigned long long)c->t3_retry_dropped);
    header(&b, "kvtier_remote_writes_total", "counter", "Blocks stored in T3 (SET answered).");
    kvt_strbuf_printf(&b, "kvtier_remote_writes_total %llu\n", (unsigned long long)c->t3_writes);
    if (c->t3_n_shards) render_t3_shards(&b, c);
    header(&b, "kvtier_remote_written_payload_bytes_total", "counter",
           "Payload bytes of the T3 values written, before compression (over write bytes: the ratio).");
    kvt_strbuf_printf(&b, "kvtier_remote_written_payload_bytes_total %llu\n", (unsigned long long)c->t3_payload_written);
    header(&b, "kvtier_remote_values_encoded_total", "counter",
           "T3 values encoded with --kv-remote-compress zstd, by codec (raw: did not shrink).");
    kvt_strbuf_printf(&b, "kvtier_remote_values_encoded_total{codec=\"zstd\"} %llu\n",
                      (unsigned long long)c->t3_compressed);
    kvt_strbuf_printf(&b, "kvtier_remote_values_encoded_total{codec=\"raw\"} %llu\n",
                      (unsigned long long)c->t3_incompressible);
    header(&b, "kvtier_remote_writes_dropped_total", "counter", "T3 writes dropped (queue full, Redis down, errors).");
    kvt_strbuf_printf(&b, "kvtier_remote_writes_dropped_total %llu\n", (unsigned long long)c->t3_dropped);
    header(&b, "kvtier_remote_restores_total", "counter", "Blocks read back from T3 into pages.");
    kvt_strbuf_printf(&b, "kvtier_remote_restores_total %llu\n", (unsigned long long)c->t3_restores);
    header(&b, "kvtier_remote_errors_total", "counter", "T3 connection failures, timeouts and error replies.");
    kvt_strbuf_printf(&b, "kvtier_remote_errors_total %llu\n", (unsigned long long)c->t3_errors);
    header(&b, "kvtier_remote_timeouts_total", "counter",
           "T3 read calls cut by their deadline (--kv-remote-timeout-ms).");
    kvt_strbuf_printf(&b, "kvtier_remote_timeouts_total %llu\n", (unsigned long long)c->t3_timeouts);
    header(&b, "kvtier_remote_probes_total", "counter", "Lookups that asked T3 for blocks the local index lacked.");
    kvt_strbuf_printf(&b, "kvtier_remote_probes_total %llu\n", (unsigned long long)c->t3_probes);
    header(&b, "kvtier_remote_probe_found_blocks_total", "counter", "Blocks those probes found in T3.");
    kvt_strbuf_printf(&b, "kvtier_remote_probe_found_blocks_total %llu\n", (unsigned long long)c->t3_probe_found);
    header(&b, "kvtier_remote_latency_seconds", "summary",
           "Wall time of T3 read calls (one pipelined round trip each).");
    kvt_strbuf_printf(&b, "kvtier_remote_latency_seconds_sum %.6f\n", c->t3_latency_sum_s);
    kvt_strbuf_printf(&b, "kvtier_remote_latency_seconds_count %llu\n", (unsigned long long)c->t3_round_trips);
    header(&b, "kvtier_cache_lookup_tokens_total", "counter", "Prompt tokens matched against the cache.");
    kvt_strbuf_printf(&b, "kvtier_cache_lookup_tokens_total %llu\n", (unsigned long long)c->lookup_tokens);
    header(&b, "kvtier_cache_hit_tokens_total", "counter", "Of those, tokens restored instead of computed.");
    kvt_strbuf_printf(&b, "kvtier_cache_hit_tokens_total %llu\n", (unsigned long long)c->hit_tokens);
    header(&b, "kvtier_cache_hit_ratio", "gauge", "hit_tokens / lookup_tokens since start.");
    kvt_strbuf_printf(&b, "kvtier_cache_hit_ratio %.6f\n",
                      c->lookup_tokens ? (double)c->hit_tokens / (double)c->lookup_tokens : 0.0);
    header(&b, "kvtier_disk_write_waits_total", "counter",
           "Demotions that waited for the disk writer (back-pressure instead of a drop).");
    kvt_strbuf_printf(&b, "kvtier_disk_write_waits_total %llu\n", (unsigned long long)c->t2_put_waits);
    header(&b, "kvtier_disk_queue_hits_total", "counter",
           "Blocks restored from the disk write queue before they reached the disk.");
    kvt_strbuf_printf(&b, "kvtier_disk_queue_hits_total %llu\n", (unsigned long long)c->t2_queue_hits);
    header(&b, "kvtier_cache_discarded_blocks_total", "counter",
           "Blocks that left T0/T1 and reached no lower tier (none configured, or full).");
    kvt_strbuf_printf(&b, "kvtier_cache_discarded_blocks_total %llu\n", (unsigned long long)c->discarded);
    header(&b, "kvtier_cache_shortfalls_total", "counter",
           "Requests that reused fewer tokens than their lookup matched, by cause.");
    for (int k = 1; k < KVT_SHORTFALL_COUNT; k++)
        kvt_strbuf_printf(&b, "kvtier_cache_shortfalls_total{cause=\"%s\"} %llu\n",
                          kvt_shortfall_name((kvt_shortfall)k), (unsigned long long)c->shortfalls[k]);
    header(&b, "kvtier_cache_misses_total", "counter",
           "Requests whose reuse stopped before the end of the prompt, by reason (docs/api.md \"Why did this "
           "miss?\").");
    for (int k = KVT_REUSE_END_OF_PROMPT + 1; k < KVT_REUSE_REASON_COUNT; k++)
        kvt_strbuf_printf(&b, "kvtier_cache_misses_total{reason=\"%s\"} %llu\n",
                          kvt_reuse_reason_name((kvt_reuse_reason)k), (unsigned long long)c->reuse_stops[k]);
    header(&b, "kvtier_cache_full_reuse_total", "counter",
           "Requests that reused every full cached block of their prompt (reason end_of_prompt).");
    kvt_strbuf_printf(&b, "kvtier_cache_full_reuse_total %llu\n",
                      (unsigned long long)c->reuse_stops[KVT_REUSE_END_OF_PROMPT]);
    header(&b, "kvtier_cache_shortfall_tokens_total", "counter", "Matched tokens those requests recomputed.");
    kvt_strbuf_printf(&b, "kvtier_cache_shortfall_tokens_total %llu\n", (unsigned long long)c->shortfall_tokens);
    header(&b, "kvtier_sessions_warm", "gauge", "Agent sessions kept warm in T0 now.");
    kvt_strbuf_printf(&b, "kvtier_sessions_warm %d\n", c->warm_sessions);
    header(&b, "kvtier_sessions_released_total", "counter", "Warm sessions let go, by why.");
    kvt_strbuf_printf(&b, "kvtier_sessions_released_total{why=\"pressure\"} %llu\n",
                      (unsigned long long)c->sessions_released);
    kvt_strbuf_printf(&b, "kvtier_sessions_released_total{why=\"expired\"} %llu\n",
                      (unsigned long long)c->sessions_expired);
    header(&b, "kvtier_pinned_pages", "gauge", "T0 pages held by pins and warm sessions.");
    kvt_strbuf_printf(&b, "kvtier_pinned_pages %d\n", c->t0_pages_pinned);
    header(&b, "kvtier_prefetched_blocks_total", "counter", "Blocks restored into T0 ahead of their request.");
    kvt_strbuf_printf(&b, "kvtier_prefetched_blocks_total %llu\n", (unsigned long long)c->prefetched_blocks);
    header(&b, "kvtier_queue_depth", "gauge", "Requests waiting for a sequence slot.");
    kvt_strbuf_printf(&b, "kvtier_queue_depth %d\n", g->queue_depth);
    header(&b, "kvtier_sequences_active", "gauge", "Sequences being prefilled or decoded.");
    kvt_strbuf_printf(&b, "kvtier_sequences_active %d\n", g->active);
    header(&b, "kvtier_sequences_max", "gauge", "Sequences decoded together at most (--parallel).");
    kvt_strbuf_printf(&b, "kvtier_sequences_max %d\n", g->parallel);
    header(&b, "kvtier_http_inflight_body_bytes", "gauge",
           "Request body bytes held by requests in flight (--max-inflight-bytes bounds it).");
    kvt_strbuf_printf(&b, "kvtier_http_inflight_body_bytes %llu\n", (unsigned long long)g->inflight_body_bytes);
    header(&b, "kvtier_http_deadline_closed_total", "counter",
           "Connections closed for not sending a whole request within --request-timeout.");
    kvt_strbuf_printf(&b, "kvtier_http_deadline_closed_total %llu\n", (unsigned long long)g->deadline_closed);
    return b.s;
}
