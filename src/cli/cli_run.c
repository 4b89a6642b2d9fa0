// SPDX-License-Identifier: MIT
/* `kvtier run`: its options, streaming each generation to stdout, the
 * statistics line per prompt, the cache report at the end, and a stop signal
 * ending the run cleanly. The prompts file (-f) is cli_run_file.c's. */
#include <ctype.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_run.h"
#include "cli_sampling.h"
#include "common.h"
#include "kvtier.h"
/* What kvtier.h does not give (yet), and why run needs it: */
#include "api_utf8.h"  /* the streamed text: whole characters only */
#include "blockhash.h" /* KVT_BLOCK_TOKENS_MAX: --block-size with the cache */
#include "generate.h"  /* one sampler across the prompts of -f, --no-cache and --ignore-eos */
#include "model.h"     /* the tokenizer handle kvt_generate takes for end-of-generation tokens */
#include "progress.h"  /* --progress */
#include "sampler.h"   /* the sampler */

#define RUN_DEFAULT_N 128
#define RUN_PENALTY_LAST_N 64 /* llama.cpp's default window of the repetition penalties */
#define MAX_REPEAT_PENALTY 10 /* as a request's repeat_penalty */
#define MAX_PENALTY 2         /* presence and frequency penalties, as a request's (OpenAI's bounds) */
#define PIECE_MAX 256         /* bytes of one token's text */
#define PATH_MAX_LEN 4096
#define MAX_TOKENS (1L << 24)
#define MAX_BLOCK 4096
#define STOP_LINE_MAX 320    /* bytes of the "reuse stopped" explanation on a stats line */
#define SIGNAL_EXIT_BASE 128 /* exit status after a stop signal: 128 + its number */

enum {
    R_MODEL = 1,
    R_PROMPT,
    R_FILE,
    R_N_PREDICT,
    R_TEMP,
    R_TOP_K,
    R_TOP_P,
    R_SEED,
    R_THREADS,
    R_KV_ACTIVE,
    R_KV_RAM,
    R_IGNORE_EOS,
    R_SALT,
    R_NO_CACHE,
    R_BLOCK_SIZE,
    R_CTX,
    R_PROGRESS,
    R_SAMPLERS,
    R_MIN_P,
    R_REPEAT_PENALTY,
    R_REPEAT_LAST_N,
    R_PRESENCE_PENALTY,
    R_FREQUENCY_PENALTY,
    R_NO_CONVERSATION,
    R_VERSION,
    R_FLASH_ATTN,
    R_NO_DISPLAY_PROMPT,
    R_NO_WARMUP,
    R_ESCAPE, /* -e, --escape and --no-escape: one setting, so that the command line's wins over $KVTIER_ESCAPE */
};

