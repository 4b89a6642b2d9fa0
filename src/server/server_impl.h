// SPDX-License-Identifier: MIT
/* The server's private state and the declarations its files share. Not for
 * use outside src/server/. Its files call one way, down the folders:
 *   server.c                 the lifecycle: start, quiesce, stop
 *   http/ (libmicrohttpd's threads)
 *     http_router.c          the callbacks, the route table and dispatch, keys,
 *                            framing, the access log
 *     handlers.c             generation, tokenize, and the GET pages
 *     handlers_admin.c       /v1/cache/{pin,unpin,prefetch,flush,stats} (engine
 *                            jobs) and /v1/cache/lint
 *     generate_reply.c       a generation's answer: its JSON, or its SSE stream
 *     http_send.c            what handlers answer with (kvt_srv_send_*), CORS,
 *                            the per-connection context (http_send.h)
 *     http_guard.c, http_conns.c   the body budget, deadlines, framing checks;
 *                            the per-address connection quota
 *   sched/
 *     sched_submit.c         the engine-side request built from an API request,
 *                            n > 1 choices, queueing, cancelling, references
 *     req_state.c            a request's references, waking its handler, failing it
 *     scheduler.c and its parts (scheduler.h): the engine thread's admission,
 *                            cache-aware scheduling, prefetch, continuous
 *                            batching, admin jobs
 *   api/                     the OpenAI surface as data (api_*.c: request
 *                            parsing, response and error JSON, tools, RAG),
 *                            json_strict.c, metrics.c, dashboard.c, and the
 *                            rings of recent prompts and requests
 *
 * Locking: one mutex (s->mu) guards the queue, every request's shared state
 * (text published so far, done/cancelled flags, refcount), the admin job list
 * and the metrics snapshot. The engine thread never holds it while computing. */
#ifndef KVT_SERVER_IMPL_H
#define KVT_SERVER_IMPL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "api_llama.h"
#include "api_openai.h"
#include "api_response.h"
#include "api_responses.h"
#include "api_responses_store.h"
#include "api_rag.h"
#include "api_tools.h"
#include "api_utf8.h"
#include "blend.h"
#include "cache.h"
#include "cache_events.h"
#include "dashboard_ring.h"
#include "engine.h"
#include "http_conns.h"
#include "http_guard.h"
#include "json_grammar.h"
#include "json_lazy.h"
#include "metrics.h"
#include "progress.h"
#include "prompt_ring.h"
#include "model.h"
#include "reply_journal.h"
#include "sampler.h"
#include "server.h"
#include "tokenizer.h"

#define WAIT_SLICE_MS 100      /* how often a waiting handler checks that its client is still there */
#define STREAM_BLOCK 4096      /* MHD buffer for streamed responses */
#define RETRY_AFTER_S "1"      /* Retry-After on 503 when the queue is full */
#define REPLY_MAP_ENTRIES 4096 /* replies remembered for the next chat turn */
#define REPLY_MAX_IDS 65536    /* longer replies are not remembered */
#define CALL_MEMO_ENTRIES 4096 /* tool calls whose exact arguments text is remembered */
#define PIECE_INIT 64          /* bytes of one token's text, grown as needed */
#define LOGPROBS_INIT 16       /* logprob entries of a request, grown as needed */
#define ID_LEN 64
#define PIN_ID_BYTES 16 /* random bytes of a pin id (128 bits, printed in hex) */
#define BEARER "Bearer"
#define SESSION_HEADER "X-Session-Id"
/* Cache-aware scheduling: among the first SCHED_WINDOW queued requests the
 * one with the highest priority, then the most T0-resident prefix, goes
 * first; one passed over SCHED_MAX_SKIPS times goes next regardless. */
#define SCHED_WINDOW 8
#define SCHED_MAX_SKIPS 4
/* Prefetch for a waiting request leaves this many free pages per running
 * sequence (plus a prefill chunk) for the work in flight. */
#define PREFETCH_MARGIN_PER_SLOT 2
#define ADMIN_WAIT_MS 100
#define HELD_WAIT_MS 50 /* how long an engine with only held replies (KVT_TEST_HOLD_SESSION) waits between looks */
#define STATUS_CLIENT_GONE 499 /* nginx's "client closed request", for metrics and the access log */
#define REQUEST_ID_HEADER "X-Request-Id"
#define REQUEST_ID_MAX 65 /* bytes of a request id, with its NUL */
#define REQUEST_ID_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-"
#define ACCESS_METHOD_MAX 16  /* bytes of a method in the access log */
#define ACCESS_PATH_MAX 128   /* bytes of a path in the access log */
#define ACCESS_TOKENS_MAX 160 /* bytes of the access log's token part */
#define TENANT_HEX_LEN 8      /* hex digits of the hashed API key in the access log */
#define HOST_MAX 256          /* bytes of a --host name or address */

