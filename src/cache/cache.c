// SPDX-License-Identifier: MIT
/* The cache policy (see cache.h; cache_internal.h maps its files): create and
 * free with the tiers below T0, key roots, registration of computed blocks,
 * the public entry points and statistics. */
#include "cache_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "model.h"
#include "ops.h"

/* Bumped whenever the engine's arithmetic changes in a way that changes K/V
 * bytes; part of every key root together with the kernels' numerics id. */
#define ENGINE_NUMERICS_VERSION "engine-v5"
/* How K/V sit in a page, per dtype (engine.c kv_offset); part of every key
 * root together with the dtype itself, so f16, f32 and q8_0 blocks never share
 * a key. The f16/f32 string is unchanged since before q8_0, so caches written
 * then stay valid. */
#define KV_LAYOUT "page[layer][K:[kv_head][head_dim][token] | V:[kv_head][token][head_dim]]"
#define KV_LAYOUT_Q8_0 \
    "page[layer][K:[kv_head][head_dim/32][token] f16 scales, [head_dim][token] int8 | " \
    "V:[kv_head][token][head_dim/32 q8_0 blocks]]"

kvt_cache_params kvt_cache_default_params(void) {
    kvt_cache_params p = {.ram_bytes = 0,
                          .disk_dir = NULL,
                          .disk_bytes = KVT_DEFAULT_DISK_BYTES,
                          .disk_zstd = 0,
                          .disk_admit = KVT_ADMIT_ALL,
                          .admit_live_s = KVT_DEFAULT_ADMIT_LIVE_S,
                          .disk_put_wait_ms = KVT_DISK_PUT_WAIT_MS_DEFAULT,
                          .write_through = 0,
                          .remote_bytes = KVT_DEFAULT_REMOTE_BYTES,
                          .remote_timeout_ms = KVT_REMOTE_TIMEOUT_MS_DEFAULT,
                          .restore = KVT_RESTORE_AUTO};
    return p;
}

const char *kvt_reuse_reason_name(kvt_reuse_reason r) {
    static const char *const names[KVT_REUSE_REASON_COUNT] = {
        "end_of_prompt",       "prompt_shorter_than_block", "diverged", "never_seen", "evicted",
        "different_namespace", "restore_skipped_slower",    "no_room",  "lost"};
    return r >= 0 && r < KVT_REUSE_REASON_COUNT ? names[r] : "?";
}

const char *kvt_shortfall_name(kvt_shortfall s) {
    static const char *const names[KVT_SHORTFALL_COUNT] = {"none", "recompute_cheaper", "no_room", "lost"};
    return s >= 0 && s < KVT_SHORTFALL_COUNT ? names[s] : "?";
}

static void *engine_mem_alloc(void *e, size_t bytes) { return kvt_engine_host_alloc(e, bytes); }
static void engine_mem_free(void *e, void *p) { kvt_engine_host_free(e, p); }

/* T1's arena in the engine's host memory (tier_ram.h "Arena"): on a GPU,
 * memory mapped for it, so pages move between T1 and the device by DMA. */
static void arena_from_engine(kvt_ram_params *rp, kvt_engine *e) {
    rp->mem_alloc = engine_mem_alloc;
    rp->mem_free = engine_mem_free;
    rp->mem_ctx = e;
    rp->mem_max = kvt_engine_host_max(e);
}

/* A RAM tier that cannot hold one block would take every block evicted from
 * T0 and keep none: refused, with the smallest budget that holds one. */
static int ram_fits_a_block(const kvt_cache *c, uint64_t budget) {
    uint64_t cost = kvt_ram_block_cost(c->ram);
    if (budget >= cost) return 0;
    char t[32];
    return kvt_fail(KVT_EARG,
                    "--kv-ram %llu bytes holds no KV block: one takes %llu bytes here (its K/V page of %zu bytes, "
                    "%d token ids and bookkeeping); give at least %s, or 0 for no RAM tier",
                    (unsigned long long)budget, (unsigned long long)cost, c->page_bytes, c->B, kvt_size_text(cost, t));
}

