// SPDX-License-Identifier: MIT
/* The mission's numbers on one device (the CPU or a Vulkan GPU), in one run:
 *
 * Phase 2, one N-token prefix: the cold prefill, then the same prompt warm
 * from T0 (pages still in device memory), from T1 (every page demoted to host
 * RAM), from T2 (the cache flushed and opened again on the same directory, as
 * after a restart) and, with --redis, from T3 (a fresh cache whose only tier
 * is the Redis store) — each a time to first token, the restore time, the
 * tokens each tier gave, and the GPU engine's page-I/O counters around the run
 * (one restored run should be one batched copy; from T1, straight from its
 * pinned arena, counted as pages_direct). T1's restore bandwidth is set
 * against one big copy from pinned host memory to the device, measured here.
 *
 * Phase 3, expansion: S sessions, each with its own prefix, over a T0 that
 * holds K of them and a T1 that holds them all, round-robin for several
 * rounds (each later round appends new tokens and generates a few), against
 * the same workload with a T0 that holds every session: prompt tokens
 * computed and the resumed requests' TTFT p50, and their ratios.
 *
 * Every figure is a line for people and a `key=value` line for scripts
 * (bench/gpu.sh collects them). Numbers only; never passes or fails on time.
 * usage: bench_gpu --help */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "common.h"
#include "engine.h"
#include "generate.h"
#include "gpu.h"
#include "mkmodel.h"
#include "model.h"
#include "sampler.h"
#include "tier_disk.h"

#define OUT_DIR "bench/out"
#define KEY_BYTES 32

typedef struct {
    int32_t device; /* 0: cpu, N + 1: vulkan:N */
    const char *device_arg, *model, *shape, *wtype, *redis, *redis_key, *disk_dir;
    int32_t prefix, sessions, t0_sessions, session_tokens, rounds, append, gen, threads, block, reps;
    int phase2, phase3, make_model;
    float mem_fraction; /* --gpu-memory-fraction */
} opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: bench_gpu [options]\n"
            "  --device DEV          where the engine runs: cpu (default) or vulkan[:N], Vulkan device N of\n"
            "                        `kvtier info --devices` (vulkan = vulkan:0)\n"
            "  --gpu-memory-fraction F  on a GPU, the share of its memory the engine may take, 0 < F <= 1\n"
            "                        (default 0.9): each phase's pool must fit next to the weights in it\n"
            "  --model PATH          a GGUF model to run; without it a random-weight llama of --shape is\n"
            "                        generated into " OUT_DIR "/bench-gpu-SHAPE.gguf (kept for later runs)\n"
            "  --shape S             tiny (dim 256, 4 layers: for lavapipe), 1b (dim 2048, 16 layers, 32/8\n"
            "                        heads, ff 8192) or 8b (llama-3-8B: dim 4096, 32 layers, 32/8 heads, ff\n"
            "                        14336); vocab 32000 (tiny: 4096) (default tiny)\n"
            "  --wtype T             the generated model's weights: f16, q8_0, q4_0, q4_k_m or q5_k_m (the\n"
            "                        llama.cpp mixes: Q4_K/Q5_K with Q6_K for attn_v, some ffn_down and the\n"
            "                        output); a type other than f16 goes into bench-gpu-SHAPE-T.gguf (default f16)\n"
            "  --prefix N            phase 2: tokens of the prefix timed cold and warm; each request is the\n"
            "                        prefix and one more token (default 2048)\n"
            "  --reps N              phase 2: warm runs per tier, the median reported (default 3, at most 16)\n"
            "  --redis URL           phase 2 also restores from T3, a Redis store at URL (redis://host:port)\n"
            "  --redis-key FILE      T3's MAC key (32 bytes, mode 0600); default: a fresh one made in\n"
            "                        " OUT_DIR "/bench_gpu.key\n"
            "  --disk DIR            T2's directory for phase 2, emptied first (default " OUT_DIR "/gpu-kvdisk)\n"
            "  --sessions S          phase 3: sessions, each with its own prefix (default 48)\n"
            "  --t0-sessions K       phase 3: sessions the small T0 holds (default 8); T1 holds them all\n"
            "  --session-tokens N    phase 3: each session's own prefix (default: a quarter of --prefix, at\n"
            "                        most 512, at least one block)\n"
            "  --rounds R            phase 3: rounds over every session, the first prefills (default 3)\n"
            "  --append N            phase 3: new tokens each later round appends (default 32)\n"
            "  --gen N               phase 3: tokens generated per request (default 4)\n"
            "  --phase P             2, 3 or all (default all)\n"
            "  --make-model          only generate the model of --shape (when it is not there yet) and exit:\n"
            "                        a script can make it while other work runs\n"
            "  --threads N           CPU worker threads (default: the online CPUs)\n"
            "  --block N             tokens per KV page and cache block (default %d)\n"
            "  --help                this text\n"
            "Every figure prints as a sentence and as a key=value line.\n",
            KVT_DEFAULT_BLOCK_SIZE);
}

