/* The remote tier's reads (remote_internal.h): get_many serves queued blocks
 * from the write queue and the rest with pipelined GETs, accepting a value
 * only when it is the signed record of exactly the block asked for; probe
 * asks which of a run of blocks exist with pipelined EXISTS. Both keep to one
 * deadline per call and run on the owner's thread. */
#include "remote_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "disk_record.h"

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
        kvt_remote_qslot *q = kvt_remote_queued_slot(r, reqs[i].hash);
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

/* One read call's round trip: the connection (NULL while Redis is
 * unreachable) and its deadline. */
typedef struct {
    redisContext *c;
    double t0, full, deadline;
} read_call;

static void call_begin(kvt_remote *r, read_call *k, int need_redis) {
    k->full = r->p.timeout_ms / 1e3;
    k->t0 = kvt_now();
    k->deadline = k->t0 + k->full;
    k->c = need_redis ? kvt_remote_conn_get(r, &r->rd, k->full) : NULL;
}

/* Counts the round trip if it reached Redis (mu held). */
static void call_end_locked(kvt_remote *r, const read_call *k) {
    if (k->c) {
        r->st.round_trips++;
        r->st.latency_sum_s += kvt_now() - k->t0;
    }
    r->st.connected = r->rd.up;
}

size_t kvt_remote_get_many(kvt_remote *r, kvt_tier_read *reqs, size_t n) {
    if (!n) return 0;
    for (size_t i = 0; i < n; i++) reqs[i].result = KVT_ENOTFOUND;
    pthread_mutex_lock(&r->mu);
    kvt_remote_apply_lost_locked(r);
    size_t hits = read_queued(r, reqs, n);
    pthread_mutex_unlock(&r->mu);
    uint64_t bad = 0, bytes = 0;
    read_call k;
    call_begin(r, &k, hits < n);
    if (k.c) {
        char key[KVT_REMOTE_KEY_LEN + 1];
        for (size_t i = 0; i < n; i++) {
            if (!reqs[i].result) continue;
            kvt_remote_key(r->p.ns, reqs[i].hash, key);
            redisAppendCommand(k.c, "GET %b", key, (size_t)KVT_REMOTE_KEY_LEN);
        }
        for (size_t i = 0; i < n; i++) {
            if (!reqs[i].result) continue;
            redisReply *rep = kvt_remote_next_reply(r, &r->rd, k.deadline, k.full);
            if (!rep) break; /* the rest of the pipeline is lost with the connection: misses */
            if (rep->type == REDIS_REPLY_STRING) {
                bytes += rep->len;
                if (!accept_value(r, rep->str, rep->len, &reqs[i])) {
                    reqs[i].result = 0;
                    hits++;
                } else {
                    bad++;
                }
            } else if (rep->type == REDIS_REPLY_ERROR) {
                kvt_remote_note_error(r, 0, "%s: GET refused: %s", r->rd.who, rep->str);
            }
            freeReplyObject(rep);
        }
    }
    pthread_mutex_lock(&r->mu);
    call_end_locked(r, &k);
    r->st.bytes_read += bytes;
    r->st.bad += bad;
    r->st.hits += hits;
    r->st.misses += n - hits;
    pthread_mutex_unlock(&r->mu);
    if (bad) kvt_log(KVT_LOG_DEBUG, "remote tier: %" PRIu64 " values refused (CRC, MAC or identity)", bad);
    for (size_t i = 0; i < n; i++)
        if (reqs[i].result) kvt_remote_known_del(r, reqs[i].hash); /* evicted, expired, refused or unreachable */
    return hits;
}

size_t kvt_remote_probe(kvt_remote *r, kvt_hash128 parent, const int32_t *tokens, const kvt_hash128 *hashes,
                        size_t n_blocks) {
    if (!n_blocks) return 0;
    pthread_mutex_lock(&r->mu);
    kvt_remote_apply_lost_locked(r);
    r->st.probes++;
    r->st.probe_blocks += n_blocks;
    pthread_mutex_unlock(&r->mu);
    read_call k;
    call_begin(r, &k, 1);
    size_t run = 0;
    int in_run = 1;
    if (k.c) {
        char key[KVT_REMOTE_KEY_LEN + 1];
        for (size_t i = 0; i < n_blocks; i++) {
            kvt_remote_key(r->p.ns, hashes[i], key);
            redisAppendCommand(k.c, "EXISTS %b", key, (size_t)KVT_REMOTE_KEY_LEN);
        }
        for (size_t i = 0; i < n_blocks; i++) {
            redisReply *rep = kvt_remote_next_reply(r, &r->rd, k.deadline, k.full);
            if (!rep) break;
            int found = rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
            freeReplyObject(rep);
            /* registration contract: only the leading run, each after its parent */
            if (in_run && found &&
                !kvt_remote_known_add(r, hashes[i], i ? hashes[i - 1] : parent, tokens + i * (size_t)r->p.block_tokens))
                run++;
            else
                in_run = 0;
        }
    }
    pthread_mutex_lock(&r->mu);
    call_end_locked(r, &k);
    r->st.probe_found += run;
    pthread_mutex_unlock(&r->mu);
    return run;
}