static const kvt_cli_opt run_opts[] = {
    {R_MODEL, 'm', "model", NULL, "FILE",
     "GGUF model; without it a small random-weight model is\ngenerated (and cached) so kvtier works out of the box", 0,
     KVT_CLI_PLAIN},
    {R_PROMPT, 'p', "prompt", NULL, "TEXT", "the prompt (special tokens in it are recognized)", 0, KVT_CLI_PLAIN},
    {R_FILE, 'f', "file", NULL, "FILE",
     "many prompts: one per line, or JSON lines {\"prompt\": \"...\"};\neach gets a stats line: prompt tokens, cached "
     "tokens by tier,\ncomputed tokens, time to first token. JSON lines may add\n\"kvtier\": {\"session_id\", "
     "\"priority\", \"keep_warm_s\"} (keep that\nsession's context warm in T0 afterwards, as serve does), or\n"
     "\"action\": \"prefetch\" | \"pin\" | \"unpin\" (with a \"prompt\") |\n\"end_session\" (with kvtier.session_id) "
     "instead of generating",
     0, KVT_CLI_PLAIN},
    {R_N_PREDICT, 'n', "n-predict", NULL, "N",
     "tokens to generate at most per prompt (default " STR(RUN_DEFAULT_N) "; -1 or -2,\nas llama.cpp's: until the end "
                                                                          "of generation or of the context)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, -2, MAX_TOKENS)},
    {R_TEMP, 0, "temp", NULL, "T", "sampling temperature; 0 or less = greedy, as llama.cpp (default 0.8)", 0,
     KVT_CLI_RANGE(KVT_CLI_NUM, -INFINITY, INFINITY)},
    {R_TOP_K, 0, "top-k", NULL, "K", "sample among the K most likely tokens; 0 = all (default 40)", 0,
     KVT_CLI_RANGE(KVT_CLI_INT, 0, INT32_MAX)},
    {R_TOP_P, 0, "top-p", NULL, "P", "sample among the smallest set of probability >= P (default 0.95)",
     KVT_CLI_MIN_OPEN, KVT_CLI_RANGE(KVT_CLI_NUM, 0, 1)},
    {R_SAMPLERS, 0, "samplers", "sampling-seq", "LIST",
     "the order of the sampling steps, as llama.cpp's --samplers: names\nseparated by ';' or ',' (penalties, dry, "
     "top_k, typ_p, top_p, min_p,\nxtc, temperature, infill) or their letters (e d k y p m x t i,\nas --sampling-seq: "
     "\"kpt\"); a step left out is not applied (default: penalties,\ndry, top_k, typ_p, min_p, xtc, temperature, "
     "top_p)",
     0, KVT_CLI_PLAIN},
    {R_MIN_P, 0, "min-p", NULL, "P",
     "drop tokens less likely than P times the most likely one, as\nllama.cpp's --min-p (default 0: off)", 0,
     KVT_CLI_RANGE(KVT_CLI_NUM, 0, 1)},
    {R_REPEAT_PENALTY, 0, "repeat-penalty", NULL, "R",
     "divide a positive logit (multiply a negative one) of a token\namong the last --repeat-last-n of the prompt and the reply by R,\nas "
     "llama.cpp's (default 1: off)",
     KVT_CLI_MIN_OPEN, KVT_CLI_RANGE(KVT_CLI_NUM, 0, MAX_REPEAT_PENALTY)},
    {R_REPEAT_LAST_N, 0, "repeat-last-n", NULL, "N",
     "the last tokens of the prompt and the reply the penalties look\nat (default " STR(
         RUN_PENALTY_LAST_N) ", as llama.cpp's; 0: "
                             "penalties off, -1: all)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, -1, INT32_MAX)},
    {R_PRESENCE_PENALTY, 0, "presence-penalty", NULL, "P",
     "subtract P from the logit of each token in that window (default 0)", 0,
     KVT_CLI_RANGE(KVT_CLI_NUM, -MAX_PENALTY, MAX_PENALTY)},
    {R_FREQUENCY_PENALTY, 0, "frequency-penalty", NULL, "F", "subtract F per occurrence in that window (default 0)", 0,
     KVT_CLI_RANGE(KVT_CLI_NUM, -MAX_PENALTY, MAX_PENALTY)},
    {R_SEED, 's', "seed", NULL, "S",
     "random seed; the same seed gives the same text (default: clock;\n-1, llama.cpp's \"random\", is the default too)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, -1, INT32_MAX)},
    {R_THREADS, 't', "threads", NULL, "N", "worker threads (default, or -1 as llama.cpp's: all CPUs)", 0,
     KVT_CLI_RANGE(KVT_CLI_INT, -1, KVT_CLI_MAX_THREADS)},
    {R_KV_ACTIVE, 0, "kv-active", NULL, "BYTES",
     "T0: the engine's KV page pool, e.g. 256M (default: enough for\n--ctx-size tokens plus room to keep finished "
     "prompts cached; on a\nGPU what --gpu-memory-fraction leaves after the weights)",
     0, KVT_CLI_ANY_BYTES},
    {R_KV_RAM, 0, "kv-ram", NULL, "BYTES", "T1: host-RAM budget for KV evicted from T0, e.g. 2G (default 0: off)", 0,
     KVT_CLI_ANY_BYTES},
    {R_IGNORE_EOS, 0, "ignore-eos", NULL, NULL, "keep generating past end-of-generation tokens (benchmarks)", 0,
     KVT_CLI_PLAIN},
    {R_SALT, 0, "salt", NULL, "TEXT", "cache salt: prompts under different salts never share KV", 0, KVT_CLI_PLAIN},
    {R_NO_CACHE, 0, "no-cache", NULL, NULL, "do not reuse or keep KV between prompts", 0, KVT_CLI_PLAIN},
    {R_BLOCK_SIZE, 0, "block-size", NULL, "B",
     "tokens per KV page / cache block (default " STR(KVT_DEFAULT_BLOCK_SIZE) "; at most 1024\nwith the cache)", 0,
     KVT_CLI_RANGE(KVT_CLI_INT, 1, MAX_BLOCK)},
    {R_CTX, 'c', "ctx-size", "ctx", "N",
     "context length: prompt + generated tokens (default: the model's,\nat most " STR(
         KVT_CLI_DEFAULT_CTX_CAP) "; 0, as llama.cpp's: the model's whole\ntraining context)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 0, MAX_TOKENS)},
    {R_PROGRESS, 0, "progress", NULL, NULL,
     "progress lines on stderr for the model load, a disk tier's open and\na prefill of " STR(
         KVT_PREFILL_PROGRESS_TOKENS) "+ tokens, also when stderr is not a terminal\n(on a terminal they are on anyway); stdout is the same either way",
     0, KVT_CLI_PLAIN},
    {R_NO_CONVERSATION, 0, "no-conversation", NULL, NULL,
     "accepted for llama-cli command lines (also -no-cnv): run always\ncompletes the prompt as given, without a chat "
     "template",
     KVT_CLI_NO_ENV, KVT_CLI_PLAIN},
    {R_VERSION, 0, "version", NULL, NULL, "print kvtier's version and exit", KVT_CLI_NO_ENV, KVT_CLI_PLAIN},
    {R_NO_DISPLAY_PROMPT, 0, "no-display-prompt", NULL, NULL,
     "accepted for llama-cli command lines: run prints the generated\ntext only, never the prompt", KVT_CLI_NO_ENV,
     KVT_CLI_PLAIN},
    {R_NO_WARMUP, 0, "no-warmup", NULL, NULL, "accepted for llama-cli command lines: run does no warm-up pass",
     KVT_CLI_NO_ENV, KVT_CLI_PLAIN},
    {R_FLASH_ATTN, 0, "flash-attn", NULL, "[on|off|auto]",
     "accepted for llama-cli command lines (also -fa): kvtier's attention\nis always fused, one pass over the KV pages "
     "without the score\nmatrix, so there is nothing to turn on or off",
     KVT_CLI_OPT_VALUE | KVT_CLI_NO_ENV, KVT_CLI_PLAIN},
    {R_ESCAPE, 'e', "escape", NULL, NULL,
     "read \\n, \\r, \\t, \\', \\\", \\\\ and \\xHH in -p as the characters they\nname, as llama-cli does "
     "by default (default: -p is taken as given)",
     0, KVT_CLI_PLAIN},
    {R_ESCAPE, 0, "no-escape", NULL, NULL, "take -p as given (the default)", KVT_CLI_NO_ENV, KVT_CLI_PLAIN},
};

/* run's sections: its own table, then the shared sampler, KV-type, disk-tier and device tables. */
#define RUN_SECTIONS 5
static void run_sections(kvt_cli_section out[RUN_SECTIONS]) {
    out[0] = (kvt_cli_section){NULL, run_opts, KVT_ARRAY_LEN(run_opts)};
    out[1] = kvt_cli_sampling_section;
    out[2] = kvt_cli_kv_section;
    out[3] = kvt_cli_cache_section;
    out[4] = kvt_cli_device_section;
}

void kvt_usage_run(FILE *f) {
    kvt_cli_section secs[RUN_SECTIONS];
    run_sections(secs);
    fprintf(f,
            "usage: kvtier run [-m MODEL] (-p PROMPT | -f FILE) [options]\n"
            "       kvtier [-m MODEL] (-p PROMPT | -f FILE) [options]   (run is the default job)\n\n"
            "Generates a completion of each prompt and streams it to stdout as it is produced;\n"
            "statistics go to stderr. Stops at end-of-generation tokens or after N tokens.\n"
            "All prompts of one invocation share one KV cache: a prompt that starts with\n"
            "tokens seen before (in a prompt or a generated reply) reuses their K/V.\n\n"
            "Options take their value as --opt VALUE or --opt=VALUE; each can also be set by the\n"
            "environment variable in brackets, the command line winning.\n\n");
    kvt_cli_print_opts(f, secs, RUN_SECTIONS);
}

/* What run's command line sets. */
typedef struct {
    const char *model_path, *prompt, *prompt_file, *salt;
    long n_gen, n_ctx, block;
    int threads, seed_given, use_cache, ignore_eos, version, escape;
    long penalty_last_n;
    uint64_t kv_active, kv_ram;
    kvt_cache_params cp;
    kvt_kv_dtype dt;
    kvt_sampler_params sp;
    kvt_dry_breakers dry_breakers;
    kvt_cli_device dev;
} run_args;

static int run_opt(void *ctx, int id, const kvt_cli_arg *a) {
    run_args *x = ctx;
    if (KVT_CLI_IS_CACHE_ID(id)) return kvt_cli_cache_opt(id, a, &x->cp);
    if (KVT_CLI_IS_KV_ID(id)) return kvt_cli_kv_opt(id, a, &x->dt);
    if (KVT_CLI_IS_DEVICE_ID(id)) return kvt_cli_device_opts(id, a, &x->dev);
    if (KVT_CLI_IS_SAMPLING_ID(id)) return kvt_cli_sampling_opt(id, a, &x->sp, &x->dry_breakers);
    switch (id) { /* the values are checked against the table already */
    case R_MODEL: x->model_path = a->str; return 0;
    case R_PROMPT: x->prompt = a->str; return 0;
    case R_FILE: x->prompt_file = a->str; return 0;
    case R_N_PREDICT: x->n_gen = a->i < 0 ? MAX_TOKENS : a->i; return 0; /* -1, -2: the context bounds it */
    case R_TEMP: x->sp.temp = (float)a->d; return 0;
    case R_TOP_K: x->sp.top_k = (int32_t)a->i; return 0;
    case R_TOP_P: x->sp.top_p = (float)a->d; return 0;
    case R_SEED:
        x->sp.seed = (uint64_t)a->i;
        x->seed_given = a->i >= 0; /* -1: llama.cpp's "random", the clock */
        return 0;
    case R_THREADS: /* -1: llama.cpp's "all CPUs" */
        if (kvt_cli_int_or(a, "run", -1, "all CPUs", 1)) return -1;
        x->threads = a->i < 0 ? kvt_cli_default_threads() : (int)a->i;
        return 0;
    case R_KV_ACTIVE: x->kv_active = a->bytes; return 0;
    case R_KV_RAM: x->kv_ram = a->bytes; return 0;
    case R_SALT: x->salt = a->str; return 0;
    case R_IGNORE_EOS: x->ignore_eos = 1; return 0;
    case R_NO_CACHE: x->use_cache = 0; return 0;
    case R_BLOCK_SIZE: x->block = a->i; return 0;
    case R_CTX: x->n_ctx = a->i ? a->i : KVT_CLI_CTX_MODEL; return 0;
    case R_PROGRESS: kvt_progress_set_forced(1); return 0;
    case R_SAMPLERS: x->sp.has_steps = 1; return kvt_cli_samplers("run", a, &x->sp.n_steps, x->sp.steps);
    case R_MIN_P: x->sp.min_p = (float)a->d; return 0;
    case R_REPEAT_PENALTY: x->sp.repeat_penalty = (float)a->d; return 0;
    case R_REPEAT_LAST_N: x->penalty_last_n = a->i; return 0;
    case R_PRESENCE_PENALTY: x->sp.presence_penalty = (float)a->d; return 0;
    case R_FREQUENCY_PENALTY: x->sp.frequency_penalty = (float)a->d; return 0;
    case R_NO_CONVERSATION:
    case R_NO_DISPLAY_PROMPT:
    case R_NO_WARMUP: return 0;
    case R_VERSION: x->version = 1; return 0;
    case R_FLASH_ATTN: return kvt_cli_flash_attn("run", a);
    case R_ESCAPE: x->escape = strcmp(a->flag, "--no-escape") != 0; return 0;
    default: return -1;
    }
}

/* Streams generated tokens to stdout, holding back split UTF-8 characters. */
typedef struct {
    const kvt_model *model;
    unsigned char pending[2 * PIECE_MAX];
    size_t n_pending;
} stream_state;

static volatile sig_atomic_t stop_requested; /* the stop signal received, or 0 */

static void on_stop_signal(int sig) { stop_requested = sig; }

/* SIGINT/SIGTERM end the run gracefully: the current generation stops, the
 * cache is flushed to disk, the process exits with 128 + the signal's number
 * (130 for Ctrl-C), as shells report a process the signal ended. */
static void install_stop_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static int stream_token(void *ctx, int32_t tok) {
    stream_state *s = ctx;
    if (stop_requested) return 1;
    char piece[PIECE_MAX];
    int len = kvt_model_token_piece(s->model, tok, piece, sizeof piece, 0);
    if (len <= 0) return 0;
    if (len > PIECE_MAX) len = PIECE_MAX;
    if (s->n_pending + (size_t)len > sizeof s->pending) { /* cannot happen with valid UTF-8; never lose text */
        fwrite(s->pending, 1, s->n_pending, stdout);
        s->n_pending = 0;
    }
    memcpy(s->pending + s->n_pending, piece, (size_t)len);
    s->n_pending += (size_t)len;
    size_t ok = kvt_utf8_complete_prefix((const char *)s->pending, s->n_pending);
    fwrite(s->pending, 1, ok, stdout);
    fflush(stdout);
    memmove(s->pending, s->pending + ok, s->n_pending - ok);
    s->n_pending -= ok;
    return 0;
}

/* One run invocation while it goes through its prompts. */
typedef struct {
    const run_args *x;
    kvt_sampler_params sp; /* x->sp with the seed picked */
    run_line *prompts;
    long n_prompts;
    kvt_model *m;
    kvt_model_info info;
    kvt_engine *e;
    kvt_cache *cache; /* NULL with --no-cache */
    kvt_sampler *smp;
    kvt_infill_vocab *infill; /* the infill step's vocabulary, where --samplers names it */
    run_pin *pins;            /* made by "pin" lines, released at the end */
    size_t n_pins;
} run_ctx;

/* --escape: the escapes llama-cli reads in a prompt, replaced in place by
 * the characters they name; any other backslash is kept as it is. */
static void unescape(char *s) {
    static const char from[] = "nrt'\"\\", to[] = "\n\r\t'\"\\";
    char *o = s;
    for (const char *p = s; *p; p++) {
        const char *e = p[0] == '\\' && p[1] ? strchr(from, p[1]) : NULL;
        long hex = 0; /* \x00 is kept as text: a NUL would cut the prompt short */
        if (p[0] == '\\' && p[1] == 'x' && isxdigit((unsigned char)p[2]) && isxdigit((unsigned char)p[3])) {
            char h[3] = {p[2], p[3], 0};
            hex = strtol(h, NULL, 16);
        }
        if (e) {
            *o++ = to[e - from];
            p++;
        } else if (hex) {
            *o++ = (char)hex;
            p += 3;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
}

/* The prompts of -p or -f into c->prompts. 0, or -1 after printing why. */
static int load_prompts(run_ctx *c) {
    const run_args *x = c->x;
    if (!x->prompt_file) {
        c->prompts = kvt_xcalloc(1, sizeof *c->prompts);
        c->prompts[0].prompt = kvt_xstrdup(x->prompt);
        if (x->escape) unescape(c->prompts[0].prompt);
        c->prompts[0].session.keep_warm_s = -1;
        c->n_prompts = 1;
        return 0;
    }
    if ((c->n_prompts = kvt_run_read_lines(x->prompt_file, &c->prompts)) < 0) {
        c->n_prompts = 0;
        return -1;
    }
    if (c->n_prompts == 0) {
        fprintf(stderr, "kvtier run: %s holds no prompts\n", x->prompt_file);
        return -1;
    }
    return 0;
}

/* Loads the model and makes the engine (one sequence), the cache and the
 * sampler. 0, or an error code after printing why. */
static int open_runtime(run_ctx *c, const char *model_path) {
    const run_args *x = c->x;
    int rc = kvt_model_load(model_path, kvt_model_default_params(), &c->m);
    if (rc) {
        fprintf(stderr, "kvtier run: %s\n", kvt_errmsg());
        return rc;
    }
    c->info = kvt_model_get_info(c->m);
    long n_ctx = kvt_cli_ctx(x->n_ctx, c->info.n_ctx_train), block = x->block;
    kvt_engine_params ep = kvt_engine_default_params();
    ep.n_threads = x->threads;
    ep.n_ctx = (int32_t)n_ctx;
    ep.block_size = (int32_t)block;
    ep.kv_dtype = x->dt;
    ep.max_seqs = 2; /* the prompt's, and one where approximate reuse computes a missing stored document */
    kvt_cli_device_apply("run", &x->dev, &ep);
    if (x->kv_active) {
        ep.kv_active_bytes = x->kv_active;
    } else if (ep.device) {
        ep.kv_active_bytes = 0; /* the GPU engine plans the pool from --gpu-memory-fraction */
    } else {
        /* one full context, plus as much again (at least the default budget) to keep prompts cached */
        ep.n_pages = (int32_t)KVT_MIN((long)INT32_MAX, 2 * ((n_ctx + block - 1) / block) + 1);
    }
    if ((rc = kvt_engine_new(c->m, ep, &c->e))) {
        fprintf(stderr, "kvtier run: %s\n", kvt_errmsg());
        return rc;
    }
    if (ep.device) kvt_cli_log_device_memory("run", c->e);
    if (x->use_cache) {
        kvt_cache_params cp = x->cp;
        cp.ram_bytes = x->kv_ram;
        if ((rc = kvt_cache_new(c->e, cp, &c->cache))) {
            fprintf(stderr, "kvtier run: %s\n", kvt_errmsg());
            return rc;
        }
    }
    uint8_t *brk = NULL; /* DRY's breakers by token */
    if (c->sp.dry_multiplier != 0)
        brk = x->dry_breakers.given
            ? kvt_tokens_containing(c->m->tok, c->info.n_vocab, x->dry_breakers.s, x->dry_breakers.n)
            : kvt_tokens_containing(c->m->tok, c->info.n_vocab, kvt_dry_default_breakers, KVT_DRY_DEFAULT_BREAKERS);
    c->sp.dry_breaker = brk;
    if (kvt_sampler_order_has(&c->sp, KVT_SAMPLE_INFILL))
        c->sp.infill = c->infill = kvt_infill_vocab_new(c->m->tok, c->info.n_vocab);
    c->smp = kvt_sampler_new(c->sp, c->info.n_vocab); /* copies brk */
    free(brk);
    c->sp.dry_breaker = NULL;
    return 0;
}

/* The statistics line of prompt k's generation, on stderr. */
static void print_result(const run_ctx *c, long k, const kvt_gen_result *r) {
    double pre_s = r->prefill_ms / 1e3, dec_s = r->decode_ms / 1e3;
    char why[STOP_LINE_MAX] = "";
    if (c->cache) kvt_reuse_stop_describe(c->m, &r->reuse_stop, why, sizeof why);
    char approx[STOP_LINE_MAX] = "";
    if (c->prompts[k].approximate)
        snprintf(approx, sizeof approx, ", approximate %d (%d documents placed, %d tokens recomputed, %d stored)",
                 r->blend.n_placed - r->blend.n_recomputed, r->blend.n_docs, r->blend.n_recomputed, r->blend.n_stored);
    fprintf(
        stderr,
        "kvtier run: [%ld/%ld] prompt %d tokens: cached %d (T0 %d, T1 %d, T2 %d) of %d matched%s%s%s, computed %d%s%s%s; "
        "ttft %.1f ms (restore %.1f ms, prefill %.1f ms, %.1f tok/s); generated %d tokens, decode %.1f tok/s; "
        "seed %llu%s\n",
        k + 1, c->n_prompts, r->n_prompt, r->n_reused, r->tier_tokens[KVT_TIER_T0], r->tier_tokens[KVT_TIER_T1],
        r->tier_tokens[KVT_TIER_T2], r->n_planned, r->shortfall ? ": " : "",
        r->shortfall ? kvt_shortfall_name(r->shortfall) : "", approx, r->n_computed,
        r->t2_decision == KVT_T2_RECOMPUTE ? " (disk blocks recomputed: faster than reading)" : "",
        why[0] ? "; reuse stopped: " : "", why, r->ttft_ms, r->restore_ms, r->prefill_ms,
        r->n_computed / (pre_s > 0 ? pre_s : 1e-9), r->n_generated,
        r->n_generated > 1 ? (r->n_generated - 1) / (dec_s > 0 ? dec_s : 1e-9) : 0.0, (unsigned long long)c->sp.seed,
        r->stop == KVT_STOP_CTX ? "; stopped: the context is full (-c)" : "");
}

/* The tokens of prompt k: tokenized, its documents before it (after BOS) as
 * fixed context blocks. 0, or an error code after printing why. */
static int prompt_tokens(const run_ctx *c, long k, int32_t **toks, size_t *n_tok, size_t *starts) {
    const run_line *ln = &c->prompts[k];
    int rc = kvt_model_tokenize(c->m, ln->prompt, strlen(ln->prompt), KVT_TOKENIZE_ADD_SPECIAL, 1, toks, n_tok);
    if (rc) {
        fprintf(stderr, "kvtier run: cannot tokenize prompt %ld: %s %s\n", k + 1, kvt_strerror(rc), kvt_errmsg());
        return rc;
    }
    if (!ln->n_docs) return 0;
    size_t at = *n_tok && (*toks)[0] == c->info.bos ? 1 : 0;
    int32_t *with = NULL;
    size_t nw = 0;
    rc = kvt_render_documents_spans(c->m, (int32_t)c->x->block, *toks, *n_tok, at, ln->docs, ln->n_docs, &with, &nw,
                                    starts);
    free(*toks);
    *toks = NULL;
    if (rc) {
        fprintf(stderr, "kvtier run: prompt %ld: cannot render its documents: %s\n", k + 1, kvt_errmsg());
        return rc;
    }
    *toks = with;
    *n_tok = nw;
    return 0;
}

/* Runs line k of the prompts: an action on the cache, or a generation
 * streamed to stdout. 0, or 1 when it failed (said on stderr). */
static int run_prompt(run_ctx *c, long k) {
    const run_args *x = c->x;
    const run_line *ln = &c->prompts[k];
    int32_t *toks = NULL;
    size_t n_tok = 0;
    kvt_fail(0, "%s", "");
    if (ln->action != LINE_GENERATE && !c->cache) {
        fprintf(stderr, "kvtier run: [%ld] %s needs the cache (not --no-cache)\n", k + 1,
                kvt_run_action_name(ln->action));
        return 1;
    }
    if (ln->action == LINE_END_SESSION) {
        kvt_run_action(c->cache, ln, NULL, 0, x->salt, &c->pins, &c->n_pins, k + 1);
        return 0;
    }
    if (ln->approximate && (x->seed_given || !c->cache || x->dev.vulkan)) {
        fprintf(stderr, "kvtier run: [%ld] \"reuse\": \"approximate\" %s\n", k + 1,
                x->seed_given   ? "cannot be combined with --seed: a seed asks for output that replays exactly"
                    : !c->cache ? "needs the cache (not --no-cache)"
                                : "runs on the CPU engine only (it rewrites stored keys in place): use --device cpu");
        return 1;
    }
    size_t *starts = kvt_xmalloc((ln->n_docs + 1) * sizeof *starts);
    kvt_blend_params bp = kvt_blend_default_params();
    if (ln->recompute_ratio >= 0) bp.ratio = ln->recompute_ratio;
    if (prompt_tokens(c, k, &toks, &n_tok, starts)) {
        free(starts);
        return 1;
    }
    if (ln->action != LINE_GENERATE) {
        kvt_run_action(c->cache, ln, toks, n_tok, x->salt, &c->pins, &c->n_pins, k + 1);
        free(toks);
        free(starts);
        return 0;
    }
    const char *salt = x->salt;
    kvt_sampler_prompt(c->smp, toks, (int32_t)n_tok); /* DRY's history: each prompt, then its reply */
    stream_state ss = {.model = c->m};
    kvt_gen_params gp = {.max_tokens = (int32_t)x->n_gen,
                         .sampler = c->smp,
                         .tok = x->ignore_eos ? NULL : c->m->tok,
                         .on_token = stream_token,
                         .ctx = &ss,
                         .salt = salt,
                         .salt_len = salt ? strlen(salt) : 0,
                         .progress = 1,
                         .blend = ln->approximate ? &bp : NULL,
                         .doc_starts = starts,
                         .n_docs = ln->n_docs};
    kvt_gen_result r;
    int32_t *all = NULL;
    int rc = kvt_generate(c->e, c->cache, toks, (int32_t)n_tok, &gp, &all, &r);
    if (!rc && c->cache && ln->session.session_id[0] && ln->session.keep_warm_s > 0)
        kvt_cache_keep_warm(c->cache, ln->session.session_id, all, r.n_prompt + r.n_generated, salt,
                            salt ? strlen(salt) : 0, ln->session.priority, ln->session.keep_warm_s);
    free(all);
    fwrite(ss.pending, 1, ss.n_pending, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    free(toks);
    free(starts);
    if (rc) {
        fprintf(stderr, "kvtier run: prompt %ld: %s\n", k + 1, kvt_errmsg());
        return 1;
    }
    print_result(c, k, &r);
    return 0;
}

/* After the prompts: the cache goes down to disk / the remote tier when it
 * has one, and its statistics go to stderr after several prompts or with a
 * disk tier. */
static void finish_cache(const run_ctx *c) {
    const kvt_cache_params *cp = &c->x->cp;
    if (!c->cache) return;
    if (cp->disk_dir || cp->remote_url) {
        double t0 = kvt_now();
        if (kvt_cache_flush(c->cache)) fprintf(stderr, "kvtier run: flushing the KV cache: %s\n", kvt_errmsg());
        else
            kvt_logk(KVT_LOG_INFO, "to,seconds", "flushed the KV cache to %s in %.2f s",
                     cp->disk_dir ? cp->disk_dir : "the remote tier", kvt_now() - t0);
    }
    if (c->n_prompts > 1 || cp->disk_dir) {
        kvt_cache_stats st;
        kvt_cache_get_stats(c->cache, &st);
        fprintf(stderr,
                "kvtier run: cache: %llu of %llu prompt tokens reused; T0 %d pages cached (%d idle) of %d, "
                "%llu evicted; T1 %llu blocks, %.1f of %.1f MB, %llu restores; T2 %llu records, %.1f of %.1f MB, "
                "%llu restores, %llu writes (%llu dropped, %llu waited); %llu discarded\n",
                (unsigned long long)st.hit_tokens, (unsigned long long)st.lookup_tokens, st.t0_pages_cached,
                st.t0_pages_idle, st.t0_pages_total, (unsigned long long)st.t0_evictions,
                (unsigned long long)st.t1_blocks, (double)st.t1_bytes_used / 1e6, (double)st.t1_budget_bytes / 1e6,
                (unsigned long long)st.t1_restores, (unsigned long long)st.t2_records, (double)st.t2_bytes_used / 1e6,
                (double)st.t2_budget_bytes / 1e6, (unsigned long long)st.t2_restores, (unsigned long long)st.t2_writes,
                (unsigned long long)st.t2_dropped, (unsigned long long)st.t2_put_waits,
                (unsigned long long)st.discarded);
    }
}

static void run_ctx_free(run_ctx *c) {
    for (size_t i = 0; i < c->n_pins; i++) { /* pins first: releasing one unrefs the engine's pages */
        kvt_cache_release(c->cache, c->pins[i].pin);
        free(c->pins[i].prompt);
    }
    free(c->pins);
    kvt_sampler_free(c->smp);
    kvt_infill_vocab_free(c->infill);
    kvt_cache_free(c->cache);
    kvt_engine_free(c->e);
    kvt_model_free(c->m);
    kvt_run_lines_free(c->prompts, (size_t)c->n_prompts);
}

int kvt_cmd_run(int argc, char **argv) {
    run_args x = {.n_gen = RUN_DEFAULT_N,
                  .block = KVT_DEFAULT_BLOCK_SIZE,
                  .threads = kvt_cli_default_threads(),
                  .use_cache = 1,
                  .penalty_last_n = RUN_PENALTY_LAST_N,
                  .cp = kvt_cache_default_params(),
                  .dt = KVT_KV_F16,
                  .sp = kvt_sampler_default_params()};
    kvt_cli_section secs[RUN_SECTIONS];
    run_sections(secs);
    int pr = kvt_cli_parse("run", argc, argv, secs, RUN_SECTIONS, run_opt, &x);
    if (pr == KVT_CLI_PARSE_HELP) {
        kvt_usage_run(stdout);
        return 0;
    }
    if (pr) return 2;
    if (x.version) {
        printf("kvtier %s\n", KVT_VERSION);
        return 0;
    }
    kvt_cli_kv_notice("run");
    if (kvt_cli_device_auto("run", &x.dev)) return 2;
    if (!x.penalty_last_n) { /* llama.cpp: a window of 0 tokens turns the penalties off */
        x.sp.repeat_penalty = 1;
        x.sp.presence_penalty = x.sp.frequency_penalty = 0;
    }
    x.sp.penalty_last_n = x.penalty_last_n > 0 ? (int32_t)KVT_MIN(x.penalty_last_n, (long)INT32_MAX) : 0;
    if (!x.prompt == !x.prompt_file) {
        fprintf(stderr, "kvtier run: needs exactly one of -p PROMPT or -f FILE\n");
        kvt_usage_run(stderr);
        return 2;
    }
    if (x.use_cache && x.block > KVT_BLOCK_TOKENS_MAX) { /* the engine takes larger pages; the cache's keys do not */
        fprintf(stderr,
                "kvtier run: --block-size %ld: the cache takes blocks of at most %d tokens (or use --no-cache)\n",
                x.block, KVT_BLOCK_TOKENS_MAX);
        return 2;
    }
    run_ctx c = {.x = &x, .sp = x.sp};
    if (!x.seed_given) c.sp.seed = (uint64_t)time(NULL);
    if (load_prompts(&c)) {
        run_ctx_free(&c);
        return 1;
    }
    char default_path[PATH_MAX_LEN];
    const char *model_path = x.model_path;
    if (!model_path) {
        if (kvt_default_model_path(default_path, sizeof default_path)) {
            fprintf(stderr, "kvtier run: no -m given and no default model is available: %s\n", kvt_errmsg());
            run_ctx_free(&c);
            return 1;
        }
        model_path = default_path;
    }
    int failures = 0;
    int rc = open_runtime(&c, model_path);
    if (!rc) {
        install_stop_handlers();
        for (long k = 0; k < c.n_prompts && !stop_requested; k++) failures += run_prompt(&c, k);
        finish_cache(&c);
    }
    run_ctx_free(&c);
    if (stop_requested) return SIGNAL_EXIT_BASE + stop_requested;
    return rc || failures ? 1 : 0;
}