/* T1 over the engine's host memory, refused when it holds no block. */
static int ram_open(kvt_cache *c, kvt_engine *e, uint64_t budget) {
    kvt_ram_params rp = kvt_ram_default_params();
    rp.budget_bytes = budget;
    rp.payload_bytes = c->page_bytes;
    rp.block_tokens = (uint32_t)c->B;
    rp.index = c->index;
    rp.on_evict = kvt_cache_on_ram_evict;
    rp.evict_ctx = c;
    arena_from_engine(&rp, e);
    int rc = kvt_ram_new(&rp, &c->ram);
    if (!rc && !(rc = ram_fits_a_block(c, budget))) c->tiers[KVT_TIER_T1] = (kvt_tier_ref){&kvt_ram_tier_ops, c->ram};
    return rc;
}

/* A disk tier needs two segments, each holding at least one record; a
 * budget below that is refused naming the smallest that fits. */
static int disk_fits_two_segments(const kvt_disk_params *dp) {
    if (dp->size_bytes / 2 >= dp->segment_bytes) return 0;
    char t[32];
    return kvt_fail(KVT_EARG,
                    "--kv-disk-size %llu bytes is too small: the disk tier keeps its KV blocks in at least two "
                    "segment files of %llu bytes here; give at least %s",
                    (unsigned long long)dp->size_bytes, (unsigned long long)dp->segment_bytes,
                    kvt_size_text(2 * dp->segment_bytes, t));
}

