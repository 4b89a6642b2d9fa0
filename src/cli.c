/* `kvtier` subcommand dispatcher and option-parsing helpers shared by cli_*.c. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
