/* kvtier serve's HTTP layer (see server_impl.h): libmicrohttpd with a
 * thread per connection, routing, keys, request framing and deadlines
 * (http_guard), the OpenAI endpoints with SSE streaming, the cache admin
 * endpoints, the access log, and the server's lifecycle. The engine thread
 * is in scheduler.c. See server.h for the flow. */
#include "api_lint.h"
#include "server_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include <cjson/cJSON.h>

#include "api_llama.h"
#include "api_rag.h"
#include "api_tools.h"
#include "common.h"
#include "dashboard.h"
#include "kv_quant.h"

kvt_server_params kvt_server_default_params(void) {
    kvt_server_params p = {.host = "127.0.0.1",
                           .port = KVT_SERVER_DEFAULT_PORT,
                           .parallel = KVT_SERVER_DEFAULT_PARALLEL,
                           .queue = KVT_SERVER_DEFAULT_QUEUE,
                           .max_body = KVT_SERVER_DEFAULT_MAX_BODY,
                           .max_inflight_bytes = KVT_SERVER_DEFAULT_MAX_INFLIGHT,
                           .max_tokens_limit = KVT_SERVER_DEFAULT_MAX_TOKENS,
                           .prefill_chunk = KVT_SERVER_DEFAULT_PREFILL_CHUNK,
                           .timeout_s = KVT_SERVER_DEFAULT_TIMEOUT_S,
                           .request_timeout_s = KVT_SERVER_DEFAULT_REQUEST_TIMEOUT_S,
                           .max_conns_per_ip = KVT_SERVER_DEFAULT_CONNS_PER_IP,
                           .chat = KVT_CHAT_CHATML,
                           .session_keep_warm_s = KVT_SERVER_DEFAULT_KEEP_WARM_S,
                           .model_id = "kvtier",
                           .rag_k = KVT_RAG_DEFAULT_K};
    return p;
}

/* ---- HTTP ---------------------------------------------------------------------------- */

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
    R_CACHE_PIN, /* the admin routes last: handle_admin serves from here on */
    R_CACHE_UNPIN,
    R_CACHE_PREFETCH,
    R_CACHE_FLUSH,
    R_CACHE_STATS,
    R_CACHE_LINT
} route;

static const struct {
    const char *url, *method, *label;
    route r;
} routes[] = {
    {"/v1/completions", "POST", "completions", R_COMPLETIONS},
    {"/v1/chat/completions", "POST", "chat_completions", R_CHAT},
    {"/v1/models", "GET", "models", R_MODELS},
    {"/health", "GET", "health", R_HEALTH},
    {"/metrics", "GET", "metrics", R_METRICS},
    {"/tokenize", "POST", "tokenize", R_TOKENIZE},
    {"/detokenize", "POST", "detokenize", R_DETOKENIZE},
    {"/props", "GET", "props", R_PROPS},
    {"/v1/rag/chat/completions", "POST", "rag_chat_completions", R_RAG},
    {"/v1/cache/prefill", "POST", "cache_prefill", R_PREFILL},
    {"/dashboard", "GET", "dashboard", R_DASHBOARD},
    {"/v1/cache/pin", "POST", "cache_pin", R_CACHE_PIN},
    {"/v1/cache/unpin", "POST", "cache_unpin", R_CACHE_UNPIN},
    {"/v1/cache/prefetch", "POST", "cache_prefetch", R_CACHE_PREFETCH},
    {"/v1/cache/flush", "POST", "cache_flush", R_CACHE_FLUSH},
    {"/v1/cache/stats", "GET", "cache_stats", R_CACHE_STATS},
    {"/v1/cache/lint", "GET", "cache_lint", R_CACHE_LINT},
};

/* Per-connection-request state (MHD's con_cls), from the request's headers to
 * on_completed; every request has one. */
typedef struct {
    route r;           /* R_NONE until the route is known (and for unknown ones) */
    const char *label;
    char *body;
    size_t len, cap;
    uint64_t reserved; /* bytes of the body budget (s->guard) this request holds */
    int refused;       /* 0, or the status that answers once the body has been read: 413 or 503 */
    const char *key;   /* the API key the request authenticated with (borrowed), or NULL */
    /* for the access log */
    double t_start;    /* kvt_now() at the headers */
    int status;        /* the status sent, 0 before */
    char method[ACCESS_METHOD_MAX], path[ACCESS_PATH_MAX];
    char request_id[REQUEST_ID_MAX]; /* the client's X-Request-Id when usable, else ours; echoed */
    kvt_api_usage usage;             /* of a generation, once it ended */
    int has_usage;
} conn_state;

/* Per-connection state (MHD's socket context): the whole-request deadline's
 * handle and the request being served (one at a time on a connection). */
typedef struct {
    kvt_http_conn *watch;
    conn_state *cur;
} conn_ctx;

static conn_ctx *ctx_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The request being served on c, or NULL. */
static conn_state *current(struct MHD_Connection *c) {
    conn_ctx *x = ctx_of(c);
    return x ? x->cur : NULL;
}

/* The Access-Control-Allow-Origin value for c's request: "*" when --cors-origin
 * allows any, the request's Origin when it is one of those allowed, else NULL
 * (no CORS headers: the browser then keeps the answer from the page). */
static const char *cors_allow(const kvt_server *s, struct MHD_Connection *c) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    for (size_t i = 0; i < s->p.n_cors_origins; i++) {
        if (!strcmp(s->p.cors_origins[i], "*")) return "*";
        if (origin && !strcmp(origin, s->p.cors_origins[i])) return s->p.cors_origins[i];
    }
    return NULL;
}

static void add_cors(kvt_server *s, struct MHD_Connection *c, struct MHD_Response *resp) {
    const char *allow = cors_allow(s, c);
    if (!allow) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", allow);
    /* a named origin makes the answer differ by Origin: caches must key on it */
    if (strcmp(allow, "*")) MHD_add_response_header(resp, "Vary", "Origin");
    MHD_add_response_header(resp, "Access-Control-Expose-Headers", REQUEST_ID_HEADER);
}

/* Notes the status a response carries for the access log, echoes the request
 * id, and adds the CORS headers an allowed origin gets. */
static void note_response(kvt_server *s, struct MHD_Connection *c, struct MHD_Response *resp, int status) {
    add_cors(s, c, resp);
    conn_state *cs = current(c);
    if (!cs) return;
    cs->status = status;
    MHD_add_response_header(resp, REQUEST_ID_HEADER, cs->request_id);
}

static enum MHD_Result send_text(kvt_server *s, struct MHD_Connection *c, const char *label, int status,
                                 const char *ctype, char *body, const char *h_name, const char *h_value) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (h_name) MHD_add_response_header(resp, h_name, h_value);
    note_response(s, c, resp, status);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    kvt_metrics_count_request(s->metrics, label, status);
    return ret;
}

static enum MHD_Result send_error(kvt_server *s, struct MHD_Connection *c, const char *label, const kvt_api_error *e,
                                  const char *h_name, const char *h_value) {
    return send_text(s, c, label, e->status, "application/json", kvt_api_error_json(e), h_name, h_value);
}

