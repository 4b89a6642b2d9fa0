// SPDX-License-Identifier: MIT
/* An open-addressing hash map from a 128-bit block key to a uint32 value: the
 * one table shape the prefix index and the block tiers all need. Internal. */
#ifndef KVT_HMAP128_H
#define KVT_HMAP128_H

#include <stddef.h>
#include <stdint.h>

#include "hash128.h"

typedef struct {
    kvt_hash128 key;
    uint32_t val; /* KVT_HMAP128_EMPTY marks a free slot */
} kvt_hmap128_slot;

/* The one value that cannot be stored: it marks free slots. */
#define KVT_HMAP128_EMPTY UINT32_MAX

/* Zero-initialise (or kvt_hmap128_init) before use. Not thread-safe; the
 * owner serialises every call. Keys are any 128-bit value (zero included). */
typedef struct {
    kvt_hmap128_slot *slots;
    size_t cap;   /* power of two, or 0 before the first insert */
    size_t count; /* keys stored */
} kvt_hmap128;

void kvt_hmap128_init(kvt_hmap128 *m);
/* Frees the slots; the map is empty and reusable afterwards. */
void kvt_hmap128_free(kvt_hmap128 *m);
/* 1 and *val set if key is present, else 0 (val untouched). val may be NULL. */
int kvt_hmap128_get(const kvt_hmap128 *m, kvt_hash128 key, uint32_t *val);
/* Inserts or overwrites key -> val (val != KVT_HMAP128_EMPTY). Grows as
 * needed; out of memory is fatal (kvt_xmalloc). */
void kvt_hmap128_put(kvt_hmap128 *m, kvt_hash128 key, uint32_t val);
/* Grows the table once so that n keys in all fit without another rehash
 * (for a bulk load of a known size); never shrinks. */
void kvt_hmap128_reserve(kvt_hmap128 *m, size_t n);
/* A hint that key is about to be looked up or stored: starts loading its
 * home slot, so a bulk loop can overlap the cache misses of several keys.
 * Changes nothing. */
void kvt_hmap128_prefetch(const kvt_hmap128 *m, kvt_hash128 key);
/* Removes key; returns 1 if it was present, else 0. Never shrinks. */
int kvt_hmap128_del(kvt_hmap128 *m, kvt_hash128 key);
/* Bytes held by the slot array (for memory accounting). */
size_t kvt_hmap128_bytes(const kvt_hmap128 *m);

#endif
