// SPDX-License-Identifier: MIT
/* The router's HTTP front (libmicrohttpd, a thread per connection): reads a
 * request whole, picks its node (route_index.c), forwards it and relays the
 * answer as it arrives; /health and /metrics of its own; kvt_route_run. */
#include "route_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "log.h"

/* The OpenAI routes forwarded by affinity; the others the router answers or refuses. */
static const char *const forwarded[] = {"/v1/chat/completions", "/v1/completions",   "/completion",
                                        "/v1/responses",        "/chat/completions", "/completions"};

typedef struct {
    char *body;
    size_t len, cap;
    int too_big;
} req_ctx;

/* One relayed answer: the node's connection, and what the relay notes on the way. */
typedef struct {
    kvt_router *r;
    int node;
    kvt_up up;
    uint64_t seed;  /* the tenant's part of session hashes (its Authorization) */
    int responses;  /* /v1/responses: the answer's id continues the session */
    char head[512]; /* the answer's first bytes (its id) */
    size_t head_len;
    char tail[2048]; /* its last bytes (its usage) */
    size_t tail_len;
} relay_ctx;

static enum MHD_Result send_json(struct MHD_Connection *c, int status, const char *json) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(json), (void *)json, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, int status, const char *code, const char *msg) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", status >= 500 ? "server_error" : "invalid_request_error");
    cJSON_AddStringToObject(e, "code", code);
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    enum MHD_Result ret = send_json(c, status, t);
    free(t);
    return ret;
}

/* The last integer after `"name":` in text[0..n), or -1. */
static long long last_number(const char *text, size_t n, const char *name) {
    char pat[64];
    int pl = snprintf(pat, sizeof pat, "\"%s\":", name);
    long long v = -1;
    for (size_t i = 0; i + (size_t)pl < n; i++)
        if (!memcmp(text + i, pat, (size_t)pl)) v = strtoll(text + i + pl, NULL, 10);
    return v;
}

/* The id of a Responses answer (its first "id"), continued by a later previous_response_id. */
static void note_response_id(relay_ctx *f) {
    char *p = memmem(f->head, f->head_len, "\"id\":\"", 6);
    if (!p) return;
    p += 6;
    char *q = memchr(p, '"', (size_t)(f->head + f->head_len - p));
    if (!q) return;
    uint64_t sid = kvt_route_name_hash(p, (size_t)(q - p)) ^ f->seed;
    pthread_mutex_lock(&f->r->mu);
    kvt_route_stick(f->r, sid ? sid : 1, f->node);
    pthread_mutex_unlock(&f->r->mu);
}

static ssize_t relay_read(void *cls, uint64_t pos, char *buf, size_t max) {
    relay_ctx *f = cls;
    (void)pos;
    ssize_t k = kvt_up_read(&f->up, buf, max);
    if (k == 0) return MHD_CONTENT_READER_END_OF_STREAM;
    if (k < 0) return MHD_CONTENT_READER_END_WITH_ERROR; /* the node went away mid-answer */
    size_t n = (size_t)k, h = KVT_MIN(n, sizeof f->head - f->head_len);
    memcpy(f->head + f->head_len, buf, h);
    f->head_len += h;
    if (n >= sizeof f->tail) {
        memcpy(f->tail, buf + n - sizeof f->tail, sizeof f->tail);
        f->tail_len = sizeof f->tail;
    } else {
        size_t keep = KVT_MIN(f->tail_len, sizeof f->tail - n);
        memmove(f->tail, f->tail + f->tail_len - keep, keep);
        memcpy(f->tail + keep, buf, n);
        f->tail_len = keep + n;
    }
    return k;
}

/* The answer is over (or its client left): the node's count and the usage it reported. */
static void relay_done(void *cls) {
    relay_ctx *f = cls;
    long long pt = last_number(f->tail, f->tail_len, "prompt_tokens"),
              ct = last_number(f->tail, f->tail_len, "cached_tokens");
    if (f->responses) note_response_id(f);
    pthread_mutex_lock(&f->r->mu);
    kvt_route_node *nd = &f->r->nodes[f->node];
    nd->inflight--;
    if (pt > 0 && ct >= 0 && ct <= pt) {
        nd->prompt_tokens += (uint64_t)pt;
        nd->cached_tokens += (uint64_t)ct;
    }
    pthread_mutex_unlock(&f->r->mu);
    kvt_up_close(&f->up);
    free(f);
}

/* The session a request continues: X-Session-Id, else kvtier.session_id, else
 * previous_response_id; hashed with the caller's key so tenants never share one. 0: none. */