static enum MHD_Result send_errorf(kvt_server *s, struct MHD_Connection *c, const char *label, int status,
                                   const char *type, const char *code, const char *msg) {
    kvt_api_error e;
    kvt_api_errorf(&e, status, type, NULL, code, "%s", msg);
    return send_error(s, c, label, &e, NULL, NULL);
}

/* Refuses a request body: 413 over --max-body, 503 (+ Retry-After) when the
 * bodies of the requests in flight would pass --max-inflight-bytes. */
static enum MHD_Result send_refusal(kvt_server *s, struct MHD_Connection *c, const char *label, int status) {
    kvt_api_error e;
    if (status == MHD_HTTP_CONTENT_TOO_LARGE) {
        kvt_api_errorf(&e, status, "invalid_request_error", NULL, "request_too_large",
                       "the request body is larger than %zu bytes (--max-body)", s->p.max_body);
        return send_error(s, c, label, &e, NULL, NULL);
    }
    kvt_api_errorf(&e, status, "server_error", NULL, "overloaded",
                   "the server holds %llu bytes of request bodies at most (--max-inflight-bytes) and is full; "
                   "retry later", (unsigned long long)s->p.max_inflight_bytes);
    return send_error(s, c, label, &e, MHD_HTTP_HEADER_RETRY_AFTER, RETRY_AFTER_S);
}

/* Compares without an early exit, so response time does not reveal how much of a key matched. */
static int key_equal(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = la != lb;
    for (size_t i = 0; i < la; i++) d |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return d == 0;
}

/* The bearer token of c's request, or NULL. */
static const char *bearer(struct MHD_Connection *c) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    return h && !strncmp(h, BEARER, strlen(BEARER)) ? h + strlen(BEARER) : NULL;
}

/* The API key the request carries if it is a configured one, else NULL. */
static const char *authenticate(kvt_server *s, struct MHD_Connection *c) {
    const char *h = bearer(c);
    const char *found = NULL;
    for (size_t i = 0; h && i < s->p.n_api_keys; i++)
        if (key_equal(h, s->p.api_keys[i])) found = s->p.api_keys[i];
    return found;
}

/* Who may use a path. The /v1/ paths are the tenants' API. /metrics shows every
 * tenant's counters: with a metrics key only that key opens it, else with API
 * keys any of them does. /health stays open (it tells slot counts only). */
typedef enum { ACCESS_OPEN, ACCESS_API_KEY, ACCESS_METRICS_KEY } access_rule;

static access_rule access_of(const kvt_server *s, const char *url) {
    /* /tokenize, /detokenize and /props are the tenants' API too (llama-server's paths) */
    if (!strncmp(url, "/v1/", 4) || !strcmp(url, "/tokenize") || !strcmp(url, "/detokenize") ||
        !strcmp(url, "/props"))
        return s->p.n_api_keys ? ACCESS_API_KEY : ACCESS_OPEN;
    if (!strcmp(url, "/metrics") || !strcmp(url, "/dashboard")) /* the page shows what /metrics does */
        return s->p.metrics_key ? ACCESS_METRICS_KEY : s->p.n_api_keys ? ACCESS_API_KEY : ACCESS_OPEN;
    return ACCESS_OPEN;
}

/* The deadline handle of c's connection (on_connection made it), or NULL. */
static kvt_http_conn *tracked(struct MHD_Connection *c) {
    conn_ctx *x = ctx_of(c);
    return x ? x->watch : NULL;
}

/* Whether the client is gone (checked while a request waits). A FIN alone is
 * not departure: a client may half-close (shutdown(SHUT_WR), `nc -N`, some
 * proxies) and still read the answer. So only a reset or a socket error
 * counts, which poll() reports as POLLERR/POLLHUP without consuming data. A
 * client that closed without a reset is noticed when a write to it fails:
 * at its next stream event, or when a non-streamed answer is sent. */
int kvt_srv_peer_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    struct pollfd pfd = {.fd = ci->connect_fd, .events = 0};
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLERR | POLLHUP | POLLNVAL));
}

typedef struct {
    kvt_server *s;
    const void *salt;
    size_t salt_len;
} lookup_ctx;

static size_t reply_lookup(void *ctx, const char *text, int32_t **ids) {
    lookup_ctx *l = ctx;
    return kvt_reply_map_get(l->s->replies, l->salt, l->salt_len, text, ids);
}

/* Builds the engine-side request from a validated API request: salt, prompt
 * ids, limits, sampling. Returns NULL with *err filled when it cannot run. */
