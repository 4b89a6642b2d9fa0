// SPDX-License-Identifier: MIT
/* T1 in host memory mapped for the device, on Vulkan device 0 (lavapipe
 * here), as the device maps memory and again with KVT_VK_FORCE_STAGING=1 (as
 * a discrete GPU does):
 *  - demoting T0's idle pages (a chain) to T1 is one copy-out run, one
 *    submission, straight into T1's slots: no page through the engine's staging memcpy,
 *    every block's payload written in place;
 *  - a restore from T1 is one copy-in run, one submission, straight from T1's
 *    own bytes (lent, not copied), and warm equals cold: greedy tokens and
 *    the logits bit for bit;
 *  - a run mixing pinned and ordinary host memory is still one submission;
 *  - when the device refuses the pinned memory (KVT_VK_HOST_LIMIT), T1 warns
 *    once, takes ordinary memory and still serves: its pages go through the
 *    staging copy, and warm still equals cold.
 * No validation message may appear. Skips (77) without a device. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "gpu_test.h"
#include "log.h"
#include "model.h"

#define B 16
#define N_GEN 8
#define N (3 * B + 5)

static kvt_engine *gpu_engine(const kvt_model *m, int32_t n_pages) {
    kvt_engine_params ep = kvt_engine_default_params();
    ep.block_size = B;
    ep.n_pages = n_pages;
    ep.n_ctx = 256;
    ep.n_threads = 2;
    ep.max_seqs = 2;
    ep.kv_dtype = KVT_KV_F16;
    ep.device = 1;
    kvt_engine *e = NULL;
    int rc = kvt_engine_new(m, ep, &e);
    CHECKF(rc == 0, "engine on vulkan:0: %s", kvt_errmsg());
    return e;
}

/* Lines of the file at path that contain what. */
static int lines_with(const char *path, const char *what) {
    FILE *f = fopen(path, "r");
    char line[4096];
    int n = 0;
    while (f && fgets(line, sizeof line, f)) n += strstr(line, what) != NULL;
    if (f) fclose(f);
    return n;
}

/* What moved between a and b (GPU stats) and between ra and rb (T1's), for the checks. */
typedef struct {
    uint64_t runs, pages, submits, direct, bounced, filled, lent;
} moved;

static moved diff(const kvt_eng_gpu_stats *a, const kvt_eng_gpu_stats *b, const kvt_ram_stats *ra,
                  const kvt_ram_stats *rb, int out) {
    return (moved){.runs = out ? b->runs_out - a->runs_out : b->runs_in - a->runs_in,
                   .pages = out ? b->pages_out - a->pages_out : b->pages_in - a->pages_in,
                   .submits = b->io_submits - a->io_submits,
                   .direct = b->pages_direct - a->pages_direct,
                   .bounced = b->pages_bounced - a->pages_bounced,
                   .filled = rb->filled - ra->filled,
                   .lent = rb->lent - ra->lent};
}

/* A run whose host buffers lie in two pinned buffers and in ordinary memory,
 * in and back out: one submission each way, the pinned pages straight and
 * the other through staging, the bytes as they were. */
static void check_mixed_run(kvt_engine *e, const char *mode) {
    const size_t pb = kvt_page_bytes(e);
    uint8_t *a = kvt_engine_host_alloc(e, 2 * pb), *b = kvt_engine_host_alloc(e, pb);
    uint8_t *o = malloc(pb), *want = malloc(3 * pb);
    int32_t pg[3];
    CHECKF(a && b, "%s: engine host memory: %s", mode, kvt_errmsg());
    for (int i = 0; i < 3; i++) CHECK(kvt_page_alloc(e, &pg[i]) == 0);
    if (!a || !b) goto out;
    unsigned seed = 77;
    for (size_t i = 0; i < 3 * pb; i++) want[i] = (uint8_t)((seed = seed * 1103515245u + 12345u) >> 16);
    memcpy(a + pb, want, pb), memcpy(o, want + pb, pb), memcpy(b, want + 2 * pb, pb);
    kvt_eng_gpu_stats s0 = kvt_engine_gpu_stats(e), s1, s2;
    kvt_page_in in[3] = {{pg[0], a + pb}, {pg[1], o}, {pg[2], b}};
    CHECKF(kvt_pages_copy_in(e, in, 3) == 0, "%s: copy in: %s", mode, kvt_errmsg());
    s1 = kvt_engine_gpu_stats(e);
    memset(a, 0, 2 * pb), memset(o, 0, pb);
    kvt_page_out out[3] = {{pg[0], o}, {pg[1], a}, {pg[2], a + pb}};
    CHECKF(kvt_pages_copy_out(e, out, 3) == 0, "%s: copy out: %s", mode, kvt_errmsg());
    s2 = kvt_engine_gpu_stats(e);
    CHECKF(!memcmp(o, want, pb) && !memcmp(a, want + pb, pb) && !memcmp(a + pb, want + 2 * pb, pb),
           "%s: a mixed run's bytes changed on the way", mode);
    CHECKF(s1.io_submits - s0.io_submits == 1 && s2.io_submits - s1.io_submits == 1 &&
               s2.pages_direct - s0.pages_direct == 4 && s2.pages_bounced - s0.pages_bounced == 2,
           "%s: mixed runs took %llu + %llu submissions, %llu pages direct, %llu bounced", mode,
           (unsigned long long)(s1.io_submits - s0.io_submits), (unsigned long long)(s2.io_submits - s1.io_submits),
           (unsigned long long)(s2.pages_direct - s0.pages_direct),
           (unsigned long long)(s2.pages_bounced - s0.pages_bounced));
out:
    for (int i = 0; i < 3; i++) kvt_page_unref(e, pg[i]);
    kvt_engine_host_free(e, a), kvt_engine_host_free(e, b);
    free(o), free(want);
}

