// SPDX-License-Identifier: MIT
/* T3 on a Redis Cluster (remote_cluster_internal.h): get_many, probe and
 * the writer's SETs, each batch grouped by the node owning its keys, every
 * node's pipeline sent before any reply is read, under the call's one
 * deadline. A MOVED or ASK reply sends the key once more, in a second round
 * (ASKING first for ASK); anything else that fails is a miss (reads) or a
 * block held for the writer's next try. */
#include "remote_cluster_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* One command of a grouped round: the node it goes to, ASKING first or not,
 * and the caller's item. */
typedef struct {
    int node, asking;
    size_t item;
} cl_op;

typedef struct {
    void (*append)(void *ctx, redisContext *c, size_t item);
    /* rep: the reply, or NULL when the node never answered it */
    void (*reply)(void *ctx, size_t item, int node, redisReply *rep);
    void *ctx;
} cl_round_fn;

static kvt_remote_conn *conn_of(kvt_remote *r, int node, int reader) {
    kvt_cl_node *nd = &r->cl->nodes[node];
    return reader >= 0 ? &nd->rd[reader] : &nd->wr;
}

/* Runs ops[0..n) with the client library: every node's commands appended and
 * sent first, then the replies read node by node. reader: the reader
 * thread's connections, or -1 for the writer's. Returns the nodes that failed. */
static int run_round(kvt_remote *r, const cl_op *ops, size_t n, int reader, double deadline, double full,
                     const cl_round_fn *fn) {
    char state[KVT_CL_NODES_MAX] = {0}; /* 0: no ops, 1: sent, 2: failed */
    int failed = 0;
    for (size_t i = 0; i < n; i++) state[ops[i].node] = 3; /* to send */
    for (int nd = 0; nd < KVT_CL_NODES_MAX; nd++) {
        if (state[nd] != 3) continue;
        kvt_remote_conn *k = conn_of(r, nd, reader);
        redisContext *c = kvt_remote_conn_get(r, k, full);
        state[nd] = 2;
        if (!c) continue;
        for (size_t i = 0; i < n; i++)
            if (ops[i].node == nd) {
                if (ops[i].asking) redisAppendCommand(c, "ASKING");
                fn->append(fn->ctx, c, ops[i].item);
            }
        if (!kvt_remote_send(r, k)) state[nd] = 1;
    }
    for (int nd = 0; nd < KVT_CL_NODES_MAX; nd++) {
        if (!state[nd]) continue;
        kvt_remote_conn *k = conn_of(r, nd, reader);
        for (size_t i = 0; i < n; i++) {
            if (ops[i].node != nd) continue;
            redisReply *rep = NULL;
            if (state[nd] == 1 && ops[i].asking) {
                rep = kvt_remote_next_reply(r, k, deadline, full);
                if (rep) freeReplyObject(rep);
                else state[nd] = 2;
                rep = NULL;
            }
            if (state[nd] == 1 && !(rep = kvt_remote_next_reply(r, k, deadline, full))) state[nd] = 2;
            fn->reply(fn->ctx, ops[i].item, nd, rep);
            if (rep) freeReplyObject(rep);
        }
        failed += state[nd] == 2;
    }
    return failed;
}

/* A MOVED/ASK error reply from node `from` as a second-round op for item
 * (counted), else 0. */
static int redirect_op(kvt_remote *r, const redisReply *rep, int from, size_t item, cl_op *out) {
    if (!rep || rep->type != REDIS_REPLY_ERROR || (strncmp(rep->str, "MOVED ", 6) && strncmp(rep->str, "ASK ", 4)))
        return 0;
    pthread_mutex_lock(&r->mu);
    r->cl->nodes[from].st.redirects++;
    pthread_mutex_unlock(&r->mu);
    int asking, nd = kvt_remote_cluster_redirect(r, rep->str, &asking);
    if (nd < 0) return 0;
    *out = (cl_op){.node = nd, .asking = asking, .item = item};
    return 1;
}

/* ---- get_many ------------------------------------------------------------------- */

typedef struct {
    uint64_t hits, misses, redirects, errors;
} node_count;

/* One reader thread's share of a get_many: items todo[ith], todo[ith + nth], ... */
typedef struct {
    kvt_remote *r;
    kvt_tier_read *reqs;
    const size_t *todo;
    size_t n;
    double full, deadline;
    kvt_remote_read_part part[KVT_REMOTE_READ_CONNS_MAX];
} cl_fetch;

