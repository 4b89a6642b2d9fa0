// SPDX-License-Identifier: MIT
/* The router's parts (route.h): the upstream HTTP client (route_upstream.c),
 * the node table with its key index and sessions (route_index.c), the polls
 * (route_poll.c) and the front (route_front.c). */
#ifndef KVT_ROUTE_INTERNAL_H
#define KVT_ROUTE_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hash128.h"
#include "hmap128.h"
#include "route.h"

/* ---- upstream: one HTTP/1.1 exchange with a node over a plain socket ------------- */

typedef struct {
    int fd;
    int timeout_ms; /* for each wait on the socket */
    int status;
    char ctype[128];
    char retry_after[16];
    int chunked;
    long long left; /* body bytes left: Content-Length, or of the current chunk; -1 unknown */
    int state;      /* the chunked decoder's state (route_upstream.c) */
    int done;
    char buf[16384];
    size_t off, len;
} kvt_up;

/* Connects to host:port and sends method path with the headers (each "Name: value\r\n")
 * and body. 0, or -1 when the node cannot be reached or the send fails. */
int kvt_up_request(kvt_up *u, const char *host, int port, int timeout_ms, const char *method, const char *path,
                   const char *headers, const char *body, size_t len);
/* Reads the status line and headers. 0, or -1 (the node closed or timed out first). */
int kvt_up_read_head(kvt_up *u);
/* The next body bytes (chunked encoding undone): > 0 bytes, 0 at the end, -1 on an error. */
ssize_t kvt_up_read(kvt_up *u, char *out, size_t max);
void kvt_up_close(kvt_up *u);
/* One whole exchange: *status and the body (NUL-terminated, owned, at most max bytes kept).
 * 0, or -1 when no answer came. */
int kvt_up_fetch(const char *host, int port, int timeout_ms, const char *method, const char *path, const char *headers,
                 const char *body, size_t len, int *status, char **out, size_t max);
/* Splits http://host:port[/] into host (cap bytes) and port. 0, or -1 naming nothing. */
int kvt_up_parse_url(const char *url, char *host, size_t cap, int *port);

/* ---- the node table ----------------------------------------------------------------- */

typedef struct {
    char url[256], host[200];
    int port;
    int up;       /* answered its last /health */
    int inflight; /* requests the router has open on it */
    uint64_t requests, spills, failovers, prompt_tokens, cached_tokens;
    kvt_hmap128 keys; /* block keys the node holds (its feed, and what was routed to it) */
    char epoch[24];   /* its feed's epoch; a new one means a restart */
    uint64_t next;    /* the next event number to read */
    int feed_warned;  /* the feed's refusal was logged */
} kvt_route_node;

typedef enum { ROUTE_SESSION, ROUTE_PREFIX, ROUTE_LOAD, ROUTE_ROUND_ROBIN, ROUTE_REASONS } kvt_route_reason;

#define KVT_ROUTE_SESSIONS 65536 /* sticky sessions kept (a hash table; a clash forgets one) */

typedef struct {
    uint64_t id; /* hash of the session name; 0 = free */
    int node;
} kvt_route_session;

typedef struct kvt_router {
    kvt_route_params p;
    pthread_mutex_t mu; /* everything below */
    kvt_route_node nodes[KVT_ROUTE_MAX_NODES];
    int n;
    kvt_route_session *sessions;
    uint64_t rr; /* round-robin cursor */
    uint64_t routed[ROUTE_REASONS];
    uint64_t lost;    /* requests no node answered */
    int block_tokens; /* tokens per block key, from the nodes' lookup answers */
    volatile int stopping;
    pthread_t pollers[KVT_ROUTE_MAX_NODES];
    struct MHD_Daemon *mhd;
} kvt_router;

/* A name's 64-bit hash (never 0), for sessions. */
uint64_t kvt_route_name_hash(const char *s, size_t n);

/* Picks a node for a request under r->mu: the session's (if sid), else the best
 * prefix match of keys[0..nk), within the load bound; nodes in the `tried` mask are
 * skipped. Counts the request (inflight, requests, spills) and remembers the session
 * and the keys on the node picked. -1 when no node is up. */
int kvt_route_pick(kvt_router *r, uint64_t sid, const kvt_hash128 *keys, size_t nk, uint64_t tried,
                   kvt_route_reason *why);
/* Remembers that session sid is on node i. Under r->mu. */
void kvt_route_stick(kvt_router *r, uint64_t sid, int i);
/* Marks node i down (or up) and forgets its keys when it goes down. Under r->mu. */
void kvt_route_set_up(kvt_router *r, int i, int up);
/* The router's /metrics text (owned). Takes r->mu. */
char *kvt_route_metrics(kvt_router *r);
/* Starts one poller thread per node. 0, or -1. */
int kvt_route_start_polls(kvt_router *r);
void kvt_route_stop_polls(kvt_router *r);
/* Starts the HTTP front on p.host:p.port and prints its "listening on" line. 0, or -1. */
int kvt_route_start_front(kvt_router *r);

#endif
