// SPDX-License-Identifier: MIT
/* `kvtier serve`: its options and their checks, then the run
 * (cli_serve_run.c: the model, engine and cache, the OpenAI-compatible
 * server until SIGINT/SIGTERM). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blockhash.h" /* KVT_BLOCK_TOKENS_MAX: --block-size */
#include "cli_sampling.h"
#include "cli_serve_compat.h"
#include "cli_serve_embed.h"
#include "cli_serve_impl.h"
#include "cli_serve_keys.h"
#include "common.h"
#include "generate.h"   /* KVT_PREFILL_PROGRESS_TOKENS, named in --help */
#include "progress.h"   /* --progress */
#include "http_conns.h" /* --trusted-proxy addresses */

#define MAX_PARALLEL 256
#define MAX_QUEUE 65536
#define MAX_API_KEYS 1024
#define MAX_TIMEOUT_S 86400
#define MAX_CONNS_PER_IP 65536
#define MAX_CTX (1L << 24)
#define MAX_CONNS 65536


enum {
    O_MODEL = 1,
    O_HOST,
    O_PORT,
    O_PARALLEL,
    O_QUEUE,
    O_CTX,
    O_KV_ACTIVE,
    O_KV_RAM,
    O_BLOCK_SIZE,
    O_THREADS,
    O_API_KEY,
    O_API_KEY_FILE,
    O_METRICS_KEY,
    O_CHAT_TEMPLATE,
    O_MAX_BODY,
    O_MAX_INFLIGHT,
    O_MAX_TOKENS_LIMIT,
    O_N_PREDICT,
    O_PREFILL_CHUNK,
    O_TIMEOUT,
    O_REQUEST_TIMEOUT,
    O_MAX_CONNS_PER_IP,
    O_DRAIN_TIMEOUT,
    O_CORS_ORIGIN,
    O_ALIAS,
    O_SESSION_KEEP_WARM,
    O_RAG_INDEX,
    O_RAG_K,
    O_LOG_FORMAT,
    O_LOG_FILE,
    O_RETOKENIZE,
    O_APPROXIMATE,
    O_RECOMPUTE_RATIO,
    O_PROGRESS,
    O_ADMIN_KEY,
    O_EXPLAIN_TEXT,
    O_HIDE_CACHED,
    O_STRICT,
    O_HEADER_TIMEOUT,
    O_MAX_CONNS,
    O_CONN_RESERVE,
    O_TRUSTED_PROXY,
    O_RESPONSES_MAX,
    O_RESPONSES_TTL,
};

