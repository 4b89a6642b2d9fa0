// SPDX-License-Identifier: MIT
/* The HTTP server behind `kvtier serve`: libmicrohttpd (one thread per
 * connection) in front of ONE engine thread that owns the engine and the
 * cache and runs continuous batching over up to `parallel` sequences.
 *
 * Flow. A handler thread parses and validates a request (api_openai.h),
 * renders/tokenizes its prompt (the tokenizer is immutable, so this is safe on
 * any thread), and enqueues it in a bounded queue (full: 503 + Retry-After).
 * The engine thread admits queued requests into free sequence slots
 * (kvt_cache_attach restores the cached prefix under the request's salt
 * root), then loops: one kvt_batch holds a decode token of every generating
 * sequence plus one prefill chunk of at most one prompting sequence, pages are
 * reserved (kvt_cache_reserve), kvt_engine_decode runs, completed blocks are
 * registered (kvt_cache_commit), tokens are sampled per request and their text
 * published to the waiting handler (non-streaming) or SSE reader (streaming).
 * A client that goes away cancels its request (a reset, a failed write, or,
 * while a non-streamed answer is awaited, its FIN: a closed and a half-closed
 * socket look alike); its sequence is freed and its full blocks stay cached.
 *
 * Sessions. A request may name its agent session, priority and keep-warm
 * time ({"kvtier": {"session_id", "priority", "keep_warm_s"}}, or the
 * X-Session-Id header). When it finishes, its whole context is kept warm in
 * T0 (kvt_cache_keep_warm) while the agent runs its tool; under pressure warm
 * sessions yield, lowest priority first, and their blocks move down a tier.
 *
 * Scheduling. Among the first SCHED_WINDOW queued requests, the highest
 * priority and then the longest T0-resident prefix is admitted first (as
 * SGLang's longest-prefix-first), bounded: a request passed over
 * SCHED_MAX_SKIPS times goes next. The request at the head of the queue has
 * its cached prefix restored from T1/T2 into free pages while it waits.
 *
 * llama-server's extras. POST /tokenize and /detokenize, GET /props (behind
 * the API key when one is set), and CORS for browser clients (--cors-origin).
 *
 * Admin. /v1/cache/pin, /unpin, /prefetch, /flush and GET /v1/cache/stats
 * (behind the API key when one is set) run as jobs on the engine thread. */
#ifndef KVT_SERVER_H
#define KVT_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "chat.h"
#include "kvtier.h"
#include "sampler.h" /* KVT_SAMPLER_MAX_STEPS */

#define KVT_SERVER_DEFAULT_PORT 8080
#define KVT_SERVER_DEFAULT_PARALLEL 4
#define KVT_SERVER_DEFAULT_QUEUE 64
#define KVT_SERVER_DEFAULT_MAX_BODY (8u << 20)
#define KVT_SERVER_DEFAULT_MAX_INFLIGHT (64u << 20)
#define KVT_SERVER_DEFAULT_MAX_TOKENS 4096
#define KVT_SERVER_DEFAULT_TIMEOUT_S 30
#define KVT_SERVER_DEFAULT_REQUEST_TIMEOUT_S 60
#define KVT_SERVER_DEFAULT_CONNS_PER_IP 64
#define KVT_SERVER_DEFAULT_MAX_CONNS 512   /* each open connection has a thread */
#define KVT_SERVER_DEFAULT_CONN_RESERVE 64 /* an eighth of the default cap: 64 new addresses get in */
#define KVT_SERVER_DEFAULT_HEADER_TIMEOUT_S 10
#define KVT_SERVER_DEFAULT_DRAIN_S 30
#define KVT_SERVER_DEFAULT_PREFILL_CHUNK 256
#define KVT_SERVER_DEFAULT_KEEP_WARM_S 60.0
#define KVT_SERVER_DEFAULT_RESPONSES 1024             /* stored responses (--responses-max) */
#define KVT_SERVER_RESPONSES_MAX_BYTES (256ull << 20) /* and the text they may hold at most */
#define KVT_SERVER_DEFAULT_RESPONSES_TTL_S 86400      /* and how long one lives (--responses-ttl) */

/* Poolings of an embedding over the prompt's final hidden rows (after the output norm). */
typedef enum { KVT_POOL_NONE = 0, KVT_POOL_MEAN, KVT_POOL_LAST, KVT_POOL_CLS } kvt_pooling;

