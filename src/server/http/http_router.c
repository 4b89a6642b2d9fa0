// SPDX-License-Identifier: MIT
/* The HTTP layer's router (see server_impl.h): libmicrohttpd's callbacks
 * (kvt_srv_on_request, kvt_srv_on_completed, kvt_srv_on_connection), the
 * route table and the dispatch to the handlers, API and metrics keys, request
 * framing and the body budget (http_guard), request ids, the access log. The
 * handlers are in handlers.c and handlers_admin.c; what they answer with
 * (kvt_srv_send_*, CORS, the per-connection context) in http_send.c, below
 * them; the server's lifecycle in server.c. */
#include "http_send.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>

#include "api_body.h"
#include "common.h"

/* Every route: its path, method, metrics label, and handler. */
static const struct {
    const char *url, *method, *label;
    route r;
    route_handler handle;
} routes[] = {
    {"/v1/completions", "POST", "completions", R_COMPLETIONS, kvt_srv_handle_generate},
    {"/v1/chat/completions", "POST", "chat_completions", R_CHAT, kvt_srv_handle_generate},
    {"/v1/models", "GET", "models", R_MODELS, kvt_srv_handle_models},
    {"/v1/models/{id}", "GET", "models", R_MODEL_ITEM, kvt_srv_handle_models},
    {"/health", "GET", "health", R_HEALTH, kvt_srv_handle_health},
    {"/v1/health", "GET", "health", R_HEALTH, kvt_srv_handle_health}, /* llama-server's other path of it */
    {"/metrics", "GET", "metrics", R_METRICS, kvt_srv_handle_metrics},
    {"/tokenize", "POST", "tokenize", R_TOKENIZE, kvt_srv_handle_tokenize},
    {"/detokenize", "POST", "detokenize", R_DETOKENIZE, kvt_srv_handle_tokenize},
    {"/props", "GET", "props", R_PROPS, kvt_srv_handle_props},
    {"/v1/rag/chat/completions", "POST", "rag_chat_completions", R_RAG, kvt_srv_handle_generate},
    {"/v1/cache/prefill", "POST", "cache_prefill", R_PREFILL, kvt_srv_handle_generate},
    {"/dashboard", "GET", "dashboard", R_DASHBOARD, kvt_srv_handle_metrics},
    {"/dashboard/requests", "GET", "dashboard_requests", R_DASHBOARD_REQUESTS, kvt_srv_handle_metrics},
    {"/v1/cache/pin", "POST", "cache_pin", R_CACHE_PIN, kvt_srv_handle_admin},
    {"/v1/cache/unpin", "POST", "cache_unpin", R_CACHE_UNPIN, kvt_srv_handle_admin},
    {"/v1/cache/prefetch", "POST", "cache_prefetch", R_CACHE_PREFETCH, kvt_srv_handle_admin},
    {"/v1/cache/flush", "POST", "cache_flush", R_CACHE_FLUSH, kvt_srv_handle_admin},
    {"/v1/cache/stats", "GET", "cache_stats", R_CACHE_STATS, kvt_srv_handle_admin},
    {"/v1/cache/lint", "GET", "cache_lint", R_CACHE_LINT, kvt_srv_handle_lint},
    {"/v1/cache/lookup", "GET, POST", "cache_lookup", R_CACHE_LOOKUP, kvt_srv_handle_lookup},
    {"/v1/cache/events", "GET", "cache_events", R_CACHE_EVENTS, kvt_srv_handle_events},
    /* llama-server's own routes, and its paths without /v1 */
    {"/completion", "POST", "completion", R_LLAMA_COMPLETION, kvt_srv_handle_llama},
    {"/completions", "POST", "completion", R_LLAMA_COMPLETION, kvt_srv_handle_llama},
    {"/infill", "POST", "infill", R_INFILL, kvt_srv_handle_llama},
    {"/chat/completions", "POST", "chat_completions", R_CHAT, kvt_srv_handle_generate},
    {"/models", "GET", "models", R_MODELS, kvt_srv_handle_models},
    {"/apply-template", "POST", "apply_template", R_APPLY_TEMPLATE, kvt_srv_handle_llama},
    {"/slots", "GET", "slots", R_SLOTS, kvt_srv_handle_llama},
    {"/v1/embeddings", "POST", "embeddings", R_EMBEDDINGS, kvt_srv_handle_embeddings},
    {"/embedding", "POST", "embedding", R_LLAMA_EMBEDDING, kvt_srv_handle_embeddings},
    {"/embeddings", "POST", "embedding", R_LLAMA_EMBEDDING, kvt_srv_handle_embeddings},
    /* the Responses API; a "/{id}" segment (here and above) takes any one segment there */
    {"/v1/responses", "POST", "responses", R_RESPONSES, kvt_srv_handle_responses},
    {"/v1/responses/{id}", "GET, DELETE", "responses", R_RESPONSE_ITEM, kvt_srv_handle_responses},
    {"/v1/responses/{id}/input_items", "GET", "responses", R_RESPONSE_INPUT, kvt_srv_handle_responses},
};

