// SPDX-License-Identifier: MIT
/* Server metrics: counters add up, the TTFT histogram is cumulative and
 * consistent with its count and sum, the tier gauges come from the sampled
 * cache stats, and the exposition text is well formed (every sample belongs
 * to a metric announced by # HELP and # TYPE, names and label syntax valid,
 * values numbers). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "metrics.h"
#include "testutil.h"

/* Value of the first line that starts with `sample ` (a full name with labels); -1 if none. */
static double value_of(const char *text, const char *sample) {
    size_t n = strlen(sample);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, sample, n) && l[n] == ' ') return strtod(l + n + 1, NULL);
    return -1;
}

/* Every non-comment line: name[{k="v",...}] value, with # TYPE before its first sample. */
static int well_formed(const char *text) {
    char typed[256][96];
    int n_typed = 0, bad = 0;
    const char *l = text;
    while (*l) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)len, l);
        if (!strncmp(line, "# TYPE ", 7)) {
            if (n_typed < 256) sscanf(line + 7, "%95s", typed[n_typed++]);
        } else if (line[0] != '#' && line[0]) {
            size_t i = 0;
            while (isalnum((unsigned char)line[i]) || line[i] == '_' || line[i] == ':') i++;
            char name[96];
            snprintf(name, sizeof name, "%.*s", (int)i, line);
            int known = 0;
            for (int k = 0; k < n_typed; k++) {
                size_t tl = strlen(typed[k]);
                /* histogram samples carry _bucket/_sum/_count after the announced name */
                if (!strncmp(name, typed[k], tl) &&
                    (!name[tl] || !strcmp(name + tl, "_bucket") || !strcmp(name + tl, "_sum") ||
                     !strcmp(name + tl, "_count")))
                    known = 1;
            }
            if (!i || isdigit((unsigned char)line[0]) || !known) bad++;
            if (line[i] == '{') {
                const char *close = strchr(line + i, '}');
                if (!close) bad++;
                else i = (size_t)(close - line) + 1;
            }
            char *end;
            if (line[i] != ' ') bad++;
            else {
                strtod(line + i + 1, &end);
                if (end == line + i + 1 || *end) bad++;
            }
            if (bad) {
                fprintf(stderr, "malformed or unannounced sample: %s\n", line);
                return 0;
            }
        }
        l += len + (e != NULL);
    }
    return 1;
}

