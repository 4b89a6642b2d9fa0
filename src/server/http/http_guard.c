// SPDX-License-Identifier: MIT
/* The HTTP layer's defences (see http_guard.h): the in-flight body budget, the
 * whole-request deadlines and their watchdog thread, the framing checks. */
#include "http_guard.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "common.h"

#define NS_PER_S 1000000000L

struct kvt_http_conn {
    int fd;
    double deadline;      /* kvt_now() by which the request must be in; 0: none (being answered) */
    double head_deadline; /* kvt_now() by which its headers must be in; 0: none (they are) */
    kvt_http_conn *prev, *next;
};

struct kvt_http_guard {
    pthread_mutex_t mu;
    pthread_cond_t cv;    /* wakes the watchdog: a deadline when it had none, or stop */
    uint64_t budget;      /* 0: none */
    uint64_t held;        /* under mu */
    double timeout;       /* seconds; 0: no whole-request deadlines */
    double head_timeout;  /* seconds; 0: no header deadlines */
    kvt_http_conn *conns; /* under mu: every open connection */
    uint64_t expired;     /* under mu */
    int sleeping;         /* under mu: the watchdog waits with no deadline to wake it */
    double wake_at;       /* under mu: the deadline it waits for otherwise */
    int stop;             /* under mu */
    int has_thread;
    pthread_t watchdog;
};

/* The earlier of c's deadlines, or 0 with none. */
static double due(const kvt_http_conn *c) {
    if (!c->head_deadline) return c->deadline;
    return c->deadline && c->deadline < c->head_deadline ? c->deadline : c->head_deadline;
}

/* Shuts down the connections past a deadline, then sleeps until the nearest
 * one (or, with none, until a connection opens). */