/* ---- shared request state ------------------------------------------------------ */

typedef struct srv_req {
    int refs; /* under s->mu: the handler's and the engine's */
    kvt_api_kind kind;
    int stream, include_usage;
    char id[ID_LEN];
    char request_id[REQUEST_ID_MAX]; /* the HTTP request's (X-Request-Id), for log lines; "" for admin jobs */
    int64_t created;
    int32_t *prompt;
    int32_t n_prompt, max_tokens;
    kvt_sampler_params sp; /* sp.bias_id and sp.bias point at bias_id and bias */
    int32_t *bias_id;      /* logit_bias (owned) */
    float *bias;
    uint8_t *dry_breaker;     /* (n_vocab) DRY's sequence breakers by token (owned), sp.dry_breaker; NULL: DRY off */
    int ignore_eos;           /* llama.cpp's extension: generate past end-of-generation tokens */
    int32_t n_indent;         /* llama.cpp's: a later line indented less ends the reply (sched_step.c); <= 0: off */
    int64_t t_max_predict_ms; /* llama.cpp's: a reply past a newline ends after this long; <= 0: off */
    int logprobs;             /* record each generated token's logprob ... */
    int32_t top_logprobs;     /* ... and this many alternatives */
    char *stop[KVT_API_MAX_STOP];
    int n_stop;
    unsigned char *salt;
    size_t salt_len;
    double t_arrival;
    kvt_api_session session; /* kvtier.{session_id, priority, keep_warm_s}, or X-Session-Id */
    size_t *doc_starts;      /* kvtier.documents: n_docs + 1 offsets in prompt (kvt_render_documents_spans); owned */
    size_t n_docs;
    int prefill_only;   /* /v1/cache/prefill: done once the prompt's KV is computed and cached */
    int embed;          /* an embedding (with prefill_only): a kvt_pooling; 0 otherwise */
    double *embed_sum;  /* (n_embd) the sum of the pooled hidden rows (owned; the engine's until done) */
    int plan_cached;    /* RAG "cached" order: kvt_rag_plan_cached reorders the documents at admission, */
    int32_t *doc_order; /* ... doc_order[i] = the canonical index of the document at position i (owned) */
    double plan_ms;     /* ... and how long it took */
    int approximate;    /* kvtier.reuse "approximate": documents the exact prefix misses are placed
                                  from stored KV (a kvt_blend_job, in prefill chunks) with blend's ratio */
    kvt_blend_params blend;
    int want_block_tiers; /* RAG: record the tier of each matched block at admission ... */
    uint8_t *block_tiers; /* ... here (owned; written by the engine thread before done) */
    int32_t n_block_tiers;
    struct srv_req **sib; /* n > 1: choices 1..n-1, forked from this one's prompt (array owned; the handler
                                  and the engine each hold a reference on every one) */
    int32_t n_sib;
    int is_sib;             /* a choice other than the first: its prompt is counted once, on the first */
    struct srv_req *first;  /* of a choice other than the first: the first (referenced), whose cv it wakes too */
    kvt_jg_schema *grammar; /* the output must follow it (a forced tool call, response_format), or NULL (owned) */
    kvt_jg_lazy_spec *lazy; /* tool_choice auto: the calls the reply writes must follow it, or NULL (owned) */
    int tools;              /* read the reply for tool calls (kvt_api_tools_active) */
    int think_open;         /* the prompt ends inside "<think>" (the template opened it): the reply starts
                               as reasoning */
    int split_reasoning;    /* a chat reply's <think>...</think> goes to reasoning_content (the request's
                               reasoning_format, else --reasoning-format) */
    int parallel_tool_calls;
    /* a stored Responses request (kvt_api_request.keep_history): what its follow-up needs, all but the
     * ids (kvt_srv_make_request; owned, NULL when it cannot be kept), and its reply's ids as the reply
     * map has them (the engine thread, before done; owned) */
    struct kvt_resp_prefix *kept;
    int32_t *reply_ids;
    size_t n_reply_ids;
    int native;        /* POST /completion: llama-server's answer and stream events (handlers_llama.c) */
    int return_tokens; /* ... and its "tokens": the generated ids, published in gen_ids */
    int32_t id_slot;   /* under s->mu: the slot it runs in, -1 before (llama-server's id_slot, GET /slots) */
    int32_t n_decoded; /* under s->mu: tokens generated so far (GET /slots) */
    /* engine thread only */
    int skipped;    /* admissions that passed it over (cache-aware scheduling) */
    int prefetched; /* its prefix was restored into T0 while it waited */
    int32_t prefetched_tokens;
    /* published by the engine thread, under s->mu */
    char *text; /* valid UTF-8 emitted so far */
    size_t text_len, text_cap;
    /* one per generated token when logprobs (lp_ready of cap_lp); the first n_lp are published: those
     * of the tokens whose text was, so they never run ahead of the text nor cover a stop string */
    kvt_api_logprob *lp;
    size_t n_lp, lp_ready, cap_lp;
    int32_t *gen_ids; /* the generated ids when return_tokens (n_gen_ids of cap_gen_ids) */
    size_t n_gen_ids, cap_gen_ids;
    int done, cancelled;
    const char *finish_reason; /* "stop" / "length" */
    int stop_word;             /* "stop" because of stop[stop_word - 1]; 0: end of generation or a grammar */
    int cut_by_stop;           /* "length" because the server stopped mid-stream (a drain's end), not the budget */
    int err_status;            /* 0 or the HTTP status of a failure */
    char err_msg[256];
    kvt_api_usage usage;
    pthread_cond_t cv;
} srv_req;

