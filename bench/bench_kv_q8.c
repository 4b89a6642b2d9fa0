// SPDX-License-Identifier: MIT
/* The cost of q8_0 KV (--kv-type q8_0) against f16, per model:
 *   bytes per token of each dtype (every tier stores pages of these rows);
 *   quality: over every prompt position, max and mean |logit(q8_0) - logit(f16)|
 *   (and max |logit| for scale), top-1 agreement, mean KL(f16 || q8_0) of the
 *   next-token distributions, and how many greedy tokens agree before the first
 *   difference;
 *   speed: prefill and decode tok/s of each dtype (threads as given), the
 *   median of --reps runs that alternate the dtypes (other load on the machine
 *   moves single runs by tens of percent).
 * Models whose head_dim is not a multiple of 32 cannot use q8_0 and are named
 * and skipped. Prints numbers; never fails on them.
 * usage: bench_kv_q8 [-m MODEL.gguf]... [-t THREADS] [--prompt N] [--decode N] [--reps N]
 * (default models: the ~250M bench llama of bench/speed.sh, generated if
 * missing, and ../shared/models/tiny-llama-f16.gguf) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "engine.h"
#include "kv_quant.h"
#include "mkmodel.h"
#include "model.h"
#include "ops.h"
#include "sampler.h"
#include "tokenizer.h"

#define BENCH_MODEL "bench/out/llama250m-f16.gguf"
#define SHARED_MODEL "../shared/models/tiny-llama-f16.gguf"
#define MAX_MODELS 8
#define PROMPT_TOKENS 512
#define DECODE_TOKENS 64
#define CHUNK 64 /* prompt positions whose logits are compared at a time */
#define REPS 3
#define MAX_REPS 15
#define TEXT \
    "The lighthouse keeper climbed the spiral stairs every evening, counting the steps as his father had " \
    "taught him. At the top he trimmed the wick, polished the great lens and watched the ships pass the reef. " \
    "Some nights the fog rolled in so thick that he could not see his own hands, and then he rang the bell " \
    "until dawn. "

/* The ~250M llama of bench/speed.sh and bench_engine, made here if missing. */
static int make_bench_model(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0) return 0;
    kvt_mkmodel_params p = kvt_mkmodel_default_params();
    p.dim = 1024;
    p.layers = 16;
    p.heads = 16;
    p.kv_heads = 4;
    p.ff = 2816;
    p.vocab = 32000;
    p.ctx = 4096;
    p.type = KVT_TYPE_F16;
    p.name = "bench-llama-250m";
    mkdir("bench/out", 0755);
    fprintf(stderr, "bench: generating %s (random weights)\n", path);
    return kvt_mkmodel(&p, path);
}

static kvt_engine *engine(const kvt_model *m, kvt_kv_dtype dt, int threads, int32_t n_ctx) {
    kvt_engine_params ep = kvt_engine_default_params();
    ep.kv_dtype = dt;
    ep.n_threads = threads;
    ep.n_ctx = n_ctx;
    ep.n_pages = (n_ctx + ep.block_size - 1) / ep.block_size + 1;
    ep.max_seqs = 1;
    kvt_engine *e = NULL;
    if (kvt_engine_new(m, ep, &e)) fprintf(stderr, "bench: %s\n", kvt_errmsg());
    return e;
}

typedef struct {
    double prefill_tok_s, decode_tok_s;
    int32_t *greedy; /* (n_decode) */
} speed;

/* Prefill n tokens (last logits only), then n_decode greedy tokens; timed. */
static speed run_speed(kvt_engine *e, const int32_t *toks, int32_t n, int32_t n_decode) {
    speed s = {0};
    int32_t V = kvt_engine_n_vocab(e), seq;
    float *logits = kvt_xmalloc((size_t)V * sizeof(float));
    s.greedy = kvt_xcalloc((size_t)(n_decode > 0 ? n_decode : 1), sizeof(int32_t));
    kvt_seq_new(e, NULL, 0, 0, &seq);
    double t0 = kvt_now();
    if (kvt_engine_feed(e, seq, toks, n, 0, logits)) fprintf(stderr, "bench: %s\n", kvt_errmsg());
    double t1 = kvt_now();
    for (int32_t i = 0; i < n_decode; i++) {
        s.greedy[i] = kvt_argmax(logits, V);
        kvt_engine_feed(e, seq, &s.greedy[i], 1, 0, logits);
    }
    double t2 = kvt_now();
    kvt_seq_free(e, seq);
    s.prefill_tok_s = n / (t1 - t0);
    s.decode_tok_s = n_decode > 0 ? n_decode / (t2 - t1) : 0;
    free(logits);
    return s;
}