static void *watchdog_main(void *arg) {
    kvt_http_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        double now = kvt_now(), next = 0;
        for (kvt_http_conn *c = g->conns; c; c = c->next) {
            double d = due(c);
            if (!d) continue;
            if (d <= now) {
                /* MHD's thread for it reads end-of-stream and closes the connection */
                shutdown(c->fd, SHUT_RDWR);
                int headers = d == c->head_deadline;
                c->deadline = c->head_deadline = 0;
                g->expired++;
                if (headers)
                    kvt_logk(KVT_LOG_INFO, "header_timeout_s",
                             "serve: closed a connection that sent no complete request headers in %g s",
                             g->head_timeout);
                else
                    kvt_logk(KVT_LOG_INFO, "timeout_s", "serve: closed a connection that sent no whole request in %g s",
                             g->timeout);
            } else if (!next || d < next) {
                next = d;
            }
        }
        g->wake_at = next;
        if (!next) {
            g->sleeping = 1;
            pthread_cond_wait(&g->cv, &g->mu);
            g->sleeping = 0;
            continue;
        }
        /* the condition variable waits on CLOCK_MONOTONIC, kvt_now()'s clock */
        double secs = next - now;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long ns = ts.tv_nsec + (long)((secs - (double)(long)secs) * NS_PER_S);
        ts.tv_sec += (time_t)secs + ns / NS_PER_S;
        ts.tv_nsec = ns % NS_PER_S;
        pthread_cond_timedwait(&g->cv, &g->mu, &ts); /* timed out or woken: look again either way */
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/* Wakes the watchdog if c's deadlines are earlier than what it sleeps until (g->mu held). */
static void nudge(kvt_http_guard *g, const kvt_http_conn *c) {
    double d = due(c);
    if (d && (g->sleeping || d < g->wake_at)) pthread_cond_signal(&g->cv);
}

kvt_http_guard *kvt_http_guard_new(uint64_t max_inflight_bytes, double request_timeout_s, double header_timeout_s) {
    kvt_http_guard *g = kvt_xcalloc(1, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &a);
    pthread_condattr_destroy(&a);
    g->budget = max_inflight_bytes;
    g->timeout = request_timeout_s > 0 ? request_timeout_s : 0;
    g->head_timeout = header_timeout_s > 0 ? header_timeout_s : 0;
    if (g->timeout || g->head_timeout) {
        int rc = pthread_create(&g->watchdog, NULL, watchdog_main, g);
        if (rc) {
            kvt_fail(-rc, "cannot start the request-deadline thread: %s", strerror(rc));
            kvt_http_guard_free(g);
            return NULL;
        }
        g->has_thread = 1;
    }
    return g;
}

void kvt_http_guard_free(kvt_http_guard *g) {
    if (!g) return;
    if (g->has_thread) {
        pthread_mutex_lock(&g->mu);
        g->stop = 1;
        pthread_cond_signal(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->watchdog, NULL);
    }
    while (g->conns) kvt_http_guard_conn_close(g, g->conns);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

kvt_http_conn *kvt_http_guard_conn_open(kvt_http_guard *g, int fd) {
    kvt_http_conn *c = kvt_xcalloc(1, sizeof *c);
    c->fd = fd;
    pthread_mutex_lock(&g->mu);
    double now = kvt_now();
    c->deadline = g->timeout ? now + g->timeout : 0;
    c->head_deadline = g->head_timeout ? now + g->head_timeout : 0;
    c->next = g->conns;
    if (g->conns) g->conns->prev = c;
    g->conns = c;
    nudge(g, c);
    pthread_mutex_unlock(&g->mu);
    return c;
}

void kvt_http_guard_conn_close(kvt_http_guard *g, kvt_http_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    if (c->prev) c->prev->next = c->next;
    else g->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&g->mu);
    free(c);
}

void kvt_http_guard_headers_in(kvt_http_guard *g, kvt_http_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->head_deadline = 0;
    pthread_mutex_unlock(&g->mu);
}

void kvt_http_guard_request_in(kvt_http_guard *g, kvt_http_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->deadline = c->head_deadline = 0;
    pthread_mutex_unlock(&g->mu);
}

void kvt_http_guard_request_done(kvt_http_guard *g, kvt_http_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    double now = kvt_now();
    c->deadline = g->timeout ? now + g->timeout : 0;
    c->head_deadline = g->head_timeout ? now + g->head_timeout : 0;
    /* a header deadline can be earlier than another connection's request deadline the watchdog waits for */
    nudge(g, c);
    pthread_mutex_unlock(&g->mu);
}

uint64_t kvt_http_guard_expired(kvt_http_guard *g) {
    pthread_mutex_lock(&g->mu);
    uint64_t n = g->expired;
    pthread_mutex_unlock(&g->mu);
    return n;
}

int kvt_http_guard_reserve(kvt_http_guard *g, uint64_t n) {
    pthread_mutex_lock(&g->mu);
    int ok = !g->budget || (n <= g->budget && g->held <= g->budget - n);
    if (ok) g->held += n;
    pthread_mutex_unlock(&g->mu);
    return ok ? 0 : -1;
}

void kvt_http_guard_release(kvt_http_guard *g, uint64_t n) {
    pthread_mutex_lock(&g->mu);
    g->held -= KVT_MIN(n, g->held);
    pthread_mutex_unlock(&g->mu);
}

uint64_t kvt_http_guard_held(kvt_http_guard *g) {
    pthread_mutex_lock(&g->mu);
    uint64_t h = g->held;
    pthread_mutex_unlock(&g->mu);
    return h;
}

/* ---- framing ---------------------------------------------------------------- */

typedef struct {
    const char *error;
    const char *content_length; /* the first one */
    int n_te;
} framing;

/* RFC 9110's tchar: what a header name is made of. */
static int is_tchar(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c);
}

static enum MHD_Result check_header(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                    const char *value, size_t value_size) {
    framing *f = cls;
    (void)kind;
    if (!key_size) f->error = "a header has an empty name";
    for (size_t i = 0; i < key_size && !f->error; i++)
        if (!is_tchar((unsigned char)key[i])) f->error = "a header name holds a character outside RFC 9110's token";
    /* a bare CR ends a line for some proxies: the rest of the value would be another header to them */
    for (size_t i = 0; value && i < value_size && !f->error; i++)
        if (((unsigned char)value[i] < ' ' && value[i] != '\t') || value[i] == 0x7f)
            f->error = "a header value holds a control character";
    if (f->error) return MHD_NO;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        if (!value || !*value || strspn(value, "0123456789") != strlen(value))
            f->error = "Content-Length is not a number";
        else if (f->content_length && strcmp(f->content_length, value)) f->error = "two Content-Length headers differ";
        else f->content_length = value;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        if (++f->n_te > 1) f->error = "more than one Transfer-Encoding header";
        else if (!value || strcasecmp(value, "chunked"))
            f->error = "Transfer-Encoding other than chunked (kvtier decodes no other transfer coding)";
    }
    return f->error ? MHD_NO : MHD_YES;
}

