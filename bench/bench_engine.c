// SPDX-License-Identifier: MIT
/* Engine and prefix-reuse benchmark on the ~250M-parameter llama of the
 * issues (dim 1024, 16 layers, 16/4 heads, ff 2816, vocab 32000, F16):
 *   prefill tok/s at 512 and 2048 tokens, decode tok/s (threads as given),
 *   time to first token for a 2048-token prompt cold, warm from T0 (pages
 *   still resident), warm from T1 (pages demoted to host RAM) and warm from T2
 *   (the disk tier after a restart, page cache dropped), and ratios.
 * Prints numbers; never fails on time.
 * usage: bench_engine [-m MODEL.gguf] [-t THREADS] [--decode N] [--no-disk] [--decode-only] [--restore-only]
 *                     [--t2-only] [--t2-reps N]
 * (--decode-only: just the decode figure, for quick before/after comparisons;
 * --restore-only: no prefill or decode figures, just the cold prompt and the
 * T0/T1/T2 restores after it; --t2-only: just the T2 restores, from the cache
 * directory an earlier run of the same model left in bench/out/kvdisk;
 * --t2-reps: restarts and restores from T2, 1-15, default 5) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache.h"
#include "common.h"
#include "engine.h"
#include "generate.h"
#include "mkmodel.h"
#include "model.h"
#include "ops.h"
#include "sampler.h"
#include "tier_disk.h"
#include <unistd.h>
#include <dirent.h>
#include <fcntl.h>

/* Bytes of weight matrices one decode step reads: every layer matrix and the
 * output matrix (the embedding table gives one row per token). */
static double decode_weight_bytes(const kvt_model *m) {
    double b = (double)m->output.rows * (double)m->output.row_bytes;
    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        const kvt_layer *L = &m->layers[l];
        const kvt_wmat *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) b += (double)w[i]->rows * (double)w[i]->row_bytes;
    }
    return b;
}

#define DEFAULT_MODEL "bench/out/llama250m-f16.gguf"
#define CTX 4096
#define DECODE_TOKENS 64

static kvt_model *load_or_make(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        kvt_mkmodel_params p = kvt_mkmodel_default_params();
        p.dim = 1024;
        p.layers = 16;
        p.heads = 16;
        p.kv_heads = 4;
        p.ff = 2816;
        p.vocab = 32000;
        p.ctx = CTX;
        p.type = KVT_TYPE_F16;
        p.name = "bench-llama-250m";
        mkdir("bench/out", 0755);
        fprintf(stderr, "bench: generating %s (random weights)\n", path);
        if (kvt_mkmodel(&p, path)) {
            fprintf(stderr, "bench: %s\n", kvt_errmsg());
            return NULL;
        }
    }
    kvt_model *m;
    if (kvt_model_load(path, kvt_model_default_params(), &m)) {
        fprintf(stderr, "bench: %s\n", kvt_errmsg());
        return NULL;
    }
    return m;
}

#define SEQ_READ_CHUNK (4u << 20)
#define T2_REPS 5
#define T2_REPS_MAX 15

static double median(double *v, int n) {
    double t[T2_REPS_MAX];
    for (int i = 0; i < n; i++) t[i] = v[i];
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    return t[n / 2];
}

/* Sequential read bandwidth (MB/s) of the segment files in dir with O_DIRECT
 * (plain reads if the filesystem refuses it): the ceiling for T2 restores. */
static double seq_read_mb_s(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    void *buf = aligned_alloc(4096, SEQ_READ_CHUNK);
    uint64_t bytes = 0;
    double t0 = kvt_now();
    struct dirent *en;
    while ((en = readdir(d))) {
        if (strncmp(en->d_name, "seg-", 4)) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, en->d_name);
        int fd = open(path, O_RDONLY | O_DIRECT);
        if (fd < 0) fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        ssize_t k;
        while ((k = read(fd, buf, SEQ_READ_CHUNK)) > 0) bytes += (uint64_t)k;
        close(fd);
    }
    double dt = kvt_now() - t0;
    closedir(d);
    free(buf);
    return dt > 0 ? (double)bytes / 1e6 / dt : 0;
}

static void drop_page_cache(int *dropped) {
    sync();
    FILE *dc = fopen("/proc/sys/vm/drop_caches", "w");
    *dropped = dc && fputs("1", dc) >= 0;
    if (dc) fclose(dc);
}

static kvt_engine *engine(const kvt_model *m, int threads) {
    kvt_engine_params ep = kvt_engine_default_params();
    ep.n_threads = threads;
    ep.n_ctx = CTX;
    ep.n_pages = 2 * CTX / ep.block_size + 2;
    ep.max_seqs = 2;
    kvt_engine *e;
    if (kvt_engine_new(m, ep, &e)) {
        fprintf(stderr, "bench: %s\n", kvt_errmsg());
        exit(1);
    }
    return e;
}

