// SPDX-License-Identifier: MIT
/* The reply journal (reply_journal.h) over a real T2 directory: appends
 * replay into a fresh map after a reopen, newest kept; the file never holds
 * more than twice the map's capacity (it is rewritten from the map); it is
 * 0600; the side-file calls refuse a name outside "side-" and replace a link
 * under the journal's name without writing its target. Records are signed
 * with the directory's key: one altered with a good CRC but a MAC under
 * another key stops the replay there, a journal copied into another
 * directory (another key) is not replayed, nor is one of format version 1
 * (no MAC); kvt_reply_journal_verify counts the records and finds the first
 * bad one. With T2's MAC off (--kv-disk-no-mac) the journal is unsigned
 * and replayed on its CRCs; a directory with a key never replays an unsigned
 * one, and verify fails it there. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "crc32c.h"
#include "model.h"
#include "reply_journal.h"
#include "testutil.h"
#include "tier_disk.h"

#define CAP 4
#define N_VOCAB 300
#define HEAD 40
#define SIGNED 36 /* the head's bytes every MAC covers */
#define MAC KVT_DISK_MAC_BYTES

static long file_size(const char *path) {
    struct stat sb;
    return lstat(path, &sb) ? -1 : (long)sb.st_size;
}

/* 1 if m holds "reply NN" with its ids. */
static int holds(kvt_reply_map *m, int i) {
    char text[32];
    snprintf(text, sizeof text, "reply %02d", i);
    kvt_reply_owner o = {"salt", 4, NULL};
    int32_t *ids = NULL;
    size_t n = kvt_reply_map_get_by(m, &o, text, &ids);
    int ok = n == 2 && ids[0] == i && ids[1] == i + 1;
    free(ids);
    return ok;
}

/* Puts "reply NN" with ids {i, i + 1} into m and appends its record to j;
 * returns the record's bytes (without its MAC field). */
static size_t put(kvt_reply_map *m, kvt_reply_journal *j, int i) {
    char text[32];
    snprintf(text, sizeof text, "reply %02d", i);
    int32_t ids[2] = {i, i + 1};
    kvt_reply_owner o = {"salt", 4, NULL};
    uint8_t *r = NULL;
    size_t n = kvt_reply_map_put_rec(m, &o, text, NULL, NULL, ids, 2, &r);
    kvt_reply_journal_append(j, r, n);
    free(r);
    return n;
}

static void test_journal(kvt_cache *c, const char *path) {
    kvt_reply_map *m = kvt_reply_map_new(CAP, 16);
    kvt_reply_journal *j = kvt_reply_journal_open(c, m, CAP, N_VOCAB);
    CHECK(j != NULL);
    struct stat sb;
    CHECK(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 0777) == 0600);
    CHECK(file_size(path) == HEAD);
    long rec = 0, most = 0;
    for (int i = 0; i < 20; i++) {
        size_t n = put(m, j, i);
        rec = (long)(n + MAC);
        most = KVT_MAX(most, file_size(path));
    }
    CHECKF(most <= HEAD + 2 * CAP * rec, "the file held %ld bytes, records of %ld", most, rec);
    CHECKF(file_size(path) < HEAD + 20 * rec, "rewritten: %ld bytes", file_size(path));
    kvt_reply_journal_free(j);
    kvt_reply_map_free(m);
    /* a reopen replays the newest CAP replies */
    m = kvt_reply_map_new(CAP, 16);
    j = kvt_reply_journal_open(c, m, CAP, N_VOCAB);
    CHECK(j && holds(m, 19) && holds(m, 16) && !holds(m, 15));
    CHECK(file_size(path) == HEAD + CAP * rec);
    kvt_reply_journal_free(j);
    kvt_reply_map_free(m);
}

static void test_side_files(kvt_cache *c, const char *path) {
    kvt_disk *d = kvt_cache_disk(c);
    CHECK(d != NULL);
    CHECK(kvt_disk_side_open(d, "index", O_RDONLY) == -EINVAL);
    CHECK(kvt_disk_side_open(d, "side-../x", O_RDONLY) == -EINVAL);
    CHECK(kvt_disk_side_replace(d, "header", "x", 1) == -EINVAL);
    /* a link in the journal's place: not followed, replaced, its target untouched */
    const char *target = kvt_test_path(kvt_test_tmpdir(), "precious");
    FILE *f = fopen(target, "w");
    CHECK(f && fputs("precious\n", f) >= 0 && fclose(f) == 0);
    CHECK(unlink(path) == 0 && symlink(target, path) == 0);
    CHECK(kvt_disk_side_open(d, KVT_REPLY_JOURNAL_NAME, O_RDONLY) == -ELOOP);
    kvt_reply_map *m = kvt_reply_map_new(CAP, 16);
    kvt_reply_journal *j = kvt_reply_journal_open(c, m, CAP, N_VOCAB);
    CHECK(j != NULL);
    struct stat sb;
    CHECK(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode));
    size_t n = 0;
    char *t = kvt_test_read_file(target, &n);
    CHECK(t && n == 9 && !memcmp(t, "precious\n", 9));
    free(t);
    kvt_reply_journal_free(j);
    kvt_reply_map_free(m);
}

