// SPDX-License-Identifier: MIT
/* T3 on a real redis-server that this test starts on a free loopback port:
 * the key file is mandatory and checked; a round trip through the write queue
 * and through Redis; a pipelined batch in one round trip; corrupted values,
 * values of another namespace, under another key or forged with another MAC
 * key are misses, never wrong KV; Redis killed mid-run gives fast misses and
 * T3 comes back after a restart (reconnect with backoff); blocks put while
 * it is down are held (served from memory meanwhile) and reach Redis after
 * the restart without any call, up to the retry cap (the newest beyond it are
 * dropped and counted); DEBUG SLEEP longer
 * than the timeout gives misses while Redis still sleeps; a tiny maxmemory with
 * allkeys-lru evicts, and evictions are misses. zstd-compressed values are
 * read by a node that does not compress, and a corrupt compressed value is a
 * counted miss. Then two caches ("nodes") on
 * one Redis: node B restores node A's prompt from T3 with output and logits
 * bit-identical to a cold run, and a tenant salt keeps tenants apart.
 * Skips (77) only when redis-server is not installed. */
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "common.h"
#include "model.h"
#include "testutil.h"
#include "tier_disk.h"
#include "tier_remote.h"

#define B 8
#define PAYLOAD 16384
#define TIMEOUT_MS 200
#define SLOW_REDIS_SLEEP_S "3" /* DEBUG SLEEP in test_slow_redis: 15x the timeout */

static int port;
static pid_t redis_pid = -1;
static char url[64], key_file[512], other_key_file[512];
static kvt_hash128 ns = {0x1111, 0x2222};

/* ---- the redis-server this test owns ---- */

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &len)) return -1;
    close(fd);
    return ntohs(a.sin_port);
}

static redisContext *cli(void) {
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c && c->err) {
        redisFree(c);
        return NULL;
    }
    return c;
}

/* Runs one command on a fresh connection; returns the reply's integer or 0. */
static long long cmd(const char *fmt, ...) {
    redisContext *c = cli();
    if (!c) return -1;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    if (r) freeReplyObject(r);
    redisFree(c);
    return v;
}

