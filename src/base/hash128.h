// SPDX-License-Identifier: MIT
/* The 128-bit value kvtier names blocks and namespaces by (block keys,
 * roots, fingerprints as keys of maps): a plain pair of words. */
#ifndef KVT_HASH128_H
#define KVT_HASH128_H

#include <stdint.h>

/* A 128-bit key: XXH3-128 low and high halves. Compare with kvt_hash128_eq. */
typedef struct {
    uint64_t lo, hi;
} kvt_hash128;

static inline int kvt_hash128_eq(kvt_hash128 a, kvt_hash128 b) { return a.lo == b.lo && a.hi == b.hi; }

#endif
