// SPDX-License-Identifier: MIT
/* What every handler answers with, below the handlers and the router (private
 * to src/server/): the per-connection context (MHD's socket context, the
 * request being served on it), the CORS headers and preflight of
 * --cors-origin, kvt_srv_send_*, which note a response's status for the
 * access log, echo the request id, queue it and count it in the metrics, and
 * kvt_srv_wait_done, a handler's wait for its queued requests.
 * The router (http_router.c) and the handlers call down into it; it calls
 * nothing of theirs.
 *
 * Threading: libmicrohttpd's threads, one connection's calls at a time. */
#ifndef KVT_HTTP_SEND_H
#define KVT_HTTP_SEND_H

#include "server_impl.h"

#define CORS_METHODS "GET, POST, DELETE, OPTIONS" /* DELETE: /v1/responses/{id} */
#define CORS_HEADERS "Authorization, Content-Type, X-Session-Id, X-Request-Id"
#define CORS_MAX_AGE_S "600" /* how long a browser may reuse a preflight's answer */

/* Per-connection state (MHD's socket context): the deadlines' handle, the
 * peer's address as counted in s->conns, and the request being served (one at
 * a time on a connection). kvt_srv_on_connection makes and frees it. */
typedef struct {
    kvt_http_conn *watch;
    conn_state *cur;
    kvt_http_addr peer;
    int has_peer, proxy;  /* proxy: the peer is a --trusted-proxy */
    kvt_http_addr client; /* ... and the current request's client counts against its quota (claimed) */
    int claimed;
} conn_ctx;

/* c's context, or NULL (a connection MHD told no start of). */
conn_ctx *kvt_srv_conn_ctx(struct MHD_Connection *c);
/* Notes the status a response carries for the access log, echoes the request
 * id, and adds the CORS headers an allowed origin gets. */
void kvt_srv_note_response(kvt_server *s, struct MHD_Connection *c, struct MHD_Response *resp, int status);
/* Sends resp with status (noted, queued, counted in the metrics under label) and destroys it. */
enum MHD_Result kvt_srv_send_response(kvt_server *s, struct MHD_Connection *c, const char *label, int status,
                                      struct MHD_Response *resp);
/* Sends body (taken over) as ctype, with one more header when h_name is set. */
enum MHD_Result kvt_srv_send_text(kvt_server *s, struct MHD_Connection *c, const char *label, int status,
                                  const char *ctype, char *body, const char *h_name, const char *h_value);
/* Sends an OpenAI-style error body. */
enum MHD_Result kvt_srv_send_error(kvt_server *s, struct MHD_Connection *c, const char *label, const kvt_api_error *e,
                                   const char *h_name, const char *h_value);
enum MHD_Result kvt_srv_send_errorf(kvt_server *s, struct MHD_Connection *c, const char *label, int status,
                                    const char *type, const char *code, const char *msg);
/* A CORS preflight (OPTIONS with --cors-origin): 204 with what the browser may
 * send. An origin not allowed gets no Allow-Origin, so the browser refuses. */
enum MHD_Result kvt_srv_send_preflight(kvt_server *s, struct MHD_Connection *c, const char *label);
/* Whether c's client is gone (a reset or a socket error; a stream's check: a
 * half-closed client still reads its events). */
int kvt_srv_peer_gone(struct MHD_Connection *c);
/* A stream that waits for its next event waits on the engine (a long
 * prefill, a queue), not on an idle client, yet the connection's --timeout
 * would count it as idle and close the stream once the event is sent. So a
 * stream's wait turns c's idle timeout off (*held set; s->mu not held) and
 * reports kvt_srv_peer_gone; kvt_srv_stream_resume sets it again before
 * the event goes out, which restarts its timer. */
int kvt_srv_stream_waiting(struct MHD_Connection *c, int *held);
void kvt_srv_stream_resume(const kvt_server *s, struct MHD_Connection *c, int *held);
/* Waits (s->mu not held) until every request of wait[0..n_wait) and its other
 * choices are done, in turn, checking every WAIT_SLICE_MS that c's client is
 * still there: a reset or its FIN (a closed or half-closed socket) means it
 * left. 0 when all are done; -1 when the client went away first, with
 * every non-NULL request of cancel[0..n_cancel) cancelled. The caller keeps
 * its references either way and counts the departure itself. */
int kvt_srv_wait_done(kvt_server *s, struct MHD_Connection *c, srv_req *const *wait, int n_wait, srv_req *const *cancel,
                      int n_cancel);

#endif
