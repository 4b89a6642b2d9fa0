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
    size_t bytes;
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
                       const char *items_json) {
    size_t bytes = strlen(id) + strlen(response_json) + strlen(items_json) + sizeof(entry);
    if (!st->max_entries || bytes > st->max_bytes) return 0;
    entry *e = kvt_xcalloc(1, sizeof *e);
    e->tenant = tenant_hash(tenant);
    e->id = kvt_xstrdup(id);
    e->response = kvt_xstrdup(response_json);
    e->items = kvt_xstrdup(items_json);
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

int kvt_resp_store_get(kvt_resp_store *st, const char *tenant, const char *id, char **response_json, char **items_json) {
    pthread_mutex_lock(&st->mu);
    entry *e = find(st, tenant, id);
    if (e) {
        unlink_entry(st, e);
        push_front(st, e);
        if (response_json) *response_json = kvt_xstrdup(e->response);
        if (items_json) *items_json = kvt_xstrdup(e->items);
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
