// SPDX-License-Identifier: MIT
/* The cache-aware RAG planner (rag.h, kvt_rag_plan_cached): orders the
 * retrieved documents of a rendered prompt so its prefix follows what the
 * cache already holds, then canonical order. */
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "common.h"
#include "rag.h"

/* Cached leading tokens of prompt[0..at) followed by the documents in
 * order seq[0..m) (spans from src/starts, by canonical index). */
static int32_t cached_len(kvt_cache *c, kvt_hash128 root, const int32_t *src, const size_t *starts, size_t at,
                          const int32_t *seq, size_t m, int32_t *buf, uint8_t *tiers) {
    size_t n = at;
    memcpy(buf, src, at * sizeof *buf);
    for (size_t i = 0; i < m; i++) {
        size_t len = starts[seq[i] + 1] - starts[seq[i]];
        memcpy(buf + n, src + starts[seq[i]], len * sizeof *buf);
        n += len;
    }
    int32_t B = kvt_prefix_block_tokens(kvt_cache_index(c));
    return kvt_cache_block_tiers(c, root, buf, (int32_t)n, tiers, (int32_t)n / B + 1) * B;
}

int32_t kvt_rag_plan_cached(kvt_cache *c, kvt_hash128 root, int32_t *prompt, int32_t n, size_t *starts, size_t n_docs,
                            int32_t *order) {
    for (size_t i = 0; i < n_docs; i++) order[i] = (int32_t)i;
    if (n_docs < 2) return 0;
    size_t begin = starts[0], end = starts[n_docs];
    int32_t *src = kvt_xmalloc(end * sizeof *src), *buf = kvt_xmalloc(end * sizeof *buf);
    memcpy(src, prompt, end * sizeof *src);
    int32_t B = kvt_prefix_block_tokens(kvt_cache_index(c));
    uint8_t *tiers = kvt_xmalloc(end / (size_t)B + 2);
    int32_t *cand = kvt_xmalloc(n_docs * sizeof *cand), lookups = 0;
    size_t placed_end = begin; /* prompt offset where the next document goes */
    for (size_t d = 0; d + 1 < n_docs; d++) {
        /* order[d..) holds the documents not placed yet, in canonical order */
        size_t best = n_docs;
        int32_t best_len = -1;
        for (size_t j = d; j < n_docs; j++) {
            /* candidate j next, then the others in canonical order */
            size_t m = 0;
            for (size_t i = 0; i < d; i++) cand[m++] = order[i];
            cand[m++] = order[j];
            for (size_t i = d; i < n_docs; i++)
                if (i != j) cand[m++] = order[i];
            int32_t len = cached_len(c, root, src, starts, begin, cand, m, buf, tiers);
            lookups++;
            if (len >= (int32_t)placed_end + B && len > best_len) {
                best = j;
                best_len = len;
            }
        }
        if (best == n_docs) break; /* no candidate continues a cached path: the rest stay canonical */
        int32_t pick = order[best];
        memmove(order + d + 1, order + d, (best - d) * sizeof *order);
        order[d] = pick;
        placed_end += starts[pick + 1] - starts[pick];
    }
    /* write the documents back in the chosen order */
    size_t at = begin;
    size_t *old = kvt_xmalloc((n_docs + 1) * sizeof *old);
    memcpy(old, starts, (n_docs + 1) * sizeof *old);
    for (size_t i = 0; i < n_docs; i++) {
        size_t len = old[order[i] + 1] - old[order[i]];
        memcpy(prompt + at, src + old[order[i]], len * sizeof *prompt);
        starts[i] = at;
        at += len;
    }
    starts[n_docs] = at;
    (void)n;
    free(old);
    free(src);
    free(buf);
    free(tiers);
    free(cand);
    return lookups;
}
