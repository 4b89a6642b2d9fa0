// SPDX-License-Identifier: MIT
/* The stored responses (api_responses_store.h): a list in order of use, most
 * recent first, searched from the front; the tenant kept as a 128-bit hash
 * of its key, never the key. Expired entries are dropped by the walk of
 * every call that searches or counts, so none is ever found. */
#include "api_responses_store.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common.h"

typedef struct entry {
    XXH128_hash_t tenant;
    char *id, *response, *items;
    void *state; /* or NULL */
    size_t state_len, bytes;
    double expires; /* kvt_now() past which it is gone; 0: never */
    struct entry *prev, *next;
} entry;

struct kvt_resp_store {
    pthread_mutex_t mu;
    entry *head, *tail; /* most recently used first */
    size_t n, bytes, max_entries, max_bytes;
    double ttl_s; /* 0: no expiry */
};

static XXH128_hash_t tenant_hash(const char *tenant) {
    /* "no key" and every key differ: the key is hashed with its NUL, no key as one byte 1 */
    static const char none = 1;
    return tenant ? XXH3_128bits(tenant, strlen(tenant) + 1) : XXH3_128bits(&none, 1);
}

kvt_resp_store *kvt_resp_store_new(size_t max_entries, size_t max_bytes, double ttl_s) {
    kvt_resp_store *st = kvt_xcalloc(1, sizeof *st);
    pthread_mutex_init(&st->mu, NULL);
    st->max_entries = max_entries;
    st->max_bytes = max_bytes;
    st->ttl_s = ttl_s > 0 ? ttl_s : 0;
    return st;
}

static void entry_free(entry *e) {
    free(e->id);
    free(e->response);
    free(e->items);
    free(e->state);
    free(e);
}

static void unlink_entry(kvt_resp_store *st, entry *e) {
    if (e->prev) e->prev->next = e->next;
    else st->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else st->tail = e->prev;
    e->prev = e->next = NULL;
    st->n--;
    st->bytes -= e->bytes;
}

static void push_front(kvt_resp_store *st, entry *e) {
    e->prev = NULL;
    e->next = st->head;
    if (st->head) st->head->prev = e;
    st->head = e;
    if (!st->tail) st->tail = e;
    st->n++;
    st->bytes += e->bytes;
}

void kvt_resp_store_free(kvt_resp_store *st) {
    if (!st) return;
    for (entry *e = st->head, *next; e; e = next) {
        next = e->next;
        entry_free(e);
    }
    pthread_mutex_destroy(&st->mu);
    free(st);
}

/* Drops every expired entry (st->mu held). */
static void expire(kvt_resp_store *st) {
    if (!st->ttl_s) return;
    double now = kvt_now();
    for (entry *e = st->head, *next; e; e = next) {
        next = e->next;
        if (e->expires <= now) {
            unlink_entry(st, e);
            entry_free(e);
        }
    }
}

/* The entry of id under tenant (st->mu held; expired ones dropped first), or NULL. */
static entry *find(kvt_resp_store *st, const char *tenant, const char *id) {
    expire(st);
    XXH128_hash_t t = tenant_hash(tenant);
    for (entry *e = st->head; e; e = e->next)
        if (XXH128_isEqual(e->tenant, t) && !strcmp(e->id, id)) return e;
    return NULL;
}

int kvt_resp_store_put(kvt_resp_store *st, const char *tenant, const char *id, const char *response_json,
                       const char *items_json, const void *state, size_t state_len) {
    if (!state) state_len = 0;
    size_t bytes = strlen(id) + strlen(response_json) + strlen(items_json) + state_len + sizeof(entry);
    if (!st->max_entries || bytes > st->max_bytes) return 0;
    entry *e = kvt_xcalloc(1, sizeof *e);
    e->tenant = tenant_hash(tenant);
    e->id = kvt_xstrdup(id);
    e->response = kvt_xstrdup(response_json);
    e->items = kvt_xstrdup(items_json);
    if (state_len) {
        e->state = kvt_xmalloc(state_len);
        memcpy(e->state, state, state_len);
        e->state_len = state_len;
    }
    e->bytes = bytes;
    e->expires = st->ttl_s ? kvt_now() + st->ttl_s : 0;
    pthread_mutex_lock(&st->mu);
    entry *old = find(st, tenant, id);
    if (old) {
        unlink_entry(st, old);
        entry_free(old);
    }
    while (st->tail && (st->n + 1 > st->max_entries || st->bytes + bytes > st->max_bytes)) {
        entry *lru = st->tail;
        unlink_entry(st, lru);
        entry_free(lru);
    }
    push_front(st, e);
    pthread_mutex_unlock(&st->mu);
    return 1;
}

