// SPDX-License-Identifier: MIT
/* The remote tier's connections (remote_internal.h): URL parsing, connecting
 * with AUTH and SELECT, per-call deadlines over pipelined replies, reconnects
 * with exponential backoff, and rate-limited error logging. */
#include "remote_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include "common.h"
#include "remote_cluster_internal.h"

/* The longest reply line read (an error message, a bulk length). */
#define LINE_MAX_BYTES 512


static struct timeval tv_of(double s) {
    if (s < 0.001) s = 0.001; /* 0 would mean "no timeout" to the socket */
    struct timeval tv = {.tv_sec = (time_t)s, .tv_usec = (suseconds_t)((s - (double)(time_t)s) * 1e6)};
    return tv;
}

/* Logs with the number held back: a down Redis would otherwise log per request. */
void kvt_remote_note_error(kvt_remote *r, int timeout, const char *fmt, const char *who, const char *detail) {
    pthread_mutex_lock(&r->mu);
    r->st.errors++;
    r->st.timeouts += timeout != 0;
    double now = kvt_now();
    if (r->last_log && now - r->last_log < KVT_REMOTE_LOG_INTERVAL_S) {
        r->unlogged++;
        pthread_mutex_unlock(&r->mu);
        return;
    }
    uint64_t held = r->unlogged;
    r->unlogged = 0;
    r->last_log = now;
    pthread_mutex_unlock(&r->mu);
    char msg[512];
    snprintf(msg, sizeof msg, fmt, who, detail ? detail : "");
    kvt_logk(KVT_LOG_WARN, "url,error,errors_since_last_line",
             "remote tier %s: %s (T3 misses until it answers; %" PRIu64 " more errors since the last line)",
             r->url_text, msg, held);
}

void kvt_remote_conn_drop(kvt_remote_conn *k) {
    if (k->c) redisFree(k->c);
    k->c = NULL;
    k->up = 0;
}

/* Schedules the next reconnect after a failure: backoff doubles up to the max. */
static void conn_failed(kvt_remote_conn *k) {
    kvt_remote_conn_drop(k);
    k->next_try = kvt_now() + k->backoff_s;
    k->backoff_s = KVT_MIN(k->backoff_s * 2, KVT_REMOTE_BACKOFF_MAX_MS / 1e3);
}

/* Sends one command and expects a status or integer reply (AUTH, SELECT). */
static int setup_command(redisContext *c, char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!rep) {
        snprintf(err, cap, "%s", c->errstr);
        return -1;
    }
    int bad = rep->type == REDIS_REPLY_ERROR;
    if (bad) snprintf(err, cap, "%.*s", (int)KVT_MIN(rep->len, 200u), rep->str);
    freeReplyObject(rep);
    return bad ? -1 : 0;
}

int kvt_remote_auth_refused(const char *err) {
    return !strncmp(err, "WRONGPASS", 9) || !strncmp(err, "NOAUTH", 6) ||
        (!strncmp(err, "ERR", 3) && (strstr(err, "AUTH") || strstr(err, "password")));
}

