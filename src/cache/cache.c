/* The cache policy (see cache.h): T0 residency of finished sequences' pages,
 * reclaim with demotion to T1, restore from T1, pins and statistics. */
#include "cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admit.h"
#include "common.h"
#include "gguf.h"
#include "model.h"
#include "ops.h"
#include "tier_disk.h"
#include "tier_remote.h"

/* Bumped whenever the engine's arithmetic changes in a way that changes K/V
 * bytes; part of every key root together with the kernels' numerics id. */
#define ENGINE_NUMERICS_VERSION "engine-v3"
/* How K/V sit in a page, per dtype (engine.c kv_offset); part of every key
 * root together with the dtype itself, so f16, f32 and q8_0 blocks never share
 * a key. The f16/f32 string is unchanged since before q8_0, so caches written
 * then stay valid. */
#define KV_LAYOUT "page[layer][K:[kv_head][head_dim][token] | V:[kv_head][token][head_dim]]"
#define KV_LAYOUT_Q8_0                                                                                        \
    "page[layer][K:[kv_head][head_dim/32][token] f16 scales, [head_dim][token] int8 | "                       \
    "V:[kv_head][token][head_dim/32 q8_0 blocks]]"
#define NUMERICS_MAX 128
/* Pins (kvt_cache_pin) may hold at most this share of the active pages, so
 * requests can always run; warm sessions yield under pressure instead. */
#define KVT_PIN_MAX_FRACTION 0.5
/* Blocks one lookup asks the shared tier about at most (one round trip). */
#define KVT_PROBE_MAX_BLOCKS 4096

typedef struct {
    int cached;          /* the cache holds a reference and the index has T0 presence */
    kvt_hash128 hash;
    uint64_t tick;       /* last use, for LRU */
    double t_use;        /* last use in kvt_now() seconds, for disk admission */
} page_rec;

struct kvt_pin {
    int32_t n;
    int32_t *pages;
};

/* A session kept warm: its context pinned in T0 until it expires, or until
 * the pool needs the pages (lowest priority first, then the soonest to
 * expire); released pages become idle and are demoted like any other. */
typedef struct {
    char name[KVT_SESSION_NAME_MAX + 1];
    kvt_pin *pin;
    double expires;  /* kvt_now() seconds */
    int priority;
} warm_session;

struct kvt_cache {
    kvt_engine *e;
    kvt_prefix *index;
    /* The tiers below T0, by tier id (tiers[T0] unused; ops NULL where off).
     * The policy below talks to them only through tier.h; ram and disk are
     * the same instances, kept typed for their configuration and detailed
     * statistics. */
    kvt_tier_ref tiers[KVT_TIER_COUNT];
    kvt_ram *ram;
    kvt_disk *disk;
    kvt_remote *remote;
    kvt_admit *admit;     /* KVT_ADMIT_REUSED: the seen-twice sketch for persistent tiers */
    kvt_cache_params params;
    int flushing;         /* shutdown: every block goes down, waiting for room */
    /* restore-or-recompute: measured read bandwidth of the measured tiers and prefill cost */
    double tier_bytes_per_s[KVT_TIER_COUNT]; /* EWMA of get_many throughput; 0 = not measured yet */
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
    uint64_t evictions, discarded;
    uint64_t demotions[KVT_TIER_COUNT], restores[KVT_TIER_COUNT];
    uint64_t t2_recompute, t2_not_admitted;
    uint64_t shortfalls[KVT_SHORTFALL_COUNT], shortfall_tokens;
    int32_t pinned_pages;
    warm_session *sessions;
    int32_t n_sessions, cap_sessions;
    uint64_t sessions_released, sessions_expired, prefetched_blocks;
    uint64_t lookups, hit_tokens, lookup_tokens;
    uint64_t reuse_stops[KVT_REUSE_REASON_COUNT];
    kvt_hash128 shared_root; /* the unsalted root, to recognise a different_namespace miss */
};