/* Whether url is route i's path: the same, or for a path holding a "/{id}" segment that path with
 * one non-empty segment in place of "{id}". */
static int route_is(size_t i, const char *url) {
    const char *p = routes[i].url, *id = strstr(p, "/{id}");
    if (!id) return !strcmp(url, p);
    size_t pre = (size_t)(id - p) + 1; /* through the '/' before the segment */
    if (strncmp(url, p, pre)) return 0;
    const char *seg = url + pre, *end = seg + strcspn(seg, "/");
    return end > seg && !strcmp(end, id + 5);
}

/* Whether method is one of route i's (its list is comma-separated, as an Allow header). */
static int method_is(size_t i, const char *method) {
    size_t n = strlen(method);
    for (const char *p = routes[i].method; *p;) {
        size_t l = strcspn(p, ",");
        if (l == n && !strncmp(p, method, n)) return 1;
        p += l;
        p += strspn(p, ", ");
    }
    return 0;
}

/* The paths outside /v1/ that are the tenants' API too (llama-server's). */
static const char *const tenant_paths[] = {"/tokenize",    "/detokenize",       "/props",      "/completion",
                                           "/completions", "/chat/completions", "/models",     "/apply-template",
                                           "/slots",       "/embedding",        "/embeddings", "/infill"};

/* What a POST route's body holds, for the strict check every body gets before its handler. */
static kvt_api_body body_of(route r) {
    switch (r) {
    case R_COMPLETIONS: return KVT_BODY_COMPLETION;
    case R_LLAMA_COMPLETION: return KVT_BODY_LLAMA_COMPLETION;
    case R_INFILL: return KVT_BODY_INFILL;
    case R_APPLY_TEMPLATE:
    case R_CHAT:
    case R_RAG: return KVT_BODY_CHAT;
    case R_PREFILL:
    case R_CACHE_PIN:
    case R_CACHE_LOOKUP:
    case R_CACHE_PREFETCH: return KVT_BODY_PROMPT;
    case R_TOKENIZE: return KVT_BODY_TOKENIZE;
    case R_EMBEDDINGS:
    case R_LLAMA_EMBEDDING: return KVT_BODY_EMBEDDING;
    case R_DETOKENIZE: return KVT_BODY_DETOKENIZE;
    case R_RESPONSES: return KVT_BODY_RESPONSES;
    case R_CACHE_UNPIN: return KVT_BODY_UNPIN;
    default: return KVT_BODY_NONE;
    }
}

/* Refuses a request body: 413 over --max-body, 503 (+ Retry-After) when the
 * bodies of the requests in flight would pass --max-inflight-bytes. */
static enum MHD_Result send_refusal(kvt_server *s, struct MHD_Connection *c, const char *label, int status) {
    kvt_api_error e;
    if (status == MHD_HTTP_CONTENT_TOO_LARGE) {
        kvt_api_errorf(&e, status, "invalid_request_error", NULL, "request_too_large",
                       "the request body is larger than %zu bytes (--max-body)", s->p.max_body);
        return kvt_srv_send_error(s, c, label, &e, NULL, NULL);
    }
    kvt_api_errorf(&e, status, "server_error", NULL, "overloaded",
                   "the server holds %llu bytes of request bodies at most (--max-inflight-bytes) and is full; "
                   "retry later",
                   (unsigned long long)s->p.max_inflight_bytes);
    return kvt_srv_send_error(s, c, label, &e, MHD_HTTP_HEADER_RETRY_AFTER, RETRY_AFTER_S);
}

