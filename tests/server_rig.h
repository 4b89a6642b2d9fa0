// SPDX-License-Identifier: MIT
/* Test helper: a server started in-process over a model, for the tests that
 * drive the server's own functions without HTTP (kvt_srv_make_request and
 * the scheduler, the reply code): a fresh engine, cache and server bound to
 * 127.0.0.1 on any free port, and their teardown. Header-only, for the
 * tests that need it. */
#ifndef KVT_TEST_SERVER_RIG_H
#define KVT_TEST_SERVER_RIG_H

#include <stdint.h>
#include <string.h>

#include "server_impl.h"
#include "testutil.h"

typedef struct {
    kvt_engine *e;
    kvt_cache *c;
    kvt_server *s;
} kvt_test_rig;

/* The engine's shape and the cache's RAM tier (0: T0 alone). */
typedef struct {
    int32_t block_size, n_pages, n_threads, n_ctx;
    uint64_t ram_bytes;
} kvt_test_rig_opts;

/* Starts g over model m: an engine of o's shape (room for sp's --parallel sequences) on the device
 * $KVT_TEST_DEVICE names (kvt_test_engine_on_device), a cache, and a
 * server with sp (host and port set here: 127.0.0.1, any port). 0, or -1 after a failed check. */
static inline int kvt_test_rig_up(kvt_test_rig *g, struct kvt_model *m, const kvt_test_rig_opts *o,
                                  kvt_server_params sp) {
    memset(g, 0, sizeof *g);
    kvt_engine_params ep = kvt_engine_default_params();
    kvt_test_engine_on_device(&ep); /* $KVT_TEST_DEVICE=vulkan: the GPU engine */
    ep.block_size = o->block_size;
    ep.n_pages = o->n_pages;
    ep.n_threads = o->n_threads;
    ep.n_ctx = o->n_ctx;
    if (ep.max_seqs < sp.parallel) ep.max_seqs = sp.parallel;
    if (!(g->e = kvt_test_engine_new(m, ep))) return -1;
    if (!(g->c = kvt_test_cache(g->e, NULL, o->ram_bytes))) return -1;
    sp.host = "127.0.0.1";
    sp.port = 0;
    int rc = kvt_server_start(m, g->e, g->c, &sp, &g->s);
    CHECKF(rc == 0, "kvt_server_start: %s", kvt_errmsg());
    return rc ? -1 : 0;
}

/* Stops and frees what kvt_test_rig_up started (any part of it). */
static inline void kvt_test_rig_down(kvt_test_rig *g) {
    if (g->s) kvt_server_stop(g->s);
    if (g->c) kvt_cache_free(g->c);
    if (g->e) kvt_engine_free(g->e);
    memset(g, 0, sizeof *g);
}

#endif
