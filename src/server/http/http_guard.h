// SPDX-License-Identifier: MIT
/* Defences of kvtier's HTTP layer that libmicrohttpd (0.9.75) does not give:
 *  - a budget for the request bodies held in memory at once, so many large
 *    requests together answer 503 instead of exhausting memory;
 *  - a whole-request deadline per connection: MHD's timeout is per idle
 *    period, so a client that sends one byte every few seconds (slowloris)
 *    holds its connection, and its thread, for ever. A watchdog thread shuts
 *    down connections that have not delivered a request's headers and body
 *    in time; MHD then sees the connection end and closes it;
 *  - a shorter header deadline on the same watchdog: a connection must send a
 *    request's complete headers soon after it opens or after its previous
 *    response, so slow or idle connections give their slot back long before
 *    the whole-request deadline (which stays for bodies);
 *  - checks of a request's framing headers and raw header lines, which MHD
 *    accepts in forms that let a request be smuggled past a proxy that reads
 *    them differently.
 *
 * Thread-safety: every function may be called from any thread (one mutex). */
#ifndef KVT_HTTP_GUARD_H
#define KVT_HTTP_GUARD_H

#include <microhttpd.h>
#include <stdint.h>

/* MHD's strictness option, for MHD_start_daemon's option list. MHD >= 0.9.77
 * (client discipline level 1) answers 400 to bare LF line ends, folded header
 * lines, NUL and whitespace before a header's colon. 0.9.75 only has
 * STRICT_FOR_CLIENT, whose -1 (counter to its name) is the value that rejects
 * whitespace before the colon; it turns bare LF into a line end, glues a folded
 * line to the header's name and cuts a value at a NUL, so kvtier finds those in
 * the raw header block instead (kvt_http_raw_header_error). */
#if MHD_VERSION >= 0x00097701
#define KVT_HTTP_STRICTNESS MHD_OPTION_CLIENT_DISCIPLINE_LVL, (int)1
#else
#define KVT_HTTP_STRICTNESS MHD_OPTION_STRICT_FOR_CLIENT, (int)-1
#endif

/* Why c's request must be refused with 400 and its connection closed (static
 * text), or NULL. Refused: Content-Length together with Transfer-Encoding
 * (where MHD and a proxy may each pick another), Content-Length headers that
 * differ or a value that is not digits, more than one Transfer-Encoding or one
 * other than "chunked" (MHD would wait for a body it cannot delimit), a header
 * name with characters outside RFC 9110's token. Call on a request's first
 * access-handler call, before its body is read. */
const char *kvt_http_framing_error(struct MHD_Connection *c);

/* The connection memory pool kvtier gives MHD (MHD_OPTION_CONNECTION_MEMORY_LIMIT,
 * MHD's default): a request's header block fits in it. */
#define KVT_HTTP_POOL_BYTES (32u * 1024u)

/* Why c's request must be refused with 400 and its connection closed, from
 * the raw bytes of its header block, or NULL: a folded header line (obs-fold,
 * a line that starts with a space or tab), a NUL in a header line, a bare LF
 * line end. method and version are the access handler's arguments. MHD >=
 * 0.9.77 refuses these itself (KVT_HTTP_STRICTNESS); for 0.9.75 and 0.9.76
 * the check reads the block MHD parsed in place (see http_guard.c for why
 * that is exact); with another MHD it returns NULL, and
 * kvt_http_raw_check_available says 0. Call on the request's first
 * access-handler call. */
const char *kvt_http_raw_header_error(struct MHD_Connection *c, const char *method, const char *version);
int kvt_http_raw_check_available(void);

typedef struct kvt_http_guard kvt_http_guard;

/* A guard whose body budget is max_inflight_bytes (0: no budget) and whose
 * connections get request_timeout_s seconds for each request and
 * header_timeout_s for its headers (0: no such deadline; with neither, no
 * watchdog thread). Returns NULL (kvt_errmsg() says why) if the thread cannot
 * start. Free with kvt_http_guard_free, after every connection closed. */
kvt_http_guard *kvt_http_guard_new(uint64_t max_inflight_bytes, double request_timeout_s, double header_timeout_s);
void kvt_http_guard_free(kvt_http_guard *g);

/* ---- whole-request deadlines ---- */

typedef struct kvt_http_conn kvt_http_conn;

/* Starts watching a connection: its first request's deadlines run from now.
 * fd stays the connection's until kvt_http_guard_conn_close (MHD closes a
 * socket only after its NOTIFY_CLOSED callback, so the watchdog never shuts
 * down a reused descriptor). Returns the handle for the calls below. */
kvt_http_conn *kvt_http_guard_conn_open(kvt_http_guard *g, int fd);
/* Stops watching and frees c (NULL is fine). */
void kvt_http_guard_conn_close(kvt_http_guard *g, kvt_http_conn *c);
/* c's request headers have arrived: no header deadline until its next request. */
void kvt_http_guard_headers_in(kvt_http_guard *g, kvt_http_conn *c);
/* c's request has arrived whole: no deadline while it is answered. */
void kvt_http_guard_request_in(kvt_http_guard *g, kvt_http_conn *c);
/* c's response has ended: the next request's deadlines run from now (an idle
 * keep-alive connection is closed by the header deadline, or the request
 * deadline, if MHD's idle timeout has not closed it first). */
void kvt_http_guard_request_done(kvt_http_guard *g, kvt_http_conn *c);
/* Connections the deadlines have shut down so far (for /metrics). */
uint64_t kvt_http_guard_expired(kvt_http_guard *g);

/* Takes n bytes of the body budget for a request about to hold them. Returns
 * 0, or -1 (nothing taken) when they would put the bytes held past the
 * budget. Every byte taken is given back with kvt_http_guard_release. */
int kvt_http_guard_reserve(kvt_http_guard *g, uint64_t n);
void kvt_http_guard_release(kvt_http_guard *g, uint64_t n);

/* Body bytes held now (for /metrics). */
uint64_t kvt_http_guard_held(kvt_http_guard *g);

#endif
