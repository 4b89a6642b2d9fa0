// SPDX-License-Identifier: MIT
/* The `kvtier` command line: a dispatcher (cli.c) and one function per
 * subcommand, each in the cli_*.c file of its area. Subcommands print their own
 * --help and return a process exit code (0 ok, 1 failure, 2 usage error). */
#ifndef KVT_CLI_H
#define KVT_CLI_H

#define STR_(x) #x
#define STR(x) STR_(x) /* a default's value in --help text */

#include <stddef.h>
#include <stdio.h>

#include "chat.h" /* the chat template families (model layer) the commands render with */
#include "kvtier.h"
#include <stdint.h>

int kvt_cli_main(int argc, char **argv);

int kvt_cmd_info(int argc, char **argv);     /* cli_model.c */
int kvt_cmd_mkmodel(int argc, char **argv);  /* cli_model.c */
int kvt_cmd_tokenize(int argc, char **argv); /* cli_tokenize.c */
int kvt_cmd_eval(int argc, char **argv);     /* cli_eval.c */
int kvt_cmd_run(int argc, char **argv);      /* cli_run.c */
int kvt_cmd_cache(int argc, char **argv);    /* cli_cache.c */
int kvt_cmd_serve(int argc, char **argv);    /* cli_serve.c */
int kvt_cmd_lint(int argc, char **argv);     /* cli_lint.c */
int kvt_cmd_rag(int argc, char **argv);      /* cli_rag.c */
int kvt_cmd_quantize(int argc, char **argv); /* cli_quantize.c */
int kvt_cmd_route(int argc, char **argv);    /* cli_route.c */


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
/* The same without a message: 0, or -1 if val is not a size up to 1e18 bytes. */
int kvt_cli_bytes_value(const char *val, uint64_t *out);
/* Fetches the value following option argv[*i]; prints an error and returns NULL if missing. */
const char *kvt_cli_value(int argc, char **argv, int *i);

/* Worker threads by default: the online CPUs, at most KVT_CLI_MAX_THREADS. */
#define KVT_CLI_MAX_THREADS 512
/* The tokenizer of the model at path (vocab_only: tensors may be absent), or
 * NULL after printing "kvtier WHAT: why" on stderr. */
kvt_model *kvt_cli_load_vocab(const char *what, const char *path);
int kvt_cli_default_threads(void);

/* Writes s as a JSON string literal (quotes and escapes included). */
void kvt_cli_json_string(FILE *f, const char *s);
/* Writes v as a JSON number with precision significant digits, or null when
 * it is NaN or infinite (JSON has no literal for them). */
void kvt_cli_json_number(FILE *f, double v, int precision);

/* The chat families a --chat-template NAME may be, for messages: "chatml,
 * llama3, ... or phi3". */
#define KVT_CLI_CHAT_NAMES "chatml, llama3, llama2, mistral, qwen3, gemma or phi3"
/* The chat template family a command renders with: the one named (--chat-template,
 * already checked), else the family of the model's tokenizer.chat_template, else
 * ChatML for a model without a template. A template kvtier does not recognise is
 * an error rather than a guess (another family's markup is a prompt the model was
 * not trained on): -1 after printing "kvtier CMD: ..." with the choices; 0 and *out. */
int kvt_cli_chat_family(const char *cmd, const char *name, const char *model_template, kvt_chat_family *out);

/* Context length when --ctx is not given: the model's training context, capped
 * at KVT_CLI_DEFAULT_CTX_CAP (a 128k-context model would otherwise reserve KV
 * pages for 128k tokens per sequence); logs when it caps. */
#define KVT_CLI_DEFAULT_CTX_CAP 8192
long kvt_cli_default_ctx(long n_ctx_train);
/* -c 0, llama.cpp's "the model's context": its training context, uncapped.
 * A command keeps it as given (KVT_CLI_CTX_MODEL) until the model is read. */
#define KVT_CLI_CTX_MODEL (-1L)
/* The context of a command whose -c gave given (0: not given, the capped
 * default; KVT_CLI_CTX_MODEL: the model's whole training context). */
long kvt_cli_ctx(long given, long n_ctx_train);

/* Prints what each tier holds for the loaded model: tokens, and sessions of
 * session_tokens (the context), e.g. for the start-up line; to f, or as one
 * log line (kvt_log, info) when f is NULL. */
void kvt_cli_print_capacity(FILE *f, const char *who, const kvt_cache *c, int32_t session_tokens);

