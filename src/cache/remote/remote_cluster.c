// SPDX-License-Identifier: MIT
/* T3 on a Redis Cluster (remote_cluster_internal.h): key slots, cluster
 * URLs, discovery, the node table, and the slot map with its refresh from
 * CLUSTER SHARDS (CLUSTER SLOTS on servers before Redis 7). */
#include "remote_cluster_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* ---- key slots -------------------------------------------------------------- */

uint16_t kvt_remote_crc16(const void *data, size_t len) {
    const uint8_t *p = data;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++) crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

uint16_t kvt_remote_key_slot(const char *key, size_t len) {
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(key + from, '}', len - from);
        /* an empty tag ("{}") hashes the whole key */
        if (close && close > key + from) return kvt_remote_crc16(key + from, (size_t)(close - key) - from) & 16383;
    }
    return kvt_remote_crc16(key, len) & 16383;
}

/* ---- nodes and the map -------------------------------------------------------- */

/* The node at host:port, added if new (map_mu held, or before any thread
 * runs). -1 when the table is full. */
static int node_of(kvt_remote *r, const char *host, int port) {
    kvt_remote_cluster *cl = r->cl;
    char addr[sizeof cl->nodes[0].addr];
    snprintf(addr, sizeof addr, "%s:%d", host, port);
    for (uint32_t i = 0; i < cl->n_nodes; i++)
        if (!strcmp(cl->nodes[i].addr, addr)) return (int)i;
    if (cl->n_nodes == KVT_CL_NODES_MAX) return -1;
    kvt_cl_node *nd = &cl->nodes[cl->n_nodes];
    memset(nd, 0, sizeof *nd);
    nd->url = r->url;
    snprintf(nd->url.host, sizeof nd->url.host, "%s", host);
    nd->url.port = port;
    nd->url.is_unix = 0;
    nd->url.db = 0;
    nd->url.readonly = 0;
    nd->url.seeds[0] = 0;
    nd->url_rd = nd->url;
    nd->url_rd.readonly = cl->replica_reads;
    memcpy(nd->addr, addr, sizeof addr);
    snprintf(nd->who_rd, sizeof nd->who_rd, "reads from %s", addr);
    snprintf(nd->who_wr, sizeof nd->who_wr, "writes to %s", addr);
    for (int i = 0; i < KVT_REMOTE_READ_CONNS_MAX; i++)
        nd->rd[i] = (kvt_remote_conn){.who = nd->who_rd, .to = &nd->url_rd, .backoff_s = KVT_REMOTE_BACKOFF_MIN_MS / 1e3};
    nd->wr = (kvt_remote_conn){.who = nd->who_wr, .to = &nd->url, .backoff_s = KVT_REMOTE_BACKOFF_MIN_MS / 1e3};
    snprintf(nd->st.addr, sizeof nd->st.addr, "%.90s", addr);
    return (int)cl->n_nodes++;
}

int kvt_remote_cluster_route_locked(kvt_remote_cluster *cl, const char *key, size_t len, int reader) {
    int p = cl->slot_node[kvt_remote_key_slot(key, len)];
    if (p < 0 || reader < 0 || !cl->replica_reads || !cl->nodes[p].n_replicas) return p;
    int pick = reader % (cl->nodes[p].n_replicas + 1);
    return pick ? cl->nodes[p].replicas[pick - 1] : p;
}

void kvt_remote_cluster_mark_stale(kvt_remote *r) {
    pthread_mutex_lock(&r->cl->map_mu);
    r->cl->stale = 1;
    pthread_mutex_unlock(&r->cl->map_mu);
}

int kvt_remote_cluster_redirect(kvt_remote *r, const char *line, int *asking) {
    kvt_remote_cluster *cl = r->cl;
    *asking = !strncmp(line, "ASK ", 4);
    const char *s = line + (*asking ? 4 : 6);
    char *e;
    long slot = strtol(s, &e, 10);
    if (e == s || *e != ' ' || slot < 0 || slot >= KVT_CL_SLOTS) return -1;
    char host[KVT_REMOTE_URL_PART_MAX];
    int port;
    if (kvt_remote_split_addr(e + 1, strlen(e + 1), host, sizeof host, &port)) return -1;
    pthread_mutex_lock(&cl->map_mu);
    int nd = node_of(r, host[0] ? host : r->url.host, port);
    if (nd >= 0 && !*asking) {
        cl->slot_node[slot] = (int16_t)nd;
        cl->nodes[nd].primary = 1;
        cl->stale = 1;
    }
    pthread_mutex_unlock(&cl->map_mu);
    return nd;
}