int main(void) {
    kvt_metrics *m = kvt_metrics_new();
    kvt_metrics_count_request(m, "completions", 200);
    kvt_metrics_count_request(m, "completions", 200);
    kvt_metrics_count_request(m, "completions", 400);
    kvt_metrics_count_request(m, "chat_completions", 200);
    int32_t cached[KVT_TIER_COUNT] = {10, 20, 30, 0};
    kvt_metrics_count_tokens(m, 100, 7, cached, 40);
    kvt_metrics_count_tokens(m, 50, 3, cached, 50);
    double ttfts[] = {0.001, 0.02, 0.3, 4.0, 1000.0};
    for (size_t i = 0; i < sizeof ttfts / sizeof *ttfts; i++) kvt_metrics_observe_ttft(m, ttfts[i]);
    kvt_metrics_observe_duration(m, "completions", 0.3);
    kvt_metrics_observe_duration(m, "completions", 7.0);
    kvt_metrics_observe_duration(m, "health", 0.0002);
    kvt_metrics_observe_duration(m, "completions", 1e6); /* past every bound: only +Inf */
    kvt_metrics_gauges g = {.page_bytes = 1000, .queue_depth = 3, .active = 2, .parallel = 4};
    g.cache.t0_pages_total = 10;
    g.cache.t0_pages_free = 4;
    g.cache.t1_bytes_used = 777;
    g.cache.t1_budget_bytes = 2048;
    g.cache.t2_dropped = 5;
    g.cache.t2_writes_disabled = 1;
    g.cache.t2_out_of_space = 1;
    g.cache.t2_space_pauses = 2;
    g.cache.t3_retry_held = 6;
    g.cache.t3_retry_sent = 7;
    char *t = kvt_metrics_render(m, &g);
    CHECK(t && well_formed(t));
    CHECK(value_of(t, "kvtier_requests_total{endpoint=\"completions\",code=\"200\"}") == 2);
    CHECK(value_of(t, "kvtier_requests_total{endpoint=\"completions\",code=\"400\"}") == 1);
    CHECK(value_of(t, "kvtier_requests_total{endpoint=\"chat_completions\",code=\"200\"}") == 1);
    CHECK(value_of(t, "kvtier_prompt_tokens_total") == 150);
    CHECK(value_of(t, "kvtier_generated_tokens_total") == 10);
    CHECK(value_of(t, "kvtier_cached_tokens_total{tier=\"T1\"}") == 40);
    CHECK(value_of(t, "kvtier_computed_tokens_total") == 90);
    CHECK(value_of(t, "kvtier_time_to_first_token_seconds_count") == 5);
    double sum = value_of(t, "kvtier_time_to_first_token_seconds_sum");
    CHECKF(sum > 1004.32 && sum < 1004.33, "sum %g", sum);
    CHECK(value_of(t, "kvtier_time_to_first_token_seconds_bucket{le=\"+Inf\"}") == 5);
    /* cumulative: every bucket is at least the one before it and at most the count */
    double prev = 0;
    int buckets = 0, monotone = 1;
    for (const char *l = strstr(t, "_bucket{le=\""); l; l = strstr(l + 1, "_bucket{le=\"")) {
        const char *v = strchr(l, ' ');
        double x = strtod(v + 1, NULL);
        monotone &= x >= prev && x <= 5;
        prev = x;
        buckets++;
    }
    CHECK(buckets >= 3 && monotone);
    CHECK(value_of(t, "kvtier_tier_used_bytes{tier=\"T0\"}") == 6000);
    CHECK(value_of(t, "kvtier_tier_budget_bytes{tier=\"T0\"}") == 10000);
    CHECK(value_of(t, "kvtier_tier_used_bytes{tier=\"T1\"}") == 777);
    CHECK(value_of(t, "kvtier_disk_writes_dropped_total") == 5);
    CHECK(value_of(t, "kvtier_disk_writes_disabled") == 2); /* off for lack of space */
    CHECK(value_of(t, "kvtier_disk_space_pauses_total") == 2);
    CHECK(value_of(t, "kvtier_remote_retry_held_blocks") == 6);
    CHECK(value_of(t, "kvtier_remote_retry_total{result=\"sent\"}") == 7);
    CHECK(value_of(t, "kvtier_queue_depth") == 3);
    CHECK(value_of(t, "kvtier_sequences_active") == 2);
    /* request durations: one cumulative histogram per endpoint */
    CHECK(value_of(t, "kvtier_request_duration_seconds_count{endpoint=\"completions\"}") == 3);
    CHECK(value_of(t, "kvtier_request_duration_seconds_bucket{endpoint=\"completions\",le=\"0.25\"}") == 0);
    CHECK(value_of(t, "kvtier_request_duration_seconds_bucket{endpoint=\"completions\",le=\"0.5\"}") == 1);
    CHECK(value_of(t, "kvtier_request_duration_seconds_bucket{endpoint=\"completions\",le=\"10\"}") == 2);
    CHECK(value_of(t, "kvtier_request_duration_seconds_bucket{endpoint=\"completions\",le=\"300\"}") == 2);
    CHECK(value_of(t, "kvtier_request_duration_seconds_bucket{endpoint=\"completions\",le=\"+Inf\"}") == 3);
    CHECK(value_of(t, "kvtier_request_duration_seconds_bucket{endpoint=\"health\",le=\"0.0005\"}") == 1);
    double dsum = value_of(t, "kvtier_request_duration_seconds_sum{endpoint=\"completions\"}");
    CHECKF(dsum > 1000007.2 && dsum < 1000007.4, "duration sum %g", dsum);
    /* the build and the process */
    CHECK(strstr(t, "kvtier_build_info{version=\"" KVT_VERSION "\",commit=\"") != NULL);
    CHECK(strstr(t, "ops_variant=\"") && strstr(t, "numerics=\"kvt-ops-"));
    CHECK(value_of(t, "process_resident_memory_bytes") > 1e6);
    CHECK(value_of(t, "process_open_fds") >= 3); /* stdin, stdout, stderr at least */
    double start = value_of(t, "process_start_time_seconds"), now = (double)time(NULL);
    CHECKF(start > now - 3600 && start <= now + 1, "start %f, now %f", start, now);
    CHECK(value_of(t, "process_cpu_seconds_total") >= 0);
    free(t);
    kvt_metrics_free(m);
    return kvt_test_done("test_metrics");
}