static srv_req *make_request(kvt_server *s, const kvt_api_request *a, const char *key, kvt_api_error *err) {
    srv_req *r = kvt_xcalloc(1, sizeof *r);
    r->refs = 1;
    r->kind = a->kind;
    r->stream = a->stream;
    r->include_usage = a->include_usage;
    r->t_arrival = kvt_now();
    r->created = (int64_t)time(NULL);
    kvt_srv_cond_init(&r->cv);
    /* tenant salt: the API key (each key its own cache namespace), then cache_salt */
    size_t kl = key ? strlen(key) + 1 : 0, cl = a->cache_salt ? strlen(a->cache_salt) : 0;
    if (kl + cl) {
        r->salt = kvt_xmalloc(kl + cl + 1);
        if (key) memcpy(r->salt, key, kl); /* with its NUL: key "ab"+salt "c" != key "a"+salt "bc" */
        if (cl) memcpy(r->salt + kl, a->cache_salt, cl);
        r->salt_len = kl + cl;
    }
    int rc = 0;
    size_t n = 0;
    /* a prompt must leave one token to generate; tokenizing stops past that */
    size_t max_prompt = (size_t)s->n_ctx - 1;
    kvt_fail(0, "%s", "");
    size_t at = 0; /* where kvtier.documents go: before the last user message's content, or the prompt */
    if (kvt_api_grammar(a, s->p.chat, &r->grammar, err)) goto fail;
    r->tools = a->kind == KVT_API_CHAT && kvt_api_tools_active(a);
    r->parallel_tool_calls = a->parallel_tool_calls;
    if (a->kind == KVT_API_CHAT) {
        lookup_ctx lc = {s, r->salt, r->salt_len};
        size_t n_msgs, last_user;
        char **arena;
        /* tools, tool calls and tool results in the template family's style */
        kvt_call_memo *memo = s->p.retokenize_replies ? NULL : s->calls;
        kvt_chat_msg *msgs = kvt_api_messages(a, s->p.chat, memo, r->salt, r->salt_len, &n_msgs, &last_user, &arena);
        rc = kvt_chat_render_at(s->tok, s->p.chat, msgs, n_msgs, s->p.retokenize_replies ? NULL : reply_lookup, &lc,
                                max_prompt,
                                last_user == SIZE_MAX ? n_msgs : last_user, &at, &r->prompt, &n);
        kvt_api_messages_free(msgs, arena);
    } else if (a->prompt_ids) {
        n = a->n_prompt_ids;
        r->prompt = kvt_xmalloc(n * sizeof *r->prompt);
        memcpy(r->prompt, a->prompt_ids, n * sizeof *r->prompt);
    } else {
        rc = kvt_tokenize_max(s->tok, a->prompt, strlen(a->prompt), kvt_tokenizer_add_special(s->tok), 1,
                              max_prompt, &r->prompt, &n);
    }
    if (!rc && a->n_docs) {
        /* after BOS for completions; the documents as fixed context blocks (kvt_render_documents) */
        if (a->kind != KVT_API_CHAT && n && r->prompt[0] == kvt_tokenizer_bos(s->tok)) at = 1;
        int32_t *with = NULL;
        size_t nw = 0;
        r->doc_starts = kvt_xmalloc((a->n_docs + 1) * sizeof *r->doc_starts);
        r->n_docs = a->n_docs;
        if ((rc = kvt_render_documents_spans(s->model, s->block, r->prompt, n, at, a->docs, a->n_docs, &with, &nw,
                                             r->doc_starts))) {
            kvt_api_errorf(err, 400, "invalid_request_error", "kvtier.documents", NULL, "cannot render the documents: %s",
                           kvt_errmsg());
            goto fail;
        }
        free(r->prompt);
        r->prompt = with;
        n = nw;
    }
    if (rc == KVT_ELIMIT) {
        kvt_api_errorf(err, 400, "invalid_request_error", a->kind == KVT_API_CHAT ? "messages" : "prompt",
                       "context_length_exceeded",
                       "This model's maximum context length is %d tokens. However, your prompt has more than %zu "
                       "tokens; shorten it (at least one token must be left to generate).",
                       s->n_ctx, max_prompt);
        goto fail;
    }
    if (rc) {
        kvt_api_errorf(err, 400, "invalid_request_error", a->kind == KVT_API_CHAT ? "messages" : "prompt", NULL,
                       "cannot tokenize the prompt: %s", kvt_errmsg());
        goto fail;
    }
    if (n == 0) {
        kvt_api_errorf(err, 400, "invalid_request_error", "prompt", "invalid_value", "the prompt is empty");
        goto fail;
    }
    if (n >= (size_t)s->n_ctx) {
        kvt_api_errorf(err, 400, "invalid_request_error", a->kind == KVT_API_CHAT ? "messages" : "prompt",
                       "context_length_exceeded",
                       "This model's maximum context length is %d tokens. However, your prompt has %zu tokens; "
                       "shorten it (at least one token must be left to generate).",
                       s->n_ctx, n);
        goto fail;
    }
    r->n_prompt = (int32_t)n;
    int32_t room = s->n_ctx - r->n_prompt;
    /* OpenAI's defaults: 16 tokens for completions, as many as fit for chat */
    int32_t want = a->max_tokens           ? a->max_tokens
                   : s->p.default_max_tokens ? KVT_MIN(s->p.default_max_tokens, s->p.max_tokens_limit)
                   : a->kind == KVT_API_CHAT ? s->p.max_tokens_limit
                                             : KVT_MIN(16, s->p.max_tokens_limit);
    r->max_tokens = KVT_MIN(want, room);
    r->sp = kvt_sampler_default_params();
    r->ignore_eos = a->ignore_eos;
    r->logprobs = a->logprobs;
    r->top_logprobs = a->top_logprobs;
    r->session = a->session;
    r->sp.temp = a->temperature;
    r->sp.top_p = a->top_p;
    r->sp.top_k = a->top_k;
    r->sp.min_p = a->min_p;
    r->sp.presence_penalty = a->presence_penalty;
    r->sp.frequency_penalty = a->frequency_penalty;
    r->sp.repeat_penalty = a->repeat_penalty;
    r->sp.penalty_last_n = a->penalty_last_n;
    if (a->n_bias) {
        r->bias_id = kvt_xmalloc((size_t)a->n_bias * sizeof *r->bias_id);
        r->bias = kvt_xmalloc((size_t)a->n_bias * sizeof *r->bias);
        memcpy(r->bias_id, a->bias_id, (size_t)a->n_bias * sizeof *r->bias_id);
        memcpy(r->bias, a->bias, (size_t)a->n_bias * sizeof *r->bias);
        r->sp.bias_id = r->bias_id;
        r->sp.bias = r->bias;
        r->sp.n_bias = a->n_bias;
    }
    pthread_mutex_lock(&s->mu);
    uint64_t id = s->next_id++;
    pthread_mutex_unlock(&s->mu);
    r->sp.seed = a->has_seed ? a->seed : (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull + id;
    snprintf(r->id, sizeof r->id, "%s-%llx%06llx", a->kind == KVT_API_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)r->created, (unsigned long long)id);
    for (int i = 0; i < a->n_stop; i++) r->stop[r->n_stop++] = kvt_xstrdup(a->stop[i]);
    return r;
fail:
    pthread_mutex_lock(&s->mu);
    kvt_srv_req_unref_locked(r);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Queues r for the engine (taking a reference for it). 0, or -1 when full. */
static int enqueue(kvt_server *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    if (s->stopping || s->draining || s->q_len >= s->p.queue) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    r->refs++;
    s->queue[(s->q_head + s->q_len) % s->p.queue] = r;
    s->q_len++;
    pthread_cond_signal(&s->engine_cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static void cancel_locked(kvt_server *s, srv_req *r) {
    for (int32_t i = 0; i <= r->n_sib; i++) {
        srv_req *c = i ? r->sib[i - 1] : r;
        if (!c->done) c->cancelled = 1;
    }
    pthread_cond_signal(&s->engine_cv);
}

void kvt_srv_cancel(kvt_server *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    cancel_locked(s, r);
    pthread_mutex_unlock(&s->mu);
}

/* Whether r and all its other choices are done (s->mu held). */
static int all_done(const srv_req *r) {
    for (int32_t i = 0; i < r->n_sib; i++)
        if (!r->sib[i]->done) return 0;
    return r->done;
}

/* Drops the engine's references on r's other choices, before r was queued. */
static void unref_engine_choices(kvt_server *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    for (int32_t i = 0; i < r->n_sib; i++) kvt_srv_req_unref_locked(r->sib[i]);
    pthread_mutex_unlock(&s->mu);
}

/* Drops the handler's references on r and its other choices. */
static void unref_choices(kvt_server *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    for (int32_t i = r->n_sib; i > 0; i--) kvt_srv_req_unref_locked(r->sib[i - 1]);
    kvt_srv_req_unref_locked(r);
    pthread_mutex_unlock(&s->mu);
}

/* n > 1: n - 1 more choices of a's request r, each its own request on the same
 * prompt (seed + i when a seed is given), forked from r's sequence once its
 * prompt is in (scheduler.c). 0, or -1 with *err filled. */
static int add_choices(kvt_server *s, const kvt_api_request *a, const char *key, srv_req *r, kvt_api_error *err) {
    if (a->n <= 1) return 0;
    if (a->n > s->p.parallel)
        return kvt_api_errorf(err, 400, "invalid_request_error", "n", "unsupported_value",
                              "'n' is at most the server's --parallel (%d): the choices decode side by side",
                              s->p.parallel);
    r->sib = kvt_xcalloc((size_t)a->n - 1, sizeof *r->sib);
    for (int32_t i = 1; i < a->n; i++) {
        srv_req *c = make_request(s, a, key, err);
        if (!c) return -1;
        c->is_sib = 1;
        memset(&c->session, 0, sizeof c->session); /* the session's context is the first choice's */
        c->session.keep_warm_s = -1;
        if (a->has_seed) c->sp.seed = a->seed + (uint64_t)i;
        c->first = r;
        pthread_mutex_lock(&s->mu);
        r->refs++;  /* c's, on its first choice (whose cv it wakes) */
        c->refs++;  /* the engine's */
        r->sib[r->n_sib++] = c;
        pthread_mutex_unlock(&s->mu);
    }
    return 0;
}

/* ---- request handling ---------------------------------------------------------------------- */

/* X-Session-Id names the session when the body does not; a named session
 * without keep_warm_s gets the server's default keep-warm time. */
static void apply_session_header(kvt_server *s, struct MHD_Connection *c, srv_req *r) {
    kvt_api_session *ss = &r->session;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, SESSION_HEADER);
    if (!ss->session_id[0] && h && *h && strlen(h) <= KVT_SESSION_NAME_MAX)
        snprintf(ss->session_id, sizeof ss->session_id, "%s", h);
    if (ss->session_id[0] && ss->keep_warm_s < 0) ss->keep_warm_s = s->p.session_keep_warm_s;
}

/* The request kind of a body: chat for the chat routes, and for the prefill
 * route when it has "messages"; completions otherwise. */
static kvt_api_kind kind_of(const conn_state *cs) {
    if (cs->r == R_CHAT || cs->r == R_RAG) return KVT_API_CHAT;
    if (cs->r != R_PREFILL && cs->r != R_CACHE_PIN && cs->r != R_CACHE_PREFETCH) return KVT_API_COMPLETION;
    cJSON *root = cJSON_ParseWithLength(cs->body ? cs->body : "", cs->len);
    kvt_api_kind k = root && cJSON_GetObjectItemCaseSensitive(root, "messages") ? KVT_API_CHAT : KVT_API_COMPLETION;
    cJSON_Delete(root);
    return k;
}

/* RAG (README "RAG"): kvtier.rag is read only on its route; there the
 * question retrieves chunks that become the request's documents. */
static int rag_prepare(kvt_server *s, const conn_state *cs, kvt_api_request *a, kvt_api_rag *rag, kvt_api_error *err) {
    if (cs->r != R_RAG)
        return a->rag_json ? kvt_api_errorf(err, 400, "invalid_request_error", "kvtier.rag", "unsupported_parameter",
                                             "'kvtier.rag' is read only by /v1/rag/chat/completions")
                           : 0;
    if (!s->p.rag)
        return kvt_api_errorf(err, 404, "invalid_request_error", NULL, "not_found",
                              "this server has no RAG index: start it with --rag-index INDEX");
    if (kvt_api_rag_options(a->rag_json, s->p.rag_k, rag, err)) return KVT_EARG;
    return kvt_api_rag_retrieve(s->p.rag, a, rag, err);
}

static enum MHD_Result handle_generate(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    kvt_api_request a;
    kvt_api_error err;
    kvt_api_rag rag = {0};
    if (kvt_api_parse(kind_of(cs), cs->body ? cs->body : "", cs->len, s->n_vocab, s->n_ctx, s->p.max_tokens_limit,
                      &a, &err))
        return send_error(s, c, cs->label, &err, NULL, NULL);
    if (rag_prepare(s, cs, &a, &rag, &err) ||
        (cs->r == R_PREFILL && a.stream &&
         kvt_api_errorf(&err, 400, "invalid_request_error", "stream", "unsupported_parameter",
                        "'stream' is not supported on /v1/cache/prefill"))) {
        kvt_api_request_free(&a);
        return send_error(s, c, cs->label, &err, NULL, NULL);
    }
    srv_req *r = make_request(s, &a, cs->key, &err);
    if (r && add_choices(s, &a, cs->key, r, &err)) {
        unref_engine_choices(s, r);
        unref_choices(s, r);
        r = NULL;
    }
    kvt_api_request_free(&a);
    if (!r) return send_error(s, c, cs->label, &err, NULL, NULL);
    r->prefill_only = cs->r == R_PREFILL;
    r->want_block_tiers = cs->r == R_RAG;
    r->plan_cached = cs->r == R_RAG && rag.order == KVT_RAG_ORDER_CACHED;
    kvt_prompt_ring_put(s->recent, r->salt, r->salt_len, r->prompt, r->n_prompt);
    apply_session_header(s, c, r);
    if (enqueue(s, r)) {
        unref_engine_choices(s, r);
        unref_choices(s, r);
        kvt_api_errorf(&err, 503, "server_error", NULL, "overloaded",
                       "the server is busy (%d requests queued) or shutting down; retry later", s->p.queue);
        return send_error(s, c, cs->label, &err, MHD_HTTP_HEADER_RETRY_AFTER, RETRY_AFTER_S);
    }
    if (r->stream) {
        struct MHD_Response *resp =
            kvt_srv_stream_response(s, r, c, &cs->usage, &cs->has_usage, cs->r == R_RAG ? &rag : NULL);
        if (!resp) return MHD_NO;
        note_response(s, c, resp, MHD_HTTP_OK);
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        kvt_metrics_count_request(s->metrics, cs->label, MHD_HTTP_OK);
        return ret;
    }
    pthread_mutex_lock(&s->mu);
    while (!all_done(r)) {
        kvt_srv_cond_wait_ms(&r->cv, &s->mu, WAIT_SLICE_MS);
        if (all_done(r)) break;
        pthread_mutex_unlock(&s->mu);
        int gone = kvt_srv_peer_gone(c);
        pthread_mutex_lock(&s->mu);
        if (gone) {
            cancel_locked(s, r);
            pthread_mutex_unlock(&s->mu);
            unref_choices(s, r);
            cs->status = STATUS_CLIENT_GONE;
            kvt_metrics_count_request(s->metrics, cs->label, STATUS_CLIENT_GONE);
            return MHD_NO;
        }
    }
    pthread_mutex_unlock(&s->mu);
    cs->usage = kvt_srv_total_usage(r); /* done is final: the engine no longer writes r */
    cs->has_usage = 1;
    enum MHD_Result ret;
    srv_req *failed = NULL;
    for (int32_t i = 0; i <= r->n_sib && !failed; i++)
        if ((i ? r->sib[i - 1] : r)->err_status) failed = i ? r->sib[i - 1] : r;
    if (failed) {
        kvt_api_errorf(&err, failed->err_status, failed->err_status >= 500 ? "server_error" : "invalid_request_error",
                       NULL, NULL, "%s", failed->err_msg);
        ret = send_error(s, c, cs->label, &err, failed->err_status == 503 ? MHD_HTTP_HEADER_RETRY_AFTER : NULL,
                         RETRY_AFTER_S);
    } else {
        char *json = cs->r == R_PREFILL ? kvt_api_prefill_json(&r->usage, s->block)
                                        : kvt_srv_response_json(s, r, cs->r == R_RAG ? &rag : NULL);
        ret = send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", json, NULL, NULL);
    }
    unref_choices(s, r);
    return ret;
}

/* The admin endpoints run on the engine thread (the cache is its alone):
 * the handler queues a job and waits for its answer. */
static enum MHD_Result handle_admin(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    admin_job *j = kvt_xcalloc(1, sizeof *j);
    kvt_api_error err;
    j->kind = cs->r == R_CACHE_PIN ? JOB_PIN : cs->r == R_CACHE_UNPIN ? JOB_UNPIN
              : cs->r == R_CACHE_PREFETCH ? JOB_PREFETCH : cs->r == R_CACHE_FLUSH ? JOB_FLUSH : JOB_STATS;
    enum MHD_Result ret;
    if (j->kind == JOB_PIN || j->kind == JOB_PREFETCH) {
        /* the body names a prompt as the generation endpoints do: "messages" (chat) or "prompt" */
        kvt_api_request a;
        if (kvt_api_parse(kind_of(cs), cs->body ? cs->body : "", cs->len, s->n_vocab, s->n_ctx, s->p.max_tokens_limit, &a,
                          &err)) {
            ret = send_error(s, c, cs->label, &err, NULL, NULL);
            goto done;
        }
        j->r = a.rag_json ? NULL : make_request(s, &a, cs->key, &err);
        if (a.rag_json)
            kvt_api_errorf(&err, 400, "invalid_request_error", "kvtier.rag", "unsupported_parameter",
                           "'kvtier.rag' is read only by /v1/rag/chat/completions");
        kvt_api_request_free(&a);
        if (!j->r) {
            ret = send_error(s, c, cs->label, &err, NULL, NULL);
            goto done;
        }
    } else if (j->kind == JOB_UNPIN) {
        cJSON *root = cJSON_ParseWithLength(cs->body ? cs->body : "", cs->len);
        const cJSON *pid = root ? cJSON_GetObjectItemCaseSensitive(root, "pin_id") : NULL;
        const cJSON *sid = root ? cJSON_GetObjectItemCaseSensitive(root, "session_id") : NULL;
        if (cJSON_IsString(pid)) j->pin_id = kvt_xstrdup(pid->valuestring);
        if (cJSON_IsString(sid)) j->session = kvt_xstrdup(sid->valuestring);
        cJSON_Delete(root);
        if (!j->pin_id && !j->session) {
            ret = send_errorf(s, c, cs->label, 400, "invalid_request_error", "invalid_value",
                              "give the \"pin_id\" that /v1/cache/pin returned, or a \"session_id\" kept warm");
            goto done;
        }
    }
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        ret = send_errorf(s, c, cs->label, 503, "server_error", "shutting_down", "the server is shutting down");
        goto done;
    }
    j->next = s->jobs;
    s->jobs = j;
    pthread_cond_signal(&s->engine_cv);
    while (!j->done) kvt_srv_cond_wait_ms(&s->job_cv, &s->mu, ADMIN_WAIT_MS);
    pthread_mutex_unlock(&s->mu);
    ret = send_text(s, c, cs->label, j->status, "application/json", j->json, NULL, NULL);
    j->json = NULL;
done:
    if (j->r) kvt_srv_req_unref(s, j->r);
    free(j->json);
    free(j->pin_id);
    free(j->session);
    free(j);
    return ret;
}

/* POST /tokenize and /detokenize: the tokenizer is immutable, so the handler thread answers. */
static enum MHD_Result handle_tokenize(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    kvt_api_error err;
    const char *body = cs->body ? cs->body : "";
    char *json = cs->r == R_TOKENIZE ? kvt_api_tokenize(s->tok, body, cs->len, &err)
                                     : kvt_api_detokenize(s->tok, body, cs->len, &err);
    if (!json) return send_error(s, c, cs->label, &err, NULL, NULL);
    return send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", json, NULL, NULL);
}

/* A CORS preflight (OPTIONS with --cors-origin): 204 with what the browser may
 * send. An origin not allowed gets no Allow-Origin, so the browser refuses. */
static enum MHD_Result send_preflight(kvt_server *s, struct MHD_Connection *c, const char *label) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    if (cors_allow(s, c)) {
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", CORS_METHODS);
        const char *asked = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        /* echo the headers asked for: the key, the content type and kvtier's own are all fine to send */
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", asked && *asked ? asked : CORS_HEADERS);
        MHD_add_response_header(resp, "Access-Control-Max-Age", CORS_MAX_AGE_S);
    }
    note_response(s, c, resp, MHD_HTTP_NO_CONTENT);
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_NO_CONTENT, resp);
    MHD_destroy_response(resp);
    kvt_metrics_count_request(s->metrics, label, MHD_HTTP_NO_CONTENT);
    return ret;
}

