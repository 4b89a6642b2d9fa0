// SPDX-License-Identifier: MIT
/* `kvtier route`: a thin HTTP front for a fleet of `kvtier serve` nodes that
 * sends each OpenAI request to the node already holding the longest cached
 * prefix of its prompt (prefix-affinity routing).
 *
 * Per request: a session (X-Session-Id, kvtier.session_id, or a Responses
 * previous_response_id the router saw answered) goes back to the node that
 * ran it last. Otherwise one node (the least loaded) tokenizes the prompt and
 * answers its chained block keys (POST /v1/cache/lookup?tiers=0: no engine
 * work, and the keys are exactly what every node computes: same model, same
 * template, same tenant salt from the client's own API key), and the node
 * whose index entry matches the most leading keys, less a cost for the
 * requests it runs already (--load-cost), wins. The index of what
 * each node holds is kept from each node's store/evict feed (GET
 * /v1/cache/events), so no node is asked per request but the one. A node
 * running more than its share of the fleet's requests (times --balance) is
 * passed over for the next best. Nodes are polled for /health; one that fails
 * is left out until it answers again, and a request whose node failed before
 * answering is sent to the next node, so no request is lost to a dead node.
 * Responses stream through as they arrive. */
#ifndef KVT_ROUTE_H
#define KVT_ROUTE_H

#include <stddef.h>

/* The most nodes one router fronts. */
#define KVT_ROUTE_MAX_NODES 64

typedef enum { KVT_ROUTE_AFFINITY, KVT_ROUTE_ROUND_ROBIN } kvt_route_policy;

typedef struct {
    const char *nodes[KVT_ROUTE_MAX_NODES]; /* base URLs, http://host:port */
    int n_nodes;
    const char *host;     /* address to bind (default 127.0.0.1) */
    int port;             /* 0: any free port (printed in the "listening on" line) */
    const char *node_key; /* bearer key for the nodes' /v1/cache/events, or NULL */
    kvt_route_policy policy;
    double balance;   /* a node above balance x its share of running requests spills */
    double load_cost; /* prompt tokens one running request on a node is worth against its cached prefix */
    int health_ms;    /* how often each node's /health and events are polled */
    int timeout_s;    /* the most a node may take to answer a request */
    size_t max_body;  /* the largest request body taken */
} kvt_route_params;

kvt_route_params kvt_route_default_params(void);

/* Runs the router until SIGINT or SIGTERM. 0 on a clean stop, or an error code after logging why. */
int kvt_route_run(const kvt_route_params *p);

#endif
