// SPDX-License-Identifier: MIT
/* kvtier serve's lifecycle (see server.h for the flow, server_impl.h for the
 * parts): the default parameters, start (the bound address, the
 * libmicrohttpd daemon whose callbacks are in http_router.c, the engine thread of
 * scheduler.c), quiesce and stop. */
#include "server_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "blend.h"
#include "common.h"

#define STOP_FLUSH_S 2.0       /* at stop, how long the answers being sent may take to finish */
#define STOP_POLL_NS 10000000L /* how often the stop looks at them */

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
                           .header_timeout_s = KVT_SERVER_DEFAULT_HEADER_TIMEOUT_S,
                           .max_conns_per_ip = KVT_SERVER_DEFAULT_CONNS_PER_IP,
                           .max_conns = KVT_SERVER_DEFAULT_MAX_CONNS,
                           .conn_reserve = KVT_SERVER_DEFAULT_CONN_RESERVE,
                           .chat = KVT_CHAT_CHATML,
                           .session_keep_warm_s = KVT_SERVER_DEFAULT_KEEP_WARM_S,
                           .model_id = "kvtier",
                           .rag_k = KVT_RAG_DEFAULT_K,
                           .rag_rrf_k = KVT_RAG_RRF_K,
                           .recompute_ratio = KVT_BLEND_DEFAULT_RATIO,
                           .metrics_names = KVT_METRICS_LLAMACPP,
                           .default_temperature = 1.0f,
                           .default_top_p = 1.0f,
                           .default_repeat_penalty = 1.0f,
                           .default_penalty_last_n = 64, /* llama-server's */
                           .responses_max = KVT_SERVER_DEFAULT_RESPONSES,
                           .responses_ttl_s = KVT_SERVER_DEFAULT_RESPONSES_TTL_S};
    p.default_sampling = kvt_sampler_default_params();
    return p;
}

