// SPDX-License-Identifier: MIT
/* The sending side of the HTTP layer (see http_send.h): the per-connection
 * context, CORS, the helpers every handler answers with (kvt_srv_send_*), and
 * the wait for a queued request that watches its client. It calls only
 * libmicrohttpd, the metrics, the error JSON and the queue (sched/), never the
 * router or a handler. */
#include "http_send.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "api_error.h"

conn_ctx *kvt_srv_conn_ctx(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The request being served on c, or NULL. */
static conn_state *current(struct MHD_Connection *c) {
    conn_ctx *x = kvt_srv_conn_ctx(c);
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
void kvt_srv_note_response(kvt_server *s, struct MHD_Connection *c, struct MHD_Response *resp, int status) {
    add_cors(s, c, resp);
    conn_state *cs = current(c);
    if (!cs) return;
    cs->status = status;
    MHD_add_response_header(resp, REQUEST_ID_HEADER, cs->request_id);
}

enum MHD_Result kvt_srv_send_response(kvt_server *s, struct MHD_Connection *c, const char *label, int status,
                                      struct MHD_Response *resp) {
    kvt_srv_note_response(s, c, resp, status);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    kvt_metrics_count_request(s->metrics, label, status);
    return ret;
}

enum MHD_Result kvt_srv_send_text(kvt_server *s, struct MHD_Connection *c, const char *label, int status,
                                  const char *ctype, char *body, const char *h_name, const char *h_value) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (h_name) MHD_add_response_header(resp, h_name, h_value);
    return kvt_srv_send_response(s, c, label, status, resp);
}

enum MHD_Result kvt_srv_send_error(kvt_server *s, struct MHD_Connection *c, const char *label, const kvt_api_error *e,
                                   const char *h_name, const char *h_value) {
    return kvt_srv_send_text(s, c, label, e->status, "application/json", kvt_api_error_json(e), h_name, h_value);
}

enum MHD_Result kvt_srv_send_errorf(kvt_server *s, struct MHD_Connection *c, const char *label, int status,
                                    const char *type, const char *code, const char *msg) {
    kvt_api_error e;
    kvt_api_errorf(&e, status, type, NULL, code, "%s", msg);
    return kvt_srv_send_error(s, c, label, &e, NULL, NULL);
}

/* A CORS preflight (OPTIONS with --cors-origin): 204 with what the browser may
 * send. An origin not allowed gets no Allow-Origin, so the browser refuses. */
enum MHD_Result kvt_srv_send_preflight(kvt_server *s, struct MHD_Connection *c, const char *label) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    if (cors_allow(s, c)) {
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", CORS_METHODS);
        const char *asked = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        /* echo the headers asked for: the key, the content type and kvtier's own are all fine to send */
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", asked && *asked ? asked : CORS_HEADERS);
        MHD_add_response_header(resp, "Access-Control-Max-Age", CORS_MAX_AGE_S);
    }
    return kvt_srv_send_response(s, c, label, MHD_HTTP_NO_CONTENT, resp);
}

/* Whether the client is gone (checked while a stream waits for its next
 * event). A FIN alone is not departure here: a client may half-close
 * (shutdown(SHUT_WR), `nc -N`) and still read the stream. So only a reset or
 * a socket error counts, which poll() reports as POLLERR/POLLHUP without
 * consuming data; a client that closed without a reset is noticed when a
 * write of the stream to it fails, an event or two later. */
int kvt_srv_peer_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    struct pollfd pfd = {.fd = ci->connect_fd, .events = 0};
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLERR | POLLHUP | POLLNVAL));
}

int kvt_srv_stream_waiting(struct MHD_Connection *c, int *held) {
    if (!*held) MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    *held = 1;
    return kvt_srv_peer_gone(c);
}

void kvt_srv_stream_resume(const kvt_server *s, struct MHD_Connection *c, int *held) {
    if (*held) MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->p.timeout_s);
    *held = 0;
}

/* Whether the client of a request answered whole (not streamed) is gone: a
 * reset, or its FIN (POLLRDHUP, seen without reading what it sent). Nothing
 * is written to it before the answer, and a socket closed with close() sends
 * only a FIN, which a half-close sends too: the two cannot be told apart
 * without writing, so a FIN is taken for departure, as llama-server and
 * nginx take it. Otherwise a client that gave up (a timeout, a closed
 * program) would hold its slot until max_tokens. */
static int peer_left(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    struct pollfd pfd = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLERR | POLLHUP | POLLNVAL));
}

int kvt_srv_wait_done(kvt_server *s, struct MHD_Connection *c, srv_req *const *wait, int n_wait, srv_req *const *cancel,
                      int n_cancel) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < n_wait; i++)
        while (!kvt_srv_all_done(wait[i])) {
            kvt_srv_cond_wait_ms(&wait[i]->cv, &s->mu, WAIT_SLICE_MS);
            if (kvt_srv_all_done(wait[i])) break;
            /* the poll on the socket runs without the lock, so the engine is never held up by it */
            pthread_mutex_unlock(&s->mu);
            int gone = peer_left(c);
            pthread_mutex_lock(&s->mu);
            if (gone) {
                for (int k = 0; k < n_cancel; k++)
                    if (cancel[k]) kvt_srv_cancel_locked(s, cancel[k]);
                pthread_mutex_unlock(&s->mu);
                return -1;
            }
        }
    pthread_mutex_unlock(&s->mu);
    return 0;
}