static void write_file(const char *path, const uint8_t *b, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b, 1, n, f) == n && fclose(f) == 0);
}

/* The bytes of record k of the journal at path (records of rec bytes, MAC
 * included): k's first id set to id, its CRC made good again and its MAC
 * made under key (32 bytes), as someone who can write the directory but
 * lacks its key could. */
static void forge(const char *path, int k, long rec, int32_t id, const uint8_t *key) {
    size_t n = 0;
    uint8_t *b = (uint8_t *)kvt_test_read_file(path, &n);
    CHECK(b && n >= (size_t)(HEAD + (k + 1) * rec));
    if (!b || n < (size_t)(HEAD + (k + 1) * rec)) return free(b);
    uint8_t *r = b + HEAD + k * rec;
    size_t body = kvt_rd32le(r), len = KVT_REPLY_RECORD_HEAD + body;
    CHECK(len + MAC == (size_t)rec);
    kvt_wr32le(r + len - 8, (uint32_t)id); /* the first of its two ids */
    kvt_wr32le(r + 4, kvt_crc32c(0, r + KVT_REPLY_RECORD_HEAD, body));
    uint8_t *msg = kvt_xmalloc(SIGNED + len);
    memcpy(msg, b, SIGNED);
    memcpy(msg + SIGNED, r, len);
    kvt_disk_record_key *other = kvt_disk_record_key_new(key);
    kvt_disk_mac(other, msg, SIGNED + len, r + len);
    kvt_disk_record_key_free(other);
    free(msg);
    write_file(path, b, n);
    free(b);
}

/* A journal of CAP replies "reply 16".."reply 19" alone at path; the bytes
 * of one record, MAC included. */
static long fill(kvt_cache *c, const char *path) {
    unlink(path);
    kvt_reply_map *m = kvt_reply_map_new(CAP, 16);
    kvt_reply_journal *j = kvt_reply_journal_open(c, m, CAP, N_VOCAB);
    CHECK(j != NULL);
    size_t n = 0;
    for (int i = 16; i < 20; i++) {
        n = put(m, j, i);
    }
    kvt_reply_journal_free(j);
    kvt_reply_map_free(m);
    return (long)(n + MAC);
}

/* Opens the journal into a fresh map; returns the map (caller frees). */
static kvt_reply_map *reopen(kvt_cache *c) {
    kvt_reply_map *m = kvt_reply_map_new(CAP, 16);
    kvt_reply_journal *j = kvt_reply_journal_open(c, m, CAP, N_VOCAB);
    CHECK(j != NULL);
    kvt_reply_journal_free(j);
    return m;
}

static void test_forged(kvt_cache *c, const char *dir, const char *path) {
    long rec = fill(c, path);
    kvt_reply_journal_report r;
    CHECK(kvt_reply_journal_verify(dir, &r) == 0);
    CHECKF(r.records == CAP && r.good == CAP && !r.problem && !r.why[0], "verify: %zu records, %zu good: %s", r.records,
           r.good, r.why);
    /* reply 18 (the third record) re-signed under another key with a good CRC */
    uint8_t key[KVT_DISK_KEY_BYTES];
    memset(key, 7, sizeof key);
    forge(path, 2, rec, 5, key);
    CHECK(kvt_reply_journal_verify(dir, &r) == 0);
    CHECKF(r.records == CAP && r.good == CAP - 1 && r.problem && r.bad_at == (size_t)(HEAD + 2 * rec) &&
               strstr(r.why, "MAC"),
           "verify of a forged record: %zu records, %zu good, bad at %zu: %s", r.records, r.good, r.bad_at, r.why);
    kvt_reply_map *m = reopen(c);
    CHECK(holds(m, 16) && holds(m, 17));
    CHECK(!holds(m, 18) && !holds(m, 19)); /* the replay stops at the forged one */
    int32_t *ids = NULL;
    kvt_reply_owner o = {"salt", 4, NULL};
    CHECK(kvt_reply_map_get_by(m, &o, "reply 18", &ids) == 0); /* its planted id above all */
    free(ids);
    kvt_reply_map_free(m);
    CHECKF(file_size(path) == HEAD + 2 * rec, "rewritten without it: %ld bytes", file_size(path));
    CHECK(kvt_reply_journal_verify(dir, &r) == 0 && r.records == 2 && r.good == 2 && !r.problem);
}

