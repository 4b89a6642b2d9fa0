// SPDX-License-Identifier: MIT
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

#include <cjson/cJSON.h>

#include "api_audit.h"   /* --samplers: the server's parser of a request's "samplers" */
#include "json_strict.h" /* JSONL lines checked as the server checks bodies */
#include "common.h"      /* base utilities: logging, allocation, KVT_ARRAY_LEN */
#include "ops.h"
#include "kvtier.h"
#include "sampler.h"

const kvt_cli_command kvt_cli_commands[] = {
    {"run", kvt_cmd_run, kvt_usage_run,
     "generate a completion for a prompt (default job; no -m uses a generated model)"},
    {"serve", kvt_cmd_serve, kvt_usage_serve,
     "OpenAI-compatible HTTP server with continuous batching and cache reporting"},
    {"eval", kvt_cmd_eval, kvt_usage_eval,
     "print prompt tokens, top-5 logits per position and a greedy continuation as JSON"},
    {"info", kvt_cmd_info, kvt_usage_info,
     "describe a GGUF model: architecture, shapes, types, tokenizer, fingerprint, KV size"},
    {"tokenize", kvt_cmd_tokenize, kvt_usage_tokenize, "print the token ids of a text"},
    {"route", kvt_cmd_route, kvt_usage_route,
     "prefix-affinity HTTP router in front of several serve nodes (sessions, cached prefixes, load)"},
    {"cache", kvt_cmd_cache, kvt_usage_cache,
     "inspect or maintain a disk cache directory: stats, ls, verify, gc, clear"},
    {"rag", kvt_cmd_rag, kvt_usage_rag,
     "cache-aware RAG: index a corpus (BM25 over fixed context blocks), query it, prewarm a server"},
    {"lint", kvt_cmd_lint, kvt_usage_lint,
     "how cacheable a set of prompts is: shared prefixes, divergences, causes, advice"},
    {"mkmodel", kvt_cmd_mkmodel, kvt_usage_mkmodel,
     "write a random-weight GGUF model (any supported architecture) for tests and demos"},
    {"quantize", kvt_cmd_quantize, kvt_usage_quantize,
     "rewrite an F32/F16/BF16 GGUF with its weights in q8_0, q4_0..q5_1, iq4_nl, iq4_xs or a K-quant mix (q4_k_m, ...)"},
};
const size_t kvt_cli_n_commands = KVT_ARRAY_LEN(kvt_cli_commands);

void kvt_cli_usage(FILE *f) {
    fprintf(f,
            "kvtier %s - LLM inference with a tiered, reusable KV cache\n\n"
            "usage: kvtier <command> [options]\n"
            "       kvtier [run options]   (run is the default job: kvtier -m MODEL -p PROMPT)\n\ncommands:\n",
            KVT_VERSION);
    for (size_t i = 0; i < kvt_cli_n_commands; i++)
        fprintf(f, "  %-10s %s\n", kvt_cli_commands[i].name, kvt_cli_commands[i].summary);
    fprintf(f,
            "\n`kvtier <command> --help` explains every option of a command.\n"
            "  --version  print the version\n"
            "  --man      print the manual page (man(7) markup; installed as kvtier.1)\n"
            "Environment: KVT_LOG=0..3 sets log verbosity (error, warning, info, debug); every option of\n"
            "run and serve can also be set as KVTIER_<NAME> (e.g. KVTIER_MODEL, KVTIER_CTX_SIZE,\n"
            "KVTIER_PORT), the command line winning. KVT_Q8_ORDER=block (or --q8-order block) computes\n"
            "Q8_0 weights in llama.cpp's AMX order (one integer per block: its AMX build's logits, and\n"
            "prefill on AMX tiles) instead of its default x86 order (\"lanes\");\n"
            "KVT_OPS_VARIANT=scalar|avx2|avx512|amx picks the kernels (every one gives the same bits).\n");
}

/* KVT_Q8_ORDER and KVT_OPS_VARIANT change what runs: a value the kernels
 * would not take is an error, not a silent default (a valid one is applied,
 * as the kernels would on their own). */