kvt_cache_params kvt_cache_default_params(void) {
    kvt_cache_params p = {.ram_bytes = 0, .disk_dir = NULL, .disk_bytes = KVT_DEFAULT_DISK_BYTES,
                          .disk_zstd = 0, .disk_admit = KVT_ADMIT_ALL, .admit_live_s = KVT_DEFAULT_ADMIT_LIVE_S,
                          .disk_put_wait_ms = KVT_DISK_PUT_WAIT_MS_DEFAULT, .write_through = 0,
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

#define EWMA_OLD 0.7 /* weight of the previous estimate */
#define MIN_PREFILL_SAMPLE 16 /* tokens: smaller prefills say little about speed */

static void ewma(double *v, double sample) { *v = *v > 0 ? EWMA_OLD * *v + (1 - EWMA_OLD) * sample : sample; }

static void touch_page(kvt_cache *c, int32_t p) {
    c->pages[p].tick = ++c->tick;
    c->pages[p].t_use = kvt_now();
}

/* Puts a block into tier t. A persistent tier's writer may be behind: the
 * tier itself waits (bounded) for room; when flushing (shutdown) we keep
 * waiting. A block newly stored in a persistent, unshared tier is also put
 * into every shared tier below it (tier.h "Sharing": what this node keeps is
 * what other nodes will want). Returns >= 0 if the block is in tier t
 * afterwards. */
static int tier_put(kvt_cache *c, kvt_tier t, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens,
                    const void *payload) {
    const kvt_tier_ref *x = &c->tiers[t];
    int rc;
    while ((rc = x->ops->put(x->impl, hash, parent, tokens, payload)) == KVT_ELIMIT && c->flushing && x->ops->persistent)
        if (x->ops->flush(x->impl)) break;
    if (rc == 0) {
        c->demotions[t]++;
        if (x->ops->persistent && !x->ops->shared)
            for (int s = t + 1; s < KVT_TIER_COUNT; s++)
                if (c->tiers[s].ops && c->tiers[s].ops->shared) tier_put(c, (kvt_tier)s, hash, parent, tokens, payload);
    }
    return rc;
}

/* --write-through: a block goes into every persistent tier as soon as it is
 * computed (a shared tier below the first one gets it through tier_put too;
 * its second put is a cheap "already held"). */
static void write_through(kvt_cache *c, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens,
                          const void *payload) {
    for (int t = KVT_TIER_T1; t < KVT_TIER_COUNT; t++)
        if (c->tiers[t].ops && c->tiers[t].ops->persistent) tier_put(c, (kvt_tier)t, hash, parent, tokens, payload);
}

/* Whether a block goes into a persistent tier. By default all do (inactive
 * KV is kept, never discarded, while a tier has room). With KVT_ADMIT_REUSED,
 * a block used within the last admit_live_s seconds (a live session's
 * context, read once per step) still always goes down; only blocks idle
 * longer must have been seen twice, to keep one-shot prompts off the SSD. */
static int admitted(kvt_cache *c, kvt_hash128 hash, double last_use) {
    if (c->flushing || c->params.disk_admit == KVT_ADMIT_ALL) return 1;
    if (kvt_now() - last_use < c->params.admit_live_s) return 1;
    return kvt_admit_sight(c->admit, hash);
}

/* A block leaves tier `from` (T0 reclaim, or a T1 eviction): it goes into
 * the next tier down that takes it. Held is the mask of tiers that hold it
 * now; past the first lower tier, a tier at or above one that holds it is
 * skipped (a lower copy is findable already). Counted as discarded only when
 * no tier takes it. */
static void demote(kvt_cache *c, kvt_tier from, uint32_t held, kvt_hash128 hash, kvt_hash128 parent,
                   const int32_t *tokens, const void *payload, double last_use) {
    int first = 1;
    for (int t = from + 1; t < KVT_TIER_COUNT; t++) {
        if (!c->tiers[t].ops) continue;
        if (!first && (held >> t)) return; /* a copy at this tier or below: still findable */
        first = 0;
        if (c->tiers[t].ops->persistent && !admitted(c, hash, last_use)) {
            c->t2_not_admitted++;
            break;
        }
        if (tier_put(c, (kvt_tier)t, hash, parent, tokens, payload) >= 0) return;
    }
    if (!(held >> (from + 1))) c->discarded++;
}

/* T1's evict hook: the block has left T1 and its index presence. */
static void on_ram_evict(void *ctx, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void *payload,
                         size_t bytes, double last_use) {
    kvt_cache *c = ctx;
    (void)bytes;
    kvt_prefix_info info;
    uint32_t held = kvt_prefix_get(c->index, hash, &info) ? 0 : info.tiers;
    demote(c, KVT_TIER_T1, held, hash, parent, tokens, payload, last_use);
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
    snprintf(c->numerics, sizeof c->numerics, "%s/%s", ENGINE_NUMERICS_VERSION, kvt_ops_numerics_id());
    c->scratch_tokens = kvt_xmalloc((size_t)c->B * sizeof(int32_t));
    c->params = *p;
    c->params.disk_dir = NULL; /* not kept: the caller owns the string */
    if (p->disk_admit == KVT_ADMIT_REUSED) c->admit = kvt_admit_new();
    int rc = kvt_prefix_new((uint32_t)c->B, &c->index);
    if (!rc) rc = kvt_cache_root(c, NULL, 0, &c->shared_root);
    if (!rc && p->ram_bytes) {
        kvt_ram_params rp = kvt_ram_default_params();
        rp.budget_bytes = p->ram_bytes;
        rp.payload_bytes = c->page_bytes;
        rp.block_tokens = (uint32_t)c->B;
        rp.index = c->index;
        rp.on_evict = on_ram_evict;
        rp.evict_ctx = c;
        if (!(rc = kvt_ram_new(&rp, &c->ram))) c->tiers[KVT_TIER_T1] = (kvt_tier_ref){&kvt_ram_tier_ops, c->ram};
    }
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
        /* the namespace is the unsalted root: model, layout, dtype, B, numerics;
         * tenants are kept apart by their salted keys */
        if (!(rc = kvt_cache_root(c, NULL, 0, &dp.ns))) {
            if (dp.segment_bytes * 2 > dp.size_bytes) dp.segment_bytes = dp.size_bytes / 4 / KVT_DISK_ALIGN * KVT_DISK_ALIGN;
            if (dp.segment_bytes < c->page_bytes + KVT_DISK_ALIGN * 2)
                dp.segment_bytes = (c->page_bytes / KVT_DISK_ALIGN + 2) * KVT_DISK_ALIGN;
            if (!(rc = kvt_disk_open(&dp, &c->disk))) c->tiers[KVT_TIER_T2] = (kvt_tier_ref){&kvt_disk_tier_ops, c->disk};
        }
    }
    if (!rc && p->remote_url) {
        kvt_remote_params xp = kvt_remote_default_params();
        xp.url = p->remote_url;
        xp.key_file = p->remote_key_file;
        xp.size_bytes = p->remote_bytes;
        xp.ttl_s = p->remote_ttl_s;
        if (p->remote_timeout_ms) xp.timeout_ms = p->remote_timeout_ms;
        xp.payload_bytes = c->page_bytes;
        xp.block_tokens = (uint32_t)c->B;
        xp.index = c->index;
        /* the same namespace as the disk's: the unsalted root; salted keys keep tenants apart */
        if (!(rc = kvt_cache_root(c, NULL, 0, &xp.ns)) && !(rc = kvt_remote_open(&xp, &c->remote)))
            c->tiers[KVT_TIER_T3] = (kvt_tier_ref){&kvt_remote_tier_ops, c->remote};
    }
    c->params.remote_url = c->params.remote_key_file = NULL; /* not kept: the caller owns the strings */
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

/* ---- lookup ------------------------------------------------------------------ */

/* Matched blocks of tokens; *hits is malloc'd (caller frees). */
static size_t match(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, kvt_prefix_hit **hits) {
    size_t max = (size_t)n / (size_t)c->B;
    *hits = kvt_xmalloc((max ? max : 1) * sizeof **hits);
    return max ? kvt_prefix_lookup(c->index, root, tokens, (size_t)n, *hits, max) : 0;
}

/* match(), then the shared tier: it holds blocks other nodes wrote, which the
 * local index cannot know of. Where the local match ends short of the first
 * `want` full blocks, the next ones' keys are asked of T3 in one pipelined
 * round trip (bounded by KVT_PROBE_MAX_BLOCKS and the tier's timeout); the
 * leading run it holds becomes T3 presence and the match is redone. */
static size_t match_shared(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, size_t want,
                           kvt_prefix_hit **hits) {
    size_t k = match(c, root, tokens, n, hits);
    want = KVT_MIN(want, (size_t)n / (size_t)c->B);
    if (!c->remote || k >= want) return k;
    size_t m = KVT_MIN(want - k, (size_t)KVT_PROBE_MAX_BLOCKS);
    kvt_hash128 parent = k ? (*hits)[k - 1].hash : root;
    kvt_hash128 *keys = kvt_xmalloc(m * sizeof *keys);
    const int32_t *bt = tokens + k * (size_t)c->B;
    for (size_t i = 0; i < m; i++) keys[i] = kvt_block_hash(i ? keys[i - 1] : parent, bt + i * (size_t)c->B, (uint32_t)c->B);
    size_t found = kvt_remote_probe(c->remote, parent, bt, keys, m);
    free(keys);
    if (!found) return k;
    free(*hits);
    return match(c, root, tokens, n, hits);
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

int32_t kvt_cache_block_tiers(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, uint8_t *tiers,
                              int32_t cap) {
    kvt_prefix_hit *hits;
    size_t k = match(c, root, tokens, n, &hits);
    for (size_t i = 0; i < k && i < (size_t)cap; i++) tiers[i] = (uint8_t)hits[i].tier;
    free(hits);
    return (int32_t)k;
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

/* Moves page p's block down a tier (see demote) and frees the page. */
static void reclaim(kvt_cache *c, int32_t p) {
    page_rec *r = &c->pages[p];
    kvt_prefix_info info;
    if (!kvt_prefix_get(c->index, r->hash, &info)) {
        kvt_hash128 parent = info.parent;
        uint32_t held = info.tiers & ~KVT_TIER_BIT(KVT_TIER_T0);
        memcpy(c->scratch_tokens, info.tokens, (size_t)c->B * sizeof(int32_t)); /* info dies on index change */
        demote(c, KVT_TIER_T0, held, r->hash, parent, c->scratch_tokens, kvt_page_data_const(c->e, p), r->t_use);
    }
    kvt_prefix_remove(c->index, r->hash, KVT_TIER_T0);
    r->cached = 0;
    kvt_page_unref(c->e, p);
    c->evictions++;
}

static void session_drop(kvt_cache *c, int32_t i) {
    kvt_cache_release(c, c->sessions[i].pin);
    c->sessions[i] = c->sessions[--c->n_sessions];
}

/* Releases sessions whose keep-warm time is over. */
static void expire_sessions(kvt_cache *c) {
    double now = kvt_now();
    for (int32_t i = c->n_sessions; i-- > 0;)
        if (c->sessions[i].expires <= now) {
            session_drop(c, i);
            c->sessions_expired++;
        }
}

/* Under pressure, the warm session to give up first: lowest priority, then
 * the soonest to expire. -1 if none. */
static int32_t session_victim(const kvt_cache *c) {
    int32_t best = -1;
    for (int32_t i = 0; i < c->n_sessions; i++) {
        const warm_session *s = &c->sessions[i], *b = best >= 0 ? &c->sessions[best] : NULL;
        if (!b || s->priority < b->priority || (s->priority == b->priority && s->expires < b->expires)) best = i;
    }
    return best;
}

int kvt_cache_reserve(kvt_cache *c, int32_t n_pages) {
    if (c->n_sessions) expire_sessions(c);
    while (kvt_page_free_count(c->e) < n_pages) {
        int32_t v = pick_victim(c);
        int32_t w = v < 0 ? session_victim(c) : -1;
        if (w >= 0) { /* a warm session's context yields to running work; it moves down, not out */
            kvt_log(KVT_LOG_DEBUG, "cache: releasing warm session '%s' early for room", c->sessions[w].name);
            session_drop(c, w);
            c->sessions_released++;
            continue;
        }
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

/* References the T0 page of hit for the caller, or -1 if the index and the
 * pages disagree (cannot happen; never attach a wrong page). */
static int32_t ref_t0(kvt_cache *c, const kvt_prefix_hit *hit) {
    int32_t p = (int32_t)hit->handle;
    if (p < 0 || p >= c->n_pages || !c->pages[p].cached || !kvt_hash128_eq(c->pages[p].hash, hit->hash)) return -1;
    kvt_page_ref(c->e, p);
    touch_page(c, p);
    return p;
}

/* Page p now holds block (hash, parent, tokens): index it in T0 and give the
 * caller a reference (the allocation's reference becomes the cache's).
 * Returns 0, or -1 (p is freed) if the index refuses it. */
static int adopt_page(kvt_cache *c, int32_t p, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens) {
    if (kvt_prefix_add(c->index, hash, parent, tokens, KVT_TIER_T0, (uint64_t)p)) {
        kvt_page_unref(c->e, p);
        return -1;
    }
    c->pages[p] = (page_rec){.cached = 1, .hash = hash};
    touch_page(c, p);
    kvt_page_ref(c->e, p);
    return 0;
}

/* The fastest tier below T0 that holds a block now, per its presence mask,
 * or KVT_TIER_T0 if none does. */
static kvt_tier lower_tier(const kvt_cache *c, uint32_t tiers) {
    for (int t = KVT_TIER_T1; t < KVT_TIER_COUNT; t++)
        if (c->tiers[t].ops && (tiers & KVT_TIER_BIT(t))) return (kvt_tier)t;
    return KVT_TIER_T0;
}

/* Restore-or-recompute for blocks found first in measured (slow) tiers:
 * restore unless measurements say reading them takes longer than prefilling
 * their tokens. n[t] counts such blocks per tier. */
static int worth_restoring(kvt_cache *c, const int32_t n[KVT_TIER_COUNT], double *read_ms, double *compute_ms) {
    int32_t total = 0, unmeasured = 0;
    *read_ms = 0;
    for (int t = 0; t < KVT_TIER_COUNT; t++) {
        if (!n[t]) continue;
        total += n[t];
        if (c->tier_bytes_per_s[t] > 0) *read_ms += 1e3 * (double)n[t] * (double)c->page_bytes / c->tier_bytes_per_s[t];
        else unmeasured = 1;
    }
    *compute_ms = 1e3 * (double)total * c->B * c->prefill_s_per_token;
    if (c->params.restore == KVT_RESTORE_ALWAYS) return 1;
    if (c->params.restore == KVT_RESTORE_NEVER) return 0;
    if (unmeasured || c->prefill_s_per_token <= 0) return 1; /* unmeasured: try, and measure */
    return *read_ms < *compute_ms;
}

/* Reads the listed blocks from tier t into their pages in one batch (a disk
 * tier coalesces adjacent records) and indexes the ones that arrived in T0.
 * Returns the first block index that failed (INT32_MAX if none). */
static int32_t restore_from(kvt_cache *c, kvt_tier t, kvt_hash128 root, const int32_t *tokens,
                            const kvt_prefix_hit *hits, kvt_tier_read *reqs, const int32_t *req_block, int32_t n_req,
                            int32_t *pages, double *restore_s) {
    int32_t bad = INT32_MAX;
    if (!n_req) return bad;
    const kvt_tier_ref *x = &c->tiers[t];
    double t0 = kvt_now();
    size_t n_hit = x->ops->get_many(x->impl, reqs, (size_t)n_req);
    double dt = kvt_now() - t0;
    *restore_s += dt;
    if (x->ops->measured && n_hit && dt > 0)
        ewma(&c->tier_bytes_per_s[t], (double)n_hit * (double)c->page_bytes / dt);
    for (int32_t r = 0; r < n_req; r++) {
        int32_t i = req_block[r];
        kvt_hash128 parent = i ? hits[i - 1].hash : root;
        if (reqs[r].result) {
            kvt_page_unref(c->e, pages[i]); /* not restored: back to the free list */
        } else if (adopt_page(c, pages[i], hits[i].hash, parent, tokens + (size_t)i * (size_t)c->B) == 0) {
            c->restores[t]++;
            continue;
        }
        pages[i] = -1;
        bad = KVT_MIN(bad, i);
    }
    return bad;
}

/* Makes the first n_blocks hits T0-resident for the caller, stopping at the
 * first block it cannot restore. The whole matched run is pinned from the
 * start: every T0 block is referenced first (so making room cannot reclaim
 * it), then pages for all other blocks are reserved at once, and only then is
 * each block's current tier looked up again (making room may have pushed a
 * RAM block down to disk, where it is still found) and the blocks are read,
 * one batch per tier. Returns how many were acquired; pages[] holds them (one
 * caller reference each) and tier_of[] the tier each came from. *why says
 * why fewer than n_blocks were acquired. */
static int32_t acquire_run(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, const kvt_prefix_hit *hits,
                           int32_t n_blocks, int32_t max_new, int32_t *pages, kvt_tier *tier_of, double *restore_s,
                           kvt_attach_info *info, kvt_shortfall *why) {
    *why = KVT_SHORTFALL_NONE;
    int32_t n_slow[KVT_TIER_COUNT] = {0}, first_slow = -1;
    for (int32_t i = 0; i < n_blocks; i++) {
        kvt_tier t = hits[i].tier;
        if (t == KVT_TIER_T0 || !c->tiers[t].ops || !c->tiers[t].ops->measured) continue;
        if (first_slow < 0) first_slow = i;
        n_slow[t]++;
    }
    if (first_slow >= 0) {
        double read_ms = 0, compute_ms = 0;
        int yes = worth_restoring(c, n_slow, &read_ms, &compute_ms);
        if (info) {
            info->t2_decision = yes ? KVT_T2_RESTORE : KVT_T2_RECOMPUTE;
            info->t2_est_read_ms = read_ms;
            info->t2_est_compute_ms = compute_ms;
        }
        if (!yes) {
            n_blocks = first_slow; /* reuse stops where recomputing is cheaper */
            *why = KVT_SHORTFALL_RECOMPUTE;
            c->t2_recompute++;
        }
    }
    /* 1. pin the resident part of the run */
    for (int32_t i = 0; i < n_blocks; i++) {
        pages[i] = -1;
        if (hits[i].tier == KVT_TIER_T0 && (pages[i] = ref_t0(c, &hits[i])) < 0) {
            n_blocks = i;
            *why = KVT_SHORTFALL_LOST;
            break;
        }
    }
    int32_t need = 0; /* pages to restore into, stopping where max_new pages are used */
    for (int32_t i = 0; i < n_blocks; i++)
        if (pages[i] < 0 && need++ == max_new) {
            for (int32_t k = i; k < n_blocks; k++)
                if (pages[k] >= 0) kvt_page_unref(c->e, pages[k]);
            n_blocks = i;
            need = max_new;
            break;
        }
    /* 2. room for everything else at once; if the pool cannot hold it all,
     * the run is cut where the free pages run out */
    if (need && kvt_cache_reserve(c, need)) {
        int32_t room = kvt_page_free_count(c->e);
        for (int32_t i = 0; i < n_blocks; i++)
            if (pages[i] < 0 && room-- == 0) {
                n_blocks = i;
                break;
            }
        *why = KVT_SHORTFALL_NO_ROOM;
    }
    /* 3. restore, from wherever each block is now: one batch per tier */
    size_t cap = (size_t)(n_blocks ? n_blocks : 1);
    kvt_tier_read *reqs = kvt_xmalloc((size_t)KVT_TIER_COUNT * cap * sizeof *reqs);
    int32_t *req_block = kvt_xmalloc((size_t)KVT_TIER_COUNT * cap * sizeof *req_block);
    int32_t n_req[KVT_TIER_COUNT] = {0}, ok = n_blocks;
    for (int32_t i = 0; i < n_blocks; i++) {
        tier_of[i] = KVT_TIER_T0;
        if (pages[i] >= 0) continue;
        kvt_prefix_info pi;
        kvt_tier t = lower_tier(c, kvt_prefix_get(c->index, hits[i].hash, &pi) ? 0 : pi.tiers);
        int32_t p;
        if (t == KVT_TIER_T0 || kvt_page_alloc(c->e, &p)) {
            ok = i;
            break;
        }
        tier_of[i] = t;
        pages[i] = p;
        size_t at = (size_t)t * cap + (size_t)n_req[t]++;
        reqs[at] = (kvt_tier_read){.hash = hits[i].hash, .parent = i ? hits[i - 1].hash : root,
                                   .tokens = tokens + (size_t)i * (size_t)c->B, .out = kvt_page_data(c->e, p)};
        req_block[at] = i;
    }
    for (int t = KVT_TIER_T1; t < KVT_TIER_COUNT; t++) {
        int32_t bad = restore_from(c, (kvt_tier)t, root, tokens, hits, reqs + (size_t)t * cap,
                                   req_block + (size_t)t * cap, n_req[t], pages, restore_s);
        ok = KVT_MIN(ok, bad);
    }
    if (ok < n_blocks && *why == KVT_SHORTFALL_NONE) *why = KVT_SHORTFALL_LOST;
    for (int32_t i = ok; i < n_blocks; i++)
        if (pages[i] >= 0) kvt_page_unref(c->e, pages[i]);
    free(reqs);
    free(req_block);
    return ok;
}

int kvt_cache_attach(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, int32_t max_reuse,
                     int32_t *seq, kvt_attach_info *info) {
    memset(info, 0, sizeof *info);
    kvt_prefix_hit *hits;
    size_t k = match_shared(c, root, tokens, n, max_reuse > 0 ? ((size_t)max_reuse + (size_t)c->B - 1) / (size_t)c->B : 0,
                            &hits);
    c->lookups++;
    c->lookup_tokens += (uint64_t)n;
    if (max_reuse < 0) max_reuse = 0;
    /* blocks needed to cover min(k*B, max_reuse) tokens */
    int32_t planned = KVT_MIN((int32_t)k * c->B, max_reuse), reuse = planned;
    int32_t n_blocks = (reuse + c->B - 1) / c->B;
    int32_t *pages = kvt_xmalloc((size_t)(n_blocks ? n_blocks : 1) * sizeof *pages);
    kvt_tier *tier_of = kvt_xmalloc((size_t)(n_blocks ? n_blocks : 1) * sizeof *tier_of);
    double restore_s = 0;
    kvt_shortfall why;
    int32_t got = acquire_run(c, root, tokens, hits, n_blocks, INT32_MAX, pages, tier_of, &restore_s, info, &why);
    if (c->admit)
        for (int32_t i = 0; i < got; i++) kvt_admit_sight(c->admit, hits[i].hash); /* a reuse is a sighting */
    int32_t from_t2 = 0;
    for (int32_t i = 0; i < got; i++) from_t2 += tier_of[i] == KVT_TIER_T2;
    if (c->disk) kvt_disk_note_lookup(c->disk, (uint64_t)n / (uint64_t)c->B, (uint64_t)from_t2);
    if (got < n_blocks) reuse = got * c->B; /* a block could not be restored: reuse what we have */
    int rc = kvt_seq_new(c->e, pages, got, reuse, seq);
    for (int32_t i = 0; i < got; i++) kvt_page_unref(c->e, pages[i]);
    if (!rc) {
        info->n_reused = reuse;
        info->n_planned = planned;
        info->shortfall = reuse < planned ? why : KVT_SHORTFALL_NONE;
        if (reuse < planned) {
            c->shortfalls[info->shortfall]++;
            c->shortfall_tokens += (uint64_t)(planned - reuse);
        }
        /* the last block may be partly reused; count tokens per tier exactly */
        for (int32_t i = 0; i < got; i++) {
            int32_t t = KVT_MIN(c->B, reuse - i * c->B);
            info->tier_tokens[tier_of[i]] += t;
        }
        info->restore_ms = restore_s * 1e3;
        c->hit_tokens += (uint64_t)reuse;
        kvt_cache_explain(c, root, tokens, n, reuse, info->shortfall, &info->stop);
        c->reuse_stops[info->stop.reason]++;
    }
    free(tier_of);
    free(pages);
    free(hits);
    return rc;
}

/* ---- explaining a miss ----------------------------------------------------------- */

/* Whether block (parent, tokens[0..B)) is present under key h. */
static int block_present(const kvt_cache *c, kvt_hash128 h, kvt_hash128 parent, const int32_t *tokens) {
    kvt_prefix_info e;
    return !kvt_prefix_get(c->index, h, &e) && kvt_hash128_eq(e.parent, parent) &&
           !memcmp(e.tokens, tokens, (size_t)c->B * sizeof *tokens);
}

void kvt_cache_explain(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, int32_t n_reused,
                       kvt_shortfall shortfall, kvt_reuse_stop *out) {
    static const kvt_reuse_reason by_shortfall[KVT_SHORTFALL_COUNT] = {
        KVT_REUSE_END_OF_PROMPT, KVT_REUSE_RESTORE_SLOWER, KVT_REUSE_NO_ROOM, KVT_REUSE_LOST};
    memset(out, 0, sizeof *out);
    out->block = n_reused / c->B;
    out->token_offset = n_reused;
    /* the lookup matched more than was restored: the restore path says why */
    if (shortfall > KVT_SHORTFALL_NONE && shortfall < KVT_SHORTFALL_COUNT) {
        out->reason = by_shortfall[shortfall];
        return;
    }
    int32_t nb = n / c->B;
    if (nb == 0) {
        out->reason = KVT_REUSE_SHORT_PROMPT;
        return;
    }
    /* walk the chain again to the first absent block k (its key is h) */
    kvt_hash128 parent = root, h = root;
    int32_t k = 0;
    for (; k < nb; k++) {
        h = kvt_block_hash(parent, tokens + (size_t)k * (size_t)c->B, (uint32_t)c->B);
        if (!block_present(c, h, parent, tokens + (size_t)k * (size_t)c->B)) break;
        parent = h;
    }
    if (k == nb) { /* every full block was there; the rest is the partial tail (or the last token, kept to compute) */
        out->reason = KVT_REUSE_END_OF_PROMPT;
        return;
    }
    const int32_t *bt = tokens + (size_t)k * (size_t)c->B;
    out->block = k;
    out->token_offset = k * c->B;
    if (kvt_prefix_recently_gone(c->index, h)) {
        out->reason = KVT_REUSE_EVICTED;
        return;
    }
    /* Only the shared namespace is consulted: saying that another tenant's
     * salted namespace holds this prompt would leak what the salt hides. */
    if (k == 0 && !kvt_hash128_eq(root, c->shared_root) &&
        block_present(c, kvt_block_hash(c->shared_root, bt, (uint32_t)c->B), c->shared_root, bt)) {
        out->reason = KVT_REUSE_NAMESPACE;
        return;
    }
    kvt_prefix_info near;
    uint32_t common;
    if (!kvt_prefix_nearest_child(c->index, parent, bt, &near, &common)) {
        out->reason = KVT_REUSE_NEVER_SEEN;
        return;
    }
    out->reason = KVT_REUSE_DIVERGED;
    out->token_offset = k * c->B + (int32_t)common;
    out->n_prompt_ids = KVT_MIN(KVT_REUSE_STOP_TOKENS, n - out->token_offset);
    memcpy(out->prompt_ids, tokens + out->token_offset, (size_t)out->n_prompt_ids * sizeof *tokens);
    out->n_cached_ids = KVT_MIN(KVT_REUSE_STOP_TOKENS, c->B - (int32_t)common);
    memcpy(out->cached_ids, near.tokens + common, (size_t)out->n_cached_ids * sizeof *tokens);
}

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
            touch_page(c, (int32_t)info.handle[KVT_TIER_T0]); /* already resident (maybe this very page) */
        } else if (!c->pages[pages[i]].cached) {
            int32_t p = pages[i];
            if (kvt_prefix_add(c->index, hash, parent, bt, KVT_TIER_T0, (uint64_t)p)) {
                ch->n_done = INT32_MAX; /* collision: later blocks of this sequence cannot be reached */
                return;
            }
            kvt_page_ref(c->e, p);
            c->pages[p] = (page_rec){.cached = 1, .hash = hash};
            touch_page(c, p);
            if (c->params.write_through) write_through(c, hash, parent, bt, kvt_page_data_const(c->e, p));
        }
        ch->last = hash;
        ch->n_done = i + 1;
    }
}

/* ---- pins ------------------------------------------------------------------------ */

/* Acquires the cached prefix of tokens (at most max_new pages restored from
 * lower tiers); returns a pin holding it, or NULL when nothing was acquired. */
static kvt_pin *pin_prefix(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, int32_t max_new) {
    kvt_prefix_hit *hits;
    /* a warm session keeps only what is resident (max_new 0): no need to ask T3 */
    size_t k = max_new ? match_shared(c, root, tokens, n, (size_t)n / (size_t)c->B, &hits) : match(c, root, tokens, n, &hits);
    int32_t *pages = kvt_xmalloc((k ? k : 1) * sizeof *pages);
    kvt_tier *tier_of = kvt_xmalloc((k ? k : 1) * sizeof *tier_of);
    double restore_s = 0;
    kvt_shortfall why;
    int32_t got = acquire_run(c, root, tokens, hits, (int32_t)k, max_new, pages, tier_of, &restore_s, NULL, &why);
    for (int32_t i = 0; i < got; i++) c->prefetched_blocks += tier_of[i] != KVT_TIER_T0;
    free(hits);
    free(tier_of);
    if (!got) {
        free(pages);
        return NULL;
    }
    kvt_pin *p = kvt_xmalloc(sizeof *p);
    p->n = got;
    p->pages = pages;
    c->pinned_pages += got;
    return p;
}

int kvt_cache_pin_root(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, kvt_pin **pin) {
    *pin = NULL;
    kvt_cache_match m;
    kvt_cache_lookup_root(c, root, tokens, n, &m);
    int32_t limit = (int32_t)(c->n_pages * KVT_PIN_MAX_FRACTION);
    if (c->pinned_pages + m.n_blocks > limit)
        return kvt_fail(KVT_ELIMIT, "pinning %d more blocks would hold more than %d of the %d active pages in pins",
                        m.n_blocks, limit, c->n_pages);
    *pin = pin_prefix(c, root, tokens, n, INT32_MAX);
    return *pin ? (*pin)->n * c->B : 0;
}

int32_t kvt_cache_prefetch_root(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, int32_t max_new) {
    kvt_pin *p = pin_prefix(c, root, tokens, n, max_new);
    int32_t got = p ? p->n * c->B : 0;
    kvt_cache_release(c, p);
    return got;
}

int kvt_cache_keep_warm_root(kvt_cache *c, kvt_hash128 root, const char *session, const int32_t *tokens, int32_t n,
                             int priority, double seconds) {
    if (!session || !*session || strlen(session) > KVT_SESSION_NAME_MAX)
        return kvt_fail(KVT_EARG, "a session name is 1..%d bytes", KVT_SESSION_NAME_MAX);
    kvt_cache_end_session(c, session);
    if (!(seconds > 0)) return 0;
    expire_sessions(c);
    kvt_pin *p = pin_prefix(c, root, tokens, n, 0); /* what is resident now; nothing is restored for it */
    if (!p) return 0;
    if (c->n_sessions == c->cap_sessions) {
        c->cap_sessions = c->cap_sessions ? 2 * c->cap_sessions : 16;
        c->sessions = kvt_xrealloc(c->sessions, (size_t)c->cap_sessions * sizeof *c->sessions);
    }
    warm_session *s = &c->sessions[c->n_sessions++];
    snprintf(s->name, sizeof s->name, "%s", session);
    s->pin = p;
    s->expires = kvt_now() + seconds;
    s->priority = priority;
    return p->n * c->B;
}

int kvt_cache_end_session(kvt_cache *c, const char *session) {
    for (int32_t i = 0; i < c->n_sessions; i++)
        if (!strcmp(c->sessions[i].name, session)) {
            session_drop(c, i);
            return 0;
        }
    return KVT_ENOTFOUND;
}

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

void kvt_cache_release(kvt_cache *c, kvt_pin *pin) {
    if (!pin) return;
    for (int32_t i = 0; i < pin->n; i++) kvt_page_unref(c->e, pin->pages[i]);
    c->pinned_pages -= pin->n;
    free(pin->pages);
    free(pin);
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
    if (c->disk) {
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
        out->t2_compression_ratio = ds.compression_ratio;
    }
    out->t3_connected = -1;
    if (c->remote) {
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
        out->t3_errors = rs.errors;
        out->t3_timeouts = rs.timeouts;
        out->t3_probes = rs.probes;
        out->t3_probe_found = rs.probe_found;
        out->t3_round_trips = rs.round_trips;
        out->t3_latency_sum_s = rs.latency_sum_s;
        out->t3_connected = rs.connected;
    }
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

void kvt_cache_note_prefill(kvt_cache *c, int32_t n_tokens, double seconds) {
    if (n_tokens >= MIN_PREFILL_SAMPLE && seconds > 0) ewma(&c->prefill_s_per_token, seconds / n_tokens);
}

/* The first persistent tier, or KVT_TIER_T0 if none is configured. */
static kvt_tier persistent_tier(const kvt_cache *c) {
    for (int t = KVT_TIER_T1; t < KVT_TIER_COUNT; t++)
        if (c->tiers[t].ops && c->tiers[t].ops->persistent) return (kvt_tier)t;
    return KVT_TIER_T0;
}

/* Cached T0 blocks that no persistent tier holds yet, written to the first one. */
static void flush_t0(kvt_cache *c, kvt_tier dst) {
    uint32_t persistent = 0;
    for (int t = KVT_TIER_T1; t < KVT_TIER_COUNT; t++)
        if (c->tiers[t].ops && c->tiers[t].ops->persistent) persistent |= KVT_TIER_BIT(t);
    for (int32_t p = 0; p < c->n_pages; p++) {
        if (!c->pages[p].cached) continue;
        kvt_prefix_info info;
        if (kvt_prefix_get(c->index, c->pages[p].hash, &info) || (info.tiers & persistent)) continue;
        kvt_hash128 parent = info.parent;
        memcpy(c->scratch_tokens, info.tokens, (size_t)c->B * sizeof(int32_t));
        tier_put(c, dst, c->pages[p].hash, parent, c->scratch_tokens, kvt_page_data_const(c->e, p));
    }
}

int kvt_cache_flush(kvt_cache *c) {
    kvt_tier dst = persistent_tier(c);
    if (dst == KVT_TIER_T0) return 0;
    c->flushing = 1;
    flush_t0(c, dst);
    /* upper tiers first: RAM empties itself through its evict hook, down into the persistent tiers */
    int rc = 0;
    for (int t = KVT_TIER_T1; t < KVT_TIER_COUNT; t++) {
        const kvt_tier_ref *x = &c->tiers[t];
        if (!x->ops) continue;
        int r = x->ops->flush(x->impl);
        if (r && x->ops->persistent && !rc) rc = r;
    }
    c->flushing = 0;
    return rc;
}
