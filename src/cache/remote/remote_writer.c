// SPDX-License-Identifier: MIT
/* The remote tier's writer thread (remote_internal.h): takes queued blocks
 * in batches, signs their records (the MAC pass runs here, off the engine's
 * thread) and sends them as one pipeline of SETs on its own connection. A
 * block Redis refused is dropped, counted, and handed to the owner's thread
 * to leave the index (the lost list); one that never reached Redis is held
 * (tier_remote.h "Writes") and sent again once the connection is back. */
#include "remote_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "remote_cluster_internal.h"


/* A block the writer could not store (mu held). */
static void lost_locked(kvt_remote *r, kvt_hash128 hash) {
    r->st.dropped++;
    if (r->n_lost == r->cap_lost) {
        r->cap_lost = r->cap_lost ? 2 * r->cap_lost : 64;
        r->lost = kvt_xrealloc(r->lost, r->cap_lost * sizeof *r->lost);
    }
    r->lost[r->n_lost++] = hash;
}

/* What one pipeline did with each of its blocks. */
typedef struct {
    int ok[WRITE_BATCH_SLOTS];       /* stored (SET answered OK) */
    int answered[WRITE_BATCH_SLOTS]; /* Redis replied (else it never got there: the block may be held) */
    size_t vlen[WRITE_BATCH_SLOTS];  /* the value's length */
    uint32_t sent, stored;
} batch_result;

/* Encodes batch[0..k) (skip[i]: left out) and sends them as one pipeline of
 * SETs on the writer's connection. Writer thread, mu not held: the slots
 * stay where they are (readable by get_many) meanwhile. */
static void send_batch(kvt_remote *r, kvt_remote_qslot *const *batch, uint32_t k, const int *skip, batch_result *res) {
    memset(res, 0, sizeof *res);
    /* compression and the MAC pass run here, off the engine's thread */
    const uint8_t *value[WRITE_BATCH_SLOTS];
    uint32_t zipped = 0, encoded = 0;
    for (uint32_t i = 0; i < k; i++) {
        if (skip[i]) continue;
        encoded++;
        if (r->zbuf && !r->zbuf[i]) r->zbuf[i] = kvt_xmalloc(r->buf_bytes);
        value[i] = kvt_remote_value_encode(r, batch[i], r->zbuf ? r->zbuf[i] : NULL, &res->vlen[i]);
        zipped += value[i] != batch[i]->buf;
    }
    double full = r->p.write_timeout_ms / 1e3, deadline = kvt_now() + full;
    if (r->cl) { /* grouped by the primaries owning the keys */
        res->sent = kvt_remote_cluster_set_batch(r, batch, value, res->vlen, k, skip, res->ok, res->answered, deadline,
                                                 full);
        for (uint32_t i = 0; i < k; i++) res->stored += (uint32_t)res->ok[i];
    }
    redisContext *c = r->cl ? NULL : kvt_remote_conn_get(r, &r->wr, full);
    if (c) {
        char ttl[24];
        snprintf(ttl, sizeof ttl, "%u", r->p.ttl_s);
        for (uint32_t i = 0; i < k; i++) {
            if (skip[i]) continue;
            const char *argv[5] = {"SET", batch[i]->key, (const char *)value[i], "EX", ttl};
            size_t len[5] = {3, KVT_REMOTE_KEY_LEN, res->vlen[i], 2, strlen(ttl)};
            redisAppendCommandArgv(c, r->p.ttl_s ? 5 : 3, argv, len);
            res->sent++;
        }
        for (uint32_t i = 0; i < k; i++) {
            if (skip[i]) continue;
            redisReply *rep = kvt_remote_next_reply(r, &r->wr, deadline, full);
            if (!rep) break; /* the connection is gone: this block and the rest never got an answer */
            res->answered[i] = 1;
            res->ok[i] = rep->type == REDIS_REPLY_STATUS;
            if (!res->ok[i])
                kvt_remote_note_error(r, 0, "%s: SET refused: %s", r->wr.who,
                                      rep->type == REDIS_REPLY_ERROR ? rep->str : "?");
            res->stored += res->ok[i];
            freeReplyObject(rep);
        }
    }
    pthread_mutex_lock(&r->mu);
    if (r->zbuf) {
        r->st.compressed += zipped;
        r->st.incompressible += encoded - zipped;
    }
    r->st.writer_connected = r->wr.up;
    pthread_mutex_unlock(&r->mu);
}

/* Counts a block stored (mu held). */
static void stored_locked(kvt_remote *r, size_t vlen) {
    r->st.puts++;
    r->st.bytes_written += vlen;
    r->st.payload_written += r->p.payload_bytes;
}

/* Holds queue slot q, which never reached Redis, at the ring's tail: its
 * buffer moves there (the slot takes the entry's old one, or none). 0 when
 * the holding is full (counted; the caller drops it). mu held. */
static int hold_locked(kvt_remote *r, kvt_remote_qslot *q) {
    if (r->held_count == r->held_cap) {
        if (r->held_cap) r->st.retry_dropped++;
        return 0;
    }
    uint32_t at = (r->held_head + r->held_count++) % r->held_cap;
    kvt_remote_qslot *h = &r->held[at];
    uint8_t *spare = h->buf;
    *h = *q;
    q->buf = spare;
    q->cancelled = 1; /* until the slot leaves the queue, lookups find the held entry, not it */
    kvt_hmap128_put(&r->held_map, h->hash, at);
    return 1;
}