typedef struct {
    const char *host;                   /* address to bind: IPv4, IPv6 ("::1" or "[::1]") or a host name resolved
                                   with getaddrinfo (an IPv4 address preferred); "127.0.0.1" by default */
    int port;                           /* 0 = any free port (see kvt_server_port) */
    int32_t parallel;                   /* sequences decoded together (engine max_seqs must be >= this) */
    int32_t queue;                      /* requests waiting for a slot at most */
    size_t max_body;                    /* request body bytes at most (413 above) */
    uint64_t max_inflight_bytes;        /* body bytes held by all requests in flight at most (503 + Retry-After
                                    above); at least max_body */
    int32_t max_tokens_limit;           /* max_tokens a request may ask for */
    int spm_infill;                     /* /infill writes the suffix first (--spm-infill) */
    int32_t default_max_tokens;         /* max_tokens of a request that gives none (-n); 0: OpenAI's defaults;
                                           -1 (llama.cpp's "no limit"): as many as fit, up to max_tokens_limit */
    int32_t prefill_chunk;              /* prompt tokens per engine step for one sequence */
    unsigned timeout_s;                 /* idle connection timeout (slow or stalled clients) */
    unsigned request_timeout_s;         /* a connection must deliver each request's headers and body within this,
                                   from its start or its previous response's end; 0 = no deadline */
    unsigned header_timeout_s;          /* a connection must deliver each request's headers within this, from its
                                   start or its previous response's end (so an idle keep-alive connection
                                   closes after it too); 0 = no header deadline */
    unsigned max_conns_per_ip;          /* open connections from one IP address at most; 0 = no limit */
    unsigned max_conns;                 /* open connections at most */
    unsigned conn_reserve;              /* of max_conns, the last ones only an address with no connection open may
                                   take (so a new client can always connect); less than max_conns */
    const char *const *trusted_proxies; /* n_trusted_proxies IP addresses (borrowed): their connections are not
                                           held to max_conns_per_ip, and a request's client, for that quota
                                           and the access log, is the last X-Forwarded-For entry that is not
                                           one of them. None: X-Forwarded-For is ignored */
    size_t n_trusted_proxies;
    const char *const *api_keys; /* n_api_keys keys for the /v1/ paths (borrowed); none = no authentication */
    size_t n_api_keys;
    const char *metrics_key;        /* the only key that opens /metrics (borrowed); NULL: with api_keys any
                                   of them does, without, /metrics is open. /health is always open. */
    const char *admin_key;          /* the operator's key (borrowed), never a tenant's: it alone opens
                                   GET /v1/cache/lint (prompt text), sees every tenant's pins in
                                   /v1/cache/stats and may release any pin or session; it also opens
                                   /metrics and /dashboard. NULL: no admin; lint is then refused */
    int explain_text;               /* 1: a diverged reuse_stop shows the nearest cached block's text and ids
                                   (cached_text, cached_tokens); they come from the caller's own namespace
                                   (API key + cache_salt), whose clients the operator declares trust each
                                   other. 0 (default): only the caller's own prompt side is shown */
    int hide_cached_tokens;         /* 1: responses carry no cache report (no prompt_tokens_details, no
                                   "kvtier" object, no pinned/resident counts), and /metrics, /dashboard
                                   and the global part of /v1/cache/stats need the metrics or admin key:
                                   for clients of one namespace that do not trust each other */
    kvt_chat_family chat;           /* template for /v1/chat/completions */
    const struct kvt_jinja *jinja;  /* --jinja, --chat-template-file: chat prompts are this Jinja template's
                                       rendering (borrowed), tokenized with special tokens recognised;
                                       NULL: the family's built-in rendering (chat above) */
    int jinja_object_args;          /* tool call arguments reach the template as JSON objects (it has
                                       tojson), else as their JSON text */
    int jinja_toolless;             /* the template above renders no tools: a chat with tools, tool calls or
                                       tool results gets the family's built-in rendering (chat), which writes
                                       them, and its answer says kvtier.renderer "builtin" */
    int reasoning_format;           /* KVT_REASONING_DEEPSEEK (default) or KVT_REASONING_NONE */
    const char *model_id;           /* name in /v1/models and responses (borrowed) */
    const char *const *model_names; /* n_model_names other names a request's "model" may give (borrowed):
                                        more --alias names, the file's name. Any other is a 404 */
    size_t n_model_names;
    /* the text of the Jinja template above (borrowed; /props shows it), or NULL */
    const char *jinja_text;
    /* --chat-template-kwargs: variables every chat's template gets under the request's
     * chat_template_kwargs (borrowed), or NULL */
    const struct cJSON *template_kwargs;
    double session_keep_warm_s;      /* keep-warm time of a named session that gives none (0: off) */
    int retokenize_replies;          /* 1: chat history is always tokenized from its text; 0 (default): an assistant
                                   message (or tool call) this server generated keeps the token ids (and the
                                   arguments text) it was generated with, so the next turn reuses its KV */
    const char *const *cors_origins; /* n_cors_origins browser origins allowed (borrowed); "*" allows any.
                                        None: no CORS headers and OPTIONS is 405 */
    size_t n_cors_origins;
    const struct kvt_rag_index *rag; /* --rag-index: serves POST /v1/rag/chat/completions (borrowed); NULL: 404 */
    int32_t rag_k;                   /* chunks a RAG request retrieves when it gives no kvtier.rag.k */
    int rag_retrieve;                /* a kvt_rag_retrieve: how a RAG request retrieves when it gives no
                                        kvtier.rag.retrieve (--rag-retrieve; default bm25) */
    int32_t rag_rrf_k;               /* hybrid retrieval's reciprocal rank constant (--rag-rrf-k) */
    int rag_dense;                   /* 1: dense and hybrid retrieval can run: the index has vectors of the
                                        served model and the engine is the CPU's (the question is embedded
                                        as an engine request, pooled as the index says) */
    int approximate_reuse;           /* 1: a request may ask for kvtier.reuse "approximate" (docs/rag.md
                                   "Approximate reuse"); 0 (default): such a request is a 400 */
    float recompute_ratio;           /* of the documents' placed tokens, the fraction recomputed when a request
                                   gives no kvtier.recompute_ratio */
    int embeddings; /* 1: POST /v1/embeddings and /embedding answer (--embeddings); 0: they are a 404 */
    int pooling;    /* how an embedding pools the prompt's final hidden rows: a KVT_POOL_* */
    int strict;     /* 1: a top-level request field the endpoint does not read is a 400 naming
                                   it; 0 (default): ignored, as OpenAI does */
    /* sampling of a request that does not set it (--temp, --top-k, --top-p, --seed): by default OpenAI's,
       temperature 1, top_p 1, no top_k, and a fresh seed per request */
    int metrics_names; /* /metrics also gives llama-server's llamacpp: names (KVT_METRICS_LLAMACPP,
                                        the default) and vLLM's vllm: names (KVT_METRICS_VLLM); 0: kvtier's only */
    float default_temperature, default_top_p;
    int32_t default_top_k;
    /* the penalties and min-p of a request that does not set them (--min-p, --repeat-penalty,
       --repeat-last-n, --presence-penalty, --frequency-penalty): by default off; the window is the
       last 64 tokens of the prompt and the reply, -1 all of them, 0 turns the penalties off, as a
       request's repeat_last_n */
    float default_min_p, default_repeat_penalty, default_presence_penalty, default_frequency_penalty;
    int32_t default_penalty_last_n;
    uint64_t default_seed;
    int has_default_seed;
    /* typical, XTC, dynamic temperature, Mirostat and min_keep of a request that does not set them
       (--typical, --xtc-probability, ...: cli_sampling.h); only those fields are read */
    kvt_sampler_params default_sampling;
    /* DRY's sequence breakers of a request that sets none (--dry-sequence-breaker, given n times) */
    kvt_dry_breakers default_dry_breakers;
    /* --samplers: the order of the sampling steps of a request that gives no "samplers"
       (kvt_sample_step values); has_default_steps 0: kvtier's own order */
    int has_default_steps;
    int32_t n_default_steps;
    uint8_t default_steps[KVT_SAMPLER_MAX_STEPS];
    size_t responses_max; /* stored responses (POST /v1/responses with store) kept at most, the least
                             recently used dropped first; 0: none are kept */
    /* seconds a stored response lives from when it was made (reads do not extend it); 0: no limit */
    double responses_ttl_s;
} kvt_server_params;