static double prefill(kvt_engine *e, const int32_t *toks, int32_t n, float *logits) {
    int32_t seq;
    kvt_seq_new(e, NULL, 0, 0, &seq);
    double t0 = kvt_now();
    if (kvt_engine_feed(e, seq, toks, n, 0, logits)) fprintf(stderr, "bench: %s\n", kvt_errmsg());
    double t = kvt_now() - t0;
    kvt_seq_free(e, seq);
    return t;
}

/* Prefill tok/s at 512 and 2048 tokens (unless decode_only) and decode tok/s. */
static void speed_figures(kvt_engine *e, const kvt_model *m, const int32_t *toks, float *logits, int n_decode,
                          int decode_only) {
    int32_t nv = m->hp.n_vocab;
    double t512 = decode_only ? 0 : prefill(e, toks, 512, logits);
    double t2048 = decode_only ? 0 : prefill(e, toks, 2048, logits);
    int32_t seq;
    kvt_seq_new(e, NULL, 0, 0, &seq);
    kvt_engine_feed(e, seq, toks, 16, 0, logits);
    double t0 = kvt_now();
    for (int i = 0; i < n_decode; i++) {
        int32_t tok = kvt_argmax(logits, nv);
        kvt_engine_feed(e, seq, &tok, 1, 0, logits);
    }
    double tdec = kvt_now() - t0;
    kvt_seq_free(e, seq);
    if (!decode_only) {
        printf("prefill  512 tokens: %8.1f tok/s (%.2f s)\n", 512 / t512, t512);
        printf("prefill 2048 tokens: %8.1f tok/s (%.2f s)\n", 2048 / t2048, t2048);
    }
    printf("decode %4d tokens:   %8.1f tok/s\n", n_decode, n_decode / tdec);
    /* compare with bench_membw's read bandwidth: decode streams every weight once per token */
    const double wbytes = decode_weight_bytes(m);
    printf("decode weight streaming:     %8.1f GB/s (%.0f MB per token)\n", wbytes * n_decode / tdec / 1e9,
           wbytes / 1e6);
}

int main(int argc, char **argv) {
    const char *path = DEFAULT_MODEL;
    int threads = 2, n_decode = DECODE_TOKENS, no_disk = 0, decode_only = 0, restore_only = 0, t2_only = 0,
        t2_reps = T2_REPS;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) path = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--decode") && i + 1 < argc) n_decode = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-disk")) no_disk = 1;
        else if (!strcmp(argv[i], "--decode-only")) decode_only = 1;
        else if (!strcmp(argv[i], "--restore-only")) restore_only = 1;
        else if (!strcmp(argv[i], "--t2-only")) restore_only = t2_only = 1;
        else if (!strcmp(argv[i], "--t2-reps") && i + 1 < argc) t2_reps = atoi(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: bench_engine [-m MODEL.gguf] [-t THREADS] [--decode N] [--no-disk] [--decode-only] "
                    "[--restore-only] [--t2-only] [--t2-reps N]\n");
            return 2;
        }
    }
    if (t2_reps < 1 || t2_reps > T2_REPS_MAX) {
        fprintf(stderr, "bench_engine: --t2-reps must be 1-%d\n", T2_REPS_MAX);
        return 2;
    }
    kvt_model *m = load_or_make(path);
    if (!m) return 1;
    int32_t nv = m->hp.n_vocab;
    int32_t *toks = kvt_xmalloc(CTX * sizeof *toks);
    unsigned seed = 1;
    for (int i = 0; i < CTX; i++) toks[i] = 300 + (int32_t)(rand_r(&seed) % (unsigned)(nv - 300));
    float *logits = kvt_xmalloc((size_t)nv * sizeof(float));
    kvt_engine *e = engine(m, threads);
    printf("model %s: %.1fM params, kernels %s, %d threads\n", path, (double)m->n_params / 1e6, kvt_ops_numerics_id(),
           threads);

    prefill(e, toks, 64, logits); /* warm up: page in the weights */
    if (!restore_only) speed_figures(e, m, toks, logits, n_decode, decode_only);
    if (decode_only) return 0;

    /* time to first token for a 2048-token prompt: cold, warm T0, warm T1 */
    const char *dir = "bench/out/kvdisk";
    kvt_cache_params cp = kvt_cache_default_params();
    cp.ram_bytes = 4ull << 30;
    if (!no_disk) {
        mkdir(dir, 0755);
        if (!t2_only) kvt_disk_clear(dir, NULL);
        cp.disk_dir = dir;
        cp.disk_bytes = 2ull << 30;
        cp.disk_admit = KVT_ADMIT_ALL;
        cp.restore = KVT_RESTORE_ALWAYS;
    }
    kvt_sampler_params sp = kvt_sampler_default_params();
    sp.temp = 0;
    kvt_sampler *s = kvt_sampler_new(sp, nv);
    kvt_gen_params gp = {.max_tokens = 1, .sampler = s};
    kvt_gen_result cold = {0}, w0, w1, w2 = {0};
    kvt_cache *c;
    if (t2_only) goto t2;
    if (kvt_cache_new(e, cp, &c)) {
        fprintf(stderr, "bench: %s\n", kvt_errmsg());
        return 1;
    }
    kvt_generate(e, c, toks, 2048, &gp, NULL, &cold);
    kvt_generate(e, c, toks, 2048, &gp, NULL, &w0);
    kvt_cache_reserve(c, kvt_page_count(e)); /* demote every idle page to T1 */
    kvt_generate(e, c, toks, 2048, &gp, NULL, &w1);
    printf("TTFT 2048-token prompt, cold:    %8.1f ms (computed %d tokens)\n", cold.ttft_ms, cold.n_computed);
    printf("TTFT warm from T0:               %8.2f ms (reused %d, computed %d) = %.2f%% of cold\n", w0.ttft_ms,
           w0.tier_tokens[KVT_TIER_T0], w0.n_computed, 100 * w0.ttft_ms / cold.ttft_ms);
    printf("TTFT warm from T1:               %8.2f ms (reused %d, restore %.2f ms, computed %d) = %.2f%% of cold\n",
           w1.ttft_ms, w1.tier_tokens[KVT_TIER_T1], w1.restore_ms, w1.n_computed, 100 * w1.ttft_ms / cold.ttft_ms);
    double mb = (double)w1.tier_tokens[KVT_TIER_T1] / kvt_engine_params_of(e).block_size * (double)kvt_page_bytes(e) /
        1e6;
    if (w1.restore_ms > 0) printf("T1 restore bandwidth:            %8.1f GB/s (%.1f MB)\n", mb / w1.restore_ms, mb);
    /* T2: persist the prefix, restart the cache (as a new process would), drop
     * the page cache, restore from disk */
    if (no_disk) {
        kvt_cache_free(c);
        goto done;
    }
    kvt_cache_flush(c);
    kvt_cache_free(c);