/* ---- topology: CLUSTER SHARDS / CLUSTER SLOTS ------------------------------------ */

/* A map as one node tells it: shards with their primary and online replicas,
 * and which shard serves each slot. */
typedef struct {
    char host[KVT_REMOTE_URL_PART_MAX];
    int port;
} cl_addr;
typedef struct {
    struct {
        cl_addr primary, rep[KVT_CL_REPLICAS_MAX];
        int n_rep;
    } sh[KVT_CL_NODES_MAX];
    int n;
    int16_t slot[KVT_CL_SLOTS];
} cl_topo;

static const redisReply *field(const redisReply *kv, const char *name) {
    if (kv->type != REDIS_REPLY_ARRAY) return NULL;
    for (size_t i = 0; i + 1 < kv->elements; i += 2)
        if (kv->element[i]->type == REDIS_REPLY_STRING && !strcmp(kv->element[i]->str, name)) return kv->element[i + 1];
    return NULL;
}

static int str_is(const redisReply *v, const char *s) {
    return v && v->type == REDIS_REPLY_STRING && !strcmp(v->str, s);
}

/* A CLUSTER SHARDS node entry into a: its endpoint (or ip) and port. */
static int shards_addr(const redisReply *node, cl_addr *a) {
    const redisReply *ep = field(node, "endpoint"), *ip = field(node, "ip"), *port = field(node, "port");
    const redisReply *h = ep && ep->type == REDIS_REPLY_STRING && ep->len && strcmp(ep->str, "?") ? ep : ip;
    if (!h || h->type != REDIS_REPLY_STRING || !port || port->type != REDIS_REPLY_INTEGER || h->len >= sizeof a->host)
        return -1;
    memcpy(a->host, h->str, h->len + 1);
    a->port = (int)port->integer;
    return 0;
}

static void mark_slots(cl_topo *t, long long lo, long long hi, int shard) {
    for (long long s = KVT_MAX(lo, 0); s <= hi && s < KVT_CL_SLOTS; s++) t->slot[s] = (int16_t)shard;
}

static int topo_from_shards(const redisReply *rep, cl_topo *t) {
    for (size_t i = 0; i < rep->elements && t->n < KVT_CL_NODES_MAX; i++) {
        const redisReply *slots = field(rep->element[i], "slots"), *nodes = field(rep->element[i], "nodes");
        if (!slots || slots->type != REDIS_REPLY_ARRAY || !slots->elements || !nodes || nodes->type != REDIS_REPLY_ARRAY)
            continue; /* a primary with no slots serves nothing */
        int sh = t->n, have_primary = 0;
        t->sh[sh].n_rep = 0;
        for (size_t j = 0; j < nodes->elements; j++) {
            const redisReply *nd = nodes->element[j];
            int primary = str_is(field(nd, "role"), "master");
            if (primary && !shards_addr(nd, &t->sh[sh].primary)) have_primary = 1;
            else if (!primary && str_is(field(nd, "health"), "online") && t->sh[sh].n_rep < KVT_CL_REPLICAS_MAX &&
                     !shards_addr(nd, &t->sh[sh].rep[t->sh[sh].n_rep]))
                t->sh[sh].n_rep++;
        }
        if (!have_primary) continue;
        for (size_t j = 0; j + 1 < slots->elements; j += 2)
            mark_slots(t, slots->element[j]->integer, slots->element[j + 1]->integer, sh);
        t->n++;
    }
    return t->n ? 0 : -1;
}

/* A CLUSTER SLOTS address entry [ip, port, id, ...] into a. */
static int slots_addr(const redisReply *e, cl_addr *a) {
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 || e->element[0]->type != REDIS_REPLY_STRING ||
        e->element[1]->type != REDIS_REPLY_INTEGER || e->element[0]->len >= sizeof a->host)
        return -1;
    memcpy(a->host, e->element[0]->str, e->element[0]->len + 1);
    a->port = (int)e->element[1]->integer;
    return 0;
}