static int bad(const char *flag, const char *v, const char *want) {
    fprintf(stderr, "bench_gpu: %s %s: %s\n", flag, v ? v : "(missing)", want);
    return 2;
}

static int parse_device(const char *v, int32_t *out) {
    if (!strcmp(v, "cpu")) return *out = 0, 0;
    if (!strcmp(v, "vulkan")) return *out = 1, 0;
    if (strncmp(v, "vulkan:", 7) || !v[7]) return -1;
    char *end;
    long n = strtol(v + 7, &end, 10);
    if (*end || n < 0 || n > 1000) return -1;
    *out = (int32_t)n + 1;
    return 0;
}

static int parse_int(const char *v, int32_t lo, int32_t *out) {
    if (!v) return -1;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || end == v || *end || n < lo || n > 1 << 24) return -1;
    *out = (int32_t)n;
    return 0;
}

/* Long: one branch per flag, each naming the flag when its value is bad. */
static int parse(int argc, char **argv, opts *o) {
    *o = (opts){.device_arg = "cpu",
                .shape = "tiny",
                .wtype = "f16",
                .disk_dir = OUT_DIR "/gpu-kvdisk",
                .prefix = 2048,
                .sessions = 48,
                .t0_sessions = 8,
                .session_tokens = 0,
                .rounds = 3,
                .append = 32,
                .gen = 4,
                .threads = (int32_t)sysconf(_SC_NPROCESSORS_ONLN),
                .block = KVT_DEFAULT_BLOCK_SIZE,
                .reps = 3,
                .phase2 = 1,
                .phase3 = 1,
                .mem_fraction = KVT_DEFAULT_GPU_MEMORY_FRACTION};
    struct {
        const char *flag;
        int32_t *v, lo;
    } ints[] = {{"--prefix", &o->prefix, 1},
                {"--sessions", &o->sessions, 1},
                {"--t0-sessions", &o->t0_sessions, 1},
                {"--session-tokens", &o->session_tokens, 1},
                {"--rounds", &o->rounds, 2},
                {"--append", &o->append, 1},
                {"--gen", &o->gen, 1},
                {"--threads", &o->threads, 1},
                {"--block", &o->block, 1},
                {"--reps", &o->reps, 1}};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(f, "--make-model")) {
            o->make_model = 1;
            continue;
        }
        int done = 0;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
            if (!strcmp(f, ints[k].flag)) {
                if (parse_int(v, ints[k].lo, ints[k].v)) return bad(f, v, "must be a whole number in range");
                done = 1;
            }
        if (done) {
            i++;
            continue;
        }
        if (!v) return bad(f, NULL, "unknown flag or missing value (see --help)");
        i++;
        if (!strcmp(f, "--device")) {
            if (parse_device(v, &o->device)) return bad(f, v, "must be cpu, vulkan or vulkan:N");
            o->device_arg = v;
        } else if (!strcmp(f, "--gpu-memory-fraction")) {
            char *end;
            double x = strtod(v, &end);
            if (*end || !(x > 0 && x <= 1)) return bad(f, v, "must be a number in (0, 1]");
            o->mem_fraction = (float)x;
        } else if (!strcmp(f, "--model")) o->model = v;
        else if (!strcmp(f, "--shape")) {
            if (strcmp(v, "tiny") && strcmp(v, "1b") && strcmp(v, "8b")) return bad(f, v, "must be tiny, 1b or 8b");
            o->shape = v;
        } else if (!strcmp(f, "--wtype")) {
            if (strcmp(v, "f16") && strcmp(v, "q8_0") && strcmp(v, "q4_0") && strcmp(v, "q4_k_m") && strcmp(v, "q5_k_m"))
                return bad(f, v, "must be f16, q8_0, q4_0, q4_k_m or q5_k_m");
            o->wtype = v;
        } else if (!strcmp(f, "--redis")) o->redis = v;
        else if (!strcmp(f, "--redis-key")) o->redis_key = v;
        else if (!strcmp(f, "--disk")) o->disk_dir = v;
        else if (!strcmp(f, "--phase")) {
            if (strcmp(v, "2") && strcmp(v, "3") && strcmp(v, "all")) return bad(f, v, "must be 2, 3 or all");
            o->phase2 = strcmp(v, "3") != 0;
            o->phase3 = strcmp(v, "2") != 0;
        } else return bad(f, v, "unknown flag (see --help)");
    }
    if (!o->session_tokens) o->session_tokens = o->prefix / 4 < 512 ? o->prefix / 4 : 512;
    if (o->session_tokens < o->block) o->session_tokens = o->block;
    if (o->t0_sessions > o->sessions) return bad("--t0-sessions", "", "must not exceed --sessions");
    return 0;
}