static void server_free(kvt_server *s) {
    for (int32_t i = 0; s->slots && i < s->p.parallel; i++) kvt_srv_slot_clear(s, &s->slots[i]);
    free(s->slots);
    free(s->slot_reqs);
    free(s->queue);
    free(s->logits);
    kvt_jg_vocab_free(s->jg_vocab);
    kvt_infill_vocab_free(s->infill_vocab);
    free(s->jg_mask);
    free(s->jg_logits);
    free(s->jg_refused);
    free(s->b_tok);
    free(s->b_seq);
    free(s->b_want);
    free(s->b_hid);
    free(s->hidden);
    free(s->step_admit);
    free(s->step_cancelled);
    free(s->step_dec);
    free(s->step_forks);
    free(s->test_hold);
    kvt_reply_journal_free(s->journal);
    kvt_reply_map_free(s->replies);
    kvt_resp_store_free(s->responses);
    kvt_call_memo_free(s->calls);
    kvt_prompt_ring_free(s->recent);
    kvt_req_ring_free(s->reqs);
    kvt_prefix_set_observer(kvt_cache_index(s->cache), NULL, NULL); /* the cache may outlive the server */
    kvt_cache_events_free(s->events);
    kvt_metrics_free(s->metrics);
    for (int32_t i = 0; i < s->n_pins; i++) kvt_cache_release(s->cache, s->pins[i].pin);
    free(s->pins);
    pthread_cond_destroy(&s->job_cv);
    kvt_http_guard_free(s->guard);
    kvt_http_conns_free(s->conns);
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
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
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

/* The server's state for model, e and c (params checked): the reply map,
 * tool-call memo, recent prompts, metrics, queue, slots and the engine
 * thread's batch buffers. Nothing runs yet. */
static kvt_server *server_new(const kvt_model *model, kvt_engine *e, kvt_cache *c, const kvt_server_params *params,
                              const kvt_engine_params *ep) {
    kvt_server *s = kvt_xcalloc(1, sizeof *s);
    s->p = *params;
    s->model = model;
    s->tok = model->tok;
    s->e = e;
    s->cache = c;
    s->n_ctx = ep->n_ctx;
    s->block = ep->block_size;
    s->n_vocab = kvt_engine_n_vocab(e);
    s->replies = kvt_reply_map_new(REPLY_MAP_ENTRIES, REPLY_MAX_IDS);
    /* with T2, the map outlives a restart; --retokenize-replies uses no map */
    if (!s->p.retokenize_replies) s->journal = kvt_reply_journal_open(c, s->replies, REPLY_MAP_ENTRIES, s->n_vocab);
    s->responses = kvt_resp_store_new(s->p.responses_max, KVT_SERVER_RESPONSES_MAX_BYTES, s->p.responses_ttl_s);
    s->calls = kvt_call_memo_new(CALL_MEMO_ENTRIES, s->replies);
    s->recent = kvt_prompt_ring_new(KVT_PROMPT_RING_DEFAULT);
    s->reqs = kvt_req_ring_new(KVT_REQ_RING_DEFAULT);
    s->metrics = kvt_metrics_new();
    s->events = kvt_cache_events_new(KVT_CACHE_EVENTS_DEFAULT);
    /* the feed starts here: blocks already present (a reopened disk tier) are not in it */
    kvt_prefix_set_observer(kvt_cache_index(c), kvt_cache_events_observe, s->events);
    s->started = (int64_t)time(NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->engine_cv, NULL);
    kvt_srv_cond_init(&s->job_cv);
    s->queue = kvt_xcalloc((size_t)s->p.queue, sizeof *s->queue);
    s->slots = kvt_xcalloc((size_t)s->p.parallel, sizeof *s->slots);
    s->slot_reqs = kvt_xcalloc((size_t)s->p.parallel, sizeof *s->slot_reqs);
    for (int32_t i = 0; i < s->p.parallel; i++) s->slots[i].seq = -1;
    size_t max_batch = (size_t)s->p.parallel + (size_t)s->p.prefill_chunk;
    s->logits = kvt_xmalloc(((size_t)s->p.parallel + 1) * (size_t)s->n_vocab * sizeof *s->logits);
    s->b_tok = kvt_xmalloc(max_batch * sizeof *s->b_tok);
    s->b_seq = kvt_xmalloc(max_batch * sizeof *s->b_seq);
    s->b_want = kvt_xmalloc(max_batch * sizeof *s->b_want);
    s->b_hid = kvt_xcalloc(max_batch, sizeof *s->b_hid);
    s->hidden = s->p.embeddings || s->p.rag_dense
        ? kvt_xmalloc((size_t)s->p.prefill_chunk * (size_t)s->model->hp.n_embd * sizeof *s->hidden)
        : NULL;
    size_t n_step = (size_t)KVT_MAX(s->p.parallel, 1);
    s->step_admit = kvt_xcalloc(n_step, sizeof *s->step_admit);
    s->step_cancelled = kvt_xcalloc(n_step, sizeof *s->step_cancelled);
    s->step_dec = kvt_xcalloc(n_step, sizeof *s->step_dec);
    s->step_forks = kvt_xcalloc(n_step, sizeof *s->step_forks);
    kvt_cache_get_stats(c, &s->snap);
    const char *hold = getenv("KVT_TEST_HOLD_SESSION");
    if (hold && *hold) s->test_hold = kvt_xstrdup(hold);
    return s;
}

/* Starts MHD listening on addr (v6: an IPv6 address) with the server's
 * callbacks and limits. Returns the daemon, or NULL with errno saying why. */
static struct MHD_Daemon *start_daemon(kvt_server *s, const struct sockaddr_storage *addr, int v6) {
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
    if (v6)
        flags |= IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)addr)->sin6_addr) ? MHD_USE_DUAL_STACK
                                                                                          : MHD_USE_IPv6;
    /* the per-address quota is kvtier's accept policy (http_conns.h), not MHD's, which has no reserve */
    return MHD_start_daemon(flags, 0, kvt_srv_on_accept, s, kvt_srv_on_request, s, MHD_OPTION_SOCK_ADDR,
                            (struct sockaddr *)addr, MHD_OPTION_CONNECTION_TIMEOUT, s->p.timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, s->p.max_conns, MHD_OPTION_PER_IP_CONNECTION_LIMIT, 0u,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)KVT_HTTP_POOL_BYTES,
                            MHD_OPTION_NOTIFY_COMPLETED, kvt_srv_on_completed, s, MHD_OPTION_NOTIFY_CONNECTION,
                            kvt_srv_on_connection, s, MHD_OPTION_ARRAY, pool_opt, KVT_HTTP_STRICTNESS, MHD_OPTION_END);
}