static int topo_from_slots(const redisReply *rep, cl_topo *t) {
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *r = rep->element[i];
        cl_addr p;
        if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || slots_addr(r->element[2], &p)) continue;
        int sh;
        for (sh = 0; sh < t->n; sh++)
            if (t->sh[sh].primary.port == p.port && !strcmp(t->sh[sh].primary.host, p.host)) break;
        if (sh == t->n) {
            if (t->n == KVT_CL_NODES_MAX) continue;
            t->sh[t->n].primary = p;
            t->sh[t->n].n_rep = 0;
            for (size_t j = 3; j < r->elements && t->sh[t->n].n_rep < KVT_CL_REPLICAS_MAX; j++)
                if (!slots_addr(r->element[j], &t->sh[t->n].rep[t->sh[t->n].n_rep])) t->sh[t->n].n_rep++;
            t->n++;
        }
        mark_slots(t, r->element[0]->integer, r->element[1]->integer, sh);
    }
    return t->n ? 0 : -1;
}

/* The map as the node on c sees it. 0, or -1 with the reason in err. */
static int topo_fetch(redisContext *c, cl_topo *t, char *err, size_t cap) {
    memset(t->slot, 0xff, sizeof t->slot);
    t->n = 0;
    redisReply *rep = redisCommand(c, "CLUSTER SHARDS");
    int rc = -1;
    if (rep && rep->type == REDIS_REPLY_ARRAY) rc = topo_from_shards(rep, t);
    else if (rep && rep->type == REDIS_REPLY_ERROR && strstr(rep->str, "nknown")) { /* before Redis 7 */
        freeReplyObject(rep);
        rep = redisCommand(c, "CLUSTER SLOTS");
        if (rep && rep->type == REDIS_REPLY_ARRAY) rc = topo_from_slots(rep, t);
    }
    if (rc)
        snprintf(err, cap, "no slot map: %s",
                 !rep                                 ? c->errstr
                     : rep->type == REDIS_REPLY_ERROR ? rep->str
                                                      : "no shard serves a slot");
    if (rep) freeReplyObject(rep);
    return rc;
}

/* Replaces the map with t (map_mu held). */
static void apply_topo(kvt_remote *r, const cl_topo *t) {
    kvt_remote_cluster *cl = r->cl;
    int16_t node[KVT_CL_NODES_MAX];
    for (uint32_t i = 0; i < cl->n_nodes; i++) cl->nodes[i].primary = 0;
    for (int s = 0; s < t->n; s++) {
        int p = node_of(r, t->sh[s].primary.host, t->sh[s].primary.port);
        node[s] = (int16_t)p;
        if (p < 0) continue;
        kvt_cl_node *nd = &cl->nodes[p];
        nd->primary = 1;
        nd->n_replicas = 0;
        for (int j = 0; j < t->sh[s].n_rep; j++) {
            int q = node_of(r, t->sh[s].rep[j].host, t->sh[s].rep[j].port);
            if (q >= 0) nd->replicas[nd->n_replicas++] = q;
        }
    }
    for (int s = 0; s < KVT_CL_SLOTS; s++) cl->slot_node[s] = t->slot[s] < 0 ? -1 : node[t->slot[s]];
    cl->have_map = 1;
    cl->stale = 0;
}

/* Asks the nodes in turn (the seeds first, then every node seen) until one
 * gives a map, before deadline. refresh_mu held. */
static int refresh(kvt_remote *r, double deadline) {
    kvt_remote_cluster *cl = r->cl;
    cl_topo *t = kvt_xmalloc(sizeof *t);
    pthread_mutex_lock(&cl->map_mu);
    uint32_t n = cl->n_nodes;
    pthread_mutex_unlock(&cl->map_mu);
    int rc = -1;
    char err[256] = "no node answered";
    for (uint32_t i = 0; i < n && rc; i++) {
        double left = deadline - kvt_now();
        if (left <= 0) break;
        redisContext *c = kvt_remote_connect_url(&cl->nodes[i].url, left, err, sizeof err);
        if (!c) continue;
        rc = topo_fetch(c, t, err, sizeof err);
        redisFree(c);
    }
    pthread_mutex_lock(&cl->map_mu);
    if (!rc) apply_topo(r, t);
    cl->last_refresh = kvt_now();
    pthread_mutex_unlock(&cl->map_mu);
    if (rc)
        kvt_remote_note_error(r, 0, kvt_remote_auth_refused(err) ? KVT_REMOTE_LOGIN_FMT : "%s: %s", "cluster map", err);
    free(t);
    return rc;
}

