/* T3 on Redis (see tier_remote.h): connections with deadlines and backoff,
 * the known set and its index presence, the write queue and its writer
 * thread, pipelined reads and probes, and the SCAN/UNLINK maintenance. */
#include "tier_remote.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "disk_record.h"
#include "hmap128.h"

#define DEFAULT_SIZE (4ull << 30)
#define DEFAULT_PORT 6379
#define URL_REDIS "redis://"
#define URL_UNIX "unix://"
#define URL_PART_MAX 256
/* SETs sent in one pipelined batch by the writer. */
#define WRITE_BATCH_MAX 32
/* Cap on the known set whatever the budget says (index memory: B ids per block). */
#define KNOWN_MAX (1u << 22)
/* SCAN COUNT hint, and keys per UNLINK. */
#define SCAN_COUNT 1000
#define UNLINK_BATCH 500

/* One connection with its own reconnect schedule. Owned by one thread. */
typedef struct {
    redisContext *c;
    double next_try;   /* kvt_now() before which no reconnect is tried */
    double backoff_s;  /* the wait after the next failure */
    int up;
    const char *who;   /* "reads", "writes": for log lines */
} conn;

typedef struct {
    kvt_hash128 hash, parent;
    char key[KVT_REMOTE_KEY_LEN + 1];
    uint8_t *buf;  /* record: tokens at KVT_DISK_HEADER_FIXED, payload after the header (room for padding) */
    int cancelled; /* kvt_remote_remove while queued (mu) */
} qslot;

typedef struct {
    kvt_hash128 hash;
    int live; /* 0: removed since it was pushed (its map entry is gone) */
} known_ent;

typedef struct {
    char host[URL_PART_MAX], path[URL_PART_MAX], user[URL_PART_MAX], pass[URL_PART_MAX];
    int port, db, is_unix;
} redis_url;

struct kvt_remote {
    kvt_remote_params p;
    char *url_text;
    redis_url url;
    uint8_t key[KVT_DISK_KEY_BYTES];
    uint32_t key_id;
    size_t header_bytes, value_bytes, buf_bytes;

    /* owner thread only */
    conn rd;
    kvt_hmap128 known;   /* hash -> position in ring */
    known_ent *ring;     /* FIFO of known blocks, oldest at ring_head */
    uint32_t ring_cap, ring_head, ring_count;

    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t cv_work, cv_room, cv_idle;
    pthread_t writer;
    int writer_started, stop, paused;
    qslot *q;
    uint32_t q_head, q_count;
    kvt_hash128 *lost;   /* blocks the writer dropped: their presence leaves at the next owner call */
    size_t n_lost, cap_lost;
    int writer_failed;   /* the writer's last batch could not reach Redis */
    double last_log;
    uint64_t unlogged;   /* errors since the last log line */
    kvt_remote_stats st;

    conn wr; /* writer thread only */
};

kvt_remote_params kvt_remote_default_params(void) {
    kvt_remote_params p;
    memset(&p, 0, sizeof p);
    p.size_bytes = DEFAULT_SIZE;
    p.timeout_ms = KVT_REMOTE_TIMEOUT_MS_DEFAULT;
    p.write_timeout_ms = KVT_REMOTE_WRITE_TIMEOUT_MS_DEFAULT;
    p.queue_depth = KVT_REMOTE_QUEUE_DEFAULT;
    p.put_wait_ms = KVT_REMOTE_PUT_WAIT_MS_DEFAULT;
    p.block_tokens = KVT_BLOCK_TOKENS_DEFAULT;
    return p;
}

void kvt_remote_key(kvt_hash128 ns, kvt_hash128 hash, char out[KVT_REMOTE_KEY_LEN + 1]) {
    snprintf(out, KVT_REMOTE_KEY_LEN + 1, KVT_REMOTE_KEY_PREFIX "%016" PRIx64 "%016" PRIx64 ":%016" PRIx64 "%016" PRIx64,
             ns.hi, ns.lo, hash.hi, hash.lo);
}

/* ---- URL and key file ------------------------------------------------------ */

static int copy_part(char *dst, const char *s, size_t n, const char *what, const char *url) {
    if (n >= URL_PART_MAX) return kvt_fail(KVT_EARG, "--kv-remote %s: the %s is too long", url, what);
    memcpy(dst, s, n);
    dst[n] = 0;
    return 0;
}

/* redis://[user:pass@]host[:port][/db] or unix:///path. The password is kept
 * for AUTH and never printed. */
