// SPDX-License-Identifier: MIT
/* The per-address connection quota, the reserve for new addresses and the
 * client behind a trusted proxy (see http_conns.h). */
#include "http_conns.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common.h"

#define XFF_HEADER "X-Forwarded-For"
#define XFF_MAX_HEADERS 64 /* X-Forwarded-For lines looked at; a request with more is refused */

typedef struct {
    kvt_http_addr a;
    unsigned n; /* open connections from it plus proxied requests of it */
} entry;

struct kvt_http_conns {
    pthread_mutex_t mu;
    unsigned cap, per_ip, reserve;
    kvt_http_addr *trusted;
    size_t n_trusted;
    unsigned open; /* under mu: connections open */
    entry *e;      /* under mu: the addresses with a count, n_e of cap_e */
    size_t n_e, cap_e;
};

static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static void from_v4(const void *in4, kvt_http_addr *out) {
    memcpy(out->b, v4_mapped, sizeof v4_mapped);
    memcpy(out->b + 12, in4, 4);
}

int kvt_http_addr_of(const struct sockaddr *sa, kvt_http_addr *out) {
    if (sa && sa->sa_family == AF_INET) {
        from_v4(&((const struct sockaddr_in *)(const void *)sa)->sin_addr, out);
        return 0;
    }
    if (sa && sa->sa_family == AF_INET6) {
        memcpy(out->b, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
        return 0;
    }
    return -1;
}

/* Parses exactly len bytes of s as an IPv4 or IPv6 address. */
static int parse_exact(const char *s, size_t len, kvt_http_addr *out) {
    char buf[KVT_HTTP_ADDR_TEXT];
    if (!len || len >= sizeof buf) return -1;
    memcpy(buf, s, len);
    buf[len] = 0;
    unsigned char raw[16];
    if (inet_pton(AF_INET, buf, raw) == 1) {
        from_v4(raw, out);
        return 0;
    }
    if (inet_pton(AF_INET6, buf, raw) == 1) {
        memcpy(out->b, raw, 16);
        return 0;
    }
    return -1;
}

/* Whether s[0..len) is ":" and 1 to 5 digits. */
static int is_port(const char *s, size_t len) {
    if (len < 2 || len > 6 || s[0] != ':') return 0;
    for (size_t i = 1; i < len; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

int kvt_http_addr_parse(const char *text, size_t len, int xff, kvt_http_addr *out) {
    if (len >= 2 && text[0] == '[') {
        const char *close = memchr(text, ']', len);
        size_t rest = close ? len - (size_t)(close + 1 - text) : 0;
        if (!close || (rest && !(xff && is_port(close + 1, rest)))) return -1;
        return parse_exact(text + 1, (size_t)(close - text) - 1, out);
    }
    if (!parse_exact(text, len, out)) return 0;
    const char *colon = memchr(text, ':', len); /* IPv4 with a port: the only form with one colon */
    if (xff && colon && !memchr(colon + 1, ':', len - (size_t)(colon + 1 - text)) &&
        is_port(colon, len - (size_t)(colon - text)))
        return parse_exact(text, (size_t)(colon - text), out);
    return -1;
}

void kvt_http_addr_text(const kvt_http_addr *a, char out[KVT_HTTP_ADDR_TEXT]) {
    int v4 = !memcmp(a->b, v4_mapped, sizeof v4_mapped);
    if (!inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? a->b + 12 : a->b, out, KVT_HTTP_ADDR_TEXT)) strcpy(out, "?");
}

kvt_http_conns *kvt_http_conns_new(unsigned cap, unsigned per_ip, unsigned reserve, const kvt_http_addr *trusted,
                                   size_t n_trusted) {
    kvt_http_conns *t = kvt_xcalloc(1, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    t->cap = cap;
    t->per_ip = per_ip;
    t->reserve = reserve < cap ? reserve : 0;
    if (n_trusted) {
        t->trusted = kvt_xmalloc(n_trusted * sizeof *t->trusted);
        memcpy(t->trusted, trusted, n_trusted * sizeof *t->trusted);
        t->n_trusted = n_trusted;
    }
    return t;
}

void kvt_http_conns_free(kvt_http_conns *t) {
    if (!t) return;
    pthread_mutex_destroy(&t->mu);
    free(t->trusted);
    free(t->e);
    free(t);
}

int kvt_http_conns_trusted(const kvt_http_conns *t, const kvt_http_addr *a) {
    for (size_t i = 0; i < t->n_trusted; i++)
        if (!memcmp(t->trusted[i].b, a->b, sizeof a->b)) return 1;
    return 0;
}

/* a's entry, or NULL (t->mu held). */
static entry *find(kvt_http_conns *t, const kvt_http_addr *a) {
    for (size_t i = 0; i < t->n_e; i++)
        if (!memcmp(t->e[i].a.b, a->b, sizeof a->b)) return &t->e[i];
    return NULL;
}

/* a's count (t->mu held). */
static unsigned count_of(kvt_http_conns *t, const kvt_http_addr *a) {
    const entry *e = find(t, a);
    return e ? e->n : 0;
}

/* Adds d (+1 or -1) to a's count, making or dropping its entry (t->mu held). */
static void add(kvt_http_conns *t, const kvt_http_addr *a, int d) {
    entry *e = find(t, a);
    if (!e) {
        if (d < 0) return;
        if (t->n_e == t->cap_e) {
            t->cap_e = t->cap_e ? 2 * t->cap_e : 64;
            t->e = kvt_xrealloc(t->e, t->cap_e * sizeof *t->e);
        }
        e = &t->e[t->n_e++];
        e->a = *a;
        e->n = 0;
    }
    if (d > 0) e->n++;
    else if (e->n) e->n--;
    if (!e->n) *e = t->e[--t->n_e];
}

int kvt_http_conns_admit(kvt_http_conns *t, const struct sockaddr *sa) {
    kvt_http_addr a;
    if (kvt_http_addr_of(sa, &a)) return 1; /* not an IP peer (none on a TCP listener): MHD's cap alone */
    pthread_mutex_lock(&t->mu);
    unsigned n = count_of(t, &a);
    int ok = t->open < t->cap && (!n || t->open < t->cap - t->reserve);
    if (ok && t->per_ip && n >= t->per_ip && !kvt_http_conns_trusted(t, &a)) ok = 0;
    pthread_mutex_unlock(&t->mu);
    return ok;
}

void kvt_http_conns_opened(kvt_http_conns *t, const kvt_http_addr *a) {
    pthread_mutex_lock(&t->mu);
    t->open++;
    add(t, a, 1);
    pthread_mutex_unlock(&t->mu);
}

void kvt_http_conns_closed(kvt_http_conns *t, const kvt_http_addr *a) {
    pthread_mutex_lock(&t->mu);
    if (t->open) t->open--;
    add(t, a, -1);
    pthread_mutex_unlock(&t->mu);
}

int kvt_http_conns_claim(kvt_http_conns *t, const kvt_http_addr *client) {
    pthread_mutex_lock(&t->mu);
    int ok = !t->per_ip || count_of(t, client) < t->per_ip;
    if (ok) add(t, client, 1);
    pthread_mutex_unlock(&t->mu);
    return ok ? 0 : -1;
}

void kvt_http_conns_unclaim(kvt_http_conns *t, const kvt_http_addr *client) {
    pthread_mutex_lock(&t->mu);
    add(t, client, -1);
    pthread_mutex_unlock(&t->mu);
}

unsigned kvt_http_conns_open(kvt_http_conns *t) {
    pthread_mutex_lock(&t->mu);
    unsigned n = t->open;
    pthread_mutex_unlock(&t->mu);
    return n;
}

/* ---- X-Forwarded-For ------------------------------------------------------------ */

typedef struct {
    const char *v[XFF_MAX_HEADERS];
    size_t len[XFF_MAX_HEADERS];
    size_t n;
    int too_many;
} xff_lines;

static enum MHD_Result collect_xff(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                   const char *value, size_t value_size) {
    xff_lines *x = cls;
    (void)kind;
    if (key_size != strlen(XFF_HEADER) || strncasecmp(key, XFF_HEADER, key_size)) return MHD_YES;
    if (x->n == XFF_MAX_HEADERS) {
        x->too_many = 1;
        return MHD_NO;
    }
    x->v[x->n] = value ? value : "";
    x->len[x->n++] = value ? value_size : 0;
    return MHD_YES;
}

static int is_ows(char c) { return c == ' ' || c == '\t'; }

int kvt_http_conns_forwarded_client(const kvt_http_conns *t, struct MHD_Connection *c, kvt_http_addr *client,
                                    const char **bad) {
    xff_lines x = {.n = 0};
    MHD_get_connection_values_n(c, MHD_HEADER_KIND, collect_xff, &x);
    if (x.too_many) {
        *bad = "too many X-Forwarded-For headers";
        return -1;
    }
    /* the list read from its end: the entries nearest the server were added by the proxies it trusts */
    for (size_t h = x.n; h-- > 0;) {
        size_t end = x.len[h];
        while (end > 0) {
            size_t start = end;
            while (start > 0 && x.v[h][start - 1] != ',') start--;
            size_t a = start, b = end;
            while (a < b && is_ows(x.v[h][a])) a++;
            while (b > a && is_ows(x.v[h][b - 1])) b--;
            end = start ? start - 1 : 0;
            if (a == b) continue; /* an empty list element */
            if (kvt_http_addr_parse(x.v[h] + a, b - a, 1, client)) {
                *bad = "an X-Forwarded-For entry is not an IP address";
                return -1;
            }
            if (!kvt_http_conns_trusted(t, client)) return 1;
        }
    }
    return 0;
}