void kvt_remote_cluster_maybe_refresh(kvt_remote *r, double deadline) {
    kvt_remote_cluster *cl = r->cl;
    pthread_mutex_lock(&cl->map_mu);
    int due = (!cl->have_map || cl->stale) && kvt_now() - cl->last_refresh >= KVT_CL_REFRESH_MIN_S;
    pthread_mutex_unlock(&cl->map_mu);
    if (!due || pthread_mutex_trylock(&cl->refresh_mu)) return; /* another thread refreshes it now */
    refresh(r, deadline);
    pthread_mutex_unlock(&cl->refresh_mu);
}

/* ---- open, discovery ------------------------------------------------------------- */

/* Whether the server at u runs in cluster mode (INFO cluster). 1, 0, -1
 * (unreachable: err says why) or -2 (it refused the credentials: err). */
static int is_cluster(const kvt_remote_url *u, double timeout_s, char *err, size_t cap) {
    redisContext *c = kvt_remote_connect_url(u, timeout_s, err, cap);
    if (!c) return kvt_remote_auth_refused(err) ? -2 : -1;
    redisReply *rep = redisCommand(c, "INFO cluster");
    int yes = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, "cluster_enabled:1");
    int rc = rep ? yes : -1;
    if (!rep) snprintf(err, cap, "%s", c->errstr);
    if (rep && rep->type == REDIS_REPLY_ERROR && kvt_remote_auth_refused(rep->str)) {
        snprintf(err, cap, "%.200s", rep->str);
        rc = -2;
    }
    if (rep) freeReplyObject(rep);
    redisFree(c);
    return rc;
}

/* A start-up error for credentials the server refused: a wrong password
 * would otherwise only show as T3 misses. */
static int refused_at_start(const kvt_remote *r, const char *err) {
    if (r->url.pass_from_file)
        return kvt_fail(KVT_EARG,
                        "--kv-remote %s: the server refused the credentials (%s); check the ACL user in the URL "
                        "(user@, or none for the default user) and the password in --kv-remote-password-file",
                        r->url_text, err);
    return kvt_fail(KVT_EARG,
                    "--kv-remote %s: the server refused the credentials (%s); give the ACL user and password as "
                    "user:password@ in the URL (or :password@ for the default user), or the password in "
                    "--kv-remote-password-file",
                    r->url_text, err);
}

static void cluster_new(kvt_remote *r) {
    kvt_remote_cluster *cl = kvt_xcalloc(1, sizeof *cl);
    pthread_mutex_init(&cl->map_mu, NULL);
    pthread_mutex_init(&cl->refresh_mu, NULL);
    cl->nodes = kvt_xcalloc(KVT_CL_NODES_MAX, sizeof *cl->nodes);
    memset(cl->slot_node, 0xff, sizeof cl->slot_node);
    cl->replica_reads = r->url.replica_reads;
    r->cl = cl;
}

