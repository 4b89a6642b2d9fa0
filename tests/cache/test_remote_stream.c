// SPDX-License-Identifier: MIT
/* T3's reads of raw values, whose payload is taken from the socket piece by
 * piece and copied out before the value's MAC is checked, against a scripted
 * server on a unix socket (no redis-server needed) that sends the replies a
 * real one never would: a connection that dies in the middle of a payload
 * (the value is a miss, the values before it are served, and the tier
 * reconnects), a reply whose length says more than any value holds, values
 * whose payload or header is wrong after a correct start, and a bulk reply
 * that does not end in CRLF. A refused value is never served, whatever part
 * of it was copied out, and the replies after it are read in step. And a
 * read's deadline: values that keep arriving are all served past the
 * timeout, while a server that goes silent still ends the call. */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "blockhash.h"
#include "common.h"
#include "testutil.h"
#include "tier_disk.h"
#include "tier_remote.h"

#define B 8
#define PAYLOAD (256u << 10) /* several of the reader's pieces */
#define HB KVT_DISK_RECORD_HEADER_BYTES(B)
#define VALUE (HB + PAYLOAD)
#define WAIT_S 20.0 /* bound on polling for a reconnect */

static const kvt_hash128 ns = {0x51, 0x52};
static uint8_t key[KVT_DISK_KEY_BYTES];
static char key_file[512], sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];

/* ---- the scripted server: one connection per script ---- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static uint8_t *script;   /* the bytes the next connection gets, after its first GET */
static size_t script_len; /* NULL script: the server stops */
static int script_gets;   /* GETs the client sends in all: read before the connection closes */
static size_t pause_at;   /* the server stops sending for pause_ms after this many script bytes */
static int pause_ms;
static int served, stopping; /* scripts sent */
static int listen_fd = -1;

/* The client's commands read so far on one connection. */
typedef struct {
    char buf[4096];
    size_t have;
    int seen; /* GETs */
} get_reader;

/* Reads the client's commands until n GETs in all have arrived. 0 or -1. */
static int read_gets(int fd, get_reader *g, int n) {
    while (g->seen < n) {
        ssize_t k = read(fd, g->buf + g->have, sizeof g->buf - g->have);
        if (k <= 0) return -1;
        g->have += (size_t)k;
        for (char *s = g->buf; (s = memmem(s, g->have - (size_t)(s - g->buf), "GET\r\n", 5)); s += 5) g->seen++;
        size_t keep = KVT_MIN(g->have, (size_t)4); /* a GET split over two reads */
        memmove(g->buf, g->buf + g->have - keep, keep);
        g->have = keep;
    }
    return 0;
}

/* Writes s[0..len) to fd; 0 or -1. */
static int write_all(int fd, const uint8_t *s, size_t len) {
    for (size_t off = 0; off < len;) {
        ssize_t k = write(fd, s + off, len - off);
        if (k <= 0) return -1;
        off += (size_t)k;
    }
    return 0;
}

