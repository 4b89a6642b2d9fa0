// SPDX-License-Identifier: MIT
/* The remote tier's private parts (tier_remote.h is the contract), shared by
 * its files:
 *   tier_remote.c   open/close, the key file, the owner API
 *   remote_known.c  the known set (T3 presence in the index) and the queue
 *                   lookup: the other files call down into it
 *   remote_conn.c   URLs, connections with deadlines and backoff, error logging
 *   remote_read.c   get_many (over the reader threads) and probe
 *   remote_value.c  a block's key, and the value codec: record, zstd, MAC;
 *                   checks a value against the block asked for
 *   remote_writer.c the write queue's writer thread: encode and SET
 *   remote_maint.c  SCAN/UNLINK maintenance (kvtier cache --kv-remote)
 *   remote_cluster.c Redis Cluster: URLs, the slot map, nodes and their
 *                   connections (remote_cluster_internal.h)
 *   remote_cluster_io.c Redis Cluster: get_many, probe and the writer's SETs
 *                   grouped by node, redirects
 * Threading as in tier_remote.h: `mu` guards the queue, the lost list and
 * the stats; the owner's thread alone touches the known set and (through
 * get_many's pool, one reader per thread) the readers, the writer alone
 * touches wr. */
#ifndef KVT_REMOTE_INTERNAL_H
#define KVT_REMOTE_INTERNAL_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <zstd.h>

#include "hmap128.h"
#include "threadpool.h"
#include "tier_disk.h"
#include "tier_remote.h"

#define KVT_REMOTE_URL_PART_MAX 256
/* SETs sent in one pipelined batch by the writer (and its compression buffers). */
#define WRITE_BATCH_SLOTS 32

/* One connection with its own reconnect schedule. Owned by one thread. */
typedef struct {
    redisContext *c;
    double next_try;  /* kvt_now() before which no reconnect is tried */
    double backoff_s; /* the wait after the next failure */
    int up;
    const char *who;                 /* "reads", "writes": for log lines */
    const struct kvt_remote_url *to; /* where it connects; NULL: the tier's URL */
} kvt_remote_conn;

/* Bytes read from a socket ahead of the reply being parsed. */
typedef struct {
    uint8_t *buf;
    size_t pos, len, cap;
    char redirect[128]; /* the last MOVED/ASK error line (KVT_BULK_REDIRECT), without its '-' */
} kvt_remote_inbuf;

/* One of get_many's readers: a connection and the buffers its thread uses. */
typedef struct {
    kvt_remote_conn conn;
    kvt_remote_inbuf in;
    uint8_t *value;  /* one value as read (value_bytes; checked in place) */
    ZSTD_DCtx *dctx; /* created on the first compressed value */
} kvt_remote_reader;

typedef struct {
    kvt_hash128 hash, parent;
    char key[KVT_REMOTE_KEY_LEN + 1];
    uint8_t *buf;  /* record: tokens at KVT_DISK_HEADER_FIXED, payload after the header (room for padding) */
    int cancelled; /* kvt_remote_remove while queued (mu) */
} kvt_remote_qslot;

typedef struct {
    kvt_hash128 hash;
    int live; /* 0: removed since it was pushed (its map entry is gone) */
} kvt_remote_known_ent;

typedef struct kvt_remote_url {
    char host[KVT_REMOTE_URL_PART_MAX], path[KVT_REMOTE_URL_PART_MAX], user[KVT_REMOTE_URL_PART_MAX],
        pass[KVT_REMOTE_URL_PART_MAX];
    int port, db, is_unix;
    int cluster;       /* redis-cluster://: seeds holds every host:port given */
    int replica_reads; /* cluster URL parameter replica_reads=yes */
    int readonly;      /* send READONLY after connecting (a cluster replica serving reads) */
    char seeds[4 * KVT_REMOTE_URL_PART_MAX];
    /* user_only: the URL gave user@ without a password (a file must give it);
     * pass_from_file: pass came from --kv-remote-password-file (for messages) */
    int user_only, pass_from_file;
} kvt_remote_url;

struct kvt_remote_cluster;

struct kvt_remote {
    kvt_remote_params p;
    char *url_text;
    kvt_remote_url url;
    kvt_disk_record_key *key;      /* prepared once; read by every thread */
    struct kvt_remote_cluster *cl; /* a Redis Cluster (remote_cluster_internal.h); NULL: one server */
    size_t header_bytes, value_bytes, buf_bytes;