/* GET /v1/cache/lint[?n=N&cache_salt=S]: lints the tenant's last N prompts
 * (the API key's, under that cache_salt; default all that are kept) as
 * `kvtier lint --json` does. Runs on the HTTP thread over copies. */
static enum MHD_Result handle_lint(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    const char *nv = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "n");
    const char *cv = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "cache_salt");
    char *end = NULL;
    long max = nv ? strtol(nv, &end, 10) : KVT_PROMPT_RING_DEFAULT;
    if (nv && (*end || max < 1 || max > KVT_LINT_MAX_PROMPTS)) {
        kvt_api_error e;
        kvt_api_errorf(&e, 400, "invalid_request_error", "n", "invalid_value", "n must be 1..%d", KVT_LINT_MAX_PROMPTS);
        return send_error(s, c, cs->label, &e, NULL, NULL);
    }
    /* the same tenant salt make_request builds: the key with its NUL, then cache_salt */
    const char *key = cs->key;
    size_t kl = key ? strlen(key) + 1 : 0, cl = cv ? strlen(cv) : 0;
    char *salt = kvt_xmalloc(kl + cl + 1);
    if (kl) memcpy(salt, key, kl);
    if (cl) memcpy(salt + kl, cv, cl);
    kvt_lint_prompt *ps = NULL;
    int32_t n = kvt_prompt_ring_take(s->recent, salt, kl + cl, (int32_t)max, &ps);
    free(salt);
    kvt_lint_report rep;
    char *body;
    if (n && kvt_lint_run(s->tok, ps, n, s->block, &rep) == 0) {
        body = kvt_lint_json(s->tok, ps, &rep);
        kvt_lint_free(&rep);
    } else {
        body = kvt_xmalloc(64);
        snprintf(body, 64, "{\"prompts\":0,\"block_size\":%d,\"advice\":[]}", s->block);
    }
    kvt_prompt_ring_release(ps, n);
    return send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", body, NULL, NULL);
}

