// SPDX-License-Identifier: MIT
/* The reply map as records (chat.h): what kvt_reply_map_put_rec encodes and
 * kvt_reply_map_dump writes replays into an empty map as the same entries
 * (found by the same salt, text, split and session; not by another salt);
 * the salt never appears in the bytes; a cut, a flipped byte, an impossible
 * length or an id outside the vocabulary stops the replay at that record,
 * keeping the ones before it; a replay past the capacity keeps the newest. */
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "common.h"
#include "testutil.h"

static const char SALT[] = "tenant-key-sekrit";

static kvt_reply_owner owner(const char *salt, const char *session) {
    kvt_reply_owner o = {salt, strlen(salt), session};
    return o;
}

/* 1 if m holds text under salt (and session) with ids[0..n). */
static int holds(kvt_reply_map *m, const char *salt, const char *session, const char *text, const int32_t *ids,
                 size_t n) {
    kvt_reply_owner o = owner(salt, session);
    int32_t *got = NULL;
    size_t k = kvt_reply_map_get_by(m, &o, text, &got);
    int ok = k == n && !memcmp(got, ids, n * sizeof *ids);
    free(got);
    return ok;
}

static const int32_t A[] = {5, 6, 7}, B[] = {9, 8}, C[] = {42};

/* Three puts as one journal: plain, split with a session, a third. */
static uint8_t *journal(size_t *len, size_t *ends) {
    kvt_reply_map *m = kvt_reply_map_new(8, 16);
    kvt_reply_owner o1 = owner(SALT, NULL), o2 = owner(SALT, "sess-1");
    uint8_t *r[3];
    size_t n[3];
    n[0] = kvt_reply_map_put_rec(m, &o1, "alpha", NULL, NULL, A, 3, &r[0]);
    n[1] = kvt_reply_map_put_rec(m, &o2, "<think>x</think>beta", "x", "beta", B, 2, &r[1]);
    n[2] = kvt_reply_map_put_rec(m, &o1, "gamma", NULL, NULL, C, 1, &r[2]);
    CHECK(n[0] && n[1] && n[2]);
    uint8_t *buf = kvt_xmalloc(n[0] + n[1] + n[2]);
    *len = 0;
    for (int i = 0; i < 3; i++) {
        memcpy(buf + *len, r[i], n[i]);
        *len += n[i];
        ends[i] = *len;
        free(r[i]);
    }
    /* the dump of the map is the same bytes, in the same order */
    uint8_t *d;
    size_t count, dn = kvt_reply_map_dump(m, &d, &count);
    CHECK(count == 3 && dn == *len && !memcmp(d, buf, dn));
    free(d);
    kvt_reply_map_free(m);
    return buf;
}

static void test_round_trip(void) {
    size_t len, ends[3], used, count;
    uint8_t *buf = journal(&len, ends);
    CHECK(!memmem(buf, len, SALT, strlen(SALT))); /* the salt (an API key) is never written */
    kvt_reply_map *m = kvt_reply_map_new(8, 16);
    CHECK(kvt_reply_map_replay(m, buf, len, 100, &used, &count) == 0 && used == len && count == 3);
    CHECK(holds(m, SALT, NULL, "alpha", A, 3));
    CHECK(holds(m, SALT, "sess-1", "<think>x</think>beta", B, 2));
    CHECK(holds(m, SALT, NULL, "gamma", C, 1));
    CHECK(!holds(m, "another-tenant", NULL, "alpha", A, 3));
    kvt_reply_owner o = owner(SALT, "sess-1");
    char *text = NULL;
    int32_t *ids = NULL;
    CHECK(kvt_reply_map_get_split_by(m, &o, "x", "beta", &text, &ids) == 2 && ids[0] == 9);
    CHECK(text && !strcmp(text, "<think>x</think>beta"));
    free(text);
    free(ids);
    CHECK(kvt_reply_map_get_split_by(m, &o, NULL, "beta", &text, &ids) == 2);
    free(text);
    free(ids);
    kvt_reply_map_free(m);
    /* ids outside the vocabulary: the replay stops at the first record holding one (9, of the second) */
    m = kvt_reply_map_new(8, 16);
    CHECK(kvt_reply_map_replay(m, buf, len, 9, &used, &count) == KVT_EFORMAT && used == ends[0] && count == 1);
    kvt_reply_map_free(m);
    /* past the capacity the oldest go, as with puts */
    m = kvt_reply_map_new(2, 16);
    CHECK(kvt_reply_map_replay(m, buf, len, 0, &used, &count) == 0 && count == 3);
    CHECK(!holds(m, SALT, NULL, "alpha", A, 3) && holds(m, SALT, NULL, "gamma", C, 1));
    kvt_reply_map_free(m);
    free(buf);
}

/* Replays a damaged copy of the journal: stops at the record at want_used
 * with want_count kept. */
static void replay_damaged(const uint8_t *buf, size_t len, size_t want_used, size_t want_count) {
    kvt_reply_map *m = kvt_reply_map_new(8, 16);
    size_t used = 99, count = 99;
    CHECKF(kvt_reply_map_replay(m, buf, len, 100, &used, &count) == KVT_EFORMAT, "damage found (%s)", kvt_errmsg());
    CHECKF(used == want_used && count == want_count, "stops at %zu with %zu (want %zu, %zu)", used, count, want_used,
           want_count);
    if (want_count) CHECK(holds(m, SALT, NULL, "alpha", A, 3));
    CHECK(!holds(m, SALT, NULL, "gamma", C, 1));
    kvt_reply_map_free(m);
}

static void test_damage(void) {
    size_t len, ends[3];
    uint8_t *buf = journal(&len, ends);
    for (size_t cut = ends[1] + 1; cut < len; cut += 3) replay_damaged(buf, cut, ends[1], 2); /* a torn tail */
    replay_damaged(buf, ends[0] + 3, ends[0], 1);                                             /* a head cut short */
    for (size_t at = ends[0]; at < ends[1]; at++) { /* any flipped bit of the second record */
        buf[at] ^= 0x10;
        replay_damaged(buf, len, ends[0], 1);
        buf[at] ^= 0x10;
    }
    uint8_t save[4];
    memcpy(save, buf, 4);
    memset(buf, 0xff, 4); /* an impossible length */
    replay_damaged(buf, len, 0, 0);
    memcpy(buf, save, 4);
    kvt_reply_map *m = kvt_reply_map_new(8, 16);
    size_t used, count;
    CHECK(kvt_reply_map_replay(m, buf, 0, 100, &used, &count) == 0 && used == 0 && count == 0); /* empty */
    kvt_reply_map_free(m);
    free(buf);
}

int main(void) {
    test_round_trip();
    test_damage();
    return kvt_test_done("test_reply_map");
}
