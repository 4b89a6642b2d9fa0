// SPDX-License-Identifier: MIT
/* The Redis Cluster key slot of the remote tier (tier_remote.h "Cluster"):
 * CRC16 against its known check value, slots of known keys as Redis computes
 * them, the hash tag rules (the first '{' and the first '}' after it; an
 * empty tag hashes the whole key), and that T3's own keys spread over the
 * slot space. Also the cluster URLs that kvt_remote_open refuses before it
 * touches the network or the key file: TLS, a database number, an unknown
 * parameter, a host without a port. */
#include <string.h>

#include "common.h"
#include "testutil.h"
#include "tier_remote.h"

static uint16_t slot(const char *k) { return kvt_remote_key_slot(k, strlen(k)); }

static void test_crc16(void) {
    CHECK(kvt_remote_crc16("123456789", 9) == 0x31C3);
    CHECK(kvt_remote_crc16("", 0) == 0);
    CHECKF(slot("foo") == 12182, "%u", slot("foo"));
    CHECKF(slot("bar") == 5061, "%u", slot("bar"));
    CHECKF(slot("hello") == 866, "%u", slot("hello"));
    CHECK(slot("123456789") == (0x31C3 & 16383));
}

static void test_hash_tags(void) {
    CHECK(slot("{user1000}.following") == slot("user1000"));
    CHECK(slot("{user1000}.followers") == slot("user1000"));
    CHECK(slot("foo{}{bar}") == kvt_remote_crc16("foo{}{bar}", 10) % 16384); /* empty tag: the whole key */
    CHECK(slot("foo{{bar}}zap") == slot("{bar"));                            /* from the first '{' */
    CHECK(slot("foo{bar}{zap}") == slot("bar"));                             /* to the first '}' */
    CHECK(slot("foo{bar") == kvt_remote_crc16("foo{bar", 7) % 16384);        /* no closing brace */
    CHECK(slot("}foo{x}") == slot("x"));
    /* the length is honoured: bytes past len do not count */
    CHECK(kvt_remote_key_slot("foo{bar}", 3) == slot("foo"));
}

/* Block keys have no braces: a prefix's blocks land on many slots. */
static void test_spread(void) {
    kvt_hash128 ns = {0x1234, 0x5678};
    uint32_t per_third[3] = {0};
    for (uint64_t i = 0; i < 3000; i++) {
        char key[KVT_REMOTE_KEY_LEN + 1];
        kvt_remote_key(ns, (kvt_hash128){i * 0x9E3779B97F4A7C15ull, i}, key);
        per_third[kvt_remote_key_slot(key, KVT_REMOTE_KEY_LEN) * 3 / 16384]++;
    }
    for (int i = 0; i < 3; i++) CHECKF(per_third[i] > 800 && per_third[i] < 1200, "third %d: %u", i, per_third[i]);
}

static void test_bad_urls(void) {
    const char *bad[] = {"rediss://127.0.0.1:6379",
                         "rediss-cluster://127.0.0.1:7000",
                         "redis-cluster://127.0.0.1:7000/2",
                         "redis-cluster://127.0.0.1:7000?replicas=yes",
                         "redis-cluster://127.0.0.1",
                         "redis-cluster://127.0.0.1:7000,127.0.0.1",
                         "redis-cluster://"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        kvt_remote_params p = kvt_remote_default_params();
        p.url = bad[i];
        p.payload_bytes = 1024;
        p.key_file = "/nonexistent/key";
        kvt_remote *r = NULL;
        CHECKF(kvt_remote_open(&p, &r) == KVT_EARG && !r, "%s", bad[i]);
    }
}

int main(void) {
    test_crc16();
    test_hash_tags();
    test_spread();
    test_bad_urls();
    return kvt_test_done("test_remote_slot");
}
