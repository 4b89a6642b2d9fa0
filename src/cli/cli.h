/* The `kvtier` command line: a dispatcher (cli.c) and one function per
 * subcommand, each in the cli_*.c file of its area. Subcommands print their own
 * --help and return a process exit code (0 ok, 1 failure, 2 usage error). */
#ifndef KVT_CLI_H
#define KVT_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "kvtier.h"
#include <stdint.h>

int kvt_cli_main(int argc, char **argv);

int kvt_cmd_info(int argc, char **argv);     /* cli_model.c */
int kvt_cmd_mkmodel(int argc, char **argv);  /* cli_model.c */
int kvt_cmd_tokenize(int argc, char **argv); /* cli_tokenize.c */
int kvt_cmd_eval(int argc, char **argv);     /* cli_run.c */
int kvt_cmd_run(int argc, char **argv);      /* cli_run.c */
int kvt_cmd_cache(int argc, char **argv);    /* cli_cache.c */
int kvt_cmd_serve(int argc, char **argv);    /* cli_serve.c */
int kvt_cmd_lint(int argc, char **argv);     /* cli_lint.c */
int kvt_cmd_quantize(int argc, char **argv); /* cli_quantize.c */


/* Shared helpers for subcommands. */
/* True if argv[i] is -h or --help. */
int kvt_cli_is_help(const char *arg);
/* Parses a positive integer option value; prints an error naming opt and returns -1 if bad. */
long kvt_cli_parse_long(const char *opt, const char *val, long min, long max);
/* Parses a float option value; prints an error and returns NAN if bad. */
double kvt_cli_parse_double(const char *opt, const char *val);
/* Parses a byte size such as 512M or 4G (K/M/G/T = powers of 1024) into *out;
 * prints an error naming opt and returns -1 if bad. */
int kvt_cli_parse_bytes(const char *opt, const char *val, uint64_t *out);
/* Fetches the value following option argv[*i]; prints an error and returns NULL if missing. */
const char *kvt_cli_value(int argc, char **argv, int *i);

/* Worker threads by default: the online CPUs, at most KVT_CLI_MAX_THREADS. */
#define KVT_CLI_MAX_THREADS 512
int kvt_cli_default_threads(void);

/* Writes s as a JSON string literal (quotes and escapes included). */
void kvt_cli_json_string(FILE *f, const char *s);

/* Context length when --ctx is not given: the model's training context, capped
 * at KVT_CLI_DEFAULT_CTX_CAP (a 128k-context model would otherwise reserve KV
 * pages for 128k tokens per sequence); logs when it caps. */
#define KVT_CLI_DEFAULT_CTX_CAP 8192
long kvt_cli_default_ctx(long n_ctx_train);

/* Prints what each tier holds for the loaded model: tokens, and sessions of
 * session_tokens (the context), e.g. for the start-up line. */
void kvt_cli_print_capacity(FILE *f, const char *who, const kvt_cache *c, int32_t session_tokens);

/* ---- table-driven options (run, serve) ----------------------------------------
 * One table per command parses its command line with getopt_long (so
 * --opt=value works and an unknown option is named) and writes its --help,
 * so every flag is explained. Every option can also come from the environment
 * as KVTIER_<NAME> (the long name upper-cased, '-' as '_': --ctx-size is
 * $KVTIER_CTX_SIZE); the command line wins over the environment. */

enum { KVT_CLI_NO_ENV = 1 }; /* kvt_cli_opt.flags: no environment variable (the command reads its own) */

typedef struct {
    int id;               /* what the command's handler switches on; > 0, unique within a command */
    char short_name;      /* 'm' for -m, or 0 */
    const char *name;     /* the long name, without "--" */
    const char *alias;    /* a second long name (llama.cpp's spelling), or NULL */
    const char *arg;      /* the value's name in --help ("N", "FILE"); NULL: a switch */
    const char *help;     /* the explanation; '\n' starts a continuation line */
    int flags;            /* KVT_CLI_NO_ENV */
} kvt_cli_opt;