/* ---- output --------------------------------------------------------------------- */

/* One figure: a sentence for people, then key=value for scripts. */
static void figure(const char *key, double v, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n%s=%.6g\n", key, v);
    fflush(stdout);
}

static void info(const char *key, const char *v) {
    printf("%s=%s\n", key, v);
    fflush(stdout);
}

/* ---- the model ----------------------------------------------------------------- */

/* OUT_DIR under the working directory, for the default paths (both levels). */
static void make_out_dir(void) {
    mkdir("bench", 0755);
    mkdir(OUT_DIR, 0755);
}

/* The model of --shape at path, generated unless it is there already. */
static int ensure_shape_model(const opts *o, const char *path) {
    struct stat st;
    if (stat(path, &st) == 0) return 0;
    kvt_mkmodel_params mp = kvt_mkmodel_default_params();
    int big = !strcmp(o->shape, "8b"), mid = !strcmp(o->shape, "1b");
    mp.dim = big ? 4096 : mid ? 2048 : 256;
    mp.layers = big ? 32 : mid ? 16 : 4;
    mp.heads = big || mid ? 32 : 8;
    mp.kv_heads = big || mid ? 8 : 4;
    mp.ff = big ? 14336 : mid ? 8192 : 768;
    mp.vocab = big || mid ? 32000 : 4096; /* tiny: a small output matrix, for lavapipe */
    mp.ctx = 16384;
    mp.type = !strcmp(o->wtype, "q8_0") ? KVT_TYPE_Q8_0 : !strcmp(o->wtype, "q4_0") ? KVT_TYPE_Q4_0 : KVT_TYPE_F16;
    if (!strcmp(o->wtype, "q4_k_m") || !strcmp(o->wtype, "q5_k_m")) {
        mp.mix = kvt_quant_mix_by_name(o->wtype);
        mp.type = kvt_quant_mix_base(mp.mix);
    }
    mp.name = "bench-gpu";
    make_out_dir();
    fprintf(stderr, "bench_gpu: generating %s (shape %s, %s random weights)\n", path, o->shape, o->wtype);
    double t0 = kvt_now();
    if (kvt_mkmodel(&mp, path)) {
        fprintf(stderr, "bench_gpu: mkmodel: %s\n", kvt_errmsg());
        return -1;
    }
    fprintf(stderr, "bench_gpu: generated in %.1f s\n", kvt_now() - t0);
    return 0;
}

static void shape_path(const opts *o, char *path, size_t cap) {
    if (!strcmp(o->wtype, "f16")) snprintf(path, cap, OUT_DIR "/bench-gpu-%s.gguf", o->shape);
    else snprintf(path, cap, OUT_DIR "/bench-gpu-%s-%s.gguf", o->shape, o->wtype);
}

static kvt_model *load_model(const opts *o) {
    char path[512];
    const char *p = o->model;
    if (!p) {
        shape_path(o, path, sizeof path);
        p = path;
        if (ensure_shape_model(o, p)) return NULL;
    }
    kvt_model *m;
    double t0 = kvt_now();
    if (kvt_model_load(p, kvt_model_default_params(), &m)) {
        fprintf(stderr, "bench_gpu: %s: %s\n", p, kvt_errmsg());
        return NULL;
    }
    info("model", p);
    if (!o->model) info("wtype", o->wtype);
    figure("model_params_m", (double)m->n_params / 1e6, "model %s: %.1fM parameters, %d layers, dim %d (load %.1f s)",
           p, (double)m->n_params / 1e6, m->hp.n_layer, m->hp.n_embd, kvt_now() - t0);
    return m;
}