kvt_server_params kvt_server_default_params(void);

/* --reasoning-format: what a chat reply's <think>...</think> becomes. DEEPSEEK
 * (llama-server's name; the default): message.reasoning_content (and
 * delta.reasoning_content when streamed), content the text after it. NONE:
 * left in content as generated. */
#define KVT_REASONING_DEEPSEEK 0
#define KVT_REASONING_NONE 1

typedef struct kvt_server kvt_server;

/* Starts listening and the engine thread. The model, engine and cache are
 * borrowed and must outlive the server; from now on only the engine thread
 * touches the engine and cache. params' strings must outlive the server.
 * Returns 0 and *out, or a negative code with kvt_errmsg() (e.g. the port is
 * taken). */
int kvt_server_start(const kvt_model *model, kvt_engine *e, kvt_cache *c, const kvt_server_params *params,
                     kvt_server **out);

/* The port actually bound. */
int kvt_server_port(const kvt_server *s);
/* The address bound, numeric, as a URL writes it ("127.0.0.1", "[::1]");
 * valid until kvt_server_stop. */
const char *kvt_server_address(const kvt_server *s);

/* Begins a graceful drain: new connections are refused (the listening socket
 * closes) and requests arriving on open connections get 503 + Retry-After,
 * while queued and running requests go on. Call from one thread; then wait
 * for kvt_server_in_flight to reach 0 (or a deadline) and kvt_server_stop. */
void kvt_server_quiesce(kvt_server *s);

/* Requests from their headers to the end of their response: queued, running,
 * or being sent. Thread-safe. */
int32_t kvt_server_in_flight(kvt_server *s);

/* Stop: refuses new requests (503), ends running ones (503 or an error event
 * for streams), joins every thread, frees s. Call from one thread. */
void kvt_server_stop(kvt_server *s);

#endif