static int check_kernel_env(void) {
    const char *q8 = getenv("KVT_Q8_ORDER"), *var = getenv("KVT_OPS_VARIANT");
    if (q8 && *q8 && kvt_ops_set_q8_order(q8)) {
        fprintf(stderr, "kvtier: KVT_Q8_ORDER must be lanes or block, not '%s'\n", q8);
        return -1;
    }
    if (var && *var && kvt_ops_force_variant(var)) {
        fprintf(stderr,
                "kvtier: KVT_OPS_VARIANT='%s' is not a kernel variant this CPU has (scalar, avx2, avx512, amx)\n", var);
        return -1;
    }
    return 0;
}

int kvt_cli_main(int argc, char **argv) {
    if (argc < 2) {
        kvt_cli_usage(stderr);
        return 2;
    }
    if (kvt_cli_is_help(argv[1]) || !strcmp(argv[1], "help")) {
        kvt_cli_usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("kvtier %s\n", KVT_VERSION);
        return 0;
    }
    if (!strcmp(argv[1], "--man")) return kvt_cli_man(stdout) ? 1 : 0;
    if (check_kernel_env()) return 2;
    for (size_t i = 0; i < kvt_cli_n_commands; i++)
        if (!strcmp(argv[1], kvt_cli_commands[i].name)) return kvt_cli_commands[i].fn(argc - 1, argv + 1);
    /* `kvtier -m M -p hi`: options without a command are run's, the default job (as llama-cli) */
    if (argv[1][0] == '-') return kvt_cmd_run(argc, argv);
    fprintf(stderr, "kvtier: unknown command '%s'\n\n", argv[1]);
    kvt_cli_usage(stderr);
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
int kvt_cli_bytes_value(const char *v, uint64_t *out) {
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    double mult = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mult = 1024.0;
        end++;
        break;
    case 'm':
    case 'M':
        mult = 1024.0 * 1024;
        end++;
        break;
    case 'g':
    case 'G':
        mult = 1024.0 * 1024 * 1024;
        end++;
        break;
    case 't':
    case 'T':
        mult = 1024.0 * 1024 * 1024 * 1024;
        end++;
        break;
    default: break;
    }
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'b' || *end == 'B') end++;
    if (errno || end == v || *end || !(d >= 0) || d * mult > 1e18) return -1;
    *out = (uint64_t)(d * mult);
    return 0;
}

int kvt_cli_parse_bytes(const char *opt, const char *v, uint64_t *out) {
    if (!kvt_cli_bytes_value(v, out)) return 0;
    fprintf(stderr, "kvtier: %s expects a size like 512M or 4G, got '%s'\n", opt, v);
    return -1;
}

/* ---- the option sections run and serve share ----------------------------------- */

#define MAX_WAIT_MS 600000 /* --kv-disk-wait-ms, --kv-remote-timeout-ms */

enum {
    CACHE_DISK = KVT_CLI_CACHE_ID_BASE,
    CACHE_DISK_SIZE,
    CACHE_ZSTD,
    CACHE_ADMIT,
    CACHE_ADMIT_ALL,
    CACHE_LIVE_WINDOW,
    CACHE_WAIT_MS,
    CACHE_NO_MAC,
    CACHE_SPACE_RETRY,
    CACHE_REMOTE,
    CACHE_REMOTE_KEY,
    CACHE_REMOTE_PASSWORD,
    CACHE_REMOTE_SIZE,
    CACHE_REMOTE_TTL,
    CACHE_REMOTE_TIMEOUT,
    CACHE_REMOTE_COMPRESS,
    CACHE_REMOTE_ZSTD_LEVEL,
    CACHE_REMOTE_CONNS,
    CACHE_REMOTE_RETRY,
    CACHE_WRITE_THROUGH,
    CACHE_RESTORE,
};

