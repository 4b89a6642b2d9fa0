// SPDX-License-Identifier: MIT
/* `kvtier route`: the prefix-affinity router in front of kvtier serve nodes (src/route/route.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "route.h"

void kvt_usage_route(FILE *f) {
    fprintf(f,
            "usage: kvtier route --nodes URL,URL,... [options]\n\n"
            "A thin HTTP front for several `kvtier serve` nodes of the same model: each OpenAI request\n"
            "(/v1/chat/completions, /v1/completions, /completion, /v1/responses) goes to the node that\n"
            "already holds the longest cached prefix of its prompt, so its turns hit T0/T1 there. A\n"
            "session (X-Session-Id header, kvtier.session_id, previous_response_id) returns to its node.\n"
            "Otherwise one node answers the prompt's block keys (/v1/cache/lookup) and the router matches\n"
            "them against what each node announced storing (/v1/cache/events), weighing each node's cached\n"
            "prefix against the requests it runs. A node running more than its share of requests passes\n"
            "them on to the next best. Answers stream through; a node that\n"
            "fails its health check or a request is left out, and its sessions move to another node\n"
            "(which restores them from a shared T3). GET /metrics: per node requests, spills, cached share.\n\n"
            "  --nodes URL,...      the nodes' base URLs, http://HOST:PORT, comma-separated (at most %d)\n"
            "  --host ADDR          numeric address to listen on (default 127.0.0.1)\n"
            "  --port N             port to listen on; 0 picks a free one (default 8080)\n"
            "  --node-key KEY       bearer key for the nodes' /v1/cache/events feed (their --metrics-key,\n"
            "                       an API key, or the --admin-key); client requests carry their own key\n"
            "  --policy P           affinity (default) or round-robin (for comparisons)\n"
            "  --balance F          a node may run F times its share of the open requests before the next\n"
            "                       best takes the spill (default 1.5; >= 1): a hard cap, whatever the scores\n"
            "  --load-cost TOKENS   what one request running on a node costs it, in prompt tokens: a node\n"
            "                       scores the tokens of its cached prefix of the prompt less TOKENS per\n"
            "                       request it runs, and the best score wins (default 1024; 0: the longest\n"
            "                       prefix wins and load only breaks ties)\n"
            "  --health-ms N        how often each node's /health and event feed are read (default 500)\n"
            "  --timeout-s N        the most a node may take to answer one request (default 600)\n"
            "  --max-body BYTES     the largest request body taken, e.g. 16M (default 16M)\n"
            "  -h, --help           this help\n",
            KVT_ROUTE_MAX_NODES);
}

/* Splits the --nodes list into p->nodes (pointers into list, which it edits). 0, or 2 after an error. */
static int split_nodes(char *list, kvt_route_params *p) {
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (p->n_nodes == KVT_ROUTE_MAX_NODES) {
            fprintf(stderr, "kvtier route: --nodes: at most %d nodes\n", KVT_ROUTE_MAX_NODES);
            return 2;
        }
        if (strncmp(t, "http://", 7)) {
            fprintf(stderr, "kvtier route: --nodes: '%s' is not http://HOST:PORT\n", t);
            return 2;
        }
        p->nodes[p->n_nodes++] = t;
    }
    if (!p->n_nodes) {
        fprintf(stderr, "kvtier route: --nodes: give at least one node URL\n");
        return 2;
    }
    return 0;
}

/* One option at argv[*i] into p (list keeps the --nodes text). 0, 1 for --help, or 2 after an error. */
static int parse_opt(int argc, char **argv, int *i, kvt_route_params *p, char **list) {
    const char *a = argv[*i], *v;
    long n;
    if (kvt_cli_is_help(a)) return 1;
    if (!strcmp(a, "--nodes") || !strcmp(a, "--host") || !strcmp(a, "--node-key") || !strcmp(a, "--policy") ||
        !strcmp(a, "--port") || !strcmp(a, "--balance") || !strcmp(a, "--load-cost") || !strcmp(a, "--health-ms") ||
        !strcmp(a, "--timeout-s") || !strcmp(a, "--max-body")) {
        if (!(v = kvt_cli_value(argc, argv, i))) return 2;
    } else {
        fprintf(stderr, "kvtier route: unknown argument '%s' (kvtier route --help lists the options)\n", a);
        return 2;
    }
    if (!strcmp(a, "--nodes")) {
        free(*list);
        *list = kvt_xstrdup(v);
    } else if (!strcmp(a, "--host")) p->host = v;
    else if (!strcmp(a, "--node-key")) p->node_key = v;
    else if (!strcmp(a, "--policy")) {
        if (strcmp(v, "affinity") && strcmp(v, "round-robin")) {
            fprintf(stderr, "kvtier route: --policy must be affinity or round-robin, not '%s'\n", v);
            return 2;
        }
        p->policy = strcmp(v, "affinity") ? KVT_ROUTE_ROUND_ROBIN : KVT_ROUTE_AFFINITY;
    } else if (!strcmp(a, "--balance")) {
        p->balance = kvt_cli_parse_double("--balance", v);
        if (isnan(p->balance) || p->balance < 1 || p->balance > 1000) {
            fprintf(stderr, "kvtier route: --balance must be a number from 1 to 1000\n");
            return 2;
        }
    } else if (!strcmp(a, "--load-cost")) {
        p->load_cost = kvt_cli_parse_double("--load-cost", v);
        if (isnan(p->load_cost) || p->load_cost < 0 || p->load_cost > 1e9) {
            fprintf(stderr, "kvtier route: --load-cost must be a number of tokens from 0 to 1e9\n");
            return 2;
        }
    } else if (!strcmp(a, "--max-body")) {
        uint64_t b;
        if (kvt_cli_parse_bytes("--max-body", v, &b)) return 2;
        p->max_body = (size_t)b;
    } else {
        long lo = !strcmp(a, "--port") ? 0 : 1, hi = !strcmp(a, "--port") ? 65535 : 86400000;
        if ((n = kvt_cli_parse_long(a, v, lo, hi)) < 0) return 2;
        if (!strcmp(a, "--port")) p->port = (int)n;
        else if (!strcmp(a, "--health-ms")) p->health_ms = (int)n;
        else p->timeout_s = (int)KVT_MIN(n, 86400);
    }
    return 0;
}

int kvt_cmd_route(int argc, char **argv) {
    kvt_route_params p = kvt_route_default_params();
    char *list = NULL;
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) rc = parse_opt(argc, argv, &i, &p, &list);
    if (rc == 1) {
        kvt_usage_route(stdout);
        free(list);
        return 0;
    }
    if (!rc && !list) {
        fprintf(stderr, "kvtier route: --nodes URL,URL,... is required (kvtier route --help)\n");
        rc = 2;
    }
    if (!rc) rc = split_nodes(list, &p);
    if (!rc) rc = kvt_route_run(&p) ? 1 : 0;
    free(list);
    return rc;
}