static kvt_engine *new_engine(const kvt_model *m, const opts *o, int32_t n_pages, int32_t n_ctx) {
    kvt_engine_params ep = kvt_engine_default_params();
    ep.block_size = o->block;
    ep.n_pages = n_pages;
    ep.n_ctx = n_ctx;
    ep.n_threads = o->threads;
    ep.max_seqs = 2;
    ep.device = o->device;
    ep.gpu_memory_fraction = o->mem_fraction;
    kvt_engine *e;
    double t0 = kvt_now();
    if (kvt_engine_new(m, ep, &e)) {
        fprintf(stderr, "bench_gpu: engine on %s (%d pages): %s\n", o->device_arg, n_pages, kvt_errmsg());
        return NULL;
    }
    fprintf(stderr, "bench_gpu: engine on %s, %d pages of %zu KiB, made in %.1f s (weights on the device: %.0f MiB)\n",
            kvt_engine_device_name(e), n_pages, kvt_page_bytes(e) >> 10, kvt_now() - t0,
            (double)kvt_engine_weight_device_bytes(e) / (1 << 20));
    char mem[512];
    kvt_engine_describe_memory(e, mem, sizeof mem);
    if (mem[0]) fprintf(stderr, "bench_gpu: %s\n", mem);
    return e;
}

/* n random token ids of the vocabulary: past the first 300 (a byte-level
 * vocabulary's bytes and specials) where it is large enough, else any id, so
 * a model with a small vocabulary (mkmodel's default has 259 rows) runs too. */
static void random_tokens(int32_t *t, int32_t n, int32_t n_vocab, unsigned seed) {
    const int32_t lo = n_vocab > 2 * 300 ? 300 : 0;
    for (int32_t i = 0; i < n; i++) t[i] = lo + (int32_t)(rand_r(&seed) % (unsigned)(n_vocab - lo));
}

/* One request through the cache: greedy, max_tokens tokens. */
static int request(kvt_engine *e, kvt_cache *c, const int32_t *p, int32_t n, int32_t max_tokens, int32_t **out,
                   kvt_gen_result *res) {
    kvt_sampler_params sp = kvt_sampler_default_params();
    sp.temp = 0;
    kvt_sampler *s = kvt_sampler_new(sp, kvt_engine_n_vocab(e));
    kvt_gen_params gp = {.max_tokens = max_tokens, .sampler = s};
    memset(res, 0, sizeof *res);
    int rc = kvt_generate(e, c, p, n, &gp, out, res);
    kvt_sampler_free(s);
    if (rc) fprintf(stderr, "bench_gpu: generate: %s\n", kvt_errmsg());
    return rc;
}

/* ---- phase 2: one prefix, cold and warm from each tier ------------------------------ */

/* Phase 2's state: the engine, the cache the next run goes through and how
 * to open it again, the prompt (the prefix and one more token, so a warm run
 * reuses exactly the prefix's full pages and computes one token). */
typedef struct {
    const opts *o;
    kvt_engine *e;
    kvt_cache *c;
    kvt_cache_params cp;
    const int32_t *prompt;
    int32_t n;
    double cold_ms;
    int dropped; /* the last reopen dropped the page cache */
} p2_state;

static kvt_cache *open_cache(kvt_engine *e, const kvt_cache_params *cp) {
    kvt_cache *c;
    if (kvt_cache_new(e, *cp, &c)) {
        fprintf(stderr, "bench_gpu: cache: %s\n", kvt_errmsg());
        return NULL;
    }
    return c;
}

static void drop_page_cache(int *dropped) {
    sync();
    int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
    *dropped = fd >= 0 && write(fd, "1", 1) == 1;
    if (fd >= 0) close(fd);
}

/* What each tier's run needs first. */
static int prep_t0(p2_state *s) { return s->c ? 0 : -1; }

static int prep_t1(p2_state *s) {
    if (kvt_cache_reserve(s->c, kvt_page_count(s->e))) /* demote every idle page to T1 */
        fprintf(stderr, "bench_gpu: reserve: %s\n", kvt_errmsg());
    return 0;
}

/* Persist, close, and open a new cache with the same tiers: a restart. */
static int prep_reopen(p2_state *s) {
    if (s->c) {
        if (kvt_cache_flush(s->c)) fprintf(stderr, "bench_gpu: flush: %s\n", kvt_errmsg());
        kvt_cache_free(s->c);
    }
    s->dropped = 0;
    if (s->cp.disk_dir) drop_page_cache(&s->dropped);
    s->c = open_cache(s->e, &s->cp);
    return s->c ? 0 : -1;
}

static int cmp_run(const void *a, const void *b) {
    double x = ((const kvt_gen_result *)a)->ttft_ms, y = ((const kvt_gen_result *)b)->ttft_ms;
    return (x > y) - (x < y);
}

/* Long: reps warm runs of the prompt, each after prep, with the engine's page-I/O counters around them;
 * prints the median run's figures and the counters per run under the tier's name. */
