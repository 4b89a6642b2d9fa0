// SPDX-License-Identifier: MIT
/* The remote tier's reads (remote_internal.h): get_many serves queued blocks
 * from the write queue and the rest with pipelined GETs split over its
 * readers (one connection and one pool thread each), accepting a value only
 * when it is the signed record of exactly the block asked for; probe asks
 * which of a run of blocks exist with pipelined EXISTS on the first reader's
 * connection. Both keep to one deadline per call. */
#include "remote_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "remote_cluster_internal.h"

/* One read call: its deadline, and whether it reached Redis. */
typedef struct {
    double t0, full, deadline;
    int reached;
} read_call;

static void call_begin(kvt_remote *r, read_call *k) {
    k->full = r->p.timeout_ms / 1e3;
    k->t0 = kvt_now();
    k->deadline = k->t0 + k->full;
    k->reached = 0;
}

/* Counts the round trip if it reached Redis (mu held). */
static void call_end_locked(kvt_remote *r, const read_call *k) {
    if (k->reached) {
        r->st.round_trips++;
        r->st.latency_sum_s += kvt_now() - k->t0;
    }
    r->st.connected = r->rd[0].conn.up;
}

/* get_many's fetch of the blocks not served from the queue: reader ith takes
 * todo[ith], todo[ith + nth], ... on its own connection. Strided, not in
 * runs: Redis writes the connections' replies in turns, so the blocks arrive
 * roughly in prefix order across the readers, and a call cut by its deadline
 * still leaves a usable leading run (a restore stops at its first miss). */
typedef struct {
    kvt_remote *r;
    kvt_tier_read *reqs;
    const size_t *todo;
    size_t n;
    const read_call *call;
    kvt_remote_read_part part[KVT_REMOTE_READ_CONNS_MAX];
} fetch_job;

/* GETs a reader keeps in flight on its connection: at least two (the value
 * being read and the next, queued at Redis), and at least READ_WINDOW_BYTES
 * of values, so that small values still go many to a round trip. Redis
 * copies each value it answers into the connection's output buffer and
 * frees it once sent: with a whole restore's GETs pipelined at once it held
 * the whole restore there (64 MiB for 2,048 tokens of the bench model),
 * memory it had to allocate and fault in before the first byte went out. A
 * short window lets Redis reuse the same few buffers while they are still in
 * cache (bench/RESULTS.md "T3 reads with a window of GETs"). */
#define READ_WINDOW_BYTES (1u << 20)

static size_t read_window(const kvt_remote *r) {
    return KVT_MAX((size_t)2, (READ_WINDOW_BYTES + r->value_bytes - 1) / r->value_bytes);
}

/* Sends the GETs of todo[*next], todo[*next + step], ... below upto (and
 * j->n) on rd's connection, and moves *next past them. 0, or -1 (the
 * connection is gone). */
static int send_gets(fetch_job *j, kvt_remote_reader *rd, size_t *next, size_t upto, size_t step) {
    kvt_remote *r = j->r;
    char key[KVT_REMOTE_KEY_LEN + 1];
    size_t i = *next;
    for (; i < KVT_MIN(upto, j->n); i += step) {
        kvt_remote_key(r->p.ns, j->reqs[j->todo[i]].hash, key);
        redisAppendCommand(rd->conn.c, "GET %b", key, (size_t)KVT_REMOTE_KEY_LEN);
    }
    if (i == *next) return 0;
    *next = i;
    return kvt_remote_send(r, &rd->conn);
}

