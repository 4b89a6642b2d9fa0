/* The remote tier's writer thread (remote_internal.h): takes queued blocks
 * in batches, signs their records (the MAC pass runs here, off the engine's
 * thread) and sends them as one pipeline of SETs on its own connection. A
 * block it cannot store is dropped, counted, and handed to the owner's
 * thread to leave the index (the lost list). */
#include "remote_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"


/* A block the writer could not store (mu held). */
static void lost_locked(kvt_remote *r, kvt_hash128 hash) {
    r->st.dropped++;
    if (r->n_lost == r->cap_lost) {
        r->cap_lost = r->cap_lost ? 2 * r->cap_lost : 64;
        r->lost = kvt_xrealloc(r->lost, r->cap_lost * sizeof *r->lost);
    }
    r->lost[r->n_lost++] = hash;
}

/* Encodes and sends slots [q_head, q_head + k) as one pipeline of SETs. The
 * slots stay in the queue (readable by get_many) until this returns. */
static void write_batch(kvt_remote *r, uint32_t k) {
    kvt_remote_qslot *batch[WRITE_BATCH_SLOTS];
    int skip[WRITE_BATCH_SLOTS];
    pthread_mutex_lock(&r->mu);
    for (uint32_t i = 0; i < k; i++) {
        batch[i] = &r->q[(r->q_head + i) % r->p.queue_depth];
        skip[i] = batch[i]->cancelled;
    }
    pthread_mutex_unlock(&r->mu);
    /* compression and the MAC pass run here, off the engine's thread */
    const uint8_t *value[WRITE_BATCH_SLOTS];
    size_t vlen[WRITE_BATCH_SLOTS];
    uint32_t zipped = 0, encoded = 0;
    for (uint32_t i = 0; i < k; i++) {
        if (skip[i]) continue;
        encoded++;
        if (r->zbuf && !r->zbuf[i]) r->zbuf[i] = kvt_xmalloc(r->buf_bytes);
        value[i] = kvt_remote_value_encode(r, batch[i], r->zbuf ? r->zbuf[i] : NULL, &vlen[i]);
        zipped += value[i] != batch[i]->buf;
    }
    double full = r->p.write_timeout_ms / 1e3, deadline = kvt_now() + full;
    redisContext *c = kvt_remote_conn_get(r, &r->wr, full);
    uint32_t sent = 0, stored = 0;
    int ok[WRITE_BATCH_SLOTS] = {0};
    if (c) {
        char ttl[24];
        snprintf(ttl, sizeof ttl, "%u", r->p.ttl_s);
        for (uint32_t i = 0; i < k; i++) {
            if (skip[i]) continue;
            const char *argv[5] = {"SET", batch[i]->key, (const char *)value[i], "EX", ttl};
            size_t len[5] = {3, KVT_REMOTE_KEY_LEN, vlen[i], 2, strlen(ttl)};
            redisAppendCommandArgv(c, r->p.ttl_s ? 5 : 3, argv, len);
            sent++;
        }
        for (uint32_t i = 0; i < k; i++) {
            if (skip[i]) continue;
            redisReply *rep = kvt_remote_next_reply(r, &r->wr, deadline, full);
            if (!rep) break;
            ok[i] = rep->type == REDIS_REPLY_STATUS;
            if (!ok[i])
                kvt_remote_note_error(r, 0, "%s: SET refused: %s", r->wr.who,
                                      rep->type == REDIS_REPLY_ERROR ? rep->str : "?");
            stored += ok[i];
            freeReplyObject(rep);
        }
    }
    pthread_mutex_lock(&r->mu);
    r->writer_failed = sent && !stored && !r->wr.up;
    if (r->zbuf) {
        r->st.compressed += zipped;
        r->st.incompressible += encoded - zipped;
    }
    for (uint32_t i = 0; i < k; i++) {
        if (skip[i]) continue;
        if (ok[i]) {
            r->st.puts++;
            r->st.bytes_written += vlen[i];
            r->st.payload_written += r->p.payload_bytes;
        } else {
            lost_locked(r, batch[i]->hash);
        }
    }
    r->st.writer_connected = r->wr.up;
    pthread_mutex_unlock(&r->mu);
}

void *kvt_remote_writer_main(void *arg) {
    kvt_remote *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while ((!r->q_count || r->paused) && !r->stop) pthread_cond_wait(&r->cv_work, &r->mu);
        if (!r->q_count) break;
        uint32_t k = KVT_MIN(r->q_count, (uint32_t)WRITE_BATCH_SLOTS);
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