/* log-sum-exp of x[0..n) in double */
static double lse(const float *x, int32_t n) {
    double m = x[0], s = 0;
    for (int32_t j = 1; j < n; j++) m = fmax(m, x[j]);
    for (int32_t j = 0; j < n; j++) s += exp(x[j] - m);
    return m + log(s);
}

typedef struct {
    double max_d, sum_d, max_abs, kl_sum;
    int64_t n_logits;
    int32_t positions, top1_agree;
} quality;

/* Feeds toks to an f16 and a q8_0 engine in chunks, comparing every position's logits. */
static quality run_quality(kvt_engine *e16, kvt_engine *e8, const int32_t *toks, int32_t n) {
    quality q = {0};
    int32_t V = kvt_engine_n_vocab(e16), s16, s8;
    float *l16 = kvt_xmalloc((size_t)CHUNK * (size_t)V * sizeof(float)); /* (CHUNK, V) */
    float *l8 = kvt_xmalloc((size_t)CHUNK * (size_t)V * sizeof(float));  /* (CHUNK, V) */
    kvt_seq_new(e16, NULL, 0, 0, &s16);
    kvt_seq_new(e8, NULL, 0, 0, &s8);
    for (int32_t c0 = 0; c0 < n; c0 += CHUNK) {
        int32_t c = KVT_MIN(CHUNK, n - c0);
        if (kvt_engine_feed(e16, s16, toks + c0, c, 1, l16) || kvt_engine_feed(e8, s8, toks + c0, c, 1, l8)) {
            fprintf(stderr, "bench: %s\n", kvt_errmsg());
            break;
        }
        for (int32_t i = 0; i < c; i++) {
            const float *a = l16 + (size_t)i * V, *b = l8 + (size_t)i * V;
            double la = lse(a, V), lb = lse(b, V), kl = 0;
            for (int32_t j = 0; j < V; j++) {
                double d = fabs((double)b[j] - a[j]);
                q.max_d = fmax(q.max_d, d);
                q.sum_d += d;
                q.max_abs = fmax(q.max_abs, fabs((double)a[j]));
                double pa = a[j] - la, pb = b[j] - lb; /* log-probabilities */
                kl += exp(pa) * (pa - pb);
            }
            q.kl_sum += kl;
            q.n_logits += V;
            q.top1_agree += kvt_argmax(a, V) == kvt_argmax(b, V);
            q.positions++;
        }
    }
    kvt_seq_free(e16, s16);
    kvt_seq_free(e8, s8);
    free(l16);
    free(l8);
    return q;
}

static double median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double x = v[j];
            v[j] = v[j - 1];
            v[j - 1] = x;
        }
    return v[n / 2];
}