static uint64_t session_of(struct MHD_Connection *c, const cJSON *root, uint64_t seed) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Session-Id");
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(root, "kvtier");
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(kv, "session_id");
    const cJSON *pv = cJSON_GetObjectItemCaseSensitive(root, "previous_response_id");
    const char *id = h && *h ? h : cJSON_IsString(sv) ? sv->valuestring : cJSON_IsString(pv) ? pv->valuestring : NULL;
    if (!id) return 0;
    uint64_t sid = kvt_route_name_hash(id, strlen(id)) ^ seed;
    return sid ? sid : 1;
}

/* The client's headers a node needs, as "Name: value\r\n" lines. */
static void client_headers(struct MHD_Connection *c, char *out, size_t cap) {
    static const char *const names[] = {"Authorization", "Content-Type", "X-Session-Id", "X-Request-Id", "Accept"};
    size_t n = 0;
    out[0] = 0;
    for (size_t i = 0; i < KVT_ARRAY_LEN(names); i++) {
        const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, names[i]);
        if (!v || strpbrk(v, "\r\n")) continue;
        int k = snprintf(out + n, cap - n, "%s: %s\r\n", names[i], v);
        if (k < 0 || (size_t)k >= cap - n) break;
        n += (size_t)k;
    }
}

/* Whether session sid is known on a node that is up (no lookup is needed then). */
static int session_placed(kvt_router *r, uint64_t sid) {
    if (!sid) return 0;
    pthread_mutex_lock(&r->mu);
    const kvt_route_session *e = &r->sessions[sid % KVT_ROUTE_SESSIONS];
    int placed = e->id == sid && r->nodes[e->node].up;
    pthread_mutex_unlock(&r->mu);
    return placed;
}

/* The prompt's chained block keys, from one node (the least loaded that is up):
 * POST /v1/cache/lookup?tiers=0 with the client's body and key. NULL when none
 * answered (the request then goes by load). */
static kvt_hash128 *lookup_keys(kvt_router *r, const char *headers, const char *body, size_t len, size_t *nk) {
    *nk = 0;
    int best = -1;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++)
        if (r->nodes[i].up && (best < 0 || r->nodes[i].inflight < r->nodes[best].inflight)) best = i;
    char host[200];
    int port = best >= 0 ? r->nodes[best].port : 0;
    snprintf(host, sizeof host, "%s", best >= 0 ? r->nodes[best].host : "");
    pthread_mutex_unlock(&r->mu);
    if (best < 0) return NULL;
    char *out = NULL;
    int status = 0;
    if (kvt_up_fetch(host, port, 10000, "POST", "/v1/cache/lookup?tiers=0", headers, body, len, &status, &out,
                     16u << 20) ||
        status != 200) {
        free(out);
        return NULL;
    }
    cJSON *o = cJSON_Parse(out);
    free(out);
    const cJSON *ka = cJSON_GetObjectItemCaseSensitive(o, "block_keys"), *k;
    const cJSON *bt = cJSON_GetObjectItemCaseSensitive(o, "block_tokens");
    if (cJSON_IsNumber(bt) && bt->valuedouble >= 1 && bt->valuedouble <= 1 << 20) {
        pthread_mutex_lock(&r->mu);
        r->block_tokens = (int)bt->valuedouble; /* the same on every node of one model */
        pthread_mutex_unlock(&r->mu);
    }
    int n = cJSON_IsArray(ka) ? cJSON_GetArraySize(ka) : 0;
    kvt_hash128 *keys = n ? kvt_xmalloc((size_t)n * sizeof *keys) : NULL;
    cJSON_ArrayForEach(k, ka) {
        const char *h = cJSON_IsString(k) ? k->valuestring : "";
        if (strlen(h) != 32 || strspn(h, "0123456789abcdef") != 32) break;
        char hi[17] = {0};
        memcpy(hi, h, 16);
        keys[*nk].hi = strtoull(hi, NULL, 16);
        keys[*nk].lo = strtoull(h + 16, NULL, 16);
        (*nk)++;
    }
    cJSON_Delete(o);
    return keys;
}

/* Queues the node's answer to the client, relayed as it arrives. f->up has read its head. */
static enum MHD_Result relay(struct MHD_Connection *c, relay_ctx *f, kvt_route_reason why) {
    static const char *reasons[ROUTE_REASONS] = {"session", "prefix", "load", "round_robin"};
    uint64_t size = !f->up.chunked && f->up.left >= 0 ? (uint64_t)f->up.left : MHD_SIZE_UNKNOWN;
    struct MHD_Response *resp = MHD_create_response_from_callback(size, 16384, relay_read, f, relay_done);
    if (!resp) {
        relay_done(f);
        return MHD_NO;
    }
    if (f->up.ctype[0]) MHD_add_response_header(resp, "Content-Type", f->up.ctype);
    if (f->up.retry_after[0]) MHD_add_response_header(resp, "Retry-After", f->up.retry_after);
    MHD_add_response_header(resp, "X-Kvtier-Node", f->r->nodes[f->node].url);
    MHD_add_response_header(resp, "X-Kvtier-Route", reasons[why]);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)f->up.status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Sends the request to its node; a node that cannot be reached, or closes
 * before it answers, is marked down and the next pick gets the request (a 503
 * from a busy or draining node too, while another remains). 502 when none answers. */