static int parse_url(const char *url, redis_url *u) {
    memset(u, 0, sizeof *u);
    u->port = DEFAULT_PORT;
    if (!strncmp(url, URL_UNIX, strlen(URL_UNIX))) {
        const char *path = url + strlen(URL_UNIX);
        if (*path != '/') return kvt_fail(KVT_EARG, "--kv-remote %s: expected unix:///absolute/path", url);
        u->is_unix = 1;
        return copy_part(u->path, path, strlen(path), "path", url);
    }
    if (strncmp(url, URL_REDIS, strlen(URL_REDIS)))
        return kvt_fail(KVT_EARG, "--kv-remote %s: expected redis://[user:pass@]host:port[/db] or unix:///path", url);
    const char *s = url + strlen(URL_REDIS), *end = s + strcspn(s, "/");
    const char *at = memchr(s, '@', (size_t)(end - s));
    if (at) {
        const char *colon = memchr(s, ':', (size_t)(at - s));
        if (!colon) return kvt_fail(KVT_EARG, "--kv-remote: expected user:password@ before the host");
        if (copy_part(u->user, s, (size_t)(colon - s), "user", "URL") ||
            copy_part(u->pass, colon + 1, (size_t)(at - colon - 1), "password", "URL"))
            return KVT_EARG;
        s = at + 1;
    }
    const char *colon = memchr(s, ':', (size_t)(end - s));
    const char *host_end = colon ? colon : end;
    if (host_end == s) return kvt_fail(KVT_EARG, "--kv-remote %s: no host", url);
    if (copy_part(u->host, s, (size_t)(host_end - s), "host", url)) return KVT_EARG;
    if (colon) {
        char *e;
        long port = strtol(colon + 1, &e, 10);
        if (e != end || port < 1 || port > 65535) return kvt_fail(KVT_EARG, "--kv-remote %s: bad port", url);
        u->port = (int)port;
    }
    if (*end == '/' && end[1]) {
        char *e;
        long db = strtol(end + 1, &e, 10);
        if (*e || db < 0 || db > 1000000) return kvt_fail(KVT_EARG, "--kv-remote %s: bad database number", url);
        u->db = (int)db;
    }
    return 0;
}

/* The shared MAC key: a regular file of ours, 0600, exactly the key's size.
 * Anyone who could read or replace it could forge values every node trusts. */
static int read_key_file(const char *path, uint8_t key[KVT_DISK_KEY_BYTES]) {
    if (!path || !*path)
        return kvt_fail(KVT_EARG,
                        "the remote tier (T3) needs --kv-remote-key-file FILE: %d random bytes, mode 0600, shared by "
                        "every node (e.g. head -c %d /dev/urandom > FILE && chmod 600 FILE)",
                        KVT_DISK_KEY_BYTES, KVT_DISK_KEY_BYTES);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return kvt_fail(-errno, "remote key file %s: %s", path, strerror(errno));
    struct stat sb;
    int rc = 0;
    if (fstat(fd, &sb)) rc = kvt_fail(-errno, "remote key file %s: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode)) rc = kvt_fail(-EACCES, "remote key file %s is not a regular file", path);
    else if (sb.st_uid != geteuid())
        rc = kvt_fail(-EACCES, "remote key file %s belongs to uid %u, not to this user (%u)", path, (unsigned)sb.st_uid,
                      (unsigned)geteuid());
    else if (sb.st_mode & 077)
        rc = kvt_fail(-EACCES, "remote key file %s is readable or writable by others (mode %03o): chmod 600 %s", path,
                      (unsigned)(sb.st_mode & 0777), path);
    else if (sb.st_size != KVT_DISK_KEY_BYTES)
        rc = kvt_fail(KVT_EFORMAT, "remote key file %s has %lld bytes; it must hold exactly %d", path,
                      (long long)sb.st_size, KVT_DISK_KEY_BYTES);
    else if (read(fd, key, KVT_DISK_KEY_BYTES) != KVT_DISK_KEY_BYTES)
        rc = kvt_fail(-EIO, "remote key file %s: short read", path);
    close(fd);
    return rc;
}

/* ---- connections --------------------------------------------------------------- */

static struct timeval tv_of(double s) {
    if (s < 0.001) s = 0.001; /* 0 would mean "no timeout" to the socket */
    struct timeval tv = {.tv_sec = (time_t)s, .tv_usec = (suseconds_t)((s - (double)(time_t)s) * 1e6)};
    return tv;
}

/* Counts an error and logs it, at most once per KVT_REMOTE_LOG_INTERVAL_S
 * with the number held back (a down Redis would otherwise log per request). */
static void note_error(kvt_remote *r, int timeout, const char *fmt, const char *who, const char *detail) {
    pthread_mutex_lock(&r->mu);
    r->st.errors++;
    r->st.timeouts += timeout != 0;
    double now = kvt_now();
    if (r->last_log && now - r->last_log < KVT_REMOTE_LOG_INTERVAL_S) {
        r->unlogged++;
        pthread_mutex_unlock(&r->mu);
        return;
    }
    uint64_t held = r->unlogged;
    r->unlogged = 0;
    r->last_log = now;
    pthread_mutex_unlock(&r->mu);
    char msg[512];
    snprintf(msg, sizeof msg, fmt, who, detail ? detail : "");
    kvt_log(KVT_LOG_WARN, "remote tier %s: %s (T3 misses until it answers; %" PRIu64 " more errors since the last line)",
            r->url_text, msg, held);
}

static void conn_drop(conn *k) {
    if (k->c) redisFree(k->c);
    k->c = NULL;
    k->up = 0;
}

/* Schedules the next reconnect after a failure: backoff doubles up to the max. */
static void conn_failed(conn *k) {
    conn_drop(k);
    k->next_try = kvt_now() + k->backoff_s;
    k->backoff_s = KVT_MIN(k->backoff_s * 2, KVT_REMOTE_BACKOFF_MAX_MS / 1e3);
}

/* Sends one command and expects a status or integer reply (AUTH, SELECT). */
static int setup_command(redisContext *c, char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!rep) {
        snprintf(err, cap, "%s", c->errstr);
        return -1;
    }
    int bad = rep->type == REDIS_REPLY_ERROR;
    if (bad) snprintf(err, cap, "%.*s", (int)KVT_MIN(rep->len, 200u), rep->str);
    freeReplyObject(rep);
    return bad ? -1 : 0;
}