static enum MHD_Result handle_get(kvt_server *s, struct MHD_Connection *c, conn_state *cs) {
    if (cs->r == R_CACHE_LINT) return handle_lint(s, c, cs);
    if (cs->r == R_HEALTH) {
        char *b = kvt_xmalloc(128);
        pthread_mutex_lock(&s->mu);
        snprintf(b, 128, "{\"status\":\"ok\",\"slots_busy\":%d,\"slots_total\":%d,\"queued\":%d}", s->n_active,
                 s->p.parallel, s->q_len);
        pthread_mutex_unlock(&s->mu);
        return send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", b, NULL, NULL);
    }
    const kvt_hparams *hp = &s->model->hp;
    if (cs->r == R_MODELS) {
        kvt_api_model_info mi = {.id = s->p.model_id, .created = (int64_t)time(NULL), .n_ctx = s->n_ctx,
                                 .n_ctx_train = hp->n_ctx_train, .n_vocab = s->n_vocab, .n_embd = hp->n_embd,
                                 .n_params = s->model->n_params};
        return send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", kvt_api_models_json(&mi), NULL, NULL);
    }
    if (cs->r == R_PROPS) {
        kvt_engine_params ep = kvt_engine_params_of(s->e);
        kvt_api_props p = {.model_id = s->p.model_id, .model_path = s->model->path, .arch = hp->arch_name,
                           .n_ctx = s->n_ctx, .n_ctx_train = hp->n_ctx_train, .n_vocab = s->n_vocab,
                           .n_embd = hp->n_embd, .n_layer = hp->n_layer, .n_params = s->model->n_params,
                           .block_size = s->block, .parallel = s->p.parallel,
                           .chat_family = kvt_chat_family_name(s->p.chat), .chat_template = s->model->chat_template,
                           .kv_dtype = kvt_kv_dtype_name(ep.kv_dtype), .max_tokens_default = s->p.max_tokens_limit};
        pthread_mutex_lock(&s->mu);
        p.tier_budget_bytes[KVT_TIER_T0] = (uint64_t)s->snap.t0_pages_total * kvt_page_bytes(s->e);
        p.tier_budget_bytes[KVT_TIER_T1] = s->snap.t1_budget_bytes;
        p.tier_budget_bytes[KVT_TIER_T2] = s->snap.t2_budget_bytes;
        pthread_mutex_unlock(&s->mu);
        return send_text(s, c, cs->label, MHD_HTTP_OK, "application/json", kvt_api_props_json(&p), NULL, NULL);
    }
    kvt_metrics_gauges g = {.page_bytes = kvt_page_bytes(s->e),
                            .parallel = s->p.parallel,
                            .inflight_body_bytes = kvt_http_guard_held(s->guard),
                            .deadline_closed = kvt_http_guard_expired(s->guard)};
    pthread_mutex_lock(&s->mu);
    g.cache = s->snap;
    g.queue_depth = s->q_len;
    g.active = s->n_active;
    pthread_mutex_unlock(&s->mu);
    char *text = kvt_metrics_render(s->metrics, &g);
    if (cs->r == R_DASHBOARD) {
        char *html = kvt_dashboard_html(text);
        free(text);
        return send_text(s, c, cs->label, MHD_HTTP_OK, "text/html; charset=utf-8", html, "Content-Security-Policy",
                         KVT_DASHBOARD_CSP);
    }
    return send_text(s, c, cs->label, MHD_HTTP_OK, "text/plain; version=0.0.4", text, NULL, NULL);
}