/* Per-thread state of a fetch_part (its own items, their nodes, counters). */
typedef struct {
    cl_fetch *j;
    int ith, nth;
    double credit; /* how far this thread's deadline has moved on (kvt_remote_read_credit_s) */
    node_count cnt[KVT_CL_NODES_MAX];
} fetch_thread;

/* Counts a value of len bytes read for q from node: served (ok) or refused. */
static void count_value(fetch_thread *t, kvt_tier_read *q, int node, size_t len, int ok) {
    t->j->part[t->ith].bytes += len;
    if (ok) {
        q->result = 0;
        t->j->part[t->ith].hits++;
        t->cnt[node].hits++;
        return;
    }
    t->j->part[t->ith].bad++;
}

static void check_value(fetch_thread *t, kvt_tier_read *q, int node, uint8_t *value, size_t len, int too_long) {
    kvt_remote *r = t->j->r;
    kvt_remote_reader *rd = &r->rd[t->ith];
    count_value(t, q, node, len, !too_long && !kvt_remote_value_accept(r, &rd->dctx, value, len, q));
}

static void get_append(void *ctx, redisContext *c, size_t item) {
    fetch_thread *t = ctx;
    char key[KVT_REMOTE_KEY_LEN + 1];
    kvt_remote_key(t->j->r->p.ns, t->j->reqs[item].hash, key);
    redisAppendCommand(c, "GET %b", key, (size_t)KVT_REMOTE_KEY_LEN);
}

static void get_reply(void *ctx, size_t item, int node, redisReply *rep) {
    fetch_thread *t = ctx;
    if (!rep) t->cnt[node].errors++;
    else if (rep->type == REDIS_REPLY_STRING)
        check_value(t, &t->j->reqs[item], node, (uint8_t *)rep->str, rep->len, rep->len > t->j->r->value_bytes);
    else if (rep->type == REDIS_REPLY_ERROR) {
        t->cnt[node].redirects += !strncmp(rep->str, "MOVED", 5) || !strncmp(rep->str, "ASK", 3);
        int asking;
        if (!strncmp(rep->str, "MOVED ", 6)) kvt_remote_cluster_redirect(t->j->r, rep->str, &asking); /* the map */
    }
}

/* Reads one node's pipelined GETs (items[0..n)) straight from the socket;
 * redirected items go to redo. Returns 0, or -1 if the connection was lost. */
static int read_node(fetch_thread *t, int node, const size_t *items, size_t n, cl_op *redo, size_t *n_redo) {
    kvt_remote *r = t->j->r;
    kvt_remote_reader *rd = &r->rd[t->ith];
    kvt_remote_conn *k = conn_of(r, node, t->ith);
    for (size_t i = 0; i < n; i++) {
        kvt_tier_read *q = &t->j->reqs[items[i]];
        size_t len;
        int ok, rc = kvt_remote_read_value(r, k, rd, t->j->deadline + t->credit, q, &len, &ok);
        if (rc == KVT_BULK_FAILED) {
            t->cnt[node].errors++;
            return -1;
        }
        t->credit += kvt_remote_read_credit_s(r, len, t->nth);
        if (rc == KVT_BULK_VALUE || rc == KVT_BULK_TOO_LONG) count_value(t, q, node, len, ok);
        if (rc == KVT_BULK_REDIRECT) {
            t->cnt[node].redirects++;
            int asking, to = kvt_remote_cluster_redirect(r, rd->in.redirect, &asking);
            if (to >= 0) redo[(*n_redo)++] = (cl_op){.node = to, .asking = asking, .item = items[i]};
        }
    }
    rd->in.pos = rd->in.len = 0; /* every reply of this node is read */
    return 0;
}

