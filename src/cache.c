/* The cache policy (see cache.h): T0 residency of finished sequences' pages,
 * reclaim with demotion to T1, restore from T1, pins and statistics. */
#include "cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gguf.h"
#include "model.h"
#include "ops.h"
#include "tier_disk.h"

/* Bumped whenever the engine's arithmetic changes in a way that changes K/V
 * bytes; part of every key root together with the kernels' numerics id. */
#define ENGINE_NUMERICS_VERSION "engine-v3"
#define KV_LAYOUT "page[layer][K:[kv_head][head_dim][token] | V:[kv_head][token][head_dim]]"
#define NUMERICS_MAX 128

typedef struct {
    int cached;          /* the cache holds a reference and the index has T0 presence */
    kvt_hash128 hash;
    uint64_t tick;       /* last use, for LRU */
} page_rec;

struct kvt_pin {
    int32_t n;
    int32_t *pages;
};

struct kvt_cache {
    kvt_engine *e;
    kvt_prefix *index;
    kvt_ram *ram;         /* NULL when T1 is disabled */
    kvt_disk *disk;       /* NULL when T2 is disabled */
    kvt_cache_params params;
    int flushing;         /* shutdown: write every evicted block to T2, waiting for room */
    /* restore-or-recompute: measured T2 read bandwidth and prefill cost */
    double t2_bytes_per_s;      /* EWMA of get_many throughput; 0 = not measured yet */
    double prefill_s_per_token; /* EWMA; 0 = not measured yet */
    int32_t B;
    size_t page_bytes;
    page_rec *pages;      /* by page id */
    int32_t n_pages;
    uint64_t tick;
    kvt_fingerprint fp;
    uint32_t kv_type;
    char numerics[NUMERICS_MAX];
    int32_t *scratch_tokens; /* B ids */
    uint64_t evictions, demotions, restores;
    uint64_t t2_demotions, t2_restores, t2_recompute, t2_not_admitted;
    uint64_t lookups, hit_tokens, lookup_tokens;
};

kvt_cache_params kvt_cache_default_params(void) {
    kvt_cache_params p = {.ram_bytes = 0, .disk_dir = NULL, .disk_bytes = KVT_DEFAULT_DISK_BYTES,
                          .disk_zstd = 0, .disk_admit_all = 0, .write_through = 0,
                          .restore = KVT_RESTORE_AUTO};
    return p;
}

#define EWMA_OLD 0.7 /* weight of the previous estimate */
#define MIN_PREFILL_SAMPLE 16 /* tokens: smaller prefills say little about speed */

static void ewma(double *v, double sample) { *v = *v > 0 ? EWMA_OLD * *v + (1 - EWMA_OLD) * sample : sample; }

/* Writes a block to T2, waiting for queue room when flushing (shutdown). */
static void disk_write(kvt_cache *c, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens,
                       const void *payload) {
    int rc;
    while ((rc = kvt_disk_put(c->disk, hash, parent, tokens, payload)) == KVT_ELIMIT && c->flushing)
        if (kvt_disk_flush(c->disk)) break;
    if (rc == 0) c->t2_demotions++;
}

/* T1 eviction: write back to T2 if the block passes the admission filter
 * (seen at least twice: a block that was never reused stays off the SSD). */
static void on_ram_evict(void *ctx, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void *payload,
                         size_t bytes) {
    kvt_cache *c = ctx;
    (void)bytes;
    if (!c->disk) return;
    if (c->flushing || c->params.disk_admit_all || kvt_disk_admit(c->disk, hash)) disk_write(c, hash, parent, tokens, payload);
    else c->t2_not_admitted++;
}