/* The address the server listens on, numeric (IPv6 in brackets), into s->address. */
static void note_address(kvt_server *s, const struct sockaddr_storage *addr, int v6) {
    char num[INET6_ADDRSTRLEN];
    const void *raw = v6 ? (const void *)&((const struct sockaddr_in6 *)addr)->sin6_addr
                         : (const void *)&((const struct sockaddr_in *)addr)->sin_addr;
    if (!inet_ntop(v6 ? AF_INET6 : AF_INET, raw, num, sizeof num)) snprintf(num, sizeof num, "?");
    snprintf(s->address, sizeof s->address, v6 ? "[%s]" : "%s", num);
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
    if (params->max_conns < 1 || params->conn_reserve >= params->max_conns)
        return kvt_fail(KVT_EARG, "the connection reserve (%u) must be less than the connection cap (%u)",
                        params->conn_reserve, params->max_conns);
    kvt_http_addr *trusted = kvt_xcalloc(params->n_trusted_proxies + 1, sizeof *trusted);
    for (size_t i = 0; i < params->n_trusted_proxies; i++) {
        const char *t = params->trusted_proxies[i];
        if (kvt_http_addr_parse(t, strlen(t), 0, &trusted[i])) {
            free(trusted);
            return kvt_fail(KVT_EARG, "--trusted-proxy '%s' is not an IP address", t);
        }
    }
    struct sockaddr_storage addr;
    int v6 = 0;
    if (resolve_host(params->host, params->port, &addr, &v6)) { /* kvt_errmsg() says why */
        free(trusted);
        return KVT_EARG;
    }
    kvt_server *s = server_new(model, e, c, params, &ep);
    s->conns = kvt_http_conns_new(s->p.max_conns, s->p.max_conns_per_ip, s->p.conn_reserve, trusted,
                                  params->n_trusted_proxies);
    free(trusted);
    if (!kvt_http_raw_check_available())
        kvt_logk(KVT_LOG_WARN, "libmicrohttpd",
                 "serve: libmicrohttpd %s is not a version whose header parser kvtier reads: folded header "
                 "lines and NULs in headers are not refused",
                 MHD_get_version());
    if (!(s->guard = kvt_http_guard_new(s->p.max_inflight_bytes, (double)s->p.request_timeout_s,
                                        (double)s->p.header_timeout_s))) {
        server_free(s);
        return KVT_ELIMIT; /* kvt_errmsg() says why */
    }
    s->mhd = start_daemon(s, &addr, v6);
    if (!s->mhd) {
        int err = errno;
        server_free(s);
        return kvt_fail(-(err ? err : EADDRINUSE), "cannot listen on %s:%d: %s", params->host, params->port,
                        strerror(err ? err : EADDRINUSE));
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : params->port;
    note_address(s, &addr, v6);
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
    /* every request is done now, so handler threads and stream readers finish: their last bytes (a
     * stream's final chunk and [DONE]) get a moment to go out before the connections close */
    const struct timespec slice = {0, STOP_POLL_NS};
    for (double end = kvt_now() + STOP_FLUSH_S; kvt_server_in_flight(s) > 0 && kvt_now() < end;)
        nanosleep(&slice, NULL);
    MHD_stop_daemon(s->mhd);
    server_free(s);
}