int kvt_remote_cluster_open(kvt_remote *r) {
    if (r->url.is_unix) return 0;
    if (!r->url.cluster) {
        char err[256];
        int yes = is_cluster(&r->url, r->p.timeout_ms / 1e3, err, sizeof err);
        if (yes == -2) return refused_at_start(r, err);
        if (yes < 0)
            kvt_logk(KVT_LOG_INFO, "url,error",
                     "remote tier %s: not reachable at start (%s): used as one server; give a redis-cluster:// URL "
                     "for a cluster",
                     r->url_text, err);
        if (yes <= 0) return 0;
        if (r->url.db) return kvt_fail(KVT_EARG, "--kv-remote %s: a cluster has no database numbers", r->url_text);
        snprintf(r->url.seeds, sizeof r->url.seeds, "%s:%d", r->url.host, r->url.port);
        kvt_logk(KVT_LOG_INFO, "url", "remote tier %s: the server is a cluster node: cluster mode", r->url_text);
    }
    cluster_new(r);
    for (const char *h = r->url.seeds; *h;) {
        size_t n = strcspn(h, ",");
        char host[KVT_REMOTE_URL_PART_MAX];
        int port;
        if (!kvt_remote_split_addr(h, n, host, sizeof host, &port)) node_of(r, host, port);
        h += n + (h[n] == ',');
    }
    r->cl->n_seeds = r->cl->n_nodes;
    if (!r->url.cluster) return 0;                  /* its one seed answered above */
    for (uint32_t i = 0; i < r->cl->n_seeds; i++) { /* the first seed that answers says whether we may log in */
        char err[256];
        int yes = is_cluster(&r->cl->nodes[i].url, r->p.timeout_ms / 1e3, err, sizeof err);
        if (yes == -2) return refused_at_start(r, err);
        if (yes >= 0) break;
    }
    return 0;
}

void kvt_remote_cluster_free(kvt_remote *r) {
    kvt_remote_cluster *cl = r->cl;
    if (!cl) return;
    for (uint32_t i = 0; i < cl->n_nodes; i++) {
        for (int j = 0; j < KVT_REMOTE_READ_CONNS_MAX; j++) kvt_remote_conn_drop(&cl->nodes[i].rd[j]);
        kvt_remote_conn_drop(&cl->nodes[i].wr);
    }
    memset(cl->nodes, 0, KVT_CL_NODES_MAX * sizeof *cl->nodes); /* passwords */
    free(cl->nodes);
    pthread_mutex_destroy(&cl->map_mu);
    pthread_mutex_destroy(&cl->refresh_mu);
    free(cl);
    r->cl = NULL;
}

size_t kvt_remote_get_shard_stats(kvt_remote *r, kvt_remote_shard_stats *out, size_t cap) {
    kvt_remote_cluster *cl = r->cl;
    if (!cl) return 0;
    pthread_mutex_lock(&cl->map_mu);
    size_t n = cl->n_nodes;
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < n && i < cap; i++) {
        out[i] = cl->nodes[i].st;
        out[i].primary = cl->nodes[i].primary;
    }
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_unlock(&cl->map_mu);
    return n;
}

/* ---- maintenance ------------------------------------------------------------------ */

int kvt_remote_cluster_primaries(const kvt_remote_url *u, double timeout_s, kvt_remote_url *out, size_t cap, size_t *n) {
    *n = 0;
    if (u->is_unix) return 0;
    char err[256] = "no node answered";
    if (!u->cluster) {
        int yes = is_cluster(u, timeout_s, err, sizeof err);
        if (yes < 0)
            return kvt_fail(-EIO, "cannot %s %s:%d: %s", yes == -2 ? "log in to" : "reach", u->host, u->port, err);
        if (!yes) return 0;
    }
    cl_topo *t = kvt_xmalloc(sizeof *t);
    int rc = -1;
    char seeds[sizeof u->seeds];
    snprintf(seeds, sizeof seeds, "%s", u->cluster ? u->seeds : "");
    if (!u->cluster) snprintf(seeds, sizeof seeds, "%s:%d", u->host, u->port);
    for (const char *h = seeds; *h && rc;) {
        size_t len = strcspn(h, ",");
        kvt_remote_url seed = *u;
        if (!kvt_remote_split_addr(h, len, seed.host, sizeof seed.host, &seed.port)) {
            redisContext *c = kvt_remote_connect_url(&seed, timeout_s, err, sizeof err);
            if (c) rc = topo_fetch(c, t, err, sizeof err);
            if (c) redisFree(c);
        }
        h += len + (h[len] == ',');
    }
    for (int s = 0; !rc && s < t->n && *n < cap; s++) {
        out[*n] = *u;
        snprintf(out[*n].host, sizeof out[*n].host, "%s", t->sh[s].primary.host);
        out[*n].port = t->sh[s].primary.port;
        out[*n].cluster = 0;
        out[*n].db = 0;
        (*n)++;
    }
    free(t);
    return rc ? kvt_fail(-EIO, "cluster: %s%s", kvt_remote_auth_refused(err) ? "cannot log in: " : "", err) : 0;
}