int kvt_cache_new(kvt_engine *e, const kvt_cache_params *p, kvt_cache **out) {
    *out = NULL;
    kvt_engine_params ep = kvt_engine_params_of(e);
    kvt_cache *c = kvt_xcalloc(1, sizeof *c);
    c->e = e;
    c->B = ep.block_size;
    c->page_bytes = kvt_page_bytes(e);
    c->n_pages = kvt_page_count(e);
    c->pages = kvt_xcalloc((size_t)c->n_pages, sizeof *c->pages);
    c->fp = kvt_model_fingerprint(kvt_engine_model(e));
    c->kv_type = ep.kv_dtype == KVT_KV_F32 ? KVT_TYPE_F32 : KVT_TYPE_F16;
    snprintf(c->numerics, sizeof c->numerics, "%s/%s", ENGINE_NUMERICS_VERSION, kvt_ops_numerics_id());
    c->scratch_tokens = kvt_xmalloc((size_t)c->B * sizeof(int32_t));
    c->params = *p;
    c->params.disk_dir = NULL; /* not kept: the caller owns the string */
    int rc = kvt_prefix_new((uint32_t)c->B, &c->index);
    if (!rc && p->ram_bytes) {
        kvt_ram_params rp = kvt_ram_default_params();
        rp.budget_bytes = p->ram_bytes;
        rp.payload_bytes = c->page_bytes;
        rp.block_tokens = (uint32_t)c->B;
        rp.index = c->index;
        rp.on_evict = on_ram_evict;
        rp.evict_ctx = c;
        rc = kvt_ram_new(&rp, &c->ram);
    }
    if (!rc && p->disk_dir) {
        kvt_disk_params dp = kvt_disk_default_params();
        dp.dir = p->disk_dir;
        dp.size_bytes = p->disk_bytes;
        dp.payload_bytes = c->page_bytes;
        dp.block_tokens = (uint32_t)c->B;
        dp.index = c->index;
        dp.codec = p->disk_zstd ? KVT_DISK_CODEC_ZSTD : KVT_DISK_CODEC_RAW;
        dp.admit_all = p->disk_admit_all;
        dp.mac = !p->disk_no_mac;
        /* the namespace is the unsalted root: model, layout, dtype, B, numerics;
         * tenants are kept apart by their salted keys */
        if (!(rc = kvt_cache_root(c, NULL, 0, &dp.ns))) {
            if (dp.segment_bytes * 2 > dp.size_bytes) dp.segment_bytes = dp.size_bytes / 4 / KVT_DISK_ALIGN * KVT_DISK_ALIGN;
            if (dp.segment_bytes < c->page_bytes + KVT_DISK_ALIGN * 2)
                dp.segment_bytes = (c->page_bytes / KVT_DISK_ALIGN + 2) * KVT_DISK_ALIGN;
            rc = kvt_disk_open(&dp, &c->disk);
        }
    }
    if (rc) {
        kvt_cache_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void kvt_cache_free(kvt_cache *c) {
    if (!c) return;
    for (int32_t p = 0; p < c->n_pages; p++)
        if (c->pages[p].cached) {
            kvt_prefix_remove(c->index, c->pages[p].hash, KVT_TIER_T0);
            kvt_page_unref(c->e, p);
        }
    kvt_ram_free(c->ram);
    kvt_disk_close(c->disk);
    kvt_prefix_free(c->index);
    free(c->scratch_tokens);
    free(c->pages);
    free(c);
}

int kvt_cache_root(const kvt_cache *c, const void *salt, size_t salt_len, kvt_hash128 *out) {
    kvt_root_params rp = kvt_root_default_params();
    rp.fingerprint = c->fp;
    rp.kv_layout = KV_LAYOUT;
    rp.kv_dtype = c->kv_type;
    rp.block_tokens = (uint32_t)c->B;
    rp.numerics = c->numerics;
    rp.salt = salt;
    rp.salt_len = salt_len;
    return kvt_block_root(&rp, out);
}

kvt_prefix *kvt_cache_index(kvt_cache *c) { return c->index; }

/* ---- lookup ------------------------------------------------------------------ */

/* Matched blocks of tokens; *hits is malloc'd (caller frees). */
static size_t match(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, kvt_prefix_hit **hits) {
    size_t max = (size_t)n / (size_t)c->B;
    *hits = kvt_xmalloc((max ? max : 1) * sizeof **hits);
    return max ? kvt_prefix_lookup(c->index, root, tokens, (size_t)n, *hits, max) : 0;
}

void kvt_cache_lookup_root(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, kvt_cache_match *out) {
    memset(out, 0, sizeof *out);
    kvt_prefix_hit *hits;
    size_t k = match(c, root, tokens, n, &hits);
    out->n_blocks = (int32_t)k;
    out->n_tokens = (int32_t)k * c->B;
    for (size_t i = 0; i < k; i++) out->tier_blocks[hits[i].tier]++;
    free(hits);
}

/* ---- T0 reclaim -------------------------------------------------------------- */

/* The idle T0 leaf used longest ago, or -1. */
static int32_t pick_victim(kvt_cache *c) {
    int32_t best = -1;
    for (int32_t p = 0; p < c->n_pages; p++) {
        page_rec *r = &c->pages[p];
        if (!r->cached || kvt_page_refcount(c->e, p) != 1) continue;
        if (best >= 0 && r->tick >= c->pages[best].tick) continue;
        kvt_prefix_info info;
        if (kvt_prefix_get(c->index, r->hash, &info) || info.children[KVT_TIER_T0]) continue;
        best = p;
    }
    return best;
}

/* Writes page p's block to T1 (if enabled), drops its T0 presence and frees it. */
static void reclaim(kvt_cache *c, int32_t p) {
    page_rec *r = &c->pages[p];
    kvt_prefix_info info;
    if ((c->ram || c->disk) && !kvt_prefix_get(c->index, r->hash, &info)) {
        kvt_hash128 parent = info.parent;
        uint32_t tiers = info.tiers;
        memcpy(c->scratch_tokens, info.tokens, (size_t)c->B * sizeof(int32_t)); /* info dies on index change */
        if (c->ram) {
            if (kvt_ram_put(c->ram, r->hash, parent, c->scratch_tokens, kvt_page_data_const(c->e, p)) == 0)
                c->demotions++;
        } else if (!(tiers & KVT_TIER_BIT(KVT_TIER_T2))) {
            on_ram_evict(c, r->hash, parent, c->scratch_tokens, kvt_page_data_const(c->e, p), c->page_bytes);
        }
    }
    kvt_prefix_remove(c->index, r->hash, KVT_TIER_T0);
    r->cached = 0;
    kvt_page_unref(c->e, p);
    c->evictions++;
}

int kvt_cache_reserve(kvt_cache *c, int32_t n_pages) {
    while (kvt_page_free_count(c->e) < n_pages) {
        int32_t v = pick_victim(c);
        if (v < 0)
            return kvt_fail(KVT_ELIMIT,
                            "KV active memory exhausted: %d pages needed, %d free of %d and none reclaimable "
                            "(running sequences and pins hold the rest); raise --kv-active",
                            n_pages, kvt_page_free_count(c->e), c->n_pages);
        reclaim(c, v);
    }
    return 0;
}

/* ---- restore ------------------------------------------------------------------ */

/* Makes block `hit` T0-resident; returns its page with one extra reference
 * for the caller, or -1 if it could not (no room, or T1 lost it). */
static int32_t acquire_page(kvt_cache *c, const kvt_prefix_hit *hit, kvt_hash128 parent,
                            const int32_t *tokens, double *restore_s) {
    if (hit->tier == KVT_TIER_T0) {
        int32_t p = (int32_t)hit->handle;
        if (p < 0 || p >= c->n_pages || !c->pages[p].cached || !kvt_hash128_eq(c->pages[p].hash, hit->hash))
            return -1; /* cannot happen while the index and pages agree; never attach a wrong page */
        kvt_page_ref(c->e, p);
        c->pages[p].tick = ++c->tick;
        return p;
    }
    if (hit->tier != KVT_TIER_T1 || !c->ram) return -1;
    int32_t p;
    if (kvt_cache_reserve(c, 1) || kvt_page_alloc(c->e, &p)) return -1;
    double t0 = kvt_now();
    if (kvt_ram_get(c->ram, hit->hash, parent, tokens, kvt_page_data(c->e, p))) {
        kvt_page_unref(c->e, p);
        return -1;
    }
    *restore_s += kvt_now() - t0;
    if (kvt_prefix_add(c->index, hit->hash, parent, tokens, KVT_TIER_T0, (uint64_t)p)) {
        kvt_page_unref(c->e, p);
        return -1;
    }
    c->pages[p] = (page_rec){.cached = 1, .hash = hit->hash, .tick = ++c->tick};
    c->restores++;
    kvt_page_ref(c->e, p); /* the allocation's reference is the cache's; this one is the caller's */
    return p;
}

/* Restore-or-recompute for a run of n T2 blocks: restore unless measurements
 * say reading them takes longer than prefilling their tokens. */
static int t2_worth_restoring(kvt_cache *c, int32_t n, double *read_ms, double *compute_ms) {
    *read_ms = c->t2_bytes_per_s > 0 ? 1e3 * (double)n * (double)c->page_bytes / c->t2_bytes_per_s : 0;
    *compute_ms = 1e3 * (double)n * c->B * c->prefill_s_per_token;
    if (c->params.restore == KVT_RESTORE_ALWAYS) return 1;
    if (c->params.restore == KVT_RESTORE_NEVER) return 0;
    if (c->t2_bytes_per_s <= 0 || c->prefill_s_per_token <= 0) return 1; /* unmeasured: try, and measure */
    return *read_ms < *compute_ms;
}

/* Acquires pages for the first n_blocks hits, stopping at the first failure.
 * T0 pages are referenced, T1 blocks copied in, and all T2 blocks read in one
 * batch (adjacent records coalesced by the disk tier). Returns how many were
 * acquired; pages[] holds them (one caller ref each). */
static int32_t acquire_run(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, const kvt_prefix_hit *hits,
                           int32_t n_blocks, int32_t *pages, int32_t *tier_blocks, double *restore_s,
                           kvt_attach_info *info) {
    int32_t n_t2 = 0, first_t2 = -1;
    for (int32_t i = 0; i < n_blocks; i++)
        if (hits[i].tier == KVT_TIER_T2 && n_t2++ == 0) first_t2 = i;
    if (n_t2) {
        double read_ms = 0, compute_ms = 0;
        int yes = c->disk && t2_worth_restoring(c, n_t2, &read_ms, &compute_ms);
        if (info) {
            info->t2_decision = yes ? KVT_T2_RESTORE : KVT_T2_RECOMPUTE;
            info->t2_est_read_ms = read_ms;
            info->t2_est_compute_ms = compute_ms;
        }
        if (!yes) {
            n_blocks = first_t2; /* reuse stops where recomputing is cheaper */
            c->t2_recompute++;
        }
    }
    kvt_disk_read *reqs = kvt_xmalloc((size_t)(n_t2 ? n_t2 : 1) * sizeof *reqs);
    int32_t *req_block = kvt_xmalloc((size_t)(n_t2 ? n_t2 : 1) * sizeof *req_block);
    int32_t got = 0, n_req = 0;
    for (int32_t i = 0; i < n_blocks; i++) {
        kvt_hash128 parent = i ? hits[i - 1].hash : root;
        const int32_t *bt = tokens + (size_t)i * (size_t)c->B;
        int32_t p;
        if (hits[i].tier == KVT_TIER_T2) {
            if (kvt_cache_reserve(c, 1) || kvt_page_alloc(c->e, &p)) break;
            reqs[n_req] = (kvt_disk_read){.hash = hits[i].hash, .parent = parent, .tokens = bt,
                                          .out = kvt_page_data(c->e, p)};
            req_block[n_req++] = i;
        } else if ((p = acquire_page(c, &hits[i], parent, bt, restore_s)) < 0) {
            break;
        }
        pages[got++] = p;
    }
    int32_t ok = got; /* blocks [0, ok) are usable */
    if (n_req) {
        double t0 = kvt_now();
        kvt_disk_get_many(c->disk, reqs, (size_t)n_req);
        double dt = kvt_now() - t0;
        *restore_s += dt;
        int32_t n_hit = 0;
        for (int32_t r = 0; r < n_req; r++) {
            if (reqs[r].result) {
                ok = KVT_MIN(ok, req_block[r]);
                continue;
            }
            n_hit++;
        }
        if (n_hit && dt > 0) ewma(&c->t2_bytes_per_s, (double)n_hit * (double)c->page_bytes / dt);
        for (int32_t r = 0; r < n_req; r++) {
            int32_t i = req_block[r], p = pages[i];
            kvt_hash128 parent = i ? hits[i - 1].hash : root;
            if (i < ok && kvt_prefix_add(c->index, hits[i].hash, parent, tokens + (size_t)i * (size_t)c->B,
                                         KVT_TIER_T0, (uint64_t)p) == 0) {
                c->pages[p] = (page_rec){.cached = 1, .hash = hits[i].hash, .tick = ++c->tick};
                c->t2_restores++;
                kvt_page_ref(c->e, p); /* the allocation's reference is the cache's; this one the caller's */
            } else {
                ok = KVT_MIN(ok, i);
                kvt_page_unref(c->e, p); /* not restored: back to the free list */
                pages[i] = -1;
            }
        }
    }
    for (int32_t i = ok; i < got; i++)
        if (pages[i] >= 0) kvt_page_unref(c->e, pages[i]);
    if (tier_blocks)
        for (int32_t i = 0; i < ok; i++) tier_blocks[hits[i].tier]++;
    free(reqs);
    free(req_block);
    return ok;
}

int kvt_cache_attach(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, int32_t max_reuse,
                     int32_t *seq, kvt_attach_info *info) {
    memset(info, 0, sizeof *info);
    kvt_prefix_hit *hits;
    size_t k = match(c, root, tokens, n, &hits);
    c->lookups++;
    c->lookup_tokens += (uint64_t)n;
    if (max_reuse < 0) max_reuse = 0;
    /* blocks needed to cover min(k*B, max_reuse) tokens */
    int32_t reuse = KVT_MIN((int32_t)k * c->B, max_reuse);
    int32_t n_blocks = (reuse + c->B - 1) / c->B;
    int32_t *pages = kvt_xmalloc((size_t)(n_blocks ? n_blocks : 1) * sizeof *pages);
    int32_t tier_blocks[KVT_TIER_COUNT] = {0};
    double restore_s = 0;
    int32_t got = acquire_run(c, root, tokens, hits, n_blocks, pages, tier_blocks, &restore_s, info);
    if (c->disk && !c->params.disk_admit_all)
        for (int32_t i = 0; i < got; i++) kvt_disk_admit(c->disk, hits[i].hash); /* a reuse is a sighting */
    if (c->disk) kvt_disk_note_lookup(c->disk, (uint64_t)n / (uint64_t)c->B, (uint64_t)tier_blocks[KVT_TIER_T2]);
    if (got < n_blocks) reuse = got * c->B; /* a block could not be restored: reuse what we have */
    int rc = kvt_seq_new(c->e, pages, got, reuse, seq);
    for (int32_t i = 0; i < got; i++) kvt_page_unref(c->e, pages[i]);
    if (!rc) {
        info->n_reused = reuse;
        /* the last block may be partly reused; count tokens per tier exactly */
        for (int32_t i = 0; i < got; i++) {
            int32_t t = KVT_MIN(c->B, reuse - i * c->B);
            info->tier_tokens[hits[i].tier] += t;
        }
        info->restore_ms = restore_s * 1e3;
        c->hit_tokens += (uint64_t)reuse;
    }
    free(pages);
    free(hits);
    return rc;
}

/* ---- registration -------------------------------------------------------------- */

void kvt_cache_commit(kvt_cache *c, kvt_hash128 root, int32_t seq, const int32_t *tokens, int32_t *n_done) {
    int32_t np;
    const int32_t *pages = kvt_seq_pages(c->e, seq, &np);
    int32_t len = kvt_seq_len(c->e, seq);
    if (!pages || len < 0) return;
    int32_t full = len / c->B;
    if (*n_done >= full) return;
    kvt_hash128 *hashes = kvt_xmalloc((size_t)full * sizeof *hashes);
    kvt_block_hashes(root, tokens, (size_t)full * (size_t)c->B, (uint32_t)c->B, hashes, (size_t)full);
    for (int32_t i = *n_done; i < full; i++) {
        kvt_hash128 parent = i ? hashes[i - 1] : root;
        const int32_t *bt = tokens + (size_t)i * (size_t)c->B;
        kvt_prefix_info info;
        if (!kvt_prefix_get(c->index, hashes[i], &info) && (info.tiers & KVT_TIER_BIT(KVT_TIER_T0))) {
            int32_t p = (int32_t)info.handle[KVT_TIER_T0];
            if (kvt_prefix_check(c->index, hashes[i], parent, bt)) { /* same key, other block: collision */
                *n_done = INT32_MAX;
                break;
            }
            c->pages[p].tick = ++c->tick; /* already resident (maybe this very page): keep it */
            continue;
        }
        int32_t p = pages[i];
        if (c->pages[p].cached) continue; /* page already holds another indexed block: cannot happen */
        if (kvt_prefix_add(c->index, hashes[i], parent, bt, KVT_TIER_T0, (uint64_t)p)) {
            *n_done = INT32_MAX; /* collision: later blocks of this sequence cannot be reached */
            break;
        }
        kvt_page_ref(c->e, p);
        c->pages[p] = (page_rec){.cached = 1, .hash = hashes[i], .tick = ++c->tick};
        *n_done = i + 1;
        if (c->disk && c->params.write_through) disk_write(c, hashes[i], parent, bt, kvt_page_data_const(c->e, p));
    }
    if (*n_done != INT32_MAX && *n_done < full) *n_done = full;
    free(hashes);
}

/* ---- pins ------------------------------------------------------------------------ */

int kvt_cache_pin_root(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, kvt_pin **pin) {
    *pin = NULL;
    kvt_prefix_hit *hits;
    size_t k = match(c, root, tokens, n, &hits);
    int32_t *pages = kvt_xmalloc((k ? k : 1) * sizeof *pages);
    double restore_s = 0;
    int32_t got = acquire_run(c, root, tokens, hits, (int32_t)k, pages, NULL, &restore_s, NULL);
    free(hits);
    if (!got) {
        free(pages);
        return 0;
    }
    kvt_pin *p = kvt_xmalloc(sizeof *p);
    p->n = got;
    p->pages = pages;
    *pin = p;
    return got * c->B;
}

void kvt_cache_release(kvt_cache *c, kvt_pin *pin) {
    if (!pin) return;
    for (int32_t i = 0; i < pin->n; i++) kvt_page_unref(c->e, pin->pages[i]);
    free(pin->pages);
    free(pin);
}

/* ---- stats -------------------------------------------------------------------------- */

int kvt_cache_lookup(kvt_cache *c, const int32_t *tokens, int32_t n, const void *salt, size_t salt_len,
                     kvt_cache_match *out) {
    kvt_hash128 root;
    int rc = kvt_cache_root(c, salt, salt_len, &root);
    if (rc) return rc;
    if (n < 0 || (n && !tokens)) return kvt_fail(KVT_EARG, "bad token array");
    kvt_cache_lookup_root(c, root, tokens, n, out);
    return 0;
}

int kvt_cache_pin(kvt_cache *c, const int32_t *tokens, int32_t n, const void *salt, size_t salt_len, kvt_pin **pin) {
    *pin = NULL;
    kvt_hash128 root;
    int rc = kvt_cache_root(c, salt, salt_len, &root);
    if (rc) return rc;
    if (n < 0 || (n && !tokens)) return kvt_fail(KVT_EARG, "bad token array");
    return kvt_cache_pin_root(c, root, tokens, n, pin);
}

kvt_engine *kvt_cache_engine(kvt_cache *c) { return c->e; }

void kvt_cache_get_tier_stats(const kvt_cache *c, kvt_ram_stats *t1, kvt_prefix_stats *index) {
    if (t1) {
        memset(t1, 0, sizeof *t1);
        if (c->ram) kvt_ram_get_stats(c->ram, t1);
    }
    if (index) kvt_prefix_get_stats(c->index, index);
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
    out->t1_demotions = c->demotions;
    out->t1_restores = c->restores;
    kvt_ram_stats t1;
    kvt_prefix_stats ix;
    kvt_cache_get_tier_stats(c, &t1, &ix);
    out->t1_blocks = t1.blocks;
    out->t1_bytes_used = t1.bytes_used;
    out->t1_budget_bytes = t1.budget_bytes;
    out->t1_evictions = t1.evictions;
    for (int t = 0; t < KVT_TIER_COUNT; t++) out->index_entries[t] = ix.tier_entries[t];
    if (c->disk) {
        kvt_disk_stats ds;
        kvt_disk_get_stats(c->disk, &ds);
        out->t2_records = ds.records;
        out->t2_bytes_used = ds.bytes_used;
        out->t2_budget_bytes = ds.budget_bytes;
        out->t2_writes = ds.puts;
        out->t2_dropped = ds.dropped;
        out->t2_bytes_read = ds.bytes_read;
        out->t2_bytes_written = ds.bytes_written;
        out->t2_corrupt = ds.corrupt;
        out->t2_writes_disabled = ds.writes_disabled;
        out->t2_compression_ratio = ds.compression_ratio;
    }
    out->t2_demotions = c->t2_demotions;
    out->t2_restores = c->t2_restores;
    out->t2_recompute_decisions = c->t2_recompute;
    out->t2_not_admitted = c->t2_not_admitted;
    out->collisions = ix.collisions + ix.mismatches;
    out->lookups = c->lookups;
    out->hit_tokens = c->hit_tokens;
    out->lookup_tokens = c->lookup_tokens;
}

void kvt_cache_note_prefill(kvt_cache *c, int32_t n_tokens, double seconds) {
    if (n_tokens >= MIN_PREFILL_SAMPLE && seconds > 0) ewma(&c->prefill_s_per_token, seconds / n_tokens);
}

/* Cached T0 blocks the disk does not hold yet, written through. */
static void flush_t0(kvt_cache *c) {
    for (int32_t p = 0; p < c->n_pages; p++) {
        if (!c->pages[p].cached) continue;
        kvt_prefix_info info;
        if (kvt_prefix_get(c->index, c->pages[p].hash, &info) || (info.tiers & KVT_TIER_BIT(KVT_TIER_T2))) continue;
        kvt_hash128 parent = info.parent;
        memcpy(c->scratch_tokens, info.tokens, (size_t)c->B * sizeof(int32_t));
        disk_write(c, c->pages[p].hash, parent, c->scratch_tokens, kvt_page_data_const(c->e, p));
    }
}

int kvt_cache_flush(kvt_cache *c) {
    if (!c->disk) return 0;
    c->flushing = 1;
    flush_t0(c);
    if (c->ram) kvt_ram_flush(c->ram); /* every T1 block leaves through on_ram_evict -> T2 */
    int rc = kvt_disk_flush(c->disk);
    c->flushing = 0;
    return rc;
}