    /* owner thread only */
    kvt_remote_reader rd[KVT_REMOTE_READ_CONNS_MAX]; /* [0] also serves probe */
    kvt_pool *pool;                                  /* read_conns threads, the owner's included */
    kvt_hmap128 known;                               /* hash -> position in ring */
    kvt_remote_known_ent *ring;                      /* FIFO of known blocks, oldest at ring_head */
    uint32_t ring_cap, ring_head, ring_count;

    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t cv_work, cv_room, cv_idle;
    pthread_t writer;
    int writer_started, stop, paused;
    kvt_remote_qslot *q;
    uint32_t q_head, q_count;
    /* blocks that never reached Redis, held for its return (tier_remote.h
     * "Writes"): a ring of held_cap, oldest at held_head, found by hash
     * through held_map. The writer alone adds and removes entries; the owner
     * reads them (get_many, contains) and cancels them (remove). */
    kvt_remote_qslot *held;
    uint32_t held_cap, held_head, held_count;
    kvt_hmap128 held_map; /* hash -> ring position */
    kvt_hash128 *lost;    /* blocks the writer dropped: their presence leaves at the next owner call */
    size_t n_lost, cap_lost;
    int writer_failed; /* the writer's last batch could not reach Redis */
    double last_log;
    uint64_t unlogged; /* errors since the last log line */
    kvt_remote_stats st;

    /* writer thread only */
    kvt_remote_conn wr;
    ZSTD_CCtx *cctx;
    uint8_t **zbuf; /* per batch slot: a compressed record (with compression on) */
};

/* ---- remote_conn.c ---- */

/* redis://[user:pass@]host[:port][/db] or unix:///path into u. 0 or KVT_EARG
 * (the message names the part). The password is kept for AUTH, never printed.
 * A user@ without a password is let through (user_only): see _auth. */
int kvt_remote_parse_url(const char *url, kvt_remote_url *u);

/* kvt_remote_parse_url, then the password from password_file (NULL: none):
 * its one line, read like the key file (no links, ours, mode 0600), sent
 * with the URL's user if it has one. A URL with a password of its own and a
 * file, or a user@ and no file, is KVT_EARG; a file that cannot be used is
 * KVT_EARG or -errno (the message names the flag and file, never the
 * password). */
int kvt_remote_parse_url_auth(const char *url, const char *password_file, kvt_remote_url *u);

/* url as logs and messages show it: a password in it replaced by "***"
 * (the user kept), into out (cap bytes). */
void kvt_remote_url_shown(const char *url, char *out, size_t cap);

/* A connection to u with timeout_s for connect and every call, authenticated
 * and on its database; NULL with the reason in err. */
redisContext *kvt_remote_connect_url(const kvt_remote_url *u, double timeout_s, char *err, size_t cap);

/* Whether a connection error or reply is the server refusing our
 * credentials, or asking for some: WRONGPASS (Redis 6+), NOAUTH, and the
 * AUTH errors of a server with no password set or from before ACLs. */
int kvt_remote_auth_refused(const char *err);
/* kvt_remote_note_error's format for such a refusal. */
#define KVT_REMOTE_LOGIN_FMT \
    "%s: cannot log in: %s (check the user and password in --kv-remote or --kv-remote-password-file)"

/* Counts an error and logs it, at most once per KVT_REMOTE_LOG_INTERVAL_S
 * (takes mu). fmt has two %s: who and detail. */
void kvt_remote_note_error(kvt_remote *r, int timeout, const char *fmt, const char *who, const char *detail);

/* k's connection, (re)connecting if its backoff allows, with every call's
 * socket timeout set to timeout_s; NULL while Redis is unreachable. */
redisContext *kvt_remote_conn_get(kvt_remote *r, kvt_remote_conn *k, double timeout_s);

void kvt_remote_conn_drop(kvt_remote_conn *k);

/* The next pipelined reply on k before deadline (full_s: the call's whole
 * timeout). On a timeout or connection error: counted, logged, the
 * connection dropped (the pipeline is out of step) and NULL. */
redisReply *kvt_remote_next_reply(kvt_remote *r, kvt_remote_conn *k, double deadline, double full_s);

/* Sends the commands appended to k's context. 0, or -1 (counted, logged,
 * connection dropped). */
int kvt_remote_send(kvt_remote *r, kvt_remote_conn *k);

/* Outcomes of reading a value's reply (kvt_remote_bulk_head, kvt_remote_read_value). */
enum {
    KVT_BULK_FAILED = -1,
    KVT_BULK_VALUE = 0,
    KVT_BULK_NIL = 1,
    KVT_BULK_TOO_LONG = 2,
    KVT_BULK_ERROR = 3,
    KVT_BULK_REDIRECT = 4 /* a cluster's MOVED or ASK: the line is in in->redirect, not logged */
};

/* The next pipelined reply on k, expected to be a bulk string, read in parts
 * without the client library, so that a value can be checked while it
 * arrives: its bytes come from the socket through the small read-ahead
 * buffer in, before deadline. Only on a connection whose client-library
 * reader holds no bytes (kvt_remote_send checks).
 * _head reads the reply's first line: KVT_BULK_VALUE (a value of *len bytes
 * follows, not read yet), KVT_BULK_NIL, KVT_BULK_ERROR (an error reply,
 * logged), KVT_BULK_REDIRECT (MOVED/ASK, kept in in->redirect) or
 * KVT_BULK_FAILED (timeout, connection error or a reply of another type:
 * counted, logged, connection dropped).
 * _some then reads 1..n of the value's bytes into dst and says how many, or
 * 0 as KVT_BULK_FAILED (nothing more may be read on k).
 * _end drops the next skip bytes of the value and reads the reply's CRLF:
 * KVT_BULK_VALUE, or KVT_BULK_FAILED. */
