// SPDX-License-Identifier: MIT
/* `kvtier eval`: a prompt's top logits at every position and a greedy
 * continuation as one JSON line, in the format of llama.cpp's reference
 * outputs (tests/reference compares them). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "kvtier.h"
/* What kvtier.h does not give (yet), and why eval needs it: */
#include "engine.h"   /* logits at every prompt position; the public API returns tokens only */
#include "generate.h" /* KVT_PREFILL_PROGRESS_TOKENS */
#include "progress.h" /* --progress */
#include "sampler.h"  /* the greedy continuation's argmax */

#define EVAL_DEFAULT_N 16
#define TOP_N 5               /* logits printed per prompt position */
#define MAX_TOKENS (1L << 24) /* -n at most */
#define MAX_BLOCK 4096        /* --block-size at most, as run's without the cache */

/* What eval's command line sets. */
typedef struct {
    const char *model_path, *text, *tokens_arg;
    int no_bos, threads;
    long n_gen, block;
    kvt_kv_dtype dt;
    kvt_cli_device dev;
} eval_args;

/* Parses "1 2 3" (spaces or commas) into a new array. Returns -1 on a bad id. */
static int parse_tokens(const char *s, int32_t **out, size_t *n) {
    size_t cap = 16, len = 0;
    int32_t *t = kvt_xmalloc(cap * sizeof *t);
    while (*s) {
        if (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n') {
            s++;
            continue;
        }
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || v < 0 || v > INT32_MAX) {
            free(t);
            return -1;
        }
        if (len == cap) t = kvt_xrealloc(t, (cap *= 2) * sizeof *t);
        t[len++] = (int32_t)v;
        s = end;
    }
    *out = t;
    *n = len;
    return 0;
}

/* Whether a ranks above b: by value, with NaN below every number. */
static int ranks_above(float a, float b) { return isnan(b) ? !isnan(a) : a > b; }

/* The indices of the TOP_N largest of x[0..n), largest first; -1 past n. */
static void top_n(const float *x, int32_t n, int32_t *idx) {
    for (int k = 0; k < TOP_N; k++) idx[k] = -1;
    for (int32_t i = 0; i < n; i++)
        for (int k = 0; k < TOP_N; k++)
            if (idx[k] < 0 || ranks_above(x[i], x[idx[k]])) {
                memmove(idx + k + 1, idx + k, (size_t)(TOP_N - 1 - k) * sizeof *idx);
                idx[k] = i;
                break;
            }
}

/* An engine with room for one sequence of n_ctx tokens. */
static int make_engine(const kvt_model *m, int threads, int32_t n_ctx, int32_t block, kvt_kv_dtype dt,
                       const kvt_cli_device *dev, kvt_engine **e) {
    kvt_engine_params p = kvt_engine_default_params();
    p.n_threads = threads;
    p.n_ctx = n_ctx;
    p.block_size = block;
    p.kv_dtype = dt;
    p.max_seqs = 1;
    kvt_cli_device_apply("eval", dev, &p);
    p.n_pages = (n_ctx + block - 1) / block;
    return kvt_engine_new(m, p, e);
}

void kvt_usage_eval(FILE *f) {
    fprintf(
        f,
        "usage: kvtier eval -m MODEL [options] [TEXT]\n\n"
        "Prints one JSON line: the prompt's token ids, the top-%d logits at every prompt\n"
        "position, and a greedy continuation (argmax fed back, never stopping early),\n"
        "in the format of llama.cpp's reference outputs.\n\n"
        "  -m, --model FILE   GGUF model (required)\n"
        "  TEXT               prompt text, tokenized with the model's tokenizer\n"
        "  --tokens \"1 2 3\"   use these token ids verbatim instead of TEXT (no BOS added)\n"
        "  --no-bos           do not prepend BOS when tokenizing TEXT (by default BOS and\n"
        "                     EOS are added as llama.cpp does for the model; the\n"
        "                     add_bos field says whether BOS was)\n"
        "  -n N               greedy tokens to generate (default %d)\n"
        "  --block-size B     tokens per KV page (default %d, at most %d), as run's and\n"
        "                     serve's; eval keeps no cache, and its figures are the same\n"
        "                     for every B\n"
        "  -t, --threads N    worker threads (default: all CPUs)\n"
        "  --progress         progress lines on stderr for the model load and a prefill of\n"
        "                     " STR(
            KVT_PREFILL_PROGRESS_TOKENS) "+ tokens, also when stderr is not a terminal (on a\n"
                                         "                     terminal they are on anyway); stdout is the same either way\n",
        TOP_N, EVAL_DEFAULT_N, KVT_DEFAULT_BLOCK_SIZE, MAX_BLOCK);
    kvt_cli_kv_type_help(f);
    fprintf(f,
            "  --device DEV        where the model runs: cpu (the default) or vulkan[:N] ($KVTIER_DEVICE\n"
            "                      too), the Vulkan device N of `kvtier info --devices`\n"
            "  --gpu-memory-fraction F\n"
            "                      on a GPU, the share of its memory eval may take, 0 < F <= 1 (default\n"
            "                      0.9): the weights, activations and one context of KV must fit in it\n"
            "  -ngl, --n-gpu-layers N\n"
            "                      layers on the GPU, as llama.cpp's -ngl: -1, 99 or N >= the model's\n"
            "                      layers (all, the default); a smaller N runs the first N layers there\n"
            "                      and the others and the output matrix on the CPU (0: all on the CPU).\n"
            "                      Without --device, an N other than 0 puts the model on the first GPU\n"
            "                      (never on lavapipe, a CPU); ignored with --device cpu\n");
    fprintf(f, "  -h, --help         this help\n");
}

