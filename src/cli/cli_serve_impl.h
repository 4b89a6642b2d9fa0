// SPDX-License-Identifier: MIT
/* kvtier serve's parts shared by its files (private to src/cli/): what the
 * command line sets (cli_serve.c parses it) and what the server runs on
 * (cli_serve_run.c opens, runs and closes it). */
#ifndef KVT_CLI_SERVE_IMPL_H
#define KVT_CLI_SERVE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "cli.h"
#include "cli_chat_template.h"
#include "kvtier.h"
#include "rag.h"
#include "server.h"

#define KVT_SERVE_PATH_MAX 4096
#define KVT_SERVE_MAX_CORS_ORIGINS 64
#define KVT_SERVE_MAX_TRUSTED_PROXIES 64
#define KVT_SERVE_MODEL_ID_MAX KVT_SERVE_PATH_MAX
#define KVT_SERVE_MAX_MODEL_NAMES 16 /* names a request's "model" may give: the file's two and the --alias names */

/* What serve's command line sets. */
typedef struct {
    kvt_server_params sp;
    const char *model_path, *template_name, *alias, *metrics_key, *admin_key, *rag_path, *log_file;
    long n_ctx, drain_s;
    uint64_t kv_active, kv_ram, max_body, max_inflight;
    int threads;
    int32_t block; /* --block-size: tokens per KV page / cache block */
    kvt_cache_params cp;
    kvt_kv_dtype dt;
    char **keys;
    size_t n_keys;
    const char *cors[KVT_SERVE_MAX_CORS_ORIGINS];
    size_t n_cors;
    long conn_reserve; /* -1: the default (checked against --max-conns once both are known) */
    char *proxies[KVT_SERVE_MAX_TRUSTED_PROXIES]; /* --trusted-proxy addresses (owned) */
    size_t n_proxies;
    kvt_cli_device dev;
    int version; /* --version: print it and exit */
    kvt_cli_template_args tmpl;
} serve_args;

/* What serve runs on: freed by kvt_cli_serve_close. */
typedef struct {
    kvt_rag_index *rag;
    kvt_model *m;
    kvt_engine *e;
    kvt_cache *cache;
    kvt_jinja *jinja;    /* --jinja */
    char *template_text; /* --chat-template-file */
    char model_id[KVT_SERVE_MODEL_ID_MAX];
    char names_text[2 * KVT_SERVE_MODEL_ID_MAX]; /* the other names, NUL-separated */
    const char *names[KVT_SERVE_MAX_MODEL_NAMES];
} serve_runtime;

/* Loads the RAG index (first: a bad one fails in a second, not after
 * loading gigabytes) and the model, picks the chat template, and makes the
 * engine (one sequence per --parallel) and the cache; completes x->sp.
 * 0, or -1 after saying why. */
int kvt_cli_serve_open(serve_args *x, const char *model_path, serve_runtime *rt);
/* Frees what kvt_cli_serve_open made (any part of it). */
void kvt_cli_serve_close(serve_runtime *rt);
/* Starts the server on rt and serves until a stop signal; then the cache goes
 * down to disk / the remote tier for the next start. 0, or 1 when the server
 * cannot start. */
int kvt_cli_serve_run(const serve_args *x, serve_runtime *rt);

#endif