static void test_old_format(kvt_cache *c, const char *dir, const char *path) {
    long rec = fill(c, path);
    size_t n = 0;
    uint8_t *b = (uint8_t *)kvt_test_read_file(path, &n);
    CHECK(b && n == (size_t)(HEAD + CAP * rec));
    if (!b) return;
    /* format 1: a 32-byte head (magic, version, namespace, CRC), records with their CRC alone */
    uint8_t *old = kvt_xmalloc(n);
    memcpy(old, b, 28);
    kvt_wr32le(old + 8, 1);
    kvt_wr32le(old + 28, kvt_crc32c(0, old, 28));
    size_t out = 32;
    for (int k = 0; k < CAP; k++) {
        memcpy(old + out, b + HEAD + k * rec, (size_t)rec - MAC);
        out += (size_t)rec - MAC;
    }
    write_file(path, old, out);
    free(old);
    free(b);
    kvt_reply_journal_report r;
    CHECK(kvt_reply_journal_verify(dir, &r) == 0 && r.old_format && !r.problem && r.records == 0);
    kvt_reply_map *m = reopen(c);
    CHECK(!holds(m, 16) && !holds(m, 19));
    kvt_reply_map_free(m);
    CHECK(file_size(path) == HEAD);
}

/* A journal copied into another T2 directory, whose key differs: not replayed. */
static void test_copied(kvt_engine *e, kvt_cache *c, const char *path) {
    fill(c, path);
    size_t n = 0;
    uint8_t *b = (uint8_t *)kvt_test_read_file(path, &n);
    CHECK(b != NULL);
    const char *dir2 = kvt_test_path(kvt_test_tmpdir(), "kv2");
    kvt_cache *c2 = kvt_test_cache(e, dir2, 0);
    if (!c2 || !b) return free(b), kvt_cache_free(c2);
    char path2[512];
    snprintf(path2, sizeof path2, "%s/%s", dir2, KVT_REPLY_JOURNAL_NAME);
    write_file(path2, b, n);
    chmod(path2, 0600);
    free(b);
    kvt_reply_journal_report r;
    CHECK(kvt_reply_journal_verify(dir2, &r) == 0 && r.problem && strstr(r.why, "another directory's key"));
    kvt_reply_map *m = reopen(c2);
    CHECK(!holds(m, 16) && !holds(m, 19));
    kvt_reply_map_free(m);
    CHECK(file_size(path2) == HEAD);
    kvt_cache_free(c2);
    /* the same bytes in their own directory still replay */
    m = reopen(c);
    CHECK(holds(m, 16) && holds(m, 19));
    kvt_reply_map_free(m);
}

static void test_verify_edges(const char *dir, const char *path) {
    kvt_reply_journal_report r;
    const char *target = kvt_test_path(kvt_test_tmpdir(), "elsewhere");
    CHECK(rename(path, target) == 0);
    CHECK(kvt_reply_journal_verify(dir, &r) == KVT_ENOTFOUND);
    CHECK(symlink(target, path) == 0);
    CHECK(kvt_reply_journal_verify(dir, &r) == 0 && r.problem && r.records == 0); /* a link: never followed */
    CHECK(unlink(path) == 0 && rename(target, path) == 0);
    CHECK(truncate(path, file_size(path) - 5) == 0);
    CHECK(kvt_reply_journal_verify(dir, &r) == 0 && r.problem && r.good + 1 == r.records && strstr(r.why, "cut short"));
}

/* A cache like kvt_test_cache's with T2's MAC off (--kv-disk-no-mac). */
static kvt_cache *no_mac_cache(kvt_engine *e, const char *dir) {
    kvt_cache_params cp = kvt_cache_default_params();
    cp.disk_dir = dir;
    cp.disk_bytes = 64 << 20;
    cp.disk_no_mac = 1;
    kvt_cache *c = NULL;
    CHECKF(kvt_cache_new(e, cp, &c) == 0, "no-MAC cache on %s: %s", dir, kvt_errmsg());
    return c;
}

/* Copies the file at from to to (0600). */
static void copy_file(const char *from, const char *to) {
    size_t n = 0;
    uint8_t *b = (uint8_t *)kvt_test_read_file(from, &n);
    CHECK(b != NULL);
    if (b) write_file(to, b, n);
    chmod(to, 0600);
    free(b);
}