static int warm(p2_state *s, int (*prep)(p2_state *), const char *name, const char *what, kvt_gen_result *med) {
    enum { MAX_REPS = 16 };
    kvt_gen_result w[MAX_REPS];
    int reps = s->o->reps < MAX_REPS ? s->o->reps : MAX_REPS;
    kvt_eng_gpu_stats a = kvt_engine_gpu_stats(s->e), b = a;
    uint64_t io = 0, runs = 0, pages = 0, direct = 0, bounced = 0;
    for (int r = 0; r < reps; r++) {
        if (prep(s)) return -1;
        a = kvt_engine_gpu_stats(s->e);
        if (request(s->e, s->c, s->prompt, s->n, 1, NULL, &w[r])) return -1;
        b = kvt_engine_gpu_stats(s->e);
        io += b.io_submits - a.io_submits, runs += b.runs_in - a.runs_in, pages += b.pages_in - a.pages_in;
        direct += b.pages_direct - a.pages_direct, bounced += b.pages_bounced - a.pages_bounced;
    }
    qsort(w, (size_t)reps, sizeof w[0], cmp_run);
    *med = w[reps / 2];
    const int32_t *tt = med->tier_tokens;
    char key[64];
    snprintf(key, sizeof key, "%s_ttft_ms", name);
    figure(key, med->ttft_ms,
           "TTFT warm from %s (%s): %.2f ms = %.2f%% of cold (median of %d); restore %.2f ms; "
           "tokens T0/T1/T2/T3 %d/%d/%d/%d, computed %d",
           name, what, med->ttft_ms, 100 * med->ttft_ms / s->cold_ms, reps, med->restore_ms, tt[0], tt[1], tt[2], tt[3],
           med->n_computed);
    const struct {
        const char *k;
        double v;
    } kv[] = {{"restore_ms", med->restore_ms},         {"tokens", tt[0] + tt[1] + tt[2] + tt[3]},
              {"computed", med->n_computed},           {"runs_in", (double)runs / reps},
              {"pages_in", (double)pages / reps},      {"io_submits", (double)io / reps},
              {"pages_direct", (double)direct / reps}, {"pages_bounced", (double)bounced / reps}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) printf("%s_%s=%.6g\n", name, kv[i].k, kv[i].v);
    printf("  %s page I/O per run: %.1f runs in (%.1f pages), %.1f submissions, %.1f pages straight from host memory "
           "mapped for the device, %.1f through the staging copy (gpu stats before/after the last run: "
           "runs_in %llu -> %llu, io_submits %llu -> %llu)\n",
           name, (double)runs / reps, (double)pages / reps, (double)io / reps, (double)direct / reps,
           (double)bounced / reps, (unsigned long long)a.runs_in, (unsigned long long)b.runs_in,
           (unsigned long long)a.io_submits, (unsigned long long)b.io_submits);
    fflush(stdout);
    return 0;
}

/* Host-to-device bandwidth of one copy of bytes from a pinned host buffer
 * (the kind T1's arena is made of) into a device buffer, best of 3 (GB/s), on
 * its own handle of the device; 0 when it cannot be measured (said why). */
