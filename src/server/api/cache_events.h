// SPDX-License-Identifier: MIT
/* The store/evict event log behind GET /v1/cache/events: which block keys
 * became present on this node (in T0, T1 or T2) and which left all three, in
 * order, so a router (kvtier route) keeps an index of where prefixes live
 * without asking every node per request. Only keys travel: a key is a chained
 * hash under the tenant's namespace, so it names no text and no tenant. T3 is
 * shared by every node and says nothing about where to route, so it is left
 * out.
 *
 * The log is a ring of the last `cap` events, numbered from 1. A reader asks
 * for the events from number `since` on; one that fell behind the ring gets
 * "reset": it must forget what it learnt of this node and rebuild from what
 * follows. The epoch is random per process: a restarted node starts a new
 * numbering, which a reader sees as a new epoch.
 *
 * Thread-safety: every call is safe from any thread (one mutex). */
#ifndef KVT_CACHE_EVENTS_H
#define KVT_CACHE_EVENTS_H

#include <stdint.h>

#include "hash128.h"

typedef struct kvt_cache_events kvt_cache_events;

/* Default ring size: at 16 bytes a key, 1 MiB of keys. */
#define KVT_CACHE_EVENTS_DEFAULT 65536
/* The most events one read returns. */
#define KVT_CACHE_EVENTS_READ_MAX 8192

kvt_cache_events *kvt_cache_events_new(uint32_t cap);
void kvt_cache_events_free(kvt_cache_events *ev);

/* Records that hash became present on this node (added = 1) or left it (0). */
void kvt_cache_events_note(kvt_cache_events *ev, kvt_hash128 hash, int added);

/* The prefix index's observer (prefix.h): a key whose mask over T0..T2 goes
 * from empty to not (or back) is one event. ctx is the kvt_cache_events. */
void kvt_cache_events_observe(void *ctx, kvt_hash128 hash, uint32_t old_tiers, uint32_t new_tiers);

/* The JSON answer for the events numbered since and after (0: from the oldest
 * kept), at most max of them (0: KVT_CACHE_EVENTS_READ_MAX):
 * {"epoch":"<16 hex>","next":N,"reset":bool,"events":["+<32 hex>","-<32 hex>",...]}
 * where next is the number to pass as since in the next read. Owned by the caller. */
char *kvt_cache_events_json(kvt_cache_events *ev, uint64_t since, uint32_t max);

/* A key as the 32 hex digits the API writes (high word first); out holds 33 bytes. */
void kvt_hash128_hex(kvt_hash128 h, char out[33]);

#endif
