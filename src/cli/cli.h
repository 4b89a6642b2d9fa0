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

/* The disk-tier flags shared by run and serve: --kv-disk, --kv-disk-size,
 * --kv-disk-zstd, --kv-disk-admit-all, --kv-disk-no-mac, --write-through, --restore. If argv[*i]
 * is one of them, stores it in cp (advancing *i past a value) and returns 1;
 * returns 0 for other arguments and -1 (after printing why) for a bad value. */
int kvt_cli_cache_flag(int argc, char **argv, int *i, kvt_cache_params *cp);
/* Prints the help lines of those flags. */
void kvt_cli_cache_flags_help(FILE *f);

/* The KV dtype flags of run, serve and eval: --kv-type f16|f32|q8_0 and its
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