/* Copies src into dst[0..cap) for a log line: bytes outside printable ASCII become '?'. */
static void log_copy(char *dst, size_t cap, const char *src) {
    size_t i = 0;
    for (; src && src[i] && i + 1 < cap; i++) dst[i] = src[i] > ' ' && src[i] < 0x7f ? src[i] : '?';
    dst[i] = 0;
}

/* A client's X-Request-Id is kept when it is 1 to REQUEST_ID_MAX - 1 of [A-Za-z0-9._:-]. */
static int request_id_ok(const char *id) {
    size_t n = id ? strlen(id) : 0;
    return n > 0 && n < REQUEST_ID_MAX && strspn(id, REQUEST_ID_CHARS) == n;
}

/* A new request's state, current on its connection and counted in flight until on_completed. */
static conn_state *request_begin(kvt_server *s, struct MHD_Connection *c, const char *url, const char *method) {
    conn_state *cs = kvt_xcalloc(1, sizeof *cs);
    cs->label = "other";
    cs->t_start = kvt_now();
    log_copy(cs->method, sizeof cs->method, method);
    log_copy(cs->path, sizeof cs->path, url);
    const char *id = MHD_lookup_connection_value(c, MHD_HEADER_KIND, REQUEST_ID_HEADER);
    pthread_mutex_lock(&s->mu);
    s->n_requests++;
    uint64_t n = s->next_request++;
    pthread_mutex_unlock(&s->mu);
    if (request_id_ok(id)) snprintf(cs->request_id, sizeof cs->request_id, "%s", id);
    else snprintf(cs->request_id, sizeof cs->request_id, "req-%llx-%llx", (unsigned long long)s->started,
                  (unsigned long long)n);
    conn_ctx *x = ctx_of(c);
    if (x) x->cur = cs;
    return cs;
}

