// SPDX-License-Identifier: MIT
/* Times block-key computation and prefix-index lookup for a 32k-token prompt
 * (1024 blocks of 32): keys alone, a full-hit lookup over an index holding the
 * prompt among other chains, and a first-block miss. Prints numbers only. */
#include <stdio.h>
#include <stdlib.h>

#include "blockhash.h"
#include "common.h"
#include "prefix.h"

#define N_TOKENS 32768
#define BLOCK 32
#define N_BLOCKS (N_TOKENS / BLOCK)
#define OTHER_CHAINS 63 /* other prompts in the index, so the table is not tiny */
#define REPS 200
#define VOCAB 128000

static double median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v[n / 2];
}

int main(void) {
    int32_t *tok = kvt_xmalloc(sizeof *tok * N_TOKENS);
    int32_t *other = kvt_xmalloc(sizeof *other * N_TOKENS);
    kvt_hash128 *h = kvt_xmalloc(sizeof *h * N_BLOCKS);
    kvt_prefix_hit *hits = kvt_xmalloc(sizeof *hits * N_BLOCKS);
    srand(1);
    for (int i = 0; i < N_TOKENS; i++) tok[i] = rand() % VOCAB;
    kvt_root_params rp = kvt_root_default_params();
    rp.block_tokens = BLOCK;
    kvt_hash128 root;
    if (kvt_block_root(&rp, &root)) return 1;
    kvt_prefix *idx;
    if (kvt_prefix_new(BLOCK, &idx)) return 1;
    for (int c = 0; c < OTHER_CHAINS; c++) {
        for (int i = 0; i < N_TOKENS; i++) other[i] = rand() % VOCAB;
        kvt_block_hashes(root, other, N_TOKENS, BLOCK, h, N_BLOCKS);
        kvt_prefix_add_chain(idx, root, other, h, N_BLOCKS, KVT_TIER_T1, NULL);
    }
    kvt_block_hashes(root, tok, N_TOKENS, BLOCK, h, N_BLOCKS);
    kvt_prefix_add_chain(idx, root, tok, h, N_BLOCKS, KVT_TIER_T0, NULL);

    double t_keys[REPS], t_match[REPS], t_lookup[REPS], t_miss[REPS];
    size_t sink = 0;
    for (int r = 0; r < REPS; r++) {
        double t0 = kvt_now();
        kvt_block_hashes(root, tok, N_TOKENS, BLOCK, h, N_BLOCKS);
        double t1 = kvt_now();
        sink += kvt_prefix_match(idx, root, tok, h, N_BLOCKS, hits, N_BLOCKS);
        double t2 = kvt_now();
        sink += kvt_prefix_lookup(idx, root, tok, N_TOKENS, hits, N_BLOCKS);
        double t3 = kvt_now();
        tok[0] ^= 1; /* first block differs: a miss after one key */
        sink += kvt_prefix_lookup(idx, root, tok, N_TOKENS, hits, N_BLOCKS);
        tok[0] ^= 1;
        double t4 = kvt_now();
        t_keys[r] = t1 - t0, t_match[r] = t2 - t1, t_lookup[r] = t3 - t2, t_miss[r] = t4 - t3;
    }
    kvt_prefix_stats st;
    kvt_prefix_get_stats(idx, &st);
    const double us = 1e6;
    double k = median(t_keys, REPS), m = median(t_match, REPS), l = median(t_lookup, REPS);
    printf("blocks: %d x %d tokens; index: %llu entries, %.1f MiB\n", N_BLOCKS, BLOCK, (unsigned long long)st.entries,
           (double)st.bytes / (1 << 20));
    printf("keys only (kvt_block_hashes)         %8.1f us  (%.0f ns/block)\n", k * us, k * 1e9 / N_BLOCKS);
    printf("match given keys (1024-block hit)    %8.1f us  (%.0f ns/block)\n", m * us, m * 1e9 / N_BLOCKS);
    printf("keys + match                         %8.1f us\n", (k + m) * us);
    printf("lookup incl. keys (1024-block hit)   %8.1f us\n", l * us);
    printf("lookup, miss at block 0              %8.1f us\n", median(t_miss, REPS) * us);
    printf("(medians of %d runs; hits checked: %zu)\n", REPS, sink);
    kvt_prefix_free(idx);
    free(tok), free(other), free(h), free(hits);
    return sink == (size_t)REPS * 2 * N_BLOCKS ? 0 : 1;
}