int kvt_resp_store_get(kvt_resp_store *st, const char *tenant, const char *id, char **response_json, char **items_json,
                       void **state, size_t *state_len) {
    pthread_mutex_lock(&st->mu);
    entry *e = find(st, tenant, id);
    if (e) {
        unlink_entry(st, e);
        push_front(st, e);
        if (response_json) *response_json = kvt_xstrdup(e->response);
        if (items_json) *items_json = kvt_xstrdup(e->items);
        if (state) {
            *state = e->state_len ? kvt_xmalloc(e->state_len) : NULL;
            if (e->state_len) memcpy(*state, e->state, e->state_len);
            *state_len = e->state_len;
        }
    }
    pthread_mutex_unlock(&st->mu);
    return e != NULL;
}

int kvt_resp_store_delete(kvt_resp_store *st, const char *tenant, const char *id) {
    pthread_mutex_lock(&st->mu);
    entry *e = find(st, tenant, id);
    if (e) unlink_entry(st, e);
    pthread_mutex_unlock(&st->mu);
    if (e) entry_free(e);
    return e != NULL;
}

size_t kvt_resp_store_count(kvt_resp_store *st) {
    pthread_mutex_lock(&st->mu);
    expire(st);
    size_t n = st->n;
    pthread_mutex_unlock(&st->mu);
    return n;
}

/* The packed prefix: this header, then the text's bytes, then the ids. */
typedef struct {
    uint64_t magic, n_msgs, hash[2], text_len, n_ids;
    int32_t jinja, why_msg;
    char why[24];
} packed;

#define PREFIX_MAGIC 0x6b767472657370ull /* "kvtresp" */

void *kvt_resp_prefix_pack(const kvt_resp_prefix *p, size_t *len) {
    packed h = {.magic = PREFIX_MAGIC,
                .n_msgs = p->n_msgs,
                .hash = {p->hash[0], p->hash[1]},
                .text_len = p->text_len,
                .n_ids = p->n_ids,
                .jinja = p->jinja,
                .why_msg = p->why_msg};
    memcpy(h.why, p->why, sizeof h.why);
    h.why[sizeof h.why - 1] = 0;
    *len = sizeof h + p->text_len + p->n_ids * sizeof *p->ids;
    char *b = kvt_xmalloc(*len);
    memcpy(b, &h, sizeof h);
    if (p->text_len) memcpy(b + sizeof h, p->text, p->text_len);
    if (p->n_ids) memcpy(b + sizeof h + p->text_len, p->ids, p->n_ids * sizeof *p->ids);
    return b;
}

int kvt_resp_prefix_unpack(const void *blob, size_t len, kvt_resp_prefix *p) {
    memset(p, 0, sizeof *p);
    p->jinja = -1;
    packed h;
    if (!blob || len < sizeof h) return 0;
    memcpy(&h, blob, sizeof h);
    if (h.magic != PREFIX_MAGIC || h.text_len > len - sizeof h ||
        h.n_ids != (len - sizeof h - h.text_len) / sizeof *p->ids || (len - sizeof h - h.text_len) % sizeof *p->ids)
        return 0;
    const char *b = blob;
    p->jinja = h.jinja;
    p->n_msgs = h.n_msgs;
    p->hash[0] = h.hash[0];
    p->hash[1] = h.hash[1];
    memcpy(p->why, h.why, sizeof p->why);
    p->why[sizeof p->why - 1] = 0;
    p->why_msg = h.why_msg;
    p->text_len = h.text_len;
    p->text = kvt_xmalloc(h.text_len + 1); /* NUL-terminated: the built-in renderer compares it as a string */
    memcpy(p->text, b + sizeof h, h.text_len);
    p->text[h.text_len] = 0;
    p->n_ids = h.n_ids;
    p->ids = kvt_xmalloc((h.n_ids ? h.n_ids : 1) * sizeof *p->ids);
    if (h.n_ids) memcpy(p->ids, b + sizeof h + h.text_len, h.n_ids * sizeof *p->ids);
    return 1;
}

void kvt_resp_prefix_free(kvt_resp_prefix *p) {
    free(p->text);
    free(p->ids);
    p->text = NULL;
    p->ids = NULL;
}