/* One line per request: what was asked, the answer, the cache's share and the times. */
static void access_log(const conn_state *cs, enum MHD_RequestTerminationCode toe) {
    char tenant[TENANT_HEX_LEN + 1] = "-";
    if (cs->key) snprintf(tenant, sizeof tenant, "%08x", (unsigned)XXH64(cs->key, strlen(cs->key), 0));
    char tokens[ACCESS_TOKENS_MAX] = "";
    if (cs->has_usage) {
        const kvt_api_usage *u = &cs->usage;
        snprintf(tokens, sizeof tokens, " prompt=%d cached=%d computed=%d generated=%d ttft_ms=%.1f",
                 u->prompt_tokens, u->cached_tokens, u->computed_tokens, u->completion_tokens, u->ttft_ms);
    }
    kvt_log(KVT_LOG_INFO, "access: %s %s %d id=%s tenant=%s%s total_ms=%.1f%s", cs->method, cs->path, cs->status,
            cs->request_id, tenant, tokens, (kvt_now() - cs->t_start) * 1e3,
            toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection ended early)");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls) {
    kvt_server *s = cls;
    (void)version;
    conn_state *cs = *con_cls;
    if (!cs) {
        *con_cls = cs = request_begin(s, c, url, method);
        const char *bad_framing = kvt_http_framing_error(c);
        if (bad_framing) {
            /* where this request's body ends is in doubt, so nothing after it on this connection is read */
            kvt_api_error e;
            kvt_api_errorf(&e, MHD_HTTP_BAD_REQUEST, "invalid_request_error", NULL, "bad_framing",
                           "malformed request: %s", bad_framing);
            return send_error(s, c, "other", &e, MHD_HTTP_HEADER_CONNECTION, "close");
        }
        size_t i = 0;
        while (i < KVT_ARRAY_LEN(routes) && strcmp(url, routes[i].url)) i++;
        const char *label = i < KVT_ARRAY_LEN(routes) ? routes[i].label : "other";
        /* a CORS preflight carries no key (browsers never send one), so it is answered before the key check */
        if (!strcmp(method, "OPTIONS") && s->p.n_cors_origins) return send_preflight(s, c, label);
        /* the key first: without one, every method on a protected path is 401, telling nothing of routes */
        const char *key = NULL;
        access_rule rule = access_of(s, url);
        if (rule == ACCESS_API_KEY && !(key = authenticate(s, c)))
            return send_errorf(s, c, label, MHD_HTTP_UNAUTHORIZED, "invalid_request_error", "invalid_api_key",
                               "a valid API key is required: Authorization: Bearer KEY");
        if (rule == ACCESS_METRICS_KEY && !(bearer(c) && key_equal(bearer(c), s->p.metrics_key)))
            return send_errorf(s, c, label, MHD_HTTP_UNAUTHORIZED, "invalid_request_error", "invalid_api_key",
                               "the metrics key is required: Authorization: Bearer KEY (--metrics-key)");
        if (i == KVT_ARRAY_LEN(routes))
            return send_errorf(s, c, label, MHD_HTTP_NOT_FOUND, "invalid_request_error", "not_found",
                               "unknown route; kvtier serves /v1/completions, /v1/chat/completions, /v1/models, "
                               "/v1/rag/chat/completions, /v1/cache/{prefill,pin,unpin,prefetch,flush,stats,lint}, "
                               "/tokenize, /detokenize, "
                               "/props, /health, /metrics and /dashboard");
        if (strcmp(method, routes[i].method)) {
            kvt_api_error e;
            kvt_api_errorf(&e, MHD_HTTP_METHOD_NOT_ALLOWED, "invalid_request_error", NULL, "method_not_allowed",
                           "%s needs %s, not %s", routes[i].url, routes[i].method, method);
            return send_error(s, c, label, &e, MHD_HTTP_HEADER_ALLOW, routes[i].method);
        }
        if (rule != ACCESS_API_KEY) key = NULL; /* only an API key names a tenant */
        uint64_t declared = 0;
        if (!strcmp(routes[i].method, "POST")) {
            const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
            declared = cl ? strtoull(cl, NULL, 10) : 0;
            if (declared > s->p.max_body) return send_refusal(s, c, routes[i].label, MHD_HTTP_CONTENT_TOO_LARGE);
            /* the declared body is reserved before a byte of it is read */
            if (declared && kvt_http_guard_reserve(s->guard, declared))
                return send_refusal(s, c, routes[i].label, MHD_HTTP_SERVICE_UNAVAILABLE);
        }
        cs->r = routes[i].r;
        cs->label = routes[i].label;
        cs->key = key;
        cs->reserved = declared;
        if (declared) {
            cs->cap = (size_t)declared + 1;
            cs->body = kvt_xmalloc(cs->cap);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        /* past a limit, keep reading (without storing) so the refusal can be sent after the body */
        size_t len = cs->len + *upload_size;
        if (!cs->refused && len > s->p.max_body) cs->refused = MHD_HTTP_CONTENT_TOO_LARGE;
        /* a chunked body reserves as it arrives */
        if (!cs->refused && len > cs->reserved) {
            if (kvt_http_guard_reserve(s->guard, len - cs->reserved)) cs->refused = MHD_HTTP_SERVICE_UNAVAILABLE;
            else cs->reserved = len;
        }
        if (cs->refused) {
            free(cs->body);
            cs->body = NULL;
            cs->len = cs->cap = 0;
            kvt_http_guard_release(s->guard, cs->reserved);
            cs->reserved = 0;
        } else {
            if (len + 1 > cs->cap) {
                cs->cap = KVT_MAX(cs->cap * 2, len + 1);
                cs->body = kvt_xrealloc(cs->body, cs->cap);
            }
            memcpy(cs->body + cs->len, upload_data, *upload_size);
            cs->len = len;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    kvt_http_guard_request_in(s->guard, tracked(c)); /* the request is whole: no deadline while it is answered */
    if (cs->refused) return send_refusal(s, c, cs->label, cs->refused);
    if (cs->r == R_COMPLETIONS || cs->r == R_CHAT || cs->r == R_RAG || cs->r == R_PREFILL)
        return handle_generate(s, c, cs);
    if (cs->r == R_TOKENIZE || cs->r == R_DETOKENIZE) return handle_tokenize(s, c, cs);
    if (cs->r >= R_CACHE_PIN && cs->r != R_CACHE_LINT) return handle_admin(s, c, cs);
    return handle_get(s, c, cs);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    kvt_server *s = cls;
    kvt_http_guard_request_done(s->guard, tracked(c)); /* the next request's deadline starts */
    conn_state *cs = *con_cls;
    if (!cs) return;
    access_log(cs, toe);
    kvt_metrics_observe_duration(s->metrics, cs->label, kvt_now() - cs->t_start);
    conn_ctx *x = ctx_of(c);
    if (x && x->cur == cs) x->cur = NULL;
    kvt_http_guard_release(s->guard, cs->reserved);
    free(cs->body);
    free(cs);
    *con_cls = NULL;
    pthread_mutex_lock(&s->mu);
    s->n_requests--;
    pthread_mutex_unlock(&s->mu);
}

/* MHD's connection start and end: the whole-request deadline watches each. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    kvt_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn_ctx *x = kvt_xcalloc(1, sizeof *x);
        if (ci) x->watch = kvt_http_guard_conn_open(s->guard, ci->connect_fd);
        *socket_context = x;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_ctx *x = *socket_context;
        if (x) kvt_http_guard_conn_close(s->guard, x->watch);
        free(x);
        *socket_context = NULL;
    }
}

/* ---- lifecycle --------------------------------------------------------------------------- */

static void server_free(kvt_server *s) {
    for (int32_t i = 0; s->slots && i < s->p.parallel; i++) kvt_srv_slot_clear(s, &s->slots[i]);
    free(s->slots);
    free(s->queue);
    free(s->logits);
    kvt_jg_vocab_free(s->jg_vocab);
    free(s->jg_mask);
    free(s->jg_logits);
    free(s->b_tok);
    free(s->b_seq);
    free(s->b_want);
    kvt_reply_map_free(s->replies);
    kvt_call_memo_free(s->calls);
    kvt_prompt_ring_free(s->recent);
    kvt_metrics_free(s->metrics);
    for (int32_t i = 0; i < s->n_pins; i++) kvt_cache_release(s->cache, s->pins[i].pin);
    free(s->pins);
    pthread_cond_destroy(&s->job_cv);
    kvt_http_guard_free(s->guard);
    pthread_cond_destroy(&s->engine_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* The address to bind for host (IPv4, IPv6 with or without brackets, or a
 * name) and port. A name resolves with getaddrinfo and its first IPv4 address
 * wins, so "localhost" stays 127.0.0.1 as before; a name with only IPv6
 * addresses binds the first. Returns 0 or KVT_EARG with kvt_errmsg(). */
static int resolve_host(const char *host, int port, struct sockaddr_storage *out, int *v6) {
    char name[HOST_MAX];
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') { /* [::1], as URLs write IPv6 */
        host++;
        n -= 2;
    }
    if (n == 0 || n >= sizeof name) return kvt_fail(KVT_EARG, "--host '%s' is not an address or host name", host);
    memcpy(name, host, n);
    name[n] = 0;
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(name, port_s, &hints, &res);
    if (rc) return kvt_fail(KVT_EARG, "--host '%s': %s", name, gai_strerror(rc));
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *a = res; a && !pick; a = a->ai_next)
        if (a->ai_family == AF_INET) pick = a;
    for (const struct addrinfo *a = res; a && !pick; a = a->ai_next)
        if (a->ai_family == AF_INET6) pick = a;
    if (!pick) {
        freeaddrinfo(res);
        return kvt_fail(KVT_EARG, "--host '%s' has no IPv4 or IPv6 address", name);
    }
    memset(out, 0, sizeof *out);
    memcpy(out, pick->ai_addr, pick->ai_addrlen);
    *v6 = pick->ai_family == AF_INET6;
    freeaddrinfo(res);
    return 0;
}

int kvt_server_start(const kvt_model *model, kvt_engine *e, kvt_cache *c, const kvt_server_params *params,
                     kvt_server **out) {
    *out = NULL;
    kvt_engine_params ep = kvt_engine_params_of(e);
    if (params->parallel < 1 || params->parallel > ep.max_seqs || params->queue < 1 || params->prefill_chunk < 1 ||
        params->max_tokens_limit < 1 || params->chat == KVT_CHAT_UNKNOWN)
        return kvt_fail(KVT_EARG, "bad server parameters (parallel %d, engine sequences %d, queue %d)",
                        params->parallel, ep.max_seqs, params->queue);
    if (params->max_body < 1 || params->max_inflight_bytes < params->max_body)
        return kvt_fail(KVT_EARG, "the in-flight body budget (%llu bytes) must hold one largest body (%zu bytes)",
                        (unsigned long long)params->max_inflight_bytes, params->max_body);
    struct sockaddr_storage addr;
    int v6 = 0;
    if (resolve_host(params->host, params->port, &addr, &v6)) return KVT_EARG; /* kvt_errmsg() says why */
    kvt_server *s = kvt_xcalloc(1, sizeof *s);
    s->p = *params;
    s->model = model;
    s->tok = model->tok;
    s->e = e;
    s->cache = c;
    s->n_ctx = ep.n_ctx;
    s->block = ep.block_size;
    s->n_vocab = kvt_engine_n_vocab(e);
    s->replies = kvt_reply_map_new(REPLY_MAP_ENTRIES, REPLY_MAX_IDS);
    s->calls = kvt_call_memo_new(CALL_MEMO_ENTRIES);
    s->recent = kvt_prompt_ring_new(KVT_PROMPT_RING_DEFAULT);
    s->metrics = kvt_metrics_new();
    s->started = (int64_t)time(NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->engine_cv, NULL);
    kvt_srv_cond_init(&s->job_cv);
    s->queue = kvt_xcalloc((size_t)s->p.queue, sizeof *s->queue);
    s->slots = kvt_xcalloc((size_t)s->p.parallel, sizeof *s->slots);
    for (int32_t i = 0; i < s->p.parallel; i++) s->slots[i].seq = -1;
    size_t max_batch = (size_t)s->p.parallel + (size_t)s->p.prefill_chunk;
    s->logits = kvt_xmalloc(((size_t)s->p.parallel + 1) * (size_t)s->n_vocab * sizeof *s->logits);
    s->b_tok = kvt_xmalloc(max_batch * sizeof *s->b_tok);
    s->b_seq = kvt_xmalloc(max_batch * sizeof *s->b_seq);
    s->b_want = kvt_xmalloc(max_batch * sizeof *s->b_want);
    kvt_cache_get_stats(c, &s->snap);
    if (!(s->guard = kvt_http_guard_new(s->p.max_inflight_bytes, (double)s->p.request_timeout_s))) {
        server_free(s);
        return KVT_ELIMIT; /* kvt_errmsg() says why */
    }

    /* ITC: MHD_quiesce_daemon needs it in this threading mode */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC;
    /* $KVT_HTTP_THREAD_POOL=N, for bench/http_modes.sh only: MHD's epoll mode with N threads instead of
     * one per connection. The handlers block while a generation runs, so N bounds what is answered at
     * once, /health included (the bench measures both modes). */
    const char *pool_env = getenv("KVT_HTTP_THREAD_POOL");
    unsigned pool = pool_env ? (unsigned)strtoul(pool_env, NULL, 10) : 0;
    if (pool) flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC;
    struct MHD_OptionItem pool_opt[] = {{pool > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, pool, NULL},
                                        {MHD_OPTION_END, 0, NULL}};
    /* MHD binds IPv6 only when told; "::" also takes IPv4 clients (dual stack) */
    if (v6) flags |= IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)&addr)->sin6_addr) ? MHD_USE_DUAL_STACK
                                                                                         : MHD_USE_IPv6;
    s->mhd = MHD_start_daemon(flags,
                              0, NULL,
                              NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                              MHD_OPTION_CONNECTION_TIMEOUT, s->p.timeout_s, MHD_OPTION_CONNECTION_LIMIT,
                              (unsigned)CONNECTION_LIMIT, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                              s->p.max_conns_per_ip, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                              MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_ARRAY, pool_opt,
                              KVT_HTTP_STRICTNESS, MHD_OPTION_END);
    if (!s->mhd) {
        int err = errno;
        server_free(s);
        return kvt_fail(-(err ? err : EADDRINUSE), "cannot listen on %s:%d: %s", params->host, params->port,
                        strerror(err ? err : EADDRINUSE));
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : params->port;
    char num[INET6_ADDRSTRLEN];
    const void *raw = v6 ? (const void *)&((struct sockaddr_in6 *)&addr)->sin6_addr
                         : (const void *)&((struct sockaddr_in *)&addr)->sin_addr;
    if (!inet_ntop(v6 ? AF_INET6 : AF_INET, raw, num, sizeof num)) snprintf(num, sizeof num, "?");
    snprintf(s->address, sizeof s->address, v6 ? "[%s]" : "%s", num);
    if (pthread_create(&s->engine_thread, NULL, kvt_srv_engine_main, s)) {
        MHD_stop_daemon(s->mhd);
        server_free(s);
        return kvt_fail(KVT_ELIMIT, "cannot start the engine thread");
    }
    *out = s;
    return 0;
}

int kvt_server_port(const kvt_server *s) { return s->port; }

const char *kvt_server_address(const kvt_server *s) { return s->address; }

void kvt_server_quiesce(kvt_server *s) {
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    pthread_mutex_unlock(&s->mu);
    /* MHD hands the listening socket back: closing it refuses new connections */
    MHD_socket ls = MHD_quiesce_daemon(s->mhd);
    if (ls != MHD_INVALID_SOCKET) close(ls);
}

int32_t kvt_server_in_flight(kvt_server *s) {
    pthread_mutex_lock(&s->mu);
    int32_t n = s->n_requests;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void kvt_server_stop(kvt_server *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_signal(&s->engine_cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->engine_thread, NULL);
    /* every request is done now, so handler threads and stream readers finish */
    MHD_stop_daemon(s->mhd);
    server_free(s);
}