static redisContext *connect_url(const redis_url *u, double timeout_s, char *err, size_t cap) {
    struct timeval tv = tv_of(timeout_s);
    redisContext *c = u->is_unix ? redisConnectUnixWithTimeout(u->path, tv) : redisConnectWithTimeout(u->host, u->port, tv);
    if (!c || c->err) {
        snprintf(err, cap, "%s", c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        return NULL;
    }
    int rc = redisSetTimeout(c, tv) == REDIS_OK ? 0 : -1;
    if (rc) snprintf(err, cap, "cannot set a socket timeout");
    if (!rc && u->pass[0])
        rc = u->user[0] ? setup_command(c, err, cap, "AUTH %s %s", u->user, u->pass)
                        : setup_command(c, err, cap, "AUTH %s", u->pass);
    if (!rc && u->db) rc = setup_command(c, err, cap, "SELECT %d", u->db);
    if (rc) {
        redisFree(c);
        return NULL;
    }
    return c;
}

/* The connection, (re)connecting if its backoff allows; NULL while Redis is
 * unreachable. */
static redisContext *conn_get(kvt_remote *r, conn *k, double timeout_s) {
    if (k->c && !k->c->err) return k->c;
    if (k->c) conn_failed(k);
    if (kvt_now() < k->next_try) return NULL;
    char err[256];
    k->c = connect_url(&r->url, timeout_s, err, sizeof err);
    if (!k->c) {
        note_error(r, 0, "%s: cannot connect: %s", k->who, err);
        conn_failed(k);
        return NULL;
    }
    /* the backoff is reset by the first reply (conn_answered), not here: a
     * hung server still accepts connections, and must not be retried at the
     * shortest interval */
    k->up = 1;
    pthread_mutex_lock(&r->mu);
    r->st.connects++;
    pthread_mutex_unlock(&r->mu);
    return k->c;
}

/* The server answered: the next failure starts the backoff afresh. */
static void conn_answered(conn *k) { k->backoff_s = KVT_REMOTE_BACKOFF_MIN_MS / 1e3; }

/* Reads the next pipelined reply before deadline, lowering the socket timeout
 * as the deadline nears so the whole call stays within it. NULL on a timeout
 * or connection error (*timed_out says which). */
static redisReply *reply_before(redisContext *c, double deadline, double full_s, int *timed_out) {
    double left = deadline - kvt_now();
    *timed_out = 0;
    if (left <= 0) {
        *timed_out = 1;
        return NULL;
    }
    if (left < full_s) redisSetTimeout(c, tv_of(left));
    void *rep = NULL;
    if (redisGetReply(c, &rep) != REDIS_OK || !rep) {
        *timed_out = c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
        return NULL;
    }
    return rep;
}

/* ---- the known set: T3 presence in the index ----------------------------------- */

static void known_del(kvt_remote *r, kvt_hash128 hash) {
    uint32_t at;
    if (!kvt_hmap128_get(&r->known, hash, &at)) return;
    kvt_hmap128_del(&r->known, hash);
    r->ring[at].live = 0;
    if (r->p.index) kvt_prefix_remove(r->p.index, hash, KVT_TIER_T3);
}

/* Records T3 presence of a block; the oldest known block is forgotten when
 * the ring is full. 0, or -EEXIST if the index refuses it (a collision). */
static int known_add(kvt_remote *r, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens) {
    if (kvt_hmap128_get(&r->known, hash, NULL)) return 0;
    if (r->p.index && kvt_prefix_add(r->p.index, hash, parent, tokens, KVT_TIER_T3, 0)) return -EEXIST;
    while (r->ring_count == r->ring_cap) {
        known_ent *old = &r->ring[r->ring_head];
        if (old->live) {
            kvt_hmap128_del(&r->known, old->hash);
            if (r->p.index) kvt_prefix_remove(r->p.index, old->hash, KVT_TIER_T3);
            r->st.forgotten++;
        }
        r->ring_head = (r->ring_head + 1) % r->ring_cap;
        r->ring_count--;
    }
    uint32_t at = (r->ring_head + r->ring_count++) % r->ring_cap;
    r->ring[at] = (known_ent){hash, 1};
    kvt_hmap128_put(&r->known, hash, at);
    return 0;
}

/* The queue slot holding hash, or NULL (mu held). */
static qslot *queued_slot(kvt_remote *r, kvt_hash128 hash) {
    for (uint32_t i = 0; i < r->q_count; i++) {
        qslot *q = &r->q[(r->q_head + i) % r->p.queue_depth];
        if (!q->cancelled && kvt_hash128_eq(q->hash, hash)) return q;
    }
    return NULL;
}

/* Blocks the writer dropped leave the index (owner thread, mu held), unless
 * the same block was queued again meanwhile. */
static void apply_lost_locked(kvt_remote *r) {
    for (size_t i = 0; i < r->n_lost; i++)
        if (!queued_slot(r, r->lost[i])) known_del(r, r->lost[i]);
    r->n_lost = 0;
}

/* ---- writer thread ----------------------------------------------------------- */

/* A block the writer could not store (mu held). */
static void lost_locked(kvt_remote *r, kvt_hash128 hash) {
    r->st.dropped++;
    if (r->n_lost == r->cap_lost) {
        r->cap_lost = r->cap_lost ? 2 * r->cap_lost : 64;
        r->lost = kvt_xrealloc(r->lost, r->cap_lost * sizeof *r->lost);
    }
    r->lost[r->n_lost++] = hash;
}

/* Signs and sends slots [q_head, q_head + k) as one pipeline of SETs. The
 * slots stay in the queue (readable by get_many) until this returns. */
static void write_batch(kvt_remote *r, uint32_t k) {
    qslot *batch[WRITE_BATCH_MAX];
    int skip[WRITE_BATCH_MAX];
    pthread_mutex_lock(&r->mu);
    for (uint32_t i = 0; i < k; i++) {
        batch[i] = &r->q[(r->q_head + i) % r->p.queue_depth];
        skip[i] = batch[i]->cancelled;
    }
    pthread_mutex_unlock(&r->mu);
    /* the MAC pass over each payload runs here, off the engine's thread; it
     * writes only header bytes, which get_many never reads from a slot */
    for (uint32_t i = 0; i < k; i++)
        if (!skip[i])
            kvt_disk_record_encode(batch[i]->buf, r->p.block_tokens, KVT_DISK_CODEC_RAW, r->p.payload_bytes,
                                   r->p.payload_bytes, r->p.ns, batch[i]->hash, batch[i]->parent, r->key, r->key_id);
    double full = r->p.write_timeout_ms / 1e3, deadline = kvt_now() + full;
    redisContext *c = conn_get(r, &r->wr, full);
    uint32_t sent = 0, stored = 0;
    int ok[WRITE_BATCH_MAX] = {0};
    if (c) {
        redisSetTimeout(c, tv_of(full));
        char ttl[24];
        snprintf(ttl, sizeof ttl, "%u", r->p.ttl_s);
        for (uint32_t i = 0; i < k; i++) {
            if (skip[i]) continue;
            const char *argv[5] = {"SET", batch[i]->key, (const char *)batch[i]->buf, "EX", ttl};
            size_t len[5] = {3, KVT_REMOTE_KEY_LEN, r->value_bytes, 2, strlen(ttl)};
            redisAppendCommandArgv(c, r->p.ttl_s ? 5 : 3, argv, len);
            sent++;
        }
        for (uint32_t i = 0; i < k; i++) {
            if (skip[i]) continue;
            int timed_out;
            redisReply *rep = reply_before(c, deadline, full, &timed_out);
            if (!rep) {
                note_error(r, timed_out, "%s: %s", r->wr.who, timed_out ? "timed out" : c->errstr);
                conn_failed(&r->wr);
                break;
            }
            conn_answered(&r->wr);
            ok[i] = rep->type == REDIS_REPLY_STATUS;
            if (!ok[i]) note_error(r, 0, "%s: SET refused: %s", r->wr.who, rep->type == REDIS_REPLY_ERROR ? rep->str : "?");
            stored += ok[i];
            freeReplyObject(rep);
        }
    }
    pthread_mutex_lock(&r->mu);
    r->writer_failed = sent && !stored && !r->wr.up;
    for (uint32_t i = 0; i < k; i++) {
        if (skip[i]) continue;
        if (ok[i]) {
            r->st.puts++;
            r->st.bytes_written += r->value_bytes;
        } else {
            lost_locked(r, batch[i]->hash);
        }
    }
    r->st.writer_connected = r->wr.up;
    pthread_mutex_unlock(&r->mu);
}

static void *writer_main(void *arg) {
    kvt_remote *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while ((!r->q_count || r->paused) && !r->stop) pthread_cond_wait(&r->cv_work, &r->mu);
        if (!r->q_count) break;
        uint32_t k = KVT_MIN(r->q_count, (uint32_t)WRITE_BATCH_MAX);
        pthread_mutex_unlock(&r->mu);
        write_batch(r, k);
        pthread_mutex_lock(&r->mu);
        r->q_head = (r->q_head + k) % r->p.queue_depth;
        r->q_count -= k;
        pthread_cond_broadcast(&r->cv_room);
        if (!r->q_count) pthread_cond_broadcast(&r->cv_idle);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ---- open / close ------------------------------------------------------------- */

static void remote_free(kvt_remote *r) {
    if (!r) return;
    for (uint32_t i = 0; r->q && i < r->p.queue_depth; i++) free(r->q[i].buf);
    free(r->q);
    free(r->lost);
    free(r->ring);
    kvt_hmap128_free(&r->known);
    conn_drop(&r->rd);
    conn_drop(&r->wr);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv_work);
    pthread_cond_destroy(&r->cv_room);
    pthread_cond_destroy(&r->cv_idle);
    memset(r->key, 0, sizeof r->key);
    free(r->url_text);
    free(r);
}

int kvt_remote_open(const kvt_remote_params *p, kvt_remote **out) {
    *out = NULL;
    if (!p->url) return kvt_fail(KVT_EARG, "remote tier: no URL");
    if (!p->payload_bytes || p->payload_bytes > KVT_DISK_PAYLOAD_MAX || !p->block_tokens ||
        p->block_tokens > KVT_BLOCK_TOKENS_MAX || !p->size_bytes || !p->queue_depth || !p->timeout_ms ||
        !p->write_timeout_ms)
        return kvt_fail(KVT_EARG, "remote tier: bad parameters");
    kvt_remote *r = kvt_xcalloc(1, sizeof *r);
    r->p = *p;
    r->url_text = kvt_xstrdup(p->url);
    r->p.url = r->url_text;
    r->p.key_file = NULL; /* read below, not kept */
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv_room, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&r->cv_work, NULL);
    pthread_cond_init(&r->cv_idle, NULL);
    r->rd = (conn){.who = "reads", .backoff_s = KVT_REMOTE_BACKOFF_MIN_MS / 1e3};
    r->wr = (conn){.who = "writes", .backoff_s = KVT_REMOTE_BACKOFF_MIN_MS / 1e3};
    int rc = parse_url(p->url, &r->url);
    if (!rc) rc = read_key_file(p->key_file, r->key);
    if (rc) {
        remote_free(r);
        return rc;
    }
    r->key_id = kvt_disk_record_key_id(r->key);
    r->header_bytes = KVT_DISK_RECORD_HEADER_BYTES(p->block_tokens);
    r->value_bytes = r->header_bytes + p->payload_bytes;
    r->buf_bytes = (r->value_bytes + KVT_DISK_ALIGN - 1) / KVT_DISK_ALIGN * KVT_DISK_ALIGN;
    uint64_t cap = p->size_bytes / r->value_bytes;
    r->ring_cap = (uint32_t)KVT_MAX(KVT_MIN(cap, (uint64_t)KNOWN_MAX), (uint64_t)KVT_REMOTE_KNOWN_MIN);
    r->ring = kvt_xcalloc(r->ring_cap, sizeof *r->ring);
    r->q = kvt_xcalloc(p->queue_depth, sizeof *r->q);
    r->st.budget_bytes = p->size_bytes;
    r->st.value_bytes = r->value_bytes;
    /* hiredis writes with write(2): a Redis that closes the connection must
     * not kill the process with SIGPIPE (left alone if someone handles it) */
    struct sigaction sa;
    if (!sigaction(SIGPIPE, NULL, &sa) && sa.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
    if (pthread_create(&r->writer, NULL, writer_main, r)) {
        remote_free(r);
        return kvt_fail(-EAGAIN, "remote tier: cannot start the writer thread");
    }
    r->writer_started = 1;
    *out = r;
    return 0;
}

void kvt_remote_close(kvt_remote *r) {
    if (!r) return;
    if (r->writer_started) {
        pthread_mutex_lock(&r->mu);
        r->stop = 1;
        r->paused = 0;
        pthread_cond_broadcast(&r->cv_work);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->writer, NULL); /* drains the queue first */
    }
    if (r->p.index)
        for (uint32_t i = 0; i < r->ring_count; i++) {
            known_ent *e = &r->ring[(r->ring_head + i) % r->ring_cap];
            if (e->live) kvt_prefix_remove(r->p.index, e->hash, KVT_TIER_T3);
        }
    remote_free(r);
}

