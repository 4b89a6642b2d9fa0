// SPDX-License-Identifier: MIT
/* The restore path of the cache policy (cache.h "Restore"): lookup with the
 * shared-tier probe, the restore-or-recompute decision over measured tiers,
 * acquiring a matched run (pin, reserve, read one batch per tier), attach. */
#include "cache_internal.h"

#include <stdlib.h>
#include <string.h>

/* Blocks one lookup asks the shared tier about at most (one round trip). */
#define KVT_PROBE_MAX_BLOCKS 4096

#define EWMA_OLD 0.7          /* weight of the previous estimate */
#define MIN_PREFILL_SAMPLE 16 /* tokens: smaller prefills say little about speed */

static void ewma(double *v, double sample) { *v = *v > 0 ? EWMA_OLD * *v + (1 - EWMA_OLD) * sample : sample; }

/* ---- lookup ------------------------------------------------------------------ */

/* Matched blocks of tokens; *hits is malloc'd (caller frees). */
size_t kvt_cache_match_local(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, kvt_prefix_hit **hits) {
    size_t max = (size_t)n / (size_t)c->B;
    *hits = kvt_xmalloc((max ? max : 1) * sizeof **hits);
    return max ? kvt_prefix_lookup(c->index, root, tokens, (size_t)n, *hits, max) : 0;
}

/* The shared tier holds blocks other nodes wrote, which the local index
 * cannot know of. Where the local match ends short of the first `want` full
 * blocks, the next ones' keys are asked of T3 in one pipelined round trip
 * (bounded by KVT_PROBE_MAX_BLOCKS and the tier's timeout); the leading run
 * it holds becomes T3 presence and the match is redone. */
size_t kvt_cache_match_shared(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, size_t want,
                              kvt_prefix_hit **hits) {
    size_t k = kvt_cache_match_local(c, root, tokens, n, hits);
    want = KVT_MIN(want, (size_t)n / (size_t)c->B);
    if (!c->remote || k >= want) return k;
    size_t m = KVT_MIN(want - k, (size_t)KVT_PROBE_MAX_BLOCKS);
    kvt_hash128 parent = k ? (*hits)[k - 1].hash : root;
    kvt_hash128 *keys = kvt_xmalloc(m * sizeof *keys);
    const int32_t *bt = tokens + k * (size_t)c->B;
    for (size_t i = 0; i < m; i++)
        keys[i] = kvt_block_hash(i ? keys[i - 1] : parent, bt + i * (size_t)c->B, (uint32_t)c->B);
    size_t found = kvt_remote_probe(c->remote, parent, bt, keys, m);
    free(keys);
    if (!found) return k;
    free(*hits);
    return kvt_cache_match_local(c, root, tokens, n, hits);
}

void kvt_cache_lookup_root(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, kvt_cache_match *out) {
    memset(out, 0, sizeof *out);
    kvt_prefix_hit *hits;
    size_t k = kvt_cache_match_local(c, root, tokens, n, &hits);
    out->n_blocks = (int32_t)k;
    out->n_tokens = (int32_t)k * c->B;
    for (size_t i = 0; i < k; i++) out->tier_blocks[hits[i].tier]++;
    free(hits);
}

int32_t kvt_cache_block_tiers(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, uint8_t *tiers,
                              int32_t cap) {
    kvt_prefix_hit *hits;
    size_t k = kvt_cache_match_local(c, root, tokens, n, &hits);
    for (size_t i = 0; i < k && i < (size_t)cap; i++) tiers[i] = (uint8_t)hits[i].tier;
    free(hits);
    return (int32_t)k;
}

/* ---- restore ------------------------------------------------------------------ */

/* References the T0 page of hit for the caller, or -1 if the index and the
 * pages disagree (cannot happen; never attach a wrong page). */