/* ---- table-driven options (run, serve) ----------------------------------------
 * One table per command parses its command line with getopt_long (so
 * --opt=value works and an unknown option is named; a long option is its whole
 * name, never an abbreviation, and llama.cpp's -np, -ngl, -cb, -nocb, -fa,
 * -ctk, -ctv, -hf are read as the long names the command has) and writes its --help,
 * so every flag is explained. Every option can also come from the environment
 * as KVTIER_<NAME> (the long name upper-cased, '-' as '_': --ctx-size is
 * $KVTIER_CTX_SIZE); the command line wins over the environment. */

/* kvt_cli_opt.flags */
enum {
    KVT_CLI_NO_ENV = 1,    /* no environment variable (the command reads its own) */
    KVT_CLI_MIN_OPEN = 2,  /* the lower bound is excluded: (min, max] */
    KVT_CLI_OPT_VALUE = 4, /* the value may be left out: --flag, --flag=V, or --flag V where V does not
                              start with '-' (llama.cpp's -fa [on|off|auto]); the handler gets NULL without */
};

/* What an option's value is; the parser checks it, and the bounds, before the
 * handler sees it, so an out-of-range value is an error naming the flag and
 * the range. */
typedef enum {
    KVT_CLI_TEXT = 0, /* any string (or a switch when arg is NULL) */
    KVT_CLI_INT,      /* a decimal integer in [min, max] */
    KVT_CLI_NUM,      /* a finite number in [min, max] (or (min, max] with KVT_CLI_MIN_OPEN) */
    KVT_CLI_BYTES,    /* a size such as 512M or 4G (K/M/G/T = powers of 1024), in [min, max] bytes */
} kvt_cli_kind;

typedef struct {
    int id;            /* what the command's handler switches on; > 0, unique within a command */
    char short_name;   /* 'm' for -m, or 0 */
    const char *name;  /* the long name, without "--" */
    const char *alias; /* a second long name (llama.cpp's spelling), or NULL */
    const char *arg;   /* the value's name in --help ("N", "FILE"); NULL: a switch */
    const char *help;  /* the explanation; '\n' starts a continuation line */
    int flags;         /* KVT_CLI_NO_ENV, KVT_CLI_MIN_OPEN */
    kvt_cli_kind kind; /* KVT_CLI_TEXT unless given */
    double min, max;   /* bounds of INT, NUM and BYTES values */
} kvt_cli_opt;

/* Bounds for a row: KVT_CLI_RANGE(KVT_CLI_INT, 1, 512) after the flags. */
#define KVT_CLI_RANGE(kind, lo, hi) (kind), (double)(lo), (double)(hi)
#define KVT_CLI_ANY_BYTES KVT_CLI_BYTES, 0.0, 1e18
#define KVT_CLI_PLAIN KVT_CLI_TEXT, 0.0, 0.0 /* text or a switch: no bounds */

typedef struct {
    const char *title; /* heading printed above the section in --help, or NULL */
    const kvt_cli_opt *opts;
    size_t n;
} kvt_cli_section;

/* One option's value as the handler gets it, already checked against its row. */
typedef struct {
    const char *str;  /* the text given; NULL for a switch */
    const char *flag; /* where it came from ("--port", "$KVTIER_PORT"), for messages */
    long i;           /* KVT_CLI_INT */
    double d;         /* KVT_CLI_NUM */
    uint64_t bytes;   /* KVT_CLI_BYTES */
} kvt_cli_arg;

/* Called once per option: first those on the command line, in order, then,
 * for each option the command line did not give, its environment variable if
 * set. Returns 0, or -1 after printing why. */
typedef int (*kvt_cli_handler)(void *ctx, int id, const kvt_cli_arg *a);

/* An integer option whose table range admits one special value below its
 * real minimum (serve's -c 0, -n -1, as llama.cpp's): 0 when a->i is special
 * or at least min, else -1 after printing an error naming a->flag. */
int kvt_cli_int_or(const kvt_cli_arg *a, const char *cmd, long special, const char *meaning, long min);

struct cJSON;
/* text parsed as JSON after the server's strict check of request bodies
 * (json_strict.h: no key twice in an object, no \u0000, valid UTF-8, ...), so
 * a line of a JSONL file means what the same object means to the server.
 * NULL with why[0..cap) filled (where and what) when it is not. */
struct cJSON *kvt_cli_json(const char *text, char *why, size_t cap);

/* --samplers of run and serve (llama.cpp's sampler order, as names separated
 * by ';' or ',' or a string of letters), read by the server's parser of a
 * request's "samplers": the steps kvtier runs, in order, into
 * steps[0..KVT_SAMPLER_MAX_STEPS) and *n_steps. Returns 0, or -1 after
 * printing an error that names a->flag. */
int kvt_cli_samplers(const char *cmd, const kvt_cli_arg *a, int32_t *n_steps, uint8_t *steps);
/* llama.cpp's -fa / --flash-attn [on|off|auto] for cmd ("run"): kvtier's
 * attention is always fused, so off is ignored with a note on stderr. 0, or
 * -1 after printing why the value is none of those. */