/* A running sequence: engine-thread state only. */
typedef struct {
    srv_req *r; /* NULL: the slot is free */
    int32_t seq;
    kvt_chain chain; /* key chain, registered blocks (kvt_cache_commit) */
    int32_t *toks;   /* prompt then generated ids (n_toks of cap) */
    int32_t n_toks, cap;
    int32_t n_fed; /* tokens in the sequence while prefilling */
    int prefilling;
    int stop_open; /* admitted, its reuse stop not counted yet: its prefill may still reuse more */
    /* generating, its sequence given up for want of KV pages (sched_step.c): its blocks stay cached
     * (moving down a tier, not out) and the rest of its state here, until kvt_srv_resume_parked puts
     * its tokens back; it holds no pages and the engine steps pass it by */
    int parked;
    int32_t resume_to;     /* prefilling after it was parked: the tokens to put back (all but pending); 0: the prompt */
    kvt_blend_job *blend;  /* approximate reuse placing documents, a chunk per step before the prefill
                                  goes on (owned; NULL once done or for exact requests) */
    int32_t blend_decoded; /* decode tokens other slots got in the steps of blend */
    int waiting;           /* a choice held for its fork: the first choice (slot fork_of) is prefilling */
    int32_t fork_of;
    int held;          /* complete, but kept in its slot with its pages until its client leaves (s->test_hold) */
    uint64_t admitted; /* admission order: the oldest prompt is prefilled first */
    kvt_sampler *smp;
    kvt_jg *jg;       /* the request's grammar state, or NULL */
    kvt_jg_lazy *lz;  /* the request's lazy grammar state, or NULL */
    int32_t lazy_tok; /* a control token standing for lz's trigger, rendered as its text; -1: none */
    int32_t n_gen;
    double t_last_token;          /* kvt_now() when the last token was sampled (the inter-token histogram) */
    double t_first_token;         /* kvt_now() when the first was (t_max_predict_ms counts from it) */
    int had_newline;              /* an earlier token's text held a newline (n_indent, t_max_predict_ms) */
    int line_open;                /* n_indent: the line from line_start has no character past its indent yet */
    size_t line_start, line_scan; /* n_indent: that line's start; raw is read for newlines from line_scan */
    int32_t pending;              /* sampled, to be fed next step */
    char *raw;                    /* generated bytes */
    size_t raw_len, raw_cap, raw_emitted;
    size_t *tok_end;       /* raw_len after each generated token */
    int progress;          /* progress lines for this long prefill (kvt_srv_prefill_progress) */
    int32_t progress_from; /* n_fed when they began */
    kvt_progress prog;
} slot;

/* An admin request (/v1/cache/...), run as a job on the engine thread. */
typedef enum { JOB_PIN, JOB_UNPIN, JOB_PREFETCH, JOB_FLUSH, JOB_STATS, JOB_LOOKUP } job_kind;

