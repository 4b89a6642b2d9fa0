// SPDX-License-Identifier: MIT
/* Linear probing with backward-shift deletion: no tombstones, so lookups stay
 * short under the constant insert/remove churn of cache tiers. */
#include "hmap128.h"

#include <assert.h>
#include <stdlib.h>

#include "common.h"

#define HMAP_MIN_CAP 16
/* Grow when more than 1/2 full: linear probing degrades quickly above that. */
#define HMAP_LOAD_NUM 1
#define HMAP_LOAD_DEN 2
/* Fibonacci hashing multiplier (2^64 / golden ratio). Mixing matters because
 * tests truncate keys to a few low bits and real keys may share a half. */
#define HMAP_MIX 0x9E3779B97F4A7C15ull

static size_t bucket(const kvt_hmap128 *m, kvt_hash128 k) {
    uint64_t x = (k.lo ^ (k.hi * HMAP_MIX)) * HMAP_MIX;
    return (size_t)(x >> 32) & (m->cap - 1);
}

void kvt_hmap128_init(kvt_hmap128 *m) {
    m->slots = NULL;
    m->cap = 0;
    m->count = 0;
}

void kvt_hmap128_free(kvt_hmap128 *m) {
    free(m->slots);
    kvt_hmap128_init(m);
}

static size_t find(const kvt_hmap128 *m, kvt_hash128 key) {
    size_t mask = m->cap - 1;
    for (size_t i = bucket(m, key);; i = (i + 1) & mask) {
        const kvt_hmap128_slot *s = &m->slots[i];
        if (s->val == KVT_HMAP128_EMPTY || kvt_hash128_eq(s->key, key)) return i;
    }
}

int kvt_hmap128_get(const kvt_hmap128 *m, kvt_hash128 key, uint32_t *val) {
    if (!m->count) return 0;
    const kvt_hmap128_slot *s = &m->slots[find(m, key)];
    if (s->val == KVT_HMAP128_EMPTY) return 0;
    if (val) *val = s->val;
    return 1;
}

static void rehash(kvt_hmap128 *m, size_t new_cap) {
    kvt_hmap128_slot *old = m->slots;
    size_t old_cap = m->cap;
    m->slots = kvt_xmalloc(new_cap * sizeof *m->slots);
    kvt_hugepage_hint(m->slots, new_cap * sizeof *m->slots);
    m->cap = new_cap;
    for (size_t i = 0; i < new_cap; i++) m->slots[i].val = KVT_HMAP128_EMPTY;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].val != KVT_HMAP128_EMPTY) m->slots[find(m, old[i].key)] = old[i];
    free(old);
}

void kvt_hmap128_reserve(kvt_hmap128 *m, size_t n) {
    size_t cap = m->cap ? m->cap : HMAP_MIN_CAP;
    while (n * HMAP_LOAD_DEN > cap * HMAP_LOAD_NUM) cap *= 2;
    if (cap != m->cap) rehash(m, cap);
}

void kvt_hmap128_prefetch(const kvt_hmap128 *m, kvt_hash128 key) {
    if (m->cap) __builtin_prefetch(&m->slots[bucket(m, key)], 1);
}

void kvt_hmap128_put(kvt_hmap128 *m, kvt_hash128 key, uint32_t val) {
    assert(val != KVT_HMAP128_EMPTY);
    if ((m->count + 1) * HMAP_LOAD_DEN > m->cap * HMAP_LOAD_NUM) rehash(m, m->cap ? m->cap * 2 : HMAP_MIN_CAP);
    kvt_hmap128_slot *s = &m->slots[find(m, key)];
    if (s->val == KVT_HMAP128_EMPTY) m->count++;
    s->key = key;
    s->val = val;
}

int kvt_hmap128_del(kvt_hmap128 *m, kvt_hash128 key) {
    if (!m->count) return 0;
    size_t mask = m->cap - 1;
    size_t i = find(m, key);
    if (m->slots[i].val == KVT_HMAP128_EMPTY) return 0;
    /* Backward shift: move later members of the probe run into the hole when
     * their home bucket does not lie cyclically in (hole, j]. */
    for (size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
        kvt_hmap128_slot *s = &m->slots[j];
        if (s->val == KVT_HMAP128_EMPTY) break;
        size_t home = bucket(m, s->key);
        int in_range = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (in_range) continue;
        m->slots[i] = *s;
        i = j;
    }
    m->slots[i].val = KVT_HMAP128_EMPTY;
    m->count--;
    return 1;
}

size_t kvt_hmap128_bytes(const kvt_hmap128 *m) { return m->cap * sizeof *m->slots; }