/* Parses eval's command line into *x. Returns 0, -1 after --help, or 2 after
 * printing a usage error. */
static int eval_parse(int argc, char **argv, eval_args *x) {
    int dev_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int kf;
        if (kvt_cli_is_help(a)) {
            kvt_usage_eval(stdout);
            return -1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(x->model_path = kvt_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--tokens")) {
            if (!(x->tokens_arg = kvt_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--no-bos")) {
            x->no_bos = 1;
        } else if (!strcmp(a, "--progress")) {
            kvt_progress_set_forced(1);
        } else if ((kf = kvt_cli_kv_type_flag(argc, argv, &i, &x->dt))) {
            if (kf < 0) return 2;
        } else if ((kf = kvt_cli_device_flag(argc, argv, &i, &dev_given, &x->dev))) {
            if (kf < 0) return 2;
        } else if (!strcmp(a, "-n")) {
            if (!(v = kvt_cli_value(argc, argv, &i)) || (x->n_gen = kvt_cli_parse_long(a, v, 0, MAX_TOKENS)) < 0)
                return 2;
        } else if (!strcmp(a, "--block-size")) {
            if (!(v = kvt_cli_value(argc, argv, &i)) || (x->block = kvt_cli_parse_long(a, v, 1, MAX_BLOCK)) < 0)
                return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            long t;
            if (!(v = kvt_cli_value(argc, argv, &i)) || (t = kvt_cli_parse_long(a, v, 1, KVT_CLI_MAX_THREADS)) < 0)
                return 2;
            x->threads = (int)t;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "kvtier eval: unknown option '%s'\n", a);
            kvt_usage_eval(stderr);
            return 2;
        } else if (!x->text) {
            x->text = a;
        } else {
            fprintf(stderr, "kvtier eval: only one TEXT argument is allowed\n");
            return 2;
        }
    }
    if (!dev_given && kvt_cli_device_env(&x->dev)) return 2;
    if (kvt_cli_device_auto("eval", &x->dev)) return 2;
    if (!x->model_path || (!x->text == !x->tokens_arg)) {
        fprintf(stderr, "kvtier eval: needs -m MODEL and exactly one of TEXT or --tokens\n");
        kvt_usage_eval(stderr);
        return 2;
    }
    return 0;
}

/* The prompt's token ids into *toks (malloc'd): --tokens verbatim, or TEXT
 * tokenized with the model's special tokens (BOS unless --no-bos); every id
 * inside the vocabulary, and room left for n_gen more. 0, or the exit code
 * after printing why (*toks then NULL). */
static int eval_tokens(const eval_args *x, kvt_model *m, int32_t n_vocab, int32_t **toks, size_t *n_tok) {
    int rc;
    if (x->tokens_arg) {
        if (parse_tokens(x->tokens_arg, toks, n_tok)) {
            fprintf(stderr, "kvtier eval: --tokens expects token ids, got '%s'\n", x->tokens_arg);
            return 2;
        }
    } else if ((kvt_fail(0, "%s", ""),
                rc = kvt_model_tokenize(m, x->text, strlen(x->text),
                                        KVT_TOKENIZE_ADD_SPECIAL | (x->no_bos ? KVT_TOKENIZE_NO_BOS : 0), 0, toks,
                                        n_tok))) {
        fprintf(stderr, "kvtier eval: cannot tokenize: %s %s\n", kvt_strerror(rc), kvt_errmsg());
        return 1;
    }
    for (size_t i = 0; i < *n_tok; i++)
        if ((*toks)[i] < 0 || (*toks)[i] >= n_vocab) {
            fprintf(stderr, "kvtier eval: token %d is outside the vocabulary of %d\n", (*toks)[i], n_vocab);
            free(*toks);
            *toks = NULL;
            return 2;
        }
    if (*n_tok == 0 || *n_tok + (size_t)x->n_gen > (size_t)INT32_MAX) {
        fprintf(stderr, "kvtier eval: the prompt is empty or too long\n");
        free(*toks);
        *toks = NULL;
        return 2;
    }
    return 0;
}

/* The JSON line's head: model, prompt, add_bos, prompt_tokens. */
static void print_head(const eval_args *x, int add_bos, const int32_t *toks, size_t n_tok) {
    printf("{\"model\":");
    const char *base = strrchr(x->model_path, '/');
    kvt_cli_json_string(stdout, base ? base + 1 : x->model_path);
    printf(",\"prompt\":");
    kvt_cli_json_string(stdout, x->text ? x->text : "");
    printf(",\"add_bos\":%s,\"prompt_tokens\":[", add_bos ? "true" : "false");
    for (size_t i = 0; i < n_tok; i++) printf("%s%d", i ? "," : "", toks[i]);
}

/* The JSON line's rest: the top-N logits at every prompt position, then n_gen
 * greedy tokens (argmax fed back). The prompt goes in chunks so only one
 * chunk's logits are held at once. Returns 0 or the engine's error (the line
 * is closed either way). */
static int print_logits(kvt_engine *e, int32_t seq, const int32_t *toks, size_t n_tok, long n_gen, int32_t V) {
    printf("],\"prompt_logits_top5\":[");
    int rc = 0;
    int32_t chunk = kvt_engine_params_of(e).n_batch;
    float *logits = kvt_xmalloc((size_t)chunk * (size_t)V * sizeof(float));
    int32_t next = 0;
    kvt_progress prog;
    int show = n_tok >= KVT_PREFILL_PROGRESS_TOKENS && kvt_progress_wanted();
    if (show) kvt_progress_begin(&prog, "prefill", n_tok, "tokens");
    for (size_t c0 = 0; c0 < n_tok && !rc; c0 += (size_t)chunk) {
        int32_t n = (int32_t)KVT_MIN((size_t)chunk, n_tok - c0);
        if (show && c0) kvt_progress_update(&prog, c0);
        if ((rc = kvt_engine_feed(e, seq, toks + c0, n, 1, logits))) break;
        for (int32_t i = 0; i < n; i++) {
            const float *lg = logits + (size_t)i * (size_t)V;
            int32_t idx[TOP_N];
            top_n(lg, V, idx);
            printf("%s[", c0 + (size_t)i ? "," : "");
            /* a non-finite logit (a broken model) is null: the line stays valid JSON */
            for (int k = 0; k < TOP_N && idx[k] >= 0; k++) {
                printf("%s[%d,", k ? "," : "", idx[k]);
                kvt_cli_json_number(stdout, (double)lg[idx[k]], 9);
                printf("]");
            }
            printf("]");
            next = idx[0];
        }
    }
    if (show) kvt_progress_end(&prog, rc ? 0 : n_tok);
    printf("],\"greedy\":[");
    for (long g = 0; g < n_gen && !rc; g++) {
        printf("%s%d", g ? "," : "", next);
        if (g + 1 < n_gen && !(rc = kvt_engine_feed(e, seq, &next, 1, 0, logits))) next = kvt_argmax(logits, V);
    }
    printf("]}\n");
    free(logits);
    return rc;
}

int kvt_cmd_eval(int argc, char **argv) {
    eval_args x = {.threads = kvt_cli_default_threads(),
                   .n_gen = EVAL_DEFAULT_N,
                   .block = KVT_DEFAULT_BLOCK_SIZE,
                   .dt = KVT_KV_F16};
    int rc = eval_parse(argc, argv, &x);
    if (rc) return rc < 0 ? 0 : rc;
    kvt_model *m = NULL;
    if ((rc = kvt_model_load(x.model_path, kvt_model_default_params(), &m))) {
        fprintf(stderr, "kvtier eval: %s\n", kvt_errmsg());
        return 1;
    }
    /* the same rule as run, serve and tokenize */
    kvt_model_info info = kvt_model_get_info(m);
    int add_bos = !x.tokens_arg && !x.no_bos && info.add_bos;
    int32_t *toks = NULL;
    size_t n_tok = 0;
    if ((rc = eval_tokens(&x, m, info.n_vocab, &toks, &n_tok))) {
        kvt_model_free(m);
        return rc;
    }
    kvt_engine *e = NULL;
    int32_t seq = 0;
    if ((rc = make_engine(m, x.threads, (int32_t)(n_tok + (size_t)x.n_gen), (int32_t)x.block, x.dt, &x.dev, &e)) ||
        (rc = kvt_seq_new(e, NULL, 0, 0, &seq))) {
        fprintf(stderr, "kvtier eval: %s\n", kvt_errmsg());
        /* the engine speaks of pages; eval sizes them from its own flags, so say which ones change them
         * (one page over the device's binding is KVT_EPAGE, not this: its refusal names --block-size) */
        if (rc == KVT_ELIMIT)
            fprintf(stderr,
                    "kvtier eval: its KV pool holds all %zu tokens, the prompt's %zu and -n %ld: a shorter prompt, "
                    "a smaller -n or --kv-type q8_0 needs less\n",
                    n_tok + (size_t)x.n_gen, n_tok, x.n_gen);
        free(toks);
        kvt_engine_free(e);
        kvt_model_free(m);
        return 1;
    }
    print_head(&x, add_bos, toks, n_tok);
    rc = print_logits(e, seq, toks, n_tok, x.n_gen, info.n_vocab);
    if (rc) fprintf(stderr, "kvtier eval: %s\n", kvt_errmsg());
    free(toks);
    kvt_engine_free(e);
    kvt_model_free(m);
    return rc ? 1 : 0;
}
