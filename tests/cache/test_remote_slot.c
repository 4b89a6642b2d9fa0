// SPDX-License-Identifier: MIT
/* The Redis Cluster key slot of the remote tier (tier_remote.h "Cluster"):
 * CRC16 against its known check value, slots of known keys as Redis computes
 * them, the hash tag rules (the first '{' and the first '}' after it; an
 * empty tag hashes the whole key), and that T3's own keys spread over the
 * slot space. Also the cluster URLs that kvt_remote_open refuses before it
 * touches the network or the key file: TLS, a database number, an unknown
 * parameter, a host without a port; and in their messages a password is
 * shown as "***", and a bad %XX escape in it is refused. And the password
 * file's checks, which also come before the network: one line (a trailing
 * newline or CRLF dropped), not empty, not too long, not with a URL password
 * too, and a user@ alone needs one; no message shows the password. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* 1 if opening the tier on url is refused as a bad argument (before any connection), with nothing
 * left open. */
static int url_refused(const char *url) {
    kvt_remote_params p = kvt_remote_default_params();
    p.url = url;
    p.payload_bytes = 1024;
    p.key_file = "/nonexistent/key";
    kvt_remote *r = NULL;
    return kvt_remote_open(&p, &r) == KVT_EARG && !r;
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
        CHECKF(url_refused(bad[i]), "%s", bad[i]);
    }
}

/* URLs refused for another reason: the message keeps the user, never the password. */
static void test_secret_urls(void) {
    const char *bad[] = {"redis-cluster://kvt:TopSecret@127.0.0.1:7000/2",
                         "redis-cluster://kvt:TopSecret@127.0.0.1",
                         "redis-cluster://:TopSecret@127.0.0.1:7000?replicas=yes",
                         "redis://kvt:TopSecret@127.0.0.1:99999",
                         "redis://kvt:TopSecret@127.0.0.1:6379/x",
                         "redis://kvt:Top%zzSecret@127.0.0.1:6379",
                         "redis-cluster://kvt:TopSecret%4@127.0.0.1:7000",
                         "rediss://kvt:TopSecret@127.0.0.1:6379"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECKF(url_refused(bad[i]), "%s", bad[i]);
        CHECKF(!strstr(kvt_errmsg(), "Secret"), "%s: %s", bad[i], kvt_errmsg());
        CHECKF(strstr(kvt_errmsg(), "--kv-remote") != NULL, "%s: %s", bad[i], kvt_errmsg());
    }
    kvt_remote_params p = kvt_remote_default_params();
    p.url = "redis-cluster://kvt:TopSecret@127.0.0.1:7000/2";
    p.payload_bytes = 1024;
    kvt_remote *r = NULL;
    CHECK(kvt_remote_open(&p, &r) == KVT_EARG);
    CHECKF(strstr(kvt_errmsg(), "kvt:***@127.0.0.1:7000") != NULL, "%s", kvt_errmsg());
    p.url = "redis://kvt:Top%zzSecret@127.0.0.1:6379";
    CHECK(kvt_remote_open(&p, &r) == KVT_EARG);
    CHECKF(strstr(kvt_errmsg(), "password") != NULL, "%s", kvt_errmsg());
}

static char tmpdir[] = "/tmp/kvt_pwfile_XXXXXX";

/* Opens the tier with url and a password file holding text (mode 0600):
 * returns kvt_remote_open's result, which never gets to the network here
 * (the key file does not exist). */
static int open_with_password(const char *url, const char *text, size_t len) {
    char path[128];
    snprintf(path, sizeof path, "%s/pw", tmpdir);
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0 && write(fd, text, len) == (ssize_t)len);
    close(fd);
    kvt_remote_params p = kvt_remote_default_params();
    p.url = url;
    p.payload_bytes = 1024;
    p.key_file = "/nonexistent/key";
    p.password_file = path;
    kvt_remote *r = NULL;
    int rc = kvt_remote_open(&p, &r);
    CHECK(!r);
    CHECKF(!strstr(kvt_errmsg(), "Secret"), "%s", kvt_errmsg());
    return rc;
}

static void test_password_files(void) {
    CHECK(mkdtemp(tmpdir) != NULL);
    const char *u = "redis://kvt@127.0.0.1:6379";
    /* accepted: the open goes on to the key file */
    const char *good[] = {"TopSecret\n", "TopSecret", "TopSecret\r\n", "Top Secret:@/,%25\n"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        open_with_password(u, good[i], strlen(good[i]));
        CHECKF(strstr(kvt_errmsg(), "remote key file") != NULL, "%zu: %s", i, kvt_errmsg());
    }
    open_with_password("redis-cluster://127.0.0.1:7000,127.0.0.1:7001/2", "TopSecret\n", 10);
    CHECKF(strstr(kvt_errmsg(), "database") != NULL, "%s", kvt_errmsg()); /* the URL's checks come first */
    const char *bad[] = {"", "\n", "Top\nSecret\n", "TopSecret\n\n", "Top\rSecret"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECKF(open_with_password(u, bad[i], strlen(bad[i])) == KVT_EARG, "%zu", i);
        CHECKF(strstr(kvt_errmsg(), "--kv-remote-password-file") != NULL, "%zu: %s", i, kvt_errmsg());
    }
    CHECK(open_with_password(u, "Top\0Secret", 10) == KVT_EARG);
    char longpw[400];
    memset(longpw, 'S', sizeof longpw);
    CHECK(open_with_password(u, longpw, sizeof longpw) == KVT_EARG);
    CHECKF(strstr(kvt_errmsg(), "longer than") != NULL, "%s", kvt_errmsg());
    CHECK(open_with_password("redis://kvt:TopSecret@127.0.0.1:6379", "TopSecret\n", 10) == KVT_EARG);
    CHECKF(strstr(kvt_errmsg(), "carries a password and --kv-remote-password-file") != NULL, "%s", kvt_errmsg());
    CHECK(open_with_password("redis-cluster://:TopSecret@127.0.0.1:7000", "TopSecret\n", 10) == KVT_EARG);
    /* a user@ without the file: refused before the key file, pointing at the flag */
    kvt_remote_params p = kvt_remote_default_params();
    p.url = u;
    p.payload_bytes = 1024;
    p.key_file = "/nonexistent/key";
    kvt_remote *r = NULL;
    CHECK(kvt_remote_open(&p, &r) == KVT_EARG && !r);
    CHECKF(strstr(kvt_errmsg(), "--kv-remote-password-file") != NULL, "%s", kvt_errmsg());
    char path[128];
    snprintf(path, sizeof path, "%s/pw", tmpdir);
    unlink(path);
    rmdir(tmpdir);
}

int main(void) {
    test_crc16();
    test_hash_tags();
    test_spread();
    test_bad_urls();
    test_secret_urls();
    test_password_files();
    return kvt_test_done("test_remote_slot");
}
