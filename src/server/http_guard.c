/* The HTTP layer's defences (see http_guard.h): the in-flight body budget, the
 * whole-request deadlines and their watchdog thread, the framing checks. */
#include "http_guard.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "common.h"

#define NS_PER_S 1000000000L

struct kvt_http_conn {
    int fd;
    double deadline;           /* kvt_now() by which the request must be in; 0: none (being answered) */
    kvt_http_conn *prev, *next;
};

struct kvt_http_guard {
    pthread_mutex_t mu;
    pthread_cond_t cv;         /* wakes the watchdog: a deadline when it had none, or stop */
    uint64_t budget;           /* 0: none */
    uint64_t held;             /* under mu */
    double timeout;            /* seconds; 0: no deadlines */
    kvt_http_conn *conns;      /* under mu: every open connection */
    uint64_t expired;          /* under mu */
    int sleeping;              /* under mu: the watchdog waits with no deadline to wake it */
    int stop;                  /* under mu */
    int has_thread;
    pthread_t watchdog;
};

/* Shuts down the connections past their deadline, then sleeps until the
 * nearest deadline (or, with none, until a connection opens). */
static void *watchdog_main(void *arg) {
    kvt_http_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        double now = kvt_now(), next = 0;
        for (kvt_http_conn *c = g->conns; c; c = c->next) {
            if (!c->deadline) continue;
            if (c->deadline <= now) {
                /* MHD's thread for it reads end-of-stream and closes the connection */
                shutdown(c->fd, SHUT_RDWR);
                c->deadline = 0;
                g->expired++;
                kvt_logk(KVT_LOG_INFO, "timeout_s", "serve: closed a connection that sent no whole request in %g s",
                         g->timeout);
            } else if (!next || c->deadline < next) {
                next = c->deadline;
            }
        }
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

kvt_http_guard *kvt_http_guard_new(uint64_t max_inflight_bytes, double request_timeout_s) {
    kvt_http_guard *g = kvt_xcalloc(1, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &a);
    pthread_condattr_destroy(&a);
    g->budget = max_inflight_bytes;
    g->timeout = request_timeout_s > 0 ? request_timeout_s : 0;
    if (g->timeout) {
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
    c->deadline = g->timeout ? kvt_now() + g->timeout : 0;
    c->next = g->conns;
    if (g->conns) g->conns->prev = c;
    g->conns = c;
    if (g->sleeping) pthread_cond_signal(&g->cv);
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

void kvt_http_guard_request_in(kvt_http_guard *g, kvt_http_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->deadline = 0;
    pthread_mutex_unlock(&g->mu);
}

void kvt_http_guard_request_done(kvt_http_guard *g, kvt_http_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->deadline = g->timeout ? kvt_now() + g->timeout : 0;
    /* a deadline the watchdog already waits for is earlier: only a watchdog with none needs waking */
    if (g->sleeping) pthread_cond_signal(&g->cv);
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
    (void)value_size;
    if (!key_size) f->error = "a header has an empty name";
    for (size_t i = 0; i < key_size && !f->error; i++)
        if (!is_tchar((unsigned char)key[i])) f->error = "a header name holds a character outside RFC 9110's token";
    if (f->error) return MHD_NO;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        if (!value || !*value || strspn(value, "0123456789") != strlen(value))
            f->error = "Content-Length is not a number";
        else if (f->content_length && strcmp(f->content_length, value))
            f->error = "two Content-Length headers differ";
        else
            f->content_length = value;
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
