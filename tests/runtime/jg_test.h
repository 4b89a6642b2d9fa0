// SPDX-License-Identifier: MIT
/* Shared by the tests of the token mask (JSON schemas and GBNF): a
 * vocabulary from ../shared/vocab, the brute-force check of a mask, and the
 * seeded pick of an allowed token for random walks. */
#ifndef KVT_JG_TEST_H
#define KVT_JG_TEST_H

#include <stdint.h>
#include <string.h>

#include "json_grammar.h"
#include "testutil.h"
#include "vocab_test.h"

/* g's mask (g fed prefix[0..plen) under schema s) equals stepping every
 * token's bytes one by one after prefix on a fresh matcher, with the budget
 * rule; mask has room for the vocabulary. The prefix may hold NUL bytes. */
static inline void jg_check_mask_n(kvt_jg *g, const kvt_jg_schema *s, const kvt_tokenizer *t, int32_t budget,
                                   const char *prefix, size_t plen, uint8_t *mask) {
    int32_t nv = kvt_tokenizer_n_vocab(t), n = kvt_jg_mask(g, budget, mask), want = 0, wrong = 0;
    /* the last token where the text may end but need not: only the end of generation */
    int last = budget == 1 && kvt_jg_can_end(g) && !kvt_jg_done(g);
    for (int32_t id = 0; id < nv; id++) {
        char buf[KVT_JG_MAX_TOKEN + 1];
        int len = kvt_token_piece(t, id, buf, sizeof buf, 0), ok;
        if (last) {
            ok = kvt_tokenizer_is_eog(t, id) || id == kvt_tokenizer_eos(t);
        } else if (len > 0 && len <= KVT_JG_MAX_TOKEN) {
            kvt_jg *h = kvt_jg_new(s, NULL);
            ok = kvt_jg_feed(h, prefix, plen) == 0 && kvt_jg_feed(h, buf, (size_t)len) == 0 &&
                kvt_jg_min_bytes(h) <= budget - 1;
            kvt_jg_free(h);
        } else {
            ok = (kvt_tokenizer_is_eog(t, id) || id == kvt_tokenizer_eos(t)) && kvt_jg_can_end(g);
        }
        want += ok;
        wrong += ok != mask[id];
    }
    CHECKF(!wrong && n == want, "after '%.*s' (budget %d): mask allows %d, brute force %d, %d differ", (int)plen,
           prefix, budget, n, want, wrong);
}

/* jg_check_mask_n over the C string prefix. */
static inline void jg_check_mask(kvt_jg *g, const kvt_jg_schema *s, const kvt_tokenizer *t, int32_t budget,
                                 const char *prefix, uint8_t *mask) {
    jg_check_mask_n(g, s, t, budget, prefix, strlen(prefix), mask);
}

/* One of the n tokens mask allows (of nv), picked by the generator *rng. */
static inline int32_t jg_pick(const uint8_t *mask, int32_t nv, int32_t n, uint64_t *rng) {
    *rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
    int32_t k = (int32_t)((*rng >> 33) % (uint64_t)n);
    for (int32_t id = 0; id < nv; id++)
        if (mask[id] && k-- == 0) return id;
    return -1;
}

#endif