redisContext *kvt_remote_connect_url(const kvt_remote_url *u, double timeout_s, char *err, size_t cap) {
    struct timeval tv = tv_of(timeout_s);
    redisContext *c = u->is_unix ? redisConnectUnixWithTimeout(u->path, tv)
                                 : redisConnectWithTimeout(u->host, u->port, tv);
    if (!c || c->err) {
        snprintf(err, cap, "%s", c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        return NULL;
    }
    int rc = redisSetTimeout(c, tv) == REDIS_OK ? 0 : -1;
    if (rc) snprintf(err, cap, "cannot set a socket timeout");
    if (!rc && u->pass[0])
        rc = u->user[0] ? setup_command(c, err, cap, "AUTH %s %s", u->user, u->pass)
                        : setup_command(c, err, cap, "AUTH %s", u->pass);
    if (!rc && u->db) rc = setup_command(c, err, cap, "SELECT %d", u->db);
    if (!rc && u->readonly) rc = setup_command(c, err, cap, "READONLY");
    if (rc) {
        redisFree(c);
        return NULL;
    }
    return c;
}

redisContext *kvt_remote_conn_get(kvt_remote *r, kvt_remote_conn *k, double timeout_s) {
    if (k->c && !k->c->err) {
        redisSetTimeout(k->c, tv_of(timeout_s));
        return k->c;
    }
    if (k->c) conn_failed(k);
    if (kvt_now() < k->next_try) return NULL;
    char err[256];
    k->c = kvt_remote_connect_url(k->to ? k->to : &r->url, timeout_s, err, sizeof err);
    if (!k->c) {
        kvt_remote_note_error(r, 0, kvt_remote_auth_refused(err) ? KVT_REMOTE_LOGIN_FMT : "%s: cannot connect: %s",
                              k->who, err);
        conn_failed(k);
        return NULL;
    }
    /* the backoff is reset by the first reply (conn_answered), not here: a
     * hung server still accepts connections, and must not be retried at the
     * shortest interval */
    k->up = 1;
    pthread_mutex_lock(&r->mu);
    r->st.connects++;
    pthread_mutex_unlock(&r->mu);
    return k->c;
}

/* The server answered: the next failure starts the backoff afresh. */
static void conn_answered(kvt_remote_conn *k) { k->backoff_s = KVT_REMOTE_BACKOFF_MIN_MS / 1e3; }

/* Reads the next pipelined reply before deadline, lowering the socket timeout
 * as the deadline nears so the whole call stays within it. NULL on a timeout
 * or connection error (*timed_out says which). */
static redisReply *reply_before(redisContext *c, double deadline, double full_s, int *timed_out) {
    double left = deadline - kvt_now();
    *timed_out = 0;
    if (left <= 0) {
        *timed_out = 1;
        return NULL;
    }
    if (left < full_s) redisSetTimeout(c, tv_of(left));
    void *rep = NULL;
    if (redisGetReply(c, &rep) != REDIS_OK || !rep) {
        *timed_out = c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
        return NULL;
    }
    return rep;
}


redisReply *kvt_remote_next_reply(kvt_remote *r, kvt_remote_conn *k, double deadline, double full_s) {
    int timed_out;
    redisReply *rep = reply_before(k->c, deadline, full_s, &timed_out);
    if (!rep) {
        kvt_remote_note_error(r, timed_out, "%s: %s", k->who, timed_out ? "timed out" : k->c->errstr);
        conn_failed(k);
        return NULL;
    }
    conn_answered(k);
    return rep;
}

/* A failed call on k: counted, logged, connection dropped. */
static void call_failed(kvt_remote *r, kvt_remote_conn *k, int timed_out, const char *detail) {
    kvt_remote_note_error(r, timed_out, "%s: %s", k->who, timed_out ? "timed out" : detail);
    conn_failed(k);
}

int kvt_remote_send(kvt_remote *r, kvt_remote_conn *k) {
    int done = 0;
    while (!done)
        if (redisBufferWrite(k->c, &done) != REDIS_OK) {
            call_failed(r, k, k->c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK), k->c->errstr);
            return -1;
        }
    /* kvt_remote_bulk_head reads the socket itself: the library must hold no reply bytes */
    if (k->c->reader->pos != k->c->reader->len) {
        call_failed(r, k, 0, "replies out of step");
        return -1;
    }
    return 0;
}

/* ---- bulk replies straight from the socket --------------------------------------- */

/* Reads 1..cap bytes into dst before deadline: > 0 bytes, 0 timed out, -1
 * connection error or closed (errno set). The deadline is checked before
 * every read, so a server that trickles bytes cannot stretch the call. */
static ssize_t read_some(int fd, void *dst, size_t cap, double deadline) {
    for (;;) {
        if (kvt_now() >= deadline) return 0;
        ssize_t n = recv(fd, dst, cap, MSG_DONTWAIT);
        if (n > 0) return n;
        if (n == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        double left = deadline - kvt_now();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)ceil(left * 1e3)) < 0 && errno != EINTR) return -1;
    }
}

/* Exactly n bytes into dst (NULL: dropped), from the read-ahead first, then
 * straight from the socket. 0, or the read_some result that stopped it. */
static ssize_t read_exact(int fd, kvt_remote_inbuf *in, uint8_t *dst, size_t n, double deadline) {
    size_t have = KVT_MIN(n, in->len - in->pos);
    if (dst) memcpy(dst, in->buf + in->pos, have);
    in->pos += have;
    for (size_t got = have; got < n;) {
        ssize_t k = dst ? read_some(fd, dst + got, n - got, deadline)
                        : read_some(fd, in->buf, KVT_MIN(n - got, in->cap), deadline);
        if (k <= 0) return k;
        got += (size_t)k;
    }
    return 1;
}