int kvt_cli_flash_attn(const char *cmd, const kvt_cli_arg *a);

/* ---- llama.cpp's option names (cli_llama_names.c) ------------------------------- */
/* The long name of llama.cpp's short option arg of several letters ("-np":
 * "--parallel", "-cnv": "--conversation"), or with one_letter_too of one of
 * its one-letter options that run and serve lack ("-b": "--batch-size");
 * NULL for any other argument. */
const char *kvt_cli_llama_long(const char *arg, int one_letter_too);
/* Prints the usage error for an unknown option of cmd, as typed: its name,
 * and for an option of llama-cli or llama-server that kvtier does not take,
 * what to use instead (-b: --prefill-chunk; --cache-ram: --kv-ram). */
void kvt_cli_unknown_option(const char *cmd, const char *typed);

#define KVT_CLI_PARSE_HELP 1  /* kvt_cli_parse: -h/--help was given */
#define KVT_CLI_PARSE_USAGE 2 /* kvt_cli_parse: a usage error, already printed */

/* Parses argv[1..argc) of command cmd ("run") against the sections' options
 * with getopt_long. llama.cpp's short options of several letters (-np, -ngl,
 * -cb, -nocb, -fa, -ctk, -ctv, -hf, -cnv, -sys, ...) are rewritten to their
 * long names first (one the command lacks is unknown, never read as -c b). A long option must
 * be spelled whole: getopt_long's abbreviations (--metrics for --metrics-key)
 * are unknown options. Positional arguments and unknown options are usage
 * errors naming them. Returns 0, KVT_CLI_PARSE_HELP
 * or KVT_CLI_PARSE_USAGE (after printing why). argv is not modified. Not
 * thread-safe: getopt_long keeps its state in globals. */
int kvt_cli_parse(const char *cmd, int argc, char **argv, const kvt_cli_section *secs, size_t n_secs,
                  kvt_cli_handler fn, void *ctx);
/* Writes the sections' --help lines, each with its environment variable, and -h.
 * While man mode is on (kvt_cli_man), writes them as man(7) markup instead. */
void kvt_cli_print_opts(FILE *f, const kvt_cli_section *secs, size_t n_secs);

/* ---- the manual page (cli_man.c) -------------------------------------------------- */
/* Each command's --help text (cli_*.c); the man page is made of them. */
void kvt_usage_run(FILE *f);
void kvt_usage_serve(FILE *f);
void kvt_usage_eval(FILE *f);
void kvt_usage_info(FILE *f);
void kvt_usage_tokenize(FILE *f);
void kvt_usage_cache(FILE *f);
void kvt_usage_lint(FILE *f);
void kvt_usage_rag(FILE *f);
void kvt_usage_mkmodel(FILE *f);
void kvt_usage_quantize(FILE *f);
void kvt_usage_route(FILE *f);

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    void (*usage)(FILE *f);
    const char *summary;
} kvt_cli_command;
extern const kvt_cli_command kvt_cli_commands[];
extern const size_t kvt_cli_n_commands;
/* The top-level --help (cli.c). */
void kvt_cli_usage(FILE *f);

/* Writes kvtier.1 (man(7)) to f: the top-level help, then every command's
 * --help, the option tables of run and serve as tagged paragraphs; so the
 * page says what --help says. Returns 0 or -1 (out of memory). */
int kvt_cli_man(FILE *f);
/* Man mode for kvt_cli_print_opts: its markup goes between these two bytes,
 * so kvt_cli_man can tell it from the plain text it escapes. */
#define KVT_CLI_MAN_BEGIN '\x01'
#define KVT_CLI_MAN_END '\x02'
void kvt_cli_set_man_mode(int on);

/* The disk-tier options shared by run and serve (--kv-disk, --kv-disk-size,
 * --kv-disk-zstd, --kv-disk-admit[-all], --kv-disk-live-window,
 * --kv-disk-wait-ms, --kv-disk-no-mac, --write-through, --restore), ids from
 * KVT_CLI_CACHE_ID_BASE, and their handler: stores the value in cp. Returns
 * 0, or -1 after printing why. */
#define KVT_CLI_CACHE_ID_BASE 1000
extern const kvt_cli_section kvt_cli_cache_section;
int kvt_cli_cache_opt(int id, const kvt_cli_arg *a, kvt_cache_params *cp);
/* The KV dtype options (--kv-type, --kv-f32), ids from KVT_CLI_KV_ID_BASE. */
#define KVT_CLI_KV_ID_BASE 1100
extern const kvt_cli_section kvt_cli_kv_section;
int kvt_cli_kv_opt(int id, const kvt_cli_arg *a, kvt_kv_dtype *dt);
/* After the command line: a notice on stderr when only one of -ctk and -ctv
 * named a type other than f16, which kvtier then gives the other too where
 * llama.cpp would keep it f16. */
