// SPDX-License-Identifier: MIT
/* T3 on Redis (see tier_remote.h; remote_internal.h maps its files): open
 * and close, the shared key file, the write queue's owner side, and the tier
 * interface. The known set and its index presence are remote_known.c's. */
#include "remote_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "remote_cluster_internal.h"
#include "tier_disk.h"

#define DEFAULT_SIZE (4ull << 30)
/* Socket read-ahead per reader: reply lines, and at most this much of a value copied through it. */
#define READ_AHEAD_BYTES (16u << 10)
/* Cap on the known set whatever the budget says (index memory: B ids per block). */
#define KNOWN_MAX (1u << 22)
/* Cap on held blocks whatever retry_bytes says (the ring's own memory). */
#define HELD_MAX (1u << 18)

kvt_remote_params kvt_remote_default_params(void) {
    kvt_remote_params p;
    memset(&p, 0, sizeof p);
    p.size_bytes = DEFAULT_SIZE;
    p.timeout_ms = KVT_REMOTE_TIMEOUT_MS_DEFAULT;
    p.write_timeout_ms = KVT_REMOTE_WRITE_TIMEOUT_MS_DEFAULT;
    p.queue_depth = KVT_REMOTE_QUEUE_DEFAULT;
    p.put_wait_ms = KVT_REMOTE_PUT_WAIT_MS_DEFAULT;
    p.block_tokens = KVT_BLOCK_TOKENS_DEFAULT;
    p.read_conns = KVT_REMOTE_READ_CONNS_DEFAULT;
    p.read_floor_mbps = KVT_REMOTE_READ_FLOOR_MBPS;
    p.zstd_level = KVT_REMOTE_ZSTD_LEVEL_DEFAULT;
    p.retry_bytes = KVT_REMOTE_RETRY_BYTES_DEFAULT;
    return p;
}

int kvt_remote_compress_parse(const char *s, kvt_remote_compress *out) {
    if (!strcmp(s, "none")) *out = KVT_REMOTE_COMPRESS_NONE;
    else if (!strcmp(s, "zstd")) *out = KVT_REMOTE_COMPRESS_ZSTD;
    else return kvt_fail(KVT_EARG, "--kv-remote-compress %s: expected zstd or none", s);
    return 0;
}

/* ---- key file ------------------------------------------------------------- */

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

/* ---- open / close ------------------------------------------------------------- */

static void remote_free(kvt_remote *r) {
    if (!r) return;
    for (uint32_t i = 0; r->q && i < r->p.queue_depth; i++) free(r->q[i].buf);
    free(r->q);
    for (uint32_t i = 0; r->held && i < r->held_cap; i++) free(r->held[i].buf);
    free(r->held);
    kvt_hmap128_free(&r->held_map);
    free(r->lost);
    free(r->ring);
    kvt_hmap128_free(&r->known);
    for (int i = 0; i < KVT_REMOTE_READ_CONNS_MAX; i++) {
        kvt_remote_conn_drop(&r->rd[i].conn);
        free(r->rd[i].in.buf);
        free(r->rd[i].value);
        ZSTD_freeDCtx(r->rd[i].dctx);
    }
    kvt_pool_free(r->pool);
    kvt_remote_conn_drop(&r->wr);
    kvt_remote_cluster_free(r);
    ZSTD_freeCCtx(r->cctx);
    for (int i = 0; r->zbuf && i < WRITE_BATCH_SLOTS; i++) free(r->zbuf[i]);
    free(r->zbuf);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv_work);
    pthread_cond_destroy(&r->cv_room);
    pthread_cond_destroy(&r->cv_idle);
    kvt_disk_record_key_free(r->key);
    free(r->url_text);
    free(r);
}

