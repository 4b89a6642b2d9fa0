// SPDX-License-Identifier: MIT
/* The router's side of a node exchange: HTTP/1.1 over a plain TCP socket,
 * one request per connection (Connection: close), every wait bounded by a
 * timeout; the body read as it arrives, chunked encoding undone (kvtier
 * serve streams SSE chunked). */
#include "route_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

enum { CH_SIZE, CH_DATA, CH_DATA_END, CH_TRAILER, CH_DONE };

int kvt_up_parse_url(const char *url, char *host, size_t cap, int *port) {
    if (strncmp(url, "http://", 7)) return -1;
    const char *h = url + 7, *colon;
    size_t n;
    if (*h == '[') { /* an IPv6 address, bracketed: the host is what is inside */
        const char *close = strchr(h, ']');
        if (!close || close[1] != ':') return -1;
        colon = close + 1;
        h++;
        n = (size_t)(close - h);
    } else {
        colon = strchr(h, ':');
        n = colon ? (size_t)(colon - h) : 0;
    }
    if (!colon || !n || n + 1 > cap || memchr(h, '/', n)) return -1;
    char *end = NULL;
    long p = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || (*end && strcmp(end, "/")) || p < 1 || p > 65535) return -1;
    memcpy(host, h, n);
    host[n] = 0;
    *port = (int)p;
    return 0;
}

/* Waits until fd is ready for events (POLLIN/POLLOUT): 1, 0 on timeout, -1 on an error. */
static int wait_fd(int fd, short events, int timeout_ms) {
    struct pollfd pf = {fd, events, 0};
    int rc;
    do rc = poll(&pf, 1, timeout_ms);
    while (rc < 0 && errno == EINTR);
    return rc;
}

/* A connected socket to host:port (connect bounded by timeout_ms), or -1. */
static int dial(const char *host, int port, int timeout_ms) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, ps, &hints, &res)) return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) continue;
        int rc = connect(fd, a->ai_addr, a->ai_addrlen);
        int err = 0;
        socklen_t el = sizeof err;
        if (rc && errno == EINPROGRESS && wait_fd(fd, POLLOUT, timeout_ms) == 1 &&
            !getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) && !err)
            rc = 0;
        if (rc) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