static const kvt_cli_opt cache_opts[] = {
    {CACHE_DISK, 0, "kv-disk", NULL, "DIR",
     "T2: a persistent KV cache directory on local disk (survives\nrestarts; one process at a time): a new or empty "
     "directory, or\none kvtier made; no symbolic link anywhere on its path",
     0, KVT_CLI_PLAIN},
    {CACHE_DISK_SIZE, 0, "kv-disk-size", NULL, "BYTES",
     "T2 budget (default 16G); the directory stays within it plus one segment", 0, KVT_CLI_ANY_BYTES},
    {CACHE_ZSTD, 0, "kv-disk-zstd", NULL, NULL, "compress disk records with zstd (lossless)", 0, KVT_CLI_PLAIN},
    {CACHE_ADMIT, 0, "kv-disk-admit", NULL, "POLICY",
     "which blocks leaving RAM go to disk: all (default: inactive\nKV is kept, never discarded, while the disk has "
     "room) or reused\n(blocks used in the last --kv-disk-live-window seconds always go;\nolder ones only if they were "
     "seen twice)",
     0, KVT_CLI_PLAIN},
    {CACHE_LIVE_WINDOW, 0, "kv-disk-live-window", NULL, "SECONDS", "with --kv-disk-admit reused (default 600)", 0,
     KVT_CLI_RANGE(KVT_CLI_NUM, 0, INFINITY)},
    {CACHE_ADMIT_ALL, 0, "kv-disk-admit-all", NULL, NULL, "same as --kv-disk-admit all", 0, KVT_CLI_PLAIN},
    {CACHE_WAIT_MS, 0, "kv-disk-wait-ms", NULL, "MS",
     "back-pressure: how long eviction waits for the disk writer\nbefore a block is dropped and counted (default 5000)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 0, MAX_WAIT_MS)},
    {CACHE_NO_MAC, 0, "kv-disk-no-mac", NULL, NULL,
     "do not sign disk records with the directory's key (default: each\nrecord carries a keyed MAC and a forged or "
     "altered one is never\nserved); CRCs still catch accidents",
     0, KVT_CLI_PLAIN},
    {CACHE_SPACE_RETRY, 0, "kv-disk-space-retry", NULL, "SECONDS",
     "when the disk fills up, T2 writes stop (reads go on) and the free\nspace is checked this often; writes resume "
     "once records fit\nagain (default 5)",
     KVT_CLI_MIN_OPEN, KVT_CLI_RANGE(KVT_CLI_NUM, 0, 3600)},
    {CACHE_REMOTE, 0, "kv-remote", NULL, "URL",
     "T3: a KV store shared by every node on one Redis/Valkey:\nredis://[user:pass@]host:port[/db] or unix:///path;\n"
     "or a Redis Cluster: redis-cluster://[user:pass@]host:port[,host:port...]\n[?replica_reads=yes] (a redis:// URL "
     "of a cluster node is found\nto be one at start). No TLS (rediss://)\n"
     "(docs/tiers.md \"T3: the shared tier on Redis\")",
     0, KVT_CLI_PLAIN},
    {CACHE_REMOTE_KEY, 0, "kv-remote-key-file", NULL, "FILE",
     "T3's MAC key, required with --kv-remote: 32 random bytes,\nmode 0600, the same file on every node; values that "
     "do not verify are misses",
     0, KVT_CLI_PLAIN},
    {CACHE_REMOTE_PASSWORD, 0, "kv-remote-password-file", NULL, "FILE",
     "Redis's password for T3, read from FILE (one line; mode 0600,\nnot a link) and sent with the URL's user, if "
     "any, on every\nconnection: keeps it out of ps and shell history (the URL then\nholds no password: "
     "redis://user@host:port)",
     0, KVT_CLI_PLAIN},
    {CACHE_REMOTE_SIZE, 0, "kv-remote-size", NULL, "BYTES",
     "T3 soft budget (default 4G): capacity and stats; Redis's maxmemory\npolicy does the evicting", 0,
     KVT_CLI_RANGE(KVT_CLI_BYTES, 1, 1e18)},
    {CACHE_REMOTE_TTL, 0, "kv-remote-ttl", NULL, "SECONDS",
     "T3 values expire after this long (default: never; SET ... EX)", 0, KVT_CLI_RANGE(KVT_CLI_INT, 0, INT32_MAX)},
    {CACHE_REMOTE_TIMEOUT, 0, "kv-remote-timeout-ms", NULL, "MS",
     "T3 reads give up after this long per request (default 250), plus\nthe time the values already read would take "
     "at 32 MB/s, so a large\nrestore that keeps arriving is not cut short; a silent or absent\nRedis costs misses, "
     "never a stuck request",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 1, MAX_WAIT_MS)},
    {CACHE_REMOTE_COMPRESS, 0, "kv-remote-compress", NULL, "CODEC",
     "how this node writes T3 values: none (default) or zstd (lossless;\nthe value's header names its codec, so "
     "every node reads both)",
     0, KVT_CLI_PLAIN},
    {CACHE_REMOTE_ZSTD_LEVEL, 0, "kv-remote-zstd-level", NULL, "N",
     "zstd level for T3 writes: -7..-1 (fast) or 1..19 (default 1:\ndocs/tiers.md has the measurements)", 0,
     KVT_CLI_RANGE(KVT_CLI_INT, -7, 19)},
    {CACHE_REMOTE_CONNS, 0, "kv-remote-conns", NULL, "N",
     "T3 read connections, one thread each, that split a restore's\nGETs and check values in parallel (1..16, "
     "default 4)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 1, 16)},
    {CACHE_REMOTE_RETRY, 0, "kv-remote-retry-size", NULL, "BYTES",
     "T3 writes made while Redis is unreachable are held in memory up\nto this size and sent when it answers again "
     "(default 64M; 0:\ndropped); past it the newest are dropped and counted",
     0, KVT_CLI_ANY_BYTES},
    {CACHE_WRITE_THROUGH, 0, "write-through", NULL, NULL,
     "write each new block to disk (and T3) as soon as it is computed", 0, KVT_CLI_PLAIN},
    {CACHE_RESTORE, 0, "restore", NULL, "MODE",
     "disk blocks: auto (read only where faster than recomputing,\nmeasured), always, never (default auto)", 0,
     KVT_CLI_PLAIN},
};
const kvt_cli_section kvt_cli_cache_section = {"disk and remote tiers", cache_opts, KVT_ARRAY_LEN(cache_opts)};

int kvt_cli_cache_opt(int id, const kvt_cli_arg *a, kvt_cache_params *cp) {
    const char *v = a->str, *flag = a->flag;
    switch (id) {
    case CACHE_DISK: cp->disk_dir = v; return 0;
    case CACHE_DISK_SIZE: cp->disk_bytes = a->bytes; return 0;
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
    case CACHE_LIVE_WINDOW: cp->admit_live_s = a->d; return 0;
    case CACHE_WAIT_MS: cp->disk_put_wait_ms = (uint32_t)a->i; return 0;
    case CACHE_NO_MAC: cp->disk_no_mac = 1; return 0;
    case CACHE_SPACE_RETRY: cp->disk_space_retry_s = a->d; return 0;
    case CACHE_REMOTE: cp->remote_url = v; return 0;
    case CACHE_REMOTE_KEY: cp->remote_key_file = v; return 0;
    case CACHE_REMOTE_PASSWORD: cp->remote_password_file = v; return 0;
    case CACHE_REMOTE_SIZE: cp->remote_bytes = a->bytes; return 0;
    case CACHE_REMOTE_TTL: cp->remote_ttl_s = (uint32_t)a->i; return 0;
    case CACHE_REMOTE_TIMEOUT: cp->remote_timeout_ms = (uint32_t)a->i; return 0;
    case CACHE_REMOTE_COMPRESS:
        if (!strcmp(v, "zstd") || !strcmp(v, "none")) {
            cp->remote_zstd = !strcmp(v, "zstd");
            return 0;
        }
        fprintf(stderr, "kvtier: %s must be zstd or none, not '%s'\n", a->flag, v);
        return -1;
    case CACHE_REMOTE_ZSTD_LEVEL:
        if (a->i == 0) { /* negative levels are zstd's fast ones; 0 would mean its default */
            fprintf(stderr, "kvtier: %s expects -7..-1 or 1..19, got '%s'\n", a->flag, v);
            return -1;
        }
        cp->remote_zstd_level = (int)a->i;
        return 0;
    case CACHE_REMOTE_CONNS: cp->remote_read_conns = (uint32_t)a->i; return 0;
    case CACHE_REMOTE_RETRY: /* 0 on the command line: hold nothing (0 in the params means the default) */
        cp->remote_retry_bytes = a->bytes ? (int64_t)KVT_MIN(a->bytes, (uint64_t)INT64_MAX) : -1;
        return 0;
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

enum { KV_TYPE = KVT_CLI_KV_ID_BASE, KV_F32, KV_Q8_ORDER, KV_TYPE_K, KV_TYPE_V };

#define Q8_ORDER_HELP \
    "how Q8_0 weights are summed, for the whole process: lanes (default:\n" \
    "llama.cpp's x86 order without AMX, which its usual references use) or\n" \
    "block (llama.cpp's AMX build: one integer per 32-weight block; on CPUs\n" \
    "with AMX kvtier's prefill then runs on AMX tiles, about 2x faster).\n" \
    "The two differ in the last digits of the logits; cached blocks made\n" \
    "in one order never serve the other. Other weight types are unaffected."

static const kvt_cli_opt kv_opts[] = {
    {KV_TYPE, 0, "kv-type", NULL, "TYPE",
     "element type of the KV cache in every tier: f16 (default), f32,\nor q8_0 (34 bytes per 32 values, about half of "
     "f16: more sessions\nper byte, at a small cost in logit accuracy; needs a head_dim that\nis a multiple of 32). "
     "Cached blocks of one type never serve another.",
     0, KVT_CLI_PLAIN},
    {KV_F32, 0, "kv-f32", NULL, NULL, "same as --kv-type f32", 0, KVT_CLI_PLAIN},
    {KV_TYPE_K, 0, "cache-type-k", NULL, "TYPE",
     "llama.cpp's name (also -ctk): the same as --kv-type. Keys and\nvalues share one type, so -ctk and -ctv must agree",
     0, KVT_CLI_PLAIN},
    {KV_TYPE_V, 0, "cache-type-v", NULL, "TYPE", "llama.cpp's name (also -ctv): the same as --kv-type", 0,
     KVT_CLI_PLAIN},
    {KV_Q8_ORDER, 0, "q8-order", NULL, "ORDER", Q8_ORDER_HELP, 0, KVT_CLI_PLAIN},
};
const kvt_cli_section kvt_cli_kv_section = {"KV type and numerics", kv_opts, KVT_ARRAY_LEN(kv_opts)};

static int q8_order_arg(const char *flag, const char *v) {
    if (kvt_ops_set_q8_order(v) == 0) return 0;
    fprintf(stderr, "kvtier: %s must be lanes or block, not '%s'\n", flag, v);
    return -1;
}

/* One command line's -ctk and -ctv (a process parses one): the pages hold K and V in one type. */
static int kv_given[2], kv_type_given; /* -ctk, -ctv; --kv-type (or --kv-f32), which names both */
static kvt_kv_dtype kv_types[2];
static char kv_flags[2][32]; /* as given: "-ctk", "--cache-type-v", "$KVTIER_CACHE_TYPE_K" */

void kvt_cli_kv_notice(const char *cmd) {
    if (kv_given[0] == kv_given[1] || kv_type_given) return;
    int side = kv_given[1];
    if (kv_types[side] == KVT_KV_F16) return; /* the other side's f16 is llama.cpp's default too */
    fprintf(stderr,
            "kvtier %s: %s %s sets the %s' type too: kvtier keeps keys and values in one type (llama.cpp would "
            "keep the %s f16); give --kv-type f16 to keep both f16\n",
            cmd, kv_flags[side], kvt_kv_dtype_name(kv_types[side]), side ? "keys" : "values", side ? "keys" : "values");
}

int kvt_cli_kv_opt(int id, const kvt_cli_arg *a, kvt_kv_dtype *dt) {
    const char *v = a->str, *flag = a->flag;
    if (id == KV_F32) {
        *dt = KVT_KV_F32;
        kv_type_given = 1;
        return 0;
    }
    if (id == KV_Q8_ORDER) return q8_order_arg(flag, v);
    kvt_kv_dtype t;
    if (kvt_kv_dtype_parse(v, &t)) {
        fprintf(stderr, "kvtier: %s must be f16, f32 or q8_0, not '%s'\n", flag, v);
        return -1;
    }
    kv_type_given |= id == KV_TYPE;
    if (id == KV_TYPE_K || id == KV_TYPE_V) {
        int side = id == KV_TYPE_V;
        if (kv_given[!side] && kv_types[!side] != t) {
            fprintf(stderr,
                    "kvtier: %s %s differs from the %s type %s: kvtier keeps keys and values in one type; give "
                    "both the same, or --kv-type\n",
                    flag, v, side ? "key" : "value", kvt_kv_dtype_name(kv_types[!side]));
            return -1;
        }
        kv_given[side] = 1;
        kv_types[side] = t;
        snprintf(kv_flags[side], sizeof kv_flags[side], "%s", flag);
    }
    *dt = t;
    return 0;
}

void kvt_cli_kv_type_help(FILE *f) {
    fprintf(f,
            "  --kv-type TYPE      element type of the KV cache in every tier: f16 (default), f32,\n"
            "                      or q8_0 (34 bytes per 32 values, about half of f16: more sessions\n"
            "                      per byte, at a small cost in logit accuracy; needs a head_dim that\n"
            "                      is a multiple of 32). Cached blocks of one type never serve another.\n"
            "  --kv-f32            same as --kv-type f32\n");
    const char *h = Q8_ORDER_HELP;
    fprintf(f, "  --q8-order ORDER    ");
    for (; *h; h++) {
        fputc(*h, f);
        if (*h == '\n') fputs("                      ", f);
    }
    fputc('\n', f);
}

int kvt_cli_kv_type_flag(int argc, char **argv, int *i, kvt_kv_dtype *dt) {
    const char *a = argv[*i], *v;
    if (!strcmp(a, "--kv-f32")) {
        *dt = KVT_KV_F32;
        return 1;
    }
    if (!strcmp(a, "--q8-order")) {
        if (!(v = kvt_cli_value(argc, argv, i))) return -1;
        return q8_order_arg(a, v) ? -1 : 1;
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
    kvt_cache_capacity(c, tok);
    char line[512];
    size_t n = (size_t)snprintf(line, sizeof line, "%s: KV capacity", who);
    for (int t = 0; t < KVT_TIER_COUNT && n < sizeof line; t++) {
        if (!tok[t]) continue;
        n += (size_t)snprintf(line + n, sizeof line - n, "%s %s %llu tokens (%.1f sessions of %d)", t ? ";" : "",
                              what[t], (unsigned long long)tok[t],
                              session_tokens > 0 ? (double)tok[t] / session_tokens : 0.0, session_tokens);
    }
    if (f) {
        fprintf(f, "%s\n", line);
        return;
    }
    static const char *const key[KVT_TIER_COUNT] = {"t0_tokens", "t1_tokens", "t2_tokens", "t3_tokens"};
    kvt_log_field fl[KVT_TIER_COUNT + 1];
    size_t nf = 0;
    for (int t = 0; t < KVT_TIER_COUNT; t++)
        if (tok[t]) fl[nf++] = (kvt_log_field){key[t], KVT_LOG_UINT, NULL, (long long)tok[t], 0};
    fl[nf++] = (kvt_log_field){"session_tokens", KVT_LOG_INT, NULL, session_tokens, 0};
    kvt_log_fields(KVT_LOG_INFO, line, fl, nf, line);
}

int kvt_cli_chat_family(const char *cmd, const char *name, const char *model_template, kvt_chat_family *out) {
    if (name) {
        *out = kvt_chat_family_parse(name);
        return 0;
    }
    *out = model_template ? kvt_chat_detect(model_template) : KVT_CHAT_CHATML;
    if (*out != KVT_CHAT_UNKNOWN) return 0;
    /* serve alone has --jinja, which renders the template itself */
    fprintf(stderr,
            "kvtier %s: the model's tokenizer.chat_template is not one kvtier recognises, and chat rendered in "
            "another family's markup is a prompt the model was not trained on. %s the family it follows with "
            "--chat-template NAME (" KVT_CLI_CHAT_NAMES ")\n",
            cmd, strcmp(cmd, "serve") ? "Name" : "Render the template itself with --jinja, or name");
    return -1;
}

long kvt_cli_default_ctx(long n_ctx_train) {
    if (n_ctx_train <= KVT_CLI_DEFAULT_CTX_CAP) return n_ctx_train;
    kvt_logk(KVT_LOG_INFO, "ctx,ctx_train", "context %d tokens (the model was trained for %ld; --ctx N to change)",
             KVT_CLI_DEFAULT_CTX_CAP, n_ctx_train);
    return KVT_CLI_DEFAULT_CTX_CAP;
}

int kvt_cli_int_or(const kvt_cli_arg *a, const char *cmd, long special, const char *meaning, long min) {
    if (a->i == special || a->i >= min) return 0;
    fprintf(stderr, "kvtier %s: %s must be %ld (%s) or at least %ld, got '%s'\n", cmd, a->flag, special, meaning, min,
            a->str);
    return -1;
}

long kvt_cli_ctx(long given, long n_ctx_train) {
    if (given == KVT_CLI_CTX_MODEL) return n_ctx_train;
    return given ? given : kvt_cli_default_ctx(n_ctx_train);
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

void kvt_cli_json_number(FILE *f, double v, int precision) {
    if (isfinite(v)) fprintf(f, "%.*g", precision, v);
    else fputs("null", f);
}

kvt_model *kvt_cli_load_vocab(const char *what, const char *path) {
    kvt_model_params mp = kvt_model_default_params();
    mp.vocab_only = 1;
    kvt_model *m = NULL;
    if (kvt_model_load(path, mp, &m)) {
        fprintf(stderr, "kvtier %s: %s\n", what, kvt_errmsg());
        return NULL;
    }
    return m;
}

int kvt_cli_flash_attn(const char *cmd, const kvt_cli_arg *a) {
    const char *v = a->str;
    if (v && strcmp(v, "on") && strcmp(v, "off") && strcmp(v, "auto")) {
        fprintf(stderr, "kvtier %s: %s takes on, off or auto, got '%s'\n", cmd, a->flag, v);
        return -1;
    }
    if (v && !strcmp(v, "off"))
        fprintf(stderr, "kvtier %s: %s off is ignored: kvtier's attention is always fused\n", cmd, a->flag);
    return 0;
}

int kvt_cli_samplers(const char *cmd, const kvt_cli_arg *a, int32_t *n_steps, uint8_t *steps) {
    kvt_api_request *r = kvt_xcalloc(1, sizeof *r);
    kvt_api_error err = {0};
    int rc = kvt_api_parse_samplers_text(a->str, a->flag, r, &err);
    if (rc) fprintf(stderr, "kvtier %s: %s; got '%s'\n", cmd, err.message, a->str);
    else {
        *n_steps = r->n_sampler_steps;
        memcpy(steps, r->sampler_steps, KVT_SAMPLER_MAX_STEPS);
    }
    free(r);
    return rc ? -1 : 0;
}

struct cJSON *kvt_cli_json(const char *text, char *why, size_t cap) {
    kvt_json_report rep;
    if (kvt_json_check(text, strlen(text), NULL, &rep)) {
        snprintf(why, cap, "%s", rep.message);
        return NULL;
    }
    cJSON *j = cJSON_Parse(text);
    if (!j) snprintf(why, cap, "%s", "not JSON");
    return j;
}