/* Long: groups, sends and reads one thread's share node by node, then the redirected round. */
static void fetch_part(void *ctx, int ith, int nth) {
    cl_fetch *j = ctx;
    kvt_remote *r = j->r;
    kvt_remote_cluster *cl = r->cl;
    size_t mine = j->n > (size_t)ith ? (j->n - (size_t)ith + (size_t)nth - 1) / (size_t)nth : 0;
    if (!mine) return;
    fetch_thread *t = kvt_xcalloc(1, sizeof *t);
    t->j = j;
    t->ith = ith;
    t->nth = nth;
    size_t *item = kvt_xmalloc(mine * sizeof *item), *group = kvt_xmalloc(mine * sizeof *group);
    int *node = kvt_xmalloc(mine * sizeof *node);
    cl_op *redo = kvt_xmalloc(mine * sizeof *redo);
    size_t n_redo = 0;
    char key[KVT_REMOTE_KEY_LEN + 1];
    pthread_mutex_lock(&cl->map_mu);
    for (size_t m = 0; m < mine; m++) {
        item[m] = j->todo[(size_t)ith + m * (size_t)nth];
        kvt_remote_key(r->p.ns, j->reqs[item[m]].hash, key);
        node[m] = kvt_remote_cluster_route_locked(cl, key, KVT_REMOTE_KEY_LEN, ith);
        if (node[m] < 0) j->part[ith].failed = 1; /* no owner known: a miss, and the map is fetched again */
    }
    pthread_mutex_unlock(&cl->map_mu);
    int sent[KVT_CL_NODES_MAX] = {0};
    for (int nd = 0; nd < KVT_CL_NODES_MAX; nd++) { /* every node's GETs go out before any reply is read */
        size_t g = 0;
        for (size_t m = 0; m < mine; m++)
            if (node[m] == nd) g++;
        if (!g) continue;
        kvt_remote_conn *k = conn_of(r, nd, ith);
        redisContext *c = kvt_remote_conn_get(r, k, j->full);
        if (!c) {
            t->cnt[nd].errors++;
            j->part[ith].failed = 1;
            continue;
        }
        for (size_t m = 0; m < mine; m++)
            if (node[m] == nd) {
                kvt_remote_key(r->p.ns, j->reqs[item[m]].hash, key);
                redisAppendCommand(c, "GET %b", key, (size_t)KVT_REMOTE_KEY_LEN);
            }
        if (kvt_remote_send(r, k)) {
            t->cnt[nd].errors++;
            j->part[ith].failed = 1;
            continue;
        }
        sent[nd] = 1;
        j->part[ith].reached = 1;
    }
    for (int nd = 0; nd < KVT_CL_NODES_MAX; nd++) {
        if (!sent[nd]) continue;
        size_t g = 0;
        for (size_t m = 0; m < mine; m++)
            if (node[m] == nd) group[g++] = item[m];
        if (read_node(t, nd, group, g, redo, &n_redo)) j->part[ith].failed = 1;
    }
    if (n_redo && kvt_now() < j->deadline + t->credit) {
        cl_round_fn fn = {.append = get_append, .reply = get_reply, .ctx = t};
        if (run_round(r, redo, n_redo, ith, j->deadline + t->credit, j->full, &fn)) j->part[ith].failed = 1;
    }
    pthread_mutex_lock(&r->mu);
    for (int nd = 0; nd < KVT_CL_NODES_MAX; nd++) {
        if (!t->cnt[nd].hits && !t->cnt[nd].redirects && !t->cnt[nd].errors) continue; /* untouched, maybe unborn */
        kvt_remote_shard_stats *s = &cl->nodes[nd].st;
        s->hits += t->cnt[nd].hits;
        s->redirects += t->cnt[nd].redirects;
        s->errors += t->cnt[nd].errors;
    }
    for (size_t m = 0; m < mine; m++)
        if (node[m] >= 0 && j->reqs[item[m]].result) cl->nodes[node[m]].st.misses++;
    pthread_mutex_unlock(&r->mu);
    free(item);
    free(group);
    free(node);
    free(redo);
    free(t);
}