void kvt_cli_kv_notice(const char *cmd);
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

/* ---- the device (cli_device.c) ------------------------------------------------------
 * --device cpu|vulkan[:N] (and $KVTIER_DEVICE) for run, serve and eval: cpu,
 * the default, or a Vulkan device that must exist (a usage error saying why
 * not otherwise). */
typedef struct {
    int vulkan;         /* 0: cpu */
    int index;          /* the Vulkan device */
    float mem_fraction; /* --gpu-memory-fraction; 0: the engine's default */
    int ngl_given;      /* --n-gpu-layers / -ngl was given, as: */
    int32_t n_gpu_layers;
    int chosen;   /* --device or $KVTIER_DEVICE named the device */
    int main_gpu; /* --main-gpu (or one share of --tensor-split) + 1; 0: not given */
} kvt_cli_device;
/* "cpu", "vulkan" or "vulkan:N" into *out (vulkan and index); -1 if v is none of them. */
int kvt_cli_device_parse(const char *v, kvt_cli_device *out);
/* The section's options: --device, --gpu-memory-fraction, --n-gpu-layers (-ngl). */
#define KVT_CLI_DEVICE_ID 1200
#define KVT_CLI_GPU_MEM_ID 1201
#define KVT_CLI_NGL_ID 1202
/* llama.cpp's other device flags: --split-mode, --tensor-split, --main-gpu, --no-kv-offload, --list-devices */
#define KVT_CLI_LIST_DEVICES_ID 1207
#define KVT_CLI_IS_DEVICE_ID(id) ((id) >= KVT_CLI_DEVICE_ID && (id) <= KVT_CLI_LIST_DEVICES_ID)
extern const kvt_cli_section kvt_cli_device_section;
/* --device's handler: 0 (the device in *out when out is not NULL), or -1
 * after printing why the value is bad or the device cannot run the model. */
int kvt_cli_device_opt(const kvt_cli_arg *a, kvt_cli_device *out);
/* The section's handler for any of its ids (values checked by the table). */
int kvt_cli_device_opts(int id, const kvt_cli_arg *a, kvt_cli_device *out);
/* eval's hand-written loop: 1 if argv[*i] is --device (checked, *given set),
 * --gpu-memory-fraction or --n-gpu-layers / -ngl (checked), 0 for other
 * arguments, -1 after printing why. kvt_cli_device_env checks
 * $KVTIER_DEVICE the same way when the flag was not given (0 or -1). */
int kvt_cli_device_flag(int argc, char **argv, int *i, int *given, kvt_cli_device *out);
int kvt_cli_device_env(kvt_cli_device *out);
/* After the options: -ngl N (N != 0) with no device named, as llama.cpp's
 * users offload, puts the model on the first GPU (a discrete one first; a
 * CPU-type device such as lavapipe is never picked this way, as the CPU
 * engine is faster there), or the GPU --main-gpu names, saying so on stderr
 * naming who ("run"); without a GPU it stays on the CPU with a note saying
 * why. 0, or -1 after printing why (a --main-gpu that is not there, or one
 * that contradicts --device). */
int kvt_cli_device_auto(const char *who, kvt_cli_device *d);
/* The engine's device parameter for d (kvt_engine_params.device). */
int32_t kvt_cli_device_engine(const kvt_cli_device *d);
/* Sets ep's device, gpu_memory_fraction and n_gpu_layers from d; with the
 * CPU named (--device cpu), a -ngl above 0 is ignored with a note on stderr
 * naming who ("run"). */
void kvt_cli_device_apply(const char *who, const kvt_cli_device *d, kvt_engine_params *ep);
/* Logs (info) the start-up line of a GPU engine: the device, its memory and
 * how the engine split it, the pool in pages, tokens and sessions of n_ctx;
 * nothing on the CPU. */
void kvt_cli_log_device_memory(const char *who, const kvt_engine *e);
/* `kvtier info --devices`: lists the Vulkan devices or says why there are
 * none. Returns 0 with one device or more, 1 with none. */
int kvt_cli_print_devices(FILE *f);

#endif


/* Path of the model used when a command gets no -m: $KVT_DEFAULT_MODEL if set,
 * else a random-weight llama that kvtier generates once into
 * $XDG_CACHE_HOME/kvtier (or ~/.cache/kvtier). Logs which model it is and that
 * its weights are random. Returns 0, or -1 after printing why it failed. */
int kvt_default_model_path(char *buf, size_t cap);
