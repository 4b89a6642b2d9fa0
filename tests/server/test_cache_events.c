// SPDX-License-Identifier: MIT
/* The store/evict event ring of GET /v1/cache/events: numbering from 1, a
 * read from `since` on, a reader that fell behind the ring (or is ahead of
 * it: another epoch) told to reset, the read cap, and the prefix-index
 * observer turning tier-mask changes into events only where T0..T2 presence
 * starts or ends (T3 alone is no event). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cache_events.h"
#include "prefix.h"
#include "testutil.h"

static kvt_hash128 key(uint64_t i) { return (kvt_hash128){i, 0xabc0000000000000ULL + i}; }

/* The answer for since/max as JSON (owned by the caller). */
static cJSON *read_events(kvt_cache_events *ev, uint64_t since, uint32_t max) {
    char *t = kvt_cache_events_json(ev, since, max);
    cJSON *o = cJSON_Parse(t);
    free(t);
    return o;
}

static double num(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k)->valuedouble; }
static int reset(const cJSON *o) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "reset")); }
static int count(const cJSON *o) { return cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "events")); }
static const char *event(const cJSON *o, int i) {
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "events"), i)->valuestring;
}

static void test_ring(void) {
    kvt_cache_events *ev = kvt_cache_events_new(4);
    cJSON *o = read_events(ev, 0, 0);
    CHECK(o && num(o, "next") == 1 && count(o) == 0 && !reset(o));
    cJSON_Delete(o);
    kvt_cache_events_note(ev, key(1), 1);
    kvt_cache_events_note(ev, key(2), 1);
    kvt_cache_events_note(ev, key(1), 0);
    o = read_events(ev, 0, 0);
    char hex[33];
    kvt_hash128_hex(key(1), hex);
    CHECK(count(o) == 3 && num(o, "next") == 4 && event(o, 0)[0] == '+' && !strcmp(event(o, 0) + 1, hex));
    CHECK(event(o, 2)[0] == '-' && !strcmp(event(o, 2) + 1, hex));
    CHECK(strlen(cJSON_GetObjectItemCaseSensitive(o, "epoch")->valuestring) == 16);
    cJSON_Delete(o);
    o = read_events(ev, 3, 0); /* from event 3 on */
    CHECK(count(o) == 1 && event(o, 0)[0] == '-' && !reset(o));
    cJSON_Delete(o);
    o = read_events(ev, 4, 0); /* caught up */
    CHECK(count(o) == 0 && num(o, "next") == 4 && !reset(o));
    cJSON_Delete(o);
    o = read_events(ev, 1, 2); /* the cap: 2 events, next says where to go on */
    CHECK(count(o) == 2 && num(o, "next") == 3);
    cJSON_Delete(o);
    for (uint64_t i = 10; i < 14; i++) kvt_cache_events_note(ev, key(i), 1); /* events 4..7; 1..3 fall out */
    o = read_events(ev, 2, 0);
    CHECK(reset(o) && count(o) == 4 && num(o, "next") == 8);
    cJSON_Delete(o);
    o = read_events(ev, 99, 0); /* numbers of another epoch */
    CHECK(reset(o) && count(o) == 4);
    cJSON_Delete(o);
    kvt_cache_events_free(ev);
}

static void test_observer(void) {
    kvt_cache_events *ev = kvt_cache_events_new(64);
    kvt_prefix *idx = NULL;
    CHECK(kvt_prefix_new(4, &idx) == 0);
    kvt_prefix_set_observer(idx, kvt_cache_events_observe, ev);
    kvt_hash128 root = {7, 7}, h = {8, 8};
    int32_t toks[4] = {1, 2, 3, 4};
    CHECK(kvt_prefix_add(idx, h, root, toks, KVT_TIER_T3, 0) == 0); /* T3 only: no event */
    CHECK(kvt_prefix_add(idx, h, root, toks, KVT_TIER_T0, 5) == 0); /* + */
    CHECK(kvt_prefix_add(idx, h, root, toks, KVT_TIER_T1, 6) == 0); /* already local: none */
    CHECK(kvt_prefix_remove(idx, h, KVT_TIER_T0) == 0);             /* still in T1: none */
    CHECK(kvt_prefix_remove(idx, h, KVT_TIER_T1) == 0);             /* - (T3 remains) */
    cJSON *o = read_events(ev, 0, 0);
    CHECK(count(o) == 2 && event(o, 0)[0] == '+' && event(o, 1)[0] == '-');
    cJSON_Delete(o);
    kvt_prefix_set_observer(idx, NULL, NULL);
    CHECK(kvt_prefix_add(idx, h, root, toks, KVT_TIER_T0, 5) == 0);
    o = read_events(ev, 0, 0);
    CHECK(count(o) == 2); /* no observer, no event */
    cJSON_Delete(o);
    kvt_prefix_free(idx);
    kvt_cache_events_free(ev);
}

int main(void) {
    test_ring();
    test_observer();
    return kvt_test_done("test_cache_events");
}