static double pinned_copy_gb_s(int32_t device, uint64_t bytes) {
    kvt_gpu_dev *d = NULL;
    kvt_gpu_buf *src = NULL, *dst = NULL;
    double best = 0;
    if (kvt_gpu_open(device - 1, &d)) goto fail;
    if (bytes > kvt_gpu_max_binding(d)) bytes = kvt_gpu_max_binding(d);
    if (kvt_gpu_buf_new(d, KVT_GPU_PINNED, bytes, &src) || kvt_gpu_buf_new(d, KVT_GPU_DEVICE, bytes, &dst)) goto fail;
    memset(kvt_gpu_buf_host(src), 0x5a, bytes);
    kvt_gpu_region r = {0, 0, bytes};
    for (int rep = 0; rep < 3; rep++) {
        double t0 = kvt_now();
        if (kvt_gpu_copy(d, src, dst, &r, 1)) goto fail;
        double gbs = (double)bytes / (kvt_now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    goto done;
fail:
    fprintf(stderr, "bench_gpu: pinned copy: %s\n", kvt_errmsg());
    best = 0;
done:
    if (dst) kvt_gpu_buf_free(dst);
    if (src) kvt_gpu_buf_free(src);
    if (d) kvt_gpu_close(d);
    return best;
}

static void t1_bandwidth(const opts *o, const kvt_engine *e, const kvt_gen_result *w1) {
    double bytes = (double)w1->tier_tokens[KVT_TIER_T1] / o->block * (double)kvt_page_bytes(e);
    double gbs = w1->restore_ms > 0 ? bytes / (w1->restore_ms / 1e3) / 1e9 : 0;
    figure("t1_restore_gb_s", gbs, "T1 restore bandwidth: %.2f GB/s (%.1f MB in %.2f ms)", gbs, bytes / 1e6,
           w1->restore_ms);
    if (!o->device) {
        printf("pinned host-to-device copy: not measured on the CPU\n");
        return;
    }
    double pin = pinned_copy_gb_s(o->device, (uint64_t)bytes);
    figure("pinned_copy_gb_s", pin, "one pinned host-to-device copy of the same bytes: %.2f GB/s (best of 3)", pin);
    if (pin > 0) figure("t1_vs_pinned", gbs / pin, "T1 restore / pinned copy: %.2f (target >= 0.8)", gbs / pin);
}

/* A 32-byte MAC key for T3 in path (made 0600 if it is not there). */
static int make_key(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return errno == EEXIST ? 0 : (fprintf(stderr, "bench_gpu: %s: %s\n", path, strerror(errno)), -1);
    uint8_t k[KEY_BYTES];
    int r = open("/dev/urandom", O_RDONLY | O_CLOEXEC), ok = r >= 0 && read(r, k, sizeof k) == (ssize_t)sizeof k;
    if (r >= 0) close(r);
    ok = ok && write(fd, k, sizeof k) == (ssize_t)sizeof k;
    close(fd);
    if (!ok) fprintf(stderr, "bench_gpu: could not write the key %s\n", path);
    return ok ? 0 : -1;
}

/* T3: a cache on the Redis store alone gets the prompt (computing it, or
 * restoring it if an earlier run left it there) and flushes it into the
 * store; each warm run is then a fresh cache on the store. */
static int phase2_t3(p2_state *s) {
    const char *key = s->o->redis_key ? s->o->redis_key : OUT_DIR "/bench_gpu.key";
    if (!s->o->redis_key && (make_out_dir(), make_key(key))) return -1;
    kvt_cache_params cp = kvt_cache_default_params();
    cp.ram_bytes = 0;
    cp.remote_url = s->o->redis;
    cp.remote_key_file = key;
    cp.remote_timeout_ms = 30000;
    cp.restore = KVT_RESTORE_ALWAYS;
    s->cp = cp;
    kvt_gen_result r;
    if (prep_reopen(s) || request(s->e, s->c, s->prompt, s->n, 1, NULL, &r)) return -1;
    return warm(s, prep_reopen, "t3", "a fresh cache on the Redis store", &r);
}

/* Long: the phase's steps in order, each printing its figures as it goes. */
static int phase2(const opts *o, const kvt_model *m) {
    int32_t B = o->block, per_seq = (o->prefix + 1 + B - 1) / B + 1;
    kvt_engine *e = new_engine(m, o, 2 * per_seq + 4, o->prefix + 64);
    if (!e) return -1;
    int32_t *toks = kvt_xmalloc((size_t)(o->prefix + 1) * sizeof *toks);
    random_tokens(toks, o->prefix + 1, kvt_engine_n_vocab(e), 1);
    p2_state s = {.o = o, .e = e, .prompt = toks, .n = o->prefix + 1};
    int rc = -1;
    kvt_gen_result cold, w0, w1, w2, warmup;
    /* warm up: the first dispatches build pipelines and touch the weights */
    if (request(e, NULL, toks, o->prefix < 64 ? o->prefix : 64, 1, NULL, &warmup)) goto out;
    if (!strncmp(o->disk_dir, OUT_DIR "/", strlen(OUT_DIR) + 1)) make_out_dir(); /* the default's parents */
    mkdir(o->disk_dir, 0755);
    kvt_disk_clear(o->disk_dir, NULL);
    uint64_t prefix_bytes = (uint64_t)per_seq * kvt_page_bytes(e);
    s.cp = kvt_cache_default_params();
    s.cp.ram_bytes = 2 * prefix_bytes + (64u << 20);
    s.cp.disk_dir = o->disk_dir;
    s.cp.disk_bytes = 2 * prefix_bytes + (256u << 20);
    s.cp.disk_admit = KVT_ADMIT_ALL;
    s.cp.restore = KVT_RESTORE_ALWAYS;
    if (!(s.c = open_cache(e, &s.cp))) goto out;
    if (request(e, s.c, toks, s.n, 1, NULL, &cold)) goto out;
    s.cold_ms = cold.ttft_ms;
    printf("phase 2: a %d-token prefix and one more token on %s\n", o->prefix, kvt_engine_device_name(e));
    info("device", kvt_engine_device_name(e));
    info("numerics", kvt_engine_numerics_id(e));
    figure("prefix_tokens", o->prefix, "prefix: %d tokens, %zu KiB of KV per %d-token page", o->prefix,
           kvt_page_bytes(e) >> 10, B);
    figure("cold_prefill_ms", cold.prefill_ms, "cold prefill: %.1f ms (%.0f tok/s; computed %d)", cold.prefill_ms,
           cold.n_computed / (cold.prefill_ms / 1e3), cold.n_computed);
    figure("cold_ttft_ms", cold.ttft_ms, "cold TTFT: %.1f ms", cold.ttft_ms);
    if (warm(&s, prep_t0, "t0", "pages still in T0", &w0)) goto out;
    if (warm(&s, prep_t1, "t1", "pages demoted to host RAM", &w1)) goto out;
    t1_bandwidth(o, e, &w1);
    /* T2: persist, then a new cache on the same directory, as after a restart */
    if (warm(&s, prep_reopen, "t2", "a new cache on the same directory", &w2)) goto out;
    printf("  (T2: the page cache was %s before each run)\n", s.dropped ? "dropped" : "not dropped (no permission)");
    kvt_cache_free(s.c);
    s.c = NULL;
    if (o->redis && phase2_t3(&s)) goto out;
    if (!o->redis) printf("T3: not measured (no --redis)\n");
    rc = 0;
out:
    if (s.c) kvt_cache_free(s.c);
    kvt_engine_free(e);
    free(toks);
    return rc;
}

/* ---- phase 3: more sessions than T0 holds ------------------------------------------ */

typedef struct {
    int64_t computed_resumed, computed_all, tier_tokens[KVT_TIER_COUNT];
    double ttft_p50, ttft_p99, wall_s;
} expansion;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Round-robin: round 0 prefills each session's own prefix; each later round
 * is the session's previous prompt and reply plus `append` new tokens. */
static int workload(const opts *o, kvt_engine *e, kvt_cache *c, expansion *x) {
    int32_t S = o->sessions, nv = kvt_engine_n_vocab(e);
    int32_t **hist = kvt_xcalloc((size_t)S, sizeof *hist), *n_hist = kvt_xcalloc((size_t)S, sizeof *n_hist);
    double *ttft = kvt_xmalloc((size_t)S * (size_t)o->rounds * sizeof *ttft);
    int n_ttft = 0, rc = 0;
    memset(x, 0, sizeof *x);
    double t0 = kvt_now();
    for (int32_t r = 0; !rc && r < o->rounds; r++)
        for (int32_t s = 0; !rc && s < S; s++) {
            int32_t n = r ? n_hist[s] + o->append : o->session_tokens;
            int32_t *p = kvt_xmalloc((size_t)n * sizeof *p);
            if (r) memcpy(p, hist[s], (size_t)n_hist[s] * sizeof *p);
            random_tokens(p + (r ? n_hist[s] : 0), r ? o->append : n, nv, 1000u * (unsigned)s + (unsigned)r + 7);
            kvt_gen_result res;
            free(hist[s]);
            hist[s] = NULL;
            rc = request(e, c, p, n, o->gen, &hist[s], &res);
            n_hist[s] = rc ? 0 : res.n_prompt + res.n_generated;
            free(p);
            x->computed_all += res.n_computed;
            if (!r || rc) continue;
            x->computed_resumed += res.n_computed;
            for (int t = 0; t < KVT_TIER_COUNT; t++) x->tier_tokens[t] += res.tier_tokens[t];
            ttft[n_ttft++] = res.ttft_ms;
        }
    x->wall_s = kvt_now() - t0;
    qsort(ttft, (size_t)n_ttft, sizeof *ttft, cmp_double);
    if (n_ttft) {
        x->ttft_p50 = ttft[n_ttft / 2];
        x->ttft_p99 = ttft[(n_ttft * 99) / 100 < n_ttft ? (n_ttft * 99) / 100 : n_ttft - 1];
    }
    for (int32_t s = 0; s < S; s++) free(hist[s]);
    free(hist);
    free(n_hist);
    free(ttft);
    return rc;
}

/* Pages of phase 3's sessions at their last round: the full pages a finished
 * session leaves cached, and what the running request takes. */
typedef struct {
    int32_t cached, running;
} session_pages;

/* One run of the workload with a T0 of K sessions' cached pages plus the
 * running request's; T1 holds every session. */
static int expansion_run(const opts *o, const kvt_model *m, int32_t k, session_pages sp, const char *label,
                         expansion *x) {
    int32_t n_pages = k * sp.cached + sp.running + 1;
    kvt_engine *e = new_engine(m, o, n_pages, (sp.running + 1) * o->block);
    if (!e) return -1;
    kvt_cache_params cp = kvt_cache_default_params();
    cp.ram_bytes = (uint64_t)o->sessions * (uint64_t)(sp.cached + 1) * (kvt_page_bytes(e) + 4096) + (64u << 20);
    kvt_cache *c = open_cache(e, &cp);
    int rc = c ? workload(o, e, c, x) : -1;
    if (c) {
        kvt_cache_stats st;
        kvt_cache_get_stats(c, &st);
        printf("  %s: T0 %d pages (%d sessions' %d cached pages each, and the running request's %d); evictions from "
               "T0 %llu\n",
               label, n_pages, k, sp.cached, sp.running + 1, (unsigned long long)st.t0_evictions);
        kvt_cache_free(c);
    }
    kvt_engine_free(e);
    return rc;
}

static void expansion_print(const char *label, const expansion *x) {
    char key[64];
    snprintf(key, sizeof key, "p3_%s_computed", label);
    figure(key, (double)x->computed_resumed,
           "%s T0: resumed requests computed %lld tokens (all rounds %lld); resumed tokens from T0/T1/T2/T3 "
           "%lld/%lld/%lld/%lld",
           label, (long long)x->computed_resumed, (long long)x->computed_all, (long long)x->tier_tokens[0],
           (long long)x->tier_tokens[1], (long long)x->tier_tokens[2], (long long)x->tier_tokens[3]);
    snprintf(key, sizeof key, "p3_%s_ttft_p50_ms", label);
    figure(key, x->ttft_p50, "%s T0: resumed TTFT p50 %.2f ms, p99 %.2f ms; the run took %.1f s", label, x->ttft_p50,
           x->ttft_p99, x->wall_s);
}

static int phase3(const opts *o, const kvt_model *m) {
    /* a session's tokens when its last request starts: its prefix and every earlier round's additions */
    int32_t hist = o->session_tokens + (o->rounds - 1) * (o->append + o->gen);
    session_pages sp = {hist / o->block, (hist + o->gen + o->block - 1) / o->block};
    printf("phase 3: %d sessions of %d tokens, %d rounds (+%d tokens, %d generated each), T0 for %d of them\n",
           o->sessions, o->session_tokens, o->rounds, o->append, o->gen, o->t0_sessions);
    figure("p3_sessions", o->sessions, "sessions: %d over a T0 for %d", o->sessions, o->t0_sessions);
    expansion tiered, unl;
    /* each run's figures print as soon as it ends */
    if (expansion_run(o, m, o->t0_sessions, sp, "tiered", &tiered)) return -1;
    expansion_print("tiered", &tiered);
    if (expansion_run(o, m, o->sessions, sp, "unlimited", &unl)) return -1;
    expansion_print("unlimited", &unl);
    double cr = (double)tiered.computed_resumed / (double)(unl.computed_resumed ? unl.computed_resumed : 1);
    figure("p3_computed_ratio", cr, "computed tokens in resumed requests, tiered / unlimited: %.3f (target <= 1.05)",
           cr);
    double tr = unl.ttft_p50 > 0 ? tiered.ttft_p50 / unl.ttft_p50 : 0;
    figure("p3_ttft_ratio", tr, "resumed TTFT p50, tiered / unlimited: %.2f (target <= 1.3)", tr);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* each line out as it is made, in order with stderr's */
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    if (o.make_model) {
        char path[512];
        shape_path(&o, path, sizeof path);
        return ensure_shape_model(&o, path) ? 1 : 0;
    }
    kvt_model *m = load_model(&o);
    if (!m) return 1;
    info("device_arg", o.device_arg);
    if (o.device) {
        kvt_gpu_info *gi;
        int n;
        if (!kvt_gpu_list(&gi, &n)) {
            if (o.device - 1 < n) {
                info("gpu_name", gi[o.device - 1].name);
                info("gpu_driver", gi[o.device - 1].driver);
                info("gpu_api", gi[o.device - 1].api);
                const kvt_gpu_info *g = &gi[o.device - 1];
                figure("gpu_mm_toks", g->mm_toks,
                       "matmul workgroups: %u weight rows x 8 tokens for batches up to 8 (decode), %u rows x %u "
                       "tokens for longer ones (prefill; KVT_VK_MM_TOKS picks 8, 16 or 32, KVT_VK_MM_ROWS 1..8)",
                       g->mm_rows, g->mm_rows_wide, g->mm_toks);
                printf("gpu_mm_rows=%u\ngpu_mm_rows_wide=%u\n", g->mm_rows, g->mm_rows_wide);
            }
            free(gi);
        }
    }
    figure("threads", o.threads, "CPU threads: %d", o.threads);
    if (o.phase2 && phase2(&o, m)) rc = 1;
    if (!rc && o.phase3 && phase3(&o, m)) rc = 1;
    kvt_model_free(m);
    return rc;
}
