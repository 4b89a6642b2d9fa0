// SPDX-License-Identifier: MIT
/* The internal 128-bit key map against a naive array model: random puts,
 * overwrites and deletes over a small key space (long probe runs, wrap-around
 * at the table end), including keys that differ only in their high half. */
#include <stdlib.h>
#include <string.h>

#include "hmap128.h"
#include "testutil.h"

#define NKEYS 500
#define OPS 200000

int main(void) {
    static kvt_hash128 keys[NKEYS];
    static uint32_t model[NKEYS]; /* KVT_HMAP128_EMPTY: absent */
    srand(5);
    for (int i = 0; i < NKEYS; i++) {
        /* Pairs share lo and differ in hi; many share low bits of lo. */
        keys[i].lo = (uint64_t)(i / 2) * 64;
        keys[i].hi = (uint64_t)(i % 2);
        model[i] = KVT_HMAP128_EMPTY;
    }
    kvt_hmap128 m;
    kvt_hmap128_init(&m);
    int bad = 0;
    size_t count = 0;
    for (int op = 0; op < OPS && !bad; op++) {
        int i = rand() % NKEYS;
        if (rand() % 2) {
            uint32_t v = (uint32_t)rand();
            kvt_hmap128_put(&m, keys[i], v);
            count += model[i] == KVT_HMAP128_EMPTY;
            model[i] = v;
        } else {
            int had = kvt_hmap128_del(&m, keys[i]);
            if (had != (model[i] != KVT_HMAP128_EMPTY)) bad++;
            count -= (size_t)had;
            model[i] = KVT_HMAP128_EMPTY;
        }
        if (op % 97 == 0) {
            for (int k = 0; k < NKEYS; k++) {
                uint32_t v = 0;
                int got = kvt_hmap128_get(&m, keys[k], &v);
                if (got != (model[k] != KVT_HMAP128_EMPTY) || (got && v != model[k])) bad++;
            }
            if (m.count != count) bad++;
        }
    }
    CHECKF(bad == 0, "%d disagreements with the model", bad);
    kvt_hash128 zero = {0, 0};
    kvt_hmap128_free(&m);
    CHECK(!kvt_hmap128_get(&m, zero, NULL) && !kvt_hmap128_del(&m, zero));
    kvt_hmap128_put(&m, zero, 7); /* the zero key is an ordinary key */
    uint32_t v = 0;
    CHECK(kvt_hmap128_get(&m, zero, &v) && v == 7 && m.count == 1);
    kvt_hmap128_free(&m);
    return kvt_test_done("test_hmap128");
}