/* Compares without an early exit, so response time does not reveal how much of a key matched. */
static int key_equal(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = la != lb;
    for (size_t i = 0; i < la; i++) d |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return d == 0;
}

/* The bearer token of c's request, or NULL. The scheme's name is
 * case-insensitive and may be followed by several spaces (RFC 9110 11.4), so
 * "bearer KEY" is the same credential as "Bearer KEY". */
static const char *bearer(struct MHD_Connection *c) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    size_t n = strlen(BEARER);
    if (!h || strncasecmp(h, BEARER, n) || h[n] != ' ') return NULL;
    for (h += n; *h == ' ';) h++;
    return h;
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
 * keys any of them does (under --hide-cached-tokens only the admin key, since
 * the counters would tell a client what others have cached). The lint shows
 * prompt text: the admin key alone opens it. The admin key also opens /metrics
 * and the cache admin paths (kvt_srv_is_admin). /health stays open (it tells
 * slot counts only). */
typedef enum { ACCESS_OPEN, ACCESS_API_KEY, ACCESS_METRICS_KEY, ACCESS_ADMIN_KEY } access_rule;

static access_rule access_of(const kvt_server *s, const char *url) {
    if (!strcmp(url, "/v1/cache/lint")) return ACCESS_ADMIN_KEY;
    if (!strcmp(url, "/v1/health")) return ACCESS_OPEN; /* /health by another path: open as it is */
    int tenant = !strncmp(url, "/v1/", 4) && strcmp(url, "/v1/cache/events");
    for (size_t i = 0; i < KVT_ARRAY_LEN(tenant_paths) && !tenant; i++) tenant = !strcmp(url, tenant_paths[i]);
    if (tenant) return s->p.n_api_keys ? ACCESS_API_KEY : ACCESS_OPEN;
    /* the page shows what /metrics does, and every tenant's last requests */
    /* the store/evict feed tells every tenant's cache activity (as keys) as the counters do */
    if (!strcmp(url, "/metrics") || !strcmp(url, "/dashboard") || !strcmp(url, "/dashboard/requests") ||
        !strcmp(url, "/v1/cache/events")) {
        if (s->p.metrics_key) return ACCESS_METRICS_KEY;
        if (s->p.hide_cached_tokens) return ACCESS_ADMIN_KEY;
        return s->p.n_api_keys ? ACCESS_API_KEY : ACCESS_OPEN;
    }
    return ACCESS_OPEN;
}

/* 1 if c's request carries the admin key (--admin-key). */
static int admin_of(const kvt_server *s, struct MHD_Connection *c) {
    const char *b = bearer(c);
    return s->p.admin_key && b && key_equal(b, s->p.admin_key);
}

/* The answer to a request that lacks the key its path needs (rule != ACCESS_OPEN). */
static enum MHD_Result send_key_refusal(kvt_server *s, struct MHD_Connection *c, const char *label, access_rule rule) {
    if (rule == ACCESS_METRICS_KEY)
        return kvt_srv_send_errorf(s, c, label, MHD_HTTP_UNAUTHORIZED, "invalid_request_error", "invalid_api_key",
                                   "the metrics key is required: Authorization: Bearer KEY (--metrics-key)");
    if (rule == ACCESS_ADMIN_KEY && !s->p.admin_key)
        return kvt_srv_send_errorf(s, c, label, MHD_HTTP_FORBIDDEN, "invalid_request_error", "admin_only",
                                   s->p.hide_cached_tokens && strcmp(label, "cache_lint")
                                       ? "this page shows every tenant's cache counters, which --hide-cached-tokens "
                                         "keeps from clients: it needs --metrics-key or --admin-key"
                                       : "this path shows prompt text and is for the operator only: start the "
                                         "server with --admin-key and send that key");
    if (rule == ACCESS_ADMIN_KEY)
        return kvt_srv_send_errorf(s, c, label, MHD_HTTP_UNAUTHORIZED, "invalid_request_error", "invalid_api_key",
                                   "the admin key is required: Authorization: Bearer KEY (--admin-key)");
    return kvt_srv_send_errorf(s, c, label, MHD_HTTP_UNAUTHORIZED, "invalid_request_error", "invalid_api_key",
                               "a valid API key is required: Authorization: Bearer KEY");
}

/* The deadline handle of c's connection (kvt_srv_on_connection made it), or NULL. */
static kvt_http_conn *tracked(struct MHD_Connection *c) {
    conn_ctx *x = kvt_srv_conn_ctx(c);
    return x ? x->watch : NULL;
}

