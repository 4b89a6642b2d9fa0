// SPDX-License-Identifier: MIT
/* The admission sketch: a block seen once is not admitted, seen twice it is;
 * few of many once-seen blocks slip through; aging lets old sightings fade. */
#include "admit.h"
#include "testutil.h"

static kvt_hash128 key(uint64_t i) {
    int32_t t[2] = {(int32_t)i, (int32_t)(i >> 31)};
    kvt_hash128 root = {0x1234, 0x5678};
    return kvt_block_hash(root, t, 2);
}

int main(void) {
    kvt_admit *a = kvt_admit_new();
    CHECK(kvt_admit_sight(a, key(1)) == 0);
    CHECK(kvt_admit_sight(a, key(1)) == 1);
    int once = 0;
    for (uint64_t i = 2; i < 1000; i++) once += kvt_admit_sight(a, key(i));
    CHECKF(once < 10, "%d of 998 blocks seen once were admitted", once);
    /* aging: after enough sightings (of one other block here, so no counter
     * of this one is touched), counts are halved and a sighting of long ago
     * no longer counts towards the second */
    CHECK(kvt_admit_sight(a, key(5000)) == 0);
    for (int i = 0; i < 8 * 4096; i++) kvt_admit_sight(a, key(7));
    CHECK(kvt_admit_sight(a, key(5000)) == 0);
    kvt_admit_free(a);
    return kvt_test_done("test_admit");
}
