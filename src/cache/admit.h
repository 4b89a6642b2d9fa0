// SPDX-License-Identifier: MIT
/* The frequency filter behind `--kv-disk-admit reused`: a small count-min
 * sketch of block sightings that says whether a block has been seen at least
 * twice, so one-shot prompts can be kept off the SSD. Approximate (it can
 * over-count, never under-count until aging halves old counts) and bounded in
 * memory (KVT_ADMIT_SKETCH_BYTES), whatever the number of blocks.
 *
 * Thread-safety: none; the cache owner serialises calls. */
#ifndef KVT_ADMIT_H
#define KVT_ADMIT_H

#include "blockhash.h"

typedef struct kvt_admit kvt_admit;

kvt_admit *kvt_admit_new(void);
void kvt_admit_free(kvt_admit *a);

/* Records one sighting of hash; returns 1 if it has now been seen at least
 * twice (as far as the sketch can tell), else 0. */
int kvt_admit_sight(kvt_admit *a, kvt_hash128 hash);

#endif