/* The next line (without its CRLF, NUL-terminated in line). Same results as read_exact. */
static ssize_t read_line(int fd, kvt_remote_inbuf *in, char *line, double deadline) {
    for (;;) {
        uint8_t *s = in->buf + in->pos, *e = in->len > in->pos ? memchr(s, '\n', in->len - in->pos) : NULL;
        if (e) {
            size_t n = (size_t)(e - s);
            if (n == 0 || s[n - 1] != '\r' || n > LINE_MAX_BYTES) break;
            memcpy(line, s, n - 1);
            line[n - 1] = 0;
            in->pos += n + 1;
            return 1;
        }
        if (in->len - in->pos > LINE_MAX_BYTES) break;
        memmove(in->buf, s, in->len - in->pos); /* at most a line's bytes */
        in->len -= in->pos;
        in->pos = 0;
        ssize_t k = read_some(fd, in->buf + in->len, in->cap - in->len, deadline);
        if (k <= 0) return k;
        in->len += (size_t)k;
    }
    errno = EPROTO;
    return -1;
}

/* A reply cut short (rc 0: timed out, else errno says why): counted, logged,
 * the connection dropped with its read-ahead. KVT_BULK_FAILED. */
static int bulk_failed(kvt_remote *r, kvt_remote_conn *k, kvt_remote_inbuf *in, ssize_t rc) {
    call_failed(r, k, rc == 0, strerror(errno));
    in->pos = in->len = 0; /* the read-ahead belonged to the dropped connection */
    return KVT_BULK_FAILED;
}

int kvt_remote_bulk_head(kvt_remote *r, kvt_remote_conn *k, kvt_remote_inbuf *in, double deadline, size_t *len) {
    char line[LINE_MAX_BYTES + 1];
    *len = 0;
    ssize_t rc = read_line(k->c->fd, in, line, deadline);
    if (rc > 0 && (!strncmp(line, "-MOVED ", 7) || !strncmp(line, "-ASK ", 5))) {
        conn_answered(k);
        snprintf(in->redirect, sizeof in->redirect, "%.120s", line + 1);
        return KVT_BULK_REDIRECT;
    }
    if (rc > 0 && line[0] == '-') {
        conn_answered(k);
        kvt_remote_note_error(r, 0, "%s: refused: %s", k->who, line + 1);
        return KVT_BULK_ERROR;
    }
    char *end = NULL;
    long long n = rc > 0 && line[0] == '$' ? strtoll(line + 1, &end, 10) : -2;
    if (rc > 0 && end && !*end && n == -1) {
        conn_answered(k);
        return KVT_BULK_NIL;
    }
    if (rc > 0 && (!end || *end || n < 0)) {
        errno = EPROTO;
        rc = -1;
    }
    if (rc <= 0) return bulk_failed(r, k, in, rc);
    conn_answered(k);
    *len = (size_t)n;
    return KVT_BULK_VALUE;
}

size_t kvt_remote_bulk_some(kvt_remote *r, kvt_remote_conn *k, kvt_remote_inbuf *in, double deadline, uint8_t *dst,
                            size_t n) {
    if (in->pos < in->len) {
        size_t have = KVT_MIN(n, in->len - in->pos);
        memcpy(dst, in->buf + in->pos, have);
        in->pos += have;
        return have;
    }
    ssize_t got = read_some(k->c->fd, dst, n, deadline);
    if (got > 0) return (size_t)got;
    bulk_failed(r, k, in, got);
    return 0;
}

int kvt_remote_bulk_end(kvt_remote *r, kvt_remote_conn *k, kvt_remote_inbuf *in, double deadline, size_t skip) {
    char crlf[2];
    ssize_t rc = read_exact(k->c->fd, in, NULL, skip, deadline);
    if (rc > 0) rc = read_exact(k->c->fd, in, (uint8_t *)crlf, 2, deadline);
    if (rc > 0 && memcmp(crlf, "\r\n", 2)) {
        errno = EPROTO;
        rc = -1;
    }
    return rc > 0 ? KVT_BULK_VALUE : bulk_failed(r, k, in, rc);
}