int kvt_cache_new(kvt_engine *e, kvt_cache_params params, kvt_cache **out) {
    const kvt_cache_params *p = &params;
    *out = NULL;
    kvt_engine_params ep = kvt_engine_params_of(e);
    kvt_cache *c = kvt_xcalloc(1, sizeof *c);
    c->e = e;
    c->B = ep.block_size;
    c->page_bytes = kvt_page_bytes(e);
    c->n_pages = kvt_page_count(e);
    c->pages = kvt_xcalloc((size_t)c->n_pages, sizeof *c->pages);
    c->fp = kvt_model_fingerprint(kvt_engine_model(e));
    c->kv_type = ep.kv_dtype == KVT_KV_F32 ? KVT_TYPE_F32 : ep.kv_dtype == KVT_KV_Q8_0 ? KVT_TYPE_Q8_0 : KVT_TYPE_F16;
    snprintf(c->numerics, sizeof c->numerics, "%s/%s", ENGINE_NUMERICS_VERSION, kvt_engine_numerics_id(e));
    c->scratch_tokens = kvt_xmalloc((size_t)c->B * sizeof(int32_t));
    c->params = *p;
    c->params.disk_dir = NULL; /* not kept: the caller owns the string */
    if (p->disk_admit == KVT_ADMIT_REUSED) c->admit = kvt_admit_new();
    int rc = kvt_prefix_new((uint32_t)c->B, &c->index);
    if (!rc) rc = kvt_cache_root(c, NULL, 0, &c->shared_root);
    if (!rc && p->ram_bytes) rc = ram_open(c, e, p->ram_bytes);
    if (!rc && p->disk_dir) {
        kvt_disk_params dp = kvt_disk_default_params();
        dp.dir = p->disk_dir;
        dp.size_bytes = p->disk_bytes;
        dp.payload_bytes = c->page_bytes;
        dp.block_tokens = (uint32_t)c->B;
        dp.index = c->index;
        dp.codec = p->disk_zstd ? KVT_DISK_CODEC_ZSTD : KVT_DISK_CODEC_RAW;
        dp.put_wait_ms = p->disk_put_wait_ms;
        dp.mac = !p->disk_no_mac;
        if (p->disk_space_retry_s > 0) dp.space_retry_s = p->disk_space_retry_s;
        /* the namespace is the unsalted root: model, layout, dtype, B, numerics;
         * tenants are kept apart by their salted keys */
        if (!(rc = kvt_cache_root(c, NULL, 0, &dp.ns))) {
            if (dp.segment_bytes * 2 > dp.size_bytes)
                dp.segment_bytes = dp.size_bytes / 4 / KVT_DISK_ALIGN * KVT_DISK_ALIGN;
            if (dp.segment_bytes < c->page_bytes + KVT_DISK_ALIGN * 2)
                dp.segment_bytes = (c->page_bytes / KVT_DISK_ALIGN + 2) * KVT_DISK_ALIGN;
            if (!(rc = disk_fits_two_segments(&dp)) && !(rc = kvt_disk_open(&dp, &c->disk)))
                c->tiers[KVT_TIER_T2] = (kvt_tier_ref){&kvt_disk_tier_ops, c->disk};
        }
    }
    if (!rc && p->remote_url) {
        kvt_remote_params xp = kvt_remote_default_params();
        xp.url = p->remote_url;
        xp.key_file = p->remote_key_file;
        xp.password_file = p->remote_password_file;
        xp.size_bytes = p->remote_bytes;
        xp.ttl_s = p->remote_ttl_s;
        if (p->remote_timeout_ms) xp.timeout_ms = p->remote_timeout_ms;
        if (p->remote_read_conns) xp.read_conns = p->remote_read_conns;
        if (p->remote_retry_bytes) xp.retry_bytes = p->remote_retry_bytes < 0 ? 0 : (uint64_t)p->remote_retry_bytes;
        xp.compress = p->remote_zstd ? KVT_REMOTE_COMPRESS_ZSTD : KVT_REMOTE_COMPRESS_NONE;
        if (p->remote_zstd_level) xp.zstd_level = p->remote_zstd_level;
        xp.payload_bytes = c->page_bytes;
        xp.block_tokens = (uint32_t)c->B;
        xp.index = c->index;
        /* the same namespace as the disk's: the unsalted root; salted keys keep tenants apart */
        if (!(rc = kvt_cache_root(c, NULL, 0, &xp.ns)) && !(rc = kvt_remote_open(&xp, &c->remote)))
            c->tiers[KVT_TIER_T3] = (kvt_tier_ref){&kvt_remote_tier_ops, c->remote};
    }
    /* not kept: the caller owns the strings */
    c->params.remote_url = c->params.remote_key_file = c->params.remote_password_file = NULL;
    if (rc) {
        kvt_cache_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void kvt_cache_free(kvt_cache *c) {
    if (!c) return;
    while (c->n_sessions) kvt_cache_release(c, c->sessions[--c->n_sessions].pin);
    free(c->sessions);
    for (int32_t p = 0; p < c->n_pages; p++)
        if (c->pages[p].cached) {
            kvt_prefix_remove(c->index, c->pages[p].hash, KVT_TIER_T0);
            kvt_page_unref(c->e, p);
        }
    kvt_ram_free(c->ram);
    kvt_disk_close(c->disk);
    kvt_remote_close(c->remote);
    kvt_admit_free(c->admit);
    kvt_prefix_free(c->index);
    free(c->scratch_tokens);
    free(c->scratch_page);
    kvt_cache_free_reclaim_buf(c);
    free(c->pages);
    free(c);
}

int kvt_cache_root(const kvt_cache *c, const void *salt, size_t salt_len, kvt_hash128 *out) {
    kvt_root_params rp = kvt_root_default_params();
    rp.fingerprint = c->fp;
    rp.kv_layout = c->kv_type == KVT_TYPE_Q8_0 ? KV_LAYOUT_Q8_0 : KV_LAYOUT;
    rp.kv_dtype = c->kv_type;
    rp.block_tokens = (uint32_t)c->B;
    rp.numerics = c->numerics;
    rp.salt = salt;
    rp.salt_len = salt_len;
    return kvt_block_root(&rp, out);
}

kvt_prefix *kvt_cache_index(kvt_cache *c) { return c->index; }

/* ---- registration -------------------------------------------------------------- */

void kvt_cache_commit(kvt_cache *c, int32_t seq, const int32_t *tokens, kvt_chain *ch) {
    int32_t np;
    const int32_t *pages = kvt_seq_pages(c->e, seq, &np);
    int32_t len = kvt_seq_len(c->e, seq);
    if (!pages || len < 0 || ch->n_done == INT32_MAX) return;
    int32_t full = len / c->B;
    for (int32_t i = ch->n_done; i < full; i++) {
        kvt_hash128 parent = ch->last;
        const int32_t *bt = tokens + (size_t)i * (size_t)c->B;
        kvt_hash128 hash = kvt_block_hash(parent, bt, (uint32_t)c->B);
        kvt_prefix_info info;
        if (!kvt_prefix_get(c->index, hash, &info) && (info.tiers & KVT_TIER_BIT(KVT_TIER_T0))) {
            if (kvt_prefix_check(c->index, hash, parent, bt)) { /* same key, other block: collision */
                ch->n_done = INT32_MAX;
                return;
            }
            int32_t x = (int32_t)info.handle[KVT_TIER_T0], p = pages[i];
            if (x != p && !c->pages[p].cached && !c->pages[x].picked && kvt_page_refcount(c->e, x) == 1) {
                /* this sequence computed again a block that an idle page x holds (a reply repeated under
                 * the same seed, say): the index takes this sequence's page and x is freed. Kept as it
                 * was, x would be an idle parent of the blocks this sequence registers next, which
                 * reclaim never takes while they run: a page lost for as long as the sequence lives */
                kvt_prefix_add(c->index, hash, parent, bt, KVT_TIER_T0, (uint64_t)p); /* a handle update */
                kvt_page_ref(c->e, p);
                c->pages[p] = (page_rec){.cached = 1, .hash = hash};
                c->pages[x] = (page_rec){0};
                kvt_page_unref(c->e, x);
                x = p;
            }
            kvt_cache_touch_page(c, x); /* already resident (maybe this very page) */
        } else if (!c->pages[pages[i]].cached) {
            int32_t p = pages[i];
            if (kvt_prefix_add(c->index, hash, parent, bt, KVT_TIER_T0, (uint64_t)p)) {
                ch->n_done = INT32_MAX; /* collision: later blocks of this sequence cannot be reached */
                return;
            }
            kvt_page_ref(c->e, p);
            c->pages[p] = (page_rec){.cached = 1, .hash = hash};
            kvt_cache_touch_page(c, p);
            if (c->params.write_through) kvt_cache_write_through(c, hash, parent, bt, kvt_cache_page_out(c, p));
        }
        ch->last = hash;
        ch->n_done = i + 1;
    }
}


/* ---- public entry points ------------------------------------------------------------ */

/* The checks and key root every public entry point taking a token array and
 * a tenant salt starts with. */
static int public_root(const kvt_cache *c, const int32_t *tokens, int32_t n, const void *salt, size_t salt_len,
                       kvt_hash128 *root) {
    int rc = kvt_cache_root(c, salt, salt_len, root);
    if (rc) return rc;
    if (n < 0 || (n && !tokens)) return kvt_fail(KVT_EARG, "bad token array");
    return 0;
}

int kvt_cache_keep_warm(kvt_cache *c, const char *session, const int32_t *tokens, int32_t n, const void *salt,
                        size_t salt_len, int priority, double seconds) {
    kvt_hash128 root;
    int rc = public_root(c, tokens, n, salt, salt_len, &root);
    if (rc) return rc;
    return kvt_cache_keep_warm_root(c, root, session, tokens, n, priority, seconds);
}

int32_t kvt_cache_prefetch(kvt_cache *c, const int32_t *tokens, int32_t n, const void *salt, size_t salt_len) {
    kvt_hash128 root;
    int rc = public_root(c, tokens, n, salt, salt_len, &root);
    if (rc) return rc;
    return kvt_cache_prefetch_root(c, root, tokens, n, INT32_MAX);
}


/* ---- stats -------------------------------------------------------------------------- */

int kvt_cache_lookup(kvt_cache *c, const int32_t *tokens, int32_t n, const void *salt, size_t salt_len,
                     kvt_cache_match *out) {
    kvt_hash128 root;
    int rc = public_root(c, tokens, n, salt, salt_len, &root);
    if (rc) return rc;
    kvt_cache_lookup_root(c, root, tokens, n, out);
    return 0;
}

int kvt_cache_pin(kvt_cache *c, const int32_t *tokens, int32_t n, const void *salt, size_t salt_len, kvt_pin **pin) {
    *pin = NULL;
    kvt_hash128 root;
    int rc = public_root(c, tokens, n, salt, salt_len, &root);
    if (rc) return rc;
    return kvt_cache_pin_root(c, root, tokens, n, pin);
}

kvt_engine *kvt_cache_engine(kvt_cache *c) { return c->e; }

int kvt_cache_has_shared_tier(const kvt_cache *c) {
    for (int t = KVT_TIER_T1; t < KVT_TIER_COUNT; t++)
        if (c->tiers[t].ops && c->tiers[t].ops->shared) return 1;
    return 0;
}

void kvt_cache_tier_capacity(const kvt_cache *c, uint64_t tokens[KVT_TIER_COUNT]) {
    memset(tokens, 0, KVT_TIER_COUNT * sizeof *tokens);
    tokens[KVT_TIER_T0] = (uint64_t)c->n_pages * (uint64_t)c->B;
    for (int t = KVT_TIER_T1; t < KVT_TIER_COUNT; t++) {
        const kvt_tier_ref *x = &c->tiers[t];
        kvt_tier_stats st;
        if (!x->ops) continue;
        x->ops->stats(x->impl, &st);
        if (st.block_cost) tokens[t] = st.budget_bytes / st.block_cost * (uint64_t)c->B;
    }
}

void kvt_cache_get_tier_stats(const kvt_cache *c, kvt_ram_stats *t1, kvt_prefix_stats *index) {
    if (t1) {
        memset(t1, 0, sizeof *t1);
        if (c->ram) kvt_ram_get_stats(c->ram, t1);
    }
    if (index) kvt_prefix_get_stats(c->index, index);
}

/* The T2 part of the stats (the disk tier's own counters). */
static void disk_stats(const kvt_cache *c, kvt_cache_stats *out) {
    kvt_disk_stats ds;
    kvt_disk_get_stats(c->disk, &ds);
    out->t2_records = ds.records;
    out->t2_bytes_used = ds.bytes_used;
    out->t2_budget_bytes = ds.budget_bytes;
    out->t2_writes = ds.puts;
    out->t2_dropped = ds.dropped;
    out->t2_put_waits = ds.put_waits;
    out->t2_queue_hits = ds.queue_hits;
    out->t2_bytes_read = ds.bytes_read;
    out->t2_bytes_written = ds.bytes_written;
    out->t2_corrupt = ds.corrupt;
    out->t2_writes_disabled = ds.writes_disabled;
    out->t2_out_of_space = ds.out_of_space;
    out->t2_space_pauses = ds.space_pauses;
    out->t2_compression_ratio = ds.compression_ratio;
}

/* The T3 part of the stats (t3_connected -1: no shared tier). */
static void remote_stats(const kvt_cache *c, kvt_cache_stats *out) {
    out->t3_connected = -1;
    if (!c->remote) return;
    kvt_remote_stats rs;
    kvt_remote_get_stats(c->remote, &rs);
    out->t3_known = rs.known;
    out->t3_budget_bytes = rs.budget_bytes;
    out->t3_value_bytes = rs.value_bytes;
    out->t3_writes = rs.puts;
    out->t3_dropped = rs.dropped;
    out->t3_hits = rs.hits;
    out->t3_misses = rs.misses;
    out->t3_bad = rs.bad;
    out->t3_bytes_read = rs.bytes_read;
    out->t3_bytes_written = rs.bytes_written;
    out->t3_payload_written = rs.payload_written;
    out->t3_compressed = rs.compressed;
    out->t3_incompressible = rs.incompressible;
    out->t3_errors = rs.errors;
    out->t3_timeouts = rs.timeouts;
    out->t3_probes = rs.probes;
    out->t3_probe_found = rs.probe_found;
    out->t3_round_trips = rs.round_trips;
    out->t3_latency_sum_s = rs.latency_sum_s;
    out->t3_connected = rs.connected;
    out->t3_retry_held = rs.retry_held;
    out->t3_retry_sent = rs.retry_sent;
    out->t3_retry_dropped = rs.retry_dropped;
    out->t3_n_shards = (uint32_t)kvt_remote_get_shard_stats(c->remote, out->t3_shards, KVT_T3_SHARDS_MAX);
}

void kvt_cache_get_stats(const kvt_cache *c, kvt_cache_stats *out) {
    memset(out, 0, sizeof *out);
    for (int32_t p = 0; p < c->n_pages; p++) {
        if (!c->pages[p].cached) continue;
        out->t0_pages_cached++;
        if (kvt_page_refcount(c->e, p) == 1) out->t0_pages_idle++;
    }
    out->t0_pages_total = c->n_pages;
    out->t0_pages_free = kvt_page_free_count(c->e);
    out->t0_bytes_cached = (uint64_t)out->t0_pages_cached * c->page_bytes;
    out->t0_evictions = c->evictions;
    out->t1_demotions = c->demotions[KVT_TIER_T1];
    out->t1_restores = c->restores[KVT_TIER_T1];
    kvt_ram_stats t1;
    kvt_prefix_stats ix;
    kvt_cache_get_tier_stats(c, &t1, &ix);
    out->t1_blocks = t1.blocks;
    out->t1_bytes_used = t1.bytes_used;
    out->t1_budget_bytes = t1.budget_bytes;
    out->t1_evictions = t1.evictions;
    for (int t = 0; t < KVT_TIER_COUNT; t++) out->index_entries[t] = ix.tier_entries[t];
    if (c->disk) disk_stats(c, out);
    remote_stats(c, out);
    out->t3_demotions = c->demotions[KVT_TIER_T3];
    out->t3_restores = c->restores[KVT_TIER_T3];
    out->t2_demotions = c->demotions[KVT_TIER_T2];
    out->t2_restores = c->restores[KVT_TIER_T2];
    out->t2_recompute_decisions = c->t2_recompute;
    out->t2_not_admitted = c->t2_not_admitted;
    out->discarded = c->discarded;
    out->t0_pages_pinned = c->pinned_pages;
    out->warm_sessions = c->n_sessions;
    out->sessions_released = c->sessions_released;
    out->sessions_expired = c->sessions_expired;
    out->prefetched_blocks = c->prefetched_blocks;
    memcpy(out->shortfalls, c->shortfalls, sizeof out->shortfalls);
    out->shortfall_tokens = c->shortfall_tokens;
    out->collisions = ix.collisions + ix.mismatches;
    out->lookups = c->lookups;
    out->hit_tokens = c->hit_tokens;
    out->lookup_tokens = c->lookup_tokens;
    memcpy(out->reuse_stops, c->reuse_stops, sizeof out->reuse_stops);
}

struct kvt_disk *kvt_cache_disk(kvt_cache *c) {
    return c->disk;
}