static enum MHD_Result forward(kvt_router *r, struct MHD_Connection *c, const char *url, const char *method,
                               req_ctx *q) {
    char headers[4096];
    client_headers(c, headers, sizeof headers);
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    uint64_t seed = auth ? kvt_route_name_hash(auth, strlen(auth)) : 0;
    cJSON *root = q->len ? cJSON_ParseWithLength(q->body, q->len) : NULL;
    uint64_t sid = session_of(c, root, seed);
    int prompt = cJSON_GetObjectItemCaseSensitive(root, "messages") || cJSON_GetObjectItemCaseSensitive(root, "prompt");
    cJSON_Delete(root);
    size_t nk = 0;
    kvt_hash128 *keys = r->p.policy == KVT_ROUTE_AFFINITY && prompt && !session_placed(r, sid)
        ? lookup_keys(r, headers, q->body, q->len, &nk)
        : NULL;
    uint64_t tried = 0;
    for (int attempt = 0; attempt < r->n; attempt++) {
        kvt_route_reason why;
        pthread_mutex_lock(&r->mu);
        int i = kvt_route_pick(r, sid, keys, nk, tried, &why);
        char host[200];
        int port = i >= 0 ? r->nodes[i].port : 0;
        snprintf(host, sizeof host, "%s", i >= 0 ? r->nodes[i].host : "");
        pthread_mutex_unlock(&r->mu);
        if (i < 0) break;
        relay_ctx *f = kvt_xcalloc(1, sizeof *f);
        *f = (relay_ctx){.r = r, .node = i, .seed = seed, .responses = !strcmp(url, "/v1/responses")};
        int ok = !kvt_up_request(&f->up, host, port, r->p.timeout_s * 1000, method, url, headers, q->body, q->len) &&
            !kvt_up_read_head(&f->up);
        if (ok && (f->up.status != 503 || attempt + 1 == r->n)) {
            free(keys);
            return relay(c, f, why);
        }
        pthread_mutex_lock(&r->mu);
        r->nodes[i].inflight--;
        r->nodes[i].failovers++;
        if (!ok) kvt_route_set_up(r, i, 0); /* its poller brings it back once it answers */
        pthread_mutex_unlock(&r->mu);
        if (!ok) kvt_log(KVT_LOG_WARN, "route: node %s did not answer; trying another", r->nodes[i].url);
        kvt_up_close(&f->up);
        free(f);
        tried |= 1ull << i;
    }
    free(keys);
    pthread_mutex_lock(&r->mu);
    r->lost++;
    pthread_mutex_unlock(&r->mu);
    return send_error(c, 502, "no_node", "no kvtier node answered the request (every node is down or failed)");
}

/* The router's own /health: 200 while a node is up, with the counts. */
static enum MHD_Result send_health(kvt_router *r, struct MHD_Connection *c) {
    int up = 0;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++) up += r->nodes[i].up;
    pthread_mutex_unlock(&r->mu);
    char t[96];
    snprintf(t, sizeof t, "{\"status\":\"%s\",\"nodes\":%d,\"nodes_up\":%d}", up ? "ok" : "no_nodes", r->n, up);
    return send_json(c, up ? 200 : 503, t);
}