/* Copies src into dst[0..cap) for a log line: bytes outside printable ASCII become '?'. */
static void log_copy(char *dst, size_t cap, const char *src) {
    size_t i = 0;
    for (; src && src[i] && i + 1 < cap; i++) dst[i] = src[i] > ' ' && src[i] < 0x7f ? src[i] : '?';
    dst[i] = 0;
}

/* url with each run of '/' taken as one and a trailing '/' dropped ("/v1//models/" is "/v1/models"),
 * as nginx and most web frameworks read a path, so a client whose base URL ends in '/' reaches
 * the route; in dst[0..cap), or url itself when it does not fit (no route is that long). */
static const char *path_norm(const char *url, char *dst, size_t cap) {
    size_t n = 0;
    for (const char *p = url; *p; p++) {
        if (*p == '/' && n && dst[n - 1] == '/') continue;
        if (n + 1 == cap) return url;
        dst[n++] = *p;
    }
    if (n > 1 && dst[n - 1] == '/') n--;
    dst[n] = 0;
    return dst;
}

/* A client's X-Request-Id is kept when it is 1 to REQUEST_ID_MAX - 1 of [A-Za-z0-9._:-]. */
static int request_id_ok(const char *id) {
    size_t n = id ? strlen(id) : 0;
    return n > 0 && n < REQUEST_ID_MAX && strspn(id, REQUEST_ID_CHARS) == n;
}

/* A new request's state, current on its connection and counted in flight until kvt_srv_on_completed. */
static conn_state *request_begin(kvt_server *s, struct MHD_Connection *c, const char *url, const char *method) {
    conn_state *cs = kvt_xcalloc(1, sizeof *cs);
    cs->label = "other";
    cs->t_start = kvt_now();
    log_copy(cs->method, sizeof cs->method, method);
    log_copy(cs->path, sizeof cs->path, url);
    const char *id = MHD_lookup_connection_value(c, MHD_HEADER_KIND, REQUEST_ID_HEADER);
    const char *session = MHD_lookup_connection_value(c, MHD_HEADER_KIND, SESSION_HEADER);
    if (session && strlen(session) <= KVT_SESSION_NAME_MAX) snprintf(cs->session, sizeof cs->session, "%s", session);
    pthread_mutex_lock(&s->mu);
    s->n_requests++;
    uint64_t n = s->next_request++;
    pthread_mutex_unlock(&s->mu);
    if (request_id_ok(id)) snprintf(cs->request_id, sizeof cs->request_id, "%s", id);
    else
        snprintf(cs->request_id, sizeof cs->request_id, "req-%llx-%llx", (unsigned long long)s->started,
                 (unsigned long long)n);
    conn_ctx *x = kvt_srv_conn_ctx(c);
    if (x) x->cur = cs;
    return cs;
}

/* One line per request: what was asked, the answer, the cache's share and
 * the times; in JSON logs each of those is its own key (kvt_log_fields). */