int kvt_remote_open(const kvt_remote_params *p, kvt_remote **out) {
    *out = NULL;
    if (!p->url) return kvt_fail(KVT_EARG, "remote tier: no URL");
    if (!p->payload_bytes || p->payload_bytes > KVT_DISK_PAYLOAD_MAX || !p->block_tokens ||
        p->block_tokens > KVT_BLOCK_TOKENS_MAX || !p->size_bytes || !p->queue_depth || !p->timeout_ms ||
        !p->write_timeout_ms || !p->read_conns || p->read_conns > KVT_REMOTE_READ_CONNS_MAX || !(p->read_floor_mbps > 0))
        return kvt_fail(KVT_EARG, "remote tier: bad parameters");
    if (p->compress == KVT_REMOTE_COMPRESS_ZSTD &&
        (p->zstd_level < ZSTD_minCLevel() || p->zstd_level > ZSTD_maxCLevel()))
        return kvt_fail(KVT_EARG, "--kv-remote-zstd-level %d: expected %d..%d", p->zstd_level, ZSTD_minCLevel(),
                        ZSTD_maxCLevel());
    kvt_remote *r = kvt_xcalloc(1, sizeof *r);
    r->p = *p;
    char shown[4 * KVT_REMOTE_URL_PART_MAX];
    kvt_remote_url_shown(p->url, shown, sizeof shown);
    r->url_text = kvt_xstrdup(shown); /* for log lines: no password */
    r->p.url = r->url_text;
    r->p.key_file = r->p.password_file = NULL; /* read below, not kept */
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv_room, &ca);
    pthread_cond_init(&r->cv_work, &ca); /* the writer waits on it for its reconnect time too */
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&r->cv_idle, NULL);
    for (int i = 0; i < KVT_REMOTE_READ_CONNS_MAX; i++)
        r->rd[i].conn = (kvt_remote_conn){.who = "reads", .backoff_s = KVT_REMOTE_BACKOFF_MIN_MS / 1e3};
    r->wr = (kvt_remote_conn){.who = "writes", .backoff_s = KVT_REMOTE_BACKOFF_MIN_MS / 1e3};
    int rc = kvt_remote_parse_url_auth(p->url, p->password_file, &r->url);
    uint8_t key[KVT_DISK_KEY_BYTES];
    if (!rc) rc = read_key_file(p->key_file, key);
    if (!rc) rc = kvt_remote_cluster_open(r); /* a cluster URL, or a server that says it is a cluster node */
    if (rc) {
        remote_free(r);
        return rc;
    }
    r->key = kvt_disk_record_key_new(key);
    memset(key, 0, sizeof key);
    r->header_bytes = KVT_DISK_RECORD_HEADER_BYTES(p->block_tokens);
    r->value_bytes = r->header_bytes + p->payload_bytes;
    r->buf_bytes = (r->value_bytes + KVT_DISK_ALIGN - 1) / KVT_DISK_ALIGN * KVT_DISK_ALIGN;
    /* the readers' buffers are touched now: a first restore pays no page faults for them */
    for (uint32_t i = 0; i < p->read_conns; i++) {
        r->rd[i].in = (kvt_remote_inbuf){.buf = kvt_xmalloc(READ_AHEAD_BYTES), .cap = READ_AHEAD_BYTES};
        r->rd[i].value = kvt_xmalloc(r->value_bytes);
        memset(r->rd[i].value, 0, r->value_bytes);
    }
    if (p->compress == KVT_REMOTE_COMPRESS_ZSTD) r->zbuf = kvt_xcalloc(WRITE_BATCH_SLOTS, sizeof *r->zbuf);
    uint64_t cap = p->size_bytes / r->value_bytes;
    r->ring_cap = (uint32_t)KVT_MAX(KVT_MIN(cap, (uint64_t)KNOWN_MAX), (uint64_t)KVT_REMOTE_KNOWN_MIN);
    r->ring = kvt_xcalloc(r->ring_cap, sizeof *r->ring);
    r->q = kvt_xcalloc(p->queue_depth, sizeof *r->q);
    r->held_cap = (uint32_t)KVT_MIN(p->retry_bytes / r->buf_bytes, (uint64_t)HELD_MAX);
    if (r->held_cap) r->held = kvt_xcalloc(r->held_cap, sizeof *r->held);
    r->st.budget_bytes = p->size_bytes;
    r->st.value_bytes = r->value_bytes;
    /* hiredis writes with write(2): a Redis that closes the connection must
     * not kill the process with SIGPIPE (left alone if someone handles it) */
    struct sigaction sa;
    if (!sigaction(SIGPIPE, NULL, &sa) && sa.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
    if (p->read_conns > 1 && !(r->pool = kvt_pool_new((int)p->read_conns))) {
        remote_free(r);
        return kvt_fail(-EAGAIN, "remote tier: cannot start %u reader threads", p->read_conns);
    }
    if (pthread_create(&r->writer, NULL, kvt_remote_writer_main, r)) {
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
            kvt_remote_known_ent *e = &r->ring[(r->ring_head + i) % r->ring_cap];
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
    kvt_remote_apply_lost_locked(r);
    int rc = 0;
    if (kvt_hmap128_get(&r->known, hash, NULL) || kvt_remote_queued_slot(r, hash)) rc = 1;
    if (!rc) wait_for_room(r);
    if (!rc && r->q_count == r->p.queue_depth) rc = KVT_ELIMIT;
    if (!rc) rc = kvt_remote_known_add(r, hash, parent, tokens); /* visible from now on: served from the queue */
    if (rc == KVT_ELIMIT) r->st.dropped++;
    if (rc == 1) r->st.dup_puts++;
    if (!rc) {
        /* the slot past the tail is ours until q_count covers it */
        kvt_remote_qslot *q = &r->q[(r->q_head + r->q_count) % r->p.queue_depth];
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

int kvt_remote_contains(kvt_remote *r, kvt_hash128 hash) {
    pthread_mutex_lock(&r->mu);
    kvt_remote_apply_lost_locked(r);
    int in = kvt_hmap128_get(&r->known, hash, NULL) || kvt_remote_queued_slot(r, hash);
    pthread_mutex_unlock(&r->mu);
    return in;
}

int kvt_remote_remove(kvt_remote *r, kvt_hash128 hash) {
    pthread_mutex_lock(&r->mu);
    kvt_remote_apply_lost_locked(r);
    kvt_remote_qslot *q = kvt_remote_queued_slot(r, hash);
    int rc = kvt_hmap128_get(&r->known, hash, NULL) || q ? 0 : KVT_ENOTFOUND;
    if (q) q->cancelled = 1; /* the writer skips it */
    kvt_remote_known_del(r, hash);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int kvt_remote_flush(kvt_remote *r) {
    pthread_mutex_lock(&r->mu);
    r->paused = 0;
    pthread_cond_broadcast(&r->cv_work);
    while (r->q_count) pthread_cond_wait(&r->cv_idle, &r->mu);
    kvt_remote_apply_lost_locked(r);
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
    kvt_remote_apply_lost_locked(r);
    *out = r->st;
    out->known = r->known.count;
    out->queued = r->q_count;
    out->retry_held = r->held_count;
    out->connected = r->rd[0].conn.up;
    pthread_mutex_unlock(&r->mu);
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
    *out = (kvt_tier_stats){.blocks = s.known,
                            .bytes_used = s.known * s.value_bytes,
                            .budget_bytes = s.budget_bytes,
                            .block_cost = s.value_bytes,
                            .hits = s.hits,
                            .misses = s.misses,
                            .puts = s.puts,
                            .evictions = s.forgotten,
                            .dropped = s.dropped};
}

const kvt_tier_ops kvt_remote_tier_ops = {
    .name = "T3 remote",
    .persistent = 1,
    .measured = 1,
    .shared = 1,
    .put = ops_put,
    .get_many = ops_get_many,
    .contains = ops_contains,
    .remove = ops_remove,
    .flush = ops_flush,
    .stats = ops_stats,
};