static void redis_start(void) {
    char p[16];
    snprintf(p, sizeof p, "%d", port);
    redis_pid = fork();
    if (redis_pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execlp("redis-server", "redis-server", "--port", p, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--daemonize", "no", "--enable-debug-command", "local", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 100; i++) { /* up to 5 s */
        redisContext *c = cli();
        if (c) {
            redisFree(c);
            return;
        }
        usleep(50000);
    }
    fprintf(stderr, "redis-server did not start on port %d\n", port);
}

static void redis_stop(void) {
    if (redis_pid <= 0) return;
    kill(redis_pid, SIGKILL);
    waitpid(redis_pid, NULL, 0);
    redis_pid = -1;
}

static void on_exit_stop(void) { redis_stop(); }

static int have_redis(void) { return system("command -v redis-server >/dev/null 2>&1") == 0; }

static void write_key(const char *path, unsigned char fill, mode_t mode, size_t n) {
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    unsigned char k[64];
    for (size_t i = 0; i < sizeof k; i++) k[i] = (unsigned char)(fill + i * 7);
    CHECK(fd >= 0 && write(fd, k, n) == (ssize_t)n);
    close(fd);
    chmod(path, mode);
}

/* ---- blocks ---- */

typedef struct {
    kvt_hash128 hash, parent;
    int32_t tokens[B];
    unsigned char payload[PAYLOAD];
} block;

/* A chain of n blocks under root with payloads derived from seed. */
static block *make_chain(size_t n, kvt_hash128 root, unsigned seed) {
    block *b = kvt_xcalloc(n, sizeof *b);
    for (size_t i = 0; i < n; i++) {
        b[i].parent = i ? b[i - 1].hash : root;
        for (int t = 0; t < B; t++) b[i].tokens[t] = (int32_t)(seed * 1000 + i * B + (size_t)t);
        b[i].hash = kvt_block_hash(b[i].parent, b[i].tokens, B);
        for (size_t k = 0; k < PAYLOAD; k++) b[i].payload[k] = (unsigned char)(seed + i * 31 + k * 7);
    }
    return b;
}

/* retry_bytes for the next open_tier_with (0: the default), reset by it. */
static uint64_t next_retry_bytes;

static kvt_remote *open_tier_with(kvt_prefix *index, const char *kf, uint64_t size, int zstd_level) {
    kvt_remote_params p = kvt_remote_default_params();
    if (next_retry_bytes) p.retry_bytes = next_retry_bytes;
    next_retry_bytes = 0;
    if (zstd_level) {
        p.compress = KVT_REMOTE_COMPRESS_ZSTD;
        p.zstd_level = zstd_level;
    }
    p.url = url;
    p.key_file = kf;
    p.payload_bytes = PAYLOAD;
    p.block_tokens = B;
    p.ns = ns;
    p.index = index;
    p.timeout_ms = TIMEOUT_MS;
    p.write_timeout_ms = 1000;
    /* puts wait for queue room as long as it takes: the tests here are not about back-pressure,
     * and a slow writer (sanitizers, a loaded machine) must not turn puts into drops */
    p.put_wait_ms = 60000;
    if (size) p.size_bytes = size;
    kvt_remote *r = NULL;
    int rc = kvt_remote_open(&p, &r);
    CHECKF(rc == 0, "open: %s", kvt_errmsg());
    return r;
}

static kvt_remote *open_tier(kvt_prefix *index, const char *kf, uint64_t size) {
    return open_tier_with(index, kf, size, 0);
}

static void put_all(kvt_remote *r, const block *b, size_t n) {
    for (size_t i = 0; i < n; i++) CHECK(kvt_remote_put(r, b[i].hash, b[i].parent, b[i].tokens, b[i].payload) == 0);
}

/* Reads n blocks in one call; returns hits, checking every hit's payload is
 * exactly the block's (never another block's bytes). */
static size_t read_all(kvt_remote *r, const block *b, size_t n) {
    kvt_tier_read *q = kvt_xcalloc(n, sizeof *q);
    unsigned char *out = kvt_xmalloc(n * PAYLOAD);
    for (size_t i = 0; i < n; i++)
        q[i] = (kvt_tier_read){.hash = b[i].hash, .parent = b[i].parent, .tokens = b[i].tokens, .out = out + i * PAYLOAD};
    size_t hits = kvt_remote_get_many(r, q, n), seen = 0;
    for (size_t i = 0; i < n; i++)
        if (q[i].result == 0) {
            seen++;
            CHECKF(!memcmp(out + i * PAYLOAD, b[i].payload, PAYLOAD), "block %zu: wrong payload served", i);
        }
    CHECK(seen == hits);
    free(q);
    free(out);
    return hits;
}

/* Puts n blocks through w, flushes it, and checks that r reads all n back. */
static void put_flushed(kvt_remote *w, kvt_remote *r, const block *b, size_t n) {
    put_all(w, b, n);
    CHECK(kvt_remote_flush(w) == 0);
    CHECK(read_all(r, b, n) == n);
}

static size_t probe_all(kvt_remote *r, const block *b, size_t n, kvt_hash128 root) {
    kvt_hash128 *h = kvt_xmalloc(n * sizeof *h);
    int32_t *t = kvt_xmalloc(n * B * sizeof *t);
    for (size_t i = 0; i < n; i++) {
        h[i] = b[i].hash;
        memcpy(t + i * B, b[i].tokens, sizeof b[i].tokens);
    }
    size_t k = kvt_remote_probe(r, root, t, h, n);
    free(h);
    free(t);
    return k;
}

static void test_key_file(void) {
    kvt_remote_params p = kvt_remote_default_params();
    p.url = url;
    p.payload_bytes = PAYLOAD;
    p.block_tokens = B;
    kvt_remote *r = NULL;
    CHECK(kvt_remote_open(&p, &r) == KVT_EARG && !r && strstr(kvt_errmsg(), "--kv-remote-key-file"));
    char bad[600];
    snprintf(bad, sizeof bad, "%s/key-open", kvt_test_tmpdir());
    write_key(bad, 1, 0644, KVT_DISK_KEY_BYTES);
    p.key_file = bad;
    CHECK(kvt_remote_open(&p, &r) == -EACCES && !r);
    write_key(bad, 1, 0600, KVT_DISK_KEY_BYTES - 1);
    CHECK(kvt_remote_open(&p, &r) == KVT_EFORMAT && !r);
    p.key_file = key_file;
    p.url = "http://127.0.0.1:1";
    CHECK(kvt_remote_open(&p, &r) == KVT_EARG && !r);
    p.url = "redis://127.0.0.1:99999";
    CHECK(kvt_remote_open(&p, &r) == KVT_EARG && !r);
}

static void test_round_trip(void) {
    kvt_prefix *ia, *ib;
    CHECK(kvt_prefix_new(B, &ia) == 0 && kvt_prefix_new(B, &ib) == 0);
    kvt_hash128 root = {1, 2};
    block *b = make_chain(3, root, 1);
    kvt_remote *a = open_tier(ia, key_file, 0);
    kvt_remote_pause_writer(a, 1);
    put_all(a, b, 3);
    CHECK(kvt_remote_put(a, b[0].hash, b[0].parent, b[0].tokens, b[0].payload) == 1);
    kvt_remote_stats st;
    kvt_remote_get_stats(a, &st);
    CHECK(st.queued == 3 && st.known == 3);
    kvt_prefix_hit hits[3];
    int32_t toks[3 * B];
    for (int i = 0; i < 3; i++) memcpy(toks + i * B, b[i].tokens, sizeof b[i].tokens);
    CHECK(kvt_prefix_lookup(ia, root, toks, 3 * B, hits, 3) == 3 && hits[0].tier == KVT_TIER_T3);
    CHECK(read_all(a, b, 3) == 3); /* from the queue, before anything reached Redis */
    kvt_remote_get_stats(a, &st);
    CHECK(st.queue_hits == 3 && st.round_trips == 0);
    CHECK(kvt_remote_flush(a) == 0);
    kvt_remote_get_stats(a, &st);
    CHECK(st.puts == 3 && st.queued == 0 && st.bytes_written == 3 * st.value_bytes);
    CHECK(cmd("EXISTS kvt:%016llx%016llx:%016llx%016llx", (unsigned long long)ns.hi, (unsigned long long)ns.lo,
              (unsigned long long)b[0].hash.hi, (unsigned long long)b[0].hash.lo) == 1);

    /* node B knows nothing until it probes; then reads in one round trip */
    kvt_remote *rb = open_tier(ib, key_file, 0);
    CHECK(kvt_prefix_lookup(ib, root, toks, 3 * B, hits, 3) == 0);
    CHECK(probe_all(rb, b, 3, root) == 3);
    CHECK(kvt_prefix_lookup(ib, root, toks, 3 * B, hits, 3) == 3);
    CHECK(read_all(rb, b, 3) == 3);
    kvt_remote_get_stats(rb, &st);
    CHECK(st.hits == 3 && st.round_trips == 2 && st.bad == 0 && st.connected == 1);
    /* a block nobody wrote: probe stops there, a read misses */
    block *other = make_chain(1, root, 9);
    CHECK(probe_all(rb, other, 1, root) == 0);
    kvt_remote_close(rb);
    kvt_remote_close(a);
    kvt_prefix_stats ps;
    kvt_prefix_get_stats(ia, &ps);
    CHECK(ps.tier_entries[KVT_TIER_T3] == 0); /* close takes the tier's presence away */
    kvt_prefix_free(ia);
    kvt_prefix_free(ib);
    free(b);
    free(other);
}

static void test_batch(void) {
    const size_t n = 64;
    kvt_hash128 root = {3, 4};
    block *b = make_chain(n, root, 2);
    kvt_remote *a = open_tier(NULL, key_file, 0), *rb = open_tier(NULL, key_file, 0);
    put_flushed(a, rb, b, n);
    kvt_remote_stats st;
    kvt_remote_get_stats(rb, &st);
    CHECKF(st.round_trips == 1 && st.hits == n, "%llu round trips for %zu blocks", (unsigned long long)st.round_trips,
           n);
    kvt_remote_close(a);
    kvt_remote_close(rb);
    free(b);
}

/* SETs raw bytes under a block's key. */
static void set_raw(kvt_hash128 h, const void *v, size_t len) {
    char k[KVT_REMOTE_KEY_LEN + 1];
    kvt_remote_key(ns, h, k);
    redisContext *c = cli();
    redisReply *r = c ? redisCommand(c, "SET %s %b", k, v, len) : NULL;
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
}

/* A record for block bl under namespace rns, signed with key (NULL: none). */
static uint8_t *encode(const block *bl, kvt_hash128 rns, const uint8_t *key, size_t *len) {
    size_t hb = KVT_DISK_RECORD_HEADER_BYTES(B), cap = (hb + PAYLOAD + KVT_DISK_ALIGN) / KVT_DISK_ALIGN * KVT_DISK_ALIGN;
    uint8_t *rec = kvt_xcalloc(1, cap);
    memcpy(rec + KVT_DISK_HEADER_FIXED, bl->tokens, sizeof bl->tokens);
    memcpy(rec + hb, bl->payload, PAYLOAD);
    kvt_disk_record_encode(rec, B, KVT_DISK_CODEC_RAW, PAYLOAD, PAYLOAD, rns, bl->hash, bl->parent, key,
                           key ? kvt_disk_record_key_id(key) : 0);
    *len = hb + PAYLOAD;
    return rec;
}

static void test_bad_values(void) {
    kvt_hash128 root = {5, 6};
    block *b = make_chain(6, root, 3);
    uint8_t key[KVT_DISK_KEY_BYTES], other[KVT_DISK_KEY_BYTES];
    int fd = open(key_file, O_RDONLY);
    CHECK(fd >= 0 && read(fd, key, sizeof key) == (ssize_t)sizeof key);
    close(fd);
    fd = open(other_key_file, O_RDONLY);
    CHECK(fd >= 0 && read(fd, other, sizeof other) == (ssize_t)sizeof other);
    close(fd);
    size_t len;
    /* 0: a valid record, then one payload byte flipped (the CRC catches it) */
    uint8_t *v = encode(&b[0], ns, key, &len);
    v[len - 100] ^= 1;
    set_raw(b[0].hash, v, len);
    free(v);
    /* 1: another namespace (another model or layout), signed with our key */
    kvt_hash128 ons = {0x9999, 0x2222};
    v = encode(&b[1], ons, key, &len);
    set_raw(b[1].hash, v, len);
    free(v);
    /* 2: signed under another writer's key */
    v = encode(&b[2], ns, other, &len);
    set_raw(b[2].hash, v, len);
    free(v);
    /* 3: no MAC at all (CRCs only) */
    v = encode(&b[3], ns, NULL, &len);
    set_raw(b[3].hash, v, len);
    free(v);
    /* 4: block 5's valid record stored under block 4's key */
    v = encode(&b[5], ns, key, &len);
    set_raw(b[4].hash, v, len);
    free(v);
    /* 5: truncated */
    v = encode(&b[5], ns, key, &len);
    set_raw(b[5].hash, v, len - 1);
    free(v);
    kvt_remote *r = open_tier(NULL, key_file, 0);
    CHECK(read_all(r, b, 6) == 0);
    kvt_remote_stats st;
    kvt_remote_get_stats(r, &st);
    CHECKF(st.bad == 6 && st.misses == 6, "%llu bad", (unsigned long long)st.bad);
    /* the control: a correct record under the right key is served */
    v = encode(&b[0], ns, key, &len);
    set_raw(b[0].hash, v, len);
    free(v);
    CHECK(read_all(r, b, 1) == 1);
    kvt_remote_close(r);
    free(b);
}

/* The value stored under a block's key (malloc'd; *len), or NULL. */
static uint8_t *get_raw(kvt_hash128 h, size_t *len) {
    char k[KVT_REMOTE_KEY_LEN + 1];
    kvt_remote_key(ns, h, k);
    redisContext *c = cli();
    redisReply *r = c ? redisCommand(c, "GET %s", k) : NULL;
    uint8_t *v = NULL;
    if (r && r->type == REDIS_REPLY_STRING) {
        v = kvt_xmalloc(r->len);
        memcpy(v, r->str, r->len);
        *len = r->len;
    }
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
    return v;
}

/* --kv-remote-compress zstd: values are stored compressed (the codec field
 * says so) and a node that does not compress reads them; a payload that does
 * not shrink is stored raw; a compressed value altered in Redis, one that is
 * correctly signed but does not decode, and one longer than any value are
 * misses counted as bad, and the rest of the pipeline is still served. */
static void test_compressed(void) {
    kvt_hash128 root = {11, 12};
    block *b = make_chain(6, root, 6);
    uint64_t s = 42;
    for (size_t k = 0; k < PAYLOAD; k++) { /* block 5: random bytes, which zstd cannot shrink */
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        b[5].payload[k] = (unsigned char)s;
    }
    kvt_remote *a = open_tier_with(NULL, key_file, 0, 1), *rb = open_tier(NULL, key_file, 0);
    put_all(a, b, 6);
    CHECK(kvt_remote_flush(a) == 0);
    kvt_remote_stats st;
    kvt_remote_get_stats(a, &st);
    CHECKF(st.compressed == 5 && st.incompressible == 1 && st.payload_written == 6 * PAYLOAD &&
               st.bytes_written < 5 * st.value_bytes / 2 + st.value_bytes,
           "%llu compressed, %llu raw, %llu bytes written", (unsigned long long)st.compressed,
           (unsigned long long)st.incompressible, (unsigned long long)st.bytes_written);
    size_t len, len5;
    uint8_t *v = get_raw(b[0].hash, &len), *raw5 = get_raw(b[5].hash, &len5);
    kvt_disk_record rec;
    CHECK(v && kvt_disk_record_parse(v, len, 1, &rec) == 0 && rec.codec == KVT_DISK_CODEC_ZSTD && len < st.value_bytes);
    CHECK(raw5 && kvt_disk_record_parse(raw5, len5, 1, &rec) == 0 && rec.codec == KVT_DISK_CODEC_RAW);
    free(raw5);
    CHECK(read_all(rb, b, 6) == 6); /* the reader does not compress; it decodes either */

    /* 0: a byte of the compressed payload flipped; 1: signed with our key but
     * not zstd; 2: longer than any value */
    if (v) {
        v[len - 3] ^= 0x40;
        set_raw(b[0].hash, v, len);
    }
    free(v);
    uint8_t key[KVT_DISK_KEY_BYTES];
    int fd = open(key_file, O_RDONLY);
    CHECK(fd >= 0 && read(fd, key, sizeof key) == (ssize_t)sizeof key);
    close(fd);
    size_t hb = KVT_DISK_RECORD_HEADER_BYTES(B), garbage = 100;
    uint8_t *bad = kvt_xcalloc(1, hb + PAYLOAD + KVT_DISK_ALIGN);
    memcpy(bad + KVT_DISK_HEADER_FIXED, b[1].tokens, sizeof b[1].tokens);
    memset(bad + hb, 0xab, garbage);
    kvt_disk_record_encode(bad, B, KVT_DISK_CODEC_ZSTD, PAYLOAD, garbage, ns, b[1].hash, b[1].parent, key,
                           kvt_disk_record_key_id(key));
    set_raw(b[1].hash, bad, hb + garbage);
    CHECK(kvt_disk_record_parse(bad, hb + garbage, 1, &rec) == 0 && kvt_disk_record_check_mac(&rec, key) == 0);
    free(bad);
    uint8_t *big = kvt_xcalloc(1, st.value_bytes + 1000);
    set_raw(b[2].hash, big, st.value_bytes + 1000);
    free(big);
    kvt_remote_stats before;
    kvt_remote_get_stats(rb, &before);
    CHECK(read_all(rb, b, 6) == 3); /* 3, 4 and 5 still arrive, after the bad ones in the same pipeline */
    kvt_remote_get_stats(rb, &st);
    CHECKF(st.bad - before.bad == 3 && st.connected == 1, "%llu bad", (unsigned long long)(st.bad - before.bad));
    kvt_remote_close(a);
    kvt_remote_close(rb);
    free(b);
}

/* Polls r's stats until want blocks held since open were sent to Redis (the
 * writer does it on its own schedule); 1 if they were within 60 s. */
static int wait_retry_sent(kvt_remote *r, uint64_t want) {
    kvt_remote_stats st;
    for (int i = 0; i < 3000; i++) {
        kvt_remote_get_stats(r, &st);
        if (st.retry_sent >= want) return 1;
        usleep(20000);
    }
    printf("retry_sent %llu, want %llu\n", (unsigned long long)st.retry_sent, (unsigned long long)want);
    return 0;
}

static void test_redis_down(void) {
    kvt_hash128 root = {7, 8};
    block *b = make_chain(8, root, 4);
    kvt_remote *r = open_tier(NULL, key_file, 0);
    put_flushed(r, r, b, 4);
    redis_stop(); /* killed mid-run */
    CHECK(read_all(r, b, 4) == 0);
    CHECK(read_all(r, b, 4) == 0); /* backing off: not even a connect */
    put_all(r, b + 4, 2);
    kvt_remote_flush(r); /* the writer cannot reach Redis: held, and the flush does not wait for it */
    kvt_remote_stats st;
    kvt_remote_get_stats(r, &st);
    CHECKF(st.errors > 0 && st.connected == 0 && st.retry_held == 2 && st.dropped == 0 && st.known == 2,
           "errors %llu connected %d held %llu dropped %llu known %llu", (unsigned long long)st.errors, st.connected,
           (unsigned long long)st.retry_held, (unsigned long long)st.dropped, (unsigned long long)st.known);
    CHECK(read_all(r, b + 4, 2) == 2); /* served from memory meanwhile */
    uint64_t connects = st.connects;
    redis_start(); /* empty: no persistence */
    CHECK(wait_retry_sent(r, 2));
    kvt_remote_get_stats(r, &st);
    CHECK(st.retry_held == 0 && st.dropped == 0 && st.puts == 6);
    /* another node, with nothing queued or held, reads them from Redis */
    kvt_remote *r2 = open_tier(NULL, key_file, 0);
    CHECK(read_all(r2, b + 4, 2) == 2);
    kvt_remote_get_stats(r2, &st);
    CHECK(st.hits == 2 && st.queue_hits == 0);
    kvt_remote_close(r2);
    usleep((KVT_REMOTE_BACKOFF_MAX_MS + 200) * 1000); /* past the read connection's backoff */
    CHECK(read_all(r, b, 4) == 0);                    /* reconnects; the values died with the old server */
    put_flushed(r, r, b + 6, 2);
    kvt_remote_get_stats(r, &st);
    CHECKF(st.connects > connects && st.connected == 1, "connects %llu -> %llu", (unsigned long long)connects,
           (unsigned long long)st.connects);
    kvt_remote_close(r);
    free(b);
}

/* Held blocks stop at the retry cap: the oldest are kept (a prefix's first
 * blocks), the newest dropped and counted; with no retry memory all are
 * dropped. A removed held block is never sent. */
static void test_retry_cap(void) {
    kvt_hash128 root = {11, 12};
    block *b = make_chain(6, root, 6);
    uint64_t buf = (KVT_DISK_RECORD_HEADER_BYTES(B) + PAYLOAD + KVT_DISK_ALIGN - 1) / KVT_DISK_ALIGN * KVT_DISK_ALIGN;
    redis_stop();
    next_retry_bytes = 3 * buf;
    kvt_remote *r = open_tier(NULL, key_file, 0);
    put_all(r, b, 5);
    kvt_remote_flush(r);
    kvt_remote_stats st;
    kvt_remote_get_stats(r, &st);
    CHECKF(st.retry_held == 3 && st.retry_dropped == 2 && st.dropped == 2 && st.known == 3,
           "held %llu retry_dropped %llu dropped %llu known %llu", (unsigned long long)st.retry_held,
           (unsigned long long)st.retry_dropped, (unsigned long long)st.dropped, (unsigned long long)st.known);
    CHECK(read_all(r, b, 3) == 3 && read_all(r, b + 3, 2) == 0);
    CHECK(kvt_remote_remove(r, b[2].hash) == 0 && !kvt_remote_contains(r, b[2].hash));
    next_retry_bytes = 1; /* less than a block: nothing is held */
    kvt_remote *none = open_tier(NULL, key_file, 0);
    put_all(none, b + 5, 1);
    kvt_remote_flush(none);
    kvt_remote_get_stats(none, &st);
    CHECK(st.retry_held == 0 && st.dropped == 1 && st.known == 0);
    kvt_remote_close(none);
    redis_start();
    CHECK(wait_retry_sent(r, 2));
    char key[KVT_REMOTE_KEY_LEN + 1];
    long long present = 0;
    for (int i = 0; i < 6; i++) {
        kvt_remote_key(ns, b[i].hash, key);
        present |= cmd("EXISTS %s", key) << i;
    }
    CHECKF(present == 3, "blocks in Redis: mask %llx, want 3 (the removed third and the dropped never sent)", present);
    kvt_remote_close(r);
    free(b);
}

static void test_slow_redis(void) {
    kvt_hash128 root = {9, 10};
    block *b = make_chain(4, root, 5);
    kvt_remote *r = open_tier(NULL, key_file, 0);
    put_flushed(r, r, b, 4);
    redisContext *c = cli();
    CHECK(c != NULL);
    if (!c) return;
    /* Redis sleeps far longer than the tier's timeout: the read must give up
     * (misses, a timeout counted) while Redis still sleeps, i.e. before the
     * sleep's own reply is readable on c. No wall-clock bound is asserted. */
    redisAppendCommand(c, "DEBUG SLEEP " SLOW_REDIS_SLEEP_S);
    int done = 0;
    while (!done && redisBufferWrite(c, &done) == REDIS_OK) {
    }
    usleep(50000);
    CHECK(read_all(r, b, 4) == 0);
    struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
    CHECKF(poll(&pfd, 1, 0) == 0, "the read returned only after Redis woke (timeout %d ms, sleep %s s)", TIMEOUT_MS,
           SLOW_REDIS_SLEEP_S);
    kvt_remote_stats st;
    kvt_remote_get_stats(r, &st);
    CHECK(st.timeouts >= 1);
    void *rep;
    redisGetReply(c, &rep); /* the sleep is over */
    if (rep) freeReplyObject(rep);
    redisFree(c);
    usleep((KVT_REMOTE_BACKOFF_MIN_MS * 4 + 100) * 1000);
    put_all(r, b, 4); /* their presence went with the misses */
    CHECK(kvt_remote_flush(r) == 0);
    CHECK(read_all(r, b, 4) == 4); /* back */
    kvt_remote_close(r);
    free(b);
}

static void test_eviction(void) {
    CHECK(cmd("FLUSHALL") == 0);
    redisContext *c = cli();
    redisReply *x = c ? redisCommand(c, "CONFIG SET maxmemory 3mb") : NULL;
    if (x) freeReplyObject(x);
    x = c ? redisCommand(c, "CONFIG SET maxmemory-policy allkeys-lru") : NULL;
    if (x) freeReplyObject(x);
    if (c) redisFree(c);
    const size_t n = 400; /* 400 x 16 KiB: about twice maxmemory */
    kvt_hash128 root = {11, 12};
    block *b = make_chain(n, root, 6);
    kvt_remote *a = open_tier(NULL, key_file, 0), *rb = open_tier(NULL, key_file, 0);
    put_all(a, b, n);
    kvt_remote_flush(a);
    size_t hits = read_all(rb, b, n);
    CHECKF(hits > 0 && hits < n, "%zu of %zu survived a 3 MB maxmemory", hits, n);
    kvt_remote_stats st;
    kvt_remote_get_stats(rb, &st);
    CHECK(st.misses == n - hits && st.bad == 0);
    kvt_remote_close(a);
    kvt_remote_close(rb);
    free(b);
    c = cli();
    x = c ? redisCommand(c, "CONFIG SET maxmemory 0") : NULL;
    if (x) freeReplyObject(x);
    if (c) redisFree(c);
}

/* ---- two caches on one Redis: bit-identical output from T3 ---- */

static kvt_model *model;

static kvt_cache *node(kvt_engine *e, const char *kf) {
    kvt_cache_params cp = kvt_cache_default_params();
    cp.remote_url = url;
    cp.remote_key_file = kf;
    cp.remote_bytes = 64 << 20;
    cp.write_through = 1;
    cp.restore = KVT_RESTORE_ALWAYS;
    kvt_cache *c = NULL;
    int rc = kvt_cache_new(e, cp, &c);
    CHECKF(rc == 0, "cache: %s", kvt_errmsg());
    return c;
}

static void test_two_nodes(void) {
    model = kvt_test_tiny_model("remote.gguf", 600);
    if (!model) {
        CHECK(0);
        return;
    }
    int32_t n_vocab = model->hp.n_vocab;
    int32_t p[5 * B + 3];
    unsigned seed = 7;
    kvt_test_random_tokens(p, 5 * B + 3, n_vocab, &seed);
    const int32_t n = 5 * B + 3;

    kvt_engine *e0 = kvt_test_engine(model, B, 40, 256);
    kvt_test_gen cold = kvt_test_generate(e0, NULL, p, n, 8, NULL);
    kvt_engine_free(e0);

    kvt_engine *ea = kvt_test_engine(model, B, 40, 256), *eb = kvt_test_engine(model, B, 40, 256);
    kvt_cache *a = node(ea, key_file), *b = node(eb, key_file);
    if (!a || !b) return;
    kvt_test_gen ga = kvt_test_generate(ea, a, p, n, 8, NULL);
    CHECK(kvt_test_same(&ga, &cold));
    CHECK(kvt_cache_flush(a) == 0); /* the write-through queue reached Redis */
    kvt_test_gen gb = kvt_test_generate(eb, b, p, n, 8, NULL);
    CHECKF(gb.res.tier_tokens[KVT_TIER_T3] >= 5 * B, "node B restored %d tokens from T3",
           gb.res.tier_tokens[KVT_TIER_T3]);
    CHECK(kvt_test_same(&gb, &cold));
    /* another tenant finds nothing of it */
    kvt_test_gen gs = kvt_test_generate(eb, b, p, n, 8, "tenant-b");
    CHECK(gs.res.n_reused == 0);
    kvt_cache_stats st;
    kvt_cache_get_stats(b, &st);
    CHECK(st.t3_restores >= 5 && st.t3_probes >= 1 && st.t3_connected == 1);
    /* a node with another key cannot read what A wrote: misses, same output */
    kvt_engine *ec = kvt_test_engine(model, B, 40, 256);
    kvt_cache *cc = node(ec, other_key_file);
    kvt_test_gen gc = kvt_test_generate(ec, cc, p, n, 8, NULL);
    CHECK(gc.res.tier_tokens[KVT_TIER_T3] == 0 && kvt_test_same(&gc, &cold));
    kvt_cache_get_stats(cc, &st);
    CHECK(st.t3_bad >= 1);
    kvt_test_gen_free(&gc);
    kvt_cache_free(cc);
    kvt_engine_free(ec);

    /* sharing without write-through: a node with a disk tier puts what it
     * persists into T3 as well (tier.h "Sharing"); a fresh node finds it */
    CHECK(cmd("FLUSHALL") == 0);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/node-d", kvt_test_tmpdir());
    kvt_engine *ed = kvt_test_engine(model, B, 40, 256);
    kvt_cache_params cp = kvt_cache_default_params();
    cp.disk_dir = dir;
    cp.disk_bytes = 64 << 20;
    cp.remote_url = url;
    cp.remote_key_file = key_file;
    cp.remote_bytes = 64 << 20;
    kvt_cache *d = NULL;
    CHECKF(kvt_cache_new(ed, cp, &d) == 0, "cache: %s", kvt_errmsg());
    if (d) {
        kvt_test_gen gd = kvt_test_generate(ed, d, p, n, 8, NULL);
        CHECK(kvt_cache_flush(d) == 0); /* T0 -> T2, shared into T3 */
        kvt_cache_get_stats(d, &st);
        CHECKF(st.t2_demotions >= 5 && st.t3_demotions == st.t2_demotions && st.t3_writes == st.t3_demotions,
               "T2 %llu, T3 %llu demotions, %llu written", (unsigned long long)st.t2_demotions,
               (unsigned long long)st.t3_demotions, (unsigned long long)st.t3_writes);
        kvt_engine *ee = kvt_test_engine(model, B, 40, 256);
        kvt_cache *ce = node(ee, key_file);
        kvt_test_gen ge = kvt_test_generate(ee, ce, p, n, 8, NULL);
        CHECKF(ge.res.tier_tokens[KVT_TIER_T3] >= 5 * B && kvt_test_same(&ge, &cold), "fresh node: %d from T3",
               ge.res.tier_tokens[KVT_TIER_T3]);
        kvt_test_gen_free(&ge);
        kvt_test_gen_free(&gd);
        kvt_cache_free(ce);
        kvt_engine_free(ee);
        kvt_cache_free(d);
    }
    kvt_engine_free(ed);
    kvt_test_gen_free(&gs);
    kvt_test_gen_free(&gb);
    kvt_test_gen_free(&ga);
    kvt_test_gen_free(&cold);
    kvt_cache_free(a);
    kvt_cache_free(b);
    kvt_engine_free(ea);
    kvt_engine_free(eb);
    kvt_model_free(model);
}

int main(void) {
    if (!have_redis()) kvt_test_skip("redis-server is not installed (apt-get install redis-server)");
    port = free_port();
    CHECK(port > 0);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    snprintf(key_file, sizeof key_file, "%s/remote.key", kvt_test_tmpdir());
    snprintf(other_key_file, sizeof other_key_file, "%s/other.key", kvt_test_tmpdir());
    write_key(key_file, 3, 0600, KVT_DISK_KEY_BYTES);
    write_key(other_key_file, 99, 0600, KVT_DISK_KEY_BYTES);
    atexit(on_exit_stop);
    redis_start();
    test_key_file();
    test_round_trip();
    test_batch();
    test_bad_values();
    test_compressed();
    test_redis_down();
    test_retry_cap();
    test_slow_redis();
    test_eviction();
    test_two_nodes();
    redis_stop();
    return kvt_test_done("test_tier_remote");
}