typedef struct admin_job {
    job_kind kind;
    srv_req *r;          /* prompt and salt (pin, prefetch); NULL otherwise */
    char *pin_id;        /* unpin: a pin id, or NULL */
    char *session;       /* unpin: a warm session, or NULL */
    unsigned char *salt; /* unpin, stats: the caller's tenant salt (API key + cache_salt; owned) */
    size_t salt_len;
    int admin;  /* the caller holds the admin key: every tenant's pins and sessions */
    int status; /* HTTP status of the result */
    char *json; /* the response body (owned) */
    int done;
    struct admin_job *next;
} admin_job;

/* A pin made through /v1/cache/pin: its id is random (PIN_ID_BYTES from the
 * kernel), and it belongs to the namespace it was made in (root), whose
 * callers alone see and release it (and the admin key). */
typedef struct server_pin {
    char id[ID_LEN];
    kvt_hash128 root;
    kvt_pin *pin;
    int32_t tokens;
} server_pin;

struct kvt_server {
    kvt_server_params p;
    const kvt_model *model;
    const kvt_tokenizer *tok;
    kvt_engine *e;
    kvt_cache *cache;
    int32_t n_ctx, n_vocab, block;
    kvt_reply_map *replies;
    kvt_reply_journal *journal; /* the reply map kept in T2's directory, or NULL */
    kvt_call_memo *calls;       /* generated tool calls by call id: their arguments text, their reply */
    kvt_resp_store *responses;  /* stored responses of POST /v1/responses, by tenant and id */
    kvt_prompt_ring *recent;    /* the last prompts, by tenant salt, for GET /v1/cache/lint */
    kvt_req_ring *reqs;         /* the last generations' cache reports, for /dashboard */
    kvt_metrics *metrics;
    kvt_http_guard *guard; /* the request body budget and whole-request deadlines */
    kvt_http_conns *conns; /* the per-address connection quota, the reserve, trusted proxies */
    struct MHD_Daemon *mhd;
    int port;
    char address[HOST_MAX]; /* the bound address, numeric, IPv6 in brackets */
    pthread_t engine_thread;
    pthread_mutex_t mu;
    pthread_cond_t engine_cv;
    srv_req **queue; /* ring of p.queue */
    int32_t q_head, q_len;
    int stopping;
    int draining;          /* under mu: kvt_server_quiesce ran; new requests get 503 */
    int device_lost;       /* under mu: the engine's GPU was lost: /health answers 503 (a restart is needed) */
    uint64_t next_request; /* under mu: numbers request ids the server makes */
    int64_t started;       /* time() at start, in request ids so they differ across restarts */
    int32_t n_requests;    /* under mu: requests from their headers to the end of their response */
    uint64_t next_id;
    kvt_cache_stats snap; /* under mu: sampled by the engine thread for /metrics */
    int32_t n_active;     /* under mu */
    /* under mu: a prompt went back to the queue for want of pages (sched_step.c); nothing is admitted
     * until a running request ends, since admitting it (or another) sooner would only take the pages
     * back, or until none runs */
    int mem_hold;
    /* $KVT_TEST_HOLD_SESSION, for tests only (NULL: unset): a reply of that kvtier.session_id, once
     * complete, keeps its slot and KV pages without generating until its client leaves or the server
     * stops, so a test can hold a slot or pages for as long as its checks take, however loaded the
     * machine (sched_finish.c) */
    char *test_hold;
    srv_req **slot_reqs; /* under mu: the request each slot runs (a reference each), for GET /slots */
    /* engine thread only */
    slot *slots;
    uint64_t n_admitted;
    float *logits;                  /* (parallel + 1, n_vocab) */
    kvt_jg_vocab *jg_vocab;         /* the vocabulary for grammars, built on first use */
    kvt_infill_vocab *infill_vocab; /* the infill sampler step's, built by the engine thread on first use */
    uint8_t *jg_mask;               /* (n_vocab) tokens a grammar allows now */
    float *jg_logits;               /* (n_vocab) the logits with the others at -inf */
    int32_t *jg_refused;            /* (n_vocab) the tokens a lazy grammar refuses before its trigger */
    int32_t *b_tok, *b_seq;
    int8_t *b_want;
    int8_t *b_hid; /* (max batch) the rows whose hidden state an embedding pools */
    float *hidden; /* (prefill_chunk, n_embd) those rows */
    /* a step's lists, parallel entries each: on the heap, as --parallel
     * sizes them and the engine thread's stack has a fixed size */
    srv_req **step_admit;   /* the requests a step takes from the queue */
    int8_t *step_cancelled; /* the slots whose client went away */
    slot **step_dec;        /* the generating slots */
    slot **step_forks;      /* the choices forked from a finished prompt */
    /* admin jobs (/v1/cache/...): queued under mu, run by the engine thread */
    admin_job *jobs;
    pthread_cond_t job_cv;
    /* engine thread only: pins made through /v1/cache/pin */
    server_pin *pins;
    int32_t n_pins, cap_pins;
    kvt_cache_events *events; /* what this node stores and evicts, for GET /v1/cache/events */
};

