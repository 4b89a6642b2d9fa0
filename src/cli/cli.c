/* `kvtier` subcommand dispatcher and option-parsing helpers shared by cli_*.c. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
};

static void usage(FILE *f) {
    fprintf(f,
            "kvtier %s - LLM inference with a tiered, reusable KV cache\n\n"
            "usage: kvtier <command> [options]\n\ncommands:\n",
            KVT_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f,
            "\n`kvtier <command> --help` explains every option of a command.\n"
            "Environment: KVT_LOG=0..3 sets log verbosity (error, warning, info, debug).\n");
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

void kvt_cli_cache_flags_help(FILE *f) {
    fprintf(f, "  --kv-disk DIR       T2: a persistent KV cache directory on local disk (survives\n"
               "                      restarts; one process at a time)\n"
               "  --kv-disk-size BYTES  T2 budget (default 16G); the directory stays within it plus one segment\n"
               "  --kv-disk-zstd      compress disk records with zstd (lossless)\n"
               "  --kv-disk-admit POLICY  which blocks leaving RAM go to disk: all (default: inactive\n"
               "                      KV is kept, never discarded, while the disk has room) or reused\n"
               "                      (blocks used in the last --kv-disk-live-window seconds always go;\n"
               "                      older ones only if they were seen twice)\n"
               "  --kv-disk-live-window SECONDS  with --kv-disk-admit reused (default 600)\n"
               "  --kv-disk-admit-all same as --kv-disk-admit all\n"
               "  --kv-disk-wait-ms MS  back-pressure: how long eviction waits for the disk writer\n"
               "                      before a block is dropped and counted (default 5000)\n"
               "  --kv-disk-no-mac    do not sign disk records with the directory's key (default: each\n"
               "                      record carries a keyed MAC and a forged or altered one is never\n"
               "                      served); CRCs still catch accidents\n"
               "  --write-through     write each new block to disk as soon as it is computed\n"
               "  --restore MODE      disk blocks: auto (read only where faster than recomputing,\n"
               "                      measured), always, never (default auto)\n");
}

int kvt_cli_cache_flag(int argc, char **argv, int *i, kvt_cache_params *cp) {
    const char *a = argv[*i], *v;
    if (!strcmp(a, "--kv-disk")) {
        if (!(cp->disk_dir = kvt_cli_value(argc, argv, i))) return -1;
    } else if (!strcmp(a, "--kv-disk-size")) {
        if (!(v = kvt_cli_value(argc, argv, i)) || kvt_cli_parse_bytes(a, v, &cp->disk_bytes)) return -1;
    } else if (!strcmp(a, "--kv-disk-zstd")) {
        cp->disk_zstd = 1;
    } else if (!strcmp(a, "--kv-disk-admit-all")) {
        cp->disk_admit = KVT_ADMIT_ALL;
    } else if (!strcmp(a, "--kv-disk-admit")) {
        if (!(v = kvt_cli_value(argc, argv, i))) return -1;
        if (!strcmp(v, "all")) cp->disk_admit = KVT_ADMIT_ALL;
        else if (!strcmp(v, "reused")) cp->disk_admit = KVT_ADMIT_REUSED;
        else {
            fprintf(stderr, "kvtier: --kv-disk-admit must be all or reused, not '%s'\n", v);
            return -1;
        }
    } else if (!strcmp(a, "--kv-disk-live-window")) {
        char *end;
        if (!(v = kvt_cli_value(argc, argv, i))) return -1;
        cp->admit_live_s = strtod(v, &end);
        if (end == v || *end || !(cp->admit_live_s >= 0)) {
            fprintf(stderr, "kvtier: --kv-disk-live-window expects seconds >= 0, got '%s'\n", v);
            return -1;
        }
    } else if (!strcmp(a, "--kv-disk-wait-ms")) {
        char *end;
        if (!(v = kvt_cli_value(argc, argv, i))) return -1;
        unsigned long ms = strtoul(v, &end, 10);
        if (end == v || *end || ms > 600000) {
            fprintf(stderr, "kvtier: --kv-disk-wait-ms expects 0..600000, got '%s'\n", v);
            return -1;
        }
        cp->disk_put_wait_ms = (uint32_t)ms;
    } else if (!strcmp(a, "--kv-disk-no-mac")) {
        cp->disk_no_mac = 1;
    } else if (!strcmp(a, "--write-through")) {
        cp->write_through = 1;
    } else if (!strcmp(a, "--restore")) {
        if (!(v = kvt_cli_value(argc, argv, i))) return -1;
        if (!strcmp(v, "auto")) cp->restore = KVT_RESTORE_AUTO;
        else if (!strcmp(v, "always")) cp->restore = KVT_RESTORE_ALWAYS;
        else if (!strcmp(v, "never")) cp->restore = KVT_RESTORE_NEVER;
        else {
            fprintf(stderr, "kvtier: --restore must be auto, always or never, not '%s'\n", v);
            return -1;
        }
    } else {
        return 0;
    }
    return 1;
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
