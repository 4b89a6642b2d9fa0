// SPDX-License-Identifier: MIT
/* A 32k-token prefill on a small model completes, and the process's peak
 * resident memory grows by no more than the KV pool it fills plus a fixed
 * bound: no buffer of the forward pass may grow with the context times the
 * batch or the heads (a per-token full-row score buffer for a chunk of 512
 * tokens would be 128 MiB here). The attention scratch that does scale with
 * the context, one tile's score rows per thread (engine_attn.c), is at most
 * 4 MiB per thread and sits inside the bound. Sanitizer builds run 8k
 * tokens for memory safety and do not check the peak, which their shadow
 * memory and quarantine inflate. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "mkmodel.h"
#include "model.h"
#include "testutil.h"

#define CTX 32768
#define BLOCK 64
#define BOUND_MIB 24 /* engine buffers, the scratch at 32k, allocator slack */
#if defined(__SANITIZE_ADDRESS__)
#define N_TOKENS 8192
#define CHECK_PEAK 0
#else
#define N_TOKENS CTX
#define CHECK_PEAK 1
#endif

/* VmHWM of this process in bytes, or -1. */
static long long peak_rss(void) {
    FILE *f = fopen("/proc/self/status", "re");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = atoll(line + 6);
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

int main(void) {
    kvt_mkmodel_params mp = kvt_test_tiny_params();
    mp.dim = 32;
    mp.heads = 2;
    mp.kv_heads = 1;
    mp.layers = 1;
    mp.ff = 64;
    mp.ctx = CTX;
    mp.vocab = 1024;
    const char *path = kvt_test_path(kvt_test_tmpdir(), "long.gguf");
    kvt_model *m = NULL;
    CHECKF(kvt_mkmodel(&mp, path) == 0, "mkmodel: %s", kvt_errmsg());
    CHECKF(kvt_model_load(path, kvt_model_default_params(), &m) == 0, "load: %s", kvt_errmsg());
    if (!m) return kvt_test_done("test_long_prefill");
    int32_t *toks = malloc(N_TOKENS * sizeof *toks);
    unsigned seed = 7;
    kvt_test_random_tokens(toks, N_TOKENS, m->hp.n_vocab, &seed);
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof *logits);
    const long long before = peak_rss();

    kvt_engine_params ep = kvt_engine_default_params();
    ep.block_size = BLOCK;
    ep.n_ctx = CTX;
    ep.n_pages = CTX / BLOCK;
    ep.n_threads = 2;
    ep.max_seqs = 1;
    kvt_engine *e = kvt_test_engine_new(m, ep);
    int32_t seq = -1;
    if (e) {
        CHECKF(kvt_seq_new(e, NULL, 0, 0, &seq) == 0, "%s", kvt_errmsg());
        CHECKF(kvt_engine_feed(e, seq, toks, N_TOKENS, 0, logits) == 0, "feed: %s", kvt_errmsg());
        int finite = 1;
        for (int32_t i = 0; i < m->hp.n_vocab; i++) finite &= logits[i] == logits[i];
        CHECK(finite);
        const long long after = peak_rss();
        const long long kv = (long long)kvt_engine_params_of(e).n_pages * (long long)kvt_page_bytes(e);
        fprintf(stderr, "%d tokens: peak RSS grew %.1f MiB; KV pool %.1f MiB, bound %d MiB\n", N_TOKENS,
                (double)(after - before) / (1 << 20), (double)kv / (1 << 20), BOUND_MIB);
        CHECK(before > 0 && after >= before);
        if (CHECK_PEAK)
            CHECKF(after - before <= kv + ((long long)BOUND_MIB << 20), "peak grew %lld bytes for %lld of KV",
                   after - before, kv);
        kvt_engine_free(e);
    }
    free(logits);
    free(toks);
    kvt_model_free(m);
    return kvt_test_done("test_long_prefill");
}