static void access_log(kvt_server *s, const conn_state *cs, enum MHD_RequestTerminationCode toe) {
    char tenant[TENANT_HEX_LEN + 1] = "-";
    if (cs->key) snprintf(tenant, sizeof tenant, "%08x", (unsigned)XXH64(cs->key, strlen(cs->key), 0));
    const kvt_api_usage *u = &cs->usage;
    double total_ms = (kvt_now() - cs->t_start) * 1e3;
    if (cs->has_usage) kvt_srv_note_recent(s, cs, tenant, total_ms);
    if (!kvt_log_enabled(KVT_LOG_INFO)) return;
    int complete = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK;
    char tokens[ACCESS_TOKENS_MAX] = "",
         text[ACCESS_TOKENS_MAX + ACCESS_PATH_MAX + REQUEST_ID_MAX + KVT_HTTP_ADDR_TEXT + 104];
    if (cs->has_usage)
        snprintf(tokens, sizeof tokens, " prompt=%d cached=%d computed=%d generated=%d ttft_ms=%.1f", u->prompt_tokens,
                 u->cached_tokens, u->computed_tokens, u->completion_tokens, u->ttft_ms);
    snprintf(text, sizeof text, "access: %s %s %d id=%s tenant=%s%s total_ms=%.1f client=%s%s", cs->method, cs->path,
             cs->status, cs->request_id, tenant, tokens, total_ms, cs->client[0] ? cs->client : "-",
             complete ? "" : " (connection ended early)");
    /* token counts are null for requests that generated nothing (a 404, /metrics, a refused body) */
    kvt_log_type tk = cs->has_usage ? KVT_LOG_INT : KVT_LOG_STR;
    const kvt_log_field f[] = {
        {"method", KVT_LOG_STR, cs->method, 0, 0},
        {"path", KVT_LOG_STR, cs->path, 0, 0},
        {"status", KVT_LOG_INT, NULL, cs->status, 0},
        {"request_id", KVT_LOG_STR, cs->request_id, 0, 0},
        {"tenant", KVT_LOG_STR, cs->key ? tenant : NULL, 0, 0},
        {"prompt_tokens", tk, NULL, u->prompt_tokens, 0},
        {"cached_tokens", tk, NULL, u->cached_tokens, 0},
        {"computed_tokens", tk, NULL, u->computed_tokens, 0},
        {"generated_tokens", tk, NULL, u->completion_tokens, 0},
        {"ttft_ms", KVT_LOG_NUM, NULL, 0, cs->has_usage ? u->ttft_ms : NAN},
        {"total_ms", KVT_LOG_NUM, NULL, 0, total_ms},
        {"complete", KVT_LOG_BOOL, NULL, complete, 0},
        {"client", KVT_LOG_STR, cs->client[0] ? cs->client : NULL, 0, 0},
    };
    kvt_log_fields(KVT_LOG_INFO, "access", f, KVT_ARRAY_LEN(f), text);
}

/* The checks of a request's first call, before its route: its raw header
 * lines and framing headers (400, and the connection closes: where the body
 * ends is in doubt, so nothing after it on this connection is read), then its
 * client: the peer, or behind a trusted proxy the forwarded client, counted
 * against the per-address quota until the request ends (429 at the quota).
 * 1: the request goes on; 0: it was answered with *ret. */
static int screen_request(kvt_server *s, struct MHD_Connection *c, conn_state *cs, const char *method,
                          const char *version, enum MHD_Result *ret) {
    kvt_api_error e;
    conn_ctx *x = kvt_srv_conn_ctx(c);
    if (x && x->has_peer) kvt_http_addr_text(&x->peer, cs->client); /* for the access log, whatever the answer */
    const char *bad = kvt_http_raw_header_error(c, method, version);
    if (!bad) bad = kvt_http_framing_error(c);
    if (bad) {
        kvt_api_errorf(&e, MHD_HTTP_BAD_REQUEST, "invalid_request_error", NULL, "bad_framing", "malformed request: %s",
                       bad);
        *ret = kvt_srv_send_error(s, c, "other", &e, MHD_HTTP_HEADER_CONNECTION, "close");
        return 0;
    }
    if (!x || !x->has_peer) return 1;
    kvt_http_addr client = x->peer;
    int forwarded = x->proxy ? kvt_http_conns_forwarded_client(s->conns, c, &client, &bad) : 0;
    if (forwarded < 0) {
        kvt_api_errorf(&e, MHD_HTTP_BAD_REQUEST, "invalid_request_error", NULL, "bad_forwarded_for",
                       "malformed request: %s", bad);
        *ret = kvt_srv_send_error(s, c, "other", &e, NULL, NULL);
        return 0;
    }
    kvt_http_addr_text(&client, cs->client);
    if (forwarded && kvt_http_conns_claim(s->conns, &client)) {
        kvt_api_errorf(&e, MHD_HTTP_TOO_MANY_REQUESTS, "rate_limit_error", NULL, "too_many_connections",
                       "client %s has %u requests or connections open, the most one address may have "
                       "(--max-conns-per-ip); retry later",
                       cs->client, s->p.max_conns_per_ip);
        *ret = kvt_srv_send_error(s, c, "other", &e, MHD_HTTP_HEADER_RETRY_AFTER, RETRY_AFTER_S);
        return 0;
    }
    if (forwarded) {
        x->client = client;
        x->claimed = 1;
    }
    return 1;
}

/* The query parameters seen so far, to find one given twice. */
typedef struct {
    const char **keys;
    size_t n, cap;
    const char *twice; /* the first key seen again, or NULL */
} query_walk;

