// SPDX-License-Identifier: MIT
/* The store/evict event ring (see cache_events.h). */
#include "cache_events.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "prefix.h"

typedef struct {
    kvt_hash128 key;
    int added;
} event;

struct kvt_cache_events {
    pthread_mutex_t mu;
    event *ring;
    uint32_t cap;
    uint64_t next; /* the number the next event gets; the ring holds (next - cap, next) */
    uint64_t epoch;
};

kvt_cache_events *kvt_cache_events_new(uint32_t cap) {
    kvt_cache_events *ev = kvt_xcalloc(1, sizeof *ev);
    pthread_mutex_init(&ev->mu, NULL);
    ev->cap = cap ? cap : KVT_CACHE_EVENTS_DEFAULT;
    ev->ring = kvt_xcalloc(ev->cap, sizeof *ev->ring);
    ev->next = 1;
    /* without randomness, the start time still tells a restart apart */
    if (getrandom(&ev->epoch, sizeof ev->epoch, 0) != (ssize_t)sizeof ev->epoch)
        ev->epoch = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    return ev;
}

void kvt_cache_events_free(kvt_cache_events *ev) {
    if (!ev) return;
    pthread_mutex_destroy(&ev->mu);
    free(ev->ring);
    free(ev);
}

void kvt_cache_events_note(kvt_cache_events *ev, kvt_hash128 hash, int added) {
    pthread_mutex_lock(&ev->mu);
    ev->ring[ev->next % ev->cap] = (event){hash, added};
    ev->next++;
    pthread_mutex_unlock(&ev->mu);
}

void kvt_cache_events_observe(void *ctx, kvt_hash128 hash, uint32_t old_tiers, uint32_t new_tiers) {
    const uint32_t local = KVT_TIER_BIT(KVT_TIER_T0) | KVT_TIER_BIT(KVT_TIER_T1) | KVT_TIER_BIT(KVT_TIER_T2);
    int was = (old_tiers & local) != 0, is = (new_tiers & local) != 0;
    if (was != is) kvt_cache_events_note(ctx, hash, is);
}

void kvt_hash128_hex(kvt_hash128 h, char out[33]) {
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)h.hi, (unsigned long long)h.lo);
}

char *kvt_cache_events_json(kvt_cache_events *ev, uint64_t since, uint32_t max) {
    pthread_mutex_lock(&ev->mu);
    uint64_t oldest = ev->next > ev->cap ? ev->next - ev->cap : 1;
    /* since is the first number wanted (0: from the oldest kept); a reader behind the ring,
     * or ahead of it (another epoch's numbers), starts over from the oldest */
    int reset = since && (since < oldest || since > ev->next);
    uint64_t from = !since || reset ? oldest : since;
    uint64_t to = KVT_MIN(ev->next, from + (max ? max : KVT_CACHE_EVENTS_READ_MAX));
    size_t cap = 96 + (size_t)(to - from) * 37, len = 0;
    char *out = kvt_xmalloc(cap);
    len += (size_t)snprintf(out, cap, "{\"epoch\":\"%016llx\",\"next\":%llu,\"reset\":%s,\"events\":[",
                            (unsigned long long)ev->epoch, (unsigned long long)to, reset ? "true" : "false");
    for (uint64_t i = from; i < to; i++) {
        const event *e = &ev->ring[i % ev->cap];
        char hex[33];
        kvt_hash128_hex(e->key, hex);
        len += (size_t)snprintf(out + len, cap - len, "%s\"%c%s\"", i > from ? "," : "", e->added ? '+' : '-', hex);
    }
    pthread_mutex_unlock(&ev->mu);
    snprintf(out + len, cap - len, "]}");
    return out;
}