/* Long: cold, cached, every page demoted to T1 (checked), warm from T1 (checked), in one mode. */
static void check_mode(const kvt_model *m, const int32_t *p, kvt_test_gen *cold, int staged, int refused) {
    const char *mode = refused ? (staged ? "staged, pinned refused" : "pinned refused") : staged ? "staged" : "mapped";
    if (staged) setenv("KVT_VK_FORCE_STAGING", "1", 1);
    if (refused) setenv("KVT_VK_HOST_LIMIT", "4096", 1);
    char log[600];
    snprintf(log, sizeof log, "%s/gpu_t1_%d%d.log", kvt_test_tmpdir(), staged, refused);
    remove(log);
    CHECKF(kvt_log_open_file(log) == 0, "log file: %s", kvt_errmsg());
    kvt_engine *e = gpu_engine(m, 12);
    if (e && !cold->n) *cold = kvt_test_generate(e, NULL, p, N, N_GEN, NULL); /* the first engine, uncached */
    if (e && !refused) check_mixed_run(e, mode);
    kvt_cache *c = e ? kvt_test_cache(e, NULL, 16u << 20) : NULL;
    if (!c) goto out;
    kvt_test_gen g1 = kvt_test_generate(e, c, p, N, N_GEN, NULL);
    kvt_eng_gpu_stats s0 = kvt_engine_gpu_stats(e), s1, s2;
    kvt_ram_stats r0, r1, r2;
    kvt_cache_get_tier_stats(c, &r0, NULL);
    CHECKF(kvt_cache_reserve(c, kvt_page_count(e)) == 0, "%s: demoting every page: %s", mode, kvt_errmsg());
    s1 = kvt_engine_gpu_stats(e);
    kvt_cache_get_tier_stats(c, &r1, NULL);
    moved d = diff(&s0, &s1, &r0, &r1, 1);
    printf("gpu t1 (%s): demoted %llu pages in %llu runs, %llu submissions; %llu direct, %llu bounced; T1 arena "
           "%llu bytes, %llu mapped for the device\n",
           mode, (unsigned long long)d.pages, (unsigned long long)d.runs, (unsigned long long)d.submits,
           (unsigned long long)d.direct, (unsigned long long)d.bounced, (unsigned long long)r1.arena_bytes,
           (unsigned long long)r1.arena_mapped);
    CHECKF(d.pages >= 3 && d.runs == 1 && d.submits == 1, "%s: demotion took %llu runs, %llu submissions", mode,
           (unsigned long long)d.runs, (unsigned long long)d.submits);
    CHECKF(d.filled == d.pages, "%s: %llu of %llu demoted pages were written in place in T1", mode,
           (unsigned long long)d.filled, (unsigned long long)d.pages);
    CHECKF(refused ? r1.arena_mapped == 0 && d.bounced == d.pages : r1.arena_mapped > 0 && d.bounced == 0,
           "%s: %llu pages bounced through staging, T1 has %llu bytes mapped", mode, (unsigned long long)d.bounced,
           (unsigned long long)r1.arena_mapped);
    kvt_test_gen t1 = kvt_test_generate(e, c, p, N, N_GEN, NULL);
    s2 = kvt_engine_gpu_stats(e);
    kvt_cache_get_tier_stats(c, &r2, NULL);
    d = diff(&s1, &s2, &r1, &r2, 0);
    CHECKF(t1.res.tier_tokens[KVT_TIER_T1] == 3 * B, "%s: T1 restored %d tokens, not %d", mode,
           t1.res.tier_tokens[KVT_TIER_T1], 3 * B);
    CHECKF(kvt_test_same(cold, &g1) && kvt_test_same(cold, &t1), "%s: a run differs from the cold run", mode);
    CHECKF(d.runs == 1 && d.pages == 3 && d.submits == 1 && d.lent == 3,
           "%s: the restore took %llu runs of %llu pages, %llu submissions, %llu pages lent by T1", mode,
           (unsigned long long)d.runs, (unsigned long long)d.pages, (unsigned long long)d.submits,
           (unsigned long long)d.lent);
    CHECKF(refused ? d.bounced == 3 : d.bounced == 0 && d.direct == 3, "%s: restore: %llu direct, %llu bounced", mode,
           (unsigned long long)d.direct, (unsigned long long)d.bounced);
    kvt_test_gen_free(&g1), kvt_test_gen_free(&t1);
out:
    kvt_cache_free(c);
    kvt_engine_free(e);
    kvt_log_close_file();
    int warned = lines_with(log, "T1 takes ordinary memory");
    CHECKF(warned == (refused ? 1 : 0), "%s: %d warnings about T1's memory", mode, warned);
    unsetenv("KVT_VK_FORCE_STAGING");
    unsetenv("KVT_VK_HOST_LIMIT");
}

int main(void) {
    gpu_test_start();
    kvt_model *m = kvt_test_tiny_model_typed("gpu_t1.gguf", 512, KVT_TYPE_F16);
    CHECK(m != NULL);
    if (!m) return kvt_test_done("test_gpu_t1");
    int32_t p[N];
    unsigned seed = 41;
    kvt_test_random_tokens(p, N, m->hp.n_vocab, &seed);
    kvt_test_gen cold = {0};
    check_mode(m, p, &cold, 0, 0);
    check_mode(m, p, &cold, 1, 0);
    check_mode(m, p, &cold, 0, 1);
    kvt_test_gen_free(&cold);
    kvt_model_free(m);
    gpu_test_no_validation_messages(0);
    return kvt_test_done("test_gpu_t1");
}