static enum MHD_Result note_query_key(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    query_walk *w = cls;
    (void)kind;
    (void)value;
    if (!key) return MHD_YES;
    for (size_t i = 0; i < w->n; i++)
        if (!strcmp(w->keys[i], key)) {
            w->twice = key;
            return MHD_NO;
        }
    if (w->n == w->cap) w->keys = kvt_xrealloc(w->keys, (w->cap = w->cap ? 2 * w->cap : 8) * sizeof *w->keys);
    w->keys[w->n++] = key;
    return MHD_YES;
}

/* 1 when a query parameter of c's URL is given twice (?since=1&since=2), with *e the 400 naming it
 * (printable ASCII kept, the rest '?'): libmicrohttpd would hand the handlers the first, so the
 * second would be dropped silently, whichever one the client meant. */
static int query_twice(struct MHD_Connection *c, kvt_api_error *e) {
    query_walk w = {0};
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, note_query_key, &w);
    int twice = w.twice != NULL;
    if (twice) {
        char name[sizeof e->param_text];
        log_copy(name, sizeof name, w.twice);
        kvt_api_errorf(e, MHD_HTTP_BAD_REQUEST, "invalid_request_error", NULL, "duplicate_parameter",
                       "the query parameter '%s' is given more than once: give it once", name);
        memcpy(e->param_text, name, sizeof name);
        e->param = e->param_text;
    }
    free(w.keys);
    return twice;
}

/* Gives back the quota a proxied request on c's connection took, once. */
static void unclaim(kvt_server *s, conn_ctx *x) {
    if (!x || !x->claimed) return;
    kvt_http_conns_unclaim(s->conns, &x->client);
    x->claimed = 0;
}

