// SPDX-License-Identifier: MIT
/* Test blocks for the disk tier's tests: NBLK blocks of B tokens in chains of
 * ten, payloads generated from each block's hash (so any served byte can be
 * checked), store parameters with small segments, and put/get helpers that
 * check what they do. Static helpers for one test executable each. */
#ifndef KVT_TEST_DISK_BLOCKS_H
#define KVT_TEST_DISK_BLOCKS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "blockhash.h"
#include "common.h"
#include "testutil.h"
#include "tier_disk.h"

#define B 4
#define PAYLOAD 12000 /* not a multiple of 4 KiB: records carry padding */
#define SEG (64 * 1024)
#define NBLK 200

static kvt_hash128 root;
static kvt_hash128 hashes[NBLK], parents[NBLK];
static int32_t toks[NBLK][B];

static void fill_payload(kvt_hash128 h, uint8_t *p, int compressible) {
    uint64_t x = h.lo ^ (h.hi << 1) ^ 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < PAYLOAD; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = compressible ? (uint8_t)(i / 64 + (x & 1)) : (uint8_t)x;
    }
}

/* Chains of 10 blocks each. */
static void make_blocks(void) {
    kvt_root_params rp = kvt_root_default_params();
    rp.block_tokens = B;
    rp.fingerprint.lo = 77;
    kvt_block_root(&rp, &root);
    for (int i = 0; i < NBLK; i++) {
        for (int t = 0; t < B; t++) toks[i][t] = i * 31 + t * 7;
        parents[i] = i % 10 ? hashes[i - 1] : root;
        hashes[i] = kvt_block_hash(parents[i], toks[i], B);
    }
}

static kvt_disk_params params(const char *dir) {
    kvt_disk_params p = kvt_disk_default_params();
    p.dir = dir;
    p.payload_bytes = PAYLOAD;
    p.block_tokens = B;
    p.ns = root;
    p.segment_bytes = SEG;
    p.size_bytes = 64 * SEG;
    p.queue_depth = 8;
    return p;
}

static const char *subdir(const char *name) {
    static char buf[8][512];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", kvt_test_tmpdir(), name);
    return b;
}

/* Puts blocks [a, b), retrying on a full queue (the test wants them all). */
static void put_range(kvt_disk *d, int a, int b, int compressible) {
    uint8_t pay[PAYLOAD];
    for (int i = a; i < b; i++) {
        fill_payload(hashes[i], pay, compressible);
        int rc;
        while ((rc = kvt_disk_put(d, hashes[i], parents[i], toks[i], pay)) == KVT_ELIMIT) kvt_disk_flush(d);
        CHECKF(rc == 0 || rc == 1, "put %d: %d", i, rc);
    }
}

/* 1 if block i is served with the right bytes, 0 on a miss; a wrong payload fails the test. */
static int get_ok(kvt_disk *d, int i, int compressible) {
    uint8_t got[PAYLOAD], want[PAYLOAD];
    int rc = kvt_disk_get(d, hashes[i], parents[i], toks[i], got);
    if (rc) return 0;
    fill_payload(hashes[i], want, compressible);
    CHECKF(!memcmp(got, want, PAYLOAD), "block %d served with wrong bytes", i);
    return 1;
}

#endif