const char *kvt_http_framing_error(struct MHD_Connection *c) {
    framing f = {0};
    MHD_get_connection_values_n(c, MHD_HEADER_KIND, check_header, &f);
    if (!f.error && f.content_length && f.n_te)
        f.error = "both Content-Length and Transfer-Encoding (a proxy may read another body than kvtier)";
    return f.error;
}

/* ---- the raw header block ------------------------------------------------------------ */

#if MHD_VERSION < 0x00097701
/* Where the walk over the header block stands. */
typedef struct {
    uintptr_t pos, end; /* the next header line's expected start; the block's end */
    const char *error;
} walk;

/* Whether the n bytes at p are NULs, inside the block (p is checked before it is read). */
static int nuls_at(const walk *w, uintptr_t p, size_t n) {
    if (p < w->pos || p > w->end || w->end - p < n) return 0;
    for (size_t i = 0; i < n; i++)
        if (((const char *)p)[i]) return 0;
    return 1;
}

static enum MHD_Result walk_header(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                   const char *value, size_t value_size) {
    walk *w = cls;
    (void)kind;
    uintptr_t k = (uintptr_t)key, v = (uintptr_t)value;
    /* the line starts where the previous one ended, its colon became a NUL, then optional whitespace */
    int ok = k == w->pos && value && nuls_at(w, k + key_size, 1) && v >= k + key_size + 1 && v <= w->end;
    for (uintptr_t p = k + key_size + 1; ok && p < v; p++) ok = *(const char *)p == ' ' || *(const char *)p == '\t';
    /* ... then the value, whose CR LF became two NULs */
    if (ok && v + value_size >= v && nuls_at(w, v + value_size, 2)) w->pos = v + value_size + 2;
    else w->error = "a header line is folded (starts with whitespace), holds a NUL or ends in a bare line feed";
    return w->error ? MHD_NO : MHD_YES;
}

/* The MHD library this process runs is one whose parser the walk was written
 * for: 0.9.75 and 0.9.76 parse in place as described at kvt_http_raw_header_error. */
static int parser_known(void) {
    unsigned a = 0, b = 0, c = 0;
    const char *v = MHD_get_version();
    return v && sscanf(v, "%u.%u.%u", &a, &b, &c) == 3 && a == 0 && b == 9 && (c == 75 || c == 76);
}
#endif

int kvt_http_raw_check_available(void) {
#if MHD_VERSION < 0x00097701
    return parser_known();
#else
    return 1; /* client discipline level 1: MHD refuses these lines itself */
#endif
}

const char *kvt_http_raw_header_error(struct MHD_Connection *c, const char *method, const char *version) {
#if MHD_VERSION < 0x00097701
    /* MHD 0.9.75/0.9.76 parse a request's header block in place, in one buffer: the block starts at
     * the method; each line end (CR LF, or a bare LF) becomes NULs, a header's colon becomes a NUL,
     * and its key and value point into its own line. REQUEST_HEADER_SIZE is the block's raw length,
     * request line to blank line. So when the request line, every header line as key, NUL,
     * whitespace, value, NUL NUL, and the blank line's NUL NUL tile the block exactly, no byte of it
     * was outside those lines: there was no folded line (its bytes would belong to no header, and MHD
     * copies the folded header's name out of the block), no NUL inside a line (the bytes after it
     * would belong to no header) and no bare LF (one NUL where two are needed). Every byte read is
     * checked first to lie inside the block, and the block lies inside the connection's memory pool
     * (at most KVT_HTTP_POOL_BYTES). */
    if (!parser_known()) return NULL;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if (!ci || !method || !version) return NULL;
    size_t size = ci->header_size;
    uintptr_t start = (uintptr_t)method, ver = (uintptr_t)version;
    if (size > KVT_HTTP_POOL_BYTES || start + size < start || ver < start || ver >= start + size)
        return "the request's header block is malformed";
    walk w = {.pos = start, .end = start + size};
    size_t vlen = strnlen(version, size - (size_t)(ver - start));
    if (!nuls_at(&w, ver + vlen, 2)) return "the request line ends in a bare line feed or holds a NUL";
    w.pos = ver + vlen + 2;
    MHD_get_connection_values_n(c, MHD_HEADER_KIND, walk_header, &w);
    if (!w.error && !(nuls_at(&w, w.pos, 2) && w.pos + 2 == w.end))
        w.error = "a header line is folded (starts with whitespace), holds a NUL or ends in a bare line feed";
    return w.error;
#else
    (void)c;
    (void)method;
    (void)version;
    return NULL;
#endif
}
