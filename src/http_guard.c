/* The HTTP layer's defences (see http_guard.h): the in-flight body budget and
 * the framing checks. */
#include "http_guard.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common.h"

struct kvt_http_guard {
    pthread_mutex_t mu;
    uint64_t budget; /* 0: none */
    uint64_t held;   /* under mu */
};

kvt_http_guard *kvt_http_guard_new(uint64_t max_inflight_bytes) {
    kvt_http_guard *g = kvt_xcalloc(1, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
    g->budget = max_inflight_bytes;
    return g;
}

void kvt_http_guard_free(kvt_http_guard *g) {
    if (!g) return;
    pthread_mutex_destroy(&g->mu);
    free(g);
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