static void *server_main(void *arg) {
    (void)arg;
    for (;;) {
        int fd = accept(listen_fd, NULL, NULL);
        if (fd < 0) return NULL;
        pthread_mutex_lock(&mu);
        while (!script && !stopping) pthread_cond_wait(&cv, &mu);
        uint8_t *s = script;
        size_t len = script_len, at = KVT_MIN(pause_at, len);
        int gets = script_gets, pause = pause_ms;
        script = NULL;
        pause_at = (size_t)-1;
        pause_ms = 0;
        pthread_mutex_unlock(&mu);
        if (!s) {
            close(fd);
            return NULL;
        }
        /* the tier keeps only a few GETs in flight, sending more as replies
         * arrive: the script starts at the first, and the rest are read
         * before the connection closes, so that none is sent to a closed one */
        get_reader g = {.seen = 0};
        if (!read_gets(fd, &g, 1) && !write_all(fd, s, at)) {
            if (pause) usleep((useconds_t)pause * 1000); /* the scripted silence, not a wait for a condition */
            if (!write_all(fd, s + at, len - at)) read_gets(fd, &g, gets);
        }
        close(fd); /* the end of the script ends the connection */
        free(s);
        pthread_mutex_lock(&mu);
        served++;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
}

/* ---- blocks and their values ---- */

typedef struct {
    kvt_hash128 hash, parent;
    int32_t tokens[B];
    uint8_t *payload;
} block;

static block *make_chain(size_t n, unsigned seed) {
    block *b = kvt_xcalloc(n, sizeof *b);
    for (size_t i = 0; i < n; i++) {
        b[i].parent = i ? b[i - 1].hash : (kvt_hash128){seed, 7};
        for (int t = 0; t < B; t++) b[i].tokens[t] = (int32_t)(seed * 1000 + i * B + (size_t)t);
        b[i].hash = kvt_block_hash(b[i].parent, b[i].tokens, B);
        b[i].payload = kvt_xmalloc(PAYLOAD);
        for (size_t k = 0; k < PAYLOAD; k++) b[i].payload[k] = (uint8_t)(seed + i * 31 + k * 7 + (k >> 12));
    }
    return b;
}

static void free_chain(block *b, size_t n) {
    for (size_t i = 0; i < n; i++) free(b[i].payload);
    free(b);
}

/* A growing script of replies. */
typedef struct {
    uint8_t *buf;
    size_t len, cap;
} reply;

static void put_bytes(reply *o, const void *p, size_t n) {
    if (o->len + n > o->cap) {
        o->cap = (o->len + n) * 2;
        o->buf = kvt_xrealloc(o->buf, o->cap);
    }
    memcpy(o->buf + o->len, p, n);
    o->len += n;
}

/* The signed value of bl, as the tier writes it (VALUE bytes, malloc'd). */
static uint8_t *value_of(const block *bl) {
    size_t cap = (VALUE + KVT_DISK_ALIGN) / KVT_DISK_ALIGN * KVT_DISK_ALIGN;
    uint8_t *v = kvt_xcalloc(1, cap);
    memcpy(v + KVT_DISK_HEADER_FIXED, bl->tokens, sizeof bl->tokens);
    memcpy(v + HB, bl->payload, PAYLOAD);
    kvt_disk_record_encode(v, B, KVT_DISK_CODEC_RAW, PAYLOAD, PAYLOAD, ns, bl->hash, bl->parent, key,
                           kvt_disk_record_key_id(key));
    return v;
}

/* A bulk reply: its length line says len, then the first `send` bytes of v
 * (all when send == len), then end (the CRLF, or whatever the test wants). */
static void put_bulk(reply *o, const uint8_t *v, size_t len, size_t send, const char *end) {
    char line[32];
    int n = snprintf(line, sizeof line, "$%zu\r\n", len);
    put_bytes(o, line, (size_t)n);
    put_bytes(o, v, send);
    put_bytes(o, end, strlen(end));
}

/* ---- the tier's side ---- */

static kvt_remote *open_tier_with(uint32_t timeout_ms, double floor_mbps) {
    kvt_remote_params p = kvt_remote_default_params();
    char url[300];
    snprintf(url, sizeof url, "unix://%s", sock_path);
    p.url = url;
    p.key_file = key_file;
    p.payload_bytes = PAYLOAD;
    p.block_tokens = B;
    p.ns = ns;
    p.read_conns = 1; /* one connection: the script's replies are in request order */
    p.timeout_ms = timeout_ms;
    p.read_floor_mbps = floor_mbps;
    kvt_remote *r = NULL;
    CHECKF(kvt_remote_open(&p, &r) == 0, "open: %s", kvt_errmsg());
    return r;
}

static kvt_remote *open_tier(void) { return open_tier_with(5000, KVT_REMOTE_READ_FLOOR_MBPS); }

/* Hands the server its next script (o's bytes after `gets` GETs), then asks
 * for blocks b[0..n) until a call reaches it (the tier may be waiting out its
 * reconnect backoff). Returns the hits; hit[i] says which, and each hit's
 * payload is checked to be exactly its block's. */
static size_t run_script(kvt_remote *r, reply *o, int gets, const block *b, size_t n, int *hit) {
    pthread_mutex_lock(&mu);
    script = o->buf;
    script_len = o->len;
    script_gets = gets;
    int before = served;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    *o = (reply){0};
    kvt_tier_read *q = kvt_xcalloc(n, sizeof *q);
    uint8_t *out = kvt_xmalloc(n * PAYLOAD);
    size_t hits = 0;
    for (double t0 = kvt_now(); kvt_now() - t0 < WAIT_S;) {
        for (size_t i = 0; i < n; i++)
            q[i] = (kvt_tier_read){.hash = b[i].hash,
                                   .parent = b[i].parent,
                                   .tokens = b[i].tokens,
                                   .out = out + i * PAYLOAD};
        hits = kvt_remote_get_many(r, q, n);
        pthread_mutex_lock(&mu);
        /* a call that got values read this script; the server counts it only after closing the
         * connection, which can come after the call returned */
        while (hits && served == before) pthread_cond_wait(&cv, &mu);
        int done = served > before;
        pthread_mutex_unlock(&mu);
        if (done) break;
        CHECK(hits == 0);
        usleep(10000);
    }
    size_t seen = 0;
    for (size_t i = 0; i < n; i++) {
        hit[i] = q[i].result == 0;
        seen += (size_t)hit[i];
        if (hit[i]) CHECKF(!memcmp(out + i * PAYLOAD, b[i].payload, PAYLOAD), "block %zu: wrong payload served", i);
    }
    CHECK(seen == hits);
    free(q);
    free(out);
    return hits;
}

/* The connection closes in the middle of block 1's payload, after several
 * pieces of it were copied out: block 0 is served, 1 and 2 are misses and an
 * error is counted. Then a reply whose CRLF is wrong after a correct value:
 * the protocol is broken there, so that value is not served either. */
static void test_dies_mid_payload(kvt_remote *r) {
    block *b = make_chain(3, 1);
    uint8_t *v0 = value_of(&b[0]), *v1 = value_of(&b[1]);
    reply o = {0};
    put_bulk(&o, v0, VALUE, VALUE, "\r\n");
    put_bulk(&o, v1, VALUE, HB + PAYLOAD / 2 + 1000, "");
    int hit[3];
    kvt_remote_stats st0, st;
    kvt_remote_get_stats(r, &st0);
    CHECK(run_script(r, &o, 3, b, 3, hit) == 1 && hit[0] && !hit[1] && !hit[2]);
    kvt_remote_get_stats(r, &st);
    CHECK(st.errors > st0.errors);

    put_bulk(&o, v0, VALUE, VALUE, "\r\n");
    put_bulk(&o, v1, VALUE, VALUE, "XY");
    CHECK(run_script(r, &o, 3, b, 3, hit) == 1 && hit[0] && !hit[1] && !hit[2]);
    free(v0);
    free(v1);
    free_chain(b, 3);
}

/* Replies that are whole but wrong, between correct ones: a length over any
 * value (dropped unread), a payload byte flipped in the last piece (the CRC
 * refuses it after the payload was copied out), another block's correct
 * value (its header refuses it), a value signed under another key (the MAC
 * refuses it), and one a byte short. Each is a counted miss, and the correct
 * values after each are served. */
static void test_wrong_values(kvt_remote *r) {
    block *b = make_chain(10, 2);
    uint8_t *v[10];
    for (int i = 0; i < 10; i++) v[i] = value_of(&b[i]);
    uint8_t *big = kvt_xcalloc(1, VALUE + 1);
    reply o = {0};
    put_bulk(&o, big, VALUE + 1, VALUE + 1, "\r\n"); /* 0: too long */
    put_bulk(&o, v[1], VALUE, VALUE, "\r\n");
    v[2][VALUE - 3] ^= 0x10;
    put_bulk(&o, v[2], VALUE, VALUE, "\r\n"); /* 2: payload altered */
    put_bulk(&o, v[3], VALUE, VALUE, "\r\n");
    put_bulk(&o, v[5], VALUE, VALUE, "\r\n"); /* 4: block 5's value */
    put_bulk(&o, v[5], VALUE, VALUE, "\r\n");
    uint8_t other[KVT_DISK_KEY_BYTES];
    memset(other, 0x77, sizeof other);
    kvt_disk_record_encode(v[6], B, KVT_DISK_CODEC_RAW, PAYLOAD, PAYLOAD, ns, b[6].hash, b[6].parent, other,
                           kvt_disk_record_key_id(key)); /* 6: our key's id, another key's MAC */
    put_bulk(&o, v[6], VALUE, VALUE, "\r\n");
    put_bulk(&o, v[7], VALUE, VALUE, "\r\n");
    put_bulk(&o, v[8], VALUE - 1, VALUE - 1, "\r\n"); /* 8: a byte short */
    put_bulk(&o, v[9], VALUE, VALUE, "\r\n");
    int hit[10];
    kvt_remote_stats st0, st;
    kvt_remote_get_stats(r, &st0);
    CHECK(run_script(r, &o, 10, b, 10, hit) == 5);
    for (int i = 0; i < 10; i++) CHECKF(hit[i] == (i & 1), "block %d: hit %d", i, hit[i]);
    kvt_remote_get_stats(r, &st);
    CHECKF(st.bad - st0.bad == 5, "%llu refused", (unsigned long long)(st.bad - st0.bad));
    for (int i = 0; i < 10; i++) free(v[i]);
    free(big);
    free_chain(b, 10);
}

/* The deadline moves on as values arrive: with a 100 ms timeout and a floor
 * of 0.25 MB/s, each value read (~256 KiB) earns about a second more. A
 * server that pauses 0.4 s after the first value (past the timeout, within
 * what that value earned) has all three served; one that pauses 2 s (past
 * both) has only the first served, the call ended by its deadline. */
static void test_deadline_moves(void) {
    kvt_remote *r = open_tier_with(100, 0.25);
    if (!r) return;
    block *b = make_chain(3, 3);
    uint8_t *v[3];
    for (int i = 0; i < 3; i++) v[i] = value_of(&b[i]);
    reply o = {0};
    for (int i = 0; i < 3; i++) put_bulk(&o, v[i], VALUE, VALUE, "\r\n");
    int hit[3];
    kvt_remote_stats st0, st;
    kvt_remote_get_stats(r, &st0);
    pthread_mutex_lock(&mu);
    pause_at = (o.len / 3); /* after the first value */
    pause_ms = 400;
    pthread_mutex_unlock(&mu);
    CHECK(run_script(r, &o, 3, b, 3, hit) == 3);
    kvt_remote_get_stats(r, &st);
    CHECKF(st.timeouts == st0.timeouts, "%llu timeouts", (unsigned long long)(st.timeouts - st0.timeouts));

    for (int i = 0; i < 2; i++) put_bulk(&o, v[i], VALUE, VALUE, "\r\n");
    pthread_mutex_lock(&mu);
    pause_at = o.len / 2;
    pause_ms = 2000;
    pthread_mutex_unlock(&mu);
    CHECK(run_script(r, &o, 2, b, 2, hit) == 1 && hit[0] && !hit[1]);
    kvt_remote_get_stats(r, &st);
    CHECK(st.timeouts > st0.timeouts);
    for (int i = 0; i < 3; i++) free(v[i]);
    free_chain(b, 3);
    kvt_remote_close(r);
}

int main(void) {
    snprintf(key_file, sizeof key_file, "%s/stream.key", kvt_test_tmpdir());
    int n = snprintf(sock_path, sizeof sock_path, "%s/redis.sock", kvt_test_tmpdir());
    if (n < 0 || (size_t)n >= sizeof sock_path)
        kvt_test_skip("the test directory's path is too long for a unix socket");
    for (size_t i = 0; i < sizeof key; i++) key[i] = (uint8_t)(i * 13 + 5);
    FILE *f = fopen(key_file, "wx");
    CHECK(f && fwrite(key, 1, sizeof key, f) == sizeof key);
    if (f) fclose(f);
    CHECK(chmod(key_file, 0600) == 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, sock_path, sizeof sock_path);
    listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(listen_fd >= 0 && bind(listen_fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(listen_fd, 4) == 0);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, server_main, NULL) == 0);
    kvt_remote *r = open_tier();
    if (r) {
        test_dies_mid_payload(r);
        test_wrong_values(r);
        kvt_remote_close(r);
    }
    test_deadline_moves();
    pthread_mutex_lock(&mu);
    stopping = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    shutdown(listen_fd, SHUT_RDWR);
    pthread_join(th, NULL);
    close(listen_fd);
    unlink(sock_path);
    return kvt_test_done("test_remote_stream");
}
