// SPDX-License-Identifier: MIT
/* Why reuse stopped where it did (cache.h kvt_cache_explain): read-only walks
 * of the index that name the reason for a miss. */
#include "cache_internal.h"

#include <string.h>

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