typedef struct {
    const char *title;    /* heading printed above the section in --help, or NULL */
    const kvt_cli_opt *opts;
    size_t n;
} kvt_cli_section;

/* Called once per option: first those on the command line, in order, then,
 * for each option the command line did not give, its environment variable if
 * set. flag names where the value came from ("--port", "$KVTIER_PORT") for
 * messages; val is NULL for a switch. Returns 0, or -1 after printing why. */
typedef int (*kvt_cli_handler)(void *ctx, int id, const char *val, const char *flag);

#define KVT_CLI_PARSE_HELP 1  /* kvt_cli_parse: -h/--help was given */
#define KVT_CLI_PARSE_USAGE 2 /* kvt_cli_parse: a usage error, already printed */

/* Parses argv[1..argc) of command cmd ("run") against the sections' options
 * with getopt_long. llama.cpp's two-letter short options -np and -ngl are
 * rewritten to --parallel and --n-gpu-layers first. Positional arguments and
 * unknown options are usage errors naming them. Returns 0, KVT_CLI_PARSE_HELP
 * or KVT_CLI_PARSE_USAGE (after printing why). argv is not modified. Not
 * thread-safe: getopt_long keeps its state in globals. */
int kvt_cli_parse(const char *cmd, int argc, char **argv, const kvt_cli_section *secs, size_t n_secs,
                  kvt_cli_handler fn, void *ctx);
/* Writes the sections' --help lines, each with its environment variable, and -h. */
void kvt_cli_print_opts(FILE *f, const kvt_cli_section *secs, size_t n_secs);

/* The disk-tier options shared by run and serve (--kv-disk, --kv-disk-size,
 * --kv-disk-zstd, --kv-disk-admit[-all], --kv-disk-live-window,
 * --kv-disk-wait-ms, --kv-disk-no-mac, --write-through, --restore), ids from
 * KVT_CLI_CACHE_ID_BASE, and their handler: stores the value in cp. Returns
 * 0, or -1 after printing why. */
#define KVT_CLI_CACHE_ID_BASE 1000
extern const kvt_cli_section kvt_cli_cache_section;
int kvt_cli_cache_opt(int id, const char *val, const char *flag, kvt_cache_params *cp);
/* The KV dtype options (--kv-type, --kv-f32), ids from KVT_CLI_KV_ID_BASE. */
#define KVT_CLI_KV_ID_BASE 1100
extern const kvt_cli_section kvt_cli_kv_section;
int kvt_cli_kv_opt(int id, const char *val, const char *flag, kvt_kv_dtype *dt);
/* True for the ids of the two shared sections. */
#define KVT_CLI_IS_CACHE_ID(id) ((id) >= KVT_CLI_CACHE_ID_BASE && (id) < KVT_CLI_KV_ID_BASE)
#define KVT_CLI_IS_KV_ID(id) ((id) >= KVT_CLI_KV_ID_BASE && (id) < KVT_CLI_KV_ID_BASE + 100)

/* eval's KV dtype flags (a hand-written loop): --kv-type f16|f32|q8_0 and its
 * older alias --kv-f32. If argv[*i] is one of them, stores the dtype in *dt
 * (advancing *i past a value) and returns 1; returns 0 for other arguments and
 * -1 (after printing why) for a bad value. */
int kvt_cli_kv_type_flag(int argc, char **argv, int *i, kvt_kv_dtype *dt);
/* Prints the help lines of those flags. */
void kvt_cli_kv_type_help(FILE *f);

#endif

/* Path of the model used when a command gets no -m: $KVT_DEFAULT_MODEL if set,
 * else a random-weight llama that kvtier generates once into
 * $XDG_CACHE_HOME/kvtier (or ~/.cache/kvtier). Logs which model it is and that
 * its weights are random. Returns 0, or -1 after printing why it failed. */
int kvt_default_model_path(char *buf, size_t cap);