/* ---- HTTP (http_router.c) --------------------------------------------------------- */

typedef enum {
    R_NONE,
    R_COMPLETIONS,
    R_CHAT,
    R_MODELS,
    R_HEALTH,
    R_METRICS,
    R_TOKENIZE,
    R_DETOKENIZE,
    R_PROPS,
    R_RAG,
    R_PREFILL,
    R_DASHBOARD,
    R_DASHBOARD_REQUESTS,
    R_CACHE_PIN,
    R_CACHE_UNPIN,
    R_CACHE_PREFETCH,
    R_CACHE_FLUSH,
    R_CACHE_STATS,
    R_CACHE_LINT,
    R_LLAMA_COMPLETION, /* llama-server's POST /completion */
    R_INFILL,           /* llama-server's POST /infill: a /completion of a fill-in-the-middle prompt */
    R_APPLY_TEMPLATE,
    R_SLOTS,
    R_EMBEDDINGS,      /* POST /v1/embeddings */
    R_LLAMA_EMBEDDING, /* llama-server's POST /embedding */
    R_CACHE_LOOKUP,    /* GET or POST /v1/cache/lookup (handlers_lookup.c) */
    R_CACHE_EVENTS,    /* GET /v1/cache/events */
    R_RESPONSES,       /* POST /v1/responses */
    R_RESPONSE_ITEM,   /* GET and DELETE /v1/responses/{id} */
    R_RESPONSE_INPUT,  /* GET /v1/responses/{id}/input_items */
    R_MODEL_ITEM       /* GET /v1/models/{id} */
} route;

struct conn_state;
/* A route's handler: answers the request whose whole body is in cs. */
typedef enum MHD_Result (*route_handler)(kvt_server *s, struct MHD_Connection *c, struct conn_state *cs);

/* Per-connection-request state (MHD's con_cls), from the request's headers to
 * on_completed; every request has one. */
typedef struct conn_state {
    route r;              /* R_NONE until the route is known (and for unknown ones) */
    route_handler handle; /* the route's, once known */
    const char *label;
    char *body;
    size_t len, cap;
    uint64_t reserved; /* bytes of the body budget (s->guard) this request holds */
    int refused;       /* 0, or the status that answers once the body has been read: 413 or 503 */
    const char *key;   /* the API key the request authenticated with (borrowed), or NULL */
    int admin;         /* the request carries the admin key (--admin-key) on a path it opens */
    /* for the access log */
    double t_start; /* kvt_now() at the headers */
    int status;     /* the status sent, 0 before */
    char method[ACCESS_METHOD_MAX], path[ACCESS_PATH_MAX];
    char request_id[REQUEST_ID_MAX];        /* the client's X-Request-Id when usable, else ours; echoed */
    char session[KVT_SESSION_NAME_MAX + 1]; /* X-Session-Id when usable, else "" */
    char client[KVT_HTTP_ADDR_TEXT];        /* the client's address: the peer's, or behind a trusted proxy the
                                        forwarded one */
    kvt_api_usage usage;                    /* of a generation, once it ended */
    int has_usage;
} conn_state;

/* MHD's callbacks: a request's headers, body and end; a connection's start and end. */
enum MHD_Result kvt_srv_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                   const char *version, const char *upload_data, size_t *upload_size, void **con_cls);
void kvt_srv_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe);
void kvt_srv_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                           enum MHD_ConnectionNotificationCode code);
/* MHD's accept policy: the per-address quota and the reserve for new addresses (http_conns.h). */
enum MHD_Result kvt_srv_on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen);

/* ---- handlers (handlers.c, handlers_admin.c) ---------------------------------------- */

