// SPDX-License-Identifier: MIT
/* Who holds kvtier's connections: the per-address quota, the reserve kept for
 * new addresses, and the client address behind a trusted proxy.
 *
 *  - Every open connection counts against its peer address. An address holds
 *    at most per_ip connections (0: no quota), and once the server has
 *    cap - reserve connections open, only an address that holds none may
 *    connect: the last `reserve` slots are for addresses not yet connected, so
 *    a few addresses that crowd the server (slow clients, a burst from one
 *    network) never lock a new client out.
 *  - A trusted proxy's connections are not held to the per-address quota (all
 *    its clients share its address). Instead, each request it forwards counts,
 *    from its headers to its end, against the client named by the last entry
 *    of X-Forwarded-For that is not itself a trusted proxy; a request whose
 *    client is at its quota is refused. From any other peer X-Forwarded-For is
 *    ignored.
 *
 * Decisions and counts are made under one mutex; in MHD's thread-per-connection
 * mode the accept decision and the count it is made on run on the listening
 * thread one connection after another, so the limits hold exactly. */
#ifndef KVT_HTTP_CONNS_H
#define KVT_HTTP_CONNS_H

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define KVT_HTTP_ADDR_TEXT 48 /* an address as text, with its NUL (INET6_ADDRSTRLEN and a margin) */

/* An IPv4 or IPv6 address; IPv4 is kept as ::ffff:a.b.c.d, so a dual-stack
 * socket's mapped peers and plain IPv4 peers are the same address. */
typedef struct {
    uint8_t b[16];
} kvt_http_addr;

/* Parses text (IPv4, IPv6, IPv6 in brackets; with xff, a ":port" after IPv4 or
 * "]" is allowed too, as some proxies write it). 0, or -1 if it is not one. */
int kvt_http_addr_parse(const char *text, size_t len, int xff, kvt_http_addr *out);
/* The address of sa (AF_INET or AF_INET6). 0, or -1 for another family. */
int kvt_http_addr_of(const struct sockaddr *sa, kvt_http_addr *out);
/* The address as text (IPv4 dotted for IPv4 and mapped addresses). */
void kvt_http_addr_text(const kvt_http_addr *a, char out[KVT_HTTP_ADDR_TEXT]);

typedef struct kvt_http_conns kvt_http_conns;

/* A table for at most cap connections, per_ip of them per address (0: no
 * quota) and reserve of them kept for new addresses (reserve < cap), with n
 * trusted proxies (copied). */
kvt_http_conns *kvt_http_conns_new(unsigned cap, unsigned per_ip, unsigned reserve, const kvt_http_addr *trusted,
                                   size_t n_trusted);
void kvt_http_conns_free(kvt_http_conns *t);

/* Whether a connection from sa may open now (MHD's accept policy). */
int kvt_http_conns_admit(kvt_http_conns *t, const struct sockaddr *sa);
/* A connection from a has opened / closed (MHD's connection notifications). */
void kvt_http_conns_opened(kvt_http_conns *t, const kvt_http_addr *a);
void kvt_http_conns_closed(kvt_http_conns *t, const kvt_http_addr *a);
/* Whether a is a trusted proxy. */
int kvt_http_conns_trusted(const kvt_http_conns *t, const kvt_http_addr *a);
/* Counts a proxied request against client. 0, or -1 (nothing counted) when
 * client is at its quota. Each 0 is matched by one kvt_http_conns_unclaim. */
int kvt_http_conns_claim(kvt_http_conns *t, const kvt_http_addr *client);
void kvt_http_conns_unclaim(kvt_http_conns *t, const kvt_http_addr *client);
/* Open connections now (for tests and /metrics). */
unsigned kvt_http_conns_open(kvt_http_conns *t);

/* The client of a request that came from a trusted proxy: the last entry of
 * c's X-Forwarded-For headers (all of them, in order, as one list) that is not
 * a trusted proxy. 1 with *client set; 0 when there is no such entry (the
 * request is the proxy's own); -1 when an entry looked at is not an address
 * (*bad names it, static text). */
int kvt_http_conns_forwarded_client(const kvt_http_conns *t, struct MHD_Connection *c, kvt_http_addr *client,
                                    const char **bad);

#endif