size_t kvt_remote_cluster_get_many(kvt_remote *r, kvt_tier_read *reqs, size_t n) {
    if (!n) return 0;
    for (size_t i = 0; i < n; i++) reqs[i].result = KVT_ENOTFOUND;
    pthread_mutex_lock(&r->mu);
    kvt_remote_apply_lost_locked(r);
    size_t hits = kvt_remote_read_queued(r, reqs, n);
    pthread_mutex_unlock(&r->mu);
    double full = r->p.timeout_ms / 1e3, t0 = kvt_now();
    cl_fetch j = {.r = r, .reqs = reqs, .full = full, .deadline = t0 + full};
    size_t *todo = kvt_xmalloc(n * sizeof *todo), n_todo = 0;
    for (size_t i = 0; i < n; i++)
        if (reqs[i].result) todo[n_todo++] = i;
    if (n_todo) kvt_remote_cluster_maybe_refresh(r, j.deadline);
    j.todo = todo;
    j.n = n_todo;
    if (n_todo > 1 && r->pool) kvt_pool_run(r->pool, fetch_part, &j);
    else if (n_todo) fetch_part(&j, 0, 1);
    free(todo);
    kvt_remote_read_part sum = kvt_remote_read_sum(j.part);
    hits += sum.hits;
    if (sum.failed) kvt_remote_cluster_mark_stale(r); /* a node gone or the map out of date: ask again */
    pthread_mutex_lock(&r->mu);
    if (sum.reached) {
        r->st.round_trips++;
        r->st.latency_sum_s += kvt_now() - t0;
    }
    if (n_todo) r->rd[0].conn.up = sum.reached && !sum.failed;
    r->st.connected = r->rd[0].conn.up;
    kvt_remote_read_count_locked(r, n, hits, &sum);
    pthread_mutex_unlock(&r->mu);
    kvt_remote_read_forget(r, reqs, n, sum.bad);
    return hits;
}

/* ---- probe ---------------------------------------------------------------------- */

typedef struct {
    kvt_remote *r;
    const kvt_hash128 *hashes;
    int *found;
    cl_op *redo;
    size_t n_redo;
} probe_ctx;

static void exists_append(void *ctx, redisContext *c, size_t item) {
    probe_ctx *p = ctx;
    char key[KVT_REMOTE_KEY_LEN + 1];
    kvt_remote_key(p->r->p.ns, p->hashes[item], key);
    redisAppendCommand(c, "EXISTS %b", key, (size_t)KVT_REMOTE_KEY_LEN);
}

static void exists_reply(void *ctx, size_t item, int node, redisReply *rep) {
    probe_ctx *p = ctx;
    if (rep && rep->type == REDIS_REPLY_INTEGER) p->found[item] = rep->integer == 1;
    else if (p->redo && redirect_op(p->r, rep, node, item, &p->redo[p->n_redo])) p->n_redo++;
}

size_t kvt_remote_cluster_probe(kvt_remote *r, kvt_hash128 parent, const int32_t *tokens, const kvt_hash128 *hashes,
                                size_t n_blocks) {
    if (!n_blocks) return 0;
    pthread_mutex_lock(&r->mu);
    kvt_remote_apply_lost_locked(r);
    r->st.probes++;
    r->st.probe_blocks += n_blocks;
    pthread_mutex_unlock(&r->mu);
    double full = r->p.timeout_ms / 1e3, t0 = kvt_now(), deadline = t0 + full;
    kvt_remote_cluster_maybe_refresh(r, deadline);
    cl_op *ops = kvt_xmalloc(n_blocks * sizeof *ops), *redo = kvt_xmalloc(n_blocks * sizeof *redo);
    int *found = kvt_xcalloc(n_blocks, sizeof *found);
    size_t n_ops = 0;
    char key[KVT_REMOTE_KEY_LEN + 1];
    pthread_mutex_lock(&r->cl->map_mu);
    for (size_t i = 0; i < n_blocks; i++) {
        kvt_remote_key(r->p.ns, hashes[i], key);
        int nd = kvt_remote_cluster_route_locked(r->cl, key, KVT_REMOTE_KEY_LEN, 0);
        if (nd >= 0) ops[n_ops++] = (cl_op){.node = nd, .item = i};
    }
    pthread_mutex_unlock(&r->cl->map_mu);
    probe_ctx p = {.r = r, .hashes = hashes, .found = found, .redo = redo};
    cl_round_fn fn = {.append = exists_append, .reply = exists_reply, .ctx = &p};
    int failed = n_ops < n_blocks || run_round(r, ops, n_ops, 0, deadline, full, &fn);
    if (p.n_redo && kvt_now() < deadline) {
        size_t n_redo = p.n_redo;
        p.redo = NULL; /* a second redirect is a miss */
        failed |= run_round(r, redo, n_redo, 0, deadline, full, &fn) != 0;
    }
    if (failed || p.n_redo) kvt_remote_cluster_mark_stale(r);
    size_t run = 0;
    for (size_t i = 0; i < n_blocks; i++) { /* registration contract: only the leading run, each after its parent */
        if (!found[i] ||
            kvt_remote_known_add(r, hashes[i], i ? hashes[i - 1] : parent, tokens + i * (size_t)r->p.block_tokens))
            break;
        run++;
    }
    free(ops);
    free(redo);
    free(found);
    pthread_mutex_lock(&r->mu);
    if (n_ops) {
        r->st.round_trips++;
        r->st.latency_sum_s += kvt_now() - t0;
    }
    r->st.probe_found += run;
    pthread_mutex_unlock(&r->mu);
    return run;
}