/* Parses cs's body as the API request its route takes (completions or chat);
 * kvtier.rag is refused off the RAG route; the session is completed from the
 * headers (kvt_srv_session_default). 0, or nonzero with *err filled (and
 * nothing in *a to free). */
int kvt_srv_parse(kvt_server *s, const conn_state *cs, kvt_api_request *a, kvt_api_error *err);
/* The same for a body of route r, without the RAG check. A "model" the server does not serve is a 404
 * model_not_found (its id, or a name in p.model_names, is accepted). */
int kvt_srv_parse_body(kvt_server *s, route r, const char *body, size_t len, kvt_api_request *a, kvt_api_error *err);
/* Whether a request's model name is the served model: its id, an --alias, the file's name, or "". */
int kvt_srv_model_known(const kvt_server *s, const char *name);
enum MHD_Result kvt_srv_handle_generate(kvt_server *s, struct MHD_Connection *c, conn_state *cs);
enum MHD_Result kvt_srv_handle_tokenize(kvt_server *s, struct MHD_Connection *c, conn_state *cs);
enum MHD_Result kvt_srv_handle_health(kvt_server *s, struct MHD_Connection *c, conn_state *cs);
enum MHD_Result kvt_srv_handle_models(kvt_server *s, struct MHD_Connection *c, conn_state *cs);
enum MHD_Result kvt_srv_handle_props(kvt_server *s, struct MHD_Connection *c, conn_state *cs);
/* /metrics, /dashboard (the same numbers as a page) and /dashboard/requests (its last requests as JSON) */
enum MHD_Result kvt_srv_handle_metrics(kvt_server *s, struct MHD_Connection *c, conn_state *cs);
/* Remembers a finished generation (cs->has_usage) in s->reqs for the dashboard; tenant is the
 * access log's key hash ("-" without one), total_ms arrival to end. */
void kvt_srv_note_recent(kvt_server *s, const conn_state *cs, const char *tenant, double total_ms);
enum MHD_Result kvt_srv_handle_admin(kvt_server *s, struct MHD_Connection *c, conn_state *cs);
/* llama-server's routes (handlers_llama.c): POST /completion, /apply-template, GET /slots; and
 * /v1/completions bodies with several prompts or echo, which kvt_srv_handle_generate hands on */
enum MHD_Result kvt_srv_handle_llama(kvt_server *s, struct MHD_Connection *c, conn_state *cs);
/* Whether a /v1/completions body needs kvt_srv_handle_llama: a prompt array of several prompts, echo, or a
 * suffix to fill in the middle before. */
int kvt_srv_completion_is_multi(const conn_state *cs);
/* POST /v1/embeddings and /embedding (handlers_embed.c) */
enum MHD_Result kvt_srv_handle_embeddings(kvt_server *s, struct MHD_Connection *c, struct conn_state *cs);
/* A RAG question's vector for dense retrieval (p.rag_dense): text tokenized as `kvtier rag index
 * --embed` tokenizes chunks (the model's start token, special-token spellings as plain text, cut to
 * the context), run as one prefill-only engine request pooled by pooling, L2-normalised into v
 * (n_embd floats). 0, or nonzero with *err (a full queue, a client gone, an engine error). */
int kvt_srv_embed_question(kvt_server *s, struct MHD_Connection *c, const struct conn_state *cs, const char *text,
                           const char *cache_salt, int pooling, float *v, kvt_api_error *err);
enum MHD_Result kvt_srv_handle_lint(kvt_server *s, struct MHD_Connection *c, conn_state *cs);
/* A query parameter's count (handlers_lookup.c): v is decimal digits only (no sign, space or
 * other text), at most max; 0 and *out set, else -1. */
int kvt_srv_query_count(const char *v, unsigned long long max, unsigned long long *out);
/* GET|POST /v1/cache/lookup and GET /v1/cache/events (handlers_lookup.c) */
enum MHD_Result kvt_srv_handle_lookup(kvt_server *s, struct MHD_Connection *c, conn_state *cs);
enum MHD_Result kvt_srv_handle_events(kvt_server *s, struct MHD_Connection *c, conn_state *cs);
/* The body of a lookup answer for r's prompt (sched_lookup.c): its block keys and, with
 * tiers (the engine thread only), how many of its tokens each tier holds here; counts
 * hides those numbers (--hide-cached-tokens to a client). */