static void bench_model(const char *path, int threads, int32_t n_prompt, int32_t n_decode, int reps) {
    kvt_model *m = NULL;
    if (kvt_model_load(path, kvt_model_default_params(), &m)) {
        fprintf(stderr, "bench: %s\n", kvt_errmsg());
        return;
    }
    const kvt_hparams *hp = &m->hp;
    printf("\nmodel %s: %.1fM params, %d layers, %d/%d heads of %d\n", path, (double)m->n_params / 1e6, hp->n_layer,
           hp->n_head, hp->n_head_kv, hp->head_dim);
    uint64_t b16 = kvt_model_kv_token_bytes(m, KVT_KV_F16), b8 = kvt_model_kv_token_bytes(m, KVT_KV_Q8_0);
    if (!b8) {
        printf("  q8_0 KV: not possible (head_dim %d is not a multiple of %d); skipped\n", hp->head_dim,
               KVT_KV_Q8_BLOCK);
        kvt_model_free(m);
        return;
    }
    printf("  KV bytes per token: f16 %llu, q8_0 %llu (%.3f of f16), f32 %llu\n", (unsigned long long)b16,
           (unsigned long long)b8, (double)b8 / (double)b16,
           (unsigned long long)kvt_model_kv_token_bytes(m, KVT_KV_F32));

    /* the prompt: an English paragraph, tokenized and repeated to n_prompt tokens */
    int32_t *text = NULL, *toks = kvt_xmalloc((size_t)n_prompt * sizeof(int32_t));
    size_t n_text = 0;
    if (kvt_tokenize(m->tok, TEXT, strlen(TEXT), 0, 0, &text, &n_text) || n_text == 0) {
        fprintf(stderr, "bench: cannot tokenize the prompt: %s\n", kvt_errmsg());
        free(toks);
        kvt_model_free(m);
        return;
    }
    int32_t bos = kvt_tokenizer_bos(m->tok);
    for (int32_t i = 0; i < n_prompt; i++) toks[i] = i == 0 && bos >= 0 ? bos : text[(size_t)(i - 1 + n_text) % n_text];
    free(text);

    int32_t n_ctx = n_prompt + n_decode;
    kvt_engine *e16 = engine(m, KVT_KV_F16, threads, n_ctx), *e8 = engine(m, KVT_KV_Q8_0, threads, n_ctx);
    if (e16 && e8) {
        int32_t warm = KVT_MIN(n_prompt, 32);
        free(run_speed(e16, toks, warm, 0).greedy); /* page the weights in */
        free(run_speed(e8, toks, warm, 0).greedy);
        speed s16 = {0}, s8 = {0};
        double p16[MAX_REPS], p8[MAX_REPS], d16[MAX_REPS], d8[MAX_REPS];
        for (int r = 0; r < reps; r++) { /* alternating, so slow phases of the machine hit both */
            speed a = run_speed(e16, toks, n_prompt, n_decode), b = run_speed(e8, toks, n_prompt, n_decode);
            p16[r] = a.prefill_tok_s, d16[r] = a.decode_tok_s, p8[r] = b.prefill_tok_s, d8[r] = b.decode_tok_s;
            if (r == 0) {
                s16.greedy = a.greedy, s8.greedy = b.greedy;
            } else {
                free(a.greedy), free(b.greedy);
            }
        }
        s16.prefill_tok_s = median(p16, reps), s16.decode_tok_s = median(d16, reps);
        s8.prefill_tok_s = median(p8, reps), s8.decode_tok_s = median(d8, reps);
        quality q = run_quality(e16, e8, toks, n_prompt);
        int32_t same_greedy = 0;
        while (same_greedy < n_decode && s16.greedy[same_greedy] == s8.greedy[same_greedy]) same_greedy++;
        printf("  quality over %d prompt positions: max |dlogit| %.4g, mean |dlogit| %.3g (max |logit| %.3g), "
               "top-1 agreement %.1f%%, mean KL(f16||q8_0) %.3g nats\n",
               q.positions, q.max_d, q.n_logits ? q.sum_d / (double)q.n_logits : 0, q.max_abs,
               q.positions ? 100.0 * q.top1_agree / q.positions : 0, q.positions ? q.kl_sum / q.positions : 0);
        printf("  greedy continuation: %d of %d tokens equal before the first difference\n", same_greedy, n_decode);
        printf("  speed (%d threads, median of %d): prefill %d tokens f16 %.1f tok/s, q8_0 %.1f tok/s (%.2fx); "
               "decode %d tokens f16 %.1f tok/s, q8_0 %.1f tok/s (%.2fx)\n",
               threads, reps, n_prompt, s16.prefill_tok_s, s8.prefill_tok_s, s8.prefill_tok_s / s16.prefill_tok_s,
               n_decode, s16.decode_tok_s, s8.decode_tok_s,
               s16.decode_tok_s > 0 ? s8.decode_tok_s / s16.decode_tok_s : 0);
        free(s16.greedy);
        free(s8.greedy);
    }
    kvt_engine_free(e16);
    kvt_engine_free(e8);
    free(toks);
    kvt_model_free(m);
}

int main(int argc, char **argv) {
    const char *models[MAX_MODELS];
    int n_models = 0, threads = 2, reps = REPS;
    long n_prompt = PROMPT_TOKENS, n_decode = DECODE_TOKENS;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc && n_models < MAX_MODELS) models[n_models++] = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) n_prompt = atol(argv[++i]);
        else if (!strcmp(argv[i], "--decode") && i + 1 < argc) n_decode = atol(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_kv_q8 [-m MODEL.gguf]... [-t THREADS] [--prompt N] [--decode N] [--reps N]\n");
            return 2;
        }
    }
    if (threads < 1 || n_prompt < 1 || n_prompt > 1 << 20 || n_decode < 0 || n_decode > 1 << 20 || reps < 1 ||
        reps > MAX_REPS) {
        fprintf(stderr, "bench_kv_q8: bad -t, --prompt, --decode or --reps (1..%d)\n", MAX_REPS);
        return 2;
    }
    if (!n_models) {
        if (make_bench_model(BENCH_MODEL)) fprintf(stderr, "bench: %s\n", kvt_errmsg());
        else models[n_models++] = BENCH_MODEL;
        models[n_models++] = SHARED_MODEL;
    }
    printf("q8_0 KV against f16: kernels %s (%s), %ld prompt tokens, %ld greedy tokens\n", kvt_ops_numerics_id(),
           kvt_ops_variant(), n_prompt, n_decode);
    for (int i = 0; i < n_models; i++) bench_model(models[i], threads, (int32_t)n_prompt, (int32_t)n_decode, reps);
    return 0;
}