static const kvt_cli_opt serve_opts[] = {
    {O_MODEL, 'm', "model", NULL, "FILE",
     "GGUF model (default: kvtier's generated RANDOM-WEIGHT model,\nor $KVT_DEFAULT_MODEL; its text is noise)", 0,
     KVT_CLI_PLAIN},
    {O_HOST, 0, "host", NULL, "ADDR",
     "address to bind: IPv4, IPv6 (::1 or [::1]) or a host name\n(localhost: its IPv4 address first) "
     "(default 127.0.0.1: this\nmachine only)",
     0, KVT_CLI_PLAIN},
    {O_PORT, 0, "port", NULL, "N",
     "TCP port (default " STR(KVT_SERVER_DEFAULT_PORT) "; 0 = any free port, printed "
                                                       "at start)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 0, 65535)},
    {O_PARALLEL, 0, "parallel", NULL, "N",
     "sequences decoded together in one batch (default " STR(KVT_SERVER_DEFAULT_PARALLEL) "; also -np)", 0,
     KVT_CLI_RANGE(KVT_CLI_INT, 1, MAX_PARALLEL)},
    {O_QUEUE, 0, "queue", NULL, "N",
     "requests waiting for a sequence at most; more get 503 (default " STR(KVT_SERVER_DEFAULT_QUEUE) ")", 0,
     KVT_CLI_RANGE(KVT_CLI_INT, 1, MAX_QUEUE)},
    {O_CTX, 'c', "ctx-size", "ctx", "N",
     "context length per sequence: prompt + generated (default: the\nmodel's, at most " STR(
         KVT_CLI_DEFAULT_CTX_CAP) "; 0, as llama.cpp's: the model's\nwhole training context)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 0, MAX_CTX)},
    {O_N_PREDICT, 'n', "n-predict", NULL, "N",
     "max_tokens of a request that gives none (default: OpenAI's, 16\nfor completions, as many as fit for chat; -1, "
     "llama.cpp's\n\"no limit\": as many as fit, up to --max-tokens-limit)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, -1, MAX_CTX)},
    {O_KV_ACTIVE, 0, "kv-active", NULL, "BYTES",
     "T0: the engine's KV page pool, e.g. 256M (default: --parallel full\ncontexts plus one more to keep finished "
     "prompts cached; on a GPU\nwhat --gpu-memory-fraction leaves after the weights)",
     0, KVT_CLI_ANY_BYTES},
    {O_KV_RAM, 0, "kv-ram", NULL, "BYTES", "T1: host-RAM budget for KV evicted from T0, e.g. 2G (default 0: off)", 0,
     KVT_CLI_ANY_BYTES},
    {O_BLOCK_SIZE, 0, "block-size", NULL, "B",
     "tokens per KV page / cache block (default " STR(KVT_DEFAULT_BLOCK_SIZE) "; at most " STR(
         KVT_BLOCK_TOKENS_MAX) ").\nT2 and T3 records written under another block size are misses;\ncut a --rag-index for "
                               "the same size (rag index --block-size)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 1, KVT_BLOCK_TOKENS_MAX)},
    {O_THREADS, 't', "threads", NULL, "N",
     "worker threads for the forward pass (default, or -1 as llama.cpp's: all CPUs)", 0,
     KVT_CLI_RANGE(KVT_CLI_INT, -1, KVT_CLI_MAX_THREADS)},
    {O_API_KEY, 0, "api-key", NULL, "KEY",
     "require 'Authorization: Bearer KEY' on /v1/*, /tokenize,\n/detokenize and /props (repeatable, or KEY,KEY,... as "
     "llama-server's);\neach key gets its own cache namespace (tenants never share cached\nKV). Arguments show in ps: "
     "prefer --api-key-file or $KVTIER_API_KEY,\nwhich is one more key",
     KVT_CLI_NO_ENV, KVT_CLI_PLAIN},
    {O_API_KEY_FILE, 0, "api-key-file", NULL, "FILE",
     "more keys, one per line (blank lines, # comments and spaces\naround a key ignored); a file without a key is refused",
     0, KVT_CLI_PLAIN},
    {O_METRICS_KEY, 0, "metrics-key", NULL, "KEY",
     "the only key that opens /metrics, which shows every tenant's\ncounters. Without it, /metrics needs an API key "
     "when there are\nany, else it is open. /health is always open",
     0, KVT_CLI_PLAIN},
    {O_ADMIN_KEY, 0, "admin-key", NULL, "KEY",
     "the operator's key, which is not a tenant's: it alone opens\nGET /v1/cache/lint (which quotes prompt text), "
     "sees every tenant's\npins in /v1/cache/stats and may release any pin or session, and\nopens /metrics and "
     "/dashboard. Without it the lint is refused.\nMust differ from every API key",
     0, KVT_CLI_PLAIN},
    {O_EXPLAIN_TEXT, 0, "explain-text", NULL, NULL,
     "when reuse stops where a prompt differs from the nearest cached\none, show that cached block's text and token "
     "ids too\n(kvtier.reuse_stop.cached_text). They come from the caller's own\nnamespace (API key + cache_salt), "
     "but any client of that namespace\nmay have sent them: use it only where those clients trust each\nother. "
     "Off by default: only the caller's own side is shown",
     0, KVT_CLI_PLAIN},
    {O_HIDE_CACHED, 0, "hide-cached-tokens", NULL, NULL,
     "leave every cache count out of answers (usage.prompt_tokens_details,\nthe kvtier report, pin and prefetch "
     "counts, the cache-wide stats),\nand let only --metrics-key or --admin-key open /metrics and\n/dashboard. Exact "
     "counts let a client confirm a guessed block of\nanother client's prompt in the same namespace; use this where "
     "the\nclients of one key (or of an open server) do not trust each other.\nResponse times still differ between "
     "hits and misses",
     0, KVT_CLI_PLAIN},
    {O_CHAT_TEMPLATE, 0, "chat-template", NULL, "NAME",
     "chatml, llama3, llama2, mistral, qwen3, gemma or phi3: render chat\nprompts with that built-in family "
     "instead of the model's template\n(--jinja still renders the template). Without the template's own\n"
     "rendering (--no-jinja, or a template the interpreter cannot run),\nand for the chats with tools when "
     "the model's template renders none,\nthe family is detected from tokenizer.chat_template; chatml if\n"
     "it has none; an unrecognised one stops the start",
     0, KVT_CLI_PLAIN},
    {O_MAX_BODY, 0, "max-body", NULL, "BYTES", "largest request body; larger gets 413 (default 8M)", 0,
     KVT_CLI_RANGE(KVT_CLI_BYTES, 1, 1e18)},
    {O_MAX_INFLIGHT, 0, "max-inflight-bytes", NULL, "BYTES",
     "request body bytes held in memory by all requests in flight\ntogether; a request past it gets 503 + Retry-After "
     "(default 64M,\nor --max-body if larger; at least --max-body)",
     0, KVT_CLI_RANGE(KVT_CLI_BYTES, 1, 1e18)},
    {O_MAX_TOKENS_LIMIT, 0, "max-tokens-limit", NULL, "N",
     "largest max_tokens a request may ask for (default " STR(KVT_SERVER_DEFAULT_MAX_TOKENS) ")", 0,
     KVT_CLI_RANGE(KVT_CLI_INT, 1, MAX_CTX)},
    {O_PREFILL_CHUNK, 0, "prefill-chunk", NULL, "N",
     "prompt tokens per engine step, so long prompts do not stall\nrunning sequences (default " STR(
         KVT_SERVER_DEFAULT_PREFILL_CHUNK) ")",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 1, MAX_CTX)},
    {O_TIMEOUT, 0, "timeout", NULL, "S",
     "close connections idle (or stalled mid-request) for S seconds\n(default " STR(
         KVT_SERVER_DEFAULT_TIMEOUT_S) "; also -to); a stream waiting on the engine (a long\nprefill, the queue) is not idle",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 1, MAX_TIMEOUT_S)},
    {O_REQUEST_TIMEOUT, 0, "request-timeout", NULL, "S",
     "close a connection that has not sent a whole request (headers and\nbody) S seconds after it opened or after its "
     "previous response,\nhowever steadily it trickles bytes (default " STR(
         KVT_SERVER_DEFAULT_REQUEST_TIMEOUT_S) "; 0 = no deadline)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 0, MAX_TIMEOUT_S)},
    {O_HEADER_TIMEOUT, 0, "header-timeout", NULL, "S",
     "close a connection that has not sent a request's complete headers\nS seconds after it opened or after its "
     "previous response (an idle\nkeep-alive connection too), so slow clients give their slot back\nsoon; bodies "
     "and answers keep --request-timeout (default " STR(KVT_SERVER_DEFAULT_HEADER_TIMEOUT_S) ";\n0 = no header deadline)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 0, MAX_TIMEOUT_S)},
    {O_MAX_CONNS_PER_IP, 0, "max-conns-per-ip", NULL, "N",
     "open connections from one IP address at most; more are closed at\nonce (default " STR(
         KVT_SERVER_DEFAULT_CONNS_PER_IP) "; 0 = no limit). Behind a proxy every client\nshares the proxy's address "
                                          "unless it is a --trusted-proxy",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 0, MAX_CONNS_PER_IP)},
    {O_MAX_CONNS, 0, "max-conns", NULL, "N",
     "open connections at most, each with its own thread (default " STR(KVT_SERVER_DEFAULT_MAX_CONNS) ")", 0,
     KVT_CLI_RANGE(KVT_CLI_INT, 1, MAX_CONNS)},
    {O_CONN_RESERVE, 0, "conn-reserve", NULL, "N",
     "the last N of --max-conns are kept for addresses with no connection\nopen, so however many connections a few "
     "addresses hold, a new\nclient can still connect (default " STR(
         KVT_SERVER_DEFAULT_CONN_RESERVE) "; less than --max-conns)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 0, MAX_CONNS - 1)},
    {O_TRUSTED_PROXY, 0, "trusted-proxy", NULL, "ADDR[,ADDR...]",
     "IP addresses of reverse proxies in front of kvtier (repeatable).\nTheir connections are not held to "
     "--max-conns-per-ip; each request\nthey forward counts against, and is logged as, the last\n"
     "X-Forwarded-For entry that is not one of them. Without it\nX-Forwarded-For is ignored",
     0, KVT_CLI_PLAIN},
    {O_DRAIN_TIMEOUT, 0, "drain-timeout", NULL, "S",
     "on SIGINT/SIGTERM, wait up to S seconds for the requests in flight\n(default " STR(
         KVT_SERVER_DEFAULT_DRAIN_S) "; 0 = end them at once with 503)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 0, MAX_TIMEOUT_S)},
    {O_CORS_ORIGIN, 0, "cors-origin", NULL, "ORIGIN",
     "let browser pages from ORIGIN (e.g. http://localhost:3000;\nrepeatable, or * for any) call the API: OPTIONS "
     "preflights are\nanswered and responses carry Access-Control-Allow-Origin.\nWithout it OPTIONS is 405",
     0, KVT_CLI_PLAIN},
    {O_ALIAS, 'a', "alias", NULL, "NAME[,NAME...]",
     "model name in /v1/models and responses (default: the file name\nwithout .gguf). A request's \"model\" must be "
     "one of these names\nor the file's name; any other is a 404 model_not_found. At most\n14 names, none empty",
     0, KVT_CLI_PLAIN},
    {O_SESSION_KEEP_WARM, 0, "session-keep-warm", NULL, "S",
     "a request that names its agent session (X-Session-Id header or\n\"kvtier\": {\"session_id\": ...}) without its "
     "own keep_warm_s keeps its\ncontext warm in T0 for S seconds after the reply (default 60; 0: off)",
     0, KVT_CLI_RANGE(KVT_CLI_NUM, 0, MAX_TIMEOUT_S)},
    {O_RETOKENIZE, 0, "retokenize-replies", NULL, NULL,
     "tokenize chat history from its text only. By default an assistant\nmessage (or tool call) this server generated "
     "keeps the token ids it\nwas generated with, so the next turn reuses its KV (with --kv-disk\nalso after a "
     "restart: the reply journal side-replies in that\ndirectory); another node, or a restart without --kv-disk,\n"
     "re-tokenizes that text, which can split it into other tokens and\nso change a greedy reply. With this flag the "
     "output depends on the\nrequest alone, and the journal is neither read nor written\n(docs/api.md \"Chat "
     "history\")",
     0, KVT_CLI_PLAIN},
    {O_RESPONSES_MAX, 0, "responses-max", NULL, "N",
     "stored responses of POST /v1/responses (\"store\", the default)\nkept for GET and previous_response_id, "
     "each its API key's only;\nthe least recently used go first past N, or past 256 MiB of\ntheir text "
     "(default " STR(KVT_SERVER_DEFAULT_RESPONSES) "; 0: none kept)",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 0, 1000000)},
    {O_RESPONSES_TTL, 0, "responses-ttl", NULL, "S",
     "a stored response is forgotten S seconds after it was made, however\noften it is read: GET and DELETE "
     "answer 404, and previous_response_id\nnaming it a 404 "
     "(default " STR(KVT_SERVER_DEFAULT_RESPONSES_TTL_S) ", a day; 0: kept until --responses-max\npushes it out)",
     0, KVT_CLI_RANGE(KVT_CLI_NUM, 0, 31536000)},
    {O_RAG_INDEX, 0, "rag-index", NULL, "INDEX",
     "serve POST /v1/rag/chat/completions over this index (made by\n`kvtier rag index`): the last user message "
     "retrieves chunks that go\nbefore it as fixed context blocks in canonical order (docs/rag.md)",
     0, KVT_CLI_PLAIN},
    {O_RAG_K, 0, "rag-k", NULL, "K",
     "chunks a RAG request retrieves when it gives no kvtier.rag.k\n(default " STR(KVT_RAG_DEFAULT_K) ", at most " STR(
         KVT_RAG_MAX_K) ")",
     0, KVT_CLI_RANGE(KVT_CLI_INT, 1, KVT_RAG_MAX_K)},
    {O_APPROXIMATE, 0, "approximate-reuse", NULL, NULL,
     "let requests ask for approximate reuse (\"kvtier\": {\"reuse\":\n\"approximate\"}): documents that "
     "the exact prefix misses are placed\nfrom their stored KV at their new position (RoPE re-rotated), and\nthe "
     "tokens that deviate most are recomputed (CacheBlend). The\noutput is then close to, not equal to, a cold "
     "run's; requests\nwithout the field stay exact. Off by default: such a request is\na 400 (docs/rag.md "
     "\"Approximate reuse\")",
     0, KVT_CLI_PLAIN},
    {O_RECOMPUTE_RATIO, 0, "recompute-ratio", NULL, "R",
     "with --approximate-reuse: the fraction of the placed document\ntokens recomputed when a request gives no "
     "kvtier.recompute_ratio\n(default 0.15; 1 recomputes them all, which is exact)",
     0, KVT_CLI_RANGE(KVT_CLI_NUM, 0, 1)},
    {O_STRICT, 0, "strict", NULL, NULL,
     "refuse request fields this server does not read: a top-level field\nthe endpoint does not know (a typo such "
     "as max_token) is a 400\nnaming it. By default such fields are ignored, as OpenAI does.\nBodies are strict "
     "JSON either way (no duplicate keys, no \\u0000,\nvalid UTF-8)",
     0, KVT_CLI_PLAIN},
    {O_LOG_FORMAT, 0, "log-format", NULL, "FMT",
     "text (default) or json: one object per line with ts, level, msg.\nEvery line has an ISO-8601 UTC timestamp "
     "and a level;\nKVT_LOG=0..3 sets the verbosity (error, warn, info, debug)",
     0, KVT_CLI_PLAIN},
    {O_PROGRESS, 0, "progress", NULL, NULL,
     "progress lines in the log for the model load, a disk tier's open\nscan and each prefill of " STR(
         KVT_PREFILL_PROGRESS_TOKENS) "+ tokens (with its request id), also\nwhen stderr is not a terminal (on a "
                                      "terminal they are on anyway):\neach piece of work logs its first line at once and its last when\ndone, at "
                                      "most one a second between",
     0, KVT_CLI_PLAIN},
    {O_LOG_FILE, 0, "log-file", NULL, "PATH",
     "append log lines to PATH (created 0600; never through a symbolic\nlink, nor into a file with other hard links) "
     "instead of stderr;\nusage errors still go to stderr",
     0, KVT_CLI_PLAIN},
};

/* serve's sections: its own table, then the shared KV-type, disk-tier and device tables, then
 * sampling defaults and llama-server's flags. */
#define SERVE_SECTIONS 8
static void sections(kvt_cli_section out[SERVE_SECTIONS]) {
    out[0] = (kvt_cli_section){NULL, serve_opts, KVT_ARRAY_LEN(serve_opts)};
    out[1] = kvt_cli_kv_section;
    out[2] = kvt_cli_cache_section;
    out[3] = kvt_cli_device_section;
    out[4] = kvt_cli_serve_compat_section;
    out[7] = kvt_cli_sampling_defaults_section;
    out[5] = kvt_cli_serve_embed_section;
    out[6] = kvt_cli_template_section;
}

void kvt_usage_serve(FILE *f) {
    kvt_cli_section secs[SERVE_SECTIONS];
    sections(secs);
    fprintf(f,
            "usage: kvtier serve [-m MODEL] [options]\n\n"
            "Serves an OpenAI-compatible HTTP API with continuous batching; every response\n"
            "reports the prompt tokens reused from the KV cache (usage.prompt_tokens_details.\n"
            "cached_tokens and a per-tier breakdown under \"kvtier\").\n\n"
            "Endpoints: POST /v1/completions, POST /v1/chat/completions (\"stream\": true for\n"
            "server-sent events), GET /v1/models, GET /health, GET /metrics (Prometheus),\n"
            "POST /tokenize, POST /detokenize and GET /props (llama-server's), GET /dashboard\n"
            "(a live page of the metrics, behind the same key), the cache admin endpoints\n"
            "/v1/cache/{prefill,pin,unpin,prefetch,flush,stats,lint}, and with --rag-index\n"
            "POST /v1/rag/chat/completions (retrieval as reusable context blocks).\n\n"
            "Options take their value as --opt VALUE or --opt=VALUE; each can also be set by the\n"
            "environment variable in brackets, the command line winning.\n\n");
    kvt_cli_print_opts(f, secs, SERVE_SECTIONS);
    fprintf(f,
            "\nRequests may carry \"cache_salt\" to keep their cached KV apart from other requests', and\n"
            "\"kvtier\": {\"session_id\": S, \"priority\": P, \"keep_warm_s\": T}: the agent session they belong\n"
            "to, how much its KV matters against other sessions' (higher is kept longer and scheduled\n"
            "first), and how long to keep its context warm in T0 while the agent runs a tool.\n"
            "Cache admin (behind the API key when set): POST /v1/cache/pin, /v1/cache/unpin,\n"
            "/v1/cache/prefetch (a \"prompt\" or \"messages\" body), /v1/cache/flush, GET /v1/cache/stats.\n"
            "Pins (random ids) and warm sessions belong to the namespace that made them (API key +\n"
            "cache_salt): stats list, and unpin releases, only the caller's own; the admin key sees all.\n"
            "GET /v1/cache/lint quotes prompt text and needs the admin key (--admin-key).\n"
            "One cache namespace is one trust domain: its clients can tell from cached_tokens whether\n"
            "a guessed block is cached. Keep untrusting clients apart with API keys (each its own\n"
            "namespace), a per-user \"cache_salt\" set by a gateway, or --hide-cached-tokens.\n"
            "A missing or wrong key is 401 whatever the method.\n"
            "Each request gets one access line in the log (method, path, status, request id, tenant as a\n"
            "hash of its key, prompt/cached/computed/generated tokens, TTFT, total ms; KVT_LOG=1 hides\n"
            "them). A client's X-Request-Id ([A-Za-z0-9._:-], up to 64) is kept, else one is made; every\n"
            "response carries it.\n"
            "SIGINT or SIGTERM stops the server gracefully: new connections are refused, requests on open\n"
            "ones get 503, the requests in flight finish (for --drain-timeout seconds at most; a second\n"
            "signal stops at once), and with --kv-disk the cache is flushed to disk; the exit status is 0.\n");
}

/* --alias NAME[,NAME...]: every name given (",", "a,,b" or a trailing comma would make a model
 * named "", which /v1/models would report), at most the names a request's "model" is matched
 * against besides the file's two, and the whole list short enough to be kept. Sets *alias: 0,
 * or -1 after saying why. */
static int take_alias(const char *v, const char **alias) {
    size_t count = 0;
    for (const char *p = v;; p++) {
        size_t m = strcspn(p, ",");
        if (!m) {
            fprintf(stderr, "kvtier serve: --alias '%s' holds an empty name: give NAME[,NAME...]\n", v);
            return -1;
        }
        count++;
        p += m;
        if (!*p) break;
    }
    if (count > KVT_SERVE_MAX_MODEL_NAMES - 2 || strlen(v) >= KVT_SERVE_MODEL_ID_MAX) {
        fprintf(stderr, "kvtier serve: --alias takes at most %d names of %d bytes in all, got %zu names of %zu\n",
                KVT_SERVE_MAX_MODEL_NAMES - 2, KVT_SERVE_MODEL_ID_MAX - 1, count, strlen(v));
        return -1;
    }
    *alias = v;
    return 0;
}


/* Adds the comma-separated addresses of one --trusted-proxy. 0, or -1 after printing why. */
static int add_trusted_proxies(serve_args *x, const char *flag, const char *list) {
    const char *p = list;
    do {
        size_t n = strcspn(p, ",");
        kvt_http_addr a;
        if (x->n_proxies == KVT_SERVE_MAX_TRUSTED_PROXIES || kvt_http_addr_parse(p, n, 0, &a)) {
            fprintf(stderr, "kvtier serve: %s needs IP addresses, comma-separated (at most %d), got '%.*s'\n", flag,
                    KVT_SERVE_MAX_TRUSTED_PROXIES, (int)n, p);
            return -1;
        }
        x->proxies[x->n_proxies] = kvt_xmalloc(n + 1);
        memcpy(x->proxies[x->n_proxies], p, n);
        x->proxies[x->n_proxies++][n] = 0;
        p += n;
    } while (*p++ == ',');
    return 0;
}

/* llama.cpp's -c 0 (the model's context; 1 is refused), -t -1 (all CPUs) and -n -1 (no limit). */
static int counts_opt(serve_args *x, int id, const kvt_cli_arg *a) {
    if (id == O_CTX) {
        if (kvt_cli_int_or(a, "serve", 0, "the model's", 2)) return -1;
        x->n_ctx = a->i ? a->i : KVT_CLI_CTX_MODEL;
    } else if (id == O_THREADS) {
        if (kvt_cli_int_or(a, "serve", -1, "all CPUs", 1)) return -1;
        x->threads = a->i < 0 ? kvt_cli_default_threads() : (int)a->i;
    } else {
        if (kvt_cli_int_or(a, "serve", -1, "no limit", 1)) return -1;
        x->sp.default_max_tokens = (int32_t)a->i;
    }
    return 0;
}

static int serve_opt(void *ctx, int id, const kvt_cli_arg *a) {
    serve_args *x = ctx;
    kvt_server_params *sp = &x->sp;
    const char *v = a->str;
    if (KVT_CLI_IS_CACHE_ID(id)) return kvt_cli_cache_opt(id, a, &x->cp);
    if (KVT_CLI_IS_KV_ID(id)) return kvt_cli_kv_opt(id, a, &x->dt);
    if (KVT_CLI_IS_DEVICE_ID(id)) return kvt_cli_device_opts(id, a, &x->dev);
    if (KVT_CLI_IS_COMPAT_ID(id)) return kvt_cli_serve_compat_opt(id, a, sp, &x->version);
    if (KVT_CLI_IS_SAMPLING_ID(id))
        return kvt_cli_sampling_opt(id, a, &sp->default_sampling, &sp->default_dry_breakers);
    if (KVT_CLI_IS_EMBED_ID(id)) return kvt_cli_serve_embed_opt(id, a, sp);
    if (KVT_CLI_IS_TEMPLATE_ID(id)) return kvt_cli_template_opt(id, a, &x->tmpl);
    switch (id) { /* numbers are checked against the table's bounds already */
    case O_MODEL: x->model_path = v; return 0;
    case O_HOST: sp->host = v; return 0;
    case O_PORT: sp->port = (int)a->i; return 0;
    case O_PARALLEL: sp->parallel = (int32_t)a->i; return 0;
    case O_QUEUE: sp->queue = (int32_t)a->i; return 0;
    case O_CTX:
    case O_THREADS:
    case O_N_PREDICT: return counts_opt(x, id, a);
    case O_KV_ACTIVE: x->kv_active = a->bytes; return 0;
    case O_KV_RAM: x->kv_ram = a->bytes; return 0;
    case O_BLOCK_SIZE: x->block = (int32_t)a->i; return 0;
    case O_API_KEY: return kvt_cli_add_key_list(a->flag, v, x->keys, &x->n_keys, MAX_API_KEYS);
    case O_API_KEY_FILE: return kvt_cli_read_key_file(v, x->keys, &x->n_keys, MAX_API_KEYS);
    case O_METRICS_KEY: x->metrics_key = v; return 0;
    case O_ADMIN_KEY: x->admin_key = v; return 0;
    case O_EXPLAIN_TEXT: sp->explain_text = 1; return 0;
    case O_HIDE_CACHED: sp->hide_cached_tokens = 1; return 0;
    case O_CHAT_TEMPLATE:
        x->template_name = v;
        if (kvt_chat_family_parse(v) == KVT_CHAT_UNKNOWN) {
            fprintf(stderr, "kvtier serve: %s must be " KVT_CLI_CHAT_NAMES ", got '%s'\n", a->flag, v);
            return -1;
        }
        return 0;
    case O_MAX_BODY: x->max_body = a->bytes; return 0;
    case O_MAX_INFLIGHT: x->max_inflight = a->bytes; return 0;
    case O_MAX_TOKENS_LIMIT: sp->max_tokens_limit = (int32_t)a->i; return 0;
    case O_PREFILL_CHUNK: sp->prefill_chunk = (int32_t)a->i; return 0;
    case O_TIMEOUT: sp->timeout_s = (unsigned)a->i; return 0;
    case O_REQUEST_TIMEOUT: sp->request_timeout_s = (unsigned)a->i; return 0;
    case O_MAX_CONNS_PER_IP: sp->max_conns_per_ip = (unsigned)a->i; return 0;
    case O_HEADER_TIMEOUT: sp->header_timeout_s = (unsigned)a->i; return 0;
    case O_MAX_CONNS: sp->max_conns = (unsigned)a->i; return 0;
    case O_CONN_RESERVE: x->conn_reserve = a->i; return 0;
    case O_TRUSTED_PROXY: return add_trusted_proxies(x, a->flag, v);
    case O_DRAIN_TIMEOUT: x->drain_s = a->i; return 0;
    case O_CORS_ORIGIN:
        if (!*v || x->n_cors == KVT_SERVE_MAX_CORS_ORIGINS) {
            fprintf(stderr, "kvtier serve: --cors-origin needs an origin or * (at most %d)\n",
                    KVT_SERVE_MAX_CORS_ORIGINS);
            return -1;
        }
        x->cors[x->n_cors++] = v;
        return 0;
    case O_ALIAS: return take_alias(v, &x->alias);
    case O_SESSION_KEEP_WARM: sp->session_keep_warm_s = a->d; return 0;
    case O_RETOKENIZE: sp->retokenize_replies = 1; return 0;
    case O_RESPONSES_MAX: sp->responses_max = (size_t)a->i; return 0;
    case O_RESPONSES_TTL: sp->responses_ttl_s = a->d; return 0;
    case O_RAG_INDEX: x->rag_path = v; return 0;
    case O_RAG_K: sp->rag_k = (int32_t)a->i; return 0;
    case O_APPROXIMATE: sp->approximate_reuse = 1; return 0;
    case O_RECOMPUTE_RATIO: sp->recompute_ratio = (float)a->d; return 0;
    case O_LOG_FORMAT:
        if (kvt_log_set_format_name(v)) {
            fprintf(stderr, "kvtier serve: %s: %s\n", a->flag, kvt_errmsg());
            return -1;
        }
        return 0;
    case O_LOG_FILE: x->log_file = v; return 0;
    case O_PROGRESS: kvt_progress_set_forced(1); return 0;
    case O_STRICT: sp->strict = 1; return 0;
    default: return -1;
    }
}

/* The server parameters the command line, $KVTIER_API_KEY and the body
 * limits make (into x->sp; the model's, the chat template and the RAG index
 * come later). 0, or -1 after printing why. */
static int serve_settings(serve_args *x) {
    kvt_server_params *sp = &x->sp;
    if (x->log_file && kvt_log_open_file(x->log_file)) {
        fprintf(stderr, "kvtier serve: --log-file: %s\n", kvt_errmsg());
        return -1;
    }
    if (kvt_cli_device_auto("serve", &x->dev)) return -1;
    const char *env_key = getenv("KVTIER_API_KEY");
    if (env_key && *env_key) {
        if (x->n_keys == MAX_API_KEYS) {
            fprintf(stderr, "kvtier serve: more than %d API keys\n", MAX_API_KEYS);
            return -1;
        }
        x->keys[x->n_keys++] = kvt_xstrdup(env_key);
    }
    if (x->metrics_key && !*x->metrics_key) {
        fprintf(stderr, "kvtier serve: the metrics key (--metrics-key or $KVTIER_METRICS_KEY) is empty\n");
        return -1;
    }
    sp->metrics_key = x->metrics_key;
    if (x->admin_key && !*x->admin_key) {
        fprintf(stderr, "kvtier serve: the admin key (--admin-key or $KVTIER_ADMIN_KEY) is empty\n");
        return -1;
    }
    for (size_t i = 0; x->admin_key && i < x->n_keys; i++)
        if (!strcmp(x->keys[i], x->admin_key)) {
            fprintf(stderr,
                    "kvtier serve: the admin key is also an API key: a tenant would hold the operator's "
                    "rights; give --admin-key a key of its own\n");
            return -1;
        }
    sp->admin_key = x->admin_key;
    sp->max_body = (size_t)x->max_body;
    uint64_t max_inflight = x->max_inflight;
    if (!max_inflight) {
        max_inflight = KVT_MAX(sp->max_inflight_bytes, x->max_body);
    } else if (max_inflight < x->max_body) {
        fprintf(stderr, "kvtier serve: --max-inflight-bytes (%llu) must be at least --max-body (%llu)\n",
                (unsigned long long)max_inflight, (unsigned long long)x->max_body);
        return -1;
    }
    sp->max_inflight_bytes = max_inflight;
    sp->cors_origins = x->cors;
    sp->n_cors_origins = x->n_cors;
    sp->api_keys = (const char *const *)x->keys;
    sp->n_api_keys = x->n_keys;
    if (x->conn_reserve >= 0) sp->conn_reserve = (unsigned)x->conn_reserve;
    else if (sp->conn_reserve >= sp->max_conns) sp->conn_reserve = sp->max_conns / 8; /* the default's share */
    if (sp->conn_reserve >= sp->max_conns) {
        fprintf(stderr, "kvtier serve: --conn-reserve (%u) must be less than --max-conns (%u)\n", sp->conn_reserve,
                sp->max_conns);
        return -1;
    }
    sp->trusted_proxies = (const char *const *)x->proxies;
    sp->n_trusted_proxies = x->n_proxies;
    if (sp->approximate_reuse && x->dev.vulkan) {
        fprintf(stderr,
                "kvtier serve: --approximate-reuse runs on the CPU engine only (it rewrites stored keys "
                "in place); leave it out with --device vulkan, or use --device cpu\n");
        return -1;
    }
    return 0;
}

int kvt_cmd_serve(int argc, char **argv) {
    serve_args x = {.sp = kvt_server_default_params(),
                    .drain_s = KVT_SERVER_DEFAULT_DRAIN_S,
                    .block = KVT_DEFAULT_BLOCK_SIZE,
                    .conn_reserve = -1,
                    .threads = kvt_cli_default_threads(),
                    .cp = kvt_cache_default_params(),
                    .dt = KVT_KV_F16,
                    .tmpl = {.jinja = KVT_CLI_JINJA_DEFAULT}};
    x.max_body = x.sp.max_body;
    x.keys = kvt_xcalloc(MAX_API_KEYS, sizeof *x.keys);
    int ret = 2;
    kvt_cli_section secs[SERVE_SECTIONS];
    sections(secs);
    int pr = kvt_cli_parse("serve", argc, argv, secs, SERVE_SECTIONS, serve_opt, &x);
    if (pr == KVT_CLI_PARSE_HELP) {
        kvt_usage_serve(stdout);
        ret = 0;
    } else if (!pr && x.version) {
        printf("kvtier %s\n", KVT_VERSION);
        ret = 0;
    } else if (!pr && !serve_settings(&x)) {
        ret = 1;
        kvt_cli_kv_notice("serve");
        char default_path[KVT_SERVE_PATH_MAX];
        const char *model_path = x.model_path;
        if (!model_path && !kvt_default_model_path(default_path, sizeof default_path)) model_path = default_path;
        if (model_path) {
            serve_runtime rt = {0};
            if (!kvt_cli_serve_open(&x, model_path, &rt)) ret = kvt_cli_serve_run(&x, &rt);
            kvt_cli_serve_close(&rt);
        }
    }
    kvt_log_close_file();
    for (size_t i = 0; i < x.n_keys; i++) free(x.keys[i]);
    free(x.keys);
    for (size_t i = 0; i < x.n_proxies; i++) free(x.proxies[i]);
    kvt_cli_template_args_free(&x.tmpl);
    return ret;
}