t2:;
    int dropped = 0;
    /* the disk's speed varies run to run: alternate sequential reads and
     * restarts+restores, and report medians */
    double seqbw[T2_REPS_MAX], rbw[T2_REPS_MAX], ttft2[T2_REPS_MAX], t_open = 0;
    int reused2 = 0;
    for (int rep = 0; rep < t2_reps; rep++) {
        drop_page_cache(&dropped);
        seqbw[rep] = seq_read_mb_s(dir);
        drop_page_cache(&dropped);
        double t_o = kvt_now();
        if (kvt_cache_new(e, cp, &c)) {
            fprintf(stderr, "bench: %s\n", kvt_errmsg());
            goto done;
        }
        t_open = kvt_now() - t_o;
        kvt_generate(e, c, toks, 2048, &gp, NULL, &w2);
        kvt_cache_free(c);
        double mb2 = (double)w2.tier_tokens[KVT_TIER_T2] / kvt_engine_params_of(e).block_size *
            (double)kvt_page_bytes(e) / 1e6;
        rbw[rep] = w2.restore_ms > 0 ? mb2 / (w2.restore_ms / 1e3) : 0;
        ttft2[rep] = w2.ttft_ms;
        printf("  T2 run %d: sequential read %.1f MB/s, restore %.1f MB/s (%.2f ms, %.1f MB), TTFT %.1f ms\n", rep + 1,
               seqbw[rep], rbw[rep], w2.restore_ms, mb2, w2.ttft_ms);
        reused2 = w2.tier_tokens[KVT_TIER_T2];
    }
    double ttft2_med = median(ttft2, t2_reps), rbw_med = median(rbw, t2_reps), seq_med = median(seqbw, t2_reps);
    printf("TTFT warm from T2 (after restart%s): %8.1f ms median of %d (reused %d) = %.2f%% of cold\n",
           dropped ? ", page cache dropped" : "", ttft2_med, t2_reps, reused2,
           cold.ttft_ms > 0 ? 100 * ttft2_med / cold.ttft_ms : 0);
    printf("T2 restore bandwidth:            %8.1f MB/s median; cache open %.3f s\n", rbw_med, t_open);
    printf("sequential O_DIRECT read of the cache files: %.1f MB/s median; restore / sequential = %.2f\n", seq_med,
           seq_med > 0 ? rbw_med / seq_med : 0);
done:
    kvt_sampler_free(s);
    kvt_engine_free(e);
    free(logits);
    free(toks);
    kvt_model_free(m);
    return 0;
}