/* With T2's MAC off the journal keeps records with their CRCs alone, marked
 * unsigned in its head, and replays them; it replays a signed journal too
 * (its MACs unchecked, as T2 then takes records on their CRCs) and rewrites
 * it unsigned. A server with a key never replays an unsigned journal; verify
 * passes one only where the directory has no key file. */
static void test_no_mac(kvt_engine *e, kvt_cache *c, const char *dir, const char *path) {
    const char *dir2 = kvt_test_path(kvt_test_tmpdir(), "kv-nomac");
    kvt_cache *c2 = no_mac_cache(e, dir2);
    if (!c2) return;
    char path2[512];
    snprintf(path2, sizeof path2, "%s/%s", dir2, KVT_REPLY_JOURNAL_NAME);
    long rec = fill(c2, path2) - MAC; /* no MAC field */
    CHECKF(file_size(path2) == HEAD + CAP * rec, "unsigned journal: %ld bytes, records of %ld", file_size(path2), rec);
    size_t n = 0;
    uint8_t *b = (uint8_t *)kvt_test_read_file(path2, &n);
    CHECK(b && n >= HEAD && kvt_rd32le(b + 28) == 0xffffffffu && kvt_rd32le(b + 32) == 0);
    free(b);
    kvt_reply_map *m = reopen(c2);
    CHECK(holds(m, 16) && holds(m, 19));
    kvt_reply_map_free(m);
    kvt_reply_journal_report r;
    CHECK(kvt_reply_journal_verify(dir2, &r) == 0);
    CHECKF(r.records == CAP && r.good == CAP && r.unsigned_records && !r.problem && !r.why[0],
           "verify of an unsigned journal, no key file: %zu records, %zu good: %s", r.records, r.good, r.why);
    /* a flipped byte in an unsigned record is still caught by its CRC */
    copy_file(path2, kvt_test_path(kvt_test_tmpdir(), "unsigned"));
    b = (uint8_t *)kvt_test_read_file(path2, &n);
    CHECK(b && n == (size_t)(HEAD + CAP * rec));
    if (b) b[HEAD + rec + 12] ^= 1, write_file(path2, b, n);
    free(b);
    CHECK(kvt_reply_journal_verify(dir2, &r) == 0);
    CHECKF(r.problem && r.good == CAP - 1 && r.bad_at == (size_t)(HEAD + rec) && strstr(r.why, "checksum"),
           "verify of a flipped unsigned record: %zu good, bad at %zu: %s", r.good, r.bad_at, r.why);
    m = reopen(c2);
    CHECK(holds(m, 16) && !holds(m, 17));
    kvt_reply_map_free(m);
    /* the unsigned journal in a directory with a key: verify fails it, a server with MAC on never replays it */
    copy_file(kvt_test_path(kvt_test_tmpdir(), "unsigned"), path);
    CHECK(kvt_reply_journal_verify(dir, &r) == 0);
    CHECKF(r.problem && r.unsigned_records && strstr(r.why, "no MAC though the directory has a key file"),
           "verify of an unsigned journal beside a key file: %s", r.why);
    m = reopen(c);
    CHECK(!holds(m, 16) && !holds(m, 19));
    kvt_reply_map_free(m);
    CHECK(file_size(path) == HEAD);
    CHECK(kvt_reply_journal_verify(dir, &r) == 0 && !r.unsigned_records && !r.problem);
    /* a signed journal under MAC off: replayed on its CRCs, then rewritten unsigned */
    long signed_rec = fill(c, path);
    copy_file(path, path2);
    m = reopen(c2);
    CHECK(holds(m, 16) && holds(m, 19));
    kvt_reply_map_free(m);
    CHECKF(file_size(path2) == HEAD + CAP * (signed_rec - MAC), "rewritten unsigned: %ld bytes", file_size(path2));
    kvt_cache_free(c2);
}

int main(void) {
    kvt_model *model = kvt_test_tiny_model("rj.gguf", N_VOCAB);
    if (!model) return 1;
    kvt_engine *e = kvt_test_engine(model, 16, 64, 512);
    const char *dir = kvt_test_path(kvt_test_tmpdir(), "kv");
    kvt_cache *c = e ? kvt_test_cache(e, dir, 0) : NULL;
    if (c) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, KVT_REPLY_JOURNAL_NAME);
        test_journal(c, path);
        test_side_files(c, path);
        test_forged(c, dir, path);
        test_old_format(c, dir, path);
        test_copied(e, c, path);
        test_no_mac(e, c, dir, path);
        test_verify_edges(dir, path);
    }
    kvt_cache_free(c);
    kvt_engine_free(e);
    kvt_model_free(model);
    return kvt_test_done("test_reply_journal");
}