static int32_t ref_t0(kvt_cache *c, const kvt_prefix_hit *hit) {
    int32_t p = (int32_t)hit->handle;
    if (p < 0 || p >= c->n_pages || !c->pages[p].cached || !kvt_hash128_eq(c->pages[p].hash, hit->hash)) return -1;
    kvt_page_ref(c->e, p);
    kvt_cache_touch_page(c, p);
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
    kvt_cache_touch_page(c, p);
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

/* Staged reads (the engine does not expose its pages to the host) arrived in
 * host buffers: the ones that hit go into their pages in one copy-in call. If
 * that fails, none of them counts as read. */
static void copy_in_staged(kvt_cache *c, kvt_tier_read *reqs, const int32_t *req_block, int32_t n_req,
                           const int32_t *pages) {
    kvt_page_in *io = kvt_xmalloc((size_t)n_req * sizeof *io);
    size_t n = 0;
    for (int32_t r = 0; r < n_req; r++)
        if (!reqs[r].result) io[n++] = (kvt_page_in){.page = pages[req_block[r]], .host = reqs[r].out};
    if (n && kvt_pages_copy_in(c->e, io, n))
        for (int32_t r = 0; r < n_req; r++)
            if (!reqs[r].result) reqs[r].result = KVT_EARG;
    free(io);
}

/* T1's blocks for a staged engine: each request's out becomes the block's
 * bytes in T1 itself, not a copy (T1's arena is memory the engine copies
 * from directly, tier_ram.h "Arena"); valid until T1 next changes, which is
 * after copy_in_staged. Returns the hits. */
static size_t lend_t1(kvt_cache *c, kvt_tier_read *reqs, int32_t n_req) {
    size_t hits = 0;
    for (int32_t r = 0; r < n_req; r++) {
        const void *at = NULL;
        reqs[r].result = kvt_ram_peek(c->ram, reqs[r].hash, reqs[r].parent, reqs[r].tokens, &at);
        if (!reqs[r].result) reqs[r].out = (void *)(uintptr_t)at, hits++;
    }
    return hits;
}

/* Reads the listed blocks from tier t in one batch (a disk tier coalesces
 * adjacent records), straight into their pages or, when staged, into host
 * buffers (T1: its own memory) copied in afterwards as one run, and indexes
 * the ones that arrived in T0. Returns the first block index that failed
 * (INT32_MAX if none). */
static int32_t restore_from(kvt_cache *c, kvt_tier t, kvt_hash128 root, const int32_t *tokens,
                            const kvt_prefix_hit *hits, kvt_tier_read *reqs, const int32_t *req_block, int32_t n_req,
                            int32_t *pages, int staged, double *restore_s) {
    int32_t bad = INT32_MAX;
    if (!n_req) return bad;
    const kvt_tier_ref *x = &c->tiers[t];
    double t0 = kvt_now();
    size_t n_hit = staged && t == KVT_TIER_T1 ? lend_t1(c, reqs, n_req) : x->ops->get_many(x->impl, reqs, (size_t)n_req);
    double dt = kvt_now() - t0;
    if (x->ops->measured && n_hit && dt > 0) ewma(&c->tier_bytes_per_s[t], (double)n_hit * (double)c->page_bytes / dt);
    if (staged) copy_in_staged(c, reqs, req_block, n_req, pages);
    *restore_s += kvt_now() - t0;
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

/* Whether the run's blocks in measured tiers (disk, remote) are worth
 * reading or cheaper to recompute (worth_restoring), noted in info (may be
 * NULL). Returns how many of the n_blocks to reuse: all, or those before the
 * first measured one (then *why says so). */
static int32_t restore_or_recompute(kvt_cache *c, const kvt_prefix_hit *hits, int32_t n_blocks, kvt_attach_info *info,
                                    kvt_shortfall *why) {
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
    return n_blocks;
}

/* Makes the first n_blocks hits T0-resident for the caller, stopping at the
 * first block it cannot restore. The whole matched run is pinned from the
 * start: every T0 block is referenced first (so making room cannot reclaim
 * it), then pages for all other blocks are reserved at once, and only then is
 * each block's current tier looked up again (making room may have pushed a
 * RAM block down to disk, where it is still found) and the blocks are read,
 * one batch per tier. Returns how many were acquired; pages[] holds them (one
 * caller reference each) and tier_of[] the tier each came from. *why says
 * why fewer than n_blocks were acquired. Long: the three steps in order (pin,
 * reserve, restore per tier) share the run's arrays and its staging memory. */
int32_t kvt_cache_acquire_run(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, const kvt_prefix_hit *hits,
                              int32_t n_blocks, int32_t max_new, int32_t *pages, kvt_tier *tier_of, double *restore_s,
                              kvt_attach_info *info, kvt_shortfall *why) {
    *why = KVT_SHORTFALL_NONE;
    n_blocks = restore_or_recompute(c, hits, n_blocks, info, why);
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
    uint8_t *stage = NULL; /* host buffers, one per block, when the engine has no host pages */
    int own_stage = 0;     /* stage is ours (malloc), not the engine's pinned one */
    int staged = 0;        /* the engine has no host pages: reads land in host buffers, then one copy in */
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
        void *out = kvt_page_host(c->e, p);
        staged |= out == NULL;
        if (!out && t != KVT_TIER_T1) { /* T1 lends its own memory (lend_t1) */
            if (!stage && !(stage = kvt_pages_stage(c->e, cap))) {
                stage = kvt_xmalloc(cap * c->page_bytes);
                own_stage = 1;
            }
            out = stage + (size_t)i * c->page_bytes;
        }
        size_t at = (size_t)t * cap + (size_t)n_req[t]++;
        reqs[at] = (kvt_tier_read){.hash = hits[i].hash,
                                   .parent = i ? hits[i - 1].hash : root,
                                   .tokens = tokens + (size_t)i * (size_t)c->B,
                                   .out = out};
        req_block[at] = i;
    }
    for (int t = KVT_TIER_T1; t < KVT_TIER_COUNT; t++) {
        int32_t bad = restore_from(c, (kvt_tier)t, root, tokens, hits, reqs + (size_t)t * cap,
                                   req_block + (size_t)t * cap, n_req[t], pages, staged, restore_s);
        ok = KVT_MIN(ok, bad);
    }
    if (ok < n_blocks && *why == KVT_SHORTFALL_NONE) *why = KVT_SHORTFALL_LOST;
    for (int32_t i = ok; i < n_blocks; i++)
        if (pages[i] >= 0) kvt_page_unref(c->e, pages[i]);
    if (own_stage) free(stage);
    free(reqs);
    free(req_block);
    return ok;
}

/* info's account of reusing reuse of planned tokens through a run of got
 * blocks (tier_of[], restored in restore_s, why the run fell short): the
 * last block may be partly reused, so tokens are counted per tier exactly. */
static void run_report(const kvt_cache *c, int32_t reuse, int32_t planned, kvt_shortfall why, const kvt_tier *tier_of,
                       int32_t got, double restore_s, kvt_attach_info *info) {
    info->n_reused = reuse;
    info->n_planned = planned;
    info->shortfall = reuse < planned ? why : KVT_SHORTFALL_NONE;
    for (int32_t i = 0; i < got; i++) info->tier_tokens[tier_of[i]] += KVT_MIN(c->B, reuse - i * c->B);
    info->restore_ms = restore_s * 1e3;
}

/* How attach counts a request: every statistic (COUNTED), all but its reuse
 * stop, which may still change (OPEN: kvt_cache_attach_open), or none
 * (QUIET: the cache's own users, a resumed reply). */
enum { ATTACH_COUNTED, ATTACH_OPEN, ATTACH_QUIET };

/* kvt_cache_attach; QUIET leaves the request statistics (lookups, hits,
 * shortfalls, reuse stops, the disk tier's hit ratio) alone and explains nothing. */
static int attach(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, int32_t max_reuse, int mode,
                  int32_t *seq, kvt_attach_info *info) {
    const int quiet = mode == ATTACH_QUIET;
    memset(info, 0, sizeof *info);
    kvt_prefix_hit *hits;
    size_t want = max_reuse > 0 ? ((size_t)max_reuse + (size_t)c->B - 1) / (size_t)c->B : 0;
    size_t k = kvt_cache_match_shared(c, root, tokens, n, want, &hits);
    if (!quiet) {
        c->lookups++;
        c->lookup_tokens += (uint64_t)n;
    }
    if (max_reuse < 0) max_reuse = 0;
    /* blocks needed to cover min(k*B, max_reuse) tokens */
    int32_t planned = KVT_MIN((int32_t)k * c->B, max_reuse), reuse = planned;
    int32_t n_blocks = (reuse + c->B - 1) / c->B;
    int32_t *pages = kvt_xmalloc((size_t)(n_blocks ? n_blocks : 1) * sizeof *pages);
    kvt_tier *tier_of = kvt_xmalloc((size_t)(n_blocks ? n_blocks : 1) * sizeof *tier_of);
    double restore_s = 0;
    kvt_shortfall why;
    int32_t got = kvt_cache_acquire_run(c, root, tokens, hits, n_blocks, INT32_MAX, pages, tier_of, &restore_s, info,
                                        &why);
    if (c->admit)
        for (int32_t i = 0; i < got; i++) kvt_admit_sight(c->admit, hits[i].hash); /* a reuse is a sighting */
    int32_t from_t2 = 0;
    for (int32_t i = 0; i < got; i++) from_t2 += tier_of[i] == KVT_TIER_T2;
    if (c->disk && !quiet) kvt_disk_note_lookup(c->disk, (uint64_t)n / (uint64_t)c->B, (uint64_t)from_t2);
    if (got < n_blocks) reuse = got * c->B; /* a block could not be restored: reuse what we have */
    int rc = kvt_seq_new(c->e, pages, got, reuse, seq);
    for (int32_t i = 0; i < got; i++) kvt_page_unref(c->e, pages[i]);
    if (!rc) {
        run_report(c, reuse, planned, why, tier_of, got, restore_s, info);
        if (reuse < planned && !quiet) {
            c->shortfalls[info->shortfall]++;
            c->shortfall_tokens += (uint64_t)(planned - reuse);
        }
        if (!quiet) {
            c->hit_tokens += (uint64_t)reuse;
            kvt_cache_explain(c, root, tokens, n, reuse, info->shortfall, &info->stop);
            if (mode == ATTACH_COUNTED) c->reuse_stops[info->stop.reason]++;
        }
    }
    free(tier_of);
    free(pages);
    free(hits);
    return rc;
}

int kvt_cache_attach(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, int32_t max_reuse, int32_t *seq,
                     kvt_attach_info *info) {
    return attach(c, root, tokens, n, max_reuse, ATTACH_COUNTED, seq, info);
}

int kvt_cache_attach_open(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, int32_t max_reuse,
                          int32_t *seq, kvt_attach_info *info) {
    return attach(c, root, tokens, n, max_reuse, ATTACH_OPEN, seq, info);
}

int kvt_cache_attach_quiet(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, int32_t max_reuse,
                           int32_t *seq, kvt_attach_info *info) {
    return attach(c, root, tokens, n, max_reuse, ATTACH_QUIET, seq, info);
}

void kvt_cache_count_stop(kvt_cache *c, kvt_reuse_reason reason) {
    if (reason >= 0 && reason < KVT_REUSE_REASON_COUNT) c->reuse_stops[reason]++;
}

int kvt_cache_has_next(kvt_cache *c, kvt_hash128 parent, const int32_t *tokens) {
    return kvt_prefix_has_next(c->index, parent, tokens);
}

/* attach's steps (match, acquire, report) for a sequence that holds part of
 * its prompt already: the run starts at its first block past the sequence. */
int32_t kvt_cache_attach_more(kvt_cache *c, kvt_hash128 root, const int32_t *tokens, int32_t n, int32_t max_reuse,
                              int32_t seq, kvt_attach_info *info) {
    memset(info, 0, sizeof *info);
    const int32_t len = kvt_seq_len(c->e, seq);
    if (len < 0 || len % c->B || len >= max_reuse || n / c->B <= len / c->B) return 0;
    kvt_prefix_hit *hits;
    int32_t k = (int32_t)kvt_cache_match_local(c, root, tokens, n, &hits);
    int32_t planned = KVT_MIN(k * c->B, max_reuse), j = len / c->B;
    if (planned <= len) {
        free(hits);
        return 0;
    }
    /* the run past the sequence's blocks: hits[j..), whose first block's parent is block j-1; it stops
     * at a block found first in a measured (slow) tier, which the attach weighed already (restore or
     * recompute): weighing it again at every chunk would only count the same decision again */
    int32_t n_blocks = (planned + c->B - 1) / c->B - j;
    for (int32_t i = 0; i < n_blocks; i++) {
        const kvt_tier_ref *x = &c->tiers[hits[j + i].tier];
        if (hits[j + i].tier != KVT_TIER_T0 && x->ops && x->ops->measured) {
            n_blocks = i;
            planned = KVT_MIN(planned, len + i * c->B);
            break;
        }
    }
    if (n_blocks == 0) {
        free(hits);
        return 0;
    }
    int32_t *pages = kvt_xmalloc((size_t)n_blocks * sizeof *pages);
    kvt_tier *tier_of = kvt_xmalloc((size_t)n_blocks * sizeof *tier_of);
    double restore_s = 0;
    kvt_shortfall why;
    kvt_hash128 parent = j ? hits[j - 1].hash : root;
    int32_t got = kvt_cache_acquire_run(c, parent, tokens + len, hits + j, n_blocks, INT32_MAX, pages, tier_of,
                                        &restore_s, info, &why);
    int32_t add = got < n_blocks ? got * c->B : planned - len;
    if (got && kvt_seq_append(c->e, seq, pages, got, add)) add = 0;   /* cannot fail: the checks above */
    for (int32_t i = 0; i < got; i++) kvt_page_unref(c->e, pages[i]); /* the sequence holds its own */
    if (add > 0) {
        if (c->admit)
            for (int32_t i = 0; i < got; i++) kvt_admit_sight(c->admit, hits[j + i].hash);
        run_report(c, add, planned - len, why, tier_of, got, restore_s, info);
        c->hit_tokens += (uint64_t)add;
        kvt_cache_explain(c, root, tokens, n, len + add, info->shortfall, &info->stop);
    }
    free(tier_of);
    free(pages);
    free(hits);
    return add;
}

void kvt_cache_note_prefill(kvt_cache *c, int32_t n_tokens, double seconds) {
    if (n_tokens >= MIN_PREFILL_SAMPLE && seconds > 0) ewma(&c->prefill_s_per_token, seconds / n_tokens);
}
