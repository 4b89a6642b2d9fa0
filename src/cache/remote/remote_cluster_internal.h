// SPDX-License-Identifier: MIT
/* T3 on a Redis Cluster (tier_remote.h "Cluster"): the slot map and the
 * nodes, shared by remote_cluster.c (URLs, discovery, the map and its
 * refresh) and remote_cluster_io.c (reads, probes and the writer's SETs
 * grouped by node, redirects).
 *
 * Nodes are entries of a table allocated once (KVT_CL_NODES_MAX) and never
 * moved or removed, so a node index stays valid for the tier's life; each
 * node has one connection per reader thread and one for the writer, used
 * by that thread alone. The slot map (slot -> primary node) and each
 * primary's replicas are guarded by map_mu: the owner's thread and the
 * writer both route keys and both may refresh the map (refresh_mu lets one
 * refresh run at a time; the other goes on with the map it has). Per-node
 * counters are guarded by the tier's mu. */
#ifndef KVT_REMOTE_CLUSTER_INTERNAL_H
#define KVT_REMOTE_CLUSTER_INTERNAL_H

#include "remote_internal.h"

#define KVT_REMOTE_CLUSTER_SCHEME "redis-cluster://"
#define KVT_CL_SLOTS 16384
#define KVT_CL_NODES_MAX 64      /* primaries and replicas ever seen */
#define KVT_CL_REPLICAS_MAX 4    /* replicas of one primary that serve reads */
#define KVT_CL_REFRESH_MIN_S 0.1 /* a stale map is fetched again at most this often */

typedef struct {
    kvt_remote_url url;    /* writes and maintenance */
    kvt_remote_url url_rd; /* reads: READONLY with replica reads on */
    char addr[KVT_REMOTE_URL_PART_MAX + 8], who_rd[KVT_REMOTE_URL_PART_MAX + 32], who_wr[KVT_REMOTE_URL_PART_MAX + 32];
    kvt_remote_conn rd[KVT_REMOTE_READ_CONNS_MAX]; /* reader thread i's connection */
    kvt_remote_conn wr;                            /* the writer's */
    int replicas[KVT_CL_REPLICAS_MAX], n_replicas; /* map_mu: while a primary */
    int primary;                                   /* map_mu: owns slots in the map */
    kvt_remote_shard_stats st;                     /* tier's mu */
} kvt_cl_node;

typedef struct kvt_remote_cluster {
    pthread_mutex_t map_mu, refresh_mu;
    kvt_cl_node *nodes; /* KVT_CL_NODES_MAX entries, n_nodes used (map_mu) */
    uint32_t n_nodes, n_seeds;
    int16_t slot_node[KVT_CL_SLOTS]; /* the primary serving each slot, -1: unknown (map_mu) */
    int have_map, stale;             /* map_mu */
    double last_refresh;             /* map_mu */
    int replica_reads;
} kvt_remote_cluster;

/* ---- remote_cluster.c ---- */

/* redis-cluster://[user:pass@]host:port[,host:port...][?replica_reads=yes|no]
 * into u: the first host in host/port, all of them in seeds. 0 or KVT_EARG. */
int kvt_remote_cluster_parse_url(const char *url, kvt_remote_url *u);
/* host:port at s[0..n) into host (cap bytes) and *port (remote_url.c). 0 or -1. */
int kvt_remote_split_addr(const char *s, size_t n, char *host, size_t cap, int *port);

/* At open: a cluster URL makes r a cluster client; a plain TCP URL whose
 * server says cluster_enabled:1 too (checked once, now). 0 or KVT_EARG. */
int kvt_remote_cluster_open(kvt_remote *r);
void kvt_remote_cluster_free(kvt_remote *r);

/* Fetches the map again when it is stale or missing (at most every
 * KVT_CL_REFRESH_MIN_S), before deadline. Any thread. */
void kvt_remote_cluster_maybe_refresh(kvt_remote *r, double deadline);
void kvt_remote_cluster_mark_stale(kvt_remote *r);

/* The node a key's command goes to: its slot's primary, or with replica
 * reads (reader >= 0) one of the shard's members picked by reader. -1 while
 * the slot has no known owner. map_mu held. */
int kvt_remote_cluster_route_locked(kvt_remote_cluster *cl, const char *key, size_t len, int reader);

/* A MOVED/ASK line ("MOVED 3999 127.0.0.1:7001") into the node to ask
 * (added if new) and *asking (ASK). MOVED also points the slot at that node
 * now and marks the map stale. -1 if the line does not parse. */
int kvt_remote_cluster_redirect(kvt_remote *r, const char *line, int *asking);

/* The primaries of the cluster u names (a cluster URL, or a plain URL of a
 * cluster node) for maintenance: *n URLs into out[0..cap). 0 (*n = 0: u is
 * one server, not a cluster), or -EIO / KVT_EARG with the message set. */
int kvt_remote_cluster_primaries(const kvt_remote_url *u, double timeout_s, kvt_remote_url *out, size_t cap, size_t *n);

/* ---- remote_cluster_io.c ---- */

size_t kvt_remote_cluster_get_many(kvt_remote *r, kvt_tier_read *reqs, size_t n);
size_t kvt_remote_cluster_probe(kvt_remote *r, kvt_hash128 parent, const int32_t *tokens, const kvt_hash128 *hashes,
                                size_t n_blocks);

/* The writer's pipelined SETs of batch[0..k) (skip[i]: left out; value[i],
 * vlen[i]: the encoded values), grouped by primary, all groups in flight at
 * once, before deadline. Sets ok[i] (stored) and answered[i] (a node
 * replied), and r->wr's up and next_try as the single server's connection
 * would be (for the held blocks' schedule). Returns the SETs sent. Writer
 * thread. */
uint32_t kvt_remote_cluster_set_batch(kvt_remote *r, kvt_remote_qslot *const *batch, const uint8_t *const *value,
                                      const size_t *vlen, uint32_t k, const int *skip, int *ok, int *answered,
                                      double deadline, double full);

#endif