static enum MHD_Result send_metrics(kvt_router *r, struct MHD_Connection *c) {
    char *m = kvt_route_metrics(r);
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(m), m, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4");
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    kvt_router *r = cls;
    (void)version;
    req_ctx *q = *con_cls;
    if (!q) {
        *con_cls = kvt_xcalloc(1, sizeof(req_ctx));
        return MHD_YES;
    }
    if (*upload_size) {
        if (q->len + *upload_size > r->p.max_body) q->too_big = 1;
        if (!q->too_big) {
            if (q->len + *upload_size + 1 > q->cap) {
                q->cap = KVT_MAX(q->cap * 2, q->len + *upload_size + 1);
                q->body = kvt_xrealloc(q->body, q->cap);
            }
            memcpy(q->body + q->len, upload, *upload_size);
            q->len += *upload_size;
            q->body[q->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (q->too_big) return send_error(c, 413, "request_too_large", "the request body is over the router's --max-body");
    if (!strcmp(method, "GET") && !strcmp(url, "/health")) return send_health(r, c);
    if (!strcmp(method, "GET") && !strcmp(url, "/metrics")) return send_metrics(r, c);
    /* the model list is the same on every node: any one answers it */
    if (!strcmp(method, "GET") && (!strcmp(url, "/v1/models") || !strcmp(url, "/models")))
        return forward(r, c, url, method, q);
    for (size_t i = 0; i < KVT_ARRAY_LEN(forwarded); i++)
        if (!strcmp(url, forwarded[i])) {
            if (strcmp(method, "POST")) return send_error(c, 405, "method_not_allowed", "this path takes POST");
            return forward(r, c, url, method, q);
        }
    return send_error(c, 404, "not_found",
                      "unknown route; kvtier route forwards /v1/chat/completions, /v1/completions, /completion and "
                      "/v1/responses, and answers /v1/models, /health and /metrics");
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)c;
    (void)toe;
    req_ctx *q = *con_cls;
    if (q) free(q->body);
    free(q);
    *con_cls = NULL;
}

int kvt_route_start_front(kvt_router *r) {
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC;
    if (inet_pton(AF_INET, r->p.host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)r->p.port);
        sl = sizeof *a4;
    } else if (inet_pton(AF_INET6, r->p.host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)r->p.port);
        sl = sizeof *a6;
        flags |= MHD_USE_IPv6;
    } else {
        kvt_log(KVT_LOG_ERROR, "route: --host '%s' is not a numeric IPv4 or IPv6 address", r->p.host);
        return -1;
    }
    (void)sl;
    r->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, r, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)r->p.timeout_s, MHD_OPTION_NOTIFY_COMPLETED,
                              on_completed, r, MHD_OPTION_END);
    if (!r->mhd) {
        kvt_log(KVT_LOG_ERROR, "route: cannot listen on %s:%d: %s", r->p.host, r->p.port, strerror(errno));
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(r->mhd, MHD_DAEMON_INFO_BIND_PORT);
    int port = di ? di->port : r->p.port;
    fprintf(stderr, "kvtier route: %d nodes; listening on http://%s%s%s:%d\n", r->n,
            a6->sin6_family == AF_INET6 ? "[" : "", r->p.host, a6->sin6_family == AF_INET6 ? "]" : "", port);
    fflush(stderr);
    return 0;
}

kvt_route_params kvt_route_default_params(void) {
    return (kvt_route_params){.host = "127.0.0.1",
                              .port = 8080,
                              .policy = KVT_ROUTE_AFFINITY,
                              .balance = 1.5,
                              .load_cost = 1024,
                              .health_ms = 500,
                              .timeout_s = 600,
                              .max_body = 16u << 20};
}

int kvt_route_run(const kvt_route_params *p) {
    kvt_router *r = kvt_xcalloc(1, sizeof *r);
    r->p = *p;
    pthread_mutex_init(&r->mu, NULL);
    r->sessions = kvt_xcalloc(KVT_ROUTE_SESSIONS, sizeof *r->sessions);
    int rc = 0;
    for (int i = 0; i < p->n_nodes && !rc; i++) {
        kvt_route_node *nd = &r->nodes[r->n++];
        snprintf(nd->url, sizeof nd->url, "%s", p->nodes[i]);
        size_t ul = strlen(nd->url);
        if (ul && nd->url[ul - 1] == '/') nd->url[ul - 1] = 0;
        if (kvt_up_parse_url(p->nodes[i], nd->host, sizeof nd->host, &nd->port)) {
            kvt_log(KVT_LOG_ERROR, "route: --nodes: '%s' is not http://HOST:PORT", p->nodes[i]);
            rc = KVT_EARG;
        }
    }
    /* SIGINT/SIGTERM are taken by sigwait below: blocked before any thread starts, so all inherit it */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (!rc && kvt_route_start_polls(r)) rc = KVT_ELIMIT;
    if (!rc && kvt_route_start_front(r)) {
        kvt_route_stop_polls(r);
        rc = KVT_EARG;
    }
    if (!rc) {
        int sig = 0;
        sigwait(&set, &sig);
        kvt_log(KVT_LOG_INFO, "route: stopping on signal %d", sig);
        MHD_stop_daemon(r->mhd);
        kvt_route_stop_polls(r);
    }
    for (int i = 0; i < r->n; i++) kvt_hmap128_free(&r->nodes[i].keys);
    free(r->sessions);
    pthread_mutex_destroy(&r->mu);
    free(r);
    return rc;
}