static int send_all(kvt_up *u, const char *p, size_t n) {
    while (n) {
        ssize_t k = send(u->fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (wait_fd(u->fd, POLLOUT, u->timeout_ms) != 1) return -1;
            continue;
        }
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int kvt_up_request(kvt_up *u, const char *host, int port, int timeout_ms, const char *method, const char *path,
                   const char *headers, const char *body, size_t len) {
    memset(u, 0, sizeof *u);
    u->timeout_ms = timeout_ms;
    u->left = -1;
    if ((u->fd = dial(host, port, KVT_MIN(timeout_ms, 5000))) < 0) return -1;
    char head[1024];
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\nContent-Length: %zu\r\n",
                     method, path, host, port, len);
    if (n < 0 || (size_t)n >= sizeof head || send_all(u, head, (size_t)n) ||
        send_all(u, headers ? headers : "", headers ? strlen(headers) : 0) || send_all(u, "\r\n", 2) ||
        send_all(u, body ? body : "", body ? len : 0)) {
        kvt_up_close(u);
        return -1;
    }
    return 0;
}

/* More bytes into u->buf (compacting it first): 1, 0 at EOF, -1 on an error or timeout. */
static int fill(kvt_up *u) {
    if (u->off) {
        memmove(u->buf, u->buf + u->off, u->len - u->off);
        u->len -= u->off;
        u->off = 0;
    }
    if (u->len == sizeof u->buf) return -1;
    for (;;) {
        ssize_t k = recv(u->fd, u->buf + u->len, sizeof u->buf - u->len, 0);
        if (k > 0) {
            u->len += (size_t)k;
            return 1;
        }
        if (k == 0) return 0;
        if (errno != EAGAIN && errno != EINTR) return -1;
        if (wait_fd(u->fd, POLLIN, u->timeout_ms) != 1) return -1;
    }
}

/* The next line (CRLF or LF stripped) into line: 0, or -1 (EOF, error, or longer than cap). */
static int read_line(kvt_up *u, char *line, size_t cap) {
    for (;;) {
        char *nl = memchr(u->buf + u->off, '\n', u->len - u->off);
        if (nl) {
            size_t n = (size_t)(nl - (u->buf + u->off));
            size_t m = n && nl[-1] == '\r' ? n - 1 : n;
            if (m + 1 > cap) return -1;
            memcpy(line, u->buf + u->off, m);
            line[m] = 0;
            u->off += n + 1;
            return 0;
        }
        if (fill(u) != 1) return -1;
    }
}

/* Copies a header's value (leading blanks skipped) into out[cap]. */
static void header_value(const char *v, char *out, size_t cap) {
    while (*v == ' ' || *v == '\t') v++;
    snprintf(out, cap, "%s", v);
}

int kvt_up_read_head(kvt_up *u) {
    char line[2048];
    if (read_line(u, line, sizeof line) || strncmp(line, "HTTP/1.", 7) || strlen(line) < 12) return -1;
    u->status = atoi(line + 9);
    for (;;) {
        if (read_line(u, line, sizeof line)) return -1;
        if (!line[0]) break;
        char *colon = strchr(line, ':');
        if (!colon) continue;
        *colon = 0;
        const char *v = colon + 1;
        if (!strcasecmp(line, "Content-Type")) header_value(v, u->ctype, sizeof u->ctype);
        else if (!strcasecmp(line, "Retry-After")) header_value(v, u->retry_after, sizeof u->retry_after);
        else if (!strcasecmp(line, "Content-Length")) u->left = strtoll(v, NULL, 10);
        else if (!strcasecmp(line, "Transfer-Encoding") && strcasestr(v, "chunked")) u->chunked = 1;
    }
    if (u->chunked) u->left = -1;
    u->state = u->chunked ? CH_SIZE : CH_DATA;
    u->done = !u->chunked && u->left == 0;
    return 0;
}

/* Up to max bytes of raw body (at most `left` when that is known): > 0, 0 at EOF, -1. */
static ssize_t raw(kvt_up *u, char *out, size_t max) {
    if (u->off == u->len) {
        int rc = fill(u);
        if (rc <= 0) return rc;
    }
    size_t n = KVT_MIN(max, u->len - u->off);
    if (u->left >= 0) n = KVT_MIN(n, (size_t)u->left);
    memcpy(out, u->buf + u->off, n);
    u->off += n;
    if (u->left >= 0) u->left -= (long long)n;
    return (ssize_t)n;
}

/* The chunked decoder: moves through size lines, data, CRLFs and the trailer. */
static ssize_t read_chunked(kvt_up *u, char *out, size_t max) {
    char line[256];
    for (;;) {
        switch (u->state) {
        case CH_SIZE:
            if (read_line(u, line, sizeof line)) return -1;
            u->left = strtoll(line, NULL, 16);
            if (u->left < 0) return -1;
            u->state = u->left ? CH_DATA : CH_TRAILER;
            break;
        case CH_DATA: {
            ssize_t k = raw(u, out, max);
            if (k <= 0) return -1; /* EOF inside a chunk: the node went away */
            if (u->left == 0) u->state = CH_DATA_END;
            return k;
        }
        case CH_DATA_END:
            if (read_line(u, line, sizeof line) || line[0]) return -1;
            u->state = CH_SIZE;
            break;
        case CH_TRAILER:
            if (read_line(u, line, sizeof line)) return -1;
            if (!line[0]) u->state = CH_DONE;
            break;
        default: u->done = 1; return 0;
        }
    }
}

ssize_t kvt_up_read(kvt_up *u, char *out, size_t max) {
    if (u->done || !max) return 0;
    if (u->chunked) return read_chunked(u, out, max);
    ssize_t k = raw(u, out, max);
    if (k == 0 && u->left > 0) return -1; /* shorter than its Content-Length */
    if (k == 0 || u->left == 0) u->done = 1;
    return k;
}

void kvt_up_close(kvt_up *u) {
    if (u->fd >= 0) close(u->fd);
    u->fd = -1;
}

int kvt_up_fetch(const char *host, int port, int timeout_ms, const char *method, const char *path, const char *headers,
                 const char *body, size_t len, int *status, char **out, size_t max) {
    kvt_up u;
    *out = NULL;
    if (kvt_up_request(&u, host, port, timeout_ms, method, path, headers, body, len) || kvt_up_read_head(&u)) {
        kvt_up_close(&u);
        return -1;
    }
    size_t cap = 4096, n = 0;
    char *b = kvt_xmalloc(cap);
    ssize_t k;
    while ((k = kvt_up_read(&u, b + n, cap - n - 1)) > 0) {
        n += (size_t)k;
        if (n + 1 == cap) {
            if (cap >= max) break;
            cap *= 2;
            b = kvt_xrealloc(b, cap);
        }
    }
    kvt_up_close(&u);
    b[n] = 0;
    *status = u.status;
    *out = b;
    return k < 0 ? -1 : 0;
}
