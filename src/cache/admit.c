// SPDX-License-Identifier: MIT
/* The admission sketch (see admit.h): rows x width saturating counters, one
 * counter per row for each key, halved every AGE_FACTOR x width sightings so
 * the sightings of long ago fade. */
#include "admit.h"

#include <stdlib.h>

#include "common.h"

#define SKETCH_ROWS 4
#define SKETCH_WIDTH 4096
#define SKETCH_AGE_FACTOR 8
#define SKETCH_MAX 15
#define ADMIT_THRESHOLD 2

struct kvt_admit {
    uint8_t counts[SKETCH_ROWS * SKETCH_WIDTH];
    uint64_t adds;
};

kvt_admit *kvt_admit_new(void) { return kvt_xcalloc(1, sizeof(kvt_admit)); }

void kvt_admit_free(kvt_admit *a) { free(a); }

/* Row i's counter for a key: the four 32-bit lanes of the 128-bit key are
 * independent hashes already. */
static uint32_t sketch_index(kvt_hash128 h, int row) {
    uint64_t w = row < 2 ? h.lo : h.hi;
    return (uint32_t)(row & 1 ? w >> 32 : w) % SKETCH_WIDTH;
}

int kvt_admit_sight(kvt_admit *a, kvt_hash128 hash) {
    uint8_t est = SKETCH_MAX;
    for (int row = 0; row < SKETCH_ROWS; row++) {
        uint8_t *c = &a->counts[row * SKETCH_WIDTH + sketch_index(hash, row)];
        if (*c < SKETCH_MAX) (*c)++;
        if (*c < est) est = *c;
    }
    if (++a->adds >= (uint64_t)SKETCH_AGE_FACTOR * SKETCH_WIDTH) {
        for (size_t i = 0; i < SKETCH_ROWS * SKETCH_WIDTH; i++) a->counts[i] >>= 1;
        a->adds = 0;
    }
    return est >= ADMIT_THRESHOLD;
}