char *kvt_srv_lookup_json(kvt_server *s, const srv_req *r, int tiers, int counts);
/* The Responses API (handlers_responses.c): POST /v1/responses, GET and DELETE /v1/responses/{id} */
enum MHD_Result kvt_srv_handle_responses(kvt_server *s, struct MHD_Connection *c, conn_state *cs);

/* ---- requests (sched_submit.c) ------------------------------------------------------- */

/* The tenant salt of a key and a cache_salt (either may be NULL): the key with
 * its NUL (key "ab" + salt "c" differs from key "a" + salt "bc"), then
 * cache_salt. NULL with *len 0 when both are absent. */
unsigned char *kvt_srv_tenant_salt(const char *key, const char *cache_salt, size_t *len);

/* sched_template.c: a chat prompt by the Jinja template s->p.jinja into
 * r->prompt (*n ids, at most max_prompt), r->think_open set; the replies
 * this server generated spliced in as their ids where the template renders
 * them unchanged, the first turn that is not in r->usage's report. *at gets
 * where kvtier.documents go (the token offset of the last user message's
 * content; *n without documents). 0, a tokenizer error code (KVT_ELIMIT: too
 * long), or 1 with *err filled (the template failed: raise_exception, a
 * limit; documents with no place). */
int kvt_srv_render_jinja(kvt_server *s, const kvt_api_request *a, size_t max_prompt, srv_req *r, size_t *at, size_t *n,
                         kvt_api_error *err);
/* sched_submit.c: a stored Responses request's state for its follow-up into r->kept, all but the ids
 * (its prompt's and reply's, which job_finish adds): rendered by the Jinja template (jinja 1) or the
 * built-in family, n_msgs messages, their hash (built-in) or the hash of the template's other variables
 * (Jinja), r->usage's report of the first turn not spliced, and (Jinja) its prompt's rendering
 * text[0..len). */
void kvt_srv_keep_history(srv_req *r, int jinja, size_t n_msgs, const uint64_t hash[2], const char *text, size_t len);
/* A follow-up's report (rerendered_turn) of the first turn of its history not spliced: the stored
 * response h's, which comes before any of its own; nothing when h has none. */
void kvt_srv_history_report(srv_req *r, const kvt_resp_prefix *h);
/* Whether a chat renders with the Jinja template s->p.jinja: there is one, and it renders tools or a
 * carries none (no tools, tool calls or tool results; else the family's built-in renderer does). */
int kvt_srv_uses_jinja(const kvt_server *s, const kvt_api_request *a);
/* Whether the server can honour a's chat_template_kwargs: all of them under
 * the Jinja rendering, else enable_thinking alone and only on the Qwen3 family (*no_think:
 * it is false). 0, or -1 with *err filled (a 400 naming the field). */
int kvt_srv_template_kwargs(const kvt_server *s, const kvt_api_request *a, int *no_think, kvt_api_error *err);
/* Appends Qwen3's empty thought to r's prompt of *n ids (enable_thinking false). 0 or an error code. */
int kvt_srv_append_no_think(kvt_server *s, srv_req *r, size_t *n, size_t max_prompt);
/* Builds the engine-side request from a validated API request: salt, prompt
 * ids, limits, sampling. Returns NULL with *err filled when it cannot run. */
srv_req *kvt_srv_make_request(kvt_server *s, const kvt_api_request *a, const char *key, kvt_api_error *err);
/* n > 1: the other choices of r (see sched_submit.c). 0, or -1 with *err filled. */
int kvt_srv_add_choices(kvt_server *s, const kvt_api_request *a, const char *key, srv_req *r, kvt_api_error *err);
/* A request's session before its prompt is rendered (a session's own replies
 * are spliced first): X-Session-Id names it when the body does not, and a
 * named one without keep_warm_s gets the server's default keep-warm time. */
void kvt_srv_session_default(const kvt_server *s, const conn_state *cs, kvt_api_session *ss);
/* The log line of a long prefill (KVT_PREFILL_PROGRESS_TOKENS or more tokens to
 * compute): at its start (done 0; cached tokens restored) and at its end
 * (done 1; with its time). Nothing for a shorter one. Engine thread. */