static void fetch_part(void *ctx, int ith, int nth) {
    fetch_job *j = ctx;
    kvt_remote *r = j->r;
    size_t step = (size_t)nth, next = (size_t)ith, win = read_window(r);
    kvt_remote_reader *rd = &r->rd[ith];
    redisContext *c = (size_t)ith < j->n ? kvt_remote_conn_get(r, &rd->conn, j->call->full) : NULL;
    if (!c) return;
    j->part[ith].reached = 1;
    double deadline = j->call->deadline;
    for (size_t i = (size_t)ith; i < j->n; i += step) {
        if (send_gets(j, rd, &next, i + win * step, step)) break;
        kvt_tier_read *q = &j->reqs[j->todo[i]];
        size_t len;
        int ok, rc = kvt_remote_read_value(r, &rd->conn, rd, deadline, q, &len, &ok);
        if (rc == KVT_BULK_FAILED) break; /* the rest of the pipeline is lost with the connection: misses */
        j->part[ith].bytes += len;
        deadline += kvt_remote_read_credit_s(r, len, nth);
        if (ok) {
            q->result = 0;
            j->part[ith].hits++;
        } else if (rc == KVT_BULK_VALUE || rc == KVT_BULK_TOO_LONG) {
            j->part[ith].bad++;
        }
    }
}

size_t kvt_remote_get_many(kvt_remote *r, kvt_tier_read *reqs, size_t n) {
    if (r->cl) return kvt_remote_cluster_get_many(r, reqs, n);
    if (!n) return 0;
    for (size_t i = 0; i < n; i++) reqs[i].result = KVT_ENOTFOUND;
    pthread_mutex_lock(&r->mu);
    kvt_remote_apply_lost_locked(r);
    size_t hits = kvt_remote_read_queued(r, reqs, n);
    pthread_mutex_unlock(&r->mu);
    read_call k;
    call_begin(r, &k);
    size_t *todo = kvt_xmalloc(n * sizeof *todo), n_todo = 0;
    for (size_t i = 0; i < n; i++)
        if (reqs[i].result) todo[n_todo++] = i;
    fetch_job j = {.r = r, .reqs = reqs, .todo = todo, .n = n_todo, .call = &k};
    if (n_todo > 1) kvt_pool_run(r->pool, fetch_part, &j);
    else if (n_todo) fetch_part(&j, 0, 1);
    free(todo);
    kvt_remote_read_part sum = kvt_remote_read_sum(j.part);
    hits += sum.hits;
    k.reached |= sum.reached;
    pthread_mutex_lock(&r->mu);
    call_end_locked(r, &k);
    kvt_remote_read_count_locked(r, n, hits, &sum);
    pthread_mutex_unlock(&r->mu);
    kvt_remote_read_forget(r, reqs, n, sum.bad);
    return hits;
}

size_t kvt_remote_probe(kvt_remote *r, kvt_hash128 parent, const int32_t *tokens, const kvt_hash128 *hashes,
                        size_t n_blocks) {
    if (r->cl) return kvt_remote_cluster_probe(r, parent, tokens, hashes, n_blocks);
    if (!n_blocks) return 0;
    pthread_mutex_lock(&r->mu);
    kvt_remote_apply_lost_locked(r);
    r->st.probes++;
    r->st.probe_blocks += n_blocks;
    pthread_mutex_unlock(&r->mu);
    read_call k;
    call_begin(r, &k);
    kvt_remote_conn *conn = &r->rd[0].conn;
    redisContext *c = kvt_remote_conn_get(r, conn, k.full);
    k.reached = c != NULL;
    size_t run = 0;
    int in_run = 1;
    if (c) {
        char key[KVT_REMOTE_KEY_LEN + 1];
        for (size_t i = 0; i < n_blocks; i++) {
            kvt_remote_key(r->p.ns, hashes[i], key);
            redisAppendCommand(c, "EXISTS %b", key, (size_t)KVT_REMOTE_KEY_LEN);
        }
        for (size_t i = 0; i < n_blocks; i++) {
            redisReply *rep = kvt_remote_next_reply(r, conn, k.deadline, k.full);
            if (!rep) break;
            int found = rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
            freeReplyObject(rep);
            /* registration contract: only the leading run, each after its parent */
            if (in_run && found &&
                !kvt_remote_known_add(r, hashes[i], i ? hashes[i - 1] : parent, tokens + i * (size_t)r->p.block_tokens))
                run++;
            else in_run = 0;
        }
    }
    pthread_mutex_lock(&r->mu);
    call_end_locked(r, &k);
    r->st.probe_found += run;
    pthread_mutex_unlock(&r->mu);
    return run;
}