/* ---- owner API ---------------------------------------------------------------- */

/* Waits (mu held) until the queue has room or put_wait_ms pass. */
static void wait_for_room(kvt_remote *r) {
    if (r->q_count < r->p.queue_depth || !r->p.put_wait_ms) return;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += r->p.put_wait_ms / 1000;
    until.tv_nsec += (long)(r->p.put_wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    r->st.put_waits++;
    while (r->q_count == r->p.queue_depth)
        if (pthread_cond_timedwait(&r->cv_room, &r->mu, &until) == ETIMEDOUT) break;
}

int kvt_remote_put(kvt_remote *r, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void *payload) {
    pthread_mutex_lock(&r->mu);
    apply_lost_locked(r);
    int rc = 0;
    if (kvt_hmap128_get(&r->known, hash, NULL) || queued_slot(r, hash)) rc = 1;
    if (!rc) wait_for_room(r);
    if (!rc && r->q_count == r->p.queue_depth) rc = KVT_ELIMIT;
    if (!rc) rc = known_add(r, hash, parent, tokens); /* visible from now on: served from the queue */
    if (rc == KVT_ELIMIT) r->st.dropped++;
    if (rc == 1) r->st.dup_puts++;
    if (!rc) {
        /* the slot past the tail is ours until q_count covers it */
        qslot *q = &r->q[(r->q_head + r->q_count) % r->p.queue_depth];
        if (!q->buf) q->buf = kvt_xmalloc(r->buf_bytes);
        q->hash = hash;
        q->parent = parent;
        q->cancelled = 0;
        kvt_remote_key(r->p.ns, hash, q->key);
        memcpy(q->buf + KVT_DISK_HEADER_FIXED, tokens, r->p.block_tokens * sizeof(int32_t));
        memcpy(q->buf + r->header_bytes, payload, r->p.payload_bytes);
        r->q_count++;
        pthread_cond_signal(&r->cv_work);
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* Whether value is the record of exactly the block req asks for, signed under
 * our key; if so its payload goes to req->out. */
static int accept_value(kvt_remote *r, const char *value, size_t len, kvt_tier_read *req) {
    kvt_disk_record rec;
    if (kvt_disk_record_parse(value, len, 1, &rec)) return -1;
    if (rec.header_bytes + rec.stored_bytes != len || rec.block_tokens != r->p.block_tokens ||
        rec.payload_bytes != r->p.payload_bytes || !kvt_hash128_eq(rec.ns, r->p.ns) ||
        !kvt_hash128_eq(rec.hash, req->hash) || !kvt_hash128_eq(rec.parent, req->parent) ||
        memcmp(rec.tokens, req->tokens, r->p.block_tokens * sizeof(int32_t)))
        return -1;
    if (kvt_disk_record_check_mac(&rec, r->key)) return -1;
    return kvt_disk_record_decode(&rec, req->out, r->p.payload_bytes) ? -1 : 0;
}

/* Serves requests still in the write queue (mu held). */
static size_t read_queued(kvt_remote *r, kvt_tier_read *reqs, size_t n) {
    size_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        qslot *q = queued_slot(r, reqs[i].hash);
        if (!q || !kvt_hash128_eq(q->parent, reqs[i].parent) ||
            memcmp(q->buf + KVT_DISK_HEADER_FIXED, reqs[i].tokens, r->p.block_tokens * sizeof(int32_t)))
            continue;
        memcpy(reqs[i].out, q->buf + r->header_bytes, r->p.payload_bytes);
        reqs[i].result = 0;
        hits++;
    }
    r->st.queue_hits += hits;
    return hits;
}

size_t kvt_remote_get_many(kvt_remote *r, kvt_tier_read *reqs, size_t n) {
    if (!n) return 0;
    for (size_t i = 0; i < n; i++) reqs[i].result = KVT_ENOTFOUND;
    pthread_mutex_lock(&r->mu);
    apply_lost_locked(r);
    size_t hits = read_queued(r, reqs, n);
    pthread_mutex_unlock(&r->mu);
    uint64_t bad = 0, bytes = 0;
    double full = r->p.timeout_ms / 1e3, t0 = kvt_now(), deadline = t0 + full;
    redisContext *c = hits < n ? conn_get(r, &r->rd, full) : NULL;
    if (c) {
        redisSetTimeout(c, tv_of(full));
        char key[KVT_REMOTE_KEY_LEN + 1];
        for (size_t i = 0; i < n; i++) {
            if (!reqs[i].result) continue;
            kvt_remote_key(r->p.ns, reqs[i].hash, key);
            redisAppendCommand(c, "GET %b", key, (size_t)KVT_REMOTE_KEY_LEN);
        }
        for (size_t i = 0; i < n; i++) {
            if (!reqs[i].result) continue;
            int timed_out;
            redisReply *rep = reply_before(c, deadline, full, &timed_out);
            if (!rep) {
                note_error(r, timed_out, "%s: %s", r->rd.who, timed_out ? "timed out" : c->errstr);
                conn_failed(&r->rd);
                break; /* the rest of the pipeline is lost with the connection: misses */
            }
            conn_answered(&r->rd);
            if (rep->type == REDIS_REPLY_STRING) {
                bytes += rep->len;
                if (!accept_value(r, rep->str, rep->len, &reqs[i])) {
                    reqs[i].result = 0;
                    hits++;
                } else {
                    bad++;
                }
            } else if (rep->type == REDIS_REPLY_ERROR) {
                note_error(r, 0, "%s: GET refused: %s", r->rd.who, rep->str);
            }
            freeReplyObject(rep);
        }
    }
    double dt = kvt_now() - t0;
    pthread_mutex_lock(&r->mu);
    if (c) {
        r->st.round_trips++;
        r->st.latency_sum_s += dt;
    }
    r->st.bytes_read += bytes;
    r->st.bad += bad;
    r->st.hits += hits;
    r->st.misses += n - hits;
    r->st.connected = r->rd.up;
    pthread_mutex_unlock(&r->mu);
    if (bad) kvt_log(KVT_LOG_DEBUG, "remote tier: %" PRIu64 " values refused (CRC, MAC or identity)", bad);
    for (size_t i = 0; i < n; i++)
        if (reqs[i].result) known_del(r, reqs[i].hash); /* evicted, expired, refused or unreachable */
    return hits;
}

size_t kvt_remote_probe(kvt_remote *r, kvt_hash128 parent, const int32_t *tokens, const kvt_hash128 *hashes,
                        size_t n_blocks) {
    if (!n_blocks) return 0;
    pthread_mutex_lock(&r->mu);
    apply_lost_locked(r);
    r->st.probes++;
    r->st.probe_blocks += n_blocks;
    pthread_mutex_unlock(&r->mu);
    double full = r->p.timeout_ms / 1e3, t0 = kvt_now(), deadline = t0 + full;
    redisContext *c = conn_get(r, &r->rd, full);
    size_t run = 0;
    int in_run = 1;
    if (c) {
        redisSetTimeout(c, tv_of(full));
        char key[KVT_REMOTE_KEY_LEN + 1];
        for (size_t i = 0; i < n_blocks; i++) {
            kvt_remote_key(r->p.ns, hashes[i], key);
            redisAppendCommand(c, "EXISTS %b", key, (size_t)KVT_REMOTE_KEY_LEN);
        }
        for (size_t i = 0; i < n_blocks; i++) {
            int timed_out;
            redisReply *rep = reply_before(c, deadline, full, &timed_out);
            if (!rep) {
                note_error(r, timed_out, "%s: %s", r->rd.who, timed_out ? "timed out" : c->errstr);
                conn_failed(&r->rd);
                break;
            }
            conn_answered(&r->rd);
            int found = rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
            freeReplyObject(rep);
            /* registration contract: only the leading run, each after its parent */
            if (in_run && found &&
                !known_add(r, hashes[i], i ? hashes[i - 1] : parent, tokens + i * (size_t)r->p.block_tokens))
                run++;
            else
                in_run = 0;
        }
    }
    double dt = kvt_now() - t0;
    pthread_mutex_lock(&r->mu);
    if (c) {
        r->st.round_trips++;
        r->st.latency_sum_s += dt;
    }
    r->st.probe_found += run;
    r->st.connected = r->rd.up;
    pthread_mutex_unlock(&r->mu);
    return run;
}

int kvt_remote_contains(kvt_remote *r, kvt_hash128 hash) {
    pthread_mutex_lock(&r->mu);
    apply_lost_locked(r);
    int in = kvt_hmap128_get(&r->known, hash, NULL) || queued_slot(r, hash);
    pthread_mutex_unlock(&r->mu);
    return in;
}

int kvt_remote_remove(kvt_remote *r, kvt_hash128 hash) {
    pthread_mutex_lock(&r->mu);
    apply_lost_locked(r);
    qslot *q = queued_slot(r, hash);
    int rc = kvt_hmap128_get(&r->known, hash, NULL) || q ? 0 : KVT_ENOTFOUND;
    if (q) q->cancelled = 1; /* the writer skips it */
    known_del(r, hash);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int kvt_remote_flush(kvt_remote *r) {
    pthread_mutex_lock(&r->mu);
    r->paused = 0;
    pthread_cond_broadcast(&r->cv_work);
    while (r->q_count) pthread_cond_wait(&r->cv_idle, &r->mu);
    apply_lost_locked(r);
    int rc = r->writer_failed ? kvt_fail(-EIO, "remote tier %s: the writer cannot reach Redis", r->url_text) : 0;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

void kvt_remote_pause_writer(kvt_remote *r, int paused) {
    pthread_mutex_lock(&r->mu);
    r->paused = paused;
    pthread_cond_broadcast(&r->cv_work);
    pthread_mutex_unlock(&r->mu);
}

void kvt_remote_get_stats(kvt_remote *r, kvt_remote_stats *out) {
    pthread_mutex_lock(&r->mu);
    apply_lost_locked(r);
    *out = r->st;
    out->known = r->known.count;
    out->queued = r->q_count;
    out->connected = r->rd.up;
    pthread_mutex_unlock(&r->mu);
}

/* ---- maintenance ---------------------------------------------------------------- */

static int parse_hex128(const char *s, kvt_hash128 *out) {
    char part[17];
    char *e;
    memcpy(part, s, 16);
    part[16] = 0;
    out->hi = strtoull(part, &e, 16);
    if (*e) return -1;
    memcpy(part, s + 16, 16);
    out->lo = strtoull(part, &e, 16);
    return *e ? -1 : 0;
}

static int maint_connect(const char *url, uint32_t timeout_ms, redisContext **c) {
    redis_url u;
    int rc = parse_url(url, &u);
    if (rc) return rc;
    char err[256];
    *c = connect_url(&u, timeout_ms / 1e3, err, sizeof err);
    memset(&u, 0, sizeof u);
    return *c ? 0 : kvt_fail(-EIO, "cannot reach %s: %s", url, err);
}

/* One SCAN step over pattern: the next cursor in *cursor (0 at the end) and
 * the reply (caller frees), or NULL after setting the error. */
static redisReply *scan_step(redisContext *c, const char *url, unsigned long long *cursor, const char *pattern) {
    redisReply *rep = redisCommand(c, "SCAN %llu MATCH %s COUNT %d", *cursor, pattern, SCAN_COUNT);
    if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 || rep->element[0]->type != REDIS_REPLY_STRING ||
        rep->element[1]->type != REDIS_REPLY_ARRAY) {
        kvt_fail(-EIO, "%s: SCAN failed: %s", url, rep && rep->type == REDIS_REPLY_ERROR ? rep->str : c->errstr);
        if (rep) freeReplyObject(rep);
        return NULL;
    }
    *cursor = strtoull(rep->element[0]->str, NULL, 10);
    return rep;
}

int kvt_remote_scan(const char *url, uint32_t timeout_ms, kvt_remote_ns_usage *out, size_t cap, size_t *n_out,
                    kvt_remote_ns_usage *other) {
    *n_out = 0;
    memset(other, 0, sizeof *other);
    redisContext *c;
    int rc = maint_connect(url, timeout_ms, &c);
    if (rc) return rc;
    unsigned long long cursor = 0;
    do {
        redisReply *rep = scan_step(c, url, &cursor, KVT_REMOTE_KEY_PREFIX "*");
        if (!rep) {
            rc = -EIO;
            break;
        }
        redisReply *keys = rep->element[1];
        for (size_t i = 0; i < keys->elements; i++) /* sizes in one pipelined round trip */
            redisAppendCommand(c, "STRLEN %b", keys->element[i]->str, keys->element[i]->len);
        for (size_t i = 0; i < keys->elements && !rc; i++) {
            void *v = NULL;
            if (redisGetReply(c, &v) != REDIS_OK) {
                rc = kvt_fail(-EIO, "%s: STRLEN failed: %s", url, c->errstr);
                break;
            }
            redisReply *len = v;
            const char *k = keys->element[i]->str;
            kvt_hash128 ns;
            if (keys->element[i]->len == KVT_REMOTE_KEY_LEN && !parse_hex128(k + strlen(KVT_REMOTE_KEY_PREFIX), &ns) &&
                len->type == REDIS_REPLY_INTEGER) {
                size_t j;
                for (j = 0; j < *n_out; j++)
                    if (kvt_hash128_eq(out[j].ns, ns)) break;
                kvt_remote_ns_usage *u = other;
                if (j < *n_out) u = &out[j];
                else if (*n_out < cap) {
                    u = &out[(*n_out)++];
                    *u = (kvt_remote_ns_usage){.ns = ns};
                }
                u->values++;
                u->bytes += (uint64_t)len->integer;
            }
            freeReplyObject(len);
        }
        freeReplyObject(rep);
    } while (cursor && !rc);
    redisFree(c);
    return rc;
}

int kvt_remote_clear(const char *url, uint32_t timeout_ms, kvt_hash128 ns, uint64_t *removed) {
    *removed = 0;
    redisContext *c;
    int rc = maint_connect(url, timeout_ms, &c);
    if (rc) return rc;
    char pattern[KVT_REMOTE_KEY_LEN + 1];
    kvt_remote_key(ns, ns, pattern);
    snprintf(pattern + strlen(KVT_REMOTE_KEY_PREFIX) + 33, sizeof pattern - strlen(KVT_REMOTE_KEY_PREFIX) - 33, "*");
    unsigned long long cursor = 0;
    do {
        redisReply *rep = scan_step(c, url, &cursor, pattern);
        if (!rep) {
            rc = -EIO;
            break;
        }
        redisReply *keys = rep->element[1];
        for (size_t at = 0; at < keys->elements && !rc; at += UNLINK_BATCH) {
            size_t k = KVT_MIN(keys->elements - at, (size_t)UNLINK_BATCH);
            const char **argv = kvt_xmalloc((k + 1) * sizeof *argv);
            size_t *len = kvt_xmalloc((k + 1) * sizeof *len);
            argv[0] = "UNLINK";
            len[0] = 6;
            for (size_t i = 0; i < k; i++) {
                argv[i + 1] = keys->element[at + i]->str;
                len[i + 1] = keys->element[at + i]->len;
            }
            redisReply *u = redisCommandArgv(c, (int)(k + 1), argv, len);
            if (!u || u->type != REDIS_REPLY_INTEGER)
                rc = kvt_fail(-EIO, "%s: UNLINK failed: %s", url, u && u->type == REDIS_REPLY_ERROR ? u->str : c->errstr);
            else
                *removed += (uint64_t)u->integer;
            if (u) freeReplyObject(u);
            free(argv);
            free(len);
        }
        freeReplyObject(rep);
    } while (cursor && !rc);
    redisFree(c);
    return rc;
}

/* ---- the tier interface (tier.h) ---- */

static int ops_put(void *t, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void *payload) {
    return kvt_remote_put(t, hash, parent, tokens, payload);
}
static size_t ops_get_many(void *t, kvt_tier_read *reqs, size_t n) { return kvt_remote_get_many(t, reqs, n); }
static int ops_contains(void *t, kvt_hash128 hash) { return kvt_remote_contains(t, hash); }
static int ops_remove(void *t, kvt_hash128 hash) { return kvt_remote_remove(t, hash); }
static int ops_flush(void *t) { return kvt_remote_flush(t); }

static void ops_stats(void *t, kvt_tier_stats *out) {
    kvt_remote_stats s;
    kvt_remote_get_stats(t, &s);
    *out = (kvt_tier_stats){.blocks = s.known, .bytes_used = s.known * s.value_bytes, .budget_bytes = s.budget_bytes,
                            .block_cost = s.value_bytes, .hits = s.hits, .misses = s.misses, .puts = s.puts,
                            .evictions = s.forgotten, .dropped = s.dropped};
}

const kvt_tier_ops kvt_remote_tier_ops = {
    .name = "T3 remote", .persistent = 1, .measured = 1, .shared = 1, .put = ops_put, .get_many = ops_get_many,
    .contains = ops_contains, .remove = ops_remove, .flush = ops_flush, .stats = ops_stats,
};