void kvt_srv_log_prefill(const srv_req *r, int32_t computed, int32_t cached, int done);
/* The id log lines name r by: its HTTP request's (the access line's), else its own. */
static inline const char *kvt_srv_log_id(const srv_req *r) { return r->request_id[0] ? r->request_id : r->id; }
/* Progress lines of slot sl's prefill, where someone watches for them (a
 * terminal, or serve --progress: kvt_progress_wanted) and it computes
 * KVT_PREFILL_PROGRESS_TOKENS or more: begun at admission (sl->n_fed tokens
 * in already), then after each chunk fed, ended once the prompt is in. */
void kvt_srv_prefill_progress(slot *sl, int begin);
/* Queues r for the engine (taking a reference for it). 0, or -1 when full. */
int kvt_srv_enqueue(kvt_server *s, srv_req *r);
/* The same with s->mu held: several requests queued in one critical section
 * reach the engine together, in this order (the scheduler's unit test). */
int kvt_srv_enqueue_locked(kvt_server *s, srv_req *r);
void kvt_srv_cancel_locked(kvt_server *s, srv_req *r);
/* Whether r and all its other choices are done (s->mu held). */
int kvt_srv_all_done(const srv_req *r);
/* Drops the engine's references on r's other choices, before r was queued. */
void kvt_srv_unref_engine_choices(kvt_server *s, srv_req *r);
/* Drops the handler's references on r and its other choices. */
void kvt_srv_unref_choices(kvt_server *s, srv_req *r);

/* ---- shared helpers ------------------------------------------------------------------ */

/* Condition variables on the monotonic clock, and a bounded wait on one. These
 * and the request references and failure below are req_state.c's. */
void kvt_srv_cond_init(pthread_cond_t *cv);
void kvt_srv_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int ms);
/* Request references: the last one frees (the _locked forms need s->mu). */
void kvt_srv_req_unref_locked(srv_req *r);
void kvt_srv_req_unref(kvt_server *s, srv_req *r);
/* Ends r with an error status and message (s->mu held). */
void kvt_srv_req_fail_locked(srv_req *r, int status, const char *msg);

/* Marks r (and its other choices) cancelled; the engine ends them. */
void kvt_srv_cancel(kvt_server *s, srv_req *r);

/* Responses (generate_reply.c). The JSON of a finished request and its choices
 * (tool calls read back and remembered); with rag (the RAG route), kvtier.rag
 * is added. */
char *kvt_srv_response_json(kvt_server *s, srv_req *r, const kvt_api_rag *rag);
/* An SSE response streaming r's choices as they are generated; takes over
 * the handler's references on r and its choices. When it ends, *usage gets
 * the usage and *has_usage 1 (for the access log; they must outlive it). */
struct MHD_Response *kvt_srv_stream_response(kvt_server *s, srv_req *r, struct MHD_Connection *conn,
                                             kvt_api_usage *usage, int *has_usage, const kvt_api_rag *rag);
/* The /completion answer (llama-server's) of finished choice r, or one stream event of it (stop 0),
 * with text and probs borrowed (handlers_llama.c); a stream event's caller sets out->n_decoded and
 * out->tokens, the answer's tokens are r's generated ids. */
void kvt_srv_llama_answer(kvt_server *s, const srv_req *r, const char *text, int stop, const kvt_api_logprobs *probs,
                          kvt_api_llama_completion *out);
/* r's prompt as text, for llama-server's answer (malloc'd; valid UTF-8). */
char *kvt_srv_prompt_text(kvt_server *s, const srv_req *r);
/* The tool calls in finished choice c's text, remembered in s->calls for the next turn with the
 * reply they came from (each one's arguments the JSON without the whitespace around it), and
 * *content the text before them; 0 (and both NULL) when the text holds no call or c has no tools
 * (generate_reply.c). When the token budget cut the text inside a call, the last call is that
 * one with the arguments written so far, *cut is set (the finish stays "length"), and nothing is
 * remembered; but under parallel_tool_calls false a first call complete before the cut is the
 * answer as if nothing were cut (*cut 0: the finish is "tool_calls"). */
size_t kvt_srv_read_calls(kvt_server *s, srv_req *c, kvt_api_call **calls, char **content, int *cut);
/* r's usage with every choice's completion tokens and pauses (preemptions). */
kvt_api_usage kvt_srv_total_usage(const srv_req *r);

/* The engine thread (scheduler.c): runs until s->stopping, then fails what waits. */
void *kvt_srv_engine_main(void *arg);
/* Frees a slot's sequence and buffers (engine thread, or after it stopped; sched_finish.c). */
void kvt_srv_slot_clear(kvt_server *s, slot *sl);

#endif