/* Sends queue slots [q_head, q_head + k); they leave the queue afterwards
 * (stored, held or dropped). */
static void write_batch(kvt_remote *r, uint32_t k) {
    kvt_remote_qslot *batch[WRITE_BATCH_SLOTS] = {0};
    int skip[WRITE_BATCH_SLOTS] = {0};
    pthread_mutex_lock(&r->mu);
    for (uint32_t i = 0; i < k; i++) {
        batch[i] = &r->q[(r->q_head + i) % r->p.queue_depth];
        skip[i] = batch[i]->cancelled;
    }
    pthread_mutex_unlock(&r->mu);
    batch_result res;
    send_batch(r, batch, k, skip, &res);
    pthread_mutex_lock(&r->mu);
    r->writer_failed = res.sent && !res.stored && !r->wr.up;
    for (uint32_t i = 0; i < k; i++) {
        if (skip[i]) continue;
        if (res.ok[i]) stored_locked(r, res.vlen[i]);
        else if (res.answered[i] || batch[i]->cancelled || !hold_locked(r, batch[i])) lost_locked(r, batch[i]->hash);
    }
    pthread_mutex_unlock(&r->mu);
}

/* Removes the oldest held entry (mu held). */
static void held_pop_locked(kvt_remote *r) {
    kvt_remote_qslot *h = &r->held[r->held_head];
    uint32_t at;
    if (kvt_hmap128_get(&r->held_map, h->hash, &at) && at == r->held_head) kvt_hmap128_del(&r->held_map, h->hash);
    r->held_head = (r->held_head + 1) % r->held_cap;
    r->held_count--;
}

/* Sends up to a batch of the oldest held blocks. Those stored or refused
 * leave the holding; from the first that got no answer on, they stay for
 * the next try. Returns how many left. Writer thread, mu not held. */
static uint32_t write_held(kvt_remote *r) {
    kvt_remote_qslot *batch[WRITE_BATCH_SLOTS] = {0};
    int skip[WRITE_BATCH_SLOTS] = {0};
    pthread_mutex_lock(&r->mu);
    uint32_t k = KVT_MIN(r->held_count, (uint32_t)WRITE_BATCH_SLOTS);
    for (uint32_t i = 0; i < k; i++) {
        batch[i] = &r->held[(r->held_head + i) % r->held_cap];
        skip[i] = batch[i]->cancelled;
    }
    pthread_mutex_unlock(&r->mu);
    batch_result res;
    send_batch(r, batch, k, skip, &res);
    pthread_mutex_lock(&r->mu);
    uint32_t done = 0;
    for (; done < k; done++) {
        if (!skip[done] && !res.answered[done]) break;
        if (!skip[done] && res.ok[done]) {
            stored_locked(r, res.vlen[done]);
            r->st.retry_sent++;
        } else if (!skip[done]) {
            lost_locked(r, batch[done]->hash);
        }
        held_pop_locked(r);
    }
    int emptied = done && !r->held_count;
    uint64_t sent = r->st.retry_sent;
    pthread_mutex_unlock(&r->mu);
    if (emptied)
        kvt_logk(KVT_LOG_INFO, "url,retry_sent",
                 "remote tier %s: blocks held while Redis was unreachable are sent (%" PRIu64 " so far)", r->url_text,
                 sent);
    return done;
}

/* Whether held blocks should be tried now: the writer's reconnect time has
 * come (its connection is up, or its backoff has passed). Writer thread, mu held. */
static int held_due(const kvt_remote *r) { return r->held_count && !r->paused && kvt_now() >= r->wr.next_try; }

/* Waits (mu held) for work, or, with blocks held, until the reconnect time. */
static void wait_for_work(kvt_remote *r) {
    double left = r->wr.next_try - kvt_now();
    if (!r->held_count || r->paused || left <= 0) {
        pthread_cond_wait(&r->cv_work, &r->mu);
        return;
    }
    struct timespec until = kvt_deadline_after(left);
    pthread_cond_timedwait(&r->cv_work, &r->mu, &until);
}

/* At close: held blocks that cannot be sent now are dropped (mu held). */
static void drop_held_locked(kvt_remote *r) {
    while (r->held_count) {
        kvt_remote_qslot *h = &r->held[r->held_head];
        if (!h->cancelled) lost_locked(r, h->hash);
        held_pop_locked(r);
    }
}

void *kvt_remote_writer_main(void *arg) {
    kvt_remote *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while ((!r->q_count || r->paused) && !r->stop && !held_due(r)) wait_for_work(r);
        if (r->q_count && !r->paused) {
            uint32_t k = KVT_MIN(r->q_count, (uint32_t)WRITE_BATCH_SLOTS);
            pthread_mutex_unlock(&r->mu);
            write_batch(r, k);
            pthread_mutex_lock(&r->mu);
            r->q_head = (r->q_head + k) % r->p.queue_depth;
            r->q_count -= k;
            pthread_cond_broadcast(&r->cv_room);
            if (!r->q_count) pthread_cond_broadcast(&r->cv_idle);
            continue;
        }
        if (r->held_count && (r->stop || held_due(r))) {
            pthread_mutex_unlock(&r->mu);
            uint32_t done = write_held(r);
            pthread_mutex_lock(&r->mu);
            if (r->stop && !done) drop_held_locked(r); /* one try at close, no waiting for Redis */
            continue;
        }
        if (r->stop) break;
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}