/* ---- the writer's SETs ------------------------------------------------------------ */

typedef struct {
    kvt_remote *r;
    kvt_remote_qslot *const *batch;
    const uint8_t *const *value;
    const size_t *vlen;
    int *ok, *answered;
    cl_op *redo;
    size_t n_redo;
    uint64_t puts[KVT_CL_NODES_MAX];
} set_ctx;

static void set_append(void *ctx, redisContext *c, size_t i) {
    set_ctx *s = ctx;
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%u", s->r->p.ttl_s);
    const char *argv[5] = {"SET", s->batch[i]->key, (const char *)s->value[i], "EX", ttl};
    size_t len[5] = {3, KVT_REMOTE_KEY_LEN, s->vlen[i], 2, strlen(ttl)};
    redisAppendCommandArgv(c, s->r->p.ttl_s ? 5 : 3, argv, len);
}

static void set_reply(void *ctx, size_t i, int node, redisReply *rep) {
    set_ctx *s = ctx;
    if (!rep) return; /* never answered: held for the next try */
    if (s->redo && redirect_op(s->r, rep, node, i, &s->redo[s->n_redo])) {
        s->n_redo++;
        return;
    }
    if (rep->type == REDIS_REPLY_ERROR && s->redo == NULL &&
        (!strncmp(rep->str, "MOVED ", 6) || !strncmp(rep->str, "ASK ", 4)))
        return; /* redirected again (a reshard under way): held, sent again later */
    s->answered[i] = 1;
    s->ok[i] = rep->type == REDIS_REPLY_STATUS;
    s->puts[node] += (uint64_t)s->ok[i];
    if (!s->ok[i])
        kvt_remote_note_error(s->r, 0, "%s: SET refused: %s", s->r->cl->nodes[node].who_wr,
                              rep->type == REDIS_REPLY_ERROR ? rep->str : "?");
}

uint32_t kvt_remote_cluster_set_batch(kvt_remote *r, kvt_remote_qslot *const *batch, const uint8_t *const *value,
                                      const size_t *vlen, uint32_t k, const int *skip, int *ok, int *answered,
                                      double deadline, double full) {
    kvt_remote_cluster *cl = r->cl;
    kvt_remote_cluster_maybe_refresh(r, deadline);
    cl_op ops[WRITE_BATCH_SLOTS], redo[WRITE_BATCH_SLOTS];
    size_t n_ops = 0;
    uint32_t sent = 0, unrouted = 0;
    pthread_mutex_lock(&cl->map_mu);
    for (uint32_t i = 0; i < k; i++) {
        if (skip[i]) continue;
        sent++;
        int nd = kvt_remote_cluster_route_locked(cl, batch[i]->key, KVT_REMOTE_KEY_LEN, -1);
        if (nd >= 0) ops[n_ops++] = (cl_op){.node = nd, .item = i};
        else unrouted++;
    }
    pthread_mutex_unlock(&cl->map_mu);
    set_ctx s = {.r = r, .batch = batch, .value = value, .vlen = vlen, .ok = ok, .answered = answered, .redo = redo};
    cl_round_fn fn = {.append = set_append, .reply = set_reply, .ctx = &s};
    int failed = run_round(r, ops, n_ops, -1, deadline, full, &fn);
    if (s.n_redo) {
        size_t n_redo = s.n_redo;
        s.redo = NULL;
        failed += run_round(r, redo, n_redo, -1, deadline, full, &fn);
    }
    if (failed || unrouted || s.n_redo) kvt_remote_cluster_mark_stale(r);
    /* the held blocks' schedule follows r->wr, as with one server */
    r->wr.up = !failed && !unrouted;
    r->wr.next_try = r->wr.up ? 0 : kvt_now() + KVT_REMOTE_BACKOFF_MIN_MS / 1e3;
    pthread_mutex_lock(&r->mu);
    for (int nd = 0; nd < KVT_CL_NODES_MAX; nd++)
        if (s.puts[nd]) cl->nodes[nd].st.puts += s.puts[nd];
    pthread_mutex_unlock(&r->mu);
    return sent;
}
