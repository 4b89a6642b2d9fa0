/* `kvtier` subcommand dispatcher and option-parsing helpers shared by cli_*.c. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cache.h"
#include "common.h"
#include "kv_quant.h"
#include "kvtier.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} cli_command;

static const cli_command commands[] = {
    {"run", kvt_cmd_run, "generate a completion for a prompt (default job; no -m uses a generated model)"},
    {"serve", kvt_cmd_serve, "OpenAI-compatible HTTP server with continuous batching and cache reporting"},
    {"eval", kvt_cmd_eval, "print prompt tokens, top-5 logits per position and a greedy continuation as JSON"},
    {"info", kvt_cmd_info, "describe a GGUF model: architecture, shapes, types, tokenizer, fingerprint, KV size"},
    {"tokenize", kvt_cmd_tokenize, "print the token ids of a text"},
    {"cache", kvt_cmd_cache, "inspect or maintain a disk cache directory: stats, ls, verify, gc, clear"},
    {"lint", kvt_cmd_lint, "how cacheable a set of prompts is: shared prefixes, divergences, causes, advice"},
    {"mkmodel", kvt_cmd_mkmodel, "write a random-weight GGUF model (llama or qwen2) for tests and demos"},
    {"quantize", kvt_cmd_quantize, "rewrite an F32/F16/BF16 GGUF with its weights in q8_0, q4_0, q4_1, q5_0, q5_1, ..."},
};

static void usage(FILE *f) {
    fprintf(f,
            "kvtier %s - LLM inference with a tiered, reusable KV cache\n\n"
            "usage: kvtier <command> [options]\n"
            "       kvtier [run options]   (run is the default job: kvtier -m MODEL -p PROMPT)\n\ncommands:\n",
            KVT_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f,
            "\n`kvtier <command> --help` explains every option of a command.\n"
            "Environment: KVT_LOG=0..3 sets log verbosity (error, warning, info, debug); every option of\n"
            "run and serve can also be set as KVTIER_<NAME> (e.g. KVTIER_MODEL, KVTIER_CTX_SIZE,\n"
            "KVTIER_PORT), the command line winning.\n");
}

int kvt_cli_main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (kvt_cli_is_help(argv[1]) || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("kvtier %s\n", KVT_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    /* `kvtier -m M -p hi`: options without a command are run's, the default job (as llama-cli) */
    if (argv[1][0] == '-') return kvt_cmd_run(argc, argv);
    fprintf(stderr, "kvtier: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}

int kvt_cli_is_help(const char *arg) { return !strcmp(arg, "-h") || !strcmp(arg, "--help"); }

long kvt_cli_parse_long(const char *opt, const char *val, long min, long max) {
    char *end;
    errno = 0;
    long v = strtol(val, &end, 10);
    if (errno || end == val || *end || v < min || v > max) {
        fprintf(stderr, "kvtier: %s expects an integer in [%ld, %ld], got '%s'\n", opt, min, max, val);
        return -1;
    }
    return v;
}

double kvt_cli_parse_double(const char *opt, const char *val) {
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    if (errno || end == val || *end || !isfinite(v)) {
        fprintf(stderr, "kvtier: %s expects a number, got '%s'\n", opt, val);
        return NAN;
    }
    return v;
}

const char *kvt_cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "kvtier: option %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

/* Parses a byte size: a number with an optional K/M/G/T suffix (powers of 1024). */
int kvt_cli_parse_bytes(const char *opt, const char *v, uint64_t *out) {
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    double mult = 1;
    switch (*end) {
    case 'k': case 'K': mult = 1024.0; end++; break;
    case 'm': case 'M': mult = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'b' || *end == 'B') end++;
    if (errno || end == v || *end || !(d >= 0) || d * mult > 1e18) {
        fprintf(stderr, "kvtier: %s expects a size like 512M or 4G, got '%s'\n", opt, v);
        return -1;
    }
    *out = (uint64_t)(d * mult);
    return 0;
}

/* ---- table-driven options --------------------------------------------------------- */

#define OPT_COLUMN 26     /* --help: where the explanations start */
#define ENV_PREFIX "KVTIER_"
#define ENV_NAME_MAX 64
#define MAX_OPTS 128      /* options of one command, aliases included */
#define LONG_ID_BASE 256  /* getopt_long's value for a long-only option: past every char */

/* $KVTIER_<NAME> for a long option name. */
static void env_name(const char *name, char *out, size_t cap) {
    size_t o = snprintf(out, cap, "%s", ENV_PREFIX);
    for (const char *p = name; *p && o + 1 < cap; p++)
        out[o++] = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
    out[o] = 0;
}

void kvt_cli_print_opts(FILE *f, const kvt_cli_section *secs, size_t n_secs) {
    for (size_t si = 0; si < n_secs; si++) {
        if (secs[si].title) fprintf(f, "\n%s:\n", secs[si].title);
        for (size_t i = 0; i < secs[si].n; i++) {
            const kvt_cli_opt *o = &secs[si].opts[i];
            char left[128];
            int l = snprintf(left, sizeof left, "  %s%c%s--%s%s%s%s%s", o->short_name ? "-" : "",
                             o->short_name ? o->short_name : ' ', o->short_name ? ", " : "", o->name,
                             o->alias ? ", --" : "", o->alias ? o->alias : "", o->arg ? " " : "", o->arg ? o->arg : "");
            if (!o->short_name) memmove(left + 2, left + 3, strlen(left + 3) + 1), l--; /* no "- " for a long-only */
            fputs(left, f);
            const char *h = o->help;
            if (l + 1 > OPT_COLUMN) fprintf(f, "\n%*s", OPT_COLUMN, "");
            else fprintf(f, "%*s", OPT_COLUMN - l, "");
            for (; *h; h++) {
                fputc(*h, f);
                if (*h == '\n') fprintf(f, "%*s", OPT_COLUMN, "");
            }
            if (!(o->flags & KVT_CLI_NO_ENV)) {
                char env[ENV_NAME_MAX];
                env_name(o->name, env, sizeof env);
                fprintf(f, " [$%s]", env);
            }
            fputc('\n', f);
        }
    }
    fprintf(f, "  -h, --help%*sthis help\n", OPT_COLUMN - 12, "");
}

/* Whether an environment value turns a switch on: anything but "", 0, false, no, off. */
static int env_true(const char *v) {
    return *v && strcmp(v, "0") && strcasecmp(v, "false") && strcasecmp(v, "no") && strcasecmp(v, "off");
}

int kvt_cli_parse(const char *cmd, int argc, char **argv, const kvt_cli_section *secs, size_t n_secs,
                  kvt_cli_handler fn, void *ctx) {
    const kvt_cli_opt *rows[MAX_OPTS];
    struct option longs[2 * MAX_OPTS + 2];
    char shorts[3 * MAX_OPTS + 4] = ":h"; /* leading ':': a missing value is reported as ':', not '?' */
    size_t n_rows = 0, n_long = 0, n_short = 2;
    for (size_t si = 0; si < n_secs; si++)
        for (size_t i = 0; i < secs[si].n && n_rows < MAX_OPTS; i++) {
            const kvt_cli_opt *o = &secs[si].opts[i];
            int has = o->arg ? required_argument : no_argument;
            int val = o->short_name ? o->short_name : LONG_ID_BASE + (int)n_rows;
            longs[n_long++] = (struct option){o->name, has, NULL, val};
            if (o->alias) longs[n_long++] = (struct option){o->alias, has, NULL, val};
            if (o->short_name) {
                shorts[n_short++] = o->short_name;
                if (o->arg) shorts[n_short++] = ':';
            }
            rows[n_rows++] = o;
        }
    longs[n_long++] = (struct option){"help", no_argument, NULL, 'h'};
    longs[n_long] = (struct option){0, 0, 0, 0};
    shorts[n_short] = 0;

    /* getopt_long knows one-letter short options only, and would read llama.cpp's
     * -np 4 as -n p: such two-letter ones are rewritten to their long names first */
    static const char *const two_letter[][2] = {{"-np", "--parallel"}, {"-ngl", "--n-gpu-layers"}};
    char **av = kvt_xcalloc((size_t)argc + 1, sizeof *av);
    for (int i = 0; i < argc; i++) {
        av[i] = argv[i];
        for (size_t k = 0; i && k < KVT_ARRAY_LEN(two_letter); k++)
            if (!strcmp(argv[i], two_letter[k][0])) av[i] = (char *)two_letter[k][1];
    }
    unsigned char given[MAX_OPTS] = {0};
    int ret = 0;
    optind = 0; /* glibc: 0 re-initialises getopt, so each parse starts afresh */
    opterr = 0; /* kvtier prints its own messages, naming the command */
    for (;;) {
        int li = -1;
        int c = getopt_long(argc, av, shorts, longs, &li);
        if (c == -1) break;
        if (c == 'h') {
            ret = KVT_CLI_PARSE_HELP;
            break;
        }
        if (c == '?' || c == ':') {
            /* a long option (or one given a value it does not take) is the argument just read; a short
             * one may sit inside a cluster (-xm), so optopt names it */
            const char *what = av[optind - 1];
            char one[3] = {'-', (char)optopt, 0};
            if (optopt > 0 && optopt < LONG_ID_BASE && strncmp(what, "--", 2)) what = one;
            if (c == '?') fprintf(stderr, "kvtier %s: unknown option '%s' (see kvtier %s --help)\n", cmd, what, cmd);
            else fprintf(stderr, "kvtier %s: option '%s' needs a value\n", cmd, what);
            ret = KVT_CLI_PARSE_USAGE;
            break;
        }
        size_t r = 0;
        if (c >= LONG_ID_BASE) r = (size_t)(c - LONG_ID_BASE);
        else
            while (r < n_rows && rows[r]->short_name != c) r++;
        char flag[ENV_NAME_MAX + 4];
        if (li >= 0) snprintf(flag, sizeof flag, "--%s", longs[li].name);
        else snprintf(flag, sizeof flag, "-%c", c);
        for (size_t k = 0; k < n_rows; k++) given[k] |= rows[k]->id == rows[r]->id;
        if (fn(ctx, rows[r]->id, rows[r]->arg ? optarg : NULL, flag)) {
            ret = KVT_CLI_PARSE_USAGE;
            break;
        }
    }
    if (!ret && optind < argc) {
        fprintf(stderr, "kvtier %s: unexpected argument '%s' (options start with - or --)\n", cmd, av[optind]);
        ret = KVT_CLI_PARSE_USAGE;
    }
    for (size_t r = 0; !ret && r < n_rows; r++) {
        if (given[r] || (rows[r]->flags & KVT_CLI_NO_ENV)) continue;
        char env[ENV_NAME_MAX], flag[ENV_NAME_MAX + 1];
        env_name(rows[r]->name, env, sizeof env);
        const char *v = getenv(env);
        if (!v) continue;
        for (size_t k = r; k < n_rows; k++) given[k] |= rows[k]->id == rows[r]->id;
        snprintf(flag, sizeof flag, "$%s", env);
        if (!rows[r]->arg && !env_true(v)) continue;
        if (fn(ctx, rows[r]->id, rows[r]->arg ? v : NULL, flag)) ret = KVT_CLI_PARSE_USAGE;
    }
    free(av);
    return ret;
}

enum {
    CACHE_DISK = KVT_CLI_CACHE_ID_BASE,
    CACHE_DISK_SIZE,
    CACHE_ZSTD,
    CACHE_ADMIT,
    CACHE_ADMIT_ALL,
    CACHE_LIVE_WINDOW,
    CACHE_WAIT_MS,
    CACHE_NO_MAC,
    CACHE_REMOTE,
    CACHE_REMOTE_KEY,
    CACHE_REMOTE_SIZE,
    CACHE_REMOTE_TTL,
    CACHE_REMOTE_TIMEOUT,
    CACHE_WRITE_THROUGH,
    CACHE_RESTORE,
};

static const kvt_cli_opt cache_opts[] = {
    {CACHE_DISK, 0, "kv-disk", NULL, "DIR",
     "T2: a persistent KV cache directory on local disk (survives\nrestarts; one process at a time)", 0},
    {CACHE_DISK_SIZE, 0, "kv-disk-size", NULL, "BYTES",
     "T2 budget (default 16G); the directory stays within it plus one segment", 0},
    {CACHE_ZSTD, 0, "kv-disk-zstd", NULL, NULL, "compress disk records with zstd (lossless)", 0},
    {CACHE_ADMIT, 0, "kv-disk-admit", NULL, "POLICY",
     "which blocks leaving RAM go to disk: all (default: inactive\nKV is kept, never discarded, while the disk has "
     "room) or reused\n(blocks used in the last --kv-disk-live-window seconds always go;\nolder ones only if they were "
     "seen twice)", 0},
    {CACHE_LIVE_WINDOW, 0, "kv-disk-live-window", NULL, "SECONDS", "with --kv-disk-admit reused (default 600)", 0},
    {CACHE_ADMIT_ALL, 0, "kv-disk-admit-all", NULL, NULL, "same as --kv-disk-admit all", 0},
    {CACHE_WAIT_MS, 0, "kv-disk-wait-ms", NULL, "MS",
     "back-pressure: how long eviction waits for the disk writer\nbefore a block is dropped and counted (default 5000)", 0},
    {CACHE_NO_MAC, 0, "kv-disk-no-mac", NULL, NULL,
     "do not sign disk records with the directory's key (default: each\nrecord carries a keyed MAC and a forged or "
     "altered one is never\nserved); CRCs still catch accidents", 0},
    {CACHE_REMOTE, 0, "kv-remote", NULL, "URL",
     "T3: a KV store shared by every node on one Redis/Valkey:\nredis://[user:pass@]host:port[/db] or unix:///path "
     "(README \"Shared tier\")", 0},
    {CACHE_REMOTE_KEY, 0, "kv-remote-key-file", NULL, "FILE",
     "T3's MAC key, required with --kv-remote: 32 random bytes,\nmode 0600, the same file on every node; values that "
     "do not verify are misses", 0},
    {CACHE_REMOTE_SIZE, 0, "kv-remote-size", NULL, "BYTES",
     "T3 soft budget (default 4G): capacity and stats; Redis's maxmemory\npolicy does the evicting", 0},
    {CACHE_REMOTE_TTL, 0, "kv-remote-ttl", NULL, "SECONDS", "T3 values expire after this long (default: never; SET ... EX)",
     0},
    {CACHE_REMOTE_TIMEOUT, 0, "kv-remote-timeout-ms", NULL, "MS",
     "T3 reads give up after this long per request (default 250):\na slow or absent Redis costs misses, never a stuck "
     "request", 0},
    {CACHE_WRITE_THROUGH, 0, "write-through", NULL, NULL, "write each new block to disk (and T3) as soon as it is computed", 0},
    {CACHE_RESTORE, 0, "restore", NULL, "MODE",
     "disk blocks: auto (read only where faster than recomputing,\nmeasured), always, never (default auto)", 0},
};
const kvt_cli_section kvt_cli_cache_section = {"disk and remote tiers", cache_opts, KVT_ARRAY_LEN(cache_opts)};

int kvt_cli_cache_opt(int id, const char *v, const char *flag, kvt_cache_params *cp) {
    char *end;
    switch (id) {
    case CACHE_DISK: cp->disk_dir = v; return 0;
    case CACHE_DISK_SIZE: return kvt_cli_parse_bytes(flag, v, &cp->disk_bytes);
    case CACHE_ZSTD: cp->disk_zstd = 1; return 0;
    case CACHE_ADMIT_ALL: cp->disk_admit = KVT_ADMIT_ALL; return 0;
    case CACHE_ADMIT:
        if (!strcmp(v, "all")) cp->disk_admit = KVT_ADMIT_ALL;
        else if (!strcmp(v, "reused")) cp->disk_admit = KVT_ADMIT_REUSED;
        else {
            fprintf(stderr, "kvtier: %s must be all or reused, not '%s'\n", flag, v);
            return -1;
        }
        return 0;
    case CACHE_LIVE_WINDOW:
        cp->admit_live_s = strtod(v, &end);
        if (end == v || *end || !(cp->admit_live_s >= 0)) {
            fprintf(stderr, "kvtier: %s expects seconds >= 0, got '%s'\n", flag, v);
            return -1;
        }
        return 0;
    case CACHE_WAIT_MS: {
        long ms = kvt_cli_parse_long(flag, v, 0, 600000);
        if (ms < 0) return -1;
        cp->disk_put_wait_ms = (uint32_t)ms;
        return 0;
    }
    case CACHE_NO_MAC: cp->disk_no_mac = 1; return 0;
    case CACHE_REMOTE: cp->remote_url = v; return 0;
    case CACHE_REMOTE_KEY: cp->remote_key_file = v; return 0;
    case CACHE_REMOTE_SIZE:
        if (kvt_cli_parse_bytes(flag, v, &cp->remote_bytes)) return -1;
        if (!cp->remote_bytes) {
            fprintf(stderr, "kvtier: %s must be > 0\n", flag);
            return -1;
        }
        return 0;
    case CACHE_REMOTE_TTL: {
        long ttl = kvt_cli_parse_long(flag, v, 0, INT32_MAX);
        if (ttl < 0) return -1;
        cp->remote_ttl_s = (uint32_t)ttl;
        return 0;
    }
    case CACHE_REMOTE_TIMEOUT: {
        long ms = kvt_cli_parse_long(flag, v, 1, 600000);
        if (ms < 0) return -1;
        cp->remote_timeout_ms = (uint32_t)ms;
        return 0;
    }
    case CACHE_WRITE_THROUGH: cp->write_through = 1; return 0;
    case CACHE_RESTORE:
        if (!strcmp(v, "auto")) cp->restore = KVT_RESTORE_AUTO;
        else if (!strcmp(v, "always")) cp->restore = KVT_RESTORE_ALWAYS;
        else if (!strcmp(v, "never")) cp->restore = KVT_RESTORE_NEVER;
        else {
            fprintf(stderr, "kvtier: %s must be auto, always or never, not '%s'\n", flag, v);
            return -1;
        }
        return 0;
    default: return -1;
    }
}

enum { KV_TYPE = KVT_CLI_KV_ID_BASE, KV_F32 };

static const kvt_cli_opt kv_opts[] = {
    {KV_TYPE, 0, "kv-type", NULL, "TYPE",
     "element type of the KV cache in every tier: f16 (default), f32,\nor q8_0 (34 bytes per 32 values, about half of "
     "f16: more sessions\nper byte, at a small cost in logit accuracy; needs a head_dim that\nis a multiple of 32). "
     "Cached blocks of one type never serve another.", 0},
    {KV_F32, 0, "kv-f32", NULL, NULL, "same as --kv-type f32", 0},
};
const kvt_cli_section kvt_cli_kv_section = {"KV type", kv_opts, KVT_ARRAY_LEN(kv_opts)};

int kvt_cli_kv_opt(int id, const char *v, const char *flag, kvt_kv_dtype *dt) {
    if (id == KV_F32) {
        *dt = KVT_KV_F32;
        return 0;
    }
    if (kvt_kv_dtype_parse(v, dt)) {
        fprintf(stderr, "kvtier: %s must be f16, f32 or q8_0, not '%s'\n", flag, v);
        return -1;
    }
    return 0;
}

void kvt_cli_kv_type_help(FILE *f) {
    fprintf(f, "  --kv-type TYPE      element type of the KV cache in every tier: f16 (default), f32,\n"
               "                      or q8_0 (34 bytes per 32 values, about half of f16: more sessions\n"
               "                      per byte, at a small cost in logit accuracy; needs a head_dim that\n"
               "                      is a multiple of 32). Cached blocks of one type never serve another.\n"
               "  --kv-f32            same as --kv-type f32\n");
}

int kvt_cli_kv_type_flag(int argc, char **argv, int *i, kvt_kv_dtype *dt) {
    const char *a = argv[*i], *v;
    if (!strcmp(a, "--kv-f32")) {
        *dt = KVT_KV_F32;
        return 1;
    }
    if (strcmp(a, "--kv-type")) return 0;
    if (!(v = kvt_cli_value(argc, argv, i))) return -1;
    if (kvt_kv_dtype_parse(v, dt)) {
        fprintf(stderr, "kvtier: --kv-type must be f16, f32 or q8_0, not '%s'\n", v);
        return -1;
    }
    return 1;
}

void kvt_cli_print_capacity(FILE *f, const char *who, const kvt_cache *c, int32_t session_tokens) {
    static const char *const what[KVT_TIER_COUNT] = {"T0 active", "T1 RAM", "T2 disk", "T3 remote"};
    uint64_t tok[KVT_TIER_COUNT];
    kvt_cache_tier_capacity(c, tok);
    fprintf(f, "%s: KV capacity", who);
    for (int t = 0; t < KVT_TIER_COUNT; t++) {
        if (!tok[t]) continue;
        fprintf(f, "%s %s %llu tokens (%.1f sessions of %d)", t ? ";" : "", what[t], (unsigned long long)tok[t],
                session_tokens > 0 ? (double)tok[t] / session_tokens : 0.0, session_tokens);
    }
    fputc('\n', f);
}

long kvt_cli_default_ctx(long n_ctx_train) {
    if (n_ctx_train <= KVT_CLI_DEFAULT_CTX_CAP) return n_ctx_train;
    kvt_log(KVT_LOG_INFO, "context %d tokens (the model was trained for %ld; --ctx N to change)",
            KVT_CLI_DEFAULT_CTX_CAP, n_ctx_train);
    return KVT_CLI_DEFAULT_CTX_CAP;
}

int kvt_cli_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > KVT_CLI_MAX_THREADS ? KVT_CLI_MAX_THREADS : (int)n;
}

void kvt_cli_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20) fprintf(f, "\\u%04x", *p);
            else fputc(*p, f);
        }
    }
    fputc('"', f);
}