int kvt_remote_bulk_head(kvt_remote *r, kvt_remote_conn *k, kvt_remote_inbuf *in, double deadline, size_t *len);
size_t kvt_remote_bulk_some(kvt_remote *r, kvt_remote_conn *k, kvt_remote_inbuf *in, double deadline, uint8_t *dst,
                            size_t n);
int kvt_remote_bulk_end(kvt_remote *r, kvt_remote_conn *k, kvt_remote_inbuf *in, double deadline, size_t skip);

/* ---- remote_value.c ---- */

/* Whether value[0..len) is the record of exactly the block req asks for
 * (namespace, key, parent, tokens, B, payload size), intact (CRCs) and signed
 * under our key; if so its payload is decoded into req->out and 0 returned,
 * else -1. value is modified during the MAC check and restored. *dctx is
 * created on the first compressed value. */
int kvt_remote_value_accept(const kvt_remote *r, ZSTD_DCtx **dctx, uint8_t *value, size_t len, const kvt_tier_read *req);

/* Reads the next pipelined reply on k as the value of req, with rd's
 * buffers, before deadline. A raw value whose header matches req is not
 * read whole and then copied: its payload is taken from the socket a piece
 * at a time, each piece added to the payload CRC and copied to req->out at
 * once, and the MAC checked over the whole value at its end; any other value
 * is read whole and checked by kvt_remote_value_accept. Returns
 * KVT_BULK_VALUE (*ok: 1 accepted, req->out holds the payload; 0 refused,
 * req->out undefined), KVT_BULK_TOO_LONG (a value longer than ours, dropped
 * unread) or another outcome of kvt_remote_bulk_head. *len: the value's length. */
int kvt_remote_read_value(kvt_remote *r, kvt_remote_conn *k, kvt_remote_reader *rd, double deadline, kvt_tier_read *req,
                          size_t *len, int *ok);

/* Encodes a queued block as a value: raw in place in q->buf, or (with
 * compression on, when it shrinks) zstd into zbuf (buf_bytes). Signs it.
 * Returns the value and its length in *len. Writer thread. */
const uint8_t *kvt_remote_value_encode(kvt_remote *r, kvt_remote_qslot *q, uint8_t *zbuf, size_t *len);

/* ---- remote_known.c: the known set (owner thread) and the queue (mu held) ---- */

/* Records T3 presence of a block (the oldest known block is forgotten when
 * the known set is full). 0, or -EEXIST if the index refuses it. */
int kvt_remote_known_add(kvt_remote *r, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens);
void kvt_remote_known_del(kvt_remote *r, kvt_hash128 hash);
/* The queue slot, or held entry, holding hash (not cancelled), or NULL (mu held). */
kvt_remote_qslot *kvt_remote_queued_slot(kvt_remote *r, kvt_hash128 hash);
/* Serves the reads whose block is still in the write queue (its parent and
 * tokens checked) and counts them as queue hits; how many (mu held). */
size_t kvt_remote_read_queued(kvt_remote *r, kvt_tier_read *reqs, size_t n);
/* Blocks the writer dropped leave the index (owner thread, mu held). */
void kvt_remote_apply_lost_locked(kvt_remote *r);

/* ---- remote_known.c: the end of a get_many, single-server and cluster ---- */

/* One reader thread's share of a get_many: values accepted (hits) and refused
 * (bad), bytes read, whether it reached Redis, and (cluster only) whether a
 * node failed or answered for a map out of date. */
typedef struct {
    uint64_t hits, bad, bytes;
    int reached, failed;
} kvt_remote_read_part;

/* How far a get_many reader's deadline moves on for a value of len bytes it
 * read, one of nth readers: the time it would take at its share of
 * params.read_floor_mbps (tier_remote.h "Reads never block"). */
double kvt_remote_read_credit_s(const kvt_remote *r, size_t len, int nth);

/* The readers' parts of one get_many, summed (reached and failed: any part's). */
kvt_remote_read_part kvt_remote_read_sum(const kvt_remote_read_part part[KVT_REMOTE_READ_CONNS_MAX]);
/* Counts a get_many of n reads, hits of them served (queue and Redis), with
 * sum's values refused and bytes read, in the stats (mu held). */
void kvt_remote_read_count_locked(kvt_remote *r, size_t n, size_t hits, const kvt_remote_read_part *sum);
/* After the count (mu not held): logs the values refused, and forgets the
 * blocks not read (evicted, expired, refused or unreachable), so that the
 * index stops offering them. */
void kvt_remote_read_forget(kvt_remote *r, const kvt_tier_read *reqs, size_t n, uint64_t bad);

/* ---- remote_writer.c ---- */

/* The writer thread: drains the queue in pipelined batches. arg: the tier. */
void *kvt_remote_writer_main(void *arg);

#endif