enum MHD_Result kvt_srv_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                   const char *version, const char *upload_data, size_t *upload_size, void **con_cls) {
    kvt_server *s = cls;
    conn_state *cs = *con_cls;
    if (!cs) {
        char norm[ACCESS_PATH_MAX];
        url = path_norm(url, norm, sizeof norm); /* every check and handler sees this path */
        *con_cls = cs = request_begin(s, c, url, method);
        kvt_http_guard_headers_in(s->guard, tracked(c)); /* the headers are in: the header deadline is met */
        enum MHD_Result screened;
        if (!screen_request(s, c, cs, method, version, &screened)) return screened;
        size_t i = 0;
        while (i < KVT_ARRAY_LEN(routes) && !route_is(i, url)) i++;
        const char *label = i < KVT_ARRAY_LEN(routes) ? routes[i].label : "other";
        /* a CORS preflight carries no key (browsers never send one), so it is answered before the key check */
        if (!strcmp(method, "OPTIONS") && s->p.n_cors_origins) return kvt_srv_send_preflight(s, c, label);
        /* the key first: without one, every method on a protected path is 401, telling nothing of routes */
        const char *key = NULL;
        access_rule rule = access_of(s, url);
        /* the admin key opens the operator's paths: the lint, the metrics, and the cache admin */
        int admin = admin_of(s, c) &&
            (rule == ACCESS_ADMIN_KEY || rule == ACCESS_METRICS_KEY ||
             (i < KVT_ARRAY_LEN(routes) && routes[i].handle == kvt_srv_handle_admin) || !strcmp(url, "/slots") ||
             !strncmp(url, "/metrics", 8) || !strncmp(url, "/dashboard", 10) || !strcmp(url, "/v1/cache/lookup") ||
             !strcmp(url, "/v1/cache/events"));
        int ok = admin || rule == ACCESS_OPEN;
        if (!ok && rule == ACCESS_API_KEY) ok = (key = authenticate(s, c)) != NULL;
        if (!ok && rule == ACCESS_METRICS_KEY) ok = bearer(c) && key_equal(bearer(c), s->p.metrics_key);
        if (!ok) return send_key_refusal(s, c, label, rule);
        cs->admin = admin;
        if (i == KVT_ARRAY_LEN(routes))
            return kvt_srv_send_errorf(s, c, label, MHD_HTTP_NOT_FOUND, "invalid_request_error", "not_found",
                                       "unknown route; kvtier serves /v1/completions, /v1/chat/completions, "
                                       "/v1/models, /v1/responses, /v1/rag/chat/completions, "
                                       "/v1/cache/{prefill,pin,unpin,prefetch,flush,stats,lint,lookup,events}, "
                                       "/tokenize, /detokenize, /props, /health, /metrics and /dashboard, and "
                                       "llama-server's /completion, /apply-template, /slots, /chat/completions "
                                       "and /models");
        /* HEAD of a GET page (a health check's or a monitor's): the GET's status and headers, and
         * libmicrohttpd leaves the body out; not the event stream, which never ends */
        int head = !strcmp(method, "HEAD") && !strcmp(routes[i].method, "GET") && routes[i].r != R_CACHE_EVENTS;
        if (!head && !method_is(i, method)) {
            kvt_api_error e;
            kvt_api_errorf(&e, MHD_HTTP_METHOD_NOT_ALLOWED, "invalid_request_error", NULL, "method_not_allowed",
                           "%s needs %s, not %s", url, routes[i].method, method);
            return kvt_srv_send_error(s, c, label, &e, MHD_HTTP_HEADER_ALLOW, routes[i].method);
        }
        kvt_api_error qe;
        if (query_twice(c, &qe)) return kvt_srv_send_error(s, c, label, &qe, NULL, NULL);
        if (rule != ACCESS_API_KEY) key = NULL; /* only an API key names a tenant */
        uint64_t declared = 0;
        if (!strcmp(method, "POST")) {
            const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
            declared = cl ? strtoull(cl, NULL, 10) : 0;
            if (declared > s->p.max_body) return send_refusal(s, c, routes[i].label, MHD_HTTP_CONTENT_TOO_LARGE);
            /* the declared body is reserved before a byte of it is read */
            if (declared && kvt_http_guard_reserve(s->guard, declared))
                return send_refusal(s, c, routes[i].label, MHD_HTTP_SERVICE_UNAVAILABLE);
        }
        cs->r = routes[i].r;
        cs->handle = routes[i].handle;
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
    /* every body is strict JSON before a handler reads it (api_body.h); only a route that reads no
     * field (flush) may come without one */
    kvt_api_body kind = body_of(cs->r);
    if (!strcmp(method, "POST") && (cs->len || kind != KVT_BODY_NONE)) {
        kvt_api_error e;
        if (kvt_api_check_body(kind, cs->body ? cs->body : "", cs->len, s->p.strict, &e))
            return kvt_srv_send_error(s, c, cs->label, &e, NULL, NULL);
    }
    return cs->handle(s, c, cs);
}

void kvt_srv_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    kvt_server *s = cls;
    kvt_http_guard_request_done(s->guard, tracked(c)); /* the next request's deadlines start */
    unclaim(s, kvt_srv_conn_ctx(c));
    conn_state *cs = *con_cls;
    if (!cs) return;
    access_log(s, cs, toe);
    kvt_metrics_observe_duration(s->metrics, cs->label, kvt_now() - cs->t_start);
    conn_ctx *x = kvt_srv_conn_ctx(c);
    if (x && x->cur == cs) x->cur = NULL;
    kvt_http_guard_release(s->guard, cs->reserved);
    free(cs->body);
    free(cs);
    *con_cls = NULL;
    pthread_mutex_lock(&s->mu);
    s->n_requests--;
    pthread_mutex_unlock(&s->mu);
}

enum MHD_Result kvt_srv_on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
    kvt_server *s = cls;
    (void)addrlen;
    return kvt_http_conns_admit(s->conns, addr) ? MHD_YES : MHD_NO;
}

/* MHD's connection start and end: the deadlines watch each, and each counts against its peer's address. */
void kvt_srv_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                           enum MHD_ConnectionNotificationCode code) {
    kvt_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        conn_ctx *x = kvt_xcalloc(1, sizeof *x);
        if (ci) x->watch = kvt_http_guard_conn_open(s->guard, ci->connect_fd);
        if (ai && !kvt_http_addr_of(ai->client_addr, &x->peer)) {
            x->has_peer = 1;
            x->proxy = kvt_http_conns_trusted(s->conns, &x->peer);
            kvt_http_conns_opened(s->conns, &x->peer);
        }
        *socket_context = x;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_ctx *x = *socket_context;
        if (x) {
            kvt_http_guard_conn_close(s->guard, x->watch);
            unclaim(s, x);
            if (x->has_peer) kvt_http_conns_closed(s->conns, &x->peer);
        }
        free(x);
        *socket_context = NULL;
    }
}
